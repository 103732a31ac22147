//! A typed builder for the graph IR: one result-type rule per [`Op`] ([`result_type`]), and
//! [`Builder`], whose methods push an op with the type that rule gives.
//!
//! The rule is the single statement of what each op's result type is. The graph verifier
//! checks each declared type against it (`graph.*` rules), the references' `check_op`
//! before evaluating an op, and the passes that make new ops (`check`, `decompose`,
//! `attention`, `tp`, `grad`'s gradient rules) build them through [`Builder`] (or type them
//! with [`result_type`]) instead of spelling the type out by hand, so an op is typed the same
//! way wherever it is made.
//!
//! Ops whose result is a function of their operands (elementwise ops, matmul, reductions,
//! permutes, concat, ...) take their type from the rule alone. Ops that carry part of their
//! type outside the operands — the target dtype of a [`Op::Cast`], the shape of a
//! [`Op::Reshape`] or [`Op::Broadcast`], the length of a [`Op::Slice`], the `k` of a
//! [`Op::TopK`], every [`Op::Const`], [`Op::Iota`] and [`Op::Input`] — are given the result
//! type, which the rule checks against the operands.

use crate::entities::Value;
use crate::graph::{BinaryOp, Graph, Op, ReduceOp, UnaryOp, UpdateAt};
use crate::types::{DType, TensorType};

/// An op whose operands do not admit it, or whose given result type does not fit them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {message}")]
pub struct TypeError {
    /// The verifier's rule name (`graph.binary`, `graph.matmul`, ...).
    pub rule: &'static str,
    pub message: String,
}

fn fail<T>(rule: &'static str, message: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError {
        rule,
        message: message.into(),
    })
}

/// The verifier rule that states `op`'s type (`graph.unary`, `graph.matmul`, ...): the
/// rule name of every [`TypeError`] [`result_type`] gives for it, and of the verifier's
/// message when a declared result type is not the one the rule gives.
pub fn rule_name(op: &Op) -> &'static str {
    match op {
        Op::Input { .. } => "graph.input",
        Op::Const { .. } => "graph.const",
        Op::Iota { .. } => "graph.iota",
        Op::Unary { .. } => "graph.unary",
        Op::Binary { .. } => "graph.binary",
        Op::Select { .. } => "graph.select",
        Op::Cast { .. } => "graph.cast",
        Op::Broadcast { .. } => "graph.broadcast",
        Op::Reshape { .. } => "graph.reshape",
        Op::Permute { .. } => "graph.permute",
        Op::Reduce { .. } => "graph.reduce",
        Op::Slice { .. } => "graph.slice",
        Op::Concat { .. } => "graph.concat",
        Op::Softmax { .. } => "graph.softmax",
        Op::Cumsum { .. } => "graph.cumsum",
        Op::TopK { .. } => "graph.topk",
        Op::MatMul { .. } => "graph.matmul",
        Op::Attention { .. } => "graph.attention",
        Op::AttentionStat { .. } => "graph.attention_stat",
        Op::Update { .. } => "graph.update",
        Op::Gather { .. } => "graph.gather",
        Op::Grad { .. } => "graph.grad",
    }
}

/// `x` is exactly representable in a binary float with `p` significand bits, minimum
/// normal exponent `emin` and largest finite value `max` (±inf and NaN are).
fn fits_float(x: f64, p: i32, emin: i32, max: f64) -> bool {
    if !x.is_finite() || x == 0.0 {
        return true;
    }
    if x.abs() > max {
        return false;
    }
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // An f64 subnormal is far below every smaller format's range.
        return false;
    }
    let e = biased - 1023;
    let k = p - 1 - e.max(emin);
    // x · 2^k is exact in f64 for the k that can occur here (|k| < 200).
    let scaled = x * 2f64.powi(k);
    scaled.is_finite() && scaled.fract() == 0.0
}

/// Rule `graph.const`: `x` is a value of `dtype` — for float dtypes finite and exactly
/// representable (no rounding), ±inf or NaN; for `i32` integral in `[-2^31, 2^31)`; for
/// `bool` 0 or 1. The error says which of these `x` breaks.
pub fn const_fits(x: f64, dtype: DType) -> Result<(), String> {
    let ok = match dtype {
        DType::F32 => fits_float(x, 24, -126, f32::MAX as f64),
        DType::Bf16 => fits_float(x, 8, -126, 3.3895313892515355e38),
        DType::F16 => fits_float(x, 11, -14, 65504.0),
        DType::I32 => {
            return if x.fract() == 0.0 && (-2147483648.0..2147483648.0).contains(&x) {
                Ok(())
            } else {
                Err(format!("{x:?} is not an i32 (integral, in [-2^31, 2^31))"))
            }
        }
        DType::Bool => {
            return if x == 0.0 || x == 1.0 {
                Ok(())
            } else {
                Err(format!("{x:?} is not a bool (0 or 1)"))
            }
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{x:?} is not exactly representable in {dtype}"))
    }
}

/// The element count of `dims`, `None` when it overflows `u64`.
fn checked_numel(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |p, d| p.checked_mul(*d))
}

/// The result type of `op` over the operand types in `g`: the one statement of each
/// graph op's typing rule (the verifier's `graph.*` rules; `verify_graph` compares each
/// declared type with it, and the references' `check_op` and the passes that build ops go
/// through it).
///
/// `given` is the result type for the ops that carry it (see the module docs: required for
/// them, and checked against their operands); the others ignore it and derive theirs.
///
/// # Errors
/// A [`TypeError`] naming the verifier rule the op breaks ([`rule_name`]) and what is
/// wrong, with the operands' types: the first broken condition, not every one. An operand
/// that is not a value of `g` is `graph.order`.
pub fn result_type(
    g: &Graph,
    op: &Op,
    given: Option<&TensorType>,
) -> Result<TensorType, TypeError> {
    let rule = rule_name(op);
    let ty = |v: &Value| -> Result<&TensorType, TypeError> {
        match g.types.get(*v) {
            Some(t) if v.as_u32() < g.ops.len() as u32 => Ok(t),
            _ => fail("graph.order", format!("operand {v} is not a value")),
        }
    };
    let need = || -> Result<TensorType, TypeError> {
        given.cloned().ok_or_else(|| TypeError {
            rule,
            message: "the result type must be given".into(),
        })
    };
    let err = |message: String| -> Result<TensorType, TypeError> { fail(rule, message) };
    match op {
        Op::Input { .. } => need(),
        Op::Const { value } => {
            let t = need()?;
            match const_fits(*value, t.dtype) {
                Ok(()) => Ok(t),
                Err(m) => err(m),
            }
        }
        Op::Iota { axis } => {
            let t = need()?;
            if *axis as usize >= t.shape.rank() {
                return err(format!("axis {axis} is out of range for {t}"));
            }
            if t.dtype == DType::Bool {
                return err("iota of bool".into());
            }
            Ok(t)
        }
        Op::Unary { op, arg } => {
            let a = ty(arg)?;
            let ok = match op {
                UnaryOp::Not => a.dtype == DType::Bool,
                UnaryOp::Neg | UnaryOp::Abs => a.dtype != DType::Bool,
                // Rounding on i32 is the identity, which `check` gives without an op;
                // lowering has no integer form of it.
                _ => a.dtype.is_float(),
            };
            if !ok {
                return err(format!(
                    "{op:?} is not defined on {} (operand {arg})",
                    a.dtype
                ));
            }
            Ok(a.clone())
        }
        Op::Binary { op, lhs, rhs } => {
            let (l, r) = (ty(lhs)?, ty(rhs)?);
            if l != r {
                return err(format!("operands differ: {lhs} is {l}, {rhs} is {r}"));
            }
            use BinaryOp::*;
            let ok = match op {
                And | Or => l.dtype == DType::Bool,
                Pow => l.dtype.is_float(),
                Add | Sub | Mul | Div | Rem | Min | Max => l.dtype != DType::Bool,
                Eq | Ne | Lt | Le | Gt | Ge => true,
            };
            if !ok {
                return err(format!("{op:?} is not defined on {}", l.dtype));
            }
            let cmp = matches!(op, Eq | Ne | Lt | Le | Gt | Ge);
            Ok(TensorType::new(
                if cmp { DType::Bool } else { l.dtype },
                l.shape.0.clone(),
            ))
        }
        Op::Select {
            cond,
            on_true,
            on_false,
        } => {
            let (c, t, f) = (ty(cond)?, ty(on_true)?, ty(on_false)?);
            if t != f {
                return err(format!("arms differ: {on_true} is {t}, {on_false} is {f}"));
            }
            if c.dtype != DType::Bool || c.shape != t.shape {
                return err(format!(
                    "condition {cond} is {c}, expected bool{} (the arms' shape)",
                    t.shape
                ));
            }
            Ok(t.clone())
        }
        Op::Cast { arg } => {
            let (a, t) = (ty(arg)?, need()?);
            if a.shape != t.shape {
                return err(format!(
                    "operand {arg} is {a}, the result {t}: shapes differ"
                ));
            }
            Ok(t)
        }
        Op::Broadcast { arg } => {
            let (a, t) = (ty(arg)?, need()?);
            if a.dtype != t.dtype {
                return err(format!("operand {arg} is {a}, the result {t}"));
            }
            if a.shape.rank() != t.shape.rank() {
                return err(format!(
                    "rank of {arg} ({}) is not the result's ({})",
                    a.shape, t.shape
                ));
            }
            if a.shape
                .0
                .iter()
                .zip(&t.shape.0)
                .any(|(x, y)| *x != 1 && x != y)
            {
                return err(format!("{} does not broadcast to {}", a.shape, t.shape));
            }
            Ok(t)
        }
        Op::Reshape { arg } => {
            let (a, t) = (ty(arg)?, need()?);
            if a.dtype != t.dtype {
                return err(format!("operand {arg} is {a}, the result {t}"));
            }
            if checked_numel(&a.shape.0) != checked_numel(&t.shape.0) {
                return err(format!(
                    "{} and {} have different element counts",
                    a.shape, t.shape
                ));
            }
            Ok(t)
        }
        Op::Permute { arg, perm } => {
            let a = ty(arg)?;
            let n = a.shape.rank();
            let mut seen = vec![false; n];
            let is_perm = perm.len() == n
                && perm
                    .iter()
                    .all(|&p| (p as usize) < n && !std::mem::replace(&mut seen[p as usize], true));
            if !is_perm {
                return err(format!(
                    "{perm:?} is not a permutation of the {n} axes of {arg}"
                ));
            }
            let shape = perm.iter().map(|&p| a.shape.0[p as usize]).collect();
            Ok(TensorType::new(a.dtype, shape))
        }
        Op::Reduce { op, arg, axis } => {
            let a = ty(arg)?;
            let ax = *axis as usize;
            if ax >= a.shape.rank() {
                return err(format!("axis {axis} is out of range for {a}"));
            }
            let index = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
            let float_only = matches!(op, ReduceOp::Mean | ReduceOp::LogSumExp);
            if (float_only && !a.dtype.is_float()) || (index && a.dtype == DType::Bool) {
                return err(format!(
                    "{} is not defined on {}",
                    crate::text::reduce_name(*op),
                    a.dtype
                ));
            }
            let mut shape = a.shape.0.clone();
            shape[ax] = 1;
            // An index reduction gives i32 positions; the others keep the dtype.
            Ok(TensorType::new(
                if index { DType::I32 } else { a.dtype },
                shape,
            ))
        }
        Op::Slice { arg, axis, start } => {
            let (a, t) = (ty(arg)?, need()?);
            if a.dtype != t.dtype {
                return err(format!("operand {arg} is {a}, the result {t}"));
            }
            let ax = *axis as usize;
            if ax >= a.shape.rank() || a.shape.rank() != t.shape.rank() {
                return err(format!(
                    "axis {axis} of {} is out of range or ranks differ from {}",
                    a.shape, t.shape
                ));
            }
            let len = t.shape.0[ax];
            if start.checked_add(len).is_none_or(|end| end > a.shape.0[ax]) {
                return err(format!(
                    "slice {start}..{start}+{len} is out of bounds of axis {axis} of {}",
                    a.shape
                ));
            }
            if (0..a.shape.rank()).any(|i| i != ax && a.shape.0[i] != t.shape.0[i]) {
                return err(format!(
                    "dims off axis {axis} differ: {} vs {}",
                    a.shape, t.shape
                ));
            }
            Ok(t)
        }
        Op::Concat { args, axis } => {
            let Some(first) = args.first() else {
                return err("no operands".into());
            };
            let f = ty(first)?;
            let ax = *axis as usize;
            if ax >= f.shape.rank() {
                return err(format!("axis {axis} is out of range for {f}"));
            }
            let mut shape = f.shape.0.clone();
            shape[ax] = 0;
            for a in args {
                let t = ty(a)?;
                if t.dtype != f.dtype
                    || t.shape.rank() != f.shape.rank()
                    || (0..t.shape.rank()).any(|i| i != ax && t.shape.0[i] != f.shape.0[i])
                {
                    return err(format!(
                        "operand {a} is {t}, which does not join {first} ({f}) along axis {axis}"
                    ));
                }
                shape[ax] = match shape[ax].checked_add(t.shape.0[ax]) {
                    Some(s) => s,
                    None => return err(format!("sizes along axis {axis} overflow u64")),
                };
            }
            Ok(TensorType::new(f.dtype, shape))
        }
        Op::Softmax { arg, axis } => {
            let a = ty(arg)?;
            if !a.dtype.is_float() {
                return err(format!("softmax is not defined on {}", a.dtype));
            }
            if *axis as usize >= a.shape.rank() {
                return err(format!("axis {axis} is out of range for {a}"));
            }
            Ok(a.clone())
        }
        Op::Cumsum { arg, axis } => {
            let a = ty(arg)?;
            if a.dtype == DType::Bool {
                return err(format!("cumsum is not defined on bool (operand {arg})"));
            }
            if *axis as usize >= a.shape.rank() {
                return err(format!("axis {axis} is out of range for {a}"));
            }
            Ok(a.clone())
        }
        Op::TopK {
            arg, axis, indices, ..
        } => {
            let (a, t) = (ty(arg)?, need()?);
            let ax = *axis as usize;
            let want = if *indices { DType::I32 } else { a.dtype };
            if t.dtype != want || a.dtype == DType::Bool {
                return err(format!(
                    "operand {arg} is {a}, the result {t}: not bool, and the result the operand's dtype (values) or i32 (indices)"
                ));
            }
            if ax >= a.shape.rank() || a.shape.rank() != t.shape.rank() {
                return err(format!(
                    "axis {axis} is out of range or ranks differ: {a} and {t}"
                ));
            }
            let k = t.shape.0[ax];
            let off_axis = (0..a.shape.rank()).any(|i| i != ax && a.shape.0[i] != t.shape.0[i]);
            if k < 1 || k > a.shape.0[ax] || off_axis {
                return err(format!(
                    "{t} is not k of {a} along axis {axis} (1 <= k <= its length)"
                ));
            }
            Ok(t)
        }
        Op::MatMul { lhs, rhs } => {
            let (l, r) = (ty(lhs)?, ty(rhs)?);
            let (ls, rs) = (&l.shape.0, &r.shape.0);
            let n = ls.len();
            let ok =
                n >= 2 && rs.len() == n && ls[..n - 2] == rs[..n - 2] && ls[n - 1] == rs[n - 2];
            if !ok {
                return err(format!(
                    "{l} @ {r}: the shapes are not [.., M, K] @ [.., K, N]"
                ));
            }
            if l.dtype != r.dtype || !l.dtype.is_float() {
                return err(format!(
                    "operands {} and {} must be one float dtype",
                    l.dtype, r.dtype
                ));
            }
            let mut shape = ls.clone();
            shape[n - 1] = rs[n - 1];
            Ok(TensorType::new(l.dtype, shape))
        }
        Op::Attention { logits, v, bound } => {
            let (l, x) = (ty(logits)?, ty(v)?);
            if let Some(b) = bound {
                let b = ty(b)?;
                let mut want = l.shape.0.clone();
                if let Some(last) = want.last_mut() {
                    *last = 1;
                }
                if b.dtype != DType::I32 || b.shape.0 != want {
                    return err(format!(
                        "the bound is {b}, not i32 with the logits' shape and 1 key"
                    ));
                }
            }
            let (ls, xs) = (&l.shape.0, &x.shape.0);
            let n = ls.len();
            let ok =
                n >= 2 && xs.len() == n && ls[..n - 2] == xs[..n - 2] && ls[n - 1] == xs[n - 2];
            if !ok {
                return err(format!(
                    "softmax({l}) @ {x}: the shapes are not [.., M, N] @ [.., N, E]"
                ));
            }
            if l.dtype != DType::F32 || !x.dtype.is_float() {
                return err(format!(
                    "logits must be f32 and v a float dtype: {} {}",
                    l.dtype, x.dtype
                ));
            }
            let mut shape = ls.clone();
            shape[n - 1] = xs[n - 1];
            Ok(TensorType::new(x.dtype, shape))
        }
        Op::AttentionStat { logits, bound, .. } => {
            let l = ty(logits)?;
            let mut want = l.shape.0.clone();
            if want.len() < 2 || l.dtype != DType::F32 {
                return err(format!("the logits are {l}, not f32 [.., M, N]"));
            }
            if let Some(last) = want.last_mut() {
                *last = 1;
            }
            if let Some(b) = bound {
                let b = ty(b)?;
                if b.dtype != DType::I32 || b.shape.0 != want {
                    return err(format!(
                        "the bound is {b}, not i32 with the logits' shape and 1 key"
                    ));
                }
            }
            Ok(TensorType::new(DType::F32, want))
        }
        Op::Update { dst, rows, at } => {
            let (d, r) = (ty(dst)?, ty(rows)?);
            if r.dtype != d.dtype {
                return err(format!(
                    "rows {rows} are {r} and dst {dst} is {d}: one dtype"
                ));
            }
            let Some(UpdateAt { pos, axis }) = at else {
                if r.shape != d.shape {
                    return err(format!(
                        "a whole update writes {rows} of {} into {dst} of {}: one shape",
                        r.shape, d.shape
                    ));
                }
                return Ok(d.clone());
            };
            let p = ty(pos)?;
            let ax = *axis as usize;
            let n = d.shape.rank();
            if ax == 0 || ax >= n {
                return err(format!(
                    "axis {axis} of {d}: an update writes along an axis after the first"
                ));
            }
            let fits = r.shape.rank() == n
                && (0..n).all(|i| i == ax || r.shape.0[i] == d.shape.0[i])
                && r.shape.0[ax] <= d.shape.0[ax]
                && d.shape.0[ax] <= i32::MAX as u64;
            if !fits {
                return err(format!(
                    "rows {} do not fit {} along axis {axis} (same dims but the axis, at most its length, which is below 2^31)",
                    r.shape, d.shape
                ));
            }
            if p.dtype != DType::I32 || p.shape.0 != [d.shape.0[0]] {
                return err(format!(
                    "positions {pos} are {p}, not i32 with one entry per index of {dst}'s first dim"
                ));
            }
            Ok(d.clone())
        }
        Op::Gather { arg, index, axis } => {
            let (a, i) = (ty(arg)?, ty(index)?);
            let ax = *axis as usize;
            let n = a.shape.rank();
            if i.dtype != DType::I32 {
                return err(format!("index {index} is {i}, not i32"));
            }
            if ax >= n {
                return err(format!("axis {axis} is out of range for {a}"));
            }
            let fits = i.shape.rank() == n
                && (0..n).all(|d| d == ax || i.shape.0[d] == a.shape.0[d])
                && a.shape.0[ax] <= i32::MAX as u64;
            if !fits {
                return err(format!(
                    "index {} does not fit {} (same dims but along axis {axis}, whose length is below 2^31)",
                    i.shape, a.shape
                ));
            }
            // The operand's dtype at the index's shape.
            Ok(TensorType::new(a.dtype, i.shape.0.clone()))
        }
        Op::Grad {
            wrt,
            outputs,
            seeds,
        } => {
            let w = ty(wrt)?;
            if !w.dtype.is_float() {
                return err(format!(
                    "the gradient with respect to {wrt} ({w}) must be float"
                ));
            }
            if outputs.is_empty() || outputs.len() != seeds.len() {
                return err(format!(
                    "{} outputs and {} seeds: one seed per output, at least one",
                    outputs.len(),
                    seeds.len()
                ));
            }
            for (o, s) in outputs.iter().zip(seeds) {
                let (ot, st) = (ty(o)?, ty(s)?);
                if ot != st || !ot.dtype.is_float() {
                    return err(format!(
                        "seed {s} is {st}, output {o} is {ot}: one float type"
                    ));
                }
            }
            // The gradient has the type of what it is taken with respect to.
            Ok(w.clone())
        }
    }
}

/// Pushes typed ops onto a graph ([`result_type`] gives each result type).
///
/// The graph's topological order is the caller's to keep, as for [`Graph::push`]: every
/// operand must already be in the graph, which the builder checks.
pub struct Builder<'g> {
    pub graph: &'g mut Graph,
}

/// What a builder method returns.
pub type Built = Result<Value, TypeError>;

impl<'g> Builder<'g> {
    pub fn new(graph: &'g mut Graph) -> Self {
        Builder { graph }
    }

    /// The type of `v`.
    pub fn ty(&self, v: Value) -> &TensorType {
        self.graph.ty(v)
    }

    /// The shape of `v`, as a slice of dims.
    pub fn dims(&self, v: Value) -> &[u64] {
        &self.graph.ty(v).shape.0
    }

    /// The dtype of `v`.
    pub fn dtype(&self, v: Value) -> DType {
        self.graph.ty(v).dtype
    }

    /// Pushes `op`, typed by [`result_type`] (`given` for the ops that carry their type).
    pub fn op(&mut self, op: Op, given: Option<TensorType>) -> Built {
        let ty = result_type(self.graph, &op, given.as_ref())?;
        Ok(self.graph.push(op, ty))
    }

    /// A tensor of `ty` whose every element is `value` (rounded to `ty`'s dtype): a `[]`
    /// constant broadcast to the shape, as `check` builds literals.
    pub fn full(&mut self, value: f64, ty: &TensorType) -> Built {
        let value = round_to(value, ty.dtype);
        let c = self.op(Op::Const { value }, Some(TensorType::new(ty.dtype, vec![])))?;
        self.broadcast_scalar(c, &ty.shape.0)
    }

    /// A tensor like `v` (its type) filled with `value`.
    pub fn full_like(&mut self, value: f64, v: Value) -> Built {
        let ty = self.ty(v).clone();
        self.full(value, &ty)
    }

    /// A `[]` value `s` broadcast to `shape` (a reshape to all 1s, then a broadcast).
    pub fn broadcast_scalar(&mut self, s: Value, shape: &[u64]) -> Built {
        if shape.is_empty() {
            return Ok(s);
        }
        let ones = self.reshape(s, &vec![1; shape.len()])?;
        self.broadcast(ones, shape)
    }

    /// `iota` along `axis` of a tensor of `ty`.
    pub fn iota(&mut self, axis: u32, ty: TensorType) -> Built {
        self.op(Op::Iota { axis }, Some(ty))
    }

    pub fn unary(&mut self, op: UnaryOp, arg: Value) -> Built {
        self.op(Op::Unary { op, arg }, None)
    }

    pub fn binary(&mut self, op: BinaryOp, lhs: Value, rhs: Value) -> Built {
        self.op(Op::Binary { op, lhs, rhs }, None)
    }

    pub fn add(&mut self, a: Value, b: Value) -> Built {
        self.binary(BinaryOp::Add, a, b)
    }

    pub fn sub(&mut self, a: Value, b: Value) -> Built {
        self.binary(BinaryOp::Sub, a, b)
    }

    pub fn mul(&mut self, a: Value, b: Value) -> Built {
        self.binary(BinaryOp::Mul, a, b)
    }

    pub fn div(&mut self, a: Value, b: Value) -> Built {
        self.binary(BinaryOp::Div, a, b)
    }

    pub fn neg(&mut self, a: Value) -> Built {
        self.unary(UnaryOp::Neg, a)
    }

    /// `a * c` for a scalar constant `c` (in `a`'s dtype).
    pub fn scale(&mut self, a: Value, c: f64) -> Built {
        let k = self.full_like(c, a)?;
        self.mul(a, k)
    }

    pub fn select(&mut self, cond: Value, on_true: Value, on_false: Value) -> Built {
        self.op(
            Op::Select {
                cond,
                on_true,
                on_false,
            },
            None,
        )
    }

    /// `arg` converted to `dtype` (`arg` itself when it has it already).
    pub fn cast(&mut self, arg: Value, dtype: DType) -> Built {
        if self.dtype(arg) == dtype {
            return Ok(arg);
        }
        let shape = self.dims(arg).to_vec();
        self.op(Op::Cast { arg }, Some(TensorType::new(dtype, shape)))
    }

    /// `arg` broadcast to `shape` (same rank; `arg` itself when the shapes are equal).
    pub fn broadcast(&mut self, arg: Value, shape: &[u64]) -> Built {
        if self.dims(arg) == shape {
            return Ok(arg);
        }
        let dt = self.dtype(arg);
        self.op(
            Op::Broadcast { arg },
            Some(TensorType::new(dt, shape.to_vec())),
        )
    }

    /// `arg` reshaped to `shape` (`arg` itself when the shapes are equal).
    pub fn reshape(&mut self, arg: Value, shape: &[u64]) -> Built {
        if self.dims(arg) == shape {
            return Ok(arg);
        }
        let dt = self.dtype(arg);
        self.op(
            Op::Reshape { arg },
            Some(TensorType::new(dt, shape.to_vec())),
        )
    }

    pub fn permute(&mut self, arg: Value, perm: Vec<u32>) -> Built {
        self.op(Op::Permute { arg, perm }, None)
    }

    /// `arg` with its last two axes swapped.
    pub fn transpose(&mut self, arg: Value) -> Built {
        let n = self.dims(arg).len() as u32;
        let mut perm: Vec<u32> = (0..n).collect();
        if n >= 2 {
            perm.swap(n as usize - 1, n as usize - 2);
        }
        self.permute(arg, perm)
    }

    pub fn reduce(&mut self, op: ReduceOp, arg: Value, axis: u32) -> Built {
        self.op(Op::Reduce { op, arg, axis }, None)
    }

    pub fn sum(&mut self, arg: Value, axis: u32) -> Built {
        self.reduce(ReduceOp::Sum, arg, axis)
    }

    /// `arg[.., start .. start + len, ..]` along `axis`.
    pub fn slice(&mut self, arg: Value, axis: u32, start: u64, len: u64) -> Built {
        let mut t = self.ty(arg).clone();
        if let Some(d) = t.shape.0.get_mut(axis as usize) {
            *d = len;
        }
        self.op(Op::Slice { arg, axis, start }, Some(t))
    }

    pub fn concat(&mut self, args: Vec<Value>, axis: u32) -> Built {
        if let [one] = args[..] {
            return Ok(one);
        }
        self.op(Op::Concat { args, axis }, None)
    }

    pub fn softmax(&mut self, arg: Value, axis: u32) -> Built {
        self.op(Op::Softmax { arg, axis }, None)
    }

    pub fn cumsum(&mut self, arg: Value, axis: u32) -> Built {
        self.op(Op::Cumsum { arg, axis }, None)
    }

    pub fn matmul(&mut self, lhs: Value, rhs: Value) -> Built {
        self.op(Op::MatMul { lhs, rhs }, None)
    }

    pub fn gather(&mut self, arg: Value, index: Value, axis: u32) -> Built {
        self.op(Op::Gather { arg, index, axis }, None)
    }
}

/// `x` rounded to the nearest value of `dtype`: for a float dtype, ties to even, directly
/// from f64 so there is no double rounding through f32 (overflow gives ±inf, underflow
/// keeps subnormals); an i32 truncates toward zero, saturating, as [`Op::Cast`] converts;
/// a bool is `x != 0`. What a constant of that dtype holds (`check` rounds literals so).
pub fn round_to(x: f64, dtype: DType) -> f64 {
    // (significand bits including the implicit one, minimum normal exponent, maximum exponent)
    let (p, emin, emax): (i32, i32, i32) = match dtype {
        DType::Bf16 => (8, -126, 127),
        DType::F16 => (11, -14, 15),
        DType::F32 => (24, -126, 127),
        DType::I32 => return x.trunc().clamp(i32::MIN as f64, i32::MAX as f64),
        DType::Bool => return (x != 0.0) as u8 as f64,
    };
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let a = x.abs();
    let biased = ((a.to_bits() >> 52) & 0x7ff) as i32;
    // f64 subnormals are far below every target's subnormal range: they land on `emin`.
    let e = if biased == 0 {
        emin
    } else {
        (biased - 1023).max(emin)
    };
    let quantum = pow2(e - (p - 1));
    // `a / quantum` and the product below are exact: scaling by a power of two.
    let r = (a / quantum).round_ties_even() * quantum;
    let r = if r >= pow2(emax + 1) {
        f64::INFINITY
    } else {
        r
    };
    r.copysign(x)
}

fn pow2(e: i32) -> f64 {
    // Every exponent used here is within f64's normal range (-1022..=1023).
    f64::from_bits(((e + 1023) as u64) << 52)
}

#[cfg(test)]
// Each case spells its operand types in place (`&[x.clone()]`), one case a line.
#[allow(clippy::cloned_ref_to_slice_refs)]
mod tests {
    //! One right and one wrong op per rule: the right one's type is the rule's (worked out
    //! here by hand), the wrong one fails under the rule's name.
    use super::*;
    use crate::graph::{ReduceOp, RowStat};
    use DType::*;

    fn t(dtype: DType, dims: &[u64]) -> TensorType {
        TensorType::new(dtype, dims.to_vec())
    }

    /// A graph with one input per type in `ins`.
    fn graph(ins: &[TensorType]) -> (Graph, Vec<Value>) {
        let mut g = Graph::new("t");
        let vs = ins
            .iter()
            .enumerate()
            .map(|(i, ty)| {
                let v = g.push(
                    Op::Input {
                        index: i as u32,
                        inout: false,
                    },
                    ty.clone(),
                );
                g.inputs.push((format!("x{i}"), v));
                v
            })
            .collect();
        (g, vs)
    }

    /// The rule's type of `op` over inputs of types `ins` (`op` built from their values).
    fn rt(
        ins: &[TensorType],
        op: impl FnOnce(&[Value]) -> Op,
        given: Option<TensorType>,
    ) -> Result<TensorType, TypeError> {
        let (g, vs) = graph(ins);
        result_type(&g, &op(&vs), given.as_ref())
    }

    #[track_caller]
    fn broken(r: Result<TensorType, TypeError>, rule: &str) {
        match r {
            Err(e) => assert_eq!(e.rule, rule, "{e}"),
            Ok(ty) => panic!("expected {rule}, got {ty}"),
        }
    }

    #[test]
    fn input_and_const() {
        let op = Op::Input {
            index: 0,
            inout: false,
        };
        assert_eq!(
            rt(&[], |_| op.clone(), Some(t(F32, &[3]))),
            Ok(t(F32, &[3]))
        );
        broken(rt(&[], |_| op.clone(), None), "graph.input");
        let c = |value| move |_: &[Value]| Op::Const { value };
        assert_eq!(rt(&[], c(0.5), Some(t(Bf16, &[]))), Ok(t(Bf16, &[])));
        assert_eq!(rt(&[], c(-7.0), Some(t(I32, &[2]))), Ok(t(I32, &[2])));
        // 0.1 is not a bf16, 2^31 not an i32, 2 not a bool, 65520 beyond f16's max.
        broken(rt(&[], c(0.1), Some(t(Bf16, &[]))), "graph.const");
        broken(rt(&[], c(2147483648.0), Some(t(I32, &[]))), "graph.const");
        broken(rt(&[], c(2.0), Some(t(Bool, &[]))), "graph.const");
        broken(rt(&[], c(65520.0), Some(t(F16, &[]))), "graph.const");
        broken(rt(&[], c(1.0), None), "graph.const");
    }

    #[test]
    fn iota() {
        let op = |_: &[Value]| Op::Iota { axis: 1 };
        assert_eq!(rt(&[], op, Some(t(I32, &[5, 7]))), Ok(t(I32, &[5, 7])));
        broken(rt(&[], op, Some(t(I32, &[5]))), "graph.iota");
        broken(rt(&[], op, Some(t(Bool, &[5, 7]))), "graph.iota");
    }

    #[test]
    fn unary() {
        let u = |op| move |v: &[Value]| Op::Unary { op, arg: v[0] };
        assert_eq!(
            rt(&[t(F16, &[3, 1])], u(UnaryOp::Exp), None),
            Ok(t(F16, &[3, 1]))
        );
        assert_eq!(rt(&[t(I32, &[4])], u(UnaryOp::Neg), None), Ok(t(I32, &[4])));
        assert_eq!(
            rt(&[t(Bool, &[4])], u(UnaryOp::Not), None),
            Ok(t(Bool, &[4]))
        );
        broken(rt(&[t(I32, &[4])], u(UnaryOp::Exp), None), "graph.unary");
        broken(rt(&[t(I32, &[4])], u(UnaryOp::Floor), None), "graph.unary");
        broken(rt(&[t(Bool, &[4])], u(UnaryOp::Abs), None), "graph.unary");
        broken(rt(&[t(F32, &[4])], u(UnaryOp::Not), None), "graph.unary");
    }

    #[test]
    fn binary() {
        let b = |op| {
            move |v: &[Value]| Op::Binary {
                op,
                lhs: v[0],
                rhs: v[1],
            }
        };
        let x = t(Bf16, &[2, 3]);
        assert_eq!(
            rt(&[x.clone(), x.clone()], b(BinaryOp::Sub), None),
            Ok(x.clone())
        );
        assert_eq!(
            rt(&[x.clone(), x.clone()], b(BinaryOp::Lt), None),
            Ok(t(Bool, &[2, 3]))
        );
        broken(
            rt(&[x.clone(), t(Bf16, &[3, 2])], b(BinaryOp::Add), None),
            "graph.binary",
        );
        broken(
            rt(&[x.clone(), t(F32, &[2, 3])], b(BinaryOp::Add), None),
            "graph.binary",
        );
        broken(
            rt(&[x.clone(), x.clone()], b(BinaryOp::And), None),
            "graph.binary",
        );
        let i = t(I32, &[5]);
        broken(rt(&[i.clone(), i], b(BinaryOp::Pow), None), "graph.binary");
        let p = t(Bool, &[5]);
        broken(rt(&[p.clone(), p], b(BinaryOp::Mul), None), "graph.binary");
    }

    #[test]
    fn select() {
        let s = |v: &[Value]| Op::Select {
            cond: v[0],
            on_true: v[1],
            on_false: v[2],
        };
        let x = t(F32, &[3, 5]);
        assert_eq!(
            rt(&[t(Bool, &[3, 5]), x.clone(), x.clone()], s, None),
            Ok(x.clone())
        );
        broken(
            rt(&[t(I32, &[3, 5]), x.clone(), x.clone()], s, None),
            "graph.select",
        );
        broken(
            rt(&[t(Bool, &[3, 1]), x.clone(), x.clone()], s, None),
            "graph.select",
        );
        broken(
            rt(&[t(Bool, &[3, 5]), x, t(Bf16, &[3, 5])], s, None),
            "graph.select",
        );
    }

    #[test]
    fn cast() {
        let c = |v: &[Value]| Op::Cast { arg: v[0] };
        let x = t(F32, &[2, 7]);
        assert_eq!(
            rt(&[x.clone()], c, Some(t(I32, &[2, 7]))),
            Ok(t(I32, &[2, 7]))
        );
        broken(rt(&[x.clone()], c, Some(t(Bf16, &[7, 2]))), "graph.cast");
        broken(rt(&[x], c, None), "graph.cast");
    }

    #[test]
    fn broadcast() {
        let op = |v: &[Value]| Op::Broadcast { arg: v[0] };
        let x = t(F16, &[1, 3, 1]);
        let to = t(F16, &[4, 3, 9]);
        assert_eq!(rt(&[x.clone()], op, Some(to.clone())), Ok(to));
        broken(
            rt(&[x.clone()], op, Some(t(F16, &[4, 5, 9]))),
            "graph.broadcast",
        );
        broken(
            rt(&[x.clone()], op, Some(t(F16, &[4, 3]))),
            "graph.broadcast",
        );
        broken(rt(&[x], op, Some(t(F32, &[4, 3, 9]))), "graph.broadcast");
    }

    #[test]
    fn reshape() {
        let op = |v: &[Value]| Op::Reshape { arg: v[0] };
        let x = t(I32, &[6, 5]);
        assert_eq!(
            rt(&[x.clone()], op, Some(t(I32, &[3, 1, 10]))),
            Ok(t(I32, &[3, 1, 10]))
        );
        broken(rt(&[x.clone()], op, Some(t(I32, &[31]))), "graph.reshape");
        broken(rt(&[x.clone()], op, Some(t(F32, &[30]))), "graph.reshape");
        // Element counts that overflow u64 are not equal to anything.
        broken(
            rt(&[x], op, Some(t(I32, &[1 << 32, 1 << 32, 30]))),
            "graph.reshape",
        );
    }

    #[test]
    fn permute() {
        let p = |perm: Vec<u32>| move |v: &[Value]| Op::Permute { arg: v[0], perm };
        let x = t(Bf16, &[2, 3, 5]);
        assert_eq!(
            rt(&[x.clone()], p(vec![2, 0, 1]), None),
            Ok(t(Bf16, &[5, 2, 3]))
        );
        broken(rt(&[x.clone()], p(vec![0, 0, 1]), None), "graph.permute");
        broken(rt(&[x.clone()], p(vec![0, 1]), None), "graph.permute");
        broken(rt(&[x], p(vec![0, 1, 3]), None), "graph.permute");
    }

    #[test]
    fn reduce() {
        let r = |op, axis| {
            move |v: &[Value]| Op::Reduce {
                op,
                arg: v[0],
                axis,
            }
        };
        let x = t(F16, &[4, 9]);
        assert_eq!(
            rt(&[x.clone()], r(ReduceOp::Sum, 1), None),
            Ok(t(F16, &[4, 1]))
        );
        assert_eq!(
            rt(&[x.clone()], r(ReduceOp::ArgMax, 0), None),
            Ok(t(I32, &[1, 9]))
        );
        broken(rt(&[x], r(ReduceOp::Max, 2), None), "graph.reduce");
        broken(
            rt(&[t(I32, &[4])], r(ReduceOp::Mean, 0), None),
            "graph.reduce",
        );
        broken(
            rt(&[t(Bool, &[4])], r(ReduceOp::ArgMin, 0), None),
            "graph.reduce",
        );
    }

    #[test]
    fn slice() {
        let s = |axis, start| {
            move |v: &[Value]| Op::Slice {
                arg: v[0],
                axis,
                start,
            }
        };
        let x = t(F32, &[3, 10]);
        assert_eq!(
            rt(&[x.clone()], s(1, 7), Some(t(F32, &[3, 3]))),
            Ok(t(F32, &[3, 3]))
        );
        broken(
            rt(&[x.clone()], s(1, 8), Some(t(F32, &[3, 3]))),
            "graph.slice",
        );
        broken(
            rt(&[x.clone()], s(1, u64::MAX), Some(t(F32, &[3, 3]))),
            "graph.slice",
        );
        broken(
            rt(&[x.clone()], s(2, 0), Some(t(F32, &[3, 3]))),
            "graph.slice",
        );
        broken(
            rt(&[x.clone()], s(1, 0), Some(t(F32, &[2, 3]))),
            "graph.slice",
        );
        broken(rt(&[x], s(1, 0), Some(t(F16, &[3, 3]))), "graph.slice");
    }

    #[test]
    fn concat() {
        let c = |n: usize, axis| {
            move |v: &[Value]| Op::Concat {
                args: v[..n].to_vec(),
                axis,
            }
        };
        let (a, b) = (t(I32, &[2, 3]), t(I32, &[2, 5]));
        assert_eq!(
            rt(&[a.clone(), b.clone()], c(2, 1), None),
            Ok(t(I32, &[2, 8]))
        );
        assert_eq!(rt(&[a.clone()], c(1, 0), None), Ok(a.clone()));
        broken(rt(&[a.clone(), b.clone()], c(2, 0), None), "graph.concat");
        broken(
            rt(&[a.clone(), t(F32, &[2, 5])], c(2, 1), None),
            "graph.concat",
        );
        broken(rt(&[a.clone()], c(1, 2), None), "graph.concat");
        broken(rt(&[a], c(0, 0), None), "graph.concat");
    }

    #[test]
    fn softmax_and_cumsum() {
        let s = |axis| move |v: &[Value]| Op::Softmax { arg: v[0], axis };
        let c = |axis| move |v: &[Value]| Op::Cumsum { arg: v[0], axis };
        let x = t(Bf16, &[3, 33]);
        assert_eq!(rt(&[x.clone()], s(1), None), Ok(x.clone()));
        broken(rt(&[x.clone()], s(2), None), "graph.softmax");
        broken(rt(&[t(I32, &[3])], s(0), None), "graph.softmax");
        assert_eq!(rt(&[t(I32, &[1, 5])], c(1), None), Ok(t(I32, &[1, 5])));
        broken(rt(&[x], c(2), None), "graph.cumsum");
        broken(rt(&[t(Bool, &[3])], c(0), None), "graph.cumsum");
    }

    #[test]
    fn topk() {
        let k = |indices| {
            move |v: &[Value]| Op::TopK {
                arg: v[0],
                axis: 1,
                largest: true,
                indices,
            }
        };
        let x = t(F32, &[2, 6]);
        assert_eq!(
            rt(&[x.clone()], k(false), Some(t(F32, &[2, 6]))),
            Ok(t(F32, &[2, 6]))
        );
        assert_eq!(
            rt(&[x.clone()], k(true), Some(t(I32, &[2, 1]))),
            Ok(t(I32, &[2, 1]))
        );
        broken(
            rt(&[x.clone()], k(true), Some(t(F32, &[2, 1]))),
            "graph.topk",
        );
        broken(
            rt(&[x.clone()], k(false), Some(t(F32, &[2, 7]))),
            "graph.topk",
        );
        broken(
            rt(&[x.clone()], k(false), Some(t(F32, &[2, 0]))),
            "graph.topk",
        );
        broken(rt(&[x], k(false), Some(t(F32, &[3, 2]))), "graph.topk");
        broken(
            rt(&[t(Bool, &[2, 6])], k(false), Some(t(Bool, &[2, 2]))),
            "graph.topk",
        );
    }

    #[test]
    fn matmul() {
        let m = |v: &[Value]| Op::MatMul {
            lhs: v[0],
            rhs: v[1],
        };
        let (a, b) = (t(Bf16, &[4, 3, 5]), t(Bf16, &[4, 5, 7]));
        assert_eq!(
            rt(&[a.clone(), b.clone()], m, None),
            Ok(t(Bf16, &[4, 3, 7]))
        );
        broken(rt(&[a.clone(), a.clone()], m, None), "graph.matmul");
        broken(
            rt(&[a.clone(), t(Bf16, &[2, 5, 7])], m, None),
            "graph.matmul",
        );
        broken(
            rt(&[a.clone(), t(F16, &[4, 5, 7])], m, None),
            "graph.matmul",
        );
        broken(
            rt(&[t(I32, &[3, 5]), t(I32, &[5, 7])], m, None),
            "graph.matmul",
        );
        broken(rt(&[t(F32, &[5]), t(F32, &[5])], m, None), "graph.matmul");
    }

    #[test]
    fn attention() {
        let at = |bound: bool| {
            move |v: &[Value]| Op::Attention {
                logits: v[0],
                v: v[1],
                bound: bound.then(|| v[2]),
            }
        };
        let (l, x) = (t(F32, &[2, 3, 8]), t(Bf16, &[2, 8, 5]));
        let b = t(I32, &[2, 3, 1]);
        assert_eq!(
            rt(&[l.clone(), x.clone(), b.clone()], at(true), None),
            Ok(t(Bf16, &[2, 3, 5]))
        );
        broken(
            rt(&[l.clone(), x.clone(), t(I32, &[2, 3, 8])], at(true), None),
            "graph.attention",
        );
        broken(
            rt(&[t(Bf16, &[2, 3, 8]), x.clone()], at(false), None),
            "graph.attention",
        );
        broken(
            rt(&[l, t(Bf16, &[2, 7, 5])], at(false), None),
            "graph.attention",
        );
    }

    #[test]
    fn attention_stat() {
        let lse = |bound: bool| {
            move |v: &[Value]| Op::AttentionStat {
                stat: RowStat::Sum,
                logits: v[0],
                bound: bound.then(|| v[1]),
            }
        };
        let l = t(F32, &[2, 3, 8]);
        assert_eq!(
            rt(&[l.clone(), t(I32, &[2, 3, 1])], lse(true), None),
            Ok(t(F32, &[2, 3, 1]))
        );
        assert_eq!(rt(&[l.clone()], lse(false), None), Ok(t(F32, &[2, 3, 1])));
        broken(
            rt(&[l.clone(), t(I32, &[2, 3, 8])], lse(true), None),
            "graph.attention_stat",
        );
        broken(
            rt(&[t(Bf16, &[2, 3, 8])], lse(false), None),
            "graph.attention_stat",
        );
        broken(
            rt(&[t(F32, &[8])], lse(false), None),
            "graph.attention_stat",
        );
    }

    #[test]
    fn update() {
        let u = |axis| {
            move |v: &[Value]| Op::Update {
                dst: v[0],
                rows: v[1],
                at: Some(UpdateAt { pos: v[2], axis }),
            }
        };
        let d = t(Bf16, &[2, 9, 4]);
        let p = t(I32, &[2]);
        assert_eq!(
            rt(&[d.clone(), t(Bf16, &[2, 3, 4]), p.clone()], u(1), None),
            Ok(d.clone())
        );
        broken(
            rt(&[d.clone(), t(Bf16, &[2, 3, 4]), p.clone()], u(0), None),
            "graph.update",
        );
        broken(
            rt(&[d.clone(), t(F32, &[2, 3, 4]), p.clone()], u(1), None),
            "graph.update",
        );
        broken(
            rt(&[d.clone(), t(Bf16, &[2, 10, 4]), p.clone()], u(1), None),
            "graph.update",
        );
        broken(
            rt(&[d.clone(), t(Bf16, &[2, 3, 5]), p], u(1), None),
            "graph.update",
        );
        broken(
            rt(&[d.clone(), t(Bf16, &[2, 3, 4]), t(I32, &[3])], u(1), None),
            "graph.update",
        );
        // A whole update: the new contents have the tensor's type exactly.
        let whole = |v: &[Value]| Op::Update {
            dst: v[0],
            rows: v[1],
            at: None,
        };
        assert_eq!(rt(&[d.clone(), d.clone()], whole, None), Ok(d.clone()));
        broken(
            rt(&[d.clone(), t(Bf16, &[2, 9, 3])], whole, None),
            "graph.update",
        );
        broken(rt(&[d, t(F32, &[2, 9, 4])], whole, None), "graph.update");
    }

    #[test]
    fn gather() {
        let op = |axis| {
            move |v: &[Value]| Op::Gather {
                arg: v[0],
                index: v[1],
                axis,
            }
        };
        let a = t(F16, &[3, 11]);
        assert_eq!(
            rt(&[a.clone(), t(I32, &[3, 4])], op(1), None),
            Ok(t(F16, &[3, 4]))
        );
        broken(
            rt(&[a.clone(), t(F32, &[3, 4])], op(1), None),
            "graph.gather",
        );
        broken(
            rt(&[a.clone(), t(I32, &[2, 4])], op(1), None),
            "graph.gather",
        );
        broken(
            rt(&[a.clone(), t(I32, &[3, 4])], op(2), None),
            "graph.gather",
        );
        broken(rt(&[a, t(I32, &[3])], op(0), None), "graph.gather");
    }

    #[test]
    fn grad() {
        let gr = |n: usize| {
            move |v: &[Value]| Op::Grad {
                wrt: v[0],
                outputs: v[1..1 + n].to_vec(),
                seeds: v[1 + n..].to_vec(),
            }
        };
        let (w, y) = (t(Bf16, &[4, 3]), t(F32, &[5]));
        assert_eq!(
            rt(&[w.clone(), y.clone(), y.clone()], gr(1), None),
            Ok(w.clone())
        );
        broken(rt(&[w.clone(), y.clone()], gr(1), None), "graph.grad");
        broken(
            rt(&[w.clone(), y.clone(), t(F32, &[4])], gr(1), None),
            "graph.grad",
        );
        broken(rt(&[t(I32, &[4]), y.clone(), y], gr(1), None), "graph.grad");
        broken(
            rt(&[w, t(I32, &[5]), t(I32, &[5])], gr(1), None),
            "graph.grad",
        );
    }

    #[test]
    fn an_operand_that_is_not_a_value_is_graph_order() {
        let (g, _) = graph(&[t(F32, &[2])]);
        let op = Op::Unary {
            op: UnaryOp::Exp,
            arg: Value::from_u32(5),
        };
        broken(result_type(&g, &op, None), "graph.order");
    }

    #[test]
    fn the_builder_types_what_it_pushes() {
        let (mut g, vs) = graph(&[t(Bf16, &[3, 4]), t(Bf16, &[4, 5])]);
        let mut b = Builder::new(&mut g);
        let m = b.matmul(vs[0], vs[1]).unwrap();
        assert_eq!(b.ty(m), &t(Bf16, &[3, 5]));
        let f = b.cast(m, F32).unwrap();
        let s = b.sum(f, 1).unwrap();
        assert_eq!(b.ty(s), &t(F32, &[3, 1]));
        let k = b.scale(s, 0.1).unwrap();
        assert_eq!(b.ty(k), &t(F32, &[3, 1]));
        // 0.1 rounded to f32 is what the constant holds.
        let c = g
            .ops
            .values()
            .find_map(|op| match op {
                Op::Const { value } => Some(*value),
                _ => None,
            })
            .unwrap();
        assert_eq!(c, 0.1f32 as f64);
        let mut b = Builder::new(&mut g);
        let e = b.matmul(vs[0], vs[0]).unwrap_err();
        assert_eq!(e.rule, "graph.matmul");
        assert!(crate::verify::verify_graph(&g, None, None).is_ok());
    }

    #[test]
    fn the_verifier_reports_a_declared_type_that_is_not_the_rules() {
        let (mut g, vs) = graph(&[t(F16, &[3])]);
        let e = g.push(
            Op::Unary {
                op: UnaryOp::Exp,
                arg: vs[0],
            },
            t(F32, &[3]),
        );
        let errs = crate::verify::verify_graph(&g, None, None).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].rule, "graph.unary");
        assert_eq!(errs[0].location, e.to_string());
        assert!(
            errs[0].message.contains("declared f32[3]") && errs[0].message.contains("gives f16[3]"),
            "{}",
            errs[0].message
        );
    }
}
