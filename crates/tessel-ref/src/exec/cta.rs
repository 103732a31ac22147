//! The SIMT interpreter: runs one CTA of a kernel in slot form, warp by warp.
//!
//! Data model: register files are slot-major (`r32[slot * threads + thread]`), so one
//! statement is one tight loop over the threads of the warps that run it together: the op
//! is matched once per statement, the loop body is a closure the compiler inlines (and
//! usually vectorises). Results are computed for every thread of the [`Span`] into a
//! scratch row, then committed under the active mask (`0` / `!0` per thread), a blend the
//! compiler vectorises too. Ops that can fault (division by zero, shifts ≥ 32, shuffles,
//! memory) check the active threads first.
//!
//! Control flow: the body is flattened once per kernel into a program with jumps
//! (`exec/flat.rs`); each warp has its own position in it and its lanes' masks, one per
//! nesting depth (`cta/sched.rs` runs them). `If` computes a warp's then- and else-masks
//! from the condition before running either arm (an arm may assign the condition); `For`
//! narrows its mask each iteration to the lanes with `var < end` and the warp leaves when
//! none is left. The warps at the lowest position run next, together, which replays
//! CTA-wide lockstep wherever warps do not wait on each other: every statement is then a
//! CTA-wide barrier, so a kernel with a shared-memory race still gives one deterministic
//! answer here; such races are for `compute-sanitizer racecheck`. Barriers block a warp
//! until their phase completes; a CTA whose warps all wait is a deadlock error.
//!
//! Layout: this file holds the CTA's state, the straight-line statements (`Cta::action`)
//! and `Cta::op`, the evaluation of every kernel-IR op; that one match over every op stays
//! whole (about 330 lines), which is why the file is a little over 700 lines. The per-warp scheduler is `cta/sched.rs`; memory accesses (`ld`, `st`,
//! `cp.async`) are in `cta/access.rs`, the warp-wide `mma` and `ldmatrix` in `cta/warp.rs`,
//! the warpgroup's `wgmma` and the async proxy in `cta/wgmma.rs`, mbarriers and TMA loads in
//! `cta/mbarrier.rs`.

mod access;
mod mbarrier;
mod sched;
mod warp;
mod wgmma;

use super::memory::{Fault, GlobalMem};
use super::numerics::{self as nm, canon};
use super::slots::{Action, SlotKernel};
use super::{ExecError, LaunchParams};
use std::collections::VecDeque;
use tessel_ir::kernel::{FCmp, ICmp, Op, Space, Special};

/// A `cp.async` destination: `(shared address, bytes)`.
type PendingCopy = (u32, u32);

/// Per-worker state, reused across the CTAs a rayon worker runs.
pub(crate) struct Cta<'a> {
    k: &'a SlotKernel,
    mem: &'a GlobalMem,
    /// Launch argument values (buffer base addresses, `u32` scalars, tensor-map
    /// addresses) and the launch's tensor maps.
    params: &'a LaunchParams,
    n: usize,
    r32: Vec<u32>,
    r64: Vec<u64>,
    t32: Vec<u32>,
    t64: Vec<u64>,
    /// Then-masks per depth, and else-masks saved while the then-arm runs.
    masks: Vec<Vec<u32>>,
    else_masks: Vec<Vec<u32>>,
    shared: Vec<u8>,
    ctaid: [u32; 3],
    cta: u64,
    /// Lane-instructions executed (active threads summed over executed statements).
    pub lane_instructions: u64,
    /// Per shared byte, how many issued `cp.async` copies that write it are not yet
    /// complete (empty unless the kernel uses `cp.async`).
    cp_pending: Vec<u16>,
    /// Copies not yet complete, over the CTA: when 0, shared accesses skip the check.
    cp_outstanding: usize,
    /// Per thread: copies issued since its last commit, and its committed groups, oldest
    /// first.
    cp_open: Vec<Vec<PendingCopy>>,
    cp_groups: Vec<VecDeque<Vec<PendingCopy>>>,
    /// Warps of the CTA (the last has fewer than 32 lanes when `n` is not a multiple of 32).
    nw: usize,
    /// Per warp: its position in `k.code` and whether it can run (module `sched`).
    pc: Vec<u32>,
    state: Vec<sched::WarpState>,
    /// Active lanes per depth and warp (`wact[d * nw + w]`), and the else-arm lanes of the
    /// `if` that opened depth `d` (`welse`, same layout).
    wact: Vec<u32>,
    welse: Vec<u32>,
    /// Barrier 0 (`barrier`) and the named barriers 1..=15.
    bars: [sched::Bar; 16],
    /// The async proxy's view of shared memory (empty unless the kernel uses wgmma).
    proxy: wgmma::AsyncProxy,
    /// The CTA's mbarriers, in initialisation order (module `mbarrier`).
    mbars: Vec<mbarrier::Mbar>,
    /// Per shared byte, how many TMA copies writing it are not yet complete (empty unless
    /// the kernel uses mbarriers), and how many such copies there are.
    tma_pending: Vec<u16>,
    tma_outstanding: usize,
}

#[inline(always)]
fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

#[inline(always)]
fn map1(t: &mut [u32], a: &[u32], op: impl Fn(u32) -> u32) {
    for (t, &a) in t.iter_mut().zip(a) {
        *t = op(a);
    }
}

#[inline(always)]
fn map2(t: &mut [u32], a: &[u32], b: &[u32], op: impl Fn(u32, u32) -> u32) {
    for ((t, &a), &b) in t.iter_mut().zip(a).zip(b) {
        *t = op(a, b);
    }
}

#[inline(always)]
fn map3(t: &mut [u32], a: &[u32], b: &[u32], c: &[u32], op: impl Fn(u32, u32, u32) -> u32) {
    for (((t, &a), &b), &c) in t.iter_mut().zip(a).zip(b).zip(c) {
        *t = op(a, b, c);
    }
}

#[inline(always)]
fn commit32(dst: &mut [u32], t: &[u32], mask: &[u32], full: bool) {
    if full {
        dst.copy_from_slice(t);
    } else {
        for ((d, &t), &m) in dst.iter_mut().zip(t).zip(mask) {
            *d = (t & m) | (*d & !m);
        }
    }
}

#[inline(always)]
fn commit64(dst: &mut [u64], t: &[u64], mask: &[u32], full: bool) {
    if full {
        dst.copy_from_slice(t);
    } else {
        for ((d, &t), &m) in dst.iter_mut().zip(t).zip(mask) {
            let m = m as i32 as i64 as u64;
            *d = (t & m) | (*d & !m);
        }
    }
}

#[inline(always)]
fn pred(b: bool) -> u32 {
    b as u32
}

/// The threads `lo..hi` of the CTA (`lo` a warp's first lane) at mask depth `d`; `full`
/// when every one of them is active there (results are then committed without the mask).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub lo: usize,
    pub hi: usize,
    pub d: usize,
    pub full: bool,
}

/// Which register file an op's result goes to.
enum Out {
    R32,
    R64,
}

impl<'a> Cta<'a> {
    pub fn new(k: &'a SlotKernel, mem: &'a GlobalMem, params: &'a LaunchParams) -> Cta<'a> {
        let n = k.threads;
        let nw = n.div_ceil(32);
        let mut r32 = vec![!0u32; k.slots32 * n];
        for &(s, v) in &k.consts32 {
            r32[s as usize * n..][..n].fill(v);
        }
        let mut r64 = vec![!0u64; k.slots64 * n];
        for &(s, v) in &k.consts64 {
            r64[s as usize * n..][..n].fill(v);
        }
        let depths = k.max_depth + 2;
        Cta {
            k,
            mem,
            params,
            n,
            r32,
            r64,
            t32: vec![0; n],
            t64: vec![0; n],
            masks: vec![vec![!0u32; n]; depths],
            else_masks: vec![vec![0u32; n]; depths],
            shared: vec![0xFF; k.shared_size as usize],
            ctaid: [0; 3],
            cta: 0,
            lane_instructions: 0,
            cp_pending: vec![
                0;
                if k.uses_cp_async {
                    k.shared_size as usize
                } else {
                    0
                }
            ],
            cp_outstanding: 0,
            cp_open: vec![Vec::new(); if k.uses_cp_async { n } else { 0 }],
            cp_groups: vec![VecDeque::new(); if k.uses_cp_async { n } else { 0 }],
            nw,
            pc: vec![0; nw],
            state: vec![sched::WarpState::Ready; nw],
            wact: vec![0; depths * nw],
            welse: vec![0; depths * nw],
            bars: [sched::Bar::default(); 16],
            proxy: if k.uses_wgmma {
                wgmma::AsyncProxy::new(k.shared_size as usize, n, nw)
            } else {
                wgmma::AsyncProxy::default()
            },
            mbars: Vec::new(),
            tma_pending: vec![
                0;
                if k.uses_mbarrier {
                    k.shared_size as usize
                } else {
                    0
                }
            ],
            tma_outstanding: 0,
        }
    }

    /// Runs CTA number `cta` (x fastest, then y, then z) from a fresh state: registers and
    /// shared memory poisoned with all-ones bits, so no result depends on which CTA this
    /// worker ran before.
    pub fn run(&mut self, cta: u64) -> Result<(), ExecError> {
        let n = self.n;
        let [gx, gy, _] = self.k.grid;
        let (gx, gy) = (gx as u64, gy as u64);
        self.cta = cta;
        self.ctaid = [
            (cta % gx) as u32,
            ((cta / gx) % gy) as u32,
            (cta / (gx * gy)) as u32,
        ];
        self.r32[..self.k.regs32 * n].fill(!0);
        self.r64[..self.k.regs64 * n].fill(!0);
        self.shared.fill(0xFF);
        self.cp_pending.fill(0);
        self.cp_outstanding = 0;
        self.cp_open.iter_mut().for_each(Vec::clear);
        self.cp_groups.iter_mut().for_each(VecDeque::clear);
        self.proxy.reset();
        self.mbars.clear();
        self.tma_pending.fill(0);
        self.tma_outstanding = 0;
        self.masks[0].fill(!0);
        self.run_warps()?;
        self.check_tma_done()
    }

    fn fault(
        &self,
        thread: usize,
        space: Space,
        addr: u64,
        bytes: u32,
        store: bool,
        e: Fault,
    ) -> ExecError {
        let access = if store { "store" } else { "load" };
        self.fault_as(thread, space, addr, bytes, access, e)
    }

    /// [`Cta::fault`] for an access named `access` ("load", "store", "prefetch.l2").
    fn fault_as(
        &self,
        thread: usize,
        space: Space,
        addr: u64,
        bytes: u32,
        access: &'static str,
        e: Fault,
    ) -> ExecError {
        let kernel = self.k.name.clone();
        let (cta, thread) = (self.cta, thread as u32);
        match e {
            Fault::Wild => ExecError::WildAddress {
                kernel,
                cta,
                thread,
                access,
                space,
                addr,
            },
            Fault::OutOfBounds { buf, offset } => {
                let b = &self.mem.bufs[buf];
                ExecError::OutOfBounds {
                    kernel,
                    cta,
                    thread,
                    access,
                    buffer: b.name.clone(),
                    offset,
                    bytes,
                    size: b.size,
                }
            }
            Fault::Misaligned => ExecError::Misaligned {
                kernel,
                cta,
                thread,
                access,
                space,
                addr,
                bytes,
            },
            Fault::ReadOnly { buf } => ExecError::StoreToInput {
                kernel,
                cta,
                thread,
                buffer: self.mem.bufs[buf].name.clone(),
            },
        }
    }

    /// Runs the straight-line statement `a` for the active lanes of `sp`.
    #[inline]
    pub(super) fn action(&mut self, a: &Action, sp: Span) -> Result<(), ExecError> {
        match a {
            Action::Op {
                dst,
                op,
                args,
                wide,
            } => self.op(*dst as usize, *op, args, *wide, sp),
            Action::Load {
                dsts,
                space,
                width,
                addr,
                offset,
            } => self.load(dsts, *space, *width, *addr as usize, *offset, sp),
            Action::Store {
                values,
                space,
                width,
                addr,
                offset,
            } => self.store(values, *space, *width, *addr as usize, *offset, sp),
            Action::Mma {
                shape,
                d: dd,
                a,
                b,
                c,
            } => self.mma(*shape, dd, a, b, c, sp),
            Action::Ldmatrix {
                dsts,
                count,
                trans,
                addr,
                offset,
            } => self.ldmatrix(&dsts[..*count], *trans, *addr as usize, *offset, sp),
            Action::CpAsync {
                bytes,
                dst,
                dst_offset,
                src,
                src_offset,
                src_bytes,
            } => self.cp_async(
                *bytes,
                (*dst as usize, *dst_offset),
                (*src as usize, *src_offset),
                *src_bytes,
                sp,
            ),
            Action::CpAsyncCommit => {
                self.cp_commit(sp);
                Ok(())
            }
            Action::CpAsyncWait(keep) => {
                self.cp_wait(*keep as usize, sp);
                Ok(())
            }
            Action::CpAsyncWaitAll => {
                self.cp_commit(sp);
                self.cp_wait(0, sp);
                Ok(())
            }
            Action::Wgmma {
                shape,
                d,
                a,
                b_desc,
                b_major,
            } => self.wgmma(*shape, d, (*a, *b_desc as usize, *b_major), sp),
            // The model runs in program order: nothing is left for the fence to order.
            Action::WgmmaFence => self.full_warps(sp, "wgmma.fence").map(|_| ()),
            Action::WgmmaCommit => self.wgmma_commit(sp),
            Action::WgmmaWait(keep) => self.wgmma_wait(*keep as usize, sp),
            Action::FenceProxyAsync => {
                self.fence_proxy_async(sp);
                Ok(())
            }
            Action::MbarInit { addr, count } => self.mbar_init(*addr as usize, *count as usize, sp),
            Action::MbarArrive { addr, tx } => {
                self.mbar_arrive(*addr as usize, tx.map(|t| t as usize), sp)
            }
            Action::TmaLoad {
                dst,
                tmap,
                coords,
                rank,
                mbar,
            } => self.tma_load(
                *dst as usize,
                *tmap as usize,
                &coords[..*rank],
                *mbar as usize,
                sp,
            ),
            Action::FenceMbarrierInit | Action::SetMaxNReg | Action::GridDep => Ok(()),
            Action::PrefetchL2 { addr, bytes } => {
                self.prefetch_l2(*addr as usize, *bytes as usize, sp)
            }
        }
    }

    /// `var = start` for the active threads `lo..hi` at depth `d`, which all enter the
    /// loop: their mask at depth `d + 1` is the one at `d`.
    fn for_init(&mut self, var: usize, start: usize, lo: usize, hi: usize, d: usize, full: bool) {
        let n = self.n;
        self.t32[lo..hi].copy_from_slice(&self.r32[start * n + lo..start * n + hi]);
        commit32(
            &mut self.r32[var * n + lo..var * n + hi],
            &self.t32[lo..hi],
            &self.masks[d][lo..hi],
            full,
        );
        let (outer, inner) = self.masks.split_at_mut(d + 1);
        inner[0][lo..hi].copy_from_slice(&outer[d][lo..hi]);
    }

    /// `var += step` for the active threads `lo..hi` of a loop body at depth `d`.
    fn for_step(&mut self, var: usize, step: usize, lo: usize, hi: usize, d: usize, full: bool) {
        let n = self.n;
        let (v, s) = (var * n, step * n);
        for i in lo..hi {
            self.t32[i] = self.r32[v + i].wrapping_add(self.r32[s + i]);
        }
        commit32(
            &mut self.r32[v + lo..v + hi],
            &self.t32[lo..hi],
            &self.masks[d][lo..hi],
            full,
        );
    }

    /// `dst = op(args)` for every active thread of `sp`: the executor's evaluation of each
    /// kernel-IR op, one arm per op.
    fn op(
        &mut self,
        dst: usize,
        op: Op,
        a: &[u32; 3],
        wide: bool,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        let (lo, len) = (sp.lo, sp.hi - sp.lo);
        let mask = &self.masks[sp.d][lo..sp.hi];
        let full = sp.full;
        let r32 = &self.r32;
        let r64 = &self.r64;
        let s = |k: usize| &r32[a[k] as usize * n + lo..][..len];
        let s64 = |k: usize| &r64[a[k] as usize * n + lo..][..len];
        let t = &mut self.t32[..len];
        let t64 = &mut self.t64[..len];
        let kname = &self.k.name;
        let cta = self.cta;
        // The first active thread (index in the span) for which `bad(i)` holds, if any.
        let first_bad = |bad: &dyn Fn(usize) -> bool| (0..len).find(|&i| mask[i] != 0 && bad(i));
        let out = match op {
            Op::Mov if wide => {
                t64.copy_from_slice(s64(0));
                Out::R64
            }
            Op::Mov => {
                t.copy_from_slice(s(0));
                Out::R32
            }
            Op::Select if wide => {
                let (c, x, y) = (s(0), s64(1), s64(2));
                for i in 0..len {
                    t64[i] = if c[i] != 0 { x[i] } else { y[i] };
                }
                Out::R64
            }
            Op::Select => {
                map3(t, s(0), s(1), s(2), |c, x, y| if c != 0 { x } else { y });
                Out::R32
            }
            Op::FAdd => {
                map2(t, s(0), s(1), |x, y| canon(f(x) + f(y)));
                Out::R32
            }
            Op::FSub => {
                map2(t, s(0), s(1), |x, y| canon(f(x) - f(y)));
                Out::R32
            }
            Op::FMul => {
                map2(t, s(0), s(1), |x, y| canon(f(x) * f(y)));
                Out::R32
            }
            Op::FDiv => {
                map2(t, s(0), s(1), |x, y| canon(f(x) / f(y)));
                Out::R32
            }
            Op::FFma => {
                nm::ffma_slice(t, s(0), s(1), s(2));
                Out::R32
            }
            Op::FSqrt => {
                map1(t, s(0), |x| canon(f(x).sqrt()));
                Out::R32
            }
            Op::FNeg => {
                map1(t, s(0), |x| x ^ 0x8000_0000);
                Out::R32
            }
            Op::FAbs => {
                map1(t, s(0), |x| x & 0x7fff_ffff);
                Out::R32
            }
            Op::FMin => {
                map2(t, s(0), s(1), nm::fmin);
                Out::R32
            }
            Op::FMax => {
                map2(t, s(0), s(1), nm::fmax);
                Out::R32
            }
            Op::FRint => {
                map1(t, s(0), nm::frint);
                Out::R32
            }
            Op::FFloor => {
                map1(t, s(0), nm::ffloor);
                Out::R32
            }
            Op::FCeil => {
                map1(t, s(0), nm::fceil);
                Out::R32
            }
            Op::FTrunc => {
                map1(t, s(0), nm::ftrunc);
                Out::R32
            }
            Op::FCmp(c) => {
                let (x, y) = (s(0), s(1));
                match c {
                    FCmp::Eq => map2(t, x, y, |a, b| pred(f(a) == f(b))),
                    FCmp::Ne => map2(t, x, y, |a, b| pred(f(a) != f(b))),
                    FCmp::Lt => map2(t, x, y, |a, b| pred(f(a) < f(b))),
                    FCmp::Le => map2(t, x, y, |a, b| pred(f(a) <= f(b))),
                    FCmp::Gt => map2(t, x, y, |a, b| pred(f(a) > f(b))),
                    FCmp::Ge => map2(t, x, y, |a, b| pred(f(a) >= f(b))),
                    FCmp::Nan => map2(t, x, y, |a, b| pred(f(a).is_nan() || f(b).is_nan())),
                }
                Out::R32
            }
            Op::IAdd => {
                map2(t, s(0), s(1), u32::wrapping_add);
                Out::R32
            }
            Op::ISub => {
                map2(t, s(0), s(1), u32::wrapping_sub);
                Out::R32
            }
            Op::IMulLo => {
                map2(t, s(0), s(1), u32::wrapping_mul);
                Out::R32
            }
            Op::UMulHi => {
                map2(t, s(0), s(1), |x, y| ((x as u64 * y as u64) >> 32) as u32);
                Out::R32
            }
            Op::UDiv | Op::URem => {
                let (x, y) = (s(0), s(1));
                if let Some(i) = first_bad(&|i| y[i] == 0) {
                    return Err(ExecError::DivisionByZero {
                        kernel: kname.clone(),
                        cta,
                        thread: (lo + i) as u32,
                    });
                }
                if op == Op::UDiv {
                    map2(t, x, y, |a, b| a.checked_div(b).unwrap_or(0));
                } else {
                    map2(t, x, y, |a, b| a.checked_rem(b).unwrap_or(0));
                }
                Out::R32
            }
            Op::Shl | Op::ShrU | Op::ShrS => {
                let (x, y) = (s(0), s(1));
                if let Some(i) = first_bad(&|i| y[i] >= 32) {
                    return Err(ExecError::ShiftOutOfRange {
                        kernel: kname.clone(),
                        cta,
                        thread: (lo + i) as u32,
                        shift: y[i],
                    });
                }
                match op {
                    Op::Shl => map2(t, x, y, |a, b| a << (b & 31)),
                    Op::ShrU => map2(t, x, y, |a, b| a >> (b & 31)),
                    _ => map2(t, x, y, |a, b| ((a as i32) >> (b & 31)) as u32),
                }
                Out::R32
            }
            Op::And => {
                map2(t, s(0), s(1), |x, y| x & y);
                Out::R32
            }
            Op::Or => {
                map2(t, s(0), s(1), |x, y| x | y);
                Out::R32
            }
            Op::Xor => {
                map2(t, s(0), s(1), |x, y| x ^ y);
                Out::R32
            }
            Op::Not => {
                map1(t, s(0), |x| !x);
                Out::R32
            }
            Op::ICmp(c) => {
                let (x, y) = (s(0), s(1));
                let si = |v: u32| v as i32;
                match c {
                    ICmp::Eq => map2(t, x, y, |a, b| pred(a == b)),
                    ICmp::Ne => map2(t, x, y, |a, b| pred(a != b)),
                    ICmp::LtU => map2(t, x, y, |a, b| pred(a < b)),
                    ICmp::LeU => map2(t, x, y, |a, b| pred(a <= b)),
                    ICmp::GtU => map2(t, x, y, |a, b| pred(a > b)),
                    ICmp::GeU => map2(t, x, y, |a, b| pred(a >= b)),
                    ICmp::LtS => map2(t, x, y, |a, b| pred(si(a) < si(b))),
                    ICmp::LeS => map2(t, x, y, |a, b| pred(si(a) <= si(b))),
                    ICmp::GtS => map2(t, x, y, |a, b| pred(si(a) > si(b))),
                    ICmp::GeS => map2(t, x, y, |a, b| pred(si(a) >= si(b))),
                }
                Out::R32
            }
            Op::PAnd => {
                map2(t, s(0), s(1), |x, y| pred(x != 0 && y != 0));
                Out::R32
            }
            Op::POr => {
                map2(t, s(0), s(1), |x, y| pred(x != 0 || y != 0));
                Out::R32
            }
            Op::PNot => {
                map1(t, s(0), |x| pred(x == 0));
                Out::R32
            }
            Op::BitsToF32 | Op::F32ToBits => {
                t.copy_from_slice(s(0));
                Out::R32
            }
            Op::CvtRniS32F32 => {
                map1(t, s(0), nm::cvt_rni_s32);
                Out::R32
            }
            Op::CvtRziS32F32 => {
                map1(t, s(0), nm::cvt_rzi_s32);
                Out::R32
            }
            Op::CvtF32S32 => {
                map1(t, s(0), |x| (x as i32 as f32).to_bits());
                Out::R32
            }
            Op::CvtF32U32 => {
                map1(t, s(0), |x| (x as f32).to_bits());
                Out::R32
            }
            Op::PackBf16x2 => {
                map2(t, s(0), s(1), |hi, lo| {
                    ((nm::f32_to_bf16_rn(hi) as u32) << 16) | nm::f32_to_bf16_rn(lo) as u32
                });
                Out::R32
            }
            Op::PackF16x2 => {
                map2(t, s(0), s(1), |hi, lo| {
                    ((nm::f32_to_f16_rn(hi) as u32) << 16) | nm::f32_to_f16_rn(lo) as u32
                });
                Out::R32
            }
            Op::F16ToF32 => {
                map1(t, s(0), |x| nm::f16_to_f32(x & 0xffff));
                Out::R32
            }
            Op::CvtU64U32 => {
                for (o, &x) in t64.iter_mut().zip(s(0)) {
                    *o = x as u64;
                }
                Out::R64
            }
            Op::AddU64 => {
                for ((o, &x), &y) in t64.iter_mut().zip(s64(0)).zip(s64(1)) {
                    *o = x.wrapping_add(y);
                }
                Out::R64
            }
            Op::MulWideU32 => {
                for ((o, &x), &y) in t64.iter_mut().zip(s(0)).zip(s(1)) {
                    *o = x as u64 * y as u64;
                }
                Out::R64
            }
            Op::Special(sp) => {
                let [bx, _, _] = self.k.block;
                match sp {
                    Special::TidX => (0..len).for_each(|i| t[i] = ((lo + i) as u32) % bx),
                    Special::NtidX => t.fill(bx),
                    Special::CtaidX => t.fill(self.ctaid[0]),
                    Special::CtaidY => t.fill(self.ctaid[1]),
                    Special::NctaidX => t.fill(self.k.grid[0]),
                    Special::LaneId => (0..len).for_each(|i| t[i] = ((lo + i) % 32) as u32),
                }
                Out::R32
            }
            Op::Param(p) => {
                let v = self.params.values[p as usize];
                if wide {
                    t64.fill(v);
                    Out::R64
                } else {
                    t.fill(v as u32);
                    Out::R32
                }
            }
            Op::SharedAddr(b) => {
                t.fill(self.k.shared[b.as_u32() as usize].0);
                Out::R32
            }
            Op::ShflBfly => {
                let (x, y) = (s(0), s(1));
                // Spans start at a warp's first lane: `warp` is warp-aligned in the CTA.
                for warp in (0..len).step_by(32) {
                    if (warp..(warp + 32).min(len)).all(|j| mask[j] == 0) {
                        continue;
                    }
                    // `shfl.sync` with a full member mask: every lane of the warp must be
                    // present and executing it.
                    if let Some(j) = (warp..warp + 32).find(|&j| j >= len || mask[j] == 0) {
                        return Err(ExecError::ShuffleDivergent {
                            kernel: kname.clone(),
                            cta,
                            warp: ((lo + warp) / 32) as u32,
                            inactive: (lo + j) as u32,
                        });
                    }
                    for i in warp..warp + 32 {
                        if y[i] >= 32 {
                            return Err(ExecError::ShuffleOutOfRange {
                                kernel: kname.clone(),
                                cta,
                                thread: (lo + i) as u32,
                                lane_mask: y[i],
                            });
                        }
                        t[i] = x[warp + ((i - warp) ^ y[i] as usize)];
                    }
                }
                Out::R32
            }
            Op::CvtRnaTf32F32 => {
                map1(t, s(0), nm::cvt_rna_tf32);
                Out::R32
            }
            Op::Math(func) => {
                return Err(ExecError::UnexpandedMath {
                    kernel: kname.clone(),
                    func,
                })
            }
        };
        let mask = &self.masks[sp.d][lo..sp.hi];
        match out {
            Out::R32 => commit32(
                &mut self.r32[dst * n + lo..][..len],
                &self.t32[..len],
                mask,
                full,
            ),
            Out::R64 => commit64(
                &mut self.r64[dst * n + lo..][..len],
                &self.t64[..len],
                mask,
                full,
            ),
        }
        Ok(())
    }
}
