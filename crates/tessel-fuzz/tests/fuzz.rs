//! A seeded batch of random programs through the whole pipeline on the CPU executor, in
//! every profile by turns: no wrong answer, no compile or run error, no panic, and (almost)
//! every program accepted by the front end. `scripts/fuzz.sh N` runs more.

use tessel_fuzz::{fuzz, gen::Config, Options};
use tessel_passes::Profile;

/// Programs per `cargo test`: a few hundred, within a minute on 2 cores.
const PROGRAMS: u64 = 300;

#[test]
fn random_programs_give_right_answers() {
    let opts = Options {
        first: 0,
        count: PROGRAMS,
        profiles: vec![Profile::Exact, Profile::Invariant, Profile::Fast],
        config: Config::default(),
        device: None,
        shrink_budget: 300,
    };
    let s = fuzz(&opts, |_, _| {});
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
    assert_eq!(s.passed, PROGRAMS);
}
