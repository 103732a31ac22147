//! The warpgroup GEMM tile (`TileConfig::Mma` with `wgmma`) on the kernel-IR executor:
//! every program below is compiled twice in `fast` for a one-SM H200 (so that the large
//! tile applies at test sizes) — once with the target's features, where the projections
//! take the wgmma tile, and once without wgmma, where they take `mma.sync` tiles — and the
//! two must give the same bits. The executor models both instructions as one fma chain
//! over k in order from 0, so any difference is a wrong element read: a descriptor, a
//! swizzle, a stage, a K tail, an M or N edge, an epilogue's rows. The executor also
//! checks the kernel's async-proxy fences and waits as it runs (`exec/cta/wgmma.rs`).
//! Shapes have tails everywhere: M, N and K not multiples of the tile (128, 256, 64).
//! The GPU runs the same tile under `tessel check` (scripts/gpu-wgmma.sh).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::kernel::{Program, Stmt};
use tessel_passes::target::{Features, Target};
use tessel_passes::{check, compile, Options, Profile};
use tessel_ref::{run_program, Tensor};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Step `step` of `file` at `dims`, compiled in `fast` for `target`.
fn program(file: &str, step: &str, dims: &[(&str, u64)], target: &Target) -> Program {
    let module = tessel_syntax::load::load(&root().join(file))
        .unwrap_or_else(|_| panic!("{file}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let g = check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message));
    let opts = Options {
        verify: true,
        profile: Profile::Fast,
        target: target.clone(),
        ..Default::default()
    };
    compile(&g, &opts)
        .unwrap_or_else(|e| panic!("{step}: {e}"))
        .program
}

fn wgmma_kernels(p: &Program) -> usize {
    fn has(body: &[Stmt]) -> bool {
        body.iter().any(|s| match s {
            Stmt::Wgmma { .. } => true,
            Stmt::For { body, .. } => has(body),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => has(then_body) || has(else_body),
            _ => false,
        })
    }
    p.kernels.values().filter(|k| has(&k.body)).count()
}

/// Compiles `step` with and without wgmma, checks that `want` kernels take it, and
/// compares every output bit for bit on seeded inputs.
fn same_bits(file: &str, step: &str, dims: &[(&str, u64)], want: usize) {
    let one_sm = Target {
        sm_count: 1,
        ..Target::h200()
    };
    let without = Target {
        features: Features {
            wgmma: false,
            ..one_sm.features
        },
        ..one_sm.clone()
    };
    let (w, s) = (
        program(file, step, dims, &one_sm),
        program(file, step, dims, &without),
    );
    assert_eq!(wgmma_kernels(&w), want, "{step} {dims:?}: wgmma kernels");
    assert_eq!(wgmma_kernels(&s), 0, "{step}: no wgmma without the feature");
    let ins: Vec<Tensor> = w
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, b))| Tensor::random(w.buffers[*b].ty.clone(), 100 + i as u64))
        .collect();
    let a = run_program(&w, &ins).unwrap_or_else(|e| panic!("{step} wgmma: {e}"));
    let b = run_program(&s, &ins).unwrap_or_else(|e| panic!("{step} mma.sync: {e}"));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x.data == y.data, "{step} {dims:?}: output {i} differs");
    }
}

#[test]
fn wgmma_projection_with_tails_matches_mma_sync_bits() {
    // M, N, K past whole tiles; N a multiple of 4 (the staged epilogue).
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 200), ("K", 200), ("N", 300)],
        1,
    );
    // K one 16-element step past a slice, N odd: the staged epilogue still writes it.
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 129), ("K", 80), ("N", 257)],
        1,
    );
}

#[test]
fn wgmma_fused_epilogues_match_mma_sync_bits() {
    // Bias, silu, residual and the cast in the epilogue.
    same_bits(
        "tests/programs/matmul.tsl",
        "linear_epilogue",
        &[("M", 130), ("K", 136), ("N", 264)],
        1,
    );
    // The QK-norm + RoPE row epilogue over whole heads of 128.
    same_bits(
        "tests/programs/row_epilogue.tsl",
        "norm_rope",
        &[("T", 70), ("K", 64), ("N", 512), ("H", 4), ("D", 128)],
        1,
    );
}

#[test]
fn a_qwen3_layer_with_wgmma_projections_matches_mma_sync_bits() {
    // At hidden 64 the projections whose N exceeds 64 take the wgmma tile: q (N = 512,
    // with the QK-norm + RoPE row epilogue), k (256, the same), v (256), gate and up (96);
    // o and down (N = 64) stay on the skinny-N mma.sync tile.
    same_bits("tests/programs/layer_small.tsl", "qwen3", &[("T", 130)], 5);
}
