//! The op → instruction table: one row per kernel-IR [`Op`], typed by the op's signature
//! ([`Op::signature`], the kernel IR's one table), plus the modifier names the rows use.
//!
//! A typed op has no row when it is in a form `legalize` removes ([`printable`]) or a math
//! call `expand-math` removes; that, and an op outside its signature, is a
//! [`PtxError::NoRow`] naming the op and its types.

use std::fmt;

use tessel_ir::kernel::{FCmp, ICmp, Kernel, Op, Operand, ParamKind, RegType, Special};
use tessel_ir::Reg;

use super::{
    class_of, dynamic_shared_name, malformed, no_row, operand_type, reg_type, Indent, OperandType,
    Writer,
};
use crate::error::PtxError;
use crate::instr::{Arg, Instr, RegClass};
use crate::names::{param_name, shared_name};

impl<W: fmt::Write> Writer<W> {
    /// The op → instruction table.
    pub(super) fn write_op(
        &mut self,
        k: &Kernel,
        level: Indent,
        dst: Reg,
        op: Op,
        args: &[Operand],
    ) -> Result<(), PtxError> {
        let dty = reg_type(k, dst)?;
        let tys = args
            .iter()
            .map(|&a| operand_type(k, a))
            .collect::<Result<Vec<_>, _>>()?;
        let param = match op {
            Op::Param(n) => Some(k.params.get(n as usize).ok_or_else(|| {
                malformed(
                    k,
                    &format!("{dst} reads parameter {n} of {}", k.params.len()),
                )
            })?),
            _ => None,
        };
        let arg_tys: Vec<RegType> = tys.iter().map(|t| t.ty()).collect();
        let typed = op
            .signature()
            .fits(dty, param.map(|p| p.kind.reg_type()), &arg_tys);
        if !typed || !printable(op, dty, &tys) {
            return Err(no_row(k, format!("{op:?}"), &tys, Some(dty)));
        }
        if let Op::SharedAddr(b) = op {
            if k.shared.get(b).is_none() {
                return Err(malformed(
                    k,
                    &format!("{dst} takes the address of undefined {b}"),
                ));
            }
        }

        let d = self.names.reg(dst, class_of(dty));
        let mut s = Vec::with_capacity(args.len());
        for &a in args {
            s.push(self.operand(k, a)?);
        }
        let row = |opcode: &'static str, mods: &[&'static str]| Instr::new(opcode).m(mods).arg(d);
        let instr = match op {
            Op::Mov => row("mov", &[mov_type(dty)]).args(s),
            Op::FAdd => row("add", &["rn", "f32"]).args(s),
            Op::FSub => row("sub", &["rn", "f32"]).args(s),
            Op::FMul => row("mul", &["rn", "f32"]).args(s),
            Op::FDiv => row("div", &["rn", "f32"]).args(s),
            Op::FFma => row("fma", &["rn", "f32"]).args(s),
            Op::FSqrt => row("sqrt", &["rn", "f32"]).args(s),
            Op::FNeg => row("neg", &["f32"]).args(s),
            Op::FAbs => row("abs", &["f32"]).args(s),
            Op::FMin => row("min", &["NaN", "f32"]).args(s),
            Op::FMax => row("max", &["NaN", "f32"]).args(s),
            Op::FRint => row("cvt", &["rni", "f32", "f32"]).args(s),
            Op::FFloor => row("cvt", &["rmi", "f32", "f32"]).args(s),
            Op::FCeil => row("cvt", &["rpi", "f32", "f32"]).args(s),
            Op::FTrunc => row("cvt", &["rzi", "f32", "f32"]).args(s),
            Op::FCmp(c) => row("setp", &[fcmp(c), "f32"]).args(s),
            Op::IAdd => row("add", &["u32"]).args(s),
            Op::ISub => row("sub", &["u32"]).args(s),
            Op::IMulLo => row("mul", &["lo", "u32"]).args(s),
            Op::UMulHi => row("mul", &["hi", "u32"]).args(s),
            Op::UDiv => row("div", &["u32"]).args(s),
            Op::URem => row("rem", &["u32"]).args(s),
            Op::Shl => row("shl", &["b32"]).args(s),
            Op::ShrU => row("shr", &["u32"]).args(s),
            Op::ShrS => {
                let mut s = s.into_iter();
                let a = s.next().map(signed);
                row("shr", &["s32"]).args(a).args(s)
            }
            Op::And => row("and", &["b32"]).args(s),
            Op::Or => row("or", &["b32"]).args(s),
            Op::Xor => row("xor", &["b32"]).args(s),
            Op::Not => row("not", &["b32"]).args(s),
            Op::ICmp(c) => {
                let (cmp, ty) = icmp(c);
                let s = s
                    .into_iter()
                    .map(|a| if ty == "s32" { signed(a) } else { a });
                row("setp", &[cmp, ty]).args(s)
            }
            Op::PAnd => row("and", &["pred"]).args(s),
            Op::POr => row("or", &["pred"]).args(s),
            Op::PNot => row("not", &["pred"]).args(s),
            Op::Select => {
                // IR `a ? b : c`; PTX `selp d, b, c, a`.
                s.rotate_left(1);
                row("selp", &[selp_type(dty)]).args(s)
            }
            Op::BitsToF32 | Op::F32ToBits => row("mov", &["b32"]).args(s),
            Op::CvtRniS32F32 => row("cvt", &["rni", "s32", "f32"]).args(s),
            Op::CvtRziS32F32 => row("cvt", &["rzi", "s32", "f32"]).args(s),
            Op::CvtF32S32 => row("cvt", &["rn", "f32", "s32"]).args(s.into_iter().map(signed)),
            Op::CvtF32U32 => row("cvt", &["rn", "f32", "u32"]).args(s),
            Op::PackBf16x2 => row("cvt", &["rn", "bf16x2", "f32"]).args(s),
            Op::PackF16x2 => row("cvt", &["rn", "f16x2", "f32"]).args(s),
            Op::F16ToF32 => {
                // cvt.f32.f16 reads a .b16 register: narrow into an %h scratch first.
                let h = self.names.fresh(RegClass::B16);
                let narrow = Instr::new("cvt").m(&["u16", "u32"]).arg(h).args(s);
                self.write_instr(level, &narrow)?;
                row("cvt", &["f32", "f16"]).arg(h)
            }
            Op::CvtU64U32 => row("cvt", &["u64", "u32"]).args(s),
            Op::AddU64 => row("add", &["u64"]).args(s),
            Op::MulWideU32 => row("mul", &["wide", "u32"]).args(s),
            Op::Special(sr) => row("mov", &["u32"]).arg(Arg::Special(special(sr))),
            Op::Param(n) => {
                let addr = Arg::Addr(Box::new(Arg::Symbol(param_name(&k.name, n))), 0);
                let tensor_map = matches!(param.map(|p| p.kind), Some(ParamKind::TensorMap));
                if tensor_map {
                    // A `__grid_constant__` tensor map: the generic address of the
                    // parameter itself (PTX ISA §9.7.9.25.5.1: a tensor map may live in
                    // .param space), not a value loaded from it.
                    let sym = Arg::Symbol(param_name(&k.name, n));
                    self.write_instr(level, &row("mov", &["b64"]).arg(sym))?;
                    row("cvta", &["param", "u64"]).arg(d)
                } else if dty == RegType::U64 {
                    self.write_instr(level, &row("ld", &["param", "u64"]).arg(addr))?;
                    // A kernel pointer parameter is a generic address of global memory.
                    row("cvta", &["to", "global", "u64"]).arg(d)
                } else {
                    row("ld", &["param", "u32"]).arg(addr)
                }
            }
            Op::SharedAddr(b) => {
                let n = self.names.shared(b);
                let name = if k.dynamic_shared_bytes() > 0 {
                    dynamic_shared_name(k)
                } else {
                    shared_name(n)
                };
                row("mov", &["u32"]).arg(Arg::Symbol(name))
            }
            Op::ShflBfly => row("shfl", &["sync", "bfly", "b32"])
                .args(s)
                .arg(Arg::Hex(0x1f))
                .arg(Arg::Hex(0xffff_ffff)),
            // No row: expand-math replaces a math-library call by plain ops.
            Op::Math(_) => return Err(no_row(k, format!("{op:?}"), &tys, Some(dty))),
            Op::CvtRnaTf32F32 => row("cvt", &["rna", "tf32", "f32"]).args(s),
        };
        self.write_instr(level, &instr)
    }
}

/// Whether PTX can say a typed op as it stands: `legalize` rewrites the forms it cannot.
fn printable(op: Op, dst: RegType, args: &[OperandType]) -> bool {
    match op {
        // selp has no .pred type; legalize rewrites a predicate select into and/or/not.
        Op::Select => dst != RegType::Pred,
        // shfl.sync exchanges register data; legalize moves an immediate value to a register.
        Op::ShflBfly => !matches!(args.first(), Some(OperandType::Imm(_))),
        _ => true,
    }
}

fn mov_type(ty: RegType) -> &'static str {
    match ty {
        RegType::Pred => "pred",
        RegType::U32 => "b32",
        RegType::U64 => "b64",
        RegType::F32 => "f32",
    }
}

fn selp_type(ty: RegType) -> &'static str {
    match ty {
        RegType::F32 => "f32",
        RegType::U64 => "b64",
        _ => "b32",
    }
}

fn fcmp(c: FCmp) -> &'static str {
    match c {
        FCmp::Eq => "eq",
        // IR `Ne` is unordered: true when an operand is NaN.
        FCmp::Ne => "neu",
        FCmp::Lt => "lt",
        FCmp::Le => "le",
        FCmp::Gt => "gt",
        FCmp::Ge => "ge",
        FCmp::Nan => "nan",
    }
}

/// The comparison and its operand type.
fn icmp(c: ICmp) -> (&'static str, &'static str) {
    match c {
        ICmp::Eq => ("eq", "u32"),
        ICmp::Ne => ("ne", "u32"),
        ICmp::LtU => ("lo", "u32"),
        ICmp::LeU => ("ls", "u32"),
        ICmp::GtU => ("hi", "u32"),
        ICmp::GeU => ("hs", "u32"),
        ICmp::LtS => ("lt", "s32"),
        ICmp::LeS => ("le", "s32"),
        ICmp::GtS => ("gt", "s32"),
        ICmp::GeS => ("ge", "s32"),
    }
}

fn special(s: Special) -> &'static str {
    match s {
        Special::TidX => "%tid.x",
        Special::NtidX => "%ntid.x",
        Special::CtaidX => "%ctaid.x",
        Special::CtaidY => "%ctaid.y",
        Special::NctaidX => "%nctaid.x",
        Special::LaneId => "%laneid",
    }
}

/// A `u32` immediate read by an `.s32` instruction, printed as the signed value of its bits.
fn signed(a: Arg) -> Arg {
    match a {
        Arg::Uint(v) => Arg::Sint(i64::from(v as u32 as i32)),
        a => a,
    }
}
