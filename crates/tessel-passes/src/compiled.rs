//! [`Compiled`]: one step after every pass — the graph it was cut from, its fusion groups and
//! schedules, the kernel program.

use std::collections::HashMap;

use tessel_ir::graph::{Fusion, Graph, Schedules};
use tessel_ir::kernel::Program;
use tessel_ir::{BufferId, Group, Value};

/// Every stage of one compiled step, for `--emit` and `explain`.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The graph after `decompose`, with its fusion and schedules.
    pub graph: Graph,
    pub fusion: Fusion,
    pub schedules: Schedules,
    /// The program right after `lower` (math placeholders still in).
    pub lowered: Program,
    /// The final program (after every kernel pass: `expand-math`, `legalize`).
    pub program: Program,
    /// The buffer of every materialised graph value (step inputs and kernel outputs).
    pub buffer_of: HashMap<Value, BufferId>,
    /// The fusion group of every kernel, by kernel index (a split-K matmul group has two).
    pub group_of_kernel: Vec<Group>,
}
