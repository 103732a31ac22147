//! Lowering of the tensor-core schedules: the tiled `mma.sync` GEMM ([`TileConfig::Mma`])
//! and the decode GEMV ([`TileConfig::GemvMma`]). When each is chosen: `schedule.rs`; the
//! order of every sum: `schedule::reduction_order`.
//!
//! Measured on the H200 and chosen against alternatives: docs/perf/2026-11-29-h200-issue3-part2.md.
//!
//! Fragment layouts are those of PTX ISA §9.7.14.5.7–8 ("Matrix Fragments for mma.m16n8k8 /
//! mma.m16n8k16"), as documented on [`MmaShape::a_pos`]; `ldmatrix` (§9.7.14.5.15) delivers
//! exactly those fragments from 16-byte shared-memory rows, transposing where the operand
//! is stored the other way round.

use super::matmul::split_range;
use super::{Gen, Ix, LowerError};
use std::collections::HashMap;
use tessel_ir::graph::{Op as GOp, TileConfig};
use tessel_ir::kernel::{
    CpAsyncCache, ICmp, MmaShape, Op, Operand, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{DType, Reg, Value};

/// Row tiles per group of the grouped CTA order ([`Gen::matmul_cta`]). A wave of
/// W = 2 · 132 CTAs then reads G row tiles of A and W / G column tiles of B; their sum,
/// G + W / G, is least at G = √W ≈ 16 (42 MB for the bf16 128 × 128 × K = 5120 tile, inside
/// the H200's 50 MB L2).
const GROUP_M: u64 = 16;

/// Floats of padding per row of the staged epilogue's tile (see `Gen::staged_epilogue`).
const STAGE_PAD: u32 = 8;

/// The most shared memory one CTA may use with the dynamic opt-in (227 KiB on the H200,
/// Hopper tuning guide, "Shared Memory").
const MAX_SHARED: u32 = 227 * 1024;

/// The grid of the tensor-core tile: all `mt · nt` tiles along x (grouped order), the
/// batch and the K ranges along y.
fn tile_grid((mt, nt): (u64, u64), batch: u64, ranges: u64) -> [u32; 3] {
    [
        (mt * nt).max(1) as u32,
        (batch * ranges.max(1)).max(1) as u32,
        1,
    ]
}

/// Where a thread's warp sits in the CTA's tile: the thread index, its lane, and the warp
/// tile's first row and column.
#[derive(Copy, Clone)]
struct WarpTile {
    tid: Reg,
    lane: Ix,
    wm0: Ix,
    wn0: Ix,
}

/// One matmul operand as the tile copies it: the materialised tensor `base` with its last
/// dim `cols` (contiguous), and whether `cols` is the K dim.
#[derive(Copy, Clone)]
struct Operand2d {
    base: Value,
    cols: u64,
    k_contiguous: bool,
}

/// One operand's ring of `stages` shared-memory tiles of `rows × cols` elements of `esz`
/// bytes (`cols` contiguous). Rows are split into 16-byte chunks and chunk `c` of row `r`
/// is stored at chunk `c ^ swizzle(r)`, so that the 8 rows one `ldmatrix` matrix reads
/// fall in 8 different 16-byte bank groups.
#[derive(Copy, Clone)]
struct Ring {
    base: Reg,
    rows: u32,
    cols: u32,
    esz: u32,
}

impl Ring {
    fn row_bytes(&self) -> u32 {
        self.cols * self.esz
    }

    fn stage_bytes(&self) -> u32 {
        self.rows * self.row_bytes()
    }

    /// 16-byte chunks per row (a power of two).
    fn chunks(&self) -> u32 {
        self.row_bytes() / 16
    }

    /// The swizzle of row `r` is `(r >> shift) & mask`: with 8 or more chunks per row, row
    /// `r mod 8` itself; with fewer, rows that share a 128-byte bank line are told apart
    /// by the higher bits.
    fn swizzle(&self) -> (u32, u32) {
        let c = self.chunks();
        if c >= 8 {
            (0, 7)
        } else {
            ((8 / c).trailing_zeros(), c - 1)
        }
    }
}

impl Gen<'_> {
    /// The operand `x` of a matmul as a 2-d tile source, or `None` if it is neither a
    /// materialised tensor nor the swap of the last two dims of one.
    fn operand_2d(&self, x: Value, k_is_last: bool) -> Option<Operand2d> {
        let (base, swapped) = match &self.g.ops[x] {
            GOp::Permute { arg, perm } => {
                if !crate::schedule::swaps_last_two(perm) {
                    return None;
                }
                (*arg, true)
            }
            _ => (x, false),
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
        })
    }

    /// Swizzled byte offset in one stage of `ring` of element `col` of row `row`.
    fn ring_offset(&mut self, ring: &Ring, row: Ix, col: Ix) -> Ix {
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
    fn shared_addr(&mut self, base: Reg, off: Ix) -> Reg {
        match off {
            Ix::C(0) => base,
            _ => {
                let o = self.ix_op(off);
                self.b.op(RegType::U32, Op::IAdd, &[base.into(), o])
            }
        }
    }

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
    ///    matmul's dtype) through shared memory in 16-byte row vectors when N is a multiple
    ///    of 4 ([`Gen::staged_epilogue`]), else per fragment.
    ///
    /// Returns the grid.
    pub(super) fn mma(
        &mut self,
        out: Value,
        mm: Value,
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
        } = *tile
        else {
            unreachable!("called for mma tiles")
        };
        let (lhs, rhs, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let dt = self.g.ty(lhs).dtype;
        let shape = match dt {
            DType::Bf16 => MmaShape::M16N8K16Bf16,
            DType::F16 => MmaShape::M16N8K16F16,
            DType::F32 => MmaShape::M16N8K8Tf32,
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("a tensor-core matmul of {dt} operands"),
                    value: mm,
                })
            }
        };
        let esz = dt.size_bytes() as u32;
        let kstep = shape.k() as u32;
        let (Some(a), Some(b)) = (self.operand_2d(lhs, true), self.operand_2d(rhs, false)) else {
            return Err(LowerError::Unsupported {
                what: "a tensor-core matmul operand that is not a stored tensor or its transpose"
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
        // The epilogue goes through shared memory when rows are whole 16-byte vectors (see
        // below): the output tile of f32, rows padded by 8 floats, reuses the ring.
        let staged = n % 4 == 0 && self.g.ty(out).shape == self.g.ty(mm).shape;
        let tile_bytes = bm * (bn + STAGE_PAD) * 4;
        let ring_bytes = stages * (bm + bn) * bk * esz;
        let shared = if staged {
            ring_bytes.max(tile_bytes)
        } else {
            ring_bytes
        };
        if shared > MAX_SHARED {
            return Err(LowerError::Unsupported {
                what: format!(
                    "{tile} with {dt} operands: {shared} bytes of shared memory, above the {MAX_SHARED} bytes a CTA may have"
                ),
                value: mm,
            });
        }

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
        let buf = self.b.kernel.new_shared(shared, 128);
        let base = self.b.op(RegType::U32, Op::SharedAddr(buf), &[]);
        let ring_of = |op: &Operand2d, outer: u32, base: Reg| -> Ring {
            let (rows, cols) = if op.k_contiguous {
                (outer, bk)
            } else {
                (bk, outer)
            };
            Ring {
                base,
                rows,
                cols,
                esz,
            }
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

        // Fragment addresses (offsets within a stage) for every k step of a slice.
        let frag = FragPlan::new(
            self,
            shape,
            &ra,
            &rb,
            &a,
            &b,
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
        for s in 0..stages - 1 {
            let k0 = match k_start {
                Operand::U32(x) => Ix::C((x + s * bk) as u64),
                Operand::Reg(r) => self.iadd(Ix::R(r), Ix::C((s * bk) as u64)),
                _ => unreachable!("K range starts are u32"),
            };
            let sa = Ix::C((s * ra.stage_bytes()) as u64);
            let sb = Ix::C((s * rb.stage_bytes()) as u64);
            self.issue_copies(&ca, &ra, sa, k0, k_end, k_whole)?;
            self.issue_copies(&cb, &rb, sb, k0, k_end, k_whole)?;
            self.b.push(Stmt::CpAsyncCommit);
        }
        let rd = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(rd, Op::Mov, &[Operand::U32(0)]);
        let wr = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(wr, Op::Mov, &[Operand::U32(stages - 1)]);

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
        self.issue_copies(&ca, &ra, wra, k_ahead, k_end, k_whole)?;
        self.issue_copies(&cb, &rb, wrb, k_ahead, k_end, k_whole)?;
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
        for r in [rd, wr] {
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
        self.close_for(kt, k_start, k_end, Operand::U32(bk));
        // Copies past the end (zero-filled, never read) must land before the CTA exits.
        self.b.push(Stmt::CpAsyncWaitAll);

        if staged {
            let tile = (base, bm, bn, threads);
            let warp_tile = WarpTile {
                tid,
                lane,
                wm0,
                wn0,
            };
            let edges = (&lead[..], m0, n0, m, n);
            self.staged_epilogue(out, mm, tile, (&accs, mi, ni), warp_tile, edges)?;
            return Ok(tile_grid((mt, nt), batch, k.div_ceil(range_len)));
        }
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
        let pairs = n % 2 == 0 && self.g.ty(out).shape == self.g.ty(mm).shape;
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
                    let (ro, co) = (self.ix_op(row), self.ix_op(col));
                    let m_ok = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ro, Self::imm_u(m)]);
                    let n_ok = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[co, Self::imm_u(n)]);
                    let ok = self
                        .b
                        .op(RegType::Pred, Op::PAnd, &[m_ok.into(), n_ok.into()]);
                    self.open();
                    let mut idx = lead.clone();
                    idx.extend([row, col]);
                    self.matmul_epilogue(out, mm, &idx, &regs)?;
                    self.close_if(ok);
                }
            }
        }
        Ok(tile_grid((mt, nt), batch, k.div_ceil(range_len)))
    }

    /// The tile's epilogue through shared memory: every warp writes its f32 accumulators
    /// to a `bm × (bn + 8)` f32 tile (the ring, no longer read: all copies waited for, and a
    /// barrier), then each thread takes 4 consecutive columns of a row at a time — 32
    /// threads cover 512 contiguous bytes of f32 — and stores their epilogue as one vector
    /// (16 bytes of f32, 8 of bf16): the output and any tensor the epilogue reads go
    /// through whole cache lines. The padding of 8 floats puts the 8 rows of a fragment
    /// store in different banks. Needs N a multiple of 4 (aligned vectors).
    fn staged_epilogue(
        &mut self,
        out: Value,
        mm: Value,
        (base, bm, bn, threads): (Reg, u32, u32, u32),
        (accs, mi, ni): (&[[Reg; 4]], u32, u32),
        WarpTile {
            tid,
            lane,
            wm0,
            wn0,
        }: WarpTile,
        (lead, m0, n0, m, n): (&[Ix], Ix, Ix, u64, u64),
    ) -> Result<(), LowerError> {
        let stride = (bn + STAGE_PAD) * 4;
        let g = self.idiv_c(lane, 4);
        let t = self.irem_c(lane, 4);
        // Lane (g, t) writes rows g, g + 8 at columns 2t, 2t + 1 of each fragment.
        let r = self.iadd(wm0, g);
        let r = self.imul_c(r, stride as u64);
        let c = self.imul_c(t, 2);
        let c = self.iadd(wn0, c);
        let c = self.imul_c(c, 4);
        let off = self.iadd(r, c);
        let mine = self.shared_addr(base, off);
        self.b.push(Stmt::Barrier);
        for i in 0..mi {
            for j in 0..ni {
                let frag = accs[(i * ni + j) as usize];
                for h in 0..2u32 {
                    let imm = ((16 * i + 8 * h) * stride + 8 * j * 4) as i32;
                    self.b.push(Stmt::Store {
                        space: Space::Shared,
                        width: Width::V2,
                        addr: mine,
                        offset: imm,
                        values: vec![frag[2 * h as usize].into(), frag[2 * h as usize + 1].into()],
                    });
                }
            }
        }
        self.b.push(Stmt::Barrier);
        // Read back 4 columns at a time, row by row.
        let per_row = bn / 4;
        let vecs = bm * per_row;
        for it in 0..vecs.div_ceil(threads) {
            let e = self.iadd(Ix::R(tid), Ix::C((it * threads) as u64));
            let row = self.idiv_c(e, per_row as u64);
            let c4 = self.irem_c(e, per_row as u64);
            let col = self.imul_c(c4, 4);
            let gr = self.iadd(m0, row);
            let gc = self.iadd(n0, col);
            let (ro, co, eo) = (self.ix_op(gr), self.ix_op(gc), self.ix_op(e));
            let m_ok = self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ro, Self::imm_u(m)]);
            let n_ok = self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[co, Self::imm_u(n)]);
            let mut ok = self
                .b
                .op(RegType::Pred, Op::PAnd, &[m_ok.into(), n_ok.into()]);
            if (it + 1) * threads > vecs {
                let in_tile = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[eo, Operand::U32(vecs)],
                );
                ok = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[ok.into(), in_tile.into()]);
            }
            self.open();
            let ro = self.imul_c(row, stride as u64);
            let cb = self.imul_c(col, 4);
            let so = self.iadd(ro, cb);
            let addr = self.shared_addr(base, so);
            let vals: Vec<Reg> = (0..4)
                .map(|_| self.b.kernel.new_reg(RegType::F32))
                .collect();
            self.b.push(Stmt::Load {
                dsts: vals.clone(),
                space: Space::Shared,
                width: Width::V4,
                addr,
                offset: 0,
            });
            let mut idx = lead.to_vec();
            idx.extend([gr, gc]);
            self.matmul_epilogue(out, mm, &idx, &vals)?;
            self.close_if(ok);
        }
        Ok(())
    }

    /// Tensor-core GEMV for decode: CTA `x` computes output columns `8x .. 8x + 7` for all
    /// M ≤ 16 rows as `D[16 tokens, 8 columns] = X[16, K] · Wᵀ[K, 8]` — the M ≤ 16 left rows
    /// are the mma's A operand (rows past M are zeros) and 8 weight rows its B operand.
    /// In each chunk of 32 k, lane (g, t) = (lane / 4, lane mod 4) loads the 16 bytes at
    /// k = 8t .. 8t + 7 of weight row g and of left rows g and g + 8; k = 8t + 2u, 8t + 2u + 1
    /// take the place of the fragment's k = 2t, 2t + 1 (u = 0, 2) and k = 2t + 8, 2t + 9
    /// (u = 1, 3) — the same permutation for both operands, so each chunk's products are
    /// those of the matmul. The `warps` warps of a CTA take chunks w, w + warps, ..., each
    /// `unroll` chunks per iteration (all loads issued before the mma); with more than one
    /// warp their results are added in warp order through shared memory. Returns the grid.
    pub(super) fn gemv_mma(
        &mut self,
        out: Value,
        mm: Value,
        warps: u32,
        unroll: u32,
    ) -> Result<[u32; 3], LowerError> {
        let (lhs, rhs, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let dt = self.g.ty(lhs).dtype;
        let shape = match dt {
            DType::Bf16 => MmaShape::M16N8K16Bf16,
            DType::F16 => MmaShape::M16N8K16F16,
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("the tensor-core GEMV for {dt} operands"),
                    value: mm,
                })
            }
        };
        let (Some(x), Some(w)) = (self.operand_2d(lhs, true), self.operand_2d(rhs, false)) else {
            return Err(LowerError::Unsupported {
                what: "a GEMV operand that is not a stored tensor or its transpose".into(),
                value: mm,
            });
        };
        if !x.k_contiguous || !w.k_contiguous || m > 16 || k % 8 != 0 || batch_shape.numel() != 1 {
            return Err(LowerError::Unsupported {
                what: format!(
                    "the tensor-core GEMV for M = {m}, K = {k} (it needs M ≤ 16, K a multiple of 8, both operands read along K, no batch)"
                ),
                value: mm,
            });
        }
        let lead: Vec<Ix> = vec![Ix::C(0); batch_shape.rank()];
        let esz = 2u64;

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let cta = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let warp = self.idiv_c(Ix::R(tid), 32);
        let lane = self.irem_c(Ix::R(tid), 32);
        let g = self.idiv_c(lane, 4);
        let t = self.irem_c(lane, 4);
        let t8 = self.imul_c(t, 8);
        let n0 = self.imul_c(Ix::R(cta), 8);

        // Row pointers at k = 8t (rows clamped into the tensor: a row past the edge reads
        // a real row, and its results are not stored).
        let row_ptr = |this: &mut Self, base: Value, row: Ix, limit: u64| -> Reg {
            let ro = this.ix_op(row);
            let ok = this.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::LtU),
                &[ro, Self::imm_u(limit)],
            );
            let clamped = this
                .b
                .op(RegType::U32, Op::Select, &[ok.into(), ro, Operand::U32(0)]);
            let mut idx = lead.clone();
            idx.extend([Ix::R(clamped), t8]);
            this.address(base, &idx)
        };
        let wrow = self.iadd(n0, g);
        let pw = row_ptr(self, w.base, wrow, n);
        // Left rows g and g + 8 (the second only when M > 8; zeros otherwise).
        let mut px = vec![row_ptr(self, x.base, g, m)];
        if m > 8 {
            let g8 = self.iadd(g, Ix::C(8));
            px.push(row_ptr(self, x.base, g8, m));
        }
        let acc: [Reg; 4] = std::array::from_fn(|_| {
            let r = self.b.kernel.new_reg(RegType::F32);
            self.b.assign(r, Op::Mov, &[Operand::f32(0.0)]);
            r
        });
        let zero: Vec<Reg> = (0..4)
            .map(|_| {
                let r = self.b.kernel.new_reg(RegType::U32);
                self.b.assign(r, Op::Mov, &[Operand::U32(0)]);
                r
            })
            .collect();

        // Main loop: iterations whose `unroll` chunks all lie inside K, loads issued without
        // tests (rows past M or N read clamped rows whose results are never stored). Tail
        // loop: one chunk at a time, lanes past K load nothing and contribute zeros.
        let stride = 32 * warps as u64;
        let span = stride * unroll as u64;
        let reach = (unroll as u64 - 1) * stride + 32;
        let main_end = (k + 1).saturating_sub(reach);
        let start = self.imul_c(warp, 32);
        let start_op = self.ix_op(start);
        let main_loop = |this: &mut Self, kb: Reg, count: u32, tested: bool| {
            let step = this.b.op(
                RegType::U64,
                Op::MulWideU32,
                &[kb.into(), Operand::U32(esz as u32)],
            );
            let at = |this: &mut Self, p: Reg| -> Reg {
                this.b
                    .op(RegType::U64, Op::AddU64, &[p.into(), step.into()])
            };
            let qw = at(this, pw);
            let qx: Vec<Reg> = px.iter().map(|&p| at(this, p)).collect();
            // All loads of the iteration first, then the mma.
            let mut loaded = Vec::new();
            for u in 0..count as u64 {
                let off = u * stride;
                let k_ok = if tested {
                    let kpos = this.iadd(Ix::R(kb), t8);
                    let kpos = this.iadd(kpos, Ix::C(off));
                    let ko = this.ix_op(kpos);
                    Some(
                        this.b
                            .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ko, Self::imm_u(k)]),
                    )
                } else {
                    None
                };
                let load16 = |this: &mut Self, p: Reg| -> Vec<Reg> {
                    let d: Vec<Reg> = (0..4)
                        .map(|_| this.b.kernel.new_reg(RegType::U32))
                        .collect();
                    let load = Stmt::Load {
                        dsts: d.clone(),
                        space: Space::Global,
                        width: Width::V4,
                        addr: p,
                        offset: (off * esz) as i32,
                    };
                    match k_ok {
                        Some(ok) => {
                            for &r in &d {
                                this.b.assign(r, Op::Mov, &[Operand::U32(0)]);
                            }
                            this.open();
                            this.b.push(load);
                            this.close_if(ok);
                        }
                        None => this.b.push(load),
                    }
                    d
                };
                let wv = load16(this, qw);
                let xs: Vec<Vec<Reg>> = qx.iter().map(|&p| load16(this, p)).collect();
                loaded.push((wv, xs));
            }
            for (wv, xs) in &loaded {
                let hi = xs.get(1).unwrap_or(&zero);
                for half in 0..2 {
                    let (u0, u1) = (2 * half, 2 * half + 1);
                    this.b.push(Stmt::Mma {
                        shape,
                        d: acc,
                        a: vec![xs[0][u0], hi[u0], xs[0][u1], hi[u1]],
                        b: vec![wv[u0], wv[u1]],
                        c: acc,
                    });
                }
            }
        };
        let kb = self.b.kernel.new_reg(RegType::U32);
        self.open();
        main_loop(self, kb, unroll, false);
        self.close_for(kb, start_op, Self::imm_u(main_end), Self::imm_u(span));
        // Where the main loop stopped: start + ceil((main_end - start) / span) · span.
        let left = self
            .b
            .op(RegType::U32, Op::ISub, &[Self::imm_u(main_end), start_op]);
        let some = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[start_op, Self::imm_u(main_end)],
        );
        let left = self.b.op(
            RegType::U32,
            Op::Select,
            &[some.into(), left.into(), Operand::U32(0)],
        );
        let iters = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[left.into(), Self::imm_u(span - 1)],
        );
        let iters = self.idiv_c(Ix::R(iters), span);
        let done = self.imul_c(iters, span);
        let tail_start = self.iadd(start, done);
        let tail_start = self.ix_op(tail_start);
        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        main_loop(self, kt, 1, true);
        self.close_for(kt, tail_start, Self::imm_u(k), Self::imm_u(stride));

        // With several warps: their results to shared memory, [warp][lane][4], and warp 0
        // adds them in warp order.
        let total = if warps > 1 {
            let red = self.b.kernel.new_shared(warps * 32 * 16, 16);
            let red = self.b.op(RegType::U32, Op::SharedAddr(red), &[]);
            let off = self.imul_c(Ix::R(tid), 16);
            let mine = self.shared_addr(red, off);
            self.b.push(Stmt::Store {
                space: Space::Shared,
                width: Width::V4,
                addr: mine,
                offset: 0,
                values: acc.iter().map(|&r| r.into()).collect(),
            });
            self.b.push(Stmt::Barrier);
            let lane_off = self.imul_c(lane, 16);
            let lane_addr = self.shared_addr(red, lane_off);
            let sum: [Reg; 4] = std::array::from_fn(|_| {
                let r = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(r, Op::Mov, &[Operand::f32(0.0)]);
                r
            });
            for wi in 0..warps {
                let part: Vec<Reg> = (0..4)
                    .map(|_| self.b.kernel.new_reg(RegType::F32))
                    .collect();
                self.b.push(Stmt::Load {
                    dsts: part.clone(),
                    space: Space::Shared,
                    width: Width::V4,
                    addr: lane_addr,
                    offset: (wi * 32 * 16) as i32,
                });
                for q in 0..4 {
                    self.b
                        .assign(sum[q], Op::FAdd, &[sum[q].into(), part[q].into()]);
                }
            }
            sum
        } else {
            acc
        };
        let wo = self.ix_op(warp);
        let first = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[wo, Operand::U32(0)]);
        self.open();
        // D element q of lane (g, t): token g + 8(q / 2) → output row, weight row
        // 2t + (q mod 2) → output column; columns 2t, 2t + 1 side by side.
        let pairs = n % 2 == 0 && self.g.ty(out).shape == self.g.ty(mm).shape;
        let t2 = self.imul_c(t, 2);
        let col = self.iadd(n0, t2);
        for h in 0..2usize {
            let row = self.iadd(g, Ix::C(8 * h as u64));
            let regs = [total[2 * h], total[2 * h + 1]];
            let groups: Vec<(u64, Vec<Reg>)> = if pairs {
                vec![(0, regs.to_vec())]
            } else {
                vec![(0, vec![regs[0]]), (1, vec![regs[1]])]
            };
            for (dc, rs) in groups {
                let col = self.iadd(col, Ix::C(dc));
                let (ro, co) = (self.ix_op(row), self.ix_op(col));
                let m_ok = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ro, Self::imm_u(m)]);
                let n_ok = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[co, Self::imm_u(n)]);
                let ok = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[m_ok.into(), n_ok.into()]);
                self.open();
                let mut idx = lead.clone();
                idx.extend([row, col]);
                self.matmul_epilogue(out, mm, &idx, &rs)?;
                self.close_if(ok);
            }
        }
        self.close_if(first);
        Ok([n.div_ceil(8).max(1) as u32, 1, 1])
    }

    /// Plans how `threads` threads fill one stage of `ring` from operand `op`: chunk
    /// `e = tid + i·threads` of the stage is row `e / chunks`, chunk `e mod chunks`. For each
    /// of the thread's chunks: its swizzled shared offset, its global address at k = 0 (the
    /// non-K coordinate clamped into the tensor), whether the non-K coordinate is inside
    /// the tensor, and its K offset within the slice. `outer0` is the tile's first row (A)
    /// or column (B), `outer` that dim's size (M or N), `tile_outer` the tile's (bm or bn).
    fn copy_plan(
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
        let aligned = (op.cols * ring.esz as u64) % 16 == 0;
        let always_inside = outer % tile_outer as u64 == 0;
        // When the threads cover whole rows a whole number of times, a thread's chunks are
        // one column, `step` rows apart: with `step` a multiple of the swizzle period (8
        // rows) they share one shared offset and one global address, plus immediates — when
        // no chunk needs its own test (the tile stays inside the tensor and K is whole
        // slices, so only the slice is tested).
        let step = threads / chunks.max(1);
        let row_bytes = op.cols * ring.esz as u64;
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
                Some(self.address(op.base, &idx))
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
            op: *op,
            lead: lead.to_vec(),
            items,
            k_stride: if op.k_contiguous { 1 } else { op.cols },
            always_inside,
        })
    }

    /// Issues the copies of one slice starting at `k0` into the stage at byte offset
    /// `stage` of `ring`: 16-byte `cp.async.cg` with zero fill past `k_end` and past the
    /// tensor's edge where rows are 16-byte aligned; otherwise element loads, packed and
    /// stored to shared memory (synchronously).
    fn issue_copies(
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
    fn issue_whole_slice(
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

    fn copy_chunk(
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
            let addr = self.address(plan.op.base, &idx);
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

    /// Loads one A fragment (or a pair of B fragments) with `ldmatrix.x4` from the stage at
    /// `stage` (TF32 values are then rounded with `cvt.rna.tf32.f32`), or element by
    /// element for TF32 operands stored transposed (`ldmatrix` moves 16-bit halves).
    fn load_frag(
        &mut self,
        shape: MmaShape,
        (stage, addrs): (Reg, &mut HashMap<Ix, Reg>),
        src: &FragSrc,
        trans: bool,
    ) -> Vec<Reg> {
        let regs: Vec<Reg> = match src {
            FragSrc::Ldmatrix(off, imm) => {
                let addr = match addrs.get(off) {
                    Some(&a) => a,
                    None => {
                        let a = self.shared_addr(stage, *off);
                        addrs.insert(*off, a);
                        a
                    }
                };
                let dsts: Vec<Reg> = (0..4)
                    .map(|_| self.b.kernel.new_reg(RegType::U32))
                    .collect();
                self.b.push(Stmt::Ldmatrix {
                    dsts: dsts.clone(),
                    trans,
                    addr,
                    offset: *imm,
                });
                dsts
            }
            FragSrc::Scalar(offs) => offs
                .iter()
                .map(|off| {
                    let addr = self.shared_addr(stage, *off);
                    let d = self.b.kernel.new_reg(RegType::U32);
                    self.b.push(Stmt::Load {
                        dsts: vec![d],
                        space: Space::Shared,
                        width: Width::B32,
                        addr,
                        offset: 0,
                    });
                    d
                })
                .collect(),
        };
        if shape != MmaShape::M16N8K8Tf32 {
            return regs;
        }
        regs.into_iter()
            .map(|r| {
                let f = self.b.op(RegType::F32, Op::BitsToF32, &[r.into()]);
                self.b.op(RegType::U32, Op::CvtRnaTf32F32, &[f.into()])
            })
            .collect()
    }
}

/// One chunk a thread copies per slice.
struct CopyItem {
    /// False for the thread's last chunk if the stage's chunk count is not a multiple of the
    /// thread count and this one is past it.
    in_tile: Option<Reg>,
    /// Swizzled byte offset in the stage, plus an immediate.
    shared: Ix,
    shared_imm: i32,
    /// Global address at k = 0 when rows are 16-byte aligned, plus an immediate.
    global: Option<Reg>,
    global_imm: i32,
    /// Whether the non-K coordinate is inside the tensor.
    inside: Reg,
    /// The non-K coordinate, clamped to 0 when outside.
    outer_ix: Ix,
    /// The chunk's K offset within the slice.
    k_off: Ix,
}

struct CopyPlan {
    op: Operand2d,
    lead: Vec<Ix>,
    items: Vec<CopyItem>,
    /// Elements between consecutive k.
    k_stride: u64,
    /// The tile never reaches past the tensor's edge in its non-K dim.
    always_inside: bool,
}

/// Where a fragment's registers come from in a stage.
#[derive(Clone)]
enum FragSrc {
    /// One `ldmatrix.x4`; the lane's row address: a byte offset in the stage (shared by the
    /// fragments whose rows differ by whole swizzle periods) plus an immediate.
    Ldmatrix(Ix, i32),
    /// One 32-bit load per register (TF32 stored transposed).
    Scalar(Vec<Ix>),
}

/// The fragment sources of a warp for every k step of a slice: `a[step][i]` for
/// m-fragment i, `b[step][p]` for the pair of n-fragments 2p, 2p + 1.
struct FragPlan {
    a: Vec<Vec<FragSrc>>,
    b: Vec<Vec<FragSrc>>,
    a_trans: bool,
    b_trans: bool,
}

impl FragPlan {
    #[allow(clippy::too_many_arguments)]
    fn new(
        gen: &mut Gen<'_>,
        shape: MmaShape,
        ra: &Ring,
        rb: &Ring,
        a: &Operand2d,
        b: &Operand2d,
        (wm0, wn0): (Ix, Ix),
        lane: Ix,
        (mi, ni): (u32, u32),
        bk: u32,
    ) -> FragPlan {
        let tf32 = shape == MmaShape::M16N8K8Tf32;
        let kstep = shape.k() as u64;
        // Element columns per 8-wide ldmatrix matrix column: 8 16-bit or 4 f32 elements.
        let half = if tf32 { 4 } else { 8 };
        let r8 = gen.irem_c(lane, 8);
        let j8 = gen.idiv_c(lane, 8);
        let j_lo = gen.irem_c(j8, 2);
        let j_hi = gen.idiv_c(j8, 2);
        let l16 = gen.irem_c(lane, 16);
        let h16 = gen.idiv_c(lane, 16);
        let g = gen.idiv_c(lane, 4);
        let t = gen.irem_c(lane, 4);
        let steps = (bk as u64 / kstep) as usize;
        // Rows 16 apart have the same swizzle (its period is at most 8 rows), so a fragment
        // 16·q rows further down is the same offset plus 16·q row lengths, an immediate: the
        // K-contiguous layouts (rows are m or n) need one offset per k step, the transposed
        // ones (rows are k, steps of 8 or 16 rows) one per fragment.
        let (rba, rbb) = (ra.row_bytes() as i32, rb.row_bytes() as i32);
        let mut fa = Vec::new();
        let mut fb = Vec::new();
        for s in 0..steps {
            let kk = s as u64 * kstep;
            let mut row_a = Vec::new();
            for i in 0..mi as u64 {
                let m = gen.iadd(wm0, Ix::C(16 * i));
                row_a.push(if a.k_contiguous {
                    // Matrices (rows 0-7 | 8-15) × (k 0.. | k half..): lane l → row l mod 16,
                    // k half·(l / 16).
                    let row = gen.iadd(wm0, l16);
                    let kc = gen.imul_c(h16, half);
                    let col = gen.iadd(Ix::C(kk), kc);
                    let off = gen.ring_offset(ra, row, col);
                    FragSrc::Ldmatrix(off, 16 * i as i32 * rba)
                } else if !tf32 {
                    // Stored [k][m]: matrix j holds k 8·(j / 2).., m 8·(j mod 2)..; trans.
                    let kr = gen.imul_c(j_hi, 8);
                    let row = gen.iadd(kr, r8);
                    let mc = gen.imul_c(j_lo, 8);
                    let col = gen.iadd(m, mc);
                    let off = gen.ring_offset(ra, row, col);
                    FragSrc::Ldmatrix(off, kk as i32 * rba)
                } else {
                    // Register q: (m g + 8·(q mod 2), k t + 4·(q / 2)), stored at [k][m].
                    FragSrc::Scalar(
                        (0..4u64)
                            .map(|q| {
                                let kr = gen.iadd(t, Ix::C(kk + 4 * (q / 2)));
                                let mc = gen.iadd(m, g);
                                let mc = gen.iadd(mc, Ix::C(8 * (q % 2)));
                                gen.ring_offset(ra, kr, mc)
                            })
                            .collect(),
                    )
                });
            }
            fa.push(row_a);
            let mut row_b = Vec::new();
            for p in 0..(ni as u64).div_ceil(2) {
                let nb = gen.iadd(wn0, Ix::C(16 * p));
                row_b.push(if b.k_contiguous {
                    // Matrices: (n 0-7, k 0..), (n 0-7, k half..), (n 8-15, k 0..), (n 8-15,
                    // k half..): B registers 0, 1 of fragment 2p, then of 2p + 1.
                    let nr = gen.imul_c(j_hi, 8);
                    let nr = gen.iadd(nr, r8);
                    let row = gen.iadd(wn0, nr);
                    let kc = gen.imul_c(j_lo, half);
                    let col = gen.iadd(Ix::C(kk), kc);
                    let off = gen.ring_offset(rb, row, col);
                    FragSrc::Ldmatrix(off, 16 * p as i32 * rbb)
                } else if !tf32 {
                    // Stored [k][n]: matrix j holds k 8·(j mod 2).., n 8·(j / 2)..; trans.
                    let kr = gen.imul_c(j_lo, 8);
                    let row = gen.iadd(kr, r8);
                    let nc = gen.imul_c(j_hi, 8);
                    let col = gen.iadd(nb, nc);
                    let off = gen.ring_offset(rb, row, col);
                    FragSrc::Ldmatrix(off, kk as i32 * rbb)
                } else {
                    // Fragment 2p + f, register q: (k t + 4q, n g + 8f), stored at [k][n].
                    FragSrc::Scalar(
                        (0..4u64)
                            .map(|fq| {
                                let (f, q) = (fq / 2, fq % 2);
                                let kr = gen.iadd(t, Ix::C(kk + 4 * q));
                                let nc = gen.iadd(nb, g);
                                let nc = gen.iadd(nc, Ix::C(8 * f));
                                gen.ring_offset(rb, kr, nc)
                            })
                            .collect(),
                    )
                });
            }
            fb.push(row_b);
        }
        FragPlan {
            a: fa,
            b: fb,
            a_trans: !a.k_contiguous,
            b_trans: !b.k_contiguous,
        }
    }
}
