//! `tessel bench`: time every fusion group's kernels on the GPU over rotated copies of the
//! buffers (so HBM, not L2, is measured), against the measured copy bandwidth, the datasheet
//! peak of a matmul's arithmetic, and cuBLAS on the same product.

use crate::device::{self, open_gpu};
use crate::frontend::{compile_steps, load, options, step_params, target_for, Step};
use crate::inputs::{make_inputs, note_unused};
use crate::plot::{BenchPlot, PlotRow};
use crate::{CompileArgs, InputArgs};
use anyhow::{bail, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use tessel_driver::Weights;
use tessel_ir::DType;
use tessel_passes::{Compiled, Peaks};

/// The multiply-adds (as 2·M·N·K·batch flops) of group `grp` if it is a matmul, with the
/// target's datasheet dense peak for the arithmetic its kernel uses ([`Peaks`]) and that
/// arithmetic's name; None when the target has no datasheet figures. Peaks assume the
/// boost clock; sustained clocks are lower, so no kernel reaches 100%.
fn matmul_peak(
    c: &Compiled,
    grp: tessel_ir::Group,
    peaks: Option<&Peaks>,
) -> Option<(f64, f64, &'static str)> {
    let w = c.matmul(grp)?;
    let peaks = peaks?;
    let flops = 2.0 * w.fmas() as f64;
    let (peak, what) = match (w.tensor_cores, w.dtype) {
        (true, DType::F32) => (peaks.tf32_tensor, "TF32 tensor"),
        (true, _) => (peaks.bf16_tensor, "BF16/FP16 tensor"),
        (false, _) => (peaks.fp32, "FP32 FMA"),
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
    let c = &step.compiled;
    let Some(gemm) = c.gemm(grp) else {
        return Ok(None);
    };
    let layout = |k_contiguous| {
        if k_contiguous {
            Layout::KContiguous
        } else {
            Layout::KStrided
        }
    };
    let layouts = (layout(gemm.lhs_k_contiguous), layout(gemm.rhs_k_contiguous));
    let dtype = gemm.dtype;
    let blas = tessel_cuda::Blas::new(gpu)?;
    let out_bytes = (gemm.m * gemm.n * dtype.size_bytes()) as usize;
    let mut outs: Vec<tessel_cuda::Buffer> = sets
        .iter()
        .map(|_| tessel_cuda::Buffer::alloc(gpu, out_bytes.max(1)))
        .collect::<std::result::Result<_, _>>()?;
    let (m, n, k) = (gemm.m as usize, gemm.n as usize, gemm.k as usize);
    let (ai, wi) = (gemm.lhs.as_u32() as usize, gemm.rhs.as_u32() as usize);
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
        m: gemm.m,
        n: gemm.n,
        k: gemm.k,
    }))
}

/// With `--tp N`: the ranks' whole step (every phase and all-gather, rank 0's time, one
/// set of buffers), and each all-gather against NCCL's all-reduce of the same bytes.
fn bench_ranks(
    file: &str,
    (step, ptx): (&str, &tessel_passes::PtxHeader),
    ranks: &[tessel_ir::ranks::Rank<tessel_ir::kernel::Program>],
    inputs: &[tessel_ref::Tensor],
    rounds: u32,
) -> Result<Vec<serde_json::Value>> {
    use crate::ranks::{run, time_reductions, Transport};
    let tp = ranks.len() as u32;
    let (transport, how) = Transport::choose(tp);
    let (_, t) = run(ranks, ptx, inputs, transport, Some((rounds, 5)))?;
    let t = t.expect("timed");
    let note = if transport == Transport::Loopback {
        " — the ranks run one after another: not a tensor-parallel time"
    } else {
        ""
    };
    println!(
        "ranks ({how}): the whole step, rank 0, launched one by one between events: {:.2} µs median (min {:.2}, max {:.2}; one set of buffers){note}",
        t.events.median_us, t.events.min_us, t.events.max_us,
    );
    let mut recs = vec![json!({
        "file": file, "step": step, "kernel": "ranks: whole step", "tp": tp,
        "transport": format!("{transport:?}"), "timing": "events", "median_us": t.events.median_us,
        "min_us": t.events.min_us, "max_us": t.events.max_us,
    })];
    match &t.graph {
        Some(Ok(g)) => {
            println!(
                "  the same captured as one CUDA graph and replayed: {:.2} µs median (min {:.2}, max {:.2})",
                g.median_us, g.min_us, g.max_us
            );
            recs.push(json!({
                "file": file, "step": step, "kernel": "ranks: whole step", "tp": tp,
                "transport": format!("{transport:?}"), "timing": "graph",
                "median_us": g.median_us, "min_us": g.min_us, "max_us": g.max_us,
            }));
        }
        Some(Err(e)) => println!("  captured as a CUDA graph: failed ({e})"),
        None => println!("  (not captured as a CUDA graph over several GPUs)"),
    }
    let gpu = open_gpu().map_err(|why| anyhow::anyhow!("{why}"))?;
    let times = crate::ranks::time_kernels(&gpu, (&ranks[0], ptx), inputs, rounds)?;
    let sum: f64 = times.iter().map(|(_, _, t)| t.median_us).sum();
    println!(
        "  rank 0's kernels one at a time (graph-captured, on GPU 0): {:.2} µs together",
        sum
    );
    for (k, name, t) in &times {
        println!("    phase {k} {name:<28} {:>9.2} µs", t.median_us);
        recs.push(json!({
            "file": file, "step": step, "kernel": name, "phase": k, "tp": tp,
            "median_us": t.median_us, "min_us": t.min_us, "max_us": t.max_us,
        }));
    }
    if transport == Transport::Nccl {
        for r in time_reductions(&ranks[0], rounds, 20)? {
            println!(
                "  all-gather of {} ({} bytes per rank): {:.2} µs; NCCL all-reduce of the same bytes: {:.2} µs",
                r.slot, r.bytes, r.all_gather_us, r.all_reduce_us
            );
            recs.push(json!({
                "file": file, "step": step, "kernel": format!("all-gather {}", r.slot), "tp": tp,
                "bytes": r.bytes, "all_gather_us": r.all_gather_us, "all_reduce_us": r.all_reduce_us,
            }));
        }
    }
    Ok(recs)
}

/// `path` for step `step` of several: `DIR/STEM.STEP.EXT`.
fn per_step(path: &Path, step: &str, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    path.with_file_name(format!("{stem}.{step}.{ext}"))
}

/// `tessel bench`; with `plot_out`, each step's kernels drawn against their floors
/// ([`crate::plot`]).
pub fn bench(
    file: &Path,
    args: &CompileArgs,
    in_args: &InputArgs,
    rounds: u32,
    json_out: Option<&Path>,
    plot_out: Option<&Path>,
) -> Result<()> {
    if let (Some(_), Some(n)) = (plot_out, args.tp) {
        bail!("--plot with --tp {n}: the ranks' kernels have no floors to draw; bench without --tp to plot the step's");
    }
    let gpu = open_gpu().map_err(|why| anyhow::anyhow!("bench needs a GPU: {why}"))?;
    let props = gpu.properties().clone();
    let bw = tessel_cuda::measure_copy_bandwidth(&gpu, 2 << 30)?;
    println!(
        "{}: measured copy bandwidth {:.0} GB/s (read + write, 2 GiB device-to-device, median)",
        props.name, bw.median_gb_s
    );
    let src = load(file)?;
    let weights = Weights::open(&in_args.spec())?;
    let (target, from) = target_for(args, Some(&gpu));
    println!(
        "target: {} ({}, from {from}){}",
        target.name,
        target.ptx_target(),
        match &target.peaks {
            Some(p) => format!("; peaks: {}", p.source),
            None => "; no datasheet peaks for it: no compute floor".into(),
        }
    );
    let mut recs = Vec::new();
    let steps = compile_steps(&src, args, &options(&target, args), &weights)?;
    let names: Vec<String> = steps.iter().map(|s| s.name.clone()).collect();
    note_unused(in_args, &step_params(&src, &names));
    let several = steps.len() > 1;
    for step in steps {
        let p = &step.compiled.program;
        let ranks = step.rank_programs();
        let place = crate::memory::Place::Gpu(&gpu);
        crate::memory::ensure_fits(&step.name, p, ranks.as_deref(), &place, &args.dims)?;
        let inputs = make_inputs(p, in_args, &step.weights)?;
        if let Some(ranks) = ranks {
            // What runs is the ranks: time them.
            recs.extend(bench_ranks(
                &src.name,
                (&step.name, &step.compiled.ptx),
                &ranks,
                &inputs,
                rounds,
            )?);
            continue;
        }
        let l = device::load(&gpu, p, &step.compiled.ptx, &inputs)?;
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
        let all_calls: Vec<_> = sets.iter().map(|s| l.calls(s)).collect::<Result<_, _>>()?;
        // One timing per fusion group: a split-K matmul's two kernels are timed together,
        // and a kernel `merge-launches` made of several groups is timed for all of them.
        let c = &step.compiled;
        let mut groups: Vec<(&[tessel_ir::Group], Vec<usize>)> = Vec::new();
        for (ki, grps) in c.groups_of_kernel.iter().enumerate() {
            match groups.last_mut() {
                Some((g, ks)) if *g == &grps[..] => ks.push(ki),
                _ => groups.push((grps, vec![ki])),
            }
        }
        let mut rows = Vec::new();
        for (grps, kis) in groups {
            let kernels: Vec<&tessel_ir::kernel::Kernel> = kis
                .iter()
                .map(|&ki| &p.kernels[tessel_ir::KernelId::from_u32(ki as u32)])
                .collect();
            let name = kernels
                .iter()
                .map(|k| k.name.clone())
                .collect::<Vec<_>>()
                .join(" + ");
            // An in-place update writes its rows into the inout buffer, not the whole buffer.
            let written = |b: tessel_ir::BufferId| {
                grps.iter()
                    .find_map(|&grp| match c.fusion.groups[grp].outputs[..] {
                        [u] if c.buffer_of.get(&u) == Some(&b) => match &c.graph.ops[u] {
                            tessel_ir::graph::Op::Update { rows, .. } => {
                                Some(c.graph.ty(*rows).size_bytes())
                            }
                            _ => None,
                        },
                        _ => None,
                    })
            };
            let bytes: u64 = kis
                .iter()
                .flat_map(|&ki| p.launches[ki].args.iter())
                .filter_map(|a| match a {
                    tessel_ir::kernel::LaunchArg::Buffer(b) => {
                        Some(written(*b).unwrap_or(p.buffers[*b].ty.size_bytes()))
                    }
                    _ => None,
                })
                .sum();
            // Timed on their own: the group's first kernel stream-ordered behind the copy
            // before it, not overlapping it as a programmatic launch does in the step.
            let calls: Vec<_> = all_calls
                .iter()
                .flat_map(|c| {
                    kis.iter().enumerate().map(|(j, &ki)| {
                        let mut call = c[ki].clone();
                        call.launch.programmatic &= j > 0;
                        call
                    })
                })
                .collect();
            let t = gpu.time_graph(&calls, rounds, 20)?;
            let us = t.median_us / copies as f64;
            let gbs = bytes as f64 / (us * 1e-6) / 1e9;
            let mem_floor_us = bytes as f64 / (bw.median_gb_s * 1e9) * 1e6;
            // A matmul's floor is also its multiply-adds at the datasheet's peak rate.
            // The compute floor of one matmul group (a merged kernel's is its memory's).
            let compute = match grps {
                &[grp] => matmul_peak(c, grp, target.peaks.as_ref()),
                _ => None,
            };
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
            let mut bases = grps
                .iter()
                .map(|&grp| cublas_baseline(&gpu, &step, grp, &sets, rounds))
                .collect::<Result<Vec<_>>>()?;
            // A merged kernel's GEMMs, each by cuBLAS, one after another; its other parts
            // (a rider such as decode's RoPE table) have no cuBLAS twin and are not counted.
            let gemms = bases.iter().flatten().count();
            let (base, merged_base) = if bases.len() == 1 {
                (bases.pop().flatten(), None)
            } else if gemms > 0 {
                (
                    None,
                    Some(bases.iter().flatten().map(|b| b.us).sum::<f64>()),
                )
            } else {
                (None, None)
            };
            if let Some(sum) = merged_base {
                let others = match grps.len() - gemms {
                    0 => String::new(),
                    n => format!(" (the launch's {n} other kernel(s) not counted)"),
                };
                println!(
                    "  {:<28} {:>9.2} µs  cuBLAS, its {gemms} GEMMs one after another{others}: tessel/cuBLAS time {:.3}",
                    "",
                    sum,
                    us / sum
                );
                rec["cublas_us"] = json!(sum);
                rec["ratio_to_cublas"] = json!(us / sum);
            }
            rows.push(PlotRow {
                name: name.clone(),
                measured_us: us,
                floor_us,
                baseline_us: base.as_ref().map(|b| b.us).or(merged_base),
            });
            if let Some(base) = base {
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
        // The whole step on one set of buffers, as `--tp` times its ranks.
        let t = gpu.time_events(&all_calls[0], rounds, 5)?;
        println!(
            "  whole step, one set of buffers, launched one by one between events (as `--tp N` times its ranks): {:.2} µs median (min {:.2}, max {:.2})",
            t.median_us, t.min_us, t.max_us
        );
        recs.push(json!({
            "file": src.name, "step": step.name, "kernel": "whole step", "timing": "events",
            "median_us": t.median_us, "min_us": t.min_us, "max_us": t.max_us,
        }));
        let g = gpu.time_graph(&all_calls[0], rounds, 5)?;
        println!(
            "  the same captured as one CUDA graph and replayed: {:.2} µs median (min {:.2}, max {:.2})",
            g.median_us, g.min_us, g.max_us
        );
        recs.push(json!({
            "file": src.name, "step": step.name, "kernel": "whole step", "timing": "graph",
            "median_us": g.median_us, "min_us": g.min_us, "max_us": g.max_us,
        }));
        if let Some(path) = plot_out {
            let path = per_step(path, &step.name, several);
            let floors: f64 = rows.iter().map(|r| r.floor_us).sum();
            let plot = BenchPlot {
                title: format!(
                    "{} on {}: {:.1} µs as one CUDA graph (floors {:.1} µs, {:.2}x)",
                    step.name,
                    props.name,
                    g.median_us,
                    floors,
                    g.median_us / floors
                ),
                rows,
            };
            crate::paths::create_parent(&path)?;
            crate::plot::draw(&plot, &path)?;
            println!("  plotted {}", path.display());
        }
    }
    if let Some(path) = json_out {
        crate::paths::write_file("--json", path, serde_json::to_string_pretty(&recs)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
