//! The SIMT FMA tile ([`TileConfig::Simt`], the `exact` schedule): `bm × bn` outputs per
//! CTA, K in slices of `bk` through shared memory, two-level sums (slice partials added in
//! order).

use super::matmul::split_range;
use super::{Gen, Ix, LowerError};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{Reg, Value};

/// One operand's shared tile of the SIMT GEMM: `Xs[kk][r]`, `bk × rows` f32 at `base`, for
/// the K slice starting at `k0`; `k_fastest` when the stored tensor is contiguous along K.
#[derive(Copy, Clone)]
pub(super) struct SimtTile {
    pub(super) base: Reg,
    pub(super) rows: u32,
    pub(super) bk: u32,
    pub(super) k0: Reg,
    pub(super) k_fastest: bool,
}

impl Gen<'_> {
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
        let reads = self.operand_reads(mm);
        for (rows, base, is_a, k_fastest) in layouts {
            // Four consecutive elements of the stored tensor per load when its rows are a
            // multiple of 4 (every vector then lies wholly inside or outside the tensor);
            // a widened operand's 16-bit tensor, its values exact in the f32 registers.
            let stored = reads[if is_a { 0 } else { 1 }].stored;
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
                let operand = if is_a {
                    (lhs, &reads[0])
                } else {
                    (rhs, &reads[1])
                };
                let x = self.operand_value(operand, &idx, 1)?;
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
                let acc = [accs[(i * tn + j) as usize]];
                self.guarded_epilogue((out, mm), &lead, (gm, m), (gn, n), &acc)?;
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
    pub(super) fn simt_load_vec4(
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
    pub(super) fn load_shared_f32(&mut self, dst: &[Reg], addr: Reg, offset: i32) {
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
