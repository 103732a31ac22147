//! Kernel-IR ops and their signature table, the one list of what each op takes and gives.
//!
//! An [`Op`] is one scalar instruction, `dst = op(args)`, executed per thread (the semantics
//! are in each variant's doc and in the [`kernel`](super) module's). [`Op::signature`] is one
//! row per op: the register type of each operand and of the result, and any rule on an
//! operand beyond its type. It is the only copy (as Cranelift keeps one constraints table
//! behind `Opcode::constraints()`): the verifier checks every `Stmt::Op` against it (rule
//! `kernel.signature`), the PTX writer types its instruction rows by it, and the executor
//! picks each operand's register file (32- or 64-bit) by it.
//!
//! Adding an op:
//! 1. a variant of [`Op`] here, its semantics in the doc, and its row in [`Op::signature`];
//! 2. its mnemonic in the text form (`text/mod.rs`: `kop_simple_name` and `KOPS_SIMPLE`);
//! 3. its instruction row in the PTX writer (`tessel-ptx`, `writer/ops.rs`), or a rewrite in
//!    `legalize` / `expand-math` (`tessel-passes`) where PTX has no one instruction;
//! 4. its evaluation in the executor (`tessel-ref`, `Cta::op` in `exec/cta.rs`).

use super::RegType;
use crate::entities::SharedBuf;

/// f32 comparisons. All are IEEE "ordered" (false when an operand is NaN) except `Ne`,
/// which is unordered (true when an operand is NaN; PTX `neu`), and `Nan`, true when either
/// operand is NaN.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum FCmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Nan,
}

/// 32-bit integer comparisons; `S` signed, `U` unsigned.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ICmp {
    Eq,
    Ne,
    LtU,
    LeU,
    GtU,
    GeU,
    LtS,
    LeS,
    GtS,
    GeS,
}

/// Hardware-provided per-thread values (PTX special registers), all `U32`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Special {
    /// `%tid.x`: thread index in the CTA.
    TidX,
    /// `%ntid.x`: threads per CTA.
    NtidX,
    /// `%ctaid.x`, `%ctaid.y`: CTA index in the grid.
    CtaidX,
    CtaidY,
    /// `%nctaid.x`: CTAs in the grid along x.
    NctaidX,
    /// `%laneid`: lane in the warp, 0..32.
    LaneId,
}

/// Math-library functions, placeholders until `expand-math` (f32 in, f32 out; `Pow` and `Fmod` take
/// two operands). Their algorithms and error bounds: `tessel-math`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum MathFn {
    Sin,
    Cos,
    Exp,
    /// exp in single f32 values, within 1 ulp (tessel_math::exp_f32): the fused
    /// attention's online softmax, whose exps are rounded to bf16 before use.
    ExpF32,
    /// [`MathFn::ExpF32`] for arguments at most 0 (tessel_math::exp_f32_nonpos, within 1
    /// ulp, about 20 operations): the online softmax's `exp(x - m)` and `exp(m_old - m)`,
    /// whose running maximum `m` is at least every `x`. Wrong above 43.6.
    ExpF32Nonpos,
    Log,
    Rsqrt,
    Pow,
    Tanh,
    Sigmoid,
    Silu,
    /// silu in single f32 values, within 1 ulp (tessel_math::silu_f32): a silu whose
    /// result is rounded to bf16 or f16 (a SwiGLU's gate).
    SiluF32,
    /// The error function (tessel_math::erf, within 1 ulp).
    Erf,
    /// `fmod(a, b)`, two operands, exact (tessel_math::fmod).
    Fmod,
}

/// One instruction: `dst = op(args)`. Operand and result types are fixed per op: each
/// variant's doc names them as `args -> dst`, and [`Op::signature`] is the table the
/// verifier, the PTX writer and the executor read them from.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    /// `a -> same type`: copy.
    Mov,
    /// `f32, f32 -> f32`, round to nearest even.
    FAdd,
    FSub,
    FMul,
    FDiv,
    /// `f32, f32, f32 -> f32`: `a·b + c` rounded once.
    FFma,
    /// `f32 -> f32`, correctly rounded.
    FSqrt,
    FNeg,
    FAbs,
    /// `f32, f32 -> f32`, NaN-propagating, `-0 < +0`.
    FMin,
    FMax,
    /// `f32 -> f32`: round to the nearest integral value, ties to even.
    FRint,
    /// `f32 -> f32`: round to an integral value toward -inf, +inf and zero (PTX ISA
    /// "cvt": `cvt.rmi`, `cvt.rpi`, `cvt.rzi.f32.f32`); exact, ±0, ±inf and NaN kept.
    FFloor,
    FCeil,
    FTrunc,
    /// `f32, f32 -> pred`.
    FCmp(FCmp),
    /// `u32, u32 -> u32`, wrapping.
    IAdd,
    ISub,
    /// Low 32 bits of the product.
    IMulLo,
    /// High 32 bits of the unsigned 64-bit product.
    UMulHi,
    /// Unsigned division and remainder (divisor ≠ 0).
    UDiv,
    URem,
    /// Shifts by `b < 32`.
    Shl,
    ShrU,
    ShrS,
    And,
    Or,
    Xor,
    /// `u32 -> u32`: bitwise not.
    Not,
    /// `u32, u32 -> pred`.
    ICmp(ICmp),
    /// `pred, pred -> pred`.
    PAnd,
    POr,
    /// `pred -> pred`.
    PNot,
    /// `pred, T, T -> T`: `a ? b : c`.
    Select,
    /// `u32 -> f32` and `f32 -> u32`: reinterpret the bits.
    BitsToF32,
    F32ToBits,
    /// `f32 -> u32`: to signed integer, nearest even / toward zero; saturating, NaN → 0.
    CvtRniS32F32,
    CvtRziS32F32,
    /// `u32 -> f32`: signed / unsigned integer to float, round to nearest even.
    CvtF32S32,
    CvtF32U32,
    /// `f32 hi, f32 lo -> u32`: two floats rounded to nearest even to bf16 and packed, `hi`
    /// in bits 31..16 and `lo` in bits 15..0 (PTX `cvt.rn.bf16x2.f32`; NaN gives 0x7fff).
    PackBf16x2,
    /// As [`Op::PackBf16x2`] for f16 (PTX `cvt.rn.f16x2.f32`).
    PackF16x2,
    /// `u32 -> f32`: the f16 in bits 15..0, converted exactly.
    F16ToF32,
    /// `u32 -> u64`: zero-extend.
    CvtU64U32,
    /// `u64, u64 -> u64`.
    AddU64,
    /// `u32, u32 -> u64`: full unsigned product.
    MulWideU32,
    /// `-> u32`: a special register.
    Special(Special),
    /// `-> u64` (pointer) or `u32` (scalar): kernel parameter number `n`.
    Param(u32),
    /// `-> u32`: the shared-window address of a shared buffer.
    SharedAddr(SharedBuf),
    /// `T, u32 -> T` (T 32-bit): the value of `a` in lane `laneid ^ b` of the warp
    /// (PTX `shfl.sync.bfly.b32` with all 32 lanes participating).
    ShflBfly,
    /// `f32 [, f32] -> f32`: a math-library call, removed by `expand-math`.
    Math(MathFn),
    /// `f32 -> u32`: `a` rounded to TF32 (10 fraction bits) to nearest, ties away from zero,
    /// as an f32 bit pattern whose low 13 bits are 0 (PTX `cvt.rna.tf32.f32`, sm_80+). Carry
    /// out of the fraction rounds up the exponent, so values past the largest TF32 become
    /// infinity; ±0, ±infinity and denormals follow the same rule (denormals are kept). A NaN
    /// gives a NaN; the executor returns `0x7fffffff` (the PTX ISA does not fix the payload).
    /// The operand format of [`MmaShape::M16N8K8Tf32`](super::MmaShape::M16N8K8Tf32).
    CvtRnaTf32F32,
}

/// The register type of an operand or of the result in a [`Signature`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum SigType {
    /// Exactly this register type (an immediate of the same kind also matches).
    Is(RegType),
    /// The op's type variable `T`: the destination's type, the same at every occurrence.
    T,
    /// `T` restricted to the 32-bit types, `U32` and `F32`.
    T32,
    /// The type of the kernel parameter read: `U64` for a pointer, `U32` for a scalar
    /// ([`ParamKind::reg_type`](super::ParamKind::reg_type)). Only [`Op::Param`]'s result.
    Param,
}

/// A rule on an op's second operand (`b`) beyond its type: the op is defined only within it
/// (see the op's doc). The verifier rejects an immediate that breaks it (rule
/// `kernel.signature`); the executor reports a register that breaks it as a fault at run
/// time.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ArgRule {
    /// `b` is a shift amount, below 32.
    ShiftBelow32,
    /// `b` is a divisor, not 0.
    NonzeroDivisor,
}

/// What one kernel op takes and gives: the `args -> dst` of each [`Op`]'s doc.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Signature {
    /// One entry per operand, in order; the operand count is its length.
    pub args: &'static [SigType],
    pub result: SigType,
    /// A rule on operand `b`, if any.
    pub rule: Option<ArgRule>,
}

impl Signature {
    const fn new(args: &'static [SigType], result: SigType) -> Signature {
        Signature {
            args,
            result,
            rule: None,
        }
    }

    const fn with_rule(self, rule: ArgRule) -> Signature {
        Signature {
            rule: Some(rule),
            ..self
        }
    }

    /// Whether a destination of type `dst` can hold the result. `param` is the type of the
    /// kernel parameter an [`Op::Param`] reads (`None` when there is no such parameter, which
    /// no type fits).
    pub fn result_fits(self, dst: RegType, param: Option<RegType>) -> bool {
        match self.result {
            SigType::Is(t) => dst == t,
            SigType::T => true,
            SigType::T32 => matches!(dst, RegType::U32 | RegType::F32),
            SigType::Param => param == Some(dst),
        }
    }

    /// The types the operands must have (the kinds of immediates), in order, when the
    /// destination is `dst`: `T` and `T32` stand for the destination's type.
    pub fn arg_types(self, dst: RegType) -> impl Iterator<Item = RegType> {
        self.args.iter().map(move |a| match *a {
            SigType::Is(t) => t,
            SigType::T | SigType::T32 | SigType::Param => dst,
        })
    }

    /// Whether `dst = op(args)` is typed by this signature: the result fits `dst` (as
    /// [`Signature::result_fits`]) and `args`, the operands' types, match in number and type.
    /// Rules on values ([`Signature::rule`]) are not checked.
    pub fn fits(self, dst: RegType, param: Option<RegType>, args: &[RegType]) -> bool {
        self.result_fits(dst, param) && self.arg_types(dst).eq(args.iter().copied())
    }
}

const P: SigType = SigType::Is(RegType::Pred);
const U: SigType = SigType::Is(RegType::U32);
const D: SigType = SigType::Is(RegType::U64);
const F: SigType = SigType::Is(RegType::F32);

impl Op {
    /// The op's signature: one row per op, the table of operand and result types.
    pub fn signature(self) -> Signature {
        use SigType::{T, T32};
        let s = Signature::new;
        match self {
            Op::Mov => s(&[T], T),
            Op::FAdd | Op::FSub | Op::FMul | Op::FDiv | Op::FMin | Op::FMax => s(&[F, F], F),
            Op::FFma => s(&[F, F, F], F),
            Op::FSqrt | Op::FNeg | Op::FAbs | Op::FRint | Op::FFloor | Op::FCeil | Op::FTrunc => {
                s(&[F], F)
            }
            Op::FCmp(_) => s(&[F, F], P),
            Op::IAdd | Op::ISub | Op::IMulLo | Op::UMulHi | Op::And | Op::Or | Op::Xor => {
                s(&[U, U], U)
            }
            Op::UDiv | Op::URem => s(&[U, U], U).with_rule(ArgRule::NonzeroDivisor),
            Op::Shl | Op::ShrU | Op::ShrS => s(&[U, U], U).with_rule(ArgRule::ShiftBelow32),
            Op::Not => s(&[U], U),
            Op::ICmp(_) => s(&[U, U], P),
            Op::PAnd | Op::POr => s(&[P, P], P),
            Op::PNot => s(&[P], P),
            Op::Select => s(&[P, T, T], T),
            Op::BitsToF32 => s(&[U], F),
            Op::F32ToBits => s(&[F], U),
            Op::CvtRniS32F32 | Op::CvtRziS32F32 => s(&[F], U),
            Op::CvtF32S32 | Op::CvtF32U32 => s(&[U], F),
            Op::PackBf16x2 | Op::PackF16x2 => s(&[F, F], U),
            Op::F16ToF32 => s(&[U], F),
            Op::CvtU64U32 => s(&[U], D),
            Op::AddU64 => s(&[D, D], D),
            Op::MulWideU32 => s(&[U, U], D),
            Op::Special(_) | Op::SharedAddr(_) => s(&[], U),
            Op::Param(_) => s(&[], SigType::Param),
            Op::ShflBfly => s(&[T32, U], T32),
            Op::Math(MathFn::Pow | MathFn::Fmod) => s(&[F, F], F),
            Op::Math(_) => s(&[F], F),
            Op::CvtRnaTf32F32 => s(&[F], U),
        }
    }
}
