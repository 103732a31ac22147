//! Errors of the PTX writer. Every one is an internal error of the compiler: a legalized,
//! verified kernel always prints.

use std::fmt;

/// Why a kernel could not be printed as PTX.
#[derive(Debug, thiserror::Error)]
pub enum PtxError {
    /// The op has no row in the printer's table for these operand and result types. Either
    /// `legalize` did not run (an `Op::Math`, a `Select` into a predicate, an immediate stored
    /// or shuffled) or the kernel breaks an IR typing rule.
    #[error(
        "kernel `{kernel}`: no PTX instruction for `{op}` with {types} \
         (internal error: not legalized, or an ill-typed kernel)"
    )]
    NoRow {
        kernel: String,
        /// The op, spelled as its `Debug` form (`FAdd`, `ICmp(LtS)`, `ld.global V2`).
        op: String,
        /// Operand and result types, e.g. `(u32, imm f32) -> f32`.
        types: String,
    },
    /// The kernel is malformed in a way the printer cannot paper over: an undefined register
    /// or shared buffer, a parameter index out of range, an invalid entry name, a zero block.
    #[error("kernel `{kernel}`: {message}")]
    Malformed { kernel: String, message: String },
    /// The options ask for something the writer does not support.
    #[error("unsupported PTX option: {0}")]
    Options(String),
    /// Writing to the output failed.
    #[error("formatting PTX failed")]
    Fmt(#[from] fmt::Error),
}
