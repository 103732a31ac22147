//! Whether a step fits in memory, estimated before anything is allocated: `run`, `bench`,
//! `invariance` and `tp-check` refuse a step that does not fit with an error naming its
//! largest tensors (instead of allocating until the allocator aborts the process), and
//! `check` skips one its CPU references cannot hold. One estimate for all of them, on the
//! CPU executor (against the host's available memory) and on the GPU (against the device's
//! free memory, and the host's for the inputs and outputs it holds).

use anyhow::{bail, Result};
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::ranks::Rank;
use tessel_ir::TensorType;

/// Where a program runs.
pub enum Place<'g> {
    /// The CPU kernel-IR executor: inputs, every buffer and the outputs read back are host
    /// memory.
    Executor,
    /// A GPU: the buffers in device memory; the inputs and outputs on the host.
    Gpu(&'g tessel_cuda::Gpu),
}

/// The memory available for new allocations on the host, bytes (Linux `/proc/meminfo`,
/// `MemAvailable`), if known.
pub fn available_host_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes of every buffer of `p` (the executor holds each in whole 4-byte words; the GPU
/// allocates at least a byte for an empty one).
pub fn buffer_bytes(p: &Program) -> u64 {
    p.buffers
        .values()
        .map(|b| b.ty.size_bytes().div_ceil(4).max(1) * 4)
        .sum()
}

/// `p`'s device memory in words: its inputs (the caller's, `inout` ones included), its
/// outputs, and its intermediates — the tensors written by one kernel and read by later
/// ones (a training step's saved activations among them) — every buffer allocated for the
/// whole step, as `run` and `bench` allocate them.
pub fn footprint(p: &Program) -> String {
    use tessel_ir::kernel::BufferRole;
    let (mut inputs, mut outputs, mut temps) = (0u64, 0u64, 0u64);
    for b in p.buffers.values() {
        let bytes = b.ty.size_bytes();
        match b.role {
            BufferRole::Input(_) | BufferRole::InOut(_) => inputs += bytes,
            BufferRole::Output => outputs += bytes,
            BufferRole::Temp => temps += bytes,
        }
    }
    let size = |b: u64| match b {
        0..1_000 => format!("{b} B"),
        1_000..1_000_000 => format!("{:.1} kB", b as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        _ => gb(b),
    };
    format!(
        "memory {} (inputs {}, outputs {}, intermediates {})",
        size(inputs + outputs + temps),
        size(inputs),
        size(outputs),
        size(temps)
    )
}

/// Bytes of `p`'s inputs (made on the host before it runs) and of its outputs (read back
/// to the host after).
fn io_bytes(p: &Program) -> (u64, u64) {
    let size = |b: &tessel_ir::BufferId| p.buffers[*b].ty.size_bytes();
    (
        p.inputs.iter().map(|(_, b)| size(b)).sum(),
        p.outputs.iter().map(|(_, b)| size(b)).sum(),
    )
}

/// `step` (the program `whole`, or the ranks it runs as, `ranks`) must fit where it runs:
/// checked before its inputs are made. The host holds the inputs and the outputs read
/// back; the executor's buffers are host memory too (every rank's, as the executor holds
/// them all), the GPU's device memory (the largest rank's: what a rank on a GPU of its own
/// needs, and no more than every rank on GPU 0 in turn needs, so a step is never refused
/// that could run). Where the free memory cannot be known, nothing is refused.
///
/// Errors: the estimate exceeds what is available, naming the step, both numbers, the
/// largest tensors with their types and sizes, and the dims given.
pub fn ensure_fits(
    step: &str,
    whole: &Program,
    ranks: Option<&[Rank<Program>]>,
    place: &Place,
    dims: &[(String, u64)],
) -> Result<()> {
    let (inputs, outputs) = io_bytes(whole);
    let rank_bytes =
        |r: &Rank<Program>| -> u64 { r.phases.iter().map(|ph| buffer_bytes(&ph.body)).sum() };
    let (all_ranks, largest_rank) = match ranks {
        Some(rs) => (
            rs.iter().map(rank_bytes).sum(),
            rs.iter().map(rank_bytes).max().unwrap_or(0),
        ),
        None => (buffer_bytes(whole), buffer_bytes(whole)),
    };
    let host = inputs + outputs;
    let (need, have, what) = match place {
        Place::Executor => (
            host + all_ranks,
            available_host_bytes(),
            "on the CPU executor (inputs, its buffers and the outputs read back, in host memory)",
        ),
        Place::Gpu(gpu) => {
            let free = gpu.memory_info().ok().map(|(free, _)| free as u64);
            if let Some(free) = free.filter(|&f| largest_rank > f) {
                let what = if ranks.is_some() {
                    "in GPU memory (the buffers of its largest rank)"
                } else {
                    "in GPU memory (its buffers)"
                };
                refuse(step, whole, largest_rank, free, what, dims)?;
            }
            (
                host,
                available_host_bytes(),
                "in host memory (the inputs and the outputs read back from the GPU)",
            )
        }
    };
    match have {
        Some(have) if need > have => refuse(step, whole, need, have, what, dims),
        _ => Ok(()),
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// The error for a step that needs `need` bytes where `have` are available.
fn refuse(
    step: &str,
    p: &Program,
    need: u64,
    have: u64,
    what: &str,
    dims: &[(String, u64)],
) -> Result<()> {
    let mut tensors: Vec<(&str, &str, &TensorType)> = p
        .buffers
        .values()
        .map(|b| {
            let kind = match b.role {
                BufferRole::Input(_) => "input",
                BufferRole::InOut(_) => "inout",
                BufferRole::Output => "output",
                BufferRole::Temp => "intermediate",
            };
            (kind, b.name.as_str(), &b.ty)
        })
        .collect();
    tensors.sort_by_key(|(_, n, t)| (std::cmp::Reverse(t.size_bytes()), *n));
    let largest: Vec<String> = tensors
        .iter()
        .take(3)
        .map(|(kind, name, ty)| format!("{kind} `{name}` {ty} ({})", gb(ty.size_bytes())))
        .collect();
    let given = if dims.is_empty() {
        String::new()
    } else {
        let d: Vec<String> = dims.iter().map(|(n, v)| format!("--dim {n}={v}")).collect();
        format!(" (given {})", d.join(" "))
    };
    bail!(
        "step `{step}` does not fit in memory: it needs about {} {what}, and {} is available. \
         Its largest tensors: {}. Run it at smaller dims{given}",
        gb(need),
        gb(have),
        tessel_driver::words::and_list(&largest)
    )
}
