//! Memory statements: `ld` and `st` (global and shared), the warp-wide `ldmatrix`, and
//! `cp.async` from global to shared memory. Each checks its operands against the kernel IR's
//! rules (`kernel.memory`, `kernel.ldmatrix`, `kernel.cp_async`); outside them it is a
//! [`PtxError::NoRow`] naming the statement and its types (an `ldmatrix` of other than 1, 2
//! or 4 matrices is [`PtxError::Malformed`]).

use std::fmt;

use tessel_ir::kernel::{CpAsyncCache, Kernel, Operand, RegType, Space, Width};
use tessel_ir::Reg;

use super::{class_of, malformed, no_row, operand_type, reg_type, Indent, OperandType, Writer};
use crate::error::PtxError;
use crate::instr::{Arg, Instr, RegClass, RegName};

impl<W: fmt::Write> Writer<W> {
    /// `ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 {d..}, [addr+offset]`.
    pub(super) fn write_ldmatrix(
        &mut self,
        k: &Kernel,
        level: Indent,
        dsts: &[Reg],
        trans: bool,
        addr: Reg,
        offset: i32,
    ) -> Result<(), PtxError> {
        let num = match dsts.len() {
            1 => "x1",
            2 => "x2",
            4 => "x4",
            n => {
                return Err(malformed(
                    k,
                    &format!("ldmatrix of {n} matrices (1, 2 or 4)"),
                ))
            }
        };
        let d = self.typed_regs(k, dsts, RegType::U32, "Ldmatrix")?;
        let a = self
            .typed_regs(k, &[addr], RegType::U32, "Ldmatrix address")?
            .remove(0);
        let mut mods = vec!["sync", "aligned", "m8n8", num];
        if trans {
            mods.push("trans");
        }
        mods.extend(["shared", "b16"]);
        let instr = Instr::new("ldmatrix")
            .m(&mods)
            .arg(Arg::Vector(d))
            .arg(Arg::Addr(Box::new(a.into()), offset));
        self.write_instr(level, &instr)
    }

    /// `cp.async.{ca,cg}.shared.global [dst], [src], bytes{, src_bytes}`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_cp_async(
        &mut self,
        k: &Kernel,
        level: Indent,
        cache: CpAsyncCache,
        bytes: u32,
        (dst, dst_offset): (Reg, i32),
        (src, src_offset): (Reg, i32),
        src_bytes: Option<Operand>,
    ) -> Result<(), PtxError> {
        let what = format!("CpAsync({cache:?}, {bytes} bytes)");
        let src_ty = src_bytes.map(|o| operand_type(k, o)).transpose()?;
        let typed = cache.allows(bytes)
            && reg_type(k, dst)? == RegType::U32
            && reg_type(k, src)? == RegType::U64
            && src_ty.is_none_or(|t| t.ty() == RegType::U32);
        if !typed {
            let mut tys = vec![
                OperandType::Reg(reg_type(k, dst)?),
                OperandType::Reg(reg_type(k, src)?),
            ];
            tys.extend(src_ty);
            return Err(no_row(k, what, &tys, None));
        }
        let d = self.names.reg(dst, RegClass::B32);
        let s = self.names.reg(src, RegClass::B64);
        let mut instr = Instr::new("cp")
            .m(&["async", cache.name(), "shared", "global"])
            .arg(Arg::Addr(Box::new(d.into()), dst_offset))
            .arg(Arg::Addr(Box::new(s.into()), src_offset))
            .arg(Arg::Uint(u64::from(bytes)));
        if let Some(n) = src_bytes {
            instr = instr.arg(self.operand(k, n)?);
        }
        self.write_instr(level, &instr)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_load(
        &mut self,
        k: &Kernel,
        level: Indent,
        dsts: &[Reg],
        space: Space,
        width: Width,
        addr: Reg,
        offset: i32,
    ) -> Result<(), PtxError> {
        let tys = dsts
            .iter()
            .map(|&r| reg_type(k, r).map(OperandType::Reg))
            .collect::<Result<Vec<_>, _>>()?;
        let addr_ty = reg_type(k, addr)?;
        if !access_typed(space, width, addr_ty, &tys) {
            let mut all = vec![OperandType::Reg(addr_ty)];
            all.extend(tys);
            return Err(no_row(
                k,
                format!("ld.{} {width:?}", space_name(space)),
                &all,
                None,
            ));
        }
        let mut regs = Vec::with_capacity(dsts.len());
        for &r in dsts {
            regs.push(self.names.reg(r, class_of(reg_type(k, r)?)));
        }
        let a = self.names.reg(addr, class_of(addr_ty));
        let instr = Instr::new("ld")
            .m(&[space_name(space)])
            .m(width_mods(width))
            .arg(data_arg(regs))
            .arg(Arg::Addr(Box::new(a.into()), offset));
        self.write_instr(level, &instr)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_store(
        &mut self,
        k: &Kernel,
        level: Indent,
        space: Space,
        width: Width,
        addr: Reg,
        offset: i32,
        values: &[Operand],
    ) -> Result<(), PtxError> {
        let tys = values
            .iter()
            .map(|&v| operand_type(k, v))
            .collect::<Result<Vec<_>, _>>()?;
        let addr_ty = reg_type(k, addr)?;
        // st stores registers; legalize moves immediates into them.
        let registers = tys.iter().all(|t| matches!(t, OperandType::Reg(_)));
        if !registers || !access_typed(space, width, addr_ty, &tys) {
            let mut all = vec![OperandType::Reg(addr_ty)];
            all.extend(tys);
            return Err(no_row(
                k,
                format!("st.{} {width:?}", space_name(space)),
                &all,
                None,
            ));
        }
        let a = self.names.reg(addr, class_of(addr_ty));
        let mut regs = Vec::with_capacity(values.len());
        for &v in values {
            if let Operand::Reg(r) = v {
                regs.push(self.names.reg(r, class_of(reg_type(k, r)?)));
            }
        }
        let instr = Instr::new("st")
            .m(&[space_name(space)])
            .m(width_mods(width))
            .arg(Arg::Addr(Box::new(a.into()), offset))
            .arg(data_arg(regs));
        self.write_instr(level, &instr)
    }
}

/// Whether a load's destinations / a store's values and the address fit `ld`/`st`: `B8`
/// and `B16` move the low bits of a `U32` register (PTX lets `ld`/`st` registers be wider
/// than the access); `B32` and vectors move 32-bit registers, `U32` or `F32`.
fn access_typed(space: Space, width: Width, addr: RegType, data: &[OperandType]) -> bool {
    let addr_ok = matches!(
        (space, addr),
        (Space::Global, RegType::U64) | (Space::Shared, RegType::U32)
    );
    let data_ok = data.iter().all(|t| match width {
        Width::B8 | Width::B16 => t.ty() == RegType::U32,
        Width::B32 | Width::V2 | Width::V4 => matches!(t.ty(), RegType::U32 | RegType::F32),
    });
    addr_ok && data_ok && data.len() == width.regs()
}

fn width_mods(width: Width) -> &'static [&'static str] {
    match width {
        Width::B8 => &["u8"],
        Width::B16 => &["u16"],
        Width::B32 => &["b32"],
        Width::V2 => &["v2", "b32"],
        Width::V4 => &["v4", "b32"],
    }
}

fn space_name(space: Space) -> &'static str {
    match space {
        Space::Global => "global",
        Space::Shared => "shared",
    }
}

/// One register as itself, several as a `{...}` vector.
fn data_arg(mut regs: Vec<RegName>) -> Arg {
    if regs.len() == 1 {
        Arg::Reg(regs.remove(0))
    } else {
        Arg::Vector(regs)
    }
}
