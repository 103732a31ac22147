//! `tessel fuzz`: random well-typed programs through the whole pipeline, judged by the
//! dtype-following reference on the CPU executor and, with a GPU, the GPU's output against
//! the executor bit for bit (or against the reference where tensor cores run). Failures are
//! shrunk and, with `--save DIR`, written there as regression programs
//! (tests/programs/regressions/ is where the tests read them).

use crate::device;
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use tessel_fuzz::{fuzz as run_fuzz, gen::Config, Options};
use tessel_ir::kernel::Program;
use tessel_passes::Profile;
use tessel_ref::Tensor;

/// What `tessel fuzz` does (see `main.rs` for the flags).
pub struct FuzzArgs {
    pub count: u64,
    pub seed: u64,
    pub profiles: Vec<Profile>,
    pub cpu: bool,
    pub save: Option<PathBuf>,
    pub large: bool,
    pub attention: bool,
    /// Gradient programs, judged against finite differences too (tessel-fuzz
    /// `gen::Config::grad`, `fd`).
    pub grad: bool,
    /// Compile for the target with this many SMs (`--sm-count`).
    pub sm_count: Option<u32>,
    /// Without a GPU, compile for a target with wgmma, so that attention takes the
    /// warpgroup tile where it can serve (`--wgmma-attention`).
    pub wgmma_attention: bool,
    /// On a GPU, keep attention on the mma.sync tile (`--no-wgmma-attention`).
    pub no_wgmma_attention: bool,
}

/// Runs the fuzzer; false if it found a defect or a program the front end refused.
///
/// Errors: seeds past u64 (`--seed` + `--count`), and an unwritable `--save` directory is
/// reported per finding without stopping the run.
pub fn fuzz(a: &FuzzArgs) -> Result<bool> {
    if a.seed.checked_add(a.count).is_none() {
        anyhow::bail!(
            "--seed {} with --count {}: the seeds would run past 2^64 - 1",
            a.seed,
            a.count
        );
    }
    let gpu = device::gpu_unless(a.cpu);
    match &gpu {
        Ok(g) => println!(
            "device: {} (GPU): each program's GPU output against the executor's",
            g.properties().name
        ),
        Err(why) => println!("device: CPU kernel-IR executor only ({why})"),
    }
    let mut target = match &gpu {
        Ok(g) => device::target_of(g.properties()),
        Err(_) => tessel_passes::Target::h200(),
    };
    if let Some(n) = a.sm_count {
        target.sm_count = n;
        println!("target: compiled as if it had {n} SMs (--sm-count)");
    }
    let run_on_gpu = |p: &Program, inputs: &[Tensor]| -> Result<device::GpuRuns, String> {
        let g = gpu.as_ref().map_err(|e| e.clone())?;
        device::run_checked_and_graph(g, p, &target.ptx_header(), inputs)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    };
    // Without a GPU, `--sm-count` and `--wgmma-attention` still need the fuzzer to
    // compile for its target, and nothing to run beside the executor.
    let device = match (&gpu, a.sm_count.is_some() || a.wgmma_attention) {
        (Ok(_), _) => Some(tessel_fuzz::run::Device {
            target: &target,
            run: Some(&run_on_gpu),
            wgmma_attention: !a.no_wgmma_attention,
            wgmma_pingpong: true,
            wgmma_tma: true,
        }),
        (Err(_), true) => Some(tessel_fuzz::run::Device {
            target: &target,
            run: None,
            wgmma_attention: a.wgmma_attention,
            wgmma_pingpong: true,
            wgmma_tma: true,
        }),
        (Err(_), false) => None,
    };
    let config = match (a.attention, a.large) {
        (true, _) if a.grad => Config::grad_attention(),
        _ if a.grad => {
            let mut c = Config::grad();
            if a.large {
                c.max_lets = 10;
                c.max_numel *= 4;
                c.max_fmas *= 8;
            }
            c
        }
        (true, large) => {
            let mut c = Config::attention();
            if large {
                c.max_fmas *= 4;
            }
            c
        }
        (false, true) => Config::large(),
        (false, false) => Config::default(),
    };
    let opts = Options {
        first: a.seed,
        count: a.count,
        profiles: a.profiles.clone(),
        config,
        device,
        shrink_budget: 400,
    };
    let names: Vec<&str> = a.profiles.iter().map(|p| p.name()).collect();
    println!(
        "fuzz: seeds {}..{}, profiles {} by turns{}{}",
        a.seed,
        a.seed + a.count,
        names.join(", "),
        match (a.grad, a.attention) {
            (true, true) => ", gradient programs around attention blocks (also judged against finite differences)",
            (true, false) => ", gradient programs (also judged against finite differences)",
            (false, true) => ", attention blocks",
            (false, false) => "",
        },
        if a.large { ", large programs" } else { "" }
    );
    let pb = ProgressBar::new(a.count);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} programs ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // A panic inside a case is caught and reported as a finding; keep its message off
    // the terminal while the shrinker provokes it again and again.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let s = run_fuzz(&opts, |_, s| {
        pb.inc(1);
        pb.set_message(format!("{} defects", s.findings.len()));
    });
    std::panic::set_hook(hook);
    pb.finish_and_clear();
    let mut saved_all = true;
    for f in &s.findings {
        println!(
            "\nseed {} ({} profile): {}: {}",
            f.seed,
            f.profile.name(),
            f.outcome.kind(),
            f.outcome.message()
        );
        let src = f.regression_source();
        println!("shrunk to:\n{src}");
        if let Some(dir) = &a.save {
            let kind = f.outcome.kind().replace(' ', "_");
            let path = dir.join(format!("fuzz_{}_{kind}.tsl", f.seed));
            match crate::paths::write_file("--save", &path, &src) {
                Ok(()) => println!("saved {}", path.display()),
                Err(e) => {
                    println!("error: {e:#}");
                    saved_all = false;
                }
            }
        }
    }
    for (seed, msg) in s.rejected.iter().take(10) {
        println!(
            "seed {seed}: refused by the front end (a generator bug or a language one): {msg}"
        );
    }
    println!(
        "fuzz: {} programs: {} passed, {} refused by the front end, {} defects ({} wrong answers); {} with a fused attention kernel, {} of them computing q in its prologue; {} with a GEMM computing whole rows in its epilogue, {} with an update computing its rows' reductions, {} with a wgmma GEMM ({} on the TMA tile, {} of them splitting its last wave, {} on the ping-pong tile), {} with a wgmma attention, {} with kernels merged into one launch",
        s.programs,
        s.passed,
        s.rejected.len(),
        s.findings.len(),
        s.findings
            .iter()
            .filter(|f| matches!(f.outcome, tessel_fuzz::run::Outcome::Fail(_)))
            .count(),
        s.fused_attention,
        s.q_prologue,
        s.row_epilogue,
        s.update_rows,
        s.wgmma,
        s.wgmma_tma,
        s.wgmma_tma_tail,
        s.wgmma_pingpong,
        s.wgmma_attention,
        s.merged_launches
    );
    if a.grad {
        println!(
            "fuzz: gradients: {} elements and directions compared with finite differences, {} not compared (the forward not smooth within the step there, or its differences not converging)",
            s.fd_checked, s.fd_inconclusive
        );
    }
    Ok(s.findings.is_empty() && s.rejected.is_empty() && saved_all)
}

/// `tessel fuzz --tp`: `count` random transformer blocks from seed `seed`
/// (tessel-fuzz `tp::tp_program`), each run as ranks at 1, 2 and 4 on the CPU executor in
/// exact and invariant by turns — and, with a GPU (not `cpu`), on the GPU too (NCCL with a
/// GPU per rank, else every rank on GPU 0 in turn): the same bits at every world size
/// there, and in exact the executor's. False if any output differs or a block fails to
/// partition, compile or run. With `save`, each failing block is written there as a
/// tensor-parallel regression file (tessel-fuzz `corpus::tp_regression_source`, replayed
/// by the regression test as ranks at the same world sizes).
pub fn fuzz_tp(count: u64, seed: u64, cpu: bool, save: Option<&Path>) -> Result<bool> {
    use tessel_fuzz::corpus::tp_regression_source;
    use tessel_fuzz::tp::{tp_case_on, tp_program, TpOutcome};
    if seed.checked_add(count).is_none() {
        anyhow::bail!("--seed {seed} with --count {count}: the seeds would run past 2^64 - 1");
    }
    let gpu = device::gpu_unless(cpu);
    match &gpu {
        Ok(g) => println!(
            "tensor-parallel blocks: ranks at 1, 2 and 4 on the CPU executor and on {} (GPU), bits compared",
            g.properties().name
        ),
        Err(why) => println!(
            "tensor-parallel blocks on the CPU executor ({why}): ranks at 1, 2 and 4, bits compared"
        ),
    }
    let run_on_gpu = |ranks: &[tessel_ir::ranks::Rank<Program>], whole: &[Tensor]| {
        let (t, _) = crate::ranks::Transport::choose(ranks.len() as u32);
        // tessel-fuzz compiles the ranks for the H200 preset (`tp::tp_case_on`).
        crate::ranks::run(
            ranks,
            &tessel_passes::Target::h200().ptx_header(),
            whole,
            t,
            None,
        )
        .map(|(o, _)| o)
        .map_err(|e| format!("{e:#}"))
    };
    let device: Option<tessel_fuzz::tp::RunRanks> = match &gpu {
        Ok(_) => Some(&run_on_gpu),
        Err(_) => None,
    };
    let bar = ProgressBar::new(count);
    let mut bad = 0;
    let mut saved_all = true;
    const SIZES: [u32; 3] = [1, 2, 4];
    for s in seed..seed + count {
        let profile = [Profile::Exact, Profile::Invariant][(s % 2) as usize];
        let (src, what) = tp_program(s);
        let o = tp_case_on(&src, "fuzz", &[], profile, s, &SIZES, device);
        if o != TpOutcome::Same {
            bad += 1;
            bar.suspend(|| println!("seed {s} ({}, {what}): {o:?}\n{src}", profile.name()));
            if let Some(dir) = save {
                let file = tp_regression_source(&src, s, profile, &SIZES, &o);
                bar.suspend(|| saved_all &= save_finding(dir, s, tp_kind(&o), &file));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!(
        "{count} blocks, {} bit-identical at every world size, {bad} defects",
        count - bad
    );
    Ok(bad == 0 && saved_all)
}

/// A word for a tensor-parallel outcome, for the saved file's name.
fn tp_kind(o: &tessel_fuzz::tp::TpOutcome) -> &'static str {
    use tessel_fuzz::tp::TpOutcome;
    match o {
        TpOutcome::Differ(_) => "wrong_answer",
        TpOutcome::Error(_) => "error",
        TpOutcome::Rejected(_) => "rejected",
        TpOutcome::Unplanned(_) => "unplanned",
        TpOutcome::Replicated => "replicated",
        TpOutcome::Same => "pass",
    }
}

/// Writes a finding's regression file `src` to `dir` as `fuzz_tp_SEED_KIND.tsl`, saying
/// where; false (with the error printed) when it cannot be written.
fn save_finding(dir: &Path, seed: u64, kind: &str, src: &str) -> bool {
    let path = dir.join(format!("fuzz_tp_{seed}_{kind}.tsl"));
    match crate::paths::write_file("--save", &path, src) {
        Ok(()) => {
            println!("saved {}", path.display());
            true
        }
        Err(e) => {
            println!("error: {e:#}");
            false
        }
    }
}
