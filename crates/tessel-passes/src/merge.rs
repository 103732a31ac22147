//! `merge-launches`: consecutive launches of independent kernels of one kind become one
//! launch, each kernel running on its own range of the merged grid's CTAs (horizontal
//! fusion, as CUDA graphs cannot do: their nodes still launch one by one).
//!
//! Before: a program whose launch `i` runs kernel `i` (as `lower` makes it). After: the
//! same, with runs of launches merged where every one of them
//! - is a one-dimensional grid of CTAs of the first's block shape (or a narrower rider,
//!   below), with no dynamic shared
//!   memory and no tensor map, the shared memory of the run within the 48 KiB a kernel
//!   declares statically;
//! - runs only synchronous statements (ops, loads, stores, loops, branches, CTA barriers,
//!   and the warp-level `mma.sync` and `ldmatrix` of the tensor-core GEMV): no
//!   asynchronous-copy, wgmma, mbarrier or named-barrier statement, whose kernels are
//!   tuned to the registers and the shared memory they have alone;
//! - has the schedule kind of the first (the word its schedule starts with: `gemv`,
//!   `update`, `elementwise`, ...): kernels alike in their registers, so the merged one's
//!   occupancy is theirs — or is a *rider* of at most [`RIDER_CTAS`] CTAs, whose launch
//!   would cost more than its work (decode's RoPE table, one CTA, rides with the q/k/v
//!   GEMVs' 1792). A rider may have narrower CTAs than the first's, of whole warps and
//!   without a CTA barrier: the threads past its block skip its body (decode's inverse
//!   frequencies at B = 8, 64 threads, ride with the GEMVs' CTAs of 128);
//! - and is independent of the launches merged before it: it writes no buffer they read or
//!   write, and reads none they write (the CTAs of a merged launch run in no set order).
//!
//! The merged kernel reads `%ctaid.x` once: CTAs `0 .. g0` run the first kernel's body,
//! `g0 .. g0 + g1` the second's with its CTA index less `g0`, and so on; each body's
//! registers, shared buffers and parameters are renumbered after the previous ones', and
//! its reads of `%nctaid.x` become its own grid size. The merged kernel asks for the
//! largest occupancy any part asked for (`min_ctas_per_sm`; they share one code shape). A CTA runs exactly one body, so a
//! barrier in it is still reached by every thread of the CTA. Nothing is computed
//! differently: every output is the same bits. The Qwen3-14B decode layer's q, k and v
//! GEMVs (1280 + 256 + 256 CTAs) become one launch, the two KV-cache updates another. (The
//! gate and up GEMVs do not: the up GEMV's epilogue reads the gate's output, SwiGLU.)
//!
//! Off with `Options::merge_launches` false (`--no-merge-launches`).

use tessel_ir::kernel::{
    any_stmt, Kernel, LaunchArg, Op, Operand, ParamKind, Program, RegType, Special, Stmt,
    STATIC_SHARED_BYTES,
};
use tessel_ir::{BufferId, KernelId, Reg, SharedBuf};

/// Merges what it can (see the module docs); returns, for each kernel of the new program,
/// the indices of the kernels of the old one it runs, in order. A program whose launches
/// are not its kernels in order is left as it is.
pub fn run(p: &mut Program) -> Vec<Vec<usize>> {
    let n = p.kernels.len();
    let in_order = p.launches.len() == n
        && p.launches
            .iter()
            .enumerate()
            .all(|(i, l)| l.kernel.as_u32() as usize == i);
    if !in_order {
        return (0..n).map(|i| vec![i]).collect();
    }
    // Runs of mergeable launches, greedily from the first.
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for i in 0..n {
        let joins = runs.last().is_some_and(|run| {
            let first = &p.kernels[KernelId::from_u32(run[0] as u32)];
            let k = &p.kernels[KernelId::from_u32(i as u32)];
            mergeable(first)
                && mergeable(k)
                && (k.block == first.block || narrower_rider(k, first))
                && (kind(k) == kind(first) || k.grid[0] <= RIDER_CTAS)
                && independent(p, run, i)
                && static_shared(p, run) + static_shared(p, &[i]) <= STATIC_SHARED_BYTES as u64
        });
        match runs.last_mut() {
            Some(run) if joins => run.push(i),
            _ => runs.push(vec![i]),
        }
    }
    if runs.iter().all(|r| r.len() == 1) {
        return runs;
    }
    let old_kernels = std::mem::take(&mut p.kernels);
    let old_launches = std::mem::take(&mut p.launches);
    for run in &runs {
        let (kernel, args) = if let [i] = run[..] {
            (
                old_kernels[KernelId::from_u32(i as u32)].clone(),
                old_launches[i].args.clone(),
            )
        } else {
            let parts: Vec<(&Kernel, &[LaunchArg])> = run
                .iter()
                .map(|&i| {
                    (
                        &old_kernels[KernelId::from_u32(i as u32)],
                        &old_launches[i].args[..],
                    )
                })
                .collect();
            merged(&parts)
        };
        let id = p.kernels.push(kernel);
        p.launches
            .push(tessel_ir::kernel::Launch { kernel: id, args });
    }
    runs
}

/// The shared memory the kernels of launches `run` declare, bytes: merged, they must stay
/// within what a kernel may declare statically (one buffer over it is the only dynamic form).
fn static_shared(p: &Program, run: &[usize]) -> u64 {
    run.iter()
        .flat_map(|&i| p.kernels[KernelId::from_u32(i as u32)].shared.values())
        .map(|d| d.bytes as u64)
        .sum()
}

/// The most CTAs a kernel of another kind than its run's may have to join it: a rider's
/// work is a few CTAs of the merged grid, and ptxas gives the merged kernel the registers
/// of its largest part (the decode RoPE table's 23 against the GEMVs' 34: `tessel explain`
/// prints both), so the run's occupancy is its main parts'.
const RIDER_CTAS: u32 = 4;

/// Whether `k` may ride, with a narrower CTA, in a run whose first kernel is `first`: at
/// most [`RIDER_CTAS`] one-dimensional CTAs of whole warps, fewer threads than `first`'s,
/// and no CTA barrier (the threads past its own block skip its body, so a `bar.sync` would
/// wait for threads that never come). Decode's inverse frequencies at B = 8 (one CTA of 64
/// threads) ride with the q/k/v GEMVs (CTAs of 128).
fn narrower_rider(k: &Kernel, first: &Kernel) -> bool {
    k.grid[0] <= RIDER_CTAS
        && k.block[1..] == [1, 1]
        && first.block[1..] == [1, 1]
        && k.block[0] < first.block[0]
        && k.block[0] % 32 == 0
        && !any_stmt(&k.body, &|s| {
            matches!(
                s,
                Stmt::Barrier | Stmt::BarSync { .. } | Stmt::BarArrive { .. }
            )
        })
}

/// The word a kernel's schedule starts with (`gemv`, `update`, `elementwise`, ...).
fn kind(k: &Kernel) -> &str {
    k.schedule
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("")
}

/// Whether `k` may run as part of a merged launch (see the module docs).
fn mergeable(k: &Kernel) -> bool {
    k.grid[1] == 1
        && k.grid[2] == 1
        && k.dynamic_shared_bytes() == 0
        && !k.params.iter().any(|p| p.kind == ParamKind::TensorMap)
        && plain(&k.body)
}

fn plain(body: &[Stmt]) -> bool {
    body.iter().all(|s| match s {
        Stmt::Op { .. }
        | Stmt::Load { .. }
        | Stmt::Store { .. }
        | Stmt::Barrier
        | Stmt::Mma { .. }
        | Stmt::Ldmatrix { .. } => true,
        Stmt::For { body, .. } => plain(body),
        Stmt::If {
            then_body,
            else_body,
            ..
        } => plain(then_body) && plain(else_body),
        _ => false,
    })
}

/// The buffers launch `i` of `p` writes and reads.
fn accesses(p: &Program, i: usize) -> (Vec<BufferId>, Vec<BufferId>) {
    let k = &p.kernels[p.launches[i].kernel];
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    for (param, arg) in k.params.iter().zip(&p.launches[i].args) {
        if let (ParamKind::Ptr { writes: w, .. }, LaunchArg::Buffer(b)) = (param.kind, arg) {
            if w {
                writes.push(*b);
            } else {
                reads.push(*b);
            }
        }
    }
    (writes, reads)
}

/// Whether launch `i` neither writes what the launches `run` read or write, nor reads what
/// they write.
fn independent(p: &Program, run: &[usize], i: usize) -> bool {
    let (w, r) = accesses(p, i);
    run.iter().all(|&j| {
        let (wj, rj) = accesses(p, j);
        !w.iter().any(|b| wj.contains(b) || rj.contains(b)) && !r.iter().any(|b| wj.contains(b))
    })
}

/// One kernel running `parts` (kernel, launch arguments) on consecutive ranges of its CTAs.
fn merged(parts: &[(&Kernel, &[LaunchArg])]) -> (Kernel, Vec<LaunchArg>) {
    let first = parts[0].0;
    // `decode_1`, `decode_2`, `decode_3` → `decode_1_2_3`: each later name after the part
    // it shares with the first, up to an underscore (the step's name).
    let mut name = first.name.clone();
    for (k, _) in &parts[1..] {
        let common = first
            .name
            .bytes()
            .zip(k.name.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        let cut = first.name[..common].rfind('_').map_or(0, |i| i + 1);
        name.push('_');
        name.push_str(&k.name[cut..]);
    }
    let grids: Vec<u32> = parts.iter().map(|(k, _)| k.grid[0]).collect();
    let total: u32 = grids.iter().sum();
    let mut starts = vec![0u32];
    for g in &grids {
        starts.push(starts.last().unwrap() + g);
    }
    let schedule = parts
        .iter()
        .zip(starts.windows(2))
        .map(|((k, _), w)| format!("CTAs {}..{}: {}", w[0], w[1], k.schedule))
        .collect::<Vec<_>>()
        .join("; ");
    let mut m = Kernel {
        name,
        block: first.block,
        grid: [total, 1, 1],
        min_ctas_per_sm: parts
            .iter()
            .map(|(k, _)| k.min_ctas_per_sm)
            .max()
            .unwrap_or(0),
        schedule: format!("one launch of {} kernels; {schedule}", parts.len()),
        ..Default::default()
    };
    let mut args = Vec::new();
    let cta = m.new_reg(RegType::U32);
    let mut head = vec![Stmt::Op {
        dst: cta,
        op: Op::Special(Special::CtaidX),
        args: vec![],
    }];
    let mut bodies = Vec::new();
    for (i, (k, kargs)) in parts.iter().enumerate() {
        let shift = Shift {
            regs: m.regs.len() as u32,
            shared: m.shared.len() as u32,
            params: m.params.len() as u32,
            grid: grids[i],
            block: k.block[0],
            cta: Reg::from_u32(0), // set below
        };
        for (_, &ty) in k.regs.iter() {
            m.new_reg(ty);
        }
        for (_, d) in k.shared.iter() {
            m.new_shared(d.bytes, d.align);
        }
        for p in &k.params {
            let mut p = p.clone();
            p.name = format!("k{i}_{}", p.name);
            m.params.push(p);
        }
        args.extend_from_slice(kargs);
        // This body's CTA index: the merged one less the CTAs before it.
        let (local, mut body) = if starts[i] == 0 {
            (cta, vec![])
        } else {
            let local = m.new_reg(RegType::U32);
            let sub = Stmt::Op {
                dst: local,
                op: Op::ISub,
                args: vec![cta.into(), Operand::U32(starts[i])],
            };
            (local, vec![sub])
        };
        let shift = Shift {
            cta: local,
            ..shift
        };
        let shifted: Vec<Stmt> = k.body.iter().map(|s| shift.stmt(s)).collect();
        if k.block[0] < m.block[0] {
            // A narrower rider: its threads run its body, the rest of the CTA nothing.
            let tid = m.new_reg(RegType::U32);
            let mine = m.new_reg(RegType::Pred);
            body.push(Stmt::Op {
                dst: tid,
                op: Op::Special(Special::TidX),
                args: vec![],
            });
            body.push(Stmt::Op {
                dst: mine,
                op: Op::ICmp(tessel_ir::kernel::ICmp::LtU),
                args: vec![tid.into(), Operand::U32(k.block[0])],
            });
            body.push(Stmt::If {
                cond: mine,
                then_body: shifted,
                else_body: vec![],
            });
        } else {
            body.extend(shifted);
        }
        bodies.push(body);
    }
    // if cta < starts[1] { body 0 } else if cta < starts[2] { body 1 } ... else { last }
    let mut tail = bodies.pop().expect("two parts or more");
    for i in (0..bodies.len()).rev() {
        let cond = m.new_reg(RegType::Pred);
        head.push(Stmt::Op {
            dst: cond,
            op: Op::ICmp(tessel_ir::kernel::ICmp::LtU),
            args: vec![cta.into(), Operand::U32(starts[i + 1])],
        });
        tail = vec![Stmt::If {
            cond,
            then_body: bodies.pop().expect("one body per part"),
            else_body: tail,
        }];
    }
    head.extend(tail);
    m.body = head;
    (m, args)
}

/// How one part's statements are renumbered into the merged kernel.
#[derive(Clone, Copy)]
struct Shift {
    regs: u32,
    shared: u32,
    params: u32,
    /// The part's own grid size, for its reads of `%nctaid.x`.
    grid: u32,
    /// The part's own CTA size, for its reads of `%ntid.x`.
    block: u32,
    /// The register holding the part's own CTA index, for its reads of `%ctaid.x`.
    cta: Reg,
}

impl Shift {
    fn reg(&self, r: Reg) -> Reg {
        Reg::from_u32(r.as_u32() + self.regs)
    }

    fn operand(&self, o: &Operand) -> Operand {
        match o {
            Operand::Reg(r) => Operand::Reg(self.reg(*r)),
            other => *other,
        }
    }

    fn block(&self, body: &[Stmt]) -> Vec<Stmt> {
        body.iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&self, s: &Stmt) -> Stmt {
        match s {
            Stmt::Op { dst, op, args } => {
                let (op, args) = match op {
                    Op::Special(Special::CtaidX) => (Op::Mov, vec![self.cta.into()]),
                    Op::Special(Special::NctaidX) => (Op::Mov, vec![Operand::U32(self.grid)]),
                    Op::Special(Special::NtidX) => (Op::Mov, vec![Operand::U32(self.block)]),
                    Op::Param(n) => (Op::Param(n + self.params), vec![]),
                    Op::SharedAddr(b) => (
                        Op::SharedAddr(SharedBuf::from_u32(b.as_u32() + self.shared)),
                        vec![],
                    ),
                    op => (*op, args.iter().map(|a| self.operand(a)).collect()),
                };
                Stmt::Op {
                    dst: self.reg(*dst),
                    op,
                    args,
                }
            }
            Stmt::Load {
                dsts,
                space,
                width,
                addr,
                offset,
            } => Stmt::Load {
                dsts: dsts.iter().map(|&r| self.reg(r)).collect(),
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
                values: values.iter().map(|v| self.operand(v)).collect(),
            },
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => Stmt::For {
                var: self.reg(*var),
                start: self.operand(start),
                end: self.operand(end),
                step: self.operand(step),
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
            other => {
                unreachable!("merge-launches takes only synchronous statements, not {other:?}")
            }
        }
    }
}
