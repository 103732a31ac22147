//! One case through the whole pipeline: parse, check, compile, run on the CPU executor (and
//! a GPU, when the caller gives one), judge every output by the dtype-following reference.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tessel_driver::device::GpuRuns;
use tessel_driver::{Config, Error as DriverError, Source, StepWeights};
use tessel_ir::kernel::Program;
use tessel_passes::{Options, Profile, Target};
use tessel_ref::Tensor;

/// Runs a compiled program on a device twice from the same start — checked, then as one
/// CUDA graph whose launches overlap — and reads both runs' outputs back
/// ([`tessel_driver::device::run_checked_and_graph`]).
pub type RunOn<'a> = &'a dyn Fn(&Program, &[Tensor]) -> Result<GpuRuns, String>;

/// A device to run compiled programs on beside the executor (the CLI passes the GPU): the
/// target to compile for, and how to run a program there and read its outputs back —
/// `None` to compile for `target` and run on the executor alone (`tessel fuzz --sm-count`
/// without a GPU).
#[derive(Clone, Copy)]
pub struct Device<'a> {
    pub target: &'a Target,
    pub run: Option<RunOn<'a>>,
    /// Compile under `Options::wgmma_attention`.
    pub wgmma_attention: bool,
    /// Compile with `Options::wgmma_pingpong` (the persistent ping-pong GEMM tile where
    /// it applies on `target`).
    pub wgmma_pingpong: bool,
    /// Compile with `Options::wgmma_tma` (the warp-specialised TMA GEMM tile where the
    /// warpgroup tile applies and the ping-pong tile does not).
    pub wgmma_tma: bool,
}

/// What a case observed besides its outcome.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The schedule of each kernel the step compiled to, in launch order (empty when it
    /// did not compile).
    pub schedules: Vec<String>,
    /// The finite-difference judge's report, for a step with `grad(...)` that got as far.
    pub fd: Option<crate::fd::FdReport>,
}

/// What happened to a case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every output within its bound (and the GPU's bits equal to the executor's where the
    /// profile promises it).
    Pass,
    /// The front end refused the program: the generator and the language disagree.
    Rejected(String),
    /// A checked program that failed to compile, run or be judged: not a wrong answer,
    /// still a defect (a well-typed program must compile or be refused by `check`).
    Error(String),
    /// A wrong answer.
    Fail(String),
    /// A panic anywhere in the pipeline.
    Panic(String),
}

impl Outcome {
    /// The outcome's kind, to tell whether a shrunk program still fails the same way.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Rejected(_) => "rejected",
            Outcome::Error(_) => "error",
            Outcome::Fail(_) => "wrong answer",
            Outcome::Panic(_) => "panic",
        }
    }

    /// True for the outcomes that are defects of the compiler.
    pub fn is_defect(&self) -> bool {
        matches!(
            self,
            Outcome::Error(_) | Outcome::Fail(_) | Outcome::Panic(_)
        )
    }

    /// The message (empty for a pass).
    pub fn message(&self) -> &str {
        match self {
            Outcome::Pass => "",
            Outcome::Rejected(m) | Outcome::Error(m) | Outcome::Fail(m) | Outcome::Panic(m) => m,
        }
    }
}

/// Runs step `step` of `source` with `dims` bound, in `profile`, on seeded random inputs
/// (`Tensor::random` with seed `seed · 1000 + i` for input `i`, as `tessel run --seed`
/// makes them), and judges it. Compiled for the device's target, or the H200 preset without
/// a device.
pub fn run_case(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    device: Option<Device>,
) -> Outcome {
    run_case_with_inputs(source, step, dims, profile, seed, &[], device)
}

/// [`run_case`] with some inputs given by name (positions into a KV cache, say); the
/// others are seeded random as there. A given input of the wrong type is an
/// [`Outcome::Error`] (the executor refuses it).
pub fn run_case_with_inputs(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    given: &[(&str, Tensor)],
    device: Option<Device>,
) -> Outcome {
    run_traced(
        source,
        step,
        dims,
        profile,
        seed,
        given,
        device,
        &mut Trace::default(),
    )
}

/// [`run_case`], also returning the schedule of each kernel the step compiled to (in
/// launch order; empty when it did not compile), so that a caller can tell which
/// programs got a fused kernel (`attention {..}` schedules).
pub fn run_case_schedules(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    device: Option<Device>,
) -> (Outcome, Vec<String>) {
    let (o, t) = run_case_traced(source, step, dims, profile, seed, device);
    (o, t.schedules)
}

/// [`run_case`], also returning what it observed ([`Trace`]: the kernels' schedules, the
/// finite-difference judge's report).
pub fn run_case_traced(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    device: Option<Device>,
) -> (Outcome, Trace) {
    let mut t = Trace::default();
    let o = run_traced(source, step, dims, profile, seed, &[], device, &mut t);
    (o, t)
}

#[allow(clippy::too_many_arguments)]
fn run_traced(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    given: &[(&str, Tensor)],
    device: Option<Device>,
    trace: &mut Trace,
) -> Outcome {
    let r = catch_unwind(AssertUnwindSafe(|| {
        run_inner(source, step, dims, profile, seed, given, device, trace)
    }));
    r.unwrap_or_else(|e| Outcome::Panic(panic_message(e.as_ref())))
}

/// The message a caught panic carried.
pub(crate) fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

#[allow(clippy::too_many_arguments)]
fn run_inner(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    given: &[(&str, Tensor)],
    device: Option<Device>,
    trace: &mut Trace,
) -> Outcome {
    let src = match Source::parse("fuzz.tsl", source, false) {
        Ok(s) => s,
        Err(e) => return rejected_or_error(e),
    };
    let dims: BTreeMap<String, u64> = dims.iter().cloned().collect();
    let graph = match src.check_step(step, &dims) {
        Ok(g) => g,
        Err(e) => return rejected_or_error(e),
    };
    let opts = Options {
        target: device.map_or_else(Target::h200, |d| d.target.clone()),
        profile,
        verify: true,
        tensor_parallel: false,
        wgmma_tma: device.as_ref().is_some_and(|d| d.wgmma_tma),
        wgmma_pingpong: device.as_ref().is_some_and(|d| d.wgmma_pingpong),
        merge_launches: true,
        dependent_launch: true,
        wgmma_attention: device.as_ref().is_some_and(|d| d.wgmma_attention),
        wgmma_attention_keys: 0,
    };
    let config = Config {
        dims,
        options: opts,
        tp: None,
    };
    // `compiled` from `check`'s graph; `judged_graph` with every `grad(...)` differentiated,
    // as the CLI judges it (`tessel check`): the backward is the program's own math, op for op.
    let (compiled, judged_graph) =
        match src.compile_checked(step, graph.clone(), StepWeights::default(), &config) {
            Ok(s) => (s.compiled, s.checked),
            Err(DriverError::Compile { error: e, .. }) => {
                return Outcome::Error(format!("compile: {e}: {:?}", e))
            }
            Err(DriverError::Transform { message, .. }) => {
                return Outcome::Error(format!("grad: {message}"))
            }
            Err(e) => return Outcome::Error(e.to_string()),
        };
    let p = &compiled.program;
    trace
        .schedules
        .extend(p.kernels.values().map(|k| k.schedule.clone()));
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(
            |(i, (name, b))| match given.iter().find(|(n, _)| n == name) {
                Some((_, t)) => t.clone(),
                None => Tensor::random(
                    p.buffers[*b].ty.clone(),
                    seed.wrapping_mul(1000).wrapping_add(i as u64),
                ),
            },
        )
        .collect();
    let exec = match tessel_ref::run_program(p, &inputs) {
        Ok(o) => o,
        Err(e) => return Outcome::Error(format!("executor: {e}")),
    };
    let gpu = match device.and_then(|d| d.run) {
        Some(run) => match run(p, &inputs) {
            Ok(o) => Some(o),
            Err(e) => return Outcome::Error(format!("device: {e}")),
        },
        None => None,
    };
    let judged = match tessel_ref::judge::judge_step(
        &judged_graph,
        p,
        &inputs,
        &exec,
        gpu.as_ref().map(|r| r.checked.as_slice()),
    ) {
        Ok(j) => j,
        Err(e) => return Outcome::Error(format!("judge: {e}")),
    };
    let mut wrong = Vec::new();
    for j in &judged {
        if !j.executor.pass() {
            wrong.push(format!("`{}` (executor): {}", j.name, j.executor));
        }
        match &j.gpu {
            Some(g) if !g.pass() => wrong.push(format!("`{}` (GPU): {g}", j.name)),
            _ => {}
        }
    }
    // The overlapped run against the checked one: a race between kernels shows here.
    if let Some(r) = &gpu {
        let diffs = match r.graph_diffs() {
            Ok(d) => d,
            Err(e) => return Outcome::Error(format!("comparing the GPU's runs: {e}")),
        };
        for ((name, _), d) in p.outputs.iter().zip(diffs) {
            if !d.identical() {
                wrong.push(format!(
                    "`{name}` (GPU, one CUDA graph): differs from the checked run: {d}"
                ));
            }
        }
    }
    // Every gradient against finite differences of the forward, on the same inputs moved
    // onto the grid ±h moves exactly (crate::fd).
    if crate::fd::has_grad(&graph) {
        match crate::fd::judge(&graph, &crate::fd::fd_inputs(&inputs), seed) {
            Ok(r) => {
                wrong.extend(r.wrong.iter().map(|w| format!("{w} (finite differences)")));
                trace.fd = Some(r);
            }
            Err(e) => return Outcome::Error(format!("finite differences: {e}")),
        }
    }
    if wrong.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail(wrong.join("; "))
    }
}

/// A front-end error as a case's outcome: diagnostics reject the program (the first one
/// says why); anything else is an error.
pub(crate) fn rejected_or_error<O: From<Rejection>>(e: DriverError) -> O {
    match e {
        DriverError::Source(d) => Rejection::Rejected(first_message(&d.diagnostics)).into(),
        DriverError::UnboundDims(u) => {
            Rejection::Rejected(first_message(&u.source_report.diagnostics)).into()
        }
        e => Rejection::Error(e.to_string()).into(),
    }
}

/// Why the front end did not hand a case on.
pub(crate) enum Rejection {
    Rejected(String),
    Error(String),
}

impl From<Rejection> for Outcome {
    fn from(r: Rejection) -> Outcome {
        match r {
            Rejection::Rejected(m) => Outcome::Rejected(m),
            Rejection::Error(m) => Outcome::Error(m),
        }
    }
}

pub(crate) fn first_message(d: &[tessel_syntax::Diagnostic]) -> String {
    d.first()
        .map(|x| format!("{}: {}", x.code, x.message))
        .unwrap_or_default()
}
