//! CPU references for tessel (design §5, §9).
//!
//! Two references check the compiler from both ends of the pipeline:
//!
//! - the **kernel-IR executor** ([`exec`]) runs the final kernel IR on host buffers with
//!   the GPU's exact semantics. The `exact` profile's contract is that the GPU's output bits
//!   equal the executor's; it is also how `tessel run` works without a GPU, and a CPU
//!   memcheck (every access is bounds- and alignment-checked).
//! - the **f64 oracle** ([`oracle`]) evaluates the graph IR, before any lowering, in f64
//!   with no intermediate rounding: the mathematical value the step approximates.
//!   [`compare`] measures how far an output is from it (abs/rel error, rel-RMS, ulp).
//!
//! Both exchange data as [`Tensor`]s: dense, row-major, little-endian host buffers
//! ([`tensor`]). This crate reads the IRs only; it never sees PTX or CUDA.

pub mod compare;
pub mod exec;
pub mod judge;
pub mod layout;
pub mod oracle;
pub mod ranks;
pub mod reference;
pub mod round;
pub mod tensor;

pub use compare::{bit_diff, error_stats, BitDiff, ErrorStats};
pub use exec::{run_kernel, run_program, run_program_with, ExecError, ExecOptions, ExecStats};
pub use judge::{judge, Verdict};
pub use oracle::{eval_graph, OracleError, OracleTensor};
pub use reference::{eval_reference, Bound, MatmulModel, Model, RefTensor};
pub use tensor::Tensor;
