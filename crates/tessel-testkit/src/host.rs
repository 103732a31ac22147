//! Host-side data for hand-built kernels: buffers as the executor's [`Tensor`]s, launch
//! arguments, seeded values, and the inputs of the [`crate::mma`] kernels, the same for the
//! executor tests and the GPU tests so that both run one case.

use half::{bf16, f16};
use tessel_ir::kernel::{LaunchArg, MmaShape, WgmmaInput};
use tessel_ir::{BufferId, DType, TensorType};
use tessel_ref::tensor::SplitMix64;
use tessel_ref::Tensor;

use crate::mma::{GEMM_M, GEMM_N};

/// The launch argument for buffer number `i` of the buffers given to the run.
pub fn buf(i: usize) -> LaunchArg {
    LaunchArg::Buffer(BufferId::from_u32(i as u32))
}

/// A one-dimensional tensor of `n` elements of `dtype` with the given bytes.
pub fn raw(dtype: DType, n: usize, bytes: Vec<u8>) -> Tensor {
    Tensor {
        ty: TensorType::new(dtype, vec![n as u64]),
        data: bytes,
    }
}

/// A one-dimensional f32 tensor of `v`.
pub fn f32_tensor(v: &[f32]) -> Tensor {
    Tensor::from_f32(DType::F32, vec![v.len() as u64], v)
}

/// `n` f32 elements of poison (every byte `0xFF`, NaN), for outputs.
pub fn poison_f32(n: usize) -> Tensor {
    Tensor::poison(TensorType::new(DType::F32, vec![n as u64]))
}

/// Little-endian 32-bit words of `bytes` as `u32` bits.
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Little-endian 32-bit words of `bytes` as f32.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    words(bytes).into_iter().map(f32::from_bits).collect()
}

/// Uniform values in [-2, 2) with a spread of exponents (some tiny, some large).
pub fn values(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let x = (rng.next_f64() * 4.0 - 2.0) as f32;
            let scale = [1.0f32, 1.0, 0.25, 8.0, 1.0 / 1024.0][(rng.next_u64() % 5) as usize];
            x * scale
        })
        .collect()
}

/// Round to 10 fraction bits, ties away from zero, computed in f64 (normal inputs only):
/// an independent statement of `cvt.rna.tf32.f32`.
pub fn rna_tf32(x: f32) -> f32 {
    if x == 0.0 {
        return x;
    }
    let e = (x.abs() as f64).log2().floor() as i32;
    let ulp = 2f64.powi(e - 10);
    ((x as f64 / ulp).round() * ulp) as f32
}

/// A matmul's operands as the f32 values multiplied, with the kernel's buffers and
/// launch arguments in parameter order.
pub struct MatmulCase {
    /// Row-major A `[M, K]`.
    pub a: Vec<f32>,
    /// Row-major B `[K, N]`.
    pub b: Vec<f32>,
    /// Row-major C `[M, N]` added to the product (zeros where the kernel adds none).
    pub c: Vec<f32>,
    pub bufs: Vec<Tensor>,
    pub args: Vec<LaunchArg>,
}

/// `n` values of [`values`] rounded to bf16: the values as f32 and the tensor.
fn bf16_operand(rng: &mut SplitMix64, n: usize) -> (Vec<f32>, Tensor) {
    let v: Vec<bf16> = values(rng, n).into_iter().map(bf16::from_f32).collect();
    let t = Tensor::from_bf16(vec![n as u64], &v);
    (v.iter().map(|x| x.to_f32()).collect(), t)
}

/// As [`bf16_operand`] for f16.
fn f16_operand(rng: &mut SplitMix64, n: usize) -> (Vec<f32>, Tensor) {
    let v: Vec<f16> = values(rng, n).into_iter().map(f16::from_f32).collect();
    let bytes = v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
    (
        v.iter().map(|x| x.to_f32()).collect(),
        raw(DType::F16, n, bytes),
    )
}

/// The inputs of [`crate::mma::mma_single`]`(shape)` from `seed`: `a` and `b` as the
/// tensor core sees them (bf16/f16 values, or f32 rounded to tf32 — with exact ties of
/// the rounding, both signs, and a carry into the exponent among A's first elements),
/// `c`, and the buffers `a, b, c, d` (and `at` for tf32), outputs poisoned.
pub fn mma_single_case(shape: MmaShape, seed: u64) -> MatmulCase {
    let kk = shape.k();
    let mut rng = SplitMix64::new(seed);
    let c = values(&mut rng, 16 * 8);
    let (a, b, mut bufs) = match shape {
        MmaShape::M16N8K16Bf16 | MmaShape::M16N8K16F16 => {
            let operand = if shape == MmaShape::M16N8K16Bf16 {
                bf16_operand
            } else {
                f16_operand
            };
            let (a, at) = operand(&mut rng, 16 * kk);
            let (b, bt) = operand(&mut rng, kk * 8);
            (a, b, vec![at, bt])
        }
        MmaShape::M16N8K8Tf32 => {
            let mut a = values(&mut rng, 16 * kk);
            a[0] = f32::from_bits(0x3f80_1000);
            a[1] = f32::from_bits(0xbf80_3000);
            a[2] = f32::from_bits(0x3fff_f000);
            let b = values(&mut rng, kk * 8);
            let bufs = vec![f32_tensor(&a), f32_tensor(&b)];
            (
                a.into_iter().map(rna_tf32).collect(),
                b.into_iter().map(rna_tf32).collect(),
                bufs,
            )
        }
    };
    bufs.push(f32_tensor(&c));
    bufs.push(poison_f32(16 * 8));
    let mut args = vec![buf(0), buf(1), buf(2), buf(3)];
    if shape == MmaShape::M16N8K8Tf32 {
        bufs.push(poison_f32(128));
        args.push(buf(4));
    }
    MatmulCase {
        a,
        b,
        c,
        bufs,
        args,
    }
}

/// The inputs of [`crate::mma::gemm_bf16`] at reduction length `kk` from `seed`: bf16
/// A `[32, kk]` and B `[kk, 16]`, C poisoned, and `k`.
pub fn gemm_bf16_case(kk: usize, seed: u64) -> MatmulCase {
    let (m, n) = (GEMM_M as usize, GEMM_N as usize);
    let mut rng = SplitMix64::new(seed);
    let (a, at) = bf16_operand(&mut rng, m * kk);
    let (b, bt) = bf16_operand(&mut rng, kk * n);
    MatmulCase {
        a,
        b,
        c: vec![0.0; m * n],
        bufs: vec![at, bt, poison_f32(m * n)],
        args: vec![buf(0), buf(1), buf(2), LaunchArg::U32(kk as u32)],
    }
}

/// The inputs of [`crate::wgmma::wgmma_rs_mn`]`(input, n, warpgroups)` at reduction length
/// `kk` from `seed` (16-bit inputs): `a` `[64g, K]` and `b` `[K, n]` as stored (B's rows are
/// the MN-major operand's K rows), the buffers `a, b, d` (`d` poisoned) and `k`.
pub fn wgmma_mn_case(
    input: WgmmaInput,
    n: usize,
    warpgroups: usize,
    kk: usize,
    seed: u64,
) -> MatmulCase {
    let m = 64 * warpgroups;
    let mut rng = SplitMix64::new(seed);
    let operand = match input {
        WgmmaInput::Bf16 => bf16_operand,
        WgmmaInput::F16 => f16_operand,
        WgmmaInput::Tf32 => panic!("an MN-major B and A in registers are 16-bit only"),
    };
    let (a, at) = operand(&mut rng, m * kk);
    let (b, bt) = operand(&mut rng, kk * n);
    MatmulCase {
        a,
        b,
        c: vec![0.0; m * n],
        bufs: vec![at, bt, poison_f32(m * n)],
        args: vec![buf(0), buf(1), buf(2), LaunchArg::U32(kk as u32)],
    }
}

/// The inputs of [`crate::wgmma::wgmma_gemm`]`(input, n, warpgroups)` at reduction length
/// `kk` from `seed`: A `[64·warpgroups, kk]` and B `[n, kk]` (tf32 values rounded to tf32
/// on the host, so that the tensor core's reading of the low bits does not matter), D
/// poisoned, and `k`. `b` is B transposed, `[kk, n]`, as [`MatmulCase`] holds it.
pub fn wgmma_case(
    input: WgmmaInput,
    n: usize,
    warpgroups: usize,
    kk: usize,
    seed: u64,
) -> MatmulCase {
    let m = 64 * warpgroups;
    let mut rng = SplitMix64::new(seed);
    let operand = |rng: &mut SplitMix64, len: usize| match input {
        WgmmaInput::Bf16 => bf16_operand(rng, len),
        WgmmaInput::F16 => f16_operand(rng, len),
        WgmmaInput::Tf32 => {
            let v: Vec<f32> = values(rng, len).into_iter().map(rna_tf32).collect();
            let t = f32_tensor(&v);
            (v, t)
        }
    };
    let (a, at) = operand(&mut rng, m * kk);
    let (bt, btt) = operand(&mut rng, n * kk);
    let b = (0..kk * n).map(|i| bt[(i % n) * kk + i / n]).collect();
    MatmulCase {
        a,
        b,
        c: vec![0.0; m * n],
        bufs: vec![at, btt, poison_f32(m * n)],
        args: vec![buf(0), buf(1), buf(2), LaunchArg::U32(kk as u32)],
    }
}
