//! A compiled step run on memory and a stream tessel does not own, against the executor,
//! bit for bit. `#[ignore]`d (it needs an NVIDIA GPU); on the GPU machine:
//!
//! ```text
//! cargo test --release -p tessel-driver --test gpu -- --include-ignored --test-threads=1
//! ```

use cudarc::driver::sys;
use std::collections::BTreeMap;
use std::ffi::c_void;
use tessel_cuda::{ExternalBuffer, ExternalStream, Gpu, Module};
use tessel_driver::device::{bind_external, launch_external, ptx_of, ExternalTensor};
use tessel_driver::{Config, Source, Weights};
use tessel_ref::Tensor;

fn ok(status: sys::CUresult, what: &str) {
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "{what}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_step_on_external_memory_gives_the_executors_bits() {
    let gpu = Gpu::open(0).expect("a GPU");
    let dir = std::env::temp_dir().join(format!("tessel-driver-gpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("scale.tsl");
    let text = "step scale(x: bf16[T, D], w: bf16[D]) -> bf16[T, D] {\n    x * w + bf16(1.0)\n}\n";
    std::fs::write(&path, text).expect("write source");
    let src = Source::load(&path, false).expect("loads");
    let config = Config {
        dims: BTreeMap::from([("T".into(), 37), ("D".into(), 130)]),
        ..Config::default()
    };
    let step = src
        .compile_step("scale", &config, &Weights::none())
        .expect("compiles");
    let p = &step.compiled.program;
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, b))| Tensor::random(p.buffers[*b].ty.clone(), 7 + i as u64))
        .collect();
    let expected = step.run_executor(&inputs).expect("the executor runs it");

    let module = Module::load(&gpu, &ptx_of(p, &step.compiled.ptx).expect("ptx")).expect("JIT");
    // The framework's side: every buffer its own allocation, a stream of its own.
    let mut device: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    let mut stream: sys::CUstream = std::ptr::null_mut();
    let mut ptrs: Vec<sys::CUdeviceptr> = Vec::new();
    // SAFETY: driver calls with out-pointers to locals; everything is freed below, after
    // the stream is synchronized.
    unsafe {
        ok(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
        ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, device), "retain");
        ok(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        ok(
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            ),
            "cuStreamCreate",
        );
        for (_, d) in p.buffers.iter() {
            let mut ptr: sys::CUdeviceptr = 0;
            ok(
                sys::cuMemAlloc_v2(&mut ptr, d.ty.size_bytes().max(1) as usize),
                "alloc",
            );
            ptrs.push(ptr);
        }
        for ((_, b), t) in p.inputs.iter().zip(&inputs) {
            let ptr = ptrs[b.as_u32() as usize];
            ok(
                sys::cuMemcpyHtoD_v2(ptr, t.data.as_ptr().cast::<c_void>(), t.data.len()),
                "upload",
            );
        }
    }
    let tensors: Vec<ExternalTensor> = p
        .buffers
        .iter()
        .map(|(b, d)| {
            let name = p
                .inputs
                .iter()
                .chain(&p.outputs)
                .find(|(_, x)| *x == b)
                .map_or(d.name.clone(), |(n, _)| n.clone());
            ExternalTensor {
                name,
                dtype: d.ty.dtype,
                shape: d.ty.shape.0.clone(),
                // SAFETY: allocated above with this length, freed after the stream is done.
                buffer: unsafe {
                    ExternalBuffer::from_raw(ptrs[b.as_u32() as usize], d.ty.size_bytes())
                }
                .expect("valid"),
            }
        })
        .collect();
    let buffers = bind_external(p, &tensors).expect("binds");
    // SAFETY: `stream` is live until destroyed below.
    let on = unsafe { ExternalStream::from_raw(stream) };
    gpu.set_checked(false);
    launch_external(&gpu, &module, p, &on, &buffers).expect("launches");

    let mut got = Vec::new();
    // SAFETY: as above; the copies follow the synchronized stream.
    unsafe {
        ok(sys::cuStreamSynchronize(stream), "synchronize");
        for (_, b) in &p.outputs {
            let mut data = vec![0u8; p.buffers[*b].ty.size_bytes() as usize];
            let ptr = ptrs[b.as_u32() as usize];
            ok(
                sys::cuMemcpyDtoH_v2(data.as_mut_ptr().cast::<c_void>(), ptr, data.len()),
                "download",
            );
            got.push(data);
        }
        ok(sys::cuStreamDestroy_v2(stream), "cuStreamDestroy");
        for ptr in ptrs {
            ok(sys::cuMemFree_v2(ptr), "cuMemFree");
        }
        ok(sys::cuDevicePrimaryCtxRelease_v2(device), "release");
    }
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(*g == e.data, "output {i} differs from the executor's");
    }
}

/// `tests/programs/layer_small.tsl` and every file it imports, compiled into the test
/// binary and written under a scratch directory, loaded from there: the stripped binary
/// runs on a machine without the repository.
fn layer_small_source(tag: &str) -> Source {
    let dir = std::env::temp_dir().join(format!("tessel-driver-{tag}-{}", std::process::id()));
    for (rel, text) in [
        (
            "tests/programs/layer_small.tsl",
            include_str!("../../../tests/programs/layer_small.tsl"),
        ),
        (
            "examples/lib/qwen.tsl",
            include_str!("../../../examples/lib/qwen.tsl"),
        ),
        (
            "examples/lib/llama.tsl",
            include_str!("../../../examples/lib/llama.tsl"),
        ),
        (
            "python/tessel/qwen.tsl",
            include_str!("../../../python/tessel/qwen.tsl"),
        ),
    ] {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("scratch dir");
        std::fs::write(&path, text).expect("write source");
    }
    let src = Source::load(&dir.join("tests/programs/layer_small.tsl"), false)
        .unwrap_or_else(|e| panic!("the compiled-in sources do not load: {e:?}"));
    std::fs::remove_dir_all(&dir).ok();
    src
}

/// The sources the GPU test below compiles in are all its program imports (no GPU
/// needed: the GPU test runs only on the device, where a missing import showed first).
#[test]
fn the_compiled_in_layer_sources_load_without_the_repository() {
    let src = layer_small_source("host");
    let config = Config {
        dims: BTreeMap::from([("B".into(), 3), ("T".into(), 1), ("S".into(), 700)]),
        ..Config::default()
    };
    src.compile_step("qwen3_decode", &config, &Weights::none())
        .expect("compiles");
}

/// The small Qwen3 decode layer (`inout` KV caches, programmatic launches on sm_90) run
/// checked and then as one CUDA graph from the same start: in `exact` both give the
/// executor's bits; in `fast` (the split-key attention, `*_ranges` and `*_merge`, and the
/// tensor-core GEMVs) the graph gives the checked run's bits. Resetting the buffers puts
/// the caches back before the second run. The sources are compiled in, so the stripped
/// binary runs from any directory.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_decode_layer_run_as_a_graph_gives_the_checked_runs_bits() {
    use tessel_driver::device::{launch_of, run_checked_and_graph, target_of};
    use tessel_passes::Profile;
    let gpu = Gpu::open(0).expect("a GPU");
    let src = layer_small_source("graph");
    for profile in [Profile::Exact, Profile::Fast] {
        let mut config = Config {
            dims: BTreeMap::from([("B".into(), 3), ("T".into(), 1), ("S".into(), 700)]),
            ..Config::default()
        };
        config.options.target = target_of(gpu.properties());
        config.options.profile = profile;
        let step = src
            .compile_step("qwen3_decode", &config, &Weights::none())
            .expect("compiles");
        let p = &step.compiled.program;
        if config.options.target.features.griddepcontrol {
            let programmatic = (0..p.launches.len())
                .filter(|&i| launch_of(&p.kernels[p.launches[i].kernel], i).programmatic)
                .count();
            assert!(
                programmatic > 0,
                "{profile:?}: no launch is programmatic on sm_90"
            );
        }
        if profile == Profile::Fast {
            assert!(
                p.kernels.values().any(|k| k.name.ends_with("_ranges")),
                "no split-key attention kernel in the fast decode layer"
            );
        }
        let inputs: Vec<Tensor> = p
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (_, b))| Tensor::random(p.buffers[*b].ty.clone(), 11 + i as u64))
            .collect();
        let runs = run_checked_and_graph(&gpu, p, &step.compiled.ptx, &inputs).expect("runs");
        for (i, (g, c)) in runs.graph.iter().zip(&runs.checked).enumerate() {
            assert!(
                g.data == c.data,
                "{profile:?}: graph output {i} differs from the checked run's"
            );
        }
        if profile == Profile::Exact {
            let expected = step.run_executor(&inputs).expect("the executor runs it");
            for (i, e) in expected.iter().enumerate() {
                assert!(
                    runs.checked[i].data == e.data,
                    "checked output {i} differs from the executor's"
                );
            }
        }
    }
}
