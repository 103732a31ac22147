//! sigmoid and silu from one double-f32 evaluation of `1/(1 + exp(-x))`.
//!
//! With `e = exp(-|x|)` in (0, 1] as a double-f32 ([`crate::exp::exp_dd`]), sigmoid is
//! `1/(1+e)` for x >= 0 and `e/(1+e)` for x < 0: nothing overflows, and the quotient is corrected
//! by its fma residual, so the result is within 0.5 ulp plus a small fraction everywhere,
//! down through the denormals: for x < 0 the quotient `p/(1+e)` is formed before the scaling
//! by 2^k, and a denormal result is rounded once from the double-f32 ([`crate::exp::ldexp_dd`]).
//!
//! silu = x·sigmoid(x) uses the double-f32 sigmoid, except in the far negative tail
//! (x < -64; sigmoid(x) itself turns denormal below about -87.3) where x·sigmoid would multiply an already
//! rounded denormal: there `silu(x) = x·e^x·(1 + O(e^x)) = -exp(x + log(-x))`, with `log(-x)`
//! and the sum in double-f32, taken through [`MathOps::cond`]. The neglected factor
//! `1/(1+e^x)` differs from 1 by less than 2^-92 there.

use crate::dd::{fast_two_sum, two_prod, two_sum};
use crate::exp::{exp_f32_nonpos_parts, exp_parts, ldexp_dd, scale_dd, EXP_NONPOS_SCALE};
use crate::log::log_dd;
use crate::tanh::div_dd;
use crate::MathOps;

/// Below this, silu takes the `-exp(x + log(-x))` path.
const SILU_TAIL: f32 = -64.0;
/// Below this, [`silu_f32`] is -0: `|x|·e^x < 2^-150` already from about -103.3, and the
/// clamp of [`crate::exp_f32`]'s argument (-120) is not reached.
const SILU_F32_FLUSH: f32 = -110.0;

/// sigmoid(x) = (q0 + qc)·2^k: for x >= 0, k = 0 and `q = 1/(1+e)`; for x < 0, `e = p·2^k`
/// and `q = p/(1+e)`, so a tiny result keeps its low word until the one final rounding.
fn sigmoid_parts<O: MathOps>(o: &mut O, x: O::F) -> (O::F, O::F, O::U) {
    let ax = o.fabs(x);
    let nax = o.fneg(ax);
    let zero = o.fconst(0.0);
    let (ph, pl, k) = exp_parts(o, nax, zero);
    let (eh, el) = scale_dd(o, ph, pl, k);
    let one = o.fconst(1.0);
    let pos = o.fge(x, zero);
    let nh = o.select(pos, one, ph);
    let nl = o.select(pos, zero, pl);
    let u0 = o.uconst(0);
    let k = o.select_u(pos, u0, k);
    let (dh, dl) = fast_two_sum(o, one, eh);
    let dl = o.fadd(dl, el);
    let (q0, qc) = div_dd(o, nh, nl, dh, dl);
    (q0, qc, k)
}

/// The logistic function 1/(1 + e^-x).
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5058 ulp, denormal results
/// included.
/// `sigmoid(+inf) = 1`, `sigmoid(-inf) = +0`, NaN to NaN.
pub fn sigmoid<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let (q0, qc, k) = sigmoid_parts(o, x);
    ldexp_dd(o, q0, qc, k)
}

/// SiLU (swish): x·sigmoid(x) = x/(1 + e^-x).
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5065 ulp, including the far
/// negative tail where
/// the result is tiny or denormal (`silu(-90) = -7.37e-38`, `silu(-100) = -3.72e-42`).
/// `silu(+inf) = +inf`; `silu(-inf) = NaN` (what `x/(1+exp(-x))` gives in IEEE arithmetic and
/// PyTorch returns); `silu(-0) = -0`; NaN to NaN.
pub fn silu<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let lim = o.fconst(SILU_TAIL);
    let tail = o.flt(x, lim);
    let [y] = o.cond(
        tail,
        |o| [silu_tail(o, x)],
        |o| {
            // x·(q0 + qc)·2^k with the product kept double-f32 until the scaling.
            let (q0, qc, k) = sigmoid_parts(o, x);
            let (yh, yl) = two_prod(o, x, q0);
            let yl = o.ffma(x, qc, yl);
            [ldexp_dd(o, yh, yl, k)]
        },
    );
    silu_special(o, x, y)
}

/// silu in the far negative tail (x < [`SILU_TAIL`]): `-exp(x + log(-x))`, `log(-x)` and the
/// sum in double-f32, the result rounded once (denormals included).
fn silu_tail<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let nx = o.fneg(x);
    let (lh, ll) = log_dd(o, nx);
    let (sh, sl) = two_sum(o, x, lh);
    let sl = o.fadd(sl, ll);
    let (ph, pl, k) = exp_parts(o, sh, sl);
    let e = ldexp_dd(o, ph, pl, k);
    o.fneg(e)
}

/// silu's special values over `y`: +inf at +inf, NaN at -inf, ±0 at ±0.
fn silu_special<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> O::F {
    // ±inf: x·corr is inf·0 on the main path, log(+inf) on the tail path.
    let inf = o.fconst(f32::INFINITY);
    let ninf = o.fconst(f32::NEG_INFINITY);
    let nan = o.fconst(f32::NAN);
    let pinf = o.feq(x, inf);
    let y = o.select(pinf, inf, y);
    let minf = o.feq(x, ninf);
    let y = o.select(minf, nan, y);
    // silu(±0) = ±0 (the double-f32 sum -0 + +0 gives +0).
    let zero = o.fconst(0.0);
    let is_zero = o.feq(x, zero);
    o.select(is_zero, x, y)
}

/// 1/d for d in [1, 2], within about 0.5 ulp plus 2^-32: the linear start
/// `24/17 - 8/17·d` (relative error at most 1/17 on [1, 2]: the classic Newton–Raphson
/// division estimate `48/17 - 32/17·D` for D in [0.5, 1], scaled; Flynn, "On division by
/// functional iteration", IEEE Trans. Computers C-19(8), 1970), then three Newton–Raphson
/// steps `r + r·(1 - d·r)`, each squaring the relative error: 1/17, 2^-8.2, 2^-16.3, 2^-32.6,
/// plus each step's roundings. Straight-line fma code, where `div.rn.f32` branches to a slow
/// path for operands it cannot take in its fast one. d outside [1, 2] (or NaN) gives a
/// meaningless (or NaN) value: callers range-check first.
fn recip_1_2<O: MathOps>(o: &mut O, d: O::F) -> O::F {
    let nd = o.fneg(d);
    let a = o.fconst(-8.0 / 17.0);
    let b = o.fconst(24.0 / 17.0);
    let one = o.fconst(1.0);
    let mut r = o.ffma(a, d, b);
    for _ in 0..3 {
        let e = o.ffma(nd, r, one);
        r = o.ffma(r, e, r);
    }
    r
}

/// SiLU in single f32 values, for 16-bit results (a SwiGLU's `silu(gate)` rounded to bf16,
/// often in a GEMM's epilogue): straight-line code of about 60 operations and no division (the
/// quotient goes through [`recip_1_2`]), where [`silu`] takes about 300 and a branch for its
/// tail. With two `div.rn.f32` in their place the Qwen3-14B gate GEMM (silu in its
/// epilogue) took 1027 µs, without them 657 µs (H200, docs/perf/2026-12-06-h200-issue19.md). With `e = exp(-|x|) = y·2^k`,
/// `y` the unrounded pair of [`crate::exp_f32_nonpos`] (within about 2^-26; `-|x|` is
/// never positive, so `k` comes from one fma and `2^k` as `2^(k+64) · 2^-64`):
/// `silu(x) = x/(1 + e)` for x >= 0 and `(x·y/(1 + e))·2^k` for x < 0 — the numerator `x·y`
/// an exact product, never tiny, so the quotient keeps full precision until the one scaling
/// by `2^k` at the end (a denormal result is rounded twice: the quotient, then the
/// scaling). `1 + e` is split exactly by Fast2Sum and the quotient `n·(1/(1 + e))` corrected
/// once by its fma residual (times the same reciprocal). Below -110 the result is -0 (silu is below 2^-150 from about -103.3 on), and
/// the special values are [`silu`]'s.
///
/// Error (exhaustive over every f32, `tests/exhaustive.rs`, see `docs/numerics.md`): within
/// the design's 1 ulp.
pub fn silu_f32<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let ax = o.fabs(x);
    let nax = o.fneg(ax);
    // -|x| <= 0: exp_f32_nonpos's reduction, k by one fma, 2^k = sc1 · 2^-64.
    let (s, t, sc1) = exp_f32_nonpos_parts(o, nax);
    let (yh, yl) = fast_two_sum(o, s, t);
    let sc2 = o.fconst(EXP_NONPOS_SCALE);
    // e = exp(-|x|), for the denominator only (its low word may underflow: it is then far
    // below the sum's last bit).
    let eh = o.fmul(yh, sc1);
    let eh = o.fmul(eh, sc2);
    let el = o.fmul(yl, sc1);
    let el = o.fmul(el, sc2);
    let one = o.fconst(1.0);
    let (dh, dl) = fast_two_sum(o, one, eh);
    let dl = o.fadd(dl, el);
    // The numerator: x, or x·y (the 2^k left for the end).
    let (ph, pl) = two_prod(o, x, yh);
    let pl = o.ffma(x, yl, pl);
    let zero = o.fconst(0.0);
    let pos = o.fge(x, zero);
    let nh = o.select(pos, x, ph);
    let nl = o.select(pos, zero, pl);
    // The quotient by the reciprocal of 1 + e, in [1, 2]: no division, so no branch to a
    // division's slow path in the GPU code, and the elements of an epilogue interleave.
    let rd = recip_1_2(o, dh);
    let q0 = o.fmul(nh, rd);
    let nq0 = o.fneg(q0);
    let r = o.ffma(nq0, dh, nh);
    let r = o.fadd(r, nl);
    let r = o.ffma(nq0, dl, r);
    let c = o.fmul(r, rd);
    let q = o.fadd(q0, c);
    let s1 = o.select(pos, one, sc1);
    let s2 = o.select(pos, one, sc2);
    let y = o.fmul(q, s1);
    let y = o.fmul(y, s2);
    // Far below: -0 (x·y would overflow for huge |x|).
    let lim = o.fconst(SILU_F32_FLUSH);
    let far = o.flt(x, lim);
    let nzero = o.fconst(-0.0);
    let y = o.select(far, nzero, y);
    silu_special(o, x, y)
}
