//! Global memory of an executed program: the program's buffers, each behind a fake base
//! address, checked on every access (the executor doubles as a CPU memcheck).
//!
//! Data model: buffer `i` lives at [`base_address`]`(i)` = `(i + 1) << 40`; an address
//! decodes back to `(buffer, offset)` by its high bits. Each buffer is a `Vec<AtomicU32>`
//! of little-endian words so that CTAs running in parallel can write disjoint bytes of one
//! word without a data race: 32-bit stores are relaxed atomic stores, 8/16-bit stores a
//! relaxed `fetch_and` + `fetch_or` pair on the bits they own. Relaxed ordering is enough:
//! CTAs of one launch may not communicate through global memory (no grid-wide barrier
//! exists in the IR), and launches are separated by rayon's join.

use super::ExecError;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Address bits below a buffer's base: buffers are at most 1 TiB apart.
const BASE_SHIFT: u32 = 40;

/// The fake device address of buffer `index`: `(index + 1) << 40`, never 0, 16-byte (in
/// fact 2^40-byte) aligned like a `cudaMalloc` pointer.
pub fn base_address(index: usize) -> u64 {
    (index as u64 + 1) << BASE_SHIFT
}

/// One global buffer.
pub(crate) struct GlobalBuf {
    pub name: String,
    /// Size in bytes; accesses must end at or before it.
    pub size: u64,
    /// Stores through it are errors (step inputs are read-only).
    pub read_only: bool,
    words: Vec<AtomicU32>,
}

/// Why an address does not name valid bytes of a buffer.
pub(crate) enum Fault {
    /// The address is not inside any buffer's window.
    Wild,
    /// Inside buffer `buf`'s window but past its end.
    OutOfBounds { buf: usize, offset: u64 },
    /// Not aligned to the access size.
    Misaligned,
    /// A store to a read-only buffer.
    ReadOnly { buf: usize },
}

impl GlobalBuf {
    /// A buffer named `name` of `size` bytes holding `bytes` (its first `size` bytes), or
    /// 0xFF bytes throughout when `bytes` is `None` (poison: an element no kernel writes
    /// reads back as NaN).
    ///
    /// Errors: [`ExecError::OutOfMemory`] when the host cannot allocate it (the executor
    /// reports it rather than aborting the process).
    pub fn new(
        name: String,
        bytes: Option<&[u8]>,
        size: u64,
        read_only: bool,
    ) -> Result<GlobalBuf, ExecError> {
        let n = size.div_ceil(4) as usize;
        let mut words: Vec<AtomicU32> = Vec::new();
        if words.try_reserve_exact(n).is_err() {
            return Err(ExecError::OutOfMemory {
                buffer: name,
                bytes: size,
            });
        }
        match bytes {
            Some(bytes) => words.extend(bytes.chunks(4).map(|c| {
                let mut w = [0xFFu8; 4];
                w[..c.len()].copy_from_slice(c);
                AtomicU32::new(u32::from_le_bytes(w))
            })),
            None => words.extend((0..n).map(|_| AtomicU32::new(u32::MAX))),
        }
        Ok(GlobalBuf {
            name,
            size,
            read_only,
            words,
        })
    }

    /// The buffer's bytes.
    ///
    /// Errors: [`ExecError::OutOfMemory`] when the host cannot allocate the copy.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ExecError> {
        let mut out: Vec<u8> = Vec::new();
        if out.try_reserve_exact(self.words.len() * 4).is_err() {
            return Err(ExecError::OutOfMemory {
                buffer: self.name.clone(),
                bytes: self.size,
            });
        }
        out.extend(
            self.words
                .iter()
                .flat_map(|w| w.load(Relaxed).to_le_bytes()),
        );
        out.truncate(self.size as usize);
        Ok(out)
    }
}

/// All buffers of a program (index = `BufferId` index).
pub(crate) struct GlobalMem {
    pub bufs: Vec<GlobalBuf>,
}

impl GlobalMem {
    /// Decodes `addr` for an access of `bytes` bytes (a power of two ≤ 16).
    #[inline]
    fn resolve(&self, addr: u64, bytes: u32, store: bool) -> Result<(&GlobalBuf, u64), Fault> {
        let idx = (addr >> BASE_SHIFT).wrapping_sub(1) as usize;
        let offset = addr & ((1u64 << BASE_SHIFT) - 1);
        let buf = self.bufs.get(idx).ok_or(Fault::Wild)?;
        if offset + bytes as u64 > buf.size {
            return Err(Fault::OutOfBounds { buf: idx, offset });
        }
        if offset & (bytes as u64 - 1) != 0 {
            return Err(Fault::Misaligned);
        }
        if store && buf.read_only {
            return Err(Fault::ReadOnly { buf: idx });
        }
        Ok((buf, offset))
    }

    /// Loads `bytes` bytes (1, 2, 4, 8 or 16) at `addr` into `out`, zero-extending 8/16-bit
    /// values into `out[0]`.
    #[inline]
    pub fn load(&self, addr: u64, bytes: u32, out: &mut [u32; 4]) -> Result<(), Fault> {
        let (buf, off) = self.resolve(addr, bytes, false)?;
        let w = (off >> 2) as usize;
        match bytes {
            1 | 2 => {
                let word = buf.words[w].load(Relaxed);
                let sh = (off & 3) * 8;
                let m = if bytes == 1 { 0xff } else { 0xffff };
                out[0] = (word >> sh) & m;
            }
            _ => {
                for (k, o) in out.iter_mut().take(bytes as usize / 4).enumerate() {
                    *o = buf.words[w + k].load(Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Loads `out.len()` bytes at `addr`, which must be `align`-byte aligned (a power of
    /// two): the source of a `cp.async`, which may read fewer bytes than its size.
    pub fn load_bytes(&self, addr: u64, align: u32, out: &mut [u8]) -> Result<(), Fault> {
        self.check_range(addr, out.len() as u32, align)?;
        let buf = &self.bufs[(addr >> BASE_SHIFT) as usize - 1];
        let offset = addr & ((1u64 << BASE_SHIFT) - 1);
        for (i, o) in out.iter_mut().enumerate() {
            let off = offset + i as u64;
            let word = buf.words[(off >> 2) as usize].load(Relaxed);
            *o = (word >> ((off & 3) * 8)) as u8;
        }
        Ok(())
    }

    /// Checks that the `bytes` bytes at `addr` lie within one buffer and that `addr` is
    /// `align`-byte aligned (a power of two), reading nothing: an L2 prefetch.
    pub fn check_range(&self, addr: u64, bytes: u32, align: u32) -> Result<(), Fault> {
        let idx = (addr >> BASE_SHIFT).wrapping_sub(1) as usize;
        let offset = addr & ((1u64 << BASE_SHIFT) - 1);
        let buf = self.bufs.get(idx).ok_or(Fault::Wild)?;
        if offset + u64::from(bytes) > buf.size {
            return Err(Fault::OutOfBounds { buf: idx, offset });
        }
        if offset & (u64::from(align) - 1) != 0 {
            return Err(Fault::Misaligned);
        }
        Ok(())
    }

    /// Stores `bytes` bytes at `addr` from `vals` (the low bits of `vals[0]` for 8/16-bit).
    #[inline]
    pub fn store(&self, addr: u64, bytes: u32, vals: &[u32; 4]) -> Result<(), Fault> {
        let (buf, off) = self.resolve(addr, bytes, true)?;
        let w = (off >> 2) as usize;
        match bytes {
            1 | 2 => {
                let sh = (off & 3) * 8;
                let m: u32 = if bytes == 1 { 0xff } else { 0xffff };
                let word = &buf.words[w];
                word.fetch_and(!(m << sh), Relaxed);
                word.fetch_or((vals[0] & m) << sh, Relaxed);
            }
            _ => {
                for (k, &v) in vals.iter().take(bytes as usize / 4).enumerate() {
                    buf.words[w + k].store(v, Relaxed);
                }
            }
        }
        Ok(())
    }
}
