//! Reproducer bundles on the command line: `run` and `check` write one
//! (`tessel_driver::repro::write_bundle`) for every step that fails — an output the
//! reference rejects, a kernel or the executor failing at run time — and say where on
//! stderr.
//!
//! For the tests of that path without a GPU, `TESSEL_INJECT_FAULT` makes a failure happen
//! on purpose: `executor` makes the CPU executor's run fail as a fault would, `mismatch`
//! makes `check` corrupt the first element of the executor's first output before judging
//! it. Nothing else reads it.

use crate::{InputArgs, ReproArgs};
use std::path::PathBuf;
use tessel_driver::repro::{shell_quote, write_bundle, Failure, DEFAULT_DIR};
use tessel_driver::{Config, Source, Step};

/// The environment variable of the failures made on purpose (module docs).
pub const INJECT_ENV: &str = "TESSEL_INJECT_FAULT";

/// A failure made on purpose, for tests ([`INJECT_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// The CPU executor's run fails.
    Executor,
    /// `check` corrupts the executor's first output before judging it.
    Mismatch,
}

/// The failure [`INJECT_ENV`] asks for, if any.
pub fn injected() -> Option<Injected> {
    match std::env::var(INJECT_ENV).ok()?.as_str() {
        "executor" => Some(Injected::Executor),
        "mismatch" => Some(Injected::Mismatch),
        _ => None,
    }
}

impl ReproArgs {
    /// Writes the bundle of `step`, compiled from `src` with `config` and run on the inputs
    /// `in_args` made, which failed as `what` says, and prints its path on stderr; unless
    /// `--no-repro`. A bundle that cannot be written is a warning: the failure it would
    /// have recorded is what the command reports.
    pub fn write(
        &self,
        src: &Source,
        step: &Step,
        config: &Config,
        in_args: &InputArgs,
        what: String,
    ) {
        if self.no_repro {
            return;
        }
        let parent = self
            .repro_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
        let command: Vec<String> = std::env::args().map(|a| shell_quote(&a)).collect();
        let failure = Failure {
            inputs: &in_args.spec(),
            what,
            command: Some(command.join(" ")),
        };
        match write_bundle(src, step, config, &failure, &parent) {
            Ok(dir) => eprintln!("reproducer written to {}", dir.display()),
            Err(e) => eprintln!(
                "warning: the reproducer of step `{}` could not be written: {}",
                step.name,
                anyhow::Error::from(e)
                    .chain()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(": ")
            ),
        }
    }
}
