//! The f64 oracle: evaluates a graph-IR step in f64, the mathematical function the
//! compiled step approximates.
//!
//! Pipeline role: it reads the graph IR straight out of `check` (or any later graph pass,
//! since passes preserve meaning) and never sees kernels; [`crate::compare`] measures a
//! compiled step's outputs against it (design §5: f32 paths within rel-RMS 1e-6, bf16 paths
//! within what bf16 rounding allows).
//!
//! Data model: every value is an [`OracleTensor`], a row-major `Vec<f64>` with its shape and
//! the graph dtype it stands for. Semantics:
//! - float ops are evaluated in f64 on the exact values of their operands, with **no
//!   rounding to the value dtypes in between**. In particular a `Cast` to `bf16`/`f16`/`f32`
//!   is the identity: the oracle is the exact computation, so the measured error is that of
//!   the whole compiled float computation, our roundings (casts included) part of it;
//! - integer semantics are kept where they are the meaning of the op: `i32` arithmetic
//!   wraps modulo 2^32, division and remainder truncate toward zero, a cast to `i32`
//!   truncates (saturating, NaN → 0), a cast to `bool` is `x != 0`, comparisons give 0/1;
//! - the math functions are Rust's f64 ones (libm: fine for a test reference, it is not on
//!   the step's path); `sigmoid` and `silu` are written in the overflow-free form;
//! - reductions: `sum` is a compensated (Neumaier) f64 sum, `mean` that sum over the
//!   length, `max`/`min` propagate NaN and order `-0 < +0`, as the kernels do; `softmax` is
//!   `exp(x - max) / sum(exp(x - max))` in f64, and 0 on a row whose max is -inf (every
//!   element -inf: a fully masked row, flash-attention's convention, design §12).
//!
//! Values are freed after their last use, so peak memory is the live set, not the graph.

use crate::layout;
use crate::tensor::Tensor;
use tessel_ir::graph::{gather_position, BinaryOp, Graph, Op, ReduceOp, UnaryOp, UpdateAt};
use tessel_ir::{DType, Value};

/// A value of the oracle: `shape.numel()` row-major elements in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct OracleTensor {
    /// The graph value's dtype: what the compiled step stores (for ulp measures).
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Row-major elements; `i32`/`bool` values are exact integers (0/1 for `bool`).
    pub data: Vec<f64>,
}

/// Why the oracle could not evaluate a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OracleError {
    #[error("step inputs: {0}")]
    BadInputs(String),
    #[error("{value}: {msg}")]
    Malformed { value: Value, msg: String },
    #[error("{value}: integer division by zero at element {index}")]
    DivisionByZero { value: Value, index: u64 },
}

/// Evaluates `g` on `inputs` (in `g.inputs` order, each of its input's exact type) and
/// returns the step's outputs in `g.outputs` order.
///
/// Errors: [`OracleError::BadInputs`] on a count or type mismatch,
/// [`OracleError::Malformed`] where shapes or dtypes break the graph IR's rules (the
/// verifier's job, checked again so the oracle never panics), and
/// [`OracleError::DivisionByZero`] for an `i32` `Div`/`Rem` by zero.
pub fn eval_graph(g: &Graph, inputs: &[Tensor]) -> Result<Vec<OracleTensor>, OracleError> {
    let outs = layout::walk(g, inputs, |v, op, vals| eval_op(g, v, op, vals, inputs))?;
    Ok(g.outputs
        .iter()
        .zip(outs)
        .map(|((_, v), data)| {
            let ty = g.ty(*v);
            OracleTensor {
                dtype: ty.dtype,
                shape: ty.shape.0.clone(),
                data,
            }
        })
        .collect())
}

/// Wraps an integer result to i32, as the kernels' 32-bit arithmetic does.
fn wrap(x: i64) -> f64 {
    x as i32 as f64
}

/// NaN-propagating minimum with `-0 < +0`.
pub(crate) fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else {
        a.min(b)
    }
}

/// NaN-propagating maximum with `-0 < +0`.
pub(crate) fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else {
        a.max(b)
    }
}

/// `1 / (1 + e^-x)` without overflow for either sign.
pub(crate) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// GELU, erf form, exact: `x/2·(1 + erf(x/√2))` (`torch.nn.functional.gelu`); NaN at -inf,
/// as the kernel's `x·0.5·(1 + erf(..))` gives (-inf·0) and PyTorch returns.
pub(crate) fn gelu(x: f64) -> f64 {
    x * 0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// GELU, tanh form, exact in its constants as the kernel rounds them to f32 (β =
/// √2·(2/√π)·½ and κ = 0.044715 are f32 constants in the formula torch evaluates).
pub(crate) fn gelu_tanh(x: f64) -> f64 {
    let beta = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32 as f64;
    let kappa = 0.044715f32 as f64;
    0.5 * x * (1.0 + (beta * (x + kappa * x * x * x)).tanh())
}

fn unary(op: UnaryOp, dtype: DType, x: f64) -> f64 {
    let int = dtype == DType::I32;
    match op {
        UnaryOp::Neg if int => wrap(-(x as i64)),
        UnaryOp::Neg => -x,
        UnaryOp::Abs if int => wrap((x as i64).abs()),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Not => (x == 0.0) as u8 as f64,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Silu => x * sigmoid(x),
        // libm's erf (a port of FreeBSD's msun, under 1 f64 ulp).
        UnaryOp::Erf => libm::erf(x),
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluTanh => gelu_tanh(x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Trunc => x.trunc(),
    }
}

fn eval_op(
    g: &Graph,
    v: Value,
    op: &Op,
    vals: &layout::Values<f64>,
    inputs: &[Tensor],
) -> Result<Vec<f64>, OracleError> {
    let ty = g.ty(v);
    let shape = &ty.shape.0;
    let n = ty.shape.numel() as usize;
    let src = |a: &Value| &g.ty(*a).shape.0;
    Ok(match op {
        Op::Attention { .. } | Op::AttentionStat { .. } | Op::Grad { .. } => {
            return Err(crate::layout::malformed(
                v,
                "a fused attention or a gradient placeholder (see layout::check)",
            ))
        }
        Op::Input { index, .. } => input(g, v, *index, inputs)?.to_f64_vec(),
        Op::Update { rows, at: None, .. } => layout::operand(vals, *rows, v)?.to_vec(),
        Op::Update {
            dst,
            rows,
            at: Some(UpdateAt { pos, axis }),
        } => {
            let p: Vec<i64> = layout::operand(vals, *pos, v)?
                .iter()
                .map(|&x| x as i64)
                .collect();
            layout::update(
                layout::operand(vals, *dst, v)?,
                shape,
                layout::operand(vals, *rows, v)?,
                src(rows),
                &p,
                *axis as usize,
            )
        }
        Op::Gather { arg, index, axis } => {
            let len = src(arg)[*axis as usize];
            let pos: Vec<u64> = layout::operand(vals, *index, v)?
                .iter()
                .map(|&i| gather_position(i as i64, len))
                .collect();
            layout::gather(
                layout::operand(vals, *arg, v)?,
                src(arg),
                shape,
                &pos,
                *axis as usize,
            )
        }
        Op::Const { value } => vec![*value; n],
        Op::Iota { axis } => {
            let ax = *axis as usize;
            let stride = ty.shape.strides()[ax];
            (0..n as u64)
                .map(|i| ((i / stride) % shape[ax]) as f64)
                .collect()
        }
        Op::Unary { op, arg } => {
            let dt = g.ty(*arg).dtype;
            layout::operand(vals, *arg, v)?
                .iter()
                .map(|&x| unary(*op, dt, x))
                .collect()
        }
        Op::Binary { op, lhs, rhs } => {
            let dt = g.ty(*lhs).dtype;
            let (a, b) = (
                layout::operand(vals, *lhs, v)?,
                layout::operand(vals, *rhs, v)?,
            );
            let mut out = Vec::with_capacity(n);
            for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
                out.push(
                    binary_value(*op, dt, x, y).ok_or(OracleError::DivisionByZero {
                        value: v,
                        index: i as u64,
                    })?,
                );
            }
            out
        }
        Op::Select {
            cond,
            on_true,
            on_false,
        } => {
            let (c, t, f) = (
                layout::operand(vals, *cond, v)?,
                layout::operand(vals, *on_true, v)?,
                layout::operand(vals, *on_false, v)?,
            );
            (0..n)
                .map(|i| if c[i] != 0.0 { t[i] } else { f[i] })
                .collect()
        }
        Op::Cast { arg } => {
            let a = layout::operand(vals, *arg, v)?;
            match ty.dtype {
                // Identity: see the module doc.
                DType::Bf16 | DType::F16 | DType::F32 => a.to_vec(),
                // Rust's `as` truncates toward zero, saturates and maps NaN to 0.
                DType::I32 => a.iter().map(|&x| x as i32 as f64).collect(),
                DType::Bool => a.iter().map(|&x| (x != 0.0) as u8 as f64).collect(),
            }
        }
        Op::Broadcast { arg } => {
            layout::broadcast(layout::operand(vals, *arg, v)?, src(arg), shape)
        }
        Op::Reshape { arg } => layout::operand(vals, *arg, v)?.to_vec(),
        Op::Permute { arg, perm } => {
            layout::permute(layout::operand(vals, *arg, v)?, src(arg), perm)
        }
        Op::Reduce { op, arg, axis } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(src(arg), *axis as usize);
            let mut out = Vec::with_capacity(n);
            for o in 0..outer {
                for k in 0..inner {
                    let xs = (0..len).map(|r| a[(o * len + r) * inner + k]);
                    out.push(reduce(*op, xs));
                }
            }
            out
        }
        Op::TopK {
            arg,
            axis,
            largest,
            indices,
        } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(src(arg), *axis as usize);
            let k = shape[*axis as usize] as usize;
            let mut out = vec![0.0; n];
            let mut row = Vec::with_capacity(len);
            for o in 0..outer {
                for i in 0..inner {
                    row.clear();
                    row.extend((0..len).map(|r| a[(o * len + r) * inner + i]));
                    for (t, j) in topk_order(&row, *largest).into_iter().take(k).enumerate() {
                        out[(o * k + t) * inner + i] = if *indices { j as f64 } else { row[j] };
                    }
                }
            }
            out
        }
        Op::Cumsum { arg, axis } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(shape, *axis as usize);
            let mut out = vec![0.0; n];
            for o in 0..outer {
                for i in 0..inner {
                    let at = |r: usize| (o * len + r) * inner + i;
                    let mut s = Neumaier::default();
                    for r in 0..len {
                        s.add(a[at(r)]);
                        out[at(r)] = if ty.dtype == DType::I32 {
                            // Wrapping, as the kernels add i32 (torch would give int64).
                            s.value() as i64 as i32 as f64
                        } else {
                            s.value()
                        };
                    }
                }
            }
            out
        }
        Op::Slice { arg, axis, start } => layout::slice(
            layout::operand(vals, *arg, v)?,
            src(arg),
            *axis as usize,
            *start,
            shape[*axis as usize],
        ),
        Op::MatMul { lhs, rhs } => {
            let (ls, rs) = (src(lhs), src(rhs));
            let r = shape.len();
            let (a, b) = (
                layout::operand(vals, *lhs, v)?,
                layout::operand(vals, *rhs, v)?,
            );
            let (m, k, nn) = (ls[r - 2] as usize, ls[r - 1] as usize, rs[r - 1] as usize);
            let batch: usize = shape[..r - 2].iter().product::<u64>() as usize;
            let mut out = vec![0.0; n];
            for bi in 0..batch {
                let (ab, bb, ob) = (bi * m * k, bi * k * nn, bi * m * nn);
                for i in 0..m {
                    for j in 0..nn {
                        // Compensated f64 sum: the reference, not a model of any order.
                        out[ob + i * nn + j] = reduce(
                            ReduceOp::Sum,
                            (0..k).map(|p| a[ab + i * k + p] * b[bb + p * nn + j]),
                        );
                    }
                }
            }
            out
        }
        Op::Softmax { arg, axis } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(shape, *axis as usize);
            let mut out = vec![0.0; n];
            for o in 0..outer {
                for k in 0..inner {
                    let at = |r: usize| (o * len + r) * inner + k;
                    let m = reduce(ReduceOp::Max, (0..len).map(|r| a[at(r)]));
                    if m == f64::NEG_INFINITY {
                        // A fully masked row: 0 (already in `out`), not 0/0.
                        continue;
                    }
                    let s = reduce(ReduceOp::Sum, (0..len).map(|r| (a[at(r)] - m).exp()));
                    for r in 0..len {
                        out[at(r)] = (a[at(r)] - m).exp() / s;
                    }
                }
            }
            out
        }
        Op::Concat { args, axis } => {
            let parts = args
                .iter()
                .map(|a| {
                    Ok((
                        layout::operand(vals, *a, v)?,
                        g.ty(*a).shape.0[*axis as usize],
                    ))
                })
                .collect::<Result<Vec<_>, OracleError>>()?;
            layout::concat(&parts, shape, *axis as usize)
        }
    })
}

/// Step input `index`, checked against the type of `v`.
pub(crate) fn input<'t>(
    g: &Graph,
    v: Value,
    index: u32,
    inputs: &'t [Tensor],
) -> Result<&'t Tensor, OracleError> {
    let ty = g.ty(v);
    let t = inputs
        .get(index as usize)
        .ok_or_else(|| OracleError::BadInputs(format!("input {index} of {v} is not given")))?;
    if t.ty != *ty || t.data.len() as u64 != ty.size_bytes() {
        return Err(OracleError::BadInputs(format!(
            "input {index} is {} ({} bytes), expected {ty}",
            t.ty,
            t.data.len()
        )));
    }
    Ok(t)
}

/// One element of a binary op (`None` only where i64 arithmetic itself would fail): the
/// exact f64 result for floats, the kernels' wrapping 32-bit result for `i32`.
pub(crate) fn binary_value(op: BinaryOp, dtype: DType, x: f64, y: f64) -> Option<f64> {
    let int = dtype == DType::I32;
    let (i, j) = (x as i64, y as i64);
    let b = |c: bool| c as u8 as f64;
    Some(match op {
        BinaryOp::Add if int => wrap(i + j),
        BinaryOp::Sub if int => wrap(i - j),
        BinaryOp::Mul if int => wrap(i * j),
        // i64 quotient of i32 operands: MIN / -1 wraps to MIN, as the kernels' 32-bit
        // arithmetic gives.
        // Division by zero is defined, as the kernels compute it: x / 0 = 0, x % 0 = x.
        BinaryOp::Div if int && j == 0 => 0.0,
        BinaryOp::Rem if int && j == 0 => x,
        BinaryOp::Div if int => wrap(i.checked_div(j)?),
        BinaryOp::Rem if int => wrap(i.checked_rem(j)?),
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        // f64 `%` is C's fmod: the sign of the dividend, exact.
        BinaryOp::Rem => x % y,
        BinaryOp::Min => min_nan(x, y),
        BinaryOp::Max => max_nan(x, y),
        BinaryOp::Pow => x.powf(y),
        BinaryOp::Eq => b(x == y),
        BinaryOp::Ne => b(x != y),
        BinaryOp::Lt => b(x < y),
        BinaryOp::Le => b(x <= y),
        BinaryOp::Gt => b(x > y),
        BinaryOp::Ge => b(x >= y),
        BinaryOp::And if int => wrap(i & j),
        BinaryOp::Or if int => wrap(i | j),
        BinaryOp::And => b(x != 0.0 && y != 0.0),
        BinaryOp::Or => b(x != 0.0 || y != 0.0),
    })
}

/// Reduces one row. `Mean` is the compensated sum divided by the length. `Sum` is Neumaier's compensated sum (exact to within a few f64 ulps of
/// the row's magnitude; NaN and infinities propagate as in a plain sum).
pub(crate) fn reduce(op: ReduceOp, xs: impl Iterator<Item = f64>) -> f64 {
    match op {
        ReduceOp::Sum => {
            // -0 is the additive identity of IEEE arithmetic (x + -0 = x for every x, +0
            // included): a sum of -0s is -0, as a kernel's sum from -0 gives.
            let (mut s, mut c) = (-0.0f64, 0.0f64);
            for x in xs {
                let t = s + x;
                if s.abs() >= x.abs() {
                    c += (s - t) + x;
                } else {
                    c += (x - t) + s;
                }
                s = t;
            }
            // With infinities, `c` is NaN from `inf - inf`; the plain sum is the answer.
            if s.is_finite() && c != 0.0 {
                s + c
            } else {
                s
            }
        }
        ReduceOp::Mean => {
            let xs: Vec<f64> = xs.collect();
            let len = xs.len() as f64;
            reduce(ReduceOp::Sum, xs.into_iter()) / len
        }
        ReduceOp::Max => xs.fold(f64::NEG_INFINITY, max_nan),
        ReduceOp::Min => xs.fold(f64::INFINITY, min_nan),
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            // NaN is the extreme of both (torch's `greater_or_nan` / `less_or_nan`):
            // argmin(x) is argmax(-x), NaN staying NaN.
            let sign = if op == ReduceOp::ArgMax { 1.0 } else { -1.0 };
            let row: Vec<f64> = xs.map(|x| sign * x).collect();
            topk_order(&row, true).first().map_or(0.0, |&j| j as f64)
        }
        ReduceOp::LogSumExp => {
            let row: Vec<f64> = xs.collect();
            let m = row.iter().copied().fold(f64::NEG_INFINITY, max_nan);
            if m.is_infinite() || m.is_nan() {
                // torch: an infinite max is replaced by 0, so the result is log(Σ exp(x)):
                // -inf for a row of -inf, +inf with a +inf; NaN with a NaN.
                m
            } else {
                let mut s = Neumaier::default();
                for &x in &row {
                    s.add((x - m).exp());
                }
                m + s.value().ln()
            }
        }
    }
}

/// The indices of `row` in topk's order (`torch.topk(sorted=True)`, `torch.argmax`): by
/// value, largest first when `largest` (smallest first otherwise), NaN above every number
/// (first when `largest`, last otherwise), -0 equal to +0, ties in index order.
pub(crate) fn topk_order(row: &[f64], largest: bool) -> Vec<usize> {
    use std::cmp::Ordering;
    let key = |x: f64| (x.is_nan(), if x.is_nan() { 0.0 } else { x });
    let mut idx: Vec<usize> = (0..row.len()).collect();
    // A stable sort keeps equal keys in index order.
    idx.sort_by(|&a, &b| {
        let (ka, kb) = (key(row[a]), key(row[b]));
        let c =
            ka.0.cmp(&kb.0)
                .then(ka.1.partial_cmp(&kb.1).unwrap_or(Ordering::Equal));
        if largest {
            c.reverse()
        } else {
            c
        }
    });
    idx
}

/// Neumaier's running compensated sum, for prefix sums: [`Neumaier::value`] after each
/// term is the prefix's sum to within a few f64 ulps of its magnitude.
#[derive(Default)]
pub(crate) struct Neumaier {
    s: f64,
    c: f64,
    started: bool,
}

impl Neumaier {
    pub(crate) fn add(&mut self, x: f64) {
        if !self.started {
            // -0 is the identity: a prefix of -0s is -0.
            self.s = -0.0;
            self.started = true;
        }
        let t = self.s + x;
        if self.s.abs() >= x.abs() {
            self.c += (self.s - t) + x;
        } else {
            self.c += (x - t) + self.s;
        }
        self.s = t;
    }

    pub(crate) fn value(&self) -> f64 {
        if self.s.is_finite() && self.c != 0.0 && self.c.is_finite() {
            self.s + self.c
        } else {
            self.s
        }
    }
}
