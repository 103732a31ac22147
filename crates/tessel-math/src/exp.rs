//! exp: Cody-Waite reduction by ln 2, a minimax polynomial, scaling by 2^k through exponent bits.
//!
//! `k = rint(x/ln2)`, `r1 = x - k·LN2_HI` (exact: |r1| < 0.36 and a multiple of 2^-24),
//! the rest `c = xl - k·LN2_LO` (xl: low word of a double-f32 argument, 0 for plain exp) stays
//! separate and enters to first order, `exp(r1 + c) ≈ exp(r1) + c·exp(r1)`.
//! `exp(r1) = 1 + r1 + r1^2/2 + r1^3 P(r1)`, with `1 + r1 + r1^2/2 + r1^3·P0` summed exactly
//! (fma product errors, three Fast2Sums), so the result before scaling is a double-f32 with
//! relative error about 2^-31 (polynomial: 2^-31.5 after rounding the coefficients, from
//! `scripts/remez.py`, Remez on |r| <= 0.35).
//! Scaling: `2^k = 2^k1 · 2^k2` with `k1 = k >> 1`, `k2 = k - k1`, two multiplications by
//! exponent-bit powers of two, so every k in [-173, 144] (the clamped range) is covered and
//! overflow gives +inf. A denormal result is rounded once from the double-f32 (see
//! [`ldexp_dd`]): rounding the f32 `ph` first and then again to the denormal grid would cost up to
//! 0.75 ulp just below 2^-126.

use crate::dd::{fast_two_sum, horner, two_prod};
use crate::MathOps;

/// f32(1/ln 2) (`scripts/remez.py`).
const LOG2E: f32 = std::f32::consts::LOG2_E; // = f32(1/ln 2), as `scripts/remez.py` prints
/// ln 2 in two parts, each the f32 rounding of what is left (`scripts/remez.py`).
const LN2_HI: f32 = f32::from_bits(0x3f31_7218); // 0.6931471824645996
const LN2_LO: f32 = f32::from_bits(0xb102_e308); // -1.9046542121259336e-09
/// exp(r) = 1 + r + r^2/2 + r^3·P(r), |r| <= 0.35 (Remez, `scripts/remez.py`).
const EXP_P: [f32; 6] = [
    f32::from_bits(0x3e2a_aaab), // 0.1666666716337204
    f32::from_bits(0x3d2a_aaaa), // 0.0416666641831398
    f32::from_bits(0x3c08_8870), // 0.00833331048488617
    f32::from_bits(0x3ab6_0c14), // 0.0013889097608625889
    f32::from_bits(0x3950_93dc), // 0.00019891507690772414
    f32::from_bits(0x37cf_33ea), // 2.4700497306184843e-05
];
/// `2·EXP_P[1..]`, exact doublings: the tail is evaluated as `(r^3/2)·(2P(r))`.
const EXP_P2: [f32; 5] = [
    2.0 * EXP_P[1],
    2.0 * EXP_P[2],
    2.0 * EXP_P[3],
    2.0 * EXP_P[4],
    2.0 * EXP_P[5],
];
/// Arguments are clamped to this range first: below it the result is 0, above it +inf, and
/// k stays inside what the two-step scaling covers.
const X_MIN: f32 = -120.0;
const X_MAX: f32 = 100.0;

/// `exp(xh + xl) = (ph + pl)·2^k` before scaling: `ph + pl` in [0.7, 1.42] as a normalized
/// double-f32 (relative error about 2^-31), `k` an integer in [-173, 144].
/// `|xl|` is assumed small (it is clamped to 2^-10; a double-f32's low word is far below that).
pub(crate) fn exp_parts<O: MathOps>(o: &mut O, xh: O::F, xl: O::F) -> (O::F, O::F, O::U) {
    let lo = o.fconst(X_MIN);
    let hi = o.fconst(X_MAX);
    let x = o.fmax(xh, lo);
    let x = o.fmin(x, hi);
    let lim = o.fconst(f32::from_bits(0x3a80_0000)); // 2^-10
    let nlim = o.fneg(lim);
    let xl = o.fmax(xl, nlim);
    let xl = o.fmin(xl, lim);
    let log2e = o.fconst(LOG2E);
    let t = o.fmul(x, log2e);
    let k = o.frint(t);
    let nk = o.fneg(k);
    let ln2hi = o.fconst(LN2_HI);
    let r = o.ffma(nk, ln2hi, x);
    let ln2lo = o.fconst(LN2_LO);
    let c = o.ffma(nk, ln2lo, xl);
    // exp(r) = 1 + r + r^2/2 + (r^3/2)·(2P(r)). The three leading terms and the head of the
    // cubic one are summed with Fast2Sum (each error term exact); r^2/2 and r^3/2 are exact
    // double-f32 products, and 2P = 2P0 + r·2P1(r) with the product by the f32 coefficient
    // 2P0 exact too. What is left rounds at 2^-24 of terms below 2^-24 of the result.
    let half = o.fconst(0.5);
    let hr = o.fmul(half, r);
    let (qh, ql) = two_prod(o, hr, r); // r^2/2
    let (ch, cl) = two_prod(o, qh, r); // r^3/2
    let cl = o.ffma(ql, r, cl);
    let p0 = o.fconst(2.0 * EXP_P[0]);
    let (th, tl) = two_prod(o, ch, p0);
    let p1 = horner(o, r, &EXP_P2);
    let w = o.fmul(r, p1);
    let clp = o.fmul(cl, p0);
    let tl2 = o.ffma(ch, w, clp);
    let tl = o.fadd(tl, tl2);
    let one = o.fconst(1.0);
    let (s1, e1) = fast_two_sum(o, one, r);
    let (s2, e2) = fast_two_sum(o, s1, qh);
    let (s3, e3) = fast_two_sum(o, s2, th);
    let lo = o.fadd(e1, e2);
    let lo = o.fadd(lo, e3);
    let lo = o.fadd(lo, ql);
    let lo = o.fadd(lo, tl);
    // exp(r1 + c) = exp(r1) + c·exp(r1) + O(c^2), |c| < 2^-16, so c·(exp(r1) - 1) needs
    // exp(r1) - 1 to about 2^-20: (s3 - 1) + lo (s3 - 1 is exact).
    let v = o.fsub(s3, one);
    let v = o.fadd(v, lo);
    let cterm = o.ffma(c, v, c);
    let lo = o.fadd(lo, cterm);
    let (ph, pl) = fast_two_sum(o, s3, lo);
    let ki = o.cvt_rni_s32(k);
    (ph, pl, ki)
}

/// `2^k` as the product of two normal powers of two `2^k1 · 2^k2`, k in [-252, 254].
pub(crate) fn pow2_pair<O: MathOps>(o: &mut O, ki: O::U) -> (O::F, O::F) {
    let c1 = o.uconst(1);
    let k1 = o.sshr(ki, c1);
    let k2 = o.usub(ki, k1);
    let bias = o.uconst(127);
    let c23 = o.uconst(23);
    let b1 = o.uadd(k1, bias);
    let b1 = o.ushl(b1, c23);
    let sc1 = o.f_from_bits(b1);
    let b2 = o.uadd(k2, bias);
    let b2 = o.ushl(b2, c23);
    let sc2 = o.f_from_bits(b2);
    (sc1, sc2)
}

/// `exp(xh + xl)` as a scaled double-f32 `(eh, el)`; `el` loses bits once it is denormal, so
/// this is for callers that add the result to something of size 1.
pub(crate) fn exp_dd<O: MathOps>(o: &mut O, xh: O::F, xl: O::F) -> (O::F, O::F) {
    let (ph, pl, ki) = exp_parts(o, xh, xl);
    scale_dd(o, ph, pl, ki)
}

/// `(ph·2^k, pl·2^k)`, each product rounded once (exact while normal).
pub(crate) fn scale_dd<O: MathOps>(o: &mut O, ph: O::F, pl: O::F, ki: O::U) -> (O::F, O::F) {
    let (sc1, sc2) = pow2_pair(o, ki);
    let eh = o.fmul(ph, sc1);
    let eh = o.fmul(eh, sc2);
    let el = o.fmul(pl, sc1);
    let el = o.fmul(el, sc2);
    (eh, el)
}

/// `RN((h + l)·2^k)` with a single rounding also when the result is denormal (where rounding
/// `h + l` first and then scaling would round twice). Needs `h >= 0.35` (or a normal result),
/// |l| <= ulp(h), k in [-173, 144].
///
/// Normal results: `RN(h + l)` times `2^k1·2^k2` (exact). Denormal results (rare, taken through
/// [`MathOps::cond`]): `t = h·2^(k+149)` is exact and below 2^24, so the result is
/// `n·2^-149` with `n = rint(t) + rint((t - rint(t)) + l·2^(k+149))`; `t - rint(t)` is exact,
/// and the one rounding inside the second `rint` argument can only matter within 2^-25 ulp of a
/// halfway point.
pub(crate) fn ldexp_dd<O: MathOps>(o: &mut O, h: O::F, l: O::F, ki: O::U) -> O::F {
    let (sc1, sc2) = pow2_pair(o, ki);
    let s = o.fadd(h, l);
    let y = o.fmul(s, sc1);
    let y = o.fmul(y, sc2);
    let ay = o.fabs(y);
    let min_normal = o.fconst(f32::MIN_POSITIVE);
    let small = o.flt(ay, min_normal);
    // k >= 0 only comes with h far from 0.35 (silu's x·sigmoid for tiny x), whose tiny
    // products are already rounded once, directly.
    let u0 = o.uconst(0);
    let kneg = o.slt(ki, u0);
    let den = o.pand(small, kneg);
    let [y] = o.cond(
        den,
        |o| {
            let c = o.uconst(149 + 127);
            let kb = o.uadd(ki, c);
            let c23 = o.uconst(23);
            let kb = o.ushl(kb, c23);
            let sc = o.f_from_bits(kb);
            let t = o.fmul(h, sc);
            let ls = o.fmul(l, sc);
            let n0 = o.frint(t);
            let frac = o.fsub(t, n0);
            let s = o.fadd(frac, ls);
            let adj = o.frint(s);
            let n = o.fadd(n0, adj);
            let tiny = o.fconst(f32::from_bits(1)); // 2^-149
            [o.fmul(n, tiny)]
        },
        |_| [y],
    );
    y
}

/// e^x.
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5058 ulp, including the
/// denormal results (ulp 2^-149). `exp(-inf) = +0`, `exp(+inf) = +inf`, overflow above
/// 88.7228 to +inf, results below 2^-150 to +0, NaN to NaN.
pub fn exp<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let z = o.fconst(0.0);
    let (ph, pl, k) = exp_parts(o, x, z);
    ldexp_dd(o, ph, pl, k)
}

/// `1/n!` for n = 2..=7, the Taylor coefficients of `(exp(r) - 1 - r) / r^2` on
/// |r| <= ln2/2, whose truncation after r^7 leaves a relative error below 2^-27.
const EXP_TAYLOR: [f32; 6] = [
    0.5,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// exp in single f32 values, for the fused attention's online softmax (its exps are summed
/// in f32 and rounded to bf16 before they are used), in about 25 operations where [`exp`]
/// takes about 55 (its double-f32 polynomial and single-rounding denormal path):
/// `k = rint(x/ln2)`, `r = x - k·LN2_HI` (exact, as in [`exp`]) and `c = -k·LN2_LO`;
/// `exp(r + c) = (1 + r) + (r^2·P(r) + c·(1 + r))` with `P` the Taylor polynomial of degree
/// 5 by Horner and `1 + r` split exactly by Fast2Sum, so the one rounding that matters is
/// the last addition; then scaling by `2^k` as [`exp`] does.
///
/// Error (exhaustive over every f32, `tests/exhaustive.rs`, see `docs/numerics.md`): max
/// 0.8856 ulp (at 83.52481), within the design's 1 ulp; denormal results, rounded twice
/// (the f32 sum, then the scaling), stay below it too. Same clamping as [`exp`]: +inf above
/// 88.7, 0 below -103.97, NaN in, NaN out.
pub fn exp_f32<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let (s, tail, k) = exp_f32_parts(o, x);
    let y = o.fadd(s, tail);
    let ki = o.cvt_rni_s32(k);
    let (sc1, sc2) = pow2_pair(o, ki);
    let y = o.fmul(y, sc1);
    o.fmul(y, sc2)
}

/// `1.5·2^23 + 127 + 64`: `fma(x, LOG2E, EXP_NONPOS_MAGIC)` rounds `x/ln2` to the nearest
/// integer k (ulp 1 in [2^23, 2^24)) and leaves `k + 191` in the low bits of its pattern,
/// so shifting the pattern left by 23 gives the exponent field of `2^(k + 64)` (Muller et
/// al., *Handbook of Floating-Point Arithmetic*, 2nd ed., §5.2: rounding to an integer by
/// adding a constant).
const EXP_NONPOS_MAGIC: f32 = 12_583_103.0; // 0x4b40_00bf
/// `-LN2_HI`, `-LN2_LO` (exact negations).
const NEG_LN2_HI: f32 = -LN2_HI;
const NEG_LN2_LO: f32 = -LN2_LO;

/// [`exp_f32`] for arguments at most 0 — the online softmax's `exp(x - m)` and
/// `exp(m_old - m)`, whose running maximum `m` is at least every `x` it has seen — in about
/// 20 operations where [`exp_f32`] takes about 27:
/// - no upper clamp;
/// - `k` rounded by one fma with a magic constant ([`EXP_NONPOS_MAGIC`]) instead of a
///   multiply, `cvt.rni` and `cvt.rni.s32`: `j = fma(x, LOG2E, M)`, `k = j - M` (exact);
/// - `2^k` as `2^(k + 64)` (the bits of `j` shifted left by 23: one shift) times the
///   constant `2^-64`: the first product is exact (normal: `k ≥ -173`), the second rounds
///   once, as [`exp_f32`]'s two-factor scaling does.
///
/// The reduction, polynomial and summation are [`exp_f32`]'s, so the two agree bit for bit
/// wherever they choose the same `k`; they may differ by one in `k` where `x/ln2` lies
/// within an f32 rounding of a half-integer (here one rounding, there two).
///
/// Domain: every f32 up to 43.6, as tested (the scale `2^(k + 64)` stays finite up to
/// 44.01, k = 63); the callers pass at most 0. Error (exhaustive over every f32 ≤ 43.6,
/// `tests/exhaustive.rs`, see `docs/numerics.md`): within the design's 1 ulp. `exp(-inf) = 0` (arguments below -120
/// are clamped there; the result rounds to 0 below -103.97), NaN in, NaN out. Above 44.01
/// the result is wrong (the scale overflows to +inf, then its exponent wraps): no caller may
/// pass such an argument.
pub fn exp_f32_nonpos<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let (s, tail, sc1) = exp_f32_nonpos_parts(o, x);
    let y = o.fadd(s, tail);
    let y = o.fmul(y, sc1);
    let sc2 = o.fconst(EXP_NONPOS_SCALE);
    o.fmul(y, sc2)
}

/// `2^-64`: [`exp_f32_nonpos_parts`]'s scale is `2^(k + 64)`.
pub(crate) const EXP_NONPOS_SCALE: f32 = f32::from_bits((127 - 64) << 23);

/// [`exp_f32_nonpos`] before its last addition and its scaling: `exp(x) ≈ (s + tail) ·
/// sc · 2^-64` with `s`, `tail` as [`exp_f32_parts`]'s and `sc = 2^(k + 64)`, a normal
/// power of two for every argument up to 43.6 ([`EXP_NONPOS_SCALE`] is the `2^-64`).
pub(crate) fn exp_f32_nonpos_parts<O: MathOps>(o: &mut O, x: O::F) -> (O::F, O::F, O::F) {
    let lo = o.fconst(X_MIN);
    let x = o.fmax(x, lo);
    let log2e = o.fconst(LOG2E);
    let magic = o.fconst(EXP_NONPOS_MAGIC);
    let j = o.ffma(x, log2e, magic);
    let k = o.fsub(j, magic);
    let nln2hi = o.fconst(NEG_LN2_HI);
    let r = o.ffma(k, nln2hi, x);
    let nln2lo = o.fconst(NEG_LN2_LO);
    let c = o.fmul(k, nln2lo);
    let (s, tail) = exp_f32_reduced(o, r, c);
    let jb = o.f_to_bits(j);
    let c23 = o.uconst(23);
    let sc = o.ushl(jb, c23);
    (s, tail, o.f_from_bits(sc))
}

/// [`exp_f32`] before its last addition and its scaling: `exp(x) ≈ (s + tail)·2^k` with
/// `s = 1 + r` rounded, `|tail| < 0.1` (so `s + tail` splits exactly by Fast2Sum), the pair
/// within the Taylor truncation's 2^-27 plus the roundings of `tail` (about 2^-26 of the
/// result), and `k` an integer-valued f32 in [-173, 144].
fn exp_f32_parts<O: MathOps>(o: &mut O, x: O::F) -> (O::F, O::F, O::F) {
    let lo = o.fconst(X_MIN);
    let hi = o.fconst(X_MAX);
    let x = o.fmax(x, lo);
    let x = o.fmin(x, hi);
    let log2e = o.fconst(LOG2E);
    let t = o.fmul(x, log2e);
    let k = o.frint(t);
    let nk = o.fneg(k);
    let ln2hi = o.fconst(LN2_HI);
    let r = o.ffma(nk, ln2hi, x);
    let ln2lo = o.fconst(LN2_LO);
    let c = o.fmul(nk, ln2lo);
    let (s, tail) = exp_f32_reduced(o, r, c);
    (s, tail, k)
}

/// `exp(r + c) ≈ s + tail` for the reduced argument `r` (|r| ≤ ln2/2, exact) and the rest
/// `c` of the reduction: `s = 1 + r` rounded, `tail = r^2·P(r) + e + c·s` with `e` the
/// Fast2Sum error of `s` and `P` the Taylor polynomial of degree 5 by Horner.
fn exp_f32_reduced<O: MathOps>(o: &mut O, r: O::F, c: O::F) -> (O::F, O::F) {
    let p = horner(o, r, &EXP_TAYLOR);
    let r2 = o.fmul(r, r);
    let one = o.fconst(1.0);
    let (s, e) = fast_two_sum(o, one, r);
    let tail = o.ffma(r2, p, e);
    let tail = o.ffma(c, s, tail);
    (s, tail)
}
