//! The GPU a command runs on. Running a program on it is `tessel_driver::device`'s.

use tessel_cuda::Gpu;
pub use tessel_driver::device::*;

/// Opens the first GPU, or says why there is none.
pub fn open_gpu() -> std::result::Result<Gpu, String> {
    Gpu::open(0).map_err(|e| e.to_string())
}

/// The first GPU unless `cpu` (a command's `--cpu`), or why there is none.
pub fn gpu_unless(cpu: bool) -> std::result::Result<Gpu, String> {
    if cpu {
        Err("--cpu given".to_string())
    } else {
        open_gpu()
    }
}
