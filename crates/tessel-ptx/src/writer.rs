//! The PTX writer: a legalized [`Kernel`] in, PTX text out (naga `back/msl/writer.rs` style).
//!
//! [`Writer`] holds the output, the options and the [`Namer`] of the kernel being printed,
//! with one `write_*` method per construct. Every IR op is one row of [`Writer::write_op`]'s
//! table (design §7: every f32 `add`/`sub`/`mul` carries `.rn`, which also forbids ptxas
//! from contracting them into an `fma`; `fma`, `div`, `sqrt` and the conversions are `.rn`
//! too; nothing is `.approx` or `.ftz`). Operand and result types come from the kernel IR's
//! one table, [`Op::signature`]; an op without a row, with operand types outside its
//! signature, or in a form `legalize` removes, is a [`PtxError::NoRow`] naming the op and
//! its types.
//!
//! Inputs must have been through `tessel-passes`' `legalize`; the writer does not rewrite.
//! A kernel's body is printed into a buffer first, because registers are named in the order
//! the writer meets them (a statement's destinations, then its operands in IR order) and
//! their declarations go above the body.

use std::fmt;

use tessel_ir::kernel::{
    is_ptx_followsym, is_ptx_identifier, CpAsyncCache, FCmp, ICmp, Kernel, MmaShape, Op, Operand,
    ParamKind, Program, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{Reg, SharedBuf};

use crate::error::PtxError;
use crate::instr::{Arg, Instr, Label, RegClass, RegName};
use crate::names::{param_name, shared_name, Namer};
use crate::options::PtxOptions;

/// Prints `k` as a PTX module of one entry.
///
/// # Errors
/// [`PtxError`] if the kernel was not legalized or is malformed, or the options are
/// unsupported.
pub fn write_kernel(k: &Kernel, opts: &PtxOptions) -> Result<String, PtxError> {
    write_module(&[k], opts)
}

/// Prints `kernels` as one PTX module: one header, then one `.entry` per kernel in order.
///
/// # Errors
/// As [`write_kernel`]; also [`PtxError::Malformed`] if two kernels share a name.
pub fn write_module(kernels: &[&Kernel], opts: &PtxOptions) -> Result<String, PtxError> {
    for (i, k) in kernels.iter().enumerate() {
        if kernels[..i].iter().any(|other| other.name == k.name) {
            return Err(PtxError::Malformed {
                kernel: k.name.clone(),
                message: "two kernels of the module have this name".to_owned(),
            });
        }
    }
    let mut w = Writer::new(String::new(), opts)?;
    w.write_header()?;
    for k in kernels {
        w.write_kernel(k)?;
    }
    Ok(w.finish())
}

/// Prints every kernel of `p`, in kernel order, as one module.
///
/// # Errors
/// As [`write_module`].
pub fn write_program(p: &Program, opts: &PtxOptions) -> Result<String, PtxError> {
    let kernels: Vec<&Kernel> = p.kernels.values().collect();
    write_module(&kernels, opts)
}

/// Indentation depth of an instruction; four spaces a level. Labels sit at column 0.
#[derive(Copy, Clone, Debug)]
struct Indent(usize);

impl Indent {
    fn deeper(self) -> Indent {
        Indent(self.0 + 1)
    }
}

impl fmt::Display for Indent {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for _ in 0..self.0 {
            f.write_str("    ")?;
        }
        Ok(())
    }
}

/// The type of an operand as the row table sees it.
#[derive(Copy, Clone, PartialEq, Eq)]
enum OperandType {
    Reg(RegType),
    Imm(RegType),
}

impl OperandType {
    fn ty(self) -> RegType {
        match self {
            OperandType::Reg(t) | OperandType::Imm(t) => t,
        }
    }
}

impl fmt::Display for OperandType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            OperandType::Reg(t) => f.write_str(t.name()),
            OperandType::Imm(t) => write!(f, "imm {}", t.name()),
        }
    }
}

/// A PTX writer over any `fmt::Write` output.
pub struct Writer<W> {
    out: W,
    options: PtxOptions,
    names: Namer,
}

impl<W: fmt::Write> Writer<W> {
    /// A writer appending to `out`.
    ///
    /// # Errors
    /// [`PtxError::Options`] for an address size other than 64 or an empty target.
    pub fn new(out: W, options: &PtxOptions) -> Result<Self, PtxError> {
        if options.address_size != 64 {
            return Err(PtxError::Options(format!(
                ".address_size {} (only 64 is supported)",
                options.address_size
            )));
        }
        if options.target.is_empty() || !options.target.chars().all(is_ptx_followsym) {
            return Err(PtxError::Options(format!(
                ".target {:?} is not a target name",
                options.target
            )));
        }
        Ok(Writer {
            out,
            options: options.clone(),
            names: Namer::default(),
        })
    }

    /// The output.
    pub fn finish(self) -> W {
        self.out
    }

    /// The module header: `.version`, `.target`, `.address_size` from the options.
    ///
    /// # Errors
    /// [`PtxError::Fmt`] if the output fails.
    pub fn write_header(&mut self) -> Result<(), PtxError> {
        let o = &self.options;
        writeln!(self.out, "//")?;
        writeln!(self.out, "// Generated by tessel")?;
        writeln!(self.out, "//")?;
        writeln!(self.out)?;
        writeln!(self.out, ".version {}.{}", o.version.0, o.version.1)?;
        writeln!(self.out, ".target {}", o.target)?;
        writeln!(self.out, ".address_size {}", o.address_size)?;
        Ok(())
    }

    /// One `.visible .entry`: signature, `.reqntid`, shared buffers, register declarations,
    /// body, `ret`.
    ///
    /// # Errors
    /// [`PtxError::NoRow`] / [`PtxError::Malformed`] for a kernel the table cannot print.
    pub fn write_kernel(&mut self, k: &Kernel) -> Result<(), PtxError> {
        if !is_ptx_identifier(&k.name) {
            return Err(malformed(k, "the name is not a PTX identifier"));
        }
        if k.block.contains(&0) {
            return Err(malformed(k, "a block dimension is 0"));
        }
        let mut body = Writer {
            out: String::new(),
            options: self.options.clone(),
            names: Namer::default(),
        };
        body.write_block(k, &k.body, Indent(1))?;
        body.write_instr(Indent(1), &Instr::new("ret"))?;
        // Unused buffers still take their place in the CTA's shared memory.
        for b in k.shared.keys() {
            body.names.shared(b);
        }
        let Writer {
            out: text, names, ..
        } = body;
        self.names = names;

        writeln!(self.out)?;
        self.write_dynamic_shared(k)?;
        self.write_entry_comment(k)?;
        self.write_signature(k)?;
        writeln!(self.out, "{{")?;
        self.write_shared_decls(k)?;
        self.write_reg_decls()?;
        writeln!(self.out)?;
        self.out.write_str(&text)?;
        writeln!(self.out, "}}")?;
        Ok(())
    }

    fn write_entry_comment(&mut self, k: &Kernel) -> Result<(), PtxError> {
        let [bx, by, bz] = k.block;
        let [gx, gy, gz] = k.grid;
        writeln!(
            self.out,
            "// {}: block [{bx}, {by}, {bz}], grid [{gx}, {gy}, {gz}]",
            k.name
        )?;
        // ptxas accepts ASCII only, comments included: anything else is escaped.
        for (i, line) in k.schedule.lines().enumerate() {
            let lead = if i == 0 { "schedule: " } else { "          " };
            let ascii: String = line
                .trim_end()
                .chars()
                .map(|c| {
                    if c.is_ascii() {
                        c.to_string()
                    } else {
                        c.escape_unicode().to_string()
                    }
                })
                .collect();
            writeln!(self.out, "// {lead}{ascii}")?;
        }
        Ok(())
    }

    fn write_signature(&mut self, k: &Kernel) -> Result<(), PtxError> {
        write!(self.out, ".visible .entry {}(", k.name)?;
        for (n, p) in (0u32..).zip(&k.params) {
            let (ty, what) = match p.kind {
                ParamKind::Ptr { dtype, writes } => (
                    "u64",
                    format!("{dtype}*{}", if writes { ", written" } else { "" }),
                ),
                ParamKind::U32 => ("u32", "u32".to_owned()),
            };
            let sep = if n + 1 < u32::try_from(k.params.len()).unwrap_or(u32::MAX) {
                ","
            } else {
                ""
            };
            write!(
                self.out,
                "\n    .param .{ty} {}{sep} // {}: {what}",
                param_name(&k.name, n),
                p.name
            )?;
        }
        if !k.params.is_empty() {
            writeln!(self.out)?;
        }
        writeln!(self.out, ")")?;
        let [x, y, z] = k.block;
        writeln!(self.out, ".reqntid {x}, {y}, {z}")?;
        if k.min_ctas_per_sm > 0 {
            writeln!(self.out, ".minnctapersm {}", k.min_ctas_per_sm)?;
        }
        Ok(())
    }

    /// A kernel with more than 48 KiB of shared memory has one buffer, the launch's dynamic
    /// shared memory: an `.extern .shared` array of unknown size at module scope (PTX ISA
    /// §5.1.5, "Shared State Space"), named after the kernel.
    fn write_dynamic_shared(&mut self, k: &Kernel) -> Result<(), PtxError> {
        let bytes = k.dynamic_shared_bytes();
        if bytes == 0 {
            return Ok(());
        }
        let [decl] = k.shared.values().copied().collect::<Vec<_>>()[..] else {
            return Err(malformed(
                k,
                "more than 48 KiB of shared memory in more than one buffer",
            ));
        };
        if !decl.align.is_power_of_two() {
            return Err(malformed(
                k,
                "a shared buffer's alignment is not a power of two",
            ));
        }
        writeln!(
            self.out,
            ".extern .shared .align {} .b8 {}[]; // {bytes} bytes, dynamic",
            decl.align,
            dynamic_shared_name(k)
        )?;
        Ok(())
    }

    fn write_shared_decls(&mut self, k: &Kernel) -> Result<(), PtxError> {
        let mut bufs: Vec<(u32, SharedBuf)> =
            k.shared.keys().map(|b| (self.names.shared(b), b)).collect();
        bufs.sort_unstable();
        // Beyond the static limit, the kernel's one buffer is the launch's dynamic shared
        // memory (`Kernel::dynamic_shared_bytes`), declared before the entry.
        if k.dynamic_shared_bytes() > 0 {
            return Ok(());
        }
        for (n, b) in bufs {
            let decl = k.shared[b];
            if !decl.align.is_power_of_two() {
                return Err(malformed(
                    k,
                    "a shared buffer's alignment is not a power of two",
                ));
            }
            writeln!(
                self.out,
                "    .shared .align {} .b8 {}[{}];",
                decl.align,
                shared_name(n),
                decl.bytes
            )?;
        }
        Ok(())
    }

    fn write_reg_decls(&mut self) -> Result<(), PtxError> {
        for class in RegClass::ALL {
            let n = self.names.count(class);
            if n > 0 {
                writeln!(
                    self.out,
                    "    .reg .{} %{}<{n}>;",
                    class.decl_type(),
                    class.prefix()
                )?;
            }
        }
        Ok(())
    }

    fn write_block(&mut self, k: &Kernel, stmts: &[Stmt], level: Indent) -> Result<(), PtxError> {
        stmts.iter().try_for_each(|s| self.write_stmt(k, s, level))
    }

    fn write_stmt(&mut self, k: &Kernel, s: &Stmt, level: Indent) -> Result<(), PtxError> {
        match s {
            Stmt::Op { dst, op, args } => self.write_op(k, level, *dst, *op, args),
            Stmt::Load {
                dsts,
                space,
                width,
                addr,
                offset,
            } => self.write_load(k, level, dsts, *space, *width, *addr, *offset),
            Stmt::Store {
                space,
                width,
                addr,
                offset,
                values,
            } => self.write_store(k, level, *space, *width, *addr, *offset, values),
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => self.write_for(k, level, *var, [*start, *end, *step], body),
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => self.write_if(k, level, *cond, then_body, else_body),
            Stmt::Barrier => self.write_barrier(level),
            Stmt::Mma { shape, d, a, b, c } => self.write_mma(k, level, *shape, d, a, b, c),
            Stmt::Ldmatrix {
                dsts,
                trans,
                addr,
                offset,
            } => self.write_ldmatrix(k, level, dsts, *trans, *addr, *offset),
            Stmt::CpAsync {
                cache,
                bytes,
                dst,
                dst_offset,
                src,
                src_offset,
                src_bytes,
            } => self.write_cp_async(
                k,
                level,
                *cache,
                *bytes,
                (*dst, *dst_offset),
                (*src, *src_offset),
                *src_bytes,
            ),
            Stmt::CpAsyncCommit => {
                self.write_instr(level, &Instr::new("cp").m(&["async", "commit_group"]))
            }
            Stmt::CpAsyncWait(n) => self.write_instr(
                level,
                &Instr::new("cp")
                    .m(&["async", "wait_group"])
                    .arg(Arg::Uint(u64::from(*n))),
            ),
            Stmt::CpAsyncWaitAll => {
                self.write_instr(level, &Instr::new("cp").m(&["async", "wait_all"]))
            }
        }
    }

    /// Registers of one class, named in order, or `NoRow` naming `what` and the types found.
    fn typed_regs(
        &mut self,
        k: &Kernel,
        regs: &[Reg],
        want: RegType,
        what: &str,
    ) -> Result<Vec<RegName>, PtxError> {
        let tys = regs
            .iter()
            .map(|&r| reg_type(k, r).map(OperandType::Reg))
            .collect::<Result<Vec<_>, _>>()?;
        if tys.iter().any(|t| t.ty() != want) {
            return Err(no_row(k, what.to_owned(), &tys, None));
        }
        Ok(regs
            .iter()
            .map(|&r| self.names.reg(r, class_of(want)))
            .collect())
    }

    /// `mma.sync.aligned.<shape>.row.col.f32.<t>.<t>.f32 {d}, {a}, {b}, {c}`.
    #[allow(clippy::too_many_arguments)]
    fn write_mma(
        &mut self,
        k: &Kernel,
        level: Indent,
        shape: MmaShape,
        d: &[Reg; 4],
        a: &[Reg],
        b: &[Reg],
        c: &[Reg; 4],
    ) -> Result<(), PtxError> {
        let what = format!("Mma({shape:?})");
        if a.len() != shape.a_regs() || b.len() != shape.b_regs() {
            return Err(malformed(
                k,
                &format!(
                    "mma.{} with {} A and {} B registers",
                    shape.name(),
                    a.len(),
                    b.len()
                ),
            ));
        }
        let d = self.typed_regs(k, d, RegType::F32, &format!("{what} D"))?;
        let a = self.typed_regs(k, a, RegType::U32, &format!("{what} A"))?;
        let b = self.typed_regs(k, b, RegType::U32, &format!("{what} B"))?;
        let c = self.typed_regs(k, c, RegType::F32, &format!("{what} C"))?;
        let (mnk, ty) = match shape {
            MmaShape::M16N8K16Bf16 => ("m16n8k16", "bf16"),
            MmaShape::M16N8K16F16 => ("m16n8k16", "f16"),
            MmaShape::M16N8K8Tf32 => ("m16n8k8", "tf32"),
        };
        let instr = Instr::new("mma")
            .m(&["sync", "aligned", mnk, "row", "col", "f32", ty, ty, "f32"])
            .arg(Arg::Vector(d))
            .arg(Arg::Vector(a))
            .arg(Arg::Vector(b))
            .arg(Arg::Vector(c));
        self.write_instr(level, &instr)
    }

    /// `ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 {d..}, [addr+offset]`.
    fn write_ldmatrix(
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
    fn write_cp_async(
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

    /// The op → instruction table.
    fn write_op(
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
                if dty == RegType::U64 {
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

    #[allow(clippy::too_many_arguments)]
    fn write_load(
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
    fn write_store(
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

    /// `var = start; while var < end (unsigned) { body; var += step }`:
    ///
    /// ```text
    ///     mov.u32 var, start;
    /// $L__forN_head:
    ///     setp.lo.u32 p, var, end;
    ///     @!p bra $L__forN_end;
    ///         body
    ///     add.u32 var, var, step;
    ///     bra $L__forN_head;
    /// $L__forN_end:
    /// ```
    fn write_for(
        &mut self,
        k: &Kernel,
        level: Indent,
        var: Reg,
        bounds: [Operand; 3],
        body: &[Stmt],
    ) -> Result<(), PtxError> {
        let var_ty = reg_type(k, var)?;
        let tys = bounds
            .iter()
            .map(|&b| operand_type(k, b))
            .collect::<Result<Vec<_>, _>>()?;
        if var_ty != RegType::U32 || tys.iter().any(|t| t.ty() != RegType::U32) {
            return Err(no_row(k, "For".to_owned(), &tys, Some(var_ty)));
        }
        let v = self.names.reg(var, RegClass::B32);
        let [start, end, step] = bounds;
        let (start, end, step) = (
            self.operand(k, start)?,
            self.operand(k, end)?,
            self.operand(k, step)?,
        );
        let labels = self.names.structure("for");
        let (head, exit) = (labels.label("head"), labels.label("end"));
        let p = self.names.fresh(RegClass::Pred);

        self.write_instr(level, &Instr::new("mov").m(&["u32"]).arg(v).arg(start))?;
        self.write_label(head)?;
        let test = Instr::new("setp").m(&["lo", "u32"]).arg(p).arg(v).arg(end);
        self.write_instr(level, &test)?;
        self.write_instr(level, &Instr::new("bra").arg(exit).guard(p, true))?;
        self.write_block(k, body, level.deeper())?;
        let next = Instr::new("add").m(&["u32"]).arg(v).arg(v).arg(step);
        self.write_instr(level, &next)?;
        self.write_instr(level, &Instr::new("bra").arg(head))?;
        self.write_label(exit)
    }

    /// A per-thread branch: `@!p bra else; then; bra end; else: ...; end:`, with the
    /// branches that would jump over nothing left out.
    fn write_if(
        &mut self,
        k: &Kernel,
        level: Indent,
        cond: Reg,
        then_body: &[Stmt],
        else_body: &[Stmt],
    ) -> Result<(), PtxError> {
        let ty = reg_type(k, cond)?;
        if ty != RegType::Pred {
            return Err(no_row(k, "If".to_owned(), &[OperandType::Reg(ty)], None));
        }
        let p = self.names.reg(cond, RegClass::Pred);
        let labels = self.names.structure("if");
        let (else_l, end) = (labels.label("else"), labels.label("end"));
        match (then_body.is_empty(), else_body.is_empty()) {
            (true, true) => Ok(()),
            (false, true) => {
                self.write_instr(level, &Instr::new("bra").arg(end).guard(p, true))?;
                self.write_block(k, then_body, level.deeper())?;
                self.write_label(end)
            }
            (true, false) => {
                self.write_instr(level, &Instr::new("bra").arg(end).guard(p, false))?;
                self.write_block(k, else_body, level.deeper())?;
                self.write_label(end)
            }
            (false, false) => {
                self.write_instr(level, &Instr::new("bra").arg(else_l).guard(p, true))?;
                self.write_block(k, then_body, level.deeper())?;
                self.write_instr(level.deeper(), &Instr::new("bra").arg(end))?;
                self.write_label(else_l)?;
                self.write_block(k, else_body, level.deeper())?;
                self.write_label(end)
            }
        }
    }

    fn write_barrier(&mut self, level: Indent) -> Result<(), PtxError> {
        self.write_instr(level, &Instr::new("bar").m(&["sync"]).arg(Arg::Uint(0)))
    }

    fn write_instr(&mut self, level: Indent, instr: &Instr) -> Result<(), PtxError> {
        writeln!(self.out, "{level}{instr}")?;
        Ok(())
    }

    fn write_label(&mut self, label: Label) -> Result<(), PtxError> {
        writeln!(self.out, "{label}:")?;
        Ok(())
    }

    fn operand(&mut self, k: &Kernel, o: Operand) -> Result<Arg, PtxError> {
        Ok(match o {
            Operand::Reg(r) => Arg::Reg(self.names.reg(r, class_of(reg_type(k, r)?))),
            Operand::U32(v) => Arg::Uint(u64::from(v)),
            Operand::U64(v) => Arg::Uint(v),
            Operand::F32(bits) => Arg::F32Bits(bits),
        })
    }
}

/// Whether a typed op has a row: what PTX cannot say, `legalize` and `expand-math` remove.
fn printable(op: Op, dst: RegType, args: &[OperandType]) -> bool {
    match op {
        // selp has no .pred type; legalize rewrites a predicate select into and/or/not.
        Op::Select => dst != RegType::Pred,
        // shfl.sync exchanges register data; legalize moves an immediate value to a register.
        Op::ShflBfly => !matches!(args.first(), Some(OperandType::Imm(_))),
        _ => true,
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

fn class_of(ty: RegType) -> RegClass {
    match ty {
        RegType::Pred => RegClass::Pred,
        RegType::U32 => RegClass::B32,
        RegType::U64 => RegClass::B64,
        RegType::F32 => RegClass::F32,
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

fn reg_type(k: &Kernel, r: Reg) -> Result<RegType, PtxError> {
    k.regs
        .get(r)
        .copied()
        .ok_or_else(|| malformed(k, &format!("{r} is not a register of the kernel")))
}

fn operand_type(k: &Kernel, o: Operand) -> Result<OperandType, PtxError> {
    Ok(match o {
        Operand::Reg(r) => OperandType::Reg(reg_type(k, r)?),
        Operand::U32(_) => OperandType::Imm(RegType::U32),
        Operand::U64(_) => OperandType::Imm(RegType::U64),
        Operand::F32(_) => OperandType::Imm(RegType::F32),
    })
}

fn no_row(k: &Kernel, op: String, args: &[OperandType], dst: Option<RegType>) -> PtxError {
    let mut types = String::from("(");
    for (i, t) in args.iter().enumerate() {
        if i > 0 {
            types.push_str(", ");
        }
        types.push_str(&t.to_string());
    }
    types.push(')');
    if let Some(d) = dst {
        types.push_str(" -> ");
        types.push_str(d.name());
    }
    PtxError::NoRow {
        kernel: k.name.clone(),
        op,
        types,
    }
}

fn malformed(k: &Kernel, message: &str) -> PtxError {
    PtxError::Malformed {
        kernel: k.name.clone(),
        message: message.to_owned(),
    }
}

/// The symbol of a kernel's dynamic shared memory.
fn dynamic_shared_name(k: &Kernel) -> String {
    format!("{}_dynamic_smem", k.name)
}
