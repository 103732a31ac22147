//! The PTX writer: a legalized [`Kernel`] in, PTX text out (naga `back/msl/writer.rs` style).
//!
//! [`Writer`] holds the output, the options and the [`Namer`] of the kernel being printed,
//! with one `write_*` method per construct. Every IR op is one row of the op → instruction
//! table in `writer/ops.rs` (design §7: every f32 `add`/`sub`/`mul` carries `.rn`, which
//! also forbids ptxas from contracting them into an `fma`; `fma`, `div`, `sqrt` and the
//! conversions are `.rn` too; nothing is `.approx` or `.ftz`). Operand and result types come
//! from the kernel IR's one table, [`Op::signature`]; an op without a row, with operand
//! types outside its signature, or in a form `legalize` removes, is a [`PtxError::NoRow`]
//! naming the op and its types. Memory statements (`ld`, `st`, `ldmatrix`, `cp.async`) are
//! in `writer/memory.rs`; the Hopper statements (`mbarrier`, the TMA load, `setmaxnreg`)
//! in `writer/tma.rs`; the kernel frame, control flow and `mma` here.
//!
//! Inputs must have been through `tessel-passes`' `legalize`; the writer does not rewrite.
//! A kernel's body is printed into a buffer first, because registers are named in the order
//! the writer meets them (a statement's destinations, then its operands in IR order) and
//! their declarations go above the body.

mod memory;
mod ops;
mod tma;

use std::fmt;

use tessel_ir::kernel::{
    is_ptx_followsym, is_ptx_identifier, Kernel, MmaShape, Operand, ParamKind, Program, RegType,
    Stmt, WgmmaA, WgmmaInput, WgmmaMajor, WgmmaShape,
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
                // `__grid_constant__ const CUtensorMap`: 128 bytes by value, 64-aligned as
                // the driver API asks of a tensor map.
                ParamKind::TensorMap => ("align 64 .b8", "CUtensorMap".to_owned()),
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
            let array = if p.kind == ParamKind::TensorMap {
                "[128]"
            } else {
                ""
            };
            write!(
                self.out,
                "\n    .param .{ty} {}{array}{sep} // {}: {what}",
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
            Stmt::BarSync { id, threads } => self.write_instr(
                level,
                &Instr::new("bar")
                    .m(&["sync"])
                    .arg(Arg::Uint(u64::from(*id)))
                    .arg(Arg::Uint(u64::from(*threads))),
            ),
            Stmt::BarArrive { id, threads } => self.write_instr(
                level,
                &Instr::new("bar")
                    .m(&["arrive"])
                    .arg(Arg::Uint(u64::from(*id)))
                    .arg(Arg::Uint(u64::from(*threads))),
            ),
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
            Stmt::Wgmma {
                shape,
                d,
                a,
                b_desc,
                b_major,
            } => self.write_wgmma(k, level, *shape, d, (a, *b_desc, *b_major)),
            Stmt::WgmmaFence => {
                self.write_instr(level, &Instr::new("wgmma").m(&["fence", "sync", "aligned"]))
            }
            Stmt::WgmmaCommit => self.write_instr(
                level,
                &Instr::new("wgmma").m(&["commit_group", "sync", "aligned"]),
            ),
            Stmt::WgmmaWait(n) => self.write_instr(
                level,
                &Instr::new("wgmma")
                    .m(&["wait_group", "sync", "aligned"])
                    .arg(Arg::Uint(u64::from(*n))),
            ),
            Stmt::FenceProxyAsync => self.write_instr(
                level,
                &Instr::new("fence").m(&["proxy", "async", "shared::cta"]),
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
            Stmt::MbarInit { addr, count } => {
                self.write_mbarrier(k, level, *addr, tma::MbarOp::Init(*count))
            }
            Stmt::MbarArriveExpectTx { addr, bytes } => {
                self.write_mbarrier(k, level, *addr, tma::MbarOp::ArriveExpectTx(*bytes))
            }
            Stmt::MbarArrive { addr } => self.write_mbarrier(k, level, *addr, tma::MbarOp::Arrive),
            Stmt::MbarWait { addr, parity } => {
                self.write_mbarrier(k, level, *addr, tma::MbarOp::Wait(*parity))
            }
            Stmt::FenceMbarrierInit => self.write_instr(
                level,
                &Instr::new("fence").m(&["mbarrier_init", "release", "cluster"]),
            ),
            Stmt::TmaLoad {
                dst,
                tmap,
                coords,
                mbar,
            } => self.write_tma_load(k, level, *dst, *tmap, coords, *mbar),
            Stmt::SetMaxNReg { inc, regs } => self.write_setmaxnreg(k, level, *inc, *regs),
            Stmt::GridDepWait => self.write_griddep(k, level, "wait"),
            Stmt::GridDepLaunch => self.write_griddep(k, level, "launch_dependents"),
            Stmt::PrefetchL2 { addr, bytes } => self.write_prefetch_l2(k, level, *addr, *bytes),
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

    /// `wgmma.mma_async.sync.aligned.m64nNkK.f32.<t>.<t> {d}, a, b_desc, 1, 1, 1{, 0},
    /// trans_b` (PTX ISA §9.7.15.5.2): D accumulated (scale-d 1), A and B not negated
    /// (1, 1); A a descriptor (`a_desc`, K-major: imm-trans-a 0) or a vector of four
    /// registers (no imm-trans-a); imm-trans-b 0 for a K-major B, 1 for an MN-major one.
    /// tf32 takes neither transpose immediate (the verifier keeps it K-major with A in
    /// shared memory).
    fn write_wgmma(
        &mut self,
        k: &Kernel,
        level: Indent,
        shape: WgmmaShape,
        d: &[Reg],
        (a, b_desc, b_major): (&WgmmaA, Reg, WgmmaMajor),
    ) -> Result<(), PtxError> {
        if !shape.is_valid() || d.len() != shape.d_regs() {
            return Err(malformed(
                k,
                &format!("wgmma.{} with {} accumulators", shape.name(), d.len()),
            ));
        }
        let what = format!("Wgmma({})", shape.name());
        let d = self.typed_regs(k, d, RegType::F32, &format!("{what} D"))?;
        let b = self.typed_regs(k, &[b_desc], RegType::U64, &format!("{what} descriptors"))?;
        let ty = shape.input.name();
        let mut instr = Instr::new("wgmma")
            .m(&["mma_async", "sync", "aligned"])
            .m_owned(format!("m64n{}k{}", shape.n, shape.k()))
            .m(&["f32", ty, ty])
            .arg(Arg::Vector(d));
        let trans_a = match a {
            WgmmaA::Desc(r) => {
                let a = self.typed_regs(k, &[*r], RegType::U64, &format!("{what} descriptors"))?;
                instr = instr.arg(Arg::Reg(a[0]));
                Some(0)
            }
            WgmmaA::Regs(rs) => {
                let a = self.typed_regs(k, rs, RegType::U32, &format!("{what} A"))?;
                instr = instr.arg(Arg::Vector(a));
                None
            }
        };
        instr = instr.arg(Arg::Reg(b[0]));
        let trans_b = match b_major {
            WgmmaMajor::K => 0,
            WgmmaMajor::Mn => 1,
        };
        let mut imms = vec![1, 1, 1];
        if shape.input != WgmmaInput::Tf32 {
            imms.extend(trans_a);
            imms.push(trans_b);
        }
        for x in imms {
            instr = instr.arg(Arg::Uint(x));
        }
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

fn class_of(ty: RegType) -> RegClass {
    match ty {
        RegType::Pred => RegClass::Pred,
        RegType::U32 => RegClass::B32,
        RegType::U64 => RegClass::B64,
        RegType::F32 => RegClass::F32,
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
