//! The persistent ping-pong tile (`TileConfig::Mma` with `MmaEngine::WgmmaPingpong`, text
//! `wgmma: pingpong, ctas: N`) on the kernel-IR executor. The schedule takes it only when
//! asked (`Options::wgmma_pingpong`) and where the GEMM has at least two 128 × 128 tiles per
//! SM, so each program is compiled in `fast` for an H200 of a few SMs: every CTA then walks
//! several tiles, and each of its two consumer warpgroups takes several in turn. The
//! outputs must be the bits of the same program compiled without wgmma (`mma.sync` tiles):
//! the executor models both instructions as one fma chain over k in order, so any
//! difference is a wrong element — a tile index, a ring fill, an mbarrier phase, a
//! zero-filled edge, a consumer's epilogue. The executor runs the producer and the
//! consumers each from its own position, blocks warps on mbarrier waits and named
//! barriers, holds TMA bytes until the phase that counts them completes, and reports
//! reads before their wait, TMA writes into bytes an unwaited wgmma reads, deadlocks and
//! barrier misuse. The kernels are also assembled by ptxas for sm_90a.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::graph::Graph;
use tessel_ir::kernel::{Program, Stmt};
use tessel_passes::target::{Features, Target};
use tessel_passes::{check, compile, Options, Profile};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An H200 of `sms` SMs.
fn sms(sms: u32) -> Target {
    Target {
        sm_count: sms,
        ..Target::h200()
    }
}

/// Where a program comes from: a file of the repository, or source text.
enum Src<'a> {
    File(&'a str),
    Text(&'a str),
}

fn checked(src: &Src, step: &str, dims: &[(&str, u64)]) -> Graph {
    let module = match src {
        Src::File(file) => {
            tessel_syntax::load::load(&root().join(file))
                .unwrap_or_else(|_| panic!("{file}: does not load"))
                .module
        }
        Src::Text(text) => tessel_syntax::parse(text).unwrap_or_else(|_| panic!("{text}")),
    };
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message))
}

fn options(target: Target, pingpong: bool) -> Options {
    Options {
        verify: true,
        profile: Profile::Fast,
        target,
        wgmma_pingpong: pingpong,
        // Without the ping-pong tile, the warpgroup tile itself (not its TMA variant,
        // which has its own tests: wgmma_tma.rs).
        wgmma_tma: false,
        merge_launches: true,
        dependent_launch: true,
        ..Default::default()
    }
}

fn compiled(src: &Src, step: &str, dims: &[(&str, u64)], opts: &Options) -> Program {
    compile(&checked(src, step, dims), opts)
        .unwrap_or_else(|e| panic!("{step} {dims:?}: {e}"))
        .program
}

/// The kernels whose schedule is the ping-pong tile, with their CTA counts.
fn pingpong_ctas(p: &Program) -> Vec<u32> {
    p.kernels
        .values()
        .filter(|k| k.schedule.contains("wgmma: pingpong"))
        .map(|k| k.grid[0])
        .collect()
}

/// Compiles `step` for an H200 of `n` SMs with `Options::wgmma_pingpong` and without
/// wgmma; checks that `want` kernels take the ping-pong tile, each with `n` CTAs, and
/// compares every output bit for bit on seeded inputs. Returns the ping-pong program.
fn same_bits(src: Src, step: &str, dims: &[(&str, u64)], n: u32, want: usize) -> Program {
    let p = compiled(&src, step, dims, &options(sms(n), true));
    assert_eq!(
        pingpong_ctas(&p),
        vec![n; want],
        "{step} {dims:?}: ping-pong kernels and their CTAs"
    );
    let without = Target {
        features: Features {
            wgmma: false,
            ..sms(n).features
        },
        ..sms(n)
    };
    let s = compiled(&src, step, dims, &options(without, false));
    common::assert_same_outputs(&p, &s, &format!("{step} {dims:?}, pingpong vs mma.sync"));
    p
}

const LINEAR: Src = Src::File("tests/programs/matmul.tsl");

#[test]
fn pingpong_projection_with_tails_matches_mma_sync_bits() {
    // M, N, K past whole tiles (K = 200: the last box reaches 56 elements past K); 2 × 3
    // tiles on 2 CTAs: 3 each, 2 on consumer 0 and 1 on consumer 1.
    same_bits(
        LINEAR,
        "linear",
        &[("M", 200), ("K", 200), ("N", 300)],
        2,
        1,
    );
    // 3 × 3 tiles on 4 CTAs (not a multiple: CTA 0 takes 3, the others 2), K of 10
    // slices through 4 stages: each CTA's ring wraps 5 to 7 times, so every mbarrier runs
    // many phases across tiles and consumers.
    same_bits(
        LINEAR,
        "linear",
        &[("M", 300), ("K", 600), ("N", 300)],
        4,
        1,
    );
    // One row past a tile and K one 16-step past a slice, on one CTA: 6 tiles, 3 a
    // consumer.
    same_bits(LINEAR, "linear", &[("M", 129), ("K", 80), ("N", 264)], 1, 1);
    // N odd: the per-element epilogue from the registers; N even, not a multiple of 4:
    // pairs.
    same_bits(LINEAR, "linear", &[("M", 129), ("K", 80), ("N", 257)], 3, 1);
    same_bits(LINEAR, "linear", &[("M", 129), ("K", 80), ("N", 258)], 2, 1);
}

#[test]
fn pingpong_small_m_takes_the_tile_or_falls_back() {
    // M = 70: the tile's second block of 64 rows lies past M but for 6 rows.
    same_bits(LINEAR, "linear", &[("M", 70), ("K", 72), ("N", 300)], 1, 1);
    // M = 1 and M = 12 (the GEMV), M = 40 (the `mma.sync` tile): never a wgmma tile.
    for m in [1, 12, 40] {
        same_bits(LINEAR, "linear", &[("M", m), ("K", 72), ("N", 300)], 1, 0);
    }
    // Fewer than two 128 × 128 tiles per SM: the `wgmma: 1` tile stays.
    let p = same_bits(LINEAR, "linear", &[("M", 200), ("K", 72), ("N", 300)], 4, 0);
    assert!(
        p.kernels.values().any(|k| k.schedule.contains("wgmma: 1")),
        "the warpgroup tile"
    );
}

#[test]
fn pingpong_fused_epilogues_match_mma_sync_bits() {
    // Bias, silu, residual and the cast in the staged epilogue (a loop: silu calls the
    // math library), 2 × 3 tiles on 3 CTAs.
    same_bits(
        LINEAR,
        "linear_epilogue",
        &[("M", 130), ("K", 136), ("N", 264)],
        3,
        1,
    );
    // Qwen's gate projection and an f32 exp with a bias.
    let math = Src::File("tests/programs/gemm_math_epilogue.tsl");
    let dims = [("M", 200), ("K", 104), ("N", 390)];
    same_bits(math, "gate", &dims, 2, 1);
    let math = Src::File("tests/programs/gemm_math_epilogue.tsl");
    same_bits(math, "exp_bias", &dims, 2, 1);
    // SwiGLU: the up GEMM's epilogue multiplies by silu of the gate GEMM, loaded.
    let swiglu = Src::Text(
        "step swiglu(x: bf16[M, K], wg: bf16[N, K], wu: bf16[N, K]) -> bf16[M, N] {\n    silu(x @ wg^T) * (x @ wu^T)\n}\n",
    );
    same_bits(
        swiglu,
        "swiglu",
        &[("M", 150), ("K", 200), ("N", 260)],
        2,
        2,
    );
    // An f32 result of widened operands.
    let widened = Src::Text(
        "step widened(x: bf16[M, K], w: bf16[N, K]) -> f32[M, N] {\n    f32(x) @ f32(w)^T\n}\n",
    );
    same_bits(
        widened,
        "widened",
        &[("M", 150), ("K", 72), ("N", 260)],
        2,
        1,
    );
}

#[test]
fn pingpong_row_epilogue_matches_mma_sync_bits() {
    // The QK-norm + RoPE row epilogue over whole heads of 128 (the tile's width).
    same_bits(
        Src::File("tests/programs/row_epilogue.tsl"),
        "norm_rope",
        &[("T", 200), ("K", 64), ("N", 512), ("H", 4), ("D", 128)],
        2,
        1,
    );
    // Heads of 64: two a tile.
    same_bits(
        Src::File("tests/programs/row_epilogue.tsl"),
        "norm_rope",
        &[("T", 130), ("K", 64), ("N", 384), ("H", 6), ("D", 64)],
        2,
        1,
    );
    // Heads of 256 do not fit a 128-wide tile: the non-persistent tile computes them.
    same_bits(
        Src::File("tests/programs/row_epilogue.tsl"),
        "norm_rope",
        &[("T", 200), ("K", 64), ("N", 512), ("H", 2), ("D", 256)],
        1,
        0,
    );
}

#[test]
fn a_qwen3_layer_with_pingpong_projections_matches_mma_sync_bits() {
    // As tests/wgmma.rs: q, k, v, gate and up take the warpgroup tile at hidden 64.
    same_bits(
        Src::File("tests/programs/layer_small.tsl"),
        "qwen3",
        &[("T", 260)],
        1,
        5,
    );
}

/// The tile's text is `wgmma: pingpong, ctas: N`; it reads back to the same schedules, and
/// the reader refuses `ctas` on another tile.
#[test]
fn the_pingpong_tile_round_trips_as_text() {
    use tessel_passes::pipeline::{pass, run_passes, Ir};
    let g = checked(&LINEAR, "linear", &[("M", 300), ("K", 600), ("N", 300)]);
    let Ir::Scheduled(g, f, s) =
        run_passes(&g, &options(sms(4), true), pass("schedule"), &mut |_, _| {})
            .expect("schedules")
    else {
        panic!("stopped after schedule")
    };
    let text = tessel_ir::text::write_graph(&g, Some(&f), Some(&s));
    assert!(
        text.contains("bm: 128, bn: 128, bk: 64, warps_m: 8, warps_n: 1, stages: 4")
            && text.contains("min_ctas_per_sm: 1, wgmma: pingpong, ctas: 4 }"),
        "{text}"
    );
    let (g2, f2, s2) = tessel_ir::text::read_graph(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((g2, f2, s2), (g, f, s));
    let bad = text.replace("wgmma: pingpong, ctas: 4", "wgmma: 1, ctas: 4");
    let e = tessel_ir::text::read_graph(&bad).expect_err("ctas on wgmma: 1");
    assert!(e.to_string().contains("`ctas` is a field of"), "{e}");
    // More CTAs than tiles: the verifier refuses it.
    let many = text.replace("ctas: 4", "ctas: 10");
    let (g3, f3, s3) = tessel_ir::text::read_graph(&many).unwrap_or_else(|e| panic!("{e}"));
    let e = tessel_ir::verify::verify_graph(&g3, Some(&f3), Some(&s3)).expect_err("ctas 10");
    assert!(format!("{e:?}").contains("10 CTAs for 9 tiles"), "{e:?}");
}

/// The kernel's roles as the PTX shows them, and ptxas 13.0 assembles it for sm_90a
/// without spills, with its `setmaxnreg` honoured (`.minnctapersm 1` with `.reqntid 384`):
/// the Qwen3-14B shapes (the gate projection's silu, the projection's plain store, the
/// QK-norm + RoPE row epilogue).
#[test]
fn the_pingpong_tile_assembles_for_sm_90a_without_spills() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    let h100 = Target::h100();
    let header = h100.ptx_header();
    for (src, step, dims) in [
        (
            LINEAR,
            "linear",
            &[("M", 2048), ("K", 5120), ("N", 5120)][..],
        ),
        (
            Src::File("tests/programs/gemm_math_epilogue.tsl"),
            "gate",
            &[("M", 2048), ("K", 5120), ("N", 17408)][..],
        ),
        (
            Src::File("tests/programs/row_epilogue.tsl"),
            "norm_rope",
            &[("T", 2048), ("K", 5120), ("N", 5120), ("H", 40), ("D", 128)][..],
        ),
    ] {
        let p = compiled(&src, step, dims, &options(h100.clone(), true));
        assert_eq!(pingpong_ctas(&p), vec![h100.sm_count], "{step}");
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
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
            "bar.sync 1, 256;",
            "bar.arrive 2, 256;",
            "bar.sync 4, 128;",
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

/// How many statements of `body` (nested) satisfy `f`.
fn count(body: &[Stmt], f: &dyn Fn(&Stmt) -> bool) -> usize {
    body.iter()
        .map(|s| {
            usize::from(f(s))
                + match s {
                    Stmt::For { body, .. } => count(body, f),
                    Stmt::If {
                        then_body,
                        else_body,
                        ..
                    } => count(then_body, f) + count(else_body, f),
                    _ => 0,
                }
        })
        .sum()
}

/// The kernel's synchronisation as built: two EMPTY release sites (in a consumer's main
/// loop, for the slice before, and after it, for the last), and the turn's wait
/// (`bar.sync`) and hand-over (`bar.arrive`) at named barriers 1 and 2, one site per
/// consumer warpgroup's barrier each.
#[test]
fn the_pingpong_kernel_has_its_barriers() {
    let p = compiled(
        &LINEAR,
        "linear",
        &[("M", 300), ("K", 600), ("N", 300)],
        &options(sms(4), true),
    );
    let k = p.kernels.values().next().expect("one kernel");
    let arrives = count(&k.body, &|s| matches!(s, Stmt::MbarArrive { .. }));
    assert_eq!(arrives, 2, "EMPTY releases");
    let handover = count(&k.body, &|s| {
        matches!(
            s,
            Stmt::BarArrive {
                id: 1 | 2,
                threads: 256
            }
        )
    });
    assert_eq!(
        handover, 2,
        "the hand-over, one site per consumer's barrier"
    );
    let turn = count(&k.body, &|s| {
        matches!(
            s,
            Stmt::BarSync {
                id: 1 | 2,
                threads: 256
            }
        )
    });
    assert_eq!(turn, 2, "the turn wait, one site per consumer's barrier");
}

/// Removes every statement of `body` (nested) that `f` selects; returns how many.
fn remove(body: &mut Vec<Stmt>, f: &dyn Fn(&Stmt) -> bool) -> usize {
    let before = body.len();
    body.retain(|s| !f(s));
    let mut n = before - body.len();
    for s in body.iter_mut() {
        match s {
            Stmt::For { body, .. } => n += remove(body, f),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => n += remove(then_body, f) + remove(else_body, f),
            _ => {}
        }
    }
    n
}

/// Without the turn (the named barriers 1 and 2 between the consumers' main loops), the
/// second warpgroup waits on FULL barriers while the first still consumes the rounds
/// before: its parity waits run two phases ahead and take a phase meant for the other
/// (on the GPU, reads of a stage before its bytes land). The executor must not let that
/// pass: it ends in an error (a deadlock here), never in silently right bits.
#[test]
fn consumers_without_their_turn_are_reported() {
    let dims = [("M", 200), ("K", 200), ("N", 300)];
    let mut p = compiled(&LINEAR, "linear", &dims, &options(sms(2), true));
    let k = p.kernels.values_mut().next().expect("one kernel");
    let turn = |s: &Stmt| {
        matches!(
            s,
            Stmt::BarSync { id: 1 | 2, .. } | Stmt::BarArrive { id: 1 | 2, .. }
        )
    };
    assert_eq!(remove(&mut k.body, &turn), 4, "the turn's barriers");
    let ins: Vec<tessel_ref::Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, b))| tessel_ref::Tensor::random(p.buffers[*b].ty.clone(), 7 + i as u64))
        .collect();
    let Err(e) = tessel_ref::run_program(&p, &ins) else {
        panic!("consumers without their turn run")
    };
    assert!(e.to_string().contains("mbarrier"), "{e}");
}
