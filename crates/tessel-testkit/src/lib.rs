//! Test support for tessel's crates, used only as a `[dev-dependency]` (never published).
//!
//! What the tests of several crates share, written once:
//! - [`build`]: small helpers for writing kernel IR by hand (operands, parameters, a
//!   kernel header, address arithmetic, loads and stores);
//! - [`kernels`]: hand-built kernels that together use every op, width, space and
//!   control structure of the kernel IR (assembled by `tessel-ptx`'s tests, their PTX
//!   snapshotted there);
//! - [`mma`]: hand-built kernels for the tensor-core and async-copy statements, run on the
//!   executor (`tessel-ref`), assembled by ptxas (`tessel-ptx`) and run on the GPU
//!   (`tessel`'s `gpu_mma`), with their host-side inputs and references under `exec`;
//! - [`wgmma`]: a hand-built warpgroup GEMM (`wgmma`, descriptors, the async-proxy
//!   fence), run and assembled the same three ways;
//! - [`tma`]: a warp-specialised kernel fed by TMA loads through mbarriers (executor and
//!   ptxas sm_90a);
//! - [`ir`]: a graph, a kernel and a program that between them use every variant of every
//!   IR enum, and that verify (`tessel-ir`'s reader, writer and verifier tests);
//! - `host` (feature `exec`): host tensors and launch arguments for the executor and the
//!   GPU.
//!
//! Dependencies point one way: this crate depends on `tessel-ir` (and, with `exec`, on
//! `tessel-ref`), never on the crates whose tests only use it. `tessel-ir` and `tessel-ref`
//! list it as a dev-dependency, which makes a dev-dependency cycle. Cargo allows that, and
//! it is sound for *integration* tests (`tests/*.rs`, examples): they link the same library
//! build of `tessel-ir` that this crate links, so there is one copy of its types. It would
//! not be for unit tests (`#[cfg(test)]` inside `src/`): those compile the crate under test
//! a second time, and its types would differ from the ones this crate returns. So unit
//! tests in `tessel-ir` and `tessel-ref` do not use this crate.

pub mod build;
#[cfg(feature = "exec")]
pub mod host;
pub mod ir;
pub mod kernels;
pub mod mma;
pub mod tma;
pub mod wgmma;
