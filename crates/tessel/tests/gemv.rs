//! The SIMT GEMV's unrolled main loop and its columns per warp (`TileConfig::Gemv {
//! unroll, columns, .. }`) on the kernel-IR executor: each program is scheduled (exact and
//! fast), every GEMV tile's `unroll` is set to 1, 2, 3 and 8 in turn, then its `columns` to
//! 1, 2 and 4, and the outputs must be the bits of the schedule's own choice — each
//! accumulator sees its chunks of k in order whatever the unroll and whichever warp holds
//! its column, so any difference is a chunk read twice, skipped or out of order, in the main
//! loop or in the remainder past its last whole group of `32 · vector · unroll`, or a column
//! computed by the wrong warp. K takes values with and without a remainder, and odd K
//! (vector 1); the chosen program's outputs are judged by the reference as well.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::graph::TileConfig;
use tessel_ir::kernel::Program;
use tessel_passes::pipeline::{pass, run_passes, Ir};
use tessel_passes::{check, compile, Options, Profile, Target};
use tessel_ref::judge::judge_step;
use tessel_ref::run_program;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn checked(step: &str, dims: &[(&str, u64)]) -> tessel_ir::graph::Graph {
    let file = "tests/programs/matmul.tsl";
    let module = tessel_syntax::load::load(&root().join(file))
        .unwrap_or_else(|_| panic!("{file}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message))
}

/// An H200 of 4 SMs: the GEMV takes 4 columns a warp from N = 497 on (32 CTAs, 8 an SM).
fn options(profile: Profile) -> Options {
    Options {
        verify: true,
        profile,
        target: Target {
            sm_count: 4,
            ..Target::h200()
        },
        ..Default::default()
    }
}

/// `step` compiled with every GEMV tile's unroll set to `unroll` and, if given, its columns
/// per warp to `columns`; also returns the (columns, unroll) the schedule chose.
fn with_unroll(
    step: &str,
    dims: &[(&str, u64)],
    profile: Profile,
    (columns, unroll): (Option<u32>, u32),
) -> (Program, Vec<(u32, u32)>) {
    let opts = options(profile);
    let Ir::Scheduled(g, f, mut s) = run_passes(
        &checked(step, dims),
        &opts,
        pass("schedule"),
        &mut |_, _| {},
    )
    .expect("schedules") else {
        panic!("stopped after schedule")
    };
    let mut chosen = Vec::new();
    for (_, sch) in s.iter_mut() {
        if let Some(TileConfig::Gemv {
            unroll: u,
            columns: c,
            ..
        }) = sch.as_mut().map(|s| &mut s.tile)
        {
            chosen.push((*c, *u));
            *u = unroll;
            *c = columns.unwrap_or(*c);
        }
    }
    if let Err(e) = tessel_ir::verify::verify_graph(&g, Some(&f), Some(&s)) {
        panic!("{step}: the edited schedules: {e:?}");
    }
    let p = common::lower_scheduled(&g, &f, &s, &opts);
    (p, chosen)
}

/// Every unroll and every count of columns a warp (1, 2, 4, those whose accumulators fit)
/// gives the schedule's bits; the schedule chose `want` (columns, unroll) for the one GEMV,
/// and its outputs pass the dtype-following reference (which catches what every unroll
/// would share: a chunk of k missed by both loops).
fn same_bits(step: &str, dims: &[(&str, u64)], profile: Profile, want: (u32, u32)) {
    let graph = checked(step, dims);
    let chosen = compile(&graph, &options(profile))
        .unwrap_or_else(|e| panic!("{step}: {e}"))
        .program;
    let ins = common::seeded_inputs(&chosen);
    let got = run_program(&chosen, &ins).expect("runs");
    for v in judge_step(&graph, &chosen, &ins, &got, None).expect("judged") {
        assert!(
            v.pass(),
            "{step} {dims:?} {profile:?}: {} {:?}",
            v.name,
            v.executor
        );
    }
    let (_, tiles) = with_unroll(step, dims, profile, (None, 1));
    assert_eq!(
        tiles,
        [want],
        "{step} {dims:?} {profile:?}: the GEMV's columns and unroll"
    );
    for u in [1, 2, 3, 8] {
        let (p, _) = with_unroll(step, dims, profile, (None, u));
        common::assert_same_outputs(
            &p,
            &chosen,
            &format!("{step} {dims:?} {profile:?}: unroll {u} vs {want:?}"),
        );
    }
    let m = dims.iter().find(|(d, _)| *d == "M").map_or(1, |(_, v)| *v);
    for c in [1u32, 2, 4].into_iter().filter(|&c| m * c as u64 <= 32) {
        let (p, _) = with_unroll(step, dims, profile, (Some(c), want.1));
        common::assert_same_outputs(
            &p,
            &chosen,
            &format!("{step} {dims:?} {profile:?}: {c} columns a warp vs {want:?}"),
        );
    }
}

#[test]
fn gemv_unroll_keeps_the_bits() {
    // M = 1: 4 columns a warp at N = 600 (38 CTAs, at least 8 an SM of the 4): 20 / (1 +
    // 4) = 4 chunks an iteration. K = 2816 is two groups of 32·8·4 and three chunks of 256
    // past them (unroll 3 and 8: other splits).
    same_bits(
        "linear",
        &[("M", 1), ("K", 2816), ("N", 600)],
        Profile::Fast,
        (4, 4),
    );
    // M = 1, N = 150: 1 column a warp (38 CTAs; 2 columns would give 19, under 8 an SM),
    // 20 / 2 = 10 chunks an iteration, at most 8.
    same_bits(
        "linear",
        &[("M", 1), ("K", 2816), ("N", 150)],
        Profile::Fast,
        (1, 8),
    );
    // M = 3 (the SIMT GEMV in exact), one column a warp at N = 37: 20 / 4 = 5; K odd,
    // so vector 1 and chunks of 32.
    same_bits(
        "linear",
        &[("M", 3), ("K", 1001), ("N", 37)],
        Profile::Exact,
        (1, 5),
    );
    // f32 operands in exact (vector 4), K smaller than one group: remainder only.
    same_bits(
        "linear_f32",
        &[("M", 2), ("K", 200), ("N", 9)],
        Profile::Exact,
        (1, 6),
    );
}
