//! The warpgroup GEMM tile (`TileConfig::Mma` with `wgmma`) on the kernel-IR executor:
//! every program below is compiled twice in `fast` for an H200 of 1 or 5 SMs (so that the
//! warpgroup tiles, 128 × 256 and 128 × 128, apply at test sizes) — once with the target's features, where the projections
//! take the wgmma tile, and once without wgmma, where they take `mma.sync` tiles — and the
//! two must give the same bits. The executor models both instructions as one fma chain
//! over k in order from 0, so any difference is a wrong element read: a descriptor, a
//! swizzle, a stage, a K tail, an M or N edge, an epilogue's rows. The executor also
//! checks the kernel's async-proxy fences and waits as it runs (`exec/cta/wgmma.rs`).
//! Shapes have tails everywhere: M, N and K not multiples of the tile (128, 256, 64).
//! The GPU runs the same tile under `tessel check` (scripts/gpu-wgmma.sh).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::kernel::{Program, Stmt};
use tessel_passes::target::{Features, Target};
use tessel_passes::{check, compile, Options, Profile};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Step `step` of `file` at `dims`, compiled in `fast` for `target`.
fn program(file: &str, step: &str, dims: &[(&str, u64)], target: &Target) -> Program {
    program_in(file, step, dims, target, Profile::Fast)
}

/// [`program`] in `profile`.
fn program_in(
    file: &str,
    step: &str,
    dims: &[(&str, u64)],
    target: &Target,
    profile: Profile,
) -> Program {
    let module = tessel_syntax::load::load(&root().join(file))
        .unwrap_or_else(|_| panic!("{file}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let g = check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message));
    let opts = Options {
        verify: true,
        profile,
        target: target.clone(),
        // The `wgmma: 1` tile's tests: the ping-pong tile has its own (wgmma_pingpong.rs).
        wgmma_pingpong: false,
        merge_launches: true,
        dependent_launch: true,
        ..Default::default()
    };
    compile(&g, &opts)
        .unwrap_or_else(|e| panic!("{step}: {e}"))
        .program
}

/// The wgmma widths (`n`) of each kernel that has a wgmma, in kernel order.
fn wgmma_widths(p: &Program) -> Vec<u32> {
    fn width(body: &[Stmt]) -> Option<u32> {
        body.iter().find_map(|s| match s {
            Stmt::Wgmma { shape, .. } => Some(shape.n),
            Stmt::For { body, .. } => width(body),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => width(then_body).or_else(|| width(else_body)),
            _ => None,
        })
    }
    p.kernels.values().filter_map(|k| width(&k.body)).collect()
}

/// Compiles `step` with and without wgmma, checks that the kernels taking it have the
/// wgmma widths `want` (128 × 256 tiles use n = 256, 128 × 128 tiles n = 128), and compares
/// every output bit for bit on seeded inputs.
fn same_bits(file: &str, step: &str, dims: &[(&str, u64)], want: &[u32]) {
    same_bits_on(file, step, dims, 1, want)
}

/// [`same_bits`] for a target of `sms` SMs: 1 gives every such GEMM the 128 × 256 tile;
/// more SMs than a GEMM has 128 × 256 tiles (but at most 4/3 of its 128 × 128 tiles) give
/// it the 128 × 128 one.
fn same_bits_on(file: &str, step: &str, dims: &[(&str, u64)], sms: u32, want: &[u32]) {
    let one_sm = Target {
        sm_count: sms,
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
    assert_eq!(wgmma_widths(&w), want, "{step} {dims:?}: wgmma kernels");
    assert!(
        wgmma_widths(&s).is_empty(),
        "{step}: no wgmma without the feature"
    );
    common::assert_same_outputs(&w, &s, &format!("{step} {dims:?}, wgmma vs mma.sync"));
}

#[test]
fn wgmma_projection_with_tails_matches_mma_sync_bits() {
    // M, N, K past whole tiles; N a multiple of 4 (the staged epilogue).
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 200), ("K", 200), ("N", 300)],
        &[256],
    );
    // 4 tiles of 128 × 256 on 5 SMs: the 128 × 128 tile (6 of them) instead.
    same_bits_on(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 200), ("K", 200), ("N", 300)],
        5,
        &[128],
    );
    // K one 16-element step past a slice, N odd: the staged epilogue still writes it.
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 129), ("K", 80), ("N", 257)],
        &[256],
    );
    same_bits_on(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 129), ("K", 80), ("N", 257)],
        5,
        &[128],
    );
}

#[test]
fn wgmma_fused_epilogues_match_mma_sync_bits() {
    // Bias, silu, residual and the cast in the epilogue.
    same_bits(
        "tests/programs/matmul.tsl",
        "linear_epilogue",
        &[("M", 130), ("K", 136), ("N", 264)],
        &[256],
    );
    same_bits_on(
        "tests/programs/matmul.tsl",
        "linear_epilogue",
        &[("M", 130), ("K", 136), ("N", 264)],
        5,
        &[128],
    );
    // The QK-norm + RoPE row epilogue over whole heads of 128.
    same_bits(
        "tests/programs/row_epilogue.tsl",
        "norm_rope",
        &[("T", 70), ("K", 64), ("N", 512), ("H", 4), ("D", 128)],
        &[256],
    );
}

#[test]
fn a_qwen3_layer_with_wgmma_projections_matches_mma_sync_bits() {
    // At hidden 64 the projections whose N exceeds 64 take a wgmma tile: q (N = 512,
    // with the QK-norm + RoPE row epilogue), k (256, the same), v (256), gate and up (96,
    // at most 128: the 128 × 128 tile); o and down (N = 64) stay on the skinny-N mma.sync
    // tile. On 5 SMs q, k and v have fewer 128 × 256 tiles than SMs (4, 2, 2) and take
    // 128 × 128 (8, 4, 4 tiles); gate and up (2 tiles) fall back to mma.sync. The fused
    // attention (head dim 128) takes the warpgroup attention tile, the default: its first
    // wgmma is S's m64n64k16 (64 keys a block), between v and gate.
    same_bits(
        "tests/programs/layer_small.tsl",
        "qwen3",
        &[("T", 130)],
        &[256, 256, 256, 64, 128, 128],
    );
    same_bits_on(
        "tests/programs/layer_small.tsl",
        "qwen3",
        &[("T", 130)],
        5,
        &[128, 128, 128, 64],
    );
}

/// `invariant` runs wgmma on sm_90a for every M of a GEMM it serves (16-bit `x @ wᵀ`,
/// K > 32, no split-K), the tile following M: one warpgroup of 64 rows for M ≤ 64 (decode),
/// 128 × 128 or 128 × 256 above. Each must give the bits of the `mma.sync` program (the
/// executor models both as one fma chain over k), at M = 1, 3, 64, 65 and 200, with K and
/// N tails, a skinny N (n = 16 and 64) and a fused epilogue. (That every M takes the same
/// instruction is `tessel-passes/tests/schedule.rs`'s
/// `invariant_orders_depend_on_n_and_k_alone`; on the GPU, `tessel invariance`.)
#[test]
fn invariant_wgmma_matches_mma_sync_bits_at_every_m() {
    let h200 = Target {
        sm_count: 5,
        ..Target::h200()
    };
    let without = Target {
        features: Features {
            wgmma: false,
            ..h200.features
        },
        ..h200.clone()
    };
    // (step, dims, the wgmma widths of its kernels)
    type Case = (&'static str, &'static [(&'static str, u64)], &'static [u32]);
    let cases: [Case; 9] = [
        ("linear", &[("M", 1), ("K", 200), ("N", 300)], &[128]),
        ("linear", &[("M", 3), ("K", 80), ("N", 257)], &[128]),
        ("linear", &[("M", 64), ("K", 136), ("N", 130)], &[128]),
        ("linear", &[("M", 65), ("K", 136), ("N", 130)], &[128]),
        ("linear", &[("M", 200), ("K", 200), ("N", 600)], &[256]),
        ("linear", &[("M", 5), ("K", 72), ("N", 13)], &[16]),
        ("linear", &[("M", 70), ("K", 264), ("N", 64)], &[64]),
        (
            "linear_epilogue",
            &[("M", 2), ("K", 136), ("N", 264)],
            &[128],
        ),
        (
            "linear_epilogue",
            &[("M", 130), ("K", 136), ("N", 264)],
            &[128],
        ),
    ];
    for (step, dims, want) in cases {
        let file = "tests/programs/matmul.tsl";
        let w = program_in(file, step, dims, &h200, Profile::Invariant);
        let s = program_in(file, step, dims, &without, Profile::Invariant);
        assert_eq!(wgmma_widths(&w), want, "{step} {dims:?}: wgmma kernels");
        assert!(wgmma_widths(&s).is_empty(), "{step}: no wgmma without it");
        common::assert_same_outputs(
            &w,
            &s,
            &format!("{step} {dims:?}, invariant wgmma vs mma.sync"),
        );
    }
}
