//! Seeded batches of random programs through the whole pipeline on the CPU executor, in
//! every profile by turns: no wrong answer, no compile or run error, no panic, and every
//! program accepted by the front end. `scripts/fuzz.sh N` runs more (`--attention` for the
//! attention blocks).

use tessel_fuzz::{fuzz, gen::Config, Options, Summary};
use tessel_passes::Profile;

fn run(first: u64, count: u64, config: Config) -> Summary {
    let opts = Options {
        first,
        count,
        profiles: vec![Profile::Exact, Profile::Invariant, Profile::Fast],
        config,
        device: None,
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

/// 150 larger ones: more operations, longer rows, bigger matmuls (split-K, several warps
/// per row).
#[test]
fn larger_random_programs_give_right_answers() {
    assert_clean(&run(1_000_000, 150, Config::large()));
}
