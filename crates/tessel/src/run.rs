//! `tessel run`: run every selected step once, on the GPU or the CPU executor, and write its
//! outputs (and, on request, its inputs and intermediates) as safetensors.

use crate::cpu::execute;
use crate::device;
use crate::frontend::{compile_steps, config, load, options, step_params, target_for};
use crate::inputs::{make_inputs, note_unused, write_outputs};
use crate::memory::{ensure_fits, Place};
use crate::{CompileArgs, InputArgs, ReproArgs};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessel_driver::words::plural;
use tessel_driver::Weights;
use tessel_ir::kernel::BufferRole;
use tessel_ref::Tensor;

/// Where `tessel run` writes.
pub struct RunOutputs {
    pub out: Option<PathBuf>,
    pub save_inputs: Option<PathBuf>,
    pub dump_temps: bool,
    /// Where a step that fails at run time leaves its reproducer bundle.
    pub repro: ReproArgs,
}

fn digest(t: &Tensor) -> String {
    // FNV-1a 64 over the bytes: a short fingerprint to compare runs by eye.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &t.data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `path` for one of several steps: `DIR/STEM.STEP.EXT`.
fn per_step(path: &Path, step: &str, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("out");
    path.with_file_name(format!("{stem}.{step}.safetensors"))
}

/// `tessel run`.
pub fn run(
    file: &Path,
    args: &CompileArgs,
    in_args: &InputArgs,
    outs: &RunOutputs,
    cpu: bool,
    checked: bool,
) -> Result<()> {
    let src = load(file)?;
    let weights = Weights::open(&in_args.spec())?;
    let gpu = device::gpu_unless(cpu);
    let (target, _) = target_for(args, gpu.as_ref().ok());
    let opts = options(&target, args);
    let steps = compile_steps(&src, args, &opts, &weights)?;
    let config = config(args, &opts)?;
    let names: Vec<String> = steps.iter().map(|s| s.name.clone()).collect();
    note_unused(in_args, &step_params(&src, &names));
    match &gpu {
        Ok(g) => println!("device: {} (GPU)", g.properties().name),
        Err(why) => println!("device: CPU kernel-IR executor ({why})"),
    }
    let several = steps.len() > 1;
    if outs.dump_temps && steps.iter().any(|s| s.ranks.is_some()) {
        anyhow::bail!(
            "--dump-temps with --tp: each rank has its own intermediates; run without --tp to see the step's"
        );
    }
    for step in &steps {
        let full;
        let p = if outs.dump_temps {
            full = step.compiled.with_intermediates();
            &full
        } else {
            &step.compiled.program
        };
        for (param, w) in step.weights.iter() {
            println!(
                "  {param} from --weights: `{}` in {}",
                w.name,
                w.file.display()
            );
        }
        let rank_programs = step.rank_programs();
        let place = match &gpu {
            Ok(g) => Place::Gpu(g),
            Err(_) => Place::Executor,
        };
        ensure_fits(&step.name, p, rank_programs.as_deref(), &place, &args.dims)?;
        let inputs = make_inputs(p, in_args, &step.weights)?;
        if let Some(path) = &outs.save_inputs {
            let path = per_step(path, &step.name, several);
            let named: Vec<(String, &Tensor)> = p
                .inputs
                .iter()
                .map(|(n, _)| n.clone())
                .zip(inputs.iter())
                .collect();
            write_outputs(&path, &named)?;
            println!("  wrote inputs to {}", path.display());
        }
        if let Some(plan) = &step.plan {
            for n in &plan.notes {
                println!("  note: {n}");
            }
            if plan.splits_nothing() {
                println!("  note: {}", tessel_passes::tp::NOTHING_SPLIT);
            }
        }
        let t0 = Instant::now();
        let ran: Result<_> = (|| match (&gpu, &rank_programs) {
            (Ok(_), Some(ranks)) => {
                let (transport, how) = crate::ranks::Transport::choose(ranks.len() as u32);
                println!("  ranks: {how}");
                Ok((
                    crate::ranks::run(ranks, &step.compiled.ptx, &inputs, transport, None)?.0,
                    "on the GPU, wall clock: upload, kernels, all-gathers and download",
                ))
            }
            (Err(_), Some(ranks)) => {
                println!(
                    "  ranks: {} on the executor one after another, all-gathers as host copies",
                    ranks.len()
                );
                Ok((
                    tessel_ref::ranks::run_ranks(ranks, &inputs)
                        .with_context(|| format!("executing step `{}`'s ranks", step.name))?,
                    "on the CPU executor, which interprets the kernel IR: no measure of GPU speed",
                ))
            }
            (Ok(g), None) if checked => Ok((
                device::run_once(g, p, &step.compiled.ptx, &inputs)?,
                "on the GPU, kernels one at a time (--checked), wall clock: upload, kernels \
                 and download; `tessel bench` times the kernels alone",
            )),
            (Ok(g), None) => Ok((
                device::run_graph_once(g, p, &step.compiled.ptx, &inputs).context(
                    "the step as one CUDA graph failed; `--checked` runs the kernels one at a \
                     time and names the one that faults",
                )?,
                "on the GPU as one CUDA graph, wall clock: upload, kernels and download; \
                 `tessel bench` times the kernels alone",
            )),
            (Err(_), None) => Ok((
                execute(p, &inputs, &step.name)?,
                "on the CPU executor, which interprets the kernel IR: no measure of GPU speed",
            )),
        })();
        let (results, timed) = match ran {
            Ok(r) => r,
            Err(e) => {
                // A launch, the GPU or the executor failed: leave what reproduces it.
                outs.repro
                    .write(&src, step, &config, in_args, format!("{e:#}"));
                return Err(e);
            }
        };
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let kernels = match &rank_programs {
            Some(r) => format!(
                "{}, each {} in {} with {}",
                plural(r.len(), "rank"),
                plural(
                    r[0].phases.iter().map(|ph| ph.body.kernels.len()).sum(),
                    "kernel"
                ),
                plural(r[0].phases.len(), "phase"),
                plural(r[0].exchanges().count(), "all-gather")
            ),
            None => plural(p.kernels.len(), "kernel"),
        };
        println!("step {}: {kernels}, {ms:.1} ms {timed}", step.name);
        let mut named = Vec::new();
        for ((name, b), t) in p.outputs.iter().zip(&results) {
            // An intermediate has no source name; say which graph value it holds.
            let value = step.compiled.buffer_of.iter().find(|(_, ob)| *ob == b);
            let what = match (value, p.buffers[*b].role) {
                (Some((v, _)), BufferRole::Temp) => {
                    format!(" (intermediate: graph value {v}, see `tessel explain`)")
                }
                (_, BufferRole::InOut(_)) => " (inout, updated in place)".to_string(),
                _ => String::new(),
            };
            println!("  {name}{what}: {} digest {}", t.ty, digest(t));
            named.push((name.clone(), t));
        }
        let path = match &outs.out {
            Some(o) => per_step(o, &step.name, several),
            None => PathBuf::from("out").join(format!("{}.safetensors", step.name)),
        };
        write_outputs(&path, &named)?;
        println!("  wrote {}", path.display());
    }
    Ok(())
}
