//! [`Compiled`]: one step after every pass — the graph it was cut from, its fusion groups and
//! schedules, the kernel program — and the questions the command line and the tests ask
//! about it (how much arithmetic its matmuls do, whether a matmul is a plain GEMM over stored
//! tensors, which buffers hold intermediate tensors), answered here, beside the passes that
//! decided them, rather than by each caller walking the IR.

use std::collections::HashMap;

use tessel_ir::graph::{Fusion, Graph, GroupOps, Schedules, TileConfig};
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::{BufferId, DType, Group, Value};

use crate::schedule::{self, MatmulShape};
use crate::target::PtxHeader;

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
    /// The fusion groups of every kernel, by kernel index: one (a split-K matmul group has
    /// two kernels, each of that group), or several for a kernel `merge-launches` made of
    /// several (in the order of their CTA ranges).
    pub groups_of_kernel: Vec<Vec<Group>>,
    /// The PTX header the kernels are written under, from the [`Options::target`] they were
    /// compiled for ([`crate::Target::ptx_header`]): what `build` prints, `explain` hands
    /// ptxas and the runtime loads, so that the three never disagree.
    ///
    /// [`Options::target`]: crate::Options::target
    pub ptx: PtxHeader,
}

/// The work of one matmul group.
pub struct MatmulWork {
    /// Batch, M, N, K and the operand layouts.
    pub shape: MatmulShape,
    /// The dtype the operands are read in: the product's, or the 16-bit dtype under
    /// widening casts (`f32(x) @ f32(w)^T`, whose products are exact in f32).
    pub dtype: DType,
    /// The group's schedule runs on tensor cores (the `mma` tile or the tensor-core GEMV).
    pub tensor_cores: bool,
}

impl MatmulWork {
    /// Multiply-adds: batch · M · N · K (a flop count is twice this).
    pub fn fmas(&self) -> u64 {
        let s = &self.shape;
        s.batch * s.m * s.n * s.k
    }
}

/// A matmul group as one plain GEMM `[M, K] @ [K, N]` over tensors in memory, as a BLAS
/// library would be asked for it: no batch, each operand a stored tensor or its transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// The buffer the left operand `[M, K]` is read from.
    pub lhs: BufferId,
    /// The buffer the right operand `[K, N]` is read from.
    pub rhs: BufferId,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// The left operand's buffer is `[M, K]`, contiguous along K (else it is `[K, M]`).
    pub lhs_k_contiguous: bool,
    /// The right operand's buffer is `[N, K]` (a weight read as `w^T`), contiguous along K
    /// (else it is `[K, N]`).
    pub rhs_k_contiguous: bool,
    /// The operand buffers' dtype: the product's, or the 16-bit dtype under widening casts
    /// (the GEMM of the 16-bit tensors with f32 accumulation).
    pub dtype: DType,
}

impl Compiled {
    /// The work of group `grp` if it is a matmul group.
    pub fn matmul(&self, grp: Group) -> Option<MatmulWork> {
        let GroupOps::Matmul { matmul: mm, .. } = self.fusion.groups[grp].ops else {
            return None;
        };
        let tensor_cores = matches!(
            self.schedules[grp].as_ref().map(|s| &s.tile),
            Some(TileConfig::Mma { .. } | TileConfig::GemvMma { .. })
        );
        let shape = schedule::matmul_shape(&self.graph, mm);
        Some(MatmulWork {
            dtype: shape.read,
            shape,
            tensor_cores,
        })
    }

    /// Σ batch·M·N·K over the step's matmuls: the multiply-adds its products need.
    pub fn matmul_fmas(&self) -> u64 {
        self.fusion
            .groups
            .keys()
            .filter_map(|grp| self.matmul(grp))
            .map(|w| w.fmas())
            .sum()
    }

    /// Group `grp` as a plain GEMM over the buffers it reads, or `None` when it is not a
    /// matmul group, has a batch, or an operand is neither a stored tensor nor its transpose.
    /// A fused epilogue is left out: the GEMM is the product alone.
    pub fn gemm(&self, grp: Group) -> Option<Gemm> {
        let GroupOps::Matmul { matmul: mm, .. } = self.fusion.groups[grp].ops else {
            return None;
        };
        let s = schedule::matmul_shape(&self.graph, mm);
        if s.batch != 1 {
            return None;
        }
        let (a, b) = schedule::stored_operands(&self.graph, mm)?;
        Some(Gemm {
            lhs: *self.buffer_of.get(&a)?,
            rhs: *self.buffer_of.get(&b)?,
            m: s.m,
            n: s.n,
            k: s.k,
            lhs_k_contiguous: s.lhs_k_contiguous,
            rhs_k_contiguous: s.rhs_k_contiguous,
            dtype: s.read,
        })
    }

    /// The program with the intermediate tensors it writes between kernels appended to its
    /// outputs (each named `t<N>` after graph value `vN`), so a run can dump them. A split-K
    /// matmul's scratch is not one of them: it holds partial sums, not a tensor of the step.
    pub fn with_intermediates(&self) -> Program {
        let p = &self.program;
        let mut q = p.clone();
        let intermediates: std::collections::HashSet<BufferId> =
            self.buffer_of.values().copied().collect();
        for (b, decl) in p.buffers.iter() {
            if decl.role == BufferRole::Temp && intermediates.contains(&b) {
                q.outputs.push((decl.name.clone(), b));
            }
        }
        q
    }
}
