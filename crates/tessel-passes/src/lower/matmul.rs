//! Lowering of matmul groups: the GEMV and SIMT FMA schedules (see `schedule.rs` for when
//! each is chosen and `schedule::reduction_order` for the order of every sum).
//!
//! Both compute each output element into one f32 accumulator; the epilogue (the group's
//! output as a function of the matmul value) is then generated per element with the
//! accumulator standing in for the matmul, and stored once.

use super::{Gen, Ix, LowerError, Scratch};
use tessel_ir::graph::Op as GOp;
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{Reg, Value};

impl Gen<'_> {
    /// The materialised tensor a matmul operand reads and whether it is read transposed
    /// (the operand is a permute of the last two axes of it).
    fn operand_base(&self, x: Value) -> Value {
        match &self.g.ops[x] {
            GOp::Permute { arg, .. } => *arg,
            _ => x,
        }
    }

    /// The operands of the matmul `mm`, its batch shape and (M, K, N).
    pub(super) fn matmul_operands(
        &self,
        mm: Value,
    ) -> (Value, Value, tessel_ir::Shape, (u64, u64, u64)) {
        let GOp::MatMul { lhs, rhs } = self.g.ops[mm] else {
            unreachable!("matmul groups list their matmul");
        };
        let (ls, rs) = (&self.g.ty(lhs).shape.0, &self.g.ty(rhs).shape.0);
        let r = ls.len();
        let batch = tessel_ir::Shape(ls[..r - 2].to_vec());
        (lhs, rhs, batch, (ls[r - 2], ls[r - 1], rs[r - 1]))
    }

    /// `acc += a · b` for operands of `dt` held in f32 registers: one fma (a 16-bit product
    /// is exact in f32, so the fma rounds exactly once, as a separate multiply and add would).
    fn mac(&mut self, acc: Reg, a: Operand, b: Operand) {
        self.b.assign(acc, Op::FFma, &[a, b, acc.into()]);
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
        self.lane_value.insert(mm, vals);
        self.open();
        let vals = self.value(out, idx, accs.len() as u32)?;
        self.store(out, idx, &vals)?;
        // The scope only limits what is remembered: its statements run in place.
        for s in self.close() {
            self.b.push(s);
        }
        self.lane_value.remove(&mm);
        Ok(())
    }

    /// The second kernel of a split-K matmul: thread `e` (one per element of the matmul's
    /// value, `threads` per CTA) adds the `split` range results `scratch[r][e]` in order
    /// r = 0, 1, ... into an f32 accumulator starting at 0 and stores the epilogue of that
    /// sum. Returns the grid size.
    pub(super) fn sum_partials(
        &mut self,
        out: Value,
        mm: Value,
        split: u32,
        threads: u32,
    ) -> Result<u32, LowerError> {
        let shape = self.g.ty(mm).shape.clone();
        if self.g.ty(out).shape != shape {
            return Err(LowerError::Unsupported {
                what: "a split-K epilogue whose output shape differs from the matmul's".into(),
                value: out,
            });
        }
        let numel = shape.numel();
        let ptr = self.scratch.as_ref().map(|s| s.ptr).expect("scratch set");
        let gid = self.global_thread(threads);
        let inb = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[gid.into(), Self::imm_u(numel)],
        );
        self.open();
        let acc = self.b.kernel.new_reg(RegType::F32);
        self.b.assign(acc, Op::Mov, &[Operand::f32(0.0)]);
        for r in 0..split as u64 {
            let e = self.iadd(Ix::R(gid), Ix::C(r * numel));
            let eo = self.ix_op(e);
            let bytes = self
                .b
                .op(RegType::U64, Op::MulWideU32, &[eo, Operand::U32(4)]);
            let addr = self
                .b
                .op(RegType::U64, Op::AddU64, &[ptr.into(), bytes.into()]);
            let x = self.b.kernel.new_reg(RegType::F32);
            self.b.push(Stmt::Load {
                dsts: vec![x],
                space: Space::Global,
                width: Width::B32,
                addr,
                offset: 0,
            });
            self.b.assign(acc, Op::FAdd, &[acc.into(), x.into()]);
        }
        let idx = self.unflatten(Ix::R(gid), &shape);
        self.matmul_epilogue(out, mm, &idx, &[acc])?;
        self.close_if(inb);
        Ok(numel.div_ceil(threads as u64).max(1) as u32)
    }

    /// GEMV: warp w of CTA b computes output columns `(b·warps + w)·columns + j` for all M
    /// rows. Columns past N read the last weight row (in bounds) and store nothing. Returns
    /// the grid.
    pub(super) fn gemv(
        &mut self,
        out: Value,
        mm: Value,
        (warps, v, cols): (u32, u32, u32),
    ) -> Result<[u32; 3], LowerError> {
        let (lhs, rhs, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let lead: Vec<Ix> = vec![Ix::C(0); batch_shape.rank()];
        let w = self.operand_base(rhs);

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let cta = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let warp = self.idiv_c(Ix::R(tid), 32);
        let lane = self.irem_c(Ix::R(tid), 32);
        let c0 = self.imul_c(Ix::R(cta), warps as u64);
        let wi = self.iadd(c0, warp);
        let col0 = self.imul_c(wi, cols as u64);
        // Per column j: its index, whether it exists, and the (clamped) weight row read.
        let mut col = Vec::new();
        let mut valid = Vec::new();
        let mut row = Vec::new();
        for j in 0..cols {
            let cj = self.iadd(col0, Ix::C(j as u64));
            let cj_op = self.ix_op(cj);
            let ok = self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[cj_op, Self::imm_u(n)]);
            let clamped = self.b.op(
                RegType::U32,
                Op::Select,
                &[ok.into(), cj_op, Self::imm_u(n - 1)],
            );
            col.push(cj);
            valid.push(ok);
            row.push(Ix::R(clamped));
        }
        let accs: Vec<Reg> = (0..m * cols as u64)
            .map(|_| {
                let a = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(a, Op::Mov, &[Operand::f32(0.0)]);
                a
            })
            .collect();
        let start = self.imul_c(lane, v as u64);
        let start = self.ix_op(start);
        let kv = self.b.kernel.new_reg(RegType::U32);
        self.open();
        // The weight rows at k .. k + v: one vector load each, issued before the left rows.
        let mut wv = Vec::new();
        for &rj in &row {
            let mut widx = lead.clone();
            widx.extend([rj, Ix::R(kv)]);
            wv.push(self.value(w, &widx, v)?);
        }
        for mi in 0..m as usize {
            let mut aidx = lead.clone();
            aidx.extend([Ix::C(mi as u64), Ix::R(kv)]);
            let av = self.value(lhs, &aidx, v)?;
            for (j, wj) in wv.iter().enumerate() {
                let acc = accs[mi * cols as usize + j];
                for i in 0..v as usize {
                    self.mac(acc, av[i], wj[i]);
                }
            }
        }
        self.close_for(kv, start, Self::imm_u(k), Operand::U32(32 * v));
        // Butterfly: every lane ends with the same sum (IEEE addition commutes exactly).
        for &acc in &accs {
            let mut x = 16;
            while x >= 1 {
                let t = self
                    .b
                    .op(RegType::F32, Op::ShflBfly, &[acc.into(), Operand::U32(x)]);
                self.b.assign(acc, Op::FAdd, &[acc.into(), t.into()]);
                x /= 2;
            }
        }
        // Output (row i, column j) is stored by lane (i·columns + j) mod 32, so a warp's
        // stores go out in parallel.
        for mi in 0..m as usize {
            for j in 0..cols as usize {
                let slot = (mi * cols as usize + j) as u32 % 32;
                let lane_op = self.ix_op(lane);
                let mine = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::Eq),
                    &[lane_op, Operand::U32(slot)],
                );
                let both = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[mine.into(), valid[j].into()]);
                self.open();
                let mut oidx = lead.clone();
                oidx.extend([Ix::C(mi as u64), col[j]]);
                self.matmul_epilogue(out, mm, &oidx, &[accs[mi * cols as usize + j]])?;
                self.close_if(both);
            }
        }
        let per_cta = warps as u64 * cols as u64;
        Ok([n.div_ceil(per_cta).max(1) as u32, 1, 1])
    }

    /// The CTA's place in a matmul grid: (column tile, row tile, batch index, K range start
    /// and end; the range is all of K without split-K).
    ///
    /// - `group = None`: grid x counts the `nt` column tiles, grid y is
    ///   `split · batch · mt` (row tile fastest, then batch, then K range).
    /// - `group = Some(G)`: grid x numbers the `mt · nt` tiles of one batch entry in groups
    ///   of G row tiles, grid y is `split · batch`. Tile `p` is in group `p / (G·nt)`, whose
    ///   first row tile is `first = G·(p / (G·nt))` and whose height is
    ///   `h = min(G, mt − first)`; inside it, row tile `first + (p mod G·nt) mod h` and column
    ///   tile `(p mod G·nt) / h`. Consecutive CTAs sweep G row tiles before moving to the next
    ///   column tile, so one wave of CTAs reads G row tiles of A and a few column tiles of B,
    ///   which stay in L2 (Triton's grouped ordering, `GROUP_SIZE_M`).
    pub(super) fn matmul_cta(
        &mut self,
        (mt, nt): (u64, u64),
        group: Option<u64>,
        batch_shape: &tessel_ir::Shape,
        k: u64,
        range_len: u64,
    ) -> Result<(Ix, Ix, Vec<Ix>, Operand, Operand), LowerError> {
        let ctx = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let cty = self.b.op(RegType::U32, Op::Special(Special::CtaidY), &[]);
        let (ntile, mtile, rest) = match group {
            None => {
                let mtile = self.irem_c(Ix::R(cty), mt);
                let rest = self.idiv_c(Ix::R(cty), mt);
                (Ix::R(ctx), mtile, rest)
            }
            Some(g) => {
                let span = g * nt;
                let grp = self.idiv_c(Ix::R(ctx), span);
                let inner = self.irem_c(Ix::R(ctx), span);
                let first = self.imul_c(grp, g);
                // Height of this group: min(G, mt - first).
                let fo = self.ix_op(first);
                let left = self.b.op(RegType::U32, Op::ISub, &[Self::imm_u(mt), fo]);
                let short = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[left.into(), Self::imm_u(g)],
                );
                let height = self.b.op(
                    RegType::U32,
                    Op::Select,
                    &[short.into(), left.into(), Self::imm_u(g)],
                );
                let io = self.ix_op(inner);
                let r = self.b.op(RegType::U32, Op::URem, &[io, height.into()]);
                let c = self.b.op(RegType::U32, Op::UDiv, &[io, height.into()]);
                let mtile = self.iadd(first, Ix::R(r));
                (Ix::R(c), mtile, Ix::R(cty))
            }
        };
        let batch = batch_shape.numel().max(1);
        let bidx = self.irem_c(rest, batch);
        let lead = self.unflatten(bidx, batch_shape);
        let Some(split) = self.scratch.as_ref().map(|s| s.split) else {
            return Ok((ntile, mtile, lead, Operand::U32(0), Self::imm_u(k)));
        };
        if k.div_ceil(range_len) != split as u64 {
            return Err(LowerError::Unsupported {
                what: format!(
                    "split_k {split} with K = {k}: ranges of {range_len} give {} ranges (the schedule must pick a split that leaves no range empty)",
                    k.div_ceil(range_len)
                ),
                value: self.own[0],
            });
        }
        let range = self.idiv_c(rest, batch);
        if let Some(s) = self.scratch.as_mut() {
            s.range = Some(range);
        }
        let start = self.imul_c(range, range_len);
        let start = self.ix_op(start);
        let end = self
            .b
            .op(RegType::U32, Op::IAdd, &[start, Self::imm_u(range_len)]);
        let past = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::GtU),
            &[end.into(), Self::imm_u(k)],
        );
        let end = self.b.op(
            RegType::U32,
            Op::Select,
            &[past.into(), Self::imm_u(k), end.into()],
        );
        Ok((ntile, mtile, lead, start, end.into()))
    }

    /// SIMT FMA GEMM: CTA (x, y) computes the `bm × bn` tile at columns `x·bn` and rows
    /// `(y mod mt)·bm` of batch `(y / mt) mod batch`, over the K range `y / (mt · batch)`
    /// (see [`Gen::matmul_cta`]). Returns the grid.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn simt(
        &mut self,
        out: Value,
        mm: Value,
        (bm, bn, bk, tm, tn, split): (u32, u32, u32, u32, u32, u32),
    ) -> Result<[u32; 3], LowerError> {
        let (lhs, rhs, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let batch = batch_shape.numel();
        let (mt, nt) = (m.div_ceil(bm as u64), n.div_ceil(bn as u64));
        let threads = (bm / tm) * (bn / tn);
        let tx_n = bn / tn;
        let range_len = split_range(k, bk, split);

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let (ntile, mtile, lead, k_start, k_end) =
            self.matmul_cta((mt, nt), None, &batch_shape, k, range_len)?;
        let m0 = self.imul_c(mtile, bm as u64);
        let n0 = self.imul_c(ntile, bn as u64);
        let tx = self.irem_c(Ix::R(tid), tx_n as u64);
        let ty = self.idiv_c(Ix::R(tid), tx_n as u64);

        // Shared tiles of f32: As[kk][i] (bk × bm) and Bs[kk][j] (bk × bn).
        let a_s = self.b.kernel.new_shared(4 * bk * bm, 16);
        let b_s = self.b.kernel.new_shared(4 * bk * bn, 16);
        let a_base = self.b.op(RegType::U32, Op::SharedAddr(a_s), &[]);
        let b_base = self.b.op(RegType::U32, Op::SharedAddr(b_s), &[]);

        let accs: Vec<Reg> = (0..tm * tn)
            .map(|_| {
                let a = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(a, Op::Mov, &[Operand::f32(0.0)]);
                a
            })
            .collect();

        let k0 = self.b.kernel.new_reg(RegType::U32);
        self.open();
        // Cooperative, guarded tile loads: out-of-range elements are 0 and add nothing
        // (0·b + acc = acc for every finite acc, -0 aside). Consecutive threads take
        // consecutive elements of the operand's contiguous dim — k for `x` and a `[N, K]`
        // weight, m or n for a transposed left operand or a plain `[K, N]` right one — so a
        // warp's loads are coalesced.
        let s = crate::schedule::matmul_shape(self.g, mm);
        let layouts = [
            (bm, a_base, true, s.lhs_k_contiguous),
            (bn, b_base, false, s.rhs_k_contiguous),
        ];
        for (rows, base, is_a, k_fastest) in layouts {
            // Four consecutive elements of the stored tensor per load when its rows are a
            // multiple of 4 (every vector then lies wholly inside or outside the tensor).
            let operand = if is_a { lhs } else { rhs };
            let stored = self.operand_base(operand);
            let vec4 = s.operands_2d && self.g.ty(stored).shape.last() % 4 == 0 && rows % 4 == 0;
            if vec4 {
                let (outer0, limit) = if is_a { (m0, m) } else { (n0, n) };
                let tile = SimtTile {
                    base,
                    rows,
                    bk,
                    k0,
                    k_fastest,
                };
                self.simt_load_vec4(stored, &lead, tile, (outer0, limit, k), (tid, threads))?;
                continue;
            }
            let per = (rows * bk).div_ceil(threads);
            for i in 0..per {
                let e = self.iadd(Ix::R(tid), Ix::C((i * threads) as u64));
                let e_op = self.ix_op(e);
                let in_tile = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[e_op, Operand::U32(rows * bk)],
                );
                let (kk, rr) = if k_fastest {
                    (self.irem_c(e, bk as u64), self.idiv_c(e, bk as u64))
                } else {
                    (self.idiv_c(e, rows as u64), self.irem_c(e, rows as u64))
                };
                let gk = self.iadd(Ix::R(k0), kk);
                let (g_row, limit) = if is_a {
                    (self.iadd(m0, rr), m)
                } else {
                    (self.iadd(n0, rr), n)
                };
                let gk_op = self.ix_op(gk);
                let gr_op = self.ix_op(g_row);
                let k_ok = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[gk_op, Self::imm_u(k)]);
                let r_ok = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[gr_op, Self::imm_u(limit)],
                );
                let ok = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[k_ok.into(), r_ok.into()]);
                let ok = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[ok.into(), in_tile.into()]);
                let val = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(val, Op::Mov, &[Operand::f32(0.0)]);
                self.open();
                let mut idx = lead.clone();
                if is_a {
                    idx.extend([g_row, gk]);
                } else {
                    idx.extend([gk, g_row]);
                }
                let x = self.value(if is_a { lhs } else { rhs }, &idx, 1)?;
                self.b.assign(val, Op::Mov, &[x[0]]);
                self.close_if(ok);
                // Shared offset (kk · rows + rr) · 4.
                let so = self.imul_c(kk, rows as u64);
                let so = self.iadd(so, rr);
                let so = self.imul_c(so, 4);
                let so_op = self.ix_op(so);
                let addr = self.b.op(RegType::U32, Op::IAdd, &[base.into(), so_op]);
                self.open();
                self.b.push(Stmt::Store {
                    space: Space::Shared,
                    width: Width::B32,
                    addr,
                    offset: 0,
                    values: vec![val.into()],
                });
                self.close_if(in_tile);
            }
        }
        self.b.push(Stmt::Barrier);
        // The slice's products in k order.
        let ty_off = self.imul_c(ty, (tm * 4) as u64);
        let ty_off = self.ix_op(ty_off);
        let tx_off = self.imul_c(tx, (tn * 4) as u64);
        let tx_off = self.ix_op(tx_off);
        let a_row = self.b.op(RegType::U32, Op::IAdd, &[a_base.into(), ty_off]);
        let b_row = self.b.op(RegType::U32, Op::IAdd, &[b_base.into(), tx_off]);
        // Each slice's products are summed into a fresh partial, then the partial is added
        // to the output's accumulator: error growth ~(bk + K/bk)·u instead of K·u.
        let parts: Vec<Reg> = (0..tm * tn)
            .map(|_| {
                let p = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(p, Op::Mov, &[Operand::f32(0.0)]);
                p
            })
            .collect();
        for kk in 0..bk {
            let av: Vec<Reg> = (0..tm)
                .map(|_| self.b.kernel.new_reg(RegType::F32))
                .collect();
            let bv: Vec<Reg> = (0..tn)
                .map(|_| self.b.kernel.new_reg(RegType::F32))
                .collect();
            self.load_shared_f32(&av, a_row, (kk * bm * 4) as i32);
            self.load_shared_f32(&bv, b_row, (kk * bn * 4) as i32);
            for i in 0..tm as usize {
                for j in 0..tn as usize {
                    self.mac(parts[i * tn as usize + j], av[i].into(), bv[j].into());
                }
            }
        }
        for (acc, part) in accs.iter().zip(&parts) {
            self.b
                .assign(*acc, Op::FAdd, &[(*acc).into(), (*part).into()]);
        }
        self.b.push(Stmt::Barrier);
        self.close_for(k0, k_start, k_end, Operand::U32(bk));

        // Epilogue, guarded per element.
        for i in 0..tm {
            for j in 0..tn {
                let ri = self.imul_c(ty, tm as u64);
                let ri = self.iadd(ri, Ix::C(i as u64));
                let gm = self.iadd(m0, ri);
                let cj = self.imul_c(tx, tn as u64);
                let cj = self.iadd(cj, Ix::C(j as u64));
                let gn = self.iadd(n0, cj);
                let (gm_op, gn_op) = (self.ix_op(gm), self.ix_op(gn));
                let m_ok = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[gm_op, Self::imm_u(m)]);
                let n_ok = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[gn_op, Self::imm_u(n)]);
                let ok = self
                    .b
                    .op(RegType::Pred, Op::PAnd, &[m_ok.into(), n_ok.into()]);
                self.open();
                let mut idx = lead.clone();
                idx.extend([gm, gn]);
                self.matmul_epilogue(out, mm, &idx, &[accs[(i * tn + j) as usize]])?;
                self.close_if(ok);
            }
        }
        Ok([
            nt.max(1) as u32,
            (mt * batch * k.div_ceil(range_len).max(1)).max(1) as u32,
            1,
        ])
    }

    /// Copies one K slice of a SIMT tile operand from the stored tensor `stored` to the
    /// shared tile `Xs[kk][r]` (`bk × rows` f32), four consecutive elements of the stored
    /// tensor's rows per load — along k (`k_fastest`, stored `[.., rows, K]`) or along the
    /// rows (stored `[.., K, rows]`) — so a warp reads contiguous memory; vectors outside
    /// the tensor or past K are zeros (they add nothing).
    fn simt_load_vec4(
        &mut self,
        stored: Value,
        lead: &[Ix],
        t: SimtTile,
        (outer0, limit, k): (Ix, u64, u64),
        (tid, threads): (Reg, u32),
    ) -> Result<(), LowerError> {
        let vecs = t.rows * t.bk / 4;
        for i in 0..vecs.div_ceil(threads) {
            let e = self.iadd(Ix::R(tid), Ix::C((i * threads) as u64));
            let in_tile = if (i + 1) * threads <= vecs {
                None
            } else {
                let eo = self.ix_op(e);
                Some(self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtU),
                    &[eo, Operand::U32(vecs)],
                ))
            };
            let (kk, rr) = if t.k_fastest {
                let q = self.irem_c(e, (t.bk / 4) as u64);
                (self.imul_c(q, 4), self.idiv_c(e, (t.bk / 4) as u64))
            } else {
                let q = self.irem_c(e, (t.rows / 4) as u64);
                (self.idiv_c(e, (t.rows / 4) as u64), self.imul_c(q, 4))
            };
            let gk = self.iadd(Ix::R(t.k0), kk);
            let gr = self.iadd(outer0, rr);
            let (gko, gro) = (self.ix_op(gk), self.ix_op(gr));
            let k_ok = self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[gko, Self::imm_u(k)]);
            let r_ok = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::LtU),
                &[gro, Self::imm_u(limit)],
            );
            let mut ok = self
                .b
                .op(RegType::Pred, Op::PAnd, &[k_ok.into(), r_ok.into()]);
            if let Some(it) = in_tile {
                ok = self.b.op(RegType::Pred, Op::PAnd, &[ok.into(), it.into()]);
            }
            let vals: Vec<Reg> = (0..4)
                .map(|_| {
                    let v = self.b.kernel.new_reg(RegType::F32);
                    self.b.assign(v, Op::Mov, &[Operand::f32(0.0)]);
                    v
                })
                .collect();
            self.open();
            let mut idx = lead.to_vec();
            if t.k_fastest {
                idx.extend([gr, gk]);
            } else {
                idx.extend([gk, gr]);
            }
            let x = self.value(stored, &idx, 4)?;
            for (v, xv) in vals.iter().zip(x) {
                self.b.assign(*v, Op::Mov, &[xv]);
            }
            self.close_if(ok);
            // Shared offset (kk · rows + rr) · 4: four along k are a column of Xs, four
            // along the rows one 16-byte row piece.
            let so = self.imul_c(kk, t.rows as u64);
            let so = self.iadd(so, rr);
            let so = self.imul_c(so, 4);
            let so_op = self.ix_op(so);
            let addr = self.b.op(RegType::U32, Op::IAdd, &[t.base.into(), so_op]);
            if in_tile.is_some() {
                self.open();
            }
            if t.k_fastest {
                for (j, v) in vals.iter().enumerate() {
                    self.b.push(Stmt::Store {
                        space: Space::Shared,
                        width: Width::B32,
                        addr,
                        offset: (j as u32 * t.rows * 4) as i32,
                        values: vec![(*v).into()],
                    });
                }
            } else {
                self.b.push(Stmt::Store {
                    space: Space::Shared,
                    width: Width::V4,
                    addr,
                    offset: 0,
                    values: vals.iter().map(|&v| v.into()).collect(),
                });
            }
            if let Some(it) = in_tile {
                self.close_if(it);
            }
        }
        Ok(())
    }

    /// Loads consecutive f32 from shared memory at `addr + offset` into `dst`, 16 bytes at a
    /// time where the count allows (offsets are multiples of 16 when `dst.len()` is 4).
    fn load_shared_f32(&mut self, dst: &[Reg], addr: Reg, offset: i32) {
        let mut i = 0;
        while i < dst.len() {
            let (w, n) = match dst.len() - i {
                x if x >= 4 && (offset + 4 * i as i32) % 16 == 0 => (Width::V4, 4),
                x if x >= 2 && (offset + 4 * i as i32) % 8 == 0 => (Width::V2, 2),
                _ => (Width::B32, 1),
            };
            self.b.push(Stmt::Load {
                dsts: dst[i..i + n].to_vec(),
                space: Space::Shared,
                width: w,
                addr,
                offset: offset + 4 * i as i32,
            });
            i += n;
        }
    }
}

/// The K range length of each of `split` ranges: whole slices of `bk`, the last range
/// possibly shorter (K itself when `split` is 1).
pub(super) fn split_range(k: u64, bk: u32, split: u32) -> u64 {
    if split <= 1 {
        return k.max(1);
    }
    k.div_ceil(bk as u64).div_ceil(split as u64).max(1) * bk as u64
}

/// One operand's shared tile of the SIMT GEMM: `Xs[kk][r]`, `bk × rows` f32 at `base`, for
/// the K slice starting at `k0`; `k_fastest` when the stored tensor is contiguous along K.
#[derive(Copy, Clone)]
struct SimtTile {
    base: Reg,
    rows: u32,
    bk: u32,
    k0: Reg,
    k_fastest: bool,
}
