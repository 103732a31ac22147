//! The tensor-core GEMV for decode ([`TileConfig::GemvMma`]): the M ≤ 16 left rows as the
//! mma's A operand, 8 weight rows per CTA as its B, operands loaded straight from global
//! memory with 16-byte loads.

use super::{Gen, Ix, LowerError};
use tessel_ir::graph::MatmulLayout;
use tessel_ir::kernel::{ICmp, MmaShape, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{DType, Reg, Value};

impl Gen<'_> {
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
        let (_, _, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let [rx, rw] = self.operand_reads(mm);
        // The dtype the operands are read in: 16-bit under widening casts.
        let dt = self.g.ty(rx.stored).dtype;
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
        let (Some(x), Some(w)) = (self.operand_2d(&rx, true), self.operand_2d(&rw, false)) else {
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
            // All loads of the iteration first, the weight's before the left rows' (so
            // that in the peeled first iteration they precede `griddepcontrol.wait`), then
            // the mma.
            let mut chunks = Vec::new();
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
                chunks.push((off, k_ok));
            }
            let load16 = |this: &mut Self, p: Reg, (off, k_ok): (u64, Option<Reg>)| -> Vec<Reg> {
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
            let wvs: Vec<Vec<Reg>> = chunks.iter().map(|&c| load16(this, qw, c)).collect();
            let mut loaded = Vec::new();
            for (wv, &c) in wvs.into_iter().zip(&chunks) {
                let xs: Vec<Vec<Reg>> = qx.iter().map(|&p| load16(this, p, c)).collect();
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
        // The main loop's first iteration peeled off its loop (for the warps that have
        // one), so that its weight loads, from a step input no kernel writes, come before
        // `griddepcontrol.wait` (`dependent-launch`) and overlap the kernel ahead; the same
        // chunks in the same order. (No warp has one when K is under the main loop's reach.)
        let second = if main_end > 0 {
            let has_first = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::LtU),
                &[start_op, Self::imm_u(main_end)],
            );
            let kb0 = self.b.op(RegType::U32, Op::Mov, &[start_op]);
            self.open();
            main_loop(self, kb0, unroll, false);
            self.close_if(has_first);
            self.iadd(start, Ix::C(span))
        } else {
            start
        };
        let second = self.ix_op(second);
        let kb = self.b.kernel.new_reg(RegType::U32);
        self.open();
        main_loop(self, kb, unroll, false);
        self.close_for(kb, second, Self::imm_u(main_end), Self::imm_u(span));
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
        let pairs = n % 2 == 0 && self.g.matmul_layout(mm, out) == Some(MatmulLayout::Rows);
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
                self.guarded_epilogue((out, mm), &lead, (row, m), (col, n), &rs)?;
            }
        }
        self.close_if(first);
        Ok([n.div_ceil(8).max(1) as u32, 1, 1])
    }
}
