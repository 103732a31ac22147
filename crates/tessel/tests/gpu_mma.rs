//! GPU check of the tensor-core and async-copy statements: each kernel of
//! `tessel_testkit::mma` is legalized, printed as PTX, run on the GPU and on the
//! kernel-IR executor with the same inputs, and the outputs compared. Needs an NVIDIA GPU
//! (sm_80 or newer; written for the H200), so every test is `#[ignore]`d:
//!
//! ```text
//! cargo test -p tessel --test gpu_mma -- --ignored --nocapture --test-threads=1
//! ```
//!
//! What is compared:
//! - data movement and conversions (`ldmatrix`, `cp.async` zero-fill, `cvt.rna.tf32.f32`)
//!   bit for bit;
//! - `mma` results by tolerance, never bits: NVIDIA does not specify the tensor core's
//!   accumulation order or precision, and the executor's `mma` is a model (an fma chain over
//!   k in order). Both results must lie within `(K + 1)·2^-22·(|c| + Σ|a_k·b_k|)` of the
//!   exact f64 value (twice the round-to-nearest bound of K f32 additions, which also covers
//!   truncating accumulation); the maximum |GPU − executor| is printed for the record.

use tessel_cuda::{Arg, Buffer, Gpu, Launch, Module};
use tessel_ir::kernel::{Kernel, LaunchArg, MmaShape, WgmmaInput};
use tessel_ir::DType;
use tessel_ptx::PtxOptions;
use tessel_ref::tensor::SplitMix64;
use tessel_ref::{run_kernel, ExecOptions, Tensor};
use tessel_testkit::host::{
    buf, f32_tensor, f32s, gemm_bf16_case, mma_single_case, poison_f32, raw, wgmma_case, MatmulCase,
};
use tessel_testkit::mma as mk;
use tessel_testkit::wgmma as wk;

fn gpu() -> Gpu {
    Gpu::open(0).expect("an NVIDIA GPU (these tests are --ignored for machines without one)")
}

/// Runs `k` (one launch of its own geometry) on the executor and on the GPU from the same
/// inputs; returns both sets of buffers after the launch.
fn run_both(
    gpu: &Gpu,
    k: &Kernel,
    bufs: &[Tensor],
    args: &[LaunchArg],
) -> (Vec<Tensor>, Vec<Vec<u8>>) {
    run_both_with(gpu, k, bufs, args, &PtxOptions::default())
}

/// [`run_both`] with the PTX headed by `opts` (`sm_90a` for wgmma).
fn run_both_with(
    gpu: &Gpu,
    k: &Kernel,
    bufs: &[Tensor],
    args: &[LaunchArg],
    opts: &PtxOptions,
) -> (Vec<Tensor>, Vec<Vec<u8>>) {
    let mut exec = bufs.to_vec();
    run_kernel(k, &mut exec, args, &ExecOptions::default()).expect("executor");

    let mut legal = k.clone();
    tessel_passes::legalize::run(&mut legal).expect("legalize");
    let ptx = tessel_ptx::write_kernel(&legal, opts).expect("PTX");
    let module = Module::load(gpu, &ptx).unwrap_or_else(|e| panic!("{e}\n{ptx}"));
    let dev: Vec<Buffer> = bufs
        .iter()
        .map(|t| Buffer::from_bytes(gpu, &t.data).expect("upload"))
        .collect();
    let gargs: Vec<Arg> = args
        .iter()
        .map(|a| match a {
            LaunchArg::Buffer(b) => Arg::Buffer(&dev[b.as_u32() as usize]),
            LaunchArg::U32(x) => Arg::U32(*x),
            LaunchArg::TensorMap(_) => panic!("the mma kernels take no tensor map"),
        })
        .collect();
    let launch = Launch {
        grid: k.grid,
        block: k.block,
        shared_bytes: 0,
        programmatic: false,
    };
    module.launch(&k.name, launch, &gargs).expect("launch");
    gpu.synchronize().expect("synchronize");
    let out = dev
        .iter()
        .map(|b| b.download().expect("download"))
        .collect();
    (exec, out)
}

/// Checks `gpu` and `exec` results of `D = A·B + C` (row-major A [m, k], B [k, n], C [m, n]
/// or zeros) against f64 within the tolerance of the module doc; returns max |GPU − exec|.
fn check_matmul(
    what: &str,
    (m, n, kk): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    c: Option<&[f32]>,
    gpu_d: &[f32],
    exec_d: &[f32],
) -> f64 {
    let mut max_diff = 0f64;
    let mut max_err = 0f64;
    for i in 0..m {
        for j in 0..n {
            let c0 = c.map_or(0.0, |c| c[i * n + j]) as f64;
            let (mut exact, mut mag) = (c0, c0.abs());
            for x in 0..kk {
                let p = a[i * kk + x] as f64 * b[x * n + j] as f64;
                exact += p;
                mag += p.abs();
            }
            let tol = (kk as f64 + 1.0) * 2f64.powi(-22) * mag;
            let (g, e) = (gpu_d[i * n + j] as f64, exec_d[i * n + j] as f64);
            assert!(
                (g - exact).abs() <= tol,
                "{what}: GPU D[{i}][{j}] = {g:e}, exact {exact:e}, tolerance {tol:e}"
            );
            assert!((e - exact).abs() <= tol, "{what}: executor D[{i}][{j}]");
            max_diff = max_diff.max((g - e).abs());
            max_err = max_err.max((g - exact).abs());
        }
    }
    eprintln!("{what}: max |GPU - executor| = {max_diff:e}, max |GPU - f64| = {max_err:e}");
    max_diff
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_mma_single_warp() {
    let gpu = gpu();
    for (shape, seed) in [
        (MmaShape::M16N8K16Bf16, 1),
        (MmaShape::M16N8K16F16, 2),
        (MmaShape::M16N8K8Tf32, 3),
    ] {
        let k = mk::mma_single(shape);
        let MatmulCase {
            a: a_vals,
            b: b_vals,
            c,
            bufs,
            args,
        } = mma_single_case(shape, seed);
        let (exec, dev) = run_both(&gpu, &k, &bufs, &args);
        check_matmul(
            &format!("mma.{}", shape.name()),
            (16, 8, shape.k()),
            &a_vals,
            &b_vals,
            Some(&c),
            &f32s(&dev[3]),
            &exec[3].to_f32_vec(),
        );
        if shape == MmaShape::M16N8K8Tf32 {
            assert_eq!(dev[4], exec[4].data, "cvt.rna.tf32.f32 bits differ");
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_ldmatrix_bits() {
    let gpu = gpu();
    let k = mk::ldmatrix_all();
    let mut rng = SplitMix64::new(7);
    let src: Vec<u8> = (0..512).map(|_| rng.next_u64() as u8).collect();
    let n = 32 * mk::LDMATRIX_REGS;
    let bufs = vec![
        raw(DType::I32, 128, src),
        raw(DType::I32, n, vec![0xFF; 4 * n]),
    ];
    let (exec, dev) = run_both(&gpu, &k, &bufs, &[buf(0), buf(1)]);
    assert_eq!(dev[1], exec[1].data, "ldmatrix registers differ");
    eprintln!("ldmatrix x4, x4.trans, x2, x1.trans: GPU = executor, bit for bit");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_cp_async_zero_fill_bits() {
    let gpu = gpu();
    let k = mk::cp_async_tail();
    for n in [0usize, 1, 3, 37, 126, 128] {
        let x: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
        // An empty buffer cannot be allocated: give one element and n = 0.
        let xt = if n == 0 {
            f32_tensor(&[9.0])
        } else {
            f32_tensor(&x)
        };
        let bufs = vec![xt, poison_f32(256)];
        let (exec, dev) = run_both(&gpu, &k, &bufs, &[buf(0), buf(1), LaunchArg::U32(n as u32)]);
        assert_eq!(dev[1], exec[1].data, "cp.async n = {n}");
    }
    eprintln!("cp.async cg/ca with zero-fill: GPU = executor, bit for bit");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_tiled_gemm_bf16() {
    let gpu = gpu();
    let k = mk::gemm_bf16();
    let (m, n) = (mk::GEMM_M as usize, mk::GEMM_N as usize);
    for (kk, seed) in [(32usize, 11u64), (64, 12), (24, 13), (8, 14)] {
        let case = gemm_bf16_case(kk, seed);
        let (exec, dev) = run_both(&gpu, &k, &case.bufs, &case.args);
        check_matmul(
            &format!("gemm_bf16 32x16x{kk}"),
            (m, n, kk),
            &case.a,
            &case.b,
            None,
            &f32s(&dev[2]),
            &exec[2].to_f32_vec(),
        );
    }
}

/// The warpgroup GEMM of `tessel_testkit::wgmma` (bf16, f16, tf32; n 8 to 256; one and two
/// warpgroups; K over several 128-byte slices): the GPU's wgmma reading the 128-byte
/// swizzle through the descriptors the kernel builds, against the executor's model and
/// f64, by the tolerance of the module doc. A wrong descriptor or swizzle reads other
/// elements and fails by far more than the tolerance.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_wgmma_gemm() {
    let gpu = gpu();
    let opts = PtxOptions::with_header((8, 0), "sm_90a");
    for (input, n, wg, kk, seed) in [
        (WgmmaInput::Bf16, 64usize, 1usize, 128usize, 21u64),
        (WgmmaInput::F16, 8, 1, 64, 22),
        (WgmmaInput::Tf32, 32, 1, 96, 23),
        (WgmmaInput::Bf16, 256, 2, 192, 24),
    ] {
        let k = wk::wgmma_gemm(input, n as u32, wg as u32);
        let case = wgmma_case(input, n, wg, kk, seed);
        let (exec, dev) = run_both_with(&gpu, &k, &case.bufs, &case.args, &opts);
        check_matmul(
            &format!("wgmma {} {}x{n}x{kk}", input.name(), 64 * wg),
            (64 * wg, n, kk),
            &case.a,
            &case.b,
            None,
            &f32s(&dev[2]),
            &exec[2].to_f32_vec(),
        );
    }
}
