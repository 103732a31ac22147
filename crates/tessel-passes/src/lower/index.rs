//! Index arithmetic for the generated kernels: an index component is a constant or a `U32`
//! register ([`Ix`]); sums and products of constants fold, so shapes known at compile time
//! cost nothing. Flat indices and their multi-indices in a shape, the global thread index.

use super::{Gen, Ix};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Special};
use tessel_ir::{Reg, Shape};

impl Gen<'_> {
    pub(super) fn ix_op(&self, i: Ix) -> Operand {
        match i {
            Ix::C(c) => Self::imm_u(c),
            Ix::R(r) => Operand::Reg(r),
        }
    }

    pub(super) fn iadd(&mut self, a: Ix, b: Ix) -> Ix {
        match (a, b) {
            (Ix::C(x), Ix::C(y)) => Ix::C(x + y),
            (x, Ix::C(0)) | (Ix::C(0), x) => x,
            _ => {
                let (x, y) = (self.ix_op(a), self.ix_op(b));
                Ix::R(self.b.op(RegType::U32, Op::IAdd, &[x, y]))
            }
        }
    }

    pub(super) fn isub_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x - c),
            _ if c == 0 => a,
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::ISub, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    /// `min(a, c)`, unsigned: an index clamped to at most `c`.
    pub(super) fn umin_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x.min(c)),
            Ix::R(_) => {
                let ao = self.ix_op(a);
                let lt = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtU), &[ao, Self::imm_u(c)]);
                Ix::R(
                    self.b
                        .op(RegType::U32, Op::Select, &[lt.into(), ao, Self::imm_u(c)]),
                )
            }
        }
    }

    pub(super) fn imul_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x * c),
            _ if c == 1 => a,
            _ if c == 0 => Ix::C(0),
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::IMulLo, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    pub(super) fn idiv_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x / c),
            _ if c == 1 => a,
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::UDiv, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    pub(super) fn irem_c(&mut self, a: Ix, c: u64) -> Ix {
        match a {
            Ix::C(x) => Ix::C(x % c),
            _ if c == 1 => Ix::C(0),
            Ix::R(r) => Ix::R(
                self.b
                    .op(RegType::U32, Op::URem, &[r.into(), Self::imm_u(c)]),
            ),
        }
    }

    /// Row-major flat index of `idx` in `shape`.
    pub(super) fn flatten(&mut self, idx: &[Ix], shape: &Shape) -> Ix {
        if let Some(&f) = self.flat_of.get(&(idx.to_vec(), shape.0.clone())) {
            return f;
        }
        let strides = shape.strides();
        let mut acc = Ix::C(0);
        for (i, &x) in idx.iter().enumerate() {
            let t = self.imul_c(x, strides[i]);
            acc = self.iadd(acc, t);
        }
        acc
    }

    /// Inverse of [`Gen::flatten`].
    pub(super) fn unflatten(&mut self, flat: Ix, shape: &Shape) -> Vec<Ix> {
        let mut idx = vec![Ix::C(0); shape.rank()];
        let mut rest = flat;
        for d in (0..shape.rank()).rev() {
            let n = shape.0[d];
            if d == 0 {
                idx[d] = rest;
            } else {
                idx[d] = self.irem_c(rest, n);
                rest = self.idiv_c(rest, n);
            }
        }
        self.flat_of.insert((idx.clone(), shape.0.clone()), flat);
        idx
    }

    /// Flat thread index `ctaid.x * threads + tid.x`.
    pub(super) fn global_thread(&mut self, threads: u32) -> Reg {
        let tid = self.b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let cta = self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
        let base = self.b.op(
            RegType::U32,
            Op::IMulLo,
            &[cta.into(), Operand::U32(threads)],
        );
        self.b
            .op(RegType::U32, Op::IAdd, &[base.into(), tid.into()])
    }
}
