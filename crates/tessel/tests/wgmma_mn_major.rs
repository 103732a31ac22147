//! The warpgroup GEMM tiles with an MN-major B: `x @ w` with `w` stored `[K, N]` (N
//! contiguous), as the backward's `dx = dy · W` reads a weight `[out, in]`. The tiles read
//! such a B through wgmma's transposed descriptors (`WgmmaMajor::Mn`): its stage of 64 K
//! rows in 128-byte column panels of 64 16-bit elements, loaded by TMA as one box a panel
//! (the ping-pong and `wgmma: tma` tiles, over a tensor map of `w`'s `[K, N]`) or by
//! `cp.async` (the `wgmma: 1` tile). Programs: tests/programs/matmul_mn.tsl, compiled in
//! `fast` for an H200 of a few SMs, so that the ping-pong tile applies at test sizes.
//!
//! Each output element is one accumulation over k in order from 0, in every tile and for
//! either major-ness of B — the executor's wgmma and `mma.sync` models are that fma chain —
//! so the outputs must be the bits of (1) the same product with the weight stored `[N, K]`
//! (a K-major B), (2) the same program compiled without wgmma (`mma.sync` tiles), and lie
//! within the bf16 bound of the f64 oracle. Any other result is a wrong element read: a
//! descriptor's leading or stride offset, a panel, a k step, a TMA box's coordinates or
//! its zero-filled edge past K or N. M, N and K are not multiples of the tiles.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::graph::Graph;
use tessel_ir::kernel::{Program, Stmt, WgmmaMajor};
use tessel_passes::target::{Features, Target};
use tessel_passes::{check, compile, Options, Profile};
use tessel_ref::{error_stats, eval_graph, run_program, Tensor};

const FILE: &str = "tests/programs/matmul_mn.tsl";

/// The bf16 bound of a 16-bit output against the oracle (rel-RMS 2^-8, as e2e.rs).
const BF16_REL_RMS: f64 = 1.0 / 256.0;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An H200 of `n` SMs.
fn sms(n: u32) -> Target {
    Target {
        sm_count: n,
        ..Target::h200()
    }
}

/// The same machine without wgmma: every GEMM on the `mma.sync` tiles.
fn without_wgmma(t: &Target) -> Target {
    Target {
        features: Features {
            wgmma: false,
            ..t.features
        },
        ..t.clone()
    }
}

fn checked(step: &str, dims: &[(&str, u64)]) -> Graph {
    let module = tessel_syntax::load::load(&root().join(FILE))
        .unwrap_or_else(|_| panic!("{FILE}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message))
}

/// `step` compiled in `fast` for `target`, with the ping-pong tile (`pingpong`) and the
/// `wgmma: tma` tile (`tma`) as asked.
fn compiled(
    step: &str,
    dims: &[(&str, u64)],
    target: &Target,
    (pingpong, tma): (bool, bool),
) -> Program {
    let opts = Options {
        verify: true,
        profile: Profile::Fast,
        target: target.clone(),
        wgmma_pingpong: pingpong,
        wgmma_tma: tma,
        merge_launches: true,
        dependent_launch: true,
        ..Default::default()
    };
    compile(&checked(step, dims), &opts)
        .unwrap_or_else(|e| panic!("{step} {dims:?}: {e}"))
        .program
}

/// Each kernel's schedule text.
fn schedules(p: &Program) -> Vec<String> {
    p.kernels.values().map(|k| k.schedule.clone()).collect()
}

/// The B major-ness of every wgmma of `p`, in kernel and statement order.
fn b_majors(p: &Program) -> Vec<WgmmaMajor> {
    fn walk(body: &[Stmt], out: &mut Vec<WgmmaMajor>) {
        for s in body {
            match s {
                Stmt::Wgmma { b_major, .. } => out.push(*b_major),
                Stmt::For { body, .. } => walk(body, out),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    walk(then_body, out);
                    walk(else_body, out);
                }
                _ => {}
            }
        }
    }
    let mut v = Vec::new();
    for k in p.kernels.values() {
        walk(&k.body, &mut v);
    }
    v
}

/// `w` `[K, N]` stored as `[N, K]` (its transpose, K contiguous), for 2-byte elements.
fn transposed(w: &Tensor) -> Tensor {
    let [k, n] = w.ty.shape.0[..] else {
        panic!("a matrix")
    };
    let (k, n) = (k as usize, n as usize);
    let mut t = w.clone();
    t.ty.shape.0 = vec![n as u64, k as u64];
    for r in 0..k {
        for c in 0..n {
            let (src, dst) = (2 * (r * n + c), 2 * (c * k + r));
            t.data[dst..dst + 2].copy_from_slice(&w.data[src..src + 2]);
        }
    }
    t
}

/// Runs `p` on seeded inputs and checks every output against the oracle of `step`: no NaN
/// the oracle lacks, rel-RMS within the bf16 bound. Returns the inputs and outputs.
fn within_the_oracle(p: &Program, step: &str, dims: &[(&str, u64)]) -> (Vec<Tensor>, Vec<Tensor>) {
    let ins = common::seeded_inputs(p);
    let got = run_program(p, &ins).unwrap_or_else(|e| panic!("{step} {dims:?}: executor: {e}"));
    let g = tessel_passes::grad::run(&checked(step, dims)).expect("differentiates");
    let want = eval_graph(&g, &ins).expect("oracle");
    for (i, (name, _)) in p.outputs.iter().enumerate() {
        let s = error_stats(&got[i], &want[i]).expect("stats");
        assert_eq!(s.nan_mismatch, 0, "{step} {dims:?} {name}: NaN mismatch");
        assert!(
            s.rel_rms <= BF16_REL_RMS,
            "{step} {dims:?} {name}: rel-RMS {} against the oracle",
            s.rel_rms
        );
    }
    (ins, got)
}

/// `x @ w` (w `[K, N]`) on `target` with the tiles `flags` ask for: the schedule must be
/// `want` (a piece of the kernel's schedule text) with an MN-major B; the outputs within the
/// oracle's bound and the bits of `x @ wt^T` with `wt` = `wᵀ` stored `[N, K]` (same tile,
/// K-major B) and of the `mma.sync` program.
fn xw_case(dims: (u64, u64, u64), target: &Target, flags: (bool, bool), want: &str) {
    let (m, k, n) = dims;
    let dims = [("M", m), ("K", k), ("N", n)];
    let what = format!("x @ w, {dims:?}, {} SMs, {want}", target.sm_count);
    let p = compiled("xw", &dims, target, flags);
    let sch = schedules(&p);
    assert!(sch.len() == 1 && sch[0].contains(want), "{what}: {sch:?}");
    let majors = b_majors(&p);
    assert!(
        !majors.is_empty() && majors.iter().all(|&m| m == WgmmaMajor::Mn),
        "{what}: {majors:?}"
    );
    let (ins, got) = within_the_oracle(&p, "xw", &dims);

    // The weight stored [N, K]: a warpgroup tile reading B K-major (the same tile, except
    // where B's rows of N elements are no tensor map's and its K rows are).
    let pt = compiled("xwt", &dims, target, flags);
    let majors_t = b_majors(&pt);
    assert!(
        !majors_t.is_empty() && majors_t.iter().all(|&m| m == WgmmaMajor::K),
        "{what}: K-major {:?}",
        schedules(&pt)
    );
    let ins_t = vec![ins[0].clone(), transposed(&ins[1])];
    let got_t = run_program(&pt, &ins_t).unwrap_or_else(|e| panic!("{what}: K-major: {e}"));
    assert!(
        got[0].data == got_t[0].data,
        "{what}: not the K-major B's bits"
    );

    // The mma.sync tiles.
    let ps = compiled("xw", &dims, &without_wgmma(target), flags);
    assert!(b_majors(&ps).is_empty(), "{what}: wgmma without wgmma");
    common::assert_same_outputs(&p, &ps, &format!("{what}, against mma.sync"));
}

#[test]
fn pingpong_reads_an_mn_major_b_with_k_major_bits() {
    // 3 × 2 tiles of 128 × 128 on 2 CTAs; K = 136: three slices, the last 8 rows of K and
    // 56 zero-filled; N = 200: the second column tile's second panel 8 columns wide.
    xw_case(
        (300, 136, 200),
        &sms(2),
        (true, false),
        "wgmma: pingpong, ctas: 2",
    );
    // 3 × 3 tiles on 4 CTAs, K of 10 slices through 4 stages: the ring wraps across tiles.
    xw_case(
        (300, 600, 264),
        &sms(4),
        (true, false),
        "wgmma: pingpong, ctas: 4",
    );
    // M one row past a tile, K one k step past a slice, N past a tile by one panel's chunk.
    xw_case(
        (129, 80, 264),
        &sms(1),
        (true, false),
        "wgmma: pingpong, ctas: 1",
    );
}

#[test]
fn the_warpgroup_tiles_read_an_mn_major_b_with_k_major_bits() {
    // `wgmma: 1` (cp.async into the panels): 128 × 256 over 4 panels, and 128 × 128.
    xw_case((300, 136, 520), &sms(1), (false, false), "wgmma: 1");
    xw_case((200, 200, 200), &sms(3), (false, false), "wgmma: 1");
    // `wgmma: tma`: 128 × 256, four TMA boxes of a B stage.
    xw_case((300, 136, 520), &sms(1), (false, true), "wgmma: tma");
    // Its split tail: 3 × 3 tiles on 6 SMs, the last column tile's three as halves of
    // 128 × 128, two TMA boxes (panels) of a B stage each.
    xw_case(
        (300, 136, 768),
        &sms(6),
        (false, true),
        "wgmma: tma, tail: 3 }",
    );
}

/// Rows of an odd number of 16-bit elements are no tensor map's (16-byte strides) and no
/// 16-byte copy's: the `wgmma: 1` tile copies them element by element into the panels.
#[test]
fn an_mn_major_b_of_unaligned_rows_takes_the_warpgroup_tile() {
    xw_case((300, 136, 201), &sms(1), (true, false), "wgmma: 1");
}

/// The epilogues, f16, widened operands and a linear layer's dx = dy · W on the ping-pong
/// tile: the bits of `mma.sync`, within the oracle's bound.
#[test]
fn mn_major_b_epilogues_and_the_backward_match_mma_sync_bits() {
    let t = sms(2);
    for (step, dims, tiles) in [
        ("xw_epilogue", [("M", 300), ("K", 136), ("N", 200)], 1),
        ("xw_widened", [("M", 300), ("K", 72), ("N", 264)], 1),
        // dx = dy · W: M = 300, the product's N = K = 264 and K = N = 200.
        ("linear_grads", [("M", 300), ("K", 264), ("N", 200)], 1),
    ] {
        let p = compiled(step, &dims, &t, (true, false));
        let pingpong: Vec<String> = schedules(&p)
            .into_iter()
            .filter(|s| s.contains("wgmma: pingpong"))
            .collect();
        assert_eq!(pingpong.len(), tiles, "{step}: {:?}", schedules(&p));
        assert!(b_majors(&p).contains(&WgmmaMajor::Mn), "{step}");
        within_the_oracle(&p, step, &dims);
        let s = compiled(step, &dims, &without_wgmma(&t), (true, false));
        common::assert_same_outputs(&p, &s, &format!("{step} {dims:?}, against mma.sync"));
    }
}

/// wgmma transposes B only for 16-bit inputs: an f32 `x @ w` keeps the `mma.sync` tile.
#[test]
fn an_f32_mn_major_b_keeps_mma_sync() {
    let src = "step f(x: f32[M, K], w: f32[K, N]) -> f32[M, N] {\n    x @ w\n}\n";
    let module = tessel_syntax::parse(src).expect("parses");
    let dims: BTreeMap<String, u64> = [("M", 2048), ("K", 512), ("N", 1024)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let g = check::run(&module, "f", &dims).expect("checks");
    let opts = Options {
        verify: true,
        profile: Profile::Fast,
        target: Target::h100(),
        ..Default::default()
    };
    let p = compile(&g, &opts).expect("compiles").program;
    assert!(b_majors(&p).is_empty(), "{:?}", schedules(&p));
}

/// ptxas 13.0 assembles the Qwen3-14B-sized dx = dy · W (T = 2048, 5120 × 5120) on the
/// ping-pong tile for sm_90a without spills, its wgmma reading B transposed (`imm-trans-b`
/// 1, the last immediate).
#[test]
fn the_mn_major_pingpong_tile_assembles_for_sm_90a_without_spills() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    let h100 = Target::h100();
    let header = h100.ptx_header();
    let p = compiled(
        "xw",
        &[("M", 2048), ("K", 5120), ("N", 5120)],
        &h100,
        (true, false),
    );
    assert!(schedules(&p)[0].contains("wgmma: pingpong, ctas: 132"));
    let ks: Vec<_> = p.kernels.values().collect();
    let text = tessel_ptx::write_module(
        &ks,
        &tessel_ptx::PtxOptions::with_header(header.version, &header.target),
    )
    .expect("ptx");
    let wgmma: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("wgmma.mma_async"))
        .collect();
    assert_eq!(wgmma.len(), 8, "two blocks × four k steps");
    assert!(
        wgmma
            .iter()
            .all(|l| l.trim_end().ends_with("1, 1, 1, 0, 1;")),
        "{wgmma:?}"
    );
    let Some(ptxas) = &ptxas else { return };
    let report = ptxas
        .assemble(&text, &header.target)
        .unwrap_or_else(|e| panic!("ptxas rejected the PTX: {e}"));
    assert!(
        !report.log.contains("setmaxnreg' ignored"),
        "{}",
        report.log
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    for kr in report.kernels() {
        assert!(!kr.spills(), "{} spills: {kr:?}", kr.name);
        eprintln!(
            "ptxas sm_90a: x @ w {}: {} registers at entry",
            kr.name, kr.registers
        );
    }
}
