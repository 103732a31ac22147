//! `decompose`: rewrites composite graph ops into the primitive ones the later passes know.
//!
//! Before: a graph from `check` (any [`Op`]). After:
//! - no [`ReduceOp::Mean`]: `mean(x)` is `sum(x) / n`, both in f32 (bf16/f16 operands are cast
//!   to f32 first and the quotient is cast back, so the row is rounded once);
//! - no [`Op::Softmax`]: `m = max(x); e = exp(x - m); where(m == -inf, 0, e / sum(e))` in
//!   f32 along the axis (the select makes a fully masked row 0 rather than 0/0 = NaN; it
//!   passes every row with a finite or NaN max through unchanged);
//! - every [`Op::Reduce`] runs over the last axis (another axis is permuted last first);
//! - no [`ReduceOp::ArgMax`]/[`ReduceOp::ArgMin`]: `m = max(x)`, then the first index where
//!   `x == m` or `x` is NaN (`min(where(.., iota, n))`, an i32 row minimum);
//! - no [`ReduceOp::LogSumExp`]: `m = max(x); r = m + log(sum(exp(x - m)))` in f32, and
//!   `where(|m| == inf, m, r)`, cast to the result dtype;
//! - no [`Op::TopK`]: k rounds, each a row maximum (or minimum) of the elements after the
//!   previous round's `(value, index)` in topk's order and the first index holding it (for
//!   the values, a third reduction reads that element back), joined by a concat;
//! - every [`Op::Cumsum`] runs over the last axis of an f32 or i32 operand (16-bit operands
//!   are cast to f32 first and the result cast back, so each output is rounded once);
//! - reductions of bf16/f16 operands accumulate in f32 explicitly (cast, reduce, cast back);
//! - a step output that is a step input gets an identity [`Op::Cast`], so every output is
//!   written by a kernel — except an `inout` input returned under its own name, whose
//!   buffer is the output (it is updated in place, or not at all: never copied);
//! - common subexpressions are merged: two ops with the same definition and type become one
//!   value (the `check` pass inlines each `fn` call, so `rope(q)` and `rope(k)` would otherwise
//!   compute the same cos/sin table twice) — except the ops of an [`Op::Attention`]'s logits
//!   (its `q @ kᵀ` and the elementwise ops from it to the logits), which stay the
//!   attentions' own: the `attention` pass fused them only because nothing else reads
//!   them, and the attention kernel computes them itself, so the same product written
//!   again elsewhere (the scores as a step result) must not become a reader of them. They
//!   merge among themselves: two attentions of the same logits and `v` (a step's forward
//!   and the copy of it that a `grad` of the same function differentiates) become one,
//!   one kernel.
//!
//! It does not fuse, reorder arithmetic or change any rounding: the graph computes the same
//! bits before and after.

use std::collections::{HashMap, HashSet};
use tessel_ir::builder::result_type;
use tessel_ir::graph::{BinaryOp, Graph, Op, ReduceOp, UnaryOp};
use tessel_ir::{DType, TensorType, Value};

/// Runs the pass, returning the rewritten graph.
pub fn run(g: &Graph) -> Graph {
    let mut d = Rewriter {
        out: Graph::new(g.name.clone()),
        cse: HashMap::new(),
    };
    let own = attention_logits(g);
    let mut map: HashMap<Value, Value> = HashMap::new();
    for (v, op) in g.ops.iter() {
        let ty = g.ty(v).clone();
        let m = |x: &Value| map[x];
        let nv = match op {
            Op::Reduce {
                op: rop @ (ReduceOp::ArgMax | ReduceOp::ArgMin),
                arg,
                axis,
            } => d.arg_extreme(*rop == ReduceOp::ArgMax, m(arg), *axis, ty),
            Op::Reduce {
                op: ReduceOp::LogSumExp,
                arg,
                axis,
            } => d.logsumexp(m(arg), *axis, ty),
            Op::Reduce { op: rop, arg, axis } => d.reduce(*rop, m(arg), *axis, ty),
            Op::TopK {
                arg,
                axis,
                largest,
                indices,
            } => d.topk(m(arg), *axis, *largest, *indices, ty),
            Op::Cumsum { arg, axis } => d.cumsum(m(arg), *axis, ty),
            Op::Softmax { arg, axis } => d.softmax(m(arg), *axis, ty),
            // Copied with the checked graph's type, which its operands' copies still have.
            other => {
                let mut o = other.clone();
                remap(&mut o, &map);
                if own.contains(&v) {
                    // Merged only with an attention's own value of the same definition (the
                    // same logits written twice: a step's forward and its `grad`'s copy of
                    // it), never with a value outside the attentions' logits.
                    let key = format!("own:{o:?}:{ty:?}");
                    match d.cse.get(&key) {
                        Some(&x) => x,
                        None => {
                            let x = d.out.push(o, ty);
                            d.cse.insert(key, x);
                            x
                        }
                    }
                } else {
                    d.emit(o, ty)
                }
            }
        };
        map.insert(v, nv);
    }
    d.out.inputs = g.inputs.iter().map(|(n, v)| (n.clone(), map[v])).collect();
    for (name, v) in &g.outputs {
        let mut nv = map[v];
        let own_buffer =
            d.out.is_inout_input(nv) && d.out.inputs.iter().any(|(n, x)| *x == nv && n == name);
        if matches!(d.out.ops[nv], Op::Input { .. }) && !own_buffer {
            let ty = d.out.ty(nv).clone();
            // Not through `emit`: an identity cast must not be merged away.
            nv = d.out.push(Op::Cast { arg: nv }, ty);
        }
        d.out.outputs.push((name.clone(), nv));
    }
    d.out
}

/// The values an [`Op::Attention`] computes itself: its logits' matmul and the elementwise
/// cone from it up to the logits ([`crate::analysis::logits_matmul`]).
pub(crate) fn attention_logits(g: &Graph) -> HashSet<Value> {
    let mut own = HashSet::new();
    for (_, op) in g.ops.iter() {
        if let Op::Attention { logits, .. } = op {
            if let Some((s, cone)) = crate::analysis::logits_matmul(g, *logits) {
                own.insert(s);
                own.extend(cone);
            }
        }
    }
    own
}

fn remap(op: &mut Op, map: &HashMap<Value, Value>) {
    for a in op.args_mut() {
        *a = map[a];
    }
}

struct Rewriter {
    out: Graph,
    /// Definition (op printed with its type) → value, for common-subexpression merging.
    cse: HashMap<String, Value>,
}

impl Rewriter {
    /// Appends `op`, or returns the existing value with the same definition and type.
    fn emit(&mut self, op: Op, ty: TensorType) -> Value {
        if matches!(op, Op::Input { .. }) {
            return self.out.push(op, ty);
        }
        // `{:?}` of an op prints f64 constants exactly (shortest round trip, -0 kept).
        let key = format!("{op:?}:{ty:?}");
        if let Some(&v) = self.cse.get(&key) {
            return v;
        }
        let v = self.out.push(op, ty);
        self.cse.insert(key, v);
        v
    }

    /// Appends `op` typed by its rule ([`result_type`]; `given` for the ops that carry
    /// their type: cast, broadcast, reshape, const, iota), through [`Rewriter::emit`].
    ///
    /// Panics if the rule refuses the op: the pass builds from a verified graph, so that is
    /// a bug in this pass, not in the program.
    fn build(&mut self, op: Op, given: Option<TensorType>) -> Value {
        let ty = self.typed(&op, given);
        self.emit(op, ty)
    }

    /// The result type of `op` by its rule (panics as [`Rewriter::build`]).
    fn typed(&self, op: &Op, given: Option<TensorType>) -> TensorType {
        result_type(&self.out, op, given.as_ref())
            .unwrap_or_else(|e| panic!("decompose built an ill-typed op {op:?}: {e}"))
    }

    fn ty(&self, v: Value) -> TensorType {
        self.out.ty(v).clone()
    }

    fn with_dtype(&self, v: Value, dtype: DType) -> TensorType {
        TensorType {
            dtype,
            shape: self.out.ty(v).shape.clone(),
        }
    }

    fn cast(&mut self, v: Value, dtype: DType) -> Value {
        if self.out.ty(v).dtype == dtype {
            return v;
        }
        let ty = self.with_dtype(v, dtype);
        self.build(Op::Cast { arg: v }, Some(ty))
    }

    fn scalar_const(&mut self, value: f64, like: Value) -> Value {
        let ty = self.ty(like);
        let c = self.build(Op::Const { value }, Some(TensorType::new(ty.dtype, vec![])));
        let ones = TensorType::new(ty.dtype, vec![1; ty.shape.rank()]);
        let r = self.build(Op::Reshape { arg: c }, Some(ones));
        self.build(Op::Broadcast { arg: r }, Some(ty))
    }

    fn broadcast_to(&mut self, v: Value, like: Value) -> Value {
        let ty = self.ty(like);
        if self.out.ty(v).shape == ty.shape {
            return v;
        }
        let t = self.with_dtype(like, self.out.ty(v).dtype);
        self.build(Op::Broadcast { arg: v }, Some(t))
    }

    /// A reduction over the last axis, accumulating in f32 for 16-bit floats.
    fn reduce_last(&mut self, rop: ReduceOp, x: Value) -> Value {
        let dt = self.out.ty(x).dtype;
        let acc_dt = if matches!(dt, DType::Bf16 | DType::F16) {
            DType::F32
        } else {
            dt
        };
        let xa = self.cast(x, acc_dt);
        let shape = &self.out.ty(xa).shape.0;
        let n = shape.last().copied().unwrap_or(1);
        let last = shape.len() as u32 - 1;
        let rop_prim = if rop == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            rop
        };
        let mut r = self.build(
            Op::Reduce {
                op: rop_prim,
                arg: xa,
                axis: last,
            },
            None,
        );
        if rop == ReduceOp::Mean {
            let c = self.scalar_const(n as f64, r);
            r = self.binary(BinaryOp::Div, r, c);
        }
        self.cast(r, dt)
    }

    /// `reduce(x, axis)` keeping `axis` with size 1; other axes are permuted last first.
    fn reduce(&mut self, rop: ReduceOp, x: Value, axis: u32, ty: TensorType) -> Value {
        let rank = self.out.ty(x).shape.rank() as u32;
        if rank == 0 {
            // `check` rejects reductions of scalars; nothing to reduce.
            return x;
        }
        let r = if axis + 1 == rank {
            self.reduce_last(rop, x)
        } else {
            let perm: Vec<u32> = (0..rank).filter(|&a| a != axis).chain([axis]).collect();
            let p = self.build(Op::Permute { arg: x, perm }, None);
            let r = self.reduce_last(rop, p);
            // The reduced axis has size 1, so moving it back is a reshape.
            self.build(Op::Reshape { arg: r }, Some(ty.clone()))
        };
        debug_assert_eq!(self.out.ty(r), &ty);
        r
    }

    fn softmax(&mut self, x: Value, axis: u32, ty: TensorType) -> Value {
        let xf = self.cast(x, DType::F32);
        let fty = self.ty(xf);
        let m = self.reduce(ReduceOp::Max, xf, axis, reduced(&fty, axis));
        let mb = self.broadcast_to(m, xf);
        let d = self.binary(BinaryOp::Sub, xf, mb);
        let e = self.unary(UnaryOp::Exp, d);
        let s = self.reduce(ReduceOp::Sum, e, axis, reduced(&fty, axis));
        let sb = self.broadcast_to(s, e);
        let q = self.binary(BinaryOp::Div, e, sb);
        // A fully masked row (every element -inf, so its max is -inf) gives 0, not
        // exp(-inf - -inf) / sum = NaN: flash-attention's convention (design §12). The test
        // is on the row's max, once per row in a row-reduction kernel; the select is one per
        // element and passes every other row's quotient through bit for bit. A row holding
        // NaN or +inf has a NaN or +inf max and stays NaN, as IEEE arithmetic gives.
        let ninf = self.scalar_const(f64::NEG_INFINITY, m);
        let empty = self.binary(BinaryOp::Eq, m, ninf);
        let empty = self.broadcast_to(empty, q);
        let zero = self.scalar_const(0.0, q);
        let r = self.select(empty, zero, q);
        self.cast(r, ty.dtype)
    }
}

/// The rewrites of the ops along an axis that select or scan: `argmax`/`argmin`, `topk`,
/// `logsumexp`, `cumsum`. Each works on the operand with the axis moved last
/// ([`Rewriter::axis_last`]) and puts the axis back at the end.
impl Rewriter {
    /// `x` with `axis` permuted last (itself when it is last already).
    fn axis_last(&mut self, x: Value, axis: u32) -> Value {
        let src = self.ty(x);
        let rank = src.shape.rank() as u32;
        if axis + 1 == rank {
            return x;
        }
        let perm: Vec<u32> = (0..rank).filter(|&a| a != axis).chain([axis]).collect();
        self.build(Op::Permute { arg: x, perm }, None)
    }

    /// The inverse of [`Rewriter::axis_last`] for a result `r` whose last axis is `axis`
    /// of `ty` (a reshape when that axis has size 1).
    fn axis_back(&mut self, r: Value, axis: u32, ty: TensorType) -> Value {
        let rank = ty.shape.rank() as u32;
        if axis + 1 == rank {
            return r;
        }
        if ty.shape.0[axis as usize] == 1 {
            return self.build(Op::Reshape { arg: r }, Some(ty));
        }
        // axis_last's perm moved `axis` to the end; this one moves it back.
        let perm: Vec<u32> = (0..rank)
            .map(|i| match i.cmp(&axis) {
                std::cmp::Ordering::Less => i,
                std::cmp::Ordering::Equal => rank - 1,
                std::cmp::Ordering::Greater => i - 1,
            })
            .collect();
        let p = self.build(Op::Permute { arg: r, perm }, None);
        debug_assert_eq!(self.ty(p), ty);
        p
    }

    fn unary(&mut self, op: UnaryOp, arg: Value) -> Value {
        self.build(Op::Unary { op, arg }, None)
    }

    fn binary(&mut self, op: BinaryOp, lhs: Value, rhs: Value) -> Value {
        self.build(Op::Binary { op, lhs, rhs }, None)
    }

    fn select(&mut self, cond: Value, on_true: Value, on_false: Value) -> Value {
        self.build(
            Op::Select {
                cond,
                on_true,
                on_false,
            },
            None,
        )
    }

    /// A per-row reduction over the last axis of `x`, shape `[.., 1]`.
    fn row_reduce(&mut self, rop: ReduceOp, x: Value) -> Value {
        let r = self.reduce_last(rop, x);
        debug_assert_eq!(self.ty(r).shape.last(), 1);
        r
    }

    /// `x`'s operand of comparisons: 16-bit floats widened exactly to f32 (every order
    /// and equality is the same in f32), f32 and i32 as they are.
    fn ordered(&mut self, x: Value) -> Value {
        match self.ty(x).dtype {
            DType::Bf16 | DType::F16 => self.cast(x, DType::F32),
            _ => x,
        }
    }

    /// `x != x` for a float `x`: true exactly where it is NaN; `None` for integers.
    fn is_nan(&mut self, x: Value) -> Option<Value> {
        if !self.ty(x).dtype.is_float() {
            return None;
        }
        Some(self.binary(BinaryOp::Ne, x, x))
    }

    fn or(&mut self, a: Value, b: Option<Value>) -> Value {
        match b {
            Some(b) => self.binary(BinaryOp::Or, a, b),
            None => a,
        }
    }

    fn and(&mut self, a: Value, b: Option<Value>) -> Value {
        match b {
            Some(b) => self.binary(BinaryOp::And, a, b),
            None => a,
        }
    }

    /// The i32 index along the last axis of `x` (`iota`).
    fn index_of(&mut self, x: Value) -> Value {
        let shape = self.ty(x).shape;
        let axis = shape.rank() as u32 - 1;
        self.build(
            Op::Iota { axis },
            Some(TensorType::new(DType::I32, shape.0)),
        )
    }

    /// The lowest index along the last axis of `x` where `cand` holds, `[.., 1]` i32 (the
    /// axis length where it holds nowhere): `min(where(cand, iota, n))`.
    fn first_index(&mut self, x: Value, cand: Value) -> Value {
        let iota = self.index_of(x);
        let n = self.ty(x).shape.last();
        let none = self.scalar_const(n as f64, iota);
        let at = self.select(cand, iota, none);
        self.row_reduce(ReduceOp::Min, at)
    }

    /// `argmax`/`argmin` (`torch.argmax`): `m = max(x)` (NaN-propagating), then the first
    /// index where `x == m` or `x` is NaN — which is where `x == m` when the row holds no
    /// NaN and the first NaN when it does; -0 and +0 compare equal.
    fn arg_extreme(&mut self, largest: bool, x: Value, axis: u32, ty: TensorType) -> Value {
        let xl = self.axis_last(x, axis);
        let xo = self.ordered(xl);
        let rop = if largest {
            ReduceOp::Max
        } else {
            ReduceOp::Min
        };
        let m = self.row_reduce(rop, xo);
        let mb = self.broadcast_to(m, xo);
        let eq = self.binary(BinaryOp::Eq, xo, mb);
        let nan = self.is_nan(xo);
        let cand = self.or(eq, nan);
        let r = self.first_index(xo, cand);
        self.axis_back(r, axis, ty)
    }

    /// `logsumexp` (`torch.logsumexp`), in f32: `m = max(x)`, `m + log(Σ exp(x - m))`,
    /// and `m` itself where `|m| = inf` (torch replaces an infinite max by 0, which gives
    /// `log(Σ exp(x)) = m` there: every element -inf → -inf, some +inf → +inf).
    fn logsumexp(&mut self, x: Value, axis: u32, ty: TensorType) -> Value {
        let xl = self.axis_last(x, axis);
        let xf = self.cast(xl, DType::F32);
        let m = self.row_reduce(ReduceOp::Max, xf);
        let mb = self.broadcast_to(m, xf);
        let d = self.binary(BinaryOp::Sub, xf, mb);
        let e = self.unary(UnaryOp::Exp, d);
        let s = self.row_reduce(ReduceOp::Sum, e);
        let l = self.unary(UnaryOp::Log, s);
        let r = self.binary(BinaryOp::Add, m, l);
        let am = self.unary(UnaryOp::Abs, m);
        let inf = self.scalar_const(f64::INFINITY, m);
        let infinite = self.binary(BinaryOp::Eq, am, inf);
        let r = self.select(infinite, m, r);
        let mut rty = self.ty(r);
        rty.dtype = ty.dtype;
        let r = self.cast(r, ty.dtype);
        debug_assert_eq!(self.ty(r), rty);
        self.axis_back(r, axis, ty)
    }

    /// `topk` (`torch.topk(sorted=True)`), in k rounds over the row with the axis last.
    /// The order is `(value, index)`: by value (best first: NaN above every number for
    /// `largest`, below for smallest it is still the largest so it comes last; -0 equal to
    /// +0), then by the lower index. Round r takes the best element after round r - 1's
    /// `(m, i)` in that order — so no element is taken twice and none needs a mask — by two
    /// row reductions: its value `m_r` (the max, or min, of the elements after it) and the
    /// first index `i_r` holding `m_r` after it; the value output reads the element at
    /// `i_r` back with a third (a max over that one element), so it has the element's bits
    /// (the sign of a zero included). The rounds' values feed the next round as per-row
    /// values; `fuse` gives each reduction its own kernel (a topk of k costs 2k or 3k row
    /// passes).
    fn topk(&mut self, x: Value, axis: u32, largest: bool, indices: bool, ty: TensorType) -> Value {
        let xl = self.axis_last(x, axis);
        let xo = self.ordered(xl);
        let k = ty.shape.0[axis as usize];
        let float = self.ty(xo).dtype.is_float();
        let nan = self.is_nan(xo);
        let iota = self.index_of(xo);
        let mut prev: Option<(Value, Value)> = None;
        let mut parts = Vec::new();
        for _ in 0..k {
            let after = prev.map(|(m, i)| self.after(xo, nan, iota, m, i, largest));
            let (m, i) = self.best(xo, nan, after, largest, float);
            let part = if indices {
                i
            } else {
                let ib = self.broadcast_to(i, xo);
                let here = self.binary(BinaryOp::Eq, iota, ib);
                let ninf = self.scalar_const(self.lowest(xo), xo);
                let one = self.select(here, xo, ninf);
                self.row_reduce(ReduceOp::Max, one)
            };
            parts.push(part);
            prev = Some((m, i));
        }
        let r = if parts.len() == 1 {
            parts[0]
        } else {
            let rank = self.ty(parts[0]).shape.rank() as u32;
            self.build(
                Op::Concat {
                    args: parts,
                    axis: rank - 1,
                },
                None,
            )
        };
        let r = self.cast(r, ty.dtype);
        self.axis_back(r, axis, ty)
    }

    /// The lowest value of `x`'s dtype: -inf for floats, i32's minimum.
    fn lowest(&self, x: Value) -> f64 {
        if self.out.ty(x).dtype.is_float() {
            f64::NEG_INFINITY
        } else {
            i32::MIN as f64
        }
    }

    /// Where an element of `x` comes after the taken `(m, i)` (per-row `[.., 1]`) in topk's
    /// order: strictly worse than `m`, or equal to it (NaN equal to NaN) at a higher index.
    fn after(
        &mut self,
        x: Value,
        nan: Option<Value>,
        iota: Value,
        m: Value,
        i: Value,
        largest: bool,
    ) -> Value {
        let mb = self.broadcast_to(m, x);
        let ib = self.broadcast_to(i, x);
        let m_nan = self.is_nan(mb);
        // Worse: below m for largest (or m NaN and x not), above m for smallest (or x NaN
        // and m not: NaN is the largest).
        let worse_cmp = if largest {
            self.binary(BinaryOp::Lt, x, mb)
        } else {
            self.binary(BinaryOp::Gt, x, mb)
        };
        let worse = match (nan, m_nan) {
            (Some(xn), Some(mn)) => {
                let (a, b) = if largest { (mn, xn) } else { (xn, mn) };
                let not_b = self.unary(UnaryOp::Not, b);
                let w = self.binary(BinaryOp::And, a, not_b);
                self.binary(BinaryOp::Or, worse_cmp, w)
            }
            _ => worse_cmp,
        };
        let eq = self.binary(BinaryOp::Eq, x, mb);
        let both_nan = match (nan, m_nan) {
            (Some(xn), Some(mn)) => Some(self.binary(BinaryOp::And, xn, mn)),
            _ => None,
        };
        let same = self.or(eq, both_nan);
        let later = self.binary(BinaryOp::Gt, iota, ib);
        let tie = self.binary(BinaryOp::And, same, later);
        self.binary(BinaryOp::Or, worse, tie)
    }

    /// The best element among those where `after` holds (all of them when `None`): its
    /// value `m` and first index `i`, both `[.., 1]`.
    fn best(
        &mut self,
        x: Value,
        nan: Option<Value>,
        after: Option<Value>,
        largest: bool,
        float: bool,
    ) -> (Value, Value) {
        let m = if largest {
            // NaN-propagating max: a NaN left is the best.
            let pool = match after {
                Some(a) => {
                    let low = self.scalar_const(self.lowest(x), x);
                    self.select(a, x, low)
                }
                None => x,
            };
            self.row_reduce(ReduceOp::Max, pool)
        } else {
            // The min of the numbers left; NaN only when nothing but NaN is left (NaN is the
            // largest, so it comes last): the min over non-NaN elements, then NaN where no
            // non-NaN element is left.
            let high = if float {
                f64::INFINITY
            } else {
                i32::MAX as f64
            };
            let high = self.scalar_const(high, x);
            let number = nan.map(|n| self.unary(UnaryOp::Not, n));
            let keep = match (after, number) {
                (Some(a), Some(n)) => Some(self.binary(BinaryOp::And, a, n)),
                (a, n) => a.or(n),
            };
            let pool = match keep {
                Some(kp) => self.select(kp, x, high),
                None => x,
            };
            let m = self.row_reduce(ReduceOp::Min, pool);
            match keep.filter(|_| float) {
                Some(kp) => {
                    // Any number left: max over i32(keep).
                    let ki = self.cast(kp, DType::I32);
                    let any = self.row_reduce(ReduceOp::Max, ki);
                    let zero = self.scalar_const(0.0, any);
                    let none = self.binary(BinaryOp::Eq, any, zero);
                    let qnan = self.scalar_const(f64::NAN, m);
                    self.select(none, qnan, m)
                }
                None => m,
            }
        };
        let mb = self.broadcast_to(m, x);
        let eq = self.binary(BinaryOp::Eq, x, mb);
        let m_nan = self.is_nan(mb);
        let both_nan = match (nan, m_nan) {
            (Some(xn), Some(mn)) => Some(self.binary(BinaryOp::And, xn, mn)),
            _ => None,
        };
        let same = self.or(eq, both_nan);
        let cand = self.and(same, after);
        let i = self.first_index(x, cand);
        (m, i)
    }

    /// `cumsum` along the last axis, accumulating in f32 for 16-bit floats (each output
    /// the running f32 sum rounded once by the cast after it).
    fn cumsum(&mut self, x: Value, axis: u32, ty: TensorType) -> Value {
        let xl = self.axis_last(x, axis);
        let dt = self.ty(xl).dtype;
        let acc = if matches!(dt, DType::Bf16 | DType::F16) {
            DType::F32
        } else {
            dt
        };
        let xa = self.cast(xl, acc);
        let rank = self.ty(xa).shape.rank() as u32;
        let op = Op::Cumsum {
            arg: xa,
            axis: rank - 1,
        };
        let cty = self.typed(&op, None);
        let c = self.out.push(op, cty);
        let r = self.cast(c, dt);
        self.axis_back(r, axis, ty)
    }
}

fn reduced(t: &TensorType, axis: u32) -> TensorType {
    let mut s = t.shape.0.clone();
    s[axis as usize] = 1;
    TensorType::new(t.dtype, s)
}
