//! erf: an odd polynomial near 0, `1 - exp(-x^2)·R(x)` beyond.
//!
//! The split is W. J. Cody's ("Rational Chebyshev approximations for the error function",
//! *Math. Comp.* 23 (1969), 631-637): erf itself where it is near-linear, and in the tail
//! `erfc(x) = exp(-x^2)·R(x)` with `R = erfc·exp(x^2)` smooth and slowly varying, so the
//! fast decay is left to an accurate exp. Here both pieces are polynomials fitted by
//! `scripts/remez.py` (Remez minimax, coefficients rounded to f32 by fix-and-refit):
//!
//! - `|x| < 1`: `erf(x) = x + x·Q(x^2)` (Q degree 7, relative error of erf 2^-29.6), with
//!   `x^2` split exactly, Q's last two Horner steps and the sum `x + x·Q` in double-f32, so
//!   the error is the final rounding plus about 2^-28 relative.
//! - `1 <= |x| < 3.92`: `erfc(|x|) = exp(-x^2)·R(|x| - 2.5)` (R degree 13, relative error 2^-26.5, its
//!   constant term a double-f32 and the last Horner step exact), with
//!   `-x^2` split exactly by fma, `exp(-x^2)` as a double-f32 ([`crate::exp::exp_dd`]), the
//!   product `eh·R` split exactly, and `1 - erfc` summed by Fast2Sum, so the error is R's
//!   relative error times `erfc(1) = 0.157` plus the final rounding. `|x| - 2.5` is exact
//!   on the whole interval (Sterbenz above 1.25; below, both are multiples of 2^-23).
//! - `|x| >= 3.92`: erf rounds to ±1 (`erfc(3.92) < 2^-25`); the tail's argument is
//!   clamped there, so ±inf give ±1.
//!
//! Both branches are computed and one is selected (no divergence on the GPU).

use crate::dd::{fast_two_sum, horner, two_prod, two_sum};
use crate::exp::exp_dd;
use crate::MathOps;

/// `erf(x) = x + x·Q(x^2)`, |x| < 1 (Remez, `scripts/remez.py`).
const ERF_Q: [f32; 8] = [
    f32::from_bits(0x3e03_75d4), // 0.12837916612625122
    f32::from_bits(0xbec0_93a0), // -0.3761262893676758
    f32::from_bits(0x3de7_16ba), // 0.1128363162279129
    f32::from_bits(0xbcdc_0228), // -0.026856496930122375
    f32::from_bits(0x3baa_4194), // 0.005195805802941322
    f32::from_bits(0xba54_cbb2), // -0.0008117511169984937
    f32::from_bits(0x38b4_b9d9), // 8.61768567119725e-05
    f32::from_bits(0xb60f_2f1e), // -2.133608631993411e-06
];

/// `erfc(x)·exp(x^2) = R(t) = R0 + t·R1(t)`, `t = x - 2.5`, 1 <= x <= 3.92 (Remez,
/// `scripts/remez.py`; coefficients rounded to f32 at once, the constant term kept as a
/// double-f32 `R0_HI + R0_LO`: relative error 2^-26.5). These are R1's coefficients.
const ERFC_R1: [f32; 13] = [
    f32::from_bits(0xbd98_436c), // -0.0743473470211029
    f32::from_bits(0x3ccc_4ac2), // 0.024937991052865982
    f32::from_bits(0xbc03_18fd), // -0.008001563139259815
    f32::from_bits(0x3b21_aed6), // 0.00246708607301116
    f32::from_bits(0xba40_50aa), // -0.0007336238631978631
    f32::from_bits(0x395d_20b2), // 0.00021088382345624268
    f32::from_bits(0xb876_9c6c), // -5.8796649682335556e-05
    f32::from_bits(0x3787_62c0), // 1.6139238141477108e-05
    f32::from_bits(0xb690_0551), // -4.2921533349726815e-06
    f32::from_bits(0x3581_f5b6), // 9.68276026469539e-07
    f32::from_bits(0xb477_3ca4), // -2.30257285238622e-07
    f32::from_bits(0x33df_2a5e), // 1.039195325347464e-07
    f32::from_bits(0xb2e9_9177), // -2.7190919738018238e-08
];
/// R's constant term, `R(0) = erfc(2.5)·exp(6.25)`, as a double-f32.
const ERFC_R0_HI: f32 = f32::from_bits(0x3e57_dda0); // 0.21080636978149414
const ERFC_R0_LO: f32 = f32::from_bits(0xb1bf_914b); // -5.5753495153965105e-09

/// Below this |x|, `x + x·Q0` alone (2^-30).
const TINY: f32 = f32::from_bits(0x3080_0000); // 2^-30
/// Below this |x|, the polynomial.
const POLY_LIMIT: f32 = 1.0;
/// At and above this |x|, erf is ±1 in f32 (erfc(3.92) = 2.9e-8 < 2^-25, the half ulp of
/// 1 - 2^-24, and ties go to the even 1).
const ONE_FROM: f32 = 3.92;
/// The centre of the tail polynomial's variable.
const TAIL_CENTRE: f32 = 2.5;

/// The error function, `erf(x) = 2/sqrt(pi) · ∫_0^x exp(-t^2) dt`.
///
/// Error (`tests/accuracy.rs`, 12M samples; see `docs/numerics.md`): max 0.6019 ulp, asserted
/// below 1; the exhaustive run over every f32 is `exhaustive_erf` in `tests/exhaustive.rs`.
/// `erf(±0) = ±0`, `erf(±inf) = ±1`, NaN to NaN; odd (`erf(-x) = -erf(x)` bit for bit).
pub fn erf<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let ax = o.fabs(x);
    // Near 0: x + x·Q(z) with Q's last two Horner steps, the square and the final sum in
    // double-f32 (in plain f32 their roundings, amplified by |x| up to 1, cost 0.45 ulp).
    let (zh, zl) = two_prod(o, x, x);
    let acc = horner(o, zh, &ERF_Q[2..]);
    let c1 = o.fconst(ERF_Q[1]);
    let (m, ml) = two_prod(o, zh, acc);
    let (a1h, a1l) = two_sum(o, c1, m);
    let ml = o.ffma(zl, acc, ml);
    let a1l = o.fadd(a1l, ml);
    let c0 = o.fconst(ERF_Q[0]);
    let (n, nl) = two_prod(o, zh, a1h);
    let (qh, ql) = two_sum(o, c0, n);
    let nl = o.ffma(zh, a1l, nl);
    let nl = o.ffma(zl, a1h, nl);
    let ql = o.fadd(ql, nl);
    let (ph, pl) = two_prod(o, x, qh);
    let (s0, e0) = fast_two_sum(o, x, ph);
    let pl = o.ffma(x, ql, pl);
    let e0 = o.fadd(e0, pl);
    let small = o.fadd(s0, e0);
    // Tiny |x| (where the low words above would underflow): Q(z) = Q0 within 2^-60, and
    // the fma rounds x·(1 + Q0) once, denormal results included.
    let tiny = o.ffma(x, c0, x);
    let tiny_lim = o.fconst(TINY);
    let is_tiny = o.flt(ax, tiny_lim);
    let small = o.select(is_tiny, tiny, small);
    // The tail, on |x| clamped to [1, 3.92] (NaN stays NaN: fmin/fmax propagate it).
    let lim = o.fconst(ONE_FROM);
    let t_x = o.fmin(ax, lim);
    let one = o.fconst(1.0);
    let t_x = o.fmax(t_x, one);
    let (sh, sl) = two_prod(o, t_x, t_x);
    let nsh = o.fneg(sh);
    let nsl = o.fneg(sl);
    let (eh, el) = exp_dd(o, nsh, nsl);
    let c = o.fconst(TAIL_CENTRE);
    let t = o.fsub(t_x, c);
    // R = R0 + t·R1(t) with the last step in double-f32: (rh, rl).
    let acc = horner(o, t, &ERFC_R1);
    let (ph, pl) = two_prod(o, acc, t);
    let r0 = o.fconst(ERFC_R0_HI);
    let (rh, rl) = two_sum(o, r0, ph);
    let r0l = o.fconst(ERFC_R0_LO);
    let lo = o.fadd(pl, r0l);
    let rl = o.fadd(rl, lo);
    // erfc = (eh + el)·(rh + rl) = qh + ql.
    let (qh, ql) = two_prod(o, eh, rh);
    let ql = o.ffma(eh, rl, ql);
    let ql = o.ffma(el, rh, ql);
    let nqh = o.fneg(qh);
    let (s, se) = fast_two_sum(o, one, nqh);
    let se = o.fsub(se, ql);
    let big = o.fadd(s, se);
    let nbig = o.fneg(big);
    let zero = o.fconst(0.0);
    let neg = o.flt(x, zero);
    let big = o.select(neg, nbig, big);
    let plim = o.fconst(POLY_LIMIT);
    let is_small = o.flt(ax, plim);
    let y = o.select(is_small, small, big);
    // erf(-0) = -0 (the fma's sign of a zero follows its addend, but be explicit), and a NaN
    // is itself.
    let is_zero = o.feq(x, zero);
    let y = o.select(is_zero, x, y);
    let nan = o.fis_nan(x);
    o.select(nan, x, y)
}
