//! `tessel check`: every step's outputs judged against the references — the executor
//! against the dtype-following reference, and the GPU against the executor bit for bit
//! (or against the reference, where tensor cores run).

use crate::cpu::execute;
use crate::device;
use crate::frontend::{
    bound_dims, compile_step, config, load, options, step_params, target_for, Step,
};
use crate::inputs::make_inputs;
use crate::{CompileArgs, InputArgs, ReproArgs};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessel_driver::words::plural;
use tessel_driver::Weights;
use tessel_passes::check as check_pass;
use tessel_ref::judge::GpuJudgement;

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

/// `tessel check`. Returns false if any check failed.
pub fn check(
    files: &[PathBuf],
    args: &CompileArgs,
    in_args: &InputArgs,
    cpu: bool,
    fail_on_skip: bool,
    json_out: Option<&Path>,
    repro: &ReproArgs,
) -> Result<bool> {
    if let Some(n) = args.tp {
        bail!("--tp {n}: `check` judges the step as written; `tessel tp-check` runs its tensor-parallel ranks at several world sizes and compares their bits");
    }
    let mut files = files.to_vec();
    let every_example = files.is_empty();
    if every_example {
        tsl_files(Path::new("examples"), &mut files)?;
    }
    // Usage errors stop here, before anything is judged: they are no verdict on a program.
    let dims = bound_dims(args)?;
    for f in &files {
        if !f.is_file() {
            bail!("cannot read {}: no such file", f.display());
        }
    }
    let weights = Weights::open(&in_args.spec())?;
    let sources: Vec<_> = files.iter().map(|f| (f, load(f))).collect();
    if let Some(step) = &args.step {
        let has = |src: &crate::frontend::Source| check_pass::steps(&src.module).contains(step);
        if !sources.iter().any(|(_, s)| s.as_ref().is_ok_and(has)) {
            bail!("--step {step}: no step of that name in the files checked");
        }
    }
    let gpu = device::gpu_unless(cpu);
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
        Err(why) => println!("no GPU ({why}): judging the executor by the reference only"),
    }
    let (target, from) = target_for(args, gpu.as_ref().ok());
    println!(
        "target: {} ({}, from {from})",
        target.name,
        target.ptx_target()
    );
    let opts = options(&target, args);
    let config = config(args, &opts)?;
    let mut ok = true;
    let mut records = Vec::new();
    // Steps given a verdict (PASS or FAIL), and those skipped, by why.
    let mut judged = 0;
    let mut skips = Skips::default();
    // A file or step that fails to compile or run is a failure of the check, reported, and
    // the remaining ones are still checked, each step on its own.
    for (f, src) in sources {
        let src = match src {
            Ok(s) => s,
            Err(e) => {
                println!("{}: FAIL: {e:#}", f.display());
                ok = false;
                continue;
            }
        };
        let names = check_pass::steps(&src.module);
        let names: Vec<String> = match &args.step {
            Some(s) => names.into_iter().filter(|n| n == s).collect(),
            None => names,
        };
        if names.is_empty() && args.step.is_none() {
            // Over the default list a file of fns and consts alone is a library, checked
            // where it is imported; a file named explicitly must have a step.
            if every_example && src.module.funcs().next().is_some() {
                println!(
                    "{}: SKIPPED — no step: a library, checked in the files that import it",
                    f.display()
                );
                records.push(json!({
                    "file": f.display().to_string(), "skipped": true, "library": true,
                }));
                skips.libraries += 1;
            } else {
                println!("{}: FAIL: it has no `step` to check", f.display());
                ok = false;
            }
        }
        crate::inputs::note_unused(in_args, &step_params(&src, &names));
        for name in names {
            let step = match compile_step(&src, &name, &dims, args.profile, &opts, &weights) {
                Ok(s) => s,
                Err(e) => {
                    // Over the default list, an example needing dims the command line did
                    // not give is not checked (and says so); a file named explicitly must
                    // compile.
                    if let Some(tessel_driver::Error::UnboundDims(u)) =
                        e.downcast_ref::<tessel_driver::Error>()
                    {
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
                            skips.needs_dims += 1;
                            continue;
                        }
                    }
                    println!("{} step {name}: FAIL: {e:#}", f.display());
                    ok = false;
                    judged += 1;
                    continue;
                }
            };
            let result = check_step(&src.name, &step, in_args, gpu.as_ref().ok());
            // A failure leaves a reproducer bundle; a step skipped or passed does not.
            let failure = match &result {
                Ok((recs, false)) => Some(failed_outputs(recs)),
                Ok(_) => None,
                Err(e) => Some(format!("{e:#}")),
            };
            match result {
                Ok(r) => {
                    ok &= r.1;
                    match r.0.first().and_then(|rec| rec["skip_reason"].as_str()) {
                        Some("multiply_adds") => skips.too_slow += 1,
                        Some(_) => skips.too_large += 1,
                        None => judged += 1,
                    }
                    records.extend(r.0);
                }
                Err(e) => {
                    println!("{} step {}: FAIL: {e:#}", src.name, step.name);
                    ok = false;
                    judged += 1;
                }
            }
            if let Some(what) = failure {
                repro.write(&src, &step, &config, in_args, what);
            }
        }
    }
    if let Some(path) = json_out {
        crate::paths::write_file("--json", path, serde_json::to_string_pretty(&records)?)?;
        println!("wrote {}", path.display());
    }
    let skipped = skips.total();
    let refused = fail_on_skip && skipped > 0;
    let verdict = match (ok && !refused, judged) {
        (false, _) => "FAIL",
        (true, 0) => "nothing judged",
        (true, _) => "PASS",
    };
    let mut line = format!("check: {verdict}: {} judged", plural(judged, "step"));
    if skipped > 0 {
        line += &format!(", {skipped} skipped ({})", skips.why());
    }
    if skips.libraries > 0 {
        line += &format!(
            "; {} of fns alone, checked where imported",
            plural(skips.libraries, "library file")
        );
    }
    if refused {
        line += "; --fail-on-skip makes a skipped step a failure";
    } else if skipped > 0 {
        line += "; --fail-on-skip makes a skip fail";
    }
    println!("{line}");
    Ok(ok && !refused)
}

/// What failed, from `check_step`'s records: each output that failed and how.
fn failed_outputs(recs: &[serde_json::Value]) -> String {
    let failed: Vec<String> = recs
        .iter()
        .filter(|r| r["pass"] == json!(false) || r["gpu_bit_differences"].as_u64() > Some(0))
        .map(|r| r.to_string())
        .collect();
    format!("check: outputs that failed:\n{}", failed.join("\n"))
}

/// How many steps `check` skipped, by why.
#[derive(Default)]
struct Skips {
    /// Over the default list, steps with dims the command line does not bind.
    needs_dims: usize,
    /// Too many multiply-adds for the CPU references.
    too_slow: usize,
    /// Too large for the memory the CPU references have.
    too_large: usize,
    /// Files of `fn`s and `const`s alone (not steps; not counted in [`Skips::total`]).
    libraries: usize,
}

impl Skips {
    fn total(&self) -> usize {
        self.needs_dims + self.too_slow + self.too_large
    }

    /// "11 need --dim, 2 too many multiply-adds for the CPU references".
    fn why(&self) -> String {
        let mut why = Vec::new();
        if self.needs_dims > 0 {
            why.push(format!(
                "{} {} --dim",
                self.needs_dims,
                if self.needs_dims == 1 {
                    "needs"
                } else {
                    "need"
                }
            ));
        }
        if self.too_slow > 0 {
            why.push(format!(
                "{} too many multiply-adds for the CPU references",
                self.too_slow
            ));
        }
        if self.too_large > 0 {
            why.push(format!(
                "{} too large for the memory of the CPU references",
                self.too_large
            ));
        }
        why.join(", ")
    }
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
    let fmas = step.compiled.matmul_fmas();
    if fmas > MAX_REFERENCE_FMAS {
        println!(
            "{file} step {}: SKIPPED — {:.0} G multiply-adds, too many for the CPU references (limit {} G); check it at smaller dims",
            step.name,
            fmas as f64 / 1e9,
            MAX_REFERENCE_FMAS / 1_000_000_000
        );
        return Ok((
            vec![
                json!({"file": file, "step": step.name, "skipped": true, "skip_reason": "multiply_adds", "fmas": fmas}),
            ],
            true,
        ));
    }
    // The references hold every live value as bounds (32 bytes an element) beside the
    // executor's buffers: a step that cannot fit is skipped with the numbers, not killed.
    if let (Some(need), Some(have)) = (reference_bytes(step), crate::memory::available_host_bytes())
    {
        if need > have {
            println!(
                "{file} step {}: SKIPPED — the CPU references need about {:.1} GB, {:.1} GB of memory is available; check it at smaller dims",
                step.name,
                need as f64 / 1e9,
                have as f64 / 1e9
            );
            return Ok((
                vec![
                    json!({"file": file, "step": step.name, "skipped": true, "skip_reason": "memory", "bytes_needed": need}),
                ],
                true,
            ));
        }
    }
    let inputs = make_inputs(p, in_args, &step.weights)?;
    let t0 = Instant::now();
    let mut exec = execute(p, &inputs, &format!("{file}:{} executor", step.name))?;
    if crate::repro::injected() == Some(crate::repro::Injected::Mismatch) {
        // A wrong answer made on purpose (tests of the failure path): every bit of the
        // first element of the first output flipped.
        if let Some(b) = exec.first_mut().map(|t| &mut t.data) {
            let n = (p.buffers[p.outputs[0].1].ty.dtype.size_bytes() as usize).min(b.len());
            b[..n].iter_mut().for_each(|x| *x = !*x);
        }
    }
    let exec_s = t0.elapsed().as_secs_f64();
    let gpu_runs = match gpu {
        Some(g) => Some(device::run_checked_and_graph(
            g,
            p,
            &step.compiled.ptx,
            &inputs,
        )?),
        None => None,
    };
    let gpu_out = gpu_runs.as_ref().map(|r| r.checked.as_slice());
    let judged = tessel_ref::judge::judge_step(&step.checked, p, &inputs, &exec, gpu_out)
        .with_context(|| format!("judging step `{}`", step.name))?;
    // The run as one CUDA graph (kernels overlapping through programmatic launches)
    // against the checked run: the same program on the same inputs, so the same bits.
    let graph_diffs = match &gpu_runs {
        Some(r) => Some(
            r.graph_diffs()
                .with_context(|| format!("comparing the GPU's two runs of `{}`", step.name))?,
        ),
        None => None,
    };
    let mma = p.tensor_cores().mma;
    println!(
        "{file} step {} ({}; executor {exec_s:.1} s{})",
        step.name,
        plural(p.kernels.len(), "kernel"),
        if mma && gpu_out.is_some() {
            "; tensor cores: the GPU is judged by the reference, not by the executor's bits"
        } else {
            ""
        }
    );
    let mut ok = true;
    let mut recs = Vec::new();
    for (o, (j, e)) in judged.iter().zip(&exec).enumerate() {
        let v = &j.executor;
        let graph_diff = graph_diffs.as_ref().map(|d| &d[o]);
        let pass = j.pass() && graph_diff.is_none_or(|d| d.identical());
        let mut line = format!(
            "  {} {}: {} — {v}; f64 oracle rel-RMS {:.3e}",
            j.name,
            e.ty,
            if pass { "PASS" } else { "FAIL" },
            j.oracle.rel_rms
        );
        if j.oracle.nan_mismatch > 0 {
            // rel-RMS leaves such elements out: say how many there are.
            line += &format!(
                " over the elements where neither is NaN ({} NaN on one side only)",
                j.oracle.nan_mismatch
            );
        }
        let mut rec = json!({
            "file": file, "step": step.name, "output": j.name, "type": e.ty.to_string(),
            "pass": pass, "outside_bound": v.outside, "differ_from_reference": v.differ,
            "max_ulp_from_reference": v.max_ulp, "bound_ulp": v.max_allowed_ulp,
            "bound_fraction_used": v.max_bound_used,
            "oracle_rel_rms": j.oracle.rel_rms, "oracle_max_abs": j.oracle.max_abs,
        });
        match &j.gpu {
            Some(GpuJudgement::Bits(d)) => {
                rec["gpu_bit_differences"] = json!(d.differing_elements);
                if d.identical() {
                    line += "; GPU == executor bit for bit";
                } else {
                    line += &format!("; GPU differs from the executor: {d}");
                }
            }
            Some(GpuJudgement::Reference(g, d)) => {
                rec["gpu_bit_differences"] = json!(d.differing_elements);
                rec["gpu_outside_bound"] = json!(g.outside);
                rec["gpu_max_ulp_from_reference"] = json!(g.max_ulp);
                rec["gpu_bound_fraction_used"] = json!(g.max_bound_used);
                line += &format!(
                    "; GPU: {g} ({} elements differ from the executor)",
                    d.differing_elements
                );
            }
            None => {}
        }
        if let Some(d) = graph_diff {
            rec["gpu_graph_bit_differences"] = json!(d.differing_elements);
            line += &if d.identical() {
                "; one CUDA graph == checked run bit for bit".to_owned()
            } else {
                format!("; one CUDA graph differs from the checked run: {d}")
            };
        }
        ok &= pass;
        println!("{line}");
        recs.push(rec);
    }
    Ok((recs, ok))
}

/// About how many bytes the CPU references need for `step`: every buffer of the executor,
/// and for the reference's walk the largest value three times over (an op's operands and
/// result live at once) at 32 bytes an element, besides the inputs at 32 bytes.
fn reference_bytes(step: &Step) -> Option<u64> {
    let g = &step.checked;
    let largest = g.ops.keys().map(|v| g.ty(v).shape.numel()).max()?;
    let inputs: u64 = g.inputs.iter().map(|(_, v)| g.ty(*v).shape.numel()).sum();
    let buffers = crate::memory::buffer_bytes(&step.compiled.program);
    Some(buffers + 32 * (3 * largest + inputs))
}

/// Multiply-adds beyond which the CPU references (executor and oracle) are not run: about
/// a minute of executor time on 16 cores.
const MAX_REFERENCE_FMAS: u64 = 20_000_000_000;
