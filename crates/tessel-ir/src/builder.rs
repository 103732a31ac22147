//! A typed builder for the graph IR: one result-type rule per [`Op`] ([`result_type`]), and
//! [`Builder`], whose methods push an op with the type that rule gives.
//!
//! The rule is the single statement of what each op's result type is. Passes that make new
//! ops (`grad`'s gradient rules, and in time `check`, `decompose`, `attention` and `tp`)
//! build them through [`Builder`] instead of spelling the type out by hand, so an op is
//! typed the same way wherever it is made.
//!
//! Ops whose result is a function of their operands (elementwise ops, matmul, reductions,
//! permutes, concat, ...) take their type from the rule alone. Ops that carry part of their
//! type outside the operands — the target dtype of a [`Op::Cast`], the shape of a
//! [`Op::Reshape`] or [`Op::Broadcast`], the length of a [`Op::Slice`], the `k` of a
//! [`Op::TopK`], every [`Op::Const`], [`Op::Iota`] and [`Op::Input`] — are given the result
//! type, which the rule checks against the operands.

use crate::entities::Value;
use crate::graph::{BinaryOp, Graph, Op, ReduceOp, UnaryOp};
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

/// The result type of `op` over the operand types in `g`. `given` is the result type for
/// the ops that carry it (see the module docs; required for them, ignored by the others).
///
/// # Errors
/// A [`TypeError`] naming the verifier rule the op breaks.
pub fn result_type(
    g: &Graph,
    op: &Op,
    given: Option<&TensorType>,
) -> Result<TensorType, TypeError> {
    let ty = |v: &Value| -> Result<&TensorType, TypeError> {
        match g.types.get(*v) {
            Some(t) if v.as_u32() < g.ops.len() as u32 => Ok(t),
            _ => fail("graph.order", format!("operand {v} is not a value")),
        }
    };
    let need = |rule: &'static str| -> Result<TensorType, TypeError> {
        given.cloned().ok_or_else(|| TypeError {
            rule,
            message: "the result type must be given".into(),
        })
    };
    match op {
        Op::Input { .. } => need("graph.input"),
        Op::Const { .. } => need("graph.const"),
        Op::Iota { axis } => {
            let t = need("graph.iota")?;
            if *axis as usize >= t.shape.rank() || t.dtype == DType::Bool {
                return fail("graph.iota", format!("iota axis {axis} of {t}"));
            }
            Ok(t)
        }
        Op::Unary { op, arg } => {
            let a = ty(arg)?;
            let ok = match op {
                UnaryOp::Not => a.dtype == DType::Bool,
                UnaryOp::Neg | UnaryOp::Abs => a.dtype != DType::Bool,
                UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => {
                    a.dtype != DType::Bool
                }
                _ => a.dtype.is_float(),
            };
            if !ok {
                return fail(
                    "graph.unary",
                    format!("{op:?} is not defined on {}", a.dtype),
                );
            }
            Ok(a.clone())
        }
        Op::Binary { op, lhs, rhs } => {
            let (l, r) = (ty(lhs)?, ty(rhs)?);
            if l != r {
                return fail(
                    "graph.binary",
                    format!("operands differ: {lhs} is {l}, {rhs} is {r}"),
                );
            }
            use BinaryOp::*;
            let ok = match op {
                And | Or => l.dtype == DType::Bool,
                Pow => l.dtype.is_float(),
                Add | Sub | Mul | Div | Rem | Min | Max => l.dtype != DType::Bool,
                Eq | Ne | Lt | Le | Gt | Ge => true,
            };
            if !ok {
                return fail(
                    "graph.binary",
                    format!("{op:?} is not defined on {}", l.dtype),
                );
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
            if c.dtype != DType::Bool || c.shape != t.shape || t != f {
                return fail(
                    "graph.select",
                    format!("select of {c}, {t}, {f}: a bool condition and two arms of one type"),
                );
            }
            Ok(t.clone())
        }
        Op::Cast { arg } => {
            let t = need("graph.cast")?;
            if ty(arg)?.shape != t.shape {
                return fail(
                    "graph.cast",
                    format!("{} cast to {t}: shapes differ", ty(arg)?),
                );
            }
            Ok(t)
        }
        Op::Broadcast { arg } => {
            let (a, t) = (ty(arg)?, need("graph.broadcast")?);
            let fits = a.dtype == t.dtype
                && a.shape.rank() == t.shape.rank()
                && a.shape
                    .0
                    .iter()
                    .zip(&t.shape.0)
                    .all(|(x, y)| *x == 1 || x == y);
            if !fits {
                return fail("graph.broadcast", format!("{a} does not broadcast to {t}"));
            }
            Ok(t)
        }
        Op::Reshape { arg } => {
            let (a, t) = (ty(arg)?, need("graph.reshape")?);
            if a.dtype != t.dtype || a.shape.numel() != t.shape.numel() {
                return fail("graph.reshape", format!("{a} does not reshape to {t}"));
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
                return fail(
                    "graph.permute",
                    format!("{perm:?} is not a permutation of the {n} axes of {arg}"),
                );
            }
            let shape = perm.iter().map(|&p| a.shape.0[p as usize]).collect();
            Ok(TensorType::new(a.dtype, shape))
        }
        Op::Reduce { op, arg, axis } => {
            let a = ty(arg)?;
            let ax = *axis as usize;
            if ax >= a.shape.rank() {
                return fail(
                    "graph.reduce",
                    format!("axis {axis} is out of range for {a}"),
                );
            }
            let index = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
            let float_only = matches!(op, ReduceOp::Mean | ReduceOp::LogSumExp);
            if (float_only && !a.dtype.is_float()) || (index && a.dtype == DType::Bool) {
                return fail(
                    "graph.reduce",
                    format!(
                        "{} is not defined on {}",
                        crate::text::reduce_name(*op),
                        a.dtype
                    ),
                );
            }
            let mut shape = a.shape.0.clone();
            shape[ax] = 1;
            Ok(TensorType::new(
                if index { DType::I32 } else { a.dtype },
                shape,
            ))
        }
        Op::Slice { arg, axis, start } => {
            let (a, t) = (ty(arg)?, need("graph.slice")?);
            let ax = *axis as usize;
            let fits = a.dtype == t.dtype
                && ax < a.shape.rank()
                && a.shape.rank() == t.shape.rank()
                && (0..a.shape.rank()).all(|i| i == ax || a.shape.0[i] == t.shape.0[i])
                && start
                    .checked_add(t.shape.0[ax])
                    .is_some_and(|end| end <= a.shape.0[ax]);
            if !fits {
                return fail(
                    "graph.slice",
                    format!("{t} is not a slice of {a} along axis {axis} from {start}"),
                );
            }
            Ok(t)
        }
        Op::Concat { args, axis } => {
            let Some(first) = args.first() else {
                return fail("graph.concat", "no operands");
            };
            let f = ty(first)?.clone();
            let ax = *axis as usize;
            if ax >= f.shape.rank() {
                return fail(
                    "graph.concat",
                    format!("axis {axis} is out of range for {f}"),
                );
            }
            let mut shape = f.shape.0.clone();
            shape[ax] = 0;
            for a in args {
                let t = ty(a)?;
                if t.dtype != f.dtype
                    || t.shape.rank() != f.shape.rank()
                    || (0..t.shape.rank()).any(|i| i != ax && t.shape.0[i] != f.shape.0[i])
                {
                    return fail(
                        "graph.concat",
                        format!("operand {a} is {t}, which does not join {f} along axis {axis}"),
                    );
                }
                shape[ax] += t.shape.0[ax];
            }
            Ok(TensorType::new(f.dtype, shape))
        }
        Op::Softmax { arg, axis } => {
            let a = ty(arg)?;
            if !a.dtype.is_float() || *axis as usize >= a.shape.rank() {
                return fail("graph.softmax", format!("softmax on axis {axis} of {a}"));
            }
            Ok(a.clone())
        }
        Op::Cumsum { arg, axis } => {
            let a = ty(arg)?;
            if a.dtype == DType::Bool || *axis as usize >= a.shape.rank() {
                return fail("graph.cumsum", format!("cumsum on axis {axis} of {a}"));
            }
            Ok(a.clone())
        }
        Op::TopK {
            arg, axis, indices, ..
        } => {
            let (a, t) = (ty(arg)?, need("graph.topk")?);
            let ax = *axis as usize;
            let want = if *indices { DType::I32 } else { a.dtype };
            let fits = t.dtype == want
                && a.dtype != DType::Bool
                && ax < a.shape.rank()
                && a.shape.rank() == t.shape.rank()
                && (1..=a.shape.0[ax]).contains(&t.shape.0[ax])
                && (0..a.shape.rank()).all(|i| i == ax || a.shape.0[i] == t.shape.0[i]);
            if !fits {
                return fail(
                    "graph.topk",
                    format!("{t} is not k of {a} along axis {axis}"),
                );
            }
            Ok(t)
        }
        Op::MatMul { lhs, rhs } => {
            let (l, r) = (ty(lhs)?, ty(rhs)?);
            let (ls, rs) = (&l.shape.0, &r.shape.0);
            let n = ls.len();
            let ok = n >= 2
                && rs.len() == n
                && ls[..n - 2] == rs[..n - 2]
                && ls[n - 1] == rs[n - 2]
                && l.dtype == r.dtype
                && l.dtype.is_float();
            if !ok {
                return fail(
                    "graph.matmul",
                    format!("{l} @ {r}: [.., M, K] @ [.., K, N] of one float dtype"),
                );
            }
            let mut shape = ls.clone();
            shape[n - 1] = rs[n - 1];
            Ok(TensorType::new(l.dtype, shape))
        }
        Op::Attention { logits, v, .. } => {
            let (l, x) = (ty(logits)?, ty(v)?);
            let (ls, xs) = (&l.shape.0, &x.shape.0);
            let n = ls.len();
            let ok = n >= 2
                && xs.len() == n
                && ls[..n - 2] == xs[..n - 2]
                && ls[n - 1] == xs[n - 2]
                && l.dtype == DType::F32
                && x.dtype.is_float();
            if !ok {
                return fail("graph.attention", format!("softmax({l}) @ {x}"));
            }
            let mut shape = ls.clone();
            shape[n - 1] = xs[n - 1];
            Ok(TensorType::new(x.dtype, shape))
        }
        Op::Update { dst, .. } => Ok(ty(dst)?.clone()),
        Op::Gather { arg, index, axis } => {
            let (a, i) = (ty(arg)?, ty(index)?);
            let ax = *axis as usize;
            let n = a.shape.rank();
            let fits = i.dtype == DType::I32
                && ax < n
                && i.shape.rank() == n
                && (0..n).all(|d| d == ax || i.shape.0[d] == a.shape.0[d]);
            if !fits {
                return fail(
                    "graph.gather",
                    format!("index {i} does not gather from {a} along axis {axis}"),
                );
            }
            Ok(TensorType::new(a.dtype, i.shape.0.clone()))
        }
        Op::Grad { wrt, .. } => Ok(ty(wrt)?.clone()),
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

/// `x` rounded to the nearest value of `dtype` (ties to even; integers truncate toward
/// zero, as [`Op::Cast`] converts): what a constant of that dtype holds.
pub fn round_to(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::Bf16 => half::bf16::from_f64(x).to_f64(),
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::I32 => x.trunc().clamp(i32::MIN as f64, i32::MAX as f64),
        DType::Bool => (x != 0.0) as u8 as f64,
    }
}
