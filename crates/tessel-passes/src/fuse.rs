//! `fuse`: partitions the graph into fusion groups, each of which becomes one kernel.
//!
//! Before: a decomposed graph (no composite ops; every reduction over the last axis).
//! After: a [`Fusion`] side table. A value is *materialised* (written to memory) if it is a
//! step input, a step output, or one of the values chosen below; every other value is
//! computed inside each kernel that needs it, from materialised values.
//!
//! Rules, in order:
//! 0. A matmul's operands are materialised — a transposed operand through its
//!    permute, so a `[N, K]` weight is read in place, and widening casts of 16-bit
//!    operands (`f32(x) @ f32(w)^T`, [`Graph::matmul_reads`]) through the cast, so the
//!    kernel reads `x` and `w` as they are, never an f32 copy; an operand that is a
//!    reshape of a tensor (the `[B·T, K]` view of batched activations `x [B, T, K]`) is
//!    read in that tensor's buffer, a [`Fusion::alias`], never a copy — and the matmul's
//!    kernel writes the tip of its epilogue: following single-use elementwise ops of the same shape whose
//!    other operands need no reduction or matmul (scale, bias, residual, activation, cast),
//!    through reshapes that keep its rows (`[B·T, N]` as `[B, T, N]`); a reshape at the
//!    end of the chain is left to its readers (it is the same bytes).
//!
//!    An [`Op::Attention`] is materialised and its kernel computes its logits' cone and
//!    their matmul (`q @ kᵀ`) itself: the tensors under the views of q, k and v are
//!    materialised instead of the matmul's operands, and no other rule materialises a
//!    value of those views. An [`Op::AttentionStat`] of the same logits and bound (a row's
//!    maximum, its sum) is another output of the group (`[.., M, 1]`): the kernel writes
//!    it too.
//! 1. Step outputs are materialised.
//! 2. An expensive value crossing a broadcast is materialised: if a [`Op::Broadcast`]
//!    multiplies the element count by 2 or more, and the value it broadcasts (looking through
//!    reshapes) would be computed with a math function (exp, log, sin, cos, pow, ...), that
//!    value gets its own kernel instead of being recomputed for every copy (RoPE's cos/sin
//!    table [T, 128] is computed once, not once per head). A broadcast along the last axis
//!    of a per-row reduction result is exempt: the row-reduction kernel computes such values
//!    once per row.
//! 3. A reduction whose result is used other than broadcast back along its own row (or as a
//!    step output) is materialised as the output of its own row-reduction kernel.
//! 4. Each materialised non-input value is the output of one group: a row-reduction group if
//!    the values it computes contain reductions, else an elementwise group. A row-reduction
//!    kernel computes each of its reductions once per row of the group, so a reduction is
//!    computed inside the group only if every path from the output reaches it at the
//!    group's own row — the walk in [`misplaced_reductions`] follows the index through
//!    every shape op symbolically; a permute, a slice at an offset, a broadcast or a
//!    reshape that moves the row makes it materialised instead. Legality follows which
//!    index reaches the reduction, never whether two sizes happen to be equal.
//! 5. An elementwise group joins an earlier elementwise group of the same shape when the two
//!    read a common materialised value and everything the later one reads is written before
//!    the earlier one runs: one kernel with several outputs, shared work computed once.
//! 6. An [`Op::Update`] is materialised as the one output of a group of its own kind,
//!    [`GroupKind::Update`], whose kernel iterates over the update's rows and stores them
//!    into the buffer of the tensor it updates (never copying it). The rows' and positions'
//!    cones are computed inside that kernel (RoPE of the new keys, a cast, a QK-norm); a
//!    reduction in them is materialised by its own kernel first, as a matmul already is
//!    by rule 0 — except in the rows' cone when each reduction runs over one row of the
//!    rows' head dim ([`rows_reduced_in_update`]: the QK-norm's sum of squares), which the
//!    kernel computes per row and the group lists as its reductions. A whole update
//!    (`update(p, value)`, AdamW's) iterates over the tensor and stores each element where
//!    it is; its value may read the tensor it overwrites, and whatever reads it at another
//!    element than its own ([`Graph::misaligned_reads`]: a reduction over it, a permute,
//!    a slice) is materialised first, so the kernel reads each element only before it
//!    writes it, in the same thread.
//!
//! Groups come in the order of the values they write, which is the graph's op order: the
//! graph puts every reader of the value an update overwrites before the update (verifier
//! rule `graph.update`), and a group computes only values that come no later than its
//! output, so every kernel reading the old contents runs before the update's kernel and
//! every kernel reading the updated tensor after it (rule `fusion.update`). Rule 5 only
//! moves a computation earlier, into a group that runs before it would have.
//!
//! 9. (Applied after rule 6.) An [`Op::Cumsum`] is the one output of a group of its own
//!    kind, [`GroupKind::Scan`] — or, when its only use is a cast (the rounding of a
//!    16-bit cumsum's f32 running sum), that cast is, and the cumsum lives only in the
//!    kernel. The operand's elementwise cone is computed inside; reductions in it are
//!    materialised by their own kernels first.
//! 7. The tensor an attention reads q through ([`q_prologue`]: RoPE and QK-norm of the
//!    query heads) is not materialised when the attention is its only reader, its cone
//!    has no matmul, its reductions run over its rows of the head dim and the view keeps
//!    those rows intact: the attention kernel computes it in its prologue, and the cone's
//!    reductions are the group's `q_prologue` ([`GroupOps::Attention`]).
//!
//! 10. (Applied with rule 0, before the others.) An attention backward written out by
//!     `grad` ([`crate::attention_bwd`]) becomes two kernels that recompute the scores
//!     block by block: [`GroupOps::AttentionDq`] writes the reductions of the score cones
//!     (softmax's maximum and sum, `rowsum(dP ∘ P)`, `[.., M, 1]`) and the products of
//!     query rows (`dQ`); [`GroupOps::AttentionDkv`] the products of key rows (`dV`,
//!     `dKᵀ`), reading those reductions. Their matmuls are left out of rule 0, the tensors
//!     under their operands' views are materialised, and the views never are (rule 2). In
//!     the `exact` profile, or where another rule would materialise a value inside the
//!     cones, the ops stay unfused.
//!
//! 11. (Applied last, before the groups are formed.) A step output that is a chain of
//!     reshapes and permutes of unit dims over a value another rule materialises (decode's
//!     `attn`, the attention's `[B, KV, G, 1, d]` heads as `[B, 1, H·d]`) is not
//!     materialised itself: it is a
//!     [`Fusion::alias`] of that value, whose kernel writes the output's buffer — no copy
//!     kernel. Not over a step input, an update or another step output, and one output per
//!     buffer.
//!
//! Gathers ([`Op::Gather`]: `emb[ids]`, `take_along_axis`) need no rule of their own: a
//! gather is computed inside the kernel that reads it, as a load at a computed address —
//! its index at the reader's own index, its operand at the gathered position — so the
//! rows are never copied first, and an elementwise cone of the table is computed at the
//! gathered elements only. Rule 4's walk reaches the operand at a position known only at
//! run time ([`Ix::Other`] along the axis): a reduction under it is materialised by its
//! own kernel, and so is a matmul (rule 0 stops its epilogue at the gather, which reads
//! the product at other rows than its own).
//!
//! It does not choose tiles (`schedule` does) and never changes arithmetic.

use crate::analysis::{row_shape, users};
use crate::target::{Profile, Target};
use crate::view::{view_base, view_chain};
use cranelift_entity::{EntitySet, SecondaryMap};
use tessel_ir::graph::{Fusion, Graph, GroupData, GroupKind, GroupOps, MatmulLayout, Op};
use tessel_ir::{DType, Value};

/// Runs the pass for `target` and `profile`, which rule 8 asks the matmul schedule about.
pub fn run(g: &Graph, target: &Target, profile: Profile) -> Fusion {
    let plans = if profile == Profile::Exact || target.compute_capability < (8, 0) {
        vec![]
    } else {
        crate::attention_bwd::plans(g)
    };
    run_with(g, target, profile, plans)
}

/// [`run`] with the attention backward `plans` of rule 10; a plan another rule breaks (a
/// value inside its cones materialised) is dropped and the partition made again.
fn run_with(
    g: &Graph,
    target: &Target,
    profile: Profile,
    plans: Vec<crate::attention_bwd::Plan>,
) -> Fusion {
    let mut mat: EntitySet<Value> = EntitySet::new();
    for (_, v) in &g.outputs {
        mat.insert(*v);
    }
    let users = users(g);

    // Rule 0, attention: the attention's own matmul reads q, k and v in place.
    let mut claimed: EntitySet<Value> = EntitySet::new();
    let mut attn_views: EntitySet<Value> = EntitySet::new();
    for (v, op) in g.ops.iter() {
        if let Op::AttentionStat { .. } = op {
            mat.insert(v);
        }
        if let Op::Attention { logits, v: vv, .. } = op {
            mat.insert(v);
            let Some((s, _)) = crate::analysis::logits_matmul(g, *logits) else {
                continue;
            };
            claimed.insert(s);
            let Op::MatMul { lhs, rhs } = g.ops[s] else {
                continue;
            };
            for x in [lhs, rhs, *vv] {
                for w in view_chain(g, x) {
                    attn_views.insert(w);
                }
                mat.insert(view_base(g, x));
            }
        }
    }

    // Rule 10: the attention backward's matmuls are its kernels'; their operands are read
    // in place, their products and reductions written.
    for plan in &plans {
        for m in plan.matmuls() {
            claimed.insert(m);
        }
        for &w in &plan.views {
            attn_views.insert(w);
        }
        for &b in &plan.bases {
            mat.insert(b);
        }
        let (dq, dkv) = plan.outputs();
        for v in dq.into_iter().chain(dkv) {
            mat.insert(v);
        }
    }

    // Rule 0: a matmul reads materialised operands (a transposed operand is read through
    // its permute, so a weight stored [N, K] is used in place; 16-bit operands under
    // widening casts through the cast) and writes the tip of its epilogue: the chain of
    // single-use elementwise ops of its own shape that follow it, whose other operands
    // need no reduction or matmul (scale, bias, residual, activation, cast fold into the
    // GEMM's store).
    let mut tips: Vec<(Value, Value)> = Vec::new();
    let mut aliases: Vec<(Value, Value)> = Vec::new();
    let reshaped_outputs: std::collections::HashMap<Value, Value> = g
        .outputs
        .iter()
        .map(|&(_, o)| (reshape_base(g, o, &EntitySet::new()), o))
        .filter(|&(b, o)| b != o && !mat.contains(b) && !matches!(g.ops[b], Op::Input { .. }))
        .collect();
    for (v, op) in g.ops.iter() {
        if let Op::MatMul { .. } = op {
            if claimed.contains(v) {
                continue;
            }
            for read in g.matmul_reads(v).expect("a matmul") {
                // A reshape of a tensor (`x [B, T, K]` read as `[B·T, K]`) is read in the
                // tensor's buffer: an alias, no copy (`Fusion::alias`). Where a step output
                // is another reshape of the same tensor (the attention's heads as `[T, H·d]`,
                // read by o_proj as `[B·T, H·d]`), the output's buffer is read, so the
                // tensor under both is not written as well — where the output comes before
                // the GEMM, so that its kernel has run (an output reshaped from the GEMM's
                // own operand comes after it: fuzz seed 580147), and where the GEMM's read
                // is no value the output's kernel computes it from (its reshape chain: the
                // kernel would read its own output, fuzz seed 602693).
                let mut base = reshape_base(g, read.stored, &mat);
                if let Some(&o) = reshaped_outputs.get(&base) {
                    let mut on_chain = o == read.stored;
                    let mut x = o;
                    while let Op::Reshape { arg } = g.ops[x] {
                        on_chain |= arg == read.stored;
                        x = arg;
                    }
                    if o < v && !on_chain {
                        base = o;
                    }
                }
                if base != read.stored {
                    aliases.push((read.stored, base));
                }
                if !matches!(g.ops[base], Op::Input { .. }) {
                    mat.insert(base);
                }
            }
            let mut tip = v;
            while let [u] = users[tip][..] {
                // A reshape that keeps the rows (`[B·T, N]` as `[B, T, N]`) is the same
                // elements in the same order: the epilogue goes on past it. Kept rows are
                // the verifier's `fusion.outputs` layout, which a scalar is not (`Shape::last`
                // calls it 1, so a `[1, 1]` product's `[]` view once passed as `[.., 1]`).
                let same_rows = matches!(g.ops[u], Op::Reshape { .. })
                    && g.matmul_layout(v, u) == Some(MatmulLayout::Rows);
                if same_rows && !mat.contains(tip) {
                    tip = u;
                    continue;
                }
                let elementwise = matches!(
                    g.ops[u],
                    Op::Unary { .. } | Op::Binary { .. } | Op::Cast { .. } | Op::Select { .. }
                );
                let others_plain = g.ops[u]
                    .args()
                    .iter()
                    .filter(|&&a| a != tip)
                    .all(|&a| !needs_contraction(g, a, &mat));
                if !elementwise
                    || g.ty(u).shape != g.ty(tip).shape
                    || !others_plain
                    || mat.contains(tip)
                {
                    break;
                }
                tip = u;
            }
            // The epilogue ends where its elementwise ops do: a reshape after them (the next
            // GEMM's `[B·T, N]` view of them) is read in place, not written as a copy; and
            // a widening cast of a 16-bit tip to f32 (`f32(x @ wᵀ)`, tessel.lora's base
            // product) is left to its readers, which widen each element exactly as they
            // load it: the tip is stored in its 16 bits, half the bytes — unless a matmul
            // reads the f32 value (it would be materialised for it after all).
            loop {
                match g.ops[tip] {
                    Op::Reshape { arg } if !mat.contains(tip) => tip = arg,
                    Op::Cast { arg }
                        if tip != v
                            && !mat.contains(tip)
                            && g.ty(tip).dtype == DType::F32
                            && matches!(g.ty(arg).dtype, DType::Bf16 | DType::F16)
                            && users[tip]
                                .iter()
                                .all(|&u| !matches!(g.ops[u], Op::MatMul { .. })) =>
                    {
                        tip = arg
                    }
                    _ => break,
                }
            }
            mat.insert(tip);
            tips.push((v, tip));
        }
    }

    // Rule 3: reductions used other than broadcast along their own row.
    for (v, op) in g.ops.iter() {
        if let Op::Reduce { .. } = op {
            let only_row_broadcasts = users[v].iter().all(|&u| is_row_use(g, v, u, &users));
            if !only_row_broadcasts {
                mat.insert(v);
            }
        }
    }

    // Rule 2: expensive values crossing an expanding broadcast.
    for (v, op) in g.ops.iter() {
        if let Op::Broadcast { arg } = op {
            let from = g.ty(*arg).shape.numel();
            let to = g.ty(v).shape.numel();
            if to < 2 * from.max(1) || is_row_broadcast(g, *arg, v) {
                continue;
            }
            let mut src = *arg;
            while let Op::Reshape { arg } = g.ops[src] {
                src = arg;
            }
            if !matches!(g.ops[src], Op::Input { .. })
                && !attn_views.contains(src)
                && uses_math(g, src, &mat)
            {
                mat.insert(src);
            }
        }
    }

    // Rule 6: an update is written by its own kernel over its rows, which computes the rows'
    // and the positions' cones itself; the reductions in them get their own kernels, unless
    // each runs over one row of the rows' head dim (decode's QK-norm of the new keys).
    // A whole update's kernel writes each element where it reads it: whatever reads the
    // tensor at another element (a reduction over it, a permute, a slice...) is computed
    // by an earlier kernel.
    for (v, op) in g.ops.iter() {
        if let Op::Update { dst, rows, at } = op {
            mat.insert(v);
            if at.is_none() {
                for x in g.misaligned_reads(*rows, *dst, |x| mat.contains(x)) {
                    mat.insert(x);
                }
            }
            for x in op.update_sources() {
                let in_kernel = x == *rows && rows_reduced_in_update(g, v, &mat);
                if !mat.contains(x) && !in_kernel {
                    for r in cone_reductions(g, x, &mat) {
                        mat.insert(r);
                    }
                }
            }
        }
    }

    // Rule 9: a cumsum is a scan kernel of its own, writing the cumsum or the cast that
    // rounds it; its operand's cone is computed inside, except its reductions.
    let mut scans: std::collections::HashMap<Value, Value> = Default::default();
    for (v, op) in g.ops.iter() {
        if let Op::Cumsum { arg, .. } = op {
            let tip = match users[v][..] {
                [u] if !mat.contains(v) && matches!(g.ops[u], Op::Cast { .. }) => u,
                _ => v,
            };
            mat.insert(tip);
            if !mat.contains(*arg) {
                for r in cone_reductions(g, *arg, &mat) {
                    mat.insert(r);
                }
            }
            scans.insert(tip, v);
        }
    }

    // Rule 4 needs every reduction of a group to run over the group's own rows: the
    // kernel computes one value per row of each reduction, so a reduction reached at any
    // other row (through a permute, a slice, a broadcast...) or over rows of another shape
    // is materialised by its own kernel.
    loop {
        let mut more = Vec::new();
        for (v, op) in g.ops.iter() {
            if !mat.contains(v) || matches!(op, Op::Input { .. }) {
                continue;
            }
            more.extend(misplaced_reductions(g, v, &mat));
        }
        if more.is_empty() {
            break;
        }
        for r in more {
            mat.insert(r);
        }
    }

    // Rule 7: q's producer computed in the attention's prologue.
    let mut prologue: std::collections::HashMap<Value, Value> = Default::default();
    for (v, op) in g.ops.iter() {
        if let Op::Attention { .. } = op {
            if let Some(qb) = q_prologue(g, v, &mat, &users) {
                mat.remove(qb);
                prologue.insert(v, qb);
            }
        }
    }

    // Rule 8: a projection's heads normalised and rotated in its GEMM's epilogue.
    let mut row_epilogue: std::collections::HashMap<Value, Value> = Default::default();
    for &(mm, tip) in &tips {
        if let Some(o) = row_epilogue_of(g, (mm, tip), &mat, &users, (target, profile)) {
            mat.remove(tip);
            row_epilogue.insert(o, mm);
        }
    }

    // Rule 10's cones stay inside their kernels: a plan another rule cut is dropped — and
    // so is one whose cones read a value another kernel materialises after the plan's
    // first kernel runs (at its first output): a cumsum of the probabilities, written by
    // its scan kernel (rule 9) later in the step (fuzz seed 530071,
    // tests/programs/regressions/fuzz_530071_panic.tsl).
    let reads_later = |p: &crate::attention_bwd::Plan| {
        let (dq, dkv) = p.outputs();
        let mut stack: Vec<Value> = dq
            .iter()
            .chain(&dkv)
            .flat_map(|&o| g.ops[o].args().to_vec())
            .collect();
        let mut seen: EntitySet<Value> = EntitySet::new();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) || dq.contains(&x) || dkv.contains(&x) {
                continue;
            }
            if mat.contains(x) {
                if x > dq[0] {
                    return true;
                }
                continue;
            }
            stack.extend(g.ops[x].args());
        }
        false
    };
    if let Some(i) = plans
        .iter()
        .position(|p| p.inside.iter().any(|&x| mat.contains(x)) || reads_later(p))
    {
        let mut rest = plans;
        rest.remove(i);
        return run_with(g, target, profile, rest);
    }

    // Rule 11: a step output that is a chain of reshapes over a value another rule
    // materialises is that value's buffer, not a copy of it.
    let output_aliases = output_aliases(g, &mat);
    for &(o, _) in &output_aliases {
        mat.remove(o);
    }

    let mut groups: Vec<GroupData> = Vec::new();
    for (v, op) in g.ops.iter() {
        if !mat.contains(v) || matches!(op, Op::Input { .. }) {
            continue;
        }
        // Rule 10: a backward kernel is placed at its first output and writes them all.
        if let Some((ops, outputs)) = backward_group(&plans, v) {
            if outputs[0] == v {
                groups.push(GroupData { ops, outputs });
            }
            continue;
        }
        // An attention's logsumexp is its group's second output: the kernel forms it in
        // its loop.
        if let Op::AttentionStat { logits, bound, .. } = *op {
            let own = groups.iter_mut().find(|gd| {
                matches!(gd.ops, GroupOps::Attention { attention, .. }
                    if matches!(g.ops[attention], Op::Attention { logits: l, bound: b, .. } if l == logits && b == bound))
            });
            if let Some(gd) = own {
                gd.outputs.push(v);
                continue;
            }
        }
        let matmuls = cone_matmuls(g, v, &mat);
        let ops = if let Some(&cumsum) = scans.get(&v) {
            GroupOps::Scan { cumsum }
        } else if let Op::Update { rows, .. } = op {
            let row_reductions = if mat.contains(*rows) {
                vec![]
            } else {
                cone_reductions(g, *rows, &mat)
            };
            GroupOps::Update { row_reductions }
        } else if let Some((scores, _)) = match op {
            Op::Attention { logits, .. } => crate::analysis::logits_matmul(g, *logits),
            _ => None,
        } {
            let q_prologue = prologue
                .get(&v)
                .map(|&qb| cone_reductions(g, qb, &mat))
                .unwrap_or_default();
            GroupOps::Attention {
                scores,
                attention: v,
                q_prologue,
            }
        } else if let Some(&matmul) = matmuls.first() {
            // One: rule 0 ends an epilogue where another operand needs a contraction.
            let row_epilogue = if row_epilogue.contains_key(&v) {
                cone_reductions(g, v, &mat)
            } else {
                vec![]
            };
            GroupOps::Matmul {
                matmul,
                row_epilogue,
            }
        } else {
            let reductions = cone_reductions(g, v, &mat);
            if reductions.is_empty() {
                GroupOps::Elementwise
            } else {
                GroupOps::RowReduction { reductions }
            }
        };
        let kind = ops.kind();
        // Rule 5: an elementwise kernel of the same shape that reads a value this one reads,
        // and only values written before the earlier kernel runs, joins it (RoPE's cos and
        // sin tables: one launch, the angles computed once).
        let leaves = cone_leaves(g, v, &mat);
        if kind == GroupKind::Elementwise {
            let host = groups.iter().position(|gd| {
                gd.kind() == GroupKind::Elementwise && g.ty(gd.outputs[0]).shape == g.ty(v).shape
            });
            if let Some(h) = host {
                let host_leaves: Vec<Value> = groups[h]
                    .outputs
                    .iter()
                    .flat_map(|&o| cone_leaves(g, o, &mat))
                    .collect();
                let written_before = |x: &Value| {
                    matches!(g.ops[*x], Op::Input { .. })
                        || groups[..h].iter().any(|gd| gd.outputs.contains(x))
                };
                if leaves.iter().any(|l| host_leaves.contains(l))
                    && leaves.iter().all(written_before)
                {
                    groups[h].outputs.push(v);
                    continue;
                }
            }
        }
        groups.push(GroupData {
            ops,
            outputs: vec![v],
        });
    }
    let mut fusion = Fusion::default();
    for gd in groups {
        fusion.new_group(gd);
    }
    // A GEMM operand that is a reshape of a tensor is read in that tensor's buffer, unless
    // something materialised it anyway (a step output has a buffer of its own). A read
    // redirected to a step output that rule 11 made an alias reads the output's base.
    for (v, mut base) in aliases {
        if let Some(&(_, b)) = output_aliases.iter().find(|&&(o, _)| o == base) {
            base = b;
        }
        if !mat.contains(v) && v != base {
            fusion.alias[v] = base.into();
        }
    }
    for (o, base) in output_aliases {
        fusion.alias[o] = base.into();
    }
    fusion
}

/// Rule 11: the step outputs that are chains of reshapes (and permutes of unit dims,
/// [`Graph::same_bytes_arg`]) over a value materialised for another reason, each with that
/// value: decode's `attn = reshape(permute(heads), [B, 1, H·d])` over the attention's
/// `[B, KV, G, 1, d]` heads (the same bytes in the same order), which the
/// attention kernel then writes into the output's buffer instead of a kernel copying it
/// there. Not where the value is a step input or an update (their buffers are the
/// inputs'), is itself a step output, is under another such output already (one buffer
/// holds one output), or where a value between the two is materialised (that reshape has
/// a buffer of its own).
fn output_aliases(g: &Graph, mat: &EntitySet<Value>) -> Vec<(Value, Value)> {
    let mut found: Vec<(Value, Value)> = Vec::new();
    for &(_, o) in &g.outputs {
        let Some(mut base) = g.same_bytes_arg(o) else {
            continue;
        };
        while let (Some(arg), false) = (g.same_bytes_arg(base), mat.contains(base)) {
            base = arg;
        }
        let taken = g.is_output(base) || found.iter().any(|&(x, b)| b == base || x == o);
        if mat.contains(base)
            && !taken
            && !matches!(g.ops[base], Op::Input { .. } | Op::Update { .. })
        {
            found.push((o, base));
        }
    }
    found
}

/// The attention backward group (rule 10) that writes `v`, with its outputs in op order.
fn backward_group(
    plans: &[crate::attention_bwd::Plan],
    v: Value,
) -> Option<(GroupOps, Vec<Value>)> {
    for p in plans {
        let (dq, dkv) = p.outputs();
        if dq.contains(&v) {
            let (scores, products, reductions) = p.dq.clone();
            return Some((
                GroupOps::AttentionDq {
                    scores,
                    products,
                    reductions,
                },
                dq,
            ));
        }
        if let (true, Some((scores, products))) = (dkv.contains(&v), &p.dkv) {
            return Some((
                GroupOps::AttentionDkv {
                    scores: scores.clone(),
                    products: products.clone(),
                },
                dkv,
            ));
        }
    }
    None
}

/// The value under the chain of reshapes ending at `x` (`x` itself if it is no reshape),
/// or the first value of the chain, from `x` down, that `mat` holds.
fn reshape_base(g: &Graph, x: Value, mat: &EntitySet<Value>) -> Value {
    let mut v = x;
    while let (Op::Reshape { arg }, false) = (&g.ops[v], mat.contains(v)) {
        v = *arg;
    }
    v
}

/// Rule 7: the tensor under the view that attention `a` reads q through, when the
/// attention kernel can compute it in its prologue instead of reading it from memory —
/// Qwen3's QK-norm and RoPE of q (`rope(rms_norm(q))`), or RoPE alone. Each CTA computes
/// its own query rows: per row of the head dim `d`, `d / 8` consecutive threads hold 8
/// elements each and form the row's reductions by butterfly shuffles (as a row-reduction
/// kernel of `d / 8` threads per row, vector 8, would), then the values, into the shared
/// tile the fragments are loaded from. So the tensor must:
/// - be read only by that view chain, no value of which is a step output (no other
///   reader: it is never written to memory);
/// - need no matmul in its cone (the projection is materialised by rule 0, and its
///   epilogue is where a bias lands) and have every reduction of its cone over its own
///   rows (rule 4 already made sure of that while it was materialised);
/// - have rows of the head dim, `d / 8` a power of two from 2 to 32 (a sub-warp or a warp
///   per row), and appear in the view with rows intact: the last axis contiguous, every
///   other stride and the offset multiples of `d`.
fn q_prologue(
    g: &Graph,
    a: Value,
    mat: &EntitySet<Value>,
    users: &SecondaryMap<Value, Vec<Value>>,
) -> Option<Value> {
    let Op::Attention { logits, .. } = g.ops[a] else {
        return None;
    };
    let (s, _) = crate::analysis::logits_matmul(g, logits)?;
    let Op::MatMul { lhs, .. } = g.ops[s] else {
        return None;
    };
    let qb = view_base(g, lhs);
    let mut chain = view_chain(g, lhs);
    // No value from the base up to the matmul is a step output (which is written to
    // memory, so the kernel would read it: fuzz seed 20428, q's reshape returned).
    if matches!(g.ops[qb], Op::Input { .. })
        || g.is_output(qb)
        || chain.iter().any(|&v| g.is_output(v))
    {
        return None;
    }
    // Each value from the base up to the matmul has exactly one reader, the next.
    chain.reverse();
    let mut x = qb;
    for next in chain.into_iter().chain([s]) {
        if users[x][..] != [next] {
            return None;
        }
        x = next;
    }
    let d = g.ty(qb).shape.last();
    let chunks = d / 8;
    if d % 8 != 0 || !chunks.is_power_of_two() || !(2..=32).contains(&chunks) {
        return None;
    }
    let view = crate::view::strided(g, lhs)?;
    let r = view.shape.len();
    let rows_intact = view.strides[r - 1] == 1
        && view.shape[r - 1] == d
        && view.offset % d == 0
        && view.strides[..r - 1].iter().all(|st| st % d == 0);
    let plain_cone = cone_matmuls(g, qb, mat).is_empty()
        && misplaced_reductions(g, qb, mat).is_empty()
        && !matches!(g.ops[qb], Op::Reduce { .. });
    (rows_intact && plain_cone).then_some(qb)
}

/// Rule 8: the group output that the GEMM of `mm` (writing `tip`, its epilogue's tip by
/// rule 0) can compute in its epilogue instead of writing `tip` — Qwen3's QK-norm and RoPE
/// of the k (or q) projection's heads, `rope(rms_norm(reshape(x @ wᵀ, [T, H, d])))`. The
/// staged epilogue holds the CTA's tile of accumulators in shared memory; per row of the
/// head dim `d`, `d / 8` consecutive threads take 8 columns each, form the row's
/// reductions by butterfly shuffles (a row-reduction kernel's order at `d / 8` threads per
/// row, vector 8, as rule 7's prologue) and store the output's values. So:
/// - `tip` is read only by one reshape `r` that splits its last axis into rows of `d`
///   (`[.., N] → [.., N / d, d]`), `d / 8` a power of two from 2 to 32, and is no step
///   output;
/// - `r` is read inside the cone of exactly one materialised value `o` (no other kernel
///   needs `tip`), which has `r`'s shape, no matmul, attention or update in its cone, and
///   reaches `r` only at its own row (any column of it: a rotate-half reads the row's
///   other half) — the walk of [`misplaced_reductions`];
/// - the matmul's schedule has a tile for it ([`crate::schedule::row_epilogue_tile`]: a
///   staged tensor-core tile whose column tiles hold whole rows, no split-K);
/// - in the `invariant` profile, `o` is 16-bit: the row kernel that computes it where the
///   GEMM has no such tile (decode's M) then has the epilogue's order, so a row's bits do
///   not depend on M.
///
/// Returns `o`.
fn row_epilogue_of(
    g: &Graph,
    (mm, tip): (Value, Value),
    mat: &EntitySet<Value>,
    users: &SecondaryMap<Value, Vec<Value>>,
    (target, profile): (&Target, Profile),
) -> Option<Value> {
    if g.is_output(tip) {
        return None;
    }
    let [r] = users[tip][..] else {
        return None;
    };
    let (ts, rs) = (&g.ty(tip).shape.0, &g.ty(r).shape.0);
    let d = *rs.last()?;
    // d < N: a reshape to `[.., 1, N]` keeps the rows as they are (rule 0 goes on past it).
    let split_last = matches!(g.ops[r], Op::Reshape { .. })
        && !mat.contains(r)
        && d < ts[ts.len() - 1]
        && rs.len() == ts.len() + 1
        && rs[..ts.len() - 1] == ts[..ts.len() - 1]
        && rs[ts.len() - 1] * d == ts[ts.len() - 1];
    let chunks = d / 8;
    if !split_last || d % 8 != 0 || !chunks.is_power_of_two() || !(2..=32).contains(&chunks) {
        return None;
    }
    let readers: Vec<Value> = mat
        .iter()
        .filter(|&o| o != tip && !matches!(g.ops[o], Op::Input { .. }))
        .filter(|&o| cone_reaches(g, o, r, mat))
        .collect();
    let [o] = readers[..] else {
        return None;
    };
    let plain = g.ty(o).shape.0 == *rs
        && !matches!(
            g.ops[o],
            Op::Attention { .. } | Op::Update { .. } | Op::Reduce { .. }
        )
        && cone_matmuls(g, o, mat).is_empty()
        && reached_at_own_row(g, o, r, mat);
    let fits = crate::schedule::row_epilogue_tile(g, mm, d, target, profile).is_some();
    // The invariant profile's promise: a row's bits do not depend on M, and at decode's M
    // (no row epilogue) a row kernel computes the rows. Its order is the epilogue's (d / 8
    // threads per row, vector 8) only for 16-bit outputs; an f32 output takes vector 4.
    let same_order = profile != Profile::Invariant || g.ty(o).dtype.size_bytes() <= 2;
    (plain && fits && same_order).then_some(o)
}

/// Rule 6's exception: the kernel of update `u` computes the reductions in its rows' cone
/// itself when the rows suit a kernel that puts a row of `d` on `d / 8` consecutive lanes
/// of 8 elements each (`lower::update`: 16-bit rows, `d / 8` a power of two from 2 to 32,
/// not written along their last axis) and every reduction is reached, on every path, at a
/// row index that does not depend on the position along the rows' row, over a row of `d`
/// ([`column_free_reductions`]). Each lane then folds its own 8 columns of the reduced
/// row and the row's lanes combine by butterflies: a row-reduction kernel's order at
/// `d / 8` threads per row, vector 8.
fn rows_reduced_in_update(g: &Graph, u: Value, mat: &EntitySet<Value>) -> bool {
    let Op::Update {
        rows,
        at: Some(tessel_ir::graph::UpdateAt { axis, .. }),
        ..
    } = g.ops[u]
    else {
        return false;
    };
    let t = g.ty(rows);
    let d = t.shape.last();
    let chunks = d / 8;
    matches!(t.dtype, tessel_ir::DType::Bf16 | tessel_ir::DType::F16)
        && axis as usize + 1 != t.shape.rank()
        && d % 8 == 0
        && chunks.is_power_of_two()
        && (2..=32).contains(&chunks)
        && !cone_reductions(g, rows, mat).is_empty()
        && column_free_reductions(g, rows, mat)
}

/// Whether an index component may depend on the column (the position along the row) of
/// the group's iteration, in [`column_free_reductions`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Dep {
    /// A function of the group's row alone (or a constant).
    Row,
    /// Possibly a function of the column.
    Col,
}

/// True if every reduction computed in the kernel writing `out` (stopping at materialised
/// values) is reached, on every path, at an index whose leading dims do not depend on the
/// column of `out`'s rows, and reduces a row as long as `out`'s: then the lanes holding one
/// row of `out` all reach the same row of the reduction, and lane j can fold that row's
/// chunk j. A reshape's operand dim depends on the result dims whose places in the flat
/// index overlap its own (`reshape_deps`); a broadcast dim is 0; inside a reduction, its
/// argument's last dim is the column again.
fn column_free_reductions(g: &Graph, out: Value, mat: &EntitySet<Value>) -> bool {
    let shape = &g.ty(out).shape.0;
    let d = *shape.last().unwrap_or(&1);
    let row = |rank: usize| -> Vec<Dep> {
        (0..rank)
            .map(|i| if i + 1 == rank { Dep::Col } else { Dep::Row })
            .collect()
    };
    let mut seen: std::collections::HashSet<(Value, Vec<Dep>)> = Default::default();
    let mut stack = vec![(out, row(shape.len()))];
    while let Some((x, idx)) = stack.pop() {
        if (x != out && mat.contains(x)) || !seen.insert((x, idx.clone())) {
            continue;
        }
        let op = &g.ops[x];
        match op {
            Op::Input { .. }
            | Op::Const { .. }
            | Op::Iota { .. }
            | Op::MatMul { .. }
            | Op::Attention { .. }
            | Op::AttentionStat { .. }
            | Op::TopK { .. }
            | Op::Cumsum { .. }
            | Op::Update { .. }
            | Op::Grad { .. } => {}
            Op::Unary { .. }
            | Op::Binary { .. }
            | Op::Cast { .. }
            | Op::Select { .. }
            | Op::Slice { .. }
            | Op::Concat { .. } => {
                for a in op.args() {
                    stack.push((a, idx.clone()));
                }
            }
            Op::Broadcast { arg } => {
                let sa = &g.ty(*arg).shape.0;
                let ai = idx
                    .iter()
                    .zip(sa)
                    .map(|(&i, &n)| if n == 1 { Dep::Row } else { i })
                    .collect();
                stack.push((*arg, ai));
            }
            Op::Reshape { arg } => {
                let (sr, sa) = (&g.ty(x).shape.0, &g.ty(*arg).shape.0);
                stack.push((*arg, reshape_deps(&idx, sr, sa)));
            }
            // The index is read at the group's own index; the operand at a position read at
            // run time along the axis, which may be anything: the column, say.
            Op::Gather { arg, index, axis } => {
                stack.push((*index, idx.clone()));
                let mut ai = idx.clone();
                ai[*axis as usize] = Dep::Col;
                stack.push((*arg, ai));
            }
            Op::Permute { arg, perm } => {
                let mut ai = vec![Dep::Col; idx.len()];
                for (i, &p) in perm.iter().enumerate() {
                    ai[p as usize] = idx[i];
                }
                stack.push((*arg, ai));
            }
            Op::Reduce { arg, .. } => {
                let lead_free = idx[..idx.len().saturating_sub(1)]
                    .iter()
                    .all(|&i| i == Dep::Row);
                let sa = &g.ty(*arg).shape.0;
                if !lead_free || sa.last() != Some(&d) {
                    return false;
                }
                stack.push((*arg, row(sa.len())));
            }
            Op::Softmax { .. } => return false,
        }
    }
    true
}

/// The column dependence of a reshape's operand (shape `sa`) from its result's (shape
/// `sr`): operand dim j depends on result dim i when their places in the flat row-major
/// index overlap — dim k of a shape covers the strides from `stride_k` up to (not
/// including) `stride_k · size_k`; a dim of size 1 covers none and is always 0.
fn reshape_deps(idx: &[Dep], sr: &[u64], sa: &[u64]) -> Vec<Dep> {
    let spans = |s: &[u64]| -> Vec<(u64, u64)> {
        let mut out = vec![(0, 0); s.len()];
        let mut stride = 1u64;
        for k in (0..s.len()).rev() {
            out[k] = (stride, stride.saturating_mul(s[k]));
            stride = stride.saturating_mul(s[k]);
        }
        out
    };
    let (r, a) = (spans(sr), spans(sa));
    a.iter()
        .map(|&(lo, hi)| {
            let col = r
                .iter()
                .zip(idx)
                .any(|(&(rlo, rhi), &dep)| dep == Dep::Col && lo < rhi && rlo < hi);
            if col && lo < hi {
                Dep::Col
            } else {
                Dep::Row
            }
        })
        .collect()
}

/// True if the kernel computing `out` (stopping at materialised values) computes `x`.
fn cone_reaches(g: &Graph, out: Value, x: Value, mat: &EntitySet<Value>) -> bool {
    let mut stack = vec![out];
    let mut seen: EntitySet<Value> = EntitySet::new();
    while let Some(y) = stack.pop() {
        if y == x {
            return true;
        }
        if !seen.insert(y) || (y != out && mat.contains(y)) {
            continue;
        }
        stack.extend(g.ops[y].args());
    }
    false
}

/// True if no reduction in the group writing `out` is misplaced and every path from `out`
/// reaches `x` (of `out`'s shape) at the group's own row, whatever the column: one
/// symbolic walk, [`misplaced_reductions`]'.
fn reached_at_own_row(g: &Graph, out: Value, x: Value, mat: &EntitySet<Value>) -> bool {
    let rows = row_shape(g, out);
    let lead = rows.rank().saturating_sub(1);
    let own = |i: usize, c: Ix| c == Ix::Row(i as u32) || (rows.0[i] == 1 && c == Ix::Zero);
    let (reached, misplaced) = walk_rows(g, out, mat);
    misplaced.is_empty()
        && reached
            .into_iter()
            .all(|(y, idx)| y != x || (idx.len() == lead + 1 && (0..lead).all(|i| own(i, idx[i]))))
}

/// One component of a symbolic index in [`misplaced_reductions`]: which index of the group's
/// iteration lands in a dim.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Ix {
    /// The group's row index along lead dim `i` of its rows shape.
    Row(u32),
    /// The position along the row (the last dim).
    Col,
    /// A constant 0 (a broadcast dim).
    Zero,
    /// Anything else (an offset, a mix of dims through a reshape).
    Other,
}

/// The reductions inside the group writing `out` that the group cannot compute: those
/// reached, on some path from `out`, at an index other than the group's own row, or whose
/// rows have another shape than the group's. The walk maps the group's index through each
/// op exactly as `lower` does, but symbolically.
fn misplaced_reductions(g: &Graph, out: Value, mat: &EntitySet<Value>) -> Vec<Value> {
    walk_rows(g, out, mat).1
}

/// The walk of [`misplaced_reductions`]: every value computed in the group writing `out`
/// with each symbolic index it is reached at (the row index of a row dim of size 1 shown
/// as [`Ix::Zero`]: it is 0), and the misplaced reductions (not walked into).
fn walk_rows(g: &Graph, out: Value, mat: &EntitySet<Value>) -> (Vec<(Value, Vec<Ix>)>, Vec<Value>) {
    let rows = row_shape(g, out);
    let rank = rows.rank();
    let row_index = |last: Ix| -> Vec<Ix> {
        (0..rank.saturating_sub(1) as u32)
            .map(Ix::Row)
            .chain((rank > 0).then_some(last))
            .collect()
    };
    let mut bad = Vec::new();
    let mut seen: std::collections::HashSet<(Value, Vec<Ix>)> = Default::default();
    let mut stack: Vec<(Value, Vec<Ix>)> = Vec::new();
    match g.ops[out] {
        // A materialised reduction: the group computes it over its rows.
        Op::Reduce { arg, .. } => stack.push((arg, row_index(Ix::Col))),
        _ => stack.push((out, row_index(Ix::Col))),
    }
    // A row dim of size 1 has one index: reaching it as the row's own index or as a
    // broadcast's 0 is the same row (at T = 1 a [1, 1] -> [1, D] broadcast pins the row to
    // 0; the group must not change with T).
    let one = |i: Vec<Ix>| -> Vec<Ix> {
        i.into_iter()
            .map(|x| match x {
                Ix::Row(r) if rows.0[r as usize] == 1 => Ix::Zero,
                x => x,
            })
            .collect()
    };
    while let Some((x, idx)) = stack.pop() {
        if (x != out && mat.contains(x)) || !seen.insert((x, idx.clone())) {
            continue;
        }
        let op = &g.ops[x];
        match op {
            Op::Input { .. }
            | Op::Const { .. }
            | Op::Iota { .. }
            | Op::MatMul { .. }
            | Op::Attention { .. }
            | Op::AttentionStat { .. }
            | Op::TopK { .. }
            | Op::Cumsum { .. }
            | Op::Update { .. }
            | Op::Grad { .. } => {}
            Op::Unary { .. } | Op::Binary { .. } | Op::Cast { .. } | Op::Select { .. } => {
                for a in op.args() {
                    stack.push((a, idx.clone()));
                }
            }
            Op::Broadcast { arg } => {
                let sa = &g.ty(*arg).shape.0;
                let ai = idx
                    .iter()
                    .zip(sa)
                    .map(|(&i, &d)| if d == 1 { Ix::Zero } else { i })
                    .collect();
                stack.push((*arg, ai));
            }
            Op::Reshape { arg } => {
                let sa = &g.ty(*arg).shape.0;
                let sr = &g.ty(x).shape.0;
                stack.push((*arg, reshape_index(&idx, sr, sa)));
            }
            Op::Permute { arg, perm } => {
                let mut ai = vec![Ix::Other; idx.len()];
                for (i, &p) in perm.iter().enumerate() {
                    ai[p as usize] = idx[i];
                }
                stack.push((*arg, ai));
            }
            Op::Slice { arg, axis, start } => {
                let mut ai = idx.clone();
                if *start != 0 {
                    ai[*axis as usize] = Ix::Other;
                }
                stack.push((*arg, ai));
            }
            // A gathered read lands at a row known only at run time: a reduction under the
            // gathered operand is never at the group's own row (`Other` along the axis).
            Op::Gather { arg, index, axis } => {
                stack.push((*index, idx.clone()));
                let mut ai = idx.clone();
                ai[*axis as usize] = Ix::Other;
                stack.push((*arg, ai));
            }
            Op::Concat { args, axis } => {
                let a = *axis as usize;
                let mut off = 0;
                for &arg in args {
                    let mut ai = idx.clone();
                    if off != 0 {
                        ai[a] = Ix::Other;
                    }
                    off += g.ty(arg).shape.0[a];
                    stack.push((arg, ai));
                }
            }
            Op::Reduce { arg, .. } => {
                let own_row =
                    one(idx.clone()) == one(row_index(Ix::Zero)) && g.ty(*arg).shape == rows;
                if !own_row {
                    bad.push(x);
                } else {
                    stack.push((*arg, row_index(Ix::Col)));
                }
            }
            // `decompose` leaves none.
            Op::Softmax { .. } => bad.push(x),
        }
    }
    bad.sort();
    bad.dedup();
    let reached = seen.into_iter().map(|(x, i)| (x, one(i))).collect();
    (reached, bad)
}

/// The index of a reshape's operand (shape `sa`) from the index of its result (shape
/// `sr`): dims kept in order when only size-1 dims differ (as `lower` maps them), the
/// common leading dims otherwise, and [`Ix::Other`] for the rest.
fn reshape_index(idx: &[Ix], sr: &[u64], sa: &[u64]) -> Vec<Ix> {
    let squeeze = |s: &[u64]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    if squeeze(sr) == squeeze(sa) {
        let mut kept = idx.iter().zip(sr).filter(|(_, &d)| d != 1).map(|(&i, _)| i);
        return sa
            .iter()
            .map(|&d| {
                if d == 1 {
                    Ix::Zero
                } else {
                    kept.next().unwrap_or(Ix::Other)
                }
            })
            .collect();
    }
    let common = sr.iter().zip(sa).take_while(|(a, b)| a == b).count();
    (0..sa.len())
        .map(|i| if i < common { idx[i] } else { Ix::Other })
        .collect()
}

/// True if computing `v` (stopping at materialised values) needs a reduction or a matmul.
fn needs_contraction(g: &Graph, v: Value, mat: &EntitySet<Value>) -> bool {
    let mut stack = vec![v];
    let mut seen: EntitySet<Value> = EntitySet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) || mat.contains(x) {
            continue;
        }
        if matches!(g.ops[x], Op::Reduce { .. } | Op::MatMul { .. }) {
            return true;
        }
        stack.extend(g.ops[x].args());
    }
    false
}

/// The matmuls computed inside the kernel of `out` (at most one, by rule 0).
fn cone_matmuls(g: &Graph, out: Value, mat: &EntitySet<Value>) -> Vec<Value> {
    let mut stack = vec![out];
    let mut seen: EntitySet<Value> = EntitySet::new();
    let mut found = Vec::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) || (x != out && mat.contains(x)) {
            continue;
        }
        if matches!(g.ops[x], Op::MatMul { .. }) {
            found.push(x);
            continue;
        }
        stack.extend(g.ops[x].args());
    }
    found
}

/// The materialised values the kernel computing `out` reads.
fn cone_leaves(g: &Graph, out: Value, mat: &EntitySet<Value>) -> Vec<Value> {
    let mut stack = vec![out];
    let mut seen: EntitySet<Value> = EntitySet::new();
    let mut leaves = Vec::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        if x != out && (mat.contains(x) || matches!(g.ops[x], Op::Input { .. })) {
            leaves.push(x);
            continue;
        }
        stack.extend(g.ops[x].args());
    }
    leaves.sort();
    leaves
}

/// True if broadcasting `arg` to `res` only expands a last axis of size 1 (a per-row value
/// spread over its row).
fn is_row_broadcast(g: &Graph, arg: Value, res: Value) -> bool {
    let a = &g.ty(arg).shape.0;
    let r = &g.ty(res).shape.0;
    a.len() == r.len()
        && !a.is_empty()
        && a[..a.len() - 1] == r[..r.len() - 1]
        && a[a.len() - 1] == 1
}

/// True if `user` consumes the per-row value `v` row-wise: elementwise ops on [.., 1] values,
/// ending in broadcasts back along the row.
fn is_row_use(g: &Graph, v: Value, user: Value, users: &SecondaryMap<Value, Vec<Value>>) -> bool {
    match &g.ops[user] {
        Op::Broadcast { .. } => is_row_broadcast(g, v, user),
        Op::Unary { .. } | Op::Binary { .. } | Op::Cast { .. } | Op::Select { .. } => {
            g.ty(user).shape == g.ty(v).shape
                && !users[user].is_empty()
                && users[user].iter().all(|&u| is_row_use(g, user, u, users))
        }
        _ => false,
    }
}

/// True if computing `v` (stopping at materialised values) calls a math-library function.
fn uses_math(g: &Graph, v: Value, mat: &EntitySet<Value>) -> bool {
    crate::analysis::cone_calls_math(g, &[v], |x, a| x == v || !mat.contains(a))
}

/// The reductions computed inside the kernel of `out`, in definition order.
fn cone_reductions(g: &Graph, out: Value, mat: &EntitySet<Value>) -> Vec<Value> {
    let mut stack = vec![out];
    let mut seen: EntitySet<Value> = EntitySet::new();
    let mut reds = Vec::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        if matches!(g.ops[x], Op::Reduce { .. }) {
            reds.push(x);
        }
        for a in g.ops[x].args() {
            if !mat.contains(a) {
                stack.push(a);
            }
        }
    }
    reds.sort();
    reds
}
