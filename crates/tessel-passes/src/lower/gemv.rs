//! The SIMT GEMV for decode ([`TileConfig::Gemv`]): M ≤ 16 rows against a weight read
//! along K, `columns` output columns per warp, a butterfly over the warp.

use super::{Gen, Ix, LowerError};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Special};
use tessel_ir::{Reg, Value};

impl Gen<'_> {
    /// GEMV: warp w of CTA b computes output columns `(b·warps + w)·columns + j` for all M
    /// rows. Columns past N read the last weight row (in bounds) and store nothing. Returns
    /// the grid.
    pub(super) fn gemv(
        &mut self,
        out: Value,
        mm: Value,
        (warps, v, cols): (u32, u32, u32),
    ) -> Result<[u32; 3], LowerError> {
        let (lhs, _, batch_shape, (m, k, n)) = self.matmul_operands(mm);
        let lead: Vec<Ix> = vec![Ix::C(0); batch_shape.rank()];
        let [x, w] = self.operand_reads(mm);
        let w = w.stored;

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
            let av = self.operand_value((lhs, &x), &aidx, v)?;
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
}
