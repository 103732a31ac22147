//! tessel-ptx: the PTX back end. Kernel IR in, PTX text out; `ptxas` checks what comes out.
//!
//! The pipeline's last step (design §2, §7): a kernel that has been through `expand-math`
//! and `legalize` is printed by [`writer`] as one `.entry`, one row of the op table per IR
//! op, every rounding explicit and nothing approximate. Registers and labels get canonical
//! names so that snapshots diff cleanly. [`ptxas`] runs NVIDIA's assembler on the
//! result and reads back register and spill counts.
//!
//! Data model: [`PtxOptions`] (the header), [`Writer`] (output + name table), the instruction
//! builder in `instr` (typed operands, suffix modifiers) through which all instruction text
//! goes, and [`PtxError`].

mod error;
mod instr;
mod names;
pub mod options;
pub mod ptxas;
pub mod writer;

pub use error::PtxError;
pub use options::PtxOptions;
pub use writer::{write_kernel, write_module, write_program, Writer};
