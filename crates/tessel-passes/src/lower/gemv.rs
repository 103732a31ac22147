//! The SIMT GEMV for decode ([`TileConfig::Gemv`]): M ≤ 16 rows against a weight read
//! along K, `columns` output columns per warp, a butterfly over the warp.

use super::{Gen, Ix, LowerError};
use tessel_ir::graph::MatmulRead;
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Special};
use tessel_ir::{Reg, Value};

impl Gen<'_> {
    /// GEMV: warp w of CTA b computes output columns `(b·warps + w)·columns + j` for all M
    /// rows, `unroll` chunks of k per main-loop iteration. Columns past N read the last
    /// weight row (in bounds) and store nothing. Returns the grid.
    pub(super) fn gemv(
        &mut self,
        out: Value,
        mm: Value,
        (warps, v, cols, unroll): (u32, u32, u32, u32),
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
        // Lane l's chunks of `v` at k = l·v + i·32·v, i in order: the main loop takes
        // `unroll` chunks per iteration up to the last whole group of `32·v·unroll`, all
        // loads of an iteration issued before its products (the loads in flight that reach
        // the copy bandwidth); the rest, one chunk per iteration. Each accumulator still
        // sees its chunks in k order, so the bits do not depend on `unroll`.
        let group = 32 * v as u64 * unroll as u64;
        let k_main = k / group * group;
        let lane_k = self.imul_c(lane, v as u64);
        for (lo, hi, u) in [(0, k_main, unroll), (k_main, k, 1)] {
            if lo >= hi {
                continue;
            }
            let start = self.iadd(lane_k, Ix::C(lo));
            let start = self.ix_op(start);
            let kv = self.b.kernel.new_reg(RegType::U32);
            self.open();
            self.gemv_chunks((lhs, &x, w), (&lead, &row), (kv, v, u), m, &accs)?;
            let step = 32 * v * u;
            self.close_for(kv, start, Self::imm_u(hi), Operand::U32(step));
        }
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

    /// One GEMV loop body: `u` chunks of `v` elements at k = `kv + i·32·v`, i < u — first
    /// every weight row's vector loads, then each chunk's left rows and their products into
    /// `accs` (row-major over M × columns).
    fn gemv_chunks(
        &mut self,
        (lhs, x, w): (Value, &MatmulRead, Value),
        (lead, row): (&[Ix], &[Ix]),
        (kv, v, u): (Reg, u32, u32),
        m: u64,
        accs: &[Reg],
    ) -> Result<(), LowerError> {
        let cols = row.len();
        let mut wv = Vec::new();
        let mut ks = Vec::new();
        for i in 0..u as u64 {
            let ki = self.iadd(Ix::R(kv), Ix::C(i * 32 * v as u64));
            for &rj in row {
                let mut widx = lead.to_vec();
                widx.extend([rj, ki]);
                wv.push(self.value(w, &widx, v)?);
            }
            ks.push(ki);
        }
        for (i, &ki) in ks.iter().enumerate() {
            for mi in 0..m as usize {
                let mut aidx = lead.to_vec();
                aidx.extend([Ix::C(mi as u64), ki]);
                let av = self.operand_value((lhs, x), &aidx, v)?;
                for j in 0..cols {
                    let acc = accs[mi * cols + j];
                    let wj = &wv[i * cols + j];
                    for e in 0..v as usize {
                        self.mac(acc, av[e], wj[e]);
                    }
                }
            }
        }
        Ok(())
    }
}
