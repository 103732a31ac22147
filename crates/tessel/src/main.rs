//! `tessel`: the command line (design §8). The only crate that sees the whole pipeline:
//! source → AST → graph IR → kernel IR → PTX → GPU, and the CPU references beside it.
//!
//! ```text
//! tessel build   FILE.tsl [--dim T=4096] [--emit STAGE,...] [--stop-after STAGE] [-o DIR]
//!                                           a STAGE is ast, a pass name (`--help`), or ptx
//! tessel run     FILE.tsl [--dim ...] [--inputs IN.safetensors] [--seed N] [-o OUT.safetensors]
//!                         [--weights CHECKPOINT [--layer N]]  `from "..."` parameters
//! tessel check   [FILES...] [--dim ...]     judged by the reference; GPU vs executor (bits)
//!                [--repro-dir DIR]          a failing step's reproducer bundle (also `run`)
//! tessel explain FILE.tsl [--dim ...]       schedule and TileConfig of each kernel, and why
//! tessel bench   FILE.tsl [--dim ...]       time and bandwidth of each kernel on the GPU
//!                [--plot OUT.svg|OUT.png]   drawn against their floors
//! tessel invariance FILE.tsl --batch-dim M  rows bit-identical whatever the batch size
//! tessel fuzz    [--count N] [--seed S]     random programs judged by the reference
//!                [--grad]                   gradient programs, also against finite differences
//! ```
//!
//! One module per subcommand (`build`, `run`, `check`, `explain`, `bench`, `invariance`,
//! `fuzz`); beside them `frontend` (source to compiled steps, diagnostics rendered),
//! `device` (the GPU), `cpu` (the kernel-IR executor), `memory` (whether a step fits),
//! `inputs`, `weights` (checkpoints), `paths` and `words`.
//! Questions about the IR are answered by the crates that own it (`tessel_passes::Compiled`).

mod bench;
mod build;
mod check;
mod cpu;
mod device;
mod explain;
mod frontend;
mod fuzz;
mod inputs;
mod invariance;
mod memory;
mod paths;
mod plot;
mod ranks;
mod repro;
mod run;
mod tpcheck;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "tessel",
    version,
    about = "Compile tessel steps to PTX; run and check them on the GPU and CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every command needs to compile a step.
#[derive(Args, Clone, Debug)]
pub struct CompileArgs {
    /// Bind a symbolic dim, e.g. `--dim T=4096` (repeatable).
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = frontend::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Compile only this step (default: every step in the file).
    #[arg(long)]
    pub step: Option<String>,
    /// Numerics profile: `exact` (bit-identical to the CPU executor), `invariant` (a row's
    /// result never depends on the batch size) or `fast`.
    #[arg(long, default_value = "exact", value_parser = frontend::parse_profile)]
    pub profile: tessel_passes::Profile,
    /// Compile for a named machine (h200 or h100) instead of the GPU found (its properties
    /// are used when there is one; without one, h200).
    #[arg(long, value_name = "NAME", value_parser = frontend::parse_target)]
    pub target: Option<String>,
    /// Tensor parallelism over N ranks (1, 2, 4 or 8; docs/tensor-parallel.md): the step is
    /// split Megatron-style and each rank runs its blocks of every weight and cache, with
    /// all-gathers between its phases and a reduction whose bits do not depend on N. `run`
    /// and `bench` run the ranks (NCCL with a GPU per rank, else every rank on GPU 0 in
    /// turn, or the CPU executor); `explain` prints the plan and rank 0's phases;
    /// `tp-check` takes world sizes with --sizes; `check`, `invariance` and `build` refuse it.
    #[arg(long, value_name = "N")]
    pub tp: Option<u32>,
    /// Keep the large 16-bit GEMMs off the warp-specialised TMA tile. By default in `fast`
    /// on sm_90a it takes those whose 128 × 256 tiles leave a last wave of at most half the
    /// SMs' worth, that wave's tiles split in two (`wgmma: tma, tail: N` in the schedule),
    /// and those the ping-pong tile does not take (`wgmma: tma`): a TMA producer warpgroup,
    /// two wgmma consumer warpgroups, mbarriers; the same order of sums, so the same bits.
    /// With this flag the former take the ping-pong tile (see --no-wgmma-pingpong) and the
    /// latter the warpgroup (wgmma) tile, loaded by cp.async from every warp.
    #[arg(long)]
    pub no_wgmma_tma: bool,
    /// Run the GEMMs the ping-pong tile does not take on the TMA tile (the default; kept for
    /// scripts written when it was opt-in): see --no-wgmma-tma.
    #[arg(long, conflicts_with = "no_wgmma_tma")]
    pub wgmma_tma: bool,
    /// Run prefill attention on the warpgroup tile (the default; kept for scripts written
    /// when it was opt-in): see --no-wgmma-attention.
    #[arg(long, conflicts_with = "no_wgmma_attention")]
    pub wgmma_attention: bool,
    /// Keep prefill attention on the mma.sync tile. By default, prefill attention (head
    /// dims multiples of 64 up to 256, keys not split) in `fast` on sm_90a runs on the
    /// warpgroup tile, FlashAttention-3's structure: a producer warpgroup loading K and V
    /// by TMA through an mbarrier ring, two wgmma consumer warpgroups of 64 query rows,
    /// S = Q·Kᵀ from shared memory, P·V with P in registers (`wgmma: 1` in the attention's
    /// schedule; the same order of sums as the mma.sync tile).
    #[arg(long)]
    pub no_wgmma_attention: bool,
    /// Keys per block of the warpgroup attention tile: 64 (the default, the mma.sync
    /// tile's: the same order of sums, the same executor bits) or 128 (FlashAttention-3's
    /// at head dim 128: another order of sums, within the same bound; `explain` prints it
    /// as the tile's block_n).
    #[arg(long, value_name = "KEYS", conflicts_with = "no_wgmma_attention", value_parser = ["64", "128"])]
    pub wgmma_attention_keys: Option<String>,
    /// Keep the large 16-bit GEMMs on the warpgroup (wgmma) tile in `fast` on sm_90a. By
    /// default those with at least two 128 × 128 tiles per SM run on the persistent
    /// ping-pong tile (one CTA per SM walking the tiles; a TMA producer warpgroup; two wgmma
    /// consumer warpgroups taking tiles in turn, one's epilogue overlapping the other's main
    /// loop; `wgmma: pingpong` in the schedule; the same order of sums, so the same bits).
    /// The GEMMs the ping-pong tile does not take get the TMA tile (see --no-wgmma-tma).
    #[arg(long)]
    pub no_wgmma_pingpong: bool,
    /// Launch every kernel on its own. By default consecutive independent kernels of one
    /// kind with plain statements (the decode layer's q, k and v GEMVs; its two KV-cache
    /// updates) run as one kernel over their CTAs (`merge-launches`; the same bits).
    #[arg(long)]
    pub no_merge_launches: bool,
    /// Launch every kernel stream-ordered. By default on sm_90 each kernel begins while the
    /// one ahead finishes (programmatic dependent launch: `griddepcontrol.wait` before its
    /// first global access, `launch_dependents` after its last read; the same bits).
    #[arg(long)]
    pub no_dependent_launch: bool,
}

/// How inputs are made.
#[derive(Args, Clone, Debug)]
pub struct InputArgs {
    /// Read inputs by name from a safetensors file (names, dtypes and shapes must match;
    /// every input not given by --fill must be in it, unless --allow-random).
    #[arg(long, value_name = "FILE")]
    pub inputs: Option<PathBuf>,
    /// Seed for the random inputs made for anything `--inputs` does not provide.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fill an i32 input with consecutive integers: `--fill pos=iota:127000` gives
    /// 127000, 127001, ... (repeatable). Every value must fit in i32.
    #[arg(long = "fill", value_name = "NAME=iota[:START]", value_parser = inputs::parse_fill)]
    pub fills: Vec<(String, i64)>,
    /// With --inputs: use seeded random values, with a warning, for inputs the file does
    /// not have (without it, a missing input is an error).
    #[arg(long)]
    pub allow_random: bool,
    #[command(flatten)]
    pub weights: WeightArgs,
}

impl InputArgs {
    /// The driver's form of these options.
    pub fn spec(&self) -> tessel_driver::InputSpec {
        tessel_driver::InputSpec {
            inputs: self.inputs.clone(),
            seed: self.seed,
            fills: self.fills.clone(),
            allow_random: self.allow_random,
            checkpoint: self.weights.weights.clone(),
            layer: self.weights.layer,
        }
    }
}

/// Where a failing step's reproducer bundle goes (`run`, `check`).
#[derive(Args, Clone, Debug, Default)]
pub struct ReproArgs {
    /// When a step fails (an output the reference rejects, a kernel launch or the executor
    /// failing), write its reproducer bundle under DIR/STEP-ID/: the source and its imports,
    /// bundle.json (dims, profile, target, schedule flags, each input's seed or fill, the
    /// tessel version), command.txt (the failing command, the one that reproduces it, the
    /// ptxas command), the IR after every pass, the PTX and ptxas.sh. Default:
    /// ./tessel-repro. The path is printed on stderr.
    #[arg(long, value_name = "DIR")]
    pub repro_dir: Option<PathBuf>,
    /// Write no reproducer bundle.
    #[arg(long, conflicts_with = "repro_dir")]
    pub no_repro: bool,
}

/// Where the step parameters declared `from "tensor.name"` are read.
#[derive(Args, Clone, Debug, Default)]
pub struct WeightArgs {
    /// Read every step parameter declared `from "NAME"` from this Hugging Face checkpoint:
    /// a .safetensors file, or a directory with model.safetensors or a sharded
    /// model.safetensors.index.json. Memory-mapped; only the tensors the step names are
    /// read. Each must have the parameter's dtype and shape exactly (nothing is converted).
    /// Without it, such parameters are inputs like any other.
    #[arg(long, value_name = "PATH")]
    pub weights: Option<PathBuf>,
    /// The layer number that `{layer}` stands for in the tensor names (with --weights).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = parse_layer)]
    pub layer: Option<u64>,
}

/// Parses `--layer`: a layer number, 0 or more.
fn parse_layer(s: &str) -> Result<u64, String> {
    s.trim().parse::<u64>().map_err(|_| {
        format!("`{s}`: a layer number is an integer, 0 or more (layers count from 0)")
    })
}

#[derive(Subcommand)]
enum Command {
    /// Compile to PTX (and write any stage, the IR after any pass, with --emit).
    Build {
        file: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
        /// Stages to write: ast, a pass name, ptx; the aliases graph, fused, lowered,
        /// kernel (default: the --stop-after stage, else ptx).
        #[arg(long, value_delimiter = ',', value_name = "STAGE", long_help = build::emit_help())]
        emit: Vec<String>,
        /// Run no pass after this stage (a pass name, or ast, an alias or ptx, as --emit);
        /// a stage --emit names must not come after it.
        #[arg(long, value_name = "STAGE")]
        stop_after: Option<String>,
        /// Output directory: STEM.ast.tsl and STEP.STAGE files go into it. It is created if
        /// missing and must be writable, checked before compiling.
        #[arg(short, long, default_value = "out")]
        out: PathBuf,
    },
    /// Run a step on the GPU (or on the CPU executor when there is none).
    Run {
        file: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
        #[command(flatten)]
        inputs: InputArgs,
        /// The safetensors file to write the outputs to; default out/STEP.safetensors.
        /// When several steps run (a file with several steps and no --step), each step
        /// gets its own file beside it: `-o DIR/STEM.safetensors` writes
        /// DIR/STEM.STEP.safetensors for every STEP. Its directory is created if missing
        /// and must be writable, checked before compiling.
        #[arg(short, long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Use the CPU executor even if a GPU is present.
        #[arg(long)]
        cpu: bool,
        /// Also write the inputs used (random, filled or read) to this safetensors file;
        /// named per step like -o (DIR/STEM.STEP.safetensors) when several steps run.
        #[arg(long, value_name = "FILE")]
        save_inputs: Option<PathBuf>,
        /// Also write the intermediate tensors materialised between kernels with the
        /// outputs. They have no source name: each is named `t<N>` after the graph value it
        /// holds (`vN` in `tessel build --emit fused` and `tessel explain`).
        #[arg(long)]
        dump_temps: bool,
        /// On the GPU, launch the kernels one at a time, each waited for, so that a fault
        /// names its kernel. Without it the step runs as one CUDA graph, its launches
        /// overlapping as in production (`tessel check` requires the two to give the same
        /// bits); a fault there names no kernel: rerun with --checked. Ranks (--tp) and the
        /// CPU executor run as they always do.
        #[arg(long)]
        checked: bool,
        #[command(flatten)]
        repro: ReproArgs,
    },
    /// Check steps: every output of the CPU executor (and the GPU) judged by a reference
    /// that follows the program's dtypes, within the bound its roundings allow; the GPU's
    /// bits against the executor's where no tensor cores run. The f64 oracle's error is
    /// printed beside each verdict.
    Check {
        /// Files to check (default: every .tsl under examples/).
        files: Vec<PathBuf>,
        #[command(flatten)]
        compile: CompileArgs,
        #[command(flatten)]
        inputs: InputArgs,
        /// Skip the GPU even if present.
        #[arg(long)]
        cpu: bool,
        /// Fail (exit 1) when any step is skipped: one needing dims the command line does
        /// not give (over the default list of examples), or too large for the CPU
        /// references. Without it a skip is counted and said, and does not fail.
        #[arg(long, visible_alias = "no-skip")]
        fail_on_skip: bool,
        /// Also write the results as JSON (the directory is created if missing and must be
        /// writable, checked first).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[command(flatten)]
        repro: ReproArgs,
    },
    /// Print the schedule and TileConfig chosen for each kernel, and why.
    Explain {
        file: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Check batch invariance: run the step at every size of `--batch-dim` in `--sizes` on
    /// rows taken from one set of inputs (at the start, the end and a third of the way in)
    /// and require every row of every tensor the step writes (outputs and intermediates)
    /// to be bit-identical to the same row of the largest batch. On the GPU; on the CPU
    /// executor with --cpu, or when there is no GPU (with a note, as `run` does).
    Invariance {
        file: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
        /// The dim that is the batch: the first dim of every input and written tensor that
        /// has it. It must be a dim of a step parameter.
        #[arg(long, value_name = "NAME")]
        batch_dim: String,
        /// Batch sizes to compare, at least two and all different; the largest is the
        /// reference.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,8,17,64,256")]
        sizes: Vec<u64>,
        /// Random input sets to try (seeds 0, 1, ...); at least 1.
        #[arg(long, default_value_t = 2)]
        seeds: u64,
        /// Use the CPU executor even if a GPU is present.
        #[arg(long)]
        cpu: bool,
        #[command(flatten)]
        weights: WeightArgs,
    },
    /// Check that the outputs do not depend on the number of tensor-parallel ranks: run
    /// the ranks (`--tp N`) at every size of `--sizes` on one set of inputs and require
    /// every output to be bit-identical to the first size's.
    /// Ranks run on GPUs over NCCL when there is one GPU per rank, else on GPU 0 one after
    /// another; on the CPU executor with --cpu or without a GPU.
    TpCheck {
        file: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
        /// World sizes to run (each 1, 2, 4 or 8; at least two, the first the reference).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        sizes: Vec<u32>,
        /// Random input sets to try (seeds 0, 1, ...); at least 1.
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        /// Use the CPU executor even if a GPU is present.
        #[arg(long)]
        cpu: bool,
        #[command(flatten)]
        weights: WeightArgs,
    },
    /// Time each kernel and the whole step on the GPU; report bandwidth against the
    /// measured copy bandwidth.
    Bench {
        file: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
        #[command(flatten)]
        inputs: InputArgs,
        /// Timed rounds (the median is reported).
        #[arg(long, default_value_t = 15)]
        rounds: u32,
        /// Also write the results as JSON (the directory is created if missing and must be
        /// writable, checked first).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Also draw each kernel's measured time against its floor as a horizontal bar chart
        /// (blue: measured; orange: the floor bench prints, bytes at the measured copy
        /// bandwidth or multiply-adds at the datasheet peak; a black tick: cuBLAS on the same
        /// product), titled with the step, the card and the totals. The extension chooses
        /// the format: .svg or .png. With several steps, FILE.STEP.svg (or .png) for each.
        /// Not with --tp.
        #[arg(long, value_name = "FILE.svg|FILE.png", value_parser = plot::parse_plot_path, conflicts_with = "tp")]
        plot: Option<PathBuf>,
    },
    /// Generate random well-typed programs, compile and run each (the CPU executor, and the
    /// GPU when there is one) and judge every output by the dtype-following reference;
    /// shrink every failure to a small program.
    Fuzz {
        /// Programs to generate (at least 1).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// The first seed: seed s gives one program and its inputs, the same everywhere.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Profiles to compile in, by turns (comma-separated, or `all`).
        #[arg(long, value_delimiter = ',', default_value = "all", value_parser = parse_fuzz_profile)]
        profile: Vec<Vec<tessel_passes::Profile>>,
        /// Use the CPU executor even if a GPU is present.
        #[arg(long)]
        cpu: bool,
        /// Write each shrunk failure to this directory as a regression program (created if
        /// missing; tests/programs/regressions/ is where the tests read them). With --tp,
        /// each failing block as it was generated, with a `// tp: 1 2 4` line that makes
        /// the regression test replay it as ranks.
        #[arg(long, value_name = "DIR")]
        save: Option<PathBuf>,
        /// Larger programs: more operations, bigger tensors and matmuls (slower).
        #[arg(long)]
        large: bool,
        /// Compile for the target with this many SMs instead of the GPU's (or the H200
        /// preset's) 132. The schedules that depend on the SM count then take other
        /// branches at the fuzzer's small sizes: `--sm-count 1` gives every 16-bit `x @ wᵀ`
        /// of at least 65 rows and columns and K above 32 a wgmma tile (sm_90a, `fast`;
        /// `invariant` takes one for every M where K is above 32 and K is not split,
        /// whatever the SM count). Without a GPU the executor runs the program compiled so, judged by the
        /// reference as always.
        #[arg(long, value_name = "N", conflicts_with = "tp", value_parser = clap::value_parser!(u32).range(1..))]
        sm_count: Option<u32>,
        /// Without a GPU, let prefill attention take the warpgroup tile where it can serve
        /// (`fast` on the H200 preset's target), as it does by default on a GPU that has
        /// it; without this flag the CPU fuzzer keeps attention on the mma.sync tile.
        /// Reports how many programs got it.
        #[arg(long, conflicts_with_all = ["tp", "no_wgmma_attention"])]
        wgmma_attention: bool,
        /// On a GPU, keep prefill attention on the mma.sync tile (as the compile flag of
        /// that name); without a GPU it is the fuzzer's default already.
        #[arg(long, conflicts_with = "tp")]
        no_wgmma_attention: bool,
        /// Programs built around one attention block, fused or a near miss (GQA, masks,
        /// lengths, q computed in the prologue); with --large, blocks up to 4 times the
        /// work. Reports how many programs got a fused attention kernel.
        #[arg(long)]
        attention: bool,
        /// Tensor parallelism instead: random pre-norm transformer blocks, each run as ranks
        /// at 1, 2 and 4 on the CPU executor (and the GPU, without --cpu); every output must
        /// be bit-identical across the world sizes, and in exact the GPU's the executor's
        /// (exact and invariant by turns; docs/tensor-parallel.md).
        #[arg(long, conflicts_with_all = ["attention", "large"])]
        tp: bool,
        /// Gradient programs instead: each a `fn` of differentiable float ops (matmuls,
        /// broadcasts, reductions, softmax with masked entries, shape ops, 16-bit casts,
        /// gathers, cumsum) and a step returning `grad(f, .., wrt: [..], grad_output: ..)`
        /// of some of its parameters. The gradients are judged against central finite
        /// differences of the forward on the f64 oracle, and the compiled step against the
        /// reference as every program is (docs/testing.md); with --large, bigger ones;
        /// with --attention, each around one attention block (prefill), fused or not.
        #[arg(long, conflicts_with = "tp")]
        grad: bool,
    },
}

fn main() {
    // Die quietly on a closed pipe (`tessel explain ... | head`), as Unix tools do, instead
    // of panicking in `println!`: Rust ignores SIGPIPE by default.
    #[cfg(unix)]
    // SAFETY: restoring the default action of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // The passes recurse over expressions (an expression of tens of thousands of terms is
    // valid source); a large stack keeps such programs from overflowing the main thread's.
    let worker = std::thread::Builder::new()
        .name("tessel".into())
        .stack_size(1 << 30)
        .spawn(real_main);
    match worker.map(|h| h.join()) {
        Ok(Ok(())) => {}
        // A panic has printed its message; keep Rust's exit status for it.
        Ok(Err(_)) => std::process::exit(101),
        Err(e) => {
            eprintln!("error: cannot start the compiler thread: {e}");
            std::process::exit(2);
        }
    }
}

impl Command {
    /// Every path the command will write, with the option that names it: checked before any
    /// work ([`paths::check_outputs`]).
    fn outputs(&self) -> Vec<(&'static str, PathBuf, paths::Kind)> {
        use paths::Kind;
        match self {
            Command::Build { out, .. } => vec![("-o", out.clone(), Kind::Dir)],
            Command::Run {
                out,
                save_inputs,
                repro,
                ..
            } => {
                let mut v = vec![match out {
                    Some(o) => ("-o", o.clone(), Kind::File),
                    None => (
                        "the default output directory",
                        PathBuf::from("out"),
                        Kind::Dir,
                    ),
                }];
                if let Some(s) = save_inputs {
                    v.push(("--save-inputs", s.clone(), Kind::File));
                }
                v.extend(repro.outputs());
                v
            }
            Command::Check { json, repro, .. } => json
                .iter()
                .map(|j| ("--json", j.clone(), Kind::File))
                .chain(repro.outputs())
                .collect(),
            Command::Bench { json, plot, .. } => json
                .iter()
                .map(|j| ("--json", j.clone(), Kind::File))
                .chain(plot.iter().map(|p| ("--plot", p.clone(), Kind::File)))
                .collect(),
            Command::Fuzz { save, .. } => save
                .iter()
                .map(|d| ("--save", d.clone(), Kind::Dir))
                .collect(),
            Command::Explain { .. } | Command::Invariance { .. } | Command::TpCheck { .. } => {
                vec![]
            }
        }
    }
}

impl ReproArgs {
    /// `--repro-dir` when given: checked like every output, though written only on a
    /// failure. The default directory is not checked: most runs never write it.
    fn outputs(&self) -> Vec<(&'static str, PathBuf, paths::Kind)> {
        match (&self.repro_dir, self.no_repro) {
            (Some(d), false) => vec![("--repro-dir", d.clone(), paths::Kind::Dir)],
            _ => vec![],
        }
    }
}

/// One `--profile` entry of `tessel fuzz`: a profile, or `all` of them.
fn parse_fuzz_profile(s: &str) -> Result<Vec<tessel_passes::Profile>, String> {
    use tessel_passes::Profile;
    match s.trim() {
        "all" => Ok(vec![Profile::Exact, Profile::Invariant, Profile::Fast]),
        one => frontend::parse_profile(one)
            .map(|p| vec![p])
            .map_err(|e| format!("{e}, or all")),
    }
}

/// The profiles of `tessel fuzz --profile`, each once, in the order first named.
fn fuzz_profiles(entries: Vec<Vec<tessel_passes::Profile>>) -> Vec<tessel_passes::Profile> {
    let mut out = Vec::new();
    for p in entries.into_iter().flatten() {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn real_main() {
    let cli = Cli::parse();
    if let Err(e) = paths::check_outputs(&cli.command.outputs()) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
    let r: Result<bool> = match cli.command {
        Command::Build {
            file,
            compile,
            emit,
            stop_after,
            out,
        } => build::build(&file, &compile, &emit, stop_after.as_deref(), &out).map(|_| true),
        Command::Run {
            file,
            compile,
            inputs,
            out,
            cpu,
            save_inputs,
            dump_temps,
            checked,
            repro,
        } => run::run(
            &file,
            &compile,
            &inputs,
            &run::RunOutputs {
                out,
                save_inputs,
                dump_temps,
                repro,
            },
            cpu,
            checked,
        )
        .map(|_| true),
        Command::Check {
            files,
            compile,
            inputs,
            cpu,
            fail_on_skip,
            json,
            repro,
        } => check::check(
            &files,
            &compile,
            &inputs,
            cpu,
            fail_on_skip,
            json.as_deref(),
            &repro,
        ),
        Command::Explain { file, compile } => explain::explain(&file, &compile).map(|_| true),
        Command::Invariance {
            file,
            compile,
            batch_dim,
            sizes,
            seeds,
            cpu,
            weights,
        } => invariance::invariance(&file, &compile, &batch_dim, &sizes, seeds, &weights, cpu),
        Command::TpCheck {
            file,
            compile,
            sizes,
            seeds,
            cpu,
            weights,
        } => tpcheck::tp_check(&file, &compile, &sizes, seeds, &weights, cpu),
        Command::Bench {
            file,
            compile,
            inputs,
            rounds,
            json,
            plot,
        } => bench::bench(
            &file,
            &compile,
            &inputs,
            rounds,
            json.as_deref(),
            plot.as_deref(),
        )
        .map(|_| true),
        Command::Fuzz {
            count,
            seed,
            profile,
            cpu,
            save,
            large,
            attention,
            tp,
            grad,
            sm_count,
            wgmma_attention,
            no_wgmma_attention,
        } => {
            if tp {
                fuzz::fuzz_tp(count, seed, cpu, save.as_deref())
            } else {
                fuzz::fuzz(&fuzz::FuzzArgs {
                    count,
                    seed,
                    profiles: fuzz_profiles(profile),
                    cpu,
                    save,
                    large,
                    attention,
                    grad,
                    sm_count,
                    wgmma_attention,
                    no_wgmma_attention,
                })
            }
        }
    };
    match r {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            // Rendered diagnostics carry their own `[E0401] Error:` heading.
            let rendered = matches!(
                e.downcast_ref::<tessel_driver::Error>(),
                Some(tessel_driver::Error::Source(_) | tessel_driver::Error::UnboundDims(_))
            );
            if rendered {
                eprintln!("{e:#}");
            } else {
                eprintln!("error: {e:#}");
            }
            std::process::exit(2);
        }
    }
}
