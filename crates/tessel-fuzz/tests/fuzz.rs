//! Seeded batches of random programs through the whole pipeline on the CPU executor, in
//! every profile by turns: no wrong answer, no compile or run error, no panic, and every
//! program accepted by the front end. `scripts/fuzz.sh N` runs more (`--attention` for the
//! attention blocks).

use tessel_fuzz::{fuzz, gen::Config, run::Device, Options, Summary};
use tessel_passes::{Profile, Target};

/// Seeds `first .. first + count` in every profile by turns, on the executor alone.
fn run(first: u64, count: u64, config: Config) -> Summary {
    let all = vec![Profile::Exact, Profile::Invariant, Profile::Fast];
    run_for(first, count, config, all, None)
}

/// The same in `profiles`, compiled for `device`'s target and options when given.
fn run_for(
    first: u64,
    count: u64,
    config: Config,
    profiles: Vec<Profile>,
    device: Option<Device>,
) -> Summary {
    let opts = Options {
        first,
        count,
        profiles,
        config,
        device,
        shrink_budget: 300,
    };
    fuzz(&opts, |_, _| {})
}

fn assert_clean(s: &Summary) {
    let mut report = String::new();
    for f in &s.findings {
        report += &format!(
            "\nseed {} ({}): {}\n{}\n",
            f.seed,
            f.profile.name(),
            f.outcome.kind(),
            f.regression_source()
        );
    }
    assert!(
        s.findings.is_empty(),
        "{} defects:{report}",
        s.findings.len()
    );
    // The generator follows the language's typing rules; a rejection is a disagreement.
    assert!(
        s.rejected.is_empty(),
        "{} programs rejected by the front end, first: {:?}",
        s.rejected.len(),
        s.rejected.first()
    );
    assert_eq!(s.passed, s.programs);
}

/// 2000 small programs (about 3 s on 2 cores in the test profile).
#[test]
fn random_programs_give_right_answers() {
    assert_clean(&run(0, 2000, Config::default()));
}

/// 150 larger ones compiled in `fast` for an H200 of one SM (`tessel fuzz --sm-count 1
/// --large`), the ping-pong and TMA GEMM tiles allowed, as that command allows them, so
/// that their projections (16-bit `x @ wᵀ` past 64 rows and columns) take the ping-pong
/// tile from two 128 × 128 tiles and the TMA tile below (or the plain warpgroup tile where
/// TMA cannot load them: K rows not whole 16-byte chunks): of seeds 2_000_000..2_000_150,
/// 19 programs get a warpgroup GEMM, 9 on the ping-pong tile and 3 on the TMA tile.
#[test]
fn larger_random_programs_on_a_one_sm_target_take_the_warpgroup_tiles() {
    let target = Target {
        sm_count: 1,
        ..Target::h200()
    };
    let device = Device {
        target: &target,
        run: None,
        wgmma_attention: false,
        wgmma_pingpong: true,
        wgmma_tma: true,
    };
    let s = run_for(
        2_000_000,
        150,
        Config::large(),
        vec![Profile::Fast],
        Some(device),
    );
    assert_clean(&s);
    assert!(
        s.wgmma >= 15 && s.wgmma_pingpong >= 6 && s.wgmma_tma >= 2,
        "{} programs with a wgmma GEMM, {} on the ping-pong tile, {} on the TMA tile",
        s.wgmma,
        s.wgmma_pingpong,
        s.wgmma_tma
    );
}

/// 300 larger ones compiled in `fast` for an H200 of two SMs (`tessel fuzz --sm-count 2
/// --large`), so that a GEMM of an odd number of 128 × 256 tiles (3 or more) leaves a last
/// wave of one tile, which the TMA tile splits in two halves on two CTAs (`wgmma: tma,
/// tail: 1`, taken before the ping-pong tile): of seeds 2_000_000..2_000_300, 28 programs
/// get a warpgroup GEMM, 18 on the TMA tile, 6 of them with a split tail.
#[test]
fn larger_random_programs_on_a_two_sm_target_split_the_tma_tiles_last_wave() {
    let target = Target {
        sm_count: 2,
        ..Target::h200()
    };
    let device = Device {
        target: &target,
        run: None,
        wgmma_attention: false,
        wgmma_pingpong: true,
        wgmma_tma: true,
    };
    let s = run_for(
        2_000_000,
        300,
        Config::large(),
        vec![Profile::Fast],
        Some(device),
    );
    assert_clean(&s);
    assert!(
        s.wgmma_tma >= 12 && s.wgmma_tma_tail >= 4,
        "{} programs on the TMA tile, {} of them with a split tail",
        s.wgmma_tma,
        s.wgmma_tma_tail
    );
}

/// 150 larger ones: more operations, longer rows, bigger matmuls (split-K, several warps
/// per row).
#[test]
fn larger_random_programs_give_right_answers() {
    assert_clean(&run(1_000_000, 150, Config::large()));
}

/// 60 programs built around an attention block (`Config::attention`: GQA, masks, lengths,
/// q computed in the prologue, a K projection with its row-wise chain, and the near misses
/// that must not fuse), about 5 s in the test profile. Besides right answers, the fused
/// kernels must be reached (a generator that never fuses proves nothing): of seeds 0..60
/// (40 of them in `invariant` or `fast`), 23 programs get a fused attention kernel, 10 of
/// those compute q in its prologue, and 2 compute K's rows in the projection's epilogue
/// (fuse rule 8). An earlier generator's seed 43 caught `decompose` merging an attention's
/// `q @ kᵀ` with the same product elsewhere
/// (tests/programs/regressions/attention_logits_merged_with_the_same_product.tsl).
#[test]
fn random_attention_blocks_give_right_answers() {
    let s = run(0, 60, Config::attention());
    assert_clean(&s);
    assert!(
        s.fused_attention >= 20 && s.q_prologue >= 8 && s.row_epilogue >= 1,
        "{} programs with a fused attention kernel, {} with q in its prologue, {} with a row epilogue",
        s.fused_attention,
        s.q_prologue,
        s.row_epilogue
    );
}
