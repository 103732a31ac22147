//! tessel-cuda: the runtime end of the pipeline. It takes PTX text and launch geometry, never
//! source or IR, and runs them on an NVIDIA GPU through cudarc's driver API.
//!
//! - [`Gpu`]: one device, one context, one stream; every operation is ordered on that stream.
//!   [`Gpu::open`] returns [`Error::NoGpu`] (never panics) on a machine without a driver or GPU.
//! - [`Buffer`]: untyped device bytes; upload, download, poison with a byte pattern.
//! - [`Module`]: PTX loaded by the driver's JIT; [`Module::launch`] runs one kernel.
//! - External memory ([`external`]): [`ExternalBuffer`] and [`ExternalStream`], device
//!   pointers and a stream tessel does not own (a framework's tensors and current stream),
//!   checked on the host ([`check_buffers`]) and launched on with [`Module::launch_on`];
//!   the module documents the safety contract.
//! - [`TensorMap`]: a TMA tensor map encoded on the host (`cuTensorMapEncodeTiled`) from a
//!   [`TiledMap`] checked first ([`TensorMapError`]), passed by value as [`Arg::TensorMap`].
//! - Timing: [`Gpu::time_graph`] (CUDA-graph replays between CUDA events, the benchmark
//!   method of design §10) and [`Gpu::time_events`] (plain launches); [`measure_copy_bandwidth`].
//! - [`Blas`]: cuBLAS GEMM baselines, row-major `C[M, N] = A[M, K] · B[N, K]^T`.
//!
//! Errors are checked after every launch: in checked mode (the default, see
//! [`Gpu::set_checked`]) the stream is synchronized after each launch so that a fault is
//! reported against the kernel that caused it.

mod bandwidth;
mod blas;
mod buffer;
mod error;
pub mod external;
mod gpu;
mod module;
pub mod nccl;
mod tensor_map;
mod timing;

pub use bandwidth::{measure_copy_bandwidth, Bandwidth};
pub use blas::{Blas, GemmType, Layout};
pub use buffer::Buffer;
pub use error::Error;
pub use external::{
    check_buffers, BufferRequirement, ExternalBuffer, ExternalError, ExternalStream,
};
pub use gpu::{Gpu, Properties};
pub use module::{Arg, Launch, Module};
pub use tensor_map::{TensorMap, TensorMapDtype, TensorMapError, TensorMapSwizzle, TiledMap};
pub use timing::{KernelCall, Timing};
