//! `tessel._tessel`: the compiler behind the Python package (python/tessel/), which does
//! the framework side — torch and numpy tensors checked by name, outputs allocated through
//! torch's caching allocator, the current stream — and calls in here with plain data.
//!
//! - [`compile`]: a file's step, compiled (tessel-driver) for a target with a profile and
//!   the schedule choices, or read from the on-disk cache (tessel-driver `cache`) when the
//!   same sources, dims, options and compiler build were compiled before.
//! - [`CompiledStep`]: its signature (parameters, results, which result is which
//!   parameter's memory, the workspace its intermediates need), [`CompiledStep::run_executor`]
//!   on bytes (the CPU path) and [`CompiledStep::launch`] on device addresses and a
//!   stream the caller owns (the zero-copy GPU path, tessel-cuda's external launch).
//!
//! Errors are exceptions: [`CompileError`] carries a source diagnostic's rendered report (or
//! the pass's error), [`ArgumentError`] an argument the step cannot take, [`DeviceError`] a
//! module the driver refuses or a launch that fails. All derive from [`TesselError`].

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use tessel_cuda::{ExternalBuffer, ExternalStream, Gpu, Module};
use tessel_driver::{cache, device, Config, Error, Source, Weights};
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::BufferId;
use tessel_passes::{Options, Profile, Target};
use tessel_ref::Tensor;

create_exception!(
    _tessel,
    TesselError,
    PyException,
    "Every error tessel raises."
);
create_exception!(
    _tessel,
    CompileError,
    TesselError,
    "A source the compiler refuses: its message is the rendered diagnostic report (file, line, the offending span, the error code), or the failing pass's error."
);
create_exception!(
    _tessel,
    ArgumentError,
    TesselError,
    "An argument the step cannot take: unknown, missing or given twice, or of the wrong dtype, shape, device, layout or alignment. The message names the argument."
);
create_exception!(
    _tessel,
    DeviceError,
    TesselError,
    "The GPU refused the step: the module could not be loaded, or a launch failed."
);

/// The error's message with every cause after it, one per line (a source report alone:
/// it already says everything).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(&format!("\n  caused by: {c}"));
        cause = c.source();
    }
    s
}

/// The exception for a driver error: source, read and pass errors are [`CompileError`]s;
/// a step the file does not have, dims left unbound and arguments that do not fit
/// [`ArgumentError`]s; the executor running out of host memory a `MemoryError`; the rest
/// [`DeviceError`]s.
fn raise(e: Error) -> PyErr {
    match &e {
        Error::Source(d) => CompileError::new_err(d.rendered.clone()),
        Error::UnboundDims(u) => {
            // The report's help names the command line's `--dim`; say it as Python does.
            let wanted: Vec<String> = u.dims.iter().map(|d| format!("{d:?}: ...")).collect();
            ArgumentError::new_err(format!(
                "step `{}` needs the dims {}: pass dims={{{}}}\n{}",
                u.step,
                u.dims.join(", "),
                wanted.join(", "),
                u.source_report.rendered
            ))
        }
        Error::Request(_) => ArgumentError::new_err(chain(&e)),
        Error::Read { .. }
        | Error::Compile { .. }
        | Error::Transform { .. }
        | Error::Ptx(_)
        | Error::Cache { .. } => CompileError::new_err(chain(&e)),
        Error::Weights(w) => ArgumentError::new_err(w.message().to_string()),
        Error::Executor {
            error: tessel_ref::ExecError::OutOfMemory { .. },
            ..
        } => pyo3::exceptions::PyMemoryError::new_err(chain(&e)),
        _ => DeviceError::new_err(chain(&e)),
    }
}

/// Where a result's memory comes from.
#[derive(Clone, Copy, Debug)]
enum ResultMemory {
    /// Its own buffer, which the caller allocates (or passes as `out`).
    Own,
    /// Parameter `n`'s buffer: an `inout` parameter updated in place, or an input returned
    /// as it is.
    Param(usize),
    /// The same buffer as result `n`, an earlier one (a value returned twice).
    Result(usize),
}

/// The GPU side of a step on one device: the device opened (its primary context, which
/// torch also uses) and the PTX module loaded into it.
struct OnDevice {
    gpu: Gpu,
    module: Module,
}

/// A result as Python sees it: name, dtype, shape, and where its memory comes from.
type ResultInfo = (
    String,
    &'static str,
    Vec<u64>,
    Option<(&'static str, usize)>,
);

/// One compiled step: its kernel program and PTX, and what calling it needs.
#[pyclass(frozen, module = "tessel._tessel")]
struct CompiledStep {
    #[pyo3(get)]
    name: String,
    /// The cache key (SHA-256 of the facts the step depends on).
    #[pyo3(get)]
    key: String,
    /// True when the step was read from the cache rather than compiled.
    #[pyo3(get)]
    from_cache: bool,
    program: Program,
    ptx: String,
    /// The source file and the configuration it was compiled with: what a reproducer
    /// bundle recompiles the IR stages from.
    path: PathBuf,
    config: Config,
    results: Vec<ResultMemory>,
    /// Each intermediate buffer's byte offset in the workspace.
    temps: Vec<(BufferId, u64)>,
    #[pyo3(get)]
    workspace_bytes: u64,
    /// Why the step could not be stored in the cache, when it could not.
    #[pyo3(get)]
    cache_warning: Option<String>,
    devices: Mutex<HashMap<usize, OnDevice>>,
}

/// The environment variable that makes every launch checked (synchronized, a fault named
/// with its kernel), read when a step is first launched on a device.
const CHECKED_ENV: &str = "TESSEL_CHECK_LAUNCHES";

/// Bytes between the intermediates in the workspace: every buffer's alignment
/// (tessel-driver `device::BUFFER_ALIGN`), rounded up to a 256-byte line as `cuMemAlloc`'s.
const WORKSPACE_ALIGN: u64 = 256;

impl CompiledStep {
    fn new(
        name: String,
        key: String,
        from_cache: bool,
        (path, config): (PathBuf, Config),
        program: Program,
        ptx: String,
    ) -> CompiledStep {
        let p = &program;
        let mut results = Vec::new();
        for (i, (_, b)) in p.outputs.iter().enumerate() {
            let memory = match p.buffers[*b].role {
                BufferRole::Input(n) | BufferRole::InOut(n) => ResultMemory::Param(n as usize),
                _ => match p.outputs[..i].iter().position(|(_, e)| e == b) {
                    Some(first) => ResultMemory::Result(first),
                    None => ResultMemory::Own,
                },
            };
            results.push(memory);
        }
        let mut temps = Vec::new();
        let mut workspace_bytes = 0u64;
        for (b, decl) in p.buffers.iter() {
            if decl.role == BufferRole::Temp {
                temps.push((b, workspace_bytes));
                workspace_bytes += decl.ty.size_bytes().div_ceil(WORKSPACE_ALIGN) * WORKSPACE_ALIGN;
            }
        }
        CompiledStep {
            name,
            key,
            from_cache,
            program,
            ptx,
            path,
            config,
            results,
            temps,
            workspace_bytes,
            cache_warning: None,
            devices: Mutex::new(HashMap::new()),
        }
    }

    /// The parameters' tensors from their bytes in order, each exactly its type's size.
    fn tensors(&self, inputs: Vec<Vec<u8>>) -> PyResult<Vec<Tensor>> {
        let p = &self.program;
        if inputs.len() != p.inputs.len() {
            return Err(ArgumentError::new_err(format!(
                "step `{}` takes {} parameters, given {}",
                self.name,
                p.inputs.len(),
                inputs.len()
            )));
        }
        p.inputs
            .iter()
            .zip(inputs)
            .map(|((name, b), data)| {
                let ty = p.buffers[*b].ty.clone();
                if data.len() as u64 != ty.size_bytes() {
                    return Err(ArgumentError::new_err(format!(
                        "`{name}` is {ty} ({} bytes), given {} bytes",
                        ty.size_bytes(),
                        data.len()
                    )));
                }
                Ok(Tensor { ty, data })
            })
            .collect()
    }

    /// Every program buffer's memory for a launch: parameters' and results' at the
    /// caller's addresses, intermediates in the workspace.
    fn buffers(
        &self,
        params: &[u64],
        results: &[u64],
        workspace: u64,
    ) -> PyResult<Vec<ExternalBuffer>> {
        let p = &self.program;
        if params.len() != p.inputs.len() || results.len() != p.outputs.len() {
            return Err(ArgumentError::new_err(format!(
                "step `{}` takes {} parameters and {} results, given {} and {}",
                self.name,
                p.inputs.len(),
                p.outputs.len(),
                params.len(),
                results.len()
            )));
        }
        let mut address: Vec<Option<u64>> = vec![None; p.buffers.len()];
        for (n, (_, b)) in p.inputs.iter().enumerate() {
            address[b.as_u32() as usize] = Some(params[n]);
        }
        for (i, (_, b)) in p.outputs.iter().enumerate() {
            if let ResultMemory::Own = self.results[i] {
                address[b.as_u32() as usize] = Some(results[i]);
            }
        }
        for (b, offset) in &self.temps {
            if workspace == 0 {
                return Err(ArgumentError::new_err(format!(
                    "step `{}` needs a workspace of {} bytes",
                    self.name, self.workspace_bytes
                )));
            }
            address[b.as_u32() as usize] = Some(workspace + offset);
        }
        p.buffers
            .iter()
            .map(|(b, decl)| {
                let a = address[b.as_u32() as usize].ok_or_else(|| {
                    ArgumentError::new_err(format!(
                        "internal error: buffer `{}` has no memory",
                        decl.name
                    ))
                })?;
                // SAFETY: the Python side passes the addresses of live torch tensors of the
                // launch's device, each of its buffer's size (checked there, by shape and
                // dtype), kept referenced until the launches are enqueued on the stream
                // their memory is ordered by (the caching allocator's contract); the
                // workspace is one such tensor of `workspace_bytes`.
                unsafe { ExternalBuffer::from_raw(a, decl.ty.size_bytes()) }
                    .map_err(|e| ArgumentError::new_err(format!("`{}`: {e}", display_name(p, b))))
            })
            .collect()
    }
}

/// A buffer's name as the caller knows it: a parameter's or result's name, else the
/// intermediate's.
fn display_name(p: &Program, b: BufferId) -> String {
    p.inputs
        .iter()
        .chain(&p.outputs)
        .find(|(_, x)| *x == b)
        .map_or_else(|| p.buffers[b].name.clone(), |(n, _)| n.clone())
}

#[pymethods]
impl CompiledStep {
    /// The parameters in order: `(name, dtype, shape, inout)`.
    #[getter]
    fn params(&self) -> Vec<(String, &'static str, Vec<u64>, bool)> {
        let p = &self.program;
        p.inputs
            .iter()
            .map(|(n, b)| {
                let d = &p.buffers[*b];
                (
                    n.clone(),
                    d.ty.dtype.name(),
                    d.ty.shape.0.clone(),
                    matches!(d.role, BufferRole::InOut(_)),
                )
            })
            .collect()
    }

    /// The results in order: `(name, dtype, shape, memory)`, where `memory` is `None` for a
    /// result of its own, `("param", n)` for parameter `n`'s memory (an `inout` parameter,
    /// or an input returned as it is) and `("result", n)` for an earlier result's.
    #[getter]
    fn results(&self) -> Vec<ResultInfo> {
        let p = &self.program;
        p.outputs
            .iter()
            .zip(&self.results)
            .map(|((n, b), m)| {
                let d = &p.buffers[*b];
                let memory = match m {
                    ResultMemory::Own => None,
                    ResultMemory::Param(i) => Some(("param", *i)),
                    ResultMemory::Result(i) => Some(("result", *i)),
                };
                (n.clone(), d.ty.dtype.name(), d.ty.shape.0.clone(), memory)
            })
            .collect()
    }

    /// The target's name the step was compiled for (e.g. "NVIDIA H200").
    #[getter]
    fn target(&self) -> &str {
        &self.config.options.target.name
    }

    /// The profile's name.
    #[getter]
    fn profile(&self) -> &'static str {
        self.config.options.profile.name()
    }

    /// The PTX module.
    #[getter]
    fn ptx(&self) -> &str {
        &self.ptx
    }

    /// The kernel program in its textual form (tessel-ir `write_program`).
    #[getter]
    fn program(&self) -> String {
        tessel_ir::text::write_program(&self.program)
    }

    /// The kernels launched, in order.
    #[getter]
    fn kernels(&self) -> Vec<String> {
        let p = &self.program;
        p.launches
            .iter()
            .map(|l| p.kernels[l.kernel].name.clone())
            .collect()
    }

    /// Whether the program issues tensor-core instructions (`mma.sync`, `wgmma`), whose
    /// order of sums inside one instruction NVIDIA does not specify: such a step is judged
    /// against the executor by tolerance, not bits (docs/numerics.md).
    #[getter]
    fn tensor_cores(&self) -> bool {
        self.program.tensor_cores().mma
    }

    /// Runs the step on the CPU kernel-IR executor: `inputs` are the parameters' bytes in
    /// order (little-endian, row-major, each exactly its type's size; `bool` one byte per
    /// element); returns the results' bytes in order. The GIL is released while it runs.
    fn run_executor<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<u8>>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let p = &self.program;
        let tensors = self.tensors(inputs)?;
        let outputs = py
            .detach(|| tessel_driver::execute(p, &tensors, &tessel_ref::ExecOptions::default()))
            .map_err(raise)?;
        Ok(outputs.iter().map(|t| PyBytes::new(py, &t.data)).collect())
    }

    /// Writes a reproducer bundle (tessel-driver `repro`) for this step under `parent`:
    /// the source and its imports, every IR stage, the PTX and the ptxas command, the dims,
    /// profile and target, and `what` failed. `inputs`, the call's parameters as bytes in
    /// order (as [`CompiledStep::run_executor`] takes them), are written beside it as
    /// `STEP-inputs-HASH.safetensors`, which the bundle names. Returns the bundle's
    /// directory and the inputs' file. The stages are recompiled from the source file as
    /// it is now.
    #[pyo3(signature = (parent, what, inputs=None))]
    fn write_repro(
        &self,
        py: Python<'_>,
        parent: PathBuf,
        what: String,
        inputs: Option<Vec<Vec<u8>>>,
    ) -> PyResult<(PathBuf, Option<PathBuf>)> {
        let tensors = inputs.map(|data| self.tensors(data)).transpose()?;
        py.detach(|| {
            let inputs = match tensors {
                None => None,
                Some(tensors) => {
                    std::fs::create_dir_all(&parent).map_err(|error| Error::Bundle {
                        path: parent.clone(),
                        error,
                    })?;
                    let digest = tensors
                        .iter()
                        .fold(Sha256::new(), |h, t| h.chain_update(&t.data))
                        .finalize();
                    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
                    let path = parent.join(format!("{}-inputs-{hex}.safetensors", self.name));
                    let named: Vec<(String, &Tensor)> = self
                        .program
                        .inputs
                        .iter()
                        .map(|(n, _)| n.clone())
                        .zip(&tensors)
                        .collect();
                    tessel_driver::write_safetensors(&path, &named)?;
                    Some(path)
                }
            };
            let src = Source::load(&self.path, false)?;
            let step = src.compile_step(&self.name, &self.config, &Weights::none())?;
            let spec = tessel_driver::InputSpec {
                inputs: inputs.clone(),
                ..Default::default()
            };
            let failure = tessel_driver::repro::Failure {
                inputs: &spec,
                what,
                command: None,
            };
            let dir =
                tessel_driver::repro::write_bundle(&src, &step, &self.config, &failure, &parent)?;
            Ok::<_, Error>((dir, inputs))
        })
        .map_err(raise)
    }

    /// Enqueues the step's launches on `stream` (a `CUstream` of device `device`'s primary
    /// context, e.g. `torch.cuda.current_stream().cuda_stream`; 0 is the legacy default
    /// stream) over memory the caller owns: `params` and `results` are device addresses in
    /// order (a result whose `memory` is not `None` is ignored: it is that memory), and
    /// `workspace` the address of `workspace_bytes` bytes for the intermediates (0 when it
    /// needs none). Nothing is allocated, copied or waited for; the module is loaded on the
    /// first launch on a device.
    ///
    /// Safety is the caller's (tessel-cuda `external`): every address is live memory of the
    /// device, of its buffer's size and 16-byte aligned, until the stream passes the
    /// launches. The Python side checks shapes, dtypes, devices, contiguity and alignment
    /// before it calls; tessel checks lengths and alignment again here.
    fn launch(
        &self,
        py: Python<'_>,
        device: usize,
        stream: u64,
        params: Vec<u64>,
        results: Vec<u64>,
        workspace: u64,
    ) -> PyResult<()> {
        let buffers = self.buffers(&params, &results, workspace)?;
        let mut devices = self
            .devices
            .lock()
            .map_err(|_| DeviceError::new_err("a previous launch panicked"))?;
        let on = match devices.entry(device) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let gpu = Gpu::open(device).map_err(|e| raise(Error::Device(e)))?;
                // Checked launches: each waited for and its fault reported against its
                // kernel (slow; for finding which kernel fails).
                gpu.set_checked(std::env::var_os(CHECKED_ENV).is_some_and(|v| v != "0"));
                let module = py
                    .detach(|| Module::load(&gpu, &self.ptx))
                    .map_err(|e| raise(Error::LoadModule(e)))?;
                e.insert(OnDevice { gpu, module })
            }
        };
        // SAFETY: the caller passes torch's current stream of `device` (or 0), live for
        // the launches' enqueueing; see the method's docstring.
        let stream = unsafe { ExternalStream::from_raw(stream as _) };
        device::launch_external(&on.gpu, &on.module, &self.program, &stream, &buffers)
            .map_err(raise)
    }
}

/// The facts of the GPU `device` a step is compiled for, or `None` when it cannot be
/// opened (no driver, no such device).
fn gpu_target(device: usize) -> Option<Target> {
    Gpu::open(device)
        .ok()
        .map(|g| device::target_of(g.properties()))
}

/// Compiles step `step` of the file `path` (the file's only step when `step` is `None`)
/// with the dims `dims`, in `profile` (`exact`, `invariant` or `fast`), for `target`: a
/// preset's name (`h100`, `h200`), `"device:N"` for the facts of GPU N, or `None` for GPU 0's
/// when one can be opened, else the H200 preset. `options` holds the schedule choices
/// (`wgmma_tma`, `wgmma_attention`, `wgmma_attention_keys`, `wgmma_pingpong`,
/// `merge_launches`, `dependent_launch`). With
/// `cache_dir`, the step is read from the cache there when `compiler` (the build's
/// identifier) compiled it before, and stored after compiling otherwise.
///
/// Raises `CompileError` with the rendered report for a source or dims problem.
#[pyfunction]
#[pyo3(signature = (path, step, dims, profile, target, options, cache_dir, compiler))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    path: PathBuf,
    step: Option<String>,
    dims: BTreeMap<String, u64>,
    profile: &str,
    target: Option<String>,
    options: &Bound<'_, PyDict>,
    cache_dir: Option<PathBuf>,
    compiler: &str,
) -> PyResult<CompiledStep> {
    let profile = Profile::from_name(profile).ok_or_else(|| {
        ArgumentError::new_err(format!(
            "profile `{profile}`: the profiles are exact, invariant and fast"
        ))
    })?;
    let target = match target.as_deref() {
        None => gpu_target(0).unwrap_or_else(Target::h200),
        Some(t) => match t.strip_prefix("device:").map(str::parse::<usize>) {
            Some(Ok(n)) => gpu_target(n).ok_or_else(|| {
                DeviceError::new_err(format!("target `{t}`: GPU {n} cannot be opened"))
            })?,
            Some(Err(_)) => {
                return Err(ArgumentError::new_err(format!(
                    "target `{t}`: expected device:N"
                )))
            }
            None => Target::preset(t).ok_or_else(|| {
                ArgumentError::new_err(format!(
                    "target `{t}`: the targets are {}, or device:N",
                    Target::PRESETS.join(", ")
                ))
            })?,
        },
    };
    let mut opts = Options {
        target,
        profile,
        verify: true,
        ..Options::default()
    };
    for (k, v) in options.iter() {
        let k: String = k.extract()?;
        match k.as_str() {
            "wgmma_tma" => opts.wgmma_tma = v.extract()?,
            "wgmma_attention" => opts.wgmma_attention = v.extract()?,
            "wgmma_pingpong" => opts.wgmma_pingpong = v.extract()?,
            "merge_launches" => opts.merge_launches = v.extract()?,
            "dependent_launch" => opts.dependent_launch = v.extract()?,
            "wgmma_attention_keys" => {
                opts.wgmma_attention_keys = v.extract()?;
                if !matches!(opts.wgmma_attention_keys, 0 | 64 | 128) {
                    return Err(ArgumentError::new_err("wgmma_attention_keys: 64 or 128"));
                }
            }
            other => {
                return Err(ArgumentError::new_err(format!(
                    "unknown option `{other}`: the options are wgmma_tma, wgmma_attention, wgmma_attention_keys, wgmma_pingpong, merge_launches, dependent_launch"
                )))
            }
        }
    }
    let src = Source::load(&path, false).map_err(raise)?;
    let names = src.step_names(step.as_deref()).map_err(raise)?;
    let name = match (step, names.as_slice()) {
        (Some(s), _) => s,
        (None, [one]) => one.clone(),
        (None, many) => {
            return Err(ArgumentError::new_err(format!(
                "{} has {} steps ({}): name one with step=...",
                path.display(),
                many.len(),
                many.join(", ")
            )))
        }
    };
    let config = Config {
        dims,
        options: opts,
        tp: None,
    };
    let facts = cache::facts(&src, &name, &config, compiler);
    let key = cache::key(&facts);
    if let Some(dir) = &cache_dir {
        if let Some(e) = cache::load(dir, &key) {
            return Ok(CompiledStep::new(
                name,
                key,
                true,
                (path.clone(), config.clone()),
                e.program,
                e.ptx,
            ));
        }
    }
    let (program, ptx) = py
        .detach(|| {
            let step = src.compile_step(&name, &config, &Weights::none())?;
            let ptx = device::ptx_of(&step.compiled.program, &step.compiled.ptx)?;
            Ok::<_, Error>((step.compiled.program, ptx))
        })
        .map_err(raise)?;
    // A cache that cannot be written (a read-only home, a full disk) costs the next
    // process a compile, not this one its step: the failure is reported, not raised.
    let mut cache_warning = None;
    if let Some(dir) = &cache_dir {
        if let Err(e) = cache::store(dir, &key, &facts, &program, &ptx) {
            cache_warning = Some(format!("{} (the step is not cached)", chain(&e)));
        }
    }
    let mut step = CompiledStep::new(name, key, false, (path, config), program, ptx);
    step.cache_warning = cache_warning;
    Ok(step)
}

/// The steps of the file `path`, in order.
#[pyfunction]
fn steps(path: PathBuf) -> PyResult<Vec<String>> {
    let src = Source::load(&path, false).map_err(raise)?;
    src.step_names(None).map_err(raise)
}

/// The forward and backward steps of `fn` `name` of the file `path`, as a source importing
/// `path` (tessel-driver `Source::grad_companion`): `(text, differentiable)`, where
/// `differentiable[i]` says whether parameter `i` has a gradient among the backward step's
/// results: every floating-point parameter's, or those named in `wrt`. Raises `ArgumentError` for a `fn` that has none (several results, no
/// floating-point parameter, no such `fn`), `CompileError` for a file that does not load.
#[pyfunction]
#[pyo3(signature = (path, name, wrt=None))]
fn grad_companion(
    path: PathBuf,
    name: &str,
    wrt: Option<Vec<String>>,
) -> PyResult<(String, Vec<bool>)> {
    let src = Source::load(&path, false).map_err(raise)?;
    let import = std::path::absolute(&path).map_err(|e| {
        raise(Error::Read {
            path: path.display().to_string(),
            error: e,
        })
    })?;
    let c = src
        .grad_companion(name, &import.display().to_string(), wrt.as_deref())
        .map_err(raise)?;
    Ok((c.text, c.differentiable))
}

/// The module: [`compile`], [`steps`], [`grad_companion`], [`CompiledStep`] and the
/// exceptions.
#[pymodule]
fn _tessel(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(steps, m)?)?;
    m.add_function(wrap_pyfunction!(grad_companion, m)?)?;
    m.add_class::<CompiledStep>()?;
    m.add("TesselError", py.get_type::<TesselError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("ArgumentError", py.get_type::<ArgumentError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
