//! A differential fuzzer for tessel: random well-typed programs, compiled and run like any
//! user's, judged by the dtype-following reference (design §9, "semantics").
//!
//! Hand-written tests missed wrong answers that random programs found at once (reductions
//! over different axes fused because two dims happened to be equal). So the tests generate
//! programs: [`gen`] builds them over every op of the language with shapes chosen to
//! provoke fusion and tiling mistakes, [`run`] takes each through parse → check → compile
//! → the CPU executor (and a GPU, given one) → [`tessel_ref::judge`], and [`shrink`]
//! reduces a failure to the smallest program that still fails the same way, which
//! [`corpus`] writes as a regression test (`tests/programs/regressions/`).
//!
//! A step that returns gradients (`grad(...)`, issue 18) is judged twice: its compiled
//! backward against the reference like any output, and the gradients themselves — the
//! `grad` pass's backward on the f64 oracle — against central finite differences of the
//! forward ([`fd`]). [`gen::Config::grad`] generates such programs.
//!
//! Entry points: [`fuzz`] (used by `cargo test`, `tessel fuzz` and `scripts/fuzz.sh`) and
//! [`corpus::run_file`] (the regression tests).

pub mod corpus;
pub mod fd;
pub mod gen;
pub mod program;
pub mod run;
pub mod shrink;
pub mod tp;

use run::{run_case, run_case_traced, Device, Outcome};
use tessel_passes::Profile;

/// What a [`fuzz`] run does.
pub struct Options<'a> {
    /// Seeds `first .. first + count`; seed `s` gives one program and its inputs.
    pub first: u64,
    pub count: u64,
    /// The profiles to compile in, by turns (seed `s` uses `profiles[s % len]`).
    pub profiles: Vec<Profile>,
    pub config: gen::Config,
    /// Runs a compiled program on a GPU (the CLI's), beside the executor.
    pub device: Option<Device<'a>>,
    /// Candidates the shrinker may try per failure.
    pub shrink_budget: usize,
}

/// One defect found: the program as generated and as shrunk, and what went wrong.
#[derive(Clone, Debug)]
pub struct Finding {
    pub seed: u64,
    pub profile: Profile,
    pub outcome: Outcome,
    pub program: program::Program,
    pub shrunk: program::Program,
    /// The shrunk program's outcome.
    pub shrunk_outcome: Outcome,
}

impl Finding {
    /// The shrunk program as a regression file (see [`corpus`]).
    pub fn regression_source(&self) -> String {
        corpus::regression_source(&self.shrunk, self.seed, self.profile, &self.shrunk_outcome)
    }
}

/// Counts of a [`fuzz`] run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub programs: u64,
    pub passed: u64,
    /// Programs the front end refused (the generator and the language disagree).
    pub rejected: Vec<(u64, String)>,
    pub findings: Vec<Finding>,
    /// Programs compiled with a fused attention kernel (a kernel whose schedule is
    /// `attention {..}`), and those of them whose attention computes q in its prologue.
    pub fused_attention: u64,
    pub q_prologue: u64,
    /// Programs with a GEMM that computes whole rows in its epilogue (fuse rule 8: a
    /// kernel whose reduction order names "the epilogue's rows").
    pub row_epilogue: u64,
    /// Programs with an update kernel that computes its rows' reductions (fuse rule 6: a
    /// kernel whose reduction order names "the rows' reductions").
    pub update_rows: u64,
    /// Programs with a warpgroup (wgmma) GEMM tile (an `mma` schedule with `wgmma: 1`,
    /// `wgmma: tma` or `wgmma: pingpong`).
    pub wgmma: u64,
    /// Of those, programs with the warp-specialised TMA tile (`wgmma: tma`), with that tile
    /// splitting its last wave (`wgmma: tma, tail: N`) and with the persistent ping-pong
    /// tile (`wgmma: pingpong`).
    pub wgmma_tma: u64,
    pub wgmma_tma_tail: u64,
    pub wgmma_pingpong: u64,
    /// Programs with a warpgroup attention tile (an `attention` schedule with `wgmma: 1`).
    pub wgmma_attention: u64,
    /// Programs with a kernel `merge-launches` made of several (a schedule starting `one
    /// launch of`).
    pub merged_launches: u64,
    /// Gradient programs ([`gen::Config::grad`]): the elements and directions of their
    /// gradients compared with finite differences ([`fd`]), and those not compared because
    /// the forward is not smooth within the step there, or the differences do not converge
    /// as a smooth function's do (the steps too coarse for it).
    pub fd_checked: u64,
    pub fd_inconclusive: u64,
}

/// Runs `opts.count` programs; `progress` is called after each with (done, summary so
/// far).
pub fn fuzz(opts: &Options, mut progress: impl FnMut(u64, &Summary)) -> Summary {
    let mut s = Summary::default();
    for i in 0..opts.count {
        let seed = opts.first + i;
        let profile = opts.profiles[(seed % opts.profiles.len() as u64) as usize];
        let p = gen::generate(seed, &opts.config);
        let (outcome, trace) = run_case_traced(
            &p.source_body(),
            "fuzz",
            &p.dim_bindings(),
            profile,
            seed,
            opts.device,
        );
        let schedules = &trace.schedules;
        if let Some(r) = &trace.fd {
            s.fd_checked += r.checked;
            s.fd_inconclusive += r.inconclusive;
        }
        let fused: Vec<&String> = schedules
            .iter()
            .filter(|k| k.starts_with("attention {"))
            .collect();
        s.fused_attention += !fused.is_empty() as u64;
        s.q_prologue += fused
            .iter()
            .any(|k| k.contains("q computed in the prologue")) as u64;
        s.row_epilogue += schedules.iter().any(|k| k.contains("the epilogue's rows")) as u64;
        s.update_rows += schedules.iter().any(|k| k.contains("the rows' reductions")) as u64;
        let gemm_with = |tile: &str| {
            schedules
                .iter()
                .any(|k| k.starts_with("mma {") && k.contains(tile)) as u64
        };
        s.wgmma += gemm_with("wgmma: ");
        s.wgmma_tma += gemm_with("wgmma: tma");
        s.wgmma_tma_tail += gemm_with("wgmma: tma, tail: ");
        s.wgmma_pingpong += gemm_with("wgmma: pingpong");
        s.wgmma_attention += schedules
            .iter()
            .any(|k| k.starts_with("attention {") && k.contains("wgmma: 1"))
            as u64;
        s.merged_launches += schedules.iter().any(|k| k.starts_with("one launch of")) as u64;
        s.programs += 1;
        match &outcome {
            Outcome::Pass => s.passed += 1,
            Outcome::Rejected(m) => s.rejected.push((seed, m.clone())),
            _ => {
                let kind = outcome.kind();
                let shrunk = shrink::shrink(&p, opts.shrink_budget, |c| {
                    case(c, profile, seed, opts.device).kind() == kind
                });
                let shrunk_outcome = case(&shrunk, profile, seed, opts.device);
                s.findings.push(Finding {
                    seed,
                    profile,
                    outcome,
                    program: p,
                    shrunk,
                    shrunk_outcome,
                });
            }
        }
        progress(i + 1, &s);
    }
    s
}

/// Runs one generated program.
pub fn case(p: &program::Program, profile: Profile, seed: u64, device: Option<Device>) -> Outcome {
    run_case(
        &p.source_body(),
        "fuzz",
        &p.dim_bindings(),
        profile,
        seed,
        device,
    )
}
