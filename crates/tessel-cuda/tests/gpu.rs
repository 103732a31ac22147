//! GPU tests of the runtime. They need an NVIDIA GPU and are `#[ignore]`d so that
//! `cargo test --workspace` passes on machines without one. Run them on the GPU machine with
//!
//! ```text
//! cargo test -p tessel-cuda --test gpu -- --ignored --test-threads=1
//! ```
//!
//! Every check compares against a host reference computed here.

use tessel_cuda::{
    measure_copy_bandwidth, Arg, Blas, Buffer, Error, Gpu, KernelCall, Launch, Module,
};

/// `buf[i] += v` for `i < n`; one thread per element. Exercises u64, u32 and f32 params.
const ADD_SCALAR: &str = r#".version 8.0
.target sm_90
.address_size 64

.visible .entry add_scalar(
    .param .u64 p_buf,
    .param .u32 p_n,
    .param .f32 p_v
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p_buf];
    ld.param.u32 %r1, [p_n];
    ld.param.f32 %f3, [p_v];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.rn.f32 %f2, %f1, %f3;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
"#;

/// Thread 0 writes `12345 + p_seed` at byte `p_offset` of dynamic shared memory, reads it
/// back after a barrier and stores it to `out[0]`: needs more than 48 KiB when the offset is.
const FAR_SHARED: &str = r#".version 8.0
.target sm_90
.address_size 64

.extern .shared .align 16 .b8 dyn_smem[];

.visible .entry far_shared(
    .param .u64 p_out,
    .param .u32 p_offset,
    .param .s32 p_seed
)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [p_out];
    ld.param.u32 %r1, [p_offset];
    ld.param.s32 %r5, [p_seed];
    mov.u32 %r2, dyn_smem;
    add.u32 %r3, %r2, %r1;
    add.s32 %r4, %r5, 12345;
    st.shared.u32 [%r3], %r4;
    bar.sync 0;
    ld.shared.u32 %r4, [%r3];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r4;
    ret;
}
"#;

fn open() -> Gpu {
    match Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => panic!("these tests need a GPU: {e}"),
    }
}

fn f32s_to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bytes_to_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// f32 to bf16 bits, round to nearest even (finite inputs).
fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounding = 0x7FFF + ((bits >> 16) & 1);
    ((bits + rounding) >> 16) as u16
}

fn from_bf16(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Row-major `C[M, N] = A[M, K] · B[N, K]^T` in f64.
fn gemm_reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[j * k + p]))
                .sum();
        }
    }
    c
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn properties_are_plausible() {
    let gpu = open();
    let p = gpu.properties();
    eprintln!("{p:?}");
    assert!(!p.name.is_empty());
    assert!(p.compute_capability.0 >= 7, "{p:?}");
    assert!(p.sm_count > 0);
    assert!(p.max_shared_bytes_per_block_optin >= 48 * 1024);
    assert!(p.l2_bytes > 0);
    assert!(p.total_memory_bytes > 0);
    assert!(p.driver_version.0 >= 12, "{p:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn smoke_add_scalar() {
    let gpu = open();
    let module = Module::load(&gpu, ADD_SCALAR).expect("PTX loads");
    let n = 1000usize;
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let buf = Buffer::from_bytes(&gpu, &f32s_to_bytes(&input)).expect("upload");
    module
        .launch(
            "add_scalar",
            Launch::linear(n.div_ceil(256) as u32, 256),
            &[Arg::Buffer(&buf), Arg::U32(n as u32), Arg::F32(1.0)],
        )
        .expect("launch");
    let out = bytes_to_f32s(&buf.download().expect("download"));
    for (i, (&got, &x)) in out.iter().zip(&input).enumerate() {
        assert_eq!(got.to_bits(), (x + 1.0).to_bits(), "element {i}");
    }
    assert!(module.registers("add_scalar").expect("registers") > 0);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn buffer_fill_upload_copy() {
    let gpu = open();
    let mut a = Buffer::alloc(&gpu, 4096).expect("alloc");
    assert_eq!(a.download().expect("download"), vec![0u8; 4096]);
    a.fill(0xFF).expect("fill");
    assert!(a.download().expect("download").iter().all(|&b| b == 0xFF));
    let pattern: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
    a.upload(&pattern).expect("upload");
    let mut b = Buffer::alloc(&gpu, 4096).expect("alloc");
    b.copy_from(&a).expect("copy");
    assert_eq!(b.download().expect("download"), pattern);
    assert!(matches!(
        a.upload(&[1, 2, 3]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn jit_error_carries_the_log() {
    let gpu = open();
    let broken = ADD_SCALAR.replace("add.rn.f32 %f2, %f1, %f3;", "add.rn.f32 %f2, %f9, %f3;");
    match Module::load(&gpu, &broken) {
        Err(Error::Jit { log, .. }) => {
            eprintln!("{log}");
            assert!(log.contains("%f9") || log.contains("line"), "{log}");
        }
        other => panic!("expected Error::Jit, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn bad_launches_are_errors() {
    let gpu = open();
    let module = Module::load(&gpu, ADD_SCALAR).expect("PTX loads");
    let buf = Buffer::alloc(&gpu, 16).expect("alloc");
    let args = [Arg::Buffer(&buf), Arg::U32(4), Arg::F32(1.0)];
    assert!(matches!(
        module.launch("nope", Launch::linear(1, 32), &args),
        Err(Error::KernelNotFound { .. })
    ));
    assert!(matches!(
        module.launch("add_scalar", Launch::linear(0, 32), &args),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        module.launch("add_scalar", Launch::linear(1, 2048), &args),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn dynamic_shared_memory_above_48k() {
    let gpu = open();
    let limit = gpu.properties().max_shared_bytes_per_block_optin;
    let module = Module::load(&gpu, FAR_SHARED).expect("PTX loads");
    let out = Buffer::alloc(&gpu, 4).expect("alloc");
    let shared_bytes = (150 * 1024).min(limit);
    let offset = shared_bytes - 16;
    module
        .launch(
            "far_shared",
            Launch {
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_bytes,
                programmatic: false,
            },
            &[Arg::Buffer(&out), Arg::U32(offset), Arg::I32(-5)],
        )
        .expect("launch with large dynamic shared memory");
    let got = out.download().expect("download");
    assert_eq!(u32::from_le_bytes([got[0], got[1], got[2], got[3]]), 12340);
    let too_much = Launch {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: limit + 1,
        programmatic: false,
    };
    assert!(matches!(
        module.launch(
            "far_shared",
            too_much,
            &[Arg::Buffer(&out), Arg::U32(0), Arg::I32(0)]
        ),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn graph_and_event_timing() {
    let gpu = open();
    let module = Module::load(&gpu, ADD_SCALAR).expect("PTX loads");
    let n = 1 << 20;
    let buf = Buffer::alloc(&gpu, n * 4).expect("alloc");
    let call = KernelCall {
        module: &module,
        kernel: "add_scalar",
        launch: Launch::linear((n / 256) as u32, 256),
        args: vec![Arg::Buffer(&buf), Arg::U32(n as u32), Arg::F32(1.0)],
    };
    let calls = [call.clone(), call];
    let graph = gpu.time_graph(&calls, 5, 20).expect("graph timing");
    let events = gpu.time_events(&calls, 5, 20).expect("event timing");
    eprintln!("graph {graph:?}\nevents {events:?}");
    for t in [graph, events] {
        assert!(t.min_us > 0.0 && t.min_us <= t.median_us && t.median_us <= t.max_us);
    }
    assert!(gpu.is_checked(), "timing must restore checked mode");
    // Eager run + capture-free warm-up + 2 timed paths: every launch added exactly 1.0.
    let out = bytes_to_f32s(&buf.download().expect("download"));
    let launches = 2.0 * (1.0 + 20.0 + 5.0 * 20.0) * 2.0;
    assert!(
        out.iter().all(|&v| v == launches),
        "{} != {launches}",
        out[0]
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn copy_bandwidth_is_plausible() {
    let gpu = open();
    let bw = measure_copy_bandwidth(&gpu, 256 << 20).expect("bandwidth");
    eprintln!("{bw:?}");
    assert!(bw.min_gb_s <= bw.median_gb_s && bw.median_gb_s <= bw.max_gb_s);
    assert!(bw.median_gb_s > 100.0, "{bw:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU and libcublas"]
fn cublas_gemm_f32_matches_reference() {
    let gpu = open();
    let blas = Blas::new(&gpu).expect("cuBLAS");
    let (m, n, k) = (37, 19, 64);
    let a = values(m * k, 1);
    let b = values(n * k, 2);
    let da = Buffer::from_bytes(&gpu, &f32s_to_bytes(&a)).expect("upload");
    let db = Buffer::from_bytes(&gpu, &f32s_to_bytes(&b)).expect("upload");
    let mut dc = Buffer::alloc(&gpu, m * n * 4).expect("alloc");
    let reference = gemm_reference(m, n, k, &a, &b);

    for (tf32, tol) in [(false, 1e-5), (true, 2e-2)] {
        dc.fill(0xFF).expect("poison");
        blas.gemm_f32(m, n, k, &da, &db, &mut dc, tf32)
            .expect("gemm_f32");
        let c = bytes_to_f32s(&dc.download().expect("download"));
        for (i, (&got, &want)) in c.iter().zip(&reference).enumerate() {
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= tol * want.abs().max(1.0),
                "tf32={tf32} C[{}, {}] = {got}, want {want}",
                i / n,
                i % n
            );
        }
    }
    assert!(matches!(
        blas.gemm_f32(m, n, k + 1, &da, &db, &mut dc, false),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU and libcublas"]
fn cublas_gemm_bf16_matches_reference() {
    let gpu = open();
    let blas = Blas::new(&gpu).expect("cuBLAS");
    let (m, n, k) = (33, 70, 128);
    let a: Vec<u16> = values(m * k, 3).into_iter().map(to_bf16).collect();
    let b: Vec<u16> = values(n * k, 4).into_iter().map(to_bf16).collect();
    let bytes = |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let da = Buffer::from_bytes(&gpu, &bytes(&a)).expect("upload");
    let db = Buffer::from_bytes(&gpu, &bytes(&b)).expect("upload");
    let mut dc = Buffer::alloc(&gpu, m * n * 2).expect("alloc");
    dc.fill(0xFF).expect("poison");
    blas.gemm_bf16(m, n, k, &da, &db, &mut dc)
        .expect("gemm_bf16");

    let af: Vec<f32> = a.iter().copied().map(from_bf16).collect();
    let bf: Vec<f32> = b.iter().copied().map(from_bf16).collect();
    let reference = gemm_reference(m, n, k, &af, &bf);
    let out = dc.download().expect("download");
    for (i, c) in out.chunks_exact(2).enumerate() {
        let got = f64::from(from_bf16(u16::from_le_bytes([c[0], c[1]])));
        let want = reference[i];
        // One bf16 rounding of the f32 result: 2^-8 relative, plus f32 accumulation noise.
        assert!(
            (got - want).abs() <= want.abs() * 2f64.powi(-8) + 1e-4,
            "C[{}, {}] = {got}, want {want}",
            i / n,
            i % n
        );
    }

    // The same GEMM timed as a graph: cuBLAS work captures like kernels.
    let t = gpu
        .time_graph_with(3, 10, || blas.gemm_bf16(m, n, k, &da, &db, &mut dc))
        .expect("timing cuBLAS in a graph");
    eprintln!("cuBLAS bf16 {m}x{n}x{k}: {t:?}");
}

/// Programmatic dependent launch: `produce` lets its dependents launch at once, then spins
/// (`p_mask` is 0: the spin's result is masked away, but ptxas cannot know) and writes
/// `x[i] = 3i + 1`; `consume` waits (`griddepcontrol.wait`) and writes `y[i] = 2·x[i]`;
/// `poison` waits, then sets `x[i] = 0xFFFFFFFF` again.
const GRIDDEP: &str = r#".version 8.0
.target sm_90
.address_size 64

.visible .entry produce(
    .param .u64 p_x,
    .param .u32 p_n,
    .param .u32 p_mask
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<5>;

    griddepcontrol.launch_dependents;
    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    ld.param.u32 %r9, [p_mask];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    mov.u32 %r6, %r5;
    mov.u32 %r7, 0;
SPIN:
    mad.lo.u32 %r6, %r6, 1664525, 1013904223;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p2, %r7, 4096;
    @%p2 bra SPIN;
    and.b32 %r6, %r6, %r9;
    mad.lo.u32 %r8, %r5, 3, 1;
    add.u32 %r8, %r8, %r6;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
DONE:
    ret;
}

.visible .entry consume(
    .param .u64 p_x,
    .param .u64 p_y,
    .param .u32 p_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<7>;

    ld.param.u64 %rd1, [p_x];
    ld.param.u64 %rd5, [p_y];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    griddepcontrol.wait;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    shl.b32 %r7, %r6, 1;
    cvta.to.global.u64 %rd6, %rd5;
    add.s64 %rd6, %rd6, %rd3;
    st.global.u32 [%rd6], %r7;
DONE:
    ret;
}

.visible .entry poison(
    .param .u64 p_x,
    .param .u32 p_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    griddepcontrol.wait;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], 0xFFFFFFFF;
DONE:
    ret;
}
"#;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn programmatic_launches_wait_for_the_grid_ahead() {
    let gpu = open();
    let module = Module::load(&gpu, GRIDDEP).expect("load");
    let n: u32 = 1 << 20;
    let mut x = Buffer::alloc(&gpu, n as usize * 4).expect("alloc");
    let mut y = Buffer::alloc(&gpu, n as usize * 4).expect("alloc");
    x.fill(0xFF).expect("fill");
    y.fill(0).expect("fill");
    let grid = n.div_ceil(256);
    let dependent = Launch {
        programmatic: true,
        ..Launch::linear(grid, 256)
    };
    let call = |kernel, launch, args| KernelCall {
        module: &module,
        kernel,
        launch,
        args,
    };
    let calls = |y| {
        [
            call(
                "produce",
                Launch::linear(grid, 256),
                vec![Arg::Buffer(&x), Arg::U32(n), Arg::U32(0)],
            ),
            call(
                "consume",
                dependent,
                vec![Arg::Buffer(&x), Arg::Buffer(y), Arg::U32(n)],
            ),
            call("poison", dependent, vec![Arg::Buffer(&x), Arg::U32(n)]),
        ]
    };
    let check = |y: &Buffer, x: &Buffer, what: &str| {
        let got = y.download().expect("download");
        let bad = (0..n as usize)
            .filter(|&i| {
                let v = u32::from_le_bytes(got[4 * i..4 * i + 4].try_into().expect("4 bytes"));
                v != 2 * (3 * i as u32 + 1)
            })
            .count();
        assert_eq!(bad, 0, "{what}: {bad} of {n} elements of y wrong");
        // The poison kernel ran after the consumer had read x.
        let xs = x.download().expect("download");
        assert!(xs.iter().all(|&b| b == 0xFF), "{what}: x not poisoned");
    };
    // Eagerly, one launch after another.
    for c in &calls(&y) {
        c.module
            .launch(c.kernel, c.launch, &c.args)
            .expect("launch");
    }
    gpu.synchronize().expect("synchronize");
    check(&y, &x, "eager");
    // Captured into a graph (programmatic edges) and replayed, into a fresh y.
    let mut y = Buffer::alloc(&gpu, n as usize * 4).expect("alloc");
    y.fill(0).expect("fill");
    gpu.time_graph(&calls(&y), 3, 4).expect("graph");
    gpu.synchronize().expect("synchronize");
    check(&y, &x, "graph");
}
