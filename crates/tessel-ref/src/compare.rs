//! Comparison metrics: a step's output against the f64 oracle ([`error_stats`]), and two
//! outputs bit for bit ([`bit_diff`], GPU against executor).
//!
//! Units: absolute errors in the output's units; relative errors as fractions; ulps in
//! units of the **output dtype's** ulp at the reference value (`2^(e - p)` for the
//! reference's binade `e`, clamped to the dtype's least normal exponent, with `p` = 23
//! for f32, 10 for f16, 7 for bf16; 1 for `i32`/`bool`).

use crate::oracle::OracleTensor;
use crate::tensor::Tensor;
use std::fmt;
use tessel_ir::DType;

/// Why two tensors cannot be compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    #[error("shapes differ: {a:?} vs {b:?}")]
    Shape { a: Vec<u64>, b: Vec<u64> },
    #[error("dtypes differ: {a} vs {b}")]
    DType { a: DType, b: DType },
    #[error("data length {len} does not match the type ({want} bytes)")]
    Length { len: usize, want: u64 },
}

/// Error of an output against the oracle, over all elements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorStats {
    /// Elements compared.
    pub elements: u64,
    /// `max |out - ref|` over elements that are not NaN on either side.
    pub max_abs: f64,
    /// `max |out - ref| / |ref|`; infinite where `ref == 0` and `out != 0`.
    pub max_rel: f64,
    /// `‖out - ref‖₂ / ‖ref‖₂` over elements that are not NaN on either side; 0 when both
    /// norms are 0, infinite when only the reference's is.
    pub rel_rms: f64,
    /// `max |out - ref| / ulp(ref)`, in ulps of the output dtype.
    pub max_ulp: f64,
    /// Elements that differ from the reference correctly rounded (nearest even) to the
    /// output dtype, NaN mismatches included. 0 means every element is correctly rounded.
    pub mismatches: u64,
    /// Elements that are NaN on exactly one side.
    pub nan_mismatch: u64,
    /// The first NaN-mismatched element if any, else the element of largest ulp error;
    /// `None` when every element matches exactly.
    pub worst_index: Option<u64>,
}

impl fmt::Display for ErrorStats {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} elements: max_abs {:.3e}, max_rel {:.3e}, rel_rms {:.3e}, max_ulp {:.2}, {} not correctly rounded, {} NaN mismatches",
            self.elements,
            self.max_abs,
            self.max_rel,
            self.rel_rms,
            self.max_ulp,
            self.mismatches,
            self.nan_mismatch
        )?;
        if let Some(i) = self.worst_index {
            write!(f, ", worst at {i}")?;
        }
        Ok(())
    }
}

use crate::round::round_to;
pub use crate::round::ulp;

/// Errors of `out` against `reference` (same shape; `out`'s dtype decides the ulp).
///
/// Errors: [`CompareError::Shape`] or [`CompareError::Length`] on a mismatch.
pub fn error_stats(out: &Tensor, reference: &OracleTensor) -> Result<ErrorStats, CompareError> {
    if out.ty.shape.0 != reference.shape {
        return Err(CompareError::Shape {
            a: out.ty.shape.0.clone(),
            b: reference.shape.clone(),
        });
    }
    if out.data.len() as u64 != out.ty.size_bytes() || reference.data.len() != out.numel() {
        return Err(CompareError::Length {
            len: out.data.len(),
            want: out.ty.size_bytes(),
        });
    }
    let dt = out.ty.dtype;
    let mut s = ErrorStats {
        elements: out.numel() as u64,
        ..Default::default()
    };
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    let mut worst_ulp = 0.0f64;
    let mut first_nan: Option<u64> = None;
    for (i, &r) in reference.data.iter().enumerate() {
        let o = out.get_f64(i);
        if o.is_nan() || r.is_nan() {
            if !(o.is_nan() && r.is_nan()) {
                s.nan_mismatch += 1;
                s.mismatches += 1;
                first_nan.get_or_insert(i as u64);
            }
            continue;
        }
        if o != round_to(dt, r) {
            s.mismatches += 1;
        }
        ref2 += r * r;
        if o == r {
            continue;
        }
        let abs = (o - r).abs();
        diff2 += abs * abs;
        let rel = if r == 0.0 {
            f64::INFINITY
        } else {
            abs / r.abs()
        };
        let u = abs / ulp(dt, r);
        s.max_abs = s.max_abs.max(abs);
        s.max_rel = s.max_rel.max(rel);
        if u > worst_ulp || s.worst_index.is_none() {
            worst_ulp = u;
            s.worst_index = Some(i as u64);
        }
    }
    s.max_ulp = worst_ulp;
    s.rel_rms = if diff2 == 0.0 {
        0.0
    } else if ref2 == 0.0 {
        f64::INFINITY
    } else {
        (diff2 / ref2).sqrt()
    };
    if first_nan.is_some() {
        s.worst_index = first_nan;
    }
    Ok(s)
}

/// Where two tensors of one type differ in their bits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BitDiff {
    /// Elements compared.
    pub elements: u64,
    /// Elements whose bits differ, two NaNs excepted.
    pub differing_elements: u64,
    /// Elements that are NaN in both with different bits: not differences. Which NaN an
    /// invalid operation makes is not portable (x86 makes 0xffc00000, PTX 0x7fffffff, and
    /// `abs.f32` of a NaN gives PTX's on sm_90), and IEEE 754 leaves payloads unspecified.
    pub nan_payloads: u64,
    /// The first differing element and its bits in `a` and `b`.
    pub first_index: Option<u64>,
    pub first_bits: Option<(u64, u64)>,
    /// The largest distance between differing elements, in representable values of the
    /// dtype (1 = adjacent floats; for NaN on either side, `u64::MAX`).
    pub max_ulp_distance: u64,
}

impl BitDiff {
    /// True when every element has the same bits.
    pub fn identical(&self) -> bool {
        self.differing_elements == 0
    }
}

impl fmt::Display for BitDiff {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match (self.first_index, self.first_bits) {
            (Some(i), Some((a, b))) => write!(
                f,
                "{} of {} elements differ; first at {i} ({a:#x} vs {b:#x}); max distance {} ulp",
                self.differing_elements, self.elements, self.max_ulp_distance
            ),
            _ if self.nan_payloads > 0 => write!(
                f,
                "all {} elements bit-identical but for the payloads of {} NaNs",
                self.elements, self.nan_payloads
            ),
            _ => write!(f, "all {} elements bit-identical", self.elements),
        }
    }
}

/// Position of a float's bits on the number line (monotone in the value, `-0` and `+0`
/// adjacent), so the difference of two positions counts the floats between them.
fn ordinal(bits: u64, width: u32) -> i64 {
    let sign = 1u64 << (width - 1);
    let mag = (bits & (sign - 1)) as i64;
    if bits & sign != 0 {
        -mag - 1
    } else {
        mag
    }
}

/// Compares `a` and `b` element by element, bit for bit (two NaNs are the same: see
/// [`BitDiff::nan_payloads`]).
///
/// Errors: [`CompareError::Shape`]/[`CompareError::DType`] if the types differ,
/// [`CompareError::Length`] if a tensor's data does not match its type.
pub fn bit_diff(a: &Tensor, b: &Tensor) -> Result<BitDiff, CompareError> {
    if a.ty.dtype != b.ty.dtype {
        return Err(CompareError::DType {
            a: a.ty.dtype,
            b: b.ty.dtype,
        });
    }
    if a.ty.shape != b.ty.shape {
        return Err(CompareError::Shape {
            a: a.ty.shape.0.clone(),
            b: b.ty.shape.0.clone(),
        });
    }
    for t in [a, b] {
        if t.data.len() as u64 != t.ty.size_bytes() {
            return Err(CompareError::Length {
                len: t.data.len(),
                want: t.ty.size_bytes(),
            });
        }
    }
    let dt = a.ty.dtype;
    let width = dt.size_bytes() as u32 * 8;
    let mut d = BitDiff {
        elements: a.numel() as u64,
        ..Default::default()
    };
    for i in 0..a.numel() {
        let (x, y) = (a.bits(i), b.bits(i));
        if x == y {
            continue;
        }
        if dt.is_float() && a.get_f64(i).is_nan() && b.get_f64(i).is_nan() {
            d.nan_payloads += 1;
            continue;
        }
        d.differing_elements += 1;
        if d.first_index.is_none() {
            d.first_index = Some(i as u64);
            d.first_bits = Some((x, y));
        }
        let dist = if dt.is_float() {
            if a.get_f64(i).is_nan() || b.get_f64(i).is_nan() {
                u64::MAX
            } else {
                ordinal(x, width).abs_diff(ordinal(y, width))
            }
        } else {
            (x as u32 as i32 as i64).abs_diff(y as u32 as i32 as i64)
        };
        d.max_ulp_distance = d.max_ulp_distance.max(dist);
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessel_ir::TensorType;

    fn oracle(dtype: DType, data: Vec<f64>) -> OracleTensor {
        OracleTensor {
            dtype,
            shape: vec![data.len() as u64],
            data,
        }
    }

    #[test]
    fn stats_in_ulps_of_the_output_dtype() {
        // bf16 ulp at 1.0 is 2^-7; 1.0078125 = 1 + 2^-7 is one ulp from 1.0.
        let out = Tensor::from_f32(DType::Bf16, vec![3], &[1.0078125, 2.0, -4.0]);
        let r = oracle(DType::Bf16, vec![1.0, 2.0, -4.0]);
        let s = error_stats(&out, &r).unwrap();
        assert_eq!(s.max_abs, 2f64.powi(-7));
        assert_eq!(s.max_ulp, 1.0);
        assert_eq!(s.max_rel, 2f64.powi(-7));
        assert_eq!(s.mismatches, 1);
        assert_eq!(s.worst_index, Some(0));
        let want_rms = 2f64.powi(-7) / (1.0f64 + 4.0 + 16.0).sqrt();
        assert!((s.rel_rms - want_rms).abs() < 1e-15);
        // A reference between two bf16s: the correctly rounded output is no mismatch.
        let out = Tensor::from_f32(DType::Bf16, vec![1], &[1.0]);
        let s = error_stats(&out, &oracle(DType::Bf16, vec![1.001])).unwrap();
        assert_eq!(s.mismatches, 0);
        assert!((s.max_ulp - 0.001 * 128.0).abs() < 1e-9);
    }

    #[test]
    fn nan_mismatches_are_counted() {
        let out = Tensor::from_f32(DType::F32, vec![3], &[f32::NAN, 1.0, f32::NAN]);
        let r = oracle(DType::F32, vec![f64::NAN, f64::NAN, 0.5]);
        let s = error_stats(&out, &r).unwrap();
        assert_eq!(s.nan_mismatch, 2);
        assert_eq!(s.worst_index, Some(1));
        assert_eq!(s.max_abs, 0.0);
    }

    #[test]
    fn bit_diff_counts_and_measures() {
        let a = Tensor::from_f32(DType::F32, vec![4], &[1.0, -0.0, 3.0, 4.0]);
        let mut b = a.clone();
        let next = f32::from_bits(3f32.to_bits() + 2);
        b.data[8..12].copy_from_slice(&next.to_le_bytes());
        b.data[4..8].copy_from_slice(&0f32.to_le_bytes());
        let d = bit_diff(&a, &b).unwrap();
        assert_eq!(d.differing_elements, 2);
        assert_eq!(d.first_index, Some(1));
        assert_eq!(d.first_bits, Some((0x8000_0000, 0)));
        assert_eq!(d.max_ulp_distance, 2);
        assert!(bit_diff(&a, &a).unwrap().identical());
        // Two NaNs with different payloads are no difference, a NaN against a number is.
        let nans = Tensor::from_f32(DType::F32, vec![2], &[f32::NAN, 1.0]);
        let mut other = nans.clone();
        other.data[0..4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        let d = bit_diff(&nans, &other).unwrap();
        assert!(d.identical() && d.nan_payloads == 1, "{d}");
        other.data[0..4].copy_from_slice(&2f32.to_le_bytes());
        assert_eq!(bit_diff(&nans, &other).unwrap().differing_elements, 1);
        let c = Tensor::zeros(TensorType::new(DType::I32, vec![4]));
        assert!(bit_diff(&a, &c).is_err());
    }
}
