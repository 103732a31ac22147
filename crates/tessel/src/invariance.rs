//! `tessel invariance`: a step's rows must not depend on the batch (design §5, the
//! `invariant` profile): every row of every tensor it writes, computed at several batch
//! sizes from rows of one set of inputs, compared bit for bit with the largest batch.

use crate::cpu::execute;
use crate::device::{self, open_gpu};
use crate::frontend::{compile_steps, load, options, target_for, Step};
use crate::inputs::make_inputs;
use crate::weights::Weights;
use crate::{CompileArgs, InputArgs, WeightArgs};
use anyhow::{bail, Result};
use std::path::Path;
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ref::Tensor;

/// `tessel invariance`: a step's rows must not depend on the batch (design §5, the
/// `invariant` profile). Returns false if any row differs.
pub fn invariance(
    file: &Path,
    args: &CompileArgs,
    batch_dim: &str,
    sizes: &[u64],
    seeds: u64,
    weight_args: &WeightArgs,
    cpu: bool,
) -> Result<bool> {
    if let Some(n) = args.tp {
        bail!("--tp {n}: `invariance` checks the step as written; `tessel tp-check` checks its tensor-parallel ranks");
    }
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
    // Random inputs for every seed, but one set of weights: `--weights` as `run` reads them.
    let input_args = |seed| InputArgs {
        inputs: None,
        seed,
        fills: vec![],
        allow_random: false,
        weights: weight_args.clone(),
    };
    let weights = Weights::from_args(&input_args(0))?;
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
    let (target, _) = target_for(args, gpu.as_ref());
    let compile_at = |m: u64| -> Result<Vec<Step>> {
        let mut a = args.clone();
        a.dims.retain(|(n, _)| n != batch_dim);
        a.dims.push((batch_dim.to_string(), m));
        compile_steps(&src, &a, &options(&target), &weights)
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
        let p = step.compiled.with_intermediates();
        // Batched tensors: those whose first dim is the batch at every size.
        let q = prev[si].compiled.with_intermediates();
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
        // Outputs and intermediates by name: a size may write other intermediates (a value
        // fused into a kernel at one size is written at another), and position would pair
        // different tensors. A tensor missing at a size is not compared there.
        let index_of =
            |prog: &Program, name: &str| prog.outputs.iter().position(|(n, _)| n == name);
        let out_batched: Vec<bool> = p
            .outputs
            .iter()
            .map(|(n, b)| index_of(&q, n).is_some_and(|j| batched(&p, &q, *b, q.outputs[j].1)))
            .collect();
        // Step outputs by name; intermediates (`t<N>`, see `Compiled::with_intermediates`) apart.
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
            .map(|(m, steps)| (*m, steps[si].compiled.with_intermediates()))
            .collect();
        let mut step_ok = true;
        for seed in 0..seeds {
            let inputs = make_inputs(&p, &input_args(seed), &step.weights)?;
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
                        let Some(j) = index_of(pm, &p.outputs[i].0).filter(|_| bt) else {
                            continue;
                        };
                        if got[j].data != rows_of(&want[i], r0, m).data {
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
