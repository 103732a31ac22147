//! The kernel IR reader.

use super::lexer::{entity_number, parse_uint, Cursor, Pos, Tok};
use super::read_graph::{dtype_named, tensor_type};
use super::{
    fcmp_name, icmp_name, kop_simple_name, math_name, reg_type_from_name, space_name, special_name,
    width_name, ReadError, FCMPS, ICMPS, KOPS_SIMPLE, MATH_FNS, SPECIALS, WIDTHS,
};
use crate::entities::{BufferId, KernelId, Reg, SharedBuf};
use crate::kernel::{
    BufferDecl, BufferRole, CpAsyncCache, Kernel, Launch, LaunchArg, MmaShape, Op, Operand, Param,
    ParamKind, Program, Space, Stmt, TensorMapDesc, TensorMapSwizzle, WgmmaA, WgmmaInput,
    WgmmaMajor, WgmmaShape, Width,
};
use std::collections::HashMap;

/// How deep `for` and `if` may nest before the reader gives up (it recurses per level).
const MAX_DEPTH: usize = 256;

/// Reads one kernel as [`super::write_kernel`] prints it. Registers and shared buffers are
/// numbered in declaration order and must be declared before use.
pub fn read_kernel(text: &str) -> Result<Kernel, ReadError> {
    let mut c = Cursor::new(text)?;
    let k = kernel(&mut c)?;
    if *c.peek() != Tok::Eof {
        return Err(c.expected("the end of the text after the kernel"));
    }
    Ok(k)
}

/// Reads a program as [`super::write_program`] prints it. Buffers and kernels are numbered
/// in definition order and must be defined before a launch, input or output names them.
pub fn read_program(text: &str) -> Result<Program, ReadError> {
    let mut c = Cursor::new(text)?;
    c.keyword("program")?;
    let mut p = Program {
        name: c.name("the program's name")?,
        ..Default::default()
    };
    c.punct('{')?;
    let mut bufs: HashMap<u32, BufferId> = HashMap::new();
    let mut kernels: HashMap<u32, KernelId> = HashMap::new();
    let buffer = |c: &mut Cursor, bufs: &HashMap<u32, BufferId>| -> Result<BufferId, ReadError> {
        let (n, pos) = c.entity("buf", "a buffer")?;
        bufs.get(&n)
            .copied()
            .ok_or_else(|| pos.error(format!("buffer buf{n} is not defined")))
    };
    loop {
        if c.eat_punct('}') {
            break;
        }
        let (w, pos) = c.word("a buffer, kernel, `launch`, `input`, `output` or `}`")?;
        if let Some(n) = entity_number(&w, "buf") {
            let id = BufferId::from_u32(p.buffers.len() as u32);
            if bufs.insert(n, id).is_some() {
                return Err(pos.error(format!("buffer buf{n} is defined twice")));
            }
            c.punct('=')?;
            let (r, rpos) = c.word("a buffer role")?;
            let role = match r.as_str() {
                "input" => BufferRole::Input(c.u32("an input index")?),
                "inout" => BufferRole::InOut(c.u32("an input index")?),
                "output" => BufferRole::Output,
                "temp" => BufferRole::Temp,
                _ => {
                    return Err(rpos.error(format!(
                        "unknown buffer role `{r}` (expected input, inout, output or temp)"
                    )))
                }
            };
            let name = c.string("the buffer's name as a string")?;
            c.punct(':')?;
            let ty = tensor_type(&mut c)?;
            p.buffers.push(BufferDecl { name, ty, role });
        } else if let Some(n) = entity_number(&w, "k") {
            let id = KernelId::from_u32(p.kernels.len() as u32);
            if kernels.insert(n, id).is_some() {
                return Err(pos.error(format!("kernel k{n} is defined twice")));
            }
            c.punct('=')?;
            let k = kernel(&mut c)?;
            p.kernels.push(k);
        } else if w == "launch" {
            let (n, kpos) = c.entity("k", "a kernel")?;
            let kernel = *kernels
                .get(&n)
                .ok_or_else(|| kpos.error(format!("kernel k{n} is not defined")))?;
            c.punct('(')?;
            let mut args = Vec::new();
            if !c.eat_punct(')') {
                loop {
                    let arg = match c.peek() {
                        Tok::Word(w) if w.starts_with("buf") => {
                            LaunchArg::Buffer(buffer(&mut c, &bufs)?)
                        }
                        Tok::Word(w) if w == "tmap" => {
                            c.bump();
                            c.punct('(')?;
                            let b = buffer(&mut c, &bufs)?;
                            LaunchArg::TensorMap(tensor_map(&mut c, b)?)
                        }
                        _ => {
                            let (w, wpos) = c.word("a buffer or a u32")?;
                            let x = w.strip_suffix("u32").unwrap_or(&w);
                            LaunchArg::U32(
                                parse_uint(x)
                                    .and_then(|x| u32::try_from(x).ok())
                                    .ok_or_else(|| {
                                        wpos.error(format!(
                                            "expected a buffer or a u32, found `{w}`"
                                        ))
                                    })?,
                            )
                        }
                    };
                    args.push(arg);
                    if c.eat_punct(')') {
                        break;
                    }
                    c.punct(',')?;
                }
            }
            p.launches.push(Launch { kernel, args });
        } else if w == "input" || w == "output" {
            let n = c.string("the name as a string")?;
            c.punct('=')?;
            let b = buffer(&mut c, &bufs)?;
            if w == "input" {
                p.inputs.push((n, b));
            } else {
                p.outputs.push((n, b));
            }
        } else {
            return Err(pos.error(format!(
                "expected a buffer, kernel, `launch`, `input`, `output` or `}}`, found `{w}`"
            )));
        }
    }
    if *c.peek() != Tok::Eof {
        return Err(c.expected("the end of the text after the program"));
    }
    Ok(p)
}

/// The rest of `tmap(BUF, DTYPE, dims [..], strides [..], box [..], swizzle N)` after the
/// buffer: as many dims as box dims (1 to 5), one stride fewer, the swizzle in bytes.
fn tensor_map(c: &mut Cursor, buffer: BufferId) -> Result<TensorMapDesc, ReadError> {
    c.punct(',')?;
    let (d, dpos) = c.word("a dtype")?;
    let dtype = dtype_named(&d, dpos)?;
    c.punct(',')?;
    c.keyword("dims")?;
    let pos = c.pos();
    let dims = c.bracket_list(|c| c.u64("a dimension"))?;
    c.punct(',')?;
    c.keyword("strides")?;
    let spos = c.pos();
    let strides = c.bracket_list(|c| c.u64("a stride in bytes"))?;
    c.punct(',')?;
    c.keyword("box")?;
    let bpos = c.pos();
    let boxes = c.bracket_list(|c| c.u32("a box dimension"))?;
    c.punct(',')?;
    c.keyword("swizzle")?;
    let wpos = c.pos();
    let sw = c.u32("a swizzle in bytes (0, 32, 64 or 128)")?;
    c.punct(')')?;
    let rank = dims.len();
    if !(1..=5).contains(&rank) {
        return Err(pos.error(format!("a tensor map has 1 to 5 dims, not {rank}")));
    }
    if strides.len() != rank - 1 {
        return Err(spos.error(format!(
            "{rank} dims take {} strides, not {}",
            rank - 1,
            strides.len()
        )));
    }
    if boxes.len() != rank {
        return Err(bpos.error(format!(
            "{rank} dims take {rank} box dims, not {}",
            boxes.len()
        )));
    }
    let swizzle = TensorMapSwizzle::ALL
        .into_iter()
        .find(|x| x.bytes() == sw)
        .ok_or_else(|| wpos.error(format!("swizzle {sw} is not 0, 32, 64 or 128")))?;
    Ok(TensorMapDesc::new(
        buffer, dtype, &dims, &strides, &boxes, swizzle,
    ))
}

fn dims(c: &mut Cursor) -> Result<[u32; 3], ReadError> {
    let pos = c.pos();
    let v = c.bracket_list(|c| c.u32("a dimension"))?;
    match v[..] {
        [x, y, z] => Ok([x, y, z]),
        _ => Err(pos.error(format!("expected three dimensions, found {}", v.len()))),
    }
}

#[derive(Default)]
struct Names {
    regs: HashMap<u32, Reg>,
    shared: HashMap<u32, SharedBuf>,
}

impl Names {
    fn reg(&self, c: &mut Cursor) -> Result<Reg, ReadError> {
        let (n, pos) = c.entity("r", "a register")?;
        self.regs
            .get(&n)
            .copied()
            .ok_or_else(|| pos.error(format!("register r{n} is not declared")))
    }

    fn shared(&self, c: &mut Cursor) -> Result<SharedBuf, ReadError> {
        let (n, pos) = c.entity("smem", "a shared buffer")?;
        self.shared
            .get(&n)
            .copied()
            .ok_or_else(|| pos.error(format!("shared buffer smem{n} is not declared")))
    }

    /// `r3`, `7u32` (or bare `7`), `7u64`, `0f3F800000` (f32 bits), `1.5f32`, `-1.5f32`.
    fn operand(&self, c: &mut Cursor) -> Result<Operand, ReadError> {
        if let Tok::Word(w) = c.peek() {
            if entity_number(w, "r").is_some() {
                return Ok(Operand::Reg(self.reg(c)?));
            }
        }
        let pos = c.pos();
        let neg = c.eat_punct('-');
        let (w, _) = c.word("a register or an immediate")?;
        let bad = || pos.error(format!("expected a register or an immediate, found `{w}`"));
        if let Some(h) = w.strip_prefix("0f").filter(|h| h.len() == 8) {
            if neg || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            return u32::from_str_radix(h, 16)
                .map(Operand::F32)
                .map_err(|_| bad());
        }
        if let Some(d) = w.strip_suffix("f32") {
            if !d
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'.' || b == b'e')
                || d.is_empty()
            {
                return Err(bad());
            }
            let x: f32 = d.parse().map_err(|_| bad())?;
            return Ok(Operand::f32(if neg { -x } else { x }));
        }
        if neg {
            return Err(pos.error("integer immediates are unsigned"));
        }
        if let Some(d) = w.strip_suffix("u64") {
            return parse_uint(d).map(Operand::U64).ok_or_else(bad);
        }
        let d = w.strip_suffix("u32").unwrap_or(&w);
        parse_uint(d)
            .and_then(|x| u32::try_from(x).ok())
            .map(Operand::U32)
            .ok_or_else(bad)
    }

    /// `[r1]`: an address without an offset.
    fn bare_address(&self, c: &mut Cursor) -> Result<Reg, ReadError> {
        c.punct('[')?;
        let r = self.reg(c)?;
        c.punct(']')?;
        Ok(r)
    }

    /// `[r1]`, `[r1 + 16]`, `[r1 - 16]`.
    fn address(&self, c: &mut Cursor) -> Result<(Reg, i32), ReadError> {
        c.punct('[')?;
        let addr = self.reg(c)?;
        let mut offset = 0i32;
        let sign_pos = c.pos();
        let sign = if c.eat_punct('+') {
            Some(1i64)
        } else if c.eat_punct('-') {
            Some(-1i64)
        } else {
            None
        };
        if let Some(sign) = sign {
            let x = c.u64("an offset in bytes")?;
            offset = i64::try_from(x)
                .ok()
                .map(|x| sign * x)
                .and_then(|x| i32::try_from(x).ok())
                .ok_or_else(|| sign_pos.error("the offset does not fit in i32"))?;
        }
        c.punct(']')?;
        Ok((addr, offset))
    }
}

/// `kernel NAME block [..] grid [..] [min_ctas_per_sm N] { items }`.
fn kernel(c: &mut Cursor) -> Result<Kernel, ReadError> {
    c.keyword("kernel")?;
    let mut k = Kernel {
        name: c.name("the kernel's name")?,
        ..Default::default()
    };
    c.keyword("block")?;
    k.block = dims(c)?;
    c.keyword("grid")?;
    k.grid = dims(c)?;
    if c.eat_word("min_ctas_per_sm") {
        k.min_ctas_per_sm = c.u32("a CTA count")?;
    }
    c.punct('{')?;
    let mut names = Names::default();
    let mut body = Vec::new();
    loop {
        if c.eat_punct('}') {
            break;
        }
        match c.peek().clone() {
            Tok::Word(w) if w == "schedule" => {
                c.bump();
                k.schedule = c.string("the schedule as a string")?;
            }
            Tok::Word(w) if w == "param" => {
                c.bump();
                let name = c.name("a parameter name")?;
                c.punct(':')?;
                let (t, tpos) = c.word("`ptr`, `u32` or `tensormap`")?;
                let kind = match t.as_str() {
                    "u32" => ParamKind::U32,
                    "tensormap" => ParamKind::TensorMap,
                    "ptr" => {
                        let (d, dpos) = c.word("a dtype")?;
                        let dtype = dtype_named(&d, dpos)?;
                        let (a, apos) = c.word("`read` or `write`")?;
                        let writes = match a.as_str() {
                            "read" => false,
                            "write" => true,
                            _ => {
                                return Err(
                                    apos.error(format!("expected `read` or `write`, found `{a}`"))
                                )
                            }
                        };
                        ParamKind::Ptr { dtype, writes }
                    }
                    _ => {
                        return Err(tpos
                            .error(format!("expected `ptr`, `u32` or `tensormap`, found `{t}`")))
                    }
                };
                k.params.push(Param { name, kind });
            }
            Tok::Word(w) if w == "regs" => {
                c.bump();
                loop {
                    let (n, pos) = c.entity("r", "a register")?;
                    c.punct(':')?;
                    let (t, tpos) = c.word("a register type")?;
                    let ty = reg_type_from_name(&t).ok_or_else(|| {
                        tpos.error(format!(
                            "unknown register type `{t}` (expected pred, u32, u64 or f32)"
                        ))
                    })?;
                    let r = k.regs.push(ty);
                    if names.regs.insert(n, r).is_some() {
                        return Err(pos.error(format!("register r{n} is declared twice")));
                    }
                    if !c.eat_punct(',') {
                        break;
                    }
                }
            }
            Tok::Word(w) if entity_number(&w, "smem").is_some() => {
                let (n, pos) = c.entity("smem", "a shared buffer")?;
                c.punct(':')?;
                let bytes = c.u32("a size in bytes")?;
                c.keyword("bytes")?;
                c.keyword("align")?;
                let align = c.u32("an alignment")?;
                let s = k.new_shared(bytes, align);
                if names.shared.insert(n, s).is_some() {
                    return Err(pos.error(format!("shared buffer smem{n} is declared twice")));
                }
            }
            _ => body.push(stmt(c, &names, 0)?),
        }
    }
    k.body = body;
    Ok(k)
}

fn block(c: &mut Cursor, names: &Names, depth: usize) -> Result<Vec<Stmt>, ReadError> {
    c.punct('{')?;
    let mut out = Vec::new();
    while !c.eat_punct('}') {
        out.push(stmt(c, names, depth + 1)?);
    }
    Ok(out)
}

/// `space.width` from the tail of a `load.` / `store.` mnemonic.
fn space_width(rest: &str, pos: Pos) -> Result<(Space, Width), ReadError> {
    let bad = || {
        pos.error(format!(
            "expected `global` or `shared` and a width (b8, b16, b32, v2, v4) in `{rest}`"
        ))
    };
    let (s, w) = rest.split_once('.').ok_or_else(bad)?;
    let space = [Space::Global, Space::Shared]
        .into_iter()
        .find(|x| space_name(*x) == s)
        .ok_or_else(bad)?;
    let width = WIDTHS
        .into_iter()
        .find(|x| width_name(*x) == w)
        .ok_or_else(bad)?;
    Ok((space, width))
}

fn stmt(c: &mut Cursor, names: &Names, depth: usize) -> Result<Stmt, ReadError> {
    if depth > MAX_DEPTH {
        return Err(c
            .pos()
            .error(format!("blocks nest deeper than {MAX_DEPTH} levels")));
    }
    let (w, pos) = match c.peek() {
        Tok::Word(_) => c.word("a statement")?,
        _ => return Err(c.expected("a statement")),
    };
    match w.as_str() {
        "barrier" => return Ok(Stmt::Barrier),
        "bar.sync" | "bar.arrive" => {
            let id = c.u32("a barrier id")?;
            c.punct(',')?;
            let threads = c.u32("a thread count")?;
            return Ok(if w == "bar.sync" {
                Stmt::BarSync { id, threads }
            } else {
                Stmt::BarArrive { id, threads }
            });
        }
        "for" => {
            let var = names.reg(c)?;
            c.punct('=')?;
            let start = names.operand(c)?;
            c.dotdot()?;
            let end = names.operand(c)?;
            c.keyword("step")?;
            let step = names.operand(c)?;
            let body = block(c, names, depth)?;
            return Ok(Stmt::For {
                var,
                start,
                end,
                step,
                body,
            });
        }
        "if" => {
            let cond = names.reg(c)?;
            let then_body = block(c, names, depth)?;
            let else_body = if c.eat_word("else") {
                block(c, names, depth)?
            } else {
                Vec::new()
            };
            return Ok(Stmt::If {
                cond,
                then_body,
                else_body,
            });
        }
        _ => {}
    }
    if let Some(rest) = w.strip_prefix("store.") {
        let (space, width) = space_width(rest, pos)?;
        let (addr, offset) = names.address(c)?;
        let mut values = Vec::new();
        while c.eat_punct(',') {
            values.push(names.operand(c)?);
        }
        return Ok(Stmt::Store {
            space,
            width,
            addr,
            offset,
            values,
        });
    }
    match w.as_str() {
        "wgmma.fence" => return Ok(Stmt::WgmmaFence),
        "wgmma.commit" => return Ok(Stmt::WgmmaCommit),
        "wgmma.wait" => return Ok(Stmt::WgmmaWait(c.u32("a group count")?)),
        "fence.proxy.async" => return Ok(Stmt::FenceProxyAsync),
        "mbarrier.init" | "mbarrier.arrive.expect_tx" | "mbarrier.wait" => {
            let addr = names.bare_address(c)?;
            c.punct(',')?;
            let x = names.operand(c)?;
            return Ok(match w.as_str() {
                "mbarrier.init" => Stmt::MbarInit { addr, count: x },
                "mbarrier.wait" => Stmt::MbarWait { addr, parity: x },
                _ => Stmt::MbarArriveExpectTx { addr, bytes: x },
            });
        }
        "mbarrier.arrive" => {
            return Ok(Stmt::MbarArrive {
                addr: names.bare_address(c)?,
            })
        }
        "fence.mbarrier_init" => return Ok(Stmt::FenceMbarrierInit),
        "tma.load" => {
            let dst = names.bare_address(c)?;
            c.punct(',')?;
            let tmap = names.reg(c)?;
            c.punct(',')?;
            let coords = c.bracket_list(|c| names.operand(c))?;
            c.punct(',')?;
            let mbar = names.bare_address(c)?;
            return Ok(Stmt::TmaLoad {
                dst,
                tmap,
                coords,
                mbar,
            });
        }
        "setmaxnreg.inc" | "setmaxnreg.dec" => {
            return Ok(Stmt::SetMaxNReg {
                inc: w == "setmaxnreg.inc",
                regs: c.u32("a register count")?,
            })
        }
        "griddepcontrol.wait" => return Ok(Stmt::GridDepWait),
        "griddepcontrol.launch_dependents" => return Ok(Stmt::GridDepLaunch),
        "prefetch.l2" => {
            let addr = names.bare_address(c)?;
            c.punct(',')?;
            let bytes = names.operand(c)?;
            return Ok(Stmt::PrefetchL2 { addr, bytes });
        }
        "cp.async.commit" => return Ok(Stmt::CpAsyncCommit),
        "cp.async.wait_all" => return Ok(Stmt::CpAsyncWaitAll),
        "cp.async.wait" => return Ok(Stmt::CpAsyncWait(c.u32("a group count")?)),
        _ => {}
    }
    if let Some(rest) = w.strip_prefix("cp.async.") {
        // `cp.async.{ca,cg}.BYTES [dst], [src] [, src_bytes]`
        let bad = || {
            pos.error(format!(
                "expected `cp.async.ca.N`, `cp.async.cg.N`, `cp.async.commit`, `cp.async.wait` or `cp.async.wait_all`, found `{w}`"
            ))
        };
        let (m, n) = rest.split_once('.').ok_or_else(bad)?;
        let cache = [CpAsyncCache::Ca, CpAsyncCache::Cg]
            .into_iter()
            .find(|x| x.name() == m)
            .ok_or_else(bad)?;
        let bytes = parse_uint(n)
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(bad)?;
        let (dst, dst_offset) = names.address(c)?;
        c.punct(',')?;
        let (src, src_offset) = names.address(c)?;
        let src_bytes = if c.eat_punct(',') {
            Some(names.operand(c)?)
        } else {
            None
        };
        return Ok(Stmt::CpAsync {
            cache,
            bytes,
            dst,
            dst_offset,
            src,
            src_offset,
            src_bytes,
        });
    }
    if let Some(rest) = w.strip_prefix("load.") {
        let (space, width) = space_width(rest, pos)?;
        let (addr, offset) = names.address(c)?;
        return Ok(Stmt::Load {
            dsts: Vec::new(),
            space,
            width,
            addr,
            offset,
        });
    }
    // `dst, ... = mnemonic ...`
    let Some(n) = entity_number(&w, "r") else {
        return Err(pos.error(format!("expected a statement, found `{w}`")));
    };
    let first = *names
        .regs
        .get(&n)
        .ok_or_else(|| pos.error(format!("register r{n} is not declared")))?;
    let mut dsts = vec![first];
    while c.eat_punct(',') {
        dsts.push(names.reg(c)?);
    }
    c.punct('=')?;
    let (m, mpos) = c.word("an op")?;
    if let Some(rest) = m.strip_prefix("load.") {
        let (space, width) = space_width(rest, mpos)?;
        let (addr, offset) = names.address(c)?;
        return Ok(Stmt::Load {
            dsts,
            space,
            width,
            addr,
            offset,
        });
    }
    if let Some(rest) = m.strip_prefix("mma.") {
        let shape = MmaShape::ALL
            .into_iter()
            .find(|x| x.name() == rest)
            .ok_or_else(|| {
                mpos.error(format!(
                    "unknown mma shape `{rest}` (expected m16n8k16.bf16, m16n8k16.f16 or m16n8k8.tf32)"
                ))
            })?;
        let d = four(dsts, pos, "an mma writes")?;
        let a = c.bracket_list(|c| names.reg(c))?;
        c.punct(',')?;
        let b = c.bracket_list(|c| names.reg(c))?;
        c.punct(',')?;
        let cpos = c.pos();
        let cs = c.bracket_list(|c| names.reg(c))?;
        let cs = four(cs, cpos, "an mma reads")?;
        return Ok(Stmt::Mma {
            shape,
            d,
            a,
            b,
            c: cs,
        });
    }
    if let Some(rest) = m.strip_prefix("wgmma.") {
        let shape = wgmma_shape(rest).ok_or_else(|| {
            mpos.error(format!(
                "unknown wgmma shape `{rest}` (expected m64nNk16.bf16, m64nNk16.f16 or m64nNk8.tf32, N a multiple of 8 up to 256)"
            ))
        })?;
        // A: a descriptor register, or `[a0, a1, a2, a3]`; B's descriptor, then
        // `, trans_b` for an MN-major B.
        let a = if c.is_punct('[') {
            WgmmaA::Regs(c.bracket_list(|c| names.reg(c))?)
        } else {
            WgmmaA::Desc(names.reg(c)?)
        };
        c.punct(',')?;
        let b_desc = names.reg(c)?;
        let b_major = if c.eat_punct(',') {
            c.keyword("trans_b")?;
            WgmmaMajor::Mn
        } else {
            WgmmaMajor::K
        };
        return Ok(Stmt::Wgmma {
            shape,
            d: dsts,
            a,
            b_desc,
            b_major,
        });
    }
    if let Some(rest) = m.strip_prefix("ldmatrix.") {
        let (num, trans) = match rest.strip_suffix(".trans") {
            Some(x) => (x, true),
            None => (rest, false),
        };
        let count = match num {
            "x1" => 1,
            "x2" => 2,
            "x4" => 4,
            _ => {
                return Err(mpos.error(format!(
                    "expected `ldmatrix.x1`, `.x2` or `.x4`, optionally `.trans`, found `{m}`"
                )))
            }
        };
        if dsts.len() != count {
            return Err(pos.error(format!(
                "ldmatrix.{num} writes {count} registers, not {}",
                dsts.len()
            )));
        }
        let (addr, offset) = names.address(c)?;
        return Ok(Stmt::Ldmatrix {
            dsts,
            trans,
            addr,
            offset,
        });
    }
    if dsts.len() > 1 {
        return Err(
            pos.error("only a load, an mma, a wgmma or an ldmatrix assigns several registers")
        );
    }
    let (op, has_attr) = match m.as_str() {
        "special" => {
            let (s, spos) = c.word("a special register")?;
            let s = SPECIALS
                .into_iter()
                .find(|x| special_name(*x) == s)
                .ok_or_else(|| spos.error(format!("unknown special register `{s}`")))?;
            (Op::Special(s), true)
        }
        "param" => (Op::Param(c.u32("a parameter number")?), true),
        "shared_addr" => (Op::SharedAddr(names.shared(c)?), true),
        m => {
            let op = if let Some(x) = m.strip_prefix("fcmp.") {
                FCMPS.into_iter().find(|y| fcmp_name(*y) == x).map(Op::FCmp)
            } else if let Some(x) = m.strip_prefix("icmp.") {
                ICMPS.into_iter().find(|y| icmp_name(*y) == x).map(Op::ICmp)
            } else if let Some(x) = m.strip_prefix("math.") {
                MATH_FNS
                    .into_iter()
                    .find(|y| math_name(*y) == x)
                    .map(Op::Math)
            } else {
                KOPS_SIMPLE
                    .into_iter()
                    .find(|y| kop_simple_name(*y) == Some(m))
            };
            (
                op.ok_or_else(|| mpos.error(format!("unknown op `{m}`")))?,
                false,
            )
        }
    };
    let mut args = Vec::new();
    // Without an attribute the first operand follows the mnemonic on the same line (a
    // statement is one line: `r1 = fneg` with no operand is followed by the next statement);
    // every other operand follows a comma.
    if !has_attr && c.pos().line == mpos.line && !matches!(c.peek(), Tok::Punct('}') | Tok::Eof) {
        args.push(names.operand(c)?);
    }
    if has_attr || !args.is_empty() {
        while c.eat_punct(',') {
            args.push(names.operand(c)?);
        }
    }
    Ok(Stmt::Op {
        dst: dsts[0],
        op,
        args,
    })
}

/// Exactly four registers, as the C and D of an mma.
fn four(regs: Vec<Reg>, pos: Pos, what: &str) -> Result<[Reg; 4], ReadError> {
    let n = regs.len();
    <[Reg; 4]>::try_from(regs).map_err(|_| pos.error(format!("{what} four f32 registers, not {n}")))
}

/// `m64nNk16.bf16` and friends: a [`WgmmaShape`] PTX has, by its text name.
fn wgmma_shape(name: &str) -> Option<WgmmaShape> {
    let (mnk, ty) = name.split_once('.')?;
    let input = WgmmaInput::ALL.into_iter().find(|x| x.name() == ty)?;
    let (n, k) = mnk.strip_prefix("m64n")?.split_once('k')?;
    let shape = WgmmaShape {
        n: n.parse().ok()?,
        input,
    };
    (k.parse::<u32>().ok()? == shape.k() && shape.is_valid()).then_some(shape)
}
