//! Kernel IR checks (the `kernel.*` rules). Ops are checked against their one signature
//! table, [`Op::signature`].

use super::{Errors, VerifyError};
use crate::entities::Reg;
use crate::kernel::{
    is_ptx_identifier, ArgRule, CpAsyncCache, Kernel, Op, Operand, RegType, SigType, Space, Stmt,
    WgmmaA, WgmmaInput, WgmmaMajor, WgmmaShape, Width, MBAR_MAX_COUNT,
};
use crate::text::write_op_stmt;
use std::collections::HashSet;

/// Checks one kernel against the invariants in the module documentation. With
/// `after_expand_math`, a `math.*` op is an error.
pub fn verify_kernel(k: &Kernel, after_expand_math: bool) -> Result<(), Vec<VerifyError>> {
    let mut e = Errors::default();
    kernel_checks(k, after_expand_math, &format!("kernel {}", k.name), &mut e);
    e.finish()
}

pub(super) fn kernel_checks(k: &Kernel, after_expand_math: bool, kloc: &str, e: &mut Errors) {
    if !is_ptx_identifier(&k.name) {
        e.push(
            "kernel.name",
            kloc,
            format!("{:?} is not a PTX identifier", k.name),
        );
    }
    let [bx, by, bz] = k.block;
    let threads = bx as u64 * by as u64 * bz as u64;
    if k.block.contains(&0) || k.grid.contains(&0) {
        e.push(
            "kernel.geometry",
            kloc,
            format!("block {:?} or grid {:?} has a zero dim", k.block, k.grid),
        );
    }
    if bx > 1024 || by > 1024 || bz > 64 || threads > 1024 {
        e.push(
            "kernel.geometry",
            kloc,
            format!(
                "block {:?} exceeds the CTA limits (x, y ≤ 1024, z ≤ 64, 1024 threads)",
                k.block
            ),
        );
    }
    if k.grid[0] > i32::MAX as u32 || k.grid[1] > 65535 || k.grid[2] > 65535 {
        e.push(
            "kernel.geometry",
            kloc,
            format!(
                "grid {:?} exceeds the limits (x < 2^31, y, z ≤ 65535)",
                k.grid
            ),
        );
    }
    if threads % 32 != 0 && uses_whole_warps(&k.body) {
        e.push(
            "kernel.geometry",
            kloc,
            format!(
                "{threads} threads per CTA is not a multiple of 32, but the body has a warp-wide instruction (shfl.bfly, mma, ldmatrix) or a barrier (barrier, bar.sync, bar.arrive)"
            ),
        );
    }
    const MAX_SHARED_BYTES: u64 = 227 * 1024;
    let mut total = 0u64;
    for (s, d) in k.shared.iter() {
        if !d.align.is_power_of_two() {
            e.push(
                "kernel.shared",
                format!("{kloc}, {s}"),
                format!("alignment {} is not a power of two", d.align),
            );
        }
        if d.bytes == 0 {
            e.push("kernel.shared", format!("{kloc}, {s}"), "size 0 bytes");
        }
        total += d.bytes as u64;
    }
    // Beyond the static 48 KiB, one buffer that the launch allocates dynamically, up to
    // the H200's opt-in limit of 227 KiB per CTA (Hopper tuning guide, "Shared Memory").
    if total > crate::kernel::STATIC_SHARED_BYTES as u64 && k.shared.len() != 1 {
        e.push(
            "kernel.shared",
            kloc,
            format!(
                "{total} bytes of shared memory in {} buffers: above the 48 KiB static limit, a kernel has one (dynamic) buffer",
                k.shared.len()
            ),
        );
    }
    if total > MAX_SHARED_BYTES {
        e.push(
            "kernel.shared",
            kloc,
            format!("{total} bytes of shared memory, above the 227 KiB a CTA may have"),
        );
    }
    let mut cx = Cx {
        k,
        after_expand_math,
        kloc,
        e,
    };
    cx.block(&k.body, "body");
    if k.waits_on_prior_grid() {
        let before = crate::kernel::griddep::before_wait(k);
        if !before.every_path_waits {
            e.push(
                "kernel.griddep",
                format!("{kloc}, body"),
                "a path through the kernel never runs `griddepcontrol.wait` (a loop's body may run zero times, a branch counts only if both arms wait): launched programmatically, the kernel could complete before the one ahead, and a kernel after it wait on it alone",
            );
        }
        for path in before.unordered {
            e.push(
                "kernel.griddep",
                format!("{kloc}, {path}"),
                "a global memory access that a path from the start reaches before `griddepcontrol.wait` (only loads through a read-only parameter may come first): the kernel ahead of it may still be running",
            );
        }
    }
}

fn uses_whole_warps(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Barrier
        | Stmt::BarSync { .. }
        | Stmt::BarArrive { .. }
        | Stmt::Mma { .. }
        | Stmt::Ldmatrix { .. }
        | Stmt::Wgmma { .. }
        | Stmt::WgmmaFence
        | Stmt::WgmmaCommit
        | Stmt::WgmmaWait(_) => true,
        Stmt::Op { op, .. } => *op == Op::ShflBfly,
        Stmt::For { body, .. } => uses_whole_warps(body),
        Stmt::If {
            then_body,
            else_body,
            ..
        } => uses_whole_warps(then_body) || uses_whole_warps(else_body),
        Stmt::Load { .. }
        | Stmt::Store { .. }
        | Stmt::CpAsync { .. }
        | Stmt::CpAsyncCommit
        | Stmt::CpAsyncWait(_)
        | Stmt::CpAsyncWaitAll
        | Stmt::FenceProxyAsync => false,
        Stmt::SetMaxNReg { .. } => true,
        Stmt::GridDepWait | Stmt::GridDepLaunch | Stmt::PrefetchL2 { .. } => false,
        Stmt::MbarInit { .. }
        | Stmt::MbarArriveExpectTx { .. }
        | Stmt::MbarArrive { .. }
        | Stmt::MbarWait { .. }
        | Stmt::FenceMbarrierInit
        | Stmt::TmaLoad { .. } => false,
    })
}

/// Registers a statement list assigns, nested blocks included.
fn assigned(body: &[Stmt], out: &mut HashSet<Reg>) {
    for s in body {
        match s {
            Stmt::Op { dst, .. } => {
                out.insert(*dst);
            }
            Stmt::Load { dsts, .. } | Stmt::Ldmatrix { dsts, .. } => {
                out.extend(dsts.iter().copied())
            }
            Stmt::Mma { d, .. } => out.extend(d.iter().copied()),
            Stmt::Wgmma { d, .. } => out.extend(d.iter().copied()),
            Stmt::For { var, body, .. } => {
                out.insert(*var);
                assigned(body, out);
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                assigned(then_body, out);
                assigned(else_body, out);
            }
            Stmt::Store { .. }
            | Stmt::Barrier
            | Stmt::BarSync { .. }
            | Stmt::BarArrive { .. }
            | Stmt::CpAsync { .. }
            | Stmt::CpAsyncCommit
            | Stmt::CpAsyncWait(_)
            | Stmt::CpAsyncWaitAll
            | Stmt::WgmmaFence
            | Stmt::WgmmaCommit
            | Stmt::WgmmaWait(_)
            | Stmt::FenceProxyAsync => {}
            Stmt::MbarInit { .. }
            | Stmt::MbarArriveExpectTx { .. }
            | Stmt::MbarArrive { .. }
            | Stmt::MbarWait { .. }
            | Stmt::FenceMbarrierInit
            | Stmt::TmaLoad { .. }
            | Stmt::SetMaxNReg { .. } => {}
            Stmt::GridDepWait | Stmt::GridDepLaunch | Stmt::PrefetchL2 { .. } => {}
        }
    }
}

struct Cx<'a, 'e> {
    k: &'a Kernel,
    after_expand_math: bool,
    kloc: &'a str,
    e: &'e mut Errors,
}

impl Cx<'_, '_> {
    fn err(&mut self, rule: &'static str, path: &str, msg: String) {
        self.e.push(rule, format!("{}, {path}", self.kloc), msg);
    }

    /// The register's type, or an error when it is not declared.
    fn reg(&mut self, r: Reg, path: &str, what: &str) -> Option<RegType> {
        let t = self.k.regs.get(r).copied();
        if t.is_none() {
            self.err("kernel.reg", path, format!("{what} {r} is not declared"));
        }
        t
    }

    /// The type of an operand (the kind of an immediate); `None` if undeclared.
    fn operand(&mut self, o: Operand, path: &str) -> Option<RegType> {
        match o {
            Operand::Reg(r) => self.reg(r, path, "register"),
            Operand::U32(_) => Some(RegType::U32),
            Operand::U64(_) => Some(RegType::U64),
            Operand::F32(_) => Some(RegType::F32),
        }
    }

    /// Rule `kernel.wgmma`: a shape PTX has, its accumulator registers (`F32`, as many as
    /// the shape has per thread), `U64` descriptors, A in registers as four `U32` and
    /// only for 16-bit inputs, an MN-major B only for 16-bit inputs, and a CTA of whole
    /// warpgroups.
    fn wgmma(
        &mut self,
        shape: WgmmaShape,
        d: &[Reg],
        (a, b_desc, b_major): (&WgmmaA, Reg, WgmmaMajor),
        path: &str,
    ) {
        let sixteen = shape.input != WgmmaInput::Tf32;
        let mut descs = vec![("B", b_desc)];
        match a {
            WgmmaA::Desc(r) => descs.insert(0, ("A", *r)),
            WgmmaA::Regs(rs) => {
                if !sixteen || rs.len() != WgmmaA::REGS {
                    self.err(
                        "kernel.wgmma",
                        path,
                        format!(
                            "wgmma.{}: A in registers takes {} u32 registers and a 16-bit input, not {}",
                            shape.name(),
                            WgmmaA::REGS,
                            rs.len()
                        ),
                    );
                }
                for r in rs {
                    if let Some(t) = self.reg(*r, path, "A register") {
                        if t != RegType::U32 {
                            self.err(
                                "kernel.wgmma",
                                path,
                                format!("A register {r} is {}, not u32", t.name()),
                            );
                        }
                    }
                }
            }
        }
        if b_major == WgmmaMajor::Mn && !sixteen {
            self.err(
                "kernel.wgmma",
                path,
                format!("wgmma.{}: an MN-major B needs a 16-bit input", shape.name()),
            );
        }
        let name = shape.name();
        if !shape.is_valid() {
            self.err(
                "kernel.wgmma",
                path,
                format!("wgmma.{name}: n must be a multiple of 8 from 8 to 256"),
            );
        } else if d.len() != shape.d_regs() {
            self.err(
                "kernel.wgmma",
                path,
                format!(
                    "wgmma.{name} accumulates into {} registers, not {}",
                    shape.d_regs(),
                    d.len()
                ),
            );
        }
        for r in d {
            if let Some(t) = self.reg(*r, path, "accumulator") {
                if t != RegType::F32 {
                    self.err(
                        "kernel.wgmma",
                        path,
                        format!("accumulator {r} is {}, not f32", t.name()),
                    );
                }
            }
        }
        for (what, r) in descs {
            if let Some(t) = self.reg(r, path, "descriptor") {
                if t != RegType::U64 {
                    self.err(
                        "kernel.wgmma",
                        path,
                        format!("the {what} descriptor {r} is {}, not u64", t.name()),
                    );
                }
            }
        }
        let threads = self.k.threads_per_cta();
        if threads % 128 != 0 {
            self.err(
                "kernel.wgmma",
                path,
                format!("a CTA of {threads} threads is not whole warpgroups of 128"),
            );
        }
    }

    fn block(&mut self, body: &[Stmt], path: &str) {
        for (i, s) in body.iter().enumerate() {
            self.stmt(s, &format!("{path}[{i}]"));
        }
    }

    fn stmt(&mut self, s: &Stmt, path: &str) {
        match s {
            Stmt::Op { dst, op, args } => self.op(*dst, *op, args, path),
            Stmt::Load {
                dsts,
                space,
                width,
                addr,
                ..
            } => {
                if dsts.len() != width.regs() {
                    self.err(
                        "kernel.memory",
                        path,
                        format!(
                            "a {width:?} load writes {} registers, not {}",
                            width.regs(),
                            dsts.len()
                        ),
                    );
                }
                for d in dsts {
                    if let Some(t) = self.reg(*d, path, "destination") {
                        self.check_mem_value(t, *width, path, &d.to_string());
                    }
                }
                self.check_addr(*addr, *space, path);
            }
            Stmt::Store {
                space,
                width,
                addr,
                values,
                ..
            } => {
                if values.len() != width.regs() {
                    self.err(
                        "kernel.memory",
                        path,
                        format!(
                            "a {width:?} store moves {} values, not {}",
                            width.regs(),
                            values.len()
                        ),
                    );
                }
                for v in values {
                    if let Some(t) = self.operand(*v, path) {
                        let what = match v {
                            Operand::Reg(r) => r.to_string(),
                            _ => "an immediate".to_string(),
                        };
                        self.check_mem_value(t, *width, path, &what);
                    }
                }
                self.check_addr(*addr, *space, path);
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                if let Some(t) = self.reg(*var, path, "loop variable") {
                    if t != RegType::U32 {
                        self.err(
                            "kernel.for",
                            path,
                            format!("loop variable {var} is {}, not u32", t.name()),
                        );
                    }
                }
                for (what, o) in [("start", start), ("end", end), ("step", step)] {
                    if let Some(t) = self.operand(*o, path) {
                        if t != RegType::U32 {
                            self.err(
                                "kernel.for",
                                path,
                                format!("loop {what} is {}, not u32", t.name()),
                            );
                        }
                    }
                }
                if *step == Operand::U32(0) {
                    self.err("kernel.for", path, "the loop steps by 0".to_string());
                }
                let mut a = HashSet::new();
                assigned(body, &mut a);
                if a.contains(var) {
                    self.err(
                        "kernel.for",
                        path,
                        format!("the body assigns the loop variable {var}"),
                    );
                }
                self.block(body, &format!("{path}.for"));
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                if let Some(t) = self.reg(*cond, path, "condition") {
                    if t != RegType::Pred {
                        self.err(
                            "kernel.if",
                            path,
                            format!("condition {cond} is {}, not pred", t.name()),
                        );
                    }
                }
                self.block(then_body, &format!("{path}.then"));
                self.block(else_body, &format!("{path}.else"));
            }
            Stmt::Barrier
            | Stmt::CpAsyncCommit
            | Stmt::CpAsyncWait(_)
            | Stmt::CpAsyncWaitAll
            | Stmt::WgmmaFence
            | Stmt::WgmmaCommit
            | Stmt::WgmmaWait(_)
            | Stmt::FenceProxyAsync => {}
            Stmt::Wgmma {
                shape,
                d,
                a,
                b_desc,
                b_major,
            } => self.wgmma(*shape, d, (a, *b_desc, *b_major), path),
            Stmt::MbarInit { .. }
            | Stmt::MbarArriveExpectTx { .. }
            | Stmt::MbarArrive { .. }
            | Stmt::MbarWait { .. }
            | Stmt::FenceMbarrierInit
            | Stmt::TmaLoad { .. }
            | Stmt::SetMaxNReg { .. } => self.async_stmt(s, path),
            Stmt::GridDepWait | Stmt::GridDepLaunch => {}
            Stmt::PrefetchL2 { addr, bytes } => {
                const GD: &str = "kernel.griddep";
                self.want_reg(GD, *addr, RegType::U64, path, "the prefetch address");
                self.want_u32(GD, *bytes, 16..=u32::MAX, path, "the prefetch size");
                if let Operand::U32(n) = bytes {
                    if n % 16 != 0 {
                        self.err(
                            GD,
                            path,
                            format!("a prefetch of {n} bytes: the size is a multiple of 16"),
                        );
                    }
                }
            }
            Stmt::BarSync { id, threads } | Stmt::BarArrive { id, threads } => {
                let cta = self.k.threads_per_cta();
                if !(1..=15).contains(id) {
                    self.err(
                        "kernel.bar",
                        path,
                        format!("named barrier {id} is not in 1..=15 (0 is `barrier`'s)"),
                    );
                }
                if *threads == 0 || threads % 32 != 0 || *threads as u64 > cta as u64 {
                    self.err(
                        "kernel.bar",
                        path,
                        format!(
                            "barrier {id} counts {threads} threads: a nonzero multiple of 32, at most the CTA's {cta}, is needed"
                        ),
                    );
                }
            }
            Stmt::Mma { shape, d, a, b, c } => {
                let groups: [(&str, &[Reg], usize, RegType); 4] = [
                    ("destination", d, 4, RegType::F32),
                    ("A", a, shape.a_regs(), RegType::U32),
                    ("B", b, shape.b_regs(), RegType::U32),
                    ("accumulator", c, 4, RegType::F32),
                ];
                for (what, regs, want_n, want_t) in groups {
                    if regs.len() != want_n {
                        self.err(
                            "kernel.mma",
                            path,
                            format!(
                                "mma.{} takes {want_n} {what} registers, not {}",
                                shape.name(),
                                regs.len()
                            ),
                        );
                    }
                    for r in regs {
                        if let Some(t) = self.reg(*r, path, what) {
                            if t != want_t {
                                self.err(
                                    "kernel.mma",
                                    path,
                                    format!(
                                        "{what} register {r} is {}, not {}",
                                        t.name(),
                                        want_t.name()
                                    ),
                                );
                            }
                        }
                    }
                }
            }
            Stmt::Ldmatrix { dsts, addr, .. } => {
                if !matches!(dsts.len(), 1 | 2 | 4) {
                    self.err(
                        "kernel.ldmatrix",
                        path,
                        format!("ldmatrix loads 1, 2 or 4 matrices, not {}", dsts.len()),
                    );
                }
                for r in dsts {
                    if let Some(t) = self.reg(*r, path, "destination") {
                        if t != RegType::U32 {
                            self.err(
                                "kernel.ldmatrix",
                                path,
                                format!("destination {r} is {}, not u32", t.name()),
                            );
                        }
                    }
                }
                if let Some(t) = self.reg(*addr, path, "address") {
                    if t != RegType::U32 {
                        self.err(
                            "kernel.ldmatrix",
                            path,
                            format!("the shared address {addr} is {}, not u32", t.name()),
                        );
                    }
                }
            }
            Stmt::CpAsync {
                cache,
                bytes,
                dst,
                src,
                src_bytes,
                ..
            } => {
                if !cache.allows(*bytes) {
                    self.err(
                        "kernel.cp_async",
                        path,
                        format!(
                            "cp.async.{} copies {}, not {bytes} bytes",
                            cache.name(),
                            match cache {
                                CpAsyncCache::Ca => "4, 8 or 16",
                                CpAsyncCache::Cg => "16",
                            }
                        ),
                    );
                }
                for (what, r, want) in [
                    ("destination (shared)", dst, RegType::U32),
                    ("source (global)", src, RegType::U64),
                ] {
                    if let Some(t) = self.reg(*r, path, "address") {
                        if t != want {
                            self.err(
                                "kernel.cp_async",
                                path,
                                format!(
                                    "the {what} address {r} is {}, not {}",
                                    t.name(),
                                    want.name()
                                ),
                            );
                        }
                    }
                }
                if let Some(o) = src_bytes {
                    if let Some(t) = self.operand(*o, path) {
                        if t != RegType::U32 {
                            self.err(
                                "kernel.cp_async",
                                path,
                                format!("src_bytes is {}, not u32", t.name()),
                            );
                        }
                    }
                    if let Operand::U32(n) = o {
                        if n > bytes {
                            self.err(
                                "kernel.cp_async",
                                path,
                                format!("src_bytes {n} exceeds the copy size {bytes}"),
                            );
                        }
                    }
                }
            }
        }
    }

    /// A register of type `want` for `rule`, named `what` in the message.
    fn want_reg(&mut self, rule: &'static str, r: Reg, want: RegType, path: &str, what: &str) {
        if let Some(t) = self.reg(r, path, what) {
            if t != want {
                self.err(
                    rule,
                    path,
                    format!("{what} {r} is {}, not {}", t.name(), want.name()),
                );
            }
        }
    }

    /// A `u32` operand for `rule`; an immediate must lie in `range`.
    fn want_u32(
        &mut self,
        rule: &'static str,
        o: Operand,
        range: std::ops::RangeInclusive<u32>,
        path: &str,
        what: &str,
    ) {
        if let Some(t) = self.operand(o, path) {
            if t != RegType::U32 {
                self.err(rule, path, format!("{what} is {}, not u32", t.name()));
            }
        }
        if let Operand::U32(x) = o {
            if !range.contains(&x) {
                self.err(
                    rule,
                    path,
                    format!("{what} {x} is not in {}..={}", range.start(), range.end()),
                );
            }
        }
    }

    /// The rules of the mbarrier, TMA and setmaxnreg statements.
    fn async_stmt(&mut self, s: &Stmt, path: &str) {
        const MB: &str = "kernel.mbarrier";
        match s {
            Stmt::MbarInit { addr, count } => {
                self.want_reg(MB, *addr, RegType::U32, path, "the mbarrier address");
                self.want_u32(MB, *count, 1..=MBAR_MAX_COUNT, path, "the arrival count");
            }
            Stmt::MbarArriveExpectTx { addr, bytes } => {
                self.want_reg(MB, *addr, RegType::U32, path, "the mbarrier address");
                self.want_u32(MB, *bytes, 0..=MBAR_MAX_COUNT, path, "the tx-count");
            }
            Stmt::MbarArrive { addr } => {
                self.want_reg(MB, *addr, RegType::U32, path, "the mbarrier address");
            }
            Stmt::MbarWait { addr, parity } => {
                self.want_reg(MB, *addr, RegType::U32, path, "the mbarrier address");
                self.want_u32(MB, *parity, 0..=1, path, "the phase parity");
            }
            Stmt::TmaLoad {
                dst,
                tmap,
                coords,
                mbar,
            } => {
                const TMA: &str = "kernel.tma";
                self.want_reg(TMA, *dst, RegType::U32, path, "the shared destination");
                self.want_reg(TMA, *tmap, RegType::U64, path, "the tensor map address");
                self.want_reg(TMA, *mbar, RegType::U32, path, "the mbarrier address");
                if !(1..=5).contains(&coords.len()) {
                    self.err(
                        TMA,
                        path,
                        format!("{} coordinates: a tensor map has 1 to 5 dims", coords.len()),
                    );
                }
                for c in coords {
                    self.want_u32(TMA, *c, 0..=u32::MAX, path, "a coordinate");
                }
            }
            Stmt::SetMaxNReg { regs, .. } if !(24..=256).contains(regs) || regs % 8 != 0 => {
                self.err(
                    "kernel.setmaxnreg",
                    path,
                    format!("{regs} registers: a multiple of 8 in 24..=256 is needed"),
                );
            }
            _ => {}
        }
    }

    fn check_mem_value(&mut self, t: RegType, width: Width, path: &str, what: &str) {
        let ok = match width {
            Width::B8 | Width::B16 => t == RegType::U32,
            Width::B32 | Width::V2 | Width::V4 => matches!(t, RegType::U32 | RegType::F32),
        };
        if !ok {
            let want = match width {
                Width::B8 | Width::B16 => "u32",
                _ => "u32 or f32",
            };
            self.err(
                "kernel.memory",
                path,
                format!(
                    "a {width:?} access moves {want}, but {what} is {}",
                    t.name()
                ),
            );
        }
    }

    fn check_addr(&mut self, addr: Reg, space: Space, path: &str) {
        if let Some(t) = self.reg(addr, path, "address") {
            let want = match space {
                Space::Global => RegType::U64,
                Space::Shared => RegType::U32,
            };
            if t != want {
                self.err(
                    "kernel.memory",
                    path,
                    format!(
                        "a {space:?} address is {}, but {addr} is {}",
                        want.name(),
                        t.name()
                    ),
                );
            }
        }
    }

    fn op(&mut self, dst: Reg, op: Op, args: &[Operand], path: &str) {
        let text = write_op_stmt(dst, op, args);
        let at = format!("{path} `{text}`");
        let at = at.as_str();
        let sig = op.signature();
        if let Op::Math(m) = op {
            if self.after_expand_math {
                self.err(
                    "kernel.math",
                    at,
                    format!("math.{m:?} remains after expand-math"),
                );
            }
        }
        let dt = self.reg(dst, at, "destination");
        // The type T stands for: the destination's.
        let t = dt;
        match sig.result {
            SigType::Is(want) => {
                if let Some(dt) = dt {
                    if dt != want {
                        self.err(
                            "kernel.signature",
                            at,
                            format!("the result is {}, but {dst} is {}", want.name(), dt.name()),
                        );
                    }
                }
            }
            SigType::T => {}
            SigType::T32 => {
                if let Some(dt) = dt {
                    if !matches!(dt, RegType::U32 | RegType::F32) {
                        self.err(
                            "kernel.signature",
                            at,
                            format!("the result must be 32-bit, but {dst} is {}", dt.name()),
                        );
                    }
                }
            }
            SigType::Param => {
                if let Op::Param(n) = op {
                    match self.k.params.get(n as usize) {
                        None => self.err(
                            "kernel.param",
                            at,
                            format!(
                                "parameter {n} is out of range ({} parameters)",
                                self.k.params.len()
                            ),
                        ),
                        Some(p) => {
                            let want = p.kind.reg_type();
                            if let Some(dt) = dt {
                                if dt != want {
                                    self.err(
                                        "kernel.param",
                                        at,
                                        format!(
                                            "parameter {n} ({}) is {}, but {dst} is {}",
                                            p.name,
                                            want.name(),
                                            dt.name()
                                        ),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Op::SharedAddr(s) = op {
            if self.k.shared.get(s).is_none() {
                self.err(
                    "kernel.shared_addr",
                    at,
                    format!("shared buffer {s} is not declared"),
                );
            }
        }
        if args.len() != sig.args.len() {
            self.err(
                "kernel.signature",
                at,
                format!("takes {} operands, not {}", sig.args.len(), args.len()),
            );
        }
        for (i, (a, want)) in args.iter().zip(sig.args).enumerate() {
            let Some(at_ty) = self.operand(*a, at) else {
                continue;
            };
            let want = match want {
                SigType::Is(w) => Some(*w),
                SigType::T | SigType::T32 | SigType::Param => t,
            };
            if let Some(w) = want {
                if at_ty != w {
                    let what = match a {
                        Operand::Reg(r) => format!("{r} is {}", at_ty.name()),
                        _ => format!("the immediate is {}", at_ty.name()),
                    };
                    self.err(
                        "kernel.signature",
                        at,
                        format!("operand {i} must be {}, but {what}", w.name()),
                    );
                }
            }
        }
        match (sig.rule, args.get(1)) {
            (Some(ArgRule::ShiftBelow32), Some(Operand::U32(b))) if *b >= 32 => self.err(
                "kernel.signature",
                at,
                format!("shift by {b}, not below 32"),
            ),
            (Some(ArgRule::NonzeroDivisor), Some(Operand::U32(0))) => self.err(
                "kernel.signature",
                at,
                "division by the immediate 0".to_string(),
            ),
            _ => {}
        }
    }
}
