//! The subcommands.

use crate::device::{self, open_gpu};
use crate::frontend::{compile_steps, load, Step};
use crate::inputs::{make_inputs, write_outputs};
use crate::{CompileArgs, InputArgs};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::DType;
use tessel_passes::{Options, Target};
use tessel_ref::{run_program_with, ExecOptions, Tensor};

pub(crate) fn options() -> Options {
    Options {
        target: Target::h200(),
        verify: true,
        ..Options::default()
    }
}

/// `tessel build`.
pub fn build(file: &Path, args: &CompileArgs, emit: &[String], out: &Path) -> Result<()> {
    const STAGES: [&str; 6] = ["ast", "graph", "fused", "lowered", "kernel", "ptx"];
    let emit: Vec<String> = emit.iter().map(|e| e.trim().to_string()).collect();
    for e in &emit {
        if !STAGES.contains(&e.as_str()) {
            bail!("--emit {e}: the stages are {}", STAGES.join(", "));
        }
    }
    let src = load(file)?;
    // main checked `out` before any work; it is made when the first file is written.
    let write = |name: String, text: String| -> Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
        println!("wrote {}", p.display());
        Ok(())
    };
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("module");
    if emit.iter().any(|e| e == "ast") {
        write(format!("{stem}.ast.tsl"), src.module.to_string())?;
    }
    for step in compile_steps(&src, args, &options())? {
        let c = &step.compiled;
        for e in &emit {
            let n = &step.name;
            match e.as_str() {
                "graph" => write(
                    format!("{n}.graph"),
                    tessel_ir::text::write_graph(&step.checked, None, None),
                )?,
                "fused" => write(
                    format!("{n}.fused.graph"),
                    tessel_ir::text::write_graph(&c.graph, Some(&c.fusion), Some(&c.schedules)),
                )?,
                "lowered" => write(
                    format!("{n}.lowered.kir"),
                    tessel_ir::text::write_program(&c.lowered),
                )?,
                "kernel" => write(
                    format!("{n}.kir"),
                    tessel_ir::text::write_program(&c.program),
                )?,
                "ptx" => write(format!("{n}.ptx"), device::ptx_of(&c.program)?)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// A bar over the CTAs the executor runs. It stays hidden until the executor reports how
/// many there are: drawn at length 0, indicatif shows a full bar at "0/0".
fn progress(total_hint: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} CTAs ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(total_hint.to_string());
    pb
}

/// Runs `p` on the CPU executor with a progress bar.
pub(crate) fn execute(p: &Program, inputs: &[Tensor], what: &str) -> Result<Vec<Tensor>> {
    let pb = progress(what);
    let cb = |done: u64, total: u64| {
        if pb.length() != Some(total) {
            pb.set_length(total);
            if total > 0 && pb.is_hidden() {
                pb.set_draw_target(ProgressDrawTarget::stderr());
            }
        }
        pb.set_position(done);
    };
    let opts = ExecOptions {
        progress: Some(&cb),
    };
    let r = run_program_with(p, inputs, &opts);
    pb.finish_and_clear();
    Ok(
        r.with_context(|| format!("executing step `{}` on the CPU", p.name))?
            .0,
    )
}

/// "1 kernel", "2 kernels".
pub(crate) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn digest(t: &Tensor) -> String {
    // FNV-1a 64 over the bytes: a short fingerprint to compare runs by eye.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &t.data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Where `tessel run` writes.
pub struct RunOutputs {
    pub out: Option<PathBuf>,
    pub save_inputs: Option<PathBuf>,
    pub dump_temps: bool,
}

/// `p` with its intermediate buffers appended to its outputs — not a split-K matmul's
/// scratch, which holds partial sums rather than a tensor of the step.
fn with_temps(p: &Program) -> Program {
    let mut q = p.clone();
    for (b, decl) in p.buffers.iter() {
        if decl.role == BufferRole::Temp && !decl.name.ends_with("_split_k") {
            q.outputs.push((decl.name.clone(), b));
        }
    }
    q
}

/// `path` for one of several steps: `DIR/STEM.STEP.EXT`.
fn per_step(path: &Path, step: &str, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("out");
    path.with_file_name(format!("{stem}.{step}.safetensors"))
}

/// `tessel run`.
pub fn run(
    file: &Path,
    args: &CompileArgs,
    in_args: &InputArgs,
    outs: &RunOutputs,
    cpu: bool,
) -> Result<()> {
    let src = load(file)?;
    let steps = compile_steps(&src, args, &options())?;
    let gpu = device::gpu_unless(cpu);
    match &gpu {
        Ok(g) => println!("device: {} (GPU)", g.properties().name),
        Err(why) => println!("device: CPU kernel-IR executor ({why})"),
    }
    let several = steps.len() > 1;
    for step in &steps {
        let full;
        let p = if outs.dump_temps {
            full = with_temps(&step.compiled.program);
            &full
        } else {
            &step.compiled.program
        };
        let inputs = make_inputs(p, in_args)?;
        if let Some(path) = &outs.save_inputs {
            let path = per_step(path, &step.name, several);
            let named: Vec<(String, &Tensor)> = p
                .inputs
                .iter()
                .map(|(n, _)| n.clone())
                .zip(inputs.iter())
                .collect();
            write_outputs(&path, &named)?;
            println!("  wrote inputs to {}", path.display());
        }
        let t0 = Instant::now();
        let (results, timed) = match &gpu {
            Ok(g) => (
                device::run_once(g, p, &inputs)?,
                "on the GPU, wall clock: upload, kernels and download; `tessel bench` times \
                 the kernels alone",
            ),
            Err(_) => (
                execute(p, &inputs, &step.name)?,
                "on the CPU executor, which interprets the kernel IR: no measure of GPU speed",
            ),
        };
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        println!(
            "step {}: {}, {ms:.1} ms {timed}",
            step.name,
            plural(p.kernels.len(), "kernel")
        );
        let mut named = Vec::new();
        for ((name, b), t) in p.outputs.iter().zip(&results) {
            // An intermediate has no source name; say which graph value it holds.
            let value = step.compiled.buffer_of.iter().find(|(_, ob)| *ob == b);
            let what = match value {
                Some((v, _)) if p.buffers[*b].role == BufferRole::Temp => {
                    format!(" (intermediate: graph value {v}, see `tessel explain`)")
                }
                _ => String::new(),
            };
            println!("  {name}{what}: {} digest {}", t.ty, digest(t));
            named.push((name.clone(), t));
        }
        let path = match &outs.out {
            Some(o) => per_step(o, &step.name, several),
            None => PathBuf::from("out").join(format!("{}.safetensors", step.name)),
        };
        write_outputs(&path, &named)?;
        println!("  wrote {}", path.display());
    }
    Ok(())
}

/// `tessel explain`.
pub fn explain(file: &Path, args: &CompileArgs) -> Result<()> {
    let src = load(file)?;
    // Registers and spills come from ptxas when it is installed (scripts/install-ptxas.sh).
    let ptxas = tessel_ptx::ptxas::Ptxas::locate().ok();
    for step in compile_steps(&src, args, &options())? {
        let c = &step.compiled;
        println!(
            "step {}: {}",
            step.name,
            plural(c.program.kernels.len(), "kernel")
        );
        let report = match &ptxas {
            Some(p) => Some(p.assemble(&device::ptx_of(&c.program)?, "sm_90")?),
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
            match report.as_ref().and_then(|r| r.function(&k.name)) {
                Some(f) => println!(
                    "    ptxas sm_90: {} registers, {} B shared, {} B stack, spills {} B stored / {} B loaded",
                    f.registers, f.shared_bytes, f.stack_frame_bytes, f.spill_store_bytes, f.spill_load_bytes
                ),
                None => println!("    ptxas: not installed (scripts/install-ptxas.sh) — no register report"),
            }
        }
    }
    Ok(())
}

/// The multiply-adds (as 2·M·N·K·batch flops) of group `grp` if it is a matmul, with the
/// H200 SXM datasheet's dense peak for the arithmetic its kernel uses (NVIDIA H200 Tensor
/// Core GPU datasheet, 2024: BF16/FP16 tensor 989 TFLOP/s, TF32 tensor 494 TFLOP/s, FP32
/// 67 TFLOP/s) and that arithmetic's name. Peaks assume the boost clock; sustained clocks
/// are lower, so no kernel reaches 100%.
fn matmul_peak(
    c: &tessel_passes::Compiled,
    grp: tessel_ir::Group,
) -> Option<(f64, f64, &'static str)> {
    use tessel_ir::graph::{GroupKind, TileConfig};
    let data = &c.fusion.groups[grp];
    if data.kind != GroupKind::Matmul {
        return None;
    }
    let s = tessel_passes::schedule::matmul_shape(&c.graph, data.reductions[0]);
    let flops = 2.0 * (s.batch * s.m * s.n * s.k) as f64;
    let tensor = matches!(
        c.schedules[grp].as_ref().map(|s| &s.tile),
        Some(TileConfig::Mma { .. } | TileConfig::GemvMma { .. })
    );
    let dt = c.graph.ty(data.reductions[0]).dtype;
    let (peak, what) = match (tensor, dt) {
        (true, DType::F32) => (494e12, "TF32 tensor"),
        (true, _) => (989e12, "BF16/FP16 tensor"),
        (false, _) => (67e12, "FP32 FMA"),
    };
    Some((flops, peak, what))
}

/// A cuBLAS timing of the same product on the same buffers.
struct Baseline {
    us: f64,
    what: &'static str,
    m: u64,
    n: u64,
    k: u64,
}

/// Times cuBLAS on the matmul of group `grp` when it has no batch and each operand is a
/// stored tensor or its transpose: `cublasGemmEx` with f32 accumulation, the same dtypes and
/// the same precision (TF32 tensor cores for f32 exactly when tessel's kernel uses them),
/// on the same rotated input copies, into scratch outputs of its own. None for other groups;
/// a fused epilogue is extra work tessel does that cuBLAS is not asked to.
fn cublas_baseline(
    gpu: &tessel_cuda::Gpu,
    step: &Step,
    grp: tessel_ir::Group,
    sets: &[Vec<tessel_cuda::Buffer>],
    rounds: u32,
) -> Result<Option<Baseline>> {
    use tessel_cuda::{GemmType, Layout};
    use tessel_ir::graph::{GroupKind, Op};
    let c = &step.compiled;
    let data = &c.fusion.groups[grp];
    if data.kind != GroupKind::Matmul {
        return Ok(None);
    }
    let mm = data.reductions[0];
    let s = tessel_passes::schedule::matmul_shape(&c.graph, mm);
    let Op::MatMul { lhs, rhs } = c.graph.ops[mm] else {
        return Ok(None);
    };
    if s.batch != 1 || !s.operands_2d {
        return Ok(None);
    }
    let layout = |k_contiguous| {
        if k_contiguous {
            Layout::KContiguous
        } else {
            Layout::KStrided
        }
    };
    let layouts = (layout(s.lhs_k_contiguous), layout(s.rhs_k_contiguous));
    let base = |v| match &c.graph.ops[v] {
        Op::Permute { arg, .. } => *arg,
        _ => v,
    };
    let (Some(a), Some(w)) = (c.buffer_of.get(&base(lhs)), c.buffer_of.get(&base(rhs))) else {
        return Ok(None);
    };
    let dtype = c.graph.ty(mm).dtype;
    let blas = tessel_cuda::Blas::new(gpu)?;
    let out_bytes = (s.m * s.n * dtype.size_bytes()) as usize;
    let mut outs: Vec<tessel_cuda::Buffer> = sets
        .iter()
        .map(|_| tessel_cuda::Buffer::alloc(gpu, out_bytes.max(1)))
        .collect::<std::result::Result<_, _>>()?;
    let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
    let (ai, wi) = (a.as_u32() as usize, w.as_u32() as usize);
    let tf32 = c.program.tensor_cores().tf32;
    let (ty, what) = match dtype {
        DType::Bf16 => (GemmType::Bf16, "bf16, f32 accumulate"),
        DType::F16 => (GemmType::F16, "f16, f32 accumulate"),
        DType::F32 if tf32 => (GemmType::Tf32, "f32, TF32 tensor cores"),
        DType::F32 => (GemmType::F32, "f32, TF32 off"),
        _ => return Ok(None),
    };
    let t = gpu.time_graph_with(rounds, 20, || {
        for (set, out) in sets.iter().zip(outs.iter_mut()) {
            blas.gemm(ty, [m, n, k], (&set[ai], &set[wi]), layouts, out)?;
        }
        Ok(())
    })?;
    Ok(Some(Baseline {
        us: t.median_us / sets.len() as f64,
        what,
        m: s.m,
        n: s.n,
        k: s.k,
    }))
}

/// `tessel bench`.
pub fn bench(
    file: &Path,
    args: &CompileArgs,
    in_args: &InputArgs,
    rounds: u32,
    json_out: Option<&Path>,
) -> Result<()> {
    let gpu = open_gpu().map_err(|why| anyhow::anyhow!("bench needs a GPU: {why}"))?;
    let props = gpu.properties().clone();
    let bw = tessel_cuda::measure_copy_bandwidth(&gpu, 2 << 30)?;
    println!(
        "{}: measured copy bandwidth {:.0} GB/s (read + write, 2 GiB device-to-device, median)",
        props.name, bw.median_gb_s
    );
    let src = load(file)?;
    let mut recs = Vec::new();
    for step in compile_steps(&src, args, &options())? {
        let p = &step.compiled.program;
        let inputs = make_inputs(p, in_args)?;
        let l = device::load(&gpu, p, &inputs)?;
        // Rotate over enough copies of every buffer that one pass exceeds 4x L2, so the
        // timing measures HBM and not the cache (design §10).
        let step_bytes: u64 = p.buffers.values().map(|b| b.ty.size_bytes()).sum();
        let copies = (4 * props.l2_bytes)
            .div_ceil(step_bytes.max(1))
            .clamp(1, 16) as usize;
        let mut sets = vec![];
        for _ in 0..copies {
            let mut set = Vec::new();
            for (i, (_, decl)) in p.buffers.iter().enumerate() {
                let mut b =
                    tessel_cuda::Buffer::alloc(&gpu, (decl.ty.size_bytes() as usize).max(1))?;
                b.copy_from(&l.buffers[i])?;
                set.push(b);
            }
            sets.push(set);
        }
        println!("step {} ({} buffer copies rotated)", step.name, copies);
        let all_calls: Vec<_> = sets.iter().map(|s| l.calls(s)).collect();
        // One timing per fusion group: a split-K matmul's two kernels are timed together.
        let c = &step.compiled;
        let mut groups: Vec<(tessel_ir::Group, Vec<usize>)> = Vec::new();
        for (ki, &grp) in c.group_of_kernel.iter().enumerate() {
            match groups.last_mut() {
                Some((g, ks)) if *g == grp => ks.push(ki),
                _ => groups.push((grp, vec![ki])),
            }
        }
        for (grp, kis) in groups {
            let kernels: Vec<&tessel_ir::kernel::Kernel> = kis
                .iter()
                .map(|&ki| &p.kernels[tessel_ir::KernelId::from_u32(ki as u32)])
                .collect();
            let name = kernels
                .iter()
                .map(|k| k.name.clone())
                .collect::<Vec<_>>()
                .join(" + ");
            let bytes: u64 = kis
                .iter()
                .flat_map(|&ki| p.launches[ki].args.iter())
                .filter_map(|a| match a {
                    tessel_ir::kernel::LaunchArg::Buffer(b) => Some(p.buffers[*b].ty.size_bytes()),
                    _ => None,
                })
                .sum();
            let calls: Vec<_> = all_calls
                .iter()
                .flat_map(|c| kis.iter().map(|&ki| c[ki].clone()))
                .collect();
            let t = gpu.time_graph(&calls, rounds, 20)?;
            let us = t.median_us / copies as f64;
            let gbs = bytes as f64 / (us * 1e-6) / 1e9;
            let mem_floor_us = bytes as f64 / (bw.median_gb_s * 1e9) * 1e6;
            // A matmul's floor is also its multiply-adds at the datasheet's peak rate.
            let compute = matmul_peak(c, grp);
            let (floor_us, bound) = match compute {
                Some((flops, peak, _)) if flops / peak * 1e6 > mem_floor_us => {
                    (flops / peak * 1e6, "compute")
                }
                _ => (mem_floor_us, "memory"),
            };
            println!(
                "  {:<28} {:>9.2} µs  {:>7.0} GB/s  {:>5.1}% of copy bw  floor {:>8.2} µs ({bound}; {:.2}x)  ({} MB moved)",
                name,
                us,
                gbs,
                100.0 * gbs / bw.median_gb_s,
                floor_us,
                us / floor_us,
                bytes / 1_000_000
            );
            let tile = kernels
                .iter()
                .map(|k| k.schedule.clone())
                .collect::<Vec<_>>()
                .join(" | ");
            let mut rec = json!({
                "file": src.name, "step": step.name, "kernel": name,
                "median_us": us, "min_us": t.min_us / copies as f64, "max_us": t.max_us / copies as f64,
                "bytes": bytes, "gb_s": gbs, "copy_gb_s": bw.median_gb_s, "floor_us": floor_us,
                "floor_bound": bound, "ratio_to_floor": us / floor_us, "tile": tile,
            });
            if let Some((flops, peak, what)) = compute {
                rec["peak_tflop_s"] = json!(peak / 1e12);
                rec["peak"] = json!(what);
                println!(
                    "  {:<28} {:>9.1} TFLOP/s ({:.1}% of the {what} peak {:.0} TFLOP/s)",
                    "",
                    flops / (us * 1e-6) / 1e12,
                    100.0 * flops / (us * 1e-6) / peak,
                    peak / 1e12
                );
            }
            if let Some(base) = cublas_baseline(&gpu, &step, grp, &sets, rounds)? {
                let flops = 2.0 * base.m as f64 * base.n as f64 * base.k as f64;
                println!(
                    "  {:<28} {:>9.2} µs  cuBLAS ({} M={} N={} K={}): tessel/cuBLAS time {:.3}; tessel {:.1} TFLOP/s, cuBLAS {:.1} TFLOP/s",
                    "",
                    base.us,
                    base.what,
                    base.m,
                    base.n,
                    base.k,
                    us / base.us,
                    flops / (us * 1e-6) / 1e12,
                    flops / (base.us * 1e-6) / 1e12,
                );
                rec["cublas_us"] = json!(base.us);
                rec["ratio_to_cublas"] = json!(us / base.us);
                rec["tflop_s"] = json!(flops / (us * 1e-6) / 1e12);
                rec["cublas_tflop_s"] = json!(flops / (base.us * 1e-6) / 1e12);
            }
            recs.push(rec);
        }
    }
    if let Some(path) = json_out {
        crate::paths::write_file("--json", path, serde_json::to_string_pretty(&recs)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// `tessel invariance`: a step's rows must not depend on the batch (design §5, the
/// `invariant` profile). Returns false if any row differs.
pub fn invariance(
    file: &Path,
    args: &CompileArgs,
    batch_dim: &str,
    sizes: &[u64],
    seeds: u64,
    cpu: bool,
) -> Result<bool> {
    // Each of these would compare nothing and PASS vacuously.
    if seeds == 0 {
        bail!("--seeds 0: at least one random input set is needed");
    }
    if sizes.contains(&0) {
        bail!("--sizes: a batch of 0 rows has nothing to compare");
    }
    for (i, m) in sizes.iter().enumerate() {
        if sizes[..i].contains(m) {
            bail!("--sizes lists {m} twice: each size is compared with the largest once");
        }
    }
    let full = match sizes.iter().max() {
        Some(&m) if sizes.len() >= 2 => m,
        _ => bail!(
            "--sizes needs at least two batch sizes: the largest is the reference the others \
             are compared with"
        ),
    };
    let src = load(file)?;
    let dims = step_param_dims(&src, args.step.as_deref());
    if !dims.iter().any(|d| d == batch_dim) {
        bail!(
            "--batch-dim {batch_dim}: no parameter of {} has a dim `{batch_dim}`{}",
            match &args.step {
                Some(s) => format!("step `{s}`"),
                None => format!("any step of {}", src.name),
            },
            if dims.is_empty() {
                " (its parameters have no symbolic dims)".to_string()
            } else {
                format!("; the dims are {}", dims.join(", "))
            }
        );
    }
    let gpu = if cpu {
        None
    } else {
        match open_gpu() {
            Ok(g) => Some(g),
            Err(why) => {
                println!("note: running on the CPU kernel-IR executor ({why})");
                None
            }
        }
    };
    let compile_at = |m: u64| -> Result<Vec<Step>> {
        let mut a = args.clone();
        a.dims.retain(|(n, _)| n != batch_dim);
        a.dims.push((batch_dim.to_string(), m));
        compile_steps(&src, &a, &options())
    };
    let run = |p: &Program, inputs: &[Tensor]| -> Result<Vec<Tensor>> {
        match &gpu {
            Some(g) => device::run_once(g, p, inputs),
            None => execute(p, inputs, "executor"),
        }
    };
    // Every step at every size, compiled once: the reference size, one row fewer (to tell
    // batched tensors from ones whose first dim equals the batch by chance), the others.
    let prev = compile_at(full.max(2) - 1)?;
    let others: Vec<(u64, Vec<Step>)> = sizes
        .iter()
        .filter(|&&m| m != full)
        .map(|&m| compile_at(m).map(|s| (m, s)))
        .collect::<Result<_>>()?;
    let mut ok = true;
    let mut compared = 0;
    for (si, step) in compile_at(full)?.into_iter().enumerate() {
        let p = with_temps(&step.compiled.program);
        // Batched tensors: those whose first dim is the batch at every size.
        let q = with_temps(&prev[si].compiled.program);
        let batched =
            |p: &Program, q: &Program, b: tessel_ir::BufferId, qb: tessel_ir::BufferId| {
                let (s, t) = (&p.buffers[b].ty.shape.0, &q.buffers[qb].ty.shape.0);
                !s.is_empty() && s[0] == full && t.first() == Some(&(full.max(2) - 1))
            };
        let in_batched: Vec<bool> = p
            .inputs
            .iter()
            .zip(&q.inputs)
            .map(|((_, b), (_, qb))| batched(&p, &q, *b, *qb))
            .collect();
        let out_batched: Vec<bool> = p
            .outputs
            .iter()
            .zip(&q.outputs)
            .map(|((_, b), (_, qb))| batched(&p, &q, *b, *qb))
            .collect();
        // Step outputs by name; intermediates (`t<N>`, see `with_temps`) apart.
        let is_temp = |b: tessel_ir::BufferId| p.buffers[b].role == BufferRole::Temp;
        let (mut outs, mut temps) = (Vec::new(), Vec::new());
        for ((n, b), _) in p.outputs.iter().zip(&out_batched).filter(|(_, &bt)| bt) {
            if is_temp(*b) {
                temps.push(n.as_str());
            } else {
                outs.push(n.as_str());
            }
        }
        if outs.is_empty() && temps.is_empty() {
            println!(
                "{} step {}: no tensor the step writes has the batch {batch_dim} as its first \
                 dim: nothing to compare",
                src.name, step.name
            );
            continue;
        }
        let mut what = Vec::new();
        if !outs.is_empty() {
            what.push(format!("outputs {}", outs.join(", ")));
        }
        if !temps.is_empty() {
            what.push(format!("intermediates {}", temps.join(", ")));
        }
        println!(
            "{} step {} ({} profile, {}): rows of {} compared, batch {batch_dim} in {:?}",
            src.name,
            step.name,
            args.profile.name(),
            if gpu.is_some() { "GPU" } else { "executor" },
            what.join(" and "),
            sizes
        );
        if !temps.is_empty() {
            println!(
                "  (an intermediate t<N> is a tensor written between kernels, named after graph \
                 value vN: see `tessel explain`)"
            );
        }
        compared += 1;
        let steps_at: Vec<(u64, Program)> = others
            .iter()
            .map(|(m, steps)| (*m, with_temps(&steps[si].compiled.program)))
            .collect();
        let mut step_ok = true;
        for seed in 0..seeds {
            let inputs = make_inputs(
                &p,
                &InputArgs {
                    inputs: None,
                    seed,
                    fills: vec![],
                    allow_random: false,
                },
            )?;
            let want = run(&p, &inputs)?;
            for (m, pm) in &steps_at {
                let m = *m;
                let mut starts = vec![0, full - m, (full - m) / 3];
                starts.dedup();
                for r0 in starts {
                    let sliced: Vec<Tensor> = inputs
                        .iter()
                        .zip(&in_batched)
                        .map(|(t, &bt)| if bt { rows_of(t, r0, m) } else { t.clone() })
                        .collect();
                    let got = run(pm, &sliced)?;
                    for (i, &bt) in out_batched.iter().enumerate() {
                        if !bt {
                            continue;
                        }
                        if got[i].data != rows_of(&want[i], r0, m).data {
                            step_ok = false;
                            let (name, b) = &p.outputs[i];
                            let kind = if is_temp(*b) {
                                "intermediate"
                            } else {
                                "output"
                            };
                            println!(
                                "  FAIL: seed {seed}: {kind} `{name}` rows {r0}..{} differ between {batch_dim} = {m} and {batch_dim} = {full}",
                                r0 + m
                            );
                        }
                    }
                }
            }
        }
        println!(
            "  {} sizes x 3 positions x {seeds} seeds: {}",
            steps_at.len(),
            if step_ok {
                "every row bit-identical"
            } else {
                "rows differ"
            }
        );
        ok &= step_ok;
    }
    if compared == 0 {
        bail!("nothing was compared: no tensor any step writes has {batch_dim} as its first dim");
    }
    println!("invariance: {}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}

/// The symbolic dims of the parameters of `step` (or of every step) of `src`, in order of
/// first appearance.
fn step_param_dims(src: &crate::frontend::Source, step: Option<&str>) -> Vec<String> {
    use tessel_syntax::ast::{DimKind, FuncKind};
    let mut dims: Vec<String> = Vec::new();
    let steps = src
        .module
        .funcs()
        .filter(|f| f.kind == FuncKind::Step && step.is_none_or(|s| f.name.node == s));
    for f in steps {
        for d in f.params.iter().flat_map(|p| p.ty.dims.iter()) {
            if let DimKind::Symbol(s) = &d.kind {
                if !dims.contains(s) {
                    dims.push(s.clone());
                }
            }
        }
    }
    dims
}

/// Rows `r0 .. r0 + m` of `t` along its first dim.
fn rows_of(t: &Tensor, r0: u64, m: u64) -> Tensor {
    let rows = t.ty.shape.0[0].max(1);
    let row = t.data.len() as u64 / rows;
    let mut shape = t.ty.shape.0.clone();
    shape[0] = m;
    Tensor {
        ty: tessel_ir::TensorType::new(t.ty.dtype, shape),
        data: t.data[(r0 * row) as usize..((r0 + m) * row) as usize].to_vec(),
    }
}
