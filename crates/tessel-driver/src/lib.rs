//! tessel-driver: tessel as a library, between the passes and the programs that use them
//! (the `tessel` command, the end-to-end tests, the fuzzer, a Python binding).
//!
//! - [`Source::load`]: a `.tsl` file and the files it imports, parsed; diagnostics are
//!   rendered against the file each lies in.
//! - [`Source::compile_step`] / [`Source::compile_steps`]: `check` with the [`Config`]'s
//!   dims, the checkpoint tensors bound and validated ([`Weights`]), every pass run with its
//!   options (target, profile, schedule choices), the step's `grad`s differentiated for the
//!   references, and with tensor parallelism the plan and each rank's phases compiled: a
//!   [`Step`].
//! - [`device`]: a compiled program on the GPU (tessel-cuda): its PTX module loaded, its
//!   buffers allocated and uploaded, its launches run once or handed to the timers; or, on
//!   memory and a stream the caller owns (a framework's tensors), its buffers bound by name,
//!   dtype and shape ([`device::bind_external`]) and its launches enqueued
//!   ([`device::launch_external`]) under tessel-cuda's safety contract;
//!   [`execute`]: the same program on the CPU kernel-IR executor (tessel-ref).
//! - [`repro::write_bundle`]: a failing step's reproducer bundle (its sources, options,
//!   inputs' seeds, every IR stage, the PTX and the ptxas command) in one directory.
//! - [`make_inputs`]: a step's inputs in parameter order, bound by name from a checkpoint, a
//!   safetensors file, iota fills, or seeded random ([`InputSpec`]).
//!
//! - [`cache`]: compiled steps on disk, keyed by the sources, dims, options and compiler
//!   build, so that a second process does not compile a step again.
//!
//! - [`Source::grad_companion`] ([`companion`]): a `fn`'s forward step and its gradient step,
//!   as a source of their own (what `tessel.autograd` compiles).
//!
//! Errors are one typed [`Error`]: source diagnostics carry the diagnostics and their
//! rendered report; weights, compile and device errors keep their cause.

pub mod cache;
pub mod companion;
pub mod device;
mod error;
mod exec;
mod inputs;
pub mod repro;
mod source;
mod stages;
mod step;
pub mod weights;
pub mod words;

pub use error::{Error, RequestError, SourceDiagnostics, UnboundDims, WeightsError};
pub use exec::execute;
pub use inputs::{make_inputs, random_seed, st_dtype, write_safetensors, InputSpec};
pub use source::Source;
pub use stages::{stage_suffix, StageText};
pub use step::{Config, Step};
pub use weights::{StepWeights, Weights};
