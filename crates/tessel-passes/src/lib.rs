//! tessel's passes, one per file, and the driver that runs them in order.
//!
//! ```text
//! AST --check--> graph IR --decompose--> --fuse--> --schedule--> --lower--> kernel IR
//!     --expand-math--> --legalize--> kernel IR that the PTX writer prints one-to-one
//! ```
//!
//! Each pass's file opens with its contract: what it needs before, what it guarantees after.

pub mod check;
pub mod decompose;
pub mod expand_math;
pub mod fuse;
pub mod legalize;
pub mod lower;
pub mod schedule;
pub mod target;

use tessel_ir::graph::{Fusion, Graph, Schedules};
use tessel_ir::kernel::Program;

pub use target::{Peaks, Profile, Target};

/// A registered pass: its kebab-case name (for `--emit` and `--stop-after`) and what it does.
pub struct PassInfo {
    pub name: &'static str,
    pub what: &'static str,
}

/// The pipeline, in order. `compile` runs exactly these, one after the other.
pub const PASSES: &[PassInfo] = &[
    // AST → graph IR: names, dtypes and shapes checked, every fn inlined.
    PassInfo {
        name: "check",
        what: "AST to typed graph IR; name, dtype and shape errors",
    },
    // Composite ops (mean, softmax) into primitive ones; common subexpressions merged.
    PassInfo {
        name: "decompose",
        what: "composite ops into primitive ones, CSE",
    },
    // Which values are written to memory, and which kernel writes each.
    PassInfo {
        name: "fuse",
        what: "partition into fusion groups (one kernel each)",
    },
    // TileConfig per group from shapes, dtypes and the target.
    PassInfo {
        name: "schedule",
        what: "choose the schedule and TileConfig of each group",
    },
    // Graph groups → kernel IR kernels with math-library placeholders.
    PassInfo {
        name: "lower",
        what: "fusion groups to kernel IR",
    },
    // Math placeholders → the tessel-math sequences of plain IEEE ops.
    PassInfo {
        name: "expand-math",
        what: "math functions into + - * / fma sqrt sequences",
    },
    // Whatever PTX cannot say directly, rewritten so printing is one-to-one.
    PassInfo {
        name: "legalize",
        what: "make every kernel IR op printable as one PTX instruction",
    },
];

/// How a step is compiled.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub target: Target,
    /// Which schedules are allowed (design §5).
    pub profile: Profile,
    /// Run the IR verifier after every pass (on in tests; cheap).
    pub verify: bool,
}

/// Every stage of one compiled step, for `--emit` and `explain`.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The graph after `decompose`, with its fusion and schedules.
    pub graph: Graph,
    pub fusion: Fusion,
    pub schedules: Schedules,
    /// The program right after `lower` (math placeholders still in).
    pub lowered: Program,
    /// The final program (after `expand-math` and `legalize`).
    pub program: Program,
    /// The buffer of every materialised graph value (step inputs and kernel outputs).
    pub buffer_of: std::collections::HashMap<tessel_ir::Value, tessel_ir::BufferId>,
    /// The fusion group of every kernel, by kernel index (a split-K matmul group has two).
    pub group_of_kernel: Vec<tessel_ir::Group>,
}

/// Why compilation of a checked graph failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("lowering failed")]
    Lower(#[from] lower::LowerError),
    #[error("legalize failed")]
    Legalize(#[from] legalize::LegalizeError),
    #[error("internal error: the IR verifier rejected the output of `{pass}`:\n{errors}")]
    Verify { pass: &'static str, errors: String },
}

fn verified<E: std::fmt::Display>(
    pass: &'static str,
    r: Result<(), Vec<E>>,
) -> Result<(), CompileError> {
    r.map_err(|es| CompileError::Verify {
        pass,
        errors: es.iter().map(|e| format!("  {e}\n")).collect(),
    })
}

/// Runs every pass after `check` on a checked graph.
pub fn compile(checked: &Graph, opts: &Options) -> Result<Compiled, CompileError> {
    use tessel_ir::verify;
    if opts.verify {
        verified("check", verify::verify_graph(checked, None, None))?;
    }
    let graph = decompose::run(checked);
    let fusion = fuse::run(&graph);
    let schedules = schedule::run(&graph, &fusion, &opts.target, opts.profile);
    if opts.verify {
        verified(
            "schedule",
            verify::verify_graph(&graph, Some(&fusion), Some(&schedules)),
        )?;
    }
    let lower::Lowered {
        program: lowered,
        buffer_of,
        group_of_kernel,
    } = lower::run_with_buffers(&graph, &fusion, &schedules)?;
    if opts.verify {
        verified("lower", verify::verify_program(&lowered, false))?;
    }
    let mut program = lowered.clone();
    for (_, k) in program.kernels.iter_mut() {
        expand_math::run(k);
        legalize::run(k)?;
    }
    if opts.verify {
        verified("legalize", verify::verify_program(&program, true))?;
    }
    Ok(Compiled {
        graph,
        fusion,
        schedules,
        lowered,
        program,
        buffer_of,
        group_of_kernel,
    })
}
