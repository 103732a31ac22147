//! The fused attention backward ([`TileConfig::AttentionBwd`]; the groups:
//! `crate::attention_bwd`): FlashAttention-2's backward loops (Dao, 2023, Algorithm 2) on
//! `mma.sync` m16n8k16, without atomics — every output element is formed by one warp in
//! one fixed order.
//!
//! A CTA owns `16 · warps` rows of one batch entry: queries (the dq kernel) or keys (the
//! dkv kernel). Its tiles of the score matmuls' row-side operands (q and dO, or k and v)
//! are copied once into shared memory; the other side is walked in blocks of `block_n`
//! through a two-stage ring of 16-byte `cp.async` copies (zero past the end, chunks
//! swizzled as in `ring/layout.rs`). A block is walked in sub-blocks of 16 columns by one
//! loop body (rolled when `block_n > 16`, so the code does not grow with the block and the
//! bits do not change with it). Per sub-block a warp computes its 16 × 16 scores of each
//! score matmul — one mma per 16 of the head dim, in order from 0, row-side fragments as
//! A: the dkv kernel's `k·qᵀ` is the dq kernel's `q·kᵀ` transposed, bit for bit (tensor
//! cores' products are symmetric in their operands; tests/gpu/mma_symmetry.sh) — then
//! evaluates the program's elementwise cone per score with each matmul's value standing
//! in, rounded to its dtype (the program's `exp` as `exp_f32`: docs/numerics.md, "The
//! fused attention backward"). The dq kernel folds its reductions per row (one sweep over
//! the blocks per level: softmax's maximum, then its sum, then `rowsum(dP ∘ P)`) and in a
//! last sweep multiplies its score-shaped products' operand — rounded to 16 bits and
//! repacked from accumulator to A fragments in registers (PTX ISA §9.7.14.5.8) — by the
//! sub-block's tile read transposed (`ldmatrix.trans`); the dkv kernel reads the reductions
//! and forms its products in one sweep.

use super::attention_parts::{BoundAt, LaneRow};
use super::fragments::{one_operand, FragSrc};
use super::ring::{Operand2d, Ring, StageLayout};
use super::rows::reduce_identity;
use super::{Gen, Ix, LowerError};
use crate::attention_bwd::{product, Product, Side};
use crate::view::{strided, StridedView};
use std::collections::{BTreeSet, HashMap};
use tessel_ir::graph::{GroupOps, Op as GOp, TileConfig};
use tessel_ir::kernel::{ICmp, MmaShape, Op, Operand, RegType, Stmt};
use tessel_ir::{DType, Reg, Shape, Value};

/// Keys (or queries) per sub-block: one loop body computes the scores of 16 columns, their
/// cone and their products' k step; a block of `block_n` runs it `block_n / 16` times.
const SUB_N: u32 = 16;

/// A tile source: rows of `width` contiguous elements of `view`, row `r` at element
/// `batch offset + r · row_stride`.
#[derive(Clone)]
struct TileSrc {
    view: StridedView,
    row_stride: u64,
    width: u32,
}

impl TileSrc {
    fn key(&self) -> (Value, u64, Vec<u64>, u64, u32) {
        let r = self.view.strides.len();
        (
            self.view.base,
            self.view.offset,
            self.view.strides[..r - 2].to_vec(),
            self.row_stride,
            self.width,
        )
    }
}

/// A streamed tile in the CTA's ring: its source, its ring and its batch entry's offset.
struct Streamed {
    src: TileSrc,
    ring: Ring,
    base_off: Ix,
}

/// A score matmul as the kernel forms it: the row-side tile (A) and the streamed tile (B,
/// K-contiguous), both indices into the kernel's lists.
struct ScoreMm {
    value: Value,
    resident: usize,
    streamed: usize,
    d: u32,
}

/// A product as the kernel forms it: its score-shaped operand, the streamed tile it is
/// multiplied by (read transposed), its width and how its result is stored.
struct ProductMm {
    p: Product,
    streamed: usize,
    e: u32,
}

impl Gen<'_> {
    /// The group's kernel; returns the grid.
    pub(super) fn attention_bwd(
        &mut self,
        ops: &GroupOps,
        tile: &TileConfig,
    ) -> Result<[u32; 3], LowerError> {
        let TileConfig::AttentionBwd { warps, block_n } = *tile else {
            unreachable!("called for attention_bwd tiles")
        };
        let g = self.g;
        let (scores, products, reductions, rows_are_keys) = match ops {
            GroupOps::AttentionDq {
                scores,
                products,
                reductions,
            } => (scores.clone(), products.clone(), reductions.clone(), false),
            GroupOps::AttentionDkv { scores, products } => {
                (scores.clone(), products.clone(), vec![], true)
            }
            _ => unreachable!("called for attention backward groups"),
        };
        let unsupported = |what: &str, value: Value| LowerError::Unsupported {
            what: what.into(),
            value,
        };
        let sshape = g.ty(scores[0]).shape.clone();
        let rank = sshape.rank();
        let (m, n) = (sshape.0[rank - 2], sshape.0[rank - 1]);
        let (nrows, ncols) = if rows_are_keys { (n, m) } else { (m, n) };
        let lead_shape = Shape(sshape.0[..rank - 2].to_vec());
        let batch_count = lead_shape.numel().max(1);
        let dt = g.ty(scores[0]).dtype;
        let mma = match dt {
            DType::Bf16 => MmaShape::M16N8K16Bf16,
            DType::F16 => MmaShape::M16N8K16F16,
            _ => {
                return Err(unsupported(
                    "an attention backward on 32-bit scores",
                    scores[0],
                ))
            }
        };
        let bm = 16 * warps;
        let threads = 32 * warps;
        self.exp_single = true;

        // Tile sources: per score matmul a row-side (resident) and a streamed tile; per
        // product a streamed tile. Streamed tiles of one source share a ring.
        let view = |x: Value| {
            strided(g, x).ok_or_else(|| unsupported("an operand that is not a strided view", x))
        };
        let mut resident: Vec<TileSrc> = Vec::new();
        let mut streamed_src: Vec<TileSrc> = Vec::new();
        let add = |list: &mut Vec<TileSrc>, t: TileSrc| -> usize {
            match list.iter().position(|x| x.key() == t.key()) {
                Some(i) => i,
                None => {
                    list.push(t);
                    list.len() - 1
                }
            }
        };
        let mut smms = Vec::new();
        for &s in &scores {
            let GOp::MatMul { lhs, rhs } = g.ops[s] else {
                return Err(unsupported("a score that is not a matmul", s));
            };
            let (lv, rv) = (view(lhs)?, view(rhs)?);
            let d = g.ty(lhs).shape.last() as u32;
            // q-like [.., M, d] rows; k-like [.., d, N]: key j at j · strides[rank - 1].
            let q_rows = TileSrc {
                row_stride: lv.strides[rank - 2],
                view: lv,
                width: d,
            };
            let k_rows = TileSrc {
                row_stride: rv.strides[rank - 1],
                view: rv,
                width: d,
            };
            let (res, st) = if rows_are_keys {
                (k_rows, q_rows)
            } else {
                (q_rows, k_rows)
            };
            smms.push(ScoreMm {
                value: s,
                resident: add(&mut resident, res),
                streamed: add(&mut streamed_src, st),
                d,
            });
        }
        let mut pmms = Vec::new();
        for &pv in &products {
            let p = product(g, pv).ok_or_else(|| unsupported("a product of no known form", pv))?;
            let ov = view(p.other)?;
            let (row_stride, e) = match p.side {
                Side::Rows | Side::ColsLeft => (ov.strides[rank - 2], g.ty(p.other).shape.last()),
                Side::ColsRight => (ov.strides[rank - 1], g.ty(p.other).shape.0[rank - 2]),
            };
            let e = e as u32;
            let t = TileSrc {
                view: ov,
                row_stride,
                width: e,
            };
            pmms.push(ProductMm {
                p,
                streamed: add(&mut streamed_src, t),
                e,
            });
        }

        let tid = self.b.op(
            RegType::U32,
            Op::Special(tessel_ir::kernel::Special::TidX),
            &[],
        );
        // Under a causal mask a dq CTA's keys grow with its query block, a dkv CTA's
        // queries shrink with its key block: the longest first either way.
        let grid = [
            nrows.div_ceil(bm as u64).max(1) as u32,
            batch_count as u32,
            1,
        ];
        let (cx, cy) = self.deal_ctas(grid, !rows_are_keys);
        let warp = self.idiv_c(Ix::R(tid), 32);
        let lane = self.irem_c(Ix::R(tid), 32);
        let row0 = self.imul_c(cx, bm as u64);
        let batch = if lead_shape.0.is_empty() {
            vec![]
        } else {
            self.unflatten(cy, &lead_shape)
        };

        // Shared memory: the resident tiles, then two stages of each streamed tile.
        let esz = 2u32;
        let res_bytes: u32 = resident.iter().map(|t| bm * t.width * esz).sum();
        let st_bytes: u32 = streamed_src
            .iter()
            .map(|t| 2 * block_n * t.width * esz)
            .sum();
        // (8 bytes per warp after the rings: the warps' key bounds, combined.)
        let buf = self
            .b
            .kernel
            .new_shared(res_bytes + st_bytes + 8 * warps, 128);
        let base = self.b.op(RegType::U32, Op::SharedAddr(buf), &[]);
        let mut at = 0u32;
        let mut res_rings = Vec::new();
        for t in &resident {
            let rb = self
                .b
                .op(RegType::U32, Op::IAdd, &[base.into(), Operand::U32(at)]);
            let ring = Ring {
                base: rb,
                layout: StageLayout::rows(bm, t.width, esz),
            };
            at += ring.stage_bytes();
            res_rings.push(ring);
        }
        let mut streamed = Vec::new();
        for t in &streamed_src {
            let rb = self
                .b
                .op(RegType::U32, Op::IAdd, &[base.into(), Operand::U32(at)]);
            let ring = Ring {
                base: rb,
                layout: StageLayout::rows(block_n, t.width, esz),
            };
            at += 2 * ring.stage_bytes();
            let base_off = self.view_offset(&t.view, &batch);
            streamed.push(Streamed {
                src: t.clone(),
                ring,
                base_off,
            });
        }

        // The resident tiles: chunk c of the CTA's rows, zero past the last row.
        for (t, ring) in resident.iter().zip(&res_rings) {
            let chunks = t.width / 8;
            let boff = self.view_offset(&t.view, &batch);
            for i in 0..(bm * chunks).div_ceil(threads) {
                let ei = self.iadd(Ix::R(tid), Ix::C((i * threads) as u64));
                let in_tile = (i + 1) * threads > bm * chunks;
                let rr = self.idiv_c(ei, chunks as u64);
                let cc = self.irem_c(ei, chunks as u64);
                let r = self.iadd(row0, rr);
                let (inside, rc) = self.clamp_below(r, nrows);
                let ro = self.imul_c(rc, t.row_stride);
                let col = self.imul_c(cc, 8);
                let off = self.iadd(boff, ro);
                let off = self.iadd(off, col);
                let so = self.ring_offset(ring, rr, col);
                if in_tile {
                    let eo = self.ix_op(ei);
                    let ok = self.b.op(
                        RegType::Pred,
                        Op::ICmp(ICmp::LtU),
                        &[eo, Operand::U32(bm * chunks)],
                    );
                    self.open();
                    self.cp_async_16(t.view.base, off, (ring.base, so), inside);
                    self.close_if(ok);
                } else {
                    self.cp_async_16(t.view.base, off, (ring.base, so), inside);
                }
            }
        }
        self.b.push(Stmt::CpAsyncCommit);

        // The lane's two rows in the accumulator layout: whether real, the position.
        let gq = self.idiv_c(lane, 4);
        let tq = self.irem_c(lane, 4);
        let t2 = self.imul_c(tq, 2);
        let wrow = self.imul_c(warp, 16);
        let mut lane_rows: Vec<(Reg, Ix)> = Vec::new();
        for half in 0..2u64 {
            let r = self.iadd(row0, wrow);
            let r = self.iadd(r, gq);
            let r = self.iadd(r, Ix::C(8 * half));
            lane_rows.push(self.clamp_below(r, nrows));
        }
        // Masked blocks: with a key bound that skipping leaves exact
        // (`crate::attention_bwd::mask_select`), the dq kernel walks keys up to its rows'
        // largest bound and the dkv kernel skips the query blocks that see none of its keys.
        let xs: Vec<Value> = pmms.iter().map(|p| p.p.x).collect();
        let mask_reds = if rows_are_keys {
            xs.iter()
                .flat_map(|&x| all_reductions(g, x))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        } else {
            reductions.clone()
        };
        let bound = crate::attention_bwd::mask_select(g, &mask_reds, &xs)
            .and_then(|x| crate::attention::key_bound(g, x));
        let bound_fn = bound.as_ref().map(|b| {
            move |gen: &mut Gen<'_>, idx: &[Ix]| -> Result<Operand, LowerError> {
                gen.mask_bound(b, idx)
            }
        });
        let all_blocks = ncols.div_ceil(block_n as u64) as u32;
        // The blocks to walk, and (dq) the 16-column sub-blocks from column 0 holding a key
        // some row of the CTA sees: a block's sub-blocks past them are skipped as well.
        let (blocks, subs): (Operand, Option<Operand>) = match (&bound_fn, rows_are_keys) {
            (Some(f), false) => {
                let rows: Vec<LaneRow> = lane_rows
                    .iter()
                    .map(|&(real, pos)| LaneRow {
                        real,
                        batch: batch.clone(),
                        pos,
                    })
                    .collect();
                let (n_end, _) = self.key_bounds(
                    Some(f as &BoundAt<'_>),
                    &rows,
                    ncols,
                    (warps, warp, lane),
                    (base, res_bytes + st_bytes),
                )?;
                let mut ceil_div = |d: u32| -> Operand {
                    let p = self
                        .b
                        .op(RegType::U32, Op::IAdd, &[n_end, Operand::U32(d - 1)]);
                    self.b
                        .op(RegType::U32, Op::UDiv, &[p.into(), Operand::U32(d)])
                        .into()
                };
                (ceil_div(block_n), Some(ceil_div(SUB_N)))
            }
            _ => (Operand::U32(all_blocks), None),
        };

        // Reductions by level: a level's reductions read only earlier levels'.
        let mut level: HashMap<Value, usize> = HashMap::new();
        for &r in &reductions {
            let GOp::Reduce { arg, .. } = g.ops[r] else {
                return Err(unsupported("a listed reduction that is not one", r));
            };
            let lv = reached_reductions(g, arg, &reductions)
                .iter()
                .map(|x| level.get(x).map(|l| l + 1).unwrap_or(0))
                .max()
                .unwrap_or(0);
            level.insert(r, lv);
        }
        let levels = reductions.iter().map(|r| level[r] + 1).max().unwrap_or(0);
        let mut row_vals: HashMap<Value, [Operand; 2]> = HashMap::new();

        // The resident fragments are loaded from shared memory per block (registers go to
        // the accumulators); their plans once.
        self.b.push(Stmt::CpAsyncWaitAll);
        self.b.push(Stmt::Barrier);
        let res_plans: Vec<Vec<Vec<FragSrc>>> = resident
            .iter()
            .zip(&res_rings)
            .map(|(t, ring)| {
                let op = Operand2d {
                    base: t.view.base,
                    cols: t.width as u64,
                    k_contiguous: true,
                    view: None,
                };
                one_operand(self, mma, (ring, &op), false, wrow, lane, 1, t.width)
            })
            .collect();

        // The streamed operands' fragment plans, once: a score matmul's B fragments for 16
        // keys (K-contiguous), a product's B fragments for a k step of 16 keys (read
        // transposed); offsets from the stage's first row.
        let mut score_plans: HashMap<Value, Vec<Vec<FragSrc>>> = HashMap::new();
        for s in &smms {
            let st = &streamed[s.streamed];
            let op = Operand2d {
                base: st.src.view.base,
                cols: s.d as u64,
                k_contiguous: true,
                view: None,
            };
            let plan = one_operand(self, mma, (&st.ring, &op), true, Ix::C(0), lane, 1, s.d);
            score_plans.insert(s.value, plan);
        }
        let product_plans: Vec<Vec<Vec<FragSrc>>> = pmms
            .iter()
            .map(|pm| {
                let st = &streamed[pm.streamed];
                let op = Operand2d {
                    base: st.src.view.base,
                    cols: pm.e as u64,
                    k_contiguous: false,
                    view: None,
                };
                one_operand(
                    self,
                    mma,
                    (&st.ring, &op),
                    true,
                    Ix::C(0),
                    lane,
                    pm.e / 16,
                    SUB_N,
                )
            })
            .collect();

        let sweeps: Vec<Option<usize>> = (0..levels)
            .map(Some)
            .chain((!pmms.is_empty()).then_some(None))
            .collect();
        let mut p_acc: Vec<Vec<[Reg; 4]>> = Vec::new();
        for sweep in sweeps {
            // What this sweep evaluates: a level's reductions, or the products.
            let reds: Vec<Value> = match sweep {
                Some(l) => reductions
                    .iter()
                    .copied()
                    .filter(|r| level[r] == l)
                    .collect(),
                None => vec![],
            };
            let evals: Vec<Value> = match sweep {
                Some(_) => reds
                    .iter()
                    .map(|&r| match g.ops[r] {
                        GOp::Reduce { arg, .. } => arg,
                        _ => unreachable!("checked above"),
                    })
                    .collect(),
                None => pmms.iter().map(|p| p.p.x).collect(),
            };
            let need: BTreeSet<Value> = evals
                .iter()
                .flat_map(|&x| reached_scores(g, x, &reductions, rows_are_keys))
                .collect();
            let used: Vec<&ScoreMm> = smms.iter().filter(|s| need.contains(&s.value)).collect();
            let mut tiles: Vec<usize> = used.iter().map(|s| s.streamed).collect();
            if sweep.is_none() {
                tiles.extend(pmms.iter().map(|p| p.streamed));
            }
            tiles.sort();
            tiles.dedup();

            // Accumulators of this sweep.
            let f32reg = |gen: &mut Self, x: f32| {
                let r = gen.b.kernel.new_reg(RegType::F32);
                gen.b.assign(r, Op::Mov, &[Operand::f32(x)]);
                r
            };
            let mut red_acc: Vec<(Value, [Reg; 2])> = Vec::new();
            for &r in &reds {
                let GOp::Reduce { op: rop, .. } = g.ops[r] else {
                    unreachable!("checked above")
                };
                let id = reduce_identity(rop, RegType::F32)
                    .ok_or_else(|| unsupported("a reduction of no identity", r))?;
                let a0 = self.b.kernel.new_reg(RegType::F32);
                let a1 = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(a0, Op::Mov, &[id]);
                self.b.assign(a1, Op::Mov, &[id]);
                red_acc.push((r, [a0, a1]));
            }
            if sweep.is_none() {
                p_acc = pmms
                    .iter()
                    .map(|p| {
                        (0..p.e / 8)
                            .map(|_| std::array::from_fn(|_| f32reg(self, 0.0)))
                            .collect()
                    })
                    .collect();
            }

            // The ring: stage 0 filled before the loop, block jb + 1 copied during jb.
            let issue = |gen: &mut Self, stage: Ix, j0: Ix| {
                for &ti in &tiles {
                    let s = &streamed[ti];
                    gen.copy_rows(s, (stage, j0), ncols, (block_n, threads, tid));
                }
            };
            issue(self, Ix::C(0), Ix::C(0));
            self.b.push(Stmt::CpAsyncCommit);
            let rd = self.b.kernel.new_reg(RegType::U32);
            self.b.assign(rd, Op::Mov, &[Operand::U32(0)]);
            let jb = self.b.kernel.new_reg(RegType::U32);
            self.open();
            // The stage read now has landed (and the one written next is free) after
            // this barrier.
            self.b.push(Stmt::CpAsyncWaitAll);
            self.b.push(Stmt::Barrier);
            let next = self.iadd(Ix::R(jb), Ix::C(1));
            let no = self.ix_op(next);
            let ok = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[no, blocks]);
            let wr = self
                .b
                .op(RegType::U32, Op::Xor, &[rd.into(), Operand::U32(1)]);
            self.open();
            let j_next = self.imul_c(next, block_n as u64);
            issue(self, Ix::R(wr), j_next);
            self.close_if(ok);
            self.b.push(Stmt::CpAsyncCommit);
            let j0 = self.imul_c(Ix::R(jb), block_n as u64);
            // dkv: whether any query of the block sees a key of the CTA (bound > first
            // key); every warp finds the same, so the branch is uniform.
            let needed = match (&bound_fn, rows_are_keys) {
                (Some(f), true) => {
                    let mut mx: Operand = Operand::U32(0);
                    for i in 0..block_n.div_ceil(32) {
                        let q = self.iadd(j0, lane);
                        let q = self.iadd(q, Ix::C(32 * i as u64));
                        let (inside, qc) = self.clamp_below(q, ncols);
                        let mut idx = batch.clone();
                        idx.extend([qc, Ix::C(0)]);
                        let bq = f(self, &idx)?;
                        let r0 = self.ix_op(row0);
                        let sees = self.b.op(RegType::Pred, Op::ICmp(ICmp::GtS), &[bq, r0]);
                        let sees = self.b.op(
                            RegType::U32,
                            Op::Select,
                            &[sees.into(), Operand::U32(1), Operand::U32(0)],
                        );
                        let sees = self.b.op(
                            RegType::U32,
                            Op::Select,
                            &[inside.into(), sees.into(), Operand::U32(0)],
                        );
                        mx = self.umax(mx, sees.into());
                    }
                    for x in [16, 8, 4, 2, 1] {
                        let o = self
                            .b
                            .op(RegType::U32, Op::ShflBfly, &[mx, Operand::U32(x)]);
                        mx = self.umax(mx, o.into());
                    }
                    let p = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::Ne), &[mx, Operand::U32(0)]);
                    self.open();
                    Some(p)
                }
                _ => None,
            };

            // The block in sub-blocks of 16 keys, one loop body for all of them (rolled
            // when the block holds several): a sub-block's rows lie 16 row lengths further
            // into each streamed stage, with the same swizzle (its period is 8 rows), so the
            // fragment plans made once above serve every sub-block. The per-lane folds and
            // the products' k steps run in column order either way: the same bits as one
            // unrolled body.
            let nsub = block_n / SUB_N;
            // (dq) up to the last sub-block holding a visible key: `subs` is past this
            // block's first sub-block, as `jb` is below `blocks`.
            let sub_end = match subs {
                Some(total) if nsub > 1 => {
                    let first = self.imul_c(Ix::R(jb), nsub as u64);
                    let first = self.ix_op(first);
                    let left = self.b.op(RegType::U32, Op::ISub, &[total, first]);
                    self.umin(left.into(), Operand::U32(nsub))
                }
                _ => Operand::U32(nsub),
            };
            let sb = (nsub > 1).then(|| {
                let r = self.b.kernel.new_reg(RegType::U32);
                self.open();
                r
            });
            let j0 = match sb {
                Some(r) => {
                    let o = self.imul_c(Ix::R(r), SUB_N as u64);
                    self.iadd(j0, o)
                }
                None => j0,
            };
            let stage_of = |gen: &mut Self, st: &Streamed| -> Reg {
                let rs = gen.imul_c(Ix::R(rd), st.ring.stage_bytes() as u64);
                let rs = match sb {
                    Some(r) => {
                        let o = gen.imul_c(Ix::R(r), (SUB_N * st.ring.layout.row_pitch()) as u64);
                        gen.iadd(rs, o)
                    }
                    None => rs,
                };
                gen.shared_addr(st.ring.base, rs)
            };

            // The sub-block's scores, per used score matmul.
            let ni = (SUB_N / 8) as usize;
            let mut sacc: HashMap<Value, Vec<[Reg; 4]>> = HashMap::new();
            for s in &used {
                let acc: Vec<[Reg; 4]> = (0..ni)
                    .map(|_| std::array::from_fn(|_| f32reg(self, 0.0)))
                    .collect();
                let stage = stage_of(self, &streamed[s.streamed]);
                let plan = &score_plans[&s.value];
                let ring = &res_rings[s.resident];
                let mut addrs_a = HashMap::new();
                let mut addrs_b = HashMap::new();
                for (ks, step) in plan.iter().enumerate() {
                    let a = self.load_frag(
                        mma,
                        (ring.base, &mut addrs_a),
                        &res_plans[s.resident][ks][0],
                        false,
                    );
                    for (p, src) in step.iter().enumerate() {
                        let regs = self.load_frag(mma, (stage, &mut addrs_b), src, false);
                        for (h, b) in [&regs[..2], &regs[2..]].into_iter().enumerate() {
                            let c = acc[2 * p + h];
                            self.b.push(Stmt::Mma {
                                shape: mma,
                                d: c,
                                a: a.clone(),
                                b: b.to_vec(),
                                c,
                            });
                        }
                    }
                }
                sacc.insert(s.value, acc);
            }

            // Per score: the cone, with the matmuls' values and the row values standing in.
            let mut pvals: Vec<Vec<[Operand; 4]>> =
                vec![vec![[Operand::f32(0.0); 4]; ni]; pmms.len()];
            for f in 0..ni {
                for q in 0..4 {
                    let (dr, dc) = MmaShape::cd_pos(0, q);
                    let h = dr / 8;
                    let (_, rpos) = lane_rows[h];
                    let col = self.iadd(j0, t2);
                    let col = self.iadd(col, Ix::C((8 * f + dc) as u64));
                    let (inside, cc) = self.clamp_below(col, ncols);
                    let mut idx = batch.clone();
                    if rows_are_keys {
                        idx.extend([cc, rpos]);
                    } else {
                        idx.extend([rpos, cc]);
                    }
                    for s in &used {
                        let x = self.round(sacc[&s.value][f][q].into(), g.ty(s.value).dtype);
                        self.lane_value.insert(s.value, vec![x]);
                    }
                    for (r, v) in &row_vals {
                        self.row_value.insert(*r, v[h]);
                    }
                    for (k, &x) in evals.iter().enumerate() {
                        let v = self.value(x, &idx, 1)?[0];
                        match sweep {
                            Some(_) => {
                                let (r, acc) = red_acc[k];
                                let GOp::Reduce { op: rop, .. } = g.ops[r] else {
                                    unreachable!("checked above")
                                };
                                let id = reduce_identity(rop, RegType::F32).expect("checked");
                                let v =
                                    self.b.op(RegType::F32, Op::Select, &[inside.into(), v, id]);
                                self.combine(rop, RegType::F32, acc[h], v.into());
                            }
                            None => {
                                let v = self.b.op(
                                    RegType::F32,
                                    Op::Select,
                                    &[inside.into(), v, Operand::f32(0.0)],
                                );
                                pvals[k][f][q] = v.into();
                            }
                        }
                    }
                    for s in &used {
                        self.lane_value.remove(&s.value);
                    }
                    for r in row_vals.keys() {
                        self.row_value.remove(r);
                    }
                }
            }

            // The products: the block's values repacked as A fragments (16 columns each)
            // times the streamed tile read transposed.
            if sweep.is_none() {
                for (k, pm) in pmms.iter().enumerate() {
                    let pdt = g.ty(pm.p.x).dtype;
                    let pack_op = if pdt == DType::Bf16 {
                        Op::PackBf16x2
                    } else {
                        Op::PackF16x2
                    };
                    let stage = stage_of(self, &streamed[pm.streamed]);
                    let plan = &product_plans[k];
                    let mut addrs = HashMap::new();
                    for (ks, step) in plan.iter().enumerate() {
                        let pr = &pvals[k];
                        let pa: Vec<Reg> =
                            [(2 * ks, 0), (2 * ks, 2), (2 * ks + 1, 0), (2 * ks + 1, 2)]
                                .into_iter()
                                .map(|(f, q)| {
                                    self.b.op(RegType::U32, pack_op, &[pr[f][q + 1], pr[f][q]])
                                })
                                .collect();
                        for (p, src) in step.iter().enumerate() {
                            let regs = self.load_frag(mma, (stage, &mut addrs), src, true);
                            for (h, b) in [&regs[..2], &regs[2..]].into_iter().enumerate() {
                                let c = p_acc[k][2 * p + h];
                                self.b.push(Stmt::Mma {
                                    shape: mma,
                                    d: c,
                                    a: pa.clone(),
                                    b: b.to_vec(),
                                    c,
                                });
                            }
                        }
                    }
                }
            }
            if let Some(r) = sb {
                self.close_for(r, Operand::U32(0), sub_end, Operand::U32(1));
            }
            if let Some(p) = needed {
                self.close_if(p);
            }
            // The next iteration's barrier comes before its copies refill stage `rd`.
            self.b.assign(rd, Op::Xor, &[rd.into(), Operand::U32(1)]);
            self.close_for(jb, Operand::U32(0), blocks, Operand::U32(1));
            self.b.push(Stmt::CpAsyncWaitAll);
            // Every warp is done with the last block's stage before the next sweep's first
            // copies refill stage 0.
            self.b.push(Stmt::Barrier);

            // The sweep's reductions: the row's 4 lanes combined by butterfly.
            for (r, acc) in red_acc {
                let GOp::Reduce { op: rop, .. } = g.ops[r] else {
                    unreachable!("checked above")
                };
                let mut vals = [Operand::f32(0.0); 2];
                for (h, a) in acc.into_iter().enumerate() {
                    for x in [1, 2] {
                        let o = self
                            .b
                            .op(RegType::F32, Op::ShflBfly, &[a.into(), Operand::U32(x)]);
                        self.combine(rop, RegType::F32, a, o.into());
                    }
                    vals[h] = a.into();
                }
                row_vals.insert(r, vals);
            }
        }

        // Stores: the reductions by one lane of each row's four, the products' elements.
        for (h, &(real, rpos)) in lane_rows.iter().enumerate() {
            self.open();
            if !row_vals.is_empty() {
                let t0 = self.ix_op(tq);
                let lead = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[t0, Operand::U32(0)]);
                self.open();
                for &r in &reductions {
                    let mut idx = batch.clone();
                    idx.extend([rpos, Ix::C(0)]);
                    let v = row_vals[&r][h];
                    self.store(r, &idx, &[v])?;
                }
                self.close_if(lead);
            }
            for (k, pm) in pmms.iter().enumerate() {
                let odt = g.ty(pm.p.matmul).dtype;
                for (f, acc) in p_acc[k].iter().enumerate() {
                    let vals: Vec<Operand> = [2 * h, 2 * h + 1]
                        .into_iter()
                        .map(|q| self.round(acc[q].into(), odt))
                        .collect();
                    let col = self.iadd(t2, Ix::C(8 * f as u64));
                    match pm.p.side {
                        Side::Rows | Side::ColsLeft => {
                            let mut idx = batch.clone();
                            idx.extend([rpos, col]);
                            self.store(pm.p.matmul, &idx, &vals)?;
                        }
                        Side::ColsRight => {
                            for (j, v) in vals.into_iter().enumerate() {
                                let c = self.iadd(col, Ix::C(j as u64));
                                let mut idx = batch.clone();
                                idx.extend([c, rpos]);
                                self.store(pm.p.matmul, &idx, &[v])?;
                            }
                        }
                    }
                }
            }
            self.close_if(real);
        }
        Ok(grid)
    }

    /// The key bound of logits row `idx` (`[.., row, 0]` in the logits' shape) from the
    /// mask's comparison ([`crate::attention::key_bound`]): `c + Σ coef · w`, each term `w`
    /// read at key 0 of the comparison's shape, the index taken down the condition's views.
    fn mask_bound(
        &mut self,
        b: &crate::attention::Bound,
        idx: &[Ix],
    ) -> Result<Operand, LowerError> {
        let g = self.g;
        let mut ix = idx.to_vec();
        for &w in &b.chain {
            let arg = g.ops[w].args()[0];
            let (sr, sa) = (g.ty(w).shape.clone(), g.ty(arg).shape.clone());
            ix = match &g.ops[w] {
                GOp::Broadcast { .. } => ix
                    .iter()
                    .zip(&sa.0)
                    .map(|(&i, &d)| if d == 1 { Ix::C(0) } else { i })
                    .collect(),
                GOp::Permute { perm, .. } => {
                    let mut a = vec![Ix::C(0); ix.len()];
                    for (i, &p) in perm.iter().enumerate() {
                        a[p as usize] = ix[i];
                    }
                    a
                }
                GOp::Reshape { .. } => {
                    let numel = sr.numel();
                    if numel >= u32::MAX as u64 {
                        return Err(LowerError::TooLarge { value: w, numel });
                    }
                    let flat = self.flatten(&ix, &sr);
                    self.unflatten(flat, &sa)
                }
                _ => return Err(LowerError::Unsupported {
                    what:
                        "a mask condition under a view other than a broadcast, permute or reshape"
                            .into(),
                    value: w,
                }),
            };
        }
        let mut acc = Operand::U32(b.c as i32 as u32);
        for &(w, coef) in &b.terms {
            let v = self.value(w, &ix, 1)?[0];
            let t = if coef == 1 {
                v
            } else {
                self.b
                    .op(
                        RegType::U32,
                        Op::IMulLo,
                        &[v, Operand::U32(coef as i32 as u32)],
                    )
                    .into()
            };
            acc = self.b.op(RegType::U32, Op::IAdd, &[acc, t]).into();
        }
        Ok(acc)
    }

    /// Copies rows `j0 .. j0 + block_n` of a streamed tile into ring stage `stage`, zero
    /// past row `limit`.
    fn copy_rows(
        &mut self,
        s: &Streamed,
        (stage, j0): (Ix, Ix),
        limit: u64,
        (block_n, threads, tid): (u32, u32, Reg),
    ) {
        let chunks = s.src.width / 8;
        let total = block_n * chunks;
        let st = self.imul_c(stage, s.ring.stage_bytes() as u64);
        for i in 0..total.div_ceil(threads) {
            let ei = self.iadd(Ix::R(tid), Ix::C((i * threads) as u64));
            let in_tile = (i + 1) * threads > total;
            let rr = self.idiv_c(ei, chunks as u64);
            let cc = self.irem_c(ei, chunks as u64);
            let row = self.iadd(j0, rr);
            let (inside, rc) = self.clamp_below(row, limit);
            let ro = self.imul_c(rc, s.src.row_stride);
            let col = self.imul_c(cc, 8);
            let off = self.iadd(s.base_off, ro);
            let off = self.iadd(off, col);
            let so = self.ring_offset(&s.ring, rr, col);
            let so = self.iadd(st, so);
            if in_tile {
                let eo = self.ix_op(ei);
                let ok = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[eo, Operand::U32(total)],
                );
                self.open();
                self.cp_async_16(s.src.view.base, off, (s.ring.base, so), inside);
                self.close_if(ok);
            } else {
                self.cp_async_16(s.src.view.base, off, (s.ring.base, so), inside);
            }
        }
    }
}

/// Every reduction `x`'s cone reaches (not looking inside them or matmuls).
fn all_reductions(g: &tessel_ir::graph::Graph, x: Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = vec![x];
    let mut seen = BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        match g.ops[v] {
            GOp::Reduce { .. } => out.push(v),
            GOp::MatMul { .. } => {}
            _ => stack.extend(g.ops[v].args()),
        }
    }
    out
}

/// The listed reductions `x`'s cone reaches (not looking inside them).
fn reached_reductions(g: &tessel_ir::graph::Graph, x: Value, reductions: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = vec![x];
    let mut seen = BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if reductions.contains(&v) {
            out.push(v);
            continue;
        }
        if matches!(g.ops[v], GOp::MatMul { .. }) {
            continue;
        }
        stack.extend(g.ops[v].args());
    }
    out
}

/// The matmuls `x`'s cone reaches, not looking inside reductions (row values by then) —
/// in the dkv kernel all reductions are read.
fn reached_scores(
    g: &tessel_ir::graph::Graph,
    x: Value,
    reductions: &[Value],
    all_read: bool,
) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = vec![x];
    let mut seen = BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        match g.ops[v] {
            GOp::MatMul { .. } => {
                out.push(v);
                continue;
            }
            GOp::Reduce { .. } if all_read || reductions.contains(&v) => continue,
            _ => {}
        }
        stack.extend(g.ops[v].args());
    }
    out
}
