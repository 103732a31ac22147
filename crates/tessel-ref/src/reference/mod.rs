//! The dtype-following reference: what `tessel check` judges a step's outputs by.
//!
//! Pipeline role: like the f64 [`crate::oracle`], it evaluates the graph IR straight out of
//! `check` on the CPU and never sees kernels. Where the oracle computes the mathematical
//! value with nothing rounded in between (the error figure), this reference follows the
//! program: every operation is computed exactly from the reference values of its operands
//! and rounded once to the dtype the program gives its result, explicit casts included.
//! So `i32(bf16(a))` truncates the bf16 value the program asks for, `exp(a * 100.0)`
//! overflows to inf in f32 as the program does, and RoPE's f32 angle is the f32 product.
//!
//! Beside each reference value it carries the set of values a correct kernel may produce
//! instead ([`Bound`]): an interval (and whether NaN is allowed), propagated through the
//! graph from the points the inputs are. What widens it is counted, not guessed:
//! - a math-library call may be off by its contract's ulps (docs/numerics.md);
//! - a 16-bit result may be rounded through f32 first (double rounding), as kernels that
//!   compute in f32 do;
//! - a sum of n terms in f32, in whatever order the schedule fixes, is within
//!   `γ_(n-1)·Σ|x|` of the exact sum (Higham 2002, §4.2); a matmul's K products likewise,
//!   with the coarser rounding of tensor cores and TF32's input rounding where the
//!   [`Model`] says they run;
//! - every later operation carries its operands' ranges forward, so cancellation and
//!   ill-conditioning widen the bound exactly as far as they amplify those errors.
//!
//! A correct program therefore never falls outside its bound, however ill-conditioned, and
//! a wrong one is caught as soon as its error exceeds what rounding can explain. The bound
//! is the worst case of any order and any faithful rounding, not a statistical one: on a
//! long reduction it is wider than the typical error (√n against n), so a small systematic
//! error there shows in the f64 oracle's rel-RMS, which `check` reports beside it.

pub mod bound;
mod select;

pub use bound::Bound;

use crate::layout;
use crate::oracle::{input, max_nan, reduce, OracleError};
use crate::tensor::Tensor;
use bound::{from_f32_range, lower, sum_range, upper, with_f32_rounding, U32};
use tessel_ir::graph::{gather_position, BinaryOp, Graph, Op, ReduceOp, UpdateAt};
use tessel_ir::{DType, Value};

/// How the kernels under test compute matmuls, which sets how far their sums may stray.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum MatmulModel {
    /// One f32 fma per product (SIMT tiles, GEMV, split-K): products exact, one rounding
    /// to nearest per addition.
    #[default]
    Fma,
    /// `mma.sync` on bf16/f16 operands: products exact; NVIDIA does not specify the
    /// accumulation (PTX ISA §9.7.14), measured to truncate and align to the largest term
    /// (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
    /// PeerJ CS 2021): counted as 2K additions with unit roundoff 2^-23.
    TensorCore,
    /// TF32 `mma.sync`: as [`MatmulModel::TensorCore`], after both f32 operands are rounded
    /// to 10 fraction bits (`cvt.rna.tf32.f32`, relative error 2^-11 each). A matmul of
    /// widening casts of 16-bit tensors (`f32(x) @ f32(w)^T`) has no such rounding: its
    /// values are exact in TF32, and tensor cores run it as a 16-bit mma.
    Tf32,
}

/// What the reference assumes of the kernels.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub matmul: MatmulModel,
    /// A fused attention kernel runs (`TileConfig::Attention`): it rounds each
    /// probability's unnormalised `exp(x - m)` to the 16-bit dtype and divides the product
    /// by the f32 row sum last (FlashAttention-2), where the program rounds `e / sum`. A
    /// 16-bit cast of a softmax then allows either rounding: the exact probability within
    /// one 16-bit rounding (2^-9 relative) plus the f32 sum's and the exp's roundings.
    pub flash_softmax: bool,
}

/// A value of the reference: one [`Bound`] per element, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct RefTensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub data: Vec<Bound>,
}

/// Evaluates `g` on `inputs` (in `g.inputs` order, each of its input's exact type) and
/// returns the step's outputs in `g.outputs` order.
///
/// Errors: as [`crate::oracle::eval_graph`]: [`OracleError::BadInputs`] on a count or
/// type mismatch, [`OracleError::Malformed`] for a graph that breaks the IR's rules.
/// Integer division by zero is defined (x / 0 = 0, x % 0 = x, as the kernels compute it).
pub fn eval_reference(
    g: &Graph,
    inputs: &[Tensor],
    model: &Model,
) -> Result<Vec<RefTensor>, OracleError> {
    let outs = layout::walk(g, inputs, |v, op, vals| {
        eval_op(g, v, op, vals, inputs, model)
    })?;
    Ok(g.outputs
        .iter()
        .zip(outs)
        .map(|((_, v), data)| {
            let ty = g.ty(*v);
            RefTensor {
                dtype: ty.dtype,
                shape: ty.shape.0.clone(),
                data,
            }
        })
        .collect())
}

fn eval_op(
    g: &Graph,
    v: Value,
    op: &Op,
    vals: &layout::Values<Bound>,
    inputs: &[Tensor],
    model: &Model,
) -> Result<Vec<Bound>, OracleError> {
    let ty = g.ty(v);
    let dt = ty.dtype;
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
        Op::Update { rows, at: None, .. } => layout::operand(vals, *rows, v)?.to_vec(),
        Op::Update {
            dst,
            rows,
            at: Some(UpdateAt { pos, axis }),
        } => {
            let p = layout::operand(vals, *pos, v)?;
            update_bounds(
                layout::operand(vals, *dst, v)?,
                shape,
                layout::operand(vals, *rows, v)?,
                src(rows),
                p,
                *axis as usize,
            )
        }
        Op::Gather { arg, index, axis } => gather_bounds(
            layout::operand(vals, *arg, v)?,
            src(arg),
            shape,
            layout::operand(vals, *index, v)?,
            *axis as usize,
        ),
        Op::Input { index, .. } => {
            let t = input(g, v, *index, inputs)?;
            (0..n).map(|i| Bound::point(t.get_f64(i))).collect()
        }
        Op::Const { value } => vec![Bound::point(*value); n],
        Op::Iota { axis } => {
            let ax = *axis as usize;
            let stride = ty.shape.strides()[ax];
            (0..n as u64)
                .map(|i| {
                    let k = ((i / stride) % shape[ax]) as f64;
                    bound::cast(DType::I32, dt, &Bound::point(k))
                })
                .collect()
        }
        Op::Unary { op, arg } => {
            let adt = g.ty(*arg).dtype;
            layout::operand(vals, *arg, v)?
                .iter()
                .map(|a| bound::unary(*op, adt, a))
                .collect()
        }
        Op::Binary { op, lhs, rhs } => {
            let adt = g.ty(*lhs).dtype;
            let (a, b) = (
                layout::operand(vals, *lhs, v)?,
                layout::operand(vals, *rhs, v)?,
            );
            // `x * x` of one value is a square, never negative: interval arithmetic on its
            // two operands independently would let it be (x's lower times its upper end),
            // and a mean of squares reaching 0 would leave an RMSNorm's rsqrt unbounded.
            let square = *op == BinaryOp::Mul && lhs == rhs;
            a.iter()
                .zip(b)
                .map(|(x, y)| {
                    let s = bound::binary(*op, adt, dt, x, y);
                    if square {
                        s.nonnegative()
                    } else {
                        s
                    }
                })
                .collect()
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
            (0..n).map(|i| bound::select(&c[i], &t[i], &f[i])).collect()
        }
        Op::Cast { arg } => {
            let from = g.ty(*arg).dtype;
            let flash = match g.ops[*arg] {
                Op::Softmax { axis, .. }
                    if model.flash_softmax && matches!(dt, DType::Bf16 | DType::F16) =>
                {
                    Some(g.ty(*arg).shape.0[axis as usize])
                }
                _ => None,
            };
            layout::operand(vals, *arg, v)?
                .iter()
                .map(|a| {
                    let c = bound::cast(from, dt, a);
                    match flash {
                        Some(len) => flash_probability(dt, a, c, len),
                        None => c,
                    }
                })
                .collect()
        }
        Op::Broadcast { arg } => {
            layout::broadcast(layout::operand(vals, *arg, v)?, src(arg), shape)
        }
        Op::Reshape { arg } => layout::operand(vals, *arg, v)?.to_vec(),
        Op::Permute { arg, perm } => {
            layout::permute(layout::operand(vals, *arg, v)?, src(arg), perm)
        }
        Op::Slice { arg, axis, start } => layout::slice(
            layout::operand(vals, *arg, v)?,
            src(arg),
            *axis as usize,
            *start,
            shape[*axis as usize],
        ),
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
        Op::Reduce { op, arg, axis } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(src(arg), *axis as usize);
            let mut out = Vec::with_capacity(n);
            let mut row = Vec::with_capacity(len);
            for o in 0..outer {
                for k in 0..inner {
                    row.clear();
                    row.extend((0..len).map(|r| a[(o * len + r) * inner + k]));
                    out.push(reduce_row(*op, dt, &row));
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
            let mut out = vec![Bound::point(0.0); n];
            let mut row = Vec::with_capacity(len);
            for o in 0..outer {
                for i in 0..inner {
                    row.clear();
                    row.extend((0..len).map(|r| a[(o * len + r) * inner + i]));
                    for (t, b) in select::topk(&row, k, *largest, *indices)
                        .into_iter()
                        .enumerate()
                    {
                        out[(o * k + t) * inner + i] = b;
                    }
                }
            }
            out
        }
        Op::Cumsum { arg, axis } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(shape, *axis as usize);
            let mut out = vec![Bound::point(0.0); n];
            let mut row = Vec::with_capacity(len);
            for o in 0..outer {
                for i in 0..inner {
                    let at = |r: usize| (o * len + r) * inner + i;
                    row.clear();
                    row.extend((0..len).map(|r| a[at(r)]));
                    for (r, b) in select::cumsum(dt, &row).into_iter().enumerate() {
                        out[at(r)] = b;
                    }
                }
            }
            out
        }
        Op::Softmax { arg, axis } => {
            let a = layout::operand(vals, *arg, v)?;
            let (outer, len, inner) = layout::lanes(shape, *axis as usize);
            let mut out = vec![Bound::point(0.0); n];
            let mut row = Vec::with_capacity(len);
            for o in 0..outer {
                for k in 0..inner {
                    let at = |r: usize| (o * len + r) * inner + k;
                    row.clear();
                    row.extend((0..len).map(|r| a[at(r)]));
                    for (r, b) in softmax_row(dt, &row).into_iter().enumerate() {
                        out[at(r)] = b;
                    }
                }
            }
            out
        }
        Op::MatMul { lhs, rhs } => {
            let (a, b) = (
                layout::operand(vals, *lhs, v)?,
                layout::operand(vals, *rhs, v)?,
            );
            // Widening casts of 16-bit tensors (`f32(x) @ f32(w)^T`) run as 16-bit mma where
            // tensor cores run them; in any case their values are exact in TF32 (bf16 keeps 8
            // significant bits and f16 11, TF32 11 with f32's exponent range; a bf16
            // subnormal's bits lie in the top 7 of the f32 fraction), so no operand rounding
            // is counted even where the program's other matmuls run on TF32.
            let widened = g.matmul_reads(v).is_some_and(|[a, _]| a.widened);
            let mm_model = match model.matmul {
                MatmulModel::Tf32 if widened => MatmulModel::TensorCore,
                m => m,
            };
            matmul(dt, src(lhs), src(rhs), shape, a, b, mm_model)
        }
    })
}

/// The bound of a probability `a` (f32, in [0, 1]) cast to `dt` when a fused attention
/// may compute it as `round(exp(x - m)) / Σ exp(x - m)` instead: the program's rounding
/// `c`, widened by one rounding to `dt` (2^-8 relative for bf16, 2^-11 for f16) plus the
/// f32 sum of `len` terms, the exp's and the division's roundings (`len + 8` f32 units).
fn flash_probability(dt: DType, a: &Bound, c: Bound, len: u64) -> Bound {
    if a.empty() || c.empty() {
        return c;
    }
    let unit = if dt == DType::Bf16 { 256.0 } else { 2048.0 };
    let rel = 1.0 / unit + (len as f64 + 8.0) * U32;
    Bound {
        lo: c.lo.min(a.lo * (1.0 - rel)),
        hi: c.hi.max(a.hi * (1.0 + rel)),
        ..c
    }
}

/// An update's bounds: the reference scatters each row to its reference position; where a
/// position is not known exactly (an i32 cast from a float range), an element along that
/// axis may hold `dst`'s value or any row's that some position in the range puts there, so
/// its bound is their hull.
fn update_bounds(
    dst: &[Bound],
    shape: &[u64],
    rows: &[Bound],
    rows_shape: &[u64],
    pos: &[Bound],
    axis: usize,
) -> Vec<Bound> {
    let at: Vec<i64> = pos.iter().map(|b| b.r as i64).collect();
    let mut out = layout::update(dst, shape, rows, rows_shape, &at, axis);
    let (outer, len, inner) = layout::lanes(shape, axis);
    let (_, r_len, _) = layout::lanes(rows_shape, axis);
    let per_b = outer / shape[0] as usize;
    for (b, p) in pos.iter().enumerate() {
        if p.is_point() {
            continue;
        }
        // i32 positions: the integers in [lo, hi] (NaN or an empty bound: any of them).
        let (lo, hi) = if p.empty() || p.nan || p.lo.is_nan() || p.hi.is_nan() {
            (i32::MIN as i64, i32::MAX as i64)
        } else {
            (p.lo.ceil() as i64, p.hi.floor() as i64)
        };
        for o in b * per_b..(b + 1) * per_b {
            for t in 0..len {
                for k in 0..inner {
                    let flat = (o * len + t) * inner + k;
                    let first = (t as i64 - hi).max(0);
                    let last = (t as i64 - lo).min(r_len as i64 - 1);
                    let mut h = out[flat];
                    h = Bound::hull(&h, &dst[flat], h.r);
                    for i in first..=last {
                        let x = &rows[(o * r_len + i as usize) * inner + k];
                        h = Bound::hull(&h, x, h.r);
                    }
                    out[flat] = h;
                }
            }
        }
    }
    out
}

/// A gather (`Op::Gather`): each element is the operand's at the position its index gives
/// ([`gather_position`]: Python's negative indices, then clamped into the axis). An index
/// known only as a range (computed from floats) allows the hull of every element it may
/// read; an index of NaN or an empty bound, any element along the axis.
fn gather_bounds(
    arg: &[Bound],
    from: &[u64],
    to: &[u64],
    index: &[Bound],
    axis: usize,
) -> Vec<Bound> {
    let len = from[axis];
    let pos: Vec<u64> = index
        .iter()
        .map(|b| gather_position(b.r as i64, len))
        .collect();
    let mut out = layout::gather(arg, from, to, &pos, axis);
    let sstr = tessel_ir::Shape(from.to_vec()).strides();
    let mut idx = vec![0u64; to.len()];
    for (j, b) in index.iter().enumerate() {
        if b.is_point() {
            continue;
        }
        // Past -len - 1 and len every index reads the same end: the integers in between
        // are all the positions there are.
        let n = len as i64;
        let (lo, hi) = if b.empty() || b.nan || b.lo.is_nan() || b.hi.is_nan() {
            (-n - 1, n)
        } else {
            (
                (b.lo.ceil() as i64).clamp(-n - 1, n),
                (b.hi.floor() as i64).clamp(-n - 1, n),
            )
        };
        layout::unravel(j as u64, to, &mut idx);
        let base: u64 = (0..to.len())
            .filter(|&d| d != axis)
            .map(|d| idx[d] * sstr[d])
            .sum();
        let mut h = out[j];
        for i in lo..=hi {
            let p = gather_position(i, len);
            h = Bound::hull(&h, &arg[(base + p * sstr[axis]) as usize], h.r);
        }
        out[j] = h;
    }
    out
}

/// Neumaier's compensated sum (near-exact in f64 for the ranges here).
fn exact_sum(xs: impl Iterator<Item = f64>) -> f64 {
    reduce(ReduceOp::Sum, xs)
}

/// A bound that allows NaN and nothing else (a reference NaN the kernel must reproduce).
fn nan_only() -> Bound {
    Bound::point(f64::NAN)
}

/// One reduction of `row` (all of one lane of the reduced axis) to dtype `dt`, computed as
/// the kernels do: 16-bit operands widened to f32, accumulated in f32 (any order), the
/// mean's quotient in f32, the result rounded to `dt`.
pub(super) fn reduce_row(op: ReduceOp, dt: DType, row: &[Bound]) -> Bound {
    let r_exact = reduce(op, row.iter().map(|b| b.r));
    match op {
        ReduceOp::ArgMax | ReduceOp::ArgMin => select::arg_extreme(row, op == ReduceOp::ArgMax),
        ReduceOp::LogSumExp => select::logsumexp(dt, row),
        ReduceOp::Max | ReduceOp::Min => {
            let r = r_exact;
            let pick: fn(f64, f64) -> f64 = if op == ReduceOp::Max { upper } else { lower };
            if row.iter().any(Bound::empty) {
                return nan_only();
            }
            let fold = |f: fn(&Bound) -> f64| row.iter().map(f).reduce(pick).unwrap_or(r);
            let nan = row.iter().any(|b| b.nan);
            Bound {
                r,
                lo: fold(|b| b.lo),
                hi: fold(|b| b.hi),
                nan,
            }
            .containing_r()
        }
        ReduceOp::Sum | ReduceOp::Mean if dt == DType::I32 => {
            let lo = row.iter().map(|b| b.lo).sum::<f64>();
            let hi = row.iter().map(|b| b.hi).sum::<f64>();
            let r = r_exact as i64 as i32 as f64;
            if row.iter().all(Bound::is_point) {
                Bound::point(r)
            } else if lo >= i32::MIN as f64 && hi <= i32::MAX as f64 {
                Bound {
                    r,
                    lo,
                    hi,
                    nan: false,
                }
                .containing_r()
            } else {
                Bound {
                    r,
                    lo: i32::MIN as f64,
                    hi: i32::MAX as f64,
                    nan: false,
                }
            }
        }
        ReduceOp::Sum | ReduceOp::Mean => {
            if row.iter().any(Bound::empty) {
                return nan_only();
            }
            let lo = exact_sum(row.iter().map(|b| b.lo));
            let hi = exact_sum(row.iter().map(|b| b.hi));
            let abs = exact_sum(row.iter().map(|b| b.lo.abs().max(b.hi.abs())));
            let (mut lo, mut hi, overflow) = sum_range(lo, hi, abs, row.len() as u64, U32);
            // A float sum of terms of one sign keeps that sign in any order (round to
            // nearest never crosses 0), whatever the roundings' widening says.
            if row.iter().all(|b| b.lo >= 0.0) {
                lo = lo.max(0.0);
            }
            if row.iter().all(|b| b.hi <= 0.0) {
                hi = hi.min(0.0);
            }
            let nan = row.iter().any(|b| b.nan) || overflow || lo.is_nan() || hi.is_nan();
            if op == ReduceOp::Mean {
                // The f32 sum, then `div.rn` by the length.
                let len = row.len() as f64;
                let (l, h) = with_f32_rounding(lo, hi);
                (lo, hi) = with_f32_rounding(l / len, h / len);
            }
            from_f32_range(dt, r_exact, lo, hi, nan)
        }
    }
}

/// Softmax of one lane, as `decompose` computes it: in f32, `m = max(x)`,
/// `e = exp(x - m)`, `s = Σ e`, `where(m == -inf, 0, e / s)`, then rounded to `dt`. The
/// reference is the exact softmax rounded once, and 0 where the row's max is -inf.
///
/// A row every element of which is exactly -inf (a fully masked row) is exactly 0: the
/// kernels select a constant there, so its bound is the point 0.
fn softmax_row(dt: DType, row: &[Bound]) -> Vec<Bound> {
    let masked = |b: &Bound| !b.nan && !b.empty() && b.hi == f64::NEG_INFINITY;
    if row.iter().all(masked) {
        return vec![Bound::point(0.0); row.len()];
    }
    let m_r = row.iter().map(|b| b.r).fold(f64::NEG_INFINITY, max_nan);
    let e_r: Vec<f64> = row.iter().map(|b| (b.r - m_r).exp()).collect();
    let s_r = exact_sum(e_r.iter().copied());
    let refs = e_r.iter().map(|&e| {
        if m_r == f64::NEG_INFINITY {
            0.0
        } else {
            e / s_r
        }
    });
    let uncertain = row
        .iter()
        .any(|b| b.nan || b.empty() || b.hi == f64::INFINITY);
    let m_lo = row.iter().map(|b| b.lo).fold(f64::NEG_INFINITY, upper);
    let m_hi = row.iter().map(|b| b.hi).fold(f64::NEG_INFINITY, upper);
    if uncertain || m_lo == f64::NEG_INFINITY || m_r.is_nan() {
        // NaNs, +inf, or a max that may be -inf without every element surely being -inf
        // (the row may or may not be fully masked): the kernel's NaN rules decide, so allow
        // NaN and every value softmax can take, 0 included.
        return refs
            .map(|q| {
                Bound {
                    r: crate::round::round_to(dt, q),
                    lo: 0.0,
                    hi: 1.0,
                    nan: true,
                }
                .containing_r()
            })
            .collect();
    }
    // Per element: d = x - m rounded to f32, e = exp(d) within the math contract.
    let e: Vec<(f64, f64)> = row
        .iter()
        .map(|b| {
            let (dl, dh) = with_f32_rounding(b.lo - m_hi, b.hi - m_lo);
            bound::widen_math(dl.exp(), dh.exp())
        })
        .collect();
    let s_lo = exact_sum(e.iter().map(|x| x.0));
    let s_hi = exact_sum(e.iter().map(|x| x.1));
    let s_abs = exact_sum(e.iter().map(|x| x.0.abs().max(x.1.abs())));
    let (s_lo, s_hi, _) = sum_range(s_lo, s_hi, s_abs, row.len() as u64, U32);
    let (s_lo, s_hi) = with_f32_rounding(s_lo, s_hi);
    e.iter()
        .zip(refs)
        .map(|(&(el, eh), q)| {
            let (lo, hi) = if s_lo > 0.0 {
                with_f32_rounding(el.max(0.0) / s_hi, eh / s_lo)
            } else {
                (0.0, f64::INFINITY)
            };
            from_f32_range(dt, q, lo, hi.min(1.0f64.max(lo)), false)
        })
        .collect()
}

/// `a [.., M, K] @ b [.., K, N]` with the accumulation of `model`.
fn matmul(
    dt: DType,
    ls: &[u64],
    rs: &[u64],
    shape: &[u64],
    a: &[Bound],
    b: &[Bound],
    model: MatmulModel,
) -> Vec<Bound> {
    let r = shape.len();
    let (m, k, nn) = (ls[r - 2] as usize, ls[r - 1] as usize, rs[r - 1] as usize);
    let batch: usize = shape[..r - 2].iter().product::<u64>() as usize;
    let points = a.iter().chain(b).all(Bound::is_point);
    let (terms, unit) = match model {
        MatmulModel::Fma => (k as u64, U32),
        MatmulModel::TensorCore | MatmulModel::Tf32 => (2 * k as u64, 2.0 * U32),
    };
    // TF32 keeps 10 fraction bits: an operand moves by at most 2^-11 of itself, or, below
    // f32's normal range, by up to all of it (2^-126 covers a flush as well as TF32's own
    // subnormal step of 2^-136).
    let tf32 = |x: f64| 2f64.powi(-11) * x + 2f64.powi(-126);
    // A product that underflows f32 loses up to half the least subnormal per term.
    let underflow = k as f64 * 2f64.powi(-149);
    let mut out = Vec::with_capacity(batch * m * nn);
    for bi in 0..batch {
        let (ab, bb) = (bi * m * k, bi * k * nn);
        for i in 0..m {
            for j in 0..nn {
                let x = |p: usize| &a[ab + i * k + p];
                let y = |p: usize| &b[bb + p * nn + j];
                let mut r_exact = exact_sum((0..k).map(|p| x(p).r * y(p).r));
                if r_exact == 0.0 {
                    // The kernels accumulate from +0, so an exact zero comes out +0.
                    r_exact = 0.0;
                }
                let (lo, hi) = if points {
                    (r_exact, r_exact)
                } else if (0..k).any(|p| x(p).empty() || y(p).empty()) {
                    out.push(nan_only());
                    continue;
                } else {
                    let t = |p: usize| {
                        let (x, y) = (x(p), y(p));
                        let c = [x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi];
                        let c = c.map(|v| if v.is_nan() { 0.0 } else { v });
                        (
                            c.iter().copied().fold(f64::INFINITY, lower),
                            c.iter().copied().fold(f64::NEG_INFINITY, upper),
                        )
                    };
                    (
                        exact_sum((0..k).map(|p| t(p).0)),
                        exact_sum((0..k).map(|p| t(p).1)),
                    )
                };
                let mag = |b: &Bound| b.lo.abs().max(b.hi.abs());
                // A term with an operand that is exactly 0 is exactly ±0 (TF32 keeps the
                // zero): it adds nothing to `Σ|x·y|` or to the operand rounding, however
                // large the other operand may be. Where that one may be infinite, `inf · 0`
                // may make NaN, which `nan` counts; the magnitudes' own `inf · 0` would
                // make the ends NaN and the bound empty, with a finite reference in it.
                let zero_term = |p: usize| mag(x(p)) == 0.0 || mag(y(p)) == 0.0;
                let inf_times_zero = (0..k).any(|p| {
                    let (a, b) = (mag(x(p)), mag(y(p)));
                    zero_term(p) && (a.is_infinite() || b.is_infinite())
                });
                let abs = exact_sum(
                    (0..k)
                        .filter(|&p| !zero_term(p))
                        .map(|p| mag(x(p)) * mag(y(p))),
                );
                let (lo, hi, overflow) = sum_range(lo, hi, abs, terms, unit);
                let nan = (0..k).any(|p| x(p).nan || y(p).nan)
                    || overflow
                    || !abs.is_finite()
                    || inf_times_zero;
                let rounding = if model == MatmulModel::Tf32 {
                    exact_sum((0..k).filter(|&p| !zero_term(p)).map(|p| {
                        let (a, b) = (mag(x(p)), mag(y(p)));
                        let (ea, eb) = (tf32(a), tf32(b));
                        ea * b + a * eb + ea * eb
                    }))
                } else {
                    0.0
                };
                let slack = rounding + underflow;
                out.push(from_f32_range(dt, r_exact, lo - slack, hi + slack, nan));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a @ b^T` for a [2, 16] and b [3, 16] of `dt`, cast to f32 first when `widen`.
    fn nt_matmul(dt: DType, widen: bool) -> Graph {
        use tessel_ir::TensorType;
        let mut g = Graph::new("nt");
        let input = |g: &mut Graph, i: u32, s: Vec<u64>| {
            g.push(
                Op::Input {
                    index: i,
                    inout: false,
                },
                TensorType::new(dt, s),
            )
        };
        let (mut a, mut b) = (input(&mut g, 0, vec![2, 16]), input(&mut g, 1, vec![3, 16]));
        g.inputs = vec![("a".into(), a), ("b".into(), b)];
        if widen {
            a = g.push(
                Op::Cast { arg: a },
                TensorType::new(DType::F32, vec![2, 16]),
            );
            b = g.push(
                Op::Cast { arg: b },
                TensorType::new(DType::F32, vec![3, 16]),
            );
        }
        let bt = g.push(
            Op::Permute {
                arg: b,
                perm: vec![1, 0],
            },
            TensorType::new(DType::F32, vec![16, 3]),
        );
        let mm = g.push(
            Op::MatMul { lhs: a, rhs: bt },
            TensorType::new(DType::F32, vec![2, 3]),
        );
        g.outputs.push(("out".into(), mm));
        g
    }

    /// A matmul of widening casts of bf16 tensors has no operand rounding under the TF32
    /// model (its values are exact in TF32, and tensor cores run it as a bf16 mma): in a
    /// program whose other matmuls run on TF32 it is bounded as a 16-bit tensor-core
    /// matmul of the same values — not looser — and that bound is narrower than TF32's.
    #[test]
    fn widened_matmul_is_bounded_without_tf32_rounding() {
        let a = Tensor::random(tessel_ir::TensorType::new(DType::Bf16, vec![2, 16]), 3);
        let b = Tensor::random(tessel_ir::TensorType::new(DType::Bf16, vec![3, 16]), 4);
        let wide = |t: &Tensor| Tensor::from_f32(DType::F32, t.ty.shape.0.clone(), &t.to_f32_vec());
        let (af, bf) = (wide(&a), wide(&b));
        let model = |matmul| Model {
            matmul,
            flash_softmax: false,
        };
        let eval = |g: &Graph, ins: &[Tensor], m| eval_reference(g, ins, &model(m)).unwrap();
        let widened = eval(&nt_matmul(DType::Bf16, true), &[a, b], MatmulModel::Tf32);
        let plain = nt_matmul(DType::F32, false);
        let tc = eval(&plain, &[af.clone(), bf.clone()], MatmulModel::TensorCore);
        let tf32 = eval(&plain, &[af, bf], MatmulModel::Tf32);
        assert_eq!(widened, tc);
        for (w, t) in widened[0].data.iter().zip(&tf32[0].data) {
            assert_eq!(w.r, t.r);
            assert!(w.hi - w.lo < t.hi - t.lo, "{w:?} against TF32's {t:?}");
        }
    }

    /// A term whose operand is exactly 0 is exactly 0 however large the other may be: an
    /// unbounded `x` (`[-inf, inf]`, as a widened TF32 bound can become) times a point 0
    /// adds nothing, and `x·0 + 2·3` stays the finite 6, NaN allowed (`inf · 0`). The
    /// magnitudes' `inf · 0` once made the ends NaN: an empty bound, "NaN only", around a
    /// finite reference (tests/programs/regressions/reference_nan_fast_lora_grads.tsl).
    #[test]
    fn matmul_term_with_an_exact_zero_adds_nothing() {
        let unbounded = Bound {
            r: 1.0,
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
            nan: false,
        };
        let a = [unbounded, Bound::point(2.0)];
        let b = [Bound::point(0.0), Bound::point(3.0)];
        for model in [MatmulModel::Fma, MatmulModel::TensorCore, MatmulModel::Tf32] {
            let out = matmul(DType::F32, &[1, 2], &[2, 1], &[1, 1], &a, &b, model);
            let o = out[0];
            assert_eq!(o.r, 6.0, "{model:?}");
            assert!(o.allows(6.0) && o.nan, "{model:?}: {o:?}");
            assert!(o.lo.is_finite() && o.hi.is_finite(), "{model:?}: {o:?}");
            // Still a check: the operands are exact, so 7 is no rounding of 6.
            assert!(!o.allows(7.0), "{model:?}: {o:?}");
        }
    }

    /// A position known only as a range: every element some position in the range may
    /// write allows the row values that could land there as well as `dst`'s own.
    #[test]
    fn update_at_an_uncertain_position_allows_every_row_it_may_write() {
        // dst [1, 4] = 0, 1, 2, 3; one row [1, 1] = 9 at a position in [1, 2].
        let dst: Vec<Bound> = (0..4).map(|i| Bound::point(i as f64)).collect();
        let rows = [Bound::point(9.0)];
        let pos = [Bound {
            r: 1.0,
            lo: 1.0,
            hi: 2.0,
            nan: false,
        }];
        let out = update_bounds(&dst, &[1, 4], &rows, &[1, 1], &pos, 1);
        assert!(out[0].is_point() && out[0].r == 0.0);
        assert!(out[3].is_point() && out[3].r == 3.0);
        // Position 1 is the reference's: the row, but dst's 1 stays allowed.
        assert_eq!(out[1].r, 9.0);
        assert!(out[1].allows(9.0) && out[1].allows(1.0));
        // Position 2 keeps dst's value as reference and may hold the row.
        assert_eq!(out[2].r, 2.0);
        assert!(out[2].allows(2.0) && out[2].allows(9.0));
        // Exact positions change nothing else.
        let exact = update_bounds(&dst, &[1, 4], &rows, &[1, 1], &[Bound::point(3.0)], 1);
        let r: Vec<f64> = exact.iter().map(|b| b.r).collect();
        assert_eq!(r, [0.0, 1.0, 2.0, 9.0]);
        assert!(exact.iter().all(Bound::is_point));
    }
}
