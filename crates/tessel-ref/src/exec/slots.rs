//! Puts a [`Kernel`] into the executor's slot form ([`SlotKernel`]), once per kernel.
//!
//! Data model: every register becomes a *slot* in one of two register files, `r32`
//! (`Pred`, `U32`, `F32`: raw bits, predicates as 0/1) or `r64` (`U64`). Each slot holds one
//! value per thread of the CTA. Immediates become constant slots after the registers, so
//! every operand the interpreter reads is a slot and its inner loops never branch on the
//! operand kind. Operand classes (32/64-bit) are checked here against each op's signature
//! ([`Op::signature`], the kernel IR's one table), so the interpreter can index without
//! checks; a mismatch is an [`ExecError::Malformed`].
//! Shared buffers are laid out in declaration order, each at its alignment.

use super::flat::Code;
use super::ExecError;
use std::collections::HashMap;
use tessel_ir::kernel::{
    Kernel, MmaShape, Op, Operand, ParamKind, RegType, SigType, Space, Stmt, WgmmaA, WgmmaInput,
    WgmmaMajor, WgmmaShape, Width,
};
use tessel_ir::Reg;

/// A wgmma's A operand in slot form: a descriptor's 64-bit slot, or the four 32-bit
/// slots of A's registers.
#[derive(Copy, Clone, Debug)]
pub(crate) enum WgmmaASlots {
    Desc(u32),
    Regs([u32; WgmmaA::REGS]),
}

/// A straight-line statement in slot form: it runs for the active lanes and goes on to the
/// next. Slots index `r32` unless the op's signature says 64-bit.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    Op {
        dst: u32,
        op: Op,
        args: [u32; 3],
        /// For `Mov`/`Select`: the value is 64-bit.
        wide: bool,
    },
    Load {
        dsts: [u32; 4],
        space: Space,
        width: Width,
        addr: u32,
        offset: i32,
    },
    Store {
        values: [u32; 4],
        space: Space,
        width: Width,
        addr: u32,
        offset: i32,
    },
    /// Slots of D, A, B, C (all 32-bit).
    Mma {
        shape: MmaShape,
        d: [u32; 4],
        a: [u32; 4],
        b: [u32; 2],
        c: [u32; 4],
    },
    /// The first `count` of `dsts`.
    Ldmatrix {
        dsts: [u32; 4],
        count: usize,
        trans: bool,
        addr: u32,
        offset: i32,
    },
    /// `src_bytes` is a 32-bit slot, `None` for a full copy.
    CpAsync {
        bytes: u32,
        dst: u32,
        dst_offset: i32,
        src: u32,
        src_offset: i32,
        src_bytes: Option<u32>,
    },
    CpAsyncCommit,
    CpAsyncWait(u32),
    CpAsyncWaitAll,
    /// `d` the accumulators' 32-bit slots, the descriptors 64-bit slots, A's registers
    /// 32-bit slots.
    Wgmma {
        shape: WgmmaShape,
        d: Box<[u32]>,
        a: WgmmaASlots,
        b_desc: u32,
        b_major: WgmmaMajor,
    },
    WgmmaFence,
    WgmmaCommit,
    WgmmaWait(u32),
    FenceProxyAsync,
    // --- mbarrier, TMA and setmaxnreg (module `cta/mbarrier.rs`). ---
    /// `mbarrier.init`: the barrier's address and arrival count (32-bit slots).
    MbarInit {
        addr: u32,
        count: u32,
    },
    /// `mbarrier.arrive`, with the slot of `expect_tx`'s bytes if any.
    MbarArrive {
        addr: u32,
        tx: Option<u32>,
    },
    /// `fence.mbarrier_init`: nothing to order in the executor.
    FenceMbarrierInit,
    /// A TMA tiled load: shared destination, tensor-map address (a 64-bit slot), the first
    /// `rank` of `coords` (32-bit slots), the mbarrier's address.
    TmaLoad {
        dst: u32,
        tmap: u32,
        coords: [u32; 5],
        rank: usize,
        mbar: u32,
    },
    /// `setmaxnreg`: no effect on results.
    SetMaxNReg,
    /// `griddepcontrol.wait` / `.launch_dependents`: kernels run one after another in the
    /// executor, so there is nothing to wait for or let go.
    GridDep,
    /// `prefetch.l2`: the address (a 64-bit slot) and the byte count (a 32-bit slot),
    /// checked to lie within one global buffer.
    PrefetchL2 {
        addr: u32,
        bytes: u32,
    },
}

impl Action {
    /// Whether the statement counts in [`super::ExecStats::lane_instructions`] (the waits,
    /// commits and fences of `cp.async` and `wgmma`, the mbarrier-init fence and
    /// `setmaxnreg` do not).
    pub fn counts(&self) -> bool {
        !matches!(
            self,
            Action::CpAsyncCommit
                | Action::CpAsyncWait(_)
                | Action::CpAsyncWaitAll
                | Action::WgmmaFence
                | Action::WgmmaCommit
                | Action::WgmmaWait(_)
                | Action::FenceProxyAsync
                | Action::FenceMbarrierInit
                | Action::SetMaxNReg
                | Action::GridDep
        )
    }
}

/// A statement in slot form, structured as the kernel IR's.
#[derive(Clone, Debug)]
pub(crate) enum SlotStmt {
    Do(Action),
    For {
        var: u32,
        start: u32,
        end: u32,
        step: u32,
        body: Vec<SlotStmt>,
    },
    If {
        cond: u32,
        then_body: Vec<SlotStmt>,
        else_body: Vec<SlotStmt>,
    },
    /// `barrier`: barrier 0, every warp of the CTA.
    Barrier,
    /// `bar.sync id` / `bar.arrive id` counting `warps` warps (the IR's threads / 32).
    BarSync {
        id: u32,
        warps: u32,
    },
    BarArrive {
        id: u32,
        warps: u32,
    },
    /// `mbarrier.try_wait.parity` in its loop: the address and parity slots (32-bit).
    MbarWait {
        addr: u32,
        parity: u32,
    },
}

/// A kernel ready to run: every register and immediate a slot of `r32` or `r64`.
pub(crate) struct SlotKernel {
    pub name: String,
    pub params: Vec<ParamKind>,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    /// Threads per CTA.
    pub threads: usize,
    /// Register slots (before the constants) and all slots, per file.
    pub regs32: usize,
    pub slots32: usize,
    pub regs64: usize,
    pub slots64: usize,
    pub consts32: Vec<(u32, u32)>,
    pub consts64: Vec<(u32, u64)>,
    /// `(offset, bytes)` of each shared buffer in the CTA's window.
    pub shared: Vec<(u32, u32)>,
    pub shared_size: u32,
    /// Deepest nesting of `If`/`For` bodies (the body itself is depth 0).
    pub max_depth: usize,
    /// Whether the body has a `cp.async` (the CTA then tracks pending shared bytes).
    pub uses_cp_async: bool,
    /// Whether the body has a `wgmma` (the CTA then tracks which shared bytes its
    /// operands may be read from: `cta/wgmma.rs`).
    pub uses_wgmma: bool,
    /// Whether the body has an mbarrier statement or a TMA load (the CTA then tracks its
    /// barriers, and the bytes of TMA copies not yet complete).
    pub uses_mbarrier: bool,
    /// The declared alignment of each shared buffer (a TMA destination needs its own).
    pub shared_align: Vec<u32>,
    /// The body, flattened.
    pub code: Code,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Class {
    B32,
    B64,
}

/// Gives registers their slots up front and immediates theirs as the statements meet them.
struct SlotAssigner<'k> {
    k: &'k Kernel,
    slot: Vec<(Class, u32)>,
    n32: u32,
    n64: u32,
    c32: HashMap<u32, u32>,
    c64: HashMap<u64, u32>,
    consts32: Vec<(u32, u32)>,
    consts64: Vec<(u32, u64)>,
    max_depth: usize,
    uses_cp_async: bool,
    uses_wgmma: bool,
    uses_mbarrier: bool,
}

impl SlotAssigner<'_> {
    /// The 32-bit slots of `regs`, which must number exactly `N`.
    fn regs32<const N: usize>(&self, regs: &[Reg], what: &str) -> Result<[u32; N], ExecError> {
        if regs.len() != N {
            return Err(self.err(format!("{what} takes {N} registers, {} given", regs.len())));
        }
        let mut out = [0u32; N];
        for (o, &r) in out.iter_mut().zip(regs) {
            *o = self.reg(r, Class::B32)?;
        }
        Ok(out)
    }

    /// Warps counted by named barrier `id` of `threads` threads; the verifier's
    /// `kernel.bar` rule, checked again because the executor also runs unverified IR.
    fn bar_warps(&self, id: u32, threads: u32) -> Result<u32, ExecError> {
        if !(1..=15).contains(&id) {
            return Err(self.err(format!("named barrier {id} is not in 1..=15")));
        }
        if threads == 0 || threads % 32 != 0 || threads > self.k.threads_per_cta() {
            return Err(self.err(format!(
                "barrier {id} counts {threads} threads, not a nonzero multiple of 32 within the CTA"
            )));
        }
        Ok(threads / 32)
    }

    fn err(&self, msg: String) -> ExecError {
        ExecError::Malformed {
            kernel: self.k.name.clone(),
            msg,
        }
    }

    fn reg(&self, r: Reg, want: Class) -> Result<u32, ExecError> {
        let &(c, s) = self
            .slot
            .get(r.as_u32() as usize)
            .ok_or_else(|| self.err(format!("register {r} is not declared")))?;
        if c != want {
            return Err(self.err(format!(
                "register {r} is {} but a {}-bit value is needed",
                self.k.regs[r].name(),
                if want == Class::B32 { 32 } else { 64 }
            )));
        }
        Ok(s)
    }

    fn operand(&mut self, o: Operand, want: Class) -> Result<u32, ExecError> {
        let imm = match o {
            Operand::Reg(r) => return self.reg(r, want),
            Operand::U32(v) | Operand::F32(v) => v as u64,
            Operand::U64(v) => v,
        };
        match want {
            Class::B32 => {
                if matches!(o, Operand::U64(_)) {
                    return Err(self.err(format!("u64 immediate {imm} where 32 bits are needed")));
                }
                let next = self.n32 + self.consts32.len() as u32;
                let s = *self.c32.entry(imm as u32).or_insert(next);
                if s == next {
                    self.consts32.push((s, imm as u32));
                }
                Ok(s)
            }
            Class::B64 => {
                let next = self.n64 + self.consts64.len() as u32;
                let s = *self.c64.entry(imm).or_insert(next);
                if s == next {
                    self.consts64.push((s, imm));
                }
                Ok(s)
            }
        }
    }

    /// The class of `op`'s result, read from its signature ([`Op::signature`]) given the
    /// destination's type. The executor has no evaluation of [`Op::Math`].
    fn result_class(&self, op: Op, dst: RegType) -> Result<Class, ExecError> {
        match (op, op.signature().result) {
            (Op::Math(f), _) => Err(ExecError::UnexpandedMath {
                kernel: self.k.name.clone(),
                func: f,
            }),
            (Op::Param(n), _) => match self.k.params.get(n as usize) {
                Some(p) => Ok(class_of(p.kind.reg_type())),
                None => Err(self.err(format!("parameter {n} is not declared"))),
            },
            (_, SigType::Is(t)) => Ok(class_of(t)),
            (_, SigType::T) => Ok(class_of(dst)),
            // `T32` is 32-bit whatever the destination; only `Op::Param` has `Param`.
            (_, SigType::T32 | SigType::Param) => Ok(Class::B32),
        }
    }

    fn block(&mut self, stmts: &[Stmt], depth: usize) -> Result<Vec<SlotStmt>, ExecError> {
        self.max_depth = self.max_depth.max(depth);
        stmts.iter().map(|s| self.stmt(s, depth)).collect()
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) -> Result<SlotStmt, ExecError> {
        Ok(match s {
            Stmt::Op { dst, op, args } => {
                let Some(&dty) = self.k.regs.get(*dst) else {
                    return Err(self.err(format!("register {dst} is not declared")));
                };
                let dclass = class_of(dty);
                let d = self.reg(*dst, self.result_class(*op, dty)?)?;
                let sig = op.signature();
                if args.len() != sig.args.len() {
                    return Err(self.err(format!(
                        "{op:?} takes {} operands, {} given",
                        sig.args.len(),
                        args.len()
                    )));
                }
                let mut a = [0u32; 3];
                for (i, (&o, t)) in args.iter().zip(sig.arg_types(dty)).enumerate() {
                    a[i] = self.operand(o, class_of(t))?;
                }
                if let Op::SharedAddr(b) = op {
                    if self.k.shared.get(*b).is_none() {
                        return Err(self.err(format!("shared buffer {b} is not declared")));
                    }
                }
                SlotStmt::Do(Action::Op {
                    dst: d,
                    op: *op,
                    args: a,
                    wide: dclass == Class::B64,
                })
            }
            Stmt::Load {
                dsts,
                space,
                width,
                addr,
                offset,
            } => {
                if dsts.len() != width.regs() {
                    return Err(
                        self.err(format!("{width:?} load needs {} registers", width.regs()))
                    );
                }
                let mut d = [0u32; 4];
                for (i, &r) in dsts.iter().enumerate() {
                    d[i] = self.reg(r, Class::B32)?;
                }
                SlotStmt::Do(Action::Load {
                    dsts: d,
                    space: *space,
                    width: *width,
                    addr: self.reg(*addr, addr_class(*space))?,
                    offset: *offset,
                })
            }
            Stmt::Store {
                space,
                width,
                addr,
                offset,
                values,
            } => {
                if values.len() != width.regs() {
                    return Err(self.err(format!("{width:?} store needs {} values", width.regs())));
                }
                let mut v = [0u32; 4];
                for (i, &o) in values.iter().enumerate() {
                    v[i] = self.operand(o, Class::B32)?;
                }
                SlotStmt::Do(Action::Store {
                    values: v,
                    space: *space,
                    width: *width,
                    addr: self.reg(*addr, addr_class(*space))?,
                    offset: *offset,
                })
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => SlotStmt::For {
                var: self.reg(*var, Class::B32)?,
                start: self.operand(*start, Class::B32)?,
                end: self.operand(*end, Class::B32)?,
                step: self.operand(*step, Class::B32)?,
                body: self.block(body, depth + 1)?,
            },
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => SlotStmt::If {
                cond: self.reg(*cond, Class::B32)?,
                then_body: self.block(then_body, depth + 1)?,
                else_body: self.block(else_body, depth + 1)?,
            },
            Stmt::Barrier => SlotStmt::Barrier,
            Stmt::BarSync { id, threads } => SlotStmt::BarSync {
                id: *id,
                warps: self.bar_warps(*id, *threads)?,
            },
            Stmt::BarArrive { id, threads } => SlotStmt::BarArrive {
                id: *id,
                warps: self.bar_warps(*id, *threads)?,
            },
            Stmt::Mma { shape, d, a, b, c } => {
                let what = format!("mma.{}", shape.name());
                SlotStmt::Do(Action::Mma {
                    shape: *shape,
                    d: self.regs32(d, &format!("{what} D"))?,
                    a: self.regs32(a, &format!("{what} A"))?,
                    b: self.regs32(b, &format!("{what} B"))?,
                    c: self.regs32(c, &format!("{what} C"))?,
                })
            }
            Stmt::Ldmatrix {
                dsts,
                trans,
                addr,
                offset,
            } => {
                if !matches!(dsts.len(), 1 | 2 | 4) {
                    return Err(self.err(format!("ldmatrix of {} matrices", dsts.len())));
                }
                let mut d = [0u32; 4];
                for (i, &r) in dsts.iter().enumerate() {
                    d[i] = self.reg(r, Class::B32)?;
                }
                SlotStmt::Do(Action::Ldmatrix {
                    dsts: d,
                    count: dsts.len(),
                    trans: *trans,
                    addr: self.reg(*addr, Class::B32)?,
                    offset: *offset,
                })
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
                if !cache.allows(*bytes) {
                    return Err(self.err(format!("cp.async.{} of {bytes} bytes", cache.name())));
                }
                self.uses_cp_async = true;
                SlotStmt::Do(Action::CpAsync {
                    bytes: *bytes,
                    dst: self.reg(*dst, Class::B32)?,
                    dst_offset: *dst_offset,
                    src: self.reg(*src, Class::B64)?,
                    src_offset: *src_offset,
                    src_bytes: src_bytes.map(|o| self.operand(o, Class::B32)).transpose()?,
                })
            }
            Stmt::CpAsyncCommit => SlotStmt::Do(Action::CpAsyncCommit),
            Stmt::CpAsyncWait(n) => SlotStmt::Do(Action::CpAsyncWait(*n)),
            Stmt::CpAsyncWaitAll => SlotStmt::Do(Action::CpAsyncWaitAll),
            Stmt::Wgmma {
                shape,
                d,
                a,
                b_desc,
                b_major,
            } => {
                if !shape.is_valid() || d.len() != shape.d_regs() {
                    return Err(self.err(format!(
                        "wgmma.{} with {} accumulators",
                        shape.name(),
                        d.len()
                    )));
                }
                if self.k.threads_per_cta() % 128 != 0 {
                    return Err(self.err(format!(
                        "wgmma in a CTA of {} threads, not whole warpgroups",
                        self.k.threads_per_cta()
                    )));
                }
                self.uses_wgmma = true;
                SlotStmt::Do(Action::Wgmma {
                    shape: *shape,
                    d: d.iter()
                        .map(|&r| self.reg(r, Class::B32))
                        .collect::<Result<_, _>>()?,
                    a: match a {
                        WgmmaA::Desc(r) => WgmmaASlots::Desc(self.reg(*r, Class::B64)?),
                        WgmmaA::Regs(rs) => {
                            if rs.len() != WgmmaA::REGS || shape.input == WgmmaInput::Tf32 {
                                return Err(self.err(format!(
                                    "wgmma.{} with {} A registers",
                                    shape.name(),
                                    rs.len()
                                )));
                            }
                            let mut slots = [0; WgmmaA::REGS];
                            for (s, &r) in slots.iter_mut().zip(rs) {
                                *s = self.reg(r, Class::B32)?;
                            }
                            WgmmaASlots::Regs(slots)
                        }
                    },
                    b_desc: self.reg(*b_desc, Class::B64)?,
                    b_major: *b_major,
                })
            }
            Stmt::WgmmaFence => SlotStmt::Do(Action::WgmmaFence),
            Stmt::WgmmaCommit => SlotStmt::Do(Action::WgmmaCommit),
            Stmt::WgmmaWait(n) => SlotStmt::Do(Action::WgmmaWait(*n)),
            Stmt::FenceProxyAsync => SlotStmt::Do(Action::FenceProxyAsync),
            Stmt::MbarInit { addr, count } => {
                self.uses_mbarrier = true;
                SlotStmt::Do(Action::MbarInit {
                    addr: self.reg(*addr, Class::B32)?,
                    count: self.operand(*count, Class::B32)?,
                })
            }
            Stmt::MbarArriveExpectTx { addr, bytes } => {
                self.uses_mbarrier = true;
                SlotStmt::Do(Action::MbarArrive {
                    addr: self.reg(*addr, Class::B32)?,
                    tx: Some(self.operand(*bytes, Class::B32)?),
                })
            }
            Stmt::MbarArrive { addr } => {
                self.uses_mbarrier = true;
                SlotStmt::Do(Action::MbarArrive {
                    addr: self.reg(*addr, Class::B32)?,
                    tx: None,
                })
            }
            Stmt::MbarWait { addr, parity } => {
                self.uses_mbarrier = true;
                SlotStmt::MbarWait {
                    addr: self.reg(*addr, Class::B32)?,
                    parity: self.operand(*parity, Class::B32)?,
                }
            }
            Stmt::FenceMbarrierInit => SlotStmt::Do(Action::FenceMbarrierInit),
            Stmt::TmaLoad {
                dst,
                tmap,
                coords,
                mbar,
            } => {
                if !(1..=5).contains(&coords.len()) {
                    return Err(self.err(format!("a TMA load of {} coordinates", coords.len())));
                }
                self.uses_mbarrier = true;
                let mut cs = [0u32; 5];
                for (c, &o) in cs.iter_mut().zip(coords) {
                    *c = self.operand(o, Class::B32)?;
                }
                SlotStmt::Do(Action::TmaLoad {
                    dst: self.reg(*dst, Class::B32)?,
                    tmap: self.reg(*tmap, Class::B64)?,
                    coords: cs,
                    rank: coords.len(),
                    mbar: self.reg(*mbar, Class::B32)?,
                })
            }
            Stmt::SetMaxNReg { regs, .. } => {
                if !(24..=256).contains(regs) || regs % 8 != 0 {
                    return Err(self.err(format!("setmaxnreg to {regs} registers")));
                }
                SlotStmt::Do(Action::SetMaxNReg)
            }
            Stmt::GridDepWait | Stmt::GridDepLaunch => SlotStmt::Do(Action::GridDep),
            Stmt::PrefetchL2 { addr, bytes } => SlotStmt::Do(Action::PrefetchL2 {
                addr: self.reg(*addr, Class::B64)?,
                bytes: self.operand(*bytes, Class::B32)?,
            }),
        })
    }
}

/// The register file of a type: `r64` for `U64`, `r32` for the rest.
fn class_of(ty: RegType) -> Class {
    if ty == RegType::U64 {
        Class::B64
    } else {
        Class::B32
    }
}

fn addr_class(space: Space) -> Class {
    match space {
        Space::Global => Class::B64,
        Space::Shared => Class::B32,
    }
}

/// `k` in slot form. Errors: [`ExecError::Malformed`] for operand-class or arity mismatches and
/// undeclared registers, parameters or shared buffers; [`ExecError::UnexpandedMath`] for an
/// [`Op::Math`] left in the body.
pub(crate) fn assign_slots(k: &Kernel) -> Result<SlotKernel, ExecError> {
    let mut slot = Vec::with_capacity(k.regs.len());
    let (mut n32, mut n64) = (0u32, 0u32);
    for (_, &ty) in k.regs.iter() {
        let class = class_of(ty);
        let n = if class == Class::B64 {
            &mut n64
        } else {
            &mut n32
        };
        slot.push((class, *n));
        *n += 1;
    }
    let threads = k.threads_per_cta() as usize;
    if threads == 0 || threads > 1024 {
        return Err(ExecError::Malformed {
            kernel: k.name.clone(),
            msg: format!("{threads} threads per CTA (1..=1024 allowed)"),
        });
    }
    let mut shared = Vec::with_capacity(k.shared.len());
    let mut off: u64 = 0;
    for (_, d) in k.shared.iter() {
        let align = d.align.max(1) as u64;
        if !align.is_power_of_two() {
            return Err(ExecError::Malformed {
                kernel: k.name.clone(),
                msg: format!("shared alignment {align} is not a power of two"),
            });
        }
        off = off.div_ceil(align) * align;
        shared.push((off as u32, d.bytes));
        off += d.bytes as u64;
    }
    if off > u32::MAX as u64 / 2 {
        return Err(ExecError::Malformed {
            kernel: k.name.clone(),
            msg: format!("{off} bytes of shared memory"),
        });
    }
    let mut l = SlotAssigner {
        k,
        slot,
        n32,
        n64,
        c32: HashMap::new(),
        c64: HashMap::new(),
        consts32: Vec::new(),
        consts64: Vec::new(),
        max_depth: 0,
        uses_cp_async: false,
        uses_wgmma: false,
        uses_mbarrier: false,
    };
    let body = l.block(&k.body, 0)?;
    Ok(SlotKernel {
        name: k.name.clone(),
        params: k.params.iter().map(|p| p.kind).collect(),
        block: k.block,
        grid: k.grid,
        threads,
        regs32: n32 as usize,
        slots32: n32 as usize + l.consts32.len(),
        regs64: n64 as usize,
        slots64: n64 as usize + l.consts64.len(),
        consts32: l.consts32,
        consts64: l.consts64,
        shared,
        shared_size: off as u32,
        max_depth: l.max_depth,
        uses_cp_async: l.uses_cp_async,
        uses_wgmma: l.uses_wgmma,
        uses_mbarrier: l.uses_mbarrier,
        shared_align: k.shared.values().map(|d| d.align.max(1)).collect(),
        code: Code::new(&body),
    })
}
