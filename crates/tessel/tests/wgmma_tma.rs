//! The warp-specialised TMA tile (`TileConfig::Mma` with `MmaEngine::WgmmaTma`, text
//! `wgmma: tma`) on the kernel-IR executor. The schedule takes it in `fast` where the
//! ping-pong tile does not apply (`Options::wgmma_tma`, on by default); here each program
//! is compiled in `fast` for a one-SM H200 up to `schedule` with that option off, every
//! `wgmma: 1` tile is turned into `wgmma: tma` with the same sizes (the verifier checks the
//! edited schedules), and `lower` and the kernel passes run as the
//! registry lists them; compiling with `Options::wgmma_tma` must give the same kernels. The
//! outputs must be the bits of the same program compiled without wgmma (`mma.sync` tiles):
//! the executor models both instructions as one fma chain over k in order, so any
//! difference is a wrong element — a TMA box, a stage, the swizzle, an mbarrier phase, a
//! zero-filled edge, the consumers' epilogue. The executor runs the producer and consumer
//! warps each from its own position (warps block on mbarrier waits), holds TMA bytes until
//! the phase that counts them completes, and reports reads before their wait, deadlocks
//! and barrier misuse. The kernel is also assembled by ptxas for sm_90a.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::graph::{Fusion, Graph, MmaEngine, Schedules, TileConfig};
use tessel_ir::kernel::{LaunchArg, Op, Operand, Program, RegType, Stmt};
use tessel_ir::Reg;
use tessel_passes::pipeline::{pass, run_passes, Ir};
use tessel_passes::target::{Features, Target};
use tessel_passes::{check, compile, Options, Profile};
use tessel_ref::{run_program, Tensor};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A one-SM H200, so that the large tiles apply at test sizes.
fn one_sm() -> Target {
    Target {
        sm_count: 1,
        ..Target::h200()
    }
}

fn checked(file: &str, step: &str, dims: &[(&str, u64)]) -> tessel_ir::graph::Graph {
    let module = tessel_syntax::load::load(&root().join(file))
        .unwrap_or_else(|_| panic!("{file}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message))
}

fn options(target: Target) -> Options {
    Options {
        verify: true,
        profile: Profile::Fast,
        target,
        // The TMA tile's tests: the ping-pong tile, taken first by default, has its own, and
        // so has the warpgroup attention tile (wgmma_attention.rs), whose TMA loads would
        // count here.
        wgmma_pingpong: false,
        wgmma_attention: false,
        // Off, so that `tma_schedules` finds the `wgmma: 1` tiles to edit; `same_bits`
        // compiles with it on and must get the edited program.
        wgmma_tma: false,
        merge_launches: true,
        dependent_launch: true,
        ..Default::default()
    }
}

/// `step` scheduled for the one-SM H200 with every `wgmma: 1` tile made `wgmma: tma`;
/// returns the graph, its fusion and schedules, and how many tiles were changed.
fn tma_schedules(
    file: &str,
    step: &str,
    dims: &[(&str, u64)],
) -> (Graph, Fusion, Schedules, usize) {
    let g = checked(file, step, dims);
    let opts = options(one_sm());
    let Ir::Scheduled(g, f, mut s) =
        run_passes(&g, &opts, pass("schedule"), &mut |_, _| {}).expect("schedules")
    else {
        panic!("stopped after schedule")
    };
    let mut changed = 0;
    for (_, sch) in s.iter_mut() {
        if let Some(sch) = sch {
            if let TileConfig::Mma { engine, .. } = &mut sch.tile {
                if *engine == MmaEngine::Wgmma {
                    *engine = MmaEngine::WgmmaTma { tail: 0 };
                    changed += 1;
                }
            }
        }
    }
    if let Err(e) = tessel_ir::verify::verify_graph(&g, Some(&f), Some(&s)) {
        panic!("{step}: the edited schedules: {e:?}");
    }
    (g, f, s, changed)
}

/// `step` compiled for the one-SM H200 with every `wgmma: 1` tile made `wgmma: tma`;
/// returns the program and how many tiles were changed.
fn tma_program(file: &str, step: &str, dims: &[(&str, u64)]) -> (Program, usize) {
    let (g, f, s, changed) = tma_schedules(file, step, dims);
    (
        common::lower_scheduled(&g, &f, &s, &options(one_sm())),
        changed,
    )
}

/// The kernels that issue TMA loads.
fn tma_kernels(p: &Program) -> usize {
    p.kernels
        .values()
        .filter(|k| tessel_ir::kernel::any_stmt(&k.body, &|s| matches!(s, Stmt::TmaLoad { .. })))
        .count()
}

/// Compiles `step` with the TMA tile and without wgmma, checks that `want` kernels take
/// the former and that each passes two tensor maps, and compares every output bit for bit
/// on seeded inputs.
fn same_bits(file: &str, step: &str, dims: &[(&str, u64)], want: usize) {
    let (w, changed) = tma_program(file, step, dims);
    assert_eq!(changed, want, "{step} {dims:?}: wgmma tiles");
    // The schedule's own choice under `Options::wgmma_tma` is the same program.
    let asked = compile(
        &checked(file, step, dims),
        &Options {
            wgmma_tma: true,
            ..options(one_sm())
        },
    )
    .unwrap_or_else(|e| panic!("{step}: {e}"))
    .program;
    assert_eq!(asked.launches, w.launches, "{step}: launches");
    for (a, b) in asked.kernels.values().zip(w.kernels.values()) {
        assert!(
            a.body == b.body && a.params == b.params && a.min_ctas_per_sm == b.min_ctas_per_sm,
            "{step}: kernel {} differs under Options::wgmma_tma",
            a.name
        );
    }
    assert_eq!(tma_kernels(&w), want, "{step} {dims:?}: TMA kernels");
    let maps: usize = w
        .launches
        .iter()
        .map(|l| {
            l.args
                .iter()
                .filter(|a| matches!(a, LaunchArg::TensorMap(_)))
                .count()
        })
        .sum();
    assert_eq!(maps, 2 * want, "{step}: two tensor maps a TMA kernel");
    let without = Target {
        features: Features {
            wgmma: false,
            ..one_sm().features
        },
        ..one_sm()
    };
    let s = compile(&checked(file, step, dims), &options(without))
        .unwrap_or_else(|e| panic!("{step}: {e}"))
        .program;
    common::assert_same_outputs(&w, &s, &format!("{step} {dims:?}, wgmma: tma vs mma.sync"));
}

#[test]
fn tma_projection_with_tails_matches_mma_sync_bits() {
    // M, N, K past whole tiles (K = 200: the last box reaches 56 elements past K).
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 200), ("K", 200), ("N", 300)],
        1,
    );
    // One row past a tile, K one 16-step past a slice, N just past a tile.
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 129), ("K", 80), ("N", 264)],
        1,
    );
    // K of 10 slices through 4 stages: the ring wraps twice, so every mbarrier runs
    // several phases (a stage released early, or a parity off by one, shows here).
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 130), ("K", 600), ("N", 264)],
        1,
    );
    // N odd: the per-fragment epilogue from the consumers' registers.
    same_bits(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 129), ("K", 80), ("N", 257)],
        1,
    );
}

#[test]
fn tma_fused_epilogues_match_mma_sync_bits() {
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
fn a_qwen3_layer_with_tma_projections_matches_mma_sync_bits() {
    // As tests/wgmma.rs: q, k, v, gate and up take the warpgroup tile at hidden 64.
    same_bits("tests/programs/layer_small.tsl", "qwen3", &[("T", 130)], 5);
}

/// An H200 of `n` SMs: the TMA tile's last wave at test sizes.
fn sms(n: u32) -> Target {
    Target {
        sm_count: n,
        ..Target::h200()
    }
}

/// Compiles `step` in `fast` for an H200 of `n` SMs with the schedule's own choices (the
/// ping-pong tile off): the one GEMM must take the TMA tile with a split tail of `tail`
/// tiles (`wgmma: tma, tail: N`), launch `tiles + tail` CTAs and pass three tensor maps
/// (A, B, the halves' B); every output must be the bits of the `mma.sync` program's.
fn split_tail_bits(
    file: &str,
    step: &str,
    dims: &[(&str, u64)],
    n: u32,
    (tiles, tail): (u32, u32),
) {
    let what = format!("{step} {dims:?} on {n} SMs");
    let opts = Options {
        target: sms(n),
        wgmma_tma: true,
        ..options(sms(n))
    };
    let p = compile(&checked(file, step, dims), &opts)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .program;
    let split: Vec<_> = p
        .kernels
        .values()
        .filter(|k| k.schedule.contains("wgmma: tma"))
        .collect();
    assert_eq!(split.len(), 1, "{what}: one TMA kernel");
    assert!(
        split[0]
            .schedule
            .contains(&format!("wgmma: tma, tail: {tail} }}")),
        "{what}: {}",
        split[0].schedule
    );
    assert_eq!(split[0].grid[0], tiles + tail, "{what}: CTAs");
    let maps: usize = p
        .launches
        .iter()
        .map(|l| {
            l.args
                .iter()
                .filter(|a| matches!(a, LaunchArg::TensorMap(_)))
                .count()
        })
        .sum();
    assert_eq!(maps, 3, "{what}: tensor maps");
    let without = Target {
        features: Features {
            wgmma: false,
            ..sms(n).features
        },
        ..sms(n)
    };
    let s = compile(&checked(file, step, dims), &options(without))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .program;
    common::assert_same_outputs(&p, &s, &format!("{what}, split tail vs mma.sync"));
}

#[test]
fn a_split_tail_matches_mma_sync_bits() {
    let linear = |dims: &[(&str, u64)], n, split| {
        split_tail_bits("tests/programs/matmul.tsl", "linear", dims, n, split)
    };
    // 3 × 3 tiles of 128 × 256 on 6 SMs: one whole wave, then the last column tile's three
    // as six halves of 128 × 128, both halves inside N = 768; the last row tile 44 rows.
    linear(&[("M", 300), ("K", 200), ("N", 768)], 6, (9, 3));
    // N = 600: that column tile's first half 88 columns wide, its second wholly past N
    // (its boxes all zero fill, its stores all masked).
    linear(&[("M", 300), ("K", 200), ("N", 600)], 6, (9, 3));
    // 2 × 3 tiles on 4 SMs, K = 600 (10 slices: the ring wraps in both widths), N = 760:
    // the last column tile's second half 120 columns wide.
    linear(&[("M", 130), ("K", 600), ("N", 760)], 4, (6, 2));
    // N ≤ 128: the 128 × 128 tile, 6 × 1 tiles on 4 SMs, the last two as four halves of
    // 128 × 64 (wgmma.m64n64k16), the second 56 columns wide.
    linear(&[("M", 700), ("K", 136), ("N", 120)], 4, (6, 2));
    // Bias, silu, residual and the cast in both widths' epilogues; 2 × 2 tiles on 3 SMs,
    // the last tile's (column tile 1, row tile 1) halves 128 and 116 columns wide.
    split_tail_bits(
        "tests/programs/matmul.tsl",
        "linear_epilogue",
        &[("M", 130), ("K", 136), ("N", 500)],
        3,
        (4, 1),
    );
}

/// No split where the halves would not fit one wave, where there is no partial wave, and
/// never for a row epilogue (`schedule::tma_tail`).
#[test]
fn the_tail_is_split_only_where_its_halves_make_one_wave() {
    use tessel_passes::schedule::tma_tail;
    assert_eq!(tma_tail(320, 256, 132), 56);
    assert_eq!(tma_tail(1088, 256, 132), 32);
    assert_eq!(tma_tail(9, 256, 5), 0);
    assert_eq!(tma_tail(9, 256, 6), 3);
    assert_eq!(tma_tail(264, 256, 132), 0);
    assert_eq!(tma_tail(128, 128, 132), 0);
    assert_eq!(tma_tail(60, 128, 132), 60);
    assert_eq!(tma_tail(9, 64, 6), 0);
    // The QK-norm + RoPE row epilogue keeps whole tiles.
    let g = checked(
        "tests/programs/row_epilogue.tsl",
        "norm_rope",
        &[("T", 300), ("K", 64), ("N", 768), ("H", 6), ("D", 128)],
    );
    let p = compile(
        &g,
        &Options {
            wgmma_tma: true,
            ..options(sms(6))
        },
    )
    .expect("compiles")
    .program;
    let s: Vec<_> = p.kernels.values().map(|k| k.schedule.clone()).collect();
    assert!(
        s.iter().any(|s| s.contains("wgmma: tma }")) && !s.iter().any(|s| s.contains("tail")),
        "{s:?}"
    );
}

/// Makes the consumers release slice `kt`'s own stage right after its wgmma group is
/// committed — while it may still run — instead of slice `kt - 1`'s: the `if kt > 0
/// { arrive EMPTY[(kt - 1) mod S] }` becomes `arrive EMPTY[kt mod S]` (at the FULL
/// barrier the loop waited on, `8 · stages` bytes on, in the fresh register `e`).
fn release_own_stage(body: &mut [Stmt], e: Reg, stages: u32) -> bool {
    for s in body.iter_mut() {
        match s {
            Stmt::For { body, .. } => {
                let full = body.iter().find_map(|s| match s {
                    Stmt::MbarWait { addr, .. } => Some(*addr),
                    _ => None,
                });
                let release = body.iter().position(|s| {
                    matches!(s, Stmt::If { then_body, .. }
                        if then_body.iter().any(|t| matches!(t, Stmt::MbarArrive { .. })))
                });
                if let (Some(full), Some(r), true) = (
                    full,
                    release,
                    body.iter().any(|s| matches!(s, Stmt::WgmmaWait(1))),
                ) {
                    body[r] = Stmt::MbarArrive { addr: e };
                    body.insert(
                        r,
                        Stmt::Op {
                            dst: e,
                            op: Op::IAdd,
                            args: vec![full.into(), Operand::U32(8 * stages)],
                        },
                    );
                    return true;
                }
                if release_own_stage(body, e, stages) {
                    return true;
                }
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                let found = release_own_stage(then_body, e, stages)
                    || release_own_stage(else_body, e, stages);
                if found {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// A stage handed back to the producer while the wgmma reading it may still run is a race
/// on the GPU (the tensor core reads shared memory until `wgmma.wait_group` says it is
/// done): the executor must report the TMA load that overwrites it, even though its own
/// wgmma computed at issue and the bits would come out right.
#[test]
fn a_stage_released_before_its_wgmma_completes_is_reported() {
    let dims = [("M", 130), ("K", 600), ("N", 264)];
    let (mut p, _) = tma_program("tests/programs/matmul.tsl", "linear", &dims);
    let k = p.kernels.values_mut().next().expect("one kernel");
    let e = k.new_reg(RegType::U32);
    assert!(
        release_own_stage(&mut k.body, e, 4),
        "the consumer loop's release"
    );
    let ins: Vec<Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, b))| Tensor::random(p.buffers[*b].ty.clone(), 7 + i as u64))
        .collect();
    let Err(e) = run_program(&p, &ins) else {
        panic!("a TMA load into a wgmma's operand runs")
    };
    // A's box (16384 bytes) into a stage the wgmma of the slice before still reads.
    let e = e.to_string();
    assert!(
        e.contains("TMA load of 16384 bytes at 0x")
            && e.contains("into the operand of a wgmma that no wgmma.wait has completed"),
        "{e}"
    );
}

/// The TMA tile assembles for sm_90a with ptxas 13.0 — the Qwen3-14B projection shape
/// (M = 4096, K = N = 5120), the fused epilogues and the row epilogue — without spills, and
/// with its `setmaxnreg` honoured: ptxas ignores it (info C7508, "unable to determine
/// register count at entry") unless the entry's register count is fixed, which the
/// kernel's `.minnctapersm 1` with `.reqntid 384` does (168 a thread at entry; the
/// consumers' 232 after `setmaxnreg.inc`).
#[test]
fn the_tma_tile_assembles_for_sm_90a_without_spills() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    let header = one_sm().ptx_header();
    assert_eq!(header.target, "sm_90a");
    for (file, step, dims) in [
        (
            "tests/programs/matmul.tsl",
            "linear",
            &[("M", 4096), ("K", 5120), ("N", 5120)][..],
        ),
        (
            "tests/programs/matmul.tsl",
            "linear_epilogue",
            &[("M", 4096), ("K", 5120), ("N", 5120)][..],
        ),
        (
            "tests/programs/row_epilogue.tsl",
            "norm_rope",
            &[("T", 4096), ("K", 5120), ("N", 5120), ("H", 40), ("D", 128)][..],
        ),
    ] {
        let (p, changed) = tma_program(file, step, dims);
        assert_eq!(changed, 1, "{step}");
        let ks: Vec<_> = p.kernels.values().collect();
        let text = tessel_ptx::write_module(
            &ks,
            &tessel_ptx::PtxOptions::with_header(header.version, &header.target),
        )
        .expect("ptx");
        for row in [
            ".reqntid 384, 1, 1",
            ".minnctapersm 1",
            "setmaxnreg.dec.sync.aligned.u32 40;",
            "setmaxnreg.inc.sync.aligned.u32 232;",
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
            "bar.sync 1, 256;",
        ] {
            assert!(text.contains(row), "{step}: no {row:?}");
        }
        let Some(ptxas) = &ptxas else { continue };
        let report = ptxas
            .assemble(&text, &header.target)
            .unwrap_or_else(|e| panic!("{step}: ptxas rejected the PTX: {e}"));
        assert!(
            !report.log.contains("setmaxnreg' ignored"),
            "{step}: {}",
            report.log
        );
        assert!(report.warnings.is_empty(), "{step}: {:?}", report.warnings);
        for kr in report.kernels() {
            assert!(!kr.spills(), "{step}: {} spills: {kr:?}", kr.name);
            eprintln!(
                "ptxas sm_90a: {step} {}: {} registers at entry, {} barriers",
                kr.name, kr.registers, kr.barriers
            );
        }
    }
}

/// With a split tail (the Qwen3-14B q projection and a fused epilogue at T = 2048 on an
/// H100: 320 tiles of 128 × 256, the last 56 as halves) the kernel holds both widths' roles
/// and still assembles for sm_90a without spills, `setmaxnreg` honoured; its schedule's
/// text reads back to the same schedules, and a tail past the tiles or of tiles narrower
/// than 128 columns is refused by the verifier.
#[test]
fn a_split_tail_assembles_round_trips_and_is_verified() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    let h100 = Target::h100();
    let opts = Options {
        target: h100.clone(),
        wgmma_tma: true,
        ..options(h100.clone())
    };
    for step in ["linear", "linear_epilogue"] {
        let dims = [("M", 2048), ("K", 5120), ("N", 5120)];
        let g = checked("tests/programs/matmul.tsl", step, &dims);
        let p = compile(&g, &opts)
            .unwrap_or_else(|e| panic!("{step}: {e}"))
            .program;
        let ks: Vec<_> = p.kernels.values().collect();
        assert!(
            ks.len() == 1
                && ks[0].schedule.contains("wgmma: tma, tail: 56 }")
                && ks[0].grid[0] == 376,
            "{step}: {}",
            ks[0].schedule
        );
        let header = h100.ptx_header();
        let text = tessel_ptx::write_module(
            &ks,
            &tessel_ptx::PtxOptions::with_header(header.version, &header.target),
        )
        .expect("ptx");
        for row in [
            "wgmma.mma_async.sync.aligned.m64n256k16",
            "wgmma.mma_async.sync.aligned.m64n128k16",
        ] {
            assert!(text.contains(row), "{step}: no {row:?}");
        }
        let Some(ptxas) = &ptxas else { continue };
        let report = ptxas
            .assemble(&text, &header.target)
            .unwrap_or_else(|e| panic!("{step}: ptxas rejected the PTX: {e}"));
        assert!(
            !report.log.contains("setmaxnreg' ignored"),
            "{step}: {}",
            report.log
        );
        assert!(report.warnings.is_empty(), "{step}: {:?}", report.warnings);
        for kr in report.kernels() {
            assert!(!kr.spills(), "{step}: {} spills: {kr:?}", kr.name);
        }
    }

    let g = checked(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 300), ("K", 200), ("N", 768)],
    );
    let Ir::Scheduled(g, f, s) = run_passes(
        &g,
        &Options {
            target: sms(6),
            wgmma_tma: true,
            ..options(sms(6))
        },
        pass("schedule"),
        &mut |_, _| {},
    )
    .expect("schedules") else {
        panic!("stopped after schedule")
    };
    let text = tessel_ir::text::write_graph(&g, Some(&f), Some(&s));
    assert!(text.contains("wgmma: tma, tail: 3 }"), "{text}");
    let (g2, f2, s2) = tessel_ir::text::read_graph(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((g2, f2, s2), (g.clone(), f.clone(), s));
    for (bad, why) in [
        (
            "wgmma: tma, tail: 10 }",
            "a split tail of 10 of its 9 tiles of 128 × 256",
        ),
        (
            "bn: 256, bk: 64",
            "a split tail of 3 of its 36 tiles of 128 × 64",
        ),
    ] {
        let edited = match bad.starts_with("bn") {
            true => text.replace("bn: 256, bk: 64", "bn: 64, bk: 64"),
            false => text.replace("wgmma: tma, tail: 3 }", bad),
        };
        let (g3, f3, s3) = tessel_ir::text::read_graph(&edited).unwrap_or_else(|e| panic!("{e}"));
        let e = tessel_ir::verify::verify_graph(&g3, Some(&f3), Some(&s3)).expect_err(why);
        assert!(format!("{e:?}").contains(why), "{e:?}");
    }
}

/// A split tail where the halves cannot hold a row epilogue's whole rows is refused by the
/// verifier, and a tail past the tiles by lowering even unverified (found by review: the
/// verifier took the first and lowering then failed; the second underflowed).
#[test]
fn a_tail_lowering_cannot_take_is_refused() {
    use tessel_passes::pipeline::Run;
    let opts = Options {
        target: sms(6),
        wgmma_tma: true,
        ..options(sms(6))
    };
    let scheduled = |file: &str, step: &str, dims: &[(&str, u64)]| {
        let g = checked(file, step, dims);
        let Ir::Scheduled(g, f, s) =
            run_passes(&g, &opts, pass("schedule"), &mut |_, _| {}).expect("schedules")
        else {
            panic!("stopped after schedule")
        };
        tessel_ir::text::write_graph(&g, Some(&f), Some(&s))
    };
    let text = scheduled(
        "tests/programs/row_epilogue.tsl",
        "norm_rope",
        &[("T", 300), ("K", 64), ("N", 768), ("H", 6), ("D", 128)],
    );
    assert!(text.contains("wgmma: tma }"), "{text}");
    let edited = text.replace("wgmma: tma }", "wgmma: tma, tail: 3 }");
    let (g, f, s) = tessel_ir::text::read_graph(&edited).unwrap_or_else(|e| panic!("{e}"));
    let e = tessel_ir::verify::verify_graph(&g, Some(&f), Some(&s)).expect_err("refused");
    assert!(
        format!("{e:?}").contains("a split tail and a row epilogue's reductions"),
        "{e:?}"
    );

    let text = scheduled(
        "tests/programs/matmul.tsl",
        "linear",
        &[("M", 300), ("K", 64), ("N", 768)],
    );
    let edited = text.replace("wgmma: tma, tail: 3 }", "wgmma: tma, tail: 10 }");
    assert_ne!(edited, text);
    let (g, f, s) = tessel_ir::text::read_graph(&edited).unwrap_or_else(|e| panic!("{e}"));
    let lower = tessel_passes::PASSES
        .iter()
        .find_map(|p| match &p.run {
            Run::Lower(run) => Some(run),
            _ => None,
        })
        .expect("a lower pass");
    let Err(e) = lower(&g, &f, &s) else {
        panic!("a tail of 10 of 9 tiles lowered")
    };
    assert!(
        format!("{e:?}").contains("a split tail of 10 of its 9 tiles"),
        "{e:?}"
    );
}

/// The tile's text is `wgmma: tma`; it reads back to the same schedules, and the
/// `wgmma: 1` tile keeps its text.
#[test]
fn the_tma_tile_round_trips_as_text() {
    let dims = [("M", 200), ("K", 200), ("N", 300)];
    let (g, f, s, _) = tma_schedules("tests/programs/matmul.tsl", "linear", &dims);
    let text = tessel_ir::text::write_graph(&g, Some(&f), Some(&s));
    assert!(text.contains("min_ctas_per_sm: 0, wgmma: tma }"), "{text}");
    let (g2, f2, s2) = tessel_ir::text::read_graph(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((g2, f2, s2), (g, f, s.clone()));
    let one = text.replace("wgmma: tma", "wgmma: 1");
    let (g3, f3, s3) = tessel_ir::text::read_graph(&one).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tessel_ir::text::write_graph(&g3, Some(&f3), Some(&s3)), one);
    let bad = text.replace("wgmma: tma", "wgmma: 2");
    let e = tessel_ir::text::read_graph(&bad).expect_err("wgmma: 2");
    assert!(
        e.to_string()
            .contains("`wgmma` is 0, 1, tma or pingpong, found `2`"),
        "{e}"
    );
}
