//! tessel's passes, one per file, and the driver that runs them in order.
//!
//! ```text
//! AST --check--> graph IR --decompose--> --fuse--> --schedule--> --lower--> kernel IR
//!     --expand-math--> --legalize--> kernel IR that the PTX writer prints one-to-one
//! ```
//!
//! [`PASSES`] is the pipeline: one registration per pass, in order. [`compile`] runs it (the
//! front end runs `check`, which reports diagnostics, and hands over its graph),
//! `tessel build --emit NAME` / `--stop-after NAME` take its names, and the filetests
//! (`ir/NAME/*.tir`) read it. The registry's types and the driver are in [`pipeline`]; each
//! pass's file opens with its contract: what it needs before, what it guarantees after.
//!
//! To add a pass: write `src/NAME.rs` with one `pub fn run`, add one [`PassInfo`] to
//! [`PASSES`] where it belongs, and put at least one filetest under `ir/NAME/`.

pub mod analysis;
pub mod attention;
pub mod attention_bwd;
pub mod check;
pub mod compiled;
pub mod decompose;
pub mod dependent;
pub mod expand_math;
pub mod fuse;
pub mod grad;
pub mod legalize;
pub mod lower;
pub mod merge;
pub mod pipeline;
pub mod schedule;
pub mod target;
pub mod tp;
pub mod view;

use tessel_ir::graph::Graph;

pub use compiled::Compiled;
pub use pipeline::{pass, run_passes, Ir, Level, PassInfo, Run};
pub use target::{Features, Peaks, Profile, PtxHeader, Target};

/// The pipeline, in order: [`compile`] runs exactly these, one after the other, each on the
/// IR the one before gave ([`Run`] says which level each takes).
pub static PASSES: &[PassInfo] = &[
    // AST → graph IR: names, dtypes and shapes checked, every fn inlined.
    PassInfo {
        name: "check",
        what: "AST to typed graph IR; name, dtype and shape errors",
        run: Run::Check(check::run),
    },
    // softmax(logits) @ v, with the logits computed from one matmul, into one fused op.
    PassInfo {
        name: "attention",
        what: "find softmax(mask(q @ kᵀ)) @ v and make it one fused attention op",
        run: Run::Graph(|g, o| Ok(attention::run(g, o.profile))),
    },
    // Every grad(...) placeholder replaced by its backward graph, after attention so the
    // forward attention stays fused.
    PassInfo {
        name: "grad",
        what: "reverse-mode differentiation: grad(...) into its backward graph",
        run: Run::Graph(|g, _| Ok(grad::run(g)?)),
    },
    // Composite ops (mean, softmax) into primitive ones; common subexpressions merged.
    PassInfo {
        name: "decompose",
        what: "composite ops into primitive ones, CSE",
        run: Run::Graph(|g, _| Ok(decompose::run(g))),
    },
    // Which values are written to memory, and which kernel writes each.
    PassInfo {
        name: "fuse",
        what: "partition into fusion groups (one kernel each)",
        run: Run::Fuse(|g, o| fuse::run(g, &o.target, o.profile)),
    },
    // TileConfig per group from shapes, dtypes and the target.
    PassInfo {
        name: "schedule",
        what: "choose the schedule and TileConfig of each group",
        run: Run::Schedule(|g, f, o| {
            schedule::run(
                g,
                f,
                &o.target,
                o.profile,
                (
                    !o.tensor_parallel,
                    o.wgmma_tma,
                    o.wgmma_pingpong,
                    o.wgmma_attention.then_some(o.wgmma_attention_keys),
                ),
            )
        }),
    },
    // Graph groups → kernel IR kernels with math-library placeholders.
    PassInfo {
        name: "lower",
        what: "fusion groups to kernel IR",
        run: Run::Lower(|g, f, s| Ok(lower::run_with_buffers(g, f, s)?)),
    },
    // Math placeholders → the tessel-math sequences of plain IEEE ops.
    PassInfo {
        name: "expand-math",
        what: "math functions into + - * / fma sqrt sequences",
        run: Run::Kernel {
            run: |k| {
                expand_math::run(k);
                Ok(())
            },
            expands_math: true,
        },
    },
    // Whatever PTX cannot say directly, rewritten so printing is one-to-one.
    PassInfo {
        name: "legalize",
        what: "make every kernel IR op printable as one PTX instruction",
        run: Run::Kernel {
            run: |k| Ok(legalize::run(k)?),
            expands_math: false,
        },
    },
    // Consecutive independent small kernels of one kind launched as one.
    PassInfo {
        name: "merge-launches",
        what: "launch consecutive independent kernels of one kind as one kernel over their CTAs",
        run: Run::Program(|p, o| {
            if o.merge_launches {
                merge::run(p)
            } else {
                (0..p.kernels.len()).map(|i| vec![i]).collect()
            }
        }),
    },
    // Each kernel waits for the one ahead only where it first touches global memory.
    PassInfo {
        name: "dependent-launch",
        what: "griddepcontrol.wait before each kernel's first global access, launch_dependents after its last read (sm_90)",
        run: Run::Program(|p, o| {
            if o.dependent_launch && o.target.features.griddepcontrol {
                dependent::run(p);
            }
            (0..p.kernels.len()).map(|i| vec![i]).collect()
        }),
    },
];

/// How a step is compiled.
#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    /// Which schedules are allowed (design §5).
    pub profile: Profile,
    /// Run the IR verifier on the output of every pass (on in tests and in the CLI; cheap).
    pub verify: bool,
    /// The graph simulates tensor-parallel ranks (`tp::simulate`): no split-K, so that a
    /// rank's narrower GEMMs sum in the association of the whole (docs/tensor-parallel.md).
    pub tensor_parallel: bool,
    /// Where `schedule` takes the warpgroup tile (`wgmma: 1`), take its warp-specialised
    /// TMA variant (`wgmma: tma`, `lower/wgmma_tma.rs`) when the operands and the target
    /// allow it ([`schedule::prefer_tma`]), in `fast` only. On by default: its sums are the
    /// warpgroup tile's, so its bits are too, and on an H100 the GEMMs it takes (those the
    /// ping-pong tile does not: fewer than two 128 × 128 tiles an SM, as the Qwen3-14B k and
    /// v projections at T = 2048) ran in 0.83-0.85x the warpgroup tile's time
    /// (docs/perf/2026-12-07-stop37.md, runs 40b and 42).
    pub wgmma_tma: bool,
    /// A fused attention takes the warpgroup tile (`attention { .., wgmma: 1 }`:
    /// FlashAttention-3's structure, a TMA producer warpgroup and two wgmma consumer
    /// warpgroups of 64 query rows, `lower/attention.rs`) where the target and shapes allow
    /// it (`schedule/attention.rs`, `prefer_wgmma`). On by default: at 64 keys a block its
    /// order of sums is the mma.sync tile's, and on an H100 the Qwen3-14B attention at
    /// T = 2048 ran in 0.85x the mma.sync tile's time
    /// (docs/perf/2026-12-07-stop36.md).
    pub wgmma_attention: bool,
    /// Keys per block of the warpgroup attention tile: 64 (the `mma.sync` tile's, so the
    /// same order of sums and the same executor bits; 0 means 64) or 128
    /// (FlashAttention-3's at head dim 128: another order of sums, its own bits; `explain`
    /// prints it as the tile's `block_n` and in the order).
    pub wgmma_attention_keys: u32,
    /// Where `schedule` takes the warpgroup tile (`wgmma: 1`), take the persistent,
    /// ping-pong warp-specialised tile (`wgmma: pingpong`, `lower/wgmma_pingpong.rs`) when
    /// the operands, the shape and the target allow it ([`schedule::prefer_pingpong`]);
    /// before `wgmma_tma`, which still applies where it does not. On by default: its bits
    /// are the `wgmma: 1` tile's, and on an H200 the Qwen3-14B prefill layer ran in 0.95x the
    /// time it takes on that tile, its GEMMs in 0.82-1.01x (docs/perf/2026-12-06-h200-issue19.md).
    pub wgmma_pingpong: bool,
    /// Launch consecutive independent kernels of one kind (the decode layer's q, k and v
    /// GEMVs) as one kernel over their CTAs (`merge-launches`, `merge.rs`). On by default:
    /// it computes nothing differently, and saves a launch and a tail per kernel merged.
    pub merge_launches: bool,
    /// Programmatic dependent launch on targets that have it (`dependent-launch`,
    /// `dependent.rs`): each kernel waits for the one ahead only where it first touches
    /// global memory, and is launched to begin while that one finishes. On by default: it
    /// computes nothing differently.
    pub dependent_launch: bool,
}

impl Default for Options {
    /// The default target and profile, no verifier, no tensor parallelism; the ping-pong
    /// GEMM tile, the TMA GEMM tile where the ping-pong tile does not apply, and the
    /// warpgroup attention tile on.
    fn default() -> Options {
        Options {
            target: Target::default(),
            profile: Profile::default(),
            verify: false,
            tensor_parallel: false,
            wgmma_tma: true,
            wgmma_attention: true,
            wgmma_attention_keys: 0,
            wgmma_pingpong: true,
            merge_launches: true,
            dependent_launch: true,
        }
    }
}

/// Why compilation of a checked graph failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("lowering failed")]
    Lower(#[from] lower::LowerError),
    #[error("differentiation failed: {0}")]
    Grad(#[from] grad::GradError),
    #[error("legalize failed")]
    Legalize(#[from] legalize::LegalizeError),
    #[error("internal error: the IR verifier rejected the output of `{pass}`:\n{errors}")]
    Verify { pass: &'static str, errors: String },
    /// [`PASSES`] is out of order: a pass was handed IR of another level than it takes (the
    /// registry's unit tests rule this out).
    #[error("internal error: pass `{pass}` takes {takes:?} IR but was given {found:?}")]
    Registry {
        pass: &'static str,
        takes: Level,
        found: Option<Level>,
    },
}

/// Runs every registered pass after `check` on `checked`, `check`'s output, and returns the
/// step with every stage kept. With [`Options::verify`], the IR verifier checks `checked` and
/// the output of every pass.
///
/// # Errors
/// See [`run_passes`].
pub fn compile(checked: &Graph, opts: &Options) -> Result<Compiled, CompileError> {
    match run_passes(checked, opts, None, &mut |_, _| {})? {
        Ir::Kernel(c) => Ok(*c),
        other => Err(CompileError::Registry {
            pass: PASSES.last().map_or("(none)", |p| p.name),
            takes: Level::Kernel,
            found: Some(other.level()),
        }),
    }
}
