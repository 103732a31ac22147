//! Bit-exact scalar semantics of the kernel-IR ops that Rust's operators do not give
//! directly: PTX NaN handling, `min.NaN`/`max.NaN`, saturating conversions and the
//! f32 → bf16/f16 packing conversions.
//!
//! All functions take and return raw bits (`u32`), the executor's register format.
//!
//! **NaN results.** NVIDIA GPUs return the canonical NaN `0x7fff_ffff` from every f32
//! arithmetic instruction whose result is NaN (add, sub, mul, div, fma, sqrt, min, max,
//! cvt.rni.f32.f32), whatever the input payloads; x86 returns a quietened input or
//! `0xffc0_0000`. [`canon`] maps every NaN to `0x7fff_ffff` so the executor's bits equal the
//! GPU's. `neg`/`abs` only touch the sign bit (as `FNeg`/`FAbs` are written by the PTX
//! writer: `neg.f32`/`abs.f32`, sign-bit operations), and `BitsToF32` moves bits unchanged.

/// The NaN every f32 arithmetic instruction of the GPU returns.
pub const CANONICAL_NAN: u32 = 0x7fff_ffff;

/// `x`'s bits, with any NaN replaced by [`CANONICAL_NAN`].
#[inline(always)]
pub fn canon(x: f32) -> u32 {
    if x.is_nan() {
        CANONICAL_NAN
    } else {
        x.to_bits()
    }
}

#[inline(always)]
fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

/// PTX `min.NaN.f32`: NaN if either operand is NaN, and `-0 < +0`.
#[inline(always)]
pub fn fmin(a: u32, b: u32) -> u32 {
    let (x, y) = (f(a), f(b));
    if x.is_nan() || y.is_nan() {
        CANONICAL_NAN
    } else if x < y {
        a
    } else if y < x {
        b
    } else {
        // Equal values: only ±0 differ in bits; the minimum has the sign bit if either has.
        a | b
    }
}

/// PTX `max.NaN.f32`: NaN if either operand is NaN, and `-0 < +0`.
#[inline(always)]
pub fn fmax(a: u32, b: u32) -> u32 {
    let (x, y) = (f(a), f(b));
    if x.is_nan() || y.is_nan() {
        CANONICAL_NAN
    } else if x > y {
        a
    } else if y > x {
        b
    } else {
        a & b
    }
}

/// PTX `fma.rn.f32`: `a·b + c` rounded once. `f32::mul_add` is the IEEE fusedMultiplyAdd
/// on every target (a hardware fma, or libm's correctly rounded `fmaf` where the target
/// has none); the tests check a case that a double-rounded emulation gets wrong.
#[inline(always)]
pub fn ffma(a: u32, b: u32, c: u32) -> u32 {
    canon(f(a).mul_add(f(b), f(c)))
}

/// Round to the nearest integral value, ties to even (IEEE roundToIntegralTiesToEven).
///
/// `f32::round_ties_even` calls libm's `rintf` on x86-64 without SSE4.1, a function call
/// per lane; this is the classic inline form: below 2^23, adding and subtracting 2^23
/// rounds to an integer in the default rounding mode (nearest even), exactly; from 2^23 on
/// every f32 is an integer. `copysign` keeps `-0.4 → -0`. NaN and infinities pass through.
#[inline(always)]
pub fn rint(x: f32) -> f32 {
    const TWO23: f32 = 8_388_608.0;
    let a = x.abs();
    if a < TWO23 {
        ((a + TWO23) - TWO23).copysign(x)
    } else {
        x
    }
}

/// `t[i] = ffma(a[i], b[i], c[i])` over slices of equal length.
///
/// On x86-64 CPUs with the FMA extension this runs a copy of the loop compiled with the
/// `fma` target feature, so `mul_add` becomes a (vectorised) `vfmadd` instead of a call to
/// the portable `fmaf` per lane; both are the IEEE fusedMultiplyAdd, so the bits are the
/// same either way.
pub fn ffma_slice(t: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA, checked just above, which is the only
        // requirement of a `#[target_feature(enable = "fma")]` function.
        unsafe { ffma_slice_x86_fma(t, a, b, c) };
        return;
    }
    ffma_loop(t, a, b, c);
}

#[inline(always)]
fn ffma_loop(t: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    for (((t, &a), &b), &c) in t.iter_mut().zip(a).zip(b).zip(c) {
        *t = ffma(a, b, c);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn ffma_slice_x86_fma(t: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    ffma_loop(t, a, b, c);
}

/// PTX `cvt.rni.s32.f32`: nearest integer, ties to even, saturated to the i32 range;
/// NaN gives 0. Rust's `as` saturates and maps NaN to 0, the same rule.
#[inline(always)]
pub fn cvt_rni_s32(a: u32) -> u32 {
    rint(f(a)) as i32 as u32
}

/// PTX `cvt.rzi.s32.f32`: truncation toward zero, saturated; NaN gives 0.
#[inline(always)]
pub fn cvt_rzi_s32(a: u32) -> u32 {
    f(a) as i32 as u32
}

/// PTX `cvt.rni.f32.f32`: nearest integral value, ties to even.
#[inline(always)]
pub fn frint(a: u32) -> u32 {
    canon(rint(f(a)))
}

/// PTX `cvt.rmi.f32.f32`, `cvt.rpi.f32.f32`, `cvt.rzi.f32.f32`: the integral value toward
/// -inf, +inf and zero (IEEE 754 roundToIntegralTowardNegative/Positive/Zero: exact; ±0,
/// ±inf kept, `ceil(-0.5) = -0`).
#[inline(always)]
pub fn ffloor(a: u32) -> u32 {
    canon(f(a).floor())
}
#[inline(always)]
pub fn fceil(a: u32) -> u32 {
    canon(f(a).ceil())
}
#[inline(always)]
pub fn ftrunc(a: u32) -> u32 {
    canon(f(a).trunc())
}

/// f32 bits → bf16 bits, round to nearest even; NaN gives `0x7fff` (PTX `cvt.rn.bf16x2.f32`
/// returns the canonical bf16 NaN).
///
/// Rounding on the bits: adding `0x7fff` plus the lowest kept bit carries into the kept
/// half exactly when the dropped half exceeds a tie, or is a tie and the kept half is odd.
/// The carry runs through the exponent, so values past the largest bf16 become infinity,
/// and subnormals round like any other value (no flush to zero).
#[inline(always)]
pub fn f32_to_bf16_rn(x: u32) -> u16 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        return 0x7fff;
    }
    let lsb = (x >> 16) & 1;
    (x.wrapping_add(0x7fff + lsb) >> 16) as u16
}

/// f32 bits → f16 bits, round to nearest even with f16 subnormals and overflow to
/// infinity; NaN gives `0x7fff` (PTX `cvt.rn.f16x2.f32`).
#[inline(always)]
pub fn f32_to_f16_rn(x: u32) -> u16 {
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x007f_ffff;
    if exp == 0xff {
        return if man != 0 { 0x7fff } else { sign | 0x7c00 };
    }
    // f16 biased exponent of a normal result.
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e > 0 {
        // Normal: keep 10 of the 23 mantissa bits; a carry out of the mantissa bumps the
        // exponent, and out of the largest finite value gives infinity (0x7c00).
        let h = ((e as u32) << 10) | (man >> 13);
        let rem = man & 0x1fff;
        let up = rem > 0x1000 || (rem == 0x1000 && (h & 1) == 1);
        return sign | (h + up as u32) as u16;
    }
    if exp == 0 {
        // f32 subnormals are below 2^-126, far under half the least f16 subnormal (2^-25).
        return sign;
    }
    // f16 subnormal (or zero): the value in units of 2^-24 is m · 2^(exp - 126) with the
    // 24-bit significand m, so shift right by s = 126 - exp ≥ 14.
    let m = man | 0x0080_0000;
    let s = (126 - exp) as u32;
    if s > 25 {
        // m · 2^-s < 2^24 · 2^-26 = 0.25 units: rounds to zero.
        return sign;
    }
    let h = m >> s;
    let rem = m & ((1u32 << s) - 1);
    let half = 1u32 << (s - 1);
    let up = rem > half || (rem == half && (h & 1) == 1);
    // A carry into bit 10 gives the least normal, 0x0400: the encoding is continuous.
    sign | (h + up as u32) as u16
}

/// PTX `cvt.f32.f16`: exact; NaN gives [`CANONICAL_NAN`].
#[inline(always)]
pub fn f16_to_f32(h: u32) -> u32 {
    canon(half::f16::from_bits(h as u16).to_f32())
}

/// PTX `cvt.rna.tf32.f32`: round to TF32 (10 fraction bits) to nearest, ties away from
/// zero, as f32 bits with the low 13 bits 0. Adding half of the dropped range (`0x1000`)
/// to the magnitude bits carries into the kept bits exactly when the dropped part is at
/// least a tie; the carry runs through the exponent, so the largest values round to
/// infinity and subnormals round like any other value. Infinities stay; a NaN gives
/// [`CANONICAL_NAN`] (PTX leaves the payload unspecified; the mma model ignores it).
#[inline(always)]
pub fn cvt_rna_tf32(x: u32) -> u32 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        return CANONICAL_NAN;
    }
    if x & 0x7fff_ffff == 0x7f80_0000 {
        return x;
    }
    x.wrapping_add(0x1000) & 0xffff_e000
}

/// The value a tensor core reads from a tf32 operand register: the f32 bits with the low 13
/// bits dropped (the PTX ISA reads only the TF32 bits of a `.tf32` operand).
#[inline(always)]
pub fn tf32_operand(x: u32) -> u32 {
    x & 0xffff_e000
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn tf32_rounding_edges() {
        let cases: &[(u32, u32)] = &[
            (0x3f80_0000, 0x3f80_0000), // 1.0 exact
            (0x3f80_1000, 0x3f80_2000), // tie rounds away from zero
            (0xbf80_1000, 0xbf80_2000), // negative tie, away from zero
            (0x3f80_0fff, 0x3f80_0000), // below tie
            (0x3f80_3000, 0x3f80_4000), // tie with odd kept bit, still away
            (0x3fff_f000, 0x4000_0000), // carry into the exponent
            (0x7f7f_ffff, 0x7f80_0000), // past the largest tf32: infinity
            (0x0000_1000, 0x0000_2000), // subnormal tie, kept
            (0x0000_0fff, 0x0000_0000), // subnormal below tie
            (0xff80_0000, 0xff80_0000), // -inf
            (0x8000_0000, 0x8000_0000), // -0
            (0x7fc0_0001, CANONICAL_NAN),
        ];
        for &(x, want) in cases {
            assert_eq!(cvt_rna_tf32(x), want, "{x:#010x}");
        }
    }

    #[test]
    fn bf16_rounding_edges() {
        let cases: &[(u32, u16)] = &[
            (0x3f80_0000, 0x3f80), // 1.0 exact
            (0x3f80_8000, 0x3f80), // tie, even stays
            (0x3f81_8000, 0x3f82), // tie, odd rounds up
            (0x3f80_8001, 0x3f81), // above tie
            (0x3f80_7fff, 0x3f80), // below tie
            (0x7f7f_ffff, 0x7f80), // max f32 overflows to +inf
            (0xff7f_8000, 0xff80), // tie at the max bf16, odd: -inf
            (0x7f7f_7fff, 0x7f7f), // stays at the max bf16
            (0x0000_8000, 0x0000), // denormal tie to even zero
            (0x0001_8000, 0x0002), // denormal tie to odd rounds up
            (0x8000_c000, 0x8001), // negative denormal above tie
            (0x7f80_0000, 0x7f80), // +inf
            (0xff80_0000, 0xff80), // -inf
            (0x7fc0_0000, 0x7fff), // NaN
            (0xff80_0001, 0x7fff), // signalling negative NaN
            (0x8000_0000, 0x8000), // -0
        ];
        for &(x, want) in cases {
            assert_eq!(f32_to_bf16_rn(x), want, "{x:#010x}");
        }
    }

    #[test]
    fn bf16_matches_half_for_non_nan() {
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2_000_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let v = f32::from_bits(x);
            if v.is_nan() {
                continue;
            }
            assert_eq!(f32_to_bf16_rn(x), bf16::from_f32(v).to_bits(), "{x:#010x}");
        }
    }

    #[test]
    fn f16_rounding_edges() {
        let cases: &[(f32, u16)] = &[
            (1.0, 0x3c00),
            (1.0 + 1.0 / 2048.0, 0x3c00), // tie, even
            (1.0 + 3.0 / 2048.0, 0x3c02), // tie, odd up
            (65504.0, 0x7bff),            // max f16
            (65519.99, 0x7bff),           // below the overflow tie
            (65520.0, 0x7c00),            // tie at max: to inf
            (-1e10, 0xfc00),
            (f32::from_bits(0x3380_0000), 0x0001), // 2^-24: least subnormal
            (f32::from_bits(0x3300_0000), 0x0000), // 2^-25: tie to even zero
            (f32::from_bits(0x3300_0001), 0x0001), // just above the tie
            (f32::from_bits(0x33c0_0000), 0x0002), // 1.5·2^-24: tie to even 2
            (f32::from_bits(0x3880_0000), 0x0400), // 2^-14: least normal
            (f32::from_bits(0x387f_f000), 0x0400), // subnormal carrying into normal
            (f32::from_bits(0x0000_0001), 0x0000), // f32 denormal
            (-0.0, 0x8000),
            (f32::INFINITY, 0x7c00),
            (f32::NAN, 0x7fff),
        ];
        for &(x, want) in cases {
            assert_eq!(f32_to_f16_rn(x.to_bits()), want, "{x:e}");
        }
    }

    #[test]
    fn f16_matches_half_for_non_nan() {
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..2_000_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // Concentrate on the f16 range: exponents 100..=145.
            let y = (x & 0x807f_ffff) | ((100 + (x >> 23) % 46) << 23);
            for b in [x, y] {
                let v = f32::from_bits(b);
                if !v.is_nan() {
                    assert_eq!(f32_to_f16_rn(b), f16::from_f32(v).to_bits(), "{b:#010x}");
                }
            }
        }
        // Every f16 converts back to itself.
        for h in 0..=u16::MAX {
            let v = f16::from_bits(h);
            if !v.is_nan() {
                assert_eq!(f32_to_f16_rn(v.to_f32().to_bits()), h);
            }
        }
    }

    #[test]
    fn min_max_nan_and_signed_zero() {
        let (pz, nz) = (0.0f32.to_bits(), (-0.0f32).to_bits());
        assert_eq!(fmin(pz, nz), nz);
        assert_eq!(fmin(nz, pz), nz);
        assert_eq!(fmax(pz, nz), pz);
        assert_eq!(fmax(nz, pz), pz);
        let nan = f32::NAN.to_bits() | 0x8000_0123;
        assert_eq!(fmin(nan, 1f32.to_bits()), CANONICAL_NAN);
        assert_eq!(fmax(2f32.to_bits(), nan), CANONICAL_NAN);
        assert_eq!(fmin(2f32.to_bits(), (-3f32).to_bits()), (-3f32).to_bits());
        assert_eq!(fmax(2f32.to_bits(), (-3f32).to_bits()), 2f32.to_bits());
    }

    #[test]
    fn fma_is_fused_and_correctly_rounded() {
        // (1+2^-12)^2 - 1 = 2^-11 + 2^-24 exactly; an unfused product rounds 2^-24 away.
        let x = 1.0f32 + 2f32.powi(-12);
        assert_eq!(
            f32::from_bits(ffma(x.to_bits(), x.to_bits(), (-1f32).to_bits())),
            2f32.powi(-11) + 2f32.powi(-24)
        );
        // (1+2^-23)·-(1-2^-23) + (2^24+2) = 2^24 + 1 + 2^-46: just above the tie between
        // 2^24 and 2^24+2. Rounding through f64 first lands on the tie and picks 2^24.
        let a = 1.0f32 + f32::EPSILON;
        let b = -(1.0f32 - f32::EPSILON);
        let c = 16_777_218.0f32;
        assert_eq!(
            f32::from_bits(ffma(a.to_bits(), b.to_bits(), c.to_bits())),
            16_777_218.0
        );
        // The slice form (hardware FMA where the CPU has it) gives the same bits.
        let mut t = [0u32; 3];
        let av = [x.to_bits(), a.to_bits(), f32::NAN.to_bits()];
        let bv = [x.to_bits(), b.to_bits(), 1f32.to_bits()];
        let cv = [(-1f32).to_bits(), c.to_bits(), 1f32.to_bits()];
        ffma_slice(&mut t, &av, &bv, &cv);
        assert_eq!(
            t,
            [
                (2f32.powi(-11) + 2f32.powi(-24)).to_bits(),
                16_777_218f32.to_bits(),
                CANONICAL_NAN
            ]
        );
    }

    #[test]
    fn rint_matches_round_ties_even() {
        let mut x: u32 = 0x2545_f491;
        for _ in 0..2_000_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // Exponents around the integer threshold 2^23, both signs.
            let y = (x & 0x807f_ffff) | ((120 + (x >> 23) % 40) << 23);
            for b in [x, y] {
                let v = f32::from_bits(b);
                assert_eq!(canon(rint(v)), canon(v.round_ties_even()), "{b:#010x}");
            }
        }
        for v in [
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -2.5,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
        ] {
            assert_eq!(rint(v).to_bits(), v.round_ties_even().to_bits(), "{v}");
        }
    }

    #[test]
    fn conversions_saturate() {
        let c = |x: f32| cvt_rni_s32(x.to_bits()) as i32;
        let z = |x: f32| cvt_rzi_s32(x.to_bits()) as i32;
        assert_eq!(c(2.5), 2);
        assert_eq!(c(3.5), 4);
        assert_eq!(c(-2.5), -2);
        assert_eq!(c(1e10), i32::MAX);
        assert_eq!(c(-1e10), i32::MIN);
        assert_eq!(c(f32::NAN), 0);
        assert_eq!(c(f32::NEG_INFINITY), i32::MIN);
        assert_eq!(z(-2.9), -2);
        assert_eq!(z(2.9), 2);
        assert_eq!(z(3e9), i32::MAX);
        assert_eq!(z(f32::NAN), 0);
        assert_eq!(f32::from_bits(frint((-2.5f32).to_bits())), -2.0);
        assert_eq!(frint((-0.4f32).to_bits()), (-0.0f32).to_bits());
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24).to_bits());
        assert_eq!(f16_to_f32(0x7e00), CANONICAL_NAN);
    }
}
