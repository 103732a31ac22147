//! The tensor-core tile ([`TileConfig::Mma`]): `mma.sync` over the shared-memory ring of
//! `ring/` (stages in its `StageLayout`, filled by its `cp.async` loader), fragments from
//! `fragments.rs`, the epilogue of `epilogue.rs`. When it is chosen: `schedule.rs`; the
//! order of every sum: `schedule::reduction_order`.
//!
//! Measured on the H200 and chosen against alternatives: docs/perf/2026-11-29-h200-issue3-part2.md.
//!
//! Fragment layouts are those of PTX ISA §9.7.14.5.7–8 ("Matrix Fragments for mma.m16n8k8 /
//! mma.m16n8k16"), as documented on [`MmaShape::a_pos`]; `ldmatrix` (§9.7.14.5.15) delivers
//! exactly those fragments from 16-byte shared-memory rows, transposing where the operand
//! is stored the other way round.

use super::epilogue::WarpTile;
use super::fragments::FragPlan;
use super::matmul::split_range;
use super::ring::cp_async::CopyPlan;
use super::ring::{Operand2d, Ring, StageLayout};
use super::wgmma::{major_of, wgmma_stage};
use super::{Gen, Ix, LowerError};
use crate::schedule::mma_shared_bytes;
use std::collections::HashMap;
use tessel_ir::graph::{MatmulLayout, MmaEngine, MmaEpilogue, TileConfig};
use tessel_ir::kernel::{MmaShape, Op, Operand, RegType, Special, Stmt};
use tessel_ir::{Reg, Value};

/// Row tiles per group of the grouped CTA order ([`Gen::matmul_cta`]). A wave of
/// W = 2 · 132 CTAs then reads G row tiles of A and W / G column tiles of B; their sum,
/// G + W / G, is least at G = √W ≈ 16 (42 MB for the bf16 128 × 128 × K = 5120 tile, inside
/// the H200's 50 MB L2).
pub(super) const GROUP_M: u64 = 16;

/// The grid of the tensor-core tile: all `mt · nt` tiles along x (grouped order), the
/// batch and the K ranges along y.
pub(super) fn tile_grid((mt, nt): (u64, u64), batch: u64, ranges: u64) -> [u32; 3] {
    [
        (mt * nt).max(1) as u32,
        (batch * ranges.max(1)).max(1) as u32,
        1,
    ]
}

impl Gen<'_> {
    /// Tensor-core GEMM. CTA x of grid row y computes tile x of the grouped order
    /// ([`Gen::matmul_cta`]) for batch `y mod batch` over K range `y / batch`:
    ///
    /// 1. both operands' tiles go through one ring of `stages` shared-memory slices, filled
    ///    by 16-byte `cp.async` (zero-filled past the tensor's edges and K; element copies
    ///    where rows are not 16-byte aligned), 16-byte chunks swizzled by row;
    /// 2. per slice: wait for it, barrier, issue the copies of the slice `stages - 1` ahead
    ///    into the stage read one iteration ago, then per k step `ldmatrix.x4` (or element
    ///    loads for transposed TF32) and one `mma.sync` per 16 × 8 fragment of the warp's tile;
    /// 3. the epilogue (the group's output of the f32 accumulators, each rounded once to the
    ///    matmul's dtype) through shared memory in row vectors of 4 columns when N is a
    ///    multiple of 4 ([`Gen::staged_epilogue`]), else per fragment; or, for a group whose output
    ///    is whole rows of the tile (`fuse` rule 8, with `row_reductions` its reductions),
    ///    through shared memory row by row ([`Gen::row_epilogue`]).
    ///
    /// Returns the grid.
    pub(super) fn mma(
        &mut self,
        out: Value,
        (mm, row_reductions): (Value, &[Value]),
        tile: &TileConfig,
    ) -> Result<[u32; 3], LowerError> {
        let TileConfig::Mma {
            bm,
            bn,
            bk,
            warps_m,
            warps_n,
            stages,
            split_k,
            shape,
            epilogue,
            engine,
            ..
        } = *tile
        else {
            unreachable!("called for mma tiles")
        };
        match engine {
            MmaEngine::WgmmaTma { .. } => return self.wgmma_tma(out, (mm, row_reductions), tile),
            MmaEngine::WgmmaPingpong { .. } => {
                return self.wgmma_pingpong(out, (mm, row_reductions), tile)
            }
            MmaEngine::Sync | MmaEngine::Wgmma => {}
        }
        let wgmma = engine == MmaEngine::Wgmma;
        // The schedule chose the instruction, the epilogue and the shared memory for the
        // dtype, N and the target (`schedule::matmul`; the verifier checks the first two).
        let (lhs, rhs, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let [ra, rb] = self.operand_reads(mm);
        // The dtype the operands are read in: 16-bit under widening casts.
        let esz = self.g.ty(ra.stored).dtype.size_bytes() as u32;
        // Each operand a stored tensor or its transpose, else a strided view read in place.
        let a = self
            .operand_2d(&ra, true)
            .or_else(|| self.operand_view(lhs, true).filter(|_| !ra.widened));
        let b = self
            .operand_2d(&rb, false)
            .or_else(|| self.operand_view(rhs, false).filter(|_| !rb.widened));
        let (Some(a), Some(b)) = (a, b) else {
            return Err(LowerError::Unsupported {
                what: "a tensor-core matmul operand that is neither a stored tensor, its transpose nor a strided view of one"
                    .into(),
                value: mm,
            });
        };
        let batch = batch_shape.numel().max(1);
        let (mt, nt) = (m.div_ceil(bm as u64), n.div_ceil(bn as u64));
        let threads = 32 * warps_m * warps_n;
        let (wm, wn) = (bm / warps_m, bn / warps_n);
        let (mi, ni) = (wm / 16, wn / 8);
        let range_len = split_range(k, bk, split_k);
        // With the staged epilogue the output tile reuses the ring (counted as f32).
        let shared = mma_shared_bytes((bm, bn, bk), stages, esz, epilogue);

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let (ntile, mtile, lead, k_start, k_end) =
            self.matmul_cta((mt, nt), Some(GROUP_M), &batch_shape, k, range_len)?;
        let m0 = self.imul_c(mtile, bm as u64);
        let n0 = self.imul_c(ntile, bn as u64);
        let warp = self.idiv_c(Ix::R(tid), 32);
        let lane = self.irem_c(Ix::R(tid), 32);
        let wi = self.idiv_c(warp, warps_n as u64);
        let wj = self.irem_c(warp, warps_n as u64);
        let wm0 = self.imul_c(wi, wm as u64);
        let wn0 = self.imul_c(wj, wn as u64);

        // Shared rings: A as [bm][bk] (K contiguous) or [bk][bm]; B as [bn][bk] or [bk][bn].
        // Both rings in one buffer (A's stages, then B's), so that beyond 48 KiB it can be
        // the launch's dynamic shared memory.
        // wgmma's 128-byte swizzle is of shared-memory address bits: each stage starts at a
        // multiple of its 1024-byte pattern.
        let buf = self
            .b
            .kernel
            .new_shared(shared, if wgmma { 1024 } else { 128 });
        let base = self.b.op(RegType::U32, Op::SharedAddr(buf), &[]);
        // wgmma reads an MN-major stage in 128-byte column panels (`wgmma_stage`);
        // `ldmatrix` reads rows of any width.
        let ring_of = |op: &Operand2d, outer: u32, base: Reg| -> Ring {
            let layout = if wgmma {
                wgmma_stage(op.k_contiguous, outer, bk, esz)
            } else if op.k_contiguous {
                StageLayout::rows(outer, bk, esz)
            } else {
                StageLayout::rows(bk, outer, esz)
            };
            Ring { base, layout }
        };
        let ra = ring_of(&a, bm, base);
        let b_base = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[base.into(), Operand::U32(stages * ra.stage_bytes())],
        );
        let rb = ring_of(&b, bn, b_base);

        // The copy plan of each operand: per thread, which chunks of a stage it fills.
        // K slices never straddle K's end when it is a multiple of the slice (split ranges
        // are whole slices): one test per slice then replaces one per chunk.
        let k_whole = k % bk as u64 == 0;
        let thr = (threads, Ix::R(tid));
        let ca = self.copy_plan(&a, &ra, &lead, (m0, m, bm), thr, k_whole)?;
        let cb = self.copy_plan(&b, &rb, &lead, (n0, n, bn), thr, k_whole)?;

        let (accs, mi, ni) = if wgmma {
            // B may be MN-major for 16-bit inputs only (wgmma's transpose); A is read
            // through a K-major descriptor.
            let tf32 = shape == MmaShape::M16N8K8Tf32;
            if !a.k_contiguous || (tf32 && !b.k_contiguous) {
                return Err(LowerError::Unsupported {
                    what: "a wgmma tile whose A is not read along K, or a TF32 B not read along K"
                        .into(),
                    value: mm,
                });
            }
            let accs = self.wgmma_slices(
                (&ra, &rb, major_of(b.k_contiguous)),
                (&ca, &cb),
                (stages, bk, bn),
                (k_start, k_end, k_whole),
                Ix::R(tid),
                shape,
            )?;
            (accs, 1, bn / 8)
        } else {
            let frags = (&ra, &a, &rb, &b);
            let accs = self.mma_sync_slices(
                frags,
                (&ca, &cb),
                (stages, bk),
                (k_start, k_end, k_whole),
                (wm0, wn0, lane),
                (mi, ni),
                shape,
            )?;
            (accs, mi, ni)
        };

        let warp_tile = WarpTile {
            tid,
            lane,
            wm0,
            wn0,
            named_barrier: None,
        };
        self.tile_epilogue(
            (out, mm, row_reductions),
            (base, bm, bn, threads),
            (&accs, mi, ni),
            warp_tile,
            (&lead[..], m0, n0, m, n),
            epilogue,
        )?;
        Ok(tile_grid((mt, nt), batch, k.div_ceil(range_len)))
    }

    /// The tile's epilogue from every accumulator-holding thread's `mi × ni` fragments
    /// (`warp_tile` says where its warp's sit; `threads` of them, which meet at the
    /// barrier `warp_tile` names): through the shared-memory tile at `base` (the ring, no
    /// longer read) for [`MmaEpilogue::Staged`] — [`Gen::staged_epilogue`], or
    /// [`Gen::row_epilogue`] for a group writing whole rows (`row_reductions` its
    /// reductions) — else straight from the registers, per fragment.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tile_epilogue(
        &mut self,
        (out, mm, row_reductions): (Value, Value, &[Value]),
        tile: (Reg, u32, u32, u32),
        (accs, mi, ni): (&[[Reg; 4]], u32, u32),
        warp_tile: WarpTile,
        edges: (&[Ix], Ix, Ix, u64, u64),
        epilogue: MmaEpilogue,
    ) -> Result<(), LowerError> {
        if epilogue == MmaEpilogue::Staged {
            if self.g.matmul_layout(mm, out) == Some(MatmulLayout::Rows) {
                self.staged_epilogue(out, mm, tile, (accs, mi, ni), warp_tile, edges)?;
            } else {
                let group = (out, mm, row_reductions);
                self.row_epilogue(group, tile, (accs, mi, ni), warp_tile, edges)?;
            }
            return Ok(());
        }
        let (lead, m0, n0, m, n) = edges;
        let WarpTile { lane, wm0, wn0, .. } = warp_tile;
        // Epilogue: lane (g, t) holds rows g, g + 8 and columns 2t, 2t + 1 of each fragment.
        let g = self.idiv_c(lane, 4);
        let t = self.irem_c(lane, 4);
        let t2 = self.imul_c(t, 2);
        let row0 = self.iadd(m0, wm0);
        let row0 = self.iadd(row0, g);
        let col0 = self.iadd(n0, wn0);
        let col0 = self.iadd(col0, t2);
        // Registers q = 2h, 2h + 1 are columns 2t, 2t + 1 of one row: one two-element store
        // when rows have an even length (the pair is then aligned), else one each.
        let pairs = epilogue == MmaEpilogue::Pairs;
        for i in 0..mi as usize {
            for j in 0..ni as usize {
                let frag = accs[i * ni as usize + j];
                let groups: Vec<(usize, Vec<Reg>)> = if pairs {
                    vec![(0, frag[..2].to_vec()), (2, frag[2..].to_vec())]
                } else {
                    frag.iter()
                        .enumerate()
                        .map(|(q, &a)| (q, vec![a]))
                        .collect()
                };
                for (q, regs) in groups {
                    let (dr, dc) = MmaShape::cd_pos(0, q);
                    let row = self.iadd(row0, Ix::C((16 * i + dr) as u64));
                    let col = self.iadd(col0, Ix::C((8 * j + dc) as u64));
                    self.guarded_epilogue((out, mm), lead, (row, m), (col, n), &regs)?;
                }
            }
        }
        Ok(())
    }

    /// The `mma.sync` main loop of the tensor-core tile: per slice, wait for it, barrier,
    /// issue the copies of the slice `stages - 1` ahead into the stage multiplied one
    /// iteration ago, then per k step `ldmatrix.x4` (or element loads for transposed TF32)
    /// and one `mma.sync` per 16 × 8 fragment of the warp's `mi × ni` fragments, which it
    /// returns.
    #[allow(clippy::too_many_arguments)]
    fn mma_sync_slices(
        &mut self,
        (ra, a, rb, b): (&Ring, &Operand2d, &Ring, &Operand2d),
        (ca, cb): (&CopyPlan, &CopyPlan),
        (stages, bk): (u32, u32),
        (k_start, k_end, k_whole): (Operand, Operand, bool),
        (wm0, wn0, lane): (Ix, Ix, Ix),
        (mi, ni): (u32, u32),
        shape: MmaShape,
    ) -> Result<Vec<[Reg; 4]>, LowerError> {
        let kstep = shape.k() as u32;
        // Fragment addresses (offsets within a stage) for every k step of a slice.
        let frag = FragPlan::new(
            self,
            shape,
            (ra, a),
            (rb, b),
            (wm0, wn0),
            lane,
            (mi, ni),
            bk,
        );

        let accs: Vec<[Reg; 4]> = (0..mi * ni)
            .map(|_| {
                std::array::from_fn(|_| {
                    let r = self.b.kernel.new_reg(RegType::F32);
                    self.b.assign(r, Op::Mov, &[Operand::f32(0.0)]);
                    r
                })
            })
            .collect();

        // Prologue: slices 0 .. stages-2 in flight.
        let (rd, wr) = self.ring_prologue(
            (ra, rb),
            (ca, cb),
            stages - 1,
            bk,
            (k_start, k_end, k_whole),
        )?;

        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        self.b.push(Stmt::CpAsyncWait(stages - 2));
        self.b.push(Stmt::Barrier);
        // The slice `stages - 1` ahead goes into the stage multiplied one iteration ago,
        // which every warp has finished (the barrier): issued before this slice's mma, so
        // the copies overlap them.
        let k_ahead = self.iadd(Ix::R(kt), Ix::C(((stages - 1) * bk) as u64));
        let wra = self.imul_c(Ix::R(wr), ra.stage_bytes() as u64);
        let wrb = self.imul_c(Ix::R(wr), rb.stage_bytes() as u64);
        self.issue_copies(ca, ra, wra, k_ahead, k_end, k_whole)?;
        self.issue_copies(cb, rb, wrb, k_ahead, k_end, k_whole)?;
        self.b.push(Stmt::CpAsyncCommit);
        let rda = self.imul_c(Ix::R(rd), ra.stage_bytes() as u64);
        let rdb = self.imul_c(Ix::R(rd), rb.stage_bytes() as u64);
        let stage_a = self.shared_addr(ra.base, rda);
        let stage_b = self.shared_addr(rb.base, rdb);
        // The stage address plus each distinct fragment offset, added once per slice.
        let (mut addrs_a, mut addrs_b) = (HashMap::new(), HashMap::new());
        for step in 0..(bk / kstep) as usize {
            let af: Vec<Vec<Reg>> = (0..mi as usize)
                .map(|i| {
                    let src = &frag.a[step][i];
                    self.load_frag(shape, (stage_a, &mut addrs_a), src, frag.a_trans)
                })
                .collect();
            // One ldmatrix.x4 (or four scalar loads) gives fragments 2p and 2p + 1.
            let mut bf: Vec<Vec<Reg>> = Vec::new();
            for p in 0..(ni / 2) as usize {
                let src = &frag.b[step][p];
                let regs = self.load_frag(shape, (stage_b, &mut addrs_b), src, frag.b_trans);
                bf.push(regs[..2].to_vec());
                bf.push(regs[2..].to_vec());
            }
            for i in 0..mi as usize {
                for j in 0..ni as usize {
                    let acc = accs[i * ni as usize + j];
                    self.b.push(Stmt::Mma {
                        shape,
                        d: acc,
                        a: af[i].clone(),
                        b: bf[j].clone(),
                        c: acc,
                    });
                }
            }
        }
        self.advance_stages(&[rd, wr], stages);
        self.close_for(kt, k_start, k_end, Operand::U32(bk));
        // Copies past the end (zero-filled, never read) must land before the CTA exits.
        self.b.push(Stmt::CpAsyncWaitAll);
        Ok(accs)
    }

    /// The ring's prologue: the copies of K slices `0 .. ahead` into stages `0 .. ahead`,
    /// one `cp.async` group each; returns the stage index registers `(rd, wr)`, the stage
    /// read next (0) and the stage written next (`ahead`).
    pub(super) fn ring_prologue(
        &mut self,
        (ra, rb): (&Ring, &Ring),
        (ca, cb): (&CopyPlan, &CopyPlan),
        ahead: u32,
        bk: u32,
        (k_start, k_end, k_whole): (Operand, Operand, bool),
    ) -> Result<(Reg, Reg), LowerError> {
        for s in 0..ahead {
            let k0 = match k_start {
                Operand::U32(x) => Ix::C((x + s * bk) as u64),
                Operand::Reg(r) => self.iadd(Ix::R(r), Ix::C((s * bk) as u64)),
                _ => unreachable!("K range starts are u32"),
            };
            let sa = Ix::C((s * ra.stage_bytes()) as u64);
            let sb = Ix::C((s * rb.stage_bytes()) as u64);
            self.issue_copies(ca, ra, sa, k0, k_end, k_whole)?;
            self.issue_copies(cb, rb, sb, k0, k_end, k_whole)?;
            self.b.push(Stmt::CpAsyncCommit);
        }
        let rd = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(rd, Op::Mov, &[Operand::U32(0)]);
        let wr = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(wr, Op::Mov, &[Operand::U32(ahead)]);
        Ok((rd, wr))
    }
}
