//! Device memory and streams that tessel does not own: what a framework (PyTorch through the
//! Python package) hands over — its tensors' device pointers and its current stream — so
//! that a step runs on them with no copy and in order with the framework's own work.
//!
//! # Safety contract
//!
//! Whoever builds an [`ExternalBuffer`] or an [`ExternalStream`] (both `unsafe` to make)
//! promises, for as long as any launch that uses it may still run on the device:
//!
//! - **Ownership.** The memory and the stream belong to the caller. tessel never frees,
//!   resizes or synchronizes-and-destroys them; dropping an `ExternalBuffer` or
//!   `ExternalStream` does nothing.
//! - **Lifetime.** The allocation stays allocated until every kernel launched on it has
//!   finished — not merely until [`Module::launch_on`] returns, which only enqueues. With
//!   PyTorch's caching allocator, the tensors must stay referenced (or be recorded on the
//!   stream) until the stream passes the launches.
//! - **Extent.** `address .. address + bytes` lies inside one live allocation of the
//!   [`Gpu`]'s device, made in (or mapped into) the `Gpu`'s context — the device's primary
//!   context, which PyTorch also uses.
//! - **Alignment.** The address is aligned as the kernel's accesses need (16 bytes for
//!   tessel's kernels: vector accesses and TMA). [`check_buffers`] checks each buffer
//!   against the alignment stated for it ([`BufferRequirement::align`]) and refuses a
//!   misaligned one ([`ExternalError::Misaligned`]); call it before launching
//!   (`tessel_driver::device::launch_external` does). [`Module::launch_on`] itself checks
//!   only the geometry, as [`Module::launch`] does.
//! - **The stream.** The stream is a live `CUstream` of the same context (or null, the
//!   legacy default stream). Kernels are enqueued on it and ordered only by it: tessel's own
//!   stream ([`Gpu`]) is not involved, and nothing else orders the caller's other streams
//!   with these launches.
//! - **Races.** No other work reads a buffer that a launch writes, or writes a buffer a
//!   launch reads, unless ordered by the stream.
//!
//! What tessel checks on the host, without the device, before any launch: the number of
//! buffers, each buffer's length against what the kernel needs, null addresses, alignment
//! and address overflow ([`check_buffers`]); the launch geometry as on the owned path.

use cudarc::driver::sys;

#[cfg(doc)]
use crate::Gpu;
use crate::{Arg, Error, Launch, Module};

/// Device memory tessel does not own: an address in the [`Gpu`]'s context and its length in
/// bytes. `Copy`, freed by no one here; see the module's safety contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExternalBuffer {
    pub(crate) address: u64,
    bytes: u64,
}

impl ExternalBuffer {
    /// Device memory at `address` (a `CUdeviceptr`, e.g. `tensor.data_ptr()`), `bytes` long.
    ///
    /// # Safety
    /// The caller keeps the module's safety contract: `address .. address + bytes` is live
    /// device memory of the `Gpu`'s context for as long as any launch using it may run.
    ///
    /// # Errors
    /// [`ExternalError::Null`] for a null address of a non-empty buffer;
    /// [`ExternalError::Overflow`] when `address + bytes` does not fit in 64 bits.
    pub unsafe fn from_raw(address: sys::CUdeviceptr, bytes: u64) -> Result<Self, ExternalError> {
        if address == 0 && bytes > 0 {
            return Err(ExternalError::Null { bytes });
        }
        if address.checked_add(bytes).is_none() {
            return Err(ExternalError::Overflow { address, bytes });
        }
        Ok(ExternalBuffer { address, bytes })
    }

    /// The device address.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// The length, bytes.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// True for a buffer of no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

/// A CUDA stream tessel does not own (e.g. `torch.cuda.current_stream().cuda_stream`).
/// Launches on it are ordered after the work already on it; see the module's safety
/// contract.
#[derive(Debug)]
pub struct ExternalStream {
    raw: sys::CUstream,
}

impl ExternalStream {
    /// The stream `raw` (null: the legacy default stream).
    ///
    /// # Safety
    /// `raw` is a live stream of the `Gpu`'s context, not destroyed while launches made on
    /// it through this value may be enqueued.
    pub unsafe fn from_raw(raw: sys::CUstream) -> ExternalStream {
        ExternalStream { raw }
    }

    /// The raw stream handle.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }
}

/// What one kernel buffer parameter needs of the memory bound to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferRequirement {
    /// The buffer's name, for errors (a step parameter, an output, `t3`).
    pub name: String,
    /// The bytes the kernels read or write: the buffer must be at least this long.
    pub bytes: u64,
    /// The alignment of its address, bytes (a power of two; 16 covers every vector access
    /// and TMA).
    pub align: u64,
}

/// Memory that does not fit what a kernel needs, found on the host before any launch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalError {
    /// The number of buffers differs from the number of buffer parameters.
    #[error("{expected} buffers expected, {given} given")]
    Count { expected: usize, given: usize },
    /// A null address for a non-empty buffer.
    #[error("a null device pointer for {bytes} bytes")]
    Null { bytes: u64 },
    /// The buffer's end does not fit in 64 bits.
    #[error("address {address:#x} + {bytes} bytes overflows")]
    Overflow { address: u64, bytes: u64 },
    /// The buffer is shorter than the kernels need.
    #[error("buffer `{name}` is {given} bytes, the step needs {needed}")]
    TooSmall {
        name: String,
        given: u64,
        needed: u64,
    },
    /// The address is not a multiple of the alignment the kernels need.
    #[error("buffer `{name}` at {address:#x} is not aligned to {align} bytes")]
    Misaligned {
        name: String,
        address: u64,
        align: u64,
    },
    /// A requirement with an alignment that is not a power of two (a caller's bug).
    #[error("buffer `{name}`: alignment {align} is not a power of two")]
    BadAlignment { name: String, align: u64 },
}

/// Checks `given[i]` against `required[i]` for every buffer: the count, each length and each
/// alignment. Host-only; nothing is read from the device.
///
/// # Errors
/// The first mismatch, as an [`ExternalError`].
pub fn check_buffers(
    required: &[BufferRequirement],
    given: &[ExternalBuffer],
) -> Result<(), ExternalError> {
    if required.len() != given.len() {
        return Err(ExternalError::Count {
            expected: required.len(),
            given: given.len(),
        });
    }
    for (r, g) in required.iter().zip(given) {
        if !r.align.is_power_of_two() {
            return Err(ExternalError::BadAlignment {
                name: r.name.clone(),
                align: r.align,
            });
        }
        if g.bytes < r.bytes {
            return Err(ExternalError::TooSmall {
                name: r.name.clone(),
                given: g.bytes,
                needed: r.bytes,
            });
        }
        if g.address % r.align != 0 {
            return Err(ExternalError::Misaligned {
                name: r.name.clone(),
                address: g.address,
                align: r.align,
            });
        }
    }
    Ok(())
}

impl Module {
    /// Launches `kernel` with `launch` geometry and `args` on `stream`, a stream tessel does
    /// not own; `args` may hold [`Arg::External`] buffers (and owned ones of this module's
    /// [`Gpu`]). Returns once the launch is enqueued: the kernel runs in `stream`'s order.
    /// In checked mode ([`Gpu::set_checked`]) it then synchronizes `stream` and reports a
    /// fault against `kernel`.
    ///
    /// As on [`Module::launch`], the arguments are not checked against the kernel's
    /// signature; check the buffers first with [`check_buffers`].
    ///
    /// # Errors
    /// As [`Module::launch`]: [`Error::InvalidArgument`] for bad geometry or an owned
    /// buffer of another `Gpu`; [`Error::KernelNotFound`]; [`Error::Launch`];
    /// [`Error::Kernel`] in checked mode.
    pub fn launch_on(
        &self,
        stream: &ExternalStream,
        kernel: &str,
        launch: Launch,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let function = self.prepare(kernel, launch, args)?;
        self.gpu()
            .context()
            .bind_to_thread()
            .map_err(Error::driver("binding the context to launch"))?;
        // SAFETY: the context is current; that `stream` is live, that `args` matches the
        // kernel's signature and that the external memory keeps the module's safety
        // contract is the caller's promise.
        unsafe { crate::module::enqueue_raw(kernel, &function, launch, stream.raw, args)? };
        if self.gpu().is_checked() {
            // SAFETY: `stream` is live (the caller's promise) and the context is current.
            let status = unsafe { sys::cuStreamSynchronize(stream.raw) };
            if status != sys::CUresult::CUDA_SUCCESS {
                return Err(Error::Kernel {
                    kernel: kernel.to_owned(),
                    source: cudarc::driver::DriverError(status),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(address: u64, bytes: u64) -> ExternalBuffer {
        // SAFETY: never launched on; only the host checks read it.
        unsafe { ExternalBuffer::from_raw(address, bytes) }.expect("valid")
    }

    fn need(name: &str, bytes: u64, align: u64) -> BufferRequirement {
        BufferRequirement {
            name: name.into(),
            bytes,
            align,
        }
    }

    #[test]
    fn a_null_or_overflowing_buffer_is_refused() {
        // SAFETY: never launched on.
        let null = unsafe { ExternalBuffer::from_raw(0, 16) };
        assert_eq!(null, Err(ExternalError::Null { bytes: 16 }));
        // SAFETY: never launched on.
        let empty = unsafe { ExternalBuffer::from_raw(0, 0) }.expect("an empty buffer");
        assert!(empty.is_empty());
        // SAFETY: never launched on.
        let wrap = unsafe { ExternalBuffer::from_raw(u64::MAX - 3, 8) };
        assert!(matches!(wrap, Err(ExternalError::Overflow { .. })));
    }

    #[test]
    fn the_count_must_match() {
        let e = check_buffers(&[need("x", 4, 4), need("y", 4, 4)], &[buf(0x1000, 4)]);
        assert_eq!(
            e,
            Err(ExternalError::Count {
                expected: 2,
                given: 1
            })
        );
    }

    #[test]
    fn a_short_buffer_is_refused_by_name() {
        let e = check_buffers(&[need("w", 4096, 16)], &[buf(0x1000, 4095)]);
        assert_eq!(
            e,
            Err(ExternalError::TooSmall {
                name: "w".into(),
                given: 4095,
                needed: 4096
            })
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "buffer `w` is 4095 bytes, the step needs 4096"
        );
    }

    #[test]
    fn a_misaligned_buffer_is_refused() {
        let e = check_buffers(&[need("x", 64, 16)], &[buf(0x1008, 64)]);
        assert_eq!(
            e,
            Err(ExternalError::Misaligned {
                name: "x".into(),
                address: 0x1008,
                align: 16
            })
        );
        let e = check_buffers(&[need("x", 64, 12)], &[buf(0x1000, 64)]);
        assert!(matches!(e, Err(ExternalError::BadAlignment { .. })));
    }

    #[test]
    fn buffers_that_fit_pass() {
        let r = check_buffers(
            &[need("x", 64, 16), need("y", 0, 16)],
            &[buf(0x2000, 128), buf(0x3000, 0)],
        );
        assert_eq!(r, Ok(()));
    }
}
