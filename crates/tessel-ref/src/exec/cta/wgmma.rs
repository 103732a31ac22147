//! Warpgroup `wgmma` by the model in `Stmt::Wgmma`'s docs, and the async proxy's view of
//! shared memory that it reads through.
//!
//! Data model ([`AsyncProxy`], allocated only for kernels with a wgmma): per shared byte,
//! the thread whose generic-proxy write (a store or a `cp.async`) no `fence.proxy.async` of
//! that thread has yet ordered before async-proxy reads, and how many issued, not yet
//! waited-for wgmma read it; per thread the ranges it wrote since its last fence; per warp
//! the ranges its wgmma read, grouped as its commits group them.
//!
//! Each warp of a warpgroup computes its own 16 rows of D (the product is row by row, so no
//! warp needs another's registers): the shared-memory operands are read at issue, and the
//! accumulation into D — with A's registers read then, for A in registers — happens at the
//! `wgmma.wait` that completes the instruction's group, as the GPU's results land no
//! earlier. So a kernel that reads or writes D, or writes A's registers, before that wait
//! gets other values than the model's order of operations (the tests' bit comparisons see
//! it) rather than the GPU's undefined ones. What the model checks besides is what the GPU
//! would leave undefined in shared memory: an operand byte written through the generic
//! proxy and not fenced, and a store, `cp.async` or TMA load into bytes that a wgmma not yet
//! waited for reads. Groups never waited for are dropped at the warp's exit.

use super::{Cta, Span};
use crate::exec::numerics as nm;
use crate::exec::slots::WgmmaASlots;
use crate::exec::ExecError;
use std::collections::VecDeque;
use tessel_ir::kernel::{SmemDesc, WgmmaA, WgmmaInput, WgmmaMajor, WgmmaShape};

/// A shared-memory range, `(address, bytes)`.
type Range = (u32, u32);

/// The async proxy's view of a CTA's shared memory (see the module doc).
#[derive(Default)]
pub(super) struct AsyncProxy {
    /// Per shared byte: 1 + the thread whose write is not yet fenced, or 0.
    unfenced: Vec<u32>,
    /// Per thread: ranges written since its last `fence.proxy.async`.
    written: Vec<Vec<Range>>,
    /// Per shared byte: wgmma reads not yet waited for.
    reading: Vec<u16>,
    /// Per warp: ranges read by wgmma since its last commit, and its committed groups.
    open: Vec<Vec<Range>>,
    groups: Vec<VecDeque<Vec<Range>>>,
    /// Wgmma reads not yet waited for, over the CTA: when 0, stores skip the check.
    outstanding: usize,
    /// Per warp: the products issued since its last commit, and its committed groups'
    /// (in step with `open` and `groups`), applied to D at the wait.
    open_mma: Vec<Vec<PendingMma>>,
    group_mma: Vec<VecDeque<Vec<PendingMma>>>,
}

/// One warp's share of an issued wgmma, waiting for its group's `wgmma.wait`: the warp's
/// first thread, its 16 rows' A (f32 bits) or A's four register slots, B's `n` columns of
/// K (f32 bits), and D's slots.
struct PendingMma {
    warp: usize,
    input: WgmmaInput,
    a: PendingA,
    bm: Vec<[u32; 16]>,
    d: Vec<u32>,
}

/// A of a [`PendingMma`]: read from shared memory at issue, or registers read at the wait.
enum PendingA {
    Values(Vec<[u32; 16]>),
    Regs([u32; WgmmaA::REGS]),
}

impl AsyncProxy {
    pub(super) fn new(shared: usize, threads: usize, warps: usize) -> AsyncProxy {
        AsyncProxy {
            unfenced: vec![0; shared],
            written: vec![Vec::new(); threads],
            reading: vec![0; shared],
            open: vec![Vec::new(); warps],
            groups: vec![VecDeque::new(); warps],
            outstanding: 0,
            open_mma: (0..warps).map(|_| Vec::new()).collect(),
            group_mma: (0..warps).map(|_| VecDeque::new()).collect(),
        }
    }

    /// Back to a fresh CTA's state.
    pub(super) fn reset(&mut self) {
        self.unfenced.fill(0);
        self.written.iter_mut().for_each(Vec::clear);
        self.reading.fill(0);
        self.open.iter_mut().for_each(Vec::clear);
        self.groups.iter_mut().for_each(VecDeque::clear);
        self.outstanding = 0;
        self.open_mma.iter_mut().for_each(Vec::clear);
        self.group_mma.iter_mut().for_each(VecDeque::clear);
    }
}

impl Cta<'_> {
    fn wgmma_error(&self, thread: usize, msg: String) -> ExecError {
        ExecError::Wgmma {
            kernel: self.k.name.clone(),
            cta: self.cta,
            thread: thread as u32,
            msg,
        }
    }

    /// A generic-proxy write by `thread` of `bytes` bytes at `addr` (a shared store or a
    /// `cp.async`): fails if an issued wgmma not yet waited for reads any of them, else
    /// marks them unfenced. Nothing to do in a kernel without wgmma.
    pub(super) fn generic_write(
        &mut self,
        thread: usize,
        addr: u32,
        bytes: u32,
    ) -> Result<(), ExecError> {
        if !self.k.uses_wgmma {
            return Ok(());
        }
        self.check_not_read_by_wgmma(thread, (addr, bytes), "shared store")?;
        let range = addr as usize..(addr + bytes) as usize;
        self.proxy.unfenced[range].fill(thread as u32 + 1);
        self.proxy.written[thread].push((addr, bytes));
        Ok(())
    }

    /// Fails if an issued wgmma that no `wgmma.wait` has completed reads any of the `bytes`
    /// bytes at `addr`, which `what` (a shared store, a `cp.async`, a TMA load) of `thread`
    /// is about to write: the GPU's tensor core may still be reading them. Nothing to do in
    /// a kernel without wgmma.
    pub(super) fn check_not_read_by_wgmma(
        &self,
        thread: usize,
        (addr, bytes): (u32, u32),
        what: &str,
    ) -> Result<(), ExecError> {
        if !self.k.uses_wgmma || self.proxy.outstanding == 0 {
            return Ok(());
        }
        let range = addr as usize..(addr + bytes) as usize;
        if self.proxy.reading[range].iter().any(|&c| c > 0) {
            return Err(self.wgmma_error(
                thread,
                format!(
                    "{what} of {bytes} bytes at {addr:#x} into the operand of a wgmma that no wgmma.wait has completed"
                ),
            ));
        }
        Ok(())
    }

    /// `fence.proxy.async.shared::cta` for every active thread of `sp`: its earlier writes
    /// become visible to the async proxy.
    pub(super) fn fence_proxy_async(&mut self, sp: Span) {
        if !self.k.uses_wgmma {
            return;
        }
        for i in sp.lo..sp.hi {
            if self.masks[sp.d][i] == 0 {
                continue;
            }
            for (a, b) in std::mem::take(&mut self.proxy.written[i]) {
                for u in &mut self.proxy.unfenced[a as usize..][..b as usize] {
                    if *u == i as u32 + 1 {
                        *u = 0;
                    }
                }
            }
        }
    }

    /// `wgmma.mma_async` per warp of `sp`: warp `w` of its warpgroup computes rows
    /// `16w .. 16w + 16` of `D += A·B` with A read through its descriptor or from the
    /// warp's registers ([`WgmmaA::reg_pos`]) and B through its descriptor (K-major or
    /// MN-major), each output `acc = d; acc = fma(a[r][k], b[k][c], acc)` for k = 0, 1,
    /// ..., K-1.
    pub(super) fn wgmma(
        &mut self,
        shape: WgmmaShape,
        d: &[u32],
        (a, b_desc, b_major): (WgmmaASlots, usize, WgmmaMajor),
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        let (cols, kk) = (shape.n as usize, shape.k() as usize);
        let esz = shape.input.bytes();
        for warp in self.full_warps(sp, "wgmma")? {
            let desc_of = |cta: &Self, slot: usize, which: &str| -> Result<SmemDesc, ExecError> {
                let v = cta.r64[slot * n + warp];
                if let Some(l) = (warp..warp + 32).find(|&l| cta.r64[slot * n + l] != v) {
                    return Err(cta.wgmma_error(
                        l,
                        format!(
                            "the wgmma's {which} descriptor differs across the warp ({:#x} in lane 0, {:#x} here)",
                            v,
                            cta.r64[slot * n + l]
                        ),
                    ));
                }
                SmemDesc::decode(v).map_err(|m| cta.wgmma_error(warp, m))
            };
            let w = (warp / 32) % 4;
            let mut ranges = Vec::new();
            // A's rows from shared memory now (am[r][k] for the warp's 16 rows, f32 bits),
            // or its registers at the wait; bm[c][k].
            let pa = match a {
                WgmmaASlots::Desc(slot) => {
                    let da = desc_of(self, slot as usize, "A")?;
                    let mut am = vec![[0u32; 16]; 16];
                    for (r, row) in am.iter_mut().enumerate() {
                        let r = (16 * w + r) as u32;
                        self.operand_row(da, r, shape.input, &mut row[..kk], warp)?;
                        ranges.extend((0..2).map(|h| (da.address(r, 16 * h), 16)));
                    }
                    PendingA::Values(am)
                }
                WgmmaASlots::Regs(slots) => PendingA::Regs(slots),
            };
            let db = desc_of(self, b_desc, "B")?;
            let mut bm = vec![[0u32; 16]; cols];
            match b_major {
                WgmmaMajor::K => {
                    for (c, col) in bm.iter_mut().enumerate() {
                        self.operand_row(db, c as u32, shape.input, &mut col[..kk], warp)?;
                        ranges.extend((0..2).map(|h| (db.address(c as u32, 16 * h), 16)));
                    }
                }
                WgmmaMajor::Mn => {
                    let mut row = vec![0u32; cols];
                    for k in 0..kk {
                        self.operand_row_mn(db, k as u32, shape.input, &mut row, warp)?;
                        for (col, &x) in bm.iter_mut().zip(&row) {
                            col[k] = x;
                        }
                        let chunks = cols as u32 * esz / 16;
                        ranges.extend((0..chunks).map(|h| (db.address_mn(k as u32, 16 * h), 16)));
                    }
                }
            }
            debug_assert_eq!(esz * kk as u32, 32);
            self.proxy.open_mma[warp / 32].push(PendingMma {
                warp,
                input: shape.input,
                a: pa,
                bm,
                d: d.to_vec(),
            });
            for &(a, b) in &ranges {
                for c in &mut self.proxy.reading[a as usize..][..b as usize] {
                    *c += 1;
                }
            }
            self.proxy.outstanding += ranges.len();
            self.proxy.open[warp / 32].extend(ranges);
        }
        Ok(())
    }

    /// The `n` elements of K row `k` of an MN-major operand ([`SmemDesc::address_mn`]),
    /// as f32 bits, with [`Cta::operand_row`]'s checks.
    fn operand_row_mn(
        &self,
        desc: SmemDesc,
        k: u32,
        input: WgmmaInput,
        out: &mut [u32],
        warp: usize,
    ) -> Result<(), ExecError> {
        let esz = input.bytes();
        for (c, o) in out.iter_mut().enumerate() {
            let a = desc.address_mn(k, c as u32 * esz);
            *o = self.operand_element(a, input, warp, &format!("row {k}, element {c}"), desc)?;
        }
        Ok(())
    }

    /// The `K` elements (32 bytes) of row `r` of a K-major operand, as f32 bits, checking
    /// each with [`Cta::operand_element`].
    fn operand_row(
        &self,
        desc: SmemDesc,
        r: u32,
        input: WgmmaInput,
        out: &mut [u32],
        warp: usize,
    ) -> Result<(), ExecError> {
        let esz = input.bytes();
        for (k, o) in out.iter_mut().enumerate() {
            let a = desc.address(r, k as u32 * esz);
            *o = self.operand_element(a, input, warp, &format!("row {r}, element {k}"), desc)?;
        }
        Ok(())
    }

    /// The operand element at shared address `a`, as f32 bits, checking that it lies in
    /// shared memory, is not the destination of a pending `cp.async`, and was fenced
    /// after its last generic write (`what` and `desc` name it in errors).
    fn operand_element(
        &self,
        a: u32,
        input: WgmmaInput,
        warp: usize,
        what: &str,
        desc: SmemDesc,
    ) -> Result<u32, ExecError> {
        let esz = input.bytes();
        if a % esz != 0 || !self.shared_range(a, esz) {
            return Err(self.wgmma_error(
                warp,
                format!(
                    "wgmma operand {what} at shared {a:#x} (descriptor {desc:?}) is outside shared memory"
                ),
            ));
        }
        self.check_not_pending(warp, a, esz, "wgmma operand read")?;
        let range = a as usize..(a + esz) as usize;
        if let Some(&t) = self.proxy.unfenced[range.clone()].iter().find(|&&t| t != 0) {
            return Err(self.wgmma_error(
                warp,
                format!(
                    "wgmma reads shared {a:#x}, written by thread {} through the generic proxy with no fence.proxy.async since",
                    t - 1
                ),
            ));
        }
        let sh = &self.shared[range];
        let bits = if esz == 2 {
            u16::from_le_bytes([sh[0], sh[1]]) as u32
        } else {
            u32::from_le_bytes([sh[0], sh[1], sh[2], sh[3]])
        };
        Ok(match input {
            WgmmaInput::Bf16 => bits << 16,
            WgmmaInput::F16 => nm::f16_to_f32(bits),
            WgmmaInput::Tf32 => nm::tf32_operand(bits),
        })
    }

    /// Applies one warp's issued product to D: A's registers read now when A is in
    /// registers, then per output `acc = fma(a[r][k], b[k][c], acc)` for k in order.
    fn complete_mma(&mut self, op: PendingMma) {
        let n = self.n;
        let w = (op.warp / 32) % 4;
        let am = match op.a {
            PendingA::Values(am) => am,
            PendingA::Regs(slots) => {
                let mut am = vec![[0u32; 16]; 16];
                for lane in 0..32 {
                    for (i, &slot) in slots.iter().enumerate() {
                        let (r, c) = WgmmaA::reg_pos(32 * w + lane, i);
                        let bits = self.r32[slot as usize * n + op.warp + lane];
                        for (h, half) in [bits & 0xffff, bits >> 16].into_iter().enumerate() {
                            am[r - 16 * w][c + h] = match op.input {
                                WgmmaInput::Bf16 => half << 16,
                                WgmmaInput::F16 => nm::f16_to_f32(half),
                                WgmmaInput::Tf32 => unreachable!("slots refuse tf32 A registers"),
                            };
                        }
                    }
                }
                am
            }
        };
        let kk = op.input.k() as usize;
        for lane in 0..32 {
            let th = op.warp + lane;
            for (i, &slot) in op.d.iter().enumerate() {
                let (row, col) = WgmmaShape::d_pos(32 * w + lane, i);
                let acc = &mut self.r32[slot as usize * n + th];
                let (a, b) = (&am[row - 16 * w][..kk], &op.bm[col][..kk]);
                for (&x, &y) in a.iter().zip(b) {
                    *acc = nm::ffma(x, y, *acc);
                }
            }
        }
    }

    /// `wgmma.commit_group` per warp of `sp`.
    pub(super) fn wgmma_commit(&mut self, sp: Span) -> Result<(), ExecError> {
        for warp in self.full_warps(sp, "wgmma.commit_group")? {
            let group = std::mem::take(&mut self.proxy.open[warp / 32]);
            self.proxy.groups[warp / 32].push_back(group);
            let ops = std::mem::take(&mut self.proxy.open_mma[warp / 32]);
            self.proxy.group_mma[warp / 32].push_back(ops);
        }
        Ok(())
    }

    /// `wgmma.wait_group keep` per warp of `sp`: all but its `keep` newest groups complete.
    pub(super) fn wgmma_wait(&mut self, keep: usize, sp: Span) -> Result<(), ExecError> {
        for warp in self.full_warps(sp, "wgmma.wait_group")? {
            while self.proxy.groups[warp / 32].len() > keep {
                let Some(group) = self.proxy.groups[warp / 32].pop_front() else {
                    break;
                };
                for op in self.proxy.group_mma[warp / 32]
                    .pop_front()
                    .unwrap_or_default()
                {
                    self.complete_mma(op);
                }
                for (a, b) in group {
                    for c in &mut self.proxy.reading[a as usize..][..b as usize] {
                        *c -= 1;
                    }
                    self.proxy.outstanding -= 1;
                }
            }
        }
        Ok(())
    }
}
