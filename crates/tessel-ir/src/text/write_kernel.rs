//! The kernel IR printer.

use super::{
    fcmp_name, icmp_name, kop_simple_name, math_name, name, quote, space_name, special_name,
    width_name,
};
use crate::kernel::{
    BufferRole, Kernel, LaunchArg, Op, Operand, ParamKind, Program, Stmt, TensorMapDesc, WgmmaA,
    WgmmaMajor,
};
use std::fmt::Write;

/// Registers declared per `regs` line.
const REGS_PER_LINE: usize = 8;

/// Prints one kernel in the textual form that [`super::read_kernel`] reads back.
///
/// ```text
/// kernel scale block [256, 1, 1] grid [16, 1, 1] {
///   schedule "elementwise { threads: 256, vector: 1 }"
///   param x: ptr f32 read
///   param n: u32
///   param a: tensormap
///   smem0: 32 bytes align 4
///   regs r0: u32, r1: u64, r2: f32
///   r0 = special tid.x
///   r2 = fmul r2, 0f40000000
///   for r3 = 0u32 .. r0 step 1u32 {
///     barrier
///   }
///   cp.async.cg.16 [r4 + 16], [r1], r5
///   cp.async.commit
///   cp.async.wait 0
///   r6, r7, r8, r9 = ldmatrix.x4.trans [r4]
///   r10, r11, r12, r13 = mma.m16n8k16.bf16 [r6, r7, r8, r9], [r14, r15], [r10, r11, r12, r13]
///   mbarrier.init [r4], 1u32
///   fence.mbarrier_init
///   mbarrier.arrive.expect_tx [r4], 8192u32
///   tma.load [r5], r16, [r0, 0u32], [r4]
///   mbarrier.arrive [r4]
///   mbarrier.wait [r4], 0u32
///   setmaxnreg.dec 40
/// }
/// ```
pub fn write_kernel(k: &Kernel) -> String {
    let mut out = String::new();
    kernel_into(&mut out, k, "", "");
    out
}

/// Prints a program: its buffers, kernels, launches, inputs and outputs, in the textual
/// form that [`super::read_program`] reads back.
pub fn write_program(p: &Program) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "program {} {{", name(&p.name));
    for (b, decl) in p.buffers.iter() {
        let role = match decl.role {
            BufferRole::Input(n) => format!("input {n}"),
            BufferRole::InOut(n) => format!("inout {n}"),
            BufferRole::Output => "output".to_string(),
            BufferRole::Temp => "temp".to_string(),
        };
        let _ = writeln!(out, "  {b} = {role} {} : {}", quote(&decl.name), decl.ty);
    }
    for (kid, k) in p.kernels.iter() {
        kernel_into(&mut out, k, "  ", &format!("{kid} = "));
    }
    for l in &p.launches {
        let args: Vec<String> = l
            .args
            .iter()
            .map(|a| match a {
                LaunchArg::Buffer(b) => b.to_string(),
                LaunchArg::U32(x) => format!("{x}u32"),
                LaunchArg::TensorMap(t) => tensor_map(t),
            })
            .collect();
        let _ = writeln!(out, "  launch {}({})", l.kernel, args.join(", "));
    }
    for (n, b) in &p.inputs {
        let _ = writeln!(out, "  input {} = {b}", quote(n));
    }
    for (n, b) in &p.outputs {
        let _ = writeln!(out, "  output {} = {b}", quote(n));
    }
    out.push_str("}\n");
    out
}

/// `tmap(buf0, bf16, dims [64, 128], strides [128], box [64, 16], swizzle 128)`: the
/// first `rank` dims and box dims, `rank - 1` strides (bytes), the swizzle in bytes (0:
/// none).
fn tensor_map(t: &TensorMapDesc) -> String {
    let rank = t.rank.clamp(1, 5) as usize;
    let list = |xs: Vec<u64>| {
        let s: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        s.join(", ")
    };
    format!(
        "tmap({}, {}, dims [{}], strides [{}], box [{}], swizzle {})",
        t.buffer,
        t.dtype,
        list(t.dims[..rank].to_vec()),
        list(t.strides[..rank - 1].to_vec()),
        list(t.box_dims[..rank].iter().map(|&b| b as u64).collect()),
        t.swizzle.bytes()
    )
}

/// One `Stmt::Op` as its line of text, without indentation (`r3 = fadd r1, 0f3F800000`);
/// used by the verifier's messages.
pub fn write_op_stmt(dst: crate::Reg, op: Op, args: &[Operand]) -> String {
    let mut s = format!("{dst} = {}", op_head(op));
    let has_attr = matches!(op, Op::Special(_) | Op::Param(_) | Op::SharedAddr(_));
    for (i, a) in args.iter().enumerate() {
        s.push_str(if i == 0 && !has_attr { " " } else { ", " });
        s.push_str(&operand(*a));
    }
    s
}

fn kernel_into(out: &mut String, k: &Kernel, indent: &str, prefix: &str) {
    let occupancy = if k.min_ctas_per_sm > 0 {
        format!(" min_ctas_per_sm {}", k.min_ctas_per_sm)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{indent}{prefix}kernel {} block {} grid {}{occupancy} {{",
        name(&k.name),
        dims(k.block),
        dims(k.grid)
    );
    let inner = format!("{indent}  ");
    let _ = writeln!(out, "{inner}schedule {}", quote(&k.schedule));
    for p in &k.params {
        let kind = match p.kind {
            ParamKind::Ptr { dtype, writes } => {
                format!("ptr {dtype} {}", if writes { "write" } else { "read" })
            }
            ParamKind::U32 => "u32".to_string(),
            ParamKind::TensorMap => "tensormap".to_string(),
        };
        let _ = writeln!(out, "{inner}param {}: {kind}", name(&p.name));
    }
    for (s, d) in k.shared.iter() {
        let _ = writeln!(out, "{inner}{s}: {} bytes align {}", d.bytes, d.align);
    }
    let regs: Vec<String> = k
        .regs
        .iter()
        .map(|(r, t)| format!("{r}: {}", t.name()))
        .collect();
    for chunk in regs.chunks(REGS_PER_LINE) {
        let _ = writeln!(out, "{inner}regs {}", chunk.join(", "));
    }
    stmts_into(out, &k.body, &inner);
    let _ = writeln!(out, "{indent}}}");
}

fn dims(d: [u32; 3]) -> String {
    format!("[{}, {}, {}]", d[0], d[1], d[2])
}

fn operand(o: Operand) -> String {
    match o {
        Operand::Reg(r) => r.to_string(),
        Operand::U32(x) => format!("{x}u32"),
        Operand::U64(x) => format!("{x}u64"),
        Operand::F32(bits) => format!("0f{bits:08X}"),
    }
}

/// `r1, r2, r3`.
fn reg_list(regs: &[crate::Reg]) -> String {
    let rs: Vec<String> = regs.iter().map(|r| r.to_string()).collect();
    rs.join(", ")
}

fn address(addr: crate::Reg, offset: i32) -> String {
    match offset {
        0 => format!("[{addr}]"),
        o if o > 0 => format!("[{addr} + {o}]"),
        o => format!("[{addr} - {}]", -(o as i64)),
    }
}

/// The mnemonic with its attribute, if any: `fadd`, `fcmp.lt`, `special tid.x`, `param 0`.
fn op_head(op: Op) -> String {
    match op {
        Op::FCmp(c) => format!("fcmp.{}", fcmp_name(c)),
        Op::ICmp(c) => format!("icmp.{}", icmp_name(c)),
        Op::Math(m) => format!("math.{}", math_name(m)),
        Op::Special(s) => format!("special {}", special_name(s)),
        Op::Param(n) => format!("param {n}"),
        Op::SharedAddr(s) => format!("shared_addr {s}"),
        other => kop_simple_name(other).unwrap_or("?").to_string(),
    }
}

fn stmts_into(out: &mut String, body: &[Stmt], indent: &str) {
    for s in body {
        match s {
            Stmt::Op { dst, op, args } => {
                let _ = writeln!(out, "{indent}{}", write_op_stmt(*dst, *op, args));
            }
            Stmt::Load {
                dsts,
                space,
                width,
                addr,
                offset,
            } => {
                let ds: Vec<String> = dsts.iter().map(|r| r.to_string()).collect();
                let lhs = if ds.is_empty() {
                    String::new()
                } else {
                    format!("{} = ", ds.join(", "))
                };
                let _ = writeln!(
                    out,
                    "{indent}{lhs}load.{}.{} {}",
                    space_name(*space),
                    width_name(*width),
                    address(*addr, *offset)
                );
            }
            Stmt::Store {
                space,
                width,
                addr,
                offset,
                values,
            } => {
                let mut line = format!(
                    "{indent}store.{}.{} {}",
                    space_name(*space),
                    width_name(*width),
                    address(*addr, *offset)
                );
                for v in values {
                    line.push_str(", ");
                    line.push_str(&operand(*v));
                }
                let _ = writeln!(out, "{line}");
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let _ = writeln!(
                    out,
                    "{indent}for {var} = {} .. {} step {} {{",
                    operand(*start),
                    operand(*end),
                    operand(*step)
                );
                stmts_into(out, body, &format!("{indent}  "));
                let _ = writeln!(out, "{indent}}}");
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let _ = writeln!(out, "{indent}if {cond} {{");
                let inner = format!("{indent}  ");
                stmts_into(out, then_body, &inner);
                if else_body.is_empty() {
                    let _ = writeln!(out, "{indent}}}");
                } else {
                    let _ = writeln!(out, "{indent}}} else {{");
                    stmts_into(out, else_body, &inner);
                    let _ = writeln!(out, "{indent}}}");
                }
            }
            Stmt::Barrier => {
                let _ = writeln!(out, "{indent}barrier");
            }
            Stmt::BarSync { id, threads } => {
                let _ = writeln!(out, "{indent}bar.sync {id}, {threads}");
            }
            Stmt::BarArrive { id, threads } => {
                let _ = writeln!(out, "{indent}bar.arrive {id}, {threads}");
            }
            Stmt::Mma { shape, d, a, b, c } => {
                let _ = writeln!(
                    out,
                    "{indent}{} = mma.{} [{}], [{}], [{}]",
                    reg_list(d),
                    shape.name(),
                    reg_list(a),
                    reg_list(b),
                    reg_list(c)
                );
            }
            Stmt::Ldmatrix {
                dsts,
                trans,
                addr,
                offset,
            } => {
                let _ = writeln!(
                    out,
                    "{indent}{} = ldmatrix.x{}{} {}",
                    reg_list(dsts),
                    dsts.len(),
                    if *trans { ".trans" } else { "" },
                    address(*addr, *offset)
                );
            }
            Stmt::CpAsync {
                cache,
                bytes,
                dst,
                dst_offset,
                src,
                src_offset,
                src_bytes,
            } => {
                let mut line = format!(
                    "{indent}cp.async.{}.{bytes} {}, {}",
                    cache.name(),
                    address(*dst, *dst_offset),
                    address(*src, *src_offset)
                );
                if let Some(n) = src_bytes {
                    line.push_str(", ");
                    line.push_str(&operand(*n));
                }
                let _ = writeln!(out, "{line}");
            }
            Stmt::Wgmma {
                shape,
                d,
                a,
                b_desc,
                b_major,
            } => {
                let a = match a {
                    WgmmaA::Desc(r) => r.to_string(),
                    WgmmaA::Regs(rs) => format!("[{}]", reg_list(rs)),
                };
                let trans = match b_major {
                    WgmmaMajor::K => "",
                    WgmmaMajor::Mn => ", trans_b",
                };
                let _ = writeln!(
                    out,
                    "{indent}{} = wgmma.{} {a}, {b_desc}{trans}",
                    reg_list(d),
                    shape.name()
                );
            }
            Stmt::WgmmaFence => {
                let _ = writeln!(out, "{indent}wgmma.fence");
            }
            Stmt::WgmmaCommit => {
                let _ = writeln!(out, "{indent}wgmma.commit");
            }
            Stmt::WgmmaWait(n) => {
                let _ = writeln!(out, "{indent}wgmma.wait {n}");
            }
            Stmt::FenceProxyAsync => {
                let _ = writeln!(out, "{indent}fence.proxy.async");
            }
            Stmt::CpAsyncCommit => {
                let _ = writeln!(out, "{indent}cp.async.commit");
            }
            Stmt::CpAsyncWait(n) => {
                let _ = writeln!(out, "{indent}cp.async.wait {n}");
            }
            Stmt::CpAsyncWaitAll => {
                let _ = writeln!(out, "{indent}cp.async.wait_all");
            }
            Stmt::MbarInit { addr, count } => {
                let _ = writeln!(out, "{indent}mbarrier.init [{addr}], {}", operand(*count));
            }
            Stmt::MbarArriveExpectTx { addr, bytes } => {
                let _ = writeln!(
                    out,
                    "{indent}mbarrier.arrive.expect_tx [{addr}], {}",
                    operand(*bytes)
                );
            }
            Stmt::MbarArrive { addr } => {
                let _ = writeln!(out, "{indent}mbarrier.arrive [{addr}]");
            }
            Stmt::MbarWait { addr, parity } => {
                let _ = writeln!(out, "{indent}mbarrier.wait [{addr}], {}", operand(*parity));
            }
            Stmt::FenceMbarrierInit => {
                let _ = writeln!(out, "{indent}fence.mbarrier_init");
            }
            Stmt::TmaLoad {
                dst,
                tmap,
                coords,
                mbar,
            } => {
                let cs: Vec<String> = coords.iter().map(|c| operand(*c)).collect();
                let _ = writeln!(
                    out,
                    "{indent}tma.load [{dst}], {tmap}, [{}], [{mbar}]",
                    cs.join(", ")
                );
            }
            Stmt::SetMaxNReg { inc, regs } => {
                let _ = writeln!(
                    out,
                    "{indent}setmaxnreg.{} {regs}",
                    if *inc { "inc" } else { "dec" }
                );
            }
            Stmt::GridDepWait => {
                let _ = writeln!(out, "{indent}griddepcontrol.wait");
            }
            Stmt::GridDepLaunch => {
                let _ = writeln!(out, "{indent}griddepcontrol.launch_dependents");
            }
            Stmt::PrefetchL2 { addr, bytes } => {
                let _ = writeln!(out, "{indent}prefetch.l2 [{addr}], {}", operand(*bytes));
            }
        }
    }
}
