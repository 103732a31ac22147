//! The shared-memory ring of the tensor-core schedules: each operand's `stages` tiles,
//! 16-byte chunks swizzled so `ldmatrix` reads are free of bank conflicts, the copy plan
//! (which chunks a thread fills per slice) and the `cp.async` copies with zero-filled edges.
//! A wgmma or attention schedule reuses it as it is.

use super::{Gen, Ix, LowerError};
use std::collections::HashMap;
use tessel_ir::graph::MatmulRead;
use tessel_ir::kernel::{CpAsyncCache, ICmp, Op, Operand, RegType, Space, Stmt, Width};
use tessel_ir::{Reg, Value};

/// One matmul operand as the tile copies it: the materialised tensor `base` with its last
/// dim `cols` (contiguous), and whether `cols` is the K dim — or, with `view`, a strided
/// view of `base` read in place (a head view `[B, H, T, d]` of a `[B·T, H·d]` projection,
/// GQA's broadcast of K over a group's heads): `cols` its contiguous dim's size.
#[derive(Clone)]
pub(super) struct Operand2d {
    pub(super) base: Value,
    pub(super) cols: u64,
    pub(super) k_contiguous: bool,
    pub(super) view: Option<ViewRead>,
}

/// Where a strided operand's elements are: tile index `[lead.., row, col]` (the matmul's
/// batch dims, then the operand's other dim and its contiguous one, stride 1) is element
/// `offset + Σ lead·strides + row·strides[last]` of `base` (crate::view::StridedView).
#[derive(Clone)]
pub(super) struct ViewRead {
    pub(super) offset: u64,
    /// Strides of the batch dims, then of the row.
    pub(super) strides: Vec<u64>,
}

impl Operand2d {
    /// Elements between consecutive rows.
    pub(super) fn row_stride(&self) -> u64 {
        match &self.view {
            Some(v) => *v.strides.last().expect("a row stride"),
            None => self.cols,
        }
    }

    /// Whether every row starts on a 16-byte boundary of `esz`-byte elements and holds
    /// whole 16-byte chunks (so a chunk never reaches into the next row).
    pub(super) fn rows_aligned(&self, esz: u64) -> bool {
        let whole = (self.cols * esz) % 16 == 0;
        match &self.view {
            None => whole,
            Some(v) => {
                whole
                    && std::iter::once(v.offset)
                        .chain(v.strides.iter().copied())
                        .all(|x| (x * esz) % 16 == 0)
            }
        }
    }
}

/// One operand's ring of `stages` shared-memory tiles of `rows × cols` elements of `esz`
/// bytes (`cols` contiguous). Rows are split into 16-byte chunks and chunk `c` of row `r`
/// is stored at chunk `c ^ swizzle(r)`, so that the 8 rows one `ldmatrix` matrix reads
/// fall in 8 different 16-byte bank groups.
#[derive(Copy, Clone)]
pub(super) struct Ring {
    pub(super) base: Reg,
    pub(super) rows: u32,
    pub(super) cols: u32,
    pub(super) esz: u32,
}

impl Ring {
    pub(super) fn row_bytes(&self) -> u32 {
        self.cols * self.esz
    }

    pub(super) fn stage_bytes(&self) -> u32 {
        self.rows * self.row_bytes()
    }

    /// 16-byte chunks per row (a power of two).
    pub(super) fn chunks(&self) -> u32 {
        self.row_bytes() / 16
    }

    /// The swizzle of row `r` is `(r >> shift) & mask`: with 8 or more chunks per row, row
    /// `r mod 8` itself; with fewer, rows that share a 128-byte bank line are told apart
    /// by the higher bits.
    pub(super) fn swizzle(&self) -> (u32, u32) {
        let c = self.chunks();
        if c >= 8 {
            (0, 7)
        } else {
            ((8 / c).trailing_zeros(), c - 1)
        }
    }
}

/// One chunk a thread copies per slice.
pub(super) struct CopyItem {
    /// False for the thread's last chunk if the stage's chunk count is not a multiple of the
    /// thread count and this one is past it.
    pub(super) in_tile: Option<Reg>,
    /// Swizzled byte offset in the stage, plus an immediate.
    pub(super) shared: Ix,
    pub(super) shared_imm: i32,
    /// Global address at k = 0 when rows are 16-byte aligned, plus an immediate.
    pub(super) global: Option<Reg>,
    pub(super) global_imm: i32,
    /// Whether the non-K coordinate is inside the tensor.
    pub(super) inside: Reg,
    /// The non-K coordinate, clamped to 0 when outside.
    pub(super) outer_ix: Ix,
    /// The chunk's K offset within the slice.
    pub(super) k_off: Ix,
}

pub(super) struct CopyPlan {
    pub(super) op: Operand2d,
    pub(super) lead: Vec<Ix>,
    pub(super) items: Vec<CopyItem>,
    /// Elements between consecutive k.
    pub(super) k_stride: u64,
    /// The tile never reaches past the tensor's edge in its non-K dim.
    pub(super) always_inside: bool,
}

impl Gen<'_> {
    /// A matmul operand, as its kernel reads it ([`Gen::operand_reads`]), as a 2-d tile
    /// source, or `None` if it is neither a materialised tensor nor the swap of the last
    /// two dims of one. Under a widening cast the source is the 16-bit tensor: the ring
    /// holds its elements as they are, and tensor cores take them as 16-bit operands.
    pub(super) fn operand_2d(&self, read: &MatmulRead, k_is_last: bool) -> Option<Operand2d> {
        let base = read.stored;
        let swapped = match &read.perm {
            Some(perm) if !crate::schedule::swaps_last_two(perm) => return None,
            Some(_) => true,
            None => false,
        };
        if !self.fusion.is_materialized(self.g, base) {
            return None;
        }
        let s = &self.g.ty(base).shape.0;
        let r = s.len();
        Some(Operand2d {
            base,
            cols: s[r - 1],
            // The lhs [M, K] has K last unless swapped; the rhs [K, N] has K last only if
            // swapped (a [N, K] weight read transposed).
            k_contiguous: k_is_last != swapped,
            view: None,
        })
    }

    /// The matmul operand `x` (`[.., M, K]` for the lhs, `[.., K, N]` for the rhs, as
    /// `k_is_last` says) as a strided view of a materialised tensor read in place, when
    /// [`Gen::operand_2d`] has no tile source for it: its base the first materialised value
    /// of its view chain, one of its last two dims of stride 1
    /// ([`crate::schedule::strided_operand`], which the schedule asked).
    pub(super) fn operand_view(&self, x: Value, k_is_last: bool) -> Option<Operand2d> {
        let (sv, last_contiguous) = crate::schedule::strided_operand(
            self.g,
            &|v| self.fusion.is_materialized(self.g, v),
            x,
        )?;
        let r = sv.shape.len();
        // Tile order: the contiguous dim last.
        let (row, col) = if last_contiguous {
            (r - 2, r - 1)
        } else {
            (r - 1, r - 2)
        };
        let mut strides = sv.strides[..r - 2].to_vec();
        strides.push(sv.strides[row]);
        Some(Operand2d {
            base: sv.base,
            cols: sv.shape[col],
            // The lhs has K at r - 1, the rhs at r - 2.
            k_contiguous: (col == r - 1) == k_is_last,
            view: Some(ViewRead {
                offset: sv.offset,
                strides,
            }),
        })
    }

    /// Byte address of tile index `idx` (`[lead.., row, col]`) of operand `op`.
    pub(super) fn operand_address(&mut self, op: &Operand2d, idx: &[Ix]) -> Reg {
        let Some(v) = &op.view else {
            return self.address(op.base, idx);
        };
        let r = idx.len();
        let mut off = self.iadd(Ix::C(v.offset), idx[r - 1]);
        for (&i, &st) in idx[..r - 1].iter().zip(&v.strides) {
            let t = self.imul_c(i, st);
            off = self.iadd(off, t);
        }
        let fo = self.ix_op(off);
        let esz = self.g.ty(op.base).dtype.size_bytes() as u32;
        let bytes = self
            .b
            .op(RegType::U64, Op::MulWideU32, &[fo, Operand::U32(esz)]);
        let base = self.ptr[&op.base];
        self.b
            .op(RegType::U64, Op::AddU64, &[base.into(), bytes.into()])
    }

    /// Advances each ring-stage index in `regs` by one, wrapping at `stages` (the stage read
    /// and the stage written next, once per slice or key block).
    pub(super) fn advance_stages(&mut self, regs: &[Reg], stages: u32) {
        for &r in regs {
            let next = self
                .b
                .op(RegType::U32, Op::IAdd, &[r.into(), Operand::U32(1)]);
            let wrap = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::Eq),
                &[next.into(), Operand::U32(stages)],
            );
            self.b
                .assign(r, Op::Select, &[wrap.into(), Operand::U32(0), next.into()]);
        }
    }

    /// Swizzled byte offset in one stage of `ring` of element `col` of row `row`.
    pub(super) fn ring_offset(&mut self, ring: &Ring, row: Ix, col: Ix) -> Ix {
        let epc = (16 / ring.esz) as u64;
        let chunk = self.idiv_c(col, epc);
        let within = self.irem_c(col, epc);
        let (shift, mask) = ring.swizzle();
        let swz = match row {
            Ix::C(r) => Ix::C((r >> shift) & mask as u64),
            Ix::R(r) => {
                let s = self
                    .b
                    .op(RegType::U32, Op::ShrU, &[r.into(), Operand::U32(shift)]);
                Ix::R(
                    self.b
                        .op(RegType::U32, Op::And, &[s.into(), Operand::U32(mask)]),
                )
            }
        };
        let phys = match (chunk, swz) {
            (Ix::C(a), Ix::C(b)) => Ix::C(a ^ b),
            (_, Ix::C(0)) => chunk,
            _ => {
                let (a, b) = (self.ix_op(chunk), self.ix_op(swz));
                Ix::R(self.b.op(RegType::U32, Op::Xor, &[a, b]))
            }
        };
        let r = self.imul_c(row, ring.row_bytes() as u64);
        let c = self.imul_c(phys, 16);
        let w = self.imul_c(within, ring.esz as u64);
        let rc = self.iadd(r, c);
        self.iadd(rc, w)
    }

    /// A U32 register holding `base + off`.
    pub(super) fn shared_addr(&mut self, base: Reg, off: Ix) -> Reg {
        match off {
            Ix::C(0) => base,
            _ => {
                let o = self.ix_op(off);
                self.b.op(RegType::U32, Op::IAdd, &[base.into(), o])
            }
        }
    }

    /// Plans how `threads` threads fill one stage of `ring` from operand `op`: chunk
    /// `e = tid + i·threads` of the stage is row `e / chunks`, chunk `e mod chunks`. For each
    /// of the thread's chunks: its swizzled shared offset, its global address at k = 0 (the
    /// non-K coordinate clamped into the tensor), whether the non-K coordinate is inside
    /// the tensor, and its K offset within the slice. `outer0` is the tile's first row (A)
    /// or column (B), `outer` that dim's size (M or N), `tile_outer` the tile's (bm or bn).
    pub(super) fn copy_plan(
        &mut self,
        op: &Operand2d,
        ring: &Ring,
        lead: &[Ix],
        (outer0, outer, tile_outer): (Ix, u64, u32),
        (threads, tid): (u32, Ix),
        k_whole: bool,
    ) -> Result<CopyPlan, LowerError> {
        let epc = 16 / ring.esz;
        let chunks = ring.chunks();
        let total = ring.rows * chunks;
        let aligned = op.rows_aligned(ring.esz as u64);
        let always_inside = outer % tile_outer as u64 == 0;
        // When the threads cover whole rows a whole number of times, a thread's chunks are
        // one column, `step` rows apart: with `step` a multiple of the swizzle period (8
        // rows) they share one shared offset and one global address, plus immediates — when
        // no chunk needs its own test (the tile stays inside the tensor and K is whole
        // slices, so only the slice is tested).
        let step = threads / chunks.max(1);
        let row_bytes = op.row_stride() * ring.esz as u64;
        let last_row = (total / threads.max(1)).saturating_sub(1) as u64 * step as u64;
        let uniform = aligned
            && threads % chunks == 0
            && step % 8 == 0
            && total % threads == 0
            && always_inside
            && k_whole
            && last_row * row_bytes < i32::MAX as u64
            && last_row * (ring.row_bytes() as u64) < i32::MAX as u64;
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
                    shared_imm: (rows * ring.row_bytes() as u64) as i32,
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
    pub(super) fn issue_copies(
        &mut self,
        plan: &CopyPlan,
        ring: &Ring,
        stage: Ix,
        k0: Ix,
        k_end: Operand,
        k_whole: bool,
    ) -> Result<(), LowerError> {
        let esz = ring.esz;
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
    pub(super) fn issue_whole_slice(
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
            &[ko, Self::imm_u(plan.k_stride * ring.esz as u64)],
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

    pub(super) fn copy_chunk(
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
}
