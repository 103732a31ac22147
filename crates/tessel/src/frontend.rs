//! The command line's side of compiling: the options and target a command's arguments
//! give, and `tessel-driver`'s source → compiled step sequence called with them, its
//! diagnostics coloured when stderr is a terminal.

use crate::CompileArgs;
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use tessel_driver::{Config, Weights};
use tessel_passes::{Options, Target};

pub use tessel_driver::{Source, Step};

/// The options every command compiles with: `target`, the IR verifier on and the schedule
/// choices of `args` (`--no-wgmma-tma`, `--no-wgmma-attention`, `--no-wgmma-pingpong`; a command's
/// `--profile` is set per step, by [`compile_step`]).
pub fn options(target: &Target, args: &CompileArgs) -> Options {
    Options {
        target: target.clone(),
        verify: true,
        wgmma_tma: !args.no_wgmma_tma,
        wgmma_attention: !args.no_wgmma_attention,
        wgmma_attention_keys: args
            .wgmma_attention_keys
            .as_deref()
            .map_or(0, |k| k.parse().expect("clap accepts 64 or 128 only")),
        wgmma_pingpong: !args.no_wgmma_pingpong,
        merge_launches: !args.no_merge_launches,
        dependent_launch: !args.no_dependent_launch,
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

/// Reads `path` and the files it imports, and parses them: every command that takes a
/// source file goes through here. Syntax and import errors are rendered into the error.
pub fn load(path: &Path) -> Result<Source> {
    Ok(Source::load(path, std::io::stderr().is_terminal())?)
}

/// Checks and compiles the steps `args` selects, in `args.profile` and with `--tp`. Every
/// step is checked and its `--weights` tensors validated (all problems of all steps
/// reported together) before any is compiled.
pub fn compile_steps(
    src: &Source,
    args: &CompileArgs,
    opts: &Options,
    weights: &Weights,
) -> Result<Vec<Step>> {
    Ok(src.compile_steps(args.step.as_deref(), &config(args, opts)?, weights)?)
}

/// The driver's [`Config`] of `args` and `opts`: `--dim`, `--profile` and `--tp`.
pub fn config(args: &CompileArgs, opts: &Options) -> Result<Config> {
    Ok(Config {
        dims: bound_dims(args)?,
        options: Options {
            profile: args.profile,
            ..opts.clone()
        },
        tp: args.tp,
    })
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
    Ok(src.step_names(args.step.as_deref())?)
}

/// Steps `names` of `src`, each with its parameters' names.
pub fn step_params<'a>(src: &'a Source, names: &'a [String]) -> Vec<(&'a str, Vec<&'a str>)> {
    src.step_params(names)
}

/// Checks step `name` of `src`, validates its `--weights` tensors and compiles it in
/// `profile` (without tensor parallelism).
pub fn compile_step(
    src: &Source,
    name: &str,
    dims: &BTreeMap<String, u64>,
    profile: tessel_passes::Profile,
    opts: &Options,
    weights: &Weights,
) -> Result<Step> {
    let config = Config {
        dims: dims.clone(),
        options: Options {
            profile,
            ..opts.clone()
        },
        tp: None,
    };
    Ok(src.compile_step(name, &config, weights)?)
}
