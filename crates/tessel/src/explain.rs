//! `tessel explain`: for every kernel of every selected step, the fusion group it computes,
//! the schedule and TileConfig chosen and why, its launch shape, and (with ptxas installed)
//! its registers, shared memory and spills.

use crate::device;
use crate::frontend::{compile_steps, load, options, target_for};
use crate::weights::Weights;
use crate::words::plural;
use crate::CompileArgs;
use anyhow::Result;
use std::path::Path;
use tessel_ir::kernel::BufferRole;

/// `tessel explain`; with `--tp`, the simulated ranks' kernels and each step's
/// tensor-parallel plan after them.
pub fn explain(file: &Path, args: &CompileArgs) -> Result<()> {
    let src = load(file)?;
    // Registers and spills come from ptxas when it is installed (scripts/install-ptxas.sh).
    let ptxas = tessel_ptx::ptxas::Ptxas::locate().ok();
    let gpu = device::gpu_unless(args.target.is_some()).ok();
    let (target, from) = target_for(args, gpu.as_ref());
    let arch = target.ptx_target();
    println!(
        "target: {} ({arch}, {} SMs, {} KiB shared memory per CTA; from {from})",
        target.name,
        target.sm_count,
        target.max_shared_per_cta / 1024
    );
    for step in compile_steps(&src, args, &options(&target), &Weights::none())? {
        let c = &step.compiled;
        println!(
            "step {}: {}",
            step.name,
            plural(c.program.kernels.len(), "kernel")
        );
        let report = match &ptxas {
            Some(p) => Some(p.assemble(&device::ptx_of(&c.program, &target)?, &arch)?),
            None => None,
        };
        for (&grp, (_, k)) in c.group_of_kernel.iter().zip(c.program.kernels.iter()) {
            let data = &c.fusion.groups[grp];
            // A step output by its name; an intermediate by the `t<N>` name `run
            // --dump-temps` gives it, with the graph value for `--emit fused`.
            let outs: Vec<String> = data
                .outputs
                .iter()
                .map(|v| {
                    let ty = c.graph.ty(*v);
                    match c.buffer_of.get(v).map(|b| &c.program.buffers[*b]) {
                        Some(d) if d.role == BufferRole::Temp => {
                            format!("intermediate {} (value {v}): {ty}", d.name)
                        }
                        Some(d) if matches!(d.role, BufferRole::InOut(_)) => {
                            let rows = match &c.graph.ops[*v] {
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
            println!(
                "  kernel {} (group {grp}, {:?}) writes {}",
                k.name,
                data.kind,
                outs.join(", ")
            );
            if let Some(s) = &c.schedules[grp] {
                println!("    tile: {}", s.tile);
                println!("    why: {}", s.why);
            }
            println!("    launch: grid {:?}, block {:?}", k.grid, k.block);
            println!("    order: {}", k.schedule);
            // ptxas counts the shared memory a kernel declares; a buffer over 48 KiB is
            // `.extern` and sized at launch, so it is added here.
            let dynamic = match k.dynamic_shared_bytes() {
                0 => String::new(),
                b => format!(" + {b} B dynamic"),
            };
            match report.as_ref().and_then(|r| r.function(&k.name)) {
                Some(f) => println!(
                    "    ptxas {arch}: {} registers, {} B shared{dynamic}, {} B stack, spills {} B stored / {} B loaded",
                    f.registers, f.shared_bytes, f.stack_frame_bytes, f.spill_store_bytes, f.spill_load_bytes
                ),
                None => println!("    ptxas: not installed (scripts/install-ptxas.sh) — no register report"),
            }
        }
        if let Some(n) = args.tp {
            // The plan partitions the step before the attention pass (the scores are a
            // plain matmul there): decomposed, not fused.
            let g = tessel_passes::decompose::run(&step.checked);
            let plan = tessel_passes::tp::plan(&g, n)
                .map_err(|e| anyhow::anyhow!("step `{}`: {e}", step.name))?;
            print!("{}", plan.describe(&g));
        }
    }
    Ok(())
}
