//! `expand-math`: replaces every [`Op::Math`] placeholder with the tessel-math sequence of
//! plain IEEE operations that computes it.
//!
//! Before: kernels from `lower`. After: no `Op::Math` remains; every op is one of the plain
//! kernel-IR ops (`+ - * / fma sqrt`, comparisons, selects, integer and bit operations, and
//! `If` for the rare slow paths). The sequence is the one `tessel_math` runs natively on
//! f32 on the CPU — the functions are written once, generic over [`tessel_math::MathOps`],
//! and instantiated here on a kernel-IR builder — so the GPU computes the same bits as the
//! CPU executor and as `tessel_math`'s own tests, by construction.

use tessel_ir::kernel::{Builder, FCmp, ICmp, Kernel, MathFn, Op, Operand, RegType, Stmt};
use tessel_ir::Reg;
use tessel_math::{MathOps, Native};

/// Runs the pass on one kernel.
pub fn run(k: &mut Kernel) {
    let r: Result<(), std::convert::Infallible> = k.rewrite(|k, s, out| {
        match s {
            Stmt::Op {
                dst,
                op: Op::Math(f),
                args,
            } => {
                // The builder appends to the (empty, during a rewrite) body; the sequence
                // is then moved to where the placeholder was.
                let mut b = Builder::new(k);
                let r = emit(&mut b, f, &args);
                b.assign(dst, Op::Mov, &[r]);
                b.finish();
                out.append(&mut k.body);
            }
            other => out.push(other),
        }
        Ok(())
    });
    if let Err(never) = r {
        match never {}
    }
}

/// Emits the sequence of `f(args)` and returns the operand holding the result.
fn emit(b: &mut Builder, f: MathFn, args: &[Operand]) -> Operand {
    let mut o = KernelMath { b };
    let x = args[0];
    match f {
        MathFn::Sin => tessel_math::sin(&mut o, x),
        MathFn::Cos => tessel_math::cos(&mut o, x),
        MathFn::Exp => tessel_math::exp(&mut o, x),
        MathFn::ExpF32 => tessel_math::exp_f32(&mut o, x),
        MathFn::ExpF32Nonpos => tessel_math::exp_f32_nonpos(&mut o, x),
        MathFn::Log => tessel_math::log(&mut o, x),
        MathFn::Rsqrt => tessel_math::rsqrt(&mut o, x),
        MathFn::Pow => tessel_math::pow(&mut o, x, args[1]),
        MathFn::Tanh => tessel_math::tanh(&mut o, x),
        MathFn::Sigmoid => tessel_math::sigmoid(&mut o, x),
        MathFn::Silu => tessel_math::silu(&mut o, x),
        MathFn::SiluF32 => tessel_math::silu_f32(&mut o, x),
        MathFn::Erf => tessel_math::erf(&mut o, x),
        MathFn::Fmod => tessel_math::fmod(&mut o, x, args[1]),
    }
}

/// [`MathOps`] on the kernel-IR builder: every trait op appends the one kernel-IR op of the
/// same meaning. Operations whose operands are all immediates are folded with
/// [`tessel_math::Native`] — the same IEEE operation, so the bits are the ones the GPU would
/// compute.
struct KernelMath<'b, 'k> {
    b: &'b mut Builder<'k>,
}

fn imm_f(x: Operand) -> Option<f32> {
    match x {
        Operand::F32(bits) => Some(f32::from_bits(bits)),
        _ => None,
    }
}

fn imm_u(x: Operand) -> Option<u32> {
    match x {
        Operand::U32(v) => Some(v),
        _ => None,
    }
}

impl KernelMath<'_, '_> {
    fn f(&mut self, op: Op, args: &[Operand]) -> Operand {
        self.b.op(RegType::F32, op, args).into()
    }
    fn u(&mut self, op: Op, args: &[Operand]) -> Operand {
        self.b.op(RegType::U32, op, args).into()
    }
    fn p(&mut self, op: Op, args: &[Operand]) -> Operand {
        self.b.op(RegType::Pred, op, args).into()
    }
    /// Folds `native` when every operand is an f32 immediate, else emits `op`.
    fn f2(
        &mut self,
        op: Op,
        a: Operand,
        b: Operand,
        native: fn(&mut Native, f32, f32) -> f32,
    ) -> Operand {
        match (imm_f(a), imm_f(b)) {
            (Some(x), Some(y)) => Operand::f32(native(&mut Native, x, y)),
            _ => self.f(op, &[a, b]),
        }
    }
    fn u2(
        &mut self,
        op: Op,
        a: Operand,
        b: Operand,
        native: fn(&mut Native, u32, u32) -> u32,
    ) -> Operand {
        match (imm_u(a), imm_u(b)) {
            (Some(x), Some(y)) => Operand::U32(native(&mut Native, x, y)),
            _ => self.u(op, &[a, b]),
        }
    }
}

impl MathOps for KernelMath<'_, '_> {
    type F = Operand;
    type U = Operand;
    type P = Operand;

    fn fconst(&mut self, c: f32) -> Operand {
        Operand::f32(c)
    }
    fn uconst(&mut self, c: u32) -> Operand {
        Operand::U32(c)
    }
    fn fadd(&mut self, a: Operand, b: Operand) -> Operand {
        self.f2(Op::FAdd, a, b, Native::fadd)
    }
    fn fsub(&mut self, a: Operand, b: Operand) -> Operand {
        self.f2(Op::FSub, a, b, Native::fsub)
    }
    fn fmul(&mut self, a: Operand, b: Operand) -> Operand {
        self.f2(Op::FMul, a, b, Native::fmul)
    }
    fn fdiv(&mut self, a: Operand, b: Operand) -> Operand {
        self.f2(Op::FDiv, a, b, Native::fdiv)
    }
    fn ffma(&mut self, a: Operand, b: Operand, c: Operand) -> Operand {
        match (imm_f(a), imm_f(b), imm_f(c)) {
            (Some(x), Some(y), Some(z)) => Operand::f32(Native.ffma(x, y, z)),
            _ => self.f(Op::FFma, &[a, b, c]),
        }
    }
    fn fsqrt(&mut self, a: Operand) -> Operand {
        self.f(Op::FSqrt, &[a])
    }
    fn fneg(&mut self, a: Operand) -> Operand {
        match imm_f(a) {
            Some(x) => Operand::f32(-x),
            None => self.f(Op::FNeg, &[a]),
        }
    }
    fn fabs(&mut self, a: Operand) -> Operand {
        self.f(Op::FAbs, &[a])
    }
    fn fmin(&mut self, a: Operand, b: Operand) -> Operand {
        self.f(Op::FMin, &[a, b])
    }
    fn fmax(&mut self, a: Operand, b: Operand) -> Operand {
        self.f(Op::FMax, &[a, b])
    }
    fn frint(&mut self, a: Operand) -> Operand {
        self.f(Op::FRint, &[a])
    }
    fn feq(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Eq), &[a, b])
    }
    fn fne(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Ne), &[a, b])
    }
    fn flt(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Lt), &[a, b])
    }
    fn fle(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Le), &[a, b])
    }
    fn fgt(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Gt), &[a, b])
    }
    fn fge(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Ge), &[a, b])
    }
    fn fis_nan(&mut self, a: Operand) -> Operand {
        self.p(Op::FCmp(FCmp::Nan), &[a, a])
    }
    fn select(&mut self, p: Operand, a: Operand, b: Operand) -> Operand {
        self.f(Op::Select, &[p, a, b])
    }
    fn select_u(&mut self, p: Operand, a: Operand, b: Operand) -> Operand {
        self.u(Op::Select, &[p, a, b])
    }
    fn pand(&mut self, p: Operand, q: Operand) -> Operand {
        self.p(Op::PAnd, &[p, q])
    }
    fn por(&mut self, p: Operand, q: Operand) -> Operand {
        self.p(Op::POr, &[p, q])
    }
    fn pnot(&mut self, p: Operand) -> Operand {
        self.p(Op::PNot, &[p])
    }
    fn f_to_bits(&mut self, a: Operand) -> Operand {
        match a {
            Operand::F32(bits) => Operand::U32(bits),
            _ => self.u(Op::F32ToBits, &[a]),
        }
    }
    fn f_from_bits(&mut self, a: Operand) -> Operand {
        match a {
            Operand::U32(bits) => Operand::F32(bits),
            _ => self.f(Op::BitsToF32, &[a]),
        }
    }
    fn uadd(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::IAdd, a, b, Native::uadd)
    }
    fn usub(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::ISub, a, b, Native::usub)
    }
    fn umul_lo(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::IMulLo, a, b, Native::umul_lo)
    }
    fn umul_hi(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::UMulHi, a, b, Native::umul_hi)
    }
    fn ushl(&mut self, a: Operand, s: Operand) -> Operand {
        self.u2(Op::Shl, a, s, Native::ushl)
    }
    fn ushr(&mut self, a: Operand, s: Operand) -> Operand {
        self.u2(Op::ShrU, a, s, Native::ushr)
    }
    fn sshr(&mut self, a: Operand, s: Operand) -> Operand {
        self.u2(Op::ShrS, a, s, Native::sshr)
    }
    fn uand(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::And, a, b, Native::uand)
    }
    fn uor(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::Or, a, b, Native::uor)
    }
    fn uxor(&mut self, a: Operand, b: Operand) -> Operand {
        self.u2(Op::Xor, a, b, Native::uxor)
    }
    fn unot(&mut self, a: Operand) -> Operand {
        match imm_u(a) {
            Some(x) => Operand::U32(!x),
            None => self.u(Op::Not, &[a]),
        }
    }
    fn ueq(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::Eq), &[a, b])
    }
    fn une(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::Ne), &[a, b])
    }
    fn ult(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::LtU), &[a, b])
    }
    fn ugt(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::GtU), &[a, b])
    }
    fn slt(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::LtS), &[a, b])
    }
    fn sle(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::LeS), &[a, b])
    }
    fn sgt(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::GtS), &[a, b])
    }
    fn sge(&mut self, a: Operand, b: Operand) -> Operand {
        self.p(Op::ICmp(ICmp::GeS), &[a, b])
    }
    fn cvt_rni_s32(&mut self, a: Operand) -> Operand {
        self.u(Op::CvtRniS32F32, &[a])
    }
    fn cvt_rzi_s32(&mut self, a: Operand) -> Operand {
        self.u(Op::CvtRziS32F32, &[a])
    }
    fn cvt_s32_f32(&mut self, a: Operand) -> Operand {
        self.f(Op::CvtF32S32, &[a])
    }
    fn cvt_u32_f32(&mut self, a: Operand) -> Operand {
        self.f(Op::CvtF32U32, &[a])
    }
    fn cond<const N: usize>(
        &mut self,
        c: Operand,
        then: impl FnOnce(&mut Self) -> [Operand; N],
        otherwise: impl FnOnce(&mut Self) -> [Operand; N],
    ) -> [Operand; N] {
        let res: [Reg; N] = std::array::from_fn(|_| self.b.kernel.new_reg(RegType::F32));
        let cond = match c {
            Operand::Reg(r) => r,
            // A constant condition (all operands folded): materialise it.
            other => self.b.op(RegType::Pred, Op::Mov, &[other]),
        };
        self.b.open();
        let t = then(self);
        for (r, v) in res.iter().zip(t) {
            self.b.assign(*r, Op::Mov, &[v]);
        }
        let then_body = self.b.close();
        self.b.open();
        let e = otherwise(self);
        for (r, v) in res.iter().zip(e) {
            self.b.assign(*r, Op::Mov, &[v]);
        }
        let else_body = self.b.close();
        self.b.push(Stmt::If {
            cond,
            then_body,
            else_body,
        });
        res.map(Operand::Reg)
    }
}
