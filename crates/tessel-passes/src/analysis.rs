//! Graph queries that several passes ask: what `attention` formed, what `fuse` decided,
//! what a group's rows and an attention's shape are. They read the graph IR (and a fusion)
//! and decide nothing: `attention`, `fuse`, `schedule` and `lower` ask them here instead of
//! importing each other's internals, so the passes depend on this module and on the passes
//! before them only.

use crate::view::strided;
use cranelift_entity::SecondaryMap;
use tessel_ir::graph::{Fusion, Graph, GroupData, GroupOps, MatmulLayout, Op, UnaryOp};
use tessel_ir::Value;

/// The ops that read each value, in op order (a step output is no op's use).
pub type Users = SecondaryMap<Value, Vec<Value>>;

/// The matmul of the logits' elementwise cone, with the cone, if there is exactly one.
/// The cone: `x` and the same-shaped elementwise ops it is computed from, down to the
/// matmul; other operands are leaves.
pub fn logits_matmul(g: &Graph, x: Value) -> Option<(Value, Vec<Value>)> {
    let shape = &g.ty(x).shape;
    let mut stack = vec![x];
    let mut cone = Vec::new();
    let mut mm = None;
    while let Some(w) = stack.pop() {
        if cone.contains(&w) || g.ty(w).shape != *shape {
            continue;
        }
        match &g.ops[w] {
            Op::MatMul { .. } => {
                if mm.is_some_and(|m| m != w) {
                    return None;
                }
                mm = Some(w);
            }
            Op::Unary { .. } | Op::Binary { .. } | Op::Cast { .. } | Op::Select { .. } => {
                cone.push(w);
                stack.extend(g.ops[w].args());
            }
            _ => {}
        }
    }
    mm.map(|m| (m, cone))
}

/// The arm of logits `where(c, x, -inf)` (or `where(c, -inf, x)`) that a key the mask shows
/// takes: what the logits are in a block every row sees whole. The -inf arm may be a
/// constant under broadcasts, reshapes and casts.
pub fn visible_arm(g: &Graph, logits: Value) -> Option<Value> {
    let Op::Select {
        on_true, on_false, ..
    } = g.ops[logits]
    else {
        return None;
    };
    if is_neg_inf(g, on_false) {
        Some(on_true)
    } else if is_neg_inf(g, on_true) {
        Some(on_false)
    } else {
        None
    }
}

/// True if every element of `v` is the constant -inf (through casts too).
pub fn is_neg_inf(g: &Graph, mut v: Value) -> bool {
    while let Op::Cast { arg } = g.ops[v] {
        v = arg;
    }
    const_value(g, v) == Some(f64::NEG_INFINITY)
}

/// The constant every element of `v` holds, looking through broadcasts and reshapes.
pub fn const_value(g: &Graph, mut v: Value) -> Option<f64> {
    loop {
        match g.ops[v] {
            Op::Const { value } => return Some(value),
            Op::Broadcast { arg } | Op::Reshape { arg } => v = arg,
            _ => return None,
        }
    }
}

/// The shape of the rows a group writing `v` iterates over: `v`'s own shape, or for a
/// materialised reduction, the shape it reduces.
pub fn row_shape(g: &Graph, v: Value) -> tessel_ir::Shape {
    match g.ops[v] {
        Op::Reduce { arg, .. } => g.ty(arg).shape.clone(),
        _ => g.ty(v).shape.clone(),
    }
}

/// The row length `d` of a matmul group whose epilogue computes whole rows (rule 8): its
/// output is `[.., N / d, d]` where the matmul gives `[.., N]`. `None` for any other group.
pub fn row_epilogue_rows(g: &Graph, data: &GroupData) -> Option<u64> {
    let GroupOps::Matmul { matmul, .. } = data.ops else {
        return None;
    };
    match g.matmul_layout(matmul, *data.outputs.first()?) {
        Some(MatmulLayout::Heads { d }) => Some(d),
        _ => None,
    }
}

/// The ops that read each value.
pub fn users(g: &Graph) -> Users {
    let mut u: Users = SecondaryMap::new();
    for (v, op) in g.ops.iter() {
        for a in op.args() {
            u[a].push(v);
        }
    }
    u
}

/// True if `op` is a math-library function (expanded into tens to hundreds of
/// instructions by `expand_math`): a unary op other than negation, abs and not, or a power.
pub fn calls_math(op: &Op) -> bool {
    match op {
        Op::Unary { op, .. } => !matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Not),
        Op::Binary { op, .. } => matches!(op, tessel_ir::graph::BinaryOp::Pow),
        _ => false,
    }
}

/// Whether a math function ([`calls_math`]) is computed in the cone of `roots`: the walk
/// goes from a value `x` on to its argument `a` where `descend(x, a)` (a kernel's cone
/// stops at the materialised values it reads).
pub fn cone_calls_math(g: &Graph, roots: &[Value], descend: impl Fn(Value, Value) -> bool) -> bool {
    let mut stack = roots.to_vec();
    let mut seen = std::collections::HashSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        if calls_math(&g.ops[x]) {
            return true;
        }
        stack.extend(g.ops[x].args().iter().filter(|&&a| descend(x, a)));
    }
    false
}

/// What the attention kernel reads, from the shapes of its matmul `s = q @ kᵀ` and `v`.
pub struct AttentionShape {
    /// Batch dims of the logits (everything but the last two).
    pub batch: Vec<u64>,
    /// Batch dims along which K and V are broadcast but Q is not: the query heads of a KV
    /// group, packed into one CTA's rows.
    pub pack_dims: Vec<usize>,
    pub pack: u64,
    /// Queries, keys, head dim of q and k, head dim of v.
    pub m: u64,
    pub n: u64,
    pub d: u64,
    pub e: u64,
}

/// The shape of attention `a` (an [`Op::Attention`] whose logits come from matmul `s`).
pub fn attention_shape(g: &Graph, s: Value, a: Value) -> AttentionShape {
    let Op::MatMul { lhs, rhs } = g.ops[s] else {
        unreachable!("the attention group's first reduction is its matmul")
    };
    let Op::Attention { v, .. } = g.ops[a] else {
        unreachable!("the attention group's second reduction is the attention")
    };
    let ls = &g.ty(s).shape.0;
    let r = ls.len();
    let batch = ls[..r - 2].to_vec();
    let (q, k, vv) = (strided(g, lhs), strided(g, rhs), strided(g, v));
    let pack_dims: Vec<usize> = match (q, k, vv) {
        (Some(q), Some(k), Some(vv)) => (0..r - 2)
            .filter(|&i| {
                batch[i] > 1 && k.strides[i] == 0 && vv.strides[i] == 0 && q.strides[i] != 0
            })
            .collect(),
        _ => vec![],
    };
    let pack = pack_dims.iter().map(|&i| batch[i]).product();
    AttentionShape {
        batch,
        pack_dims,
        pack,
        m: ls[r - 2],
        n: ls[r - 1],
        d: g.ty(lhs).shape.last(),
        e: g.ty(v).shape.last(),
    }
}

/// True when the attention whose logits come from matmul `s` computes q itself, in its
/// prologue (`fuse` rule 7: q's tensor is not materialised).
pub fn q_in_prologue(g: &Graph, fusion: &Fusion, s: Value) -> bool {
    match g.ops[s] {
        Op::MatMul { lhs, .. } => !fusion.is_materialized(g, crate::view::view_base(g, lhs)),
        _ => false,
    }
}
