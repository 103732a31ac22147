//! log: exponent/significand split through the bits, then `log m = 2·atanh(s)`,
//! `s = (m-1)/(m+1)`, evaluated in double-f32 so the result is nearly correctly rounded and `pow`
//! gets a logarithm good to about 2^-35 relative (measured against f64 at sample points).
//!
//! `x = 2^e·m` with `m` in [√½, √2) (denormal x are first scaled by 2^23); `f = m - 1` is
//! exact. `s = f/(2+f)` as `sh + sl` (the division's residual from an fma, `2+f` from Fast2Sum).
//! `log m = 2s + (2/3)s^3 + s^5·A(s^2)`: `2s` exact, the cubic term in double-f32
//! (`s^3` by fma products, 2/3 as a two-f32 constant), `s^5·A` in f32 (it is below 2^-12 of the
//! result). `A` is a Remez minimax fit (relative weighted error 2^-44 after rounding, `scripts/remez.py`,
//! on |s| <= (√2-1)/(√2+1) = 0.1716). Then `e·ln 2` is added in three parts (a 16-bit head, so
//! `e·LN2_H` is exact for |e| <= 256, and two f32 tails) with 2Sum.

use crate::dd::{fast_two_sum, horner, two_prod, two_sum};
use crate::MathOps;

/// ln 2 = LN2_H + LN2_M + LN2_L: head rounded to 16 significant bits, then two f32 roundings of
/// the remainder (`scripts/remez.py`).
const LN2_H: f32 = f32::from_bits(0x3f31_7200); // 0.693145751953125
const LN2_M: f32 = f32::from_bits(0x35bf_be8e); // 1.428606765330187e-06
const LN2_L: f32 = f32::from_bits(0x2977_9abd); // 5.497923148104107e-14
/// 2/3 = A0H + A0L (`scripts/remez.py`).
const A0H: f32 = f32::from_bits(0x3f2a_aaab); // 0.6666666865348816
const A0L: f32 = f32::from_bits(0xb2aa_aaab); // -1.9868215517249155e-08
/// 2·atanh(s) = 2s + (2/3)s^3 + s^5·A(s^2), |s| <= 0.1716 (Remez, `scripts/remez.py`).
const LOG_A: [f32; 5] = [
    f32::from_bits(0x3ecc_cccd), // 0.4000000059604645
    f32::from_bits(0x3e92_48da), // 0.2857120633125305
    f32::from_bits(0x3e63_cb23), // 0.22245459258556366
    f32::from_bits(0x3e30_8759), // 0.17239131033420563
    f32::from_bits(0x3e94_21ab), // 0.28931936621665955
];

/// `log x` as a double-f32 `(lh, ll)` with `lh = RN(lh + ll)`, relative error about 2^-35, for
/// finite x > 0 (denormals included). Other inputs give unspecified values.
pub(crate) fn log_dd<O: MathOps>(o: &mut O, x: O::F) -> (O::F, O::F) {
    let min_normal = o.fconst(f32::MIN_POSITIVE);
    let tiny = o.flt(x, min_normal);
    let two23 = o.fconst(8_388_608.0);
    let xs = o.fmul(x, two23);
    let xs = o.select(tiny, xs, x);
    let c23 = o.uconst(23);
    let zero = o.uconst(0);
    let eadj = o.select_u(tiny, c23, zero);
    let b = o.f_to_bits(xs);
    let sqrt_half = o.uconst(0x3f35_04f3); // bits of f32(√½)
    let ix = o.usub(b, sqrt_half);
    let e = o.sshr(ix, c23);
    let e = o.usub(e, eadj);
    let mmask = o.uconst(0x007f_ffff);
    let mb = o.uand(ix, mmask);
    let mb = o.uadd(mb, sqrt_half);
    let m = o.f_from_bits(mb);
    let one = o.fconst(1.0);
    let f = o.fsub(m, one);
    // s = f / (2 + f) = sh + sl
    let two = o.fconst(2.0);
    let (dh, dl) = fast_two_sum(o, two, f);
    let sh = o.fdiv(f, dh);
    let nsh = o.fneg(sh);
    let rem = o.ffma(nsh, dh, f);
    let rem = o.ffma(nsh, dl, rem);
    let sl = o.fdiv(rem, dh);
    // s^3 = ch + cl
    let (zh, zl) = two_prod(o, sh, sh);
    let (ch, cl) = two_prod(o, sh, zh);
    let cl = o.ffma(sh, zl, cl);
    // (2/3)s^3 = th + tl
    let a0h = o.fconst(A0H);
    let a0l = o.fconst(A0L);
    let (th, tl) = two_prod(o, ch, a0h);
    let x1 = o.fmul(cl, a0h);
    let x1 = o.ffma(ch, a0l, x1);
    let tl = o.fadd(tl, x1);
    // s^5·A(z) + 2·z·sl (the cubic term's first-order dependence on sl)
    let a = horner(o, zh, &LOG_A);
    let c5 = o.fmul(ch, zh);
    let z2 = o.fadd(zh, zh);
    let zsl = o.fmul(z2, sl);
    let r5 = o.ffma(c5, a, zsl);
    let s2 = o.fadd(sh, sh);
    let (hh, he) = fast_two_sum(o, s2, th);
    let sl2 = o.fadd(sl, sl);
    let lo = o.fadd(tl, r5);
    let lo = o.fadd(sl2, lo);
    let lo = o.fadd(he, lo);
    // + e·ln 2
    let ef = o.cvt_s32_f32(e);
    let ln2h = o.fconst(LN2_H);
    let eh = o.fmul(ef, ln2h); // exact: |e| <= 149 and LN2_H has 16 bits
    let ln2m = o.fconst(LN2_M);
    let (emh, eml) = two_prod(o, ef, ln2m);
    let ln2l = o.fconst(LN2_L);
    let eml = o.ffma(ef, ln2l, eml);
    let (s1, e1) = two_sum(o, eh, hh);
    let (s2, e2) = two_sum(o, s1, emh);
    let lo = o.fadd(lo, eml);
    let e12 = o.fadd(e1, e2);
    let lo = o.fadd(e12, lo);
    fast_two_sum(o, s2, lo)
}

/// Natural logarithm.
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5011 ulp.
/// `log(±0) = -inf`, `log(x < 0) = NaN`, `log(+inf) = +inf`, `log(1) = +0`, NaN to NaN.
pub fn log<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let (lh, _) = log_dd(o, x);
    let z = o.fconst(0.0);
    let inf = o.fconst(f32::INFINITY);
    let pos = o.fgt(x, z);
    let fin = o.flt(x, inf);
    let normal = o.pand(pos, fin);
    let is_zero = o.feq(x, z);
    let is_inf = o.feq(x, inf);
    let nan = o.fconst(f32::NAN);
    let ninf = o.fconst(f32::NEG_INFINITY);
    let special = o.select(is_inf, inf, nan);
    let special = o.select(is_zero, ninf, special);
    o.select(normal, lh, special)
}
