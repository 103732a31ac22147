//! tessel's two intermediate representations.
//!
//! The pipeline (design §2) carries a step through two levels:
//!
//! - the **graph IR** ([`graph`]): tensor values with a dtype and a concrete shape, one op
//!   each, in topological order. The `check` pass builds it from the AST; `decompose`, `fuse`
//!   and `schedule` annotate it with side tables ([`graph::Fusion`], [`graph::Schedules`]).
//! - the **kernel IR** ([`kernel`]): one kernel per fusion group with its launch geometry,
//!   parameters, shared-memory buffers and a structured body over scalar registers. It is the
//!   level the CPU executor runs and the PTX writer prints. A [`kernel::Program`] strings the
//!   kernels of a step together with the buffers they read and write.
//!
//! Entities (the arena indices) live in [`entities`]; dtypes and shapes in [`types`]. Each IR
//! has one textual form that prints and reads back ([`text`]) and a verifier ([`verify`]).
//! This crate depends on no pass and no back end.

pub mod builder;
pub mod entities;
pub mod graph;
pub mod kernel;
pub mod ranks;
pub mod text;
pub mod types;
pub mod verify;

pub use entities::*;
pub use types::{DType, Shape, TensorType};
