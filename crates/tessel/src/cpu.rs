//! Running a compiled [`Program`] on the CPU kernel-IR executor (`tessel-ref`), with a
//! progress bar: `run --cpu`, `check` and `invariance` without a GPU.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tessel_ir::kernel::Program;
use tessel_ref::{ExecOptions, Tensor};

/// A bar over the CTAs the executor runs. It stays hidden until the executor reports how
/// many there are: drawn at length 0, indicatif shows a full bar at "0/0".
fn progress(total_hint: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} CTAs ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(total_hint.to_string());
    pb
}

/// Runs `p` on the CPU executor with a progress bar.
pub fn execute(p: &Program, inputs: &[Tensor], what: &str) -> Result<Vec<Tensor>> {
    let pb = progress(what);
    let cb = |done: u64, total: u64| {
        if pb.length() != Some(total) {
            pb.set_length(total);
            if total > 0 && pb.is_hidden() {
                pb.set_draw_target(ProgressDrawTarget::stderr());
            }
        }
        pb.set_position(done);
    };
    let opts = ExecOptions {
        progress: Some(&cb),
    };
    if crate::repro::injected() == Some(crate::repro::Injected::Executor) {
        // A fault made on purpose, for the tests of the failure path (crate::repro).
        let kernel = p.kernels.values().next().map_or("", |k| k.name.as_str());
        return Err(tessel_driver::Error::Executor {
            step: p.name.clone(),
            error: tessel_ref::ExecError::Malformed {
                kernel: kernel.to_string(),
                msg: format!("a fault injected by {}", crate::repro::INJECT_ENV),
            },
        }
        .into());
    }
    let r = tessel_driver::execute(p, inputs, &opts);
    pb.finish_and_clear();
    Ok(r?)
}
