//! The verifier: states and checks the invariants of both IRs. The pass driver runs it
//! between passes in tests; a pass may assume its input verifies and must leave IR that does.
//!
//! Every error names its rule (the names listed below), where (the value, group, kernel,
//! register or statement path such as `body[3].for[0].then[1]`) and what is wrong, in words.
//!
//! # Graph IR ([`verify_graph`])
//! The type rules (`graph.const` to `graph.grad` below) are stated once, in
//! [`result_type`]: the verifier asks it for each op's type given the declared one, and
//! reports its error, or under the op's rule that the declared type is not the rule's.
//! - `graph.order`: every operand is a value defined before its use (topological order).
//! - `graph.input`: an `input` op's index is in range of [`Graph::inputs`], the entry at that
//!   index names this value, and no two `input` ops share an index; every entry of
//!   `inputs` names an `input` op with its own position as index.
//! - `graph.output`: every step output is an existing value.
//! - `graph.const`: a constant is representable in its dtype: for float dtypes finite and
//!   exactly representable (no rounding), or ±inf, or NaN; for `i32` integral and in
//!   `[-2^31, 2^31)`; for `bool` 0 or 1.
//! - `graph.iota`: the axis is below the result's rank; the dtype is not `bool`.
//! - `graph.unary`: the result type equals the operand's; `not` on `bool`; `neg`, `abs`
//!   on a number (not `bool`); the math functions on float dtypes.
//! - `graph.binary`: operands have equal dtypes and shapes, and the result their shape;
//!   the result dtype is the operands' (`bool` for comparisons); `and`/`or` on `bool`;
//!   arithmetic (`add` .. `max`) not on `bool`; `pow` on float dtypes.
//! - `graph.select`: the condition is `bool` with the result's shape; both arms have the
//!   result's type.
//! - `graph.cast`: the operand has the result's shape.
//! - `graph.broadcast`: same dtype, same rank, each operand dim 1 or equal to the result's.
//! - `graph.reshape`: same dtype and element count.
//! - `graph.permute`: `perm` is a permutation of `0..rank`, `result.shape[i] =
//!   arg.shape[perm[i]]`, same dtype.
//! - `graph.reduce`: the axis is in range, the result keeps it with size 1 and every other
//!   dim; same dtype, but i32 for `argmax`/`argmin` (not on `bool`); `mean` and
//!   `logsumexp` on float dtypes.
//! - `graph.topk`: the operand is not `bool`; the result has its rank and dims but along
//!   the axis, where `1 <= k <= ` its length; the result is the operand's dtype (values) or
//!   i32 (indices).
//! - `graph.cumsum`: same type as the operand, not `bool`; the axis in range.
//! - `graph.slice`: the axis is in range, `start + result.shape[axis] <= arg.shape[axis]`,
//!   other dims equal, same dtype.
//! - `graph.concat`: at least one operand, the axis is below the rank, every operand has
//!   the result's dtype and rank and its dims off the axis, and the sizes along the axis sum
//!   to the result's.
//! - `graph.softmax`: float dtype, same type as the operand, the axis in range.
//! - `graph.gather`: the index is i32 of the result's shape, the result of the operand's
//!   dtype; the axis is in range; the index has the operand's rank and dims but along the
//!   axis, whose length in the operand is below 2^31.
//! - `graph.update`: `dst` has the result's type, `rows` its dtype, rank and dims but
//!   along the axis, where it is at most as long (and the axis below 2^31); the axis is not
//!   the first; `pos` is i32 `[dst.shape[0]]`; a whole update's `rows` has `dst`'s type.
//!   In place: `dst` is an `inout` input or an update of one, updated by no other update;
//!   no op after the update (nor a rows update's own `rows` and `pos`) reads `dst` or a
//!   value computed from `dst` other than through the update.
//! - `graph.attention`: `softmax(logits) @ v` of `[.., M, N]` f32 logits and a `[.., N, E]`
//!   float `v` is `[.., M, E]` of `v`'s dtype; a bound is i32 of the logits' shape with
//!   1 key.
//! - `graph.attention_stat`: a row statistic of `[.., M, N]` f32 logits is f32
//!   `[.., M, 1]`; a bound as the attention's.
//! - `graph.grad`: the gradient has the float type of `wrt`; one seed per output (at least
//!   one), each of its output's float type.
//! - `graph.inout`: the end of each `inout` input's chain of updates (the input itself
//!   when there is none) is the step output named after the input.
//!
//! # Fusion groups (when given)
//! - `fusion.outputs`: a group has at least one output, each an existing value, all of
//!   one shape — but for an attention group, which writes the attention and may also
//!   write each row statistic (`attention_stat`, `[.., M, 1]`) of the same logits and
//!   bound once, nothing else.
//! - `fusion.writer`: each group output has that group as its writer, and each writer
//!   entry names an existing group that lists the value among its outputs.
//! - `fusion.alias`: an alias and its base are chains of reshapes over one value (the base
//!   may be that value), so they hold the same elements in the same row-major order; the
//!   base is materialised and no alias itself; no group writes an alias, and no step input
//!   or output is one; a group reading an alias comes after the group writing its base.
//! - `fusion.reductions`: a row-reduction group has at least one reduction; each is a
//!   `reduce` over the last axis of a value whose last dim is the outputs' row length. An
//!   elementwise group has none. A matmul group lists its one matmul, then, only when its
//!   output is the matmul's `[.., N]` as `[.., N / d, d]` (a row epilogue), reductions.
//!   A matmul group's output holds the matmul's rows `[.., N]` in order (leading dims of
//!   the same product) or, a row epilogue, as `[.., N / d, d]` (`Graph::matmul_layout`).
//! - `fusion.materialized`: every step output is materialised (a step input or a group's
//!   output).
//! - `fusion.update`: an update group writes exactly one update and lists only `reduce`s
//!   (its rows' reductions, computed in its kernel);
//!   every update is written by an update group, which comes after every group whose
//!   kernel reads the update's `dst` (it overwrites it in place) and before every group
//!   that reads the update.
//! - `fusion.scan`: a scan group lists exactly one `cumsum`, over its operand's last axis,
//!   and writes that cumsum or its cast (and nothing else).
//!
//! # Schedules (when given)
//! - `schedule.missing`: every group has a schedule (checked when the fusion is given).
//! - `schedule.orphan`: no schedule for a group that does not exist (ditto).
//! - `schedule.kind`: the tile's kind is the group's kind (ditto).
//! - `schedule.tile`: threads per CTA in `1..=1024`; `vector` in {1, 2, 4, 8};
//!   `threads_per_row` a power of two ≤ 32 or a multiple of 32; `rows_per_cta` ≥ 1.
//! - `schedule.mma`: a tensor-core tile's `shape` is the instruction of the dtype its
//!   operands are read in (bf16 → m16n8k16.bf16, f16 → m16n8k16.f16, f32 → m16n8k8.tf32;
//!   16-bit under widening casts, `Graph::matmul_reads`), `bk` whole k steps,
//!   and its `epilogue` fits the output (staged: N a multiple of 4, pairs: N even with
//!   the output of the matmul's shape). A `wgmma` tile (either engine): 16-bit operands,
//!   `warps_n` 1 and 16 rows a warp in whole warpgroups of 64, `bn` a multiple of 8 up to
//!   256, `bk` 64, at least 3 stages, no split-K; a `wgmma: tma` or `wgmma: pingpong`
//!   tile also no batch dims and `x @ w^T` or `x @ w` (B `[K, N]`, read MN-major) with
//!   both stored rows whole 16-byte chunks (its tensor maps'); a `wgmma: pingpong` tile is 128 × 128 over 8 warps (two consumer
//!   warpgroups each computing a whole tile) with `ctas` from 1 to the matmul's tiles.
//! - `schedule.row_epilogue`: a matmul group writing the matmul's rows `[.., N]` as
//!   `[.., N / d, d]` (a row epilogue, `fuse` rule 8) has a staged tensor-core tile with
//!   `bn` a multiple of `d`, no split-K, `d / 8` a power of two from 2 to 32 and its
//!   `bm · bn / 8` chunks a multiple of its threads.
//! - `schedule.update`: an update tile's `vector` divides the rows' last dim, and is 1 when
//!   the update writes along the last axis (the position offset breaks the vector's
//!   alignment there); 8 when the group computes its rows' reductions.
//! - `schedule.scan`: a scan tile's threads are whole warps and its `chunk` is the one the
//!   cumsum's order fixes for its row length (`graph::cumsum_chunk`).
//!
//! # Kernel IR ([`verify_kernel`])
//! - `kernel.name`: the name is a PTX identifier (`[a-zA-Z][a-zA-Z0-9_$]*` or
//!   `[_$%][a-zA-Z0-9_$]+`, PTX ISA §4.4).
//! - `kernel.geometry`: every block and grid dim ≥ 1; block x, y ≤ 1024, z ≤ 64 and
//!   threads per CTA in `1..=1024`; grid x < 2^31, y and z ≤ 65535; threads per CTA a
//!   multiple of 32 when the body has a `shfl.bfly`, `mma`, `ldmatrix`, `setmaxnreg` or a barrier
//!   (`barrier`, `bar.sync`, `bar.arrive`: whole warps, these need every lane of the warp;
//!   the executor checks at run time that none is inactive).
//! - `kernel.shared`: each shared buffer has a power-of-two alignment and a nonzero size;
//!   together ≤ 48 KiB (the static shared-memory limit).
//! - `kernel.reg`: every register used (destination, operand, address, loop variable,
//!   condition) is declared.
//! - `kernel.signature`: each op has its [`Op::signature`]'s operand count; each operand's
//!   type (register) or kind (immediate) matches, the destination's type matches the
//!   result's; an immediate keeps the signature's [`ArgRule`] (shifts by one below 32,
//!   `udiv`/`urem` never by 0).
//! - `kernel.param`: `param n` has `n` in range and a `u64` destination for a pointer,
//!   `u32` for a scalar.
//! - `kernel.shared_addr`: `shared_addr` names a declared shared buffer.
//! - `kernel.memory`: a load or store moves `width.regs()` registers; `b8`/`b16` move
//!   `u32`, other widths 32-bit values (`u32` or `f32`); the address is `u64` for global and
//!   `u32` for shared memory.
//! - `kernel.for`: the loop variable is `u32` and not assigned in the body; start, end and
//!   step are `u32`; a step is not the immediate 0.
//! - `kernel.if`: the condition is a `pred` register.
//! - `kernel.math`: no `math.*` op after `expand-math`.
//! - `kernel.mma`: an `mma` has four `f32` destinations and four `f32` accumulators,
//!   `shape.a_regs()` / `shape.b_regs()` `u32` registers of A and B.
//! - `kernel.ldmatrix`: 1, 2 or 4 `u32` destinations; a `u32` (shared) address.
//! - `kernel.bar`: a named barrier (`bar.sync`, `bar.arrive`) has an id in 1..=15 (0 is
//!   `barrier`'s) and counts a nonzero multiple of 32 threads, at most the CTA's.
//! - `kernel.cp_async`: the size is 4, 8 or 16 bytes for `ca`, 16 for `cg`; the destination
//!   address is `u32` (shared), the source `u64` (global); `src_bytes` is `u32`, and at most
//!   the size when immediate.
//! - `kernel.mbarrier`: an mbarrier statement's address is `u32` (shared); its arrival
//!   count is `u32`, in 1..=2^20 − 1 when immediate; an `expect_tx`'s byte count `u32`,
//!   at most 2^20 − 1 when immediate; a wait's parity `u32`, 0 or 1 when immediate.
//! - `kernel.tma`: a `tma.load` has `u32` (shared) destination and mbarrier addresses, a
//!   `u64` tensor-map address and 1 to 5 `u32` coordinates.
//! - `kernel.setmaxnreg`: the register count is a multiple of 8 in 24..=256 (and, being
//!   warp-wide, it counts for `kernel.geometry`'s whole warps).
//! - `kernel.griddep`: in a kernel with a `griddepcontrol.wait`, every path from the start
//!   of the body to a global memory access (a global load or store, `cp.async`, `tma.load`)
//!   passes one (a loop's body may run zero times, a branch counts only if both arms wait),
//!   but for a load through an address computed from a read-only pointer parameter alone
//!   (`kernel::griddep::read_only_addresses`); and every path through the body passes a
//!   wait (so every thread waits);
//!   a `prefetch.l2` has a `u64` address and a byte count that is a multiple of 16.
//!
//! # Programs ([`verify_program`])
//! - `program.kernel`: every kernel verifies (its errors are reported with the kernel's
//!   id); kernel names are unique.
//! - `program.launch`: a launch names an existing kernel and passes one argument per
//!   parameter: a buffer of the pointer's dtype for a pointer, a `u32` for a scalar, a
//!   tensor map for a tensor-map parameter, over an existing buffer of the map's dtype,
//!   that [`TensorMapDesc::check`] accepts (rank 1 to 5, strides multiples of 16 bytes,
//!   box dims 1..=256 with an inner extent a multiple of 16 bytes and within the
//!   swizzle's span, every addressable element inside the buffer).
//! - `program.io`: step input `i` is a buffer with role `input i` or `inout i`, and every
//!   such buffer is the step input of its index; step outputs are `output` or `inout`
//!   buffers, and every `inout` buffer is the step output named after its input (the
//!   caller gets back the buffer it gave, updated in place).
//! - `program.dataflow`: in launch order, every `temp` or `output` buffer a kernel reads
//!   (a read-only pointer or a tensor map) has been written (a writing pointer) by an
//!   earlier launch, and
//!   every `output` buffer is written by some launch.
//! - `program.griddep`: a parameter a kernel loads before its `griddepcontrol.wait` is
//!   bound, at every launch, to a step input that no launch writes.
//!
//! [`Graph::inputs`]: crate::graph::Graph::inputs
//! [`result_type`]: crate::builder::result_type
//! [`Op::signature`]: crate::kernel::Op::signature
//! [`ArgRule`]: crate::kernel::ArgRule
//! [`TensorMapDesc::check`]: crate::kernel::TensorMapDesc::check

mod graph;
mod kernel;
mod program;
mod schedule;

pub use graph::verify_graph;
pub use kernel::verify_kernel;
pub use program::verify_program;

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message} [{rule}]")]
pub struct VerifyError {
    /// The rule's name as listed in this module's documentation, e.g. `graph.binary`.
    pub rule: &'static str,
    /// Where, in words: `v7`, `group g1`, `kernel scale, body[3].for[0]`, `launch 2`.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// Collects errors; `Ok(())` when there are none.
#[derive(Default)]
pub(crate) struct Errors(Vec<VerifyError>);

impl Errors {
    pub fn push(
        &mut self,
        rule: &'static str,
        location: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(VerifyError {
            rule,
            location: location.into(),
            message: message.into(),
        });
    }

    pub fn finish(self) -> Result<(), Vec<VerifyError>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}
