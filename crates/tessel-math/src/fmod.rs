//! fmod: the IEEE remainder with the dividend's sign, `a - trunc(a/b)·b`, computed exactly.
//!
//! The result of fmod is always exactly representable (C99 F.9.7.1; it is a multiple of the
//! quantum of `|b|` below `|b|`), and PTX has no instruction for it, so it is built from
//! exact steps only. On `r = |a|`, `y = |b|`, each step takes `s = y·2^j` with
//! `j = max(0, E(r) - E(y) - 23)` (`E` the binary exponent, denormal `y` scaled by 2^24
//! to find its own), so that `r/s < 2^24`:
//!
//! - `q = rint(RN(r/s))` is `floor(r/s)` or `floor(r/s) + 1` (both are f32 integers below
//!   2^24, so the correctly rounded quotient lies between them);
//! - `t = fma(-q, s, r)` is exact: `r - q·s` lies in `(-s, s)` and is a multiple of the
//!   quantum of `s` (as `r` is, its exponent being at least `s`'s);
//! - `t < 0` gives `t + s`, exact for the same reason; the new `r` is in `[0, s)` and
//!   congruent to the old one modulo `y` (`s` is a multiple of `y`).
//!
//! Each step removes 23 from the exponent gap, which is at most 127 - (-149) = 276, so 12
//! steps bring every pair below `y` (the last with `j = 0`); a step on `r < y` leaves `r`
//! unchanged (`q` is 0, or 1 with `r - y` and `+ y` exact by Sterbenz's lemma). The loop is
//! unrolled: straight-line code, no divergence. This is the partial-remainder reduction of
//! x87 `FPREM` (Intel SDM vol. 2A, "FPREM") done 23 bits at a time with an fma instead of an
//! integer long division (as musl's `fmodf` does one bit at a time).

use crate::MathOps;

/// Steps of 23 bits: `ceil((276 - 23) / 23) + 1`.
const STEPS: usize = 12;

/// `fmod(a, b)`: `a - trunc(a/b)·b` exactly, with the sign of `a` (also for a zero result).
///
/// Special cases (C99 F.9.7.1): `b = ±0`, `a = ±inf` or a NaN operand give NaN; finite `a`
/// with `b = ±inf` gives `a`; `fmod(±0, b) = ±0` for `b ≠ 0`. Exact for every other pair
/// (checked against Rust's `%`, which is C's `fmodf`, in `tests/accuracy.rs`).
pub fn fmod<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> O::F {
    let x = o.fabs(a);
    let y = o.fabs(b);
    let c23 = o.uconst(23);
    let u0 = o.uconst(0);
    // The biased exponent field of y, denormals through y·2^24 (one less per bit of scale).
    let yb = o.f_to_bits(y);
    let fy = o.ushr(yb, c23);
    let two24 = o.fconst(16_777_216.0);
    let ys = o.fmul(y, two24);
    let ysb = o.f_to_bits(ys);
    let fys = o.ushr(ysb, c23);
    let c24 = o.uconst(24);
    let fys = o.usub(fys, c24);
    let yden = o.ueq(fy, u0);
    let ey = o.select_u(yden, fys, fy);
    let c126 = o.uconst(126);
    let c127 = o.uconst(127);
    let fz = o.fconst(0.0);
    let mut r = x;
    for _ in 0..STEPS {
        let rb = o.f_to_bits(r);
        let er = o.ushr(rb, c23);
        let d = o.usub(er, ey);
        let j = o.usub(d, c23);
        let jneg = o.slt(j, u0);
        let j = o.select_u(jneg, u0, j);
        // 2^j as 2^j1 · 2^j2, each a normal power of two (j <= 253).
        let big = o.ugt(j, c126);
        let j1 = o.select_u(big, c126, j);
        let j2 = o.usub(j, j1);
        let b1 = o.uadd(j1, c127);
        let b1 = o.ushl(b1, c23);
        let p1 = o.f_from_bits(b1);
        let b2 = o.uadd(j2, c127);
        let b2 = o.ushl(b2, c23);
        let p2 = o.f_from_bits(b2);
        let s = o.fmul(y, p1);
        let s = o.fmul(s, p2);
        let q = o.fdiv(r, s);
        let q = o.frint(q);
        let nq = o.fneg(q);
        let t = o.ffma(nq, s, r);
        let tneg = o.flt(t, fz);
        let ts = o.fadd(t, s);
        r = o.select(tneg, ts, t);
    }
    // The sign of a.
    let rb = o.f_to_bits(r);
    let ab = o.f_to_bits(a);
    let sign = o.uconst(0x8000_0000);
    let sa = o.uand(ab, sign);
    let rb = o.uor(rb, sa);
    let r = o.f_from_bits(rb);
    // Special cases last: y = 0, x = inf or NaN give NaN; y = inf gives a.
    let inf = o.fconst(f32::INFINITY);
    let y_inf = o.feq(y, inf);
    let r = o.select(y_inf, a, r);
    let y_zero = o.feq(y, fz);
    let x_inf = o.feq(x, inf);
    let nan_a = o.fis_nan(a);
    let nan_b = o.fis_nan(b);
    let bad = o.por(y_zero, x_inf);
    let bad = o.por(bad, nan_a);
    let bad = o.por(bad, nan_b);
    let nan = o.fconst(f32::NAN);
    o.select(bad, nan, r)
}
