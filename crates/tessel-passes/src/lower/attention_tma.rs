//! The producer warpgroup of the warpgroup attention tile (`TileConfig::Attention` with
//! `wgmma`): FlashAttention-3's warp specialisation (Shah, Bikshandi, Zhang, Thakkar,
//! Ramani, Dao, "FlashAttention-3: Fast and Accurate Attention with Asynchrony and
//! Low-precision", 2024, §3.1), written from the PTX ISA. The consumers' main loop is
//! `attention.rs`'s; the ring's mbarriers are initialised by `wgmma_tma.rs`'s
//! [`Gen::init_ring_barriers`] and the TMA loads are `ring/tma.rs`'s.
//!
//! **The ring.** Stage `s` holds one key block's K tile and V tile (128-byte panels, the
//! wgmma swizzle) and has two mbarriers: FULL[s] (one arrival: the producer's) and
//! EMPTY[s] (one arrival per consumer thread, 256). Fill `i` (key block `first + i`) goes
//! to stage `i mod S`.
//!
//! **Producer** (threads 0..128, after `setmaxnreg.dec`): for each key block of the CTA, in
//! order — the same `first .. blocks` as the consumers', computed once by every warp
//! before the roles split ([`Gen::key_bounds`]), so the producer loads exactly the blocks
//! the consumers consume and causal blocks past the diagonal are skipped by both — every
//! producer thread waits until EMPTY[i mod S] has completed the phase of fill `i − S`
//! (parity `((i / S) & 1) ^ 1`, at once in the first round). Then, for a block wholly
//! below the CTA's last visible key (or when there is no bound), thread 0 arms FULL with
//! both tiles' bytes (`mbarrier.arrive.expect_tx`, PTX ISA §9.7.13.15.11) and issues the
//! TMA loads (`cp.async.bulk.tensor.3d` or more, §9.7.9.25.5.1): `d / 64` boxes of
//! `[64 × block_n]` for K and `e / 64` for V at key `64 · j`, the batch entry's
//! coordinates after; keys past N are zero-filled by the maps. The block that crosses the
//! CTA's last visible key (`limit` < N, a causal diagonal or a cache's fill) is copied by
//! the 128 producer threads with 16-byte `cp.async`, zero-filled from `limit` on as the
//! `mma.sync` tile's copies are — a key no row sees must not bring an unwritten cache
//! row's NaN into P·V as 0 · NaN — then `cp.async.wait_all`, `fence.proxy.async` (the
//! copies are generic-proxy writes that wgmma reads through the async proxy), the
//! producers' named barrier, and thread 0's plain arrival on FULL.
//!
//! **Consumers** (`attention.rs`): wait FULL[i mod S] at parity `(i / S) & 1`, and once
//! the block's last wgmma reading the stage has completed (S = Q·Kᵀ of block `i`, P·V of
//! block `i` — a block later, pipelined), every consumer thread arrives on EMPTY[i mod S].
//! A consumer can be at most one phase ahead on any barrier: it reaches block `i` only
//! after fill `i − S` landed, which needed both warpgroups' release of block `i − 2S`.

use super::attention_parts::KvCopy;
use super::{Gen, Ix, LowerError};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Stmt};
use tessel_ir::{Reg, Value};

/// The producer warpgroup's named barrier (the consumers' is 1; 0 is `bar.sync 0`'s).
const PRODUCER_BARRIER: u32 = 2;

impl Gen<'_> {
    /// The producer warpgroup's loop (every producer thread; see the module doc): the key
    /// blocks `first .. blocks` of `copy`'s K and V into their rings, through the mbarriers
    /// at `full0` and `empty0` (8 bytes a stage), `stages` stages; `batch`: the view dims
    /// of the CTA's batch entry with their indices, `rank` the views' rank; `n` the keys;
    /// `a` names the attention in errors.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] where TMA cannot load K or V ([`Gen::tma_plan_view`]).
    pub(super) fn attention_producer(
        &mut self,
        copy: &KvCopy<'_>,
        (batch, rank): (&[(usize, Ix)], usize),
        (full0, empty0): (Reg, Reg),
        (first, blocks): (Operand, Operand),
        (stages, n): (u32, u64),
        a: Value,
    ) -> Result<(), LowerError> {
        let (kv, _, _, ring_k, _) = copy.k;
        let (vv, _, _, ring_v, _) = copy.v;
        let block_n = copy.block_n;
        // K is the scores' rhs [.., d, n], V the values [.., n, e]: each a view whose
        // contiguous dim is the head dim.
        let kept = |view: &crate::view::StridedView| -> Vec<(usize, Ix)> {
            batch
                .iter()
                .copied()
                .filter(|&(k, _)| view.shape[k] > 1 && view.strides[k] > 0)
                .collect()
        };
        let (batch_k, batch_v) = (kept(kv), kept(vv));
        let dims_k: Vec<usize> = batch_k.iter().map(|b| b.0).collect();
        let dims_v: Vec<usize> = batch_v.iter().map(|b| b.0).collect();
        let plan_k = self.tma_plan_view(kv, (rank - 2, rank - 1, &dims_k), &ring_k, a)?;
        let plan_v = self.tma_plan_view(vv, (rank - 1, rank - 2, &dims_v), &ring_v, a)?;
        let bytes = plan_k.stage_bytes() + plan_v.stage_bytes();
        let tid = copy.tid;
        let t0 = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::Eq),
            &[tid.into(), Operand::U32(0)],
        );

        let jb = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let i = self.b.op(RegType::U32, Op::ISub, &[jb.into(), first]);
        let (stage, full) = self.acquire_stage(i, stages, (full0, empty0));
        let j0 = self.imul_c(Ix::R(jb), block_n as u64);

        // Thread 0: FULL armed with both tiles' bytes, then their TMA loads.
        self.open();
        self.open();
        self.b.push(Stmt::MbarArriveExpectTx {
            addr: full,
            bytes: Operand::U32(bytes),
        });
        for (ring, plan, b) in [(&ring_k, &plan_k, &batch_k), (&ring_v, &plan_v, &batch_v)] {
            let off = self.imul_c(stage, ring.stage_bytes() as u64);
            let dst = self.shared_addr(ring.base, off);
            let mut at = vec![Ix::C(0), j0];
            at.extend(b.iter().map(|x| x.1));
            self.issue_tma_at(plan, dst, &at, full);
        }
        self.close_if(t0);
        let by_tma = self.close();

        match copy.limit {
            // No bound: every block by TMA (keys past N are the maps' zeros).
            Operand::U32(_) => {
                for st in by_tma {
                    self.b.push(st);
                }
            }
            limit => {
                // The block crossing the CTA's last visible key, short of N: by cp.async.
                let end = self.iadd(j0, Ix::C(block_n as u64));
                let eo = self.ix_op(end);
                let past = self.b.op(RegType::Pred, Op::ICmp(ICmp::GtU), &[eo, limit]);
                let short = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[limit, Self::imm_u(n)]);
                let crosses = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[past.into(), short.into()]);
                self.open();
                self.issue_kv(copy, stage, j0, false)?;
                self.b.push(Stmt::CpAsyncCommit);
                self.b.push(Stmt::CpAsyncWaitAll);
                self.b.push(Stmt::FenceProxyAsync);
                self.b.push(Stmt::BarSync {
                    id: PRODUCER_BARRIER,
                    threads: copy.threads,
                });
                self.open();
                self.b.push(Stmt::MbarArrive { addr: full });
                self.close_if(t0);
                let then_body = self.close();
                self.b.push(Stmt::If {
                    cond: crosses,
                    then_body,
                    else_body: by_tma,
                });
            }
        }
        self.close_for(jb, first, blocks, Operand::U32(1));
        Ok(())
    }
}
