//! The persistent, ping-pong warp-specialised GEMM tile (`TileConfig::Mma` with
//! [`MmaEngine::WgmmaPingpong`], text `wgmma: pingpong, ctas: N`): the structure of
//! CUTLASS 3's `KernelTmaWarpSpecializedPingpong` (and of DeepGEMM's and fast.cu's
//! persistent kernels), written from the PTX ISA. The ring, its TMA loader and the
//! mbarrier hand-over are `wgmma_tma.rs`'s; the epilogues are `mma.rs`'s
//! ([`Gen::tile_epilogue`]), run by one consumer warpgroup on its own tile.
//!
//! **Persistent CTAs.** The grid is `ctas` CTAs (the schedule's: the target's SMs, at most
//! the tiles), 384 threads each, one an SM. CTA `x` takes the tiles `x, x + ctas, ...` of
//! the grouped order ([`Gen::grouped_tile`], `GROUP_M` row tiles a group), so the CTAs
//! running at one time still read a few row tiles of A and column tiles of B, which stay
//! in L2; a CTA has `ceil((tiles − x) / ctas)` tiles, numbered `i = 0, 1, ...` in order.
//!
//! **Roles.**
//! - **Producer** (threads 0..128): `setmaxnreg.dec` to [`PRODUCER_REGS`]; thread 0 alone
//!   walks the CTA's tiles in order and, for each, its K slices in order, keeping one
//!   running count `j` of the ring's fills: fill `j` goes to stage `j mod S` after the
//!   stage's EMPTY barrier has completed the phase of fill `j − S` ([`Gen::tma_fill`]:
//!   A's `[128 × 64]` box and B's `[128 × 64]` box on FULL, 32 KiB with `expect_tx`). A
//!   16-bit B stored `[K, N]` (`x @ w`: the backward's `dx = dy · W`) is loaded as it lies,
//!   two boxes of `[64 K rows × 64 N columns]` at (n0, k0) and (n0 + 64, k0), each one
//!   128-byte panel of the stage (8 KiB apart), and read MN-major: per k step the B
//!   descriptor starts 16 K rows (2048 bytes) further into both panels, its
//!   leading-dimension offset the panel's 8192 bytes (`wgmma.rs`, `WgmmaB`).
//! - **Consumers** (threads 128..384): `setmaxnreg.inc` to [`CONSUMER_REGS`]; warpgroup
//!   `c` (0 or 1) takes the CTA's tiles `i = c, c + 2, ...` and computes each whole:
//!   128 × 128 as two blocks of 64 rows, per k step of 16 one `wgmma.m64n128k16` per block
//!   (PTX ISA §9.7.15.5) — 8 wgmma a slice, one `wgmma.fence`, one commit — 2 × 64 f32
//!   accumulators a thread. Tile `i`'s slices are the ring's fills `i · slices + kt`; per
//!   slice: wait FULL (parity `(j / S) & 1`), the wgmma, commit, `wait_group 1`, then every
//!   thread of the warpgroup arrives on EMPTY of fill `j − 1` (EMPTY counts 128 arrivals:
//!   one warpgroup consumes each fill). After the last slice: `wait_group 0` and the last
//!   fill's EMPTY, then the epilogue.
//!
//! **Ordering** (CUTLASS's `OrderedSequenceBarrier` over the math warpgroups). The two
//! consumers' main loops alternate: warpgroup `c` waits at named barrier
//! [`ORDER_BARRIER`] `+ c` (`bar.sync`, 256 threads) before the main loop of tile `i > 0`,
//! and the warpgroup of tile `i − 1` arrives there (`bar.arrive`, 256) right after issuing
//! its last slice's wgmma — exactly one wait and one arrival per tile after the first, so
//! no phase is left open at exit. This is needed for correctness, not only speed: an
//! mbarrier wait names a parity, so it must not run more than one phase ahead of the
//! barrier; once the other warpgroup has waited for every FULL phase of its tile, every
//! FULL wait of this tile is at most one phase ahead (fills `j − S` and before have
//! completed). Then one warpgroup's epilogue runs while the other's main loop runs:
//! the tensor cores stay busy through the epilogue's f32 math (silu's ~90 instructions
//! an element), and the last tiles of a CTA no longer wait for a whole wave.
//!
//! **Epilogue.** The ring is being refilled for the other warpgroup's tile, so it can no
//! longer stage the epilogue: for [`MmaEpilogue::Staged`] each warpgroup has its own
//! `64 × (128 + 8)` staging tile after the ring, of the matmul's 16-bit dtype (17 KiB) or
//! f32 (34 KiB) ([`Gen::staged_esz`]; the 128 × 128 tile is staged and stored in two
//! halves of 64 rows, each exactly one wgmma block: warp `w` holds rows `16w .. 16w + 16`
//! of the block as `16 × 128` fragments, the `wgmma: 1` tile's warp layout), so the staged,
//! per-element and row epilogues (QK-norm + RoPE over heads that divide 128) run unchanged
//! on 128 threads, meeting at named barrier [`EPILOGUE_BARRIER`] `+ c`. Shared memory:
//! [`crate::schedule::PINGPONG_STAGES`] stages of 32 KiB, the two staging tiles and 16
//! bytes of mbarriers a stage ([`pingpong_shared_bytes`]).
//!
//! **Why 128 × 128 per warpgroup.** The tile a warpgroup computes holds 16384 f32
//! accumulators, 128 a thread, as the `wgmma: 1` tile's 64 × 256 a warpgroup does, which
//! fits the 232 registers with the epilogue's (ptxas: no spills). Of the two shapes with
//! that count, 128 × 128 loads 256 rows of operands per K slice where 64 × 256 loads 320
//! (a 32 KiB stage against 40, so four stages fit beside the two f32 staging tiles: 64 ×
//! 256 would need 4 × 40 KiB + 2 × 66 KiB, over the 227 KiB), and its 64-row halves are the
//! staged epilogue's unit as they stand. Shared-memory traffic per k step (the 128
//! tensor-core cycles of 262144 MACs at the H100's 2048 a cycle an SM) is the same for
//! both: wgmma reads its operands per instruction, two m64n128k16 12 KiB (B once per
//! block) against 10 KiB for one m64n256k16, and TMA writes 8 KiB (256 rows × 32 bytes)
//! against 10 — 20 KiB either way, L2 traffic 20 % less for 128 × 128. On an H100 the
//! banks are not what limits it: the Qwen3-14B q GEMM kept them 30% busy reading and 20%
//! writing, the tensor pipe 78% (ncu, docs/perf/2026-12-08-stop39.md).
//!
//! **Bits.** Each output element is one accumulation over k in order, slice after slice,
//! from 0 — the `wgmma: 1` tile's order, the executor's bits of `mma.sync`'s. The tiles'
//! assignment to CTAs and warpgroups changes no element's sum.

use super::epilogue::{NamedBarrier, WarpTile};
use super::mma::{tile_grid, GROUP_M};
use super::wgmma::wgmma_fixed_bits;
use super::wgmma_tma::{
    barrier_bytes, wgmma_input, TmaRing, CONSUMER_REGS, PRODUCER_REGS, PRODUCER_THREADS,
};
use super::{Gen, Ix, LowerError};
use crate::schedule::{pingpong_shared_bytes, STAGED_ROW_PAD};
use tessel_ir::graph::{MmaEngine, MmaEpilogue, TileConfig};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Special, Stmt, WgmmaShape};
use tessel_ir::{Reg, Value};

/// Rows of one wgmma block (`m64`), and of one half of a tile's staged epilogue.
const BLOCK_ROWS: u32 = 64;

/// Threads of one consumer warpgroup.
const WARPGROUP: u32 = 128;

/// Named barriers: consumer warpgroup `c` waits for its turn to run a main loop at
/// `ORDER_BARRIER + c` (1, 2), and its warps meet in the epilogue at
/// `EPILOGUE_BARRIER + c` (3, 4). 0 is `bar.sync 0`'s.
const ORDER_BARRIER: u32 = 1;
const EPILOGUE_BARRIER: u32 = 3;

impl Gen<'_> {
    /// The ping-pong tile of matmul `mm` (its group's output `out`, with `row_reductions`
    /// for a row epilogue; see the module doc). Returns the grid.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] for operands TMA cannot load ([`Gen::tma_plan`]) or a
    /// batched matmul.
    pub(super) fn wgmma_pingpong(
        &mut self,
        out: Value,
        (mm, row_reductions): (Value, &[Value]),
        tile: &TileConfig,
    ) -> Result<[u32; 3], LowerError> {
        let TileConfig::Mma {
            bm,
            bn,
            bk,
            stages,
            shape,
            epilogue,
            engine: MmaEngine::WgmmaPingpong { ctas },
            ..
        } = *tile
        else {
            unreachable!("called for ping-pong tiles")
        };
        let (a, b, esz, batch_shape, (m, k, n)) = self.tma_operands(mm, "wgmma: pingpong")?;
        let wshape = WgmmaShape {
            n: bn,
            input: wgmma_input(shape),
        };
        let (mt, nt) = (m.div_ceil(bm as u64), n.div_ceil(bn as u64));
        let tiles = mt * nt;
        let slices = k.div_ceil(bk as u64).max(1);

        // The ring, the two staging tiles, then the barriers: one buffer, 1024-aligned for
        // the swizzle.
        let total = pingpong_shared_bytes(bk, stages, esz, (epilogue, self.staged_esz(mm)));
        let body = total - barrier_bytes(stages);
        let buf = self.b.kernel.new_shared(total, 1024);
        let TmaRing {
            ring_a,
            ring_b,
            plan_a,
            plan_b,
            b: read_b,
            full0,
            empty0,
        } = self.tma_ring(buf, (&a, &b), (bm, bn, bk, esz, stages), body, mm)?;
        let base = ring_a.base;
        let ring_bytes = stages * (ring_a.stage_bytes() + ring_b.stage_bytes());

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let bid = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        // This CTA's tiles: bid, bid + ctas, ... below `tiles` (ctas ≤ tiles).
        let left = self
            .b
            .op(RegType::U32, Op::ISub, &[Self::imm_u(tiles), bid.into()]);
        let left = self.iadd(Ix::R(left), Ix::C(ctas as u64 - 1));
        let n_cta = self.idiv_c(left, ctas as u64);
        let n_cta = self.ix_op(n_cta);

        let t0 = self.init_ring_barriers(tid, (full0, empty0), stages, WARPGROUP);

        let producer = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[tid.into(), Operand::U32(PRODUCER_THREADS)],
        );
        self.open();
        self.b.push(Stmt::SetMaxNReg {
            inc: false,
            regs: PRODUCER_REGS,
        });
        self.open();
        // The producer thread: every tile of the CTA, every K slice, one fill each.
        let j = self.b.kernel.new_reg(RegType::U32);
        self.b.assign(j, Op::Mov, &[Operand::U32(0)]);
        let t = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let (ntile, mtile) = self.grouped_tile(Ix::R(t), (mt, nt), GROUP_M);
        let m0 = self.imul_c(mtile, bm as u64);
        let n0 = self.imul_c(ntile, bn as u64);
        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let rings = ((&ring_a, &plan_a), (&ring_b, &plan_b));
        self.tma_fill(rings, (full0, empty0), (stages, bk), (j, kt), (m0, n0));
        self.b.assign(j, Op::IAdd, &[j.into(), Operand::U32(1)]);
        self.close_for(
            kt,
            Operand::U32(0),
            Operand::U32(slices as u32),
            Operand::U32(1),
        );
        self.close_for(t, bid.into(), Self::imm_u(tiles), Operand::U32(ctas));
        self.close_if(t0);
        let then_body = self.close();

        self.open();
        self.b.push(Stmt::SetMaxNReg {
            inc: true,
            regs: CONSUMER_REGS,
        });
        let ctid = self.b.op(
            RegType::U32,
            Op::ISub,
            &[tid.into(), Operand::U32(PRODUCER_THREADS)],
        );
        // Warpgroup c of the consumers, its thread wtid; `second`: c = 1.
        let c = self
            .b
            .op(RegType::U32, Op::ShrU, &[ctid.into(), Operand::U32(7)]);
        let wtid = self.b.op(
            RegType::U32,
            Op::And,
            &[ctid.into(), Operand::U32(WARPGROUP - 1)],
        );
        let second = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::GeU),
            &[ctid.into(), Operand::U32(WARPGROUP)],
        );
        let staging = if epilogue == MmaEpilogue::Staged {
            let tile_bytes = BLOCK_ROWS * (bn + STAGED_ROW_PAD) * self.staged_esz(mm);
            let off = self.imul_c(Ix::R(c), tile_bytes as u64);
            let off = self.iadd(off, Ix::C(ring_bytes as u64));
            self.shared_addr(base, off)
        } else {
            base
        };
        let lane = self.irem_c(Ix::R(wtid), 32);
        let warp = self.idiv_c(Ix::R(wtid), 32);
        let wm0 = self.imul_c(warp, 16);
        let lead = self.unflatten(Ix::C(0), &batch_shape);
        let fixed = wgmma_fixed_bits(&ring_a);
        let blocks = bm / BLOCK_ROWS;
        let accs: Vec<Vec<Reg>> = (0..blocks)
            .map(|_| {
                (0..wshape.d_regs())
                    .map(|_| self.b.kernel.new_reg(RegType::F32))
                    .collect()
            })
            .collect();

        let i = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let t = self.imul_c(Ix::R(i), ctas as u64);
        let t = self.iadd(Ix::R(bid), t);
        let (ntile, mtile) = self.grouped_tile(t, (mt, nt), GROUP_M);
        let m0 = self.imul_c(mtile, bm as u64);
        let n0 = self.imul_c(ntile, bn as u64);
        // Our turn: the other warpgroup has waited for every fill of tile i - 1.
        let later = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::GtU),
            &[i.into(), Operand::U32(0)],
        );
        self.open();
        let order = NamedBarrier {
            id: ORDER_BARRIER,
            second: Some(second),
        };
        self.named_barrier_sync(order, 2 * WARPGROUP);
        self.close_if(later);
        for d in &accs {
            for &r in d {
                self.b.assign(r, Op::Mov, &[Operand::f32(0.0)]);
            }
        }
        let j0 = self.imul_c(Ix::R(i), slices);
        let j0_op = self.ix_op(j0);

        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let j = self.b.op(RegType::U32, Op::IAdd, &[j0_op, kt.into()]);
        let (stage, parity) = self.stage_parity(j, stages);
        let bar = self.imul_c(stage, 8);
        let full = self.shared_addr(full0, bar);
        self.b.push(Stmt::MbarWait {
            addr: full,
            parity: parity.into(),
        });
        let oa = self.imul_c(stage, ring_a.stage_bytes() as u64);
        let ob = self.imul_c(stage, ring_b.stage_bytes() as u64);
        let start_a = self.shared_addr(ring_a.base, oa);
        let starts: Vec<Reg> = (0..blocks)
            .map(|h| {
                let rows = (h * BLOCK_ROWS * ring_a.layout.row_pitch()) as u64;
                self.shared_addr(start_a, Ix::C(rows))
            })
            .collect();
        let start_b = self.shared_addr(ring_b.base, ob);
        let pairs: Vec<(&[Reg], Reg)> = accs
            .iter()
            .zip(&starts)
            .map(|(d, &s)| (&d[..], s))
            .collect();
        self.wgmma_slice_blocks(wshape, &pairs, start_b, (fixed, read_b));
        self.b.push(Stmt::WgmmaCommit);
        self.b.push(Stmt::WgmmaWait(1));
        // Fill j - 1's group is complete: its stage may be refilled.
        let more = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::GtU),
            &[kt.into(), Operand::U32(0)],
        );
        self.open();
        let prev = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[j.into(), Operand::U32(stages - 1)],
        );
        self.release_stage(Ix::R(prev), stages, empty0);
        self.close_if(more);
        self.close_for(
            kt,
            Operand::U32(0),
            Operand::U32(slices as u32),
            Operand::U32(1),
        );
        // The other warpgroup's turn, if the CTA has a tile i + 1 (at its barrier: 2 - c).
        let next = self
            .b
            .op(RegType::U32, Op::IAdd, &[i.into(), Operand::U32(1)]);
        let next = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[next.into(), n_cta]);
        self.open();
        self.b.push(Stmt::If {
            cond: second,
            then_body: vec![Stmt::BarArrive {
                id: ORDER_BARRIER,
                threads: 2 * WARPGROUP,
            }],
            else_body: vec![Stmt::BarArrive {
                id: ORDER_BARRIER + 1,
                threads: 2 * WARPGROUP,
            }],
        });
        self.close_if(next);
        self.b.push(Stmt::WgmmaWait(0));
        let last = self.iadd(j0, Ix::C(slices - 1));
        self.release_stage(last, stages, empty0);

        let warp_tile = WarpTile {
            tid: wtid,
            lane,
            wm0,
            wn0: Ix::C(0),
            named_barrier: Some(NamedBarrier {
                id: EPILOGUE_BARRIER,
                second: Some(second),
            }),
        };
        for (h, d) in accs.iter().enumerate() {
            let frags: Vec<[Reg; 4]> = d
                .chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect();
            let m0h = self.iadd(m0, Ix::C(h as u64 * BLOCK_ROWS as u64));
            // The last row tile's second half lies wholly past M when M mod 128 is 1 to
            // 64: it has nothing to store, and a row epilogue would clamp its rows to M - 1,
            // a row of the first half, outside the staged half (into the ring the producer
            // is refilling). The warpgroup skips it together (its barriers are its own).
            let tail = h > 0 && (1..=BLOCK_ROWS as u64).contains(&(m % (bm as u64)));
            let inside = tail.then(|| {
                let m0o = self.ix_op(m0h);
                let lt = Op::ICmp(ICmp::LtU);
                self.b.op(RegType::Pred, lt, &[m0o, Operand::U32(m as u32)])
            });
            if inside.is_some() {
                self.open();
            }
            self.tile_epilogue(
                (out, mm, row_reductions),
                (staging, BLOCK_ROWS, bn, WARPGROUP),
                (&frags, 1, bn / 8),
                warp_tile,
                (&lead[..], m0h, n0, m, n),
                epilogue,
            )?;
            if let Some(inside) = inside {
                self.close_if(inside);
            }
        }
        self.close_for(i, c.into(), n_cta, Operand::U32(2));
        let else_body = self.close();
        self.b.push(Stmt::If {
            cond: producer,
            then_body,
            else_body,
        });
        Ok(tile_grid((ctas as u64, 1), 1, 1))
    }

    /// Every thread of a consumer warpgroup arrives on the EMPTY barrier of fill `j`'s
    /// stage (`j mod stages`; EMPTY barriers from `empty0`, 8 bytes each).
    fn release_stage(&mut self, j: Ix, stages: u32, empty0: Reg) {
        let stage = self.irem_c(j, stages as u64);
        let bar = self.imul_c(stage, 8);
        let empty = self.shared_addr(empty0, bar);
        self.b.push(Stmt::MbarArrive { addr: empty });
    }
}
