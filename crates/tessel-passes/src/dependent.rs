//! `dependent-launch`: programmatic dependent launch (sm_90). Each kernel may begin while
//! the kernel ahead of it in the stream finishes: its CTAs are scheduled as the previous
//! kernel's leave, run what does not depend on it — index arithmetic, and loads of step
//! inputs that no launch writes (the tensor-core GEMV's first weight loads:
//! `lower/gemv_mma.rs` peels its main loop's first iteration so that they are not inside
//! it) — and wait there for the previous kernel to complete. The launch gap and the ramp of
//! each kernel overlap the tail of the one before (CUDA C++ Programming Guide,
//! "Programmatic Dependent Launch and Synchronization").
//!
//! Before: a program for a target with [`crate::Features::griddepcontrol`]. After: every
//! kernel has
//! - `griddepcontrol.wait` ([`Stmt::GridDepWait`]) before its first global memory access on
//!   every path — a store, or a load but one through an address of a read-only parameter
//!   alone (`tessel_ir::kernel::griddep::read_only_addresses`) that every launch binds to a
//!   step input no launch writes (`unwritten_inputs`; the kernel ahead cannot be writing
//!   it, and a step's first launch is stream-ordered behind whatever wrote it before): before
//!   the first top-level statement that holds one, or, when that is a
//!   branch, in each arm (an arm without one waits at its end: every thread waits, so a
//!   kernel completes only after the kernel ahead has, and a chain of programmatic launches
//!   keeps the stream's order from end to end). The verifier's rules `kernel.griddep` and
//!   `program.griddep` check exactly this, so a statement this pass does not know to be
//!   global fails verification rather than racing;
//! - `griddepcontrol.launch_dependents` ([`Stmt::GridDepLaunch`]) after its last global
//!   read: after the last top-level statement that holds one, or in the arms of that
//!   branch which read. A CTA lets the next kernel launch at the first of its threads to
//!   run it (or when it exits), so an arm that reads nothing gets none: the trigger comes
//!   once the CTA's loads are issued, and the next kernel's CTAs, taking the places of the
//!   finished ones, issue their early loads while this kernel's last loads and stores drain.
//!   A kernel that reads no global memory triggers at its start.
//!
//! Nothing is computed differently: the wait comes before any access that could see the
//! kernel ahead's memory, so every output is the same bits. The runtime launches each
//! kernel that waits with programmatic stream serialization, except a program's first
//! (`tessel_driver::launch_of`); launched without it, the wait returns at once.
//!
//! Measured on an H100 (docs/perf/2026-12-07-stop34.md, runs 29 and 30): the Qwen3-14B
//! decode layer as one CUDA graph, 251.9 → 249.0 µs at B = 1 and 310.3 → 308.8 µs at B = 8;
//! launched one by one, 267.5 → 253.6 and 327.2 → 313.0 µs. Asking L2 for the first bytes
//! of each GEMV's weight rows before the wait ([`Stmt::PrefetchL2`]; 4 to 64 MiB over a
//! GEMV) was slower at every size tried (run 30), so no schedule emits it. Loading the first
//! weights into registers before the wait instead (run 35, another H100): the tensor-core
//! GEMVs' peel took B = 8 from 314.4 / 314.2 to 313.6 / 313.6 µs; the same peel in the SIMT
//! GEMV made B = 1's o_proj and down GEMVs slower (20.9 → 23.7 and 63.2 → 69.4 µs), so it
//! is not done there.
//!
//! Off with `Options::dependent_launch` false (`--no-dependent-launch`), and on targets
//! without the feature.

use std::collections::{BTreeSet, HashMap};

use tessel_ir::kernel::griddep::{fixed_params, needs_wait, read_only_addresses};
use tessel_ir::kernel::{any_stmt, Kernel, Program, Space, Stmt};
use tessel_ir::Reg;

/// Adds the wait and the trigger to every kernel of `p` (see the module docs).
pub fn run(p: &mut Program) {
    let fixed = fixed_params(p);
    for (id, k) in p.kernels.iter_mut() {
        add_wait_and_trigger(k, &fixed[&id]);
    }
}

/// The wait and the trigger of one kernel, whose parameters `fixed` are bound to step inputs
/// no launch writes (loads from them may come before the wait); a kernel that already waits
/// is left as it is.
pub fn add_wait_and_trigger(k: &mut Kernel, fixed: &BTreeSet<u32>) {
    if k.waits_on_prior_grid() {
        return;
    }
    let ro = read_only_addresses(k);
    let early = Early { ro: &ro, fixed };
    let mut body = std::mem::take(&mut k.body);
    insert_wait(&mut body, &early);
    if !insert_trigger(&mut body) {
        body.insert(0, Stmt::GridDepLaunch);
    }
    k.body = body;
}

/// The loads that may come before the wait: through a read-only address of a fixed
/// parameter.
struct Early<'a> {
    ro: &'a HashMap<Reg, u32>,
    fixed: &'a BTreeSet<u32>,
}

impl Early<'_> {
    fn needs_wait(&self, s: &Stmt) -> bool {
        needs_wait(s, self.ro, &|n| self.fixed.contains(&n))
    }
}

/// Whether `s` is or holds a read of global memory.
fn reads_global(s: &Stmt) -> bool {
    any_stmt(std::slice::from_ref(s), &|t| {
        matches!(
            t,
            Stmt::Load {
                space: Space::Global,
                ..
            } | Stmt::CpAsync { .. }
                | Stmt::TmaLoad { .. }
        )
    })
}

/// Puts a wait before `block`'s first global access on every path through it, or at its
/// end when it has none: after it, every path has waited.
fn insert_wait(block: &mut Vec<Stmt>, early: &Early) {
    let Some(i) = block.iter().position(|s| early.needs_wait(s)) else {
        block.push(Stmt::GridDepWait);
        return;
    };
    match &mut block[i] {
        Stmt::If {
            then_body,
            else_body,
            ..
        } => {
            insert_wait(then_body, early);
            insert_wait(else_body, early);
        }
        _ => block.insert(i, Stmt::GridDepWait),
    }
}

/// Puts a trigger after `block`'s last global read (in the arms of a branch that read);
/// false when the block reads nothing.
fn insert_trigger(block: &mut Vec<Stmt>) -> bool {
    let Some(j) = block.iter().rposition(reads_global) else {
        return false;
    };
    match &mut block[j] {
        Stmt::If {
            then_body,
            else_body,
            ..
        } => {
            let t = insert_trigger(then_body);
            let e = insert_trigger(else_body);
            debug_assert!(t || e, "a branch that reads has an arm that reads");
        }
        _ => block.insert(j + 1, Stmt::GridDepLaunch),
    }
    true
}
