//! Matmul epilogues: the group's output as a function of the matmul value, stored per
//! element with an accumulator standing in for the matmul (or, in a split-K partials kernel,
//! the f32 sum to scratch), and the tensor-core tile's epilogue staged through shared
//! memory in 16-byte row vectors.

use super::{Gen, Ix, LowerError, Scratch};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Stmt, Width};
use tessel_ir::{Reg, Value};

/// Where a thread's warp sits in the CTA's tile: the thread index (among the threads that
/// hold accumulators), its lane, and the warp tile's first row and column; and where those
/// threads meet between the epilogue's phases.
#[derive(Copy, Clone)]
pub(super) struct WarpTile {
    pub(super) tid: Reg,
    pub(super) lane: Ix,
    pub(super) wm0: Ix,
    pub(super) wn0: Ix,
    /// `None`: every thread of the CTA runs the epilogue and meets at `bar.sync 0`.
    /// `Some(b)`: only the accumulator-holding threads do (the consumer warpgroups of a
    /// warp-specialised kernel, whose producer has left), at the named barrier `b`.
    pub(super) named_barrier: Option<NamedBarrier>,
}

/// A named barrier where an epilogue's threads meet (PTX `bar.sync id, threads`, PTX ISA
/// §9.7.13.1).
#[derive(Copy, Clone)]
pub(super) struct NamedBarrier {
    /// The barrier's id, 1 to 15 (0 is `bar.sync 0`'s).
    pub(super) id: u32,
    /// Where two groups of warps run the same epilogue at different times, each over its
    /// own tile (the ping-pong consumers, `wgmma_pingpong.rs`): a predicate, the same on
    /// every lane of a warp, true in the second group, whose warps meet at `id + 1`.
    pub(super) second: Option<Reg>,
}

impl NamedBarrier {
    /// Barrier `id` for every warp that runs the epilogue.
    pub(super) fn fixed(id: u32) -> Self {
        NamedBarrier { id, second: None }
    }
}

impl Gen<'_> {
    /// The barrier where the epilogue's `threads` threads meet ([`WarpTile::named_barrier`]).
    fn epilogue_barrier(&mut self, wt: WarpTile, threads: u32) {
        match wt.named_barrier {
            None => self.b.push(Stmt::Barrier),
            Some(b) => self.named_barrier_sync(b, threads),
        }
    }

    /// `bar.sync` of `threads` at the named barrier `b`: `b.id`, or `b.id + 1` in the
    /// second group of [`NamedBarrier::second`] (a branch that never splits a warp).
    pub(super) fn named_barrier_sync(&mut self, b: NamedBarrier, threads: u32) {
        let Some(second) = b.second else {
            self.b.push(Stmt::BarSync { id: b.id, threads });
            return;
        };
        self.b.push(Stmt::If {
            cond: second,
            then_body: vec![Stmt::BarSync {
                id: b.id + 1,
                threads,
            }],
            else_body: vec![Stmt::BarSync { id: b.id, threads }],
        });
    }
}

/// Passes of a looped staged epilogue per loop iteration ([`Gen::staged_epilogue`]).
const EPILOGUE_UNROLL: u32 = 4;

impl Gen<'_> {
    /// A predicate: output element (`row`, `col`) lies inside the `m × n` output.
    pub(super) fn in_bounds(&mut self, (row, m): (Ix, u64), (col, n): (Ix, u64)) -> Reg {
        let (ro, co) = (self.ix_op(row), self.ix_op(col));
        let m_ok = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ro, Self::imm_u(m)]);
        let n_ok = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[co, Self::imm_u(n)]);
        self.b
            .op(RegType::Pred, Op::PAnd, &[m_ok.into(), n_ok.into()])
    }

    /// The epilogue of output element (`row`, `col`) under the batch index `lead` (and of
    /// the `accs.len() - 1` elements after it along the row), with `accs` standing in for
    /// matmul `mm`, if it lies inside the `m × n` output.
    pub(super) fn guarded_epilogue(
        &mut self,
        (out, mm): (Value, Value),
        lead: &[Ix],
        (row, m): (Ix, u64),
        (col, n): (Ix, u64),
        accs: &[Reg],
    ) -> Result<(), LowerError> {
        let ok = self.in_bounds((row, m), (col, n));
        self.open();
        let mut idx = lead.to_vec();
        idx.extend([row, col]);
        self.matmul_epilogue(out, mm, &idx, accs)?;
        self.close_if(ok);
        Ok(())
    }

    /// Stores the epilogue of output elements `idx .. idx + accs.len()` along the last dim
    /// (one element, or two whose address is aligned to two elements), with `accs` as the
    /// matmul's values there. In a split-K partials kernel, stores the f32 sums to scratch.
    pub(super) fn matmul_epilogue(
        &mut self,
        out: Value,
        mm: Value,
        idx: &[Ix],
        accs: &[Reg],
    ) -> Result<(), LowerError> {
        if let Some(Scratch {
            ptr,
            writes: true,
            range: Some(range),
            ..
        }) = self.scratch
        {
            // Split-K partials kernel: the range's f32 sums, unrounded, to scratch.
            let shape = self.g.ty(mm).shape.clone();
            let numel = shape.numel();
            let flat = self.flatten(idx, &shape);
            let base = self.imul_c(range, numel);
            let flat = self.iadd(base, flat);
            let fo = self.ix_op(flat);
            let bytes = self
                .b
                .op(RegType::U64, Op::MulWideU32, &[fo, Operand::U32(4)]);
            let addr = self
                .b
                .op(RegType::U64, Op::AddU64, &[ptr.into(), bytes.into()]);
            for (j, &acc) in accs.iter().enumerate() {
                self.b.push(Stmt::Store {
                    space: Space::Global,
                    width: Width::B32,
                    addr,
                    offset: 4 * j as i32,
                    values: vec![acc.into()],
                });
            }
            return Ok(());
        }
        // The product is rounded once to its dtype before the epilogue uses it, as the graph
        // says (a bf16 `x @ w^T + b` rounds the product, then the sum).
        let dt = self.g.ty(mm).dtype;
        let vals: Vec<Operand> = accs.iter().map(|&a| self.round(a.into(), dt)).collect();
        self.rounded_epilogue(out, mm, idx, vals)
    }

    /// [`Gen::matmul_epilogue`] from the matmul's values already rounded to its dtype
    /// (`vals`, consecutive columns from `idx`): the group's output computed and stored.
    fn rounded_epilogue(
        &mut self,
        out: Value,
        mm: Value,
        idx: &[Ix],
        vals: Vec<Operand>,
    ) -> Result<(), LowerError> {
        let lanes = vals.len() as u32;
        self.lane_value.insert(mm, vals);
        self.open();
        let (rows, col) = idx.split_at(idx.len() - 1);
        let mut idx = self.output_rows(out, mm, rows, 1);
        idx.extend(col);
        let vals = self.value(out, &idx, lanes)?;
        self.store(out, &idx, &vals)?;
        // The scope only limits what is remembered: its statements run in place.
        for s in self.close() {
            self.b.push(s);
        }
        self.lane_value.remove(&mm);
        Ok(())
    }

    /// The leading index of the group's output `out` (all but its last `tail` dims) at the
    /// matmul `mm`'s row `rows` (its batch index and row): `rows` itself where the two
    /// agree, else the same flat row in `out`'s leading dims (the `[B·T, N]` GEMM of
    /// batched activations writing `[B, T, N]`; [`tessel_ir::graph::Graph::matmul_layout`]).
    fn output_rows(&mut self, out: Value, mm: Value, rows: &[Ix], tail: usize) -> Vec<Ix> {
        let m = self.g.ty(mm).shape.0.clone();
        let o = self.g.ty(out).shape.0.clone();
        let (m, o) = (&m[..m.len() - 1], &o[..o.len() - tail]);
        if m == o {
            return rows.to_vec();
        }
        let flat = self.flatten(rows, &tessel_ir::Shape(m.to_vec()));
        self.unflatten(flat, &tessel_ir::Shape(o.to_vec()))
    }

    /// The tile's epilogue through shared memory: every warp writes its accumulators to a
    /// `bm × (bn + 8)` tile, f32 or rounded to the matmul's 16-bit dtype
    /// ([`Gen::stage_accumulators`]; the ring, no longer read: all copies waited for, and a
    /// barrier), then each thread takes 4 consecutive columns of a row at a time — 32
    /// threads cover 128 contiguous columns — and stores their epilogue as one vector
    /// (16 bytes of f32, 8 of bf16): the output and any tensor the epilogue reads go
    /// through whole cache lines. The padding of 8 elements puts the rows of a fragment
    /// store in different banks. Needs N a multiple of 4 (aligned vectors).
    pub(super) fn staged_epilogue(
        &mut self,
        out: Value,
        mm: Value,
        (base, bm, bn, threads): (Reg, u32, u32, u32),
        (accs, mi, ni): (&[[Reg; 4]], u32, u32),
        warp_tile: WarpTile,
        (lead, m0, n0, m, n): (&[Ix], Ix, Ix, u64, u64),
    ) -> Result<(), LowerError> {
        let (stride, esz) =
            self.stage_accumulators(mm, (base, bn, threads), (accs, mi, ni), warp_tile);
        // Read back 4 columns at a time, row by row: vector `tid + it · threads` in pass
        // `it`. Unrolled, unless the epilogue calls the math library (silu's sigmoid,
        // exp, ...: hundreds of instructions per element): then a loop, so that the
        // kernel's code stays small — 32 unrolled passes of silu made the gate GEMM's
        // kernel 15× the size of its neighbour's; the loop took it from 2.8× the
        // neighbour's time to 1.9× on the H200 (the rest is silu's own arithmetic).
        let tid = warp_tile.tid;
        let per_row = bn / 4;
        let vecs = bm * per_row;
        let passes = vecs.div_ceil(threads);
        let looped = passes > 1 && self.epilogue_calls_math(out, mm);
        // A looped epilogue runs `unroll` passes per iteration: independent vectors whose
        // math the warp schedulers interleave (one pass per iteration left a wgmma tile's
        // 8 warps waiting on each pass's dependent chain).
        let unroll = if looped {
            EPILOGUE_UNROLL.min(passes)
        } else {
            1
        };
        let iters = passes.div_ceil(unroll);
        let it_reg = looped.then(|| self.b.kernel.new_reg(RegType::U32));
        if looped {
            self.open();
        }
        for it in 0..if looped { unroll } else { passes } {
            let first = match it_reg {
                Some(r) => {
                    let group = self.imul_c(Ix::R(r), (unroll * threads) as u64);
                    self.iadd(group, Ix::C((it * threads) as u64))
                }
                None => Ix::C((it * threads) as u64),
            };
            let e = self.iadd(Ix::R(tid), first);
            let row = self.idiv_c(e, per_row as u64);
            let c4 = self.irem_c(e, per_row as u64);
            let col = self.imul_c(c4, 4);
            let gr = self.iadd(m0, row);
            let gc = self.iadd(n0, col);
            let eo = self.ix_op(e);
            let mut ok = self.in_bounds((gr, m), (gc, n));
            let partial = if looped {
                iters * unroll * threads > vecs
            } else {
                (it + 1) * threads > vecs
            };
            if partial {
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
            let cb = self.imul_c(col, esz as u64);
            let so = self.iadd(ro, cb);
            let addr = self.shared_addr(base, so);
            let mut idx = lead.to_vec();
            idx.extend([gr, gc]);
            if esz == 4 {
                let vals: Vec<Reg> = (0..4)
                    .map(|_| self.b.kernel.new_reg(RegType::F32))
                    .collect();
                self.load_shared_f32(&vals, addr, 0);
                self.matmul_epilogue(out, mm, &idx, &vals)?;
            } else {
                let vals = self.staged_words(mm, addr, 4);
                self.rounded_epilogue(out, mm, &idx, vals)?;
            }
            self.close_if(ok);
        }
        if let Some(r) = it_reg {
            self.close_for(r, Operand::U32(0), Operand::U32(iters), Operand::U32(1));
        }
        Ok(())
    }

    /// Bytes of one element of the staged tile: the matmul's 16-bit dtype — every reader
    /// rounds an accumulator to it before use ([`Gen::matmul_epilogue`],
    /// [`Gen::staged_value`]), so the tile holding the rounded value changes no bit, and
    /// it is half the size, written and read in half the shared-memory traffic — else f32:
    /// an f32 or widened (`f32(x) @ f32(w)^T`) matmul, and a split-K partials kernel, whose
    /// epilogue stores the unrounded sums.
    pub(super) fn staged_esz(&self, mm: Value) -> u32 {
        let partials = matches!(
            self.scratch,
            Some(Scratch {
                writes: true,
                range: Some(_),
                ..
            })
        );
        match self.g.ty(mm).dtype.size_bytes() {
            2 if !partials => 2,
            _ => 4,
        }
    }

    /// Every warp's accumulators into the CTA's `bm × (bn + 8)` tile at `base` (the ring,
    /// no longer read: all copies waited for, or a staging tile of its own), as f32 or
    /// rounded to the matmul's 16-bit dtype ([`Gen::staged_esz`]), between two barriers of
    /// the `threads` that hold accumulators ([`WarpTile::named_barrier`]). Lane (g, t)
    /// holds rows g, g + 8 and columns 2t, 2t + 1 of each 16 × 8 fragment (PTX ISA
    /// §9.7.14.5.8), stored as one 8-byte pair of f32 or one 4-byte pair of 16-bit values;
    /// the padding of 8 elements puts the 8 rows of a fragment store 8 banks apart (f32:
    /// each half-warp's 4 rows on all 32 banks) or 4 (16-bit: the warp's 8 rows on all
    /// 32), so no store conflicts. Returns the tile's row stride and element size in bytes.
    fn stage_accumulators(
        &mut self,
        mm: Value,
        (base, bn, threads): (Reg, u32, u32),
        (accs, mi, ni): (&[[Reg; 4]], u32, u32),
        wt: WarpTile,
    ) -> (u32, u32) {
        let WarpTile { lane, wm0, wn0, .. } = wt;
        let esz = self.staged_esz(mm);
        let stride = (bn + crate::schedule::STAGED_ROW_PAD) * esz;
        let pack = match self.g.ty(mm).dtype {
            tessel_ir::DType::F16 => Op::PackF16x2,
            _ => Op::PackBf16x2,
        };
        let g = self.idiv_c(lane, 4);
        let t = self.irem_c(lane, 4);
        let r = self.iadd(wm0, g);
        let r = self.imul_c(r, stride as u64);
        let c = self.imul_c(t, 2);
        let c = self.iadd(wn0, c);
        let c = self.imul_c(c, esz as u64);
        let off = self.iadd(r, c);
        let mine = self.shared_addr(base, off);
        self.epilogue_barrier(wt, threads);
        for i in 0..mi {
            for j in 0..ni {
                let frag = accs[(i * ni + j) as usize];
                for h in 0..2usize {
                    let offset = ((16 * i + 8 * h as u32) * stride + 8 * j * esz) as i32;
                    let (lo, hi) = (frag[2 * h], frag[2 * h + 1]);
                    let (width, values) = if esz == 4 {
                        (Width::V2, vec![lo.into(), hi.into()])
                    } else {
                        let w = self.b.op(RegType::U32, pack, &[hi.into(), lo.into()]);
                        (Width::B32, vec![w.into()])
                    };
                    self.b.push(Stmt::Store {
                        space: Space::Shared,
                        width,
                        addr: mine,
                        offset,
                        values,
                    });
                }
            }
        }
        self.epilogue_barrier(wt, threads);
        (stride, esz)
    }

    /// `lanes` consecutive 16-bit elements of the staged tile from `addr`, as f32 values
    /// (exact), in loads of up to 16 bytes: the first element's column is a multiple of
    /// `lanes` (see [`Gen::staged_value`]), so each load of `piece` elements (the largest
    /// power of two dividing `lanes`, at most 8) is aligned to its size.
    fn staged_words(&mut self, mm: Value, addr: Reg, lanes: u32) -> Vec<Operand> {
        let dt = self.g.ty(mm).dtype;
        let piece = (lanes & lanes.wrapping_neg()).min(8);
        let width = match piece {
            8 => Width::V4,
            4 => Width::V2,
            2 => Width::B32,
            _ => Width::B16,
        };
        let mut out = Vec::with_capacity(lanes as usize);
        for k in 0..lanes / piece {
            let dsts: Vec<Reg> = (0..width.regs())
                .map(|_| self.b.kernel.new_reg(RegType::U32))
                .collect();
            self.b.push(Stmt::Load {
                dsts: dsts.clone(),
                space: Space::Shared,
                width,
                addr,
                offset: (2 * piece * k) as i32,
            });
            for d in dsts {
                out.extend(self.unpack(d, dt, width));
            }
        }
        out
    }

    /// The row epilogue (`fuse` rule 8): the group's output `out`, `[.., N / d, d]`, of the
    /// matmul `mm`'s `[.., N]` tile, whose accumulators are first staged in shared memory
    /// as for [`Gen::staged_epilogue`]. The `bm · bn / 8` chunks of 8 columns are
    /// taken by the CTA's threads in passes (chunk `tid + it · threads`; the schedule makes
    /// the count a multiple of the threads, so every lane runs every pass and the
    /// shuffles see full warps); a row of `d` (`bn` a multiple of it) sits on `d / 8`
    /// consecutive lanes, which form its `reductions` by butterflies
    /// ([`Gen::chunk_reductions`]) and then compute and store the output's 8 values. The
    /// matmul's value anywhere in the tile is read from the staged tile
    /// ([`Gen::staged_value`], rounded to its dtype as the per-element epilogue does), so a
    /// rotate-half reads the row's other half there. Rows and heads past the output's
    /// edges compute values that are never stored.
    pub(super) fn row_epilogue(
        &mut self,
        (out, mm, reductions): (Value, Value, &[Value]),
        (base, bm, bn, threads): (Reg, u32, u32, u32),
        (accs, mi, ni): (&[[Reg; 4]], u32, u32),
        warp_tile: WarpTile,
        (lead, m0, n0, m, n): (&[Ix], Ix, Ix, u64, u64),
    ) -> Result<(), LowerError> {
        let d = self.g.ty(out).shape.last();
        let tpr = (d / 8) as u32;
        let per_row = bn / 8;
        let passes = bm * per_row / threads;
        if d % 8 != 0 || bn as u64 % d != 0 || passes * threads != bm * per_row {
            return Err(LowerError::Unsupported {
                what: format!(
                    "a row epilogue over rows of {d} in a {bm}×{bn} tile of {threads} threads"
                ),
                value: out,
            });
        }
        let (stride, esz) =
            self.stage_accumulators(mm, (base, bn, threads), (accs, mi, ni), warp_tile);
        let it = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let first = self.imul_c(Ix::R(it), threads as u64);
        let e = self.iadd(Ix::R(warp_tile.tid), first);
        let row = self.idiv_c(e, per_row as u64);
        let c8 = self.irem_c(e, per_row as u64);
        let col = self.imul_c(c8, 8);
        let gr = self.iadd(m0, row);
        let gc = self.iadd(n0, col);
        let ok = self.in_bounds((gr, m), (gc, n));
        // A chunk past the output's last row or head computes the values of the last one
        // (inside the tile: the tile's first row and head are inside the output; the
        // ping-pong skips a 64-row half wholly past it), never stored: every lane runs the
        // shuffles, and every index stays inside the tile and the tensors the epilogue reads
        // (a concat evaluates every arm only along the last axis, `values.rs`).
        let row_in = self.umin_c(gr, m.max(1) - 1);
        let col_in = self.umin_c(gc, n.max(1) - 1);
        let head = self.idiv_c(col_in, d);
        let within = self.irem_c(gc, d);
        let mut rows = lead.to_vec();
        rows.push(row_in);
        let mut idx = self.output_rows(out, mm, &rows, 2);
        idx.extend([head, within]);
        self.staged = Some(super::StagedTile {
            mm,
            base,
            stride,
            esz,
            m0,
            n0,
        });
        self.memo.push(Default::default());
        // The pass's values as one straight-line region, its global loads (the norm
        // weight, the RoPE tables) moved first so their latencies overlap (`hoist.rs`).
        self.b.open();
        self.chunk_reductions(reductions, &idx, tpr)?;
        let vals = self.value(out, &idx, 8)?;
        for s in super::hoist::hoist_global_loads(self.b.close()) {
            self.b.push(s);
        }
        for r in reductions {
            self.row_value.remove(r);
        }
        self.memo.pop();
        self.staged = None;
        self.open();
        self.store(out, &idx, &vals)?;
        self.close_if(ok);
        self.close_for(it, Operand::U32(0), Operand::U32(passes), Operand::U32(1));
        Ok(())
    }

    /// `lanes` values of the matmul `tile.mm` at `idx` (its own index, inside the CTA's
    /// tile) from the staged tile: f32, each rounded once to the matmul's dtype as
    /// [`Gen::matmul_epilogue`] rounds an accumulator, or already rounded to its 16-bit
    /// dtype ([`Gen::staged_esz`]). Vectors of 4 (or 2) floats, or of up to 8 16-bit
    /// values, where `lanes` allows: the first column is then a multiple of `lanes` (the
    /// matmul's rows are whole rows of the epilogue's, a multiple of 8) and the stride of
    /// 16 bytes.
    pub(super) fn staged_value(
        &mut self,
        tile: super::StagedTile,
        idx: &[Ix],
        lanes: u32,
    ) -> Vec<Operand> {
        let r = idx.len();
        let (ro, co) = (self.ix_op(idx[r - 2]), self.ix_op(idx[r - 1]));
        let (m0, n0) = (self.ix_op(tile.m0), self.ix_op(tile.n0));
        let i = self.b.op(RegType::U32, Op::ISub, &[ro, m0]);
        let j = self.b.op(RegType::U32, Op::ISub, &[co, n0]);
        let ib = self.imul_c(Ix::R(i), tile.stride as u64);
        let jb = self.imul_c(Ix::R(j), tile.esz as u64);
        let off = self.iadd(ib, jb);
        let addr = self.shared_addr(tile.base, off);
        if tile.esz == 2 {
            // Already rounded to the matmul's dtype when staged.
            return self.staged_words(tile.mm, addr, lanes);
        }
        let dt = self.g.ty(tile.mm).dtype;
        let vals: Vec<Reg> = (0..lanes)
            .map(|_| self.b.kernel.new_reg(RegType::F32))
            .collect();
        self.load_shared_f32(&vals, addr, 0);
        vals.into_iter().map(|x| self.round(x.into(), dt)).collect()
    }

    /// The `reductions` of the row holding `idx` (8 consecutive elements along the last
    /// dim, the row on `tpr` consecutive lanes): each the lane's 8 values folded left to
    /// right from the identity, then a butterfly over the `tpr` lanes — a row-reduction
    /// kernel's order at `tpr` threads per row, vector 8. Each result (converted to the
    /// reduction's dtype) stands in for the reduction until removed from `row_value`.
    pub(super) fn chunk_reductions(
        &mut self,
        reductions: &[Value],
        idx: &[Ix],
        tpr: u32,
    ) -> Result<(), LowerError> {
        for &r in reductions {
            let res = self.fold_row(r, idx, tpr)?;
            self.row_value.insert(r, res);
        }
        Ok(())
    }

    /// Reduction `r` of the row whose 8 elements from `idx` (its argument's index) this
    /// lane holds, the row on `tpr` consecutive lanes: the 8 values folded left to right
    /// from the identity, then a butterfly over the lanes; in `r`'s dtype.
    fn fold_row(&mut self, r: Value, idx: &[Ix], tpr: u32) -> Result<Operand, LowerError> {
        let tessel_ir::graph::Op::Reduce { op: rop, arg, .. } = self.g.ops[r] else {
            return Err(LowerError::Unsupported {
                what: "a row's reduction that is not a reduce".into(),
                value: r,
            });
        };
        let dt = self.g.ty(arg).dtype;
        let cls = super::class(dt);
        let identity =
            super::rows::reduce_identity(rop, cls).ok_or_else(|| LowerError::Unsupported {
                what: format!("reduction {rop:?} of {dt}"),
                value: r,
            })?;
        let acc = self.b.kernel.new_reg(cls);
        self.b.assign(acc, Op::Mov, &[identity]);
        for x in self.value(arg, idx, 8)? {
            self.combine(rop, cls, acc, x);
        }
        self.butterfly(rop, cls, acc, tpr);
        let rdt = self.g.ty(r).dtype;
        Ok(if rdt != dt {
            self.convert(acc.into(), dt, rdt)
        } else {
            acc.into()
        })
    }

    /// Reduction `r` at `idx` (its own index, `[.., 0]`) in an update kernel that computes
    /// its rows' reductions (`fuse` rule 6): this lane folds the 8 elements of the reduced
    /// row from column `col` (its first element's column in its own row; `fuse` made sure
    /// the row's lanes all reach the same reduced row, as long as their own), and the row's
    /// `tpr` lanes combine by a butterfly ([`Gen::fold_row`]). Memoised per index by
    /// [`Gen::value`].
    pub(super) fn chunk_reduction(
        &mut self,
        r: Value,
        idx: &[Ix],
        col: Ix,
        tpr: u32,
    ) -> Result<Operand, LowerError> {
        let mut at = idx.to_vec();
        if let Some(last) = at.last_mut() {
            *last = col;
        }
        self.fold_row(r, &at, tpr)
    }

    /// True if the epilogue of matmul `mm` writing `out` (the values between them,
    /// computed in the kernel) calls a math-library function ([`crate::analysis::calls_math`]).
    fn epilogue_calls_math(&self, out: Value, mm: Value) -> bool {
        let mut stack = vec![out];
        let mut seen = std::collections::HashSet::new();
        while let Some(v) = stack.pop() {
            if v == mm || !seen.insert(v) || (v != out && self.is_leaf(v)) {
                continue;
            }
            let op = &self.g.ops[v];
            if crate::analysis::calls_math(op) {
                return true;
            }
            stack.extend(op.args());
        }
        false
    }
}
