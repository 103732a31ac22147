//! The shared-memory ring of the tensor-core schedules: each operand's `stages` tiles, all
//! in one [`StageLayout`] (`layout.rs`: the swizzle of the 16-byte chunks, where an element
//! lies, what TMA and wgmma make of the layout), filled by a loader (`cp_async.rs`: the
//! copy plan and the `cp.async` copies; `tma.rs`: tensor maps and TMA tiled loads) from a source (`source.rs`: the
//! tensor or strided view a tile is read from), and read by the fragment plans
//! (`fragments.rs`: `ldmatrix` rows). The GEMM (`mma.rs`), the fused attention
//! (`attention.rs`, `attention_parts.rs`) and its backward (`attention_bwd.rs`) take their
//! stages through [`Ring`], so every kernel addresses shared memory by one layout.

pub(super) mod cp_async;
pub(super) mod layout;
mod source;
pub(super) mod tma;

pub(super) use layout::StageLayout;
pub(super) use source::Operand2d;

use super::{Gen, Ix};
use layout::IndexOps;
use tessel_ir::kernel::{ICmp, Op, Operand, RegType};
use tessel_ir::Reg;

/// One operand's ring: its `stages` stages of one [`StageLayout`], the first at the
/// shared-memory address `base`, each `layout.stage_bytes()` after the one before.
#[derive(Copy, Clone)]
pub(super) struct Ring {
    pub(super) base: Reg,
    pub(super) layout: StageLayout,
}

impl Ring {
    /// Bytes of one stage (its layout's).
    pub(super) fn stage_bytes(&self) -> u32 {
        self.layout.stage_bytes()
    }
}

/// The layout's index arithmetic on the kernel's registers: constants fold, the rest is
/// emitted (`index.rs`); an XOR with 0 is the index itself.
impl IndexOps for Gen<'_> {
    type Ix = Ix;
    fn div_c(&mut self, a: Ix, c: u64) -> Ix {
        self.idiv_c(a, c)
    }
    fn rem_c(&mut self, a: Ix, c: u64) -> Ix {
        self.irem_c(a, c)
    }
    fn mul_c(&mut self, a: Ix, c: u64) -> Ix {
        self.imul_c(a, c)
    }
    fn add(&mut self, a: Ix, b: Ix) -> Ix {
        self.iadd(a, b)
    }
    fn shr_and(&mut self, a: Ix, shift: u32, mask: u32) -> Ix {
        match a {
            Ix::C(r) => Ix::C((r >> shift) & mask as u64),
            Ix::R(r) => {
                let s = self
                    .b
                    .op(RegType::U32, Op::ShrU, &[r.into(), Operand::U32(shift)]);
                Ix::R(
                    self.b
                        .op(RegType::U32, Op::And, &[s.into(), Operand::U32(mask)]),
                )
            }
        }
    }
    fn xor(&mut self, a: Ix, b: Ix) -> Ix {
        match (a, b) {
            (Ix::C(x), Ix::C(y)) => Ix::C(x ^ y),
            (_, Ix::C(0)) => a,
            _ => {
                let (x, y) = (self.ix_op(a), self.ix_op(b));
                Ix::R(self.b.op(RegType::U32, Op::Xor, &[x, y]))
            }
        }
    }
}

impl Gen<'_> {
    /// Advances each ring-stage index in `regs` by one, wrapping at `stages` (the stage read
    /// and the stage written next, once per slice or key block).
    pub(super) fn advance_stages(&mut self, regs: &[Reg], stages: u32) {
        for &r in regs {
            let next = self
                .b
                .op(RegType::U32, Op::IAdd, &[r.into(), Operand::U32(1)]);
            let wrap = self.b.op(
                RegType::Pred,
                Op::ICmp(ICmp::Eq),
                &[next.into(), Operand::U32(stages)],
            );
            self.b
                .assign(r, Op::Select, &[wrap.into(), Operand::U32(0), next.into()]);
        }
    }

    /// Byte offset in one stage of `ring` of element `col` of row `row`: its layout's
    /// ([`StageLayout::offset_with`]).
    pub(super) fn ring_offset(&mut self, ring: &Ring, row: Ix, col: Ix) -> Ix {
        ring.layout.offset_with(self, row, col)
    }

    /// A U32 register holding `base + off`.
    pub(super) fn shared_addr(&mut self, base: Reg, off: Ix) -> Reg {
        match off {
            Ix::C(0) => base,
            _ => {
                let o = self.ix_op(off);
                self.b.op(RegType::U32, Op::IAdd, &[base.into(), o])
            }
        }
    }
}
