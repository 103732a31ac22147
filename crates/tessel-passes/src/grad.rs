//! `grad`: reverse-mode differentiation on the graph IR (design §13).
//!
//! Before: a graph from `check` (after `attention`), in which every `grad(f, .., wrt: [..])`
//! of the program is an [`Op::Grad`] placeholder per differentiated parameter: the gradient
//! of `Σ_i ⟨seeds[i], outputs[i]⟩` with respect to one value. After: no [`Op::Grad`]; each
//! is replaced by the backward graph that computes it, built from ordinary graph ops, and
//! every later pass (decompose, fuse, schedule, lower) treats it as the rest of the step.
//!
//! The algorithm is the textbook one (Griewank and Walther, "Evaluating Derivatives", 2008,
//! ch. 3; tinygrad's `gradient.py` is the model for the table): for each set of placeholders
//! sharing outputs and seeds, the *relevant* values are those on a path from one of the
//! differentiated values to an output, through float values only (an integer or boolean
//! value carries no gradient: a comparison, an index, a cast to `i32` cut the path). The
//! adjoint of each output is its seed; the ops are visited in reverse order, and each
//! relevant op's rule ([`Pass::vjp`], one arm per op) turns the adjoint of its result into
//! contributions to its relevant operands. A value with several uses sums its contributions
//! in the order they arrive (its uses from last to first), in its own dtype — a fixed
//! order, so two runs give the same bits. Nothing outside the relevant set gets an adjoint:
//! a parameter not listed in `wrt` costs no work.
//!
//! The gradient of a value has the value's type (a bf16 tensor's gradient is bf16, as in
//! PyTorch). Rules follow PyTorch's derivative formulas (`tools/autograd/derivatives.yaml`
//! and `FunctionsManual.cpp`) in their order of operations; the elementwise math rules
//! (sigmoid, silu, tanh, gelu, erf, ...) and softmax's compute in f32 from the operands'
//! values and round once to the dtype, as PyTorch's fused backward kernels do. The
//! derivatives of the libm-free functions are written with the same functions
//! (`exp`, `erf`, `tanh`, `sin`, `cos`), so they are expanded by the same math library.
//!
//! Where a naive rule gives NaN or infinity for a zero upstream gradient — the untaken arm
//! of a `where` (`where(x > 0, log(x), 0)` at `x = 0`), `exp` of a large argument, a
//! division by zero — the rules whose factor can be infinite (`exp`, `log`, `sqrt`,
//! `rsqrt`, `/`, `pow`, `fmod`) give 0 where the upstream gradient is 0: a zero
//! contribution stays zero whatever the factor ([`Pass::times`]). PyTorch gives NaN there.
//!
//! Ties and conventions: `max`/`min` reductions share the gradient equally among the
//! elements equal to the result (PyTorch's `amax`); elementwise `maximum`/`minimum` split it
//! half and half on equal operands; `abs` has gradient 0 at 0; `floor`, `ceil`, `round`,
//! `trunc` have gradient 0; a gather's gradient is a scatter-add of each index's gradient
//! into the position it read (after the gather's clamp), summed in index order; `topk`'s
//! values scatter theirs likewise; `cumsum`'s is the reversed cumulative sum.
//!
//! Matmuls: `a @ b` gives `da = g @ bᵀ` and `db = aᵀ @ g` in the matmul's dtype (f32
//! accumulation, rounded once). A matmul whose operands are both widening casts of 16-bit
//! tensors (`f32(x) @ f32(w)ᵀ`, which the kernels run as a 16-bit GEMM with an f32 result,
//! [`Graph::matmul_reads`]) has a 16-bit backward: the upstream gradient is rounded once to
//! the 16-bit dtype and each operand's gradient is the 16-bit GEMM of it, as the
//! mixed-precision LoRA kernels compute it (`dV = bf16(dY·α)`, `dU = dV·B`): one rounding of
//! the upstream gradient away from PyTorch's autograd of the same program, which would run
//! the backward GEMMs in f32.
//!
//! A fused attention ([`Op::Attention`]) is differentiated as the three ops it stands for,
//! by their rules in turn: `P = softmax(logits)` recomputed from the logits (their ops are
//! recomputed too: the fused forward never wrote them), `dV = bf16(P)ᵀ·dO`,
//! `dP = f32(bf16(dO·Vᵀ))` and `dlogits = P ∘ (dP − rowsum(dP ∘ P))` in f32, which then flows
//! through the logits' own ops (scale, mask, `q @ kᵀ`) by their rules — the same graph as
//! the program's own softmax and matmuls give, so the references judge it op for op. Keys a
//! row does not see have `P = 0` and get 0; a row that sees no key gets 0 everywhere. (A
//! fused backward kernel in FlashAttention-2's order, with `D = rowsum(dO ∘ O)`, is to
//! come; it will differ from this by roundings only.)

use std::collections::{HashMap, HashSet};

use tessel_ir::builder::{Builder, TypeError};
use tessel_ir::graph::{BinaryOp, Graph, Op, ReduceOp, UnaryOp, UpdateAt};
use tessel_ir::{DType, TensorType, Value};

/// Why the pass failed: a rule built an ill-typed op (a compiler bug; `check` guarantees
/// the placeholders it makes are differentiable), or a placeholder the pass cannot take.
#[derive(Debug, thiserror::Error)]
pub enum GradError {
    #[error("internal error: a gradient rule built an ill-typed op: {0}")]
    Type(#[from] TypeError),
    #[error("{0}")]
    Unsupported(String),
}

/// Runs the pass: every [`Op::Grad`] replaced by its backward graph, dead values removed.
/// A graph without placeholders is returned unchanged.
///
/// # Errors
/// See [`GradError`].
pub fn run(g: &Graph) -> Result<Graph, GradError> {
    if !g.ops.values().any(|op| matches!(op, Op::Grad { .. })) {
        return Ok(g.clone());
    }
    let mut p = Pass {
        g,
        out: Graph::new(g.name.clone()),
        map: HashMap::new(),
        own: crate::decompose::attention_logits(g),
        recomputed: HashMap::new(),
    };
    // The placeholders of one (outputs, seeds) pair share one backward: their `wrt`s, in
    // op order.
    type Key = (Vec<Value>, Vec<Value>);
    let mut wrts_of: HashMap<Key, Vec<Value>> = HashMap::new();
    for op in g.ops.values() {
        if let Op::Grad {
            wrt,
            outputs,
            seeds,
        } = op
        {
            wrts_of
                .entry((outputs.clone(), seeds.clone()))
                .or_default()
                .push(*wrt);
        }
    }
    let mut done: HashMap<Key, HashMap<Value, Value>> = HashMap::new();
    for (v, op) in g.ops.iter() {
        let nv = match op {
            Op::Grad {
                wrt,
                outputs,
                seeds,
            } => {
                let key = (outputs.clone(), seeds.clone());
                if !done.contains_key(&key) {
                    let grads = p.backward(&wrts_of[&key], outputs, seeds)?;
                    done.insert(key.clone(), grads);
                }
                done[&key][wrt]
            }
            _ => {
                let mut new = op.clone();
                for a in new.args_mut() {
                    *a = p.map[a];
                }
                p.out.push(new, g.ty(v).clone())
            }
        };
        p.map.insert(v, nv);
    }
    p.out.inputs = g
        .inputs
        .iter()
        .map(|(n, v)| (n.clone(), p.map[v]))
        .collect();
    p.out.outputs = g
        .outputs
        .iter()
        .map(|(n, v)| (n.clone(), p.map[v]))
        .collect();
    Ok(crate::check::remove_dead(&p.out))
}

struct Pass<'g> {
    g: &'g Graph,
    out: Graph,
    /// Forward value → its value in `out`.
    map: HashMap<Value, Value>,
    /// The values a fused attention computes itself (its logits and their ops): a rule
    /// that needs one reads a recomputed copy, never the value the attention owns.
    own: HashSet<Value>,
    recomputed: HashMap<Value, Value>,
}

/// The values of `g` on a path from one of `from` to one of `to` through values `keep`
/// accepts (a placeholder's own result is never on one).
pub fn on_paths(
    g: &Graph,
    from: &[Value],
    to: &[Value],
    keep: impl Fn(Value) -> bool,
) -> HashSet<Value> {
    let mut fwd: HashSet<Value> = from.iter().copied().filter(|&v| keep(v)).collect();
    for (v, op) in g.ops.iter() {
        if keep(v) && !matches!(op, Op::Grad { .. }) && op.args().iter().any(|a| fwd.contains(a)) {
            fwd.insert(v);
        }
    }
    let mut back: HashSet<Value> = to.iter().copied().filter(|v| fwd.contains(v)).collect();
    for (v, op) in g.ops.iter().rev() {
        if back.contains(&v) {
            back.extend(op.args().into_iter().filter(|a| fwd.contains(a)));
        }
    }
    back
}

/// The values that carry a gradient from one of `from` to one of `to`: those on a path
/// through float values ([`on_paths`]).
pub fn relevant(g: &Graph, from: &[Value], to: &[Value]) -> HashSet<Value> {
    on_paths(g, from, to, |v| g.ty(v).dtype.is_float())
}

impl Pass<'_> {
    fn b(&mut self) -> Builder<'_> {
        Builder::new(&mut self.out)
    }

    /// `x` permuted by `perm`, a permute of a permute folded into one (none when the two
    /// cancel), so that a transpose of a transposed weight reads the weight in place.
    fn permute(&mut self, x: Value, perm: Vec<u32>) -> Result<Value, GradError> {
        if let Op::Permute { arg, perm: p0 } = &self.out.ops[x] {
            let q: Vec<u32> = perm.iter().map(|&i| p0[i as usize]).collect();
            let arg = *arg;
            if q.iter().enumerate().all(|(i, &p)| p as usize == i) {
                return Ok(arg);
            }
            return Ok(self.b().permute(arg, q)?);
        }
        Ok(self.b().permute(x, perm)?)
    }

    /// `x` with its last two axes swapped ([`Pass::permute`]).
    fn transpose(&mut self, x: Value) -> Result<Value, GradError> {
        let n = self.out.ty(x).shape.rank();
        let mut perm: Vec<u32> = (0..n as u32).collect();
        perm.swap(n - 1, n - 2);
        self.permute(x, perm)
    }

    /// The forward value `v` as a rule reads it: its value in `out`, or, for a value a
    /// fused attention owns, a copy of its definition (made once).
    fn fwd(&mut self, v: Value) -> Value {
        if !self.own.contains(&v) {
            return self.map[&v];
        }
        if let Some(&r) = self.recomputed.get(&v) {
            return r;
        }
        let mut op = self.g.ops[v].clone();
        for a in op.args_mut() {
            *a = self.fwd(*a);
        }
        let r = self.out.push(op, self.g.ty(v).clone());
        self.recomputed.insert(v, r);
        r
    }

    /// The gradients of `Σ ⟨seeds, outputs⟩` with respect to each of `wrts` (forward
    /// values), as values of `out`.
    fn backward(
        &mut self,
        wrts: &[Value],
        outputs: &[Value],
        seeds: &[Value],
    ) -> Result<HashMap<Value, Value>, GradError> {
        let g = self.g;
        let rel = relevant(g, wrts, outputs);
        let mut adj: HashMap<Value, Value> = HashMap::new();
        for (&o, &s) in outputs.iter().zip(seeds) {
            if rel.contains(&o) {
                let s = self.map[&s];
                self.accumulate(&mut adj, o, s)?;
            }
        }
        let lowest = wrts.iter().min().copied();
        for (v, op) in g.ops.iter().rev() {
            if lowest.is_some_and(|l| v < l) {
                break;
            }
            if !rel.contains(&v) || wrts.contains(&v) && op.args().is_empty() {
                continue;
            }
            let Some(&dy) = adj.get(&v) else { continue };
            let args = op.args();
            let need: Vec<bool> = args.iter().map(|a| rel.contains(a)).collect();
            if !need.iter().any(|&n| n) {
                continue;
            }
            let contribs = self.vjp(v, op, dy, &need)?;
            for (a, c) in args.iter().zip(contribs) {
                if let Some(c) = c {
                    if rel.contains(a) {
                        self.accumulate(&mut adj, *a, c)?;
                    }
                }
            }
        }
        let mut grads = HashMap::new();
        for &w in wrts {
            let gw = match adj.get(&w) {
                Some(&x) => x,
                None => {
                    let ty = g.ty(w).clone();
                    self.b().full(0.0, &ty)?
                }
            };
            grads.insert(w, gw);
        }
        Ok(grads)
    }

    fn accumulate(
        &mut self,
        adj: &mut HashMap<Value, Value>,
        v: Value,
        c: Value,
    ) -> Result<(), GradError> {
        debug_assert_eq!(
            self.out.ty(c),
            self.g.ty(v),
            "a contribution of the wrong type"
        );
        let sum = match adj.get(&v) {
            Some(&prev) => self.b().add(prev, c)?,
            None => c,
        };
        adj.insert(v, sum);
        Ok(())
    }

    /// `g · factor`, except 0 where `g` is 0 (a zero contribution stays zero whatever the
    /// factor, infinite or NaN: see the module docs).
    fn times(&mut self, g: Value, factor: Value) -> Result<Value, GradError> {
        self.guarded(BinaryOp::Mul, g, factor)
    }

    /// `g / divisor`, except 0 where `g` is 0 (as [`Pass::times`]).
    fn over(&mut self, g: Value, divisor: Value) -> Result<Value, GradError> {
        self.guarded(BinaryOp::Div, g, divisor)
    }

    fn guarded(&mut self, op: BinaryOp, g: Value, other: Value) -> Result<Value, GradError> {
        let mut b = self.b();
        let zero = b.full_like(0.0, g)?;
        let is_zero = b.binary(BinaryOp::Eq, g, zero)?;
        let p = b.binary(op, g, other)?;
        Ok(b.select(is_zero, zero, p)?)
    }

    /// The contributions of the adjoint `dy` of `v = op(args)` to each operand (`None`
    /// where `need` is false or the operand gets none). Operands are read in `out`.
    fn vjp(
        &mut self,
        v: Value,
        op: &Op,
        dy: Value,
        need: &[bool],
    ) -> Result<Vec<Option<Value>>, GradError> {
        let g = self.g;
        let n = op.args().len();
        let mut res: Vec<Option<Value>> = vec![None; n];
        let dt = g.ty(v).dtype;
        match op {
            Op::Input { .. } | Op::Const { .. } | Op::Iota { .. } => {}
            Op::Unary { op: u, arg } => {
                let x = self.fwd(*arg);
                let y = self.fwd(v);
                res[0] = self.unary_vjp(*u, x, y, dy)?;
            }
            Op::Binary { op: bop, lhs, rhs } => {
                let (a, bv) = (self.fwd(*lhs), self.fwd(*rhs));
                let y = self.fwd(v);
                let (da, db) = self.binary_vjp(*bop, a, bv, y, dy, need)?;
                res[0] = da;
                res[1] = db;
            }
            Op::Select { cond, .. } => {
                let c = self.fwd(*cond);
                let mut b = self.b();
                let zero = b.full_like(0.0, dy)?;
                if need[1] {
                    res[1] = Some(b.select(c, dy, zero)?);
                }
                if need[2] {
                    res[2] = Some(b.select(c, zero, dy)?);
                }
            }
            Op::Cast { arg } => {
                let to = g.ty(*arg).dtype;
                if to.is_float() {
                    res[0] = Some(match &self.out.ops[dy] {
                        // The exact widening a 16-bit GEMM's gradient was given
                        // (`matmul_vjp`) narrows back to itself.
                        Op::Cast { arg: narrow }
                            if self.out.ty(*narrow).dtype == to
                                && self.out.ty(dy).dtype == DType::F32
                                && matches!(to, DType::Bf16 | DType::F16) =>
                        {
                            *narrow
                        }
                        _ => self.b().cast(dy, to)?,
                    });
                }
            }
            Op::Broadcast { arg } => {
                let from = g.ty(*arg).shape.0.clone();
                let to = g.ty(v).shape.0.clone();
                let mut x = dy;
                for (i, (&f, &t)) in from.iter().zip(&to).enumerate() {
                    if f == 1 && t != 1 {
                        x = self.b().sum(x, i as u32)?;
                    }
                }
                res[0] = Some(x);
            }
            Op::Reshape { arg } => {
                let s = g.ty(*arg).shape.0.clone();
                res[0] = Some(self.b().reshape(dy, &s)?);
            }
            Op::Permute { perm, .. } => {
                let mut inv = vec![0u32; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p as usize] = i as u32;
                }
                res[0] = Some(self.permute(dy, inv)?);
            }
            Op::Reduce { op: r, arg, axis } => {
                let xs = g.ty(*arg).shape.0.clone();
                res[0] = match r {
                    ReduceOp::Sum => Some(self.b().broadcast(dy, &xs)?),
                    ReduceOp::Mean => {
                        // PyTorch: `grad.expand(sizes) / N`, a division by a number, which
                        // its CUDA kernels compute as a multiply by the f32 reciprocal.
                        let count = xs[*axis as usize] as f64;
                        let mut b = self.b();
                        let wide = b.cast(dy, DType::F32)?;
                        let scaled = b.scale(wide, 1.0 / count)?;
                        let back = b.cast(scaled, dt)?;
                        Some(b.broadcast(back, &xs)?)
                    }
                    ReduceOp::Max | ReduceOp::Min => {
                        let (x, y) = (self.fwd(*arg), self.fwd(v));
                        let mut b = self.b();
                        let yb = b.broadcast(y, &xs)?;
                        let hit = b.binary(BinaryOp::Eq, x, yb)?;
                        // The tie count in f32 (exact to 2^24), the share rounded once.
                        let ones = b.cast(hit, DType::F32)?;
                        let count = b.sum(ones, *axis)?;
                        let gf = b.cast(dy, DType::F32)?;
                        let share = b.div(gf, count)?;
                        let share = b.cast(share, dt)?;
                        let sb = b.broadcast(share, &xs)?;
                        let zero = b.full_like(0.0, sb)?;
                        Some(b.select(hit, sb, zero)?)
                    }
                    ReduceOp::LogSumExp => {
                        // `grad · exp(x - lse)` is `grad · softmax(x)`; the softmax form
                        // gives 0, not NaN, for a row of -inf.
                        let x = self.fwd(*arg);
                        let mut b = self.b();
                        let xf = b.cast(x, DType::F32)?;
                        let p = b.softmax(xf, *axis)?;
                        let gf = b.cast(dy, DType::F32)?;
                        let gb = b.broadcast(gf, &xs)?;
                        let d = b.mul(gb, p)?;
                        Some(b.cast(d, dt)?)
                    }
                    ReduceOp::ArgMax | ReduceOp::ArgMin => None,
                };
            }
            Op::Softmax { axis, .. } => {
                // dx = y · (dy - Σ dy·y), in f32 (PyTorch's `_softmax_backward_data`).
                let y = self.fwd(v);
                let mut b = self.b();
                let yf = b.cast(y, DType::F32)?;
                let gf = b.cast(dy, DType::F32)?;
                let gy = b.mul(gf, yf)?;
                let s = b.sum(gy, *axis)?;
                let shape = b.dims(yf).to_vec();
                let sb = b.broadcast(s, &shape)?;
                let d = b.sub(gf, sb)?;
                let dx = b.mul(yf, d)?;
                res[0] = Some(b.cast(dx, dt)?);
            }
            Op::Slice { arg, axis, start } => {
                let xs = g.ty(*arg).shape.0.clone();
                let ax = *axis as usize;
                let len = g.ty(v).shape.0[ax];
                let mut parts = Vec::new();
                let pad = |b: &mut Builder, k: u64| -> Result<Value, TypeError> {
                    let mut s = xs.clone();
                    s[ax] = k;
                    b.full(0.0, &TensorType::new(dt, s))
                };
                let mut b = self.b();
                if *start > 0 {
                    parts.push(pad(&mut b, *start)?);
                }
                parts.push(dy);
                let after = xs[ax] - start - len;
                if after > 0 {
                    parts.push(pad(&mut b, after)?);
                }
                res[0] = Some(b.concat(parts, *axis)?);
            }
            Op::Concat { args, axis } => {
                let mut at = 0;
                for (i, a) in args.iter().enumerate() {
                    let len = g.ty(*a).shape.0[*axis as usize];
                    if need[i] {
                        res[i] = Some(self.b().slice(dy, *axis, at, len)?);
                    }
                    at += len;
                }
            }
            Op::TopK {
                arg,
                axis,
                largest,
                indices: false,
            } => {
                let x = self.fwd(*arg);
                let idx_ty = TensorType::new(DType::I32, g.ty(v).shape.0.clone());
                let idx = self.b().op(
                    Op::TopK {
                        arg: x,
                        axis: *axis,
                        largest: *largest,
                        indices: true,
                    },
                    Some(idx_ty),
                )?;
                let xs = g.ty(*arg).shape.0.clone();
                res[0] = Some(self.scatter_add(dy, idx, *axis, &xs)?);
            }
            Op::TopK { indices: true, .. } => {}
            Op::Cumsum { axis, .. } => {
                let r = self.reverse(dy, *axis)?;
                let c = self.b().cumsum(r, *axis)?;
                res[0] = Some(self.reverse(c, *axis)?);
            }
            Op::MatMul { lhs, rhs } => {
                let (da, db) = self.matmul_vjp(v, *lhs, *rhs, dy, need)?;
                res[0] = da;
                res[1] = db;
            }
            Op::Attention { logits, v: vv, .. } => {
                let (dl, dv) = self.attention_vjp(*logits, *vv, dy, need)?;
                res[0] = dl;
                res[1] = dv;
            }
            Op::Update {
                dst,
                rows,
                at: Some(UpdateAt { pos, axis }),
            } => {
                let (dd, dr) = self.update_vjp(*dst, *rows, *pos, *axis, dy, need)?;
                res[0] = dd;
                res[1] = dr;
            }
            // A whole update returns its new contents: all of the gradient is theirs.
            Op::Update { at: None, .. } => res[1] = Some(dy),
            Op::Gather { arg, index, axis } => {
                let xs = g.ty(*arg).shape.0.clone();
                let idx = self.fwd(*index);
                let len = xs[*axis as usize];
                let pos = self.clamped_position(idx, len)?;
                res[0] = Some(self.scatter_add(dy, pos, *axis, &xs)?);
            }
            Op::Grad { .. } => {
                return Err(GradError::Unsupported(
                    "a gradient of a gradient (the forward holds another grad)".into(),
                ))
            }
            // Formed only after this pass (for a fused attention backward), never in its input.
            Op::AttentionStat { .. } => {
                return Err(GradError::Unsupported(
                    "a gradient through an attention's row statistic".into(),
                ))
            }
        }
        Ok(res)
    }

    fn unary_vjp(
        &mut self,
        u: UnaryOp,
        x: Value,
        y: Value,
        dy: Value,
    ) -> Result<Option<Value>, GradError> {
        let dt = self.out.ty(x).dtype;
        use UnaryOp::*;
        // The rules in the dtype, as PyTorch's: neg, abs, exp, log, sqrt, rsqrt (one op or
        // a formula of tensor ops in derivatives.yaml).
        match u {
            Not => return Ok(None),
            Neg => return Ok(Some(self.b().neg(dy)?)),
            Floor | Ceil | Round | Trunc => return Ok(Some(self.b().full_like(0.0, dy)?)),
            Abs => {
                let mut b = self.b();
                let zero = b.full_like(0.0, x)?;
                let pos = b.binary(BinaryOp::Gt, x, zero)?;
                let negv = b.binary(BinaryOp::Lt, x, zero)?;
                let ng = b.neg(dy)?;
                let inner = b.select(negv, ng, zero)?;
                return Ok(Some(b.select(pos, dy, inner)?));
            }
            Exp => return Ok(Some(self.times(dy, y)?)),
            // grad / self
            Log => return Ok(Some(self.over(dy, x)?)),
            Sqrt => {
                // grad / (2 · result)
                let mut b = self.b();
                let two = b.full_like(2.0, y)?;
                let d = b.mul(two, y)?;
                return Ok(Some(self.over(dy, d)?));
            }
            Rsqrt => {
                // -0.5 · grad · result³  (PyTorch: `-0.5 * grad * result.pow(3)`)
                let mut b = self.b();
                let y2 = b.mul(y, y)?;
                let y3 = b.mul(y2, y)?;
                let h = b.scale(dy, -0.5)?;
                let f = y3;
                return Ok(Some(self.times(h, f)?));
            }
            _ => {}
        }
        // The math rules in f32, rounded once.
        let mut b = self.b();
        let xf = b.cast(x, DType::F32)?;
        let yf = b.cast(y, DType::F32)?;
        let gf = b.cast(dy, DType::F32)?;
        let one = b.full_like(1.0, xf)?;
        let d = match u {
            Sin => {
                let c = b.unary(Cos, xf)?;
                b.mul(gf, c)?
            }
            Cos => {
                let s = b.unary(Sin, xf)?;
                let ns = b.neg(s)?;
                b.mul(gf, ns)?
            }
            Tanh => {
                // grad · (1 - y²)
                let y2 = b.mul(yf, yf)?;
                let f = b.sub(one, y2)?;
                b.mul(gf, f)?
            }
            Sigmoid => {
                // grad · (1 - y) · y
                let f = b.sub(one, yf)?;
                let gfy = b.mul(gf, f)?;
                b.mul(gfy, yf)?
            }
            Silu => {
                // grad · s · (1 + x · (1 - s)), s = sigmoid(x)
                let s = b.unary(Sigmoid, xf)?;
                let oms = b.sub(one, s)?;
                let xo = b.mul(xf, oms)?;
                let f = b.add(one, xo)?;
                let gs = b.mul(gf, s)?;
                b.mul(gs, f)?
            }
            Erf => {
                // grad · 2/√π · exp(-x²)
                let x2 = b.mul(xf, xf)?;
                let nx2 = b.neg(x2)?;
                let e = b.unary(Exp, nx2)?;
                let f = b.scale(e, std::f64::consts::FRAC_2_SQRT_PI)?;
                b.mul(gf, f)?
            }
            Gelu => {
                // PyTorch GeluBackward (erf): cdf = 0.5·(1 + erf(x·√½)),
                // pdf = exp(-½·x²) · (2/√π · √½ · ½); grad · (cdf + x · pdf).
                let xa = b.scale(xf, std::f64::consts::FRAC_1_SQRT_2)?;
                let er = b.unary(Erf, xa)?;
                let ope = b.add(one, er)?;
                let cdf = b.scale(ope, 0.5)?;
                let x2 = b.mul(xf, xf)?;
                let h = b.scale(x2, -0.5)?;
                let e = b.unary(Exp, h)?;
                let beta = std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2 * 0.5;
                let pdf = b.scale(e, beta)?;
                let xp = b.mul(xf, pdf)?;
                let s = b.add(cdf, xp)?;
                b.mul(gf, s)?
            }
            GeluTanh => {
                // PyTorch GeluBackward (tanh), in its order.
                let beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
                let kappa = 0.044715;
                let x_sq = b.mul(xf, xf)?;
                let x_cube = b.mul(x_sq, xf)?;
                let kc = b.scale(x_cube, kappa)?;
                let sum = b.add(xf, kc)?;
                let inner = b.scale(sum, beta)?;
                let t = b.unary(Tanh, inner)?;
                let left = b.scale(xf, 0.5)?;
                let right = b.add(one, t)?;
                let left_d = b.scale(right, 0.5)?;
                let t2 = b.mul(t, t)?;
                let right_d = b.sub(one, t2)?;
                let k3 = b.scale(x_sq, 3.0 * kappa)?;
                let opk = b.add(one, k3)?;
                let inner_d = b.scale(opk, beta)?;
                let lr = b.mul(left, right_d)?;
                let lri = b.mul(lr, inner_d)?;
                let s = b.add(left_d, lri)?;
                b.mul(gf, s)?
            }
            _ => unreachable!("handled above"),
        };
        Ok(Some(b.cast(d, dt)?))
    }

    #[allow(clippy::too_many_arguments)]
    fn binary_vjp(
        &mut self,
        op: BinaryOp,
        a: Value,
        bv: Value,
        y: Value,
        dy: Value,
        need: &[bool],
    ) -> Result<(Option<Value>, Option<Value>), GradError> {
        use BinaryOp::*;
        Ok(match op {
            Add => (Some(dy), Some(dy)),
            Sub => (Some(dy), Some(self.b().neg(dy)?)),
            Mul => {
                let mut b = self.b();
                let da = if need[0] { Some(b.mul(dy, bv)?) } else { None };
                let db = if need[1] { Some(b.mul(dy, a)?) } else { None };
                (da, db)
            }
            Div => {
                // grad / other, -grad · ((self / other) / other)
                let da = if need[0] {
                    Some(self.over(dy, bv)?)
                } else {
                    None
                };
                let db = if need[1] {
                    let mut b = self.b();
                    let q = b.div(y, bv)?;
                    let ng = b.neg(dy)?;
                    Some(self.times(ng, q)?)
                } else {
                    None
                };
                (da, db)
            }
            Rem => {
                // fmod: grad, -grad · trunc(self / other)
                let db = if need[1] {
                    let mut b = self.b();
                    let q = b.div(a, bv)?;
                    let t = b.unary(UnaryOp::Trunc, q)?;
                    let ng = b.neg(dy)?;
                    Some(self.times(ng, t)?)
                } else {
                    None
                };
                (Some(dy), db)
            }
            Max | Min => {
                // PyTorch maximum: where(self == other, grad / 2, grad), zero where the
                // other operand wins (minimum likewise).
                let mut b = self.b();
                let eq = b.binary(Eq, a, bv)?;
                let half = b.scale(dy, 0.5)?;
                let shared = b.select(eq, half, dy)?;
                let zero = b.full_like(0.0, dy)?;
                let (lose_a, lose_b) = if op == Max { (Lt, Gt) } else { (Gt, Lt) };
                let la = b.binary(lose_a, a, bv)?;
                let lb = b.binary(lose_b, a, bv)?;
                let da = b.select(la, zero, shared)?;
                let db = b.select(lb, zero, shared)?;
                (Some(da), Some(db))
            }
            Pow => {
                // self: where(exponent == 0, 0, grad · exponent · self^(exponent - 1));
                // exponent: grad · where(self == 0 & exponent >= 0, 0, result · log(self)).
                let da = if need[0] {
                    let mut b = self.b();
                    let zero = b.full_like(0.0, dy)?;
                    let one = b.full_like(1.0, dy)?;
                    let e0 = b.binary(Eq, bv, zero)?;
                    let em1 = b.sub(bv, one)?;
                    let p = b.binary(Pow, a, em1)?;
                    let f = b.mul(bv, p)?;
                    let t = self.times(dy, f)?;
                    let mut b = self.b();
                    Some(b.select(e0, zero, t)?)
                } else {
                    None
                };
                let db = if need[1] {
                    let mut b = self.b();
                    let zero = b.full_like(0.0, dy)?;
                    let s0 = b.binary(Eq, a, zero)?;
                    let eg = b.binary(Ge, bv, zero)?;
                    let c = b.binary(And, s0, eg)?;
                    let l = b.unary(UnaryOp::Log, a)?;
                    let rl = b.mul(y, l)?;
                    let f = b.select(c, zero, rl)?;
                    Some(self.times(dy, f)?)
                } else {
                    None
                };
                (da, db)
            }
            Eq | Ne | Lt | Le | Gt | Ge | And | Or => (None, None),
        })
    }

    /// The operand `x` of a matmul as its 16-bit tensor when it is a widening cast of one
    /// (`f32(t)`, `f32(t)` permuted): that tensor (permuted the same way), in `out`.
    fn narrow(&mut self, x: Value) -> Option<Value> {
        let g = self.g;
        let is16 = |v: Value| matches!(g.ty(v).dtype, DType::Bf16 | DType::F16);
        match &g.ops[x] {
            Op::Cast { arg } if g.ty(x).dtype == DType::F32 && is16(*arg) => Some(self.fwd(*arg)),
            Op::Permute { arg, perm } => match &g.ops[*arg] {
                Op::Cast { arg: t } if g.ty(*arg).dtype == DType::F32 && is16(*t) => {
                    let t = self.fwd(*t);
                    self.b().permute(t, perm.clone()).ok()
                }
                _ => None,
            },
            _ => None,
        }
    }

    fn matmul_vjp(
        &mut self,
        v: Value,
        lhs: Value,
        rhs: Value,
        dy: Value,
        need: &[bool],
    ) -> Result<(Option<Value>, Option<Value>), GradError> {
        let dt = self.g.ty(v).dtype;
        let narrow = match (self.narrow(lhs), self.narrow(rhs)) {
            (Some(l), Some(r)) if self.out.ty(l).dtype == self.out.ty(r).dtype => Some((l, r)),
            _ => None,
        };
        let (a, bv, g, wide) = match narrow {
            // The 16-bit backward of a 16-bit GEMM with an f32 result.
            Some((l, r)) => {
                let d16 = self.out.ty(l).dtype;
                let g16 = self.b().cast(dy, d16)?;
                (l, r, g16, true)
            }
            None => (self.fwd(lhs), self.fwd(rhs), dy, false),
        };
        let back = |p: &mut Self, x: Value| -> Result<Value, GradError> {
            if wide {
                Ok(p.b().cast(x, dt)?)
            } else {
                Ok(x)
            }
        };
        let da = if need[0] {
            let bt = self.transpose(bv)?;
            let m = self.b().matmul(g, bt)?;
            Some(back(self, m)?)
        } else {
            None
        };
        // db = aᵀ·g; for a transposed operand (`x @ w^T`) the weight's own gradient gᵀ·a,
        // transposed back as the operand's, so that the permute rule cancels it.
        let db = if need[1] {
            if is_transpose(&self.g.ops[rhs], self.g.ty(rhs).shape.rank()) {
                let gt = self.transpose(g)?;
                let m = self.b().matmul(gt, a)?;
                let m = back(self, m)?;
                Some(self.transpose(m)?)
            } else {
                let at = self.transpose(a)?;
                let m = self.b().matmul(at, g)?;
                Some(back(self, m)?)
            }
        } else {
            None
        };
        Ok((da, db))
    }

    fn attention_vjp(
        &mut self,
        logits: Value,
        v: Value,
        dy: Value,
        need: &[bool],
    ) -> Result<(Option<Value>, Option<Value>), GradError> {
        // The rules of the three ops the attention stands for, in turn: `P = softmax(l)`,
        // `P16 = cast(P)`, `O = P16 @ v`. (Not P from the row statistics the forward kernel
        // can write, `Op::AttentionStat`: the scores recomputed here come from another
        // kernel than the forward's, whose f32 sums may round them to other 16-bit values,
        // and then `exp(x - m) / l` is not normalised within the reference's bound — fuzz
        // seed 380428. The fused backward, recomputing the scores in the forward kernel's
        // order, will read them: docs/architecture.md.)
        let vd = self.g.ty(v).dtype;
        let l = self.fwd(logits);
        let vv = self.fwd(v);
        let last = self.out.ty(l).shape.rank() as u32 - 1;
        let p = self.b().softmax(l, last)?;
        let p16 = self.b().cast(p, vd)?;
        let dv = if need[1] {
            let pt = self.transpose(p16)?;
            Some(self.b().matmul(pt, dy)?)
        } else {
            None
        };
        let dl = if need[0] {
            let vt = self.transpose(vv)?;
            let mut b = self.b();
            let dp16 = b.matmul(dy, vt)?;
            let dp = b.cast(dp16, DType::F32)?;
            let gy = b.mul(dp, p)?;
            let s = b.sum(gy, last)?;
            let shape = b.dims(dp).to_vec();
            let sb = b.broadcast(s, &shape)?;
            let diff = b.sub(dp, sb)?;
            Some(b.mul(p, diff)?)
        } else {
            None
        };
        Ok((dl, dv))
    }

    #[allow(clippy::too_many_arguments)]
    fn update_vjp(
        &mut self,
        dst: Value,
        rows: Value,
        pos: Value,
        axis: u32,
        dy: Value,
        need: &[bool],
    ) -> Result<(Option<Value>, Option<Value>), GradError> {
        let g = self.g;
        let ds = g.ty(dst).shape.0.clone();
        let rs = g.ty(rows).shape.0.clone();
        let len = ds[axis as usize];
        let p = self.fwd(pos);
        let mut b = self.b();
        // The index along the axis and pos[b], both over a shape `s`.
        let index_and_pos = |b: &mut Builder, s: &[u64]| -> Result<(Value, Value), TypeError> {
            let mut one = vec![1u64; s.len()];
            one[0] = s[0];
            let pr = b.reshape(p, &one)?;
            let pb = b.broadcast(pr, s)?;
            let io = b.iota(axis, TensorType::new(DType::I32, s.to_vec()))?;
            Ok((io, pb))
        };
        // 0 <= x < n, elementwise on an i32 `x`.
        let within = |b: &mut Builder, x: Value, n: u64| -> Result<Value, TypeError> {
            let ty = b.ty(x).clone();
            let zero = b.full(0.0, &ty)?;
            let lim = b.full(n as f64, &ty)?;
            let lo = b.binary(BinaryOp::Ge, x, zero)?;
            let hi = b.binary(BinaryOp::Lt, x, lim)?;
            b.binary(BinaryOp::And, lo, hi)
        };
        let dd = if need[0] {
            // The written positions get 0: i = j - pos[b] in [0, R).
            let (io, pb) = index_and_pos(&mut b, &ds)?;
            let i = b.sub(io, pb)?;
            let written = within(&mut b, i, rs[axis as usize])?;
            let z = b.full_like(0.0, dy)?;
            Some(b.select(written, z, dy)?)
        } else {
            None
        };
        let dr = if need[1] {
            // Row i of b reads position pos[b] + i, where it lies inside the axis: a gather
            // of dy along the axis (rows' shape but for the axis).
            let (io, pb) = index_and_pos(&mut b, &rs)?;
            let j = b.add(pb, io)?;
            let inside = within(&mut b, j, len)?;
            let zero = b.full_like(0.0, j)?;
            let jc = b.select(inside, j, zero)?;
            let gathered = b.gather(dy, jc, axis)?;
            let z = b.full_like(0.0, gathered)?;
            Some(b.select(inside, gathered, z)?)
        } else {
            None
        };
        Ok((dd, dr))
    }

    /// The position an i32 gather index reads along an axis of `len` (negative indices
    /// from the end, then clamped: [`tessel_ir::graph::gather_position`]).
    fn clamped_position(&mut self, idx: Value, len: u64) -> Result<Value, GradError> {
        let mut b = self.b();
        let ty = b.ty(idx).clone();
        let zero = b.full(0.0, &ty)?;
        let n = b.full(len as f64, &ty)?;
        let top = b.full(len as f64 - 1.0, &ty)?;
        let neg = b.binary(BinaryOp::Lt, idx, zero)?;
        let wrapped = b.add(idx, n)?;
        let j = b.select(neg, wrapped, idx)?;
        let lo = b.binary(BinaryOp::Max, j, zero)?;
        Ok(b.binary(BinaryOp::Min, lo, top)?)
    }

    /// The scatter-add of `src` (`[.., R, ..]`) into a tensor of shape `to` (`[.., A, ..]`,
    /// equal off `axis`): `out[.., a, ..] = Σ_r where(pos[.., r, ..] == a, src[.., r, ..], 0)`,
    /// the sum over r in index order (a reduction of a fixed order, no atomics). `pos`
    /// holds positions inside the axis.
    fn scatter_add(
        &mut self,
        src: Value,
        pos: Value,
        axis: u32,
        to: &[u64],
    ) -> Result<Value, GradError> {
        let ax = axis as usize;
        let mut b = self.b();
        let ss = b.dims(src).to_vec();
        // [.., R, 1, ..] against [.., 1, A, ..], both broadcast to [.., R, A, ..].
        let mut e = ss.clone();
        e.insert(ax + 1, 1);
        let mut full = ss.clone();
        full.insert(ax + 1, to[ax]);
        let s4 = b.reshape(src, &e)?;
        let sb = b.broadcast(s4, &full)?;
        let p4 = b.reshape(pos, &e)?;
        let pb = b.broadcast(p4, &full)?;
        let io = b.iota(axis + 1, TensorType::new(DType::I32, full.clone()))?;
        let hit = b.binary(BinaryOp::Eq, pb, io)?;
        let zero = b.full_like(0.0, sb)?;
        let picked = b.select(hit, sb, zero)?;
        let summed = b.sum(picked, axis)?;
        Ok(b.reshape(summed, to)?)
    }

    /// `x` reversed along `axis` (a gather at `n - 1 - i`).
    fn reverse(&mut self, x: Value, axis: u32) -> Result<Value, GradError> {
        let mut b = self.b();
        let s = b.dims(x).to_vec();
        let n = s[axis as usize];
        let ty = TensorType::new(DType::I32, s);
        let io = b.iota(axis, ty.clone())?;
        let top = b.full(n as f64 - 1.0, &ty)?;
        let idx = b.sub(top, io)?;
        Ok(b.gather(x, idx, axis)?)
    }
}

/// True if `op` swaps the last two axes of a tensor of rank `rank` (`w^T`).
fn is_transpose(op: &Op, rank: usize) -> bool {
    match op {
        Op::Permute { perm, .. } => {
            rank >= 2
                && perm.iter().enumerate().all(|(i, &p)| {
                    let want = match i {
                        _ if i == rank - 1 => rank - 2,
                        _ if i == rank - 2 => rank - 1,
                        _ => i,
                    };
                    p as usize == want
                })
        }
        _ => false,
    }
}
