//! The pieces of the fused attention kernel (`attention.rs`) that are not its main loop:
//! the copies of Q, K and V tiles into shared memory, index and bound helpers, and
//! flash-decoding's second kernel, which merges the key ranges.

use super::ring::{Ring, StageLayout};
use super::{Gen, Ix, LowerError};
use crate::analysis::attention_shape;
use crate::view::StridedView;
use tessel_ir::kernel::{FCmp, ICmp, MathFn, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{DType, Reg, Shape, Value};

/// A row's key bound (i32) at its index `[.., row, 0]` in the logits' shape: keys at or
/// past it are masked.
pub(super) type BoundAt<'b> = dyn Fn(&mut Gen<'_>, &[Ix]) -> Result<Operand, LowerError> + 'b;

/// The two rows a lane holds in every accumulator fragment (rows g and g + 8 of its
/// warp's 16): whether each is a real row, its batch index and its query position
/// (clamped into range for rows past the end, whose results are never stored).
pub(super) struct LaneRow {
    pub(super) real: Reg,
    pub(super) batch: Vec<Ix>,
    pub(super) pos: Ix,
}

/// A thread's first chunk of a K or V tile ([`KvCopy::origins`]): its row in the tile,
/// its element offset in the tensor at key 0 (the batch entry's offset plus its column)
/// and its swizzled byte offset in stage 0.
#[derive(Copy, Clone)]
pub(super) struct ChunkOrigin {
    pub(super) row: Ix,
    pub(super) global: Ix,
    pub(super) shared: Ix,
}

/// One 16-byte chunk of the CTA's Q tile a thread fills: elements `row + col .. + 8` of
/// q's tensor (`row` the element offset of the query row, a multiple of the head dim),
/// at `shared` in the tile; `inside` is false for rows past the end.
pub(super) struct QChunk {
    pub(super) row: Ix,
    pub(super) col: Ix,
    pub(super) shared: Ix,
    pub(super) inside: Reg,
    /// Known when lowering: every thread's row in this chunk is past the last real row
    /// (one row block, decode's few rows), so the prologue stores zeros instead of
    /// computing q there.
    pub(super) padding: bool,
}

impl Gen<'_> {
    /// The prologue that computes q's tensor `qb` (not in memory: `fuse` rule 7) into the
    /// CTA's Q tile at `sbase`. The chunks of one row sit on `d / 8` consecutive lanes
    /// (`d` the head dim), so each reduction of the row (`reductions`, over `qb`'s rows)
    /// is the lane's 8 values folded left to right from the identity, then a butterfly
    /// over those lanes — a row-reduction kernel's order at `d / 8` threads per row,
    /// vector 8 (`schedule::prologue_order`). Every lane of the CTA runs every chunk
    /// (rows past the end compute a real row's values, never stored), so the shuffles
    /// see full warps — but a chunk of padding rows alone ([`QChunk::padding`], the same
    /// for every lane), which is stored as zeros.
    pub(super) fn q_prologue(
        &mut self,
        qb: Value,
        chunks: &[QChunk],
        reductions: &[Value],
        sbase: Reg,
    ) -> Result<(), LowerError> {
        let shape = self.g.ty(qb).shape.clone();
        let d = shape.last();
        let tpr = (d / 8) as u32;
        let lead_shape = Shape(shape.0[..shape.rank() - 1].to_vec());
        for c in chunks {
            if c.padding {
                let addr = self.shared_addr(sbase, c.shared);
                self.b.push(Stmt::Store {
                    space: Space::Shared,
                    width: Width::V4,
                    addr,
                    offset: 0,
                    values: vec![Operand::U32(0); 4],
                });
                continue;
            }
            self.memo.push(Default::default());
            let row = self.idiv_c(c.row, d);
            let mut idx = self.unflatten(row, &lead_shape);
            idx.push(c.col);
            self.chunk_reductions(reductions, &idx, tpr)?;
            let vals = self.value(qb, &idx, 8)?;
            for r in reductions {
                self.row_value.remove(r);
            }
            self.memo.pop();
            let pack = match self.g.ty(qb).dtype {
                DType::Bf16 => Op::PackBf16x2,
                DType::F16 => Op::PackF16x2,
                dt => {
                    return Err(LowerError::Unsupported {
                        what: format!("q of {dt} computed in the attention's prologue"),
                        value: qb,
                    })
                }
            };
            let words: Vec<Operand> = vals
                .chunks(2)
                .map(|p| self.b.op(RegType::U32, pack, &[p[1], p[0]]).into())
                .collect();
            let addr = self.shared_addr(sbase, c.shared);
            self.b.push(Stmt::Store {
                space: Space::Shared,
                width: Width::V4,
                addr,
                offset: 0,
                values: words,
            });
        }
        Ok(())
    }

    /// [`KvCopy::origins`] for K and V: a thread's first chunk, when the threads' passes over
    /// a tile cover whole rows in multiples of the swizzle's period ([`StageLayout::PERIOD`]
    /// rows, so a later pass's shared offset is the first's plus whole row pitches).
    pub(super) fn kv_origins(&mut self, c: &KvCopy<'_>) -> [Option<ChunkOrigin>; 2] {
        [c.k, c.v].map(|(_, base_off, _, ring, width)| {
            let chunks = width / 8;
            let regular = c.threads % chunks == 0
                && (c.threads / chunks) % StageLayout::PERIOD == 0
                && (c.block_n * chunks) % c.threads == 0;
            regular.then(|| {
                let row = self.idiv_c(Ix::R(c.tid), chunks as u64);
                let cc = self.irem_c(Ix::R(c.tid), chunks as u64);
                let col = self.imul_c(cc, 8);
                let global = self.iadd(base_off, col);
                let shared = self.ring_offset(&ring, row, col);
                ChunkOrigin {
                    row,
                    global,
                    shared,
                }
            })
        })
    }

    /// The CTA's row block and grid row `(x, y)` of the `[nx, ny, 1]` grid it is launched
    /// on, dealt heaviest first.
    /// The GPU starts CTAs in the order of `l = ctaid.y · nx + ctaid.x`; CTA `l` takes
    /// grid row `l mod ny` and row block `l / ny`, counted from the last when `reverse` (a
    /// query block's work grows with its index under a causal mask) and from the first
    /// otherwise (a key block's shrinks). So every grid row's longest row block starts
    /// before any shorter one, and the short CTAs fill the last wave's gaps: longest
    /// processing time first (Graham, "Bounds on multiprocessing timing anomalies", 1969;
    /// FlashAttention-2 walks its causal row blocks in reverse for the same reason). Each
    /// CTA computes what it did with the grid's own indices, so no bit changes.
    pub(super) fn deal_ctas(&mut self, grid: [u32; 3], reverse: bool) -> (Ix, Ix) {
        let (nx, ny) = (grid[0] as u64, grid[1] as u64);
        let cx = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let cy = self.b.op(RegType::U32, Op::Special(Special::CtaidY), &[]);
        let l = self.imul_c(Ix::R(cy), nx);
        let l = self.iadd(l, Ix::R(cx));
        let rb = self.idiv_c(l, ny);
        let y = self.irem_c(l, ny);
        if !reverse {
            return (rb, y);
        }
        let x = self.b.op(
            RegType::U32,
            Op::ISub,
            &[Operand::U32((nx - 1) as u32), self.ix_op(rb)],
        );
        (Ix::R(x), y)
    }

    /// The CTA's key range from the attention's bound (i32 per row, evaluated at key 0 for
    /// each of the lane's two rows, clamped to [0, N]): the largest over its real rows
    /// (padding rows count 0), and the smallest (padding rows count N), combined over the
    /// warp by shuffles and over the CTA's warps through 8 bytes per warp of shared memory
    /// at `base + at`. Without a bound: (N, none).
    pub(super) fn key_bounds(
        &mut self,
        bound: Option<&BoundAt<'_>>,
        lane_rows: &[LaneRow],
        n: u64,
        (warps, warp, lane): (u32, Ix, Ix),
        (base, shared): (Reg, u32),
    ) -> Result<(Operand, Option<Operand>), LowerError> {
        // How many keys the CTA reads: the largest bound of its rows, clamped to [0, N];
        // and the smallest, below which every row sees every key (the blocks there skip
        // the mask).
        Ok(match bound {
            None => (Operand::U32(n as u32), None),
            Some(bound_at) => {
                let (mut mx, mut mn) = (Operand::U32(0), Operand::U32(n as u32));
                for row in lane_rows {
                    let mut idx = row.batch.clone();
                    idx.extend([row.pos, Ix::C(0)]);
                    let l = bound_at(self, &idx)?;
                    let neg = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[l, Operand::U32(0)]);
                    let l = self
                        .b
                        .op(RegType::U32, Op::Select, &[neg.into(), Operand::U32(0), l]);
                    let big = self.b.op(
                        RegType::Pred,
                        Op::ICmp(ICmp::GtU),
                        &[l.into(), Operand::U32(n as u32)],
                    );
                    let l = self.b.op(
                        RegType::U32,
                        Op::Select,
                        &[big.into(), Operand::U32(n as u32), l.into()],
                    );
                    // A padding row reads nothing and bounds nothing from below.
                    let hi = self.b.op(
                        RegType::U32,
                        Op::Select,
                        &[row.real.into(), l.into(), Operand::U32(0)],
                    );
                    let lo = self.b.op(
                        RegType::U32,
                        Op::Select,
                        &[row.real.into(), l.into(), Operand::U32(n as u32)],
                    );
                    mx = self.umax(mx, hi.into());
                    mn = self.umin(mn, lo.into());
                }
                for x in [16, 8, 4, 2, 1] {
                    let o = self
                        .b
                        .op(RegType::U32, Op::ShflBfly, &[mx, Operand::U32(x)]);
                    mx = self.umax(mx, o.into());
                    let o = self
                        .b
                        .op(RegType::U32, Op::ShflBfly, &[mn, Operand::U32(x)]);
                    mn = self.umin(mn, o.into());
                }
                if warps == 1 {
                    (mx, Some(mn))
                } else {
                    let sb =
                        self.b
                            .op(RegType::U32, Op::IAdd, &[base.into(), Operand::U32(shared)]);
                    let w8 = self.imul_c(warp, 8);
                    let wa = self.shared_addr(sb, w8);
                    let lo = self.ix_op(lane);
                    let first =
                        self.b
                            .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[lo, Operand::U32(0)]);
                    self.open();
                    self.b.push(Stmt::Store {
                        space: Space::Shared,
                        width: Width::V2,
                        addr: wa,
                        offset: 0,
                        values: vec![mx, mn],
                    });
                    self.close_if(first);
                    self.b.push(Stmt::Barrier);
                    let (mut all_hi, mut all_lo) = (Operand::U32(0), Operand::U32(n as u32));
                    for w in 0..warps {
                        let x = self.b.kernel.new_reg(RegType::U32);
                        let y = self.b.kernel.new_reg(RegType::U32);
                        self.b.push(Stmt::Load {
                            dsts: vec![x, y],
                            space: Space::Shared,
                            width: Width::V2,
                            addr: sb,
                            offset: 8 * w as i32,
                        });
                        all_hi = self.umax(all_hi, x.into());
                        all_lo = self.umin(all_lo, y.into());
                    }
                    (all_hi, Some(all_lo))
                }
            }
        })
    }
    /// `exp(x)` for `x` at most 0 in single f32 values (`MathFn::ExpF32Nonpos`, within 1
    /// ulp): the online softmax's exps are summed in f32 and rounded to v's dtype before
    /// use, where the last bits of [`tessel_math::exp`]'s near-correct rounding cost 35 more
    /// operations. Every caller passes `x - m` or `m_old - m` with `m` a maximum over `x`
    /// or `m_old` (0 in place of `m = -inf`, where every `x` is `-inf`): at most 0, or NaN.
    pub(super) fn exp_nonpos(&mut self, x: Operand) -> Operand {
        self.b
            .op(RegType::F32, Op::Math(MathFn::ExpF32Nonpos), &[x])
            .into()
    }

    /// The address of f32 element `ix` of the buffer at `ptr`.
    pub(super) fn f32_addr(&mut self, ptr: Reg, ix: Ix) -> Reg {
        let io = self.ix_op(ix);
        let bytes = self
            .b
            .op(RegType::U64, Op::MulWideU32, &[io, Operand::U32(4)]);
        self.b
            .op(RegType::U64, Op::AddU64, &[ptr.into(), bytes.into()])
    }

    /// Flash-decoding's second kernel: one thread per output element (batch entry, packed
    /// row, column of v) merges the `ranges` key ranges of the scratch buffer in range
    /// order and stores the attention's value. Returns (threads per CTA, CTAs).
    pub(super) fn attention_merge(
        &mut self,
        out: Value,
        (s, a): (Value, Value),
        ranges: u32,
    ) -> Result<(u32, u32), LowerError> {
        let g = self.g;
        let sh = attention_shape(g, s, a);
        let rank = sh.batch.len() + 2;
        let pack = sh.pack;
        let rows_total = sh.m * pack;
        let outer_dims: Vec<usize> = (0..rank - 2)
            .filter(|k| !sh.pack_dims.contains(k))
            .collect();
        let outer_shape = Shape(outer_dims.iter().map(|&k| sh.batch[k]).collect());
        let pack_shape = Shape(sh.pack_dims.iter().map(|&k| sh.batch[k]).collect());
        let outer_count = outer_shape.numel().max(1);
        let total = outer_count * rows_total * sh.e;
        let threads = 256u32;
        let ptr = self.scratch.as_ref().expect("the merge reads scratch").ptr;
        let dt = g.ty(out).dtype;
        let t = self.global_thread(threads);
        let inside = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[t.into(), Self::imm_u(total)],
        );
        self.open();
        let col = self.irem_c(Ix::R(t), sh.e);
        let rest = self.idiv_c(Ix::R(t), sh.e);
        let r = self.irem_c(rest, rows_total);
        let outer = self.idiv_c(rest, rows_total);
        let width = sh.e + 2;
        // Element `what` (a column, or e / e + 1 for the maximum / sum) of range `k`.
        let at = |gen: &mut Self, k: u64, what: Ix| -> Reg {
            let slot = gen.iadd(Ix::C(k * outer_count), outer);
            let slot = gen.imul_c(slot, rows_total);
            let slot = gen.iadd(slot, r);
            let slot = gen.imul_c(slot, width);
            let ix = gen.iadd(slot, what);
            gen.f32_addr(ptr, ix)
        };
        let load = |gen: &mut Self, addr: Reg| -> Operand {
            let d = gen.b.kernel.new_reg(RegType::F32);
            gen.b.push(Stmt::Load {
                dsts: vec![d],
                space: Space::Global,
                width: Width::B32,
                addr,
                offset: 0,
            });
            d.into()
        };
        let mut maxima = Vec::new();
        let mut m = Operand::f32(f32::NEG_INFINITY);
        for k in 0..ranges as u64 {
            let addr = at(self, k, Ix::C(sh.e));
            let mk = load(self, addr);
            maxima.push(mk);
            m = self.b.op(RegType::F32, Op::FMax, &[m, mk]).into();
        }
        let none = self.b.op(
            RegType::Pred,
            Op::FCmp(FCmp::Eq),
            &[m, Operand::f32(f32::NEG_INFINITY)],
        );
        let m_use = self.b.op(
            RegType::F32,
            Op::Select,
            &[none.into(), Operand::f32(0.0), m],
        );
        let (mut l, mut o) = (Operand::f32(0.0), Operand::f32(0.0));
        for (k, &mk) in maxima.iter().enumerate() {
            let d = self.b.op(RegType::F32, Op::FSub, &[mk, m_use.into()]);
            let w = self.exp_nonpos(d.into());
            let addr = at(self, k as u64, Ix::C(sh.e + 1));
            let lk = load(self, addr);
            let addr = at(self, k as u64, col);
            let ok = load(self, addr);
            let lw = self.b.op(RegType::F32, Op::FMul, &[lk, w]);
            l = self.b.op(RegType::F32, Op::FAdd, &[l, lw.into()]).into();
            let ow = self.b.op(RegType::F32, Op::FMul, &[ok, w]);
            o = self.b.op(RegType::F32, Op::FAdd, &[o, ow.into()]).into();
        }
        let empty = self
            .b
            .op(RegType::Pred, Op::FCmp(FCmp::Eq), &[l, Operand::f32(0.0)]);
        let q = self.b.op(RegType::F32, Op::FDiv, &[o, l]);
        let q = self.b.op(
            RegType::F32,
            Op::Select,
            &[empty.into(), Operand::f32(0.0), q.into()],
        );
        let v = self.round(q.into(), dt);
        // The output index: batch entry `outer`, packed row r = position · pack + head.
        let pos = self.idiv_c(r, pack);
        let p = self.irem_c(r, pack);
        let outer_idx = if outer_dims.is_empty() {
            vec![]
        } else {
            self.unflatten(outer, &outer_shape)
        };
        let pack_idx = if sh.pack_dims.is_empty() {
            vec![]
        } else {
            self.unflatten(p, &pack_shape)
        };
        let mut idx = vec![Ix::C(0); rank - 2];
        for (k, &dim) in outer_dims.iter().enumerate() {
            idx[dim] = outer_idx[k];
        }
        for (k, &dim) in sh.pack_dims.iter().enumerate() {
            idx[dim] = pack_idx[k];
        }
        idx.extend([pos, col]);
        self.store(out, &idx, &[v])?;
        self.close_if(inside);
        Ok((threads, total.div_ceil(threads as u64) as u32))
    }

    /// `(x < limit, x if so else 0)`.
    pub(super) fn clamp_below(&mut self, x: Ix, limit: u64) -> (Reg, Ix) {
        self.clamp_below_to(x, Self::imm_u(limit))
    }

    /// `(x < limit, x if so else 0)` for a limit known at run time.
    pub(super) fn clamp_below_to(&mut self, x: Ix, limit: Operand) -> (Reg, Ix) {
        let xo = self.ix_op(x);
        let inside = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[xo, limit]);
        let c = self.b.op(
            RegType::U32,
            Op::Select,
            &[inside.into(), xo, Operand::U32(0)],
        );
        (inside, Ix::R(c))
    }

    pub(super) fn umin(&mut self, a: Operand, b: Operand) -> Operand {
        let lt = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[a, b]);
        self.b
            .op(RegType::U32, Op::Select, &[lt.into(), a, b])
            .into()
    }

    pub(super) fn umax(&mut self, a: Operand, b: Operand) -> Operand {
        if a == Operand::U32(0) {
            return b;
        }
        let gt = self.b.op(RegType::Pred, Op::ICmp(ICmp::GtU), &[a, b]);
        self.b
            .op(RegType::U32, Op::Select, &[gt.into(), a, b])
            .into()
    }

    /// Element offset of batch index `batch` (rows and columns at 0) in `view`'s base.
    pub(super) fn view_offset(&mut self, view: &StridedView, batch: &[Ix]) -> Ix {
        let mut off = Ix::C(view.offset);
        for (&i, &st) in batch.iter().zip(&view.strides) {
            let t = self.imul_c(i, st);
            off = self.iadd(off, t);
        }
        off
    }

    /// Issues the copies of the K and V tiles of keys `j0 .. j0 + block_n` into stage
    /// `stage` of their rings. With `may_be_whole`, a block wholly below the limit takes
    /// one address per thread (tested at run time); without it (the wgmma tile's producer,
    /// which copies only the block crossing the limit this way) every block is copied
    /// chunk by chunk, past the limit zero-filled.
    pub(super) fn issue_kv(
        &mut self,
        c: &KvCopy<'_>,
        stage: Ix,
        j0: Ix,
        may_be_whole: bool,
    ) -> Result<(), LowerError> {
        for ((view, base_off, key_stride, ring, width), origin) in
            [(c.k, c.origins[0]), (c.v, c.origins[1])]
        {
            let chunks = width / 8;
            let total = c.block_n * chunks;
            let st = self.imul_c(stage, ring.stage_bytes() as u64);
            if let Some(o) = origin {
                // Pass i's chunk is the first pass's, `i · rows_per_pass` rows further on.
                let rows_per_pass = (c.threads / chunks) as u64;
                let passes = (total / c.threads) as u64;
                let pitch = ring.layout.row_pitch() as u64;
                let steps = (rows_per_pass * key_stride * 2, rows_per_pass * pitch);
                // A block wholly below the limit (every block but a row block's last): one
                // address per thread, each pass a constant offset from it, nothing zero-filled.
                self.open();
                let key = self.iadd(j0, o.row);
                let ko = self.imul_c(key, key_stride);
                let off = self.iadd(o.global, ko);
                let so = self.iadd(st, o.shared);
                let fast = may_be_whole
                    && self
                        .cp_async_16_passes(view.base, off, (ring.base, so), passes, steps)
                        .is_some();
                let then_body = self.close();
                self.open();
                for i in 0..passes {
                    let rr = self.iadd(o.row, Ix::C(i * rows_per_pass));
                    let key = self.iadd(j0, rr);
                    let (inside, kc) = self.clamp_below_to(key, c.limit);
                    let ko = self.imul_c(kc, key_stride);
                    let off = self.iadd(o.global, ko);
                    let so = self.iadd(st, o.shared);
                    let so = self.iadd(so, Ix::C(i * steps.1));
                    self.cp_async_16(view.base, off, (ring.base, so), inside);
                }
                let else_body = self.close();
                if fast {
                    let end = self.iadd(j0, Ix::C(c.block_n as u64));
                    let end = self.ix_op(end);
                    let whole = self
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LeU), &[end, c.limit]);
                    self.b.push(Stmt::If {
                        cond: whole,
                        then_body,
                        else_body,
                    });
                } else {
                    // Only crossing blocks, or offsets past 32 bits: the per-pass addresses.
                    else_body.into_iter().for_each(|st| self.b.push(st));
                }
                continue;
            }
            for i in 0..total.div_ceil(c.threads) {
                let ei = self.iadd(Ix::R(c.tid), Ix::C((i * c.threads) as u64));
                let in_tile = if (i + 1) * c.threads <= total {
                    None
                } else {
                    let eo = self.ix_op(ei);
                    Some(self.b.op(
                        RegType::Pred,
                        Op::ICmp(ICmp::LtU),
                        &[eo, Operand::U32(total)],
                    ))
                };
                let rr = self.idiv_c(ei, chunks as u64);
                let cc = self.irem_c(ei, chunks as u64);
                let key = self.iadd(j0, rr);
                // Keys at or past the CTA's last visible key (or the tensor's end) are
                // zero-filled, never read: no row gives them weight, and an unwritten
                // cache row there (NaN) must not reach the sum as 0 · NaN.
                let (inside, kc) = self.clamp_below_to(key, c.limit);
                let ko = self.imul_c(kc, key_stride);
                let col = self.imul_c(cc, 8);
                let off = self.iadd(base_off, ko);
                let off = self.iadd(off, col);
                let so = self.ring_offset(&ring, rr, col);
                let so = self.iadd(st, so);
                if let Some(t) = in_tile {
                    self.open();
                    self.cp_async_16(view.base, off, (ring.base, so), inside);
                    self.close_if(t);
                } else {
                    self.cp_async_16(view.base, off, (ring.base, so), inside);
                }
            }
        }
        Ok(())
    }
}

/// What [`Gen::issue_kv`] copies: for K and for V, the view, the batch entry's element
/// offset, the element stride between keys, the ring, and the head dim.
pub(super) struct KvCopy<'v> {
    pub(super) k: (&'v StridedView, Ix, u64, Ring, u32),
    pub(super) v: (&'v StridedView, Ix, u64, Ring, u32),
    /// For K and V, where every pass of the threads over a tile covers whole rows, a
    /// multiple of the swizzle's period (`kv_origins`): the thread's first chunk,
    /// computed once before the key loop, from which every other chunk is a constant
    /// number of rows further on. `None`: each chunk is computed from scratch.
    pub(super) origins: [Option<ChunkOrigin>; 2],
    /// Keys from here on are not read: the CTA's largest row bound, at most N.
    pub(super) limit: Operand,
    pub(super) block_n: u32,
    pub(super) threads: u32,
    pub(super) tid: Reg,
}
