//! What a kernel does before its `griddepcontrol.wait` (programmatic dependent launch): the
//! rule `kernel.griddep` and the program rule `program.griddep` read it, and the
//! `dependent-launch` pass places the wait by the same definitions.
//!
//! Before the wait a kernel may run anything that touches no global memory, and load from
//! a read-only pointer parameter (`ptr .. read`) through an address computed from that
//! parameter alone ([`read_only_addresses`]): the program verifier then checks that every
//! launch binds that parameter to a step input no launch writes, which the kernel ahead
//! cannot be changing.

use std::collections::{BTreeSet, HashMap};

use super::{
    any_stmt, BufferRole, Kernel, LaunchArg, Op, Operand, ParamKind, Program, RegType, Space, Stmt,
};
use crate::entities::{BufferId, KernelId, Reg};

/// The step inputs of `p` that no launch writes (bound to no writing pointer parameter):
/// what a kernel may load before `griddepcontrol.wait`. An `inout` input is written.
pub fn unwritten_inputs(p: &Program) -> BTreeSet<BufferId> {
    let mut written = BTreeSet::new();
    for l in &p.launches {
        let Some(k) = p.kernels.get(l.kernel) else {
            continue;
        };
        for (prm, a) in k.params.iter().zip(&l.args) {
            if let (ParamKind::Ptr { writes: true, .. }, LaunchArg::Buffer(b)) = (prm.kind, a) {
                written.insert(*b);
            }
        }
    }
    p.buffers
        .iter()
        .filter(|(b, d)| matches!(d.role, BufferRole::Input(_)) && !written.contains(b))
        .map(|(b, _)| b)
        .collect()
}

/// Per kernel of `p`, the parameters every launch of it binds to a step input no launch
/// writes ([`unwritten_inputs`]): those a kernel may load before its wait (none for a
/// kernel that is never launched).
pub fn fixed_params(p: &Program) -> HashMap<KernelId, BTreeSet<u32>> {
    let constant = unwritten_inputs(p);
    p.kernels
        .iter()
        .map(|(id, k)| {
            let launches: Vec<_> = p.launches.iter().filter(|l| l.kernel == id).collect();
            let params = (0..k.params.len() as u32)
                .filter(|&n| {
                    !launches.is_empty()
                        && launches.iter().all(|l| {
                            matches!(l.args.get(n as usize), Some(LaunchArg::Buffer(b)) if constant.contains(b))
                        })
                })
                .collect();
            (id, params)
        })
        .collect()
}

/// What a `U64` register holds, in [`read_only_addresses`]'s analysis: a lattice from
/// `Unknown` (the optimistic start) down to `Any`, through an address of one parameter or an
/// offset.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Addr {
    /// Not yet constrained.
    Unknown,
    /// An address into read-only pointer parameter `n`'s buffer.
    Param(u32),
    /// A value that is no address: an immediate, a `mul.wide`, a conversion.
    Offset,
    /// Anything: another buffer's address, a sum of two addresses, a loaded value, an
    /// unassigned register.
    Any,
}

impl Addr {
    /// The greatest lower bound: what a register assigned both ways holds.
    fn meet(self, o: Addr) -> Addr {
        match (self, o) {
            (Addr::Unknown, x) | (x, Addr::Unknown) => x,
            (a, b) if a == b => a,
            _ => Addr::Any,
        }
    }

    /// `add.u64 a, b`: an address plus an offset is that address, two offsets an offset,
    /// anything else anything. Monotone, so the iteration from `Unknown` ends.
    fn add(a: Addr, b: Addr) -> Addr {
        match (a, b) {
            (Addr::Any, _) | (_, Addr::Any) => Addr::Any,
            (Addr::Unknown, _) | (_, Addr::Unknown) => Addr::Unknown,
            (Addr::Param(n), Addr::Offset) | (Addr::Offset, Addr::Param(n)) => Addr::Param(n),
            (Addr::Offset, Addr::Offset) => Addr::Offset,
            (Addr::Param(_), Addr::Param(_)) => Addr::Any,
        }
    }
}

/// The `U64` registers that hold, at every assignment, an address into the buffer of one
/// read-only pointer parameter, by that parameter's index: assigned only by `param n` (a
/// `ptr .. read` parameter), `mov` of such a register, or `add.u64` of such a register and
/// an offset (an immediate, or a register assigned only offsets: `mul.wide`, conversions,
/// their sums). The greatest fixed point from `Unknown`, so that a pointer advanced in a
/// loop (`r = add.u64 r, step`) stays one; a register still unconstrained at the end (it
/// depends only on itself, never assigned a start) is not one.
pub fn read_only_addresses(k: &Kernel) -> HashMap<Reg, u32> {
    let mut assigns: HashMap<Reg, Vec<(Op, &[Operand])>> = HashMap::new();
    let mut other: BTreeSet<Reg> = BTreeSet::new();
    collect(&k.body, &mut assigns, &mut other);
    let mut val: HashMap<Reg, Addr> = assigns
        .keys()
        .filter(|r| !other.contains(r) && k.regs.get(**r) == Some(&RegType::U64))
        .map(|&r| (r, Addr::Unknown))
        .collect();
    let of = |val: &HashMap<Reg, Addr>, o: &Operand| match o {
        Operand::Reg(r) => val.get(r).copied().unwrap_or(Addr::Any),
        _ => Addr::Offset,
    };
    loop {
        let mut changed = false;
        for (r, list) in &assigns {
            let Some(&cur) = val.get(r) else { continue };
            let mut v = Addr::Unknown;
            for (op, args) in list {
                let a = match (op, args) {
                    (Op::Param(n), _) => match k.params.get(*n as usize).map(|p| p.kind) {
                        Some(ParamKind::Ptr { writes: false, .. }) => Addr::Param(*n),
                        _ => Addr::Any,
                    },
                    (Op::Mov, [x]) => of(&val, x),
                    (Op::AddU64, [a, b]) => Addr::add(of(&val, a), of(&val, b)),
                    (Op::MulWideU32 | Op::CvtU64U32, _) => Addr::Offset,
                    _ => Addr::Any,
                };
                v = v.meet(a);
            }
            // Monotone: a register only ever moves down the lattice.
            let v = cur.meet(v);
            if v != cur {
                val.insert(*r, v);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    val.into_iter()
        .filter_map(|(r, v)| match v {
            Addr::Param(n) => Some((r, n)),
            _ => None,
        })
        .collect()
}

fn collect<'k>(
    body: &'k [Stmt],
    assigns: &mut HashMap<Reg, Vec<(Op, &'k [Operand])>>,
    other: &mut BTreeSet<Reg>,
) {
    for s in body {
        match s {
            Stmt::Op { dst, op, args } => assigns.entry(*dst).or_default().push((*op, args)),
            Stmt::For { var, body, .. } => {
                other.insert(*var);
                collect(body, assigns, other);
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                collect(then_body, assigns, other);
                collect(else_body, assigns, other);
            }
            Stmt::Load { dsts, .. } | Stmt::Ldmatrix { dsts, .. } => other.extend(dsts),
            Stmt::Mma { d, .. } => other.extend(d),
            Stmt::Wgmma { d, .. } => other.extend(d),
            _ => {}
        }
    }
}

/// Whether `s` is, or holds, a global memory access that must come after
/// `griddepcontrol.wait`: any global load, store, `cp.async` or TMA load, but a load through
/// `ro` (from [`read_only_addresses`]) of a parameter `allowed` takes.
pub fn needs_wait(s: &Stmt, ro: &HashMap<Reg, u32>, allowed: &dyn Fn(u32) -> bool) -> bool {
    match s {
        Stmt::Load {
            space: Space::Global,
            addr,
            ..
        } => !ro.get(addr).is_some_and(|&n| allowed(n)),
        Stmt::Store {
            space: Space::Global,
            ..
        }
        | Stmt::CpAsync { .. }
        | Stmt::TmaLoad { .. } => true,
        Stmt::For { .. } | Stmt::If { .. } => any_stmt(std::slice::from_ref(s), &|t| {
            !matches!(t, Stmt::For { .. } | Stmt::If { .. }) && needs_wait(t, ro, allowed)
        }),
        _ => false,
    }
}

/// What a walk of a kernel from its start finds before `griddepcontrol.wait`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeforeWait {
    /// The read-only parameters loaded before the wait on some path (their buffers must be
    /// step inputs no launch writes: rule `program.griddep`).
    pub params: BTreeSet<u32>,
    /// The body paths (`body[3].then[0]`) of global accesses some path reaches before the
    /// wait that are not such loads (rule `kernel.griddep`).
    pub unordered: Vec<String>,
    /// Whether every path through the body passes a wait: then every thread waits, and the
    /// kernel completes only after the kernel ahead (rule `kernel.griddep` requires it of a
    /// kernel that waits at all, which is launched programmatically).
    pub every_path_waits: bool,
}

/// Walks `k`'s body from its start (loops may run zero times; after a branch, a path has
/// waited only if both arms did) and reports what comes before `griddepcontrol.wait`.
pub fn before_wait(k: &Kernel) -> BeforeWait {
    let ro = read_only_addresses(k);
    let mut out = BeforeWait::default();
    out.every_path_waits = walk(&k.body, false, "body", &ro, &mut out);
    out
}

fn walk(
    body: &[Stmt],
    mut waited: bool,
    path: &str,
    ro: &HashMap<Reg, u32>,
    out: &mut BeforeWait,
) -> bool {
    for (i, s) in body.iter().enumerate() {
        let here = format!("{path}[{i}]");
        match s {
            Stmt::GridDepWait => waited = true,
            Stmt::For { body, .. } => {
                walk(body, waited, &format!("{here}.body"), ro, out);
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                let t = walk(then_body, waited, &format!("{here}.then"), ro, out);
                let e = walk(else_body, waited, &format!("{here}.else"), ro, out);
                waited = t && e;
            }
            Stmt::Load {
                space: Space::Global,
                addr,
                ..
            } if !waited => match ro.get(addr) {
                Some(&n) => {
                    out.params.insert(n);
                }
                None => out.unordered.push(here),
            },
            s if !waited && needs_wait(s, ro, &|_| false) => out.unordered.push(here),
            _ => {}
        }
    }
    waited
}
