//! Opening a device: driver library check, primary context, one stream, device properties.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use crate::Error;

/// Static facts about the device, read once by [`Gpu::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties {
    /// The device's marketing name, e.g. `"NVIDIA H200"`.
    pub name: String,
    /// Compute capability `(major, minor)`, e.g. `(9, 0)` for Hopper.
    pub compute_capability: (u32, u32),
    /// Number of streaming multiprocessors (132 on an H200 SXM).
    pub sm_count: u32,
    /// Largest dynamic + static shared memory one CTA may opt in to, bytes
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`; 227 KiB on sm_90).
    pub max_shared_bytes_per_block_optin: u32,
    /// Shared memory of one SM, bytes
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`).
    pub max_shared_bytes_per_sm: u32,
    /// Most threads in one CTA (`CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`).
    pub max_threads_per_block: u32,
    /// Most threads resident on one SM
    /// (`CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`; 2048 on sm_90).
    pub max_threads_per_sm: u32,
    /// 32-bit registers of one SM
    /// (`CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR`; 65536 on sm_90).
    pub registers_per_sm: u32,
    /// L2 cache size, bytes.
    pub l2_bytes: u64,
    /// Device memory, bytes.
    pub total_memory_bytes: u64,
    /// CUDA version the driver supports, `(major, minor)` from `cuDriverGetVersion`
    /// (e.g. `(13, 0)` for driver 580).
    pub driver_version: (u32, u32),
}

impl Properties {
    /// The ptxas/PTX target name for this device, e.g. `"sm_90"`.
    pub fn arch(&self) -> String {
        let (major, minor) = self.compute_capability;
        format!("sm_{major}{minor}")
    }
}

struct Inner {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    checked: AtomicBool,
    properties: Properties,
}

/// One GPU: its primary context and one stream on which every operation of this crate is
/// ordered. Cheap to clone (shared handle); buffers and modules keep it alive.
#[derive(Clone)]
pub struct Gpu {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.inner.ctx.ordinal())
            .field("properties", &self.inner.properties)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// Opens device `ordinal` (0 is the first GPU).
    ///
    /// # Errors
    /// [`Error::NoGpu`] when the driver library (`libcuda.so`) cannot be loaded, the driver
    /// cannot be initialised, there is no such device, or cudarc panics while loading the
    /// driver (e.g. a driver too old for a CUDA 13.0 symbol). [`Error::Driver`] when a property
    /// query fails on an opened device.
    pub fn open(ordinal: usize) -> Result<Gpu, Error> {
        // cudarc panics if the library is absent; ask first so the normal no-GPU path is quiet.
        // SAFETY: only tries to dlopen the driver library by its usual names.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoGpu {
                reason: "the CUDA driver library (libcuda.so) was not found; \
                         is the NVIDIA driver installed?"
                    .to_owned(),
            });
        }
        // cudarc resolves each driver symbol lazily and panics if one is missing; that is an
        // unusable driver, not a bug here, so turn it into an error.
        let opened = panic::catch_unwind(AssertUnwindSafe(|| -> Result<_, Error> {
            let ctx = CudaContext::new(ordinal).map_err(|e| Error::NoGpu {
                reason: format!("could not open device {ordinal}: {e}"),
            })?;
            // One stream, ordered by us: cudarc's per-buffer event tracking would insert
            // cross-stream waits, which are illegal inside graph capture and cost time.
            // SAFETY: every buffer and launch of this Gpu uses `stream` only.
            unsafe { ctx.disable_event_tracking() };
            // The legacy default stream cannot be captured into a graph; make our own.
            let stream = ctx
                .new_stream()
                .map_err(Error::driver("creating a stream"))?;
            let properties = query_properties(&ctx)?;
            Ok((ctx, stream, properties))
        }));
        let (ctx, stream, properties) = match opened {
            Ok(result) => result?,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown panic");
                return Err(Error::NoGpu {
                    reason: format!("loading the CUDA driver failed: {message}"),
                });
            }
        };
        Ok(Gpu {
            inner: Arc::new(Inner {
                ctx,
                stream,
                checked: AtomicBool::new(true),
                properties,
            }),
        })
    }

    /// The number of devices the driver sees (0 without a driver).
    pub fn count() -> usize {
        // SAFETY: only tries to dlopen the driver library by its usual names.
        if !unsafe { sys::is_culib_present() } {
            return 0;
        }
        panic::catch_unwind(|| CudaContext::device_count().unwrap_or(0))
            .map_or(0, |n| n.max(0) as usize)
    }

    /// The device's properties, as read when it was opened.
    pub fn properties(&self) -> &Properties {
        &self.inner.properties
    }

    /// The device ordinal this was opened with.
    pub fn ordinal(&self) -> usize {
        self.inner.ctx.ordinal()
    }

    /// Turns checked mode on or off. When on (the default), every launch and cuBLAS call is
    /// followed by a stream synchronize so that a fault names the kernel that caused it. The
    /// timing functions turn it off while they time.
    pub fn set_checked(&self, checked: bool) {
        self.inner.checked.store(checked, Ordering::Relaxed);
    }

    /// Whether checked mode is on; see [`Gpu::set_checked`].
    pub fn is_checked(&self) -> bool {
        self.inner.checked.load(Ordering::Relaxed)
    }

    /// Waits until all work queued on this GPU's stream is done.
    ///
    /// # Errors
    /// [`Error::Driver`] with the first asynchronous error (e.g. a kernel fault).
    pub fn synchronize(&self) -> Result<(), Error> {
        self.inner
            .stream
            .synchronize()
            .map_err(Error::driver("synchronizing the stream"))
    }

    /// Free and total device memory, bytes.
    ///
    /// # Errors
    /// [`Error::Driver`] if the query fails.
    pub fn memory_info(&self) -> Result<(usize, usize), Error> {
        self.inner
            .ctx
            .mem_get_info()
            .map_err(Error::driver("querying free memory"))
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// Whether `self` and `other` are the same opened device (same stream).
    pub(crate) fn same(&self, other: &Gpu) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// In checked mode, synchronizes and blames `what` for any error.
    pub(crate) fn check_after(&self, what: &str) -> Result<(), Error> {
        if self.is_checked() {
            self.inner
                .stream
                .synchronize()
                .map_err(|source| Error::Kernel {
                    kernel: what.to_owned(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Runs `f` with checked mode off, restoring the previous setting afterwards.
    pub(crate) fn unchecked<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Restore<'a>(&'a Gpu, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.set_checked(self.1);
            }
        }
        let _restore = Restore(self, self.is_checked());
        self.set_checked(false);
        f()
    }
}

fn query_properties(ctx: &Arc<CudaContext>) -> Result<Properties, Error> {
    use sys::CUdevice_attribute as A;
    let attr = |a: A, what: &str| -> Result<u32, Error> {
        let value = ctx
            .attribute(a)
            .map_err(Error::driver(format!("querying {what}")))?;
        u32::try_from(value).map_err(|_| Error::NoGpu {
            reason: format!("the driver reported {what} = {value}"),
        })
    };
    let name = ctx
        .name()
        .map_err(Error::driver("querying the device name"))?;
    let compute_capability = (
        attr(
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "compute capability",
        )?,
        attr(
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "compute capability",
        )?,
    );
    let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?;
    let max_shared_bytes_per_block_optin = attr(
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        "opt-in shared memory per block",
    )?;
    let max_shared_bytes_per_sm = attr(
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        "shared memory per SM",
    )?;
    let max_threads_per_block = attr(
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        "threads per block",
    )?;
    let max_threads_per_sm = attr(
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        "threads per SM",
    )?;
    let registers_per_sm = attr(
        A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
        "registers per SM",
    )?;
    let l2_bytes = u64::from(attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size")?);
    let total_memory_bytes = ctx
        .total_mem()
        .map_err(Error::driver("querying device memory"))? as u64;

    let mut version: std::ffi::c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(Error::driver("querying the driver version"))?;
    // Encoded as 1000 * major + 10 * minor (CUDA driver API, cuDriverGetVersion).
    let version = u32::try_from(version).unwrap_or(0);
    let driver_version = (version / 1000, (version % 1000) / 10);

    Ok(Properties {
        name,
        compute_capability,
        sm_count,
        max_shared_bytes_per_block_optin,
        max_shared_bytes_per_sm,
        max_threads_per_block,
        max_threads_per_sm,
        registers_per_sm,
        l2_bytes,
        total_memory_bytes,
        driver_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU is usable here only with both the device node and the driver library.
    fn gpu_present() -> bool {
        // SAFETY: only tries to dlopen the driver library.
        std::path::Path::new("/dev/nvidia0").exists() && unsafe { sys::is_culib_present() }
    }

    #[test]
    fn open_without_gpu_is_an_error_not_a_panic() {
        let result = Gpu::open(0);
        if gpu_present() {
            // On a GPU machine either outcome is honest; reaching here means no panic.
            if let Err(e) = &result {
                eprintln!("GPU present but open failed: {e}");
            }
        } else {
            match result {
                Err(Error::NoGpu { reason }) => assert!(!reason.is_empty()),
                other => panic!("expected Error::NoGpu without a GPU, got {other:?}"),
            }
        }
    }

    #[test]
    fn out_of_range_ordinal_is_no_gpu() {
        match Gpu::open(4096) {
            Err(Error::NoGpu { .. }) => {}
            other => panic!("expected Error::NoGpu for ordinal 4096, got {other:?}"),
        }
    }

    #[test]
    fn arch_name() {
        let p = Properties {
            name: "NVIDIA H200".to_owned(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_shared_bytes_per_block_optin: 232_448,
            max_shared_bytes_per_sm: 233_472,
            max_threads_per_block: 1024,
            max_threads_per_sm: 2048,
            registers_per_sm: 65536,
            l2_bytes: 60 << 20,
            total_memory_bytes: 141 << 30,
            driver_version: (13, 0),
        };
        assert_eq!(p.arch(), "sm_90");
    }
}
