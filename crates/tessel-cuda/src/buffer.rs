//! Untyped device memory.

use cudarc::driver::{result, CudaSlice, DevicePtr, DevicePtrMut};

use crate::{Error, Gpu};

/// A device allocation of `len()` bytes, owned by one [`Gpu`] and freed on drop (stream
/// ordered). The runtime does not know dtypes: callers encode and decode the bytes.
pub struct Buffer {
    slice: CudaSlice<u8>,
    gpu: Gpu,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("bytes", &self.len())
            .finish_non_exhaustive()
    }
}

impl Buffer {
    /// Allocates `bytes` bytes of device memory, zeroed.
    ///
    /// # Errors
    /// [`Error::Driver`] when the allocation fails (e.g. out of memory).
    pub fn alloc(gpu: &Gpu, bytes: usize) -> Result<Buffer, Error> {
        let slice = gpu
            .stream()
            .alloc_zeros::<u8>(bytes)
            .map_err(Error::driver(format!("allocating {bytes} bytes")))?;
        Ok(Buffer {
            slice,
            gpu: gpu.clone(),
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    ///
    /// # Errors
    /// [`Error::Driver`] when the allocation or the copy fails.
    pub fn from_bytes(gpu: &Gpu, data: &[u8]) -> Result<Buffer, Error> {
        let slice = gpu
            .stream()
            .clone_htod(data)
            .map_err(Error::driver(format!("uploading {} bytes", data.len())))?;
        Ok(Buffer {
            slice,
            gpu: gpu.clone(),
        })
    }

    /// Size, bytes.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether the buffer holds zero bytes.
    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }

    /// The GPU this buffer lives on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Overwrites the whole buffer with `data`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `data.len() == self.len()`; [`Error::Driver`] if the
    /// copy fails.
    pub fn upload(&mut self, data: &[u8]) -> Result<(), Error> {
        if data.len() != self.len() {
            return Err(Error::InvalidArgument(format!(
                "upload of {} bytes into a buffer of {} bytes",
                data.len(),
                self.len()
            )));
        }
        self.gpu
            .stream()
            .memcpy_htod(data, &mut self.slice)
            .map_err(Error::driver(format!("uploading {} bytes", data.len())))
    }

    /// Copies the whole buffer to the host, after all work queued before it has finished.
    ///
    /// # Errors
    /// [`Error::Driver`] if the copy, or any earlier queued work, fails.
    pub fn download(&self) -> Result<Vec<u8>, Error> {
        let stream = self.gpu.stream();
        let data = stream
            .clone_dtoh(&self.slice)
            .map_err(Error::driver(format!("downloading {} bytes", self.len())))?;
        // The copy into pageable memory is synchronous in practice; make it so by contract.
        stream
            .synchronize()
            .map_err(Error::driver("synchronizing after a download"))?;
        Ok(data)
    }

    /// Sets every byte to `byte` (stream ordered). Used to poison outputs before a run so that
    /// an element a kernel forgot to write cannot pass as correct (e.g. `0xFF` makes every
    /// f32/bf16 a NaN).
    ///
    /// # Errors
    /// [`Error::Driver`] if the memset fails.
    pub fn fill(&mut self, byte: u8) -> Result<(), Error> {
        let bytes = self.len();
        let stream = self.gpu.stream();
        let (ptr, _record) = self.slice.device_ptr_mut(stream);
        // SAFETY: `ptr` is this live allocation of `bytes` bytes, used on its own stream.
        unsafe { result::memset_d8_async(ptr, byte, bytes, stream.cu_stream()) }
            .map_err(Error::driver(format!("filling {bytes} bytes")))
    }

    /// Copies all of `src` into `self` on the device (stream ordered).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless both buffers have the same length and GPU;
    /// [`Error::Driver`] if the copy fails.
    pub fn copy_from(&mut self, src: &Buffer) -> Result<(), Error> {
        if src.len() != self.len() || !src.gpu.same(&self.gpu) {
            return Err(Error::InvalidArgument(format!(
                "device copy of {} bytes into {} bytes (both must be equal and on one Gpu)",
                src.len(),
                self.len()
            )));
        }
        self.gpu
            .stream()
            .memcpy_dtod(&src.slice, &mut self.slice)
            .map_err(Error::driver(format!(
                "copying {} bytes on device",
                self.len()
            )))
    }

    /// Copies all of `src` into `self` at byte `offset` on the device (stream ordered): an
    /// all-gather's part when the ranks share one GPU.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `src` fits at `offset` and both are on one Gpu;
    /// [`Error::Driver`] if the copy fails.
    pub fn copy_from_at(&mut self, offset: usize, src: &Buffer) -> Result<(), Error> {
        if offset + src.len() > self.len() || !src.gpu.same(&self.gpu) {
            return Err(Error::InvalidArgument(format!(
                "device copy of {} bytes at offset {offset} into {} bytes (must fit, on one Gpu)",
                src.len(),
                self.len()
            )));
        }
        let mut dst = self.slice.slice_mut(offset..offset + src.len());
        self.gpu
            .stream()
            .memcpy_dtod(&src.slice, &mut dst)
            .map_err(Error::driver(format!(
                "copying {} bytes on device",
                src.len()
            )))
    }

    pub(crate) fn slice_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.slice
    }

    /// The device address, for cuBLAS and kernel arguments.
    pub(crate) fn device_ptr(&self) -> u64 {
        let (ptr, _record) = self.slice.device_ptr(self.gpu.stream());
        ptr
    }

    pub(crate) fn slice(&self) -> &CudaSlice<u8> {
        &self.slice
    }
}
