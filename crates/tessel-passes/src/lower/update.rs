//! The in-place update schedule ([`TileConfig::Update`](tessel_ir::graph::TileConfig::Update)):
//! the kernel of an [`Op::Update`](tessel_ir::graph::Op::Update) iterates over the update's
//! rows only — its work is proportional to the rows, never to the tensor they are written
//! into. Thread `t` takes `vector` consecutive elements of the flattened rows, computes them
//! (their elementwise cone, from materialised values, as an elementwise kernel does), reads
//! its row's position `pos[b]`, and stores them at `pos[b] + i` along the axis of the
//! buffer the updated tensor lives in — the `inout` input's own buffer — when that position
//! lies inside the axis. The kernel never reads that buffer, so no thread reads an element
//! another one writes. A whole update (`update(p, value)`) iterates over the tensor and
//! stores each element where it is: its value may read the buffer, each thread only the
//! elements it writes, before it writes them.

use super::{Gen, Ix, LowerError};
use tessel_ir::graph::{Op as GOp, UpdateAt};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType};
use tessel_ir::{Reg, Value};

impl Gen<'_> {
    /// Emits the kernel of update `u` (`reduces`: it computes its rows' reductions, `fuse`
    /// rule 6); returns its grid size in CTAs.
    pub(super) fn update(
        &mut self,
        u: Value,
        reduces: bool,
        threads: u32,
        v: u32,
    ) -> Result<u32, LowerError> {
        let GOp::Update { rows, at, .. } = self.g.ops[u] else {
            return Err(LowerError::Unsupported {
                what: "an update group whose output is not an update".into(),
                value: u,
            });
        };
        let Some(UpdateAt { pos, axis }) = at else {
            return self.update_whole(u, rows, threads, v);
        };
        if reduces {
            return self.update_rows(u, threads, v);
        }
        let axis = axis as usize;
        let shape = self.g.ty(rows).shape.clone();
        let numel = shape.numel();
        let len = self.g.ty(u).shape.0[axis];
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
        let (at, inside) = self.row_position(pos, &idx, axis, len)?;
        self.open();
        let vals = self.value(rows, &idx, v)?;
        let mut dst_idx = idx.clone();
        dst_idx[axis] = at;
        self.store(u, &dst_idx, &vals)?;
        self.close_if(inside);
        self.close_if(inb);
        Ok(numel.div_ceil(v as u64 * threads as u64).max(1) as u32)
    }

    /// The kernel of a whole update: thread `t` computes `v` consecutive elements of the
    /// new value from element `v·t` and stores them at the same index of the tensor's
    /// buffer. The value's cone may read that buffer (AdamW's `p - lr * ...`), only at the
    /// elements the thread itself writes (`fuse` rule 6): each load comes before the store.
    fn update_whole(
        &mut self,
        u: Value,
        rows: Value,
        threads: u32,
        v: u32,
    ) -> Result<u32, LowerError> {
        let shape = self.g.ty(rows).shape.clone();
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
        let vals = self.value(rows, &idx, v)?;
        self.store(u, &idx, &vals)?;
        self.close_if(inb);
        Ok(numel.div_ceil(v as u64 * threads as u64).max(1) as u32)
    }

    /// The update kernel when it computes its rows' reductions (`fuse` rule 6): thread `t`
    /// takes the 8 elements from `8t` of the flattened rows (`v` = 8), so a row of `d` sits
    /// on `d / 8` consecutive lanes of one warp; each reduction the rows' values reach is
    /// computed where it is reached, over the reduced row, lane j folding its chunk j
    /// ([`Gen::chunk_reduction`]: a row-reduction kernel's order at `d / 8` threads per
    /// row, vector 8). Every thread runs the shuffles — one past the last row computes the
    /// last chunk again and stores nothing — then stores as [`Gen::update`] does, at
    /// `pos[b] + i` when inside the axis.
    fn update_rows(&mut self, u: Value, threads: u32, v: u32) -> Result<u32, LowerError> {
        let GOp::Update {
            rows,
            at: Some(UpdateAt { pos, axis }),
            ..
        } = self.g.ops[u]
        else {
            unreachable!("checked by the caller");
        };
        let axis = axis as usize;
        let shape = self.g.ty(rows).shape.clone();
        let numel = shape.numel();
        let d = shape.last();
        if v != 8 || d % 8 != 0 || !(d / 8).is_power_of_two() || d / 8 > 32 {
            return Err(LowerError::Unsupported {
                what: format!("an update computing reductions over rows of {d} at vector {v}"),
                value: u,
            });
        }
        let len = self.g.ty(u).shape.0[axis];
        let gid = self.global_thread(threads);
        let first = self
            .b
            .op(RegType::U32, Op::IMulLo, &[gid.into(), Operand::U32(8)]);
        let inb = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[first.into(), Self::imm_u(numel)],
        );
        let first = self.umin_c(Ix::R(first), numel - 8);
        let idx = self.unflatten(first, &shape);
        self.chunk = Some((idx[idx.len() - 1], (d / 8) as u32));
        self.memo.push(Default::default());
        let vals = self.value(rows, &idx, 8);
        self.memo.pop();
        self.chunk = None;
        let vals = vals?;
        let (at, inside) = self.row_position(pos, &idx, axis, len)?;
        let ok = self
            .b
            .op(RegType::Pred, Op::PAnd, &[inb.into(), inside.into()]);
        self.open();
        let mut dst_idx = idx.clone();
        dst_idx[axis] = at;
        self.store(u, &dst_idx, &vals)?;
        self.close_if(ok);
        Ok(numel.div_ceil(8 * threads as u64).max(1) as u32)
    }

    /// Where the row element at `idx` goes along `axis` (of length `len`): `pos[b] + i`
    /// and whether it lies in 0 .. len. In 32-bit arithmetic: with i < R <= len < 2^31,
    /// the sum wraps to 2^31 or more exactly when the true position is negative, so one
    /// unsigned comparison with the length keeps exactly the positions in 0 .. len.
    fn row_position(
        &mut self,
        pos: Value,
        idx: &[Ix],
        axis: usize,
        len: u64,
    ) -> Result<(Ix, Reg), LowerError> {
        let p = self.value(pos, &[idx[0]], 1)?[0];
        let p = match p {
            Operand::Reg(r) => r,
            imm => self.b.op(RegType::U32, Op::Mov, &[imm]),
        };
        let i = self.ix_op(idx[axis]);
        let at = self.b.op(RegType::U32, Op::IAdd, &[p.into(), i]);
        let inside = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[at.into(), Self::imm_u(len)],
        );
        Ok((Ix::R(at), inside))
    }
}
