//! Every program under tests/programs/regressions/ — the wrong answers, errors and panics
//! found so far, each shrunk to a small program — compiled and run in the profiles its
//! header names, and judged by the reference: each must now pass.

use std::path::PathBuf;
use tessel_fuzz::corpus::run_file;
use tessel_fuzz::run::Outcome;

#[test]
fn every_regression_program_passes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/regressions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/programs/regressions exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tsl"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "the regression corpus went missing");
    let mut failures = Vec::new();
    let mut runs = 0;
    for f in &files {
        for (step, profile, outcome) in run_file(f).unwrap_or_else(|e| panic!("{e}")) {
            runs += 1;
            if outcome != Outcome::Pass {
                failures.push(format!(
                    "{} step {step} ({}): {}: {}",
                    f.display(),
                    profile.name(),
                    outcome.kind(),
                    outcome.message()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(runs >= 3 * files.len());
}
