//! Host tensors: the data both references, the CLI and the runtime exchange.
//!
//! Data model: a [`Tensor`] is a [`TensorType`] plus its elements as bytes, dense, row-major
//! and little-endian, exactly as the buffer lies in device memory (`bf16`/`f16` as their
//! IEEE bits, `bool` as one byte 0 or 1). Conversions to and from numbers go through the
//! `half` crate for `bf16`/`f16`, rounding to nearest even.
//!
//! [`Tensor::random`] makes seeded inputs with a self-contained splitmix64 generator, so a
//! seed gives the same tensor on every machine and with every version of every dependency.

use half::{bf16, f16};
use tessel_ir::{DType, TensorType};

/// A dense host tensor: `ty.size_bytes()` bytes of row-major, little-endian elements.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Tensor {
    pub ty: TensorType,
    /// `ty.size_bytes()` bytes.
    pub data: Vec<u8>,
}

impl Tensor {
    /// Block `r` of `n` equal contiguous blocks along `axis` (a tensor-parallel rank's part
    /// of a whole tensor, tessel-ir `ranks`).
    ///
    /// Panics if `axis` is out of range or `n` does not divide the dim.
    pub fn block(&self, axis: u32, r: u32, n: u32) -> Tensor {
        let dims = &self.ty.shape.0;
        let d = dims[axis as usize];
        assert!(
            d % n as u64 == 0 && r < n,
            "block {r} of {n} along a dim of {d}"
        );
        let len = d / n as u64;
        let (outer, inner) = self.around(axis);
        let mut out = Vec::with_capacity(self.data.len() / n as usize);
        for o in 0..outer {
            let at = ((o * d + r as u64 * len) * inner) as usize;
            out.extend_from_slice(&self.data[at..at + (len * inner) as usize]);
        }
        let mut ty = self.ty.clone();
        ty.shape.0[axis as usize] = len;
        Tensor { ty, data: out }
    }

    /// `parts` (one dtype, equal dims except along `axis`) concatenated along `axis`.
    ///
    /// Panics if `parts` is empty or the parts do not fit together.
    pub fn concat(axis: u32, parts: &[Tensor]) -> Tensor {
        let mut ty = parts[0].ty.clone();
        ty.shape.0[axis as usize] = parts.iter().map(|p| p.ty.shape.0[axis as usize]).sum();
        for p in parts {
            let mut t = p.ty.clone();
            t.shape.0[axis as usize] = ty.shape.0[axis as usize];
            assert_eq!(t, ty, "parts of one concatenation");
        }
        let (outer, _) = parts[0].around(axis);
        let mut data = Vec::with_capacity(ty.size_bytes() as usize);
        for o in 0..outer {
            for p in parts {
                let (_, inner) = p.around(axis);
                let row = (p.ty.shape.0[axis as usize] * inner) as usize;
                data.extend_from_slice(&p.data[o as usize * row..(o as usize + 1) * row]);
            }
        }
        Tensor { ty, data }
    }

    /// The element count before `axis` and the bytes of one step along it after.
    fn around(&self, axis: u32) -> (u64, u64) {
        let dims = &self.ty.shape.0;
        let outer = dims[..axis as usize].iter().product();
        let inner = dims[axis as usize + 1..].iter().product::<u64>() * self.ty.dtype.size_bytes();
        (outer, inner)
    }

    /// All elements zero (`+0.0`, `0`, `false`).
    pub fn zeros(ty: TensorType) -> Tensor {
        let n = ty.size_bytes() as usize;
        Tensor {
            ty,
            data: vec![0; n],
        }
    }

    /// Every byte `0xFF`: the poison the GPU harness fills outputs with before a run, so
    /// an element no kernel writes reads back as NaN (floats) or `-1` (i32).
    pub fn poison(ty: TensorType) -> Tensor {
        let n = ty.size_bytes() as usize;
        Tensor {
            ty,
            data: vec![0xFF; n],
        }
    }

    /// A tensor of dtype `dtype` and shape `shape` from f32 values, each rounded to nearest
    /// even to `bf16`/`f16`, truncated toward zero (saturating, NaN → 0) to `i32`, or
    /// `x != 0` for `bool`.
    ///
    /// Panics if `values.len()` is not the shape's element count.
    pub fn from_f32(dtype: DType, shape: Vec<u64>, values: &[f32]) -> Tensor {
        let ty = TensorType::new(dtype, shape);
        assert_eq!(ty.shape.numel() as usize, values.len(), "element count");
        let mut data = Vec::with_capacity(ty.size_bytes() as usize);
        for &x in values {
            match dtype {
                DType::Bf16 => data.extend_from_slice(&bf16::from_f32(x).to_le_bytes()),
                DType::F16 => data.extend_from_slice(&f16::from_f32(x).to_le_bytes()),
                DType::F32 => data.extend_from_slice(&x.to_le_bytes()),
                DType::I32 => data.extend_from_slice(&(x as i32).to_le_bytes()),
                DType::Bool => data.push((x != 0.0) as u8),
            }
        }
        Tensor { ty, data }
    }

    /// An `i32` tensor. Panics if `values.len()` is not the shape's element count.
    pub fn from_i32(shape: Vec<u64>, values: &[i32]) -> Tensor {
        let ty = TensorType::new(DType::I32, shape);
        assert_eq!(ty.shape.numel() as usize, values.len(), "element count");
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor { ty, data }
    }

    /// A `bool` tensor. Panics if `values.len()` is not the shape's element count.
    pub fn from_bool(shape: Vec<u64>, values: &[bool]) -> Tensor {
        let ty = TensorType::new(DType::Bool, shape);
        assert_eq!(ty.shape.numel() as usize, values.len(), "element count");
        let data = values.iter().map(|&b| b as u8).collect();
        Tensor { ty, data }
    }

    /// A `bf16` tensor from bf16 values. Panics on an element-count mismatch.
    pub fn from_bf16(shape: Vec<u64>, values: &[bf16]) -> Tensor {
        let ty = TensorType::new(DType::Bf16, shape);
        assert_eq!(ty.shape.numel() as usize, values.len(), "element count");
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor { ty, data }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.ty.shape.numel() as usize
    }

    /// Element `i` (flat row-major index) as its raw bits, zero-extended.
    ///
    /// Panics if `i` is out of range.
    pub fn bits(&self, i: usize) -> u64 {
        let s = self.ty.dtype.size_bytes() as usize;
        let b = &self.data[i * s..i * s + s];
        let mut w = [0u8; 8];
        w[..s].copy_from_slice(b);
        u64::from_le_bytes(w)
    }

    /// Element `i` converted exactly to f64 (`bool` as 0 or 1).
    pub fn get_f64(&self, i: usize) -> f64 {
        let bits = self.bits(i);
        match self.ty.dtype {
            DType::Bf16 => bf16::from_bits(bits as u16).to_f64(),
            DType::F16 => f16::from_bits(bits as u16).to_f64(),
            DType::F32 => f32::from_bits(bits as u32) as f64,
            DType::I32 => bits as u32 as i32 as f64,
            DType::Bool => (bits != 0) as u8 as f64,
        }
    }

    /// All elements converted exactly to f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.numel()).map(|i| self.get_f64(i)).collect()
    }

    /// All elements as f32 (exact for every dtype but large `i32`s, which round).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        (0..self.numel()).map(|i| self.get_f64(i) as f32).collect()
    }

    /// The elements of a `bf16` tensor. Panics for another dtype.
    pub fn to_bf16_vec(&self) -> Vec<bf16> {
        assert_eq!(self.ty.dtype, DType::Bf16, "not a bf16 tensor");
        self.data
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]))
            .collect()
    }

    /// The elements of an `i32` tensor. Panics for another dtype.
    pub fn to_i32_vec(&self) -> Vec<i32> {
        assert_eq!(self.ty.dtype, DType::I32, "not an i32 tensor");
        self.data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A seeded pseudo-random tensor, the same bits for a given `(ty, seed)` everywhere.
    ///
    /// Floats are approximately N(0, 1): the Irwin-Hall sum of four uniforms on [0, 1),
    /// centred and scaled by √3 (so bounded by ±2√3 ≈ ±3.46, with no libm call that could
    /// vary between platforms), then rounded to nearest even to the dtype. `i32` values are
    /// uniform in -8..=8; `bool` values are fair coin flips. The generator is splitmix64
    /// (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014)
    /// started at `seed`.
    pub fn random(ty: TensorType, seed: u64) -> Tensor {
        let mut data = Vec::with_capacity(ty.size_bytes() as usize);
        fill_random(&ty, seed, &mut data);
        Tensor { ty, data }
    }

    /// [`Tensor::random`], reserving the memory first: an error instead of an abort when
    /// it cannot be had (`Vec::try_reserve_exact`).
    pub fn try_random(
        ty: TensorType,
        seed: u64,
    ) -> Result<Tensor, std::collections::TryReserveError> {
        let mut data = Vec::new();
        data.try_reserve_exact(ty.size_bytes() as usize)?;
        fill_random(&ty, seed, &mut data);
        Ok(Tensor { ty, data })
    }
}

/// Appends the elements of [`Tensor::random`] for `(ty, seed)` to `data`.
fn fill_random(ty: &TensorType, seed: u64, data: &mut Vec<u8>) {
    let mut rng = SplitMix64::new(seed);
    let n = ty.shape.numel() as usize;
    for _ in 0..n {
        match ty.dtype {
            DType::Bf16 | DType::F16 | DType::F32 => {
                let s: f64 = (0..4).map(|_| rng.next_f64()).sum();
                let x = ((s - 2.0) * 3f64.sqrt()) as f32;
                match ty.dtype {
                    DType::Bf16 => data.extend_from_slice(&bf16::from_f32(x).to_le_bytes()),
                    DType::F16 => data.extend_from_slice(&f16::from_f32(x).to_le_bytes()),
                    _ => data.extend_from_slice(&x.to_le_bytes()),
                }
            }
            DType::I32 => {
                let v = (rng.next_u64() % 17) as i32 - 8;
                data.extend_from_slice(&v.to_le_bytes());
            }
            DType::Bool => data.push((rng.next_u64() >> 63) as u8),
        }
    }
}

/// The splitmix64 generator: 64 bits of state, one add and a mixing function per draw.
/// Stable by construction (no dependency), used by [`Tensor::random`].
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first draw depends on `seed` only.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on [0, 1), 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // First outputs for seed 0 of the reference C implementation
        // (Vigna, prng.di.unimi.it/splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 7960286522194355700);
    }

    #[test]
    fn random_is_deterministic_and_scaled() {
        let ty = TensorType::new(DType::F32, vec![64, 64]);
        let a = Tensor::random(ty.clone(), 7);
        assert_eq!(a, Tensor::random(ty.clone(), 7));
        assert_ne!(a, Tensor::random(ty, 8));
        let v = a.to_f64_vec();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!((var - 1.0).abs() < 0.1, "var {var}");
        assert!(v.iter().all(|x| x.abs() <= 3.47));
        let i = Tensor::random(TensorType::new(DType::I32, vec![100]), 1).to_i32_vec();
        assert!(i.iter().all(|x| (-8..=8).contains(x)));
        assert!(i.iter().any(|&x| x != i[0]));
    }

    #[test]
    fn round_trips() {
        let t = Tensor::from_f32(DType::Bf16, vec![3], &[1.0, -2.5, 1.0 + 1.0 / 256.0]);
        // 1 + 2^-8 is a tie between bf16 1.0 and 1 + 2^-7: even is 1.0.
        assert_eq!(t.to_f64_vec(), vec![1.0, -2.5, 1.0]);
        assert_eq!(t.data, vec![0x80, 0x3f, 0x20, 0xc0, 0x80, 0x3f]);
        let p = Tensor::poison(TensorType::new(DType::F32, vec![2]));
        assert!(p.get_f64(1).is_nan());
        assert_eq!(
            Tensor::from_i32(vec![2], &[-3, 7]).to_f64_vec(),
            vec![-3.0, 7.0]
        );
    }
}
