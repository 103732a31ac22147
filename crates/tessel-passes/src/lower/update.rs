//! The in-place update schedule ([`TileConfig::Update`](tessel_ir::graph::TileConfig::Update)):
//! the kernel of an [`Op::Update`](tessel_ir::graph::Op::Update) iterates over the update's
//! rows only — its work is proportional to the rows, never to the tensor they are written
//! into. Thread `t` takes `vector` consecutive elements of the flattened rows, computes them
//! (their elementwise cone, from materialised values, as an elementwise kernel does), reads
//! its row's position `pos[b]`, and stores them at `pos[b] + i` along the axis of the
//! buffer the updated tensor lives in — the `inout` input's own buffer — when that position
//! lies inside the axis. The kernel never reads that buffer, so no thread reads an element
//! another one writes.

use super::{Gen, Ix, LowerError};
use tessel_ir::graph::Op as GOp;
use tessel_ir::kernel::{ICmp, Op, Operand, RegType};
use tessel_ir::Value;

impl Gen<'_> {
    /// Emits the kernel of update `u`; returns its grid size in CTAs.
    pub(super) fn update(&mut self, u: Value, threads: u32, v: u32) -> Result<u32, LowerError> {
        let GOp::Update {
            rows, pos, axis, ..
        } = self.g.ops[u]
        else {
            return Err(LowerError::Unsupported {
                what: "an update group whose output is not an update".into(),
                value: u,
            });
        };
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
        // Position pos[b] + i along the axis, in 32-bit arithmetic: with i < R <= len < 2^31,
        // the sum wraps to 2^31 or more exactly when the true position is negative, so one
        // unsigned comparison with the length keeps exactly the positions in 0 .. len.
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
        self.open();
        let vals = self.value(rows, &idx, v)?;
        let mut dst_idx = idx.clone();
        dst_idx[axis] = Ix::R(at);
        self.store(u, &dst_idx, &vals)?;
        self.close_if(inside);
        self.close_if(inb);
        Ok(numel.div_ceil(v as u64 * threads as u64).max(1) as u32)
    }
}
