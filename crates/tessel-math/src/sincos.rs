//! sin, cos and sincos: range reduction by π/2 to a double-f32 `r = rh + rl`, then minimax
//! polynomials on the reduced argument, selected by quadrant.
//!
//! Reduction. For `|x| <= 2^20` (every RoPE angle): Cody-Waite (Cody & Waite, "Software Manual
//! for the Elementary Functions", 1980) with π/2 in four f32 parts `P1..P4` (96 bits) and fma:
//! `k = rint(x·2/π)`; `r1 = fma(-k, P1, x)` is exact (|r1| < 1 and a multiple of 2^-24, so it
//! fits in 24 bits); `k·P2` is split exactly with an fma and subtracted with 2Sum; `k·P3`, `k·P4`
//! go into the low word. The absolute error of `rh + rl` is about 2^-52 (one rounding of a
//! term of size `k·P3 < 2^-29`), which against the smallest reduced argument an f32 below 2^20
//! can produce keeps the reduction well inside the ulp budget: x near multiples of π/2 lose
//! nothing. `|r| <= 0.877`, not π/4: `x·2/π` is rounded to f32 before `rint` (half an ulp is up to
//! 2^-5 at 2^20) and `f32(2/π)` is off by 2.6e-8, so `|x·2/π - k| <= 0.5 + 0.031 + 0.027`.
//!
//! Above 2^20 (and for ±inf, which end as NaN): Payne-Hanek (Payne & Hanek, "Radian reduction
//! for trigonometric functions", SIGNUM Newsletter 18(1), 1983) in 32-bit integer arithmetic,
//! taken through [`MathOps::cond`]: the 24-bit significand times a 96-bit window of the bits of
//! 2/π chosen by the exponent (only the bits that can reach the two quadrant bits and 64+ bits of
//! fraction), rounded to the nearest quadrant, converted exactly to a double-f32 fraction and
//! multiplied by π/2 in double-f32.
//!
//! Polynomials (coefficients from `scripts/remez.py`, Remez minimax for relative error on
//! `|r| <= 0.88`, each coefficient rounded to f32 with the others refitted):
//! `sin r = r + r^3 S(r^2)` (relative error 2^-31.7 after rounding), `cos r = 1 - r^2/2 +
//! r^4 C(r^2)` (2^-34.6). The low word `rl` enters through the first-order terms
//! `rl·cos(rh)` and `-rl·sin(rh)`; in cos, `1 - r^2/2` is formed exactly (fma product error plus
//! Fast2Sum) so only the final addition rounds at full size.

use crate::dd::{fast_two_sum, horner, two_prod, two_sum};
use crate::MathOps;

/// f32(2/π) (0x3f22f983), from `scripts/remez.py`.
const TWO_OVER_PI: f32 = 0.636_619_75;
/// π/2 in four parts, each the f32 rounding of what the previous parts leave
/// (`scripts/remez.py`; the remainder after `P4` is 8.5e-32).
const P1: f32 = f32::from_bits(0x3fc9_0fdb); // 1.5707963705062866
const P2: f32 = f32::from_bits(0xb33b_bd2e); // -4.371138828673793e-08
const P3: f32 = f32::from_bits(0xa6f7_2ced); // -1.7151245100058819e-15
const P4: f32 = f32::from_bits(0x194c_5170); // 1.056299898220315e-23
/// Largest |x| reduced by Cody-Waite; above it Payne-Hanek. The exactness argument for `r1`
/// above holds up to here (k <= 667544).
const CW_LIMIT: f32 = 1_048_576.0; // 2^20

/// The first eight 32-bit words of the binary fraction of 2/π (0.A2F9836E 4E441529 ... in
/// hex), computed at 400 bits by `scripts/remez.py`. Words 0..6 are used (x < 2^128).
const TWO_OVER_PI_WORDS: [u32; 7] = [
    0xa2f9_836e,
    0x4e44_1529,
    0xfc27_57d1,
    0xf534_ddc0,
    0xdb62_9599,
    0x3c43_9041,
    0xfe51_63ab,
];

/// sin(r) = r + r^3·S(r^2), |r| <= 0.88 (Remez, `scripts/remez.py`).
const SIN_S: [f32; 4] = [
    f32::from_bits(0xbe2a_aaab), // -0.1666666716337204
    f32::from_bits(0x3c08_88b2), // 0.008333371952176094
    f32::from_bits(0xb950_2144), // -0.00019848818192258477
    f32::from_bits(0x363a_9f7c), // 2.7808991944766603e-06
];
/// cos(r) = 1 - r^2/2 + r^4·C(r^2), |r| <= 0.88 (Remez, `scripts/remez.py`).
const COS_C: [f32; 4] = [
    f32::from_bits(0x3d2a_aaab), // 0.0416666679084301
    f32::from_bits(0xbab6_0bb6), // -0.0013888988178223372
    f32::from_bits(0x37d0_398c), // 2.4822329578455538e-05
    f32::from_bits(0xb49a_0ee2), // -2.869556396944972e-07
];

/// `x = q·π/2 + rh + rl` (q mod 4, as an integer in 0..4). Finite x; for ±inf the result is
/// garbage (callers map non-finite x to NaN), for NaN it is NaN.
fn reduce<O: MathOps>(o: &mut O, x: O::F) -> (O::U, O::F, O::F) {
    let ax = o.fabs(x);
    let lim = o.fconst(CW_LIMIT);
    let big = o.fgt(ax, lim);
    let [rh, rl, qf] = o.cond(
        big,
        |o| {
            let (q, h, l) = payne_hanek(o, x);
            let qf = o.f_from_bits(q);
            [h, l, qf]
        },
        |o| {
            let (q, h, l) = cody_waite(o, x);
            let qf = o.f_from_bits(q);
            [h, l, qf]
        },
    );
    let q = o.f_to_bits(qf);
    (q, rh, rl)
}

fn cody_waite<O: MathOps>(o: &mut O, x: O::F) -> (O::U, O::F, O::F) {
    let c = o.fconst(TWO_OVER_PI);
    let t = o.fmul(x, c);
    let k = o.frint(t);
    let nk = o.fneg(k);
    let p1 = o.fconst(P1);
    let r1 = o.ffma(nk, p1, x); // exact, see the module doc
    let p2 = o.fconst(P2);
    let th = o.fmul(k, p2);
    let nth = o.fneg(th);
    let tl = o.ffma(k, p2, nth); // k·P2 = th + tl exactly
    let (s, e) = two_sum(o, r1, nth);
    let el = o.fsub(e, tl);
    let p3 = o.fconst(P3);
    let rl = o.ffma(nk, p3, el);
    let p4 = o.fconst(P4);
    let rl = o.ffma(nk, p4, rl);
    let (rh, rl) = fast_two_sum(o, s, rl);
    let ki = o.cvt_rni_s32(k);
    let three = o.uconst(3);
    let q = o.uand(ki, three);
    (q, rh, rl)
}

/// Picks `words[i + j]` of `[0, TWO_OVER_PI_WORDS...]` for the runtime index `i` in 0..5.
fn window_word<O: MathOps>(o: &mut O, i: O::U, j: usize) -> O::U {
    let table = |n: usize| if n == 0 { 0 } else { TWO_OVER_PI_WORDS[n - 1] };
    let mut w = o.uconst(table(j + 4));
    for n in (0..4).rev() {
        let nn = o.uconst(n as u32);
        let hit = o.ueq(i, nn);
        let v = o.uconst(table(j + n));
        w = o.select_u(hit, v, w);
    }
    w
}

fn payne_hanek<O: MathOps>(o: &mut O, x: O::F) -> (O::U, O::F, O::F) {
    let ax = o.fabs(x);
    let b = o.f_to_bits(ax);
    let c23 = o.uconst(23);
    let e = o.ushr(b, c23); // biased exponent, 147..=255 here
    let mmask = o.uconst(0x007f_ffff);
    let mant = o.uand(b, mmask);
    let hidden = o.uconst(0x0080_0000);
    let m = o.uor(mant, hidden);
    let c2 = o.uconst(2);
    let m4 = o.ushl(m, c2); // 4m < 2^26: puts the binary point of the product at bit 96
                            // ax = m·2^s with s = e - 150. Bits of 2/π at positions t <= s-2 (weight 2^-t) only add
                            // multiples of 4 to x·2/π, so the window starts at t0 = s-1. With a zero word in front of
                            // the table, t0 sits at table bit e-120 (0-based from the top): word (e-120)/32,
                            // bit (e-120)%32.
    let c120 = o.uconst(120);
    let idx = o.usub(e, c120);
    let c5 = o.uconst(5);
    let wi = o.ushr(idx, c5);
    let c31 = o.uconst(31);
    let sh = o.uand(idx, c31);
    let inv = o.usub(c31, sh);
    let one = o.uconst(1);
    let a: [O::U; 4] = [
        window_word(o, wi, 0),
        window_word(o, wi, 1),
        window_word(o, wi, 2),
        window_word(o, wi, 3),
    ];
    let mut w = [a[0]; 3];
    for j in 0..3 {
        let hi = o.ushl(a[j], sh);
        let lo1 = o.ushr(a[j + 1], one); // two shifts: a shift by 32 is not allowed
        let lo = o.ushr(lo1, inv);
        w[j] = o.uor(hi, lo);
    }
    // 4m·W (26 x 96 bits); x·2/π mod 4 = bits 96..97 . bits 95..0.
    let p2l = o.umul_lo(m4, w[2]);
    let p2h = o.umul_hi(m4, w[2]);
    let p1l = o.umul_lo(m4, w[1]);
    let p1h = o.umul_hi(m4, w[1]);
    let p0l = o.umul_lo(m4, w[0]);
    let p0h = o.umul_hi(m4, w[0]);
    let zero = o.uconst(0);
    let r2 = p2l;
    let r1 = o.uadd(p2h, p1l);
    let c1 = o.ult(r1, p1l);
    let c1u = o.select_u(c1, one, zero);
    let t = o.uadd(p1h, p0l);
    let c2a = o.ult(t, p0l);
    let r0 = o.uadd(t, c1u);
    let c2b = o.ult(r0, t);
    let c2au = o.select_u(c2a, one, zero);
    let c2bu = o.select_u(c2b, one, zero);
    let top = o.uadd(p0h, c2au);
    let top = o.uadd(top, c2bu);
    // Round to the nearest quadrant: a fraction >= 1/2 becomes fraction - 1 (the signed reading
    // of r0:r1:r2) and the quadrant goes up by one.
    let half = o.ushr(r0, c31);
    let q = o.uadd(top, half);
    let three = o.uconst(3);
    let q = o.uand(q, three);
    // Signed fraction f = r0:r1:r2 / 2^96 as three exactly convertible 24-bit pieces.
    let c8 = o.uconst(8);
    let c16 = o.uconst(16);
    let c24 = o.uconst(24);
    let f0 = o.sshr(r0, c8);
    let ff = o.uconst(0xff);
    let r0lo = o.uand(r0, ff);
    let r0lo = o.ushl(r0lo, c16);
    let r1hi = o.ushr(r1, c16);
    let f1 = o.uor(r0lo, r1hi);
    let ffff = o.uconst(0xffff);
    let r1lo = o.uand(r1, ffff);
    let r1lo = o.ushl(r1lo, c8);
    let r2hi = o.ushr(r2, c24);
    let f2 = o.uor(r1lo, r2hi);
    let g0 = o.cvt_s32_f32(f0);
    let s24 = o.fconst(f32::from_bits(0x3380_0000)); // 2^-24
    let g0 = o.fmul(g0, s24);
    let g1 = o.cvt_u32_f32(f1);
    let s48 = o.fconst(f32::from_bits(0x2780_0000)); // 2^-48
    let g1 = o.fmul(g1, s48);
    let g2 = o.cvt_u32_f32(f2);
    let s72 = o.fconst(f32::from_bits(0x1b80_0000)); // 2^-72
    let g2 = o.fmul(g2, s72);
    // g0 is 0 or at least 2^-24 > g1 >= 0, so Fast2Sum applies.
    let (h, l) = fast_two_sum(o, g0, g1);
    let l = o.fadd(l, g2);
    let (h, l) = fast_two_sum(o, h, l);
    // r = f·π/2 in double-f32.
    let p1 = o.fconst(P1);
    let p2 = o.fconst(P2);
    let rh = o.fmul(h, p1);
    let nrh = o.fneg(rh);
    let e1 = o.ffma(h, p1, nrh);
    let lp1 = o.fmul(l, p1);
    let hp2 = o.ffma(h, p2, lp1);
    let rl = o.fadd(e1, hp2);
    let (rh, rl) = fast_two_sum(o, rh, rl);
    // sin and cos of -x: negate r and the quadrant.
    let fz = o.fconst(0.0);
    let neg = o.flt(x, fz);
    let nrh = o.fneg(rh);
    let nrl = o.fneg(rl);
    let rh = o.select(neg, nrh, rh);
    let rl = o.select(neg, nrl, rl);
    let nq = o.usub(zero, q);
    let nq = o.uand(nq, three);
    let q = o.select_u(neg, nq, q);
    (q, rh, rl)
}

/// `(sin r, cos r)` for `r = rh + rl`, |r| <= 0.88.
fn kernels<O: MathOps>(o: &mut O, rh: O::F, rl: O::F) -> (O::F, O::F) {
    // sin: rh + rh^3·S(z) + rl·(1 - z/2), with rh^3 and its product with the leading
    // coefficient S0 kept double-f32 and added to rh by Fast2Sum, so only the last addition rounds
    // at full size (a plain f32 evaluation of the cubic term costs up to 0.25 ulp near |r| = 0.88).
    let (z, zl) = two_prod(o, rh, rh);
    let (ch, cl) = two_prod(o, rh, z);
    let cl = o.ffma(rh, zl, cl);
    let s1 = horner(o, z, &SIN_S[1..]);
    let v = o.fmul(z, s1); // S(z) = S0 + v
    let s0 = o.fconst(SIN_S[0]);
    let (th, tl) = two_prod(o, ch, s0);
    let cls0 = o.fmul(cl, s0);
    let tl2 = o.ffma(ch, v, cls0);
    let tl = o.fadd(tl, tl2);
    let (a, b) = fast_two_sum(o, rh, th);
    let mhalf = o.fconst(-0.5);
    let mhz = o.fmul(mhalf, z);
    let rlc = o.ffma(mhz, rl, rl);
    let lo = o.fadd(tl, rlc);
    let lo = o.fadd(b, lo);
    let sin = o.fadd(a, lo);
    // cos: w + ((1 - w - hz) - hz_err + z^2·C(z) - rh·rl), w = RN(1 - hz), hz = z/2.
    let half = o.fconst(0.5);
    let hr = o.fmul(half, rh);
    let hz = o.fmul(hr, rh);
    let nhz = o.fneg(hz);
    let hz_err = o.ffma(hr, rh, nhz); // rh^2/2 = hz + hz_err
    let one = o.fconst(1.0);
    let w = o.fsub(one, hz);
    let omw = o.fsub(one, w);
    let e1 = o.fsub(omw, hz); // 1 - hz = w + e1 exactly (Fast2Sum, 1 >= hz)
    let c = horner(o, z, &COS_C);
    // r^4 from the exact square: z^2 + 2·z·zl (a plain z·z costs up to 0.05 ulp).
    let zz = o.fadd(z, z);
    let zzl = o.fmul(zz, zl);
    let z2 = o.ffma(z, z, zzl);
    let e2 = o.fsub(e1, hz_err);
    let clo = o.ffma(z2, c, e2);
    let nrh = o.fneg(rh);
    let clo = o.ffma(nrh, rl, clo);
    let cos = o.fadd(w, clo);
    (sin, cos)
}

/// Both results for quadrant q: (sin x, cos x).
fn by_quadrant<O: MathOps>(o: &mut O, q: O::U, s: O::F, c: O::F) -> (O::F, O::F) {
    let one = o.uconst(1);
    let two = o.uconst(2);
    let zero = o.uconst(0);
    let q1 = o.uand(q, one);
    let swap = o.une(q1, zero);
    let sv = o.select(swap, c, s);
    let cv = o.select(swap, s, c);
    let q2 = o.uand(q, two);
    let sneg = o.une(q2, zero);
    let qp = o.uadd(q, one);
    let qp2 = o.uand(qp, two);
    let cneg = o.une(qp2, zero);
    let nsv = o.fneg(sv);
    let ncv = o.fneg(cv);
    let sin = o.select(sneg, nsv, sv);
    let cos = o.select(cneg, ncv, cv);
    (sin, cos)
}

/// `(sin x, cos x)` sharing one range reduction.
///
/// Error (exhaustive over every f32, see `docs/numerics.md`): max 0.5704 (sin) / 0.5908 (cos)
/// ulp on |x| <= 2^20, 0.5713 / 0.5699 above. `sin(±0) = ±0`, `cos(±0) = 1`, ±inf and NaN give NaN.
pub fn sincos<O: MathOps>(o: &mut O, x: O::F) -> (O::F, O::F) {
    let (q, rh, rl) = reduce(o, x);
    let (s, c) = kernels(o, rh, rl);
    let (s, c) = by_quadrant(o, q, s, c);
    // The reduction turns -0 into +0; sin(±0) is x itself.
    let fz = o.fconst(0.0);
    let is_zero = o.feq(x, fz);
    let s = o.select(is_zero, x, s);
    // ±inf and NaN: x - x is NaN exactly for those.
    let d = o.fsub(x, x);
    let bad = o.fis_nan(d);
    let s = o.select(bad, d, s);
    let c = o.select(bad, d, c);
    (s, c)
}

/// sin x. Same algorithm and error as [`sincos`].
pub fn sin<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    sincos(o, x).0
}

/// cos x. Same algorithm and error as [`sincos`].
pub fn cos<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    sincos(o, x).1
}
