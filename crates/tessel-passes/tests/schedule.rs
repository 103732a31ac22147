//! The schedule pass reads every machine fact from the `Target` and writes its decisions
//! into the TileConfig (issue 8 items 2 and 3): change a fact, the decision follows.

use std::collections::BTreeMap;
use tessel_ir::graph::{MmaEngine, MmaEpilogue, Schedule, TileConfig};
use tessel_ir::kernel::MmaShape;
use tessel_passes::{check, decompose, fuse, schedule, Features, Profile, PtxHeader, Target};

/// The schedule of the one matmul of `x @ w^T` at (M, N, K) in `dt`.
fn matmul_schedule(dt: &str, mnk: (u64, u64, u64), t: &Target, p: Profile) -> Schedule {
    matmul_schedule_split(dt, mnk, t, p, true)
}

/// The same, with split-K allowed or not (off when compiling tensor-parallel ranks).
fn matmul_schedule_split(
    dt: &str,
    (m, n, k): (u64, u64, u64),
    t: &Target,
    p: Profile,
    split: bool,
) -> Schedule {
    let src = format!("step s(x: {dt}[M, K], w: {dt}[N, K]) -> {dt}[M, N] {{ x @ w^T }}");
    first_schedule(&src, &[("M", m), ("N", n), ("K", k)], t, p, split)
}

/// The schedule of the first group of step `s` of `src` at `dims`.
fn first_schedule(
    src: &str,
    dims: &[(&str, u64)],
    t: &Target,
    p: Profile,
    split: bool,
) -> Schedule {
    let module = tessel_syntax::parse(src).expect("parses");
    let dims: BTreeMap<String, u64> = dims.iter().map(|&(a, b)| (a.to_string(), b)).collect();
    let g = decompose::run(&check::run(&module, "s", &dims).expect("checks"));
    let f = fuse::run(&g, t, p);
    let s = schedule::run(&g, &f, t, p, (split, false, false, None));
    let (grp, _) = f.groups.iter().next().expect("one group");
    s[grp].clone().expect("scheduled")
}

#[test]
fn the_tensor_core_tile_carries_its_decisions() {
    let s = matmul_schedule("bf16", (4096, 7168, 5120), &Target::h200(), Profile::Fast);
    let TileConfig::Mma {
        bm,
        bn,
        shape,
        epilogue,
        min_ctas_per_sm,
        ..
    } = s.tile
    else {
        panic!("{s:?}")
    };
    assert_eq!((bm, bn), (128, 256), "{}", s.why);
    assert_eq!(shape, MmaShape::M16N8K16Bf16);
    assert_eq!(epilogue, MmaEpilogue::Staged);
    // Its staged tile, 128 × 264 f32 = 132 KiB, does not fit twice in 227 KiB: no hint.
    assert_eq!(min_ctas_per_sm, 0);
    // The skinny-M tile's 96 KiB ring does: two CTAs per SM.
    let s = matmul_schedule("bf16", (64, 7168, 5120), &Target::h200(), Profile::Fast);
    assert!(
        matches!(
            s.tile,
            TileConfig::Mma {
                min_ctas_per_sm: 2,
                ..
            }
        ),
        "{s:?}"
    );
    // N odd: no vector stores; f32 on TF32 tensor cores: no occupancy hint.
    let s = matmul_schedule("f32", (300, 301, 200), &Target::h200(), Profile::Fast);
    let TileConfig::Mma {
        shape,
        epilogue,
        min_ctas_per_sm,
        ..
    } = s.tile
    else {
        panic!("{s:?}")
    };
    assert_eq!(shape, MmaShape::M16N8K8Tf32);
    assert_eq!(epilogue, MmaEpilogue::Single);
    assert_eq!(min_ctas_per_sm, 0);
}

#[test]
fn a_target_without_the_shared_memory_gets_the_simt_tile_and_says_why() {
    let small = Target {
        max_shared_per_cta: 16 * 1024,
        ..Target::h200()
    };
    let s = matmul_schedule("bf16", (4096, 7168, 5120), &small, Profile::Fast);
    assert!(matches!(s.tile, TileConfig::Simt { .. }), "{s:?}");
    assert!(
        s.why.contains("tensor cores: no tile fits the 16384 bytes"),
        "{}",
        s.why
    );
}

#[test]
fn sm_count_and_resident_warps_come_from_the_target() {
    // Split-K gives every SM work when the tiles do not: 1 tile on 132 SMs splits, on 1 SM
    // it does not.
    let split = |t: &Target| {
        matmul_schedule("f32", (64, 64, 4096), t, Profile::Exact)
            .tile
            .split_k()
    };
    assert!(split(&Target::h200()) > 1);
    let one_sm = Target {
        sm_count: 1,
        ..Target::h200()
    };
    assert_eq!(split(&one_sm), 1);
    // The tensor-core GEMV asks for every CTA resident: ⌈2176 CTAs / SMs⌉ per SM.
    let gemv_ctas =
        |t: &Target| match matmul_schedule("bf16", (8, 17408, 5120), t, Profile::Fast).tile {
            TileConfig::GemvMma {
                min_ctas_per_sm, ..
            } => min_ctas_per_sm,
            other => panic!("{other:?}"),
        };
    assert_eq!(gemv_ctas(&Target::h200()), 17);
    let twice = Target {
        sm_count: 264,
        ..Target::h200()
    };
    assert_eq!(gemv_ctas(&twice), 9);
}

#[test]
fn presets_name_the_machines_and_their_ptx_target() {
    for name in Target::PRESETS {
        let t = Target::preset(name).expect("a preset");
        assert_eq!(t.ptx_target(), "sm_90a");
        assert_eq!(t.features, Features::SM_90A, "{name}");
        assert_eq!(
            t.ptx_header(),
            PtxHeader {
                version: (8, 0),
                target: "sm_90a".into()
            }
        );
        assert!(t.peaks.is_some(), "{name} has datasheet peaks");
    }
    assert!(Target::preset("a100").is_none());
}

/// The sm_90a features are facts of the target: all of them at compute capability 9.0,
/// TMA and clusters after it, none before; the PTX target carries the `a` only where an
/// architecture-specific one (wgmma, setmaxnreg) is on.
#[test]
fn features_follow_the_compute_capability_and_set_the_ptx_target() {
    let at = |cc: (u32, u32)| Target {
        name: format!("cc {}.{}", cc.0, cc.1),
        compute_capability: cc,
        features: Features::of_compute_capability(cc),
        ..Target::h200()
    };
    let sm80 = at((8, 0));
    assert_eq!(sm80.features, Features::NONE);
    assert_eq!(sm80.ptx_target(), "sm_80");
    assert!(sm80.features.names().is_empty());
    let h = at((9, 0));
    assert_eq!(h.features, Features::SM_90A);
    assert_eq!(h.ptx_target(), "sm_90a");
    assert_eq!(
        h.features.names(),
        ["wgmma", "TMA", "setmaxnreg", "clusters", "griddepcontrol"]
    );
    let later = at((10, 0));
    assert!(later.features.tma && later.features.clusters && later.features.griddepcontrol);
    assert!(!sm80.features.griddepcontrol);
    assert!(!later.features.wgmma && !later.features.setmaxnreg);
    assert_eq!(later.ptx_target(), "sm_100");
    // A Hopper machine described without its `a` features gets the portable target.
    let plain = Target {
        features: Features {
            wgmma: false,
            setmaxnreg: false,
            ..Features::SM_90A
        },
        ..Target::h200()
    };
    assert_eq!(plain.ptx_target(), "sm_90");
    assert_eq!(plain.ptx_header().version, (8, 0));

    let wgmma = Features {
        wgmma: true,
        ..Features::NONE
    };
    assert!(Features::SM_90A.covers(wgmma) && Features::SM_90A.covers(Features::NONE));
    assert!(!later.features.covers(wgmma) && !sm80.features.covers(wgmma));
    assert!(schedule::offers(&h, Features::SM_90A).is_ok());
    assert_eq!(
        schedule::offers(&sm80, wgmma).unwrap_err(),
        "wgmma, which the target (cc 8.0, sm_80) lacks"
    );
    assert_eq!(
        schedule::offers(&later, Features::SM_90A).unwrap_err(),
        "wgmma, setmaxnreg, which the target (cc 10.0, sm_100) lacks"
    );
}

/// A target without the sm_90a features gets the `mma.sync` schedules, which need none of
/// them; the H200 gets the same except where the wgmma tile applies (the large bf16 GEMM,
/// in `fast` and `invariant`), which the sm_80 target leaves out for lack of wgmma.
#[test]
fn a_target_without_the_features_keeps_the_mma_sync_tiles() {
    let sm80 = Target {
        name: "an sm_80 machine".into(),
        compute_capability: (8, 0),
        features: Features::NONE,
        ..Target::h200()
    };
    for (dt, mnk) in [
        ("bf16", (4096, 5120, 5120)),
        ("bf16", (8192, 16, 4096)),
        ("f32", (300, 200, 100)),
    ] {
        for p in Profile::ALL {
            let (a, b) = (
                matmul_schedule(dt, mnk, &sm80, p),
                matmul_schedule(dt, mnk, &Target::h200(), p),
            );
            let wgmma =
                |t: &TileConfig| matches!(t, TileConfig::Mma { engine, .. } if engine.is_wgmma());
            assert!(!wgmma(&a.tile), "{dt} {mnk:?} {p:?}: {}", a.why);
            if wgmma(&b.tile) {
                assert!(
                    (dt, mnk) == ("bf16", (4096, 5120, 5120)) && p != Profile::Exact,
                    "{dt} {mnk:?} {p:?}: {}",
                    b.why
                );
                let TileConfig::Mma {
                    bm,
                    bn,
                    warps_m,
                    warps_n,
                    stages,
                    split_k,
                    ..
                } = b.tile
                else {
                    unreachable!()
                };
                assert_eq!(
                    (bm, bn, warps_m, warps_n, stages, split_k),
                    (128, 256, 8, 1, 4, 1)
                );
                assert!(b.why.contains("wgmma m64n256k16"), "{}", b.why);
                assert!(matches!(a.tile, TileConfig::Mma { .. }), "{}", a.why);
            } else {
                assert_eq!(a.tile, b.tile, "{dt} {mnk:?} {p:?}");
                assert_eq!(a.why, b.why, "{dt} {mnk:?} {p:?}");
            }
        }
    }
}

/// A GEMM whose tiles leave SMs idle cuts K into ranges in `exact` and `fast` — unless the
/// step simulates tensor-parallel ranks, where a rank's narrower GEMM must sum in the
/// association of the whole (tessel-passes `tp`): then never, in any profile.
#[test]
fn split_k_is_off_for_tensor_parallel_ranks() {
    let split = |tile: &TileConfig| match *tile {
        TileConfig::Mma { split_k, .. } | TileConfig::Simt { split_k, .. } => split_k,
        _ => 1,
    };
    let t = Target::h200();
    for p in [Profile::Exact, Profile::Fast] {
        let s = matmul_schedule_split("bf16", (64, 256, 8192), &t, p, true);
        assert!(split(&s.tile) > 1, "{p:?}: {}", s.why);
        let s = matmul_schedule_split("bf16", (64, 256, 8192), &t, p, false);
        assert_eq!(split(&s.tile), 1, "{p:?}: {}", s.why);
    }
}

/// The warp-specialised TMA tile (`wgmma: tma`) is taken only when asked
/// (`Options::wgmma_tma`), in place of the warpgroup tile with the same sizes, and only
/// where TMA can load the operands: a `[K, N]` right operand too (read MN-major), where
/// its rows of N are whole 16-byte chunks.
#[test]
fn the_tma_tile_is_taken_only_when_asked() {
    let sched = |rhs: &str, rhs_t: &str, k: u64, tma: bool| -> Schedule {
        let src = format!("step s(x: bf16[M, K], w: bf16{rhs}) -> bf16[M, N] {{ x @ {rhs_t} }}");
        let module = tessel_syntax::parse(&src).expect("parses");
        let dims: BTreeMap<String, u64> = [("M", 4096), ("N", 5120), ("K", k)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b))
            .collect();
        let g = decompose::run(&check::run(&module, "s", &dims).expect("checks"));
        let t = Target::h200();
        let f = fuse::run(&g, &t, Profile::Fast);
        let s = schedule::run(&g, &f, &t, Profile::Fast, (true, tma, false, None));
        let (grp, _) = f.groups.iter().next().expect("one group");
        s[grp].clone().expect("scheduled")
    };
    let engine = |s: &Schedule| match s.tile {
        TileConfig::Mma { engine, .. } => engine,
        _ => panic!("{s:?}"),
    };
    let (off, on) = (
        sched("[N, K]", "w^T", 5120, false),
        sched("[N, K]", "w^T", 5120, true),
    );
    assert_eq!(engine(&off), MmaEngine::Wgmma, "{}", off.why);
    assert_eq!(engine(&on), MmaEngine::WgmmaTma { tail: 0 }, "{}", on.why);
    assert!(on.why.contains("warp-specialised"), "{}", on.why);
    // The same sizes, stages and epilogue: only the engine differs, and the one CTA an SM
    // that makes ptxas honour setmaxnreg.
    let mut same = on.tile.clone();
    if let TileConfig::Mma {
        engine,
        min_ctas_per_sm,
        ..
    } = &mut same
    {
        assert_eq!(*min_ctas_per_sm, 1);
        *engine = MmaEngine::Wgmma;
        *min_ctas_per_sm = 0;
    }
    assert_eq!(same, off.tile);
    // Rows of 5121 elements are no tensor map's (its row stride is whole 16 bytes): the
    // warpgroup tile stays.
    let odd = sched("[N, K]", "w^T", 5121, true);
    assert_eq!(engine(&odd), MmaEngine::Wgmma, "{}", odd.why);
    // w stored [K, N]: the same tile, B read MN-major.
    let plain = sched("[K, N]", "w", 5120, true);
    assert_eq!(plain.tile, on.tile, "{}", plain.why);
    assert!(plain.why.contains("B MN-major"), "{}", plain.why);
}

/// An `x @ w` with `w` stored `[K, N]` (an MN-major B) takes the warpgroup tiles in `fast`
/// for 16-bit operands — the ping-pong tile where TMA loads `w`'s rows of N (whole 16-byte
/// chunks), else the `wgmma: 1` tile — and keeps `mma.sync` for f32 (wgmma transposes only
/// 16-bit B) and in `invariant` (whose warpgroup tiles read both operands along K).
#[test]
fn an_mn_major_b_takes_the_warpgroup_tiles_for_16_bit_operands() {
    let sched = |dt: &str, (m, n, k): (u64, u64, u64), profile: Profile| -> Schedule {
        let src = format!("step s(x: {dt}[M, K], w: {dt}[K, N]) -> {dt}[M, N] {{ x @ w }}");
        let module = tessel_syntax::parse(&src).expect("parses");
        let dims: BTreeMap<String, u64> = [("M", m), ("N", n), ("K", k)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b))
            .collect();
        let g = decompose::run(&check::run(&module, "s", &dims).expect("checks"));
        let t = Target::h100();
        let f = fuse::run(&g, &t, profile);
        let s = schedule::run(&g, &f, &t, profile, (true, false, true, None));
        let (grp, _) = f.groups.iter().next().expect("one group");
        s[grp].clone().expect("scheduled")
    };
    let engine = |s: &Schedule| match s.tile {
        TileConfig::Mma { engine, .. } => engine,
        _ => panic!("{s:?}"),
    };
    // dx = dy · W at T = 2048 for a 5120 × 5120 weight (the GEMM).
    let dx = (2048, 5120, 5120);
    for dt in ["bf16", "f16"] {
        let s = sched(dt, dx, Profile::Fast);
        assert_eq!(
            engine(&s),
            MmaEngine::WgmmaPingpong { ctas: 132 },
            "{dt}: {}",
            s.why
        );
        assert!(s.why.contains("B MN-major"), "{}", s.why);
    }
    // Rows of 5121 bf16 are no tensor map's: the `wgmma: 1` tile, which copies them.
    let odd = sched("bf16", (2048, 5121, 5120), Profile::Fast);
    assert_eq!(engine(&odd), MmaEngine::Wgmma, "{}", odd.why);
    // f32 (TF32 B must be K-major) and `invariant` keep mma.sync.
    for (dt, profile) in [("f32", Profile::Fast), ("bf16", Profile::Invariant)] {
        let s = sched(dt, dx, profile);
        assert_eq!(engine(&s), MmaEngine::Sync, "{dt} {profile:?}: {}", s.why);
    }
}

/// The warpgroup attention tile (`attention { .., wgmma: 1 }`) is taken only when asked
/// (`Options::wgmma_attention`, on by default), in `fast`, on a target with wgmma, for head dims that are
/// whole 128-byte panels; otherwise the `mma.sync` tile stays and its reason says why.
#[test]
fn the_wgmma_attention_tile_is_taken_only_when_asked_and_where_it_serves() {
    let sched = |d: u64, t: &Target, p: Profile, asked: bool| -> Schedule {
        let src = "step s(q: bf16[H, T, D], k: bf16[H, T, D], v: bf16[H, T, D]) -> bf16[H, T, D] {
            bf16(softmax(f32(q @ k^T) * 0.125, axis: -1)) @ v
        }";
        let module = tessel_syntax::parse(src).expect("parses");
        let dims: BTreeMap<String, u64> = [("H", 8), ("T", 2048), ("D", d)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b))
            .collect();
        let g = tessel_passes::attention::run(&check::run(&module, "s", &dims).expect("checks"), p);
        let g = decompose::run(&g);
        let f = fuse::run(&g, t, p);
        let s = schedule::run(&g, &f, t, p, (true, false, false, asked.then_some(0)));
        let grp = f
            .groups
            .keys()
            .find(|&grp| {
                matches!(
                    s[grp].as_ref().map(|x| &x.tile),
                    Some(TileConfig::Attention { .. })
                )
            })
            .expect("an attention group");
        s[grp].clone().expect("scheduled")
    };
    let wgmma = |s: &Schedule| matches!(s.tile, TileConfig::Attention { wgmma: true, .. });
    let h100 = Target::h100();
    let on = sched(128, &h100, Profile::Fast, true);
    assert!(wgmma(&on), "{}", on.why);
    assert!(
        matches!(
            on.tile,
            TileConfig::Attention {
                warps: 8,
                block_n: 64,
                stages: 3,
                split: 0,
                ..
            }
        ),
        "{:?}",
        on.tile
    );
    assert!(
        on.why.contains("2 consumer warpgroups of 64 rows")
            && on.why.contains("a producer warpgroup"),
        "{}",
        on.why
    );
    assert!(wgmma(&sched(64, &h100, Profile::Fast, true)));
    // Not asked, not fast, no wgmma, a head dim of 32: the mma.sync tile.
    let off = sched(128, &h100, Profile::Fast, false);
    assert!(
        !wgmma(&off)
            && off
                .why
                .ends_with("not the wgmma tile: not asked for (--no-wgmma-attention)"),
        "{}",
        off.why
    );
    let inv = sched(128, &h100, Profile::Invariant, true);
    assert!(
        !wgmma(&inv)
            && inv
                .why
                .contains("not the wgmma tile: the fast profile only")
    );
    let sm80 = Target {
        features: Features::NONE,
        ..Target::h100()
    };
    let old = sched(128, &sm80, Profile::Fast, true);
    assert!(
        !wgmma(&old) && old.why.contains("not the wgmma tile: it needs wgmma"),
        "{}",
        old.why
    );
    let narrow = sched(32, &h100, Profile::Fast, true);
    assert!(
        !wgmma(&narrow) && narrow.why.contains("not multiples of 64"),
        "{}",
        narrow.why
    );
}

/// The persistent ping-pong tile (`wgmma: pingpong`) is taken only when asked
/// (`Options::wgmma_pingpong`), where TMA can load the operands and the GEMM has at least
/// two 128 × 128 tiles per SM, with one CTA per SM; elsewhere the warpgroup tile stays,
/// or becomes the TMA tile when that is asked for too.
#[test]
fn the_pingpong_tile_is_taken_only_when_asked_and_where_it_fills_the_sms() {
    let sched = |(m, n, k): (u64, u64, u64), (tma, pingpong): (bool, bool)| -> Schedule {
        let src = "step s(x: bf16[M, K], w: bf16[N, K]) -> bf16[M, N] { x @ w^T }";
        let module = tessel_syntax::parse(src).expect("parses");
        let dims: BTreeMap<String, u64> = [("M", m), ("N", n), ("K", k)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b))
            .collect();
        let g = decompose::run(&check::run(&module, "s", &dims).expect("checks"));
        let t = Target::h100();
        let f = fuse::run(&g, &t, Profile::Fast);
        let s = schedule::run(&g, &f, &t, Profile::Fast, (true, tma, pingpong, None));
        let (grp, _) = f.groups.iter().next().expect("one group");
        s[grp].clone().expect("scheduled")
    };
    let engine = |s: &Schedule| match s.tile {
        TileConfig::Mma { engine, .. } => engine,
        _ => panic!("{s:?}"),
    };
    // Qwen3-14B's gate projection at T = 2048: 16 × 136 tiles on 132 SMs.
    let gate = (2048, 17408, 5120);
    assert_eq!(engine(&sched(gate, (false, false))), MmaEngine::Wgmma);
    let on = sched(gate, (false, true));
    assert_eq!(
        engine(&on),
        MmaEngine::WgmmaPingpong { ctas: 132 },
        "{}",
        on.why
    );
    let TileConfig::Mma {
        bm,
        bn,
        warps_m,
        stages,
        min_ctas_per_sm,
        ..
    } = on.tile
    else {
        unreachable!()
    };
    assert_eq!(
        (bm, bn, warps_m, stages, min_ctas_per_sm),
        (128, 128, 8, 4, 1)
    );
    assert!(on.why.contains("persistent ping-pong"), "{}", on.why);
    // K and V at T = 2048 (N = 1024): 128 tiles, fewer than two per SM.
    let kv = (2048, 1024, 5120);
    assert_eq!(engine(&sched(kv, (false, true))), MmaEngine::Wgmma);
    assert_eq!(
        engine(&sched(kv, (true, true))),
        MmaEngine::WgmmaTma { tail: 0 }
    );
    // Rows of 5121 elements are no tensor map's.
    assert_eq!(
        engine(&sched((2048, 17408, 5121), (false, true))),
        MmaEngine::Wgmma
    );
}

/// What fixes a row's order of sums in an `invariant` GEMM: the instruction (engine and
/// mma shape, or the SIMT tile), the K slice, and the split-K ranges — never the tile's
/// size, which may follow M.
fn invariant_order(s: &Schedule) -> String {
    match s.tile {
        TileConfig::Mma {
            bk,
            split_k,
            shape,
            engine,
            ..
        } => format!("mma {shape:?} {engine:?} bk {bk} split {split_k}"),
        TileConfig::Simt { bk, split_k, .. } => format!("simt bk {bk} split {split_k}"),
        ref t => format!("{t}"),
    }
}

/// The `invariant` profile's promise, at the schedule: for each (N, K) and dtype, every M
/// gets the same order of sums. Caught a split-K decided by the chosen tile's column tiles
/// (whose width follows M): N = 200, K = 4096 was split at M = 16 and not at M = 200
/// (tests/programs/regressions/invariance_split_k_by_n.tsl).
#[test]
fn invariant_orders_depend_on_n_and_k_alone() {
    for t in [Target::h200(), Target::h100()] {
        for dt in ["bf16", "f32"] {
            for n in [16, 64, 65, 128, 129, 136, 200, 256, 257, 1024, 5120] {
                for k in [16, 32, 200, 2048, 4096, 5120] {
                    let orders: Vec<(u64, String)> = [1, 3, 16, 17, 64, 65, 200, 2048, 20000]
                        .into_iter()
                        .map(|m| {
                            let s = matmul_schedule(dt, (m, n, k), &t, Profile::Invariant);
                            (m, invariant_order(&s))
                        })
                        .collect();
                    for (m, o) in &orders[1..] {
                        assert_eq!(
                            o, &orders[0].1,
                            "{dt} N = {n} K = {k} on {}: M = {m} vs M = 1",
                            t.name
                        );
                    }
                }
            }
        }
    }
}

/// A batched GEMM's order in `invariant` does not depend on its batch count either: each
/// entry's sums are the same whether it runs alone or among 30 others. `tessel.lora`'s
/// `grad_order="sequence"` relies on it (each sequence's part of the adapters' gradients
/// is a batch entry: python/tessel/lora.tsl, `lora_adapter_grads`).
#[test]
fn invariant_batched_orders_do_not_depend_on_the_batch() {
    let t = Target::h200();
    for dt in ["bf16", "f32"] {
        for (m, n, k) in [
            (16, 5120, 2048),
            (5120, 16, 2048),
            (5120, 16, 256),
            (64, 768, 64),
            (300, 200, 136),
        ] {
            let src = format!(
                "step s(x: {dt}[B, M, K], w: {dt}[B, N, K]) -> {dt}[B, M, N] {{ x @ transpose(w, 1, 2) }}"
            );
            let order = |b: u64| {
                let dims = [("B", b), ("M", m), ("N", n), ("K", k)];
                invariant_order(&first_schedule(&src, &dims, &t, Profile::Invariant, true))
            };
            let one = order(1);
            for b in [2, 8, 31] {
                assert_eq!(
                    order(b),
                    one,
                    "{dt} M = {m} N = {n} K = {k}: batch {b} vs 1"
                );
            }
        }
    }
}

/// [`invariant_orders_depend_on_n_and_k_alone`] over random shapes: N and K drawn
/// log-uniformly from 1 to 2^15, M from 1 to 2^16, on targets of 1 to 200 SMs.
#[test]
fn invariant_orders_depend_on_n_and_k_alone_random_shapes() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |bits: u32| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = (state >> 33) % (bits as u64 + 1);
        1 + (state >> 7) % (1u64 << b)
    };
    for case in 0..300 {
        let sms = next(7).min(200) as u32;
        let t = Target {
            sm_count: sms,
            ..Target::h200()
        };
        let (n, k) = (next(15), next(15));
        let dt = if case % 3 == 0 { "f32" } else { "bf16" };
        let first = invariant_order(&matmul_schedule(dt, (1, n, k), &t, Profile::Invariant));
        for _ in 0..4 {
            let m = next(16);
            let o = invariant_order(&matmul_schedule(dt, (m, n, k), &t, Profile::Invariant));
            assert_eq!(
                o, first,
                "{dt} N = {n} K = {k} on {sms} SMs: M = {m} vs M = 1"
            );
        }
    }
}

/// `invariant` never takes the ping-pong tile: it is chosen by the number of tiles, so its
/// instruction (m64n128k16 against the warpgroup tile's) would follow M.
#[test]
fn the_pingpong_tile_is_fast_only() {
    let src = "step s(x: bf16[M, K], w: bf16[N, K]) -> bf16[M, N] { x @ w^T }";
    let module = tessel_syntax::parse(src).expect("parses");
    let dims: BTreeMap<String, u64> = [("M", 2048), ("N", 17408), ("K", 5120)]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect();
    let g = decompose::run(&check::run(&module, "s", &dims).expect("checks"));
    let t = Target::h100();
    let f = fuse::run(&g, &t, Profile::Invariant);
    let s = schedule::run(&g, &f, &t, Profile::Invariant, (true, false, true, None));
    let (grp, _) = f.groups.iter().next().expect("one group");
    let tile = &s[grp].as_ref().expect("scheduled").tile;
    assert!(
        !matches!(
            tile,
            TileConfig::Mma {
                engine: MmaEngine::WgmmaPingpong { .. },
                ..
            }
        ),
        "{tile}"
    );
}

/// The elementwise tile of the one kernel of `src`'s step `s` (no dims).
fn elementwise_tile(src: &str) -> (u32, u32) {
    let module = tessel_syntax::parse(src).expect("parses");
    let g = decompose::run(&check::run(&module, "s", &BTreeMap::new()).expect("checks"));
    let t = Target::h200();
    let f = fuse::run(&g, &t, Profile::Fast);
    let s = schedule::run(&g, &f, &t, Profile::Fast, (true, false, false, None));
    let (grp, _) = f.groups.iter().next().expect("one group");
    match s[grp].clone().expect("scheduled").tile {
        TileConfig::Elementwise { threads, vector } => (threads, vector),
        t => panic!("{t}"),
    }
}

/// A small elementwise kernel of math functions (decode's RoPE tables: cos and sin of 128
/// angles) spreads its elements over a CTA's threads, vector 1; one without math, or a
/// large one, keeps the widest vector.
#[test]
fn small_math_kernels_take_more_threads() {
    let math = "step s(p: f32[2, 128]) -> f32[2, 128] { sin(p * 0.5) }";
    assert_eq!(elementwise_tile(math), (256, 1));
    let plain = "step s(p: f32[2, 128]) -> f32[2, 128] { p * 0.5 }";
    assert_eq!(elementwise_tile(plain), (64, 4));
    let large = "step s(p: f32[64, 128]) -> f32[64, 128] { sin(p * 0.5) }";
    assert_eq!(elementwise_tile(large), (256, 4));
}
