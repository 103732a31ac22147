//! Running a compiled [`Program`] on the GPU through `tessel-cuda`: the PTX module of its
//! kernels, its buffers allocated and uploaded, its launches as data, run once or timed.

use crate::Error;
use tessel_cuda::{
    check_buffers, Arg, Buffer, BufferRequirement, ExternalBuffer, ExternalStream, Gpu, KernelCall,
    Launch, Module, TensorMap, TensorMapDtype, TensorMapSwizzle, TiledMap,
};
use tessel_ir::kernel::{
    BufferRole, LaunchArg, Program, TensorMapDesc, TensorMapSwizzle as IrSwizzle,
};
use tessel_ir::DType;
use tessel_passes::{PtxHeader, Target};
use tessel_ptx::PtxOptions;
use tessel_ref::compare::CompareError;
use tessel_ref::{bit_diff, BitDiff, Tensor};

type Result<T, E = Error> = std::result::Result<T, E>;

/// A program loaded on the GPU with its buffers allocated.
pub struct Loaded<'g> {
    pub module: Module,
    pub buffers: Vec<Buffer>,
    pub program: &'g Program,
}

/// The PTX writer's options for the header `h` a compiled step carries
/// (`tessel_passes::Compiled::ptx`, from its Target): the one way `build`, `explain` and
/// [`load`] make them.
pub fn ptx_options(h: &PtxHeader) -> PtxOptions {
    PtxOptions::with_header(h.version, &h.target)
}

/// The PTX module of all of a program's kernels under the header `h` of the step they were
/// compiled in.
pub fn ptx_of(p: &Program, h: &PtxHeader) -> Result<String> {
    let ks: Vec<_> = p.kernels.values().collect();
    Ok(tessel_ptx::write_module(&ks, &ptx_options(h))?)
}

/// The [`Target`] of a GPU, from its properties; the per-thread register limit is the ISA's
/// (not queryable), and the datasheet peaks are those of the preset of the same chip, when
/// the name says which.
pub fn target_of(p: &tessel_cuda::Properties) -> Target {
    let preset = if p.name.contains("H200") {
        Some(Target::h200())
    } else if p.name.contains("H100") {
        Some(Target::h100())
    } else {
        None
    };
    Target {
        name: p.name.clone(),
        compute_capability: p.compute_capability,
        sm_count: p.sm_count,
        max_threads_per_cta: p.max_threads_per_block,
        max_shared_per_cta: p.max_shared_bytes_per_block_optin,
        max_shared_per_sm: p.max_shared_bytes_per_sm,
        registers_per_sm: p.registers_per_sm,
        max_registers_per_thread: 255,
        max_warps_per_sm: p.max_threads_per_sm / 32,
        l2_bytes: p.l2_bytes,
        features: tessel_passes::Features::of_compute_capability(p.compute_capability),
        peaks: preset.and_then(|t| t.peaks),
    }
}

/// Loads `p` under the PTX header `h` of the step it was compiled in, and allocates its
/// buffers (inputs uploaded, everything else poisoned with 0xFF bytes so that an element no
/// kernel writes reads back as NaN). An `inout` input is one buffer: uploaded here, updated
/// in place by the kernels, and read back by [`Loaded::outputs`] as the step output of its
/// name.
pub fn load<'g>(gpu: &Gpu, p: &'g Program, h: &PtxHeader, inputs: &[Tensor]) -> Result<Loaded<'g>> {
    let module = Module::load(gpu, &ptx_of(p, h)?).map_err(Error::LoadModule)?;
    let buffers = p
        .buffers
        .values()
        .map(|decl| Buffer::alloc(gpu, (decl.ty.size_bytes() as usize).max(1)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut loaded = Loaded {
        module,
        buffers,
        program: p,
    };
    loaded.reset(inputs)?;
    Ok(loaded)
}

impl Loaded<'_> {
    /// Puts every buffer back to its state before a run: inputs (and `inout` tensors)
    /// uploaded from `inputs`, everything else poisoned with 0xFF bytes.
    pub fn reset(&mut self, inputs: &[Tensor]) -> Result<()> {
        for ((_, decl), b) in self.program.buffers.iter().zip(&mut self.buffers) {
            match decl.role {
                BufferRole::Input(i) | BufferRole::InOut(i) => {
                    b.upload(&inputs[i as usize].data)?
                }
                _ => b.fill(0xFF)?,
            }
        }
        Ok(())
    }

    /// The launches of the program as data, over `buffers`.
    ///
    /// # Errors
    /// A tensor map the driver's rules reject ([`tensor_map`]).
    pub fn calls<'a>(&'a self, buffers: &'a [Buffer]) -> Result<Vec<KernelCall<'a>>> {
        let refs: Vec<&Buffer> = buffers.iter().collect();
        calls_over(&self.module, self.program, &refs)
    }

    /// Runs every launch once, in order, checked.
    pub fn run(&self, gpu: &Gpu) -> Result<()> {
        for c in self.calls(&self.buffers)? {
            self.module
                .launch(c.kernel, c.launch, &c.args)
                .map_err(|error| Error::Kernel {
                    kernel: c.kernel.to_string(),
                    error,
                })?;
        }
        gpu.synchronize()?;
        Ok(())
    }

    /// Runs every launch once as one CUDA graph ([`Gpu::run_graph`]): programmatic
    /// launches overlap the kernel ahead of them, as in production.
    pub fn run_graph(&self, gpu: &Gpu) -> Result<()> {
        if self.program.launches.is_empty() {
            return Ok(());
        }
        Ok(gpu.run_graph(&self.calls(&self.buffers)?)?)
    }

    /// The program's outputs, read back.
    pub fn outputs(&self) -> Result<Vec<Tensor>> {
        self.program
            .outputs
            .iter()
            .map(|(_, b)| {
                Ok(Tensor {
                    ty: self.program.buffers[*b].ty.clone(),
                    data: self.buffers[b.as_u32() as usize].download()?,
                })
            })
            .collect()
    }
}

/// The tensor map a launch describes, encoded over `buffer` (its device copy) by the driver.
///
/// # Errors
/// A map `tessel_cuda`'s host check or the driver rejects.
pub fn tensor_map(t: &TensorMapDesc, buffer: &Buffer) -> Result<TensorMap> {
    Ok(TensorMap::encode_tiled(buffer, &tiled_map(t))?)
}

/// The runtime's form of the tensor map a launch describes.
fn tiled_map(t: &TensorMapDesc) -> TiledMap {
    let dtype = match t.dtype {
        DType::Bf16 => TensorMapDtype::Bf16,
        DType::F16 => TensorMapDtype::F16,
        DType::F32 => TensorMapDtype::F32,
        DType::I32 => TensorMapDtype::I32,
        DType::Bool => TensorMapDtype::U8,
    };
    let swizzle = match t.swizzle {
        IrSwizzle::None => TensorMapSwizzle::None,
        IrSwizzle::B32 => TensorMapSwizzle::B32,
        IrSwizzle::B64 => TensorMapSwizzle::B64,
        IrSwizzle::B128 => TensorMapSwizzle::B128,
    };
    let rank = t.rank.clamp(1, 5) as usize;
    TiledMap {
        dtype,
        dims: t.dims[..rank].to_vec(),
        strides: t.strides[..rank - 1].to_vec(),
        box_dims: t.box_dims[..rank].to_vec(),
        swizzle,
        offset: 0,
    }
}

/// The geometry of launch `i` of a program, of kernel `k`. A kernel that waits on the grid
/// ahead of it (`griddepcontrol.wait`, `Kernel::waits_on_prior_grid`) is launched with
/// programmatic stream serialization, except the program's first: what precedes that one is
/// the caller's work (copies, another program, a collective), which the program does not
/// overlap.
pub fn launch_of(k: &tessel_ir::kernel::Kernel, i: usize) -> Launch {
    Launch {
        grid: k.grid,
        block: k.block,
        shared_bytes: k.dynamic_shared_bytes(),
        programmatic: i > 0 && k.waits_on_prior_grid(),
    }
}

/// The launches of `p`, loaded as `module`, as data: `buffers[i]` is the program's buffer i.
///
/// # Errors
/// A tensor map argument the driver's rules reject ([`tensor_map`]).
pub fn calls_over<'a>(
    module: &'a Module,
    p: &'a Program,
    buffers: &[&'a Buffer],
) -> Result<Vec<KernelCall<'a>>> {
    p.launches
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let k = &p.kernels[l.kernel];
            Ok(KernelCall {
                module,
                kernel: &k.name,
                launch: launch_of(k, i),
                args: l
                    .args
                    .iter()
                    .map(|a| {
                        Ok(match a {
                            LaunchArg::Buffer(b) => Arg::Buffer(buffers[b.as_u32() as usize]),
                            LaunchArg::U32(x) => Arg::U32(*x),
                            LaunchArg::TensorMap(t) => {
                                Arg::TensorMap(tensor_map(t, buffers[t.buffer.as_u32() as usize])?)
                            }
                        })
                    })
                    .collect::<Result<_>>()?,
            })
        })
        .collect()
}

/// Loads `p` (under `h`, its step's PTX header), runs it once on `inputs` and reads its
/// outputs back.
pub fn run_once(gpu: &Gpu, p: &Program, h: &PtxHeader, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let l = load(gpu, p, h, inputs)?;
    l.run(gpu)?;
    l.outputs()
}

/// The outputs of one program run twice on the GPU from the same inputs and poisoned
/// buffers, in `program.outputs` order.
#[derive(Debug, Clone)]
pub struct GpuRuns {
    /// Run checked ([`Loaded::run`]): each launch waited for, so a fault names its kernel
    /// and no kernel overlaps another.
    pub checked: Vec<Tensor>,
    /// Run as one CUDA graph ([`Loaded::run_graph`]): programmatic launches overlap.
    pub graph: Vec<Tensor>,
}

impl GpuRuns {
    /// Per output, how the graph's bits differ from the checked run's (identical where no
    /// overlapping kernels raced).
    ///
    /// # Errors
    /// Outputs whose dtypes or sizes differ between the runs (not from one program).
    pub fn graph_diffs(&self) -> std::result::Result<Vec<BitDiff>, CompareError> {
        self.graph
            .iter()
            .zip(&self.checked)
            .map(|(g, c)| bit_diff(g, c))
            .collect()
    }
}

/// Loads `p` (under `h`, its step's PTX header), runs it checked, then resets its buffers
/// and runs it again as one CUDA graph, and reads both runs' outputs back. A program's
/// kernels are deterministic (no atomics, one reduction order), so the two must agree bit
/// for bit; where they do not, overlapping kernels race ([`GpuRuns::graph`] is the
/// production path).
pub fn run_checked_and_graph(
    gpu: &Gpu,
    p: &Program,
    h: &PtxHeader,
    inputs: &[Tensor],
) -> Result<GpuRuns> {
    let mut l = load(gpu, p, h, inputs)?;
    l.run(gpu)?;
    let checked = l.outputs()?;
    l.reset(inputs)?;
    l.run_graph(gpu)?;
    Ok(GpuRuns {
        checked,
        graph: l.outputs()?,
    })
}

/// Loads `p` (under `h`, its step's PTX header), runs it once as one CUDA graph
/// ([`Loaded::run_graph`]: programmatic launches overlap, as in production) on `inputs` and
/// reads its outputs back. A fault is reported for the graph as a whole: [`run_once`] names
/// the kernel.
pub fn run_graph_once(
    gpu: &Gpu,
    p: &Program,
    h: &PtxHeader,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    let l = load(gpu, p, h, inputs)?;
    l.run_graph(gpu)?;
    l.outputs()
}

/// The alignment every buffer of a program needs, bytes: its widest access (a 16-byte
/// vector load or store, a TMA tile) — what an owned buffer from `cuMemAlloc` always has.
pub const BUFFER_ALIGN: u64 = 16;

/// What each of `p`'s buffers needs of memory bound to it, in `p.buffers` order: its name,
/// its bytes (`ty.size_bytes()`) and [`BUFFER_ALIGN`].
pub fn external_requirements(p: &Program) -> Vec<BufferRequirement> {
    p.buffers
        .iter()
        .map(|(_, decl)| BufferRequirement {
            name: decl.name.clone(),
            bytes: decl.ty.size_bytes(),
            align: BUFFER_ALIGN,
        })
        .collect()
}

/// Enqueues every launch of `p`, loaded as `module`, on `stream` over `buffers`: memory
/// tessel does not own, one per program buffer in `p.buffers` order (inputs, outputs,
/// `inout`s and intermediates alike; the caller fills the inputs and reads the outputs, in
/// `stream`'s order). Nothing is allocated, copied or synchronized here (except in checked
/// mode, where each launch is waited for). The safety contract is tessel-cuda's
/// ([`tessel_cuda::external`]): the memory and the stream outlive the launches.
///
/// # Errors
/// [`Error::Device`] with [`tessel_cuda::Error::External`] when the buffers do not fit
/// [`external_requirements`] (checked before any launch); [`Error::Kernel`] when a launch is
/// refused or faults; [`Error::Device`] for a tensor map the driver rejects.
pub fn launch_external(
    gpu: &Gpu,
    module: &Module,
    p: &Program,
    stream: &ExternalStream,
    buffers: &[ExternalBuffer],
) -> Result<()> {
    check_buffers(&external_requirements(p), buffers).map_err(tessel_cuda::Error::from)?;
    for (i, l) in p.launches.iter().enumerate() {
        let k = &p.kernels[l.kernel];
        let args = l
            .args
            .iter()
            .map(|a| {
                Ok(match a {
                    LaunchArg::Buffer(b) => Arg::External(buffers[b.as_u32() as usize]),
                    LaunchArg::U32(x) => Arg::U32(*x),
                    LaunchArg::TensorMap(t) => Arg::TensorMap(TensorMap::encode_tiled_external(
                        gpu,
                        &buffers[t.buffer.as_u32() as usize],
                        &tiled_map(t),
                    )?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let launch = launch_of(k, i);
        module
            .launch_on(stream, &k.name, launch, &args)
            .map_err(|error| Error::Kernel {
                kernel: k.name.clone(),
                error,
            })?;
    }
    Ok(())
}

/// A tensor in memory tessel does not own, named as a program buffer: a step input or
/// output by its name, an intermediate by its buffer name (`t3`).
#[derive(Debug, Clone)]
pub struct ExternalTensor {
    /// The input's, output's or intermediate's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape, elements per dim, row-major and contiguous.
    pub shape: Vec<u64>,
    /// Its memory.
    pub buffer: ExternalBuffer,
}

/// The memory of every buffer of `p`, in `p.buffers` order, from `tensors` by name (an
/// `inout` buffer by its input or its output name, or both when they are the same memory),
/// each of the buffer's dtype and shape exactly, then checked against
/// [`external_requirements`]: what [`launch_external`] takes.
///
/// # Errors
/// [`Error::Weights`] listing every unknown name, buffer given twice with two memories,
/// buffer not given, dtype or shape that differs, and memory the step writes that overlaps
/// another buffer's (two inputs may share memory); [`Error::Device`] with
/// [`tessel_cuda::Error::External`] for memory too short or misaligned.
pub fn bind_external(p: &Program, tensors: &[ExternalTensor]) -> Result<Vec<ExternalBuffer>> {
    let buffer_of = |name: &str| {
        p.inputs
            .iter()
            .chain(&p.outputs)
            .find(|(n, _)| n == name)
            .map(|(_, b)| *b)
            .or_else(|| {
                p.buffers
                    .iter()
                    .find(|(_, d)| d.role == BufferRole::Temp && d.name == name)
                    .map(|(b, _)| b)
            })
    };
    let mut bound: Vec<Option<ExternalBuffer>> = vec![None; p.buffers.len()];
    let mut problems = Vec::new();
    for t in tensors {
        let Some(b) = buffer_of(&t.name) else {
            problems.push(format!("step `{}` has no buffer `{}`", p.name, t.name));
            continue;
        };
        let ty = &p.buffers[b].ty;
        if t.dtype != ty.dtype || t.shape != ty.shape.0 {
            problems.push(format!(
                "`{}` is {ty}, given {}{}",
                t.name,
                t.dtype,
                tessel_ir::Shape(t.shape.clone())
            ));
            continue;
        }
        let slot = &mut bound[b.as_u32() as usize];
        match slot {
            Some(prev) if *prev != t.buffer => {
                problems.push(format!("`{}` is given twice, with two memories", t.name))
            }
            _ => *slot = Some(t.buffer),
        }
    }
    for (b, decl) in p.buffers.iter() {
        if bound[b.as_u32() as usize].is_none() {
            let name = p
                .inputs
                .iter()
                .chain(&p.outputs)
                .find(|(_, x)| *x == b)
                .map_or(decl.name.as_str(), |(n, _)| n.as_str());
            if !problems.iter().any(|m| m.contains(&format!("`{name}`"))) {
                problems.push(format!("`{name}` ({}) is not given", decl.ty));
            }
        }
    }
    // Memory the step writes (an output, an `inout`, an intermediate) may overlap no other
    // buffer: the kernels would read what they overwrite, and a kernel that loads a step
    // input before `griddepcontrol.wait` would race the write (two inputs may share memory).
    if problems.is_empty() {
        let named = |b: tessel_ir::BufferId| {
            p.inputs
                .iter()
                .chain(&p.outputs)
                .find(|(_, x)| *x == b)
                .map_or(p.buffers[b].name.clone(), |(n, _)| n.clone())
        };
        let ids: Vec<_> = p.buffers.keys().collect();
        for (i, &a) in ids.iter().enumerate() {
            for &b in &ids[i + 1..] {
                let (Some(ma), Some(mb)) = (bound[a.as_u32() as usize], bound[b.as_u32() as usize])
                else {
                    continue;
                };
                let written =
                    |x: tessel_ir::BufferId| !matches!(p.buffers[x].role, BufferRole::Input(_));
                let overlap = !ma.is_empty()
                    && !mb.is_empty()
                    && ma.address() < mb.address() + mb.len()
                    && mb.address() < ma.address() + ma.len();
                if overlap && (written(a) || written(b)) {
                    let w = if written(a) { a } else { b };
                    problems.push(format!(
                        "`{}` and `{}` share memory, and the step writes `{}`: pass separate memory",
                        named(a),
                        named(b),
                        named(w)
                    ));
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(crate::WeightsError::new(problems.join("\n")).into());
    }
    let buffers: Vec<ExternalBuffer> = bound.into_iter().flatten().collect();
    check_buffers(&external_requirements(p), &buffers).map_err(tessel_cuda::Error::from)?;
    Ok(buffers)
}
