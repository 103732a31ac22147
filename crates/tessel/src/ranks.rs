//! Tensor-parallel ranks on GPUs (issue 10): each rank's phases loaded on its GPU, its
//! slots (step inputs, phase outputs, all-gathered tensors) allocated once, and the step run
//! phase by phase with the all-gathers between — over NCCL with one thread and one GPU per
//! rank, or, on a machine with fewer GPUs than ranks, every rank on one GPU one after
//! another with the all-gathers as device copies ([`Transport::Loopback`]: the same
//! kernels, to check their bits; not a measure of speed).

use crate::device::{calls_over, ptx_of};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use tessel_cuda::nccl::{Communicator, UniqueId};
use tessel_cuda::{Buffer, Gpu, KernelCall, Module, Timing};
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::ranks::Rank;
use tessel_passes::PtxHeader;
use tessel_ref::ranks::{assemble, shard};
use tessel_ref::Tensor;

/// How the all-gathers move data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// NCCL, one GPU and one thread per rank.
    Nccl,
    /// Every rank on GPU 0, one after another; an all-gather is device copies.
    Loopback,
}

impl Transport {
    /// NCCL when there is a GPU per rank and `libnccl.so` loads, else loopback; with the
    /// reason, for the user.
    pub fn choose(tp: u32) -> (Transport, String) {
        let gpus = Gpu::count();
        if gpus < tp as usize {
            return (
                Transport::Loopback,
                format!(
                    "{tp} ranks on GPU 0 one after another, all-gathers as device copies ({gpus} GPU{} here; NCCL needs one per rank)",
                    if gpus == 1 { "" } else { "s" }
                ),
            );
        }
        if !tessel_cuda::nccl::available() {
            return (
                Transport::Loopback,
                format!("{tp} ranks on GPU 0 one after another: libnccl.so was not found (docs/tensor-parallel.md says how to provide it)"),
            );
        }
        (
            Transport::Nccl,
            if tp == 1 {
                "one rank on GPU 0".to_string()
            } else {
                format!("NCCL over GPUs 0 to {}, one thread per rank", tp - 1)
            },
        )
    }
}

/// What a rank that loaded says when another did not.
const OTHER_FAILED: &str = "another rank failed to load";

/// One rank loaded on a GPU: a module per phase, every slot allocated.
struct Loaded<'r> {
    rank: &'r Rank<Program>,
    modules: Vec<Module>,
    storage: Vec<Buffer>,
    /// The type of what each storage buffer holds.
    types: Vec<tessel_ir::TensorType>,
    /// Slot name → storage index.
    slot: HashMap<String, usize>,
    /// Per phase, program buffer index → storage index.
    bound: Vec<Vec<usize>>,
}

impl<'r> Loaded<'r> {
    /// Loads `rank` on `gpu` under `ptx`, the PTX header of the step its phases were
    /// compiled in, with its step inputs `inputs` (the rank's blocks, from [`shard`]); every
    /// other slot is poisoned with 0xFF.
    fn new(
        gpu: &Gpu,
        rank: &'r Rank<Program>,
        ptx: &PtxHeader,
        inputs: &[Tensor],
    ) -> Result<Loaded<'r>> {
        let mut storage = Vec::new();
        let mut types = Vec::new();
        let mut slot = HashMap::new();
        for (i, t) in rank.inputs.iter().zip(inputs) {
            slot.insert(i.name.clone(), storage.len());
            storage.push(Buffer::from_bytes(gpu, &t.data)?);
            types.push(i.ty.clone());
        }
        let poisoned = |bytes: u64| -> Result<Buffer> {
            let mut b = Buffer::alloc(gpu, (bytes as usize).max(1))?;
            b.fill(0xFF)?;
            Ok(b)
        };
        let mut modules = Vec::new();
        let mut bound = Vec::new();
        for (k, phase) in rank.phases.iter().enumerate() {
            let p = &phase.body;
            let module = Module::load(gpu, &ptx_of(p, ptx)?)
                .with_context(|| format!("loading rank {}'s phase {k}", rank.rank))?;
            modules.push(module);
            let mut map = Vec::with_capacity(p.buffers.len());
            for (b, decl) in p.buffers.iter() {
                let at = match decl.role {
                    BufferRole::Input(i) | BufferRole::InOut(i) => {
                        let name = &p.inputs[i as usize].0;
                        *slot.get(name).with_context(|| {
                            format!(
                                "rank {} phase {k}: slot `{name}` is read before anything wrote it",
                                rank.rank
                            )
                        })?
                    }
                    BufferRole::Output | BufferRole::Temp => {
                        storage.push(poisoned(decl.ty.size_bytes())?);
                        types.push(decl.ty.clone());
                        storage.len() - 1
                    }
                };
                debug_assert_eq!(map.len(), b.as_u32() as usize);
                map.push(at);
            }
            for (name, b) in &p.outputs {
                slot.insert(name.clone(), map[b.as_u32() as usize]);
            }
            for e in &phase.exchanges {
                let mut stacked = e.ty.clone();
                stacked.shape.0.insert(0, rank.tp as u64);
                slot.insert(e.recv.clone(), storage.len());
                storage.push(poisoned(stacked.size_bytes())?);
                types.push(stacked);
            }
            bound.push(map);
        }
        Ok(Loaded {
            rank,
            modules,
            storage,
            types,
            slot,
            bound,
        })
    }

    /// Phase `k`'s launches.
    fn calls(&self, k: usize) -> Result<Vec<KernelCall<'_>>> {
        let buffers: Vec<&Buffer> = self.bound[k].iter().map(|&i| &self.storage[i]).collect();
        Ok(calls_over(
            &self.modules[k],
            &self.rank.phases[k].body,
            &buffers,
        )?)
    }

    fn launch(&self, k: usize) -> Result<()> {
        for c in self.calls(k)? {
            c.module
                .launch(c.kernel, c.launch, &c.args)
                .with_context(|| {
                    format!("rank {} phase {k}: kernel `{}`", self.rank.rank, c.kernel)
                })?;
        }
        Ok(())
    }

    /// Storage indices of an exchange's send and receive slots.
    fn exchange_slots(&self, send: &str, recv: &str) -> (usize, usize) {
        (self.slot[send], self.slot[recv])
    }

    /// The rank's outputs, read back, in [`Rank::outputs`] order.
    fn outputs(&self) -> Result<Vec<Tensor>> {
        let last = self.rank.phases.len();
        self.rank
            .outputs
            .iter()
            .map(|o| {
                let i = *self.slot.get(&o.slot).with_context(|| {
                    format!(
                        "rank {}: no slot `{}` after phase {last}",
                        self.rank.rank, o.slot
                    )
                })?;
                Ok(Tensor {
                    ty: self.types[i].clone(),
                    data: self.storage[i].download()?,
                })
            })
            .collect()
    }
}

/// Runs `work` on one thread per rank of `tp`, each with its GPU (ordinal = rank) and its
/// member of one NCCL communicator; the results in rank order. Every rank opens its GPU and
/// runs `prepare` (loading, allocating) before any joins the communicator: a rank that fails
/// there tells the others, and none is left waiting in `ncclCommInitRank` for it. The
/// error returned is the first failing rank's own.
fn on_every_rank<P, T: Send>(
    tp: usize,
    prepare: impl Fn(usize, &Gpu) -> Result<P> + Sync,
    work: impl Fn(usize, &Gpu, &Communicator, P) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let id = UniqueId::new()?;
    let ready = std::sync::Barrier::new(tp);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..tp)
            .map(|r| {
                let (prepare, work, ready, failed) = (&prepare, &work, &ready, &failed);
                s.spawn(move || -> Result<T> {
                    let prepared = Gpu::open(r)
                        .map_err(anyhow::Error::from)
                        .and_then(|gpu| Ok((prepare(r, &gpu)?, gpu)));
                    if prepared.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    ready.wait();
                    let (p, gpu) = prepared?;
                    if failed.load(Ordering::SeqCst) {
                        bail!(OTHER_FAILED);
                    }
                    let comm = Communicator::join(&gpu, r, tp, id)?;
                    work(r, &gpu, &comm, p)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a rank's thread panicked"))
            })
            .collect()
    });
    let mut oks = Vec::with_capacity(tp);
    let mut errors = Vec::new();
    for (r, res) in results.into_iter().enumerate() {
        match res {
            Ok(x) => oks.push(x),
            Err(e) => errors.push(e.context(format!("rank {r}"))),
        }
    }
    if errors.is_empty() {
        return Ok(oks);
    }
    // The first rank's own failure, rather than another's note that one failed.
    let own = errors
        .iter()
        .position(|e| !format!("{e:#}").contains(OTHER_FAILED));
    Err(errors.swap_remove(own.unwrap_or(0)))
}

/// One rank's whole step over NCCL: phases and all-gathers, stream ordered.
fn step_nccl(l: &mut Loaded<'_>, comm: &Communicator) -> Result<()> {
    for k in 0..l.rank.phases.len() {
        l.launch(k)?;
        for e in &l.rank.phases[k].exchanges {
            let (s, r) = l.exchange_slots(&e.send, &e.recv);
            let (send, recv) = two(&mut l.storage, s, r);
            comm.all_gather(send, recv).with_context(|| {
                format!("rank {} phase {k}: all-gather of `{}`", l.rank.rank, e.send)
            })?;
        }
    }
    Ok(())
}

/// `v[a]` shared and `v[b]` mutable (`a != b`).
fn two(v: &mut [Buffer], a: usize, b: usize) -> (&Buffer, &mut Buffer) {
    assert_ne!(a, b, "an all-gather's send and receive slots differ");
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&y[0], &mut x[b])
    }
}

/// The step's time on rank 0, per repetition.
#[derive(Clone, Debug)]
pub struct StepTimes {
    /// Every launch and collective queued one by one between CUDA events.
    pub events: Timing,
    /// The same captured once as a CUDA graph and replayed (no host gaps between
    /// launches); `None` where not tried (NCCL over several GPUs: a rank whose capture
    /// failed would leave the others waiting in a collective), `Err` if capture failed.
    pub graph: Option<std::result::Result<Timing, String>>,
}

/// Times `enqueue` (one step) on `gpu` between events, and captured as a graph when
/// `graph` is true.
fn time_step(
    gpu: &Gpu,
    (rounds, reps): (u32, u32),
    graph: bool,
    mut enqueue: impl FnMut() -> Result<()>,
) -> Result<StepTimes> {
    let mut queue = || enqueue().map_err(|e| tessel_cuda::Error::InvalidArgument(format!("{e:#}")));
    let events = gpu.time_events_with(rounds, reps, &mut queue)?;
    let graph = graph.then(|| {
        gpu.time_graph_with(rounds, reps, &mut queue)
            .map_err(|e| e.to_string())
    });
    Ok(StepTimes { events, graph })
}

/// The step run on the ranks, on GPUs, their phases loaded under `ptx` (the PTX header of
/// the step they were compiled in): each rank's inputs cut from `whole`, its outputs
/// read back and assembled ([`assemble`]: the ranks must agree bit for bit on every whole
/// output). With `timing = Some((rounds, reps))`, also the step's time per repetition on
/// rank 0 after its first run (NCCL: every rank runs the repetitions; the collectives
/// keep them in step).
pub fn run(
    ranks: &[Rank<Program>],
    ptx: &PtxHeader,
    whole: &[Tensor],
    transport: Transport,
    timing: Option<(u32, u32)>,
) -> Result<(Vec<Tensor>, Option<StepTimes>)> {
    let tp = ranks.len();
    let inputs: Vec<Vec<Tensor>> = ranks
        .iter()
        .map(|r| shard(r, whole))
        .collect::<Result<_, _>>()?;
    let (outputs, time) = match transport {
        Transport::Nccl => {
            let results = on_every_rank(
                tp,
                |r, gpu| Loaded::new(gpu, &ranks[r], ptx, &inputs[r]),
                |_, gpu, comm, mut l| {
                    step_nccl(&mut l, comm)?;
                    gpu.synchronize()?;
                    let out = l.outputs()?;
                    let time = match timing {
                        Some(t) => Some(time_step(gpu, t, tp == 1, || step_nccl(&mut l, comm))?),
                        None => None,
                    };
                    Ok((out, time))
                },
            )?;
            let time = results[0].1.clone();
            (
                results.into_iter().map(|(o, _)| o).collect::<Vec<_>>(),
                time,
            )
        }
        Transport::Loopback => {
            let gpu = Gpu::open(0)?;
            let mut loaded: Vec<Loaded<'_>> = ranks
                .iter()
                .zip(&inputs)
                .map(|(r, i)| Loaded::new(&gpu, r, ptx, i))
                .collect::<Result<_>>()?;
            // One staging buffer per exchange: the stacked tensor, copied to every rank.
            let mut stages: Vec<Buffer> = ranks[0]
                .exchanges()
                .map(|e| Buffer::alloc(&gpu, (e.ty.size_bytes() * tp as u64).max(1) as usize))
                .collect::<Result<_, _>>()?;
            step_loopback(&mut loaded, &mut stages)?;
            gpu.synchronize()?;
            let outputs = loaded.iter().map(|l| l.outputs()).collect::<Result<_>>()?;
            let time = match timing {
                Some(t) => Some(time_step(&gpu, t, true, || {
                    step_loopback(&mut loaded, &mut stages)
                })?),
                None => None,
            };
            (outputs, time)
        }
    };
    Ok((assemble(ranks, &outputs)?, time))
}

/// Every rank's step on one GPU: phase by phase, the ranks one after another, each
/// all-gather as copies through `stages` (one per exchange, in order).
fn step_loopback(loaded: &mut [Loaded<'_>], stages: &mut [Buffer]) -> Result<()> {
    let phases = loaded[0].rank.phases.len();
    let mut e_index = 0;
    for k in 0..phases {
        for l in loaded.iter() {
            l.launch(k)?;
        }
        for e in &loaded[0].rank.phases[k].exchanges {
            let stage = &mut stages[e_index];
            let bytes = e.ty.size_bytes() as usize;
            for (q, l) in loaded.iter().enumerate() {
                stage.copy_from_at(q * bytes, &l.storage[l.slot[&e.send]])?;
            }
            for l in loaded.iter_mut() {
                let r = l.slot[&e.recv];
                l.storage[r].copy_from(stage)?;
            }
            e_index += 1;
        }
    }
    Ok(())
}

/// One all-gather of the step timed against NCCL's all-reduce of the same tensor.
pub struct ReduceTiming {
    /// The slot sent.
    pub slot: String,
    /// Bytes each rank sends.
    pub bytes: u64,
    /// `ncclAllGather` of them, µs (median, rank 0).
    pub all_gather_us: f64,
    /// `ncclAllReduce` (f32 sum, in place) of a tensor of the same bytes, µs (median, rank
    /// 0): what a reduction with NCCL's own association would move.
    pub all_reduce_us: f64,
}

/// Times every all-gather of `rank0`'s step over NCCL on `tp` GPUs (one thread each), and
/// NCCL's all-reduce of the same bytes, each over `rounds` rounds of `reps`.
pub fn time_reductions(rank0: &Rank<Program>, rounds: u32, reps: u32) -> Result<Vec<ReduceTiming>> {
    let tp = rank0.tp as usize;
    let sizes: Vec<(String, u64)> = rank0
        .exchanges()
        .map(|e| (e.send.clone(), e.ty.size_bytes()))
        .collect();
    let per_rank = on_every_rank(
        tp,
        |_, gpu| {
            // A send, receive and reduce buffer per all-gather, allocated before any runs.
            sizes
                .iter()
                .map(|(_, bytes)| {
                    let b = (*bytes as usize).max(4);
                    Ok((
                        Buffer::alloc(gpu, b)?,
                        Buffer::alloc(gpu, b * tp)?,
                        Buffer::alloc(gpu, b)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()
        },
        |_, gpu, comm, mut bufs| {
            let mut out = Vec::new();
            for (send, recv, sum) in bufs.iter_mut() {
                let g = gpu.time_events_with(rounds, reps, || comm.all_gather(send, recv))?;
                let a = gpu.time_events_with(rounds, reps, || comm.all_reduce_f32(sum))?;
                out.push((g.median_us, a.median_us));
            }
            Ok(out)
        },
    )?;
    let first = per_rank.into_iter().next();
    Ok(sizes
        .into_iter()
        .zip(first.unwrap_or_default())
        .map(|((slot, bytes), (g, a))| ReduceTiming {
            slot,
            bytes,
            all_gather_us: g,
            all_reduce_us: a,
        })
        .collect())
}

/// Each kernel of rank `rank`'s phases timed alone on `gpu` (graph-captured, `rounds` rounds
/// of 20 launches), after one run of its step with the all-gathers replaced by copies of
/// its own tensors (only rank 0's block of a gathered slot holds data then: the times do
/// not depend on the values). Returns (phase, kernel, time).
pub fn time_kernels(
    gpu: &Gpu,
    (rank, ptx): (&Rank<Program>, &PtxHeader),
    inputs: &[Tensor],
    rounds: u32,
) -> Result<Vec<(usize, String, Timing)>> {
    let mine = shard(rank, inputs)?;
    let mut loaded = [Loaded::new(gpu, rank, ptx, &mine)?];
    let mut stages: Vec<Buffer> = rank
        .exchanges()
        .map(|e| Buffer::alloc(gpu, (e.ty.size_bytes() * rank.tp as u64).max(1) as usize))
        .collect::<Result<_, _>>()?;
    step_loopback(&mut loaded, &mut stages)?;
    gpu.synchronize()?;
    let l = &loaded[0];
    let mut out = Vec::new();
    for k in 0..rank.phases.len() {
        for mut c in l.calls(k)? {
            // Timed on its own, stream-ordered.
            c.launch.programmatic = false;
            let t = gpu.time_graph(std::slice::from_ref(&c), rounds, 20)?;
            out.push((k, c.kernel.to_string(), t));
        }
    }
    Ok(out)
}
