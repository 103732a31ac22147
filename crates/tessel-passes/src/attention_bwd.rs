//! The fused attention backward's groups, found in the graph `grad` leaves (`fuse` rule 10).
//!
//! `grad`'s rule for [`Op::Attention`] writes the backward as ordinary ops (grad.rs,
//! `attention_vjp`): the probabilities recomputed from a copy of the logits' cone of
//! `S = q·kᵀ`, `dP = dO·vᵀ`, the row reductions of softmax and `rowsum(dP ∘ P)`, and the
//! products `dV = bf16(P)ᵀ·dO`, `dQ = dS·k`, `dKᵀ = qᵀ·dS`. Unfused, every score-sized
//! matrix goes through memory. Fused (FlashAttention-2's backward structure, Dao 2023,
//! Algorithm 2, without its atomics), two kernels evaluate exactly those ops, the scores
//! recomputed block by block and never stored:
//! - [`GroupOps::AttentionDq`], rows = queries: the reductions, then `dQ`;
//! - [`GroupOps::AttentionDkv`], rows = keys: `dV` and `dKᵀ`, the reductions read.
//!
//! A product qualifies when its score-shaped operand `X` (`[.., M, N]`) is a *score cone*:
//! every path from `X` that reaches a matmul or a reduction runs through elementwise ops
//! and broadcasts only, reaches each matmul at `X`'s own index (a score matmul: bf16/f16
//! operands read in place — `[.., M, d]` rows and a `[.., d, N]` view, head dims multiples
//! powers of two from 16 to 256 (the ring's swizzle), 16-byte aligned) and each reduction at its own row (a sum or maximum
//! over the last axis of a score cone). Nothing in a cone may be a step output. The other
//! operand is a view read in place. The kernels need tensor cores (`fast`, `invariant`).

use crate::view::strided;
use std::collections::BTreeSet;
use tessel_ir::graph::{Graph, Op, ReduceOp};
use tessel_ir::{DType, Value};

/// Which side of the score matrix a product's rows come from.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Side {
    /// `X·B`: rows are the score rows (queries); `B` is `[.., N, e]`.
    Rows,
    /// `permute(X)·B`: rows are the score columns (keys); `B` is `[.., M, e]`.
    ColsLeft,
    /// `A·X`: `[.., e, N]`, the score columns (keys) along its last dim; `A` is `[.., e, M]`.
    ColsRight,
}

/// How a product reads its operands: the score cone `x`, the view `other` it is multiplied
/// with, and the side its rows come from.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Product {
    pub matmul: Value,
    pub x: Value,
    pub other: Value,
    pub side: Side,
}

/// The two groups of one attention backward: `dq` (scores, products, reductions), `dkv`
/// (scores, products); the plan's values that must be materialised; the matmuls it
/// computes itself.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub dq: (Vec<Value>, Vec<Value>, Vec<Value>),
    pub dkv: Option<(Vec<Value>, Vec<Value>)>,
    /// Tensors under the operands' views.
    pub bases: Vec<Value>,
    /// Every value of the operands' view chains (never materialised by rule 2).
    pub views: Vec<Value>,
    /// Every value computed inside the cones (none may be materialised).
    pub inside: Vec<Value>,
}

impl Plan {
    /// The matmuls the plan's kernels compute (rule 0 leaves them alone).
    pub fn matmuls(&self) -> Vec<Value> {
        let mut v: Vec<Value> = self.dq.0.iter().chain(&self.dq.1).copied().collect();
        if let Some((s, p)) = &self.dkv {
            v.extend(s.iter().chain(p));
        }
        v.sort();
        v.dedup();
        v
    }

    /// The values the two kernels write: dq's products and reductions, dkv's products.
    pub fn outputs(&self) -> (Vec<Value>, Vec<Value>) {
        let mut dq: Vec<Value> = self.dq.1.iter().chain(&self.dq.2).copied().collect();
        dq.sort();
        let mut dkv = self.dkv.as_ref().map(|d| d.1.clone()).unwrap_or_default();
        dkv.sort();
        (dq, dkv)
    }
}

/// The product's reading of matmul `p`, if its operands have one of the three forms.
pub fn product(g: &Graph, p: Value) -> Option<Product> {
    let Op::MatMul { lhs, rhs } = g.ops[p] else {
        return None;
    };
    let rank = g.ty(p).shape.rank();
    if rank < 2 {
        return None;
    }
    let swaps_last = |perm: &[u32]| {
        perm.len() == rank
            && perm[..rank - 2]
                .iter()
                .enumerate()
                .all(|(i, &x)| x as usize == i)
            && perm[rank - 2] as usize == rank - 1
            && perm[rank - 1] as usize == rank - 2
    };
    if !crate::view::is_view_op(&g.ops[lhs]) && readable(g, rhs, rank - 1) {
        return Some(Product {
            matmul: p,
            x: lhs,
            other: rhs,
            side: Side::Rows,
        });
    }
    if let Op::Permute { arg, perm } = &g.ops[lhs] {
        if swaps_last(perm) && !crate::view::is_view_op(&g.ops[*arg]) && readable(g, rhs, rank - 1)
        {
            return Some(Product {
                matmul: p,
                x: *arg,
                other: rhs,
                side: Side::ColsLeft,
            });
        }
    }
    if !crate::view::is_view_op(&g.ops[rhs]) && readable(g, lhs, rank - 2) {
        return Some(Product {
            matmul: p,
            x: rhs,
            other: lhs,
            side: Side::ColsRight,
        });
    }
    None
}

/// A 16-bit view read with 16-byte copies, dim `contiguous` of stride 1 and every other
/// stride and the offset multiples of 8 elements.
fn readable(g: &Graph, x: Value, contiguous: usize) -> bool {
    let Some(v) = strided(g, x) else {
        return false;
    };
    matches!(g.ty(x).dtype, DType::Bf16 | DType::F16)
        && v.strides[contiguous] == 1
        && v.offset % 8 == 0
        && v.strides
            .iter()
            .enumerate()
            .all(|(k, &s)| k == contiguous || s % 8 == 0)
}

/// A score matmul: 16-bit `[.., M, d]·[.., d, N]`, `d` a multiple of 16 up to 256, rows
/// read with the head dim contiguous, the right operand a view of a `[.., N, d]` tensor.
fn score_matmul(g: &Graph, s: Value) -> bool {
    let Op::MatMul { lhs, rhs } = g.ops[s] else {
        return false;
    };
    let r = g.ty(s).shape.rank();
    let d = g.ty(lhs).shape.last();
    r >= 2
        && d.is_power_of_two()
        && (16..=256).contains(&d)
        && g.ty(lhs).dtype == g.ty(rhs).dtype
        && readable(g, lhs, r - 1)
        && readable(g, rhs, r - 2)
}

/// What the walk of a score cone found.
#[derive(Default)]
struct Cone {
    scores: BTreeSet<Value>,
    reductions: BTreeSet<Value>,
    inside: BTreeSet<Value>,
}

/// Symbolic index of a score-shaped value: its own (`Own`), or its row's (`Row`: the last
/// dim 0, as a reduction's result is read through its row broadcast).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
enum At {
    Own,
    Row,
}

/// Walks the score cone of `x` (score shape `shape`); `into_reductions`: walk a reduction's
/// operand too (the dq kernel computes them) or stop there (dkv reads them). `None` when a
/// path leaves the allowed forms.
fn walk(g: &Graph, x: Value, into_reductions: bool, outputs: &BTreeSet<Value>) -> Option<Cone> {
    let shape = g.ty(x).shape.clone();
    let rank = shape.rank();
    let row_shape = {
        let mut s = shape.0.clone();
        s[rank - 1] = 1;
        s
    };
    let mut cone = Cone::default();
    let mut seen = BTreeSet::new();
    let mut stack = vec![(x, At::Own)];
    while let Some((v, at)) = stack.pop() {
        if !seen.insert((v, at)) {
            continue;
        }
        // Leaves without a matmul or reduction below are read or computed at any index.
        if !needs_scores(g, v) {
            continue;
        }
        if outputs.contains(&v) {
            return None;
        }
        let ty = g.ty(v);
        let own_shape = match at {
            At::Own => &shape.0,
            At::Row => &row_shape,
        };
        if ty.shape.0 != *own_shape {
            return None;
        }
        match &g.ops[v] {
            Op::MatMul { .. } => {
                if at != At::Own || !score_matmul(g, v) {
                    return None;
                }
                cone.scores.insert(v);
            }
            Op::Reduce { op, arg, axis } => {
                // (With one column, a row value is read at its own index: no broadcast.)
                if (at != At::Row && shape.last() != 1)
                    || ty.dtype != DType::F32
                    || *axis as usize + 1 != rank
                    || !matches!(op, ReduceOp::Sum | ReduceOp::Max)
                    || g.ty(*arg).shape != shape
                {
                    return None;
                }
                cone.reductions.insert(v);
                if into_reductions {
                    cone.inside.insert(v);
                    stack.push((*arg, At::Own));
                }
            }
            Op::Unary { .. } | Op::Binary { .. } | Op::Cast { .. } | Op::Select { .. } => {
                cone.inside.insert(v);
                for a in g.ops[v].args() {
                    stack.push((a, at));
                }
            }
            // A row value spread along its row.
            Op::Broadcast { arg } => {
                let sa = &g.ty(*arg).shape.0;
                if at != At::Own || *sa != row_shape {
                    return None;
                }
                cone.inside.insert(v);
                stack.push((*arg, At::Row));
            }
            _ => return None,
        }
    }
    Some(cone)
}

/// True if computing `v` needs a matmul or a reduction (the walk's cones end elsewhere).
fn needs_scores(g: &Graph, v: Value) -> bool {
    let mut stack = vec![v];
    let mut seen = BTreeSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        match g.ops[x] {
            Op::MatMul { .. } | Op::Reduce { .. } => return true,
            Op::Input { .. } => {}
            _ => stack.extend(g.ops[x].args()),
        }
    }
    false
}

/// The attention backward plans of `g`: products grouped by the first score matmul of
/// their cones. A plan whose cones break a rule is left out (those ops compile unfused).
pub fn plans(g: &Graph) -> Vec<Plan> {
    let outputs: BTreeSet<Value> = g.outputs.iter().map(|(_, v)| *v).collect();
    let users = crate::analysis::users(g);
    let mut by_first: std::collections::BTreeMap<Value, Vec<(Product, Cone)>> = Default::default();
    for (p, op) in g.ops.iter() {
        if !matches!(op, Op::MatMul { .. }) {
            continue;
        }
        let Some(prod) = product(g, p) else {
            continue;
        };
        let e = match prod.side {
            Side::ColsRight => g.ty(p).shape.0[g.ty(p).shape.rank() - 2],
            _ => g.ty(p).shape.last(),
        };
        if g.ty(prod.x).shape.rank() != g.ty(p).shape.rank()
            || !matches!(g.ty(prod.x).dtype, DType::Bf16 | DType::F16)
            || !e.is_power_of_two()
            || !(16..=256).contains(&e)
        {
            continue;
        }
        let into = prod.side == Side::Rows;
        let Some(cone) = walk(g, prod.x, into, &outputs) else {
            continue;
        };
        let Some(&first) = cone.scores.iter().next() else {
            continue;
        };
        by_first.entry(first).or_default().push((prod, cone));
    }
    let mut out = Vec::new();
    'plans: for (_, prods) in by_first {
        let score_shape = g
            .ty(*prods[0].1.scores.iter().next().expect("one"))
            .shape
            .clone();
        let mut plan = Plan::default();
        let mut dq_scores = BTreeSet::new();
        let mut dkv_scores = BTreeSet::new();
        let mut reductions = BTreeSet::new();
        let mut inside = BTreeSet::new();
        let mut dkv_products = Vec::new();
        for (prod, cone) in &prods {
            if cone.scores.iter().any(|&s| g.ty(s).shape != score_shape) {
                continue 'plans;
            }
            inside.extend(cone.inside.iter().copied());
            match prod.side {
                Side::Rows => {
                    dq_scores.extend(cone.scores.iter().copied());
                    plan.dq.1.push(prod.matmul);
                }
                _ => {
                    dkv_scores.extend(cone.scores.iter().copied());
                    dkv_products.push(prod.matmul);
                }
            }
            reductions.extend(cone.reductions.iter().copied());
        }
        // The reductions the dkv kernel reads are computed by the dq kernel: their cones.
        for &r in &reductions {
            let Op::Reduce { arg, .. } = g.ops[r] else {
                unreachable!("walk lists reductions")
            };
            let Some(c) = walk(g, arg, true, &outputs) else {
                continue 'plans;
            };
            if c.scores.iter().any(|&s| g.ty(s).shape != score_shape) {
                continue 'plans;
            }
            dq_scores.extend(c.scores.iter().copied());
            inside.extend(c.inside.iter().copied());
            if !c.reductions.is_subset(&reductions) {
                continue 'plans;
            }
        }
        if plan.dq.1.is_empty() && reductions.is_empty() {
            // Only products of P (dV alone): the dkv kernel needs no reductions... but
            // softmax always has them; a cone without any is no attention backward.
            continue;
        }
        plan.dq.0 = dq_scores.into_iter().collect();
        plan.dq.2 = reductions.iter().copied().collect();
        if !dkv_products.is_empty() {
            plan.dkv = Some((dkv_scores.into_iter().collect(), dkv_products));
        }
        for r in &reductions {
            inside.remove(r);
        }
        plan.inside = inside.into_iter().collect();
        let mut operands: Vec<Value> = Vec::new();
        for &s in plan.matmuls().iter() {
            if let Op::MatMul { lhs, rhs } = g.ops[s] {
                if plan.dq.0.contains(&s) || plan.dkv.as_ref().is_some_and(|d| d.0.contains(&s)) {
                    operands.extend([lhs, rhs]);
                }
            }
        }
        for (prod, _) in &prods {
            operands.push(prod.other);
        }
        for x in operands {
            plan.views.extend(crate::view::view_chain(g, x));
            let b = crate::view::view_base(g, x);
            if !plan.bases.contains(&b) {
                plan.bases.push(b);
            }
        }
        // Everything the kernels compute stays inside them: a score or a cone value read
        // by an op of no cone (another reduction, a slice of the logits) would need it in
        // memory, which the plan never writes.
        let mut ours: BTreeSet<Value> = plan.inside.iter().copied().collect();
        ours.extend(plan.matmuls());
        ours.extend(reductions.iter().copied());
        for (prod, _) in &prods {
            ours.insert(prod.matmul);
            if let Op::MatMul { lhs, rhs } = g.ops[prod.matmul] {
                // ColsLeft's permute of the cone.
                for x in [lhs, rhs] {
                    if crate::view::is_view_op(&g.ops[x]) && !plan.views.contains(&x) {
                        ours.insert(x);
                    }
                }
            }
        }
        let computed: Vec<Value> = plan
            .inside
            .iter()
            .chain(plan.dq.0.iter())
            .chain(plan.dkv.iter().flat_map(|d| d.0.iter()))
            .copied()
            .collect();
        if computed
            .iter()
            .any(|&v| users[v].iter().any(|u| !ours.contains(u)))
        {
            continue;
        }
        // The dq kernel runs where its first output is, the dkv kernel after it: each
        // reads only values defined before its first output.
        let (dq_out, dkv_out) = plan.outputs();
        let before = |first: Value, reads: &[Value]| reads.iter().all(|&b| b < first);
        if !before(dq_out[0], &plan.bases) {
            continue;
        }
        if let Some(&first) = dkv_out.first() {
            if !before(first, &plan.bases) || dq_out[0] > first {
                continue;
            }
        }
        out.push(plan);
    }
    out
}

/// The logits select whose key bound lets the kernels skip masked blocks, if skipping
/// leaves every output as it is: `x = where(j < bound(row), s, -inf)`
/// ([`crate::attention::key_bound`]) is `-inf` at every masked key, so a maximum over `x`
/// (through casts) ignores them, and each sum's operand and each product's score operand
/// in `xs` is zero there — built from `exp(x − row value)` (`exp(−inf) = 0`; a row with
/// no visible key has `max = −inf` and softmax's own select gives it 0) by casts,
/// negation, products with anything, quotients of it, and selects whose arms are zero
/// there or the constant 0. (A product with an infinite or NaN other factor — `0 · inf` —
/// is then read as 0: as the forward kernel never reads keys past the bound.) `None`
/// where any of that does not hold: the kernels walk every block.
pub fn mask_select(g: &Graph, reductions: &[Value], xs: &[Value]) -> Option<Value> {
    let strip = |mut v: Value| {
        while let Op::Cast { arg } = g.ops[v] {
            v = arg;
        }
        v
    };
    // The select: a maximum's operand with a key bound.
    let x = reductions.iter().find_map(|&r| match g.ops[r] {
        Op::Reduce {
            op: ReduceOp::Max,
            arg,
            ..
        } => {
            let a = strip(arg);
            crate::attention::key_bound(g, a).map(|_| a)
        }
        _ => None,
    })?;
    let neg = |v: Value| strip(v) == x;
    let row_value = |v: Value| match g.ops[v] {
        Op::Broadcast { arg } => g.ty(arg).shape.last() == 1 && g.ty(v).shape.last() != 1,
        _ => false,
    };
    fn zero(
        g: &Graph,
        v: Value,
        neg: &dyn Fn(Value) -> bool,
        row_value: &dyn Fn(Value) -> bool,
        depth: u32,
    ) -> bool {
        use tessel_ir::graph::{BinaryOp, UnaryOp};
        if depth > 64 {
            return false;
        }
        let z = |w: Value| zero(g, w, neg, row_value, depth + 1);
        let is_zero_const = |w: Value| crate::analysis::const_value(g, w) == Some(0.0);
        match g.ops[v] {
            Op::Cast { arg }
            | Op::Unary {
                op: UnaryOp::Neg,
                arg,
            } => z(arg),
            Op::Unary {
                op: UnaryOp::Exp,
                arg,
            } => match g.ops[arg] {
                Op::Binary {
                    op: BinaryOp::Sub,
                    lhs,
                    rhs,
                } => neg(lhs) && row_value(rhs),
                _ => false,
            },
            Op::Binary {
                op: BinaryOp::Mul,
                lhs,
                rhs,
            } => z(lhs) || z(rhs),
            Op::Binary {
                op: BinaryOp::Div,
                lhs,
                ..
            } => z(lhs),
            Op::Select {
                on_true, on_false, ..
            } => (z(on_true) || is_zero_const(on_true)) && (z(on_false) || is_zero_const(on_false)),
            _ => false,
        }
    }
    let sums_zero = reductions.iter().all(|&r| match g.ops[r] {
        Op::Reduce {
            op: ReduceOp::Max,
            arg,
            ..
        } => neg(arg),
        Op::Reduce {
            op: ReduceOp::Sum,
            arg,
            ..
        } => zero(g, arg, &neg, &row_value, 0),
        _ => false,
    });
    (sums_zero && xs.iter().all(|&v| zero(g, v, &neg, &row_value, 0))).then_some(x)
}
