//! The dtype numerics of kernel values (design §5): constants, rounding to bf16/f16 after
//! every 16-bit op (values live in f32 registers), conversions with graph `Cast`
//! semantics, and the elementwise ops per register class.

use super::{class, Gen, LowerError};
use tessel_ir::graph::{BinaryOp, UnaryOp};
use tessel_ir::kernel::{FCmp, ICmp, MathFn, Op, Operand, RegType};
use tessel_ir::{DType, Reg, Value};

impl Gen<'_> {
    pub(super) fn constant(&mut self, value: f64, dt: DType) -> Operand {
        match dt {
            DType::Bf16 | DType::F16 | DType::F32 => Operand::f32(value as f32),
            DType::I32 => Operand::U32(value as i64 as i32 as u32),
            DType::Bool => self
                .b
                .op(
                    RegType::Pred,
                    Op::ICmp(if value != 0.0 { ICmp::Eq } else { ICmp::Ne }),
                    &[Operand::U32(0), Operand::U32(0)],
                )
                .into(),
        }
    }

    /// Rounds an f32 register to `dt` (no-op for f32): RNE through the packed conversion.
    /// A bf16 is the high half of an f32, so packing `x` into the high half beside a zero
    /// low half gives the rounded f32's bits in one instruction (`cvt.rn.bf16x2.f32`).
    pub(super) fn round(&mut self, x: Operand, dt: DType) -> Operand {
        match dt {
            DType::Bf16 => {
                let p = self
                    .b
                    .op(RegType::U32, Op::PackBf16x2, &[x, Operand::f32(0.0)]);
                self.b.op(RegType::F32, Op::BitsToF32, &[p.into()]).into()
            }
            DType::F16 => {
                let p = self
                    .b
                    .op(RegType::U32, Op::PackF16x2, &[Operand::f32(0.0), x]);
                self.b.op(RegType::F32, Op::F16ToF32, &[p.into()]).into()
            }
            _ => x,
        }
    }

    /// Converts a register value from `from` to `to` (graph `Cast` semantics).
    pub(super) fn convert(&mut self, x: Operand, from: DType, to: DType) -> Operand {
        use DType::*;
        if from == to {
            return x;
        }
        match (from, to) {
            (Bf16 | F16 | F32, Bf16 | F16 | F32) => self.round(x, to),
            (I32, _) if to.is_float() => {
                let f = self.b.op(RegType::F32, Op::CvtF32S32, &[x]);
                self.round(f.into(), to)
            }
            (Bf16 | F16 | F32, I32) => self.b.op(RegType::U32, Op::CvtRziS32F32, &[x]).into(),
            (Bool, I32) => self
                .b
                .op(
                    RegType::U32,
                    Op::Select,
                    &[x, Operand::U32(1), Operand::U32(0)],
                )
                .into(),
            (Bool, _) => self
                .b
                .op(
                    RegType::F32,
                    Op::Select,
                    &[x, Operand::f32(1.0), Operand::f32(0.0)],
                )
                .into(),
            (I32, Bool) => self
                .b
                .op(RegType::Pred, Op::ICmp(ICmp::Ne), &[x, Operand::U32(0)])
                .into(),
            (_, Bool) => self
                .b
                .op(RegType::Pred, Op::FCmp(FCmp::Ne), &[x, Operand::f32(0.0)])
                .into(),
            _ => x,
        }
    }

    pub(super) fn unary(
        &mut self,
        op: UnaryOp,
        dt: DType,
        x: Operand,
        v: Value,
    ) -> Result<Operand, LowerError> {
        let f = |m| Op::Math(m);
        let r = match (op, class(dt)) {
            (UnaryOp::Neg, RegType::F32) => self.b.op(RegType::F32, Op::FNeg, &[x]),
            (UnaryOp::Neg, RegType::U32) => {
                self.b.op(RegType::U32, Op::ISub, &[Operand::U32(0), x])
            }
            (UnaryOp::Abs, RegType::F32) => self.b.op(RegType::F32, Op::FAbs, &[x]),
            (UnaryOp::Abs, RegType::U32) => {
                let n = self.b.op(RegType::U32, Op::ISub, &[Operand::U32(0), x]);
                let neg = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[x, Operand::U32(0)]);
                self.b
                    .op(RegType::U32, Op::Select, &[neg.into(), n.into(), x])
            }
            (UnaryOp::Not, RegType::Pred) => self.b.op(RegType::Pred, Op::PNot, &[x]),
            (UnaryOp::Sqrt, RegType::F32) => self.b.op(RegType::F32, Op::FSqrt, &[x]),
            (UnaryOp::Exp, RegType::F32) => {
                let m = if self.exp_single {
                    MathFn::ExpF32
                } else {
                    MathFn::Exp
                };
                self.b.op(RegType::F32, f(m), &[x])
            }
            (UnaryOp::Log, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Log), &[x]),
            (UnaryOp::Rsqrt, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Rsqrt), &[x]),
            (UnaryOp::Sin, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Sin), &[x]),
            (UnaryOp::Cos, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Cos), &[x]),
            (UnaryOp::Tanh, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Tanh), &[x]),
            (UnaryOp::Sigmoid, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Sigmoid), &[x]),
            // A silu rounded to 16 bits needs no more than the 1-ulp single-f32 form (a
            // seventh of the operations: the SwiGLU gate GEMM's epilogue,
            // docs/numerics.md); an f32 silu keeps the 0.51-ulp one.
            (UnaryOp::Silu, RegType::F32) => {
                let m = if matches!(dt, DType::Bf16 | DType::F16) {
                    MathFn::SiluF32
                } else {
                    MathFn::Silu
                };
                self.b.op(RegType::F32, f(m), &[x])
            }
            (UnaryOp::Erf, RegType::F32) => self.b.op(RegType::F32, f(MathFn::Erf), &[x]),
            (UnaryOp::Gelu, RegType::F32) => {
                // x·0.5·(1 + erf(x·kAlpha)), ActivationGeluKernel.cu's order.
                let h = self.b.op(RegType::F32, Op::FMul, &[x, Operand::f32(0.5)]);
                let a = self.b.op(
                    RegType::F32,
                    Op::FMul,
                    &[x, Operand::f32(std::f64::consts::FRAC_1_SQRT_2 as f32)],
                );
                let e = self.b.op(RegType::F32, f(MathFn::Erf), &[a.into()]);
                let s = self
                    .b
                    .op(RegType::F32, Op::FAdd, &[Operand::f32(1.0), e.into()]);
                self.b.op(RegType::F32, Op::FMul, &[h.into(), s.into()])
            }
            (UnaryOp::GeluTanh, RegType::F32) => {
                // 0.5·x·(1 + tanh(kBeta·(x + kKappa·x³))), x³ = (x·x)·x.
                let beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
                let x2 = self.b.op(RegType::F32, Op::FMul, &[x, x]);
                let x3 = self.b.op(RegType::F32, Op::FMul, &[x2.into(), x]);
                let k = self
                    .b
                    .op(RegType::F32, Op::FMul, &[Operand::f32(0.044715), x3.into()]);
                let s = self.b.op(RegType::F32, Op::FAdd, &[x, k.into()]);
                let i = self.b.op(
                    RegType::F32,
                    Op::FMul,
                    &[Operand::f32(beta as f32), s.into()],
                );
                let t = self.b.op(RegType::F32, f(MathFn::Tanh), &[i.into()]);
                let t1 = self
                    .b
                    .op(RegType::F32, Op::FAdd, &[Operand::f32(1.0), t.into()]);
                let h = self.b.op(RegType::F32, Op::FMul, &[Operand::f32(0.5), x]);
                self.b.op(RegType::F32, Op::FMul, &[h.into(), t1.into()])
            }
            // Exact: a 16-bit value's integral neighbour is a 16-bit value, so the rounding
            // after it changes nothing.
            (UnaryOp::Floor, RegType::F32) => self.b.op(RegType::F32, Op::FFloor, &[x]),
            (UnaryOp::Ceil, RegType::F32) => self.b.op(RegType::F32, Op::FCeil, &[x]),
            (UnaryOp::Round, RegType::F32) => self.b.op(RegType::F32, Op::FRint, &[x]),
            (UnaryOp::Trunc, RegType::F32) => self.b.op(RegType::F32, Op::FTrunc, &[x]),
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("{op:?} on {dt}"),
                    value: v,
                })
            }
        };
        Ok(self.round(r.into(), dt))
    }

    /// `op(a, b)` for operands of dtype `dt`; the result is rounded to `dt` (comparisons give
    /// a predicate).
    pub(super) fn binary(
        &mut self,
        op: BinaryOp,
        dt: DType,
        a: Operand,
        b: Operand,
        v: Value,
    ) -> Result<Operand, LowerError> {
        use BinaryOp::*;
        let cls = class(dt);
        let cmp_f = |o| Op::FCmp(o);
        let r: Reg = match (op, cls) {
            (Add, RegType::F32) => self.b.op(cls, Op::FAdd, &[a, b]),
            (Sub, RegType::F32) => self.b.op(cls, Op::FSub, &[a, b]),
            (Mul, RegType::F32) => self.b.op(cls, Op::FMul, &[a, b]),
            (Div, RegType::F32) => match exact_reciprocal(b) {
                Some(r) => self.b.op(cls, Op::FMul, &[a, r]),
                None => self.b.op(cls, Op::FDiv, &[a, b]),
            },
            (Min, RegType::F32) => self.b.op(cls, Op::FMin, &[a, b]),
            (Max, RegType::F32) => self.b.op(cls, Op::FMax, &[a, b]),
            (Pow, RegType::F32) => self.b.op(cls, Op::Math(MathFn::Pow), &[a, b]),
            (Rem, RegType::F32) => self.b.op(cls, Op::Math(MathFn::Fmod), &[a, b]),
            (Add, RegType::U32) => self.b.op(cls, Op::IAdd, &[a, b]),
            (Sub, RegType::U32) => self.b.op(cls, Op::ISub, &[a, b]),
            (Mul, RegType::U32) => self.b.op(cls, Op::IMulLo, &[a, b]),
            (Div | Rem, RegType::U32) => {
                // Truncating signed division from the unsigned one: |a| / |b|, negated when
                // the signs differ; the remainder takes the dividend's sign (C, PyTorch
                // `torch.fmod`). Division by zero faults in the executor and is undefined on
                // the GPU, as in CUDA C.
                let abs = |this: &mut Self, x: Operand| -> Operand {
                    let n = this.b.op(cls, Op::ISub, &[Operand::U32(0), x]);
                    let neg = this
                        .b
                        .op(RegType::Pred, Op::ICmp(ICmp::LtS), &[x, Operand::U32(0)]);
                    this.b
                        .op(cls, Op::Select, &[neg.into(), n.into(), x])
                        .into()
                };
                let (ua, ub) = (abs(self, a), abs(self, b));
                // x / 0 is defined as 0 and x % 0 as x (so a = q·b + r still holds), the same
                // on the GPU, the executor and the oracle: the divisor 0 is replaced by 1 and
                // the quotient by 0.
                let zero = self
                    .b
                    .op(RegType::Pred, Op::ICmp(ICmp::Eq), &[b, Operand::U32(0)]);
                let ub = self
                    .b
                    .op(cls, Op::Select, &[zero.into(), Operand::U32(1), ub])
                    .into();
                let uq = self.b.op(cls, Op::UDiv, &[ua, ub]);
                let uq = self
                    .b
                    .op(cls, Op::Select, &[zero.into(), Operand::U32(0), uq.into()]);
                let sx = self.b.op(cls, Op::Xor, &[a, b]);
                let neg = self.b.op(
                    RegType::Pred,
                    Op::ICmp(ICmp::LtS),
                    &[sx.into(), Operand::U32(0)],
                );
                let nq = self.b.op(cls, Op::ISub, &[Operand::U32(0), uq.into()]);
                let q = self
                    .b
                    .op(cls, Op::Select, &[neg.into(), nq.into(), uq.into()]);
                if op == Div {
                    q
                } else {
                    let qb = self.b.op(cls, Op::IMulLo, &[q.into(), b]);
                    self.b.op(cls, Op::ISub, &[a, qb.into()])
                }
            }
            (Min | Max, RegType::U32) => {
                let lt = self.b.op(RegType::Pred, Op::ICmp(ICmp::LtS), &[a, b]);
                let (x, y) = if op == Min { (a, b) } else { (b, a) };
                self.b.op(cls, Op::Select, &[lt.into(), x, y])
            }
            (Eq | Ne | Lt | Le | Gt | Ge, RegType::F32) => {
                let c = match op {
                    Eq => FCmp::Eq,
                    Ne => FCmp::Ne,
                    Lt => FCmp::Lt,
                    Le => FCmp::Le,
                    Gt => FCmp::Gt,
                    _ => FCmp::Ge,
                };
                return Ok(self.b.op(RegType::Pred, cmp_f(c), &[a, b]).into());
            }
            (Eq | Ne | Lt | Le | Gt | Ge, RegType::U32) => {
                let c = match op {
                    Eq => ICmp::Eq,
                    Ne => ICmp::Ne,
                    Lt => ICmp::LtS,
                    Le => ICmp::LeS,
                    Gt => ICmp::GtS,
                    _ => ICmp::GeS,
                };
                return Ok(self.b.op(RegType::Pred, Op::ICmp(c), &[a, b]).into());
            }
            (And, RegType::Pred) => self.b.op(cls, Op::PAnd, &[a, b]),
            (Or, RegType::Pred) => self.b.op(cls, Op::POr, &[a, b]),
            (Eq | Ne, RegType::Pred) => {
                // a == b  ⇔  !(a xor b); xor = (a | b) & !(a & b).
                let o = self.b.op(cls, Op::POr, &[a, b]);
                let n = self.b.op(cls, Op::PAnd, &[a, b]);
                let nn = self.b.op(cls, Op::PNot, &[n.into()]);
                let x = self.b.op(cls, Op::PAnd, &[o.into(), nn.into()]);
                if op == Ne {
                    x
                } else {
                    self.b.op(cls, Op::PNot, &[x.into()])
                }
            }
            _ => {
                return Err(LowerError::Unsupported {
                    what: format!("{op:?} on {dt}"),
                    value: v,
                })
            }
        };
        Ok(self.round(r.into(), dt))
    }
}

/// `1/c` for an f32 immediate `c = ±2^e`, `-126 <= e <= 126` (`1/c` a normal power of two),
/// else `None`. Then `a / c` and `a · (1/c)` are the same IEEE value for every `a`: both are
/// the exact quotient `a · 2^-e` rounded once (IEEE 754-2019 §4.3: each operation is the
/// exact result rounded), denormal results, infinities, zeros and NaN included. A mean's
/// `sum / D` with `D` a power of two (RMSNorm over 128 or 4096 columns) becomes one
/// multiply instead of `div.rn.f32`, whose slow-path branch splits the code around it.
fn exact_reciprocal(c: Operand) -> Option<Operand> {
    let Operand::F32(bits) = c else {
        return None;
    };
    let x = f32::from_bits(bits);
    let e = ((bits >> 23) & 0xff) as i32 - 127;
    let pow2 = bits & 0x7f_ffff == 0 && (-126..=126).contains(&e);
    pow2.then(|| Operand::f32(1.0 / x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reciprocal is taken only for normal powers of two with a normal reciprocal, and
    /// then `a / c == a · (1/c)` bit for bit over values that reach every rounding case:
    /// normal, denormal and overflowing quotients, ±0, ±inf and NaN.
    #[test]
    fn division_by_a_power_of_two_is_the_multiply_by_its_reciprocal() {
        for c in [
            3.0f32,
            0.1,
            2f32.powi(127),
            f32::MIN_POSITIVE / 2.0,
            f32::INFINITY,
            f32::NAN,
            0.0,
        ] {
            assert_eq!(exact_reciprocal(Operand::f32(c)), None, "{c}");
        }
        assert_eq!(exact_reciprocal(Operand::U32(128)), None);
        let mut a = vec![
            0.0f32,
            -0.0,
            1.0,
            3.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
            -7.5e-40,
        ];
        a.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        let mut s = 0x9e37_79b9u32;
        for _ in 0..20000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            a.push(f32::from_bits(s));
        }
        for e in -126..=126 {
            for sign in [1.0f32, -1.0] {
                let c = sign * 2f32.powi(e);
                let Some(Operand::F32(r)) = exact_reciprocal(Operand::f32(c)) else {
                    panic!("2^{e} has an exact reciprocal");
                };
                let r = f32::from_bits(r);
                for &x in &a {
                    let (q, p) = (x / c, x * r);
                    assert!(
                        q.to_bits() == p.to_bits() || (q.is_nan() && p.is_nan()),
                        "{x:e} / {c:e} = {q:e}, · {r:e} = {p:e}"
                    );
                }
            }
        }
    }
}
