//! `tessel explain`: for every kernel of every selected step, the fusion group it computes,
//! the schedule and TileConfig chosen and why, its launch shape, and (with ptxas installed)
//! its registers, shared memory and spills.

use crate::device;
use crate::frontend::{compile_steps, load, options, target_for};
use crate::CompileArgs;
use anyhow::Result;
use std::path::Path;
use tessel_driver::words::plural;
use tessel_driver::Weights;
use tessel_ir::kernel::BufferRole;

/// `tessel explain`; with `--tp`, each step's tensor-parallel plan and rank 0's phases
/// (kernels and the all-gathers between them).
pub fn explain(file: &Path, args: &CompileArgs) -> Result<()> {
    let src = load(file)?;
    // Registers and spills come from ptxas when it is installed (scripts/install-ptxas.sh).
    let ptxas = tessel_ptx::ptxas::Ptxas::locate().ok();
    let gpu = device::gpu_unless(args.target.is_some()).ok();
    let (target, from) = target_for(args, gpu.as_ref());
    let features = target.features.names();
    println!(
        "target: {} ({}, {} SMs, {} KiB shared memory per CTA, {}; from {from})",
        target.name,
        target.ptx_target(),
        target.sm_count,
        target.max_shared_per_cta / 1024,
        if features.is_empty() {
            "none of wgmma, TMA, setmaxnreg, clusters".to_string()
        } else {
            features.join(", ")
        }
    );
    for step in compile_steps(&src, args, &options(&target, args), &Weights::none())? {
        let c = &step.compiled;
        let Some(ranks) = &step.ranks else {
            println!(
                "step {}: {}; {}",
                step.name,
                plural(c.program.kernels.len(), "kernel"),
                crate::memory::footprint(&c.program)
            );
            print_header(c, "  ");
            print_kernels(c, ptxas.as_ref(), "  ")?;
            continue;
        };
        let (g, n) = (&step.checked, ranks.len() as u32);
        let plan = step.plan.as_ref().expect("made with the ranks");
        println!("step {}:", step.name);
        print!("{}", plan.describe(g));
        let r0 = &ranks[0];
        println!(
            "rank 0 of {n} (every rank runs the same kernels on its own blocks): {} in {}, {} between them; the step as written has {}",
            plural(r0.phases.iter().map(|p| p.body.program.kernels.len()).sum(), "kernel"),
            plural(r0.phases.len(), "phase"),
            plural(r0.exchanges().count(), "all-gather"),
            plural(c.program.kernels.len(), "kernel"),
        );
        if let Some(first) = r0.phases.first() {
            print_header(&first.body, "  ");
        }
        for (k, phase) in r0.phases.iter().enumerate() {
            println!(
                "  phase {k}: {}",
                plural(phase.body.program.kernels.len(), "kernel")
            );
            print_kernels(&phase.body, ptxas.as_ref(), "    ")?;
            for e in &phase.exchanges {
                println!(
                    "    then all-gather: every rank sends `{}` ({}, {} bytes), receives `{}` on every rank",
                    e.send,
                    e.ty,
                    e.ty.size_bytes(),
                    e.recv
                );
            }
        }
    }
    Ok(())
}

/// The PTX header `c` carries (from its target): the one `build` writes, ptxas assembles
/// below and the runtime loads.
fn print_header(c: &tessel_passes::Compiled, indent: &str) {
    let (major, minor) = c.ptx.version;
    println!(
        "{indent}PTX header: .version {major}.{minor}, .target {}",
        c.ptx.target
    );
}

/// How kernel `kid` of `c` is launched after the one ahead (`dependent-launch`): nothing
/// when it does not wait on it; else programmatic, or stream-ordered as the step's first,
/// with the parameters it loads before it waits.
fn dependent_launch(
    c: &tessel_passes::Compiled,
    kid: tessel_ir::KernelId,
    k: &tessel_ir::kernel::Kernel,
) -> String {
    if !k.waits_on_prior_grid() {
        return String::new();
    }
    let how = if c.program.launches.first().map(|l| l.kernel) == Some(kid) {
        "stream-ordered (the step's first launch)"
    } else {
        "programmatic (begins while the kernel ahead finishes)"
    };
    // The step inputs by name, through the kernel's (first) launch.
    let launch = c.program.launches.iter().find(|l| l.kernel == kid);
    let early: Vec<String> = tessel_ir::kernel::griddep::before_wait(k)
        .params
        .iter()
        .map(|&n| match launch.and_then(|l| l.args.get(n as usize)) {
            Some(tessel_ir::kernel::LaunchArg::Buffer(b)) => c.program.buffers[*b].name.clone(),
            _ => format!("parameter {n}"),
        })
        .collect();
    if early.is_empty() {
        format!(", {how}; griddepcontrol.wait before its first global access")
    } else {
        format!(
            ", {how}; griddepcontrol.wait before its first global access but loads of {} (step inputs no launch writes)",
            early.join(", ")
        )
    }
}

/// Every kernel of `c`: its group, what it writes, its schedule and why, its launch, and
/// with ptxas its registers, shared memory and spills; each line after `indent`.
fn print_kernels(
    c: &tessel_passes::Compiled,
    ptxas: Option<&tessel_ptx::ptxas::Ptxas>,
    indent: &str,
) -> Result<()> {
    let arch = &c.ptx.target;
    let report = match ptxas {
        Some(p) => Some(p.assemble(&device::ptx_of(&c.program, &c.ptx)?, arch)?),
        None => None,
    };
    for (grps, (kid, k)) in c.groups_of_kernel.iter().zip(c.program.kernels.iter()) {
        // A step output by its name; an intermediate by the `t<N>` name `run --dump-temps`
        // gives it, with the graph value for `--emit fused`.
        let outs: Vec<String> = grps
            .iter()
            .flat_map(|&grp| &c.fusion.groups[grp].outputs)
            .map(|v| {
                let ty = c.graph.ty(*v);
                match c.buffer_of.get(v).map(|b| &c.program.buffers[*b]) {
                    Some(d) if d.role == BufferRole::Temp => {
                        format!("intermediate {} (value {v}): {ty}", d.name)
                    }
                    Some(d) if matches!(d.role, BufferRole::InOut(_)) => {
                        let rows = match &c.graph.ops[*v] {
                            tessel_ir::graph::Op::Update { at: None, .. } => "all of ".to_string(),
                            tessel_ir::graph::Op::Update { rows, .. } => {
                                format!("rows {} into ", c.graph.ty(*rows))
                            }
                            _ => String::new(),
                        };
                        format!("{rows}{} in place (value {v}): {ty}", d.name)
                    }
                    Some(d) => format!("{} (value {v}): {ty}", d.name),
                    None => format!("{v}: {ty}"),
                }
            })
            .collect();
        // A kernel `merge-launches` made of several runs each group on its own CTAs: one
        // kind after the groups, or each group's after it where a rider of another kind
        // joined (`groups g1 Matmul, g4 Elementwise`).
        let kinds: Vec<String> = grps
            .iter()
            .map(|&g| format!("{:?}", c.fusion.groups[g].kind()))
            .collect();
        let list = if kinds.iter().all(|k| *k == kinds[0]) {
            let names: Vec<String> = grps.iter().map(|g| g.to_string()).collect();
            format!("{}, {}", names.join(", "), kinds[0])
        } else {
            let named: Vec<String> = grps
                .iter()
                .zip(&kinds)
                .map(|(g, k)| format!("{g} {k}"))
                .collect();
            named.join(", ")
        };
        println!(
            "{indent}kernel {} (group{} {list}) writes {}",
            k.name,
            if grps.len() > 1 { "s" } else { "" },
            outs.join(", ")
        );
        for &grp in grps {
            if let Some(s) = &c.schedules[grp] {
                let who = if grps.len() > 1 {
                    format!(" ({grp})")
                } else {
                    String::new()
                };
                println!("{indent}  tile{who}: {}", s.tile);
                println!("{indent}  why{who}: {}", s.why);
            }
        }
        println!(
            "{indent}  launch: grid {:?}, block {:?}{}",
            k.grid,
            k.block,
            dependent_launch(c, kid, k)
        );
        println!("{indent}  order: {}", k.schedule);
        // ptxas counts the shared memory a kernel declares; a buffer over 48 KiB is
        // `.extern` and sized at launch, so it is added here.
        let dynamic = match k.dynamic_shared_bytes() {
            0 => String::new(),
            b => format!(" + {b} B dynamic"),
        };
        match report.as_ref().and_then(|r| r.function(&k.name)) {
            Some(f) => println!(
                "{indent}  ptxas {arch}: {} registers, {} B shared{dynamic}, {} B stack, spills {} B stored / {} B loaded",
                f.registers, f.shared_bytes, f.stack_frame_bytes, f.spill_store_bytes, f.spill_load_bytes
            ),
            None => println!(
                "{indent}  ptxas: not installed (scripts/install-ptxas.sh) — no register report"
            ),
        }
    }
    Ok(())
}
