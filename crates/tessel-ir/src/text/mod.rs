//! The one textual form of each IR: a deterministic printer and a reader that reads it back
//! (the Cranelift `write.rs` + `cranelift-reader` pattern). It is the debugging view, the
//! per-pass dump (`tessel build --emit graph,kernel`) and the input of the IR filetests.
//!
//! - Graph IR: [`write_graph`] / [`read_graph`], with the [`Fusion`](crate::graph::Fusion)
//!   and [`Schedules`](crate::graph::Schedules) side tables as optional sections.
//! - Kernel IR: [`write_kernel`] / [`read_kernel`] for one kernel, [`write_program`] /
//!   [`read_program`] for a whole step.
//!
//! The grammar is summarised in `docs/ir.md`. Entity numbers in the text (`v3`, `g1`, `r7`,
//! `smem0`, `buf2`, `k0`) are names: the reader numbers entities in the order they are
//! defined, so a printed IR reads back to the same numbers, and a hand-edited one may skip
//! numbers. Graph values and groups may be referred to before their definition (so that a
//! graph the verifier rejects for its order still reads); registers, shared buffers,
//! buffers and kernels must be declared before use.
//!
//! The reader never panics: every malformed input gives a [`ReadError`] with the line and
//! column (both 1-based, columns in characters) of the offending token.

mod lexer;
mod read_graph;
mod read_kernel;
mod write_graph;
mod write_kernel;

pub use read_graph::read_graph;
pub use read_kernel::{read_kernel, read_program};
pub use write_graph::write_graph;
pub use write_kernel::{write_kernel, write_op_stmt, write_program};

use crate::graph::{BinaryOp, GroupKind, ReduceOp, UnaryOp};
use crate::kernel::{FCmp, ICmp, MathFn, Op as KOp, RegType, Space, Special, Width};
use crate::types::DType;

/// A reader error: where in the text, and what was expected or wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ReadError {
    /// 1-based line number.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
    pub message: String,
}

/// `s` as a double-quoted string literal: `\"`, `\\`, `\n`, `\t`, `\r` and `\u{..}` for
/// other control characters.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// True for names printed bare: `[A-Za-z_][A-Za-z0-9_]*`. Anything else is quoted.
pub(crate) fn is_plain_name(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A name bare when [`is_plain_name`], quoted otherwise.
pub(crate) fn name(s: &str) -> String {
    if is_plain_name(s) {
        s.to_string()
    } else {
        quote(s)
    }
}

/// An f64 that reads back bit for bit: the shortest round-trip decimal (`{:?}`) for finite
/// values (so `-0.0` keeps its sign), `inf` / `-inf`, `nan` for the canonical quiet NaN and
/// the raw bits `0x...` (16 hex digits) for any other NaN.
pub(crate) fn fmt_f64(x: f64) -> String {
    if x.is_nan() {
        if x.to_bits() == f64::NAN.to_bits() {
            "nan".to_string()
        } else {
            format!("0x{:016x}", x.to_bits())
        }
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{x:?}")
    }
}

pub(crate) const DTYPES: [DType; 5] =
    [DType::Bf16, DType::F16, DType::F32, DType::I32, DType::Bool];

pub(crate) fn unary_name(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "neg",
        UnaryOp::Abs => "abs",
        UnaryOp::Not => "not",
        UnaryOp::Exp => "exp",
        UnaryOp::Log => "log",
        UnaryOp::Sqrt => "sqrt",
        UnaryOp::Rsqrt => "rsqrt",
        UnaryOp::Sin => "sin",
        UnaryOp::Cos => "cos",
        UnaryOp::Tanh => "tanh",
        UnaryOp::Sigmoid => "sigmoid",
        UnaryOp::Silu => "silu",
        UnaryOp::Erf => "erf",
        UnaryOp::Gelu => "gelu",
        UnaryOp::GeluTanh => "gelu_tanh",
        UnaryOp::Floor => "floor",
        UnaryOp::Ceil => "ceil",
        UnaryOp::Round => "round",
        UnaryOp::Trunc => "trunc",
    }
}

pub(crate) const UNARY_OPS: [UnaryOp; 19] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Not,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Silu,
    UnaryOp::Erf,
    UnaryOp::Gelu,
    UnaryOp::GeluTanh,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Trunc,
];

pub(crate) fn binary_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Rem => "rem",
        BinaryOp::Min => "min",
        BinaryOp::Max => "max",
        BinaryOp::Pow => "pow",
        BinaryOp::Eq => "eq",
        BinaryOp::Ne => "ne",
        BinaryOp::Lt => "lt",
        BinaryOp::Le => "le",
        BinaryOp::Gt => "gt",
        BinaryOp::Ge => "ge",
        BinaryOp::And => "and",
        BinaryOp::Or => "or",
    }
}

pub(crate) const BINARY_OPS: [BinaryOp; 16] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Rem,
    BinaryOp::Min,
    BinaryOp::Max,
    BinaryOp::Pow,
    BinaryOp::Eq,
    BinaryOp::Ne,
    BinaryOp::Lt,
    BinaryOp::Le,
    BinaryOp::Gt,
    BinaryOp::Ge,
    BinaryOp::And,
    BinaryOp::Or,
];

pub(crate) fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
        ReduceOp::Mean => "mean",
        ReduceOp::ArgMax => "argmax",
        ReduceOp::ArgMin => "argmin",
        ReduceOp::LogSumExp => "logsumexp",
    }
}

pub(crate) const REDUCE_OPS: [ReduceOp; 7] = [
    ReduceOp::Sum,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::Mean,
    ReduceOp::ArgMax,
    ReduceOp::ArgMin,
    ReduceOp::LogSumExp,
];

pub(crate) fn group_kind_name(k: GroupKind) -> &'static str {
    match k {
        GroupKind::Elementwise => "elementwise",
        GroupKind::RowReduction => "row_reduction",
        GroupKind::Matmul => "matmul",
        GroupKind::Attention => "attention",
        GroupKind::Update => "update",
        GroupKind::Scan => "scan",
        GroupKind::AttentionDq => "attention_dq",
        GroupKind::AttentionDkv => "attention_dkv",
    }
}

pub(crate) const GROUP_KINDS: [GroupKind; 8] = [
    GroupKind::Elementwise,
    GroupKind::RowReduction,
    GroupKind::Matmul,
    GroupKind::Attention,
    GroupKind::Update,
    GroupKind::Scan,
    GroupKind::AttentionDq,
    GroupKind::AttentionDkv,
];

pub(crate) fn reg_type_from_name(s: &str) -> Option<RegType> {
    [RegType::Pred, RegType::U32, RegType::U64, RegType::F32]
        .into_iter()
        .find(|t| t.name() == s)
}

pub(crate) fn fcmp_name(c: FCmp) -> &'static str {
    match c {
        FCmp::Eq => "eq",
        FCmp::Ne => "ne",
        FCmp::Lt => "lt",
        FCmp::Le => "le",
        FCmp::Gt => "gt",
        FCmp::Ge => "ge",
        FCmp::Nan => "nan",
    }
}

pub(crate) const FCMPS: [FCmp; 7] = [
    FCmp::Eq,
    FCmp::Ne,
    FCmp::Lt,
    FCmp::Le,
    FCmp::Gt,
    FCmp::Ge,
    FCmp::Nan,
];

pub(crate) fn icmp_name(c: ICmp) -> &'static str {
    match c {
        ICmp::Eq => "eq",
        ICmp::Ne => "ne",
        ICmp::LtU => "lt.u",
        ICmp::LeU => "le.u",
        ICmp::GtU => "gt.u",
        ICmp::GeU => "ge.u",
        ICmp::LtS => "lt.s",
        ICmp::LeS => "le.s",
        ICmp::GtS => "gt.s",
        ICmp::GeS => "ge.s",
    }
}

pub(crate) const ICMPS: [ICmp; 10] = [
    ICmp::Eq,
    ICmp::Ne,
    ICmp::LtU,
    ICmp::LeU,
    ICmp::GtU,
    ICmp::GeU,
    ICmp::LtS,
    ICmp::LeS,
    ICmp::GtS,
    ICmp::GeS,
];

pub(crate) fn special_name(s: Special) -> &'static str {
    match s {
        Special::TidX => "tid.x",
        Special::NtidX => "ntid.x",
        Special::CtaidX => "ctaid.x",
        Special::CtaidY => "ctaid.y",
        Special::NctaidX => "nctaid.x",
        Special::LaneId => "laneid",
    }
}

pub(crate) const SPECIALS: [Special; 6] = [
    Special::TidX,
    Special::NtidX,
    Special::CtaidX,
    Special::CtaidY,
    Special::NctaidX,
    Special::LaneId,
];

pub(crate) fn math_name(m: MathFn) -> &'static str {
    match m {
        MathFn::Sin => "sin",
        MathFn::Cos => "cos",
        MathFn::Exp => "exp",
        MathFn::ExpF32 => "exp_f32",
        MathFn::ExpF32Nonpos => "exp_f32_nonpos",
        MathFn::Log => "log",
        MathFn::Rsqrt => "rsqrt",
        MathFn::Pow => "pow",
        MathFn::Tanh => "tanh",
        MathFn::Sigmoid => "sigmoid",
        MathFn::Silu => "silu",
        MathFn::SiluF32 => "silu_f32",
        MathFn::Erf => "erf",
        MathFn::Fmod => "fmod",
    }
}

pub(crate) const MATH_FNS: [MathFn; 14] = [
    MathFn::Sin,
    MathFn::Cos,
    MathFn::Exp,
    MathFn::ExpF32,
    MathFn::ExpF32Nonpos,
    MathFn::Log,
    MathFn::Rsqrt,
    MathFn::Pow,
    MathFn::Tanh,
    MathFn::Sigmoid,
    MathFn::Silu,
    MathFn::SiluF32,
    MathFn::Erf,
    MathFn::Fmod,
];

/// The mnemonic of a kernel op without an attribute (`Special`, `Param` and `SharedAddr`
/// print an attribute after the mnemonic; `FCmp`, `ICmp` and `Math` fold theirs into it).
pub(crate) fn kop_simple_name(op: KOp) -> Option<&'static str> {
    Some(match op {
        KOp::Mov => "mov",
        KOp::FAdd => "fadd",
        KOp::FSub => "fsub",
        KOp::FMul => "fmul",
        KOp::FDiv => "fdiv",
        KOp::FFma => "ffma",
        KOp::FSqrt => "fsqrt",
        KOp::FNeg => "fneg",
        KOp::FAbs => "fabs",
        KOp::FMin => "fmin",
        KOp::FMax => "fmax",
        KOp::FRint => "frint",
        KOp::FFloor => "ffloor",
        KOp::FCeil => "fceil",
        KOp::FTrunc => "ftrunc",
        KOp::IAdd => "iadd",
        KOp::ISub => "isub",
        KOp::IMulLo => "imul.lo",
        KOp::UMulHi => "umul.hi",
        KOp::UDiv => "udiv",
        KOp::URem => "urem",
        KOp::Shl => "shl",
        KOp::ShrU => "shr.u",
        KOp::ShrS => "shr.s",
        KOp::And => "and",
        KOp::Or => "or",
        KOp::Xor => "xor",
        KOp::Not => "not",
        KOp::PAnd => "pand",
        KOp::POr => "por",
        KOp::PNot => "pnot",
        KOp::Select => "select",
        KOp::BitsToF32 => "bits_to_f32",
        KOp::F32ToBits => "f32_to_bits",
        KOp::CvtRniS32F32 => "cvt.rni.s32.f32",
        KOp::CvtRziS32F32 => "cvt.rzi.s32.f32",
        KOp::CvtF32S32 => "cvt.f32.s32",
        KOp::CvtF32U32 => "cvt.f32.u32",
        KOp::PackBf16x2 => "pack.bf16x2",
        KOp::PackF16x2 => "pack.f16x2",
        KOp::F16ToF32 => "f16_to_f32",
        KOp::CvtU64U32 => "cvt.u64.u32",
        KOp::AddU64 => "add.u64",
        KOp::MulWideU32 => "mul.wide.u32",
        KOp::ShflBfly => "shfl.bfly",
        KOp::CvtRnaTf32F32 => "cvt.rna.tf32",
        KOp::FCmp(_)
        | KOp::ICmp(_)
        | KOp::Special(_)
        | KOp::Param(_)
        | KOp::SharedAddr(_)
        | KOp::Math(_) => return None,
    })
}

/// Every kernel op without an attribute, for the reader's table.
pub(crate) const KOPS_SIMPLE: [KOp; 46] = [
    KOp::Mov,
    KOp::FAdd,
    KOp::FSub,
    KOp::FMul,
    KOp::FDiv,
    KOp::FFma,
    KOp::FSqrt,
    KOp::FNeg,
    KOp::FAbs,
    KOp::FMin,
    KOp::FMax,
    KOp::FRint,
    KOp::FFloor,
    KOp::FCeil,
    KOp::FTrunc,
    KOp::IAdd,
    KOp::ISub,
    KOp::IMulLo,
    KOp::UMulHi,
    KOp::UDiv,
    KOp::URem,
    KOp::Shl,
    KOp::ShrU,
    KOp::ShrS,
    KOp::And,
    KOp::Or,
    KOp::Xor,
    KOp::Not,
    KOp::PAnd,
    KOp::POr,
    KOp::PNot,
    KOp::Select,
    KOp::BitsToF32,
    KOp::F32ToBits,
    KOp::CvtRniS32F32,
    KOp::CvtRziS32F32,
    KOp::CvtF32S32,
    KOp::CvtF32U32,
    KOp::PackBf16x2,
    KOp::PackF16x2,
    KOp::F16ToF32,
    KOp::CvtU64U32,
    KOp::AddU64,
    KOp::MulWideU32,
    KOp::ShflBfly,
    KOp::CvtRnaTf32F32,
];

pub(crate) fn space_name(s: Space) -> &'static str {
    match s {
        Space::Global => "global",
        Space::Shared => "shared",
    }
}

pub(crate) fn width_name(w: Width) -> &'static str {
    match w {
        Width::B8 => "b8",
        Width::B16 => "b16",
        Width::B32 => "b32",
        Width::V2 => "v2",
        Width::V4 => "v4",
    }
}

pub(crate) const WIDTHS: [Width; 5] = [Width::B8, Width::B16, Width::B32, Width::V2, Width::V4];
