//! Memory statements of the SIMT interpreter: `ld`/`st` on global and shared memory, and
//! `cp.async` with the per-thread groups that keep its destination bytes pending until a
//! `cp.async.wait` completes them.

use super::{Cta, Span};
use crate::exec::ExecError;
use tessel_ir::kernel::{Space, Width};

impl Cta<'_> {
    pub(super) fn shared_range(&self, addr: u32, bytes: u32) -> bool {
        let (a, e) = (addr as u64, addr as u64 + bytes as u64);
        self.k
            .shared
            .iter()
            .any(|&(o, b)| a >= o as u64 && e <= o as u64 + b as u64)
    }

    pub(super) fn shared_fault(
        &self,
        thread: usize,
        addr: u32,
        bytes: u32,
        store: bool,
    ) -> ExecError {
        if addr % bytes != 0 {
            return ExecError::Misaligned {
                kernel: self.k.name.clone(),
                cta: self.cta,
                thread: thread as u32,
                access: if store { "store" } else { "load" },
                space: Space::Shared,
                addr: addr as u64,
                bytes,
            };
        }
        ExecError::SharedOutOfBounds {
            kernel: self.k.name.clone(),
            cta: self.cta,
            thread: thread as u32,
            access: if store { "store" } else { "load" },
            addr,
            bytes,
            size: self.k.shared_size,
        }
    }

    pub(super) fn load(
        &mut self,
        dsts: &[u32; 4],
        space: Space,
        width: Width,
        addr: usize,
        offset: i32,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        let bytes = width.bytes();
        let nregs = width.regs();
        let mut v = [0u32; 4];
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            match space {
                Space::Global => {
                    let a = self.r64[addr * n + i].wrapping_add(offset as i64 as u64);
                    if let Err(e) = self.mem.load(a, bytes, &mut v) {
                        return Err(self.fault(i, space, a, bytes, false, e));
                    }
                }
                Space::Shared => {
                    let a = self.r32[addr * n + i].wrapping_add(offset as u32);
                    if a % bytes != 0 || !self.shared_range(a, bytes) {
                        return Err(self.shared_fault(i, a, bytes, false));
                    }
                    self.check_not_pending(i, a, bytes, "load")?;
                    let sh = &self.shared[a as usize..][..bytes as usize];
                    match bytes {
                        1 => v[0] = sh[0] as u32,
                        2 => v[0] = u16::from_le_bytes([sh[0], sh[1]]) as u32,
                        _ => {
                            for (k, c) in sh.chunks_exact(4).enumerate() {
                                v[k] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                            }
                        }
                    }
                }
            }
            for k in 0..nregs {
                self.r32[dsts[k] as usize * n + i] = v[k];
            }
        }
        Ok(())
    }

    /// `prefetch.l2` for the active lanes of `sp`: a hint the executor only checks, as a
    /// load of `bytes` bytes (a nonzero multiple of 16, 16-byte aligned) within one
    /// global buffer.
    pub(super) fn prefetch_l2(
        &mut self,
        addr: usize,
        bytes: usize,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            let a = self.r64[addr * n + i];
            let b = self.r32[bytes * n + i];
            if b == 0 || b % 16 != 0 {
                return Err(ExecError::Malformed {
                    kernel: self.k.name.clone(),
                    msg: format!(
                        "CTA {}, thread {i}: prefetch.l2 of {b} bytes, not a nonzero multiple of 16",
                        self.cta
                    ),
                });
            }
            if let Err(e) = self.mem.check_range(a, b, 16) {
                return Err(self.fault_as(i, Space::Global, a, b, "prefetch.l2", e));
            }
        }
        Ok(())
    }

    pub(super) fn store(
        &mut self,
        values: &[u32; 4],
        space: Space,
        width: Width,
        addr: usize,
        offset: i32,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        let bytes = width.bytes();
        let nregs = width.regs();
        let mut v = [0u32; 4];
        // Threads store in increasing order: when several write one address, the highest
        // thread wins (the GPU picks one unspecified writer).
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            for k in 0..nregs {
                v[k] = self.r32[values[k] as usize * n + i];
            }
            match space {
                Space::Global => {
                    let a = self.r64[addr * n + i].wrapping_add(offset as i64 as u64);
                    if let Err(e) = self.mem.store(a, bytes, &v) {
                        return Err(self.fault(i, space, a, bytes, true, e));
                    }
                }
                Space::Shared => {
                    let a = self.r32[addr * n + i].wrapping_add(offset as u32);
                    if a % bytes != 0 || !self.shared_range(a, bytes) {
                        return Err(self.shared_fault(i, a, bytes, true));
                    }
                    self.check_not_pending(i, a, bytes, "store")?;
                    self.generic_write(i, a, bytes)?;
                    let sh = &mut self.shared[a as usize..][..bytes as usize];
                    match bytes {
                        1 => sh[0] = v[0] as u8,
                        2 => sh.copy_from_slice(&(v[0] as u16).to_le_bytes()),
                        _ => {
                            for (k, c) in sh.chunks_exact_mut(4).enumerate() {
                                c.copy_from_slice(&v[k].to_le_bytes());
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn cp_error(&self, thread: usize, msg: String) -> ExecError {
        ExecError::CpAsync {
            kernel: self.k.name.clone(),
            cta: self.cta,
            thread: thread as u32,
            msg,
        }
    }

    /// Fails if a `cp.async` still pending writes any of the `bytes` bytes at `addr`, or
    /// (in a kernel with mbarriers) they hold an mbarrier or a TMA copy still pending.
    pub(super) fn check_not_pending(
        &self,
        thread: usize,
        addr: u32,
        bytes: u32,
        access: &str,
    ) -> Result<(), ExecError> {
        if self.k.uses_mbarrier {
            self.check_mbar_bytes(thread, addr, bytes, access)?;
        }
        if self.cp_outstanding == 0 {
            return Ok(());
        }
        let range = addr as usize..(addr + bytes) as usize;
        if self.cp_pending[range].iter().any(|&c| c > 0) {
            return Err(self.cp_error(
                thread,
                format!(
                    "shared {access} of {bytes} bytes at {addr:#x} touches the destination of a cp.async that no cp.async.wait has completed"
                ),
            ));
        }
        Ok(())
    }

    /// Copies at once for every active thread, marking the destination pending in the
    /// thread's open group.
    pub(super) fn cp_async(
        &mut self,
        bytes: u32,
        (dst, dst_offset): (usize, i32),
        (src, src_offset): (usize, i32),
        src_bytes: Option<u32>,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        let mut buf = [0u8; 16];
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            let a = self.r32[dst * n + i].wrapping_add(dst_offset as u32);
            if a % bytes != 0 || !self.shared_range(a, bytes) {
                return Err(self.shared_fault(i, a, bytes, true));
            }
            self.check_not_pending(i, a, bytes, "cp.async destination")?;
            self.generic_write(i, a, bytes)?;
            let read = src_bytes.map_or(bytes, |s| self.r32[s as usize * n + i]);
            if read > bytes {
                return Err(self.cp_error(
                    i,
                    format!("cp.async reads {read} source bytes of a {bytes}-byte copy"),
                ));
            }
            buf.fill(0);
            if read > 0 {
                let g = self.r64[src * n + i].wrapping_add(src_offset as i64 as u64);
                if let Err(e) = self.mem.load_bytes(g, bytes, &mut buf[..read as usize]) {
                    return Err(self.fault(i, Space::Global, g, bytes, false, e));
                }
            }
            self.shared[a as usize..][..bytes as usize].copy_from_slice(&buf[..bytes as usize]);
            for c in &mut self.cp_pending[a as usize..][..bytes as usize] {
                *c += 1;
            }
            self.cp_outstanding += 1;
            self.cp_open[i].push((a, bytes));
        }
        Ok(())
    }

    /// `cp.async.commit_group` for every active thread: its open copies (maybe none)
    /// become its newest group.
    pub(super) fn cp_commit(&mut self, sp: Span) {
        if !self.k.uses_cp_async {
            return;
        }
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] != 0 {
                let group = std::mem::take(&mut self.cp_open[i]);
                self.cp_groups[i].push_back(group);
            }
        }
    }

    /// `cp.async.wait_group keep` for every active thread: all but its `keep` newest groups
    /// complete.
    pub(super) fn cp_wait(&mut self, keep: usize, sp: Span) {
        if !self.k.uses_cp_async {
            return;
        }
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            while self.cp_groups[i].len() > keep {
                let Some(group) = self.cp_groups[i].pop_front() else {
                    break;
                };
                for (a, bytes) in group {
                    for c in &mut self.cp_pending[a as usize..][..bytes as usize] {
                        *c -= 1;
                    }
                    self.cp_outstanding -= 1;
                }
            }
        }
    }
}
