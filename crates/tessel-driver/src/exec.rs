//! Running a compiled program on the CPU kernel-IR executor (tessel-ref).

use crate::Error;
use tessel_ir::kernel::Program;
use tessel_ref::{run_program_with, ExecOptions, Tensor};

/// Runs `p` on the CPU executor on `inputs` (in `p.inputs`' order, each of its buffer's type)
/// and returns its outputs in `p.outputs`' order. `opts` may carry a progress callback.
///
/// # Errors
/// [`Error::Executor`]: inputs that do not match, a fault (an out-of-bounds or misaligned
/// access, an integer division by zero), or memory that cannot be had.
pub fn execute(p: &Program, inputs: &[Tensor], opts: &ExecOptions) -> Result<Vec<Tensor>, Error> {
    run_program_with(p, inputs, opts)
        .map(|(out, _)| out)
        .map_err(|error| Error::Executor {
            step: p.name.clone(),
            error,
        })
}
