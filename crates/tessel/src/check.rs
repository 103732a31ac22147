//! `tessel check`: every step's outputs judged against the references — the executor
//! against the dtype-following reference, and the GPU against the executor bit for bit
//! (or against the reference, where tensor cores run).

use crate::commands::{execute, options};
use crate::device::{self, open_gpu};
use crate::frontend::{compile_steps, load, Step};
use crate::inputs::make_inputs;
use crate::{CompileArgs, InputArgs};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessel_ir::DType;
/// Every `.tsl` under `dir`, sorted.
fn tsl_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            tsl_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "tsl") {
            out.push(p);
        }
    }
    Ok(())
}

/// The f32 rel-RMS bound of the numerics contract (design §5).
const F32_REL_RMS: f64 = 1e-6;
/// The bound for bf16/f16 outputs: rel-RMS within the 16-bit unit roundoff 2^-8 (bf16), the
/// size of a few roundings of at most half an ulp each; the same as the CPU tests assert.
const HALF_REL_RMS: f64 = 1.0 / 256.0;
/// The bound for f32 outputs of a step whose matmuls run on TF32 tensor cores (the `fast`
/// profile): 2^-10, twice TF32's unit roundoff 2^-11 (10 stored fraction bits, NVIDIA
/// A100 whitepaper, "TF32"), since each product rounds both of its inputs.
const TF32_REL_RMS: f64 = 1.0 / 1024.0;

/// Whether the value `out` of `g` depends on a bf16/f16 value the step computes (not a step
/// input, whose values the oracle shares exactly): its rounding then bounds `out`'s error.
fn computes_16_bit(g: &tessel_ir::graph::Graph, out: tessel_ir::Value) -> bool {
    use tessel_ir::graph::Op;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![out];
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if matches!(g.ops[v], Op::Input { .. }) {
            continue;
        }
        if matches!(g.ty(v).dtype, DType::Bf16 | DType::F16) {
            return true;
        }
        stack.extend(g.ops[v].args());
    }
    false
}

/// `tessel check`. Returns false if any check failed.
pub fn check(
    files: &[PathBuf],
    args: &CompileArgs,
    in_args: &InputArgs,
    cpu: bool,
    json_out: Option<&Path>,
) -> Result<bool> {
    let mut files = files.to_vec();
    let every_example = files.is_empty();
    if every_example {
        tsl_files(Path::new("examples"), &mut files)?;
    }
    let gpu = if cpu {
        Err("--cpu given".to_string())
    } else {
        open_gpu()
    };
    match &gpu {
        Ok(g) => println!(
            "GPU: {} (sm_{}{}, {} SMs, driver CUDA {}.{})",
            g.properties().name,
            g.properties().compute_capability.0,
            g.properties().compute_capability.1,
            g.properties().sm_count,
            g.properties().driver_version.0,
            g.properties().driver_version.1
        ),
        Err(why) => println!("no GPU ({why}): checking the executor against the oracle only"),
    }
    let mut ok = true;
    let mut records = Vec::new();
    // A file or step that fails to compile or run is a failure of the check, reported, and
    // the remaining ones are still checked.
    for f in &files {
        let steps = load(f).and_then(|src| Ok((compile_steps(&src, args, &options())?, src)));
        let (steps, src) = match steps {
            Ok(x) => x,
            Err(e) => {
                // Over the default list, an example needing dims the command line did not
                // give is not checked (and says so); a file named explicitly must compile.
                if let Some(u) = e.downcast_ref::<crate::frontend::UnboundDims>() {
                    if every_example {
                        println!(
                            "{} step {}: SKIPPED — needs --dim {}",
                            f.display(),
                            u.step,
                            u.dims.join(", --dim ")
                        );
                        records.push(json!({
                            "file": f.display().to_string(), "step": u.step,
                            "skipped": true, "needs_dims": u.dims,
                        }));
                        continue;
                    }
                }
                println!("{}: FAIL: {e:#}", f.display());
                ok = false;
                continue;
            }
        };
        for step in steps {
            match check_step(&src.name, &step, in_args, gpu.as_ref().ok()) {
                Ok(r) => {
                    ok &= r.1;
                    records.extend(r.0);
                }
                Err(e) => {
                    println!("{} step {}: FAIL: {e:#}", src.name, step.name);
                    ok = false;
                }
            }
        }
    }
    if let Some(path) = json_out {
        std::fs::write(path, serde_json::to_string_pretty(&records)?)?;
        println!("wrote {}", path.display());
    }
    let skipped = records
        .iter()
        .filter(|r| r["skipped"] == json!(true))
        .count();
    let verdict = if ok { "PASS" } else { "FAIL" };
    if skipped > 0 {
        println!("check: {verdict} ({skipped} step(s) skipped, not checked)");
    } else {
        println!("check: {verdict}");
    }
    Ok(ok)
}

fn check_step(
    file: &str,
    step: &Step,
    in_args: &InputArgs,
    gpu: Option<&tessel_cuda::Gpu>,
) -> Result<(Vec<serde_json::Value>, bool)> {
    let p = &step.compiled.program;
    // The CPU references run the products one multiply-add at a time; a step far beyond
    // what they finish in minutes is reported as not checked rather than left running.
    let fmas = matmul_fmas(&step.compiled);
    if fmas > MAX_REFERENCE_FMAS {
        println!(
            "{file} step {}: SKIPPED — {:.0} G multiply-adds, too many for the CPU references (limit {} G); check it at smaller dims",
            step.name,
            fmas as f64 / 1e9,
            MAX_REFERENCE_FMAS / 1_000_000_000
        );
        return Ok((
            vec![json!({"file": file, "step": step.name, "skipped": true, "fmas": fmas})],
            true,
        ));
    }
    let inputs = make_inputs(p, in_args)?;
    let t0 = Instant::now();
    let exec = execute(p, &inputs, &format!("{file}:{} executor", step.name))?;
    let exec_s = t0.elapsed().as_secs_f64();
    let oracle = tessel_ref::eval_graph(&step.checked, &inputs)
        .with_context(|| format!("oracle for step `{}`", step.name))?;
    let gpu_out = match gpu {
        Some(g) => {
            let l = device::load(g, p, &inputs)?;
            l.run(g)?;
            Some(l.outputs()?)
        }
        None => None,
    };
    let mut ok = true;
    let mut recs = Vec::new();
    // Tensor cores accumulate in an order NVIDIA does not specify: their kernels are held to
    // the oracle bound on the GPU too, instead of to the executor's bits.
    let tessel_ir::kernel::TensorCoreUse { mma, tf32 } = p.tensor_cores();
    println!(
        "{file} step {} ({} kernels; executor {exec_s:.1} s{})",
        step.name,
        p.kernels.len(),
        match (mma, tf32) {
            (_, true) => "; TF32 tensor cores: f32 bound 2^-10, GPU checked against the oracle",
            (true, false) => "; tensor cores: GPU checked against the oracle",
            _ => "",
        }
    );
    for (i, (name, _)) in p.outputs.iter().enumerate() {
        let e = &exec[i];
        let stats = tessel_ref::error_stats(e, &oracle[i])
            .with_context(|| format!("comparing `{name}` with the oracle"))?;
        let mut line = format!(
            "  {name} {}: vs oracle rel-RMS {:.3e}, max abs {:.3e}, max {:.2} ulp",
            e.ty, stats.rel_rms, stats.max_abs, stats.max_ulp
        );
        let mut rec = json!({
            "file": file, "step": step.name, "output": name, "type": e.ty.to_string(),
            "oracle_rel_rms": stats.rel_rms, "oracle_max_abs": stats.max_abs,
            "oracle_max_ulp": stats.max_ulp,
        });
        // The oracle rounds nothing in between (tessel-ref's oracle docs), so an f32 output
        // computed through a 16-bit value (`f32(a @ b)` with bf16 a, b) carries that
        // value's rounding: it is held to the 16-bit bound.
        let through_16_bit = step
            .checked
            .outputs
            .get(i)
            .is_some_and(|&(_, v)| computes_16_bit(&step.checked, v));
        let bound = match e.ty.dtype {
            DType::F32 if through_16_bit => HALF_REL_RMS,
            DType::F32 if tf32 => TF32_REL_RMS,
            DType::F32 => F32_REL_RMS,
            DType::Bf16 | DType::F16 => HALF_REL_RMS,
            // Integers and bools have no rounding: they must equal the oracle exactly.
            DType::I32 | DType::Bool => 0.0,
        };
        if stats.rel_rms > bound || stats.nan_mismatch > 0 {
            ok = false;
            line += &format!(" — FAIL: above the {} bound {bound:e}", e.ty.dtype);
        }
        if let Some(go) = &gpu_out {
            let d = tessel_ref::bit_diff(&go[i], e)?;
            if mma {
                let g = tessel_ref::error_stats(&go[i], &oracle[i])
                    .with_context(|| format!("comparing the GPU's `{name}` with the oracle"))?;
                let exec_as_ref = tessel_ref::OracleTensor {
                    dtype: e.ty.dtype,
                    shape: e.ty.shape.0.clone(),
                    data: e.to_f64_vec(),
                };
                let vs_exec = tessel_ref::error_stats(&go[i], &exec_as_ref)
                    .with_context(|| format!("comparing the GPU's `{name}` with the executor"))?;
                line += &format!(
                    "; GPU vs oracle rel-RMS {:.3e} (vs executor {:.3e}, {} elements differ)",
                    g.rel_rms, vs_exec.rel_rms, d.differing_elements
                );
                rec["gpu_oracle_rel_rms"] = json!(g.rel_rms);
                rec["gpu_executor_rel_rms"] = json!(vs_exec.rel_rms);
                if g.rel_rms > bound || g.nan_mismatch > 0 {
                    ok = false;
                    line += &format!(" — FAIL: GPU above the {} bound {bound:e}", e.ty.dtype);
                }
            } else if d.differing_elements == 0 {
                line += "; GPU == executor bit for bit";
            } else {
                ok = false;
                line += &format!(
                    "; FAIL: GPU differs from the executor in {} of {} elements (first at {:?})",
                    d.differing_elements,
                    e.numel(),
                    d.first_index
                );
            }
            rec["gpu_bit_differences"] = json!(d.differing_elements);
        }
        println!("{line}");
        recs.push(rec);
    }
    Ok((recs, ok))
}

/// Multiply-adds beyond which the CPU references (executor and oracle) are not run: about
/// a minute of executor time on 16 cores.
const MAX_REFERENCE_FMAS: u64 = 20_000_000_000;

/// Σ batch·M·N·K over the step's matmuls.
fn matmul_fmas(c: &tessel_passes::Compiled) -> u64 {
    c.fusion
        .groups
        .values()
        .filter(|d| d.kind == tessel_ir::graph::GroupKind::Matmul)
        .map(|d| {
            let s = tessel_passes::schedule::matmul_shape(&c.graph, d.reductions[0]);
            s.batch * s.m * s.n * s.k
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::computes_16_bit;
    use std::collections::BTreeMap;

    /// The checked graph of `step` in `src`, dims bound to 4.
    fn graph(src: &str, step: &str) -> tessel_ir::graph::Graph {
        let module = tessel_syntax::parse(src).expect("parses");
        let dims: BTreeMap<String, u64> = [("M", 4), ("K", 4), ("N", 4)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        tessel_passes::check::run(&module, step, &dims).expect("checks")
    }

    #[test]
    fn an_f32_output_through_a_bf16_product_is_a_16_bit_path() {
        let src = "
            step through(a: bf16[M, K], b: bf16[K, N]) -> f32[M, N] { f32(a @ b) }
            step widened(a: bf16[M, K], b: bf16[K, N]) -> f32[M, N] { f32(a) @ f32(b) }
            step plain(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { a @ b }
        ";
        for (step, want) in [("through", true), ("widened", false), ("plain", false)] {
            let g = graph(src, step);
            let out = g.outputs[0].1;
            assert_eq!(computes_16_bit(&g, out), want, "step {step}");
        }
    }
}
