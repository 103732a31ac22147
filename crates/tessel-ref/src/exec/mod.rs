//! The kernel-IR executor: runs a [`Program`] on host buffers exactly as the GPU does,
//! bit for bit (design §5, `exact` profile), and checks every memory access on the way.
//!
//! Pipeline role: the last stage before PTX is kernel IR; the executor runs that IR on the
//! CPU, so `tessel run` works without a GPU and `tessel check` can compare the GPU's output
//! bits with it. It reads the IR only, never PTX.
//!
//! Execution model (the semantics in `tessel_ir::kernel`'s docs):
//! - launches run in order; the CTAs of a launch run in parallel on rayon's pool, each from
//!   a fresh, poisoned state, so results never depend on scheduling;
//! - inside a CTA each warp (32 consecutive threads) runs the kernel body, flattened into a
//!   program with jumps (module `flat`), from its own position, its lanes under an active
//!   mask (module `cta`); the warps at the lowest position run next, together, which is
//!   SIMT lockstep over the whole CTA wherever warps do not wait on each other. A warp
//!   blocks at a barrier (`barrier`, `bar.sync`) until its phase completes, and the other
//!   warps run meanwhile, so a producer warp and the consumers it feeds through named
//!   barriers both run; a CTA whose warps all wait is an [`ExecError::Deadlock`];
//! - global memory is the program's buffers behind fake base addresses (module `memory`), step
//!   outputs and temporaries poisoned with `0xFF` bytes before the run like the GPU
//!   harness does; an `inout` input is one buffer, filled from its input, written in place
//!   and returned as the output of its name; shared memory is a per-CTA byte window, also
//!   poisoned;
//! - scalar semantics that Rust's operators do not give directly are in [`numerics`];
//! - warp-wide statements (`shfl.bfly`, `mma`, `ldmatrix`) need every lane of each warp
//!   that reaches them; `mma` follows the model in `tessel_ir::kernel::Stmt::Mma`'s docs
//!   (fma chain over k in order, f32 rounding each step), which the GPU matches only within
//!   a tolerance;
//! - `cp.async` copies at once (lanes run in lockstep) but its destination bytes stay
//!   *pending* until the issuing thread's `cp.async.wait_group`/`wait_all` completes their
//!   group; touching pending shared bytes is an [`ExecError::CpAsync`];
//! - mbarriers keep their phase, pending arrivals and tx-count (PTX ISA §9.7.13.15) in the
//!   CTA's state, not in their shared bytes, which may not be touched as data; a wait on
//!   a phase blocks the warp (the scheduler polls it like a `try_wait` loop). A TMA load
//!   copies its box at issue, but its complete-tx reaches the mbarrier only when a thread
//!   next waits on that barrier — the latest the hardware may deliver it — and its bytes
//!   stay pending until the phase it completes on has completed: touching them before is
//!   an [`ExecError::Mbarrier`], which a read before the wait therefore always is.
//!
//! Faults the GPU would turn into an error, a hang or silent garbage are [`ExecError`]s
//! naming the kernel, CTA and thread: out-of-bounds or misaligned accesses, stores to step
//! inputs, divergent barriers (and barriers misused or deadlocked), shuffles and warp-wide
//! matrix instructions, division by zero,
//! shifts ≥ 32, shared bytes used before their `cp.async` or TMA copy completes, and
//! mbarriers misused.

mod cta;
mod flat;
mod memory;
pub mod numerics;
mod slots;
#[cfg(test)]
mod tests;

use crate::tensor::Tensor;
use memory::{GlobalBuf, GlobalMem};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tessel_ir::kernel::{
    BufferRole, Kernel, LaunchArg, MathFn, ParamKind, Program, Space, TensorMapDesc,
};

pub use memory::base_address;

/// A fault found while running a program. Thread and CTA numbers are linear (`x` fastest);
/// byte offsets are from the start of the named buffer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: {access} of {bytes} bytes at offset {offset} of buffer `{buffer}` ({size} bytes) is out of bounds")]
    OutOfBounds {
        kernel: String,
        cta: u64,
        thread: u32,
        access: &'static str,
        buffer: String,
        offset: u64,
        bytes: u32,
        size: u64,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: {access} at {space:?} address {addr:#x} is in no buffer")]
    WildAddress {
        kernel: String,
        cta: u64,
        thread: u32,
        access: &'static str,
        space: Space,
        addr: u64,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: {access} of {bytes} bytes at {space:?} address {addr:#x} is not {bytes}-byte aligned")]
    Misaligned {
        kernel: String,
        cta: u64,
        thread: u32,
        access: &'static str,
        space: Space,
        addr: u64,
        bytes: u32,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: shared {access} of {bytes} bytes at {addr:#x} is outside every shared buffer ({size} bytes in all)")]
    SharedOutOfBounds {
        kernel: String,
        cta: u64,
        thread: u32,
        access: &'static str,
        addr: u32,
        bytes: u32,
        size: u32,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: store to step input `{buffer}`")]
    StoreToInput {
        kernel: String,
        cta: u64,
        thread: u32,
        buffer: String,
    },
    #[error("kernel `{kernel}`, CTA {cta}: barrier reached by {active} of {threads} threads")]
    DivergentBarrier {
        kernel: String,
        cta: u64,
        active: u32,
        threads: u32,
    },
    /// Warps that can no longer move: each waits at a barrier that the others will never
    /// complete, or for a condition none of them will make true (or has exited). A GPU
    /// hangs here.
    #[error("kernel `{kernel}`, CTA {cta}: deadlock: {msg}")]
    Deadlock {
        kernel: String,
        cta: u64,
        /// Each group of waiting warps with the statement it waits at, and the exited ones.
        msg: String,
    },
    /// A barrier used in a way the GPU leaves undefined: `barrier` reached at two
    /// statements, or one phase of a named barrier given two thread counts.
    #[error("kernel `{kernel}`, CTA {cta}: {msg}")]
    BarrierMismatch {
        kernel: String,
        cta: u64,
        msg: String,
    },
    #[error("kernel `{kernel}`, CTA {cta}, warp {warp}: shuffle while thread {inactive} of the warp is inactive or absent")]
    ShuffleDivergent {
        kernel: String,
        cta: u64,
        warp: u32,
        inactive: u32,
    },
    #[error("kernel `{kernel}`, CTA {cta}, warp {warp}: {op} while thread {inactive} of the warp is inactive or absent")]
    WarpDivergent {
        kernel: String,
        cta: u64,
        warp: u32,
        inactive: u32,
        /// `mma`, `ldmatrix`, `bar.sync` or `bar.arrive`.
        op: &'static str,
    },
    /// A misused `cp.async`: shared bytes accessed before the wait that completes the copy
    /// writing them, two copies in flight to the same bytes, or `src_bytes` above the size.
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: {msg}")]
    CpAsync {
        kernel: String,
        cta: u64,
        thread: u32,
        msg: String,
    },
    /// A misused `wgmma` or async-proxy access: a descriptor the model does not know or
    /// that differs across a warp, an operand outside shared memory, an operand byte
    /// written through the generic proxy without the writer's `fence.proxy.async`, or a
    /// store into bytes a wgmma not yet waited for reads.
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: {msg}")]
    Wgmma {
        kernel: String,
        cta: u64,
        thread: u32,
        msg: String,
    },
    /// A misused mbarrier or TMA copy: shared bytes of a TMA load accessed before a wait
    /// has seen the phase it completes on complete, an mbarrier's bytes accessed as data,
    /// an operation on an address holding no mbarrier (or initialising one twice), an
    /// arrival beyond the phase's count, a destination misaligned or outside its buffer,
    /// a tensor-map address that is no tensor-map parameter, or a CTA exiting with copies
    /// in flight.
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: {msg}")]
    Mbarrier {
        kernel: String,
        cta: u64,
        thread: u32,
        msg: String,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: shuffle lane mask {lane_mask} ≥ 32")]
    ShuffleOutOfRange {
        kernel: String,
        cta: u64,
        thread: u32,
        lane_mask: u32,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: unsigned division by zero")]
    DivisionByZero {
        kernel: String,
        cta: u64,
        thread: u32,
    },
    #[error("kernel `{kernel}`, CTA {cta}, thread {thread}: shift by {shift} ≥ 32")]
    ShiftOutOfRange {
        kernel: String,
        cta: u64,
        thread: u32,
        shift: u32,
    },
    #[error("kernel `{kernel}`: math call {func:?} was not expanded (run expand-math first)")]
    UnexpandedMath { kernel: String, func: MathFn },
    #[error("kernel `{kernel}`: malformed IR: {msg}")]
    Malformed { kernel: String, msg: String },
    #[error("launch of kernel `{kernel}`: {msg}")]
    BadLaunch { kernel: String, msg: String },
    #[error("program inputs: {0}")]
    BadInputs(String),
    /// The host could not allocate a buffer's memory (the executor holds every buffer of
    /// the program at once).
    #[error("out of host memory: buffer `{buffer}` needs {bytes} bytes")]
    OutOfMemory { buffer: String, bytes: u64 },
}

/// Knobs of a run.
#[derive(Clone, Copy, Default)]
pub struct ExecOptions<'a> {
    /// Called after each CTA completes with `(done, total)` CTAs over the whole run (from
    /// rayon's worker threads, so it must be `Sync`; the CLI's progress bar is).
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// CTAs executed.
    pub ctas: u64,
    /// Statements (ops, loads, stores) executed, summed over the active threads: the
    /// executor's unit of work, for throughput figures.
    pub lane_instructions: u64,
}

/// Runs `p` on `inputs` (in `p.inputs` order, each of its buffer's exact type) and returns
/// the outputs in `p.outputs` order.
///
/// Errors: [`ExecError::BadInputs`] if the inputs do not match, [`ExecError::BadLaunch`] if a
/// launch's arguments do not match its kernel's parameters, and every fault of a kernel
/// (the one in the lowest-numbered faulting CTA of the first faulting launch).
pub fn run_program(p: &Program, inputs: &[Tensor]) -> Result<Vec<Tensor>, ExecError> {
    run_program_with(p, inputs, &ExecOptions::default()).map(|(out, _)| out)
}

/// [`run_program`] with options, also returning the run's counters.
pub fn run_program_with(
    p: &Program,
    inputs: &[Tensor],
    opts: &ExecOptions,
) -> Result<(Vec<Tensor>, ExecStats), ExecError> {
    if inputs.len() != p.inputs.len() {
        return Err(ExecError::BadInputs(format!(
            "{} given, the program takes {}",
            inputs.len(),
            p.inputs.len()
        )));
    }
    let mut init: Vec<Option<&Tensor>> = vec![None; p.buffers.len()];
    for ((name, b), t) in p.inputs.iter().zip(inputs) {
        let decl = &p.buffers[*b];
        if t.ty != decl.ty || t.data.len() as u64 != decl.ty.size_bytes() {
            return Err(ExecError::BadInputs(format!(
                "`{name}` is {} ({} bytes), expected {}",
                t.ty,
                t.data.len(),
                decl.ty
            )));
        }
        init[b.as_u32() as usize] = Some(t);
    }
    let bufs = p
        .buffers
        .iter()
        .zip(&init)
        .map(|((_, decl), t)| {
            // An `inout` input is written in place: only plain inputs are read-only.
            let read_only = matches!(decl.role, BufferRole::Input(_));
            let data = t.map(|t| &t.data[..]);
            GlobalBuf::new(decl.name.clone(), data, decl.ty.size_bytes(), read_only)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mem = GlobalMem { bufs };
    let launches: Vec<(&Kernel, &[LaunchArg])> = p
        .launches
        .iter()
        .map(|l| (&p.kernels[l.kernel], &l.args[..]))
        .collect();
    let stats = run_launches(&mem, &launches, opts)?;
    let outputs = p
        .outputs
        .iter()
        .map(|(_, b)| {
            Ok(Tensor {
                ty: p.buffers[*b].ty.clone(),
                data: mem.bufs[b.as_u32() as usize].to_bytes()?,
            })
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    Ok((outputs, stats))
}

/// Runs one launch of `k` over `buffers` (buffer `i` is `BufferId` `i` in `args`), updating
/// them in place; none is read-only. For tests and tools that build kernels by hand.
///
/// Errors: as [`run_program`].
pub fn run_kernel(
    k: &Kernel,
    buffers: &mut [Tensor],
    args: &[LaunchArg],
    opts: &ExecOptions,
) -> Result<ExecStats, ExecError> {
    let bufs = buffers
        .iter()
        .enumerate()
        .map(|(i, t)| GlobalBuf::new(format!("buf{i}"), Some(&t.data), t.data.len() as u64, false))
        .collect::<Result<Vec<_>, _>>()?;
    let mem = GlobalMem { bufs };
    let stats = run_launches(&mem, &[(k, args)], opts)?;
    for (t, b) in buffers.iter_mut().zip(&mem.bufs) {
        t.data = b.to_bytes()?;
    }
    Ok(stats)
}

fn run_launches(
    mem: &GlobalMem,
    launches: &[(&Kernel, &[LaunchArg])],
    opts: &ExecOptions,
) -> Result<ExecStats, ExecError> {
    let ctas = |k: &Kernel| k.grid.iter().map(|&g| g as u64).product::<u64>();
    let total: u64 = launches.iter().map(|(k, _)| ctas(k)).sum();
    let done = AtomicU64::new(0);
    let mut stats = ExecStats::default();
    // Kernels launched several times get their slots once.
    let mut in_slots: Vec<(*const Kernel, slots::SlotKernel)> = Vec::new();
    for &(k, args) in launches {
        let si = match in_slots.iter().position(|(p, _)| std::ptr::eq(*p, k)) {
            Some(i) => i,
            None => {
                in_slots.push((k as *const Kernel, slots::assign_slots(k)?));
                in_slots.len() - 1
            }
        };
        let sk = &in_slots[si].1;
        let params = launch_params(sk, mem, args)?;
        let n = ctas(k);
        // The lowest-numbered faulting CTA wins, so the reported fault is deterministic:
        // CTAs above a known fault are skipped, those below always run.
        let first_fault = AtomicU64::new(u64::MAX);
        let fault: Mutex<Option<(u64, ExecError)>> = Mutex::new(None);
        let lanes = AtomicU64::new(0);
        (0..n).into_par_iter().for_each_init(
            || cta::Cta::new(sk, mem, &params),
            |st, c| {
                if c > first_fault.load(Ordering::Relaxed) {
                    return;
                }
                let before = st.lane_instructions;
                if let Err(e) = st.run(c) {
                    let mut f = fault.lock().unwrap_or_else(|p| p.into_inner());
                    if f.as_ref().is_none_or(|(fc, _)| c < *fc) {
                        *f = Some((c, e));
                        first_fault.fetch_min(c, Ordering::Relaxed);
                    }
                }
                lanes.fetch_add(st.lane_instructions - before, Ordering::Relaxed);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(cb) = opts.progress {
                    cb(d, total);
                }
            },
        );
        if let Some((_, e)) = fault.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        stats.ctas += n;
        stats.lane_instructions += lanes.into_inner();
    }
    Ok(stats)
}

/// The fake generic address of tensor-map parameter `param` (what [`Op::Param`] gives for
/// it): far above every buffer's window, so that an ordinary load through it is a wild
/// address, 128 bytes per parameter.
///
/// [`Op::Param`]: tessel_ir::kernel::Op::Param
fn tensor_map_address(param: usize) -> u64 {
    0xF000_0000_0000_0000 | (param as u64) << 7
}

/// A tensor map as one launch passes it: its parameter's address, its description and the
/// base address of its buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchMap {
    pub addr: u64,
    pub desc: TensorMapDesc,
    pub base: u64,
}

/// The values of one launch's parameters: buffer base addresses, `u32` scalars and
/// tensor-map addresses ([`tensor_map_address`]), and the tensor maps themselves.
pub(crate) struct LaunchParams {
    pub values: Vec<u64>,
    pub maps: Vec<LaunchMap>,
}

/// Parameter values of one launch. A tensor map is checked against its buffer
/// ([`TensorMapDesc::check`]; its dtype is the program verifier's to check).
fn launch_params(
    sk: &slots::SlotKernel,
    mem: &GlobalMem,
    args: &[LaunchArg],
) -> Result<LaunchParams, ExecError> {
    let bad = |msg: String| ExecError::BadLaunch {
        kernel: sk.name.clone(),
        msg,
    };
    if args.len() != sk.params.len() {
        return Err(bad(format!(
            "{} arguments for {} parameters",
            args.len(),
            sk.params.len()
        )));
    }
    let mut maps = Vec::new();
    let values = sk
        .params
        .iter()
        .zip(args)
        .enumerate()
        .map(|(i, (kind, arg))| match (kind, arg) {
            (ParamKind::Ptr { .. }, LaunchArg::Buffer(b)) => {
                let idx = b.as_u32() as usize;
                if idx >= mem.bufs.len() {
                    return Err(bad(format!("argument {i}: buffer {b} does not exist")));
                }
                Ok(base_address(idx))
            }
            (ParamKind::U32, LaunchArg::U32(v)) => Ok(*v as u64),
            (ParamKind::TensorMap, LaunchArg::TensorMap(t)) => {
                let idx = t.buffer.as_u32() as usize;
                let Some(b) = mem.bufs.get(idx) else {
                    return Err(bad(format!(
                        "argument {i}: the tensor map's buffer {} does not exist",
                        t.buffer
                    )));
                };
                t.check(b.size)
                    .map_err(|m| bad(format!("argument {i}: tensor map over `{}`: {m}", b.name)))?;
                let addr = tensor_map_address(i);
                maps.push(LaunchMap {
                    addr,
                    desc: *t,
                    base: base_address(idx),
                });
                Ok(addr)
            }
            _ => Err(bad(format!(
                "argument {i} ({arg:?}) does not match {kind:?}"
            ))),
        })
        .collect::<Result<Vec<u64>, ExecError>>()?;
    Ok(LaunchParams { values, maps })
}
