//! The `cp.async` loader of a ring: which 16-byte chunks of a stage each thread copies
//! (the copy plan), and the copies themselves — `cp.async.cg` with zero fill past the
//! tensor's edges, or element loads where rows are not 16-byte aligned. Where each chunk
//! lands is the stage's [`StageLayout`](super::layout::StageLayout)'s to say; a TMA loader
//! writing the same layouts is the other loader to come.

use super::source::Operand2d;
use super::{Ring, StageLayout};
use crate::lower::{Gen, Ix, LowerError};
use std::collections::HashMap;
use tessel_ir::kernel::{CpAsyncCache, ICmp, Op, Operand, RegType, Space, Stmt, Width};
use tessel_ir::{Reg, Value};

/// One chunk a thread copies per slice.
pub(in crate::lower) struct CopyItem {
    /// False for the thread's last chunk if the stage's chunk count is not a multiple of the
    /// thread count and this one is past it.
    pub(in crate::lower) in_tile: Option<Reg>,
    /// Swizzled byte offset in the stage, plus an immediate.
    pub(in crate::lower) shared: Ix,
    pub(in crate::lower) shared_imm: i32,
    /// Global address at k = 0 when rows are 16-byte aligned, plus an immediate.
    pub(in crate::lower) global: Option<Reg>,
    pub(in crate::lower) global_imm: i32,
    /// Whether the non-K coordinate is inside the tensor.
    pub(in crate::lower) inside: Reg,
    /// The non-K coordinate, clamped to 0 when outside.
    pub(in crate::lower) outer_ix: Ix,
    /// The chunk's K offset within the slice.
    pub(in crate::lower) k_off: Ix,
}

pub(in crate::lower) struct CopyPlan {
    pub(in crate::lower) op: Operand2d,
    pub(in crate::lower) lead: Vec<Ix>,
    pub(in crate::lower) items: Vec<CopyItem>,
    /// Elements between consecutive k.
    pub(in crate::lower) k_stride: u64,
    /// The tile never reaches past the tensor's edge in its non-K dim.
    pub(in crate::lower) always_inside: bool,
}

impl Gen<'_> {
    /// Plans how `threads` threads fill one stage of `ring` from operand `op`: chunk
    /// `e = tid + i·threads` of the stage is row `e / chunks`, chunk `e mod chunks`. For each
    /// of the thread's chunks: its swizzled shared offset, its global address at k = 0 (the
    /// non-K coordinate clamped into the tensor), whether the non-K coordinate is inside
    /// the tensor, and its K offset within the slice. `outer0` is the tile's first row (A)
    /// or column (B), `outer` that dim's size (M or N), `tile_outer` the tile's (bm or bn).
    pub(in crate::lower) fn copy_plan(
        &mut self,
        op: &Operand2d,
        ring: &Ring,
        lead: &[Ix],
        (outer0, outer, tile_outer): (Ix, u64, u32),
        (threads, tid): (u32, Ix),
        k_whole: bool,
    ) -> Result<CopyPlan, LowerError> {
        let layout = &ring.layout;
        let epc = layout.per_chunk();
        let chunks = layout.chunks();
        let total = layout.rows * chunks;
        let aligned = op.rows_aligned(layout.esz as u64);
        let always_inside = outer % tile_outer as u64 == 0;
        // When the threads cover whole rows a whole number of times, a thread's chunks are
        // one column, `step` rows apart: with `step` a multiple of the swizzle period
        // (`StageLayout::PERIOD` rows, `row_pitch` bytes a row) they share one shared offset
        // and one global address, plus immediates — when
        // no chunk needs its own test (the tile stays inside the tensor and K is whole
        // slices, so only the slice is tested).
        let step = threads / chunks.max(1);
        let row_bytes = op.row_stride() * layout.esz as u64;
        let last_row = (total / threads.max(1)).saturating_sub(1) as u64 * step as u64;
        let uniform = aligned
            && threads % chunks == 0
            && step % StageLayout::PERIOD == 0
            && total % threads == 0
            && always_inside
            && k_whole
            && last_row * row_bytes < i32::MAX as u64
            && last_row * (layout.row_pitch() as u64) < i32::MAX as u64;
        let mut items: Vec<CopyItem> = Vec::new();
        for i in 0..total.div_ceil(threads) {
            if uniform && i > 0 {
                let first = &items[0];
                let rows = (i * step) as u64;
                let (inside, k_off) = if op.k_contiguous {
                    (first.inside, first.k_off)
                } else {
                    (first.inside, self.iadd(first.k_off, Ix::C(rows)))
                };
                items.push(CopyItem {
                    in_tile: None,
                    shared: first.shared,
                    shared_imm: (rows * layout.row_pitch() as u64) as i32,
                    global: first.global,
                    global_imm: (rows * row_bytes) as i32,
                    inside,
                    outer_ix: first.outer_ix,
                    k_off,
                });
                continue;
            }
            let e = self.iadd(tid, Ix::C((i * threads) as u64));
            let in_tile = if (i + 1) * threads <= total {
                None
            } else {
                let eo = self.ix_op(e);
                Some(self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[eo, Operand::U32(total)],
                ))
            };
            let r = self.idiv_c(e, chunks as u64);
            let c = self.irem_c(e, chunks as u64);
            let col = self.imul_c(c, epc as u64);
            let shared = self.ring_offset(ring, r, col);
            // The non-K coordinate (row of a K-contiguous operand, column otherwise).
            let (outer_ix, k_off) = if op.k_contiguous { (r, col) } else { (col, r) };
            let pos = self.iadd(outer0, outer_ix);
            let po = self.ix_op(pos);
            let inside = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::LtU),
                &[po, Self::imm_u(outer)],
            );
            let clamped = Ix::R(self.b.op(
                RegType::U32,
                Op::Select,
                &[inside.into(), po, Operand::U32(0)],
            ));
            let mut idx = lead.to_vec();
            if op.k_contiguous {
                idx.extend([clamped, k_off]);
            } else {
                idx.extend([k_off, clamped]);
            }
            let global = if aligned {
                Some(self.operand_address(op, &idx))
            } else {
                None
            };
            items.push(CopyItem {
                in_tile,
                shared,
                shared_imm: 0,
                global,
                global_imm: 0,
                inside,
                outer_ix: clamped,
                k_off,
            });
        }
        Ok(CopyPlan {
            op: op.clone(),
            lead: lead.to_vec(),
            items,
            k_stride: if op.k_contiguous { 1 } else { op.row_stride() },
            always_inside,
        })
    }

    /// Issues the copies of one slice starting at `k0` into the stage at byte offset
    /// `stage` of `ring`: 16-byte `cp.async.cg` with zero fill past `k_end` and past the
    /// tensor's edge where rows are 16-byte aligned; otherwise element loads, packed and
    /// stored to shared memory (synchronously).
    pub(in crate::lower) fn issue_copies(
        &mut self,
        plan: &CopyPlan,
        ring: &Ring,
        stage: Ix,
        k0: Ix,
        k_end: Operand,
        k_whole: bool,
    ) -> Result<(), LowerError> {
        let esz = ring.layout.esz;
        let epc = 16 / esz;
        let aligned = plan.items.iter().all(|it| it.global.is_some());
        if aligned && k_whole {
            return self.issue_whole_slice(plan, ring, stage, k0, k_end);
        }
        for it in &plan.items {
            let off = self.iadd(stage, it.shared);
            let dst = self.shared_addr(ring.base, off);
            if let Some(in_tile) = it.in_tile {
                self.open();
                self.copy_chunk(plan, it, dst, k0, k_end, epc)?;
                self.close_if(in_tile);
            } else {
                self.copy_chunk(plan, it, dst, k0, k_end, epc)?;
            }
        }
        Ok(())
    }

    /// [`Gen::issue_copies`] for 16-byte aligned rows and a slice that lies wholly inside
    /// or wholly past the K range: one test of the slice, one 64-bit add per chunk; the
    /// tensor's edge (a partial last tile) zero-fills per chunk, a full tile needs no test.
    pub(in crate::lower) fn issue_whole_slice(
        &mut self,
        plan: &CopyPlan,
        ring: &Ring,
        stage: Ix,
        k0: Ix,
        k_end: Operand,
    ) -> Result<(), LowerError> {
        let ko = self.ix_op(k0);
        let slice_ok = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ko, k_end]);
        let step = self.b.op(
            RegType::U64,
            Op::MulWideU32,
            &[ko, Self::imm_u(plan.k_stride * ring.layout.esz as u64)],
        );
        self.open();
        let mut dsts: HashMap<Ix, Reg> = HashMap::new();
        let mut srcs: HashMap<Reg, Reg> = HashMap::new();
        for it in &plan.items {
            let dst = match dsts.get(&it.shared) {
                Some(&d) => d,
                None => {
                    let off = self.iadd(stage, it.shared);
                    let d = self.shared_addr(ring.base, off);
                    dsts.insert(it.shared, d);
                    d
                }
            };
            let g0 = it.global.expect("aligned plan");
            let src = match srcs.get(&g0) {
                Some(&s) => s,
                None => {
                    let s = self
                        .b
                        .op(RegType::U64, Op::AddU64, &[g0.into(), step.into()]);
                    srcs.insert(g0, s);
                    s
                }
            };
            let (src, n) = if plan.always_inside {
                (src, None)
            } else {
                let base = self.ptr[&plan.op.base];
                let src = self.b.op(
                    RegType::U64,
                    Op::Select,
                    &[it.inside.into(), src.into(), base.into()],
                );
                let n = self.b.op(
                    RegType::U32,
                    Op::Select,
                    &[it.inside.into(), Operand::U32(16), Operand::U32(0)],
                );
                (src, Some(n.into()))
            };
            let copy = Stmt::CpAsync {
                cache: CpAsyncCache::Cg,
                bytes: 16,
                dst,
                dst_offset: it.shared_imm,
                src,
                src_offset: it.global_imm,
                src_bytes: n,
            };
            match it.in_tile {
                Some(in_tile) => {
                    self.open();
                    self.b.push(copy);
                    self.close_if(in_tile);
                }
                None => self.b.push(copy),
            }
        }
        self.close_if(slice_ok);
        Ok(())
    }

    pub(in crate::lower) fn copy_chunk(
        &mut self,
        plan: &CopyPlan,
        it: &CopyItem,
        dst: Reg,
        k0: Ix,
        k_end: Operand,
        epc: u32,
    ) -> Result<(), LowerError> {
        let esz = 16 / epc;
        let kpos = self.iadd(k0, it.k_off);
        if let Some(g0) = it.global {
            let ko = self.ix_op(kpos);
            let k_ok = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ko, k_end]);
            let ok = self
                .b
                .op(RegType::Pred, Op::PAnd, &[k_ok.into(), it.inside.into()]);
            let step = self.ix_op(k0);
            let bytes = self.b.op(
                RegType::U64,
                Op::MulWideU32,
                &[step, Self::imm_u(plan.k_stride * esz as u64)],
            );
            let src = self
                .b
                .op(RegType::U64, Op::AddU64, &[g0.into(), bytes.into()]);
            let base = self.ptr[&plan.op.base];
            let src = self.b.op(
                RegType::U64,
                Op::Select,
                &[ok.into(), src.into(), base.into()],
            );
            let n = self.b.op(
                RegType::U32,
                Op::Select,
                &[ok.into(), Operand::U32(16), Operand::U32(0)],
            );
            self.b.push(Stmt::CpAsync {
                cache: CpAsyncCache::Cg,
                bytes: 16,
                dst,
                dst_offset: 0,
                src,
                src_offset: 0,
                src_bytes: Some(n.into()),
            });
            return Ok(());
        }
        // Unaligned rows: element by element, zero outside.
        let mut elems = Vec::new();
        for j in 0..epc as u64 {
            let (row, col, klim) = if plan.op.k_contiguous {
                let kc = self.iadd(kpos, Ix::C(j));
                (it.outer_ix, kc, kc)
            } else {
                let oc = self.iadd(it.outer_ix, Ix::C(j));
                (kpos, oc, kpos)
            };
            let ko = self.ix_op(klim);
            let k_ok = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ko, k_end]);
            // The non-K coordinate of element j: the chunk's, or (for a K-strided operand)
            // that plus j, which must stay inside the row.
            let in_row = if plan.op.k_contiguous {
                it.inside
            } else {
                let co = self.ix_op(col);
                let c_ok = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[co, Self::imm_u(plan.op.cols)],
                );
                self.b
                    .op(RegType::Pred, Op::PAnd, &[c_ok.into(), it.inside.into()])
            };
            let ok = self
                .b
                .op(RegType::Pred, Op::PAnd, &[k_ok.into(), in_row.into()]);
            let v = self.b.kernel.new_reg(RegType::U32);
            self.b.assign(v, Op::Mov, &[Operand::U32(0)]);
            self.open();
            let mut idx = plan.lead.clone();
            idx.extend([row, col]);
            let addr = self.operand_address(&plan.op, &idx);
            self.b.push(Stmt::Load {
                dsts: vec![v],
                space: Space::Global,
                width: if esz == 2 { Width::B16 } else { Width::B32 },
                addr,
                offset: 0,
            });
            self.close_if(ok);
            elems.push(v);
        }
        let words: Vec<Operand> = if esz == 2 {
            elems
                .chunks(2)
                .map(|p| {
                    let hi = self
                        .b
                        .op(RegType::U32, Op::Shl, &[p[1].into(), Operand::U32(16)]);
                    self.b
                        .op(RegType::U32, Op::Or, &[p[0].into(), hi.into()])
                        .into()
                })
                .collect()
        } else {
            elems.into_iter().map(Operand::from).collect()
        };
        self.b.push(Stmt::Store {
            space: Space::Shared,
            width: Width::V4,
            addr: dst,
            offset: 0,
            values: words,
        });
        Ok(())
    }

    /// The global address of 16-bit element `off` of `base`.
    fn element_addr_16(&mut self, base: Value, off: Ix) -> Reg {
        let oo = self.ix_op(off);
        let bytes = self
            .b
            .op(RegType::U64, Op::MulWideU32, &[oo, Operand::U32(2)]);
        let ptr = self.ptr[&base];
        self.b
            .op(RegType::U64, Op::AddU64, &[ptr.into(), bytes.into()])
    }

    /// `passes` 16-byte `cp.async.cg` copies of 16-bit elements, none zero-filled: the
    /// first of elements `off ..` of `base` into shared memory at `sbase + soff`, each next
    /// one `steps.0` bytes further in `base` and `steps.1` bytes further in shared memory,
    /// as the instructions' immediate offsets (one address computation for them all).
    /// `None` (nothing emitted) when the last offsets do not fit the instruction's signed
    /// 32 bits.
    pub(in crate::lower) fn cp_async_16_passes(
        &mut self,
        base: Value,
        off: Ix,
        (sbase, soff): (Reg, Ix),
        passes: u64,
        steps: (u64, u64),
    ) -> Option<()> {
        let last = passes.saturating_sub(1);
        i32::try_from(steps.0.checked_mul(last)?).ok()?;
        i32::try_from(steps.1.checked_mul(last)?).ok()?;
        let src = self.element_addr_16(base, off);
        let dst = self.shared_addr(sbase, soff);
        for i in 0..passes {
            self.b.push(Stmt::CpAsync {
                cache: CpAsyncCache::Cg,
                bytes: 16,
                dst,
                dst_offset: (steps.1 * i) as i32,
                src,
                src_offset: (steps.0 * i) as i32,
                src_bytes: None,
            });
        }
        Some(())
    }

    /// One 16-byte `cp.async.cg` of 16-bit elements `off ..` of `base` into shared memory
    /// at `sbase + soff`, zero-filled unless `inside` (the attention kernels' copies).
    pub(in crate::lower) fn cp_async_16(
        &mut self,
        base: Value,
        off: Ix,
        (sbase, soff): (Reg, Ix),
        inside: Reg,
    ) {
        let ptr = self.ptr[&base];
        let src = self.element_addr_16(base, off);
        let src = self.b.op(
            RegType::U64,
            Op::Select,
            &[inside.into(), src.into(), ptr.into()],
        );
        let nbytes = self.b.op(
            RegType::U32,
            Op::Select,
            &[inside.into(), Operand::U32(16), Operand::U32(0)],
        );
        let dst = self.shared_addr(sbase, soff);
        self.b.push(Stmt::CpAsync {
            cache: CpAsyncCache::Cg,
            bytes: 16,
            dst,
            dst_offset: 0,
            src,
            src_offset: 0,
            src_bytes: Some(nbytes.into()),
        });
    }
}
