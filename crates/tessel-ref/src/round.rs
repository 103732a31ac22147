//! Correct rounding of an f64 to each dtype, and the ulp of each dtype.
//!
//! `half`'s `bf16::from_f64`/`f16::from_f64` drop the low 32 bits of the f64 significand
//! before rounding, so a value just above a halfway point can round down: the references
//! need the one correctly rounded value (IEEE 754-2019 §4.3.1, roundTiesToEven), computed
//! here from the quantum of the target format instead.

use tessel_ir::DType;

/// A binary floating-point format: `p` significand bits (the hidden bit included) and the
/// least normal exponent `emin` (IEEE 754-2019 Table 3.5).
#[derive(Copy, Clone, Debug)]
struct Format {
    p: i32,
    emin: i32,
    /// The largest finite value.
    max: f64,
}

const F32: Format = Format {
    p: 24,
    emin: -126,
    max: f32::MAX as f64,
};
const BF16: Format = Format {
    p: 8,
    emin: -126,
    // (2 - 2^-7) · 2^127
    max: 3.389_531_389_251_535_5e38,
};
const F16: Format = Format {
    p: 11,
    emin: -14,
    max: 65504.0,
};

fn format(dtype: DType) -> Option<Format> {
    match dtype {
        DType::F32 => Some(F32),
        DType::Bf16 => Some(BF16),
        DType::F16 => Some(F16),
        DType::I32 | DType::Bool => None,
    }
}

/// The binade exponent of a finite nonzero f64 (`floor(log2 |x|)`), or a very small one
/// for f64 subnormals (which every format here rounds on its own subnormal grid).
fn exponent(x: f64) -> i32 {
    ((x.abs().to_bits() >> 52) & 0x7ff) as i32 - 1023
}

fn round_in(f: Format, x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    // The quantum (ulp) at x: 2^(e - p + 1), on the subnormal grid below 2^emin.
    let q = 2f64.powi(exponent(x).max(f.emin) - f.p + 1);
    // x / q and the product are exact (q is a power of two, nothing over- or underflows
    // for these formats), so the only rounding is round_ties_even's, to an integer.
    let y = (x / q).round_ties_even() * q;
    if y.abs() > f.max {
        // Beyond the largest finite value by at least half its ulp: overflow (§7.4).
        f64::INFINITY.copysign(x)
    } else if y == 0.0 {
        0f64.copysign(x)
    } else {
        y
    }
}

/// `x` rounded to nearest even to `dtype` (±inf on overflow, the sign of zero kept).
/// Integers and bools are returned as they are.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    match format(dtype) {
        Some(f) => round_in(f, x),
        None => x,
    }
}

/// `x` rounded to nearest even to f32.
pub fn rn32(x: f64) -> f64 {
    // Rust's `as` is roundTiesToEven with overflow to infinity.
    x as f32 as f64
}

/// The spacing of `dtype` values in the binade of `r` (`2^(e - p + 1)`, clamped to the
/// subnormal spacing; for ±inf or 0 the least spacing); 1 for `i32`/`bool`.
pub fn ulp(dtype: DType, r: f64) -> f64 {
    match format(dtype) {
        Some(f) => {
            let e = if r == 0.0 || !r.is_finite() {
                f.emin
            } else {
                exponent(r).max(f.emin)
            };
            2f64.powi(e - f.p + 1)
        }
        None => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn bf16_rounding_sees_the_low_bits() {
        // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even gives 1; a hair
        // above it (in the low 32 bits of the f64) must round up. `half` says 1 for both.
        let halfway = 1.0 + 2f64.powi(-8);
        assert_eq!(round_to(DType::Bf16, halfway), 1.0);
        let above = halfway + 2f64.powi(-40);
        assert_eq!(round_to(DType::Bf16, above), 1.0 + 2f64.powi(-7));
        assert_eq!(bf16::from_f64(above).to_f64(), 1.0);
    }

    #[test]
    fn agrees_with_half_from_f32_and_with_as() {
        let mut rng = crate::tensor::SplitMix64::new(7);
        for _ in 0..100_000 {
            let x = f32::from_bits(rng.next_u64() as u32);
            if !x.is_finite() {
                continue;
            }
            // `half`'s conversions from f32 see every bit (its f64 ones do not).
            let (f, x) = (x, x as f64);
            assert_eq!(
                round_to(DType::Bf16, x),
                bf16::from_f32(f).to_f64(),
                "{x:e}"
            );
            assert_eq!(round_to(DType::F16, x), f16::from_f32(f).to_f64(), "{x:e}");
            let d = f64::from_bits(rng.next_u64());
            if d.is_finite() {
                assert_eq!(
                    round_to(DType::F32, d).to_bits(),
                    rn32(d).to_bits(),
                    "{d:e}"
                );
            }
        }
    }

    #[test]
    fn overflow_subnormals_and_zeros() {
        assert_eq!(round_to(DType::F16, 65504.0 + 15.999), 65504.0);
        assert_eq!(round_to(DType::F16, 65504.0 + 16.0), f64::INFINITY);
        assert_eq!(round_to(DType::F16, -1e6), f64::NEG_INFINITY);
        // The least f16 subnormal is 2^-24; half of it ties to even (0), a bit more rounds up.
        assert_eq!(round_to(DType::F16, 2f64.powi(-25)), 0.0);
        assert_eq!(round_to(DType::F16, 2f64.powi(-25) * 1.01), 2f64.powi(-24));
        assert!(round_to(DType::Bf16, -1e-300).is_sign_negative());
        assert_eq!(ulp(DType::Bf16, 1.5), 2f64.powi(-7));
        assert_eq!(ulp(DType::F32, 0.0), 2f64.powi(-149));
        assert_eq!(ulp(DType::F16, 1e-7), 2f64.powi(-24));
    }
}
