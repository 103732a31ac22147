//! `tessel invariance`: a step's rows must not depend on the batch (design §5, the
//! `invariant` profile): every row of every tensor it writes, computed at several batch
//! sizes from rows of one set of inputs, compared bit for bit with the largest batch.
//!
//! Each size is compiled on its own, so its graph values (and the `t<N>` intermediates named
//! after them) are numbered differently: a broadcast that is the identity at one size is
//! not there at all. Tensors are paired by what they compute instead ([`Keys`]): an output
//! by its name, an intermediate by the structure of the ops that compute it from the step's
//! inputs. An intermediate one size does not write has no partner there, and says so.

use crate::cpu::execute;
use crate::device::{self, open_gpu};
use crate::frontend::{compile_steps, load, options, target_for, Step};
use crate::inputs::make_inputs;
use crate::memory::{ensure_fits, Place};
use crate::{CompileArgs, InputArgs, WeightArgs};
use anyhow::{bail, Result};
use std::collections::HashMap;
use std::path::Path;
use tessel_driver::Weights;
use tessel_ir::graph::{Graph, Op};
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::{BufferId, Value};
use tessel_passes::Compiled;
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
    let weights = Weights::open(&input_args(0).spec())?;
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
        compile_steps(&src, &a, &options(&target, &a), &weights)
    };
    // Every size is compiled for `target`, so every program's PTX header is this one.
    let ptx = target.ptx_header();
    let run = |p: &Program, inputs: &[Tensor]| -> Result<Vec<Tensor>> {
        match &gpu {
            Some(g) => Ok(device::run_once(g, p, &ptx, inputs)?),
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
    let mut keys = Keys::default();
    for (si, step) in compile_at(full)?.into_iter().enumerate() {
        let p = step.compiled.with_intermediates();
        let place = match &gpu {
            Some(g) => Place::Gpu(g),
            None => Place::Executor,
        };
        let mut dims = args.dims.clone();
        dims.retain(|(n, _)| n != batch_dim);
        dims.push((batch_dim.to_string(), full));
        ensure_fits(&step.name, &p, None, &place, &dims)?;
        let written = keys.written(&step.compiled, &p);
        // Batched tensors: those whose first dim is the batch at every size. One row fewer
        // tells them from a tensor whose first dim equals the batch by chance.
        let q = prev[si].compiled.with_intermediates();
        let at_prev = keys.written(&prev[si].compiled, &q);
        let first_dim = |prog: &Program, b: tessel_ir::BufferId| -> Option<u64> {
            prog.buffers[b].ty.shape.0.first().copied()
        };
        let batched_input: Vec<bool> = p
            .inputs
            .iter()
            .zip(&q.inputs)
            .map(|((_, b), (_, qb))| {
                first_dim(&p, *b) == Some(full) && first_dim(&q, *qb) == Some(full.max(2) - 1)
            })
            .collect();
        // The tensors compared: every output and intermediate whose first dim is the batch
        // here and whose partner (the same key) one row fewer has one row fewer.
        let batched: Vec<&Written> = written
            .iter()
            .filter(|w| {
                first_dim(&p, w.buffer) == Some(full)
                    && find(&at_prev, &w.key)
                        .is_some_and(|o| first_dim(&q, o.buffer) == Some(full.max(2) - 1))
            })
            .collect();
        for w in &written {
            if first_dim(&p, w.buffer) == Some(full) && find(&at_prev, &w.key).is_none() {
                println!(
                    "  note: {} `{}` ({}) of step {} is not compared: {batch_dim} = {}, compiled \
                     to tell batched tensors from others, does not write it",
                    w.kind(),
                    w.name,
                    p.buffers[w.buffer].ty,
                    step.name,
                    full.max(2) - 1
                );
            }
        }
        let names = |temp: bool| -> Vec<&str> {
            batched
                .iter()
                .filter(|w| w.temp == temp)
                .map(|w| w.name.as_str())
                .collect()
        };
        let (outs, temps) = (names(false), names(true));
        if batched.is_empty() {
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
                 value vN at {batch_dim} = {full}: see `tessel explain`; at another size the \
                 same tensor may have another N, and is found by what it computes)"
            );
        }
        compared += 1;
        let steps_at: Vec<(u64, Program, Vec<Written>)> = others
            .iter()
            .map(|(m, steps)| {
                let pm = steps[si].compiled.with_intermediates();
                let w = keys.written(&steps[si].compiled, &pm);
                (*m, pm, w)
            })
            .collect();
        // Each compared tensor's partner at every size, or why there is none: said once.
        let mut partners: Vec<Vec<Option<usize>>> = Vec::new();
        for (m, pm, wm) in &steps_at {
            let mut at_m = Vec::new();
            for w in &batched {
                let partner = find(wm, &w.key);
                let ok_rows = partner.is_some_and(|o| first_dim(pm, o.buffer) == Some(*m));
                if !ok_rows {
                    let why = match partner {
                        None if w.temp => format!(
                            "{batch_dim} = {m} does not write it (computed inside a kernel \
                             there, or not at all)"
                        ),
                        None => format!("{batch_dim} = {m} has no output of that name"),
                        Some(o) => format!(
                            "its partner `{}` at {batch_dim} = {m} is {}, not {m} rows",
                            o.name, pm.buffers[o.buffer].ty
                        ),
                    };
                    println!(
                        "  note: {} `{}` ({}) has no partner at {batch_dim} = {m}: {why}; not \
                         compared there",
                        w.kind(),
                        w.name,
                        p.buffers[w.buffer].ty
                    );
                }
                at_m.push(partner.filter(|_| ok_rows).map(|o| o.output));
            }
            partners.push(at_m);
        }
        let mut step_ok = true;
        for seed in 0..seeds {
            let inputs = make_inputs(&p, &input_args(seed), &step.weights)?;
            let want = run(&p, &inputs)?;
            for ((m, pm, wm), at_m) in steps_at.iter().zip(&partners) {
                let m = *m;
                let mut starts = vec![0, full - m, (full - m) / 3];
                starts.dedup();
                for r0 in starts {
                    let sliced: Vec<Tensor> = inputs
                        .iter()
                        .zip(&batched_input)
                        .map(|(t, &bt)| if bt { rows_of(t, r0, m) } else { t.clone() })
                        .collect();
                    let got = run(pm, &sliced)?;
                    for (w, j) in batched.iter().zip(at_m) {
                        let Some(j) = *j else { continue };
                        if got[j].data != rows_of(&want[w.output], r0, m).data {
                            step_ok = false;
                            let there = &wm.iter().find(|o| o.output == j).expect("a partner").name;
                            let also = if there != &w.name {
                                format!(" (`{there}` at {batch_dim} = {m})")
                            } else {
                                String::new()
                            };
                            println!(
                                "  FAIL: seed {seed}: {} `{}`{also} rows {r0}..{} differ between {batch_dim} = {m} and {batch_dim} = {full}",
                                w.kind(),
                                w.name,
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

/// A tensor a compiled step writes (an output, or an intermediate of
/// [`Compiled::with_intermediates`]) and what it computes.
struct Written {
    /// Its position in the program's outputs.
    output: usize,
    name: String,
    buffer: BufferId,
    temp: bool,
    key: Key,
}

impl Written {
    fn kind(&self) -> &'static str {
        if self.temp {
            "intermediate"
        } else {
            "output"
        }
    }
}

/// What a written tensor is, the same at every batch size: an output's name; for an
/// intermediate, the structure of its computation ([`Keys::of`]) and, when two intermediates
/// of one program compute alike, which of them in program order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Key {
    Output(String),
    Temp { structure: u32, nth: usize },
}

fn find<'w>(written: &'w [Written], key: &Key) -> Option<&'w Written> {
    written.iter().find(|w| &w.key == key)
}

/// Structural keys of graph values, hash-consed: one number per distinct computation, the
/// same for every graph keyed through one `Keys`, so values of programs compiled at
/// different batch sizes compare by number. A value's key is its op with every attribute
/// (`Debug` of the op with its operands blanked: the axis of a reduction, a permutation, a
/// constant's value, an input's index), its dtype, its dims after the first (the first is
/// the batch, or not), and its operands' keys. Reshapes and broadcasts are shape changes
/// only: a chain of them keys as one view of the value under it, so a broadcast the check
/// pass leaves out where it is the identity (`[1, 16]` at a batch of 1) does not change
/// the key of anything computed from it.
#[derive(Default)]
struct Keys {
    ids: HashMap<(String, Vec<u32>), u32>,
}

impl Keys {
    /// The key of every value of `g`.
    fn of(&mut self, g: &Graph) -> HashMap<Value, u32> {
        let mut key: HashMap<Value, u32> = HashMap::new();
        // The value under a chain of views.
        let mut base: HashMap<Value, Value> = HashMap::new();
        for (v, op) in g.ops.iter() {
            let ty = g.ty(v);
            let dims = ty.shape.0.get(1..).unwrap_or(&[]);
            let (tag, args) = match op {
                Op::Reshape { arg } | Op::Broadcast { arg } => {
                    let under = base.get(arg).copied().unwrap_or(*arg);
                    base.insert(v, under);
                    (format!("view {} {dims:?}", ty.dtype), vec![key[&under]])
                }
                _ => {
                    let mut blank = op.clone();
                    for a in blank.args_mut() {
                        *a = Value::from_u32(0);
                    }
                    let args = op.args().iter().map(|a| key[a]).collect();
                    (format!("{blank:?} {} {dims:?}", ty.dtype), args)
                }
            };
            let next = self.ids.len() as u32;
            key.insert(v, *self.ids.entry((tag, args)).or_insert(next));
        }
        key
    }

    /// The tensors `p` (`c.with_intermediates()`) writes, keyed.
    fn written(&mut self, c: &Compiled, p: &Program) -> Vec<Written> {
        let key = self.of(&c.graph);
        let value_of: HashMap<BufferId, Value> =
            c.buffer_of.iter().map(|(v, b)| (*b, *v)).collect();
        let mut seen: HashMap<u32, usize> = HashMap::new();
        p.outputs
            .iter()
            .enumerate()
            .filter_map(|(i, (name, b))| {
                let temp = p.buffers[*b].role == BufferRole::Temp;
                let key = if temp {
                    let structure = key[value_of.get(b)?];
                    let nth = seen.entry(structure).or_default();
                    *nth += 1;
                    Key::Temp {
                        structure,
                        nth: *nth - 1,
                    }
                } else {
                    Key::Output(name.clone())
                };
                Some(Written {
                    output: i,
                    name: name.clone(),
                    buffer: *b,
                    temp,
                    key,
                })
            })
            .collect()
    }
}
