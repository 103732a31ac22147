//! The elementwise and row-reduction schedules ([`TileConfig::Elementwise`],
//! [`TileConfig::RowReduction`]): the thread mapping and the reduction order of
//! [`crate::schedule::reduction_order`]; the values themselves come from `values.rs`.

use super::{class, Gen, Ix, LowerError};
use crate::analysis::row_shape;
use tessel_ir::graph::{Op as GOp, ReduceOp};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{Reg, Shape, Value};

/// Most elements of a row one thread holds in registers ([`Gen::resident_rows`]): 32, four
/// chunks of 8 (the softmax backward's row keeps four values per element: its two
/// operands, `exp(x - max)` and the probability, within the 255 registers of a thread with
/// room for the rest), or up to 32 chunks of one element — short rows such as GQA's sum
/// over a group's 5 heads, whose loads are then all in flight at once instead of one per
/// loop iteration.
const MAX_RESIDENT_ELEMENTS: u64 = 32;

/// Where a row-reduction thread works: its row (maybe past the last), the rows, the
/// shape of the leading dims, its lane within the row and its row within the CTA, the row
/// length and the chunks per thread.
struct RowGeometry {
    row: Ix,
    nrows: u64,
    lead_shape: Shape,
    lane: Ix,
    row_in_cta: Ix,
    d: u64,
    per_thread: u64,
}

impl Gen<'_> {
    /// Elementwise: thread `t` computes elements `t·v .. t·v + v` of the flattened output.
    /// Returns the grid size in CTAs.
    pub(super) fn elementwise(
        &mut self,
        outs: &[Value],
        threads: u32,
        v: u32,
    ) -> Result<u32, LowerError> {
        let shape = self.g.ty(outs[0]).shape.clone();
        let numel = shape.numel();
        let gid = self.global_thread(threads);
        let first = self
            .b
            .op(RegType::U32, Op::IMulLo, &[gid.into(), Operand::U32(v)]);
        let inb = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[first.into(), Self::imm_u(numel)],
        );
        self.open();
        let idx = self.unflatten(Ix::R(first), &shape);
        for &out in outs {
            let vals = self.value(out, &idx, v)?;
            self.store(out, &idx, &vals)?;
        }
        self.close_if(inb);
        Ok(numel.div_ceil(v as u64 * threads as u64).max(1) as u32)
    }

    /// Row reduction per the signature in `schedule::reduction_order`. Returns the grid size.
    pub(super) fn row_reduction(
        &mut self,
        out: Value,
        reductions: &[Value],
        tpr: u32,
        rows_per_cta: u32,
        v: u32,
    ) -> Result<u32, LowerError> {
        let rows_shape = row_shape(self.g, out);
        let rank = rows_shape.rank();
        let d = rows_shape.last();
        let nrows = rows_shape.numel() / d.max(1);
        let lead_shape = Shape(rows_shape.0[..rank - 1].to_vec());

        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let cta = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let row_in_cta = self.idiv_c(Ix::R(tid), tpr as u64);
        let lane = self.irem_c(Ix::R(tid), tpr as u64);
        let cta_row0 = self.imul_c(Ix::R(cta), rows_per_cta as u64);
        let row = self.iadd(cta_row0, row_in_cta);
        let per_thread = d.div_ceil(tpr as u64 * v as u64);
        if per_thread * v as u64 <= MAX_RESIDENT_ELEMENTS && d % v as u64 == 0 {
            let geometry = RowGeometry {
                row,
                nrows,
                lead_shape,
                lane,
                row_in_cta,
                d,
                per_thread,
            };
            return self.resident_rows(out, reductions, (tpr, rows_per_cta, v), geometry);
        }
        let row_op = self.ix_op(row);
        let valid = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[row_op, Self::imm_u(nrows)],
        );
        let lead = self.unflatten(row, &lead_shape);
        let first_chunk = self.imul_c(lane, v as u64);
        let first_op = self.ix_op(first_chunk);
        let stride = Operand::U32(tpr * v);

        for &r in reductions {
            let GOp::Reduce { op: rop, arg, .. } = self.g.ops[r] else {
                unreachable!("fuse lists only reductions");
            };
            let dt = self.g.ty(arg).dtype;
            let cls = class(dt);
            let identity = reduce_identity(rop, cls).ok_or_else(|| LowerError::Unsupported {
                what: format!("reduction {rop:?} of {dt}"),
                value: r,
            })?;
            let acc = self.b.kernel.new_reg(cls);
            self.b.assign(acc, Op::Mov, &[identity]);
            // Each thread folds its chunks in order.
            self.open();
            let c = self.b.kernel.new_reg(RegType::U32);
            self.open();
            let mut idx = lead.clone();
            idx.push(Ix::R(c));
            let vals = self.value(arg, &idx, v)?;
            for x in vals {
                self.combine(rop, cls, acc, x);
            }
            self.close_for(c, first_op, Self::imm_u(d), stride);
            self.close_if(valid);
            let acc = self.row_combine(rop, cls, acc, (tpr, rows_per_cta), (lane, row_in_cta));
            let mut res: Operand = acc.into();
            let rdt = self.g.ty(r).dtype;
            if rdt != dt {
                res = self.convert(res, dt, rdt);
            }
            self.row_value.insert(r, res);
        }

        // Epilogue over the row (or one value per row for a materialised reduction).
        self.open();
        if self.g.ty(out).shape.last() == 1 && d != 1 {
            let lane_op = self.ix_op(lane);
            let leader = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::Eq),
                &[lane_op, Operand::U32(0)],
            );
            self.open();
            let mut idx = lead.clone();
            idx.push(Ix::C(0));
            let vals = self.value(out, &idx, 1)?;
            self.store(out, &idx, &vals)?;
            self.close_if(leader);
        } else {
            // Per-row values ([.., 1]) are computed once, before the loop.
            let mut idx0 = lead.clone();
            idx0.push(Ix::C(0));
            for pv in self.row_values_in_cone(out) {
                self.value(pv, &idx0, 1)?;
            }
            let c = self.b.kernel.new_reg(RegType::U32);
            self.open();
            let mut idx = lead.clone();
            idx.push(Ix::R(c));
            let vals = self.value(out, &idx, v)?;
            self.store(out, &idx, &vals)?;
            self.close_for(c, first_op, Self::imm_u(d), stride);
        }
        self.close_if(valid);
        Ok(nrows.div_ceil(rows_per_cta as u64).max(1) as u32)
    }

    /// The row reduction with every thread's chunks held in registers: the loops over a
    /// row's chunks unrolled (at most [`MAX_RESIDENT_ELEMENTS`] elements per thread), so
    /// each value of the row — the loaded operands, `exp(x - max)` of a softmax — is
    /// computed once and read again by the later reductions and the epilogue instead of
    /// being loaded and recomputed per pass. The order of every sum is the looped
    /// kernel's (each thread its chunks in order, then the butterfly), so the bits are
    /// too. Rows past the last are read at the last row (so that no load or shuffle sits
    /// under a branch) and not stored; a chunk past the row's end (when the threads' chunks
    /// overrun it) is read at the row's first chunk and left out of the sums and the stores.
    fn resident_rows(
        &mut self,
        out: Value,
        reductions: &[Value],
        (tpr, rows_per_cta, v): (u32, u32, u32),
        geo: RowGeometry,
    ) -> Result<u32, LowerError> {
        let RowGeometry {
            row,
            nrows,
            lead_shape,
            lane,
            row_in_cta,
            d,
            per_thread,
        } = geo;
        let row_op = self.ix_op(row);
        let valid = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[row_op, Self::imm_u(nrows)],
        );
        let last_row = Self::imm_u(nrows.saturating_sub(1));
        let row_c = self.umin(row_op, last_row);
        let row_c = match row_c {
            Operand::Reg(r) => Ix::R(r),
            Operand::U32(x) => Ix::C(x as u64),
            _ => unreachable!("row indices are u32"),
        };
        let lead = self.unflatten(row_c, &lead_shape);
        let first_chunk = self.imul_c(lane, v as u64);
        let overrun = per_thread * tpr as u64 * v as u64 > d;
        // Each chunk's column and, for the last when the threads' chunks overrun the row
        // (only the last can: the others end before (per_thread - 1) · tpr · v < d),
        // whether it lies inside; past the end it is read at column 0.
        let mut chunks: Vec<(Ix, Option<Reg>)> = Vec::new();
        for i in 0..per_thread {
            let c = self.iadd(first_chunk, Ix::C(i * tpr as u64 * v as u64));
            if overrun && i + 1 == per_thread {
                let (inside, cc) = self.clamp_below(c, d);
                chunks.push((cc, Some(inside)));
            } else {
                chunks.push((c, None));
            }
        }
        let at = |chunk: Ix| {
            let mut idx = lead.clone();
            idx.push(chunk);
            idx
        };

        for &r in reductions {
            let GOp::Reduce { op: rop, arg, .. } = self.g.ops[r] else {
                unreachable!("fuse lists only reductions");
            };
            let dt = self.g.ty(arg).dtype;
            let cls = class(dt);
            let identity = reduce_identity(rop, cls).ok_or_else(|| LowerError::Unsupported {
                what: format!("reduction {rop:?} of {dt}"),
                value: r,
            })?;
            let acc = self.b.kernel.new_reg(cls);
            self.b.assign(acc, Op::Mov, &[identity]);
            for &(c, inside) in &chunks {
                let vals = self.value(arg, &at(c), v)?;
                for x in vals {
                    match inside {
                        None => self.combine(rop, cls, acc, x),
                        Some(p) => {
                            let t = self.b.kernel.new_reg(cls);
                            self.b.assign(t, Op::Mov, &[acc.into()]);
                            self.combine(rop, cls, t, x);
                            self.b
                                .assign(acc, Op::Select, &[p.into(), t.into(), acc.into()]);
                        }
                    }
                }
            }
            let acc = self.row_combine(rop, cls, acc, (tpr, rows_per_cta), (lane, row_in_cta));
            let mut res: Operand = acc.into();
            let rdt = self.g.ty(r).dtype;
            if rdt != dt {
                res = self.convert(res, dt, rdt);
            }
            self.row_value.insert(r, res);
        }

        if self.g.ty(out).shape.last() == 1 && d != 1 {
            let mut idx = lead.clone();
            idx.push(Ix::C(0));
            let vals = self.value(out, &idx, 1)?;
            let lane_op = self.ix_op(lane);
            let leader = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::Eq),
                &[lane_op, Operand::U32(0)],
            );
            let store = self
                .b
                .op(RegType::Pred, Op::PAnd, &[leader.into(), valid.into()]);
            self.open();
            self.store(out, &idx, &vals)?;
            self.close_if(store);
        } else {
            for &(c, inside) in &chunks {
                let idx = at(c);
                let vals = self.value(out, &idx, v)?;
                let store = match inside {
                    None => valid,
                    Some(p) => self
                        .b
                        .op(RegType::Pred, Op::PAnd, &[p.into(), valid.into()]),
                };
                self.open();
                self.store(out, &idx, &vals)?;
                self.close_if(store);
            }
        }
        Ok(nrows.div_ceil(rows_per_cta as u64).max(1) as u32)
    }

    /// A row's partial results combined across the `tpr` threads that hold it: the
    /// butterfly within the warp (or the sub-warp of the row), then, for rows wider than a
    /// warp, the warps' results in warp order through shared memory. Every thread of the
    /// row gets the result (the register returned).
    fn row_combine(
        &mut self,
        rop: ReduceOp,
        cls: RegType,
        acc: Reg,
        (tpr, rows_per_cta): (u32, u32),
        (lane, row_in_cta): (Ix, Ix),
    ) -> Reg {
        self.butterfly(rop, cls, acc, tpr);
        if tpr > 32 {
            let wpr = tpr / 32;
            let smem = self.b.kernel.new_shared(4 * wpr * rows_per_cta, 4);
            let base = self.b.op(RegType::U32, Op::SharedAddr(smem), &[]);
            // Slot of this row's warp partials: (row_in_cta * wpr) * 4 bytes.
            let slot0 = self.imul_c(row_in_cta, 4 * wpr as u64);
            let slot0 = self.ix_op(slot0);
            let row_base = self.b.op(RegType::U32, Op::IAdd, &[base.into(), slot0]);
            let warp = self.idiv_c(lane, 32);
            let woff = self.imul_c(warp, 4);
            let woff = self.ix_op(woff);
            let my_slot = self.b.op(RegType::U32, Op::IAdd, &[row_base.into(), woff]);
            let lane32 = self.irem_c(lane, 32);
            let lane32 = self.ix_op(lane32);
            let leader = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::Eq),
                &[lane32, Operand::U32(0)],
            );
            self.b.open();
            self.b.push(Stmt::Store {
                space: Space::Shared,
                width: Width::B32,
                addr: my_slot,
                offset: 0,
                values: vec![acc.into()],
            });
            let then_body = self.b.close();
            self.b.push(Stmt::If {
                cond: leader,
                then_body,
                else_body: vec![],
            });
            self.b.push(Stmt::Barrier);
            self.b.push(Stmt::Load {
                dsts: vec![acc],
                space: Space::Shared,
                width: Width::B32,
                addr: row_base,
                offset: 0,
            });
            for w in 1..wpr {
                let t = self.b.kernel.new_reg(cls);
                self.b.push(Stmt::Load {
                    dsts: vec![t],
                    space: Space::Shared,
                    width: Width::B32,
                    addr: row_base,
                    offset: (4 * w) as i32,
                });
                self.combine(rop, cls, acc, t.into());
            }
        }
        acc
    }

    /// `acc ⊕= shfl.bfly(acc, m)` for m = tpr / 2, .., 2, 1: the butterfly of a row held by
    /// `tpr` consecutive lanes (a power of two ≤ 32), leaving the row's result in each.
    pub(super) fn butterfly(&mut self, rop: ReduceOp, cls: RegType, acc: Reg, tpr: u32) {
        let mut m = tpr.min(32) / 2;
        while m >= 1 {
            let t = self.b.op(cls, Op::ShflBfly, &[acc.into(), Operand::U32(m)]);
            self.combine(rop, cls, acc, t.into());
            m /= 2;
        }
    }

    /// `acc = acc ⊕ x` for a reduction: f32 add/max/min (NaN-propagating), i32 wrapping add
    /// or signed max/min.
    pub(super) fn combine(&mut self, rop: ReduceOp, cls: RegType, acc: Reg, x: Operand) {
        match (rop, cls) {
            (ReduceOp::Sum, RegType::F32) => self.b.assign(acc, Op::FAdd, &[acc.into(), x]),
            (ReduceOp::Max, RegType::F32) => self.b.assign(acc, Op::FMax, &[acc.into(), x]),
            (ReduceOp::Min, RegType::F32) => self.b.assign(acc, Op::FMin, &[acc.into(), x]),
            (ReduceOp::Sum, _) => self.b.assign(acc, Op::IAdd, &[acc.into(), x]),
            (op, _) => {
                let lt = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[acc.into(), x]);
                // max keeps x when acc < x; min keeps acc when acc < x.
                let (a, b) = if op == ReduceOp::Max {
                    (x, acc.into())
                } else {
                    (acc.into(), x)
                };
                self.b.assign(acc, Op::Select, &[lt.into(), a, b]);
            }
        }
    }

    /// Values of shape [.., 1] computed inside this kernel from its reductions, in order.
    pub(super) fn row_values_in_cone(&self, out: Value) -> Vec<Value> {
        let rows = row_shape(self.g, out);
        let mut per_row = rows.0.clone();
        if let Some(l) = per_row.last_mut() {
            *l = 1;
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![out];
        while let Some(v) = stack.pop() {
            if !seen.insert(v) || (v != out && self.is_leaf(v)) {
                continue;
            }
            stack.extend(self.g.ops[v].args());
        }
        seen.into_iter()
            .filter(|&v| {
                self.g.ty(v).shape.0 == per_row
                    && !self.is_leaf(v)
                    && !matches!(self.g.ops[v], GOp::Const { .. })
            })
            .collect()
    }
}

/// The identity a reduction's accumulator starts from: -0 for an f32 sum (so a sum of
/// -0s stays -0), ∓inf for f32 max/min, 0 and i32's extremes for integers; `None` for a
/// register class no reduction runs in.
pub(super) fn reduce_identity(rop: ReduceOp, cls: RegType) -> Option<Operand> {
    Some(match (rop, cls) {
        (ReduceOp::Sum, RegType::F32) => Operand::f32(-0.0),
        (ReduceOp::Max, RegType::F32) => Operand::f32(f32::NEG_INFINITY),
        (ReduceOp::Min, RegType::F32) => Operand::f32(f32::INFINITY),
        (ReduceOp::Sum, RegType::U32) => Operand::U32(0),
        (ReduceOp::Max, RegType::U32) => Operand::U32(i32::MIN as u32),
        (ReduceOp::Min, RegType::U32) => Operand::U32(i32::MAX as u32),
        _ => return None,
    })
}
