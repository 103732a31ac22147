//! The checks every printed kernel goes through in `tessel-ptx`'s tests (legalize, print,
//! scan for approximate or flushing instructions, ptxas), and a renumbering that shows
//! names do not depend on arena indices. The kernels themselves are `tessel_testkit`'s.

#![allow(dead_code)]

use std::collections::HashMap;

use cranelift_entity::PrimaryMap;
use tessel_ir::kernel::{Kernel, Op, Operand, RegType, Stmt};
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
    out.body = remap.block(&k.body);
    out
}

struct Remap {
    regs: HashMap<Reg, Reg>,
    shared: HashMap<SharedBuf, SharedBuf>,
}

impl Remap {
    fn reg(&self, r: Reg) -> Reg {
        self.regs[&r]
    }

    fn operand(&self, o: Operand) -> Operand {
        match o {
            Operand::Reg(r) => Operand::Reg(self.reg(r)),
            o => o,
        }
    }

    fn block(&self, stmts: &[Stmt]) -> Vec<Stmt> {
        stmts.iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&self, s: &Stmt) -> Stmt {
        match s {
            Stmt::Op { dst, op, args } => Stmt::Op {
                dst: self.reg(*dst),
                op: match op {
                    Op::SharedAddr(b) => Op::SharedAddr(self.shared[b]),
                    op => *op,
                },
                args: args.iter().map(|&a| self.operand(a)).collect(),
            },
            Stmt::Load {
                dsts,
                space,
                width,
                addr,
                offset,
            } => Stmt::Load {
                dsts: dsts.iter().map(|&d| self.reg(d)).collect(),
                space: *space,
                width: *width,
                addr: self.reg(*addr),
                offset: *offset,
            },
            Stmt::Store {
                space,
                width,
                addr,
                offset,
                values,
            } => Stmt::Store {
                space: *space,
                width: *width,
                addr: self.reg(*addr),
                offset: *offset,
                values: values.iter().map(|&v| self.operand(v)).collect(),
            },
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => Stmt::For {
                var: self.reg(*var),
                start: self.operand(*start),
                end: self.operand(*end),
                step: self.operand(*step),
                body: self.block(body),
            },
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond: self.reg(*cond),
                then_body: self.block(then_body),
                else_body: self.block(else_body),
            },
            Stmt::Barrier => Stmt::Barrier,
            Stmt::Mma { shape, d, a, b, c } => Stmt::Mma {
                shape: *shape,
                d: d.map(|r| self.reg(r)),
                a: a.iter().map(|&r| self.reg(r)).collect(),
                b: b.iter().map(|&r| self.reg(r)).collect(),
                c: c.map(|r| self.reg(r)),
            },
            Stmt::Ldmatrix {
                dsts,
                trans,
                addr,
                offset,
            } => Stmt::Ldmatrix {
                dsts: dsts.iter().map(|&r| self.reg(r)).collect(),
                trans: *trans,
                addr: self.reg(*addr),
                offset: *offset,
            },
            Stmt::CpAsync {
                cache,
                bytes,
                dst,
                dst_offset,
                src,
                src_offset,
                src_bytes,
            } => Stmt::CpAsync {
                cache: *cache,
                bytes: *bytes,
                dst: self.reg(*dst),
                dst_offset: *dst_offset,
                src: self.reg(*src),
                src_offset: *src_offset,
                src_bytes: src_bytes.map(|o| self.operand(o)),
            },
            s @ (Stmt::CpAsyncCommit | Stmt::CpAsyncWait(_) | Stmt::CpAsyncWaitAll) => s.clone(),
        }
    }
}
