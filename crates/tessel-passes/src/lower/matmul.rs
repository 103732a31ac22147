//! Pieces every matmul schedule shares: the operands and (M, K, N), the CTA order over
//! output tiles and K ranges, the fma, and the split-K sum of partials (see `schedule.rs`
//! for when each schedule is chosen and `schedule::reduction_order` for every sum).
//!
//! Both compute each output element into one f32 accumulator; the epilogue (the group's
//! output as a function of the matmul value) is then generated per element with the
//! accumulator standing in for the matmul, and stored once.

use super::{Gen, Ix, LowerError};
use tessel_ir::graph::{MatmulRead, Op as GOp};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{Reg, Value};

/// The K range length of each of `split` ranges: whole slices of `bk`, the last range
/// possibly shorter (K itself when `split` is 1).
pub(super) fn split_range(k: u64, bk: u32, split: u32) -> u64 {
    if split <= 1 {
        return k.max(1);
    }
    k.div_ceil(bk as u64).div_ceil(split as u64).max(1) * bk as u64
}

impl Gen<'_> {
    /// The operands of the matmul `mm` as its kernel reads them, `[lhs, rhs]`: the
    /// materialised tensors under a permute and, when both operands are widening casts of
    /// 16-bit tensors, under the cast ([`tessel_ir::graph::Graph::matmul_reads`]). A 16-bit
    /// value is held in an f32 register exactly, so a load of the 16-bit tensor gives the
    /// f32 operand's value, with no conversion left to do.
    pub(super) fn operand_reads(&self, mm: Value) -> [MatmulRead; 2] {
        self.g
            .matmul_reads(mm)
            .expect("matmul groups list their matmul")
    }

    /// `lanes` elements of the matmul operand `x` from `idx` along its last dim (the
    /// operand's own index), loaded from the tensor its `read` names: a widened operand
    /// from its 16-bit tensor through the permute, never from an f32 copy (which exists
    /// only when the program also returns it). Other operands are computed as any value.
    pub(super) fn operand_value(
        &mut self,
        (x, read): (Value, &MatmulRead),
        idx: &[Ix],
        lanes: u32,
    ) -> Result<Vec<Operand>, LowerError> {
        if !read.widened {
            return self.value(x, idx, lanes);
        }
        let Some(perm) = &read.perm else {
            return self.value(read.stored, idx, lanes);
        };
        let mut out = Vec::with_capacity(lanes as usize);
        for j in 0..lanes {
            let mut ai = vec![Ix::C(0); idx.len()];
            for (i, &p) in perm.iter().enumerate() {
                ai[p as usize] = if i + 1 == idx.len() {
                    self.iadd(idx[i], Ix::C(j as u64))
                } else {
                    idx[i]
                };
            }
            out.extend(self.value(read.stored, &ai, 1)?);
        }
        Ok(out)
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
    pub(super) fn mac(&mut self, acc: Reg, a: Operand, b: Operand) {
        self.b.assign(acc, Op::FFma, &[a, b, acc.into()]);
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
                let (ntile, mtile) = self.grouped_tile(Ix::R(ctx), (mt, nt), g);
                (ntile, mtile, Ix::R(cty))
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

    /// Tile `p` of the grouped order over `mt × nt` output tiles in groups of `g` row
    /// tiles ([`Gen::matmul_cta`]): (column tile, row tile).
    pub(super) fn grouped_tile(&mut self, p: Ix, (mt, nt): (u64, u64), g: u64) -> (Ix, Ix) {
        let span = g * nt;
        let grp = self.idiv_c(p, span);
        let inner = self.irem_c(p, span);
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
        (Ix::R(c), mtile)
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
        if self.g.matmul_layout(mm, out) != Some(tessel_ir::graph::MatmulLayout::Rows) {
            return Err(LowerError::Unsupported {
                what: "a split-K epilogue that is a row epilogue".into(),
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
}
