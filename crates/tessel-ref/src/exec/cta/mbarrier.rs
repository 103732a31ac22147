//! mbarriers and TMA tiled loads in the SIMT interpreter (PTX ISA §9.7.13.15, "mbarrier";
//! §9.7.9.25.5.1, `cp.async.bulk.tensor`).
//!
//! Data model: each mbarrier the CTA initialised is an [`Mbar`]: its shared address, its
//! current phase number, the arrivals the phase still waits for (`pending`, reset to
//! `expected` when a phase completes) and its tx-count (bytes announced by `expect_tx`
//! minus bytes delivered by complete-tx; signed, as the hardware's count may go below zero
//! when a copy lands before its `expect_tx`). A phase completes when `pending` and the
//! tx-count are both 0. The barrier's 8 shared bytes hold nothing: reading or writing them
//! as data is an error.
//!
//! A TMA load copies its box at issue and marks its destination bytes pending
//! (`Cta::tma_pending`), but its complete-tx is *in flight*: it reaches the barrier only
//! when a thread next waits on that barrier, the latest moment the hardware could deliver
//! it. Its bytes are released when the phase it completed on has completed. So a consumer
//! that reads a tile before waiting always finds the bytes pending and is reported, in
//! whatever order the scheduler ran the warps; a consumer that waits sees every copy the
//! producer issued. A CTA that exits with copies in flight is reported too.
//!
//! The swizzle of a map is applied to the shared address bits exactly as
//! `CU_TENSOR_MAP_SWIZZLE_*` does ([`TensorMapSwizzle::apply`]); the destination is aligned
//! to the swizzle's pattern, so the result does not depend on where the buffer lies.

use super::{Cta, Span};
use crate::exec::{ExecError, LaunchMap};
use tessel_ir::kernel::{TensorMapSwizzle, MBAR_MAX_COUNT};

/// One initialised mbarrier of the CTA.
#[derive(Clone, Debug)]
pub(crate) struct Mbar {
    addr: u32,
    expected: u32,
    pending: u32,
    tx: i64,
    phase: u32,
    /// TMA copies issued on it whose complete-tx has not reached it: `(dst, bytes, swizzle)`.
    in_flight: Vec<Copy>,
    /// Copies whose complete-tx counted in the current phase: released when it completes.
    landed: Vec<Copy>,
}

/// A TMA copy's destination: the box's first byte, its bytes and the swizzle it was written
/// with.
#[derive(Clone, Copy, Debug)]
struct Copy {
    dst: u32,
    bytes: u32,
    swizzle: TensorMapSwizzle,
}

impl Copy {
    /// The shared address of each 16-byte chunk the copy writes.
    fn chunks(self) -> impl Iterator<Item = u32> {
        (0..self.bytes / 16).map(move |c| self.swizzle.apply(self.dst + 16 * c))
    }
}

impl Cta<'_> {
    fn mbar_error(&self, thread: usize, msg: String) -> ExecError {
        ExecError::Mbarrier {
            kernel: self.k.name.clone(),
            cta: self.cta,
            thread: thread as u32,
            msg,
        }
    }

    /// The index of the mbarrier at `addr`, or an error naming the operation.
    fn mbar_at(&self, thread: usize, addr: u32, what: &str) -> Result<usize, ExecError> {
        self.mbars
            .iter()
            .position(|m| m.addr == addr)
            .ok_or_else(|| {
                self.mbar_error(
                    thread,
                    format!("{what} at shared {addr:#x}, where no mbarrier was initialised"),
                )
            })
    }

    /// Fails if the `bytes` shared bytes at `addr` hold an mbarrier or the destination of
    /// a TMA copy not yet complete: what every shared access checks (`access`: `load`,
    /// `store`, ...) in a kernel with mbarriers.
    pub(super) fn check_mbar_bytes(
        &self,
        thread: usize,
        addr: u32,
        bytes: u32,
        access: &str,
    ) -> Result<(), ExecError> {
        let (lo, hi) = (addr as u64, addr as u64 + bytes as u64);
        if let Some(m) = self
            .mbars
            .iter()
            .find(|m| (m.addr as u64) < hi && lo < m.addr as u64 + 8)
        {
            return Err(self.mbar_error(
                thread,
                format!(
                    "shared {access} of {bytes} bytes at {addr:#x} touches the mbarrier at {:#x}",
                    m.addr
                ),
            ));
        }
        if self.tma_outstanding > 0
            && self.tma_pending[addr as usize..(addr + bytes) as usize]
                .iter()
                .any(|&c| c > 0)
        {
            return Err(self.mbar_error(
                thread,
                format!(
                    "shared {access} of {bytes} bytes at {addr:#x} touches the destination of a TMA load whose mbarrier phase no wait has seen complete"
                ),
            ));
        }
        Ok(())
    }

    /// `mbarrier.init [addr], count` for every active thread of `sp`.
    pub(super) fn mbar_init(
        &mut self,
        addr: usize,
        count: usize,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            let a = self.r32[addr * n + i];
            if a % 8 != 0 || !self.shared_range(a, 8) {
                return Err(self.shared_fault(i, a, 8, true));
            }
            if self.mbars.iter().any(|m| m.addr == a) {
                return Err(self.mbar_error(
                    i,
                    format!("mbarrier.init at {a:#x}: the mbarrier there is still in use"),
                ));
            }
            self.check_not_pending(i, a, 8, "mbarrier.init")?;
            let c = self.r32[count * n + i];
            if c == 0 || c > MBAR_MAX_COUNT {
                return Err(self.mbar_error(
                    i,
                    format!("mbarrier.init at {a:#x} for {c} arrivals (1 to 2^20 - 1)"),
                ));
            }
            self.mbars.push(Mbar {
                addr: a,
                expected: c,
                pending: c,
                tx: 0,
                phase: 0,
                in_flight: Vec::new(),
                landed: Vec::new(),
            });
        }
        Ok(())
    }

    /// `mbarrier.arrive` (with `expect_tx` of the bytes in slot `tx`) for every active
    /// thread of `sp`, in thread order.
    pub(super) fn mbar_arrive(
        &mut self,
        addr: usize,
        tx: Option<usize>,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            let a = self.r32[addr * n + i];
            let what = if tx.is_some() {
                "mbarrier.arrive.expect_tx"
            } else {
                "mbarrier.arrive"
            };
            let m = self.mbar_at(i, a, what)?;
            if let Some(t) = tx {
                let bytes = self.r32[t * n + i];
                if bytes > MBAR_MAX_COUNT {
                    return Err(self.mbar_error(
                        i,
                        format!("{what} at {a:#x} of {bytes} bytes (at most 2^20 - 1)"),
                    ));
                }
                self.mbars[m].tx += bytes as i64;
            }
            let mb = &mut self.mbars[m];
            if mb.pending == 0 {
                let (phase, tx) = (mb.phase, mb.tx);
                return Err(self.mbar_error(
                    i,
                    format!(
                        "{what} at {a:#x}: phase {phase} has no arrival left to count (tx-count {tx}): an arrival on a phase that waits only for its bytes"
                    ),
                ));
            }
            mb.pending -= 1;
            self.mbar_try_complete(m);
        }
        Ok(())
    }

    /// Completes mbarrier `m`'s phase if nothing is pending: the next phase begins and the
    /// bytes of the copies that landed in it are released.
    fn mbar_try_complete(&mut self, m: usize) {
        let mb = &mut self.mbars[m];
        if mb.pending != 0 || mb.tx != 0 {
            return;
        }
        mb.phase = mb.phase.wrapping_add(1);
        mb.pending = mb.expected;
        let landed = std::mem::take(&mut mb.landed);
        for c in landed {
            for a in c.chunks() {
                for p in &mut self.tma_pending[a as usize..a as usize + 16] {
                    *p -= 1;
                }
            }
            self.tma_outstanding -= 1;
        }
    }

    /// Whether the phase of parity `parity` of the mbarrier at `addr` has completed, for
    /// thread `thread`'s wait: the copies in flight on it land first.
    pub(super) fn mbar_poll(
        &mut self,
        thread: usize,
        addr: u32,
        parity: u32,
    ) -> Result<bool, ExecError> {
        if parity > 1 {
            return Err(self.mbar_error(
                thread,
                format!("mbarrier wait at {addr:#x} for parity {parity} (0 or 1)"),
            ));
        }
        let m = self.mbar_at(thread, addr, "mbarrier wait")?;
        let mb = &mut self.mbars[m];
        let arrived = std::mem::take(&mut mb.in_flight);
        for c in arrived {
            mb.tx -= c.bytes as i64;
            mb.landed.push(c);
        }
        self.mbar_try_complete(m);
        Ok(self.mbars[m].phase & 1 != parity)
    }

    /// What a wait at the mbarrier at `addr` waits for, for a deadlock report.
    pub(super) fn mbar_state(&self, addr: u32) -> String {
        match self.mbars.iter().find(|m| m.addr == addr) {
            Some(m) => format!(
                "mbarrier at {addr:#x} in phase {}: {} of {} arrivals and a tx-count of {} bytes pending",
                m.phase, m.pending, m.expected, m.tx
            ),
            None => format!("no mbarrier at {addr:#x}"),
        }
    }

    /// The tensor map at generic address `addr`, if a launch argument is one.
    fn launch_map(&self, addr: u64) -> Option<LaunchMap> {
        self.params.maps.iter().find(|m| m.addr == addr).copied()
    }

    /// `cp.async.bulk.tensor` for every active thread of `sp`: the box at the thread's
    /// coordinates is copied to `dst` at once, swizzled and zero-filled out of bounds; its
    /// bytes stay pending and its complete-tx in flight on the mbarrier at `mbar`.
    pub(super) fn tma_load(
        &mut self,
        dst: usize,
        tmap: usize,
        coords: &[u32],
        mbar: usize,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            let t = self.r64[tmap * n + i];
            let Some(map) = self.launch_map(t) else {
                return Err(self.mbar_error(
                    i,
                    format!("TMA load through {t:#x}, which is no tensor-map parameter's address"),
                ));
            };
            let desc = map.desc;
            let rank = desc.rank as usize;
            if coords.len() != rank {
                return Err(self.mbar_error(
                    i,
                    format!(
                        "TMA load of {} coordinates through a tensor map of {rank} dims",
                        coords.len()
                    ),
                ));
            }
            let d = self.r32[dst * n + i];
            let bytes = desc.box_bytes() as u32;
            self.check_tma_dst(i, d, bytes, desc.swizzle)?;
            let b = self.r32[mbar * n + i];
            let m = self.mbar_at(i, b, "TMA load completing")?;
            let c: Vec<i64> = coords
                .iter()
                .map(|&s| self.r32[s as usize * n + i] as i32 as i64)
                .collect();
            self.tma_copy(i, &map, &c, d)?;
            let copy = Copy {
                dst: d,
                bytes,
                swizzle: desc.swizzle,
            };
            for a in copy.chunks() {
                for p in &mut self.tma_pending[a as usize..a as usize + 16] {
                    *p += 1;
                }
            }
            self.tma_outstanding += 1;
            self.mbars[m].in_flight.push(copy);
        }
        Ok(())
    }

    /// A TMA destination of `bytes` bytes at `d`: aligned to the swizzle's pattern (128
    /// bytes at least), inside one shared buffer declared with that alignment, and free of
    /// mbarriers, copies still pending and operands of wgmma not yet waited for.
    fn check_tma_dst(
        &self,
        thread: usize,
        d: u32,
        bytes: u32,
        swizzle: TensorMapSwizzle,
    ) -> Result<(), ExecError> {
        let align = swizzle.dst_align();
        if d % align != 0 {
            return Err(self.mbar_error(
                thread,
                format!(
                    "TMA load to shared {d:#x}, not {align}-byte aligned (swizzle of {} bytes)",
                    swizzle.bytes()
                ),
            ));
        }
        // A swizzle moves chunks within their 128-byte line: the lines are the extent.
        let extent = if swizzle == TensorMapSwizzle::None {
            bytes
        } else {
            bytes.div_ceil(128) * 128
        };
        let buf = self.k.shared.iter().position(|&(o, b)| {
            d as u64 >= o as u64 && d as u64 + extent as u64 <= o as u64 + b as u64
        });
        let Some(buf) = buf else {
            return Err(self.mbar_error(
                thread,
                format!(
                    "TMA load of {bytes} bytes to shared {d:#x} does not fit in one shared buffer"
                ),
            ));
        };
        if self.k.shared_align[buf] < align {
            return Err(self.mbar_error(
                thread,
                format!(
                    "TMA load to shared buffer {buf}, declared {}-byte aligned: its swizzle needs {align}",
                    self.k.shared_align[buf]
                ),
            ));
        }
        self.check_not_pending(thread, d, extent, "TMA destination")?;
        // A stage released to the producer before the wgmma reading it completed.
        self.check_not_read_by_wgmma(thread, (d, extent), "TMA load")
    }

    /// Writes the box of `map` at coordinates `c` (elements, innermost first) to shared `d`:
    /// element `e` of the box (dimension 0 fastest) at `swizzle(d + e · size)`, zero bits
    /// where the element is outside the tensor.
    fn tma_copy(
        &mut self,
        thread: usize,
        map: &LaunchMap,
        c: &[i64],
        d: u32,
    ) -> Result<(), ExecError> {
        let t = map.desc;
        let rank = t.rank as usize;
        let esz = t.dtype.size_bytes() as usize;
        let total: usize = t.box_dims[..rank].iter().map(|&b| b as usize).product();
        let mut idx = [0u32; 5];
        let mut buf = [0u8; 8];
        for e in 0..total {
            let mut inside = true;
            let mut off = 0u64;
            for k in 0..rank {
                let g = c[k] + idx[k] as i64;
                if g < 0 || g as u64 >= t.dims[k] {
                    inside = false;
                    break;
                }
                off += g as u64 * if k == 0 { esz as u64 } else { t.strides[k - 1] };
            }
            let bytes = &mut buf[..esz];
            bytes.fill(0);
            if inside {
                let g = map.base + off;
                if let Err(f) = self.mem.load_bytes(g, esz as u32, bytes) {
                    return Err(self.fault(
                        thread,
                        tessel_ir::kernel::Space::Global,
                        g,
                        esz as u32,
                        false,
                        f,
                    ));
                }
            }
            let a = t.swizzle.apply(d + (e * esz) as u32) as usize;
            self.shared[a..a + esz].copy_from_slice(bytes);
            // The next element: dimension 0 fastest.
            for (k, x) in idx.iter_mut().enumerate().take(rank) {
                *x += 1;
                if *x < t.box_dims[k] {
                    break;
                }
                *x = 0;
            }
        }
        Ok(())
    }

    /// After the CTA's last warp exited: no TMA copy may still be pending.
    pub(super) fn check_tma_done(&self) -> Result<(), ExecError> {
        if self.tma_outstanding == 0 {
            return Ok(());
        }
        let m = self
            .mbars
            .iter()
            .find(|m| !m.in_flight.is_empty() || !m.landed.is_empty());
        let at = m.map_or(String::new(), |m| format!(" ({})", self.mbar_state(m.addr)));
        Err(self.mbar_error(
            0,
            format!(
                "the CTA exited with {} TMA loads whose mbarrier phase no wait saw complete{at}",
                self.tma_outstanding
            ),
        ))
    }
}
