//! Source to compiled program: read (a file and its imports), parse, check, compile — with
//! diagnostics rendered for the terminal, each against the file it lies in.

use crate::weights::{StepWeights, Weights};
use crate::CompileArgs;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use tessel_passes::{check, compile, Compiled, Options, Target};
use tessel_syntax::ast::{FuncKind, Module};
use tessel_syntax::{Diagnostic, LoadError, SourceMap};

/// The options every command compiles with: `target`, the IR verifier on and the schedule
/// choices of `args` (`--wgmma-tma`, `--wgmma-attention`; a command's `--profile` is set per step, by
/// [`compile_step`]).
pub fn options(target: &Target, args: &CompileArgs) -> Options {
    Options {
        target: target.clone(),
        verify: true,
        wgmma_tma: args.wgmma_tma,
        wgmma_attention: args.wgmma_attention,
        wgmma_attention_keys: args
            .wgmma_attention_keys
            .as_deref()
            .map_or(0, |k| k.parse().expect("clap accepts 64 or 128 only")),
        wgmma_pingpong: args.wgmma_pingpong,
        ..Options::default()
    }
}

/// Parses `--target`: a preset's name.
pub fn parse_target(s: &str) -> Result<String, String> {
    match Target::preset(s) {
        Some(_) => Ok(s.to_string()),
        None => Err(format!(
            "`{s}`: the targets are {}",
            Target::PRESETS.join(", ")
        )),
    }
}

/// The machine a command compiles for, and where its facts came from: the `--target`
/// preset when given, else the GPU the command runs on, else the H200 preset.
pub fn target_for(args: &CompileArgs, gpu: Option<&tessel_cuda::Gpu>) -> (Target, String) {
    match (&args.target, gpu) {
        (Some(name), _) => (
            Target::preset(name).unwrap_or_default(),
            format!("preset `{name}` (--target)"),
        ),
        (None, Some(g)) => (crate::device::target_of(g.properties()), "the GPU".into()),
        (None, None) => (Target::h200(), "preset `h200` (no GPU)".into()),
    }
}

/// Parses `NAME=SIZE` for `--dim`.
pub fn parse_dim(s: &str) -> Result<(String, u64), String> {
    let (name, size) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=SIZE, e.g. T=4096"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "`{s}`: the dim's name must be an identifier, e.g. T"
        ));
    }
    let size: u64 = size.trim().parse().map_err(|e: std::num::ParseIntError| {
        if matches!(e.kind(), std::num::IntErrorKind::PosOverflow) {
            format!("`{s}`: the size is too large")
        } else {
            format!("`{s}`: the size must be a non-negative integer")
        }
    })?;
    if size == 0 {
        return Err(format!("`{s}`: a dim must be at least 1"));
    }
    Ok((name.to_string(), size))
}

/// Parses `--profile`.
pub fn parse_profile(s: &str) -> Result<tessel_passes::Profile, String> {
    tessel_passes::Profile::from_name(s)
        .ok_or_else(|| format!("`{s}`: the profiles are exact, invariant and fast"))
}

/// A program: its file, the files it imports, and their items in one module.
pub struct Source {
    /// The file as named on the command line.
    pub name: String,
    /// Every file read, the named one first; diagnostics render against it.
    pub sources: SourceMap,
    /// The imported `fn`s and `const`s, then the file's own items (see `tessel_syntax::load`).
    pub module: Module,
}

impl Source {
    /// The named file's own items (imports included, imported items not), with the shared
    /// expression arena: what `tessel build --emit ast` prints.
    pub fn root_module(&self) -> Module {
        tessel_syntax::load::root_module(&self.module, &self.sources)
    }
}

/// One step, checked and compiled.
pub struct Step {
    pub name: String,
    /// The step as `check` built it, with every `grad(...)` differentiated (the `grad`
    /// pass run on it alone): what the references evaluate and `--tp` splits. `compiled`
    /// is compiled from `check`'s graph itself, so that `grad` runs after `attention`.
    pub checked: tessel_ir::graph::Graph,
    pub compiled: Compiled,
    /// Its parameters read from `--weights`, validated against their types.
    pub weights: StepWeights,
    /// With `--tp N`: what each of the N ranks runs, its phases compiled (tessel-passes
    /// `tp::ranks`); `compiled` is still the step as written (its inputs and outputs are
    /// the ranks' whole ones).
    pub ranks: Option<Vec<tessel_ir::ranks::Rank<Compiled>>>,
    /// With `--tp N`: the plan the ranks were made from.
    pub plan: Option<tessel_passes::tp::TpPlan>,
}

impl Step {
    /// With `--tp N`: the ranks' programs, to run.
    pub fn rank_programs(&self) -> Option<Vec<tessel_ir::ranks::Rank<tessel_ir::kernel::Program>>> {
        self.ranks
            .as_ref()
            .map(|rs| rs.iter().map(|r| r.map(|c| c.program.clone())).collect())
    }
}

fn render(diags: &[Diagnostic], sources: &SourceMap) -> String {
    let color = std::io::stderr().is_terminal();
    diags
        .iter()
        .map(|d| sources.render(d, color))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads `path` and the files it imports, and parses them: every command that takes a
/// source file goes through here. Syntax and import errors are rendered into the error.
pub fn load(path: &Path) -> Result<Source> {
    let name = path.display().to_string();
    match tessel_syntax::load(path) {
        Ok(l) => Ok(Source {
            name,
            sources: l.sources,
            module: l.module,
        }),
        Err(LoadError::Read { error, .. }) => {
            Err(anyhow::Error::new(error).context(format!("cannot read {name}")))
        }
        Err(LoadError::Diagnostics {
            sources,
            diagnostics: d,
        }) => {
            let syntax = d.iter().all(|d| !d.code.starts_with("E012"));
            let what = if syntax { "syntax error" } else { "error" };
            Err(anyhow::Error::new(Rendered(format!(
                "{}\n{} loading {name}",
                render(&d, &sources),
                crate::words::plural(d.len(), what)
            ))))
        }
    }
}

/// Diagnostics rendered for the terminal: each already says `[E0401] Error: ...`, so `main`
/// prints them without its own `error: ` prefix.
#[derive(Debug)]
pub struct Rendered(pub String);

impl std::fmt::Display for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Rendered {}

/// A step whose only errors are dims without a value (E0214): `check` over the default
/// example list reports it as skipped rather than failed.
#[derive(Debug)]
pub struct UnboundDims {
    pub step: String,
    pub dims: Vec<String>,
    rendered: String,
}

impl std::fmt::Display for UnboundDims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rendered)
    }
}

impl std::error::Error for UnboundDims {}

/// Checks and compiles the steps `args` selects. Every step is checked and its `--weights`
/// tensors validated (all problems of all steps reported together) before any is compiled.
pub fn compile_steps(
    src: &Source,
    args: &CompileArgs,
    opts: &Options,
    weights: &Weights,
) -> Result<Vec<Step>> {
    let dims = bound_dims(args)?;
    let checked: Vec<(String, tessel_ir::graph::Graph)> = step_names(src, args)?
        .into_iter()
        .map(|name| check_step(src, &name, &dims).map(|g| (name, g)))
        .collect::<Result<_>>()?;
    let mut bound = Vec::new();
    let mut problems = Vec::new();
    for (name, graph) in &checked {
        match bind_weights(src, name, graph, weights) {
            Ok(w) => bound.push(w),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    if !problems.is_empty() {
        bail!(problems.join("\n"));
    }
    checked
        .into_iter()
        .zip(bound)
        .map(|((name, graph), w)| {
            compile_checked(src, &name, graph, w, (args.profile, args.tp), opts)
        })
        .collect()
}

/// The `--weights` tensors of step `name`, whose graph is `graph`, validated against the
/// types `check` gave its parameters.
fn bind_weights(
    src: &Source,
    name: &str,
    graph: &tessel_ir::graph::Graph,
    weights: &Weights,
) -> Result<StepWeights> {
    let Some(func) = src
        .module
        .funcs()
        .find(|f| f.kind == FuncKind::Step && f.name.node == name)
    else {
        bail!("internal error: step `{name}` was checked but is not in the module");
    };
    let inputs: Vec<(String, tessel_ir::TensorType)> = graph
        .inputs
        .iter()
        .map(|(n, v)| (n.clone(), graph.ty(*v).clone()))
        .collect();
    weights.bind(func, &inputs)
}

/// The `--dim` bindings; a dim given twice with two values is an error.
pub fn bound_dims(args: &CompileArgs) -> Result<BTreeMap<String, u64>> {
    let mut dims: BTreeMap<String, u64> = BTreeMap::new();
    for (name, size) in &args.dims {
        if let Some(prev) = dims.insert(name.clone(), *size) {
            if prev != *size {
                bail!("--dim {name} is given twice ({prev} and {size})");
            }
        }
    }
    Ok(dims)
}

/// The steps of `src` that `args` selects (`--step`, else all); an error if there are none.
pub fn step_names(src: &Source, args: &CompileArgs) -> Result<Vec<String>> {
    let all = check::steps(&src.module);
    let names: Vec<String> = match &args.step {
        Some(s) if all.contains(s) => vec![s.clone()],
        Some(s) => bail!(
            "{} has no step `{s}`; its steps are: {}",
            src.name,
            all.join(", ")
        ),
        None => all,
    };
    if names.is_empty() {
        bail!("{} has no `step` to compile", src.name);
    }
    Ok(names)
}

/// Steps `names` of `src`, each with its parameters' names: the inputs its compiled program
/// takes, known before it is compiled.
pub fn step_params<'a>(src: &'a Source, names: &'a [String]) -> Vec<(&'a str, Vec<&'a str>)> {
    names
        .iter()
        .map(|name| {
            let params = src
                .module
                .funcs()
                .find(|f| f.name.node == *name)
                .map(|f| f.params.iter().map(|p| p.name.node.as_str()).collect())
                .unwrap_or_default();
            (name.as_str(), params)
        })
        .collect()
}

/// Checks step `name` of `src`, validates its `--weights` tensors and compiles it in
/// `profile`; diagnostics are rendered into the error ([`UnboundDims`] when the only errors
/// are dims without a value).
pub fn compile_step(
    src: &Source,
    name: &str,
    dims: &BTreeMap<String, u64>,
    profile: tessel_passes::Profile,
    opts: &Options,
    weights: &Weights,
) -> Result<Step> {
    let checked = check_step(src, name, dims)?;
    let bound = bind_weights(src, name, &checked, weights)?;
    compile_checked(src, name, checked, bound, (profile, None), opts)
}

/// Compiles the checked step in `profile`; with `tp = Some(N)`, also its tensor-parallel
/// plan and the N ranks' programs (tessel-passes `tp::ranks`, each phase compiled).
fn compile_checked(
    src: &Source,
    name: &str,
    checked: tessel_ir::graph::Graph,
    weights: StepWeights,
    (profile, tp): (tessel_passes::Profile, Option<u32>),
    opts: &Options,
) -> Result<Step> {
    let opts = &Options {
        profile,
        ..opts.clone()
    };
    let what = || format!("compiling step `{name}` of {}", src.name);
    let compiled = compile(&checked, opts).with_context(what)?;
    // The program as the references judge it and tensor parallelism splits it: every
    // `grad(...)` differentiated (before `attention`, so the backward is the program's
    // own math, op for op).
    let checked = tessel_passes::grad::run(&checked)
        .map_err(|e| anyhow::anyhow!("step `{name}` of {}: {e}", src.name))?;
    let (ranks, plan) = match tp {
        None => (None, None),
        Some(n) => {
            let tp_error = |e| anyhow::anyhow!("step `{name}` of {}: {e}", src.name);
            let plan = tessel_passes::tp::plan(&checked, n).map_err(tp_error)?;
            // No split-K in a rank: a GEMM's split would follow its shard's tile count.
            let rank_opts = Options {
                tensor_parallel: true,
                ..opts.clone()
            };
            let ranks = tessel_passes::tp::ranks(&checked, &plan)
                .map_err(tp_error)?
                .into_iter()
                .map(|r| {
                    let rank = r.rank;
                    r.try_map(|p| compile(&p, &rank_opts))
                        .with_context(|| format!("{}: rank {rank}", what()))
                })
                .collect::<Result<Vec<_>>>()?;
            (Some(ranks), Some(plan))
        }
    };
    Ok(Step {
        name: name.to_string(),
        checked,
        compiled,
        weights,
        ranks,
        plan,
    })
}

/// Runs `check` on step `name` of `src`: its graph IR, or its diagnostics rendered into the
/// error ([`UnboundDims`] when the only errors are dims without a value).
pub fn check_step(
    src: &Source,
    name: &str,
    dims: &BTreeMap<String, u64>,
) -> Result<tessel_ir::graph::Graph> {
    let name = name.to_string();
    check::run(&src.module, &name, dims).map_err(|d| {
        let rendered = format!(
            "{}\n{} in step `{name}`",
            render(&d, &src.sources),
            crate::words::plural(d.len(), "error")
        );
        if d.iter().all(|x| x.code == "E0214") {
            let dims = d
                .iter()
                .filter_map(|x| x.message.split('`').nth(1).map(str::to_string))
                .collect();
            anyhow::Error::new(UnboundDims {
                step: name.clone(),
                dims,
                rendered,
            })
        } else {
            anyhow::Error::new(Rendered(rendered))
        }
    })
}
