//! sqrt (the correctly rounded instruction) and rsqrt: `y0 = 1/sqrt(x)` (two roundings, up to
//! about 1 ulp off), then one Newton step whose residual `1 - x·y0^2` is formed exactly enough
//! (`y0^2` split by fma, the products with x by fma) that the corrected result is within
//! 0.5 ulp + a tiny fraction. x below 2^-64 or above 2^64 is first scaled by 2^±64 so that
//! `y0^2` neither overflows nor loses bits to underflow.

use crate::dd::two_prod;
use crate::MathOps;

/// Correctly rounded square root (one `sqrt.rn.f32`).
pub fn sqrt<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    o.fsqrt(x)
}

/// 1/√x.
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5000 ulp. `rsqrt(+0) = +inf`,
/// `rsqrt(-0) = -inf`, `rsqrt(x < 0) = NaN`, `rsqrt(+inf) = +0`, NaN to NaN.
pub fn rsqrt<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let lo_lim = o.fconst(f32::from_bits(0x1f80_0000)); // 2^-64
    let hi_lim = o.fconst(f32::from_bits(0x5f80_0000)); // 2^64
    let small = o.flt(x, lo_lim);
    let large = o.fgt(x, hi_lim);
    let up = o.fmul(x, hi_lim);
    let down = o.fmul(x, lo_lim);
    let xs = o.select(large, down, x);
    let xs = o.select(small, up, xs);
    let one = o.fconst(1.0);
    let s32 = o.fconst(f32::from_bits(0x4f80_0000)); // 2^32: rsqrt(x·2^64) = rsqrt(x)·2^-32
    let sm32 = o.fconst(f32::from_bits(0x2f80_0000)); // 2^-32
    let scale = o.select(large, sm32, one);
    let scale = o.select(small, s32, scale);
    let s = o.fsqrt(xs);
    let y0 = o.fdiv(one, s);
    // e = 1 - xs·y0^2, y0^2 = t + tl exactly
    let (t, tl) = two_prod(o, y0, y0);
    let nx = o.fneg(xs);
    let e = o.ffma(nx, t, one);
    let e = o.ffma(nx, tl, e);
    let half = o.fconst(0.5);
    let hy = o.fmul(half, y0);
    let y = o.ffma(hy, e, y0);
    // Outside (0, inf) the Newton step is meaningless (0·inf); y0 is already right there.
    let z = o.fconst(0.0);
    let inf = o.fconst(f32::INFINITY);
    let pos = o.fgt(x, z);
    let fin = o.flt(x, inf);
    let normal = o.pand(pos, fin);
    let y = o.select(normal, y, y0);
    o.fmul(y, scale)
}
