//! `tessel tp-check`: a step's outputs must not depend on the number of tensor-parallel
//! ranks (issue 10; the `exact` and `invariant` profiles): the ranks themselves run at
//! every world size of `--sizes` on one set of inputs — on GPUs over NCCL, on one GPU in
//! turn when there are fewer GPUs than ranks, or on the CPU executor — and every output
//! compared bit for bit with the first size's on the same device.

use crate::device::open_gpu;
use crate::frontend::{compile_steps, load, options, target_for, Step};
use crate::inputs::make_inputs;
use crate::ranks::{self, Transport};
use crate::{CompileArgs, InputArgs, WeightArgs};
use anyhow::{bail, Result};
use std::path::Path;
use tessel_driver::Weights;
use tessel_ref::Tensor;

/// `tessel tp-check`. Returns false if any output differs.
pub fn tp_check(
    file: &Path,
    args: &CompileArgs,
    sizes: &[u32],
    seeds: u64,
    weight_args: &WeightArgs,
    cpu: bool,
) -> Result<bool> {
    if seeds == 0 {
        bail!("--seeds 0: at least one random input set is needed");
    }
    if sizes.len() < 2 {
        bail!("--sizes needs at least two world sizes: the first is the reference the others are compared with");
    }
    for (i, n) in sizes.iter().enumerate() {
        if sizes[..i].contains(n) {
            bail!("--sizes lists {n} twice: each world size is compared with the first once");
        }
    }
    if args.tp.is_some() {
        bail!("--tp with tp-check: the world sizes are --sizes");
    }
    if args.profile == tessel_passes::Profile::Fast {
        println!(
            "note: the fast profile does not promise the same bits at every world size (its tensor-core GEMV splits K by the columns a rank holds; docs/tensor-parallel.md)"
        );
    }
    let src = load(file)?;
    let input_args = |seed| InputArgs {
        inputs: None,
        seed,
        fills: vec![],
        allow_random: false,
        weights: weight_args.clone(),
    };
    let weights = Weights::open(&input_args(0).spec())?;
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
    let (target, _) = target_for(args, gpu.as_ref());
    let at: Vec<(u32, Vec<Step>)> = sizes
        .iter()
        .map(|&n| {
            let a = CompileArgs {
                tp: Some(n),
                ..args.clone()
            };
            compile_steps(&src, &a, &options(&target, &a), &weights).map(|s| (n, s))
        })
        .collect::<Result<_>>()?;
    let mut ok = true;
    for (si, step) in at[0].1.iter().enumerate() {
        let written = &step.compiled.program;
        println!(
            "{} step {} ({} profile, {}): outputs at --tp {:?} against --tp {}",
            src.name,
            step.name,
            args.profile.name(),
            if gpu.is_some() { "GPU" } else { "executor" },
            sizes,
            sizes[0]
        );
        // Each size's rank programs, taken once for every seed.
        let programs: Vec<(u32, Vec<_>)> = at
            .iter()
            .map(|(n, steps)| (*n, steps[si].rank_programs().expect("compiled with --tp")))
            .collect();
        let place = match &gpu {
            Some(g) => crate::memory::Place::Gpu(g),
            None => crate::memory::Place::Executor,
        };
        for (_, rs) in &programs {
            crate::memory::ensure_fits(&step.name, written, Some(rs), &place, &args.dims)?;
        }
        for seed in 0..seeds {
            // The step as written takes the whole inputs, in parameter order.
            let inputs = make_inputs(written, &input_args(seed), &step.weights)?;
            let mut want: Option<Vec<Tensor>> = None;
            for (n, rs) in &programs {
                let (got, how) = match &gpu {
                    Some(_) => {
                        let (t, how) = Transport::choose(*n);
                        (ranks::run(rs, &step.compiled.ptx, &inputs, t, None)?.0, how)
                    }
                    None => (
                        tessel_ref::ranks::run_ranks(rs, &inputs)?,
                        "executor, host copies".to_string(),
                    ),
                };
                let Some(want) = &want else {
                    println!(
                        "  seed {seed} --tp {n} ({how}): {}, the reference",
                        describe(&got)
                    );
                    want = Some(got);
                    continue;
                };
                let differ: Vec<&str> = written
                    .outputs
                    .iter()
                    .zip(got.iter().zip(want))
                    .filter(|(_, (a, b))| a.data != b.data)
                    .map(|((name, _), _)| name.as_str())
                    .collect();
                if differ.is_empty() {
                    println!(
                        "  seed {seed} --tp {n} ({how}): {} bit-identical",
                        describe(want)
                    );
                } else {
                    ok = false;
                    println!(
                        "  FAIL: seed {seed} --tp {n} ({how}): {} differ{}",
                        differ.join(", "),
                        if differ.len() == 1 { "s" } else { "" }
                    );
                }
            }
        }
    }
    println!("tp-check: {}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}

fn describe(outs: &[Tensor]) -> String {
    let bytes: usize = outs.iter().map(|t| t.data.len()).sum();
    format!(
        "{} ({bytes} bytes)",
        tessel_driver::words::plural(outs.len(), "output")
    )
}
