//! The graph IR: a step as a DAG of tensor ops with concrete shapes.
//!
//! Data model (Cranelift `dfg.rs` style): every [`Value`] is defined by one [`Op`] in
//! [`Graph::ops`], a `PrimaryMap` in topological order — an op's operands are always defined
//! before it. Facts about values live beside the ops in `SecondaryMap`s: the [`TensorType`] of
//! each value in [`Graph::types`]; fusion groups in [`Fusion`]; schedule choices in
//! [`Schedules`].
//!
//! Semantics (design §5): arithmetic on `bf16`/`f16` values converts the operands exactly to
//! f32, computes the f32 operation, and rounds once (nearest even) to the result dtype, as
//! PyTorch does on CUDA. Reductions accumulate in f32; their order is fixed by the kernel's
//! schedule, not by the graph. NaN propagates through `max`, `min` and every reduction.
//! No op broadcasts implicitly: the `check` pass inserts [`Op::Reshape`] and [`Op::Broadcast`].

use crate::entities::{Group, Value};
use crate::kernel::MmaShape;
use crate::types::{DType, TensorType};
use cranelift_entity::{packed_option::PackedOption, EntityRef, PrimaryMap, SecondaryMap};
use std::fmt;

/// Elementwise ops of one operand. The result has the operand's shape; its dtype is the
/// operand's dtype (the math functions are defined on float dtypes only).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    Neg,
    Abs,
    /// Logical not of a `bool`.
    Not,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    /// `x · sigmoid(x)`.
    Silu,
    /// The error function (`torch.erf`), float dtypes.
    Erf,
    /// `torch.nn.functional.gelu`, erf form: `x·0.5·(1 + erf(x·√½))`, computed in f32 in
    /// that order (PyTorch's `ActivationGeluKernel.cu`) and rounded once to the dtype.
    Gelu,
    /// `gelu(x, approximate='tanh')`: `0.5·x·(1 + tanh(β·(x + κ·(x·x)·x)))`, β = √2·(2/√π)·½
    /// and κ = 0.044715 as f32, every product and sum rounded in f32, then once to the dtype.
    GeluTanh,
    /// Round to an integral value toward -inf, +inf, nearest (ties to even, `torch.round`)
    /// and zero: exact (IEEE 754 roundToIntegral; ±0, ±inf and NaN are themselves). On
    /// `i32` each is the identity, as torch returns a copy for integer tensors.
    Floor,
    Ceil,
    Round,
    Trunc,
}

/// Elementwise ops of two operands of the same dtype and shape. Comparisons give `bool`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// Remainder with the sign of the dividend, `a - trunc(a/b)·b` (`torch.fmod`; C `fmod`
    /// on floats, exact; truncating `%` on i32, with `x rem 0 = x`). The language's `%` is
    /// `torch.remainder`, which `check` builds from this op.
    Rem,
    Min,
    Max,
    Pow,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

/// Reductions along one axis.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// Composite: the sum divided by the axis length (f32 `div.rn`); `decompose` rewrites it
    /// into [`ReduceOp::Sum`] and a [`BinaryOp::Div`].
    Mean,
    /// Composite, `torch.argmax(x, dim)`: the i32 index along the axis of the first
    /// (lowest-index) maximum, a NaN counting as larger than every number (the first NaN's
    /// index when the row holds one) and -0 equal to +0 (torch compares with `>` and `==`:
    /// `aten/src/ATen/native/SharedReduceOps.h`, `ArgMaxOps` / `greater_or_nan`). The result
    /// is i32 whatever the operand's dtype (not bool). `decompose` rewrites it into a
    /// [`ReduceOp::Max`] and a [`ReduceOp::Min`] of the candidate indices.
    ArgMax,
    /// Composite, `torch.argmin`: as [`ReduceOp::ArgMax`] with the minimum (NaN still
    /// counts as the extreme: the first NaN's index).
    ArgMin,
    /// Composite, `torch.logsumexp(x, dim)` on float dtypes, in f32:
    /// `m + log(Σ exp(x - m))` with `m = max(x)`, except that a row whose max is ±inf gives
    /// `m` itself (every element -inf → -inf, an element +inf → +inf, as torch's
    /// `logsumexp` masks an infinite max: `aten/src/ATen/native/ReduceOps.cpp`,
    /// `logsumexp_out_impl`); NaN anywhere gives NaN. The result has the operand's dtype
    /// (16-bit results rounded once from f32). `decompose` rewrites it into reductions
    /// and elementwise ops.
    LogSumExp,
}

/// Which row statistic of an attention's logits an [`Op::AttentionStat`] is.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum RowStat {
    /// The row maximum of the visible logits.
    Max,
    /// The sum of `exp(x - max)` over the visible logits.
    Sum,
}

/// The definition of a value. The result type is in [`Graph::types`].
/// Where an [`Op::Update`] of rows writes them: from position `pos[b]` (i32
/// `[dst.shape[0]]`, one per index of `dst`'s first dim) along `axis` (≥ 1).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct UpdateAt {
    pub pos: Value,
    pub axis: u32,
}

#[derive(Clone, PartialEq, Debug)]
pub enum Op {
    /// Step parameter number `index` (the order of [`Graph::inputs`]). `inout`: the step
    /// updates the parameter in place — its buffer is the caller's, the [`Op::Update`]s of
    /// it write into that buffer, and the end of its chain of updates (the input itself when
    /// there is none) is the step output of the same name, stored in that same buffer.
    Input {
        index: u32,
        inout: bool,
    },
    /// Every element equals `value` (exactly representable in the result dtype; the `check`
    /// pass rounds literals to the dtype they take).
    Const {
        value: f64,
    },
    /// `result[i_0, .., i_n] = i_axis`, converted to the result dtype.
    Iota {
        axis: u32,
    },
    Unary {
        op: UnaryOp,
        arg: Value,
    },
    Binary {
        op: BinaryOp,
        lhs: Value,
        rhs: Value,
    },
    /// `cond` is `bool` with the result's shape; the arms have the result's type.
    Select {
        cond: Value,
        on_true: Value,
        on_false: Value,
    },
    /// Conversion to the result dtype, same shape: float → float rounds to nearest even;
    /// float → i32 truncates toward zero (saturating, NaN → 0); i32 → float rounds to nearest
    /// even; bool → number gives 0 or 1; number → bool is `x != 0`.
    Cast {
        arg: Value,
    },
    /// Same rank as the result; each operand dim is 1 (repeated) or equal to the result's.
    Broadcast {
        arg: Value,
    },
    /// Same element count, row-major order kept.
    Reshape {
        arg: Value,
    },
    /// `result.shape[i] = arg.shape[perm[i]]`.
    Permute {
        arg: Value,
        perm: Vec<u32>,
    },
    /// Reduces `axis`, which the result keeps with size 1.
    Reduce {
        op: ReduceOp,
        arg: Value,
        axis: u32,
    },
    /// `result = arg[.., start .. start + result.shape[axis], ..]` along `axis`, step 1.
    Slice {
        arg: Value,
        axis: u32,
        start: u64,
    },
    /// Operands joined along `axis`; all other dims equal.
    Concat {
        args: Vec<Value>,
        axis: u32,
    },
    /// Composite, `torch.topk(x, k, dim, largest, sorted=True)`: the `k` largest
    /// (`largest`) or smallest elements along `axis` (`k` = the result's size there,
    /// `1 <= k <=` the operand's), sorted best first, and ties — equal values, -0 and +0
    /// included — taken in index order (the lower index first). NaN counts as larger than
    /// every number (first for `largest`, last otherwise), as torch's sort orders it.
    /// `indices` picks the result: the values (operand's dtype, not bool) or their i32
    /// indices along the axis; the two ops of one `topk` call share their arguments, and
    /// `decompose` rewrites both into the same k rounds of a row maximum and a row minimum
    /// of candidate indices (each round excludes what the rounds before it took by the
    /// order `(value, index)`, so it needs no mask), which its common-subexpression merge
    /// shares between them.
    TopK {
        arg: Value,
        axis: u32,
        largest: bool,
        indices: bool,
    },
    /// `result[.., i, ..] = Σ_{j <= i} arg[.., j, ..]` along `axis`, `torch.cumsum`: f32 and
    /// i32 (wrapping) operands accumulate in their own dtype; a bf16/f16 operand accumulates
    /// in f32 and each output element is the running f32 sum rounded once. The order of the
    /// additions is fixed by the axis length alone ([`CUMSUM_CHUNK`]): the axis is cut into
    /// chunks of that many elements; each chunk's total is summed sequentially from -0; the
    /// exclusive prefix of the chunk totals is summed sequentially from -0; each output is
    /// that prefix plus its chunk's elements up to it, added sequentially. `decompose`
    /// permutes another axis last.
    Cumsum {
        arg: Value,
        axis: u32,
    },
    /// Composite: `exp(x - max(x)) / sum(exp(x - max(x)))` along `axis` (float dtypes; the
    /// arithmetic in f32), except that a row whose max is -inf (every element -inf: a fully
    /// masked row) is 0 everywhere, flash-attention's convention (design §12); NaN and +inf
    /// elements keep IEEE arithmetic (the row is NaN). `decompose` rewrites it into
    /// reductions and elementwise ops.
    Softmax {
        arg: Value,
        axis: u32,
    },
    /// Matrix product over the last two axes: `lhs [.., M, K] @ rhs [.., K, N] -> [.., M, N]`,
    /// leading (batch) dims equal; float dtypes, both operands of the result's dtype. Each
    /// product of bf16/f16 operands is exact in f32 and is added into an f32 accumulator;
    /// f32 operands are multiplied and added with one fma per product. The order of the
    /// sums is fixed by the kernel's schedule (its reduction-order signature) and the f32
    /// result is rounded once to the result dtype. Operands that are widening casts of
    /// 16-bit tensors are read as those tensors ([`Graph::matmul_reads`]).
    MatMul {
        lhs: Value,
        rhs: Value,
    },
    /// Composite, formed by the `attention` pass: `softmax(logits, axis: -1)` rounded to
    /// `v`'s dtype, then `@ v` — `logits [.., M, N]` f32, `v [.., N, E]` of the result's
    /// dtype (bf16 or f16), result `[.., M, E]`. It stands for exactly those three ops of
    /// the program (a row whose logits are all -inf gives 0); the fused kernel computes
    /// them in flash-attention's order (online softmax over key blocks, the unnormalised
    /// probabilities rounded to `v`'s dtype, the division last), which differs from the
    /// program by roundings only (Dao et al., "FlashAttention-2", 2023, Algorithm 1).
    /// `logits` is computed inside the fused kernel, never written to memory. `bound`, when
    /// present (i32 `[.., M, 1]`), is how many keys each row may see: the pass that forms
    /// the op proved from the mask that logits at keys `j >= bound` are -inf, so the kernel
    /// does not read them (their `v` rows too: the result is the softmax over the visible
    /// keys only, as flash-attention defines it).
    Attention {
        logits: Value,
        v: Value,
        bound: Option<Value>,
    },
    /// A row statistic of an [`Op::Attention`]'s logits, which the fused attention forms in
    /// its loop and writes beside its output (the `fuse` pass puts both in one group): f32
    /// `[.., M, 1]` from f32 `logits [.., M, N]`, over the keys a row sees (`j < bound` when
    /// a bound is given, i32 `[.., M, 1]`, as the attention's). [`RowStat::Max`] is the
    /// row's maximum `m` (-inf for a row that sees no key), exactly; [`RowStat::Sum`] is
    /// `l = Σ exp(x - m)` over those keys (0 for a row that sees none), summed as the
    /// kernel sums it — by blocks, the sum so far rescaled by `exp(m_old - m)` when a block
    /// raises the maximum — which differs from the program's sum by roundings only.
    /// A fused attention backward recomputes the probabilities from them,
    /// `where(m == -inf, 0, exp(x - m) / l)`, the program's own softmax without its two
    /// reductions (FlashAttention-2, Algorithm 2, saves `m + log(l)` instead, one rounding
    /// further from the program) — only where it recomputes `x` in the forward kernel's own
    /// order, so that `x` is the forward's bit for bit (docs/architecture.md); no pass forms
    /// this op yet. A second result is an op of its own that names the first's operands, as
    /// a projection does.
    AttentionStat {
        logits: Value,
        bound: Option<Value>,
        stat: RowStat,
    },
    /// `dst` written in place, in one of two forms, by `at`:
    ///
    /// - **rows** (`at: Some(UpdateAt { pos, axis })`, `axis` ≥ 1): for every index `b` of
    ///   `dst`'s first dim and every `i < R` (R = `rows.shape[axis]`),
    ///   `result[b, .., pos[b] + i, ..] = rows[b, .., i, ..]` where `0 <= pos[b] + i <
    ///   dst.shape[axis]`; a row whose position falls outside the axis is not written, and
    ///   every other element is `dst`'s. `rows` has `dst`'s dtype and shape but for `axis`
    ///   (`R <= dst.shape[axis] < 2^31`); `pos` is i32 `[dst.shape[0]]`.
    /// - **whole** (`at: None`): `result = rows`, every element written; `rows` has `dst`'s
    ///   type exactly (AdamW's parameter and moments, written from themselves).
    ///
    /// The result has `dst`'s type. In place: `dst` is an `inout` [`Op::Input`] or another
    /// update's result (a chain whose root is that input), the result lives in the root's
    /// buffer, and its kernel writes the R rows (or every element) only — it never copies
    /// `dst`. So that the old contents are never needed after the write, `dst` is the `dst`
    /// of this update only, and no op after this one (in [`Graph::ops`] order) reads `dst`
    /// or any value computed from `dst` other than through this update; a rows update's own
    /// `rows` and `pos` are not computed from `dst` either (verifier rule `graph.update`).
    /// A whole update's `rows` may be: its kernel reads `dst` only at the element it writes
    /// (the `fuse` pass materialises any other reading of `dst` first, rule 6). The `check`
    /// pass guarantees the rest from the source rules.
    Update {
        dst: Value,
        rows: Value,
        at: Option<UpdateAt>,
    },
    /// Indexing by a tensor, `numpy.take_along_axis` without its broadcast (`check` makes
    /// the shapes explicit): `arg [d0, .., A, .., dn]` (any dtype), `index` i32
    /// `[d0, .., R, .., dn]` — `arg`'s shape but along `axis`, where it has any length R —
    /// and the result, of `arg`'s dtype and `index`'s shape, is
    /// `result[i] = arg[i with i_axis := clamp(index[i])]`. An index is taken as Python
    /// takes one (`-1` is the last position) and then clamped into the axis:
    /// `j = index[i] + A` where `index[i] < 0`, then `min(max(j, 0), A - 1)`
    /// ([`gather_position`]), so every index reads inside `arg` — torch raises on an
    /// index out of `[-A, A)`, tessel clamps. `A < 2^31`. The embedding lookup
    /// `emb[ids]` is a gather along axis 0 of `emb` with the ids broadcast along the rows.
    /// No gradient yet (a scatter-add, a later issue).
    Gather {
        arg: Value,
        index: Value,
        axis: u32,
    },
    /// The gradient of `Σ_i ⟨seeds[i], outputs[i]⟩` (the sum over every element of the
    /// products) with respect to `wrt`, of `wrt`'s type: a placeholder that `check` makes
    /// for `grad(f, .., wrt: [..], grad_output: ..)` and that the `grad` pass replaces by the
    /// backward graph (reverse-mode differentiation, design §13). `seeds[i]` has the type of
    /// `outputs[i]` (the upstream gradient of a vector-Jacobian product; a scalar loss's seed
    /// is the constant 1); `wrt` and the outputs are float values, and `wrt` is not computed
    /// from another op's result only through this op (it is a step input, or a value
    /// `check` made for the parameter of the differentiated `fn`). Every `Grad` op with the
    /// same outputs and seeds shares one backward graph.
    Grad {
        wrt: Value,
        outputs: Vec<Value>,
        seeds: Vec<Value>,
    },
}

/// The position an [`Op::Gather`] reads along an axis of length `len` (≥ 1) for an i32
/// `index`: negative indices count from the end as in Python, then the result is clamped
/// to `0 ..= len - 1` — an index past either end reads the nearest end, never outside the
/// tensor. The one definition the references follow; the kernels compute the same with
/// i32 compares and selects (`lower`).
pub fn gather_position(index: i64, len: u64) -> u64 {
    let n = len.max(1) as i64;
    let j = if index < 0 { index + n } else { index };
    j.clamp(0, n - 1) as u64
}

impl Op {
    /// The values this op reads, in operand order.
    pub fn args(&self) -> Vec<Value> {
        match self {
            Op::Input { .. } | Op::Const { .. } | Op::Iota { .. } => vec![],
            Op::Unary { arg, .. }
            | Op::Cast { arg }
            | Op::Broadcast { arg }
            | Op::Reshape { arg }
            | Op::Permute { arg, .. }
            | Op::Reduce { arg, .. }
            | Op::Slice { arg, .. }
            | Op::TopK { arg, .. }
            | Op::Cumsum { arg, .. }
            | Op::Softmax { arg, .. } => vec![*arg],
            Op::Binary { lhs, rhs, .. } | Op::MatMul { lhs, rhs } => vec![*lhs, *rhs],
            Op::Attention { logits, v, bound } => {
                let mut a = vec![*logits, *v];
                a.extend(bound);
                a
            }
            Op::AttentionStat { logits, bound, .. } => {
                let mut a = vec![*logits];
                a.extend(bound);
                a
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => vec![*cond, *on_true, *on_false],
            Op::Update { dst, rows, at } => {
                let mut a = vec![*dst, *rows];
                a.extend(at.map(|at| at.pos));
                a
            }
            Op::Gather { arg, index, .. } => vec![*arg, *index],
            Op::Concat { args, .. } => args.clone(),
            Op::Grad {
                wrt,
                outputs,
                seeds,
            } => std::iter::once(*wrt)
                .chain(outputs.iter().copied())
                .chain(seeds.iter().copied())
                .collect(),
        }
    }

    /// The operand slots of this op, in the order of [`Op::args`], for rewriting them.
    pub fn args_mut(&mut self) -> Vec<&mut Value> {
        match self {
            Op::Input { .. } | Op::Const { .. } | Op::Iota { .. } => vec![],
            Op::Unary { arg, .. }
            | Op::Cast { arg }
            | Op::Broadcast { arg }
            | Op::Reshape { arg }
            | Op::Permute { arg, .. }
            | Op::Reduce { arg, .. }
            | Op::Slice { arg, .. }
            | Op::TopK { arg, .. }
            | Op::Cumsum { arg, .. }
            | Op::Softmax { arg, .. } => vec![arg],
            Op::Binary { lhs, rhs, .. } | Op::MatMul { lhs, rhs } => vec![lhs, rhs],
            Op::Attention { logits, v, bound } => {
                let mut a = vec![logits, v];
                a.extend(bound.as_mut());
                a
            }
            Op::AttentionStat { logits, bound, .. } => {
                let mut a = vec![logits];
                a.extend(bound.as_mut());
                a
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => vec![cond, on_true, on_false],
            Op::Update { dst, rows, at } => {
                let mut a = vec![dst, rows];
                a.extend(at.as_mut().map(|at| &mut at.pos));
                a
            }
            Op::Gather { arg, index, .. } => vec![arg, index],
            Op::Concat { args, .. } => args.iter_mut().collect(),
            Op::Grad {
                wrt,
                outputs,
                seeds,
            } => std::iter::once(wrt)
                .chain(outputs.iter_mut())
                .chain(seeds.iter_mut())
                .collect(),
        }
    }

    /// What an [`Op::Update`]'s kernel computes from: its `rows` and, for a rows update,
    /// its positions — every operand but the `dst` it writes into. Empty for other ops.
    pub fn update_sources(&self) -> Vec<Value> {
        match self {
            Op::Update { rows, at, .. } => {
                std::iter::once(*rows).chain(at.map(|at| at.pos)).collect()
            }
            _ => vec![],
        }
    }

    /// True for ops that compute each output element from operand elements at related
    /// indices only (not reductions, softmax, matmul, attention, or an update or a gather,
    /// whose element depends on a position read at run time).
    pub fn is_elementwise_like(&self) -> bool {
        !matches!(
            self,
            Op::Reduce { .. }
                | Op::Softmax { .. }
                | Op::TopK { .. }
                | Op::Cumsum { .. }
                | Op::MatMul { .. }
                | Op::Attention { .. }
                | Op::AttentionStat { .. }
                | Op::Update { .. }
                | Op::Gather { .. }
                | Op::Grad { .. }
        )
    }
}

/// The chunk length of [`Op::Cumsum`]'s fixed order for rows up to 262144 elements
/// ([`cumsum_chunk`] for longer ones): the axis is summed in chunks of this many elements
/// (the last one shorter), whatever the kernel's launch configuration.
pub const CUMSUM_CHUNK: u64 = 32;

/// A step in graph form.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// The step's name.
    pub name: String,
    /// Definitions, in topological order.
    pub ops: PrimaryMap<Value, Op>,
    /// The type of every value.
    pub types: SecondaryMap<Value, TensorType>,
    /// Step parameters in order: name and the [`Op::Input`] value.
    pub inputs: Vec<(String, Value)>,
    /// Step results in order: name and value. A value may be returned more than once.
    pub outputs: Vec<(String, Value)>,
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Appends `op` with result type `ty` and returns its value. The caller keeps the
    /// topological order (operands already pushed); [`crate::graph::Graph`]'s verifier checks it.
    pub fn push(&mut self, op: Op, ty: TensorType) -> Value {
        let v = self.ops.push(op);
        self.types[v] = ty;
        v
    }

    /// The type of `v`.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.types[v]
    }

    /// The operand of `v` when `v` holds the same elements in the same row-major order: a
    /// [`Op::Reshape`], or a [`Op::Permute`] that moves only dims of one index (decode's
    /// attention heads `[B, KV, G, 1, d]` as `[B, 1, KV, G, d]`: numpy's no-copy
    /// transpose). `None` for any other op, and for an operand not defined earlier (so a
    /// malformed graph cannot make a walk over it loop).
    pub fn same_bytes_arg(&self, v: Value) -> Option<Value> {
        let arg = match &self.ops[v] {
            Op::Reshape { arg } => *arg,
            Op::Permute { arg, perm } => {
                let shape = &self.ty(*arg).shape.0;
                let mut kept = perm
                    .iter()
                    .map(|&p| p as usize)
                    .filter(|&p| shape.get(p) != Some(&1));
                let mut last = kept.next();
                for p in kept {
                    if last.is_some_and(|l| l > p) {
                        return None;
                    }
                    last = Some(p);
                }
                *arg
            }
            _ => return None,
        };
        (arg < v).then_some(arg)
    }

    /// The value whose buffer `v` is stored in: for an [`Op::Update`], the root of its chain
    /// (an `inout` input), whose buffer the update writes in place; `v` itself otherwise.
    /// Follows only operands defined earlier, so a malformed graph cannot make it loop.
    pub fn storage_root(&self, v: Value) -> Value {
        let mut x = v;
        while let Some(Op::Update { dst, .. }) = self.ops.get(x) {
            if dst.as_u32() >= x.as_u32() {
                break;
            }
            x = *dst;
        }
        x
    }

    /// True if `v` is a step output (returned, so written to memory).
    pub fn is_output(&self, v: Value) -> bool {
        self.outputs.iter().any(|(_, o)| *o == v)
    }

    /// True if `v` is an `inout` step input.
    pub fn is_inout_input(&self, v: Value) -> bool {
        matches!(self.ops.get(v), Some(Op::Input { inout: true, .. }))
    }

    /// The values of `root`'s cone that read `target` at an element other than their own:
    /// a kernel computing `root` element by element, reading from memory the values `stop`
    /// accepts, reads `target` only at the element it computes exactly when this is empty.
    /// The walk goes through ops that compute each element from their operands' elements
    /// at the same index (unary, binary, cast and select ops whose operands have the
    /// result's shape); any other op whose cone reaches `target` is listed (`root` itself
    /// when it is such an op and not read from memory) and not entered. A whole
    /// [`Op::Update`]'s kernel writes each element of `target` where it reads it, so the
    /// listed values are computed by earlier kernels (`fuse` rule 6).
    pub fn misaligned_reads(
        &self,
        root: Value,
        target: Value,
        stop: impl Fn(Value) -> bool,
    ) -> Vec<Value> {
        let stopped = &stop;
        // Whether `x`'s cone (not through stopped values) reaches `target`.
        let mut reach: std::collections::HashMap<Value, bool> = Default::default();
        let mut reaches = |x: Value| -> bool {
            let mut stack = vec![(x, false)];
            while let Some((y, done)) = stack.pop() {
                if reach.contains_key(&y) {
                    continue;
                }
                if y == target || stopped(y) || !self.ops.is_valid(y) {
                    reach.insert(y, y == target);
                    continue;
                }
                let args: Vec<Value> = self.ops[y].args().into_iter().filter(|&a| a < y).collect();
                if done {
                    let r = args.iter().any(|a| reach.get(a) == Some(&true));
                    reach.insert(y, r);
                } else {
                    stack.push((y, true));
                    stack.extend(args.into_iter().map(|a| (a, false)));
                }
            }
            reach[&x]
        };
        let mut found = Vec::new();
        let mut seen: std::collections::HashSet<Value> = Default::default();
        let mut stack = vec![root];
        while let Some(x) = stack.pop() {
            if x == target || stopped(x) || !self.ops.is_valid(x) || !seen.insert(x) {
                continue;
            }
            let op = &self.ops[x];
            let shape = &self.ty(x).shape;
            let same_index = matches!(
                op,
                Op::Unary { .. } | Op::Binary { .. } | Op::Cast { .. } | Op::Select { .. }
            ) && op.args().iter().all(|&a| &self.ty(a).shape == shape);
            if same_index {
                stack.extend(op.args().into_iter().filter(|&a| a < x));
            } else if reaches(x) {
                found.push(x);
            }
        }
        found
    }

    /// The operands of the matmul `mm` as its kernels read them from memory, `[lhs, rhs]`
    /// (`None` if `mm` is not a matmul). Each operand is read from the tensor under its
    /// permute, if any (`w^T` reads `w` in place). Where both operands are widening casts
    /// of tensors of one 16-bit dtype — `f32(x) @ f32(w)^T` (or `f32(w^T)`) with `x` and `w`
    /// both bf16 or both f16 — the kernels read those 16-bit tensors and convert each
    /// element exactly to f32 as it is loaded: a product of two 16-bit floats is exact in
    /// f32, so the matmul is the one of the f32 values the program names, without their
    /// f32 copies in memory, and tensor cores take them as 16-bit operands.
    pub fn matmul_reads(&self, mm: Value) -> Option<[MatmulRead; 2]> {
        let Some(Op::MatMul { lhs, rhs }) = self.ops.get(mm) else {
            return None;
        };
        let plain = |x: Value| match self.ops.get(x) {
            Some(Op::Permute { arg, perm }) => MatmulRead {
                stored: *arg,
                perm: Some(perm.clone()),
                widened: false,
            },
            _ => MatmulRead {
                stored: x,
                perm: None,
                widened: false,
            },
        };
        let (l, r) = (plain(*lhs), plain(*rhs));
        match (self.widened_read(&l), self.widened_read(&r)) {
            (Some(wl), Some(wr))
                if self.types.get(wl.stored).map(|t| t.dtype)
                    == self.types.get(wr.stored).map(|t| t.dtype) =>
            {
                Some([wl, wr])
            }
            _ => Some([l, r]),
        }
    }

    /// How `out`, the output of the group of matmul `mm` (`[.., N]`), lays out the
    /// matmul's rows, or `None` if it holds them in neither form:
    /// - [`MatmulLayout::Rows`]: `[.., N]` with leading dims of the same product as the
    ///   matmul's — the same elements in the same row-major order (the matmul's own shape,
    ///   or `[B, T, N]` for the `[B·T, N]` GEMM of batched activations);
    /// - [`MatmulLayout::Heads`]: `[.., N / d, d]` with `d < N`, leading dims of the same
    ///   product — a row epilogue (`fuse` rule 8), each row of `d` one head.
    pub fn matmul_layout(&self, mm: Value, out: Value) -> Option<MatmulLayout> {
        let (m, o) = (&self.types.get(mm)?.shape.0, &self.types.get(out)?.shape.0);
        let (&n, &last) = (m.last()?, o.last()?);
        let rows = m[..m.len() - 1].iter().product::<u64>();
        let lead = |k: usize| {
            o.get(..o.len().checked_sub(k)?)
                .map(|l| l.iter().product::<u64>())
        };
        if last == n && lead(1) == Some(rows) {
            return Some(MatmulLayout::Rows);
        }
        let heads = o.len().checked_sub(2).map(|i| o[i])?;
        (last < n && heads * last == n && lead(2) == Some(rows))
            .then_some(MatmulLayout::Heads { d: last })
    }

    /// The dtype the kernels of the matmul `mm` read its operands in: the 16-bit dtype
    /// under widening casts ([`Graph::matmul_reads`]), else the matmul's own.
    pub fn matmul_read_dtype(&self, mm: Value) -> Option<DType> {
        let [l, _] = self.matmul_reads(mm)?;
        self.types.get(l.stored).map(|t| t.dtype)
    }

    /// `read` seen through a widening cast: its stored value is `f32(y)` for a bf16 or f16
    /// `y` (or, with no permute yet, `f32(y^T)`: the permute then moves under the cast).
    fn widened_read(&self, read: &MatmulRead) -> Option<MatmulRead> {
        let Some(Op::Cast { arg }) = self.ops.get(read.stored) else {
            return None;
        };
        let wide = self.types.get(read.stored)?.dtype == DType::F32;
        let narrow = matches!(self.types.get(*arg)?.dtype, DType::Bf16 | DType::F16);
        if !(wide && narrow) {
            return None;
        }
        match (&read.perm, self.ops.get(*arg)) {
            (None, Some(Op::Permute { arg: under, perm })) => Some(MatmulRead {
                stored: *under,
                perm: Some(perm.clone()),
                widened: true,
            }),
            _ => Some(MatmulRead {
                stored: *arg,
                perm: read.perm.clone(),
                widened: true,
            }),
        }
    }

    /// Number of uses of each value (operand uses plus step outputs).
    pub fn use_counts(&self) -> SecondaryMap<Value, u32> {
        let mut uses = SecondaryMap::new();
        for (_, op) in self.ops.iter() {
            for a in op.args() {
                uses[a] += 1;
            }
        }
        for (_, v) in &self.outputs {
            uses[*v] += 1;
        }
        uses
    }
}

/// One operand of a matmul as its kernels read it ([`Graph::matmul_reads`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatmulRead {
    /// The tensor loaded: the operand itself, or the tensor under its permute or its
    /// widening cast. Lowering needs it materialised (`fuse` rule 0 sees to it).
    pub stored: Value,
    /// The permute from `stored` to the operand, if any (a swap of the last two dims for
    /// `w^T`).
    pub perm: Option<Vec<u32>>,
    /// The operand is `f32` of a 16-bit `stored`: loaded as 16-bit values, converted
    /// exactly to f32.
    pub widened: bool,
}

/// What kind of kernel a fusion group becomes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum GroupKind {
    /// Every output element is computed independently from inputs at related indices.
    Elementwise,
    /// Rows of the outputs' last axis: per row, one or more reductions over the row
    /// (with their elementwise prologue), then an elementwise epilogue over the row.
    RowReduction,
    /// One [`Op::MatMul`] ([`GroupOps::Matmul`]) whose operands are
    /// materialised, with an elementwise epilogue (scale, bias, residual, activation, cast)
    /// applied to each result element before the store.
    Matmul,
    /// One [`Op::Attention`] ([`GroupOps::Attention`], with the [`Op::MatMul`] its logits
    /// are computed from): the logits, the online softmax and
    /// the product with `v` in one kernel; the logits' elementwise cone (scale, mask) is
    /// computed per score element from the first matmul's result. When q's tensor is
    /// computed by the kernel itself (its prologue: RoPE, QK-norm; the `fuse` pass's
    /// rule 7), the reductions of that computation, over q's rows of the head dim, are
    /// [`GroupOps::Attention`]'s `q_prologue`.
    Attention,
    /// One [`Op::Update`] (its only output): the kernel iterates over the
    /// update's `rows` — not over `dst` — computing each row element from its elementwise
    /// cone and storing it at its position in the buffer `dst` lives in, skipping positions
    /// outside the axis (a whole update: at the same element). Its iteration domain is
    /// `rows`' shape, not its output's.
    Update,
    /// One [`Op::Cumsum`] ([`GroupOps::Scan`]) over the last axis of its
    /// operand, whose elementwise cone the kernel computes; the one output is the cumsum
    /// or the cast that rounds it (its only use), written element by element as the
    /// running sum reaches it.
    Scan,
    /// The query-major kernel of a fused attention backward ([`GroupOps::AttentionDq`]):
    /// per query row, the row reductions of the score matrices (softmax's maximum and
    /// sum, `rowsum(dP ∘ P)`) and the products whose left operand is score-shaped
    /// (`dQ = dS·K`), the scores recomputed block by block from their matmuls and never
    /// stored.
    AttentionDq,
    /// The key-major kernel of a fused attention backward ([`GroupOps::AttentionDkv`]):
    /// per key row, the products contracting the score matrices over their queries
    /// (`dV = Pᵀ·dO`, `dKᵀ = Qᵀ·dS`), the scores recomputed as their transposes.
    AttentionDkv,
}

/// What a fusion group's kernel is built around, by kind: the ops its loops form, each
/// named by its role (the `fuse` pass records them once; schedule, lower and the verifier
/// read them). The text form lists them in one `reductions [..]` list, in the order of
/// [`GroupOps::listed`].
#[derive(Clone, PartialEq, Debug)]
pub enum GroupOps {
    /// Every output element computed independently; no reduction.
    Elementwise,
    /// Per row, `reductions` ([`Op::Reduce`] over the last axis, at least one), computed
    /// in this order, then the elementwise epilogue over the row.
    RowReduction { reductions: Vec<Value> },
    /// One [`Op::MatMul`]; `row_epilogue`: the reductions over the matmul's rows of a row
    /// epilogue (QK-norm and RoPE of a projection's heads, the `fuse` pass's rule 8),
    /// empty when there is none.
    Matmul {
        matmul: Value,
        row_epilogue: Vec<Value>,
    },
    /// One [`Op::Attention`] whose logits are computed from the matmul `scores` (`q @ kᵀ`);
    /// `q_prologue`: the reductions over q's rows of the head dim when the kernel computes
    /// q itself (RoPE, QK-norm; rule 7), else empty.
    Attention {
        scores: Value,
        attention: Value,
        q_prologue: Vec<Value>,
    },
    /// One [`Op::Update`]; `row_reductions`: the reductions of its `rows` that the kernel
    /// computes (rule 6), else empty.
    Update { row_reductions: Vec<Value> },
    /// One [`Op::Cumsum`].
    Scan { cumsum: Value },
    /// A fused attention backward's query-major kernel. `scores`: the matmuls of score
    /// shape `[.., M, N]` (`q·kᵀ`, `dO·vᵀ`) its cones start from, each an operand of
    /// rows `[.., M, d]` and one of `[.., d, N]` read in place; `reductions`: the
    /// [`Op::Reduce`]s over the last axis of score-shaped cones that it computes (and
    /// writes, `[.., M, 1]`), in definition order; `products`: matmuls `X·B` with `X` a
    /// score-shaped cone and `B` a view `[.., N, e]` (written `[.., M, e]`).
    AttentionDq {
        scores: Vec<Value>,
        products: Vec<Value>,
        reductions: Vec<Value>,
    },
    /// A fused attention backward's key-major kernel: `scores` as for
    /// [`GroupOps::AttentionDq`]; `products`: matmuls contracting a score-shaped cone `X`
    /// over its rows — `permute(X)·B` (`[.., N, e]`) or `A·X` (`[.., e, N]`), `A` and `B`
    /// views of `M` rows read in place. The row reductions they read are materialised.
    AttentionDkv {
        scores: Vec<Value>,
        products: Vec<Value>,
    },
}

impl GroupOps {
    /// The kind of kernel these ops make.
    pub fn kind(&self) -> GroupKind {
        match self {
            GroupOps::Elementwise => GroupKind::Elementwise,
            GroupOps::RowReduction { .. } => GroupKind::RowReduction,
            GroupOps::Matmul { .. } => GroupKind::Matmul,
            GroupOps::Attention { .. } => GroupKind::Attention,
            GroupOps::Update { .. } => GroupKind::Update,
            GroupOps::Scan { .. } => GroupKind::Scan,
            GroupOps::AttentionDq { .. } => GroupKind::AttentionDq,
            GroupOps::AttentionDkv { .. } => GroupKind::AttentionDkv,
        }
    }

    /// The ops in one list, as the text form writes them: the matmul (or the scores'
    /// matmul and the attention, or the cumsum) first, then the reductions.
    pub fn listed(&self) -> Vec<Value> {
        match self {
            GroupOps::Elementwise => vec![],
            GroupOps::RowReduction { reductions } => reductions.clone(),
            GroupOps::Matmul {
                matmul,
                row_epilogue,
            } => [*matmul]
                .into_iter()
                .chain(row_epilogue.iter().copied())
                .collect(),
            GroupOps::Attention {
                scores,
                attention,
                q_prologue,
            } => [*scores, *attention]
                .into_iter()
                .chain(q_prologue.iter().copied())
                .collect(),
            GroupOps::Update { row_reductions } => row_reductions.clone(),
            GroupOps::Scan { cumsum } => vec![*cumsum],
            GroupOps::AttentionDq {
                scores,
                products,
                reductions,
            } => scores
                .iter()
                .chain(products)
                .chain(reductions)
                .copied()
                .collect(),
            GroupOps::AttentionDkv { scores, products } => {
                scores.iter().chain(products).copied().collect()
            }
        }
    }

    /// The ops of a `kind` group from the list [`GroupOps::listed`] writes; `Err` says what
    /// the list lacks (the text reader's message). Only the count is checked here; what
    /// each op must be is the verifier's (`fusion.reductions`). An attention backward's
    /// list is told apart with the graph `g`: its matmuls first, a product being a matmul
    /// whose operands' cones reach another listed matmul (the scores), then the rest.
    pub fn from_listed(kind: GroupKind, listed: Vec<Value>, g: &Graph) -> Result<GroupOps, String> {
        // (scores, products, the rest)
        type Split = (Vec<Value>, Vec<Value>, Vec<Value>);
        let split = |listed: &[Value]| -> Result<Split, String> {
            let is_mm = |v: Value| v.index() < g.ops.len() && matches!(g.ops[v], Op::MatMul { .. });
            let mms: Vec<Value> = listed.iter().copied().take_while(|&v| is_mm(v)).collect();
            let reaches_other = |p: Value| {
                let mut stack = g.ops[p].args();
                let mut seen = std::collections::HashSet::new();
                while let Some(x) = stack.pop() {
                    if !seen.insert(x) {
                        continue;
                    }
                    if x != p && mms.contains(&x) {
                        return true;
                    }
                    if !matches!(g.ops[x], Op::MatMul { .. }) {
                        stack.extend(g.ops[x].args());
                    }
                }
                false
            };
            let (products, scores): (Vec<Value>, Vec<Value>) =
                mms.iter().copied().partition(|&m| reaches_other(m));
            if scores.is_empty() {
                return Err("an attention backward group lists its score matmuls first".into());
            }
            Ok((scores, products, listed[mms.len()..].to_vec()))
        };
        Ok(match kind {
            GroupKind::AttentionDq => {
                let (scores, products, reductions) = split(&listed)?;
                GroupOps::AttentionDq {
                    scores,
                    products,
                    reductions,
                }
            }
            GroupKind::AttentionDkv => {
                let (scores, products, rest) = split(&listed)?;
                if !rest.is_empty() {
                    return Err("an attention_dkv group lists only matmuls".into());
                }
                GroupOps::AttentionDkv { scores, products }
            }
            GroupKind::Elementwise if listed.is_empty() => GroupOps::Elementwise,
            GroupKind::Elementwise => return Err("an elementwise group lists no reductions".into()),
            GroupKind::RowReduction => GroupOps::RowReduction { reductions: listed },
            GroupKind::Matmul => match listed.split_first() {
                Some((&matmul, rest)) => GroupOps::Matmul {
                    matmul,
                    row_epilogue: rest.to_vec(),
                },
                None => return Err("a matmul group lists its matmul first".into()),
            },
            GroupKind::Attention => match listed[..] {
                [scores, attention, ref rest @ ..] => GroupOps::Attention {
                    scores,
                    attention,
                    q_prologue: rest.to_vec(),
                },
                _ => {
                    return Err(
                        "an attention group lists its logits' matmul, then the attention".into(),
                    )
                }
            },
            GroupKind::Update => GroupOps::Update {
                row_reductions: listed,
            },
            GroupKind::Scan => match listed[..] {
                [cumsum] => GroupOps::Scan { cumsum },
                _ => return Err("a scan group lists exactly one cumsum".into()),
            },
        })
    }

    /// The reductions the kernel forms over rows (a row reduction's, a row epilogue's, q's
    /// prologue's, an update's rows'); empty for the other kinds.
    pub fn row_reductions(&self) -> &[Value] {
        match self {
            GroupOps::RowReduction { reductions } => reductions,
            GroupOps::Matmul { row_epilogue, .. } => row_epilogue,
            GroupOps::Attention { q_prologue, .. } => q_prologue,
            GroupOps::Update { row_reductions } => row_reductions,
            GroupOps::AttentionDq { reductions, .. } => reductions,
            GroupOps::Elementwise | GroupOps::Scan { .. } | GroupOps::AttentionDkv { .. } => &[],
        }
    }

    /// The group's matmul: a matmul group's, or the attention's scores.
    pub fn matmul(&self) -> Option<Value> {
        match *self {
            GroupOps::Matmul { matmul, .. } => Some(matmul),
            GroupOps::Attention { scores, .. } => Some(scores),
            _ => None,
        }
    }
}

/// One fusion group: the values it writes to memory and the ops its kernel is built
/// around ([`GroupOps`]). Every other value it needs is computed inside the kernel from
/// materialised values (step inputs and other groups' outputs), recomputed if another
/// group needs it too.
#[derive(Clone, PartialEq, Debug)]
pub struct GroupData {
    pub ops: GroupOps,
    /// Values written by the kernel. All have the same shape (the iteration domain; for a
    /// [`GroupKind::Update`], the one update, written over its `rows`' shape) — but an
    /// attention group's row statistics ([`Op::AttentionStat`], `[.., M, 1]`).
    pub outputs: Vec<Value>,
}

impl GroupData {
    /// The kind of kernel the group becomes.
    pub fn kind(&self) -> GroupKind {
        self.ops.kind()
    }
}

/// The `fuse` pass's result, a side table of the graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fusion {
    pub groups: PrimaryMap<Group, GroupData>,
    /// The group that writes each materialised value; none for step inputs and for values
    /// computed inside a kernel.
    pub writer: SecondaryMap<Value, PackedOption<Group>>,
    /// A value stored in another value's buffer, written by no group: both are chains of
    /// [`Op::Reshape`]s (and permutes of unit dims, [`Graph::same_bytes_arg`]) over one value
    /// (the other may be that value itself), which is
    /// materialised (a row-major reshape of a row-major tensor is the same bytes, numpy's
    /// no-copy reshape). `fuse` makes one where a GEMM reads a reshape of a tensor (`x [B,
    /// T, K]` as its `[B·T, K]` left operand), or another reshape of a step output; and a
    /// step output over a group's output (decode's `attn` over the attention's heads), whose
    /// buffer is then the output's, named and typed as the output (at most one step output
    /// per buffer; never over a step input or output: verifier rule `fusion.alias`).
    pub alias: SecondaryMap<Value, PackedOption<Value>>,
}

impl Fusion {
    /// Adds a group and records it as the writer of its outputs.
    pub fn new_group(&mut self, data: GroupData) -> Group {
        let outs = data.outputs.clone();
        let g = self.groups.push(data);
        for v in outs {
            self.writer[v] = g.into();
        }
        g
    }

    /// True if `v` lives in memory: a step input, some group's output, or an alias of one.
    pub fn is_materialized(&self, graph: &Graph, v: Value) -> bool {
        matches!(graph.ops[v], Op::Input { .. })
            || self.writer[v].is_some()
            || self.alias[v].is_some()
    }
}

/// How a matmul group's output holds the matmul's `[.., N]` rows ([`Graph::matmul_layout`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum MatmulLayout {
    /// `[.., N]`, the rows in order (leading dims may differ, their product may not).
    Rows,
    /// `[.., N / d, d]`: a row epilogue's heads of `d`.
    Heads { d: u64 },
}

/// The tile configuration of one kernel: plain data, printed in the IR and explained by
/// `tessel explain` (tinygrad `opt/` style). Chosen by the `schedule` pass.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum TileConfig {
    /// One thread per `vector` consecutive elements of the flattened output, `threads` per
    /// CTA, a grid of `ceil(numel / (threads · vector))` CTAs.
    Elementwise { threads: u32, vector: u32 },
    /// `threads_per_row` threads (a power of two ≤ 32, or a multiple of 32) share one row;
    /// a CTA holds `rows_per_cta` rows; each thread reads `vector` consecutive elements per
    /// access, striding by `threads_per_row · vector` along the row. When a thread's part
    /// of a row is at most 32 elements (its chunks unrolled), the kernel holds it in
    /// registers: each value of the row is loaded or computed once and
    /// read again by the later reductions and the epilogue (lower/rows.rs); the order of
    /// every sum is the same either way.
    RowReduction {
        threads_per_row: u32,
        rows_per_cta: u32,
        vector: u32,
    },
    /// Matrix-vector product for decode (few rows of the left operand, M ≤ 16, the right
    /// operand a `[N, K]` weight read along K): each warp computes `columns` consecutive
    /// output columns for all M rows, `warps` warps per CTA; lane j reads `vector`
    /// consecutive elements of each of its weight rows and of every left row at
    /// k = j·vector + i·32·vector (the left chunk is loaded once and used for every column),
    /// keeping M·columns f32 accumulators; then a butterfly over the warp. The weight is
    /// streamed once with 16-byte loads, `unroll` chunks of k per loop iteration (their
    /// loads issued together, then their products in k order; K past the last whole group
    /// of `32·vector·unroll` one chunk at a time).
    Gemv {
        warps: u32,
        vector: u32,
        columns: u32,
        unroll: u32,
    },
    /// SIMT FMA tiled GEMM (the `exact` schedule): a CTA computes a `bm × bn` output tile
    /// with `(bm/tm)·(bn/tn)` threads, each owning `tm × tn` outputs; K is walked in slices of
    /// `bk` through shared memory; each slice's products are summed in k order into a
    /// partial, the partials added in slice order (fma for f32 operands, exact product + add
    /// for 16-bit ones). With `split_k` > 1 the K slices are cut into `split_k` contiguous
    /// ranges computed by separate CTAs, whose f32 partial results go to a scratch buffer and
    /// are summed in range order by a second kernel that also runs the epilogue.
    Simt {
        bm: u32,
        bn: u32,
        bk: u32,
        tm: u32,
        tn: u32,
        split_k: u32,
    },
    /// Tensor-core GEMM (`mma.sync`; bf16/f16 operands as m16n8k16 — also those read under
    /// widening casts, [`Graph::matmul_reads`] — f32 operands rounded to TF32 as m16n8k8;
    /// f32 accumulators): a CTA of `warps_m × warps_n` warps computes a
    /// `bm × bn` output tile, each warp a `(bm / warps_m) × (bn / warps_n)` sub-tile of
    /// 16 × 8 fragments. K is walked in slices of `bk` through a ring of `stages` shared
    /// memory buffers filled by 16-byte `cp.async` copies (`stages - 1` slices in flight
    /// while one is multiplied; plain loads where rows are not 16-byte aligned), swizzled so
    /// that `ldmatrix` reads are free of bank conflicts. `split_k` as for [`TileConfig::Simt`].
    /// `shape` is the `mma.sync` instruction (from the dtype the operands are read in),
    /// `epilogue` how the
    /// accumulators reach memory, and `min_ctas_per_sm` the occupancy asked of ptxas
    /// (`.minnctapersm`; 0 asks nothing).
    Mma {
        bm: u32,
        bn: u32,
        bk: u32,
        warps_m: u32,
        warps_n: u32,
        stages: u32,
        split_k: u32,
        shape: MmaShape,
        epilogue: MmaEpilogue,
        min_ctas_per_sm: u32,
        /// The instruction and the loader ([`MmaEngine`]): `mma.sync` or one of the
        /// warpgroup (`wgmma`) kernels.
        engine: MmaEngine,
    },
    /// Tensor-core GEMV for decode (M ≤ 16, the weight `[N, K]` and the left operand both
    /// read along K, K a multiple of 8 elements, 16-bit operands or widening casts of
    /// them): the M ≤ 16 left rows are
    /// the mma's A operand (rows past M are zeros) and 8 weight rows per CTA its B operand.
    /// Every lane loads its operands straight from global memory with 16-byte loads; the k
    /// order inside a 32-element chunk is permuted identically for both operands, which
    /// leaves the sum's terms unchanged. The `warps` warps of a CTA share the same 8 weight
    /// rows and take every `warps`-th chunk of 32 k; each warp processes `unroll` chunks per
    /// loop iteration (loads issued before the mma), and with more than one warp their
    /// results are added in warp order through shared memory. `min_ctas_per_sm` as for
    /// [`TileConfig::Mma`] (the schedule asks for every CTA of the grid to be resident).
    GemvMma {
        warps: u32,
        unroll: u32,
        min_ctas_per_sm: u32,
    },
    /// Fused attention on tensor cores (`mma.sync` m16n8k16, bf16/f16 operands, f32
    /// accumulators), FlashAttention-2's loop (Dao, 2023, Algorithm 1): a CTA of `warps`
    /// warps owns `16 · warps` query rows, each warp 16; the rows are the `pack` query heads
    /// that share one key/value head times the query positions (row = position · pack +
    /// head), so every query head of a KV group is served from one read of K and V. Keys
    /// are walked in blocks of `block_n` through a ring of `stages` shared-memory buffers
    /// of K and V filled by `cp.async`; per block: S = Q·Kᵀ (Q's fragments kept in
    /// registers), the logits' elementwise cone per element, the running row maximum and
    /// sum, P = exp(S - max) rounded to V's dtype, O = O · exp(old max - new max) + P·V.
    /// The key loop ends at the last key any row of the CTA may see when the mask bounds it
    /// (`where(j <= bound(row), x, -inf)`), else at N. At the end O / sum, 0 for a row
    /// with no visible key. With `split` > 0 (flash-decoding, for few query rows over many
    /// keys) the keys are cut into ranges of `split` keys (a multiple of `block_n`; fixed in
    /// keys, so a row's order never depends on the batch), each range's O, maximum and sum
    /// go to an f32 scratch buffer, and a second kernel merges the ranges in order.
    ///
    /// With `wgmma` (text `wgmma: 1`, printed only when set; sm_90a): the warps are
    /// consumer warpgroups of 4 (64 query rows each), and a producer warpgroup of 128
    /// threads more loads K and V by TMA into the ring through mbarriers
    /// (FlashAttention-3's warp specialisation, Shah et al. 2024, §3.1); Q, K and V are
    /// staged in 128-byte panels (the wgmma swizzle), S = Q·Kᵀ is one `wgmma` per 16 of the
    /// head dim with both operands in shared memory, and P·V one `wgmma` per 16 keys with
    /// P in registers and V's tile read MN-major (`lower/attention.rs`); every sum in the
    /// same order as without.
    Attention {
        warps: u32,
        block_n: u32,
        stages: u32,
        pack: u32,
        split: u32,
        wgmma: bool,
    },
    /// An in-place update ([`GroupKind::Update`]): elementwise over the update's `rows`
    /// (never over `dst`) — one thread per `vector` consecutive elements of the flattened
    /// rows, `threads` per CTA, `ceil(rows numel / (threads · vector))` CTAs; each thread
    /// computes its elements, reads its row's position and stores them at that position
    /// in `dst`'s buffer when it lies inside the axis. `vector` > 1 only when the axis is not
    /// the last (a row's last dim is then contiguous in `dst` as in `rows`).
    Update { threads: u32, vector: u32 },
    /// A cumsum ([`GroupKind::Scan`]) in the order of [`Op::Cumsum`] (a function of the
    /// row length alone, never of `threads` or `rows`); `chunk` is [`cumsum_chunk`] of the
    /// row length.
    /// - `rows: 1`: one CTA of `threads` threads per row. Thread t sums chunks t,
    ///   t + threads, ... of `chunk` elements sequentially into shared memory; thread 0
    ///   turns the chunk totals into their exclusive prefix sequentially; then each thread
    ///   runs through its chunks again from its chunk's prefix, storing each running sum.
    /// - `rows` > 1 (= `threads`, for a row of one chunk, `chunk` ≥ its length): a thread
    ///   per row, `rows` rows a CTA; the thread adds the row's elements to -0 left to
    ///   right, storing each running sum — the same additions as one chunk of the above
    ///   (its prefix is -0).
    Scan { threads: u32, chunk: u32, rows: u32 },
    /// A fused attention backward kernel ([`GroupKind::AttentionDq`],
    /// [`GroupKind::AttentionDkv`]) on `mma.sync` m16n8k16: a CTA of `warps` warps owns
    /// `16 · warps` rows (queries for dq, keys for dkv), each warp 16, their operand tiles
    /// (q and dO, or k and v) kept as A fragments in registers; the other side is walked in
    /// blocks of `block_n` through a two-stage ring of shared-memory tiles filled by
    /// `cp.async`. Every score is `q·kᵀ` (or `dO·vᵀ`) by one mma per 16 of the head dim,
    /// in order from 0, in both kernels (tensor cores' products are symmetric in their
    /// operands, so `k·qᵀ` gives the same bits transposed). dq: one sweep over the blocks
    /// per level of its reductions (each lane folds its scores in key order, then the
    /// row's four lanes by butterfly), then one for its products; dkv: one sweep, the
    /// reductions read. Blocks no row of the CTA sees (the mask's key bound) are skipped.
    AttentionBwd { warps: u32, block_n: u32 },
}

/// The chunk length of [`Op::Cumsum`]'s order for a row of `n`: [`CUMSUM_CHUNK`] (32)
/// elements, or more for rows of more than 8192 chunks (`32 · ceil(n / 262144)`), so that
/// a row's chunk totals fit 32 KiB of shared memory. A function of `n` alone.
pub fn cumsum_chunk(n: u64) -> u64 {
    CUMSUM_CHUNK * n.div_ceil(CUMSUM_CHUNK * MAX_SCAN_CHUNKS).max(1)
}

/// Most chunks of one cumsum row ([`cumsum_chunk`]).
pub const MAX_SCAN_CHUNKS: u64 = 8192;

/// Which instructions a tensor-core tile ([`TileConfig::Mma`]) multiplies with and how its
/// ring is filled. Text: nothing for `Sync`, `wgmma: 1`, `wgmma: tma` (`wgmma: tma, tail:
/// N` with a split tail), `wgmma: pingpong, ctas: N`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum MmaEngine {
    /// `mma.sync` on `ldmatrix` fragments; every thread's `cp.async` fills the ring.
    Sync,
    /// Warpgroup MMA (sm_90a): the CTA's `warps_m` warps (`warps_n` 1, `bm = 16 ·
    /// warps_m`, a multiple of 64) act as `bm / 64` warpgroups, each computing 64 rows ×
    /// `bn` (≤ 256) with one `wgmma.m64n{bn}k16` per 16 of K, both operands read K-major
    /// from the ring (128-byte rows, the 128-byte swizzle, `bk · esz` = 128) through
    /// shared-memory descriptors, one wgmma group kept in flight while the next slice's
    /// copies are issued (`stages` ≥ 3, no split-K); every thread's `cp.async` fills the
    /// ring. Warp `w` holds rows `16w .. 16w + 16` of the tile, as a `16 × bn` warp tile
    /// for the epilogue.
    Wgmma,
    /// Warp-specialised warpgroup MMA fed by TMA (sm_90a; CUTLASS 3's
    /// `KernelTmaWarpSpecialized`): as [`MmaEngine::Wgmma`] for the `warps_m` consumer
    /// warps, which come after one producer warpgroup (128 more threads, the first of the
    /// CTA) whose one thread fills the ring's stages with TMA tiled loads (boxes of `bm`
    /// and `bn` rows × `bk`, 128-byte swizzle; the edges and the K tail zero-filled by the
    /// tensor map), the stages handed over through FULL and EMPTY mbarriers. Needs both
    /// operands stored tensors read along K, rows of whole 16-byte chunks, no batch; the
    /// epilogue is the consumers' alone (named barrier 1).
    ///
    /// `tail`: the last `tail` tiles of the grouped order are each computed as two tiles of
    /// `bm × bn/2` by two CTAs (0: none), so that a last wave with at most half the SMs'
    /// worth of tiles takes half a tile's time (the CTAs past the first `tiles − tail`).
    WgmmaTma { tail: u32 },
    /// The persistent, ping-pong warp-specialised tile (sm_90a; CUTLASS 3's
    /// `KernelTmaWarpSpecializedPingpong`): `ctas` CTAs (at most the tiles; the target's SM
    /// count) walk the `bm × bn` output tiles of the grouped order, CTA `x` taking tiles
    /// `x, x + ctas, ...`; a producer warpgroup loads their K slices by TMA into one ring
    /// (as [`MmaEngine::WgmmaTma`]'s), and the `warps_m` consumer warps are two warpgroups
    /// that take the CTA's tiles in turn, each computing a whole tile (`bm / 64` blocks of
    /// 64 rows, `m64n{bn}k16` each) and running its epilogue while the other's main loop
    /// runs. Needs what [`MmaEngine::WgmmaTma`] needs and `bm` = `bn` = 128, `warps_m` = 8
    /// (two warpgroups); text `wgmma: pingpong, ctas: N`.
    WgmmaPingpong { ctas: u32 },
}

impl MmaEngine {
    /// Whether the tile multiplies with `wgmma` (either warpgroup engine).
    pub fn is_wgmma(self) -> bool {
        self != MmaEngine::Sync
    }

    /// Threads of the CTA beyond the `warps_m × warps_n` warps that hold accumulators: the
    /// producer warpgroup of [`MmaEngine::WgmmaTma`] and [`MmaEngine::WgmmaPingpong`]
    /// (128), else 0.
    pub fn producer_threads(self) -> u32 {
        match self {
            MmaEngine::WgmmaTma { .. } | MmaEngine::WgmmaPingpong { .. } => 128,
            _ => 0,
        }
    }

    /// Whether a producer warpgroup fills the ring by TMA (the warp-specialised engines).
    pub fn is_tma(self) -> bool {
        matches!(
            self,
            MmaEngine::WgmmaTma { .. } | MmaEngine::WgmmaPingpong { .. }
        )
    }
}

/// How a tensor-core tile's f32 accumulators reach memory (the epilogue runs per element
/// either way).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum MmaEpilogue {
    /// Through shared memory: the tile is written there, then every thread stores 4
    /// consecutive columns of a row as one vector (needs N a multiple of 4 and the output
    /// of the matmul's shape).
    Staged,
    /// Straight from the registers, the two columns each lane holds of a row as one store
    /// (needs N even: the pair is then aligned).
    Pairs,
    /// Straight from the registers, one element per store.
    Single,
}

impl MmaEpilogue {
    /// Every epilogue, in the order of the docs.
    pub const ALL: [MmaEpilogue; 3] =
        [MmaEpilogue::Staged, MmaEpilogue::Pairs, MmaEpilogue::Single];

    /// The textual name: `staged`, `pairs`, `single`.
    pub fn name(self) -> &'static str {
        match self {
            MmaEpilogue::Staged => "staged",
            MmaEpilogue::Pairs => "pairs",
            MmaEpilogue::Single => "single",
        }
    }
}

impl TileConfig {
    /// Threads per CTA.
    pub fn threads_per_cta(&self) -> u32 {
        match *self {
            TileConfig::Elementwise { threads, .. } => threads,
            TileConfig::RowReduction {
                threads_per_row,
                rows_per_cta,
                ..
            } => threads_per_row * rows_per_cta,
            TileConfig::Gemv { warps, .. } => 32 * warps,
            TileConfig::Simt { bm, bn, tm, tn, .. } => (bm / tm) * (bn / tn),
            TileConfig::Mma {
                warps_m,
                warps_n,
                engine,
                ..
            } => 32 * warps_m * warps_n + engine.producer_threads(),
            TileConfig::GemvMma { warps, .. } => 32 * warps,
            // The warpgroup tile's producer warpgroup comes on top of its consumers.
            TileConfig::Attention { warps, wgmma, .. } => 32 * warps + if wgmma { 128 } else { 0 },
            TileConfig::Update { threads, .. } => threads,
            TileConfig::Scan { threads, .. } => threads,
            TileConfig::AttentionBwd { warps, .. } => 32 * warps,
        }
    }

    /// The number of K ranges a matmul tile splits its reduction into (1: no split).
    pub fn split_k(&self) -> u32 {
        match *self {
            TileConfig::Simt { split_k, .. } | TileConfig::Mma { split_k, .. } => split_k,
            _ => 1,
        }
    }
}

impl fmt::Display for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            TileConfig::Elementwise { threads, vector } => {
                write!(f, "elementwise {{ threads: {threads}, vector: {vector} }}")
            }
            TileConfig::RowReduction {
                threads_per_row,
                rows_per_cta,
                vector,
            } => write!(
                f,
                "row_reduction {{ threads_per_row: {threads_per_row}, rows_per_cta: {rows_per_cta}, vector: {vector} }}"
            ),
            TileConfig::Gemv {
                warps,
                vector,
                columns,
                unroll,
            } => write!(
                f,
                "gemv {{ warps: {warps}, vector: {vector}, columns: {columns}, unroll: {unroll} }}"
            ),
            TileConfig::Simt {
                bm,
                bn,
                bk,
                tm,
                tn,
                split_k,
            } => write!(
                f,
                "simt {{ bm: {bm}, bn: {bn}, bk: {bk}, tm: {tm}, tn: {tn}, split_k: {split_k} }}"
            ),
            TileConfig::Mma {
                bm,
                bn,
                bk,
                warps_m,
                warps_n,
                stages,
                split_k,
                shape,
                epilogue,
                min_ctas_per_sm,
                engine,
            } => write!(
                f,
                "mma {{ bm: {bm}, bn: {bn}, bk: {bk}, warps_m: {warps_m}, warps_n: {warps_n}, stages: {stages}, split_k: {split_k}, shape: {}, epilogue: {}, min_ctas_per_sm: {min_ctas_per_sm}{} }}",
                shape.name(),
                epilogue.name(),
                match engine {
                    MmaEngine::Sync => String::new(),
                    MmaEngine::Wgmma => ", wgmma: 1".into(),
                    MmaEngine::WgmmaTma { tail: 0 } => ", wgmma: tma".into(),
                    MmaEngine::WgmmaTma { tail } => format!(", wgmma: tma, tail: {tail}"),
                    MmaEngine::WgmmaPingpong { ctas } =>
                        format!(", wgmma: pingpong, ctas: {ctas}"),
                }
            ),
            TileConfig::GemvMma {
                warps,
                unroll,
                min_ctas_per_sm,
            } => write!(
                f,
                "gemv_mma {{ warps: {warps}, unroll: {unroll}, min_ctas_per_sm: {min_ctas_per_sm} }}"
            ),
            TileConfig::Attention {
                warps,
                block_n,
                stages,
                pack,
                split,
                wgmma,
            } => write!(
                f,
                "attention {{ warps: {warps}, block_n: {block_n}, stages: {stages}, pack: {pack}, split: {split}{} }}",
                if *wgmma { ", wgmma: 1" } else { "" }
            ),
            TileConfig::Update { threads, vector } => {
                write!(f, "update {{ threads: {threads}, vector: {vector} }}")
            }
            TileConfig::Scan {
                threads,
                chunk,
                rows,
            } => {
                write!(
                    f,
                    "scan {{ threads: {threads}, chunk: {chunk}, rows: {rows} }}"
                )
            }
            TileConfig::AttentionBwd { warps, block_n } => {
                write!(f, "attention_bwd {{ warps: {warps}, block_n: {block_n} }}")
            }
        }
    }
}

/// The schedule chosen for one fusion group, with the reason in words (`tessel explain`).
#[derive(Clone, PartialEq, Debug)]
pub struct Schedule {
    pub tile: TileConfig,
    pub why: String,
}

/// The `schedule` pass's result: one [`Schedule`] per fusion group.
pub type Schedules = SecondaryMap<Group, Option<Schedule>>;
