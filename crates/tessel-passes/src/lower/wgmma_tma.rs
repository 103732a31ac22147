//! The warp-specialised warpgroup GEMM tile (`TileConfig::Mma` with
//! [`MmaEngine::WgmmaTma`], text `wgmma: tma`): one producer warpgroup fills the ring by
//! TMA, `bm / 64` consumer warpgroups multiply it with `wgmma`, and the stages pass between
//! them through mbarriers — the structure of CUTLASS 3's
//! `sm90_mma_tma_gmma_ss_warpspecialized` mainloop and of DeepGEMM's and fast.cu's kernels,
//! written from the PTX ISA. What comes before it (the operands, the grouped CTA order) is
//! `matmul.rs`'s and `ring/`'s; after it, `mma.rs`'s epilogue, run by the consumers alone.
//!
//! The CTA: `128 + 32 · warps_m` threads. Shared memory: the ring (A's `stages` stages of
//! `bm` rows × 128 bytes, then B's of `bn` rows, each stage 1024-aligned in the 128-byte
//! swizzle TMA writes and wgmma reads: [`StageLayout::tma`](super::ring::StageLayout::tma),
//! [`StageLayout::wgmma_k_major`](super::ring::StageLayout::wgmma_k_major)),
//! the epilogue's staged tile over the ring, and after both the mbarriers: FULL[s] (one
//! arrival, the producer's `expect_tx`, plus the stage's bytes) and EMPTY[s] (one arrival
//! per consumer thread). Thread 0 initialises them, `fence.mbarrier_init`, `bar.sync 0`.
//!
//! - **Producer** (threads 0..128): `setmaxnreg.dec` to [`PRODUCER_REGS`]; thread 0 alone,
//!   for each K slice `kt` in order: wait until EMPTY[kt mod S] has completed the phase of
//!   the slice `S` before (parity `((kt / S) & 1) ^ 1`, at once in the first round), arm
//!   FULL[kt mod S] with both boxes' bytes, issue A's box `[bm × 64]` at (k = 64·kt, m0)
//!   and B's `[bn × 64]` at (k, n0) — or, for a 16-bit B stored `[K, N]` (`x @ w`, read
//!   MN-major), its `bn / 64` boxes of `[64 K rows × 64 N columns]`, one 128-byte panel
//!   each, at (n0 + 64i, k) over a map of the stored `[K, N]`. Boxes past M, N or K are
//!   zero-filled by the tensor maps, whose dims are the tensors' (PTX ISA
//!   §9.7.9.25.5.1; `ring/tma.rs`).
//! - **Consumers** (threads 128..): `setmaxnreg.inc` to [`CONSUMER_REGS`]; per slice: wait
//!   FULL[kt mod S] (parity `(kt / S) & 1`), `wgmma.fence`, 4 × `wgmma.m64n{bn}k16` on the
//!   warpgroup's 64 rows (PTX ISA §9.7.15.5; B K- or MN-major, `wgmma.rs`'s `WgmmaB`), commit, `wgmma.wait_group 1` — slice
//!   `kt - 1`'s group is done, so its stage's bytes are no longer read — and every consumer
//!   thread arrives on EMPTY[(kt - 1) mod S]: one group stays in flight while the next
//!   slice is waited for. After the last slice, `wait_group 0`, then the epilogue
//!   ([`Gen::tile_epilogue`]) over the consumers' threads, which meet at named barrier
//!   [`EPILOGUE_BARRIER`] (the producer warpgroup has left, so `bar.sync 0` would hang).
//!
//! Every TMA write lands before a consumer waits the phase that counts it, and every
//! consumer waits every FULL phase, so no copy is in flight when the epilogue overwrites
//! the ring. Each output element is one accumulation over k in order, slice after slice —
//! the `wgmma: 1` tile's order, the executor's bits of `mma.sync`'s.

use super::epilogue::{NamedBarrier, WarpTile};
use super::mma::{tile_grid, GROUP_M};
use super::ring::tma::TmaPlan;
use super::ring::{Operand2d, Ring};
use super::wgmma::{major_of, wgmma_b, wgmma_stage, WgmmaB};
use super::{Gen, Ix, LowerError};
use crate::schedule::mma_shared_bytes;
use tessel_ir::graph::{MmaEngine, MmaEpilogue, TileConfig};
use tessel_ir::kernel::{
    ICmp, MmaShape, Op, Operand, RegType, Special, Stmt, WgmmaInput, WgmmaShape,
};
use tessel_ir::{Reg, Shape, Value};

/// Threads of the producer warpgroup, the CTA's first.
pub(crate) const PRODUCER_THREADS: u32 = 128;

/// The producer warpgroup's register budget after `setmaxnreg.dec` (PTX ISA §9.7.19.5), and
/// the consumers' after `setmaxnreg.inc`: 128 · 40 + 256 · 232 = 64512, the 168 registers
/// a thread ptxas allots at entry (65536 / 384 rounded down to 8, with `.reqntid 384` and
/// `.minnctapersm 1`) times 384 — the pool setmaxnreg moves registers within. CUTLASS's
/// warp-specialised GEMMs use the same pair (`LoadRegisterRequirement`,
/// `MmaRegisterRequirement`); the producer's loop needs about 30.
pub(crate) const PRODUCER_REGS: u32 = 40;
pub(crate) const CONSUMER_REGS: u32 = 232;

/// The named barrier where the consumers meet in the epilogue (0 is `bar.sync 0`'s).
const EPILOGUE_BARRIER: u32 = 1;

/// A TMA tile's operands ([`Gen::tma_operands`]): A and B, their element size in bytes,
/// the batch shape and (M, K, N).
pub(super) type TmaOperands = (Operand2d, Operand2d, u32, Shape, (u64, u64, u64));

/// The `wgmma` input type of a tensor-core tile's instruction shape.
pub(super) fn wgmma_input(shape: MmaShape) -> WgmmaInput {
    match shape {
        MmaShape::M16N8K16Bf16 => WgmmaInput::Bf16,
        MmaShape::M16N8K16F16 => WgmmaInput::F16,
        MmaShape::M16N8K8Tf32 => WgmmaInput::Tf32,
    }
}

/// Bytes of the mbarriers after the ring: FULL and EMPTY, 8 bytes each, per stage.
pub(crate) fn barrier_bytes(stages: u32) -> u32 {
    2 * 8 * stages
}

/// A warp-specialised tile's ring in its shared buffer: A's stages, then B's, then (at
/// `body` bytes) the FULL and EMPTY mbarriers, one of each per stage; with each operand's
/// TMA plan ([`Gen::tma_ring`]).
pub(super) struct TmaRing {
    pub ring_a: Ring,
    pub ring_b: Ring,
    pub plan_a: TmaPlan,
    pub plan_b: TmaPlan,
    /// How the main loop reads B's stages ([`wgmma_b`]).
    pub b: WgmmaB,
    /// Shared addresses of FULL[0] and EMPTY[0]; stage `s`'s are `8·s` bytes on.
    pub full0: Reg,
    pub empty0: Reg,
}

/// What both roles of a TMA tile's CTA work from ([`Gen::tma_roles`]): the ring and its
/// operands' TMA plans, how the main loop reads B, the FULL and EMPTY barriers, the ring's
/// stages, `bk` and the K slices, the wgmma shape (its `n` the output tile's columns), the
/// output tile's rows, the consumer threads and the epilogue kind.
struct TmaRoles<'a> {
    ring_a: &'a Ring,
    plan_a: &'a TmaPlan,
    ring_b: &'a Ring,
    plan_b: &'a TmaPlan,
    read_b: WgmmaB,
    bars: (Reg, Reg),
    stages: u32,
    bk: u32,
    slices: u64,
    wshape: WgmmaShape,
    bm: u32,
    consumers: u32,
    epilogue: MmaEpilogue,
}

impl Gen<'_> {
    /// The ring of a TMA-fed wgmma tile in `buf` (1024-aligned for the 128-byte swizzle):
    /// `stages` stages of A's `bm` rows of `bk` elements of `esz` bytes from the buffer's
    /// start, then B's of `bn` rows ([`wgmma_stage`]), and the mbarriers at `body` bytes;
    /// the operands' TMA plans (their tensor-map parameters) for matmul `mm`.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] for an operand TMA cannot load ([`Gen::tma_plan`]).
    pub(super) fn tma_ring(
        &mut self,
        buf: tessel_ir::SharedBuf,
        (a, b): (&Operand2d, &Operand2d),
        (bm, bn, bk, esz, stages): (u32, u32, u32, u32, u32),
        body: u32,
        mm: Value,
    ) -> Result<TmaRing, LowerError> {
        let base = self.b.op(RegType::U32, Op::SharedAddr(buf), &[]);
        let ring_a = Ring {
            base,
            layout: wgmma_stage(true, bm, bk, esz),
        };
        let b_base = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[base.into(), Operand::U32(stages * ring_a.stage_bytes())],
        );
        let ring_b = Ring {
            base: b_base,
            layout: wgmma_stage(b.k_contiguous, bn, bk, esz),
        };
        let plan_a = self.tma_plan(a, &ring_a, mm)?;
        let plan_b = self.tma_plan(b, &ring_b, mm)?;
        let b_major = major_of(b.k_contiguous);
        let full0 = self.shared_addr(base, Ix::C(body as u64));
        let empty0 = self.shared_addr(base, Ix::C((body + 8 * stages) as u64));
        Ok(TmaRing {
            ring_a,
            ring_b,
            plan_a,
            plan_b,
            b: wgmma_b(&ring_b, b_major),
            full0,
            empty0,
        })
    }

    /// Thread 0 (`tid` = 0) initialises each stage's FULL mbarrier for one arrival (the
    /// producer's `expect_tx`) and its EMPTY one for `empty_arrivals` (the consumer threads
    /// that release it), then `fence.mbarrier_init`; every thread sees them after the
    /// CTA barrier that follows (PTX ISA §9.7.13.15.9). Returns the predicate `tid = 0`.
    pub(super) fn init_ring_barriers(
        &mut self,
        tid: Reg,
        (full0, empty0): (Reg, Reg),
        stages: u32,
        empty_arrivals: u32,
    ) -> Reg {
        let t0 = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::Eq),
            &[tid.into(), Operand::U32(0)],
        );
        self.open();
        for s in 0..stages {
            let full = self.shared_addr(full0, Ix::C(8 * s as u64));
            self.b.push(Stmt::MbarInit {
                addr: full,
                count: Operand::U32(1),
            });
            let empty = self.shared_addr(empty0, Ix::C(8 * s as u64));
            self.b.push(Stmt::MbarInit {
                addr: empty,
                count: Operand::U32(empty_arrivals),
            });
        }
        self.b.push(Stmt::FenceMbarrierInit);
        self.close_if(t0);
        self.b.push(Stmt::Barrier);
        t0
    }
}

impl Gen<'_> {
    /// The warp-specialised tile of matmul `mm` (its group's output `out`, with
    /// `row_reductions` for a row epilogue; see the module doc). Returns the grid.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] for operands TMA cannot load ([`Gen::tma_plan`]) or a
    /// batched matmul.
    pub(super) fn wgmma_tma(
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
            stages,
            shape,
            epilogue,
            engine,
            ..
        } = *tile
        else {
            unreachable!("called for mma tiles")
        };
        let tail = match engine {
            MmaEngine::WgmmaTma { tail } => tail as u64,
            _ => 0,
        };
        if tail > 0 && !row_reductions.is_empty() {
            return Err(LowerError::Unsupported {
                what: "a wgmma: tma tile with a split tail and a row epilogue".into(),
                value: mm,
            });
        }
        let (a, b, esz, batch_shape, (m, k, n)) = self.tma_operands(mm, "wgmma: tma")?;
        let wshape = WgmmaShape {
            n: bn,
            input: wgmma_input(shape),
        };
        let (mt, nt) = (m.div_ceil(bm as u64), n.div_ceil(bn as u64));
        if tail > mt * nt {
            return Err(LowerError::Unsupported {
                what: format!(
                    "a wgmma: tma tile with a split tail of {tail} of its {} tiles",
                    mt * nt
                ),
                value: mm,
            });
        }
        let consumers = 32 * warps_m;
        let slices = k.div_ceil(bk as u64).max(1);

        // The ring, the epilogue's tile over it, then the barriers: one buffer (beyond 48
        // KiB the launch's dynamic shared memory), 1024-aligned for the swizzle.
        let body = mma_shared_bytes((bm, bn, bk), stages, esz, epilogue).next_multiple_of(8);
        let buf = self.b.kernel.new_shared(body + barrier_bytes(stages), 1024);
        let TmaRing {
            ring_a,
            ring_b,
            plan_a,
            plan_b,
            b: read_b,
            full0,
            empty0,
        } = self.tma_ring(buf, (&a, &b), (bm, bn, bk, esz, stages), body, mm)?;

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let (m0, n0, lead, whole) = if tail == 0 {
            let (ntile, mtile, lead, _, _) =
                self.matmul_cta((mt, nt), Some(GROUP_M), &batch_shape, k, k)?;
            let m0 = self.imul_c(mtile, bm as u64);
            (m0, self.imul_c(ntile, bn as u64), lead, None)
        } else {
            let (m0, n0, whole) = self.split_tail_tile((mt, nt), (bm, bn), tail);
            (m0, n0, self.unflatten(Ix::C(0), &batch_shape), Some(whole))
        };

        let t0 = self.init_ring_barriers(tid, (full0, empty0), stages, consumers);
        let roles = TmaRoles {
            ring_a: &ring_a,
            plan_a: &plan_a,
            ring_b: &ring_b,
            plan_b: &plan_b,
            read_b,
            bars: (full0, empty0),
            stages,
            bk,
            slices,
            wshape,
            bm,
            consumers,
            epilogue,
        };
        let group = (out, mm, row_reductions);
        let at = (&lead[..], m0, n0, m, n);
        let Some(whole) = whole else {
            self.tma_roles(group, &roles, (tid, t0), at)?;
            return Ok(tile_grid((mt, nt), 1, 1));
        };
        // The halves' B: stages of bn / 2 rows from the same base, their own tensor map
        // (boxes of bn / 2 rows), wgmma.m64n{bn/2}k16.
        let ring_b_half = Ring {
            base: ring_b.base,
            layout: wgmma_stage(b.k_contiguous, bn / 2, bk, esz),
        };
        let plan_b_half = self.tma_plan(&b, &ring_b_half, mm)?;
        let halves = TmaRoles {
            ring_b: &ring_b_half,
            plan_b: &plan_b_half,
            read_b: wgmma_b(&ring_b_half, major_of(b.k_contiguous)),
            wshape: WgmmaShape {
                n: bn / 2,
                ..wshape
            },
            ..roles
        };
        self.open();
        self.tma_roles(group, &roles, (tid, t0), at)?;
        let then_body = self.close();
        // A half wholly past N (only where N mod bn is in 1..=bn/2) has nothing to compute
        // or store: its CTA leaves at once (the condition is the CTA's own, so every thread
        // leaves).
        self.open();
        let past = (1..=bn as u64 / 2).contains(&(n % bn as u64));
        if past {
            let inside = self.ix_op(n0);
            let inside = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::LtU),
                &[inside, Self::imm_u(n)],
            );
            self.open();
            self.tma_roles(group, &halves, (tid, t0), at)?;
            self.close_if(inside);
        } else {
            self.tma_roles(group, &halves, (tid, t0), at)?;
        }
        let else_body = self.close();
        self.b.push(Stmt::If {
            cond: whole,
            then_body,
            else_body,
        });
        Ok([(mt * nt + tail) as u32, 1, 1])
    }

    /// The output tile of this CTA of a TMA tile whose last `tail` tiles (of `mt × nt`, in
    /// the grouped order, each `bm × bn`) are split in two along N: CTA `x` below
    /// `whole = mt · nt − tail` computes tile `x` whole; CTA `whole + 2j + h` computes half
    /// `h` (columns `h · bn/2 ..`) of tile `whole + j`. The CTAs are launched in order, so
    /// the halves make the last wave. Returns the tile's first row and column and the
    /// predicate `x < whole`.
    fn split_tail_tile(
        &mut self,
        (mt, nt): (u64, u64),
        (bm, bn): (u32, u32),
        tail: u64,
    ) -> (Ix, Ix, Reg) {
        let x = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let first_half = Self::imm_u(mt * nt - tail);
        let whole = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[x.into(), first_half]);
        // d = x − (mt · nt − tail) for the halves, 0 for the whole tiles.
        let from = self.b.op(
            RegType::U32,
            Op::Select,
            &[whole.into(), first_half, x.into()],
        );
        let d = self
            .b
            .op(RegType::U32, Op::ISub, &[from.into(), first_half]);
        let j = self.idiv_c(Ix::R(d), 2);
        let split = self.iadd(Ix::C(mt * nt - tail), j);
        let split = self.ix_op(split);
        let p = self
            .b
            .op(RegType::U32, Op::Select, &[whole.into(), x.into(), split]);
        let (ntile, mtile) = self.grouped_tile(Ix::R(p), (mt, nt), GROUP_M);
        let m0 = self.imul_c(mtile, bm as u64);
        let n0 = self.imul_c(ntile, bn as u64);
        let h = self.irem_c(Ix::R(d), 2);
        let h = self.imul_c(h, (bn / 2) as u64);
        (m0, self.iadd(n0, h), whole)
    }

    /// The two roles of a TMA tile's CTA over the output tile at (`m0`, `n0`) (see the
    /// module doc): `tid` < 128 the producer, whose thread 0 (`t0`) fills the ring, the
    /// others the consumers, which multiply and run the epilogue.
    fn tma_roles(
        &mut self,
        (out, mm, row_reductions): (Value, Value, &[Value]),
        r: &TmaRoles<'_>,
        (tid, t0): (Reg, Reg),
        (lead, m0, n0, m, n): (&[Ix], Ix, Ix, u64, u64),
    ) -> Result<(), LowerError> {
        let bn = r.wshape.n;
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
        let rings = ((r.ring_a, r.plan_a), (r.ring_b, r.plan_b));
        self.tma_producer(rings, r.bars, (r.stages, r.bk, r.slices), (m0, n0));
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
        let accs = self.wgmma_consumer(
            (r.ring_a, r.ring_b, r.read_b),
            r.bars,
            (r.stages, r.slices),
            Ix::R(ctid),
            r.wshape,
        );
        let lane = self.irem_c(Ix::R(ctid), 32);
        let warp = self.idiv_c(Ix::R(ctid), 32);
        let wm0 = self.imul_c(warp, 16);
        let warp_tile = WarpTile {
            tid: ctid,
            lane,
            wm0,
            wn0: Ix::C(0),
            named_barrier: Some(NamedBarrier::fixed(EPILOGUE_BARRIER)),
        };
        self.tile_epilogue(
            (out, mm, row_reductions),
            (r.ring_a.base, r.bm, bn, r.consumers),
            (&accs, 1, bn / 8),
            warp_tile,
            (lead, m0, n0, m, n),
            r.epilogue,
        )?;
        let else_body = self.close();
        self.b.push(Stmt::If {
            cond: producer,
            then_body,
            else_body,
        });
        Ok(())
    }

    /// The operands of the matmul `mm` of a TMA tile (`what`, for messages): A and B as
    /// stored 2-D tensors, their element size in bytes, the batch shape and (M, K, N).
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] for operands that are not stored tensors, a batch, an
    /// A not contiguous along K, or a B not contiguous along K of other than 16-bit
    /// elements.
    pub(super) fn tma_operands(
        &mut self,
        mm: Value,
        what: &str,
    ) -> Result<TmaOperands, LowerError> {
        let (_, _, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let [ra, rb] = self.operand_reads(mm);
        let esz = self.g.ty(ra.stored).dtype.size_bytes() as u32;
        let (Some(a), Some(b)) = (self.operand_2d(&ra, true), self.operand_2d(&rb, false)) else {
            return Err(LowerError::Unsupported {
                what: format!("a {what} tile whose operands are not stored tensors"),
                value: mm,
            });
        };
        if batch_shape.numel() > 1 {
            return Err(LowerError::Unsupported {
                what: format!("a batched {what} tile"),
                value: mm,
            });
        }
        // wgmma reads A K-major; B MN-major only for 16-bit inputs (its transpose).
        if !a.k_contiguous || (!b.k_contiguous && esz != 2) {
            return Err(LowerError::Unsupported {
                what: format!(
                    "a {what} tile whose A is not read along K, or a 32-bit B not read along K"
                ),
                value: mm,
            });
        }
        Ok((a, b, esz, batch_shape, (m, k, n)))
    }

    /// The producer's loop (one thread): per K slice, wait for its stage to be released,
    /// arm the stage's FULL barrier with the bytes of both boxes, issue them.
    fn tma_producer(
        &mut self,
        rings: ((&Ring, &TmaPlan), (&Ring, &TmaPlan)),
        bars: (Reg, Reg),
        (stages, bk, slices): (u32, u32, u64),
        (m0, n0): (Ix, Ix),
    ) {
        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        self.tma_fill(rings, bars, (stages, bk), (kt, kt), (m0, n0));
        self.close_for(
            kt,
            Operand::U32(0),
            Operand::U32(slices as u32),
            Operand::U32(1),
        );
    }

    /// The producer's fill of one ring slot (one thread): the ring's `j`-th fill (stage
    /// `j mod stages`) waits until the stage is released — the EMPTY barrier's phase of the
    /// fill `stages` before, parity `((j / stages) & 1) ^ 1`, at once in the first round —
    /// arms FULL with both boxes' bytes and issues A's box at (K `kt · bk`, row `m0`) and
    /// B's at (K `kt · bk`, row `n0`) (PTX ISA §9.7.9.25.5.1).
    pub(super) fn tma_fill(
        &mut self,
        ((ring_a, plan_a), (ring_b, plan_b)): ((&Ring, &TmaPlan), (&Ring, &TmaPlan)),
        (full0, empty0): (Reg, Reg),
        (stages, bk): (u32, u32),
        (j, kt): (Reg, Reg),
        (m0, n0): (Ix, Ix),
    ) {
        let (stage, full) = self.acquire_stage(j, stages, (full0, empty0));
        self.b.push(Stmt::MbarArriveExpectTx {
            addr: full,
            bytes: Operand::U32(plan_a.stage_bytes() + plan_b.stage_bytes()),
        });
        let k0 = self.imul_c(Ix::R(kt), bk as u64);
        for (ring, plan, row0) in [(ring_a, plan_a, m0), (ring_b, plan_b, n0)] {
            let off = self.imul_c(stage, ring.stage_bytes() as u64);
            let dst = self.shared_addr(ring.base, off);
            self.issue_tma(plan, dst, (k0, row0), full);
        }
    }

    /// The consumers' main loop (thread `ctid` of the consumer warpgroups): per K slice,
    /// wait for its stage, its wgmma on the warpgroup's 64 rows, commit, wait for the
    /// slice before and release that one's stage. Returns each thread's accumulators as
    /// its warp's `bn / 8` fragments of `16 × 8` (as [`Gen::wgmma_slices`]).
    fn wgmma_consumer(
        &mut self,
        (ring_a, ring_b, read_b): (&Ring, &Ring, WgmmaB),
        (full0, empty0): (Reg, Reg),
        (stages, slices): (u32, u64),
        ctid: Ix,
        wshape: WgmmaShape,
    ) -> Vec<[Reg; 4]> {
        let (d, fixed, a_rows) = self.wgmma_setup(ring_a, ctid, wshape);

        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let (stage, parity) = self.stage_parity(kt, stages);
        let bar = self.imul_c(stage, 8);
        let full = self.shared_addr(full0, bar);
        self.b.push(Stmt::MbarWait {
            addr: full,
            parity: parity.into(),
        });
        let oa = self.imul_c(stage, ring_a.stage_bytes() as u64);
        let oa = self.iadd(oa, a_rows);
        let ob = self.imul_c(stage, ring_b.stage_bytes() as u64);
        let start_a = self.shared_addr(ring_a.base, oa);
        let start_b = self.shared_addr(ring_b.base, ob);
        self.wgmma_slice(wshape, &d, (start_a, start_b), (fixed, read_b));
        self.b.push(Stmt::WgmmaCommit);
        self.b.push(Stmt::WgmmaWait(1));
        // Slice kt - 1's group is complete: its stage may be refilled.
        let later = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::GtU),
            &[kt.into(), Operand::U32(0)],
        );
        self.open();
        let prev = self.b.op(
            RegType::U32,
            Op::IAdd,
            &[kt.into(), Operand::U32(stages - 1)],
        );
        let prev = self.irem_c(Ix::R(prev), stages as u64);
        let pbar = self.imul_c(prev, 8);
        let empty = self.shared_addr(empty0, pbar);
        self.b.push(Stmt::MbarArrive { addr: empty });
        self.close_if(later);
        self.close_for(
            kt,
            Operand::U32(0),
            Operand::U32(slices as u32),
            Operand::U32(1),
        );
        self.b.push(Stmt::WgmmaWait(0));
        d.chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect()
    }

    /// Slice `kt`'s ring stage (`kt mod stages`) and the parity of its round
    /// (`(kt / stages) mod 2`), as a `U32`.
    /// The producer's side of fill `j` of a `stages`-stage ring: waits until its stage
    /// (`j mod stages`) is released — the EMPTY barrier's phase of the fill `stages` before,
    /// parity `((j / stages) & 1) ^ 1`, at once in the first round — and returns the stage
    /// and the address of its FULL barrier, for the caller to arm.
    pub(super) fn acquire_stage(
        &mut self,
        j: Reg,
        stages: u32,
        (full0, empty0): (Reg, Reg),
    ) -> (Ix, Reg) {
        let (stage, parity) = self.stage_parity(j, stages);
        let free = self
            .b
            .op(RegType::U32, Op::Xor, &[parity.into(), Operand::U32(1)]);
        let bar = self.imul_c(stage, 8);
        let empty = self.shared_addr(empty0, bar);
        self.b.push(Stmt::MbarWait {
            addr: empty,
            parity: free.into(),
        });
        (stage, self.shared_addr(full0, bar))
    }

    pub(super) fn stage_parity(&mut self, kt: Reg, stages: u32) -> (Ix, Reg) {
        let stage = self.irem_c(Ix::R(kt), stages as u64);
        let round = self.idiv_c(Ix::R(kt), stages as u64);
        let round = self.ix_op(round);
        let parity = self.b.op(RegType::U32, Op::And, &[round, Operand::U32(1)]);
        (stage, parity)
    }
}
