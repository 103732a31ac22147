//! The one error type of the runtime.

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;

/// Everything that can go wrong in tessel-cuda. Driver errors keep the CUDA error code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable GPU: no driver library, no device, the ordinal is out of range, or the driver
    /// could not be initialised. `reason` says which.
    #[error("no GPU available: {reason}")]
    NoGpu {
        /// Why no device could be opened.
        reason: String,
    },
    /// A CUDA shared library other than the driver (e.g. cuBLAS) could not be loaded.
    #[error("{library} is not available: no shared library found (check LD_LIBRARY_PATH)")]
    LibraryMissing {
        /// The library's short name, e.g. `"cublas"`.
        library: &'static str,
    },
    /// A driver call failed.
    #[error("CUDA driver error during {op}: {source}")]
    Driver {
        /// The operation, e.g. `"allocating 1048576 bytes"`.
        op: String,
        /// The driver's error code.
        source: DriverError,
    },
    /// The driver's JIT rejected a PTX module.
    #[error("the driver could not load the PTX module: {source}\n{log}")]
    Jit {
        /// The JIT's error log (empty if the driver gave none).
        log: String,
        /// The driver's error code.
        source: DriverError,
    },
    /// The module has no kernel of that name.
    #[error("no kernel named `{name}` in the module: {source}")]
    KernelNotFound {
        /// The kernel name asked for.
        name: String,
        /// The driver's error code.
        source: DriverError,
    },
    /// The launch itself was refused (bad geometry, too much shared memory, bad arguments).
    #[error("launching `{kernel}` failed: {source}")]
    Launch {
        /// The kernel's name.
        kernel: String,
        /// The driver's error code.
        source: DriverError,
    },
    /// The kernel faulted while running (found by the checked-mode synchronize). After an
    /// illegal address or similar fault the context is unusable; open a new [`crate::Gpu`].
    #[error("kernel `{kernel}` failed while running: {source}")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// The driver's error code.
        source: DriverError,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS error during {op}: {source}")]
    Cublas {
        /// The operation, e.g. `"gemm_bf16 M=16 N=5120 K=5120"`.
        op: String,
        /// cuBLAS's status code.
        source: CublasError,
    },
    /// An NCCL call failed.
    #[error("NCCL error during {op}: {message}")]
    Nccl {
        /// The operation, e.g. `"ncclAllGather of 1024 bytes"`.
        op: String,
        /// NCCL's result code, as cudarc names it.
        message: String,
    },
    /// A caller error detected before anything reached the GPU.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// External memory that does not fit a launch, found on the host.
    #[error("invalid external buffer: {0}")]
    External(#[from] crate::ExternalError),
    /// A tensor map that `cuTensorMapEncodeTiled` would reject, found on the host.
    #[error("invalid tensor map: {0}")]
    TensorMap(#[from] crate::TensorMapError),
}

impl Error {
    /// Wraps a driver error with the operation that produced it.
    pub(crate) fn driver(op: impl Into<String>) -> impl FnOnce(DriverError) -> Error {
        let op = op.into();
        move |source| Error::Driver { op, source }
    }
}
