//! GPU test of launching on memory and a stream tessel does not own, as a framework hands
//! them over: the test plays PyTorch, allocating with `cuMemAlloc` and creating a stream in
//! the device's primary context, and frees both itself. `#[ignore]`d (it needs an NVIDIA
//! GPU); on the GPU machine:
//!
//! ```text
//! cargo test -p tessel-cuda --test external -- --ignored --test-threads=1
//! ```

use cudarc::driver::sys;
use std::ffi::c_void;
use tessel_cuda::{
    check_buffers, Arg, BufferRequirement, ExternalBuffer, ExternalError, ExternalStream, Gpu,
    Launch, Module,
};

/// `buf[i] += v` for `i < n`; one thread per element (as tests/gpu.rs's `add_scalar`).
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

fn ok(status: sys::CUresult, what: &str) {
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "{what}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_kernel_runs_on_memory_and_a_stream_it_does_not_own() {
    let gpu = Gpu::open(0).expect("a GPU");
    let module = Module::load(&gpu, ADD_SCALAR).expect("PTX loads");
    let n = 1000usize;
    let bytes = (n * 4) as u64;
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();

    // The framework's side: the primary context current, its own memory and stream.
    let mut device: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    let mut ptr: sys::CUdeviceptr = 0;
    let mut stream: sys::CUstream = std::ptr::null_mut();
    // SAFETY: plain driver calls with out-pointers to locals; the memory and the stream
    // are freed below, after the stream is synchronized.
    unsafe {
        ok(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
        ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, device), "retain");
        ok(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        ok(sys::cuMemAlloc_v2(&mut ptr, bytes as usize), "cuMemAlloc");
        ok(
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            ),
            "cuStreamCreate",
        );
        ok(
            sys::cuMemcpyHtoD_v2(ptr, input.as_ptr().cast::<c_void>(), bytes as usize),
            "upload",
        );
    }

    // SAFETY: `ptr` is `bytes` of live memory of the primary context, freed only after the
    // stream is synchronized; `stream` is live until destroyed below.
    let buffer = unsafe { ExternalBuffer::from_raw(ptr, bytes) }.expect("a valid buffer");
    let on = unsafe { ExternalStream::from_raw(stream) };
    let need = [BufferRequirement {
        name: "buf".into(),
        bytes,
        align: 16,
    }];
    check_buffers(&need, &[buffer]).expect("cuMemAlloc memory is 256-byte aligned");
    // One element short is refused before anything reaches the device.
    let short = unsafe { ExternalBuffer::from_raw(ptr, bytes - 4) }.expect("valid");
    assert!(matches!(
        check_buffers(&need, &[short]),
        Err(ExternalError::TooSmall { .. })
    ));

    gpu.set_checked(false);
    module
        .launch_on(
            &on,
            "add_scalar",
            Launch::linear(n.div_ceil(256) as u32, 256),
            &[Arg::External(buffer), Arg::U32(n as u32), Arg::F32(1.0)],
        )
        .expect("launch");

    let mut out = vec![0f32; n];
    // SAFETY: as above; the copy follows the stream's work once it is synchronized.
    unsafe {
        ok(sys::cuStreamSynchronize(stream), "synchronize");
        ok(
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast::<c_void>(), ptr, bytes as usize),
            "download",
        );
        ok(sys::cuStreamDestroy_v2(stream), "cuStreamDestroy");
        ok(sys::cuMemFree_v2(ptr), "cuMemFree");
        ok(sys::cuDevicePrimaryCtxRelease_v2(device), "release");
    }
    for (i, (&got, &x)) in out.iter().zip(&input).enumerate() {
        assert_eq!(got.to_bits(), (x + 1.0).to_bits(), "element {i}");
    }
}
