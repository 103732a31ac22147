//! Fused attention ([`TileConfig::Attention`]): FlashAttention-2's forward loop (Dao, 2023,
//! "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
//! Algorithm 1) on `mma.sync` m16n8k16. When it is chosen: `schedule/attention.rs`; the
//! order of every sum: `schedule::reduction_order`.
//!
//! A CTA owns 16 query rows per warp of one batch entry of K and V; row `r` is query
//! position `r / pack` of packed head `r mod pack` (the query heads sharing a K/V head),
//! so K and V are read once for all of them. Q's tile is copied once and kept in registers
//! as A fragments. Keys go in blocks of `block_n` through a double-buffered ring of K and V tiles
//! (16-byte `cp.async`, zero-filled past the last key, 16-byte chunks swizzled by the ring's
//! `StageLayout`, `ring/layout.rs`). Per block a warp computes its 16 × block_n scores with K's
//! tile as the B operand (`ldmatrix`), evaluates the logits' elementwise cone per score (with the
//! matmul's value standing in, rounded to its dtype), updates the running maximum and sum of its
//! rows, and multiplies the probabilities — rounded to V's dtype and repacked from accumulator to A
//! fragments in registers, the layouts of PTX ISA §9.7.14.5.8 — by V's tile read transposed
//! (`ldmatrix.trans`).
//!
//! The warpgroup tile (`wgmma`) is the same loop in FlashAttention-3's form (Shah et al.,
//! "FlashAttention-3", 2024): two consumer warpgroups of 64 rows multiply with `wgmma`
//! (PTX ISA §9.7.15.5: S = Q·Kᵀ with both operands in shared memory, P·V with P in
//! registers and V MN-major, P·V a block behind S — §3.2's intra-warpgroup overlap — the
//! two warpgroups taking turns to issue a block's GEMMs at named barriers, §3.1's
//! ping-pong: [`TURN_BARRIER`]), and a producer warpgroup (`attention_tma.rs`, §3.1's warp specialisation) fills the K/V ring
//! by TMA (PTX ISA §9.7.9.25.5.1) through FULL/EMPTY mbarriers (§9.7.13.15), its registers
//! given to the consumers by `setmaxnreg` (§9.7.19.5).

use super::attention_parts::{BoundAt, KvCopy, LaneRow, QChunk};
use super::epilogue::NamedBarrier;
use super::fragments::{one_operand, FragSrc};
use super::ring::{Operand2d, Ring, StageLayout};
use super::{Gen, Ix, LowerError};
use crate::analysis::attention_shape;
use crate::schedule::{attention_shared_bytes, wgmma_attention_shared_bytes};
use crate::view::strided;
use std::collections::HashMap;
use tessel_ir::graph::{Op as GOp, RowStat, TileConfig};
use tessel_ir::kernel::{
    FCmp, ICmp, MmaShape, Op, Operand, RegType, SmemDesc, Space, Special, Stmt, WgmmaA, WgmmaInput,
    WgmmaMajor, WgmmaShape, WgmmaSwizzle, Width,
};
use tessel_ir::{DType, Reg, Shape, Value};

/// Threads of the warpgroup tile's producer warpgroup, the CTA's first.
const PRODUCER: u32 = 128;

/// The warpgroup tile's register budgets after `setmaxnreg` (PTX ISA §9.7.19.5): the
/// producer's `dec` and the consumers' `inc`, within the 168 a thread ptxas allots at
/// entry to 384 threads at one CTA an SM: 128 · 56 + 256 · 224 = 64512 = 168 · 384.
/// FlashAttention-3 gives its producer 24 (consumers 240), the GEMM's tile 40 (232,
/// `wgmma_tma.rs`); this producer also copies a block by `cp.async`, and ptxas (CUDA 13.0,
/// sm_90a) spills in it at 128 keys a block below 56 (12 bytes at 40, 68 at 24), while the
/// consumers need no more than 224 at 64 or 128 keys, d = 128.
const ATTENTION_PRODUCER_REGS: u32 = 56;
const ATTENTION_CONSUMER_REGS: u32 = 224;

/// Named barrier of the warpgroup tile's consumers (Q in shared memory; `bar.sync 0` would
/// wait for the producer, which never comes back).
const CONSUMER_BARRIER: u32 = 1;

/// The ping-pong's named barriers (FlashAttention-3 §3.1, "Pingpong scheduling"): the
/// first consumer warpgroup waits for its turn to issue a block's GEMMs at `TURN_BARRIER`,
/// the second at `TURN_BARRIER + 1`; each counts both warpgroups (256 threads: the waiter's
/// `bar.sync`, the other's `bar.arrive`). The producer's barrier is 2.
const TURN_BARRIER: u32 = 3;

impl Gen<'_> {
    /// Fused attention: the group's output `out` is attention `a`, whose logits come from
    /// matmul `s`, and `stats` its other outputs, row statistics of the same logits
    /// ([`GOp::AttentionStat`]); `q_reductions` are those of q's prologue, when the kernel
    /// computes q. Returns the grid.
    pub(super) fn attention(
        &mut self,
        (out, stats): (Value, &[Value]),
        (s, a): (Value, Value),
        q_reductions: &[Value],
        tile: &TileConfig,
    ) -> Result<[u32; 3], LowerError> {
        let TileConfig::Attention {
            warps,
            block_n,
            stages,
            pack,
            split,
            wgmma,
        } = *tile
        else {
            unreachable!("called for attention tiles")
        };
        let g = self.g;
        let GOp::Attention {
            logits, v, bound, ..
        } = g.ops[a]
        else {
            unreachable!("the attention group lists its attention op second")
        };
        let GOp::MatMul { lhs, rhs } = g.ops[s] else {
            unreachable!("the attention group lists its matmul first")
        };
        if out != a {
            return Err(LowerError::Unsupported {
                what: "an attention group writing another value than the attention".into(),
                value: out,
            });
        }
        let view = |x: Value| {
            strided(g, x).ok_or(LowerError::Unsupported {
                what: "an attention operand that is not a strided view".into(),
                value: x,
            })
        };
        let (qv, kv, vv) = (view(lhs)?, view(rhs)?, view(v)?);
        let sh = attention_shape(g, s, a);
        let rank = sh.batch.len() + 2;
        let dt = g.ty(v).dtype;
        let shape = match dt {
            DType::Bf16 => MmaShape::M16N8K16Bf16,
            DType::F16 => MmaShape::M16N8K16F16,
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("attention on {dt}"),
                    value: a,
                })
            }
        };
        let winput = match dt {
            DType::Bf16 => WgmmaInput::Bf16,
            _ => WgmmaInput::F16,
        };
        let (m, n, d, e) = (sh.m, sh.n, sh.d as u32, sh.e as u32);
        let pack = pack as u64;
        let rows_total = m * pack;
        // The row halves of a warp's 16 rows (the accumulator layout's rows g and g + 8)
        // that can hold a real row: with at most 8 rows a batch entry (decode: one new
        // token's query heads of a K/V head), rows 8..15 of every warp are padding, and
        // their logits, softmax and stores are not computed at all (their P is 0, so the
        // real rows' sums are the same).
        let halves: usize = if rows_total <= 8 { 1 } else { 2 };
        let bm = 16 * warps;
        let threads = 32 * warps;
        // The batch dims that are not packed: one CTA row (grid y) per combination.
        let outer_dims: Vec<usize> = (0..rank - 2)
            .filter(|k| !sh.pack_dims.contains(k))
            .collect();
        let outer_shape = Shape(outer_dims.iter().map(|&k| sh.batch[k]).collect());
        let pack_shape = Shape(sh.pack_dims.iter().map(|&k| sh.batch[k]).collect());
        let outer_count = outer_shape.numel().max(1);

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        // The warpgroup tile's threads 0..128 are its producer, 128.. its consumers:
        // `ctid`, the thread's index among the consumers, is `tid - 128` for a consumer and
        // `tid + 128` for a producer thread, which so shares the rows of a consumer thread
        // of the second warpgroup in the key bounds before the roles split.
        let ctid = match wgmma {
            true => {
                let t = self.b.op(
                    RegType::U32,
                    Op::IAdd,
                    &[tid.into(), Operand::U32(PRODUCER)],
                );
                self.b.op(
                    RegType::U32,
                    Op::And,
                    &[t.into(), Operand::U32(threads - 1)],
                )
            }
            false => tid,
        };
        let warp = self.idiv_c(Ix::R(ctid), 32);
        let lane = self.irem_c(Ix::R(ctid), 32);
        // Flash-decoding's first kernel: grid row y is key range y / outer of batch entry
        // y mod outer, and the results go to the scratch buffer.
        let ranges = self.scratch.as_ref().filter(|s| s.writes).map(|s| s.split);
        // The grid: row blocks by batch entries (times key ranges when split), dealt with
        // the last row block first (a query block's keys grow with its index under a
        // causal mask).
        let grid = [
            rows_total.div_ceil(bm as u64).max(1) as u32,
            (outer_count * ranges.map_or(1, u64::from)) as u32,
            1,
        ];
        let (cx, cy) = self.deal_ctas(grid, true);
        let row0 = self.imul_c(cx, bm as u64);
        if ranges.is_some() && !stats.is_empty() {
            return Err(LowerError::Unsupported {
                what:
                    "an attention's row statistics with its keys split (schedule never splits them)"
                        .into(),
                value: a,
            });
        }
        let (outer_flat, range) = match ranges {
            Some(_) => (
                self.irem_c(cy, outer_count),
                Some(self.idiv_c(cy, outer_count)),
            ),
            None => (cy, None),
        };
        let outer_idx = if outer_dims.is_empty() {
            vec![]
        } else {
            self.unflatten(outer_flat, &outer_shape)
        };
        let pack_dims = sh.pack_dims.clone();
        let batch_of = |pack_idx: &[Ix]| -> Vec<Ix> {
            let mut b = vec![Ix::C(0); rank - 2];
            for (k, &dim) in outer_dims.iter().enumerate() {
                b[dim] = outer_idx[k];
            }
            for (k, &dim) in pack_dims.iter().enumerate() {
                b[dim] = pack_idx[k];
            }
            b
        };
        // Element offsets of the CTA's batch entry in K and V (the packed dims have stride 0).
        let outer_b = batch_of(&vec![Ix::C(0); sh.pack_dims.len()]);
        let k_base = self.view_offset(&kv, &outer_b);
        let v_base = self.view_offset(&vv, &outer_b);

        // Shared memory: Q's tile, then the K stages, then the V stages.
        let esz = 2u32;
        let shared = attention_shared_bytes(warps, block_n, stages, sh.d, sh.e);
        // One buffer (beyond 48 KiB it is the launch's dynamic shared memory); the warps'
        // key bounds (largest and smallest), when the CTA combines them, sit after the rings.
        // The warpgroup tile stages Q, K and V in 128-byte panels (wgmma's swizzle, its
        // patterns on 1024-byte address boundaries; every stage a multiple of 1024 bytes).
        let layout = |rows: u32, cols: u32| match wgmma {
            true => StageLayout::panels_128(rows, cols, esz),
            false => StageLayout::rows(rows, cols, esz),
        };
        let align = if wgmma { 1024 } else { 128 };
        // The warpgroup tile: a key-bound slot for each of its 12 warps, then the ring's
        // FULL and EMPTY mbarriers.
        let bound_warps = if wgmma { warps + PRODUCER / 32 } else { warps };
        let total = match wgmma {
            true => wgmma_attention_shared_bytes(block_n, stages, sh.d, sh.e),
            false => shared + 8 * warps,
        };
        let buf = self.b.kernel.new_shared(total, align);
        let base = self.b.op(RegType::U32, Op::SharedAddr(buf), &[]);
        let ring_q = Ring {
            base,
            layout: layout(bm, d),
        };
        let k_at = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[base.into(), Operand::U32(ring_q.stage_bytes())],
        );
        let ring_k = Ring {
            base: k_at,
            layout: layout(block_n, d),
        };
        let v_at = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[k_at.into(), Operand::U32(stages * ring_k.stage_bytes())],
        );
        let ring_v = Ring {
            base: v_at,
            layout: layout(block_n, e),
        };

        // Packed row r of the batch entry: whether it is a real row, its batch index (the
        // packed heads' from r mod pack) and its query position r / pack (row 0's for
        // rows past the end, which are computed but never stored).
        let packed_row = |gen: &mut Self, r: Ix| -> (Reg, Vec<Ix>, Ix) {
            let (inside, rc) = gen.clamp_below(r, rows_total);
            let pos = gen.idiv_c(rc, pack);
            let p = gen.irem_c(rc, pack);
            let pidx = if pack_shape.0.is_empty() {
                vec![]
            } else {
                gen.unflatten(p, &pack_shape)
            };
            (inside, batch_of(&pidx), pos)
        };

        // Q's tile: chunk c of the CTA's rows (8 elements), copied — zero past the last
        // row — or, where q's tensor is not in memory (fuse rule 7), computed below, after
        // the first K/V copies are on their way; by the threads of the consumers (`t`
        // their index), all of the mma.sync tile's.
        let chunks_q = d / 8;
        let q_computed = crate::analysis::q_in_prologue(g, self.fusion, s);
        let q_load = |gen: &mut Self, t: Reg| -> Vec<QChunk> {
            let mut q_chunks = Vec::new();
            for i in 0..(bm * chunks_q).div_ceil(threads) {
                // With one row block (rows_total ≤ bm, so row0 = 0), a pass whose first row
                // is past the last real row holds padding rows only, for every thread.
                let padding =
                    rows_total <= bm as u64 && ((i * threads) / chunks_q) as u64 >= rows_total;
                let ei = gen.iadd(Ix::R(t), Ix::C((i * threads) as u64));
                let rr = gen.idiv_c(ei, chunks_q as u64);
                let cc = gen.irem_c(ei, chunks_q as u64);
                let r = gen.iadd(row0, rr);
                let (inside, b, pos) = packed_row(gen, r);
                let row_off = gen.view_offset(&qv, &b);
                let pos_off = gen.imul_c(pos, qv.strides[rank - 2]);
                let row = gen.iadd(row_off, pos_off);
                let col = gen.imul_c(cc, 8);
                let shared = gen.ring_offset(&ring_q, rr, col);
                q_chunks.push(QChunk {
                    row,
                    col,
                    shared,
                    inside,
                    padding,
                });
            }
            if !q_computed {
                for c in &q_chunks {
                    let off = gen.iadd(c.row, c.col);
                    gen.cp_async_16(qv.base, off, (base, c.shared), c.inside);
                }
            }
            gen.b.push(Stmt::CpAsyncCommit);
            q_chunks
        };
        let q_chunks = match wgmma {
            true => Vec::new(),
            false => q_load(self, tid),
        };

        // The lane's two rows in the accumulator layout.
        let gq = self.idiv_c(lane, 4);
        let tq = self.irem_c(lane, 4);
        let wrow = self.imul_c(warp, 16);
        let mut lane_rows = Vec::new();
        for half in 0..2u64 {
            let r = self.iadd(row0, wrow);
            let r = self.iadd(r, gq);
            let r = self.iadd(r, Ix::C(8 * half));
            let (real, batch, pos) = packed_row(self, r);
            lane_rows.push(LaneRow { real, batch, pos });
        }

        // How many keys the CTA reads (the largest bound of its rows), and below which key
        // every row sees every key.
        let bound_at = bound.map(|bv| {
            move |gen: &mut Gen<'_>, idx: &[Ix]| -> Result<Operand, LowerError> {
                Ok(gen.value(bv, idx, 1)?[0])
            }
        });
        // Every warp of the CTA takes part (the warpgroup tile's producer too, with a
        // consumer's rows, each warp its own slot): producer and consumers walk one range of
        // key blocks.
        let bound_warp = match wgmma {
            true => self.idiv_c(Ix::R(tid), 32),
            false => warp,
        };
        let (n_end, n_min) = self.key_bounds(
            bound_at.as_ref().map(|f| f as &BoundAt<'_>),
            &lane_rows,
            n,
            (bound_warps, bound_warp, lane),
            (base, shared),
        )?;
        let blocks = match n_end {
            Operand::U32(x) => Operand::U32(x.div_ceil(block_n)),
            other => {
                let p = self
                    .b
                    .op(RegType::U32, Op::IAdd, &[other, Operand::U32(block_n - 1)]);
                self.b
                    .op(RegType::U32, Op::UDiv, &[p.into(), Operand::U32(block_n)])
                    .into()
            }
        };
        // The blocks this CTA walks: all, or its range's (clamped to the bound's).
        let (first, blocks) = match range {
            None => (Operand::U32(0), blocks),
            Some(rg) => {
                let per = (split / block_n) as u64;
                let first = self.imul_c(rg, per);
                let fo = self.ix_op(first);
                let last = self.iadd(first, Ix::C(per));
                let lo = self.ix_op(last);
                let lt = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[lo, blocks]);
                let end = self
                    .b
                    .op(RegType::U32, Op::Select, &[lt.into(), lo, blocks]);
                (fo, end.into())
            }
        };

        // K and V blocks: issue the copies of block `jb` into stage `stage`.
        let k_key_stride = kv.strides[rank - 1];
        let v_key_stride = vv.strides[rank - 2];
        let mut kv_copy = KvCopy {
            k: (&kv, k_base, k_key_stride, ring_k, d),
            v: (&vv, v_base, v_key_stride, ring_v, e),
            origins: [None, None],
            limit: n_end,
            block_n,
            threads,
            tid,
        };
        let first_ix = match first {
            Operand::U32(x) => Ix::C(x as u64),
            Operand::Reg(r) => Ix::R(r),
            _ => unreachable!("block indices are u32"),
        };
        // Blocks copied ahead of the one being read: all but the one read (`stages - 1`),
        // or, where P·V runs a block behind S (the warpgroup tile with 3 or more stages,
        // `pipelined`), all but the two read.
        let pipelined = wgmma && stages >= 3;
        let ahead = if pipelined { stages - 2 } else { stages - 1 };
        // The warpgroup tile: the producer warpgroup fills the ring (`attention_tma.rs`),
        // the consumers load Q and walk the blocks; `split` holds the role predicate and the
        // producer's body until the consumers' is complete.
        let mut split_roles = None;
        let mut ring_bars = None;
        // The pipelined warpgroup tile's ping-pong: `second` (the consumer warpgroup is
        // the second).
        let mut turn: Option<Reg> = None;
        if wgmma {
            let full0 = self.shared_addr(base, Ix::C((shared + 8 * bound_warps) as u64));
            let empty0 = self.shared_addr(full0, Ix::C(8 * stages as u64));
            self.init_ring_barriers(tid, (full0, empty0), stages, threads);
            let producer = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::LtU),
                &[tid.into(), Operand::U32(PRODUCER)],
            );
            self.open();
            self.b.push(Stmt::SetMaxNReg {
                inc: false,
                regs: ATTENTION_PRODUCER_REGS,
            });
            kv_copy.threads = PRODUCER;
            kv_copy.origins = self.kv_origins(&kv_copy);
            let batch: Vec<(usize, Ix)> =
                outer_dims.iter().copied().zip(outer_idx.clone()).collect();
            self.attention_producer(
                &kv_copy,
                (&batch, rank),
                (full0, empty0),
                (first, blocks),
                (stages, n),
                a,
            )?;
            let then_body = self.close();
            split_roles = Some((producer, then_body));
            ring_bars = Some((full0, empty0));
            self.open();
            self.b.push(Stmt::SetMaxNReg {
                inc: true,
                regs: ATTENTION_CONSUMER_REGS,
            });
            let q_chunks = q_load(self, ctid);
            if q_computed {
                self.q_prologue(qv.base, &q_chunks, q_reductions, base)?;
            }
            // Q has landed (and the prologue's stores are visible to wgmma, which reads
            // through the async proxy, after each thread's proxy fence and the consumers'
            // barrier; the producer has its own road).
            self.b.push(Stmt::CpAsyncWaitAll);
            self.b.push(Stmt::FenceProxyAsync);
            self.b.push(Stmt::BarSync {
                id: CONSUMER_BARRIER,
                threads,
            });
            if pipelined {
                // Ping-pong (FlashAttention-3 §3.1): the first warpgroup's turn comes
                // first, by the second's arrival at its barrier (where the CTA has a block:
                // every turn is taken, none left open at exit).
                let second = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::GeU),
                    &[ctid.into(), Operand::U32(128)],
                );
                let any = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[first, blocks]);
                let go = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[second.into(), any.into()]);
                self.open();
                self.b.push(Stmt::BarArrive {
                    id: TURN_BARRIER,
                    threads,
                });
                self.close_if(go);
                turn = Some(second);
            }
        } else {
            kv_copy.origins = self.kv_origins(&kv_copy);
            for st in 0..ahead {
                let jb = self.iadd(first_ix, Ix::C(st as u64));
                let jo = self.ix_op(jb);
                let ok = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[jo, blocks]);
                self.open();
                let j0 = self.imul_c(jb, block_n as u64);
                self.issue_kv(&kv_copy, Ix::C(st as u64), j0, true)?;
                self.close_if(ok);
                self.b.push(Stmt::CpAsyncCommit);
            }
            if q_computed {
                self.q_prologue(qv.base, &q_chunks, q_reductions, base)?;
            }
            // Q has landed once only the K/V groups may be in flight (and the prologue's
            // stores are visible after the barrier); then its fragments.
            self.b.push(Stmt::CpAsyncWait(ahead));
            self.b.push(Stmt::Barrier);
        }
        // The operands: for mma.sync, Q's A fragments (kept in registers) and the K and V
        // fragment plans; for wgmma, the descriptor of the warpgroup's 64 rows of Q.
        let operands = if wgmma {
            let wg = self.idiv_c(Ix::R(ctid), 128);
            let rows_off = self.imul_c(wg, 64 * 128);
            let q_rows = self.shared_addr(base, rows_off);
            Operands::Wgmma {
                q_desc: self.wgmma_desc(q_rows, 0),
            }
        } else {
            let q_op = Operand2d {
                base: qv.base,
                cols: sh.d,
                k_contiguous: true,
                view: None,
            };
            let q_plan = one_operand(self, shape, (&ring_q, &q_op), false, wrow, lane, 1, d);
            let mut addrs = HashMap::new();
            let qf: Vec<Vec<Reg>> = (0..(d / 16) as usize)
                .map(|ks| self.load_frag(shape, (base, &mut addrs), &q_plan[ks][0], false))
                .collect();
            let k_op = Operand2d {
                base: kv.base,
                cols: sh.d,
                k_contiguous: true,
                view: None,
            };
            let v_op = Operand2d {
                base: vv.base,
                cols: sh.e,
                k_contiguous: false,
                view: None,
            };
            let k_plan = one_operand(
                self,
                shape,
                (&ring_k, &k_op),
                true,
                Ix::C(0),
                lane,
                block_n / 16,
                d,
            );
            let v_plan = one_operand(
                self,
                shape,
                (&ring_v, &v_op),
                true,
                Ix::C(0),
                lane,
                e / 16,
                block_n,
            );
            Operands::Sync { qf, k_plan, v_plan }
        };

        // Running state per row half: maximum, the lane's partial sum, and O.
        let f32reg = |gen: &mut Self, x: f32| {
            let r = gen.b.kernel.new_reg(RegType::F32);
            gen.b.assign(r, Op::Mov, &[Operand::f32(x)]);
            r
        };
        let m_run: Vec<Reg> = (0..2).map(|_| f32reg(self, f32::NEG_INFINITY)).collect();
        let l_run: Vec<Reg> = (0..2).map(|_| f32reg(self, 0.0)).collect();
        let o_acc: Vec<[Reg; 4]> = (0..e / 8)
            .map(|_| std::array::from_fn(|_| f32reg(self, 0.0)))
            .collect();

        // The lane's first column in every fragment (defined before the key loop: the store
        // after it uses it too, also when the loop runs no block).
        let t2 = self.imul_c(tq, 2);
        let rd = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(rd, Op::Mov, &[Operand::U32(0)]);
        let wr = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(wr, Op::Mov, &[Operand::U32(ahead)]);
        // Pipelined: the previous block's P (A fragments, per 16 keys) and V stage, whose
        // P·V this block issues behind its S.
        let ni = (block_n / 8) as usize;
        let pending: Option<(Vec<Vec<Reg>>, Reg)> = pipelined.then(|| {
            let p = (0..ni / 2)
                .map(|_| {
                    (0..WgmmaA::REGS)
                        .map(|_| self.b.kernel.new_reg(RegType::U32))
                        .collect()
                })
                .collect();
            (p, self.b.kernel.new_reg(RegType::U32))
        });
        let jb = self.b.kernel.new_reg(RegType::U32);
        self.open();
        if let Some((full0, _)) = ring_bars {
            // The block's K and V have landed: FULL[rd] has completed the phase of fill
            // `jb - first` (parity: its round mod 2).
            let i = self.b.op(RegType::U32, Op::ISub, &[jb.into(), first]);
            let round = self.idiv_c(Ix::R(i), stages as u64);
            let ro = self.ix_op(round);
            let parity = self.b.op(RegType::U32, Op::And, &[ro, Operand::U32(1)]);
            let at = self.imul_c(Ix::R(rd), 8);
            let full = self.shared_addr(full0, at);
            self.b.push(Stmt::MbarWait {
                addr: full,
                parity: parity.into(),
            });
        } else {
            self.b.push(Stmt::CpAsyncWait(ahead - 1));
            self.b.push(Stmt::Barrier);
            let j_next = self.iadd(Ix::R(jb), Ix::C(ahead as u64));
            let ao = self.ix_op(j_next);
            let ok = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ao, blocks]);
            self.open();
            let j_ahead = self.imul_c(j_next, block_n as u64);
            self.issue_kv(&kv_copy, Ix::R(wr), j_ahead, true)?;
            self.close_if(ok);
            self.b.push(Stmt::CpAsyncCommit);
        }

        // S = Q Kᵀ for this block.
        let rk = self.imul_c(Ix::R(rd), ring_k.stage_bytes() as u64);
        let stage_k = self.shared_addr(ring_k.base, rk);
        let rv = self.imul_c(Ix::R(rd), ring_v.stage_bytes() as u64);
        let stage_v = self.shared_addr(ring_v.base, rv);
        let sacc: Vec<[Reg; 4]> = (0..ni)
            .map(|_| std::array::from_fn(|_| f32reg(self, 0.0)))
            .collect();
        match &operands {
            Operands::Sync { qf, k_plan, .. } => {
                let mut addrs_k = HashMap::new();
                for (ks, qk) in qf.iter().enumerate() {
                    for p in 0..ni / 2 {
                        let src: &FragSrc = &k_plan[ks][p];
                        let regs = self.load_frag(shape, (stage_k, &mut addrs_k), src, false);
                        for (h, b) in [&regs[..2], &regs[2..]].into_iter().enumerate() {
                            let acc = sacc[2 * p + h];
                            self.b.push(Stmt::Mma {
                                shape,
                                d: acc,
                                a: qk.clone(),
                                b: b.to_vec(),
                                c: acc,
                            });
                        }
                    }
                }
            }
            &Operands::Wgmma { q_desc } => {
                // One m64n{block_n}k16 per 16 of the head dim: K-major Q and K, the k step's
                // 32 bytes inside a panel, the next panel `rows · 128` bytes on.
                let k_desc = self.wgmma_desc(stage_k, 0);
                let d_regs: Vec<Reg> = sacc.iter().flatten().copied().collect();
                // Ping-pong: this warpgroup's turn to issue (the other has issued its
                // block's GEMMs and runs its softmax while these run).
                if let Some(second) = turn {
                    let mine = NamedBarrier {
                        id: TURN_BARRIER,
                        second: Some(second),
                    };
                    self.named_barrier_sync(mine, threads);
                }
                self.b.push(Stmt::WgmmaFence);
                for ks in 0..d / 16 {
                    let at = |rows: u32| ((ks / 4) * rows * 128 + (ks % 4) * 32) as u64 >> 4;
                    let qd = self.desc_plus(q_desc, at(bm));
                    let kd = self.desc_plus(k_desc, at(block_n));
                    self.b.push(Stmt::Wgmma {
                        shape: WgmmaShape {
                            n: block_n,
                            input: winput,
                        },
                        d: d_regs.clone(),
                        a: WgmmaA::Desc(qd),
                        b_desc: kd,
                        b_major: WgmmaMajor::K,
                    });
                }
                self.b.push(Stmt::WgmmaCommit);
                match &pending {
                    None => self.b.push(Stmt::WgmmaWait(0)),
                    Some((pa, pv_stage)) => {
                        // The previous block's P·V behind S (none before the first block),
                        // then S waited for: the softmax below runs while P·V does.
                        let later =
                            self.b
                                .op(RegType::Pred, Op::ICmp(ICmp::Ne), &[jb.into(), first]);
                        // The other warpgroup's turn once these GEMMs are issued.
                        let pass_turn = |gen: &mut Self| {
                            if let Some(second) = turn {
                                gen.pass_turn(second, (jb, blocks), threads);
                            }
                        };
                        self.open();
                        self.pv_wgmma(pa, *pv_stage, (&ring_v, block_n, e, winput), &o_acc);
                        pass_turn(self);
                        self.b.push(Stmt::WgmmaWait(1));
                        let then_body = self.close();
                        self.open();
                        pass_turn(self);
                        self.b.push(Stmt::WgmmaWait(0));
                        let else_body = self.close();
                        self.b.push(Stmt::If {
                            cond: later,
                            then_body,
                            else_body,
                        });
                    }
                }
            }
        }

        // The logits per score, -inf past the last key. Where the whole block lies below
        // every row's bound (the causal diagonal's left, a cache's filled part), the mask's
        // select is known to take its visible arm: that arm alone is evaluated.
        let j0 = self.imul_c(Ix::R(jb), block_n as u64);
        let sdt = g.ty(s).dtype;
        let xregs: Vec<[Reg; 4]> = (0..ni)
            .map(|_| std::array::from_fn(|_| self.b.kernel.new_reg(RegType::F32)))
            .collect();
        let eval = |gen: &mut Self, what: Value, masked: bool| -> Result<(), LowerError> {
            for (f, acc) in sacc.iter().enumerate() {
                for q in 0..2 * halves {
                    let (dr, dc) = MmaShape::cd_pos(0, q);
                    let row = &lane_rows[dr / 8];
                    let key = gen.iadd(j0, t2);
                    let key = gen.iadd(key, Ix::C((8 * f + dc) as u64));
                    let (inside, kc) = if masked {
                        let (i, k) = gen.clamp_below(key, n);
                        (Some(i), k)
                    } else {
                        (None, key)
                    };
                    let mut idx = row.batch.clone();
                    idx.extend([row.pos, kc]);
                    let sv = gen.round(acc[q].into(), sdt);
                    gen.lane_value.insert(s, vec![sv]);
                    let x = gen.value(what, &idx, 1)?[0];
                    gen.lane_value.remove(&s);
                    match inside {
                        Some(i) => gen.b.assign(
                            xregs[f][q],
                            Op::Select,
                            &[i.into(), x, Operand::f32(f32::NEG_INFINITY)],
                        ),
                        None => gen.b.assign(xregs[f][q], Op::Mov, &[x]),
                    }
                }
            }
            Ok(())
        };
        match (n_min, crate::analysis::visible_arm(g, logits)) {
            (Some(nmin), Some(arm)) => {
                let end = self.iadd(j0, Ix::C(block_n as u64));
                let eo = self.ix_op(end);
                let full = self.b.op(RegType::Pred, Op::ICmp(ICmp::LeU), &[eo, nmin]);
                self.open();
                eval(self, arm, false)?;
                let then_body = self.close();
                self.open();
                eval(self, logits, true)?;
                let else_body = self.close();
                self.b.push(Stmt::If {
                    cond: full,
                    then_body,
                    else_body,
                });
            }
            _ => {
                self.open();
                eval(self, logits, true)?;
                for st in self.close() {
                    self.b.push(st);
                }
            }
        }
        let xs: Vec<[Operand; 4]> = xregs
            .iter()
            .map(|r| std::array::from_fn(|q| r[q].into()))
            .collect();

        // Online softmax per row half (registers q = 2h, 2h + 1 of every fragment).
        let mut probs: Vec<[Operand; 4]> = vec![[Operand::f32(0.0); 4]; ni];
        let mut scales = Vec::new();
        for h in 0..halves {
            // The lane's maximum by a balanced tree (depth log2(2·ni), not a chain of
            // 2·ni): max is exact, commutative and associative — NaN absorbs, +0 > -0 —
            // so every order gives the same bits.
            let mut level: Vec<Operand> =
                xs.iter().flat_map(|x| [x[2 * h], x[2 * h + 1]]).collect();
            while level.len() > 1 {
                level = level
                    .chunks(2)
                    .map(|p| match p {
                        [a, b] => self.b.op(RegType::F32, Op::FMax, &[*a, *b]).into(),
                        [a] => *a,
                        _ => unreachable!("chunks of two"),
                    })
                    .collect();
            }
            let mut mx = level[0];
            for sh in [1, 2] {
                let o = self
                    .b
                    .op(RegType::F32, Op::ShflBfly, &[mx, Operand::U32(sh)]);
                mx = self.b.op(RegType::F32, Op::FMax, &[mx, o.into()]).into();
            }
            let m_new = self.b.op(RegType::F32, Op::FMax, &[m_run[h].into(), mx]);
            let none = self.b.op(
                RegType::Pred,
                Op::FCmp(FCmp::Eq),
                &[m_new.into(), Operand::f32(f32::NEG_INFINITY)],
            );
            let m_use = self.b.op(
                RegType::F32,
                Op::Select,
                &[none.into(), Operand::f32(0.0), m_new.into()],
            );
            let dm = self
                .b
                .op(RegType::F32, Op::FSub, &[m_run[h].into(), m_use.into()]);
            let scale = self.exp_nonpos(dm.into());
            let mut sum = Operand::f32(0.0);
            for (f, x) in xs.iter().enumerate() {
                for q in [2 * h, 2 * h + 1] {
                    let z = self.b.op(RegType::F32, Op::FSub, &[x[q], m_use.into()]);
                    let p = self.exp_nonpos(z.into());
                    probs[f][q] = p;
                    sum = self.b.op(RegType::F32, Op::FAdd, &[sum, p]).into();
                }
            }
            let l = self.b.op(RegType::F32, Op::FMul, &[l_run[h].into(), scale]);
            self.b.assign(l_run[h], Op::FAdd, &[l.into(), sum]);
            // Pipelined, O is rescaled once the previous block's P·V has completed.
            if !pipelined {
                self.rescale_o(&o_acc, h, scale);
            }
            scales.push(scale);
            self.b.assign(m_run[h], Op::Mov, &[m_new.into()]);
        }

        // O += P V, P rounded to V's dtype and repacked as A fragments (16 keys each).
        let pack_op = if dt == DType::Bf16 {
            Op::PackBf16x2
        } else {
            Op::PackF16x2
        };
        let pa_of = |gen: &mut Self, ks: usize| -> Vec<Reg> {
            [(2 * ks, 0), (2 * ks, 2), (2 * ks + 1, 0), (2 * ks + 1, 2)]
                .into_iter()
                .map(|(f, q)| {
                    let pr = &probs[f];
                    gen.b.op(RegType::U32, pack_op, &[pr[q + 1], pr[q]])
                })
                .collect()
        };
        match &operands {
            Operands::Sync { v_plan, .. } => {
                let mut addrs_v = HashMap::new();
                for (ks, plan) in v_plan.iter().enumerate().take(ni / 2) {
                    let pa = pa_of(self, ks);
                    for p in 0..(e / 16) as usize {
                        let src: &FragSrc = &plan[p];
                        let regs = self.load_frag(shape, (stage_v, &mut addrs_v), src, true);
                        for (h, b) in [&regs[..2], &regs[2..]].into_iter().enumerate() {
                            let acc = o_acc[2 * p + h];
                            self.b.push(Stmt::Mma {
                                shape,
                                d: acc,
                                a: pa.clone(),
                                b: b.to_vec(),
                                c: acc,
                            });
                        }
                    }
                }
            }
            Operands::Wgmma { .. } => match &pending {
                None => {
                    let pas: Vec<Vec<Reg>> = (0..ni / 2).map(|ks| pa_of(self, ks)).collect();
                    self.pv_wgmma(&pas, rd, (&ring_v, block_n, e, winput), &o_acc);
                    self.b.push(Stmt::WgmmaWait(0));
                    self.release_kv(ring_bars, rd);
                }
                Some((pa, pv_stage)) => {
                    // The previous block's P·V has completed (its stage is released to
                    // the producer): O rescaled, this block's P and stage kept for the
                    // next block (or the loop's end).
                    self.b.push(Stmt::WgmmaWait(0));
                    let later = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::Ne), &[jb.into(), first]);
                    self.open();
                    self.release_kv(ring_bars, *pv_stage);
                    self.close_if(later);
                    for (h, &scale) in scales.iter().enumerate() {
                        self.rescale_o(&o_acc, h, scale);
                    }
                    for (ks, regs) in pa.iter().enumerate() {
                        for (&r, x) in regs.iter().zip(pa_of(self, ks)) {
                            self.b.assign(r, Op::Mov, &[x.into()]);
                        }
                    }
                    self.b.assign(*pv_stage, Op::Mov, &[rd.into()]);
                }
            },
        }
        self.advance_stages(&[rd, wr], stages);
        self.close_for(jb, first, blocks, Operand::U32(1));
        if let Some((pa, pv_stage)) = &pending {
            // The last block's P·V, where the loop ran.
            let last_pv = |gen: &mut Self| {
                gen.pv_wgmma(pa, *pv_stage, (&ring_v, block_n, e, winput), &o_acc);
                gen.b.push(Stmt::WgmmaWait(0));
                gen.release_kv(ring_bars, *pv_stage);
            };
            match (first, blocks) {
                (Operand::U32(f), Operand::U32(b)) => {
                    if f < b {
                        last_pv(self);
                    }
                }
                _ => {
                    let ran = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[first, blocks]);
                    self.open();
                    last_pv(self);
                    self.close_if(ran);
                }
            }
        }
        if !wgmma {
            self.b.push(Stmt::CpAsyncWaitAll);
        }

        if let Some(rg) = range {
            // The range's O (unnormalised), maximum and sum, for the merge kernel.
            let width = sh.e + 2;
            let ptr = self.scratch.as_ref().expect("partials have scratch").ptr;
            let slot = self.imul_c(rg, outer_count);
            let slot = self.iadd(slot, outer_flat);
            let slot = self.imul_c(slot, rows_total);
            for (h, real) in lane_rows.iter().map(|r| r.real).enumerate().take(halves) {
                let mut l: Operand = l_run[h].into();
                for x in [1, 2] {
                    let o = self.b.op(RegType::F32, Op::ShflBfly, &[l, Operand::U32(x)]);
                    l = self.b.op(RegType::F32, Op::FAdd, &[l, o.into()]).into();
                }
                let r = self.iadd(row0, wrow);
                let r = self.iadd(r, gq);
                let r = self.iadd(r, Ix::C(8 * h as u64));
                let at = self.iadd(slot, r);
                let at = self.imul_c(at, width);
                self.open();
                for (f, o) in o_acc.iter().enumerate() {
                    let col = self.iadd(t2, Ix::C(8 * f as u64));
                    let ix = self.iadd(at, col);
                    let addr = self.f32_addr(ptr, ix);
                    self.b.push(Stmt::Store {
                        space: Space::Global,
                        width: Width::V2,
                        addr,
                        offset: 0,
                        values: vec![o[2 * h].into(), o[2 * h + 1].into()],
                    });
                }
                // One lane of the row's four writes its maximum and sum.
                let t0 = self.ix_op(tq);
                let lead = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[t0, Operand::U32(0)]);
                self.open();
                let ix = self.iadd(at, Ix::C(sh.e));
                let addr = self.f32_addr(ptr, ix);
                self.b.push(Stmt::Store {
                    space: Space::Global,
                    width: Width::V2,
                    addr,
                    offset: 0,
                    values: vec![m_run[h].into(), l],
                });
                self.close_if(lead);
                self.close_if(real);
            }
            return Ok(grid);
        }
        // O / l, 0 for a row that saw no key; stored for real rows.
        for h in 0..halves {
            let mut l: Operand = l_run[h].into();
            for sh in [1, 2] {
                let o = self
                    .b
                    .op(RegType::F32, Op::ShflBfly, &[l, Operand::U32(sh)]);
                l = self.b.op(RegType::F32, Op::FAdd, &[l, o.into()]).into();
            }
            let empty = self
                .b
                .op(RegType::Pred, Op::FCmp(FCmp::Eq), &[l, Operand::f32(0.0)]);
            let row = &lane_rows[h];
            let real = row.real;
            self.open();
            // The row statistics, by one lane of the row's four.
            if !stats.is_empty() {
                let t0 = self.ix_op(tq);
                let lead = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[t0, Operand::U32(0)]);
                self.open();
                for &st in stats {
                    let GOp::AttentionStat { stat, .. } = g.ops[st] else {
                        unreachable!("an attention group's other outputs are its statistics")
                    };
                    let x = match stat {
                        RowStat::Max => m_run[h].into(),
                        RowStat::Sum => l,
                    };
                    let mut idx = row.batch.clone();
                    idx.extend([row.pos, Ix::C(0)]);
                    self.store(st, &idx, &[x])?;
                }
                self.close_if(lead);
            }
            for (f, o) in o_acc.iter().enumerate() {
                let vals: Vec<Operand> = [2 * h, 2 * h + 1]
                    .into_iter()
                    .map(|q| {
                        let x = self.b.op(RegType::F32, Op::FDiv, &[o[q].into(), l]);
                        let x = self.b.op(
                            RegType::F32,
                            Op::Select,
                            &[empty.into(), Operand::f32(0.0), x.into()],
                        );
                        self.round(x.into(), dt)
                    })
                    .collect();
                let col = self.iadd(t2, Ix::C(8 * f as u64));
                let mut idx = row.batch.clone();
                idx.extend([row.pos, col]);
                self.store(out, &idx, &vals)?;
            }
            self.close_if(real);
        }
        if let Some((producer, then_body)) = split_roles {
            let else_body = self.close();
            self.b.push(Stmt::If {
                cond: producer,
                then_body,
                else_body,
            });
        }
        Ok(grid)
    }
}

/// What the key loop multiplies with: `mma.sync`'s Q fragments (per 16 of the head dim)
/// and the K and V fragment plans, or the warpgroup tile's Q descriptor.
enum Operands {
    Sync {
        qf: Vec<Vec<Reg>>,
        k_plan: Vec<Vec<FragSrc>>,
        v_plan: Vec<Vec<FragSrc>>,
    },
    Wgmma {
        q_desc: Reg,
    },
}

impl Gen<'_> {
    /// The wgmma descriptor (`SmemDesc`, PTX ISA §9.7.15.5.1.2.2) of a 128-byte-panel
    /// operand starting at shared address `addr` (a multiple of 1024 plus the k step's
    /// bytes): 128-byte swizzle, 1024 bytes between 8-row groups, `lbo` bytes between
    /// panels along MN (read for an MN-major operand only).
    fn wgmma_desc(&mut self, addr: Reg, lbo: u32) -> Reg {
        let fixed = SmemDesc {
            start: 0,
            lbo,
            sbo: 1024,
            swizzle: WgmmaSwizzle::B128,
        }
        .fixed_bits();
        let s = self
            .b
            .op(RegType::U32, Op::ShrU, &[addr.into(), Operand::U32(4)]);
        let w = self.b.op(RegType::U64, Op::CvtU64U32, &[s.into()]);
        self.b
            .op(RegType::U64, Op::AddU64, &[w.into(), Operand::U64(fixed)])
    }

    /// `O += P·V` on the warpgroup tile: one m64n{e}k16 per 16 keys, `pa[ks]` P's A
    /// fragment of keys `16ks ..` (the accumulator's layout of its 16 columns,
    /// `WgmmaA::reg_pos`), V's tile of stage `stage` (a register) MN-major — 16 key rows of
    /// 128 bytes per panel from row `16ks`, panels `block_n · 128` bytes apart; fenced
    /// before, committed after (the caller waits).
    fn pv_wgmma(
        &mut self,
        pa: &[Vec<Reg>],
        stage: Reg,
        (ring_v, block_n, e, input): (&Ring, u32, u32, WgmmaInput),
        o_acc: &[[Reg; 4]],
    ) {
        let off = self.imul_c(Ix::R(stage), ring_v.stage_bytes() as u64);
        let stage_v = self.shared_addr(ring_v.base, off);
        let v_desc = self.wgmma_desc(stage_v, block_n * 128);
        let d: Vec<Reg> = o_acc.iter().flatten().copied().collect();
        self.b.push(Stmt::WgmmaFence);
        for (ks, a) in pa.iter().enumerate() {
            let vd = self.desc_plus(v_desc, (ks as u64 * 16 * 128) >> 4);
            self.b.push(Stmt::Wgmma {
                shape: WgmmaShape { n: e, input },
                d: d.clone(),
                a: WgmmaA::Regs(a.clone()),
                b_desc: vd,
                b_major: WgmmaMajor::Mn,
            });
        }
        self.b.push(Stmt::WgmmaCommit);
    }

    /// Every consumer thread arrives on the EMPTY mbarrier of ring stage `stage` (the
    /// warpgroup tile's, `bars` = (FULL[0], EMPTY[0])): its K and V are read for the last
    /// time. Nothing without a ring's barriers.
    fn release_kv(&mut self, bars: Option<(Reg, Reg)>, stage: Reg) {
        if let Some((_, empty0)) = bars {
            let at = self.imul_c(Ix::R(stage), 8);
            let empty = self.shared_addr(empty0, at);
            self.b.push(Stmt::MbarArrive { addr: empty });
        }
    }

    /// The ping-pong's hand-over, once a consumer warpgroup has issued block `jb`'s GEMMs:
    /// the first warpgroup arrives at the second's barrier; the second at the first's,
    /// except after the CTA's last block (`blocks`), where the first takes no more turns.
    /// `threads`: both warpgroups'.
    fn pass_turn(&mut self, second: Reg, (jb, blocks): (Reg, Operand), threads: u32) {
        self.open();
        let next = self
            .b
            .op(RegType::U32, Op::IAdd, &[jb.into(), Operand::U32(1)]);
        let more = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[next.into(), blocks]);
        self.open();
        self.b.push(Stmt::BarArrive {
            id: TURN_BARRIER,
            threads,
        });
        self.close_if(more);
        let then_body = self.close();
        self.b.push(Stmt::If {
            cond: second,
            then_body,
            else_body: vec![Stmt::BarArrive {
                id: TURN_BARRIER + 1,
                threads,
            }],
        });
    }

    /// O's registers of row half `h` (`q = 2h, 2h + 1` of every fragment) times `scale`.
    fn rescale_o(&mut self, o_acc: &[[Reg; 4]], h: usize, scale: Operand) {
        for o in o_acc {
            for q in [2 * h, 2 * h + 1] {
                self.b.assign(o[q], Op::FMul, &[o[q].into(), scale]);
            }
        }
    }

    /// `desc` with its start address `units · 16` bytes further on.
    fn desc_plus(&mut self, desc: Reg, units: u64) -> Reg {
        if units == 0 {
            return desc;
        }
        self.b.op(
            RegType::U64,
            Op::AddU64,
            &[desc.into(), Operand::U64(units)],
        )
    }
}
