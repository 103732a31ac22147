//! The SIMT GEMV's unrolled main loop (`TileConfig::Gemv { unroll, .. }`) on the kernel-IR
//! executor: each program is scheduled (exact and fast), every GEMV tile's `unroll` is
//! set to 1, 2, 3 and 8 in turn, and the outputs must be the bits of the schedule's own
//! choice — each accumulator sees its chunks of k in order whatever the unroll, so any
//! difference is a chunk read twice, skipped or out of order, in the main loop or in the
//! remainder past its last whole group of `32 · vector · unroll`. K takes values with
//! and without a remainder, and odd K (vector 1); the chosen program's outputs are judged
//! by the reference as well.

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

/// An H200 of 4 SMs: the GEMV takes 4 columns a warp from N = 128 on (2 CTAs an SM).
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

/// `step` compiled with every GEMV tile's unroll set to `unroll`; also returns the unrolls
/// the schedule chose.
fn with_unroll(
    step: &str,
    dims: &[(&str, u64)],
    profile: Profile,
    unroll: u32,
) -> (Program, Vec<u32>) {
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
        if let Some(TileConfig::Gemv { unroll: u, .. }) = sch.as_mut().map(|s| &mut s.tile) {
            chosen.push(*u);
            *u = unroll;
        }
    }
    if let Err(e) = tessel_ir::verify::verify_graph(&g, Some(&f), Some(&s)) {
        panic!("{step}: the edited schedules: {e:?}");
    }
    let p = common::lower_scheduled(&g, &f, &s);
    (p, chosen)
}

/// Every unroll gives the schedule's bits; the schedule chose `want` for the one GEMV, and
/// its outputs pass the dtype-following reference (which catches what every unroll would
/// share: a chunk of k missed by both loops).
fn same_bits(step: &str, dims: &[(&str, u64)], profile: Profile, want: u32) {
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
    let (_, unrolls) = with_unroll(step, dims, profile, 1);
    assert_eq!(
        unrolls,
        [want],
        "{step} {dims:?} {profile:?}: the GEMV's unroll"
    );
    for u in [1, 2, 3, 8] {
        let (p, _) = with_unroll(step, dims, profile, u);
        common::assert_same_outputs(
            &p,
            &chosen,
            &format!("{step} {dims:?} {profile:?}: unroll {u} vs {want}"),
        );
    }
}

#[test]
fn gemv_unroll_keeps_the_bits() {
    // M = 1, 4 columns a warp: 20 / (1 + 4) = 4 chunks an iteration. K = 2816 is two
    // groups of 32·8·4 and three chunks of 256 past them (unroll 3 and 8: other splits).
    same_bits(
        "linear",
        &[("M", 1), ("K", 2816), ("N", 150)],
        Profile::Fast,
        4,
    );
    // M = 3 (the SIMT GEMV in exact), one column a warp at N = 37: 20 / 4 = 5; K odd,
    // so vector 1 and chunks of 32.
    same_bits(
        "linear",
        &[("M", 3), ("K", 1001), ("N", 37)],
        Profile::Exact,
        5,
    );
    // f32 operands in exact (vector 4), K smaller than one group: remainder only.
    same_bits(
        "linear_f32",
        &[("M", 2), ("K", 200), ("N", 9)],
        Profile::Exact,
        6,
    );
}
