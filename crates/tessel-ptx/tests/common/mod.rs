//! The checks every printed kernel goes through in `tessel-ptx`'s tests (legalize, print,
//! scan for approximate or flushing instructions, ptxas), and a renumbering that shows
//! names do not depend on arena indices. The kernels themselves are `tessel_testkit`'s.

#![allow(dead_code)]

use std::collections::HashMap;

use cranelift_entity::PrimaryMap;
use tessel_ir::kernel::{Kernel, Op, Operand, RegType, Stmt, WgmmaA};
use tessel_ir::{Reg, SharedBuf};
use tessel_ptx::ptxas::{Ptxas, Report, SKIP_ENV};
use tessel_ptx::PtxOptions;

/// Legalizes a copy of `k` (the writer's precondition).
pub fn legalized(k: &Kernel) -> Kernel {
    let mut k = k.clone();
    tessel_passes::legalize::run(&mut k).expect("test kernels have no math placeholders");
    k
}

/// Substrings that must never appear in emitted PTX (design §5, §7).
pub const FORBIDDEN: &[&str] = &[
    ".approx", ".ftz", "sin.", "cos.", "ex2.", "lg2.", "rsqrt.", "rcp.", "tanh.",
];

/// Fails if `ptx` contains an approximate or flushing instruction, or an f32 add/sub/mul
/// without `.rn`.
pub fn assert_exact(ptx: &str) {
    for bad in FORBIDDEN {
        assert!(!ptx.contains(bad), "PTX contains {bad:?}:\n{ptx}");
    }
    for line in ptx.lines().map(str::trim) {
        for op in ["add.", "sub.", "mul.", "fma.", "div."] {
            if line.starts_with(op) && line.contains(".f32") {
                assert!(line.contains(".rn."), "unrounded f32 op: {line}");
            }
        }
    }
}

/// Legalizes and prints `k`, checks the text is exact, and assembles it with ptxas for sm_90
/// (unless `TESSEL_SKIP_PTXAS=1` and ptxas is absent). Returns the PTX and ptxas's report.
pub fn emit(k: &Kernel) -> (String, Option<Report>) {
    let ptx = tessel_ptx::write_kernel(&legalized(k), &PtxOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_exact(&ptx);
    let report = assemble(&ptx);
    (ptx, report)
}

/// Runs ptxas -arch=sm_90 on `ptx`; panics with the PTX and ptxas's message if it fails.
pub fn assemble(ptx: &str) -> Option<Report> {
    assemble_for(ptx, "sm_90")
}

/// As [`assemble`], for `arch`.
pub fn assemble_for(ptx: &str, arch: &str) -> Option<Report> {
    let ptxas = match Ptxas::locate_unless_skipped() {
        Ok(Some(p)) => p,
        Ok(None) => {
            eprintln!("skipping ptxas: not found and {SKIP_ENV}=1");
            return None;
        }
        Err(e) => panic!("{e}\n(set {SKIP_ENV}=1 to skip ptxas on purpose)"),
    };
    match ptxas.assemble(ptx, arch) {
        Ok(report) => {
            assert!(report.warnings.is_empty(), "{:?}\n{ptx}", report.warnings);
            for f in report.kernels() {
                assert!(!f.spills(), "{f:?}");
                eprintln!(
                    "ptxas {arch}: {} uses {} registers, {} bytes smem, {} barriers",
                    f.name, f.registers, f.shared_bytes, f.barriers
                );
            }
            Some(report)
        }
        Err(e) => {
            let numbered: String = ptx
                .lines()
                .enumerate()
                .map(|(i, l)| format!("{:4} {l}\n", i + 1))
                .collect();
            panic!("ptxas rejected the PTX: {e}\n{numbered}")
        }
    }
}

/// A copy of `k` with every register and shared buffer at a different arena index: an
/// unused register first, then the kernel's in reverse order.
pub fn renumbered(k: &Kernel) -> Kernel {
    let mut regs = PrimaryMap::new();
    regs.push(RegType::F32);
    let reg_map: HashMap<Reg, Reg> = k
        .regs
        .iter()
        .rev()
        .map(|(old, &ty)| (old, regs.push(ty)))
        .collect();
    let mut shared = PrimaryMap::new();
    let shared_map: HashMap<SharedBuf, SharedBuf> = k
        .shared
        .iter()
        .rev()
        .map(|(old, &decl)| (old, shared.push(decl)))
        .collect();
    let remap = Remap {
        regs: reg_map,
        shared: shared_map,
    };
    let mut out = k.clone();
    out.regs = regs;
    out.shared = shared;
    remap.block(&mut out.body);
    out
}

/// Old register and shared-buffer ids to new ones, applied in place.
struct Remap {
    regs: HashMap<Reg, Reg>,
    shared: HashMap<SharedBuf, SharedBuf>,
}

impl Remap {
    fn reg(&self, r: &mut Reg) {
        *r = self.regs[r];
    }

    fn regs<'a>(&self, rs: impl IntoIterator<Item = &'a mut Reg>) {
        rs.into_iter().for_each(|r| self.reg(r));
    }

    fn operand(&self, o: &mut Operand) {
        if let Operand::Reg(r) = o {
            self.reg(r);
        }
    }

    fn block(&self, stmts: &mut [Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&self, s: &mut Stmt) {
        match s {
            Stmt::Op { dst, op, args } => {
                self.reg(dst);
                if let Op::SharedAddr(b) = op {
                    *b = self.shared[b];
                }
                args.iter_mut().for_each(|a| self.operand(a));
            }
            Stmt::Load { dsts, addr, .. } | Stmt::Ldmatrix { dsts, addr, .. } => {
                self.regs(dsts);
                self.reg(addr);
            }
            Stmt::Store { addr, values, .. } => {
                self.reg(addr);
                values.iter_mut().for_each(|v| self.operand(v));
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                self.reg(var);
                [start, end, step].into_iter().for_each(|o| self.operand(o));
                self.block(body);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.reg(cond);
                self.block(then_body);
                self.block(else_body);
            }
            Stmt::Mma { d, a, b, c, .. } => {
                self.regs(d.iter_mut().chain(a).chain(b).chain(c));
            }
            Stmt::Wgmma { d, a, b_desc, .. } => {
                match a {
                    WgmmaA::Desc(r) => self.reg(r),
                    WgmmaA::Regs(rs) => self.regs(rs),
                }
                self.regs(d.iter_mut().chain([b_desc]));
            }
            Stmt::CpAsync {
                dst,
                src,
                src_bytes,
                ..
            } => {
                self.reg(dst);
                self.reg(src);
                src_bytes.iter_mut().for_each(|o| self.operand(o));
            }
            Stmt::MbarInit { addr, count: x }
            | Stmt::MbarArriveExpectTx { addr, bytes: x }
            | Stmt::MbarWait { addr, parity: x }
            | Stmt::PrefetchL2 { addr, bytes: x } => {
                self.reg(addr);
                self.operand(x);
            }
            Stmt::MbarArrive { addr } => self.reg(addr),
            Stmt::TmaLoad {
                dst,
                tmap,
                coords,
                mbar,
            } => {
                self.regs([dst, tmap, mbar]);
                coords.iter_mut().for_each(|o| self.operand(o));
            }
            Stmt::FenceMbarrierInit
            | Stmt::SetMaxNReg { .. }
            | Stmt::GridDepWait
            | Stmt::GridDepLaunch => {}
            Stmt::Barrier
            | Stmt::BarSync { .. }
            | Stmt::BarArrive { .. }
            | Stmt::CpAsyncCommit
            | Stmt::CpAsyncWait(_)
            | Stmt::CpAsyncWaitAll
            | Stmt::WgmmaFence
            | Stmt::WgmmaCommit
            | Stmt::WgmmaWait(_)
            | Stmt::FenceProxyAsync => {}
        }
    }
}
