//! `tessel build`: compile the selected steps and write the stages `--emit` names, stopping
//! after the stage `--stop-after` names.
//!
//! The stages, in order, are `ast` (the source as parsed, printed back: `STEM.ast.tsl`), the
//! output of every registered pass (`tessel_passes::PASSES`: `STEP.PASS.graph` for graph IR,
//! `STEP.PASS.kir` for kernel IR), and `ptx` (the PTX module: `STEP.ptx`). The stage names
//! `tessel build` had before the registry stay, as aliases that keep their file names:
//!
//! | alias     | the output of                      | file               |
//! |-----------|------------------------------------|--------------------|
//! | `graph`   | `check`                            | `STEP.graph`       |
//! | `fused`   | `schedule` (groups and tiles)      | `STEP.fused.graph` |
//! | `lowered` | `lower`                            | `STEP.lowered.kir` |
//! | `kernel`  | the last pass (`dependent-launch`) | `STEP.kir`         |

use crate::device;
use crate::frontend::{bound_dims, load, options, step_names, target_for};
use crate::CompileArgs;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::Path;
use tessel_driver::stage_suffix;
use tessel_passes::{Ir, Level, Options, PassInfo, PASSES};

/// A stage `--emit` and `--stop-after` name.
#[derive(Clone, Copy)]
enum Stage {
    /// The parsed source, before any pass.
    Ast,
    /// The IR after a registered pass.
    Pass(&'static PassInfo),
    /// The PTX writer's module, after the last pass.
    Ptx,
}

impl PartialEq for Stage {
    fn eq(&self, other: &Stage) -> bool {
        self.position() == other.position()
    }
}

impl Stage {
    /// The stage called `name`: a registered pass, an alias, `ast` or `ptx`.
    fn named(name: &str) -> Option<Stage> {
        match name {
            "ast" => Some(Stage::Ast),
            "ptx" => Some(Stage::Ptx),
            _ => tessel_passes::pass(name)
                .or_else(|| alias(name).map(|(p, _)| p))
                .map(Stage::Pass),
        }
    }

    /// Position in the pipeline: `ast`, each pass, `ptx`.
    fn position(self) -> usize {
        match self {
            Stage::Ast => 0,
            Stage::Pass(p) => 1 + PASSES.iter().position(|q| q.name == p.name).unwrap_or(0),
            Stage::Ptx => PASSES.len() + 1,
        }
    }
}

/// The pass an alias (a stage name from before the registry) stands for, and its file
/// suffix; chosen by IR level, so that a pass added later does not change what they mean.
fn alias(name: &str) -> Option<(&'static PassInfo, &'static str)> {
    let first = |l: Level| PASSES.iter().find(|p| p.run.gives() == l);
    let last = |l: Level| PASSES.iter().rev().find(|p| p.run.gives() == l);
    match name {
        "graph" => first(Level::Graph).map(|p| (p, "graph")),
        "fused" => last(Level::Scheduled).map(|p| (p, "fused.graph")),
        "lowered" => first(Level::Kernel).map(|p| (p, "lowered.kir")),
        "kernel" => last(Level::Kernel).map(|p| (p, "kir")),
        _ => None,
    }
}

/// Every stage name, for error messages and `--help`.
pub fn stage_names() -> String {
    let passes: Vec<&str> = PASSES.iter().map(|p| p.name).collect();
    let aliases: Vec<String> = ["graph", "fused", "lowered", "kernel"]
        .iter()
        .filter_map(|a| alias(a).map(|(p, _)| format!("{a} = {}", p.name)))
        .collect();
    format!(
        "ast, {}, ptx (aliases: {})",
        passes.join(", "),
        aliases.join(", ")
    )
}

/// The long help of `--emit`: every stage with what it is.
pub fn emit_help() -> String {
    let mut s = String::from(
        "Stages to write, comma-separated (default: the --stop-after stage, else ptx):\n  \
         ast (STEM.ast.tsl): the source as parsed, printed back\n",
    );
    for p in PASSES {
        s += &format!("  {} (STEP.{}): {}\n", p.name, stage_suffix(p), p.what);
    }
    s += "  ptx (STEP.ptx): the PTX module\nAliases, the stage names from before the pass \
          registry, with their file names:\n";
    for a in ["graph", "fused", "lowered", "kernel"] {
        if let Some((p, suffix)) = alias(a) {
            s += &format!("  {a} (STEP.{suffix}) = {}\n", p.name);
        }
    }
    s
}

/// One `--emit` entry.
struct Emit {
    /// As given.
    name: String,
    stage: Stage,
    /// What follows `STEP.` in the file name (unused for `ast`).
    suffix: String,
}

fn parse_emit(name: &str) -> Result<Emit> {
    let Some(stage) = Stage::named(name) else {
        bail!("--emit {name}: the stages are {}", stage_names());
    };
    let suffix = match (stage, alias(name)) {
        (_, Some((_, s))) => s.to_string(),
        (Stage::Pass(p), None) => stage_suffix(p),
        (Stage::Ptx, None) => "ptx".to_string(),
        (Stage::Ast, None) => "ast.tsl".to_string(),
    };
    Ok(Emit {
        name: name.to_string(),
        stage,
        suffix,
    })
}

/// `tessel build`: write the stages `emit` names (default: the `--stop-after` stage, else
/// `ptx`), compiling no further than `stop_after`.
pub fn build(
    file: &Path,
    args: &CompileArgs,
    emit: &[String],
    stop_after: Option<&str>,
    out: &Path,
) -> Result<()> {
    if let Some(n) = args.tp {
        bail!("--tp {n}: `build` writes the step as written; `tessel explain --tp {n}` prints each rank's phases and kernels");
    }
    let stop = match stop_after.map(str::trim) {
        Some(s) => match Stage::named(s) {
            Some(st) => Some((s, st)),
            None => bail!("--stop-after {s}: the stages are {}", stage_names()),
        },
        None => None,
    };
    let emit: Vec<Emit> = if emit.is_empty() {
        vec![parse_emit(stop.map_or("ptx", |(s, _)| s))?]
    } else {
        emit.iter()
            .map(|e| parse_emit(e.trim()))
            .collect::<Result<_>>()?
    };
    if let Some((s, st)) = stop {
        if let Some(e) = emit.iter().find(|e| e.stage.position() > st.position()) {
            bail!("--emit {}: that stage comes after --stop-after {s}", e.name);
        }
    }
    let src = load(file)?;
    // main checked `out` before any work; it is made when the first file is written.
    let write = |name: String, text: String| -> Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
        println!("wrote {}", p.display());
        Ok(())
    };
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("module");
    if emit.iter().any(|e| e.stage == Stage::Ast) {
        // The file as parsed; what it imports is printed where it is read from.
        write(format!("{stem}.ast.tsl"), src.root_module().to_string())?;
    }
    let stop_pass = match stop {
        Some((_, Stage::Ast)) => return Ok(()),
        Some((_, Stage::Pass(p))) => Some(p),
        Some((_, Stage::Ptx)) | None => None,
    };
    // Every step is compiled before any file of a step is written: when one fails to
    // compile, no step's files are written (as before the registry).
    let dims = bound_dims(args)?;
    let gpu = device::gpu_unless(args.target.is_some()).ok();
    let (target, from) = target_for(args, gpu.as_ref());
    println!(
        "target: {} ({}, from {from})",
        target.name,
        target.ptx_target()
    );
    let opts = Options {
        profile: args.profile,
        ..options(&target, args)
    };
    let mut files = Vec::new();
    for name in step_names(&src, args)? {
        let (texts, ir) = src.stage_texts(&name, &dims, &opts, stop_pass, &|p| {
            emit.iter().any(|e| e.stage == Stage::Pass(p))
        })?;
        let dumps: HashMap<&'static str, String> =
            texts.into_iter().map(|t| (t.pass.name, t.text)).collect();
        for e in &emit {
            let text = match e.stage {
                Stage::Ast => continue,
                Stage::Pass(p) => dumps[p.name].clone(),
                Stage::Ptx => match &ir {
                    Ir::Kernel(c) => device::ptx_of(&c.program, &c.ptx)?,
                    _ => bail!("internal error: the last pass does not give kernel IR"),
                },
            };
            files.push((format!("{name}.{}", e.suffix), text));
        }
    }
    for (name, text) in files {
        write(name, text)?;
    }
    Ok(())
}
