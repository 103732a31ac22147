//! Values at an index: the walk from a group's output back to materialised values, through
//! every shape op by rewriting the index (a broadcast pins dims to 0, a slice adds its
//! start, a permute reorders, a reshape goes through the flat index, a concat branches —
//! or selects among its arms where a kernel needs straight-line code), memoised per
//! scope. `lanes` consecutive elements along the last axis stay one vector
//! where the op keeps them contiguous and aligned.

use super::{class, Gen, Ix, LowerError};
use tessel_ir::graph::Op as GOp;
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Stmt};
use tessel_ir::{DType, Reg, Shape, Value};

impl Gen<'_> {
    /// `lanes` values of `v` at `idx`, `idx`, ..., with the last index advanced by 0..lanes.
    pub(super) fn value(
        &mut self,
        v: Value,
        idx: &[Ix],
        lanes: u32,
    ) -> Result<Vec<Operand>, LowerError> {
        let key = (v, idx.to_vec(), lanes);
        if let Some(x) = self.lookup(&key) {
            return Ok(x);
        }
        let r = self.value_uncached(v, idx, lanes)?;
        if let Some(m) = self.memo.last_mut() {
            m.insert(key, r.clone());
        }
        Ok(r)
    }

    /// One index per lane (the fallback where lanes cannot stay together).
    pub(super) fn per_lane(
        &mut self,
        v: Value,
        idx: &[Ix],
        lanes: u32,
    ) -> Result<Vec<Operand>, LowerError> {
        let mut out = Vec::with_capacity(lanes as usize);
        for j in 0..lanes {
            let mut li = idx.to_vec();
            if let Some(l) = li.last_mut() {
                *l = self.iadd(*l, Ix::C(j as u64));
            }
            out.extend(self.value(v, &li, 1)?);
        }
        Ok(out)
    }

    pub(super) fn value_uncached(
        &mut self,
        v: Value,
        idx: &[Ix],
        lanes: u32,
    ) -> Result<Vec<Operand>, LowerError> {
        if let Some(xs) = self.lane_value.get(&v) {
            if xs.len() == lanes as usize {
                return Ok(xs.clone());
            }
            return Err(LowerError::Unsupported {
                what: format!("{lanes} lanes of a value held for {}", xs.len()),
                value: v,
            });
        }
        if let Some(&x) = self.row_value.get(&v) {
            return Ok(vec![x; lanes as usize]);
        }
        if let Some(tile) = self.staged.filter(|t| t.mm == v) {
            return Ok(self.staged_value(tile, idx, lanes));
        }
        if self.is_leaf(v) {
            return self.load(v, idx, lanes);
        }
        let g = self.g;
        let ty = g.ty(v).clone();
        let dt = ty.dtype;
        let rank = ty.shape.rank();
        match &g.ops[v] {
            GOp::Input { .. } => self.load(v, idx, lanes),
            GOp::Const { value } => {
                let x = self.constant(*value, dt);
                Ok(vec![x; lanes as usize])
            }
            GOp::Iota { axis } => {
                let a = *axis as usize;
                let mut out = Vec::new();
                for j in 0..lanes {
                    let i = if a + 1 == rank {
                        self.iadd(idx[a], Ix::C(j as u64))
                    } else {
                        idx[a]
                    };
                    let io = self.ix_op(i);
                    out.push(self.convert(io, DType::I32, dt));
                }
                Ok(out)
            }
            GOp::Unary { op, arg } => {
                let a = self.value(*arg, idx, lanes)?;
                a.into_iter().map(|x| self.unary(*op, dt, x, v)).collect()
            }
            GOp::Binary { op, lhs, rhs } => {
                let odt = g.ty(*lhs).dtype;
                let a = self.value(*lhs, idx, lanes)?;
                let b = self.value(*rhs, idx, lanes)?;
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| self.binary(*op, odt, x, y, v))
                    .collect()
            }
            GOp::Select {
                cond,
                on_true,
                on_false,
            } => {
                let c = self.value(*cond, idx, lanes)?;
                let t = self.value(*on_true, idx, lanes)?;
                let f = self.value(*on_false, idx, lanes)?;
                let cls = class(dt);
                Ok((0..lanes as usize)
                    .map(|j| self.b.op(cls, Op::Select, &[c[j], t[j], f[j]]).into())
                    .collect())
            }
            GOp::Cast { arg } => {
                let from = g.ty(*arg).dtype;
                let a = self.value(*arg, idx, lanes)?;
                Ok(a.into_iter().map(|x| self.convert(x, from, dt)).collect())
            }
            GOp::Broadcast { arg } => {
                let sa = g.ty(*arg).shape.clone();
                let ai: Vec<Ix> = idx
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| if sa.0[i] == 1 { Ix::C(0) } else { x })
                    .collect();
                if lanes > 1 && sa.last() == 1 && ty.shape.last() != 1 {
                    let x = self.value(*arg, &ai, 1)?;
                    Ok(vec![x[0]; lanes as usize])
                } else {
                    self.value(*arg, &ai, lanes)
                }
            }
            GOp::Reshape { arg } => {
                let sa = g.ty(*arg).shape.clone();
                let squeeze =
                    |s: &Shape| s.0.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
                if squeeze(&sa) == squeeze(&ty.shape) {
                    // Only size-1 dims differ: map the other dims in order.
                    let src: Vec<Ix> = idx
                        .iter()
                        .zip(&ty.shape.0)
                        .filter(|(_, &d)| d != 1)
                        .map(|(&i, _)| i)
                        .collect();
                    let mut it = src.into_iter();
                    let ai: Vec<Ix> =
                        sa.0.iter()
                            .map(|&d| {
                                if d == 1 {
                                    Ix::C(0)
                                } else {
                                    it.next().unwrap_or(Ix::C(0))
                                }
                            })
                            .collect();
                    let keeps_lanes = ty.shape.last() != 1 && sa.last() == ty.shape.last();
                    if lanes == 1 || keeps_lanes {
                        return self.value(*arg, &ai, lanes);
                    }
                    return self.per_lane(v, idx, lanes);
                }
                if lanes > 1
                    && (ty.shape.last() % lanes as u64 != 0 || sa.last() % lanes as u64 != 0)
                {
                    return self.per_lane(v, idx, lanes);
                }
                // The flat index is a u32: a reshape of a fused attention's scores (which
                // `check` lets pass 2^32 elements) cannot be indexed through it.
                let numel = ty.shape.numel();
                if numel >= u32::MAX as u64 {
                    return Err(LowerError::TooLarge { value: v, numel });
                }
                let flat = self.flatten(idx, &ty.shape);
                let ai = self.unflatten(flat, &sa);
                self.value(*arg, &ai, lanes)
            }
            GOp::Permute { arg, perm } => {
                if lanes > 1 && perm.last().map(|&p| p as usize + 1) != Some(rank) {
                    return self.per_lane(v, idx, lanes);
                }
                let mut ai = vec![Ix::C(0); rank];
                for (i, &p) in perm.iter().enumerate() {
                    ai[p as usize] = idx[i];
                }
                self.value(*arg, &ai, lanes)
            }
            GOp::Slice { arg, axis, start } => {
                let a = *axis as usize;
                if lanes > 1 && a + 1 == rank && start % lanes as u64 != 0 {
                    return self.per_lane(v, idx, lanes);
                }
                let mut ai = idx.to_vec();
                ai[a] = self.iadd(idx[a], Ix::C(*start));
                self.value(*arg, &ai, lanes)
            }
            GOp::Concat { args, axis } => {
                let a = *axis as usize;
                let sizes: Vec<u64> = args.iter().map(|x| g.ty(*x).shape.0[a]).collect();
                if lanes > 1 && a + 1 == rank && sizes.iter().any(|s| s % lanes as u64 != 0) {
                    return self.per_lane(v, idx, lanes);
                }
                let args = args.clone();
                self.concat(&args, &sizes, a, idx, lanes, class(dt))
            }
            GOp::Gather { arg, index, axis } => {
                let a = *axis as usize;
                let len = g.ty(*arg).shape.0[a];
                let at = self.value(*index, idx, lanes)?;
                // One position for every lane (the ids of an embedding, broadcast along its
                // rows): the lanes stay one vector along the last axis, unless that is the
                // gathered one.
                let one_position = at.iter().all(|&x| x == at[0]);
                if lanes > 1 && (a + 1 == rank || !one_position) {
                    return self.per_lane(v, idx, lanes);
                }
                let mut ai = idx.to_vec();
                ai[a] = self.gather_position(at[0], len);
                self.value(*arg, &ai, lanes)
            }
            GOp::Reduce { .. } if self.chunk.is_some() => {
                let (col, tpr) = self.chunk.expect("checked");
                let x = self.chunk_reduction(v, idx, col, tpr)?;
                Ok(vec![x; lanes as usize])
            }
            GOp::Reduce { .. }
            | GOp::Softmax { .. }
            | GOp::TopK { .. }
            | GOp::Cumsum { .. }
            | GOp::MatMul { .. }
            | GOp::Attention { .. }
            | GOp::AttentionStat { .. }
            | GOp::Grad { .. } => Err(LowerError::Unsupported {
                what: "a reduction outside a row-reduction kernel (fuse should have grouped it)"
                    .into(),
                value: v,
            }),
            // `fuse` materialises every update: readers load it from its buffer.
            GOp::Update { .. } => Err(LowerError::Unsupported {
                what: "an update computed inside another kernel (fuse should have grouped it)"
                    .into(),
                value: v,
            }),
        }
    }

    /// The position a gather reads along an axis of `len` elements for the i32 index `i`
    /// ([`tessel_ir::graph::gather_position`]): `i + len` where `i < 0` (Python's negative
    /// indices), then clamped to `0 ..= len - 1` — signed compares and selects, so no
    /// index reads outside the tensor. A constant index folds.
    pub(super) fn gather_position(&mut self, i: Operand, len: u64) -> Ix {
        if let Operand::U32(c) = i {
            return Ix::C(tessel_ir::graph::gather_position(c as i32 as i64, len));
        }
        let neg = self
            .b
            .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[i, Operand::U32(0)]);
        let wrapped = self.b.op(RegType::U32, Op::IAdd, &[i, Self::imm_u(len)]);
        let j = self
            .b
            .op(RegType::U32, Op::Select, &[neg.into(), wrapped.into(), i]);
        let below = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtS),
            &[j.into(), Operand::U32(0)],
        );
        let j = self.b.op(
            RegType::U32,
            Op::Select,
            &[below.into(), Operand::U32(0), j.into()],
        );
        let above = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::GtS),
            &[j.into(), Self::imm_u(len - 1)],
        );
        Ix::R(self.b.op(
            RegType::U32,
            Op::Select,
            &[above.into(), Self::imm_u(len - 1), j.into()],
        ))
    }

    /// Concat: branch on the index along `axis` (statically when it is a constant), or
    /// select among every arm ([`Gen::concat_uniform`]) in an update computing its rows'
    /// reductions and, along the last axis, in a row epilogue.
    pub(super) fn concat(
        &mut self,
        args: &[Value],
        sizes: &[u64],
        a: usize,
        idx: &[Ix],
        lanes: u32,
        cls: RegType,
    ) -> Result<Vec<Operand>, LowerError> {
        if let Ix::C(i) = idx[a] {
            let mut off = 0;
            for (k, &s) in sizes.iter().enumerate() {
                if i < off + s {
                    let mut ai = idx.to_vec();
                    ai[a] = Ix::C(i - off);
                    return self.value(args[k], &ai, lanes);
                }
                off += s;
            }
        }
        // An update computing its rows' reductions needs every lane at every shuffle. A
        // row epilogue has its loads written first (`hoist.rs`), which a branch would stop,
        // but only along the last axis: there every arm's clamped index stays in the
        // chunk's own row and head, inside the staged tile; along the heads or the rows an
        // arm reaching the matmul would be read at another CTA's head or row, outside it
        // (tests/programs/regressions/row_epilogue_concat_off_the_last_axis.tsl).
        let last_axis = a + 1 == idx.len();
        if self.chunk.is_some() || (self.staged.is_some() && last_axis) {
            return self.concat_uniform(args, sizes, a, idx, lanes, cls);
        }
        let res: Vec<Reg> = (0..lanes).map(|_| self.b.kernel.new_reg(cls)).collect();
        self.concat_from(args, sizes, 0, 0, a, idx, lanes, &res)?;
        Ok(res.into_iter().map(Operand::Reg).collect())
    }

    /// A concat without branches, for kernels whose lanes must all reach every shuffle
    /// (an update computing its rows' reductions where they are reached) and for row
    /// epilogues along the last axis, whose loads go first only in straight-line code (an
    /// arm's clamped index then stays in the chunk's row and head): every arm is
    /// computed, at the index clamped into it (`0 ..= size - lanes` along the last axis: a
    /// vector stays inside one arm, as [`Gen::value`] guarantees for the arm that holds
    /// it; `0 ..= size - 1` along another), and the result selected. The arms not taken read real elements and are
    /// discarded.
    fn concat_uniform(
        &mut self,
        args: &[Value],
        sizes: &[u64],
        a: usize,
        idx: &[Ix],
        lanes: u32,
        cls: RegType,
    ) -> Result<Vec<Operand>, LowerError> {
        let ia = self.ix_op(idx[a]);
        let mut res: Vec<Operand> = Vec::new();
        let mut off = 0u64;
        for (k, (&arg, &size)) in args.iter().zip(sizes).enumerate() {
            // The index into this arm: idx - off, clamped to 0 ..= size - lanes.
            let d = self.b.op(RegType::U32, Op::ISub, &[ia, Self::imm_u(off)]);
            let below = self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ia, Self::imm_u(off)]);
            let d = self.b.op(
                RegType::U32,
                Op::Select,
                &[below.into(), Operand::U32(0), d.into()],
            );
            // Along the last axis a vector of `lanes` must fit; along another, one index.
            let span = if a + 1 == idx.len() { lanes as u64 } else { 1 };
            let last = size.saturating_sub(span);
            let mut ai = idx.to_vec();
            ai[a] = self.umin_c(Ix::R(d), last);
            let vals = self.value(arg, &ai, lanes)?;
            if k == 0 {
                res = vals;
            } else {
                // Lanes at or past this arm's start take it.
                let here = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::GeU), &[ia, Self::imm_u(off)]);
                res = res
                    .into_iter()
                    .zip(vals)
                    .map(|(prev, x)| self.b.op(cls, Op::Select, &[here.into(), x, prev]).into())
                    .collect();
            }
            off += size;
        }
        Ok(res)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn concat_from(
        &mut self,
        args: &[Value],
        sizes: &[u64],
        k: usize,
        off: u64,
        a: usize,
        idx: &[Ix],
        lanes: u32,
        res: &[Reg],
    ) -> Result<(), LowerError> {
        let emit_part = |this: &mut Self| -> Result<(), LowerError> {
            let mut ai = idx.to_vec();
            ai[a] = this.isub_c(idx[a], off);
            let vals = this.value(args[k], &ai, lanes)?;
            for (r, x) in res.iter().zip(vals) {
                this.b.assign(*r, Op::Mov, &[x]);
            }
            Ok(())
        };
        if k + 1 == args.len() {
            return emit_part(self);
        }
        let ia = self.ix_op(idx[a]);
        let c = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[ia, Self::imm_u(off + sizes[k])],
        );
        self.open();
        emit_part(self)?;
        let then_body = self.close();
        self.open();
        self.concat_from(args, sizes, k + 1, off + sizes[k], a, idx, lanes, res)?;
        let else_body = self.close();
        self.b.push(Stmt::If {
            cond: c,
            then_body,
            else_body,
        });
        Ok(())
    }
}
