//! tanh: an odd minimax polynomial for |x| < 0.25, else `(1 - e)/(1 + e)` with `e = exp(-2|x|)`
//! as a double-f32 ([`crate::exp::exp_dd`]), numerator and denominator formed exactly from it
//! and the quotient corrected by its fma residual. Both branches are computed and one is
//! selected (no divergence on the GPU). Large |x| sends e to 0, never overflows.

use crate::dd::{fast_two_sum, horner};
use crate::exp::exp_dd;
use crate::MathOps;

/// tanh(x) = x + x^3·T(x^2), |x| <= 0.25 (Remez, `scripts/remez.py`).
const TANH_T: [f32; 5] = [
    f32::from_bits(0xbeaa_aaab), // -0.3333333432674408
    f32::from_bits(0x3e08_88fe), // 0.13333508372306824
    f32::from_bits(0xbd5d_6b9e), // -0.054057709872722626
    f32::from_bits(0x3cc1_78f6), // 0.023617248982191086
    f32::from_bits(0xbca5_f056), // -0.020256202667951584
];
/// Below this |x|, the polynomial; at it, `1 - exp(-2|x|) = 0.39`, so the subtraction loses
/// under 2 bits of the double-f32 exp.
const POLY_LIMIT: f32 = 0.25;

/// `(nh + nl)/(dh + dl)` to about 0.5 ulp: the f32 quotient plus its residual over dh.
pub(crate) fn div_dd<O: MathOps>(
    o: &mut O,
    nh: O::F,
    nl: O::F,
    dh: O::F,
    dl: O::F,
) -> (O::F, O::F) {
    let y0 = o.fdiv(nh, dh);
    let ny0 = o.fneg(y0);
    let r = o.ffma(ny0, dh, nh);
    let r2 = o.ffma(ny0, dl, nl);
    let r = o.fadd(r, r2);
    let corr = o.fdiv(r, dh);
    (y0, corr)
}

/// Hyperbolic tangent.
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5333 ulp. `tanh(±0) = ±0`, `tanh(±inf) = ±1`,
/// NaN to NaN.
pub fn tanh<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let ax = o.fabs(x);
    let z = o.fmul(x, x);
    let t = horner(o, z, &TANH_T);
    let xz = o.fmul(x, z);
    let poly = o.ffma(xz, t, x);
    let m2 = o.fconst(-2.0);
    let a = o.fmul(m2, ax);
    let zero = o.fconst(0.0);
    let (eh, el) = exp_dd(o, a, zero);
    let one = o.fconst(1.0);
    let neh = o.fneg(eh);
    let (nh, nl) = fast_two_sum(o, one, neh);
    let nl = o.fsub(nl, el);
    let (dh, dl) = fast_two_sum(o, one, eh);
    let dl = o.fadd(dl, el);
    let (y0, corr) = div_dd(o, nh, nl, dh, dl);
    let y = o.fadd(y0, corr);
    let ny = o.fneg(y);
    let neg = o.flt(x, zero);
    let big = o.select(neg, ny, y);
    let lim = o.fconst(POLY_LIMIT);
    let small = o.flt(ax, lim);
    let y = o.select(small, poly, big);
    // tanh(-0) = -0 (the polynomial's fma turns it into +0).
    let is_zero = o.feq(x, zero);
    o.select(is_zero, x, y)
}
