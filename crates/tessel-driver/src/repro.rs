//! Reproducer bundles: when a step fails — `tessel check` finds an output the reference
//! rejects, or a kernel launch or the executor fails at run time — everything needed to
//! reproduce it on another machine, in one directory.
//!
//! [`write_bundle`] writes, under `PARENT/STEP-ID/` (ID: 12 hex digits of a hash of the
//! sources, dims, options, inputs and compiler version, so the same failure lands in the
//! same directory):
//!
//! | file | what |
//! | --- | --- |
//! | `src/...` | the step's source file and every file it imports, byte for byte, in their relative layout |
//! | `bundle.json` | the step, dims, profile, target, schedule flags, tensor parallelism, each input's origin (seed, fill, file, checkpoint tensor), the failure, the tessel version and commit, the commands below |
//! | `command.txt` | the command that failed (when there was one), the `tessel` command that reproduces it from the bundle, and the ptxas command |
//! | `stages/STEM.ast.tsl` | the source as parsed, printed back (`tessel build --emit ast`) |
//! | `stages/STEP.PASS.graph`, `stages/STEP.PASS.kir` | the IR after every registered pass (`tessel build --emit PASS`) |
//! | `STEP.ptx` | the PTX module of the step as it ran |
//! | `ptxas.sh` | assembles `STEP.ptx` with the step's `-arch` (`$TESSEL_PTXAS`, else `ptxas` on `PATH`) |
//!
//! Input tensors are not copied: random inputs are given by their seeds, fills by their
//! start, and inputs read from files by the files' paths.

use crate::error::Error;
use crate::inputs::{random_seed, InputSpec};
use crate::source::Source;
use crate::stages::stage_suffix;
use crate::step::{Config, Step};
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};
use tessel_passes::Target;

/// Where `tessel` writes bundles when not told otherwise, relative to the current directory.
pub const DEFAULT_DIR: &str = "tessel-repro";

/// What a bundle records besides the step: how its inputs were made and what failed.
#[derive(Clone, Debug)]
pub struct Failure<'a> {
    /// How the step's inputs were made (as [`crate::make_inputs`] was given them).
    pub inputs: &'a InputSpec,
    /// What went wrong, as it was reported (an error's chain, or the outputs that failed).
    pub what: String,
    /// The command line that failed, when there was one (`tessel check ...`); a library
    /// caller leaves it out.
    pub command: Option<String>,
}

/// Writes a reproducer bundle for `step` (compiled from `src` with `config`) under
/// `parent`, creating `parent` if it is missing, and returns the bundle's directory,
/// `parent/STEP-ID`. The files are listed in the module docs; an existing bundle of the
/// same ID is overwritten file by file. The IR stages are recompiled from `src` with
/// `config` (the [`Step`] keeps only the final program); the PTX is the step's own.
///
/// # Errors
/// [`Error::Bundle`] when a directory or file cannot be made or written;
/// [`Error::Source`], [`Error::UnboundDims`] or [`Error::Compile`] if the step no longer
/// checks or compiles from `src` and `config` (it did, to give `step`); [`Error::Ptx`] if
/// a kernel cannot be printed.
pub fn write_bundle(
    src: &Source,
    step: &Step,
    config: &Config,
    failure: &Failure,
    parent: &Path,
) -> Result<PathBuf, Error> {
    let sources = source_layout(src);
    let ptx = crate::device::ptx_of(&step.compiled.program, &step.compiled.ptx)?;
    let (stages, _) =
        src.stage_texts(&step.name, &config.dims, &config.options, None, &|_| true)?;

    let opts = &config.options;
    let preset = preset_of(&opts.target);
    let root = sources
        .first()
        .map(|(p, _)| p.clone())
        .unwrap_or_else(|| PathBuf::from("src"));
    let reproduce = reproduce_command(&root, &step.name, config, preset, failure.inputs);
    let ptx_file = format!("{}.ptx", step.name);
    let arch = step.compiled.ptx.target.clone();
    let ptxas_args = [
        format!("-arch={arch}"),
        "-v".into(),
        ptx_file.clone(),
        "-o".into(),
        format!("{}.cubin", step.name),
    ];
    let ptxas_command = format!("ptxas {}", ptxas_args.join(" "));

    let mut hasher = Fnv::default();
    hasher.add(env!("CARGO_PKG_VERSION").as_bytes());
    for (path, file) in &sources {
        hasher.add(path.to_string_lossy().as_bytes());
        hasher.add(file.text.as_bytes());
    }
    hasher.add(reproduce.as_bytes());
    hasher.add(format!("{:?}", opts.target).as_bytes());
    let dir = parent.join(format!("{}-{:012x}", step.name, hasher.0 >> 16));

    let p = &step.compiled.program;
    let inputs: Vec<Value> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (name, b))| {
            let mut v = json!({"name": name, "type": p.buffers[*b].ty.to_string()});
            let spec = failure.inputs;
            let fill = spec.fills.iter().find(|(n, _)| n == name);
            if let Some(w) = step.weights.get(name) {
                v["from"] = json!("checkpoint");
                v["tensor"] = json!(w.name);
                v["file"] = json!(w.file.display().to_string());
            } else if let Some((_, start)) = fill {
                v["from"] = json!("iota");
                v["start"] = json!(start);
            } else if let Some(f) = &spec.inputs {
                v["from"] = json!("file");
                v["file"] = json!(f.display().to_string());
                if spec.allow_random {
                    v["seed_if_missing"] = json!(random_seed(spec.seed, i));
                }
            } else {
                v["from"] = json!("random");
                v["seed"] = json!(random_seed(spec.seed, i));
            }
            v
        })
        .collect();
    let stage_files: Vec<String> = std::iter::once(format!("stages/{}.ast.tsl", stem(src)))
        .chain(
            stages
                .iter()
                .map(|s| format!("stages/{}.{}", step.name, stage_suffix(s.pass))),
        )
        .collect();
    let t = &opts.target;
    let spec = failure.inputs;
    let bundle = json!({
        "tessel": {
            "version": env!("CARGO_PKG_VERSION"),
            "commit": option_env!("TESSEL_GIT_COMMIT"),
        },
        "step": step.name,
        "file": src.name,
        "root": root.display().to_string(),
        "sources": sources.iter().map(|(path, f)| json!({
            "path": path.display().to_string(), "as_named": f.name, "bytes": f.text.len(),
        })).collect::<Vec<_>>(),
        "dims": config.dims,
        "profile": opts.profile.name(),
        "target": {
            "name": t.name,
            "preset": preset,
            "ptx_target": t.ptx_target(),
            "compute_capability": [t.compute_capability.0, t.compute_capability.1],
            "sm_count": t.sm_count,
            "max_shared_per_cta": t.max_shared_per_cta,
            "l2_bytes": t.l2_bytes,
            "features": format!("{:?}", t.features),
        },
        "schedule": {
            "wgmma_tma": opts.wgmma_tma,
            "wgmma_attention": opts.wgmma_attention,
            "wgmma_attention_keys": opts.wgmma_attention_keys,
            "wgmma_pingpong": opts.wgmma_pingpong,
            "merge_launches": opts.merge_launches,
            "dependent_launch": opts.dependent_launch,
            "tensor_parallel": opts.tensor_parallel,
            "verify": opts.verify,
        },
        "tp": config.tp,
        "inputs": {
            "seed": spec.seed,
            "fills": spec.fills.iter().map(|(n, s)| json!({"name": n, "start": s})).collect::<Vec<_>>(),
            "file": spec.inputs.as_ref().map(|f| f.display().to_string()),
            "allow_random": spec.allow_random,
            "checkpoint": spec.checkpoint.as_ref().map(|f| f.display().to_string()),
            "layer": spec.layer,
            "each": inputs,
        },
        "failure": failure.what,
        "command": failure.command,
        "reproduce": reproduce,
        "stages": stage_files,
        "ptx": ptx_file,
        "ptxas": {"arch": arch, "args": ptxas_args, "command": ptxas_command},
        "created_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });

    let write = |rel: &str, bytes: &[u8]| -> Result<(), Error> {
        let path = dir.join(rel);
        let bundle_error = |error| Error::Bundle {
            path: path.clone(),
            error,
        };
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(bundle_error)?;
        }
        std::fs::write(&path, bytes).map_err(bundle_error)
    };
    for (path, file) in &sources {
        write(&path.to_string_lossy(), file.text.as_bytes())?;
    }
    write(&stage_files[0], src.root_module().to_string().as_bytes())?;
    for (file, s) in stage_files[1..].iter().zip(&stages) {
        write(file, s.text.as_bytes())?;
    }
    write(&ptx_file, ptx.as_bytes())?;
    let json_text = serde_json::to_string_pretty(&bundle).unwrap_or_else(|e| format!("{e}"));
    write("bundle.json", json_text.as_bytes())?;
    let mut command = String::new();
    if let Some(c) = &failure.command {
        command += &format!("# the command that failed\n{c}\n\n");
    }
    command += &format!(
        "# reproduce, from this directory\n{reproduce}\n\n# assemble the PTX, from this directory\n{ptxas_command}\n"
    );
    write("command.txt", command.as_bytes())?;
    let script = format!(
        "#!/bin/sh\n# Assembles {ptx_file} as tessel's tests do: ptxas {} (CUDA 13.0;\n# scripts/install-ptxas.sh installs it). TESSEL_PTXAS names the binary, else ptxas on PATH.\nset -e\ncd \"$(dirname \"$0\")\"\nexec \"${{TESSEL_PTXAS:-ptxas}}\" {}\n",
        ptxas_args.join(" "),
        ptxas_args.join(" ")
    );
    write("ptxas.sh", script.as_bytes())?;
    make_executable(&dir.join("ptxas.sh"))?;
    Ok(dir)
}

/// Each source file with the path it gets in the bundle: `src/` and its path relative to
/// the deepest directory holding every file, so imports resolve as they did. A file whose
/// path cannot be resolved (a program parsed from a string) goes in `src/` by its name.
fn source_layout(src: &Source) -> Vec<(PathBuf, &tessel_syntax::SourceFile)> {
    let files = src.sources.files();
    let canonical: Option<Vec<PathBuf>> = files
        .iter()
        .map(|f| std::fs::canonicalize(&f.path).ok())
        .collect();
    match canonical {
        Some(paths) if !paths.is_empty() => {
            let mut common: PathBuf = paths[0].parent().map(Path::to_path_buf).unwrap_or_default();
            for p in &paths[1..] {
                while !p.starts_with(&common) {
                    if !common.pop() {
                        break;
                    }
                }
            }
            paths
                .iter()
                .zip(files)
                .map(|(p, f)| {
                    let rel = p.strip_prefix(&common).unwrap_or(p);
                    let rel: PathBuf = rel
                        .components()
                        .filter(|c| matches!(c, Component::Normal(_)))
                        .collect();
                    (Path::new("src").join(rel), f)
                })
                .collect()
        }
        _ => files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = Path::new(&f.name)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| format!("file{i}.tsl"));
                (Path::new("src").join(name), f)
            })
            .collect(),
    }
}

/// The stem `tessel build --emit ast` names the parsed source by.
fn stem(src: &Source) -> String {
    Path::new(&src.name)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("module")
        .to_string()
}

/// The preset `target` is, by its name in [`Target::PRESETS`], if it is one.
fn preset_of(target: &Target) -> Option<&'static str> {
    Target::PRESETS
        .into_iter()
        .find(|p| Target::preset(p).as_ref() == Some(target))
}

/// The `tessel` command that runs the step again as it ran, from the bundle's directory:
/// `check` (or `run` with tensor parallelism, which `check` refuses).
fn reproduce_command(
    root: &Path,
    step: &str,
    config: &Config,
    preset: Option<&str>,
    inputs: &InputSpec,
) -> String {
    let opts = &config.options;
    let mut args: Vec<String> = vec![
        "tessel".into(),
        if config.tp.is_some() { "run" } else { "check" }.into(),
        root.display().to_string(),
        "--step".into(),
        step.into(),
    ];
    for (name, size) in &config.dims {
        args.extend(["--dim".into(), format!("{name}={size}")]);
    }
    args.extend(["--profile".into(), opts.profile.name().into()]);
    match preset {
        Some(p) => args.extend(["--target".into(), p.into()]),
        // Compiled for a GPU's own properties: the GPU of the same chip compiles the same.
        None => args.push(format!(
            "# on a {} (no --target preset has its properties)",
            opts.target.name
        )),
    }
    if let Some(n) = config.tp {
        args.extend(["--tp".into(), n.to_string()]);
    }
    if !opts.wgmma_tma {
        args.push("--no-wgmma-tma".into());
    }
    if !opts.wgmma_attention {
        args.push("--no-wgmma-attention".into());
    } else if opts.wgmma_attention_keys != 0 {
        args.extend([
            "--wgmma-attention-keys".into(),
            opts.wgmma_attention_keys.to_string(),
        ]);
    }
    if !opts.wgmma_pingpong {
        args.push("--no-wgmma-pingpong".into());
    }
    if !opts.merge_launches {
        args.push("--no-merge-launches".into());
    }
    if !opts.dependent_launch {
        args.push("--no-dependent-launch".into());
    }
    args.extend(["--seed".into(), inputs.seed.to_string()]);
    for (name, start) in &inputs.fills {
        args.extend(["--fill".into(), format!("{name}=iota:{start}")]);
    }
    if let Some(f) = &inputs.inputs {
        args.extend(["--inputs".into(), f.display().to_string()]);
    }
    if inputs.allow_random {
        args.push("--allow-random".into());
    }
    if let Some(w) = &inputs.checkpoint {
        args.extend(["--weights".into(), w.display().to_string()]);
    }
    if let Some(l) = inputs.layer {
        args.extend(["--layer".into(), l.to_string()]);
    }
    // The comment about the target, if any, goes last so that the command stays runnable.
    let (comments, mut args): (Vec<String>, Vec<String>) =
        args.into_iter().partition(|a| a.starts_with("# "));
    args = args.iter().map(|a| shell_quote(a)).collect();
    args.extend(comments);
    args.join(" ")
}

/// `s` quoted for a POSIX shell where it needs it (in single quotes), else as it is.
pub fn shell_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|error| {
        Error::Bundle {
            path: path.to_path_buf(),
            error,
        }
    })
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> Result<(), Error> {
    Ok(())
}

/// FNV-1a, 64 bits, with a separator between parts: the bundle's ID.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain(&[0xff]) {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reproducer names the attention tile's choice as the command line spells it: no
    /// flag for the default (the warpgroup tile at 64 keys a block), `--no-wgmma-attention`
    /// when it is off, `--wgmma-attention-keys 128` when asked for.
    #[test]
    fn the_command_names_the_attention_tile_as_the_cli_spells_it() {
        let command = |wgmma_attention: bool, keys: u32| {
            let mut config = Config::default();
            config.options.wgmma_attention = wgmma_attention;
            config.options.wgmma_attention_keys = keys;
            let inputs = InputSpec {
                seed: 3,
                ..InputSpec::default()
            };
            reproduce_command(Path::new("a.tsl"), "s", &config, Some("h100"), &inputs)
        };
        let default = command(true, 0);
        assert!(!default.contains("wgmma-attention"), "{default}");
        let off = command(false, 0);
        assert!(off.contains(" --no-wgmma-attention "), "{off}");
        assert!(!off.contains("--wgmma-attention-keys"), "{off}");
        let keys = command(true, 128);
        assert!(keys.contains(" --wgmma-attention-keys 128 "), "{keys}");
        assert!(!keys.contains("--no-wgmma-attention"), "{keys}");
    }
}
