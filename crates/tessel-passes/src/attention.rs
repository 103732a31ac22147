//! `attention`: finds attention written from primitives and makes it one fused op.
//!
//! Before: a checked graph (composite ops still whole). After: every
//! `softmax(logits, axis: -1)` cast to `v`'s dtype and multiplied by `v` whose logits are an
//! elementwise function of one matmul — `where(mask, q @ kᵀ * scale, -inf)`, as
//! transformers' eager attention writes it — is one [`Op::Attention`]; the ops it replaced
//! are gone. Design §12: the score matrix is then never written to memory.
//!
//! It applies when (anything else compiles unfused, as written):
//! - the profile uses tensor cores (`invariant`, `fast`; `exact` has no fused schedule yet);
//! - `q @ kᵀ` and `v` are bf16 or f16, the head dims of q and v powers of two from 16 to 256
//!   (the shared-memory swizzle permutes a power of two of 16-byte chunks per row);
//! - the softmax runs over the last axis of f32 logits, and its cast and the logits' cone
//!   from the matmul are used by nothing else;
//! - the logits' other operands need no reduction or matmul (a mask, a scale);
//! - q, k and v are read in place: each is a strided view (permute, reshape, broadcast,
//!   slice) of a stored tensor with its head dim contiguous and every other stride and
//!   offset a multiple of 16 bytes ([`crate::view`]), so GQA's broadcast of K and V over the
//!   query heads of a group costs no copy.
//!
//! When the mask says which keys a row sees as `j < bound(row)` — `where(j <= i + c, x,
//! -inf)` (causal), `where(j < len[b], x, -inf)` (a KV cache's length), or the same with
//! the arms swapped and the comparison negated — the op carries that bound, and the kernel
//! reads no key past it.
//!
//! It never changes what the step computes: only where its kernels put the work.

use crate::analysis::{const_value, is_neg_inf, logits_matmul, users, Users};
use crate::view::{is_view_op, strided, view_chain};
use crate::Profile;
use cranelift_entity::EntityRef;
use std::collections::HashMap;
use tessel_ir::builder::{result_type, Builder, Built};
use tessel_ir::graph::{BinaryOp, Graph, Op};
use tessel_ir::{DType, Shape, TensorType, Value};

/// Runs the pass.
pub fn run(g: &Graph, profile: Profile) -> Graph {
    if profile == Profile::Exact {
        return g.clone();
    }
    let users = users(g);
    let mut out = g.clone();
    let mut found = false;
    for (o, _) in g.ops.iter() {
        if let Some((logits, v, bound)) = recognise(g, &users, o) {
            let bound = bound.map(|b| build_bound(&mut out, &b));
            // The bound's ops are appended after `o`; `reorder` restores the order. The
            // attention keeps the matmul's type, which is the one its rule gives.
            let attention = Op::Attention { logits, v, bound };
            debug_assert_eq!(result_type(&out, &attention, None).as_ref(), Ok(out.ty(o)));
            out.ops[o] = attention;
            found = true;
        }
    }
    if !found {
        return g.clone();
    }
    reorder_live(&out)
}

/// The values of checked graph `g` that the fused attention kernels compute block by block
/// and never store, where the pass fuses them (`invariant`, `fast`): each recognised
/// attention's P·V product, the cast and softmax under it, the logits' cone down to
/// `q @ kᵀ` and that matmul, and the plain values (masks, scales) the cone reads. `check`
/// lets these, and only these, pass 2^32 elements (`check::MAX_NUMEL`): causal attention
/// at 40 heads over 16384 positions has 2^33.3 scores. In `exact`, which fuses no attention,
/// `lower` refuses to store them.
pub fn in_kernel(g: &Graph) -> std::collections::HashSet<Value> {
    let users = users(g);
    let mut out = std::collections::HashSet::new();
    for o in g.ops.keys() {
        let Some((x, _, _)) = recognise(g, &users, o) else {
            continue;
        };
        let Op::MatMul { lhs: pc, .. } = g.ops[o] else {
            continue;
        };
        let Op::Cast { arg: p } = g.ops[pc] else {
            continue;
        };
        let Some((s, cone)) = logits_matmul(g, x) else {
            continue;
        };
        out.extend([o, pc, p, x, s]);
        // The cone and what its leaves compute from (plain: no reduction or matmul).
        let mut stack = cone;
        let mut seen = std::collections::HashSet::new();
        while let Some(w) = stack.pop() {
            if w != s && seen.insert(w) {
                out.insert(w);
                stack.extend(g.ops[w].args());
            }
        }
    }
    out
}

/// True if `x` is read by exactly the op `by` and is no step output.
fn single_use(g: &Graph, users: &Users, x: Value, by: Value) -> bool {
    users[x] == [by] && !g.is_output(x)
}

/// True if computing `v` needs no reduction, matmul or softmax.
fn plain(g: &Graph, v: Value) -> bool {
    let mut stack = vec![v];
    let mut seen = Vec::new();
    while let Some(x) = stack.pop() {
        if seen.contains(&x) {
            continue;
        }
        seen.push(x);
        if matches!(
            g.ops[x],
            Op::Reduce { .. } | Op::MatMul { .. } | Op::Softmax { .. } | Op::Attention { .. }
        ) {
            return false;
        }
        stack.extend(g.ops[x].args());
    }
    true
}

/// A view the fused kernel reads with 16-byte copies: `contiguous` is the dim with stride
/// 1; every other stride and the offset are multiples of 8 elements (16 bytes of bf16).
fn readable(g: &Graph, x: Value, contiguous: usize) -> bool {
    let Some(v) = strided(g, x) else {
        return false;
    };
    v.strides[contiguous] == 1
        && v.offset % 8 == 0
        && v.strides
            .iter()
            .enumerate()
            .all(|(k, &s)| k == contiguous || s % 8 == 0)
}

/// `o = cast(softmax(logits)) @ v` in the fusable form: the logits, v, and the key bound.
fn recognise(g: &Graph, users: &Users, o: Value) -> Option<(Value, Value, Option<Bound>)> {
    let Op::MatMul { lhs: pc, rhs: v } = g.ops[o] else {
        return None;
    };
    let dt = g.ty(o).dtype;
    if !matches!(dt, DType::Bf16 | DType::F16) {
        return None;
    }
    let Op::Cast { arg: p } = g.ops[pc] else {
        return None;
    };
    let rank = g.ty(o).shape.rank();
    let Op::Softmax { arg: x, axis } = g.ops[p] else {
        return None;
    };
    if axis as usize != rank - 1
        || g.ty(x).dtype != DType::F32
        || !single_use(g, users, pc, o)
        || !single_use(g, users, p, pc)
    {
        return None;
    }
    let (s, cone) = logits_matmul(g, x)?;
    let Op::MatMul { lhs: q, rhs: kt } = g.ops[s] else {
        return None;
    };
    if g.ty(s).dtype != dt {
        return None;
    }
    // Nothing outside the cone reads a value computed from the scores.
    let inside = |w: &Value| cone.contains(w) || *w == p;
    if !users[s].iter().all(inside)
        || g.outputs.iter().any(|(_, w)| *w == s || cone.contains(w))
        || cone
            .iter()
            .filter(|&&w| w != x)
            .any(|&w| !users[w].iter().all(inside))
        || users[x] != [p]
    {
        return None;
    }
    let leaves_plain = cone
        .iter()
        .flat_map(|&w| g.ops[w].args())
        .filter(|a| *a != s && !cone.contains(a))
        .all(|a| plain(g, a));
    let (d, e) = (g.ty(q).shape.last(), g.ty(v).shape.last());
    let head_ok = |h: u64| h.is_power_of_two() && (16..=256).contains(&h);
    if !leaves_plain
        || !head_ok(d)
        || !head_ok(e)
        || !readable(g, q, rank - 1)
        || !readable(g, kt, rank - 2)
        || !readable(g, v, rank - 1)
    {
        return None;
    }
    Some((x, v, key_bound(g, x)))
}

/// How a value depends on the key index (the logits' last axis, `ax` in its own shape).
#[derive(Copy, Clone, PartialEq, Debug)]
enum KeyClass {
    /// The key index plus a constant.
    Key(i64),
    /// The same for every key.
    Free,
    Other,
}

/// The axis of a reshape's operand that holds result axis `ax`, when the reshape only
/// inserts or removes dims of size 1 around it.
fn reshape_axis(from: &Shape, to: &Shape, ax: usize) -> Option<usize> {
    let nz = |s: &Shape| -> Vec<(usize, u64)> {
        s.0.iter()
            .copied()
            .enumerate()
            .filter(|(_, d)| *d != 1)
            .collect()
    };
    let (a, b) = (nz(from), nz(to));
    if a.iter().map(|x| x.1).ne(b.iter().map(|x| x.1)) {
        return None;
    }
    let pos = b.iter().position(|x| x.0 == ax)?;
    Some(a[pos].0)
}

fn key_class(g: &Graph, w: Value, ax: usize) -> KeyClass {
    let shape = &g.ty(w).shape;
    if shape.0[ax] == 1 {
        return KeyClass::Free;
    }
    match &g.ops[w] {
        Op::Iota { axis } => {
            if *axis as usize == ax {
                KeyClass::Key(0)
            } else {
                KeyClass::Free
            }
        }
        Op::Const { .. } => KeyClass::Free,
        Op::Broadcast { arg } => key_class(g, *arg, ax),
        Op::Reshape { arg } => match reshape_axis(&g.ty(*arg).shape, shape, ax) {
            Some(a) => key_class(g, *arg, a),
            None => KeyClass::Other,
        },
        Op::Permute { arg, perm } => key_class(g, *arg, perm[ax] as usize),
        Op::Slice { arg, axis, start } => match key_class(g, *arg, ax) {
            KeyClass::Key(c) if *axis as usize == ax => KeyClass::Key(c + *start as i64),
            k => k,
        },
        Op::Binary { op, lhs, rhs } if g.ty(w).dtype == DType::I32 => {
            let (l, r) = (key_class(g, *lhs, ax), key_class(g, *rhs, ax));
            let k = |x: Value| const_value(g, x).map(|c| c as i64);
            match (op, l, r) {
                (_, KeyClass::Free, KeyClass::Free) => KeyClass::Free,
                (BinaryOp::Add, KeyClass::Key(c), KeyClass::Free) => {
                    k(*rhs).map_or(KeyClass::Other, |n| KeyClass::Key(c + n))
                }
                (BinaryOp::Add, KeyClass::Free, KeyClass::Key(c)) => {
                    k(*lhs).map_or(KeyClass::Other, |n| KeyClass::Key(c + n))
                }
                (BinaryOp::Sub, KeyClass::Key(c), KeyClass::Free) => {
                    k(*rhs).map_or(KeyClass::Other, |n| KeyClass::Key(c - n))
                }
                _ => KeyClass::Other,
            }
        }
        op @ (Op::Unary { .. } | Op::Cast { .. } | Op::Select { .. } | Op::Binary { .. }) => {
            if op
                .args()
                .iter()
                .all(|&a| key_class(g, a, ax) == KeyClass::Free)
            {
                KeyClass::Free
            } else {
                KeyClass::Other
            }
        }
        _ => KeyClass::Other,
    }
}

/// `key · j + c + Σ coef · w` for the key index `j`, a constant `c` and values `w` that do
/// not depend on the key (each of the comparison's shape).
#[derive(Clone, Debug, Default)]
struct Linear {
    key: i64,
    c: i64,
    terms: Vec<(Value, i64)>,
}

impl Linear {
    fn scaled(mut self, k: i64) -> Linear {
        self.key *= k;
        self.c *= k;
        for t in &mut self.terms {
            t.1 *= k;
        }
        self
    }

    fn plus(mut self, o: Linear) -> Linear {
        self.key += o.key;
        self.c += o.c;
        self.terms.extend(o.terms);
        self
    }
}

/// `v` as a [`Linear`] form in the key index (axis `ax` of `v`), through `+`, `-` and
/// negation of i32 values; anything else is one term (if independent of the key), the key
/// itself plus a constant (an iota along it, through views), or no linear form.
fn linear(g: &Graph, v: Value, ax: usize) -> Option<Linear> {
    if let Some(c) = const_value(g, v) {
        return Some(Linear {
            c: c as i64,
            ..Default::default()
        });
    }
    if g.ty(v).dtype == DType::I32 {
        match &g.ops[v] {
            Op::Binary {
                op: op @ (BinaryOp::Add | BinaryOp::Sub),
                lhs,
                rhs,
            } => {
                let (l, r) = (linear(g, *lhs, ax)?, linear(g, *rhs, ax)?);
                let k = if *op == BinaryOp::Add { 1 } else { -1 };
                return Some(l.plus(r.scaled(k)));
            }
            Op::Unary {
                op: tessel_ir::graph::UnaryOp::Neg,
                arg,
            } => return Some(linear(g, *arg, ax)?.scaled(-1)),
            _ => {}
        }
    }
    match key_class(g, v, ax) {
        KeyClass::Key(c) => Some(Linear {
            key: 1,
            c,
            ..Default::default()
        }),
        KeyClass::Free => Some(Linear {
            terms: vec![(v, 1)],
            ..Default::default()
        }),
        KeyClass::Other => None,
    }
}

/// A row's visible keys are `j < c + Σ coef · w`, with each `w` a value independent of the
/// key (axis `ax` of its shape, the comparison's); `chain` are the view ops from the
/// comparison up to the logits' shape, outermost first.
pub(crate) struct Bound {
    pub(crate) c: i64,
    pub(crate) terms: Vec<(Value, i64)>,
    pub(crate) ax: usize,
    pub(crate) chain: Vec<Value>,
    pub(crate) logits: Value,
}

/// The key bound of logits `x = where(cond, s, -inf)` (or `where(cond, -inf, s)`, or
/// either under casts), if `cond` compares two sums of the key index (with coefficient
/// ±1 in all) and values independent of it: causal (`j <= i`, `j - i <= 0`), a cache's
/// length (`j < len[b]`), both (`j <= len[b] + i`).
pub(crate) fn key_bound(g: &Graph, x: Value) -> Option<Bound> {
    let mut top = x;
    while let Op::Cast { arg } = g.ops[top] {
        top = arg;
    }
    let Op::Select {
        cond,
        on_true,
        on_false,
    } = g.ops[top]
    else {
        return None;
    };
    let visible_when_true = if is_neg_inf(g, on_false) {
        true
    } else if is_neg_inf(g, on_true) {
        false
    } else {
        return None;
    };
    // Down the views from the select's condition to the comparison, following the key axis.
    let chain = view_chain(g, cond);
    let mut ax = g.ty(x).shape.rank() - 1;
    for &w in &chain {
        ax = match &g.ops[w] {
            Op::Broadcast { arg } if g.ty(*arg).shape.0[ax] != 1 => Some(ax),
            Op::Reshape { arg } => reshape_axis(&g.ty(*arg).shape, &g.ty(w).shape, ax),
            Op::Permute { perm, .. } => Some(perm[ax] as usize),
            _ => None,
        }?;
    }
    let cmp = crate::view::view_base(g, cond);
    let Op::Binary { op, lhs, rhs } = g.ops[cmp] else {
        return None;
    };
    if g.ty(lhs).dtype != DType::I32 {
        return None;
    }
    // cond: d op 0, with d = lhs - rhs; written as j + e op 0.
    let d = linear(g, lhs, ax)?.plus(linear(g, rhs, ax)?.scaled(-1));
    let flip = |op: BinaryOp| match op {
        BinaryOp::Lt => Some(BinaryOp::Gt),
        BinaryOp::Le => Some(BinaryOp::Ge),
        BinaryOp::Gt => Some(BinaryOp::Lt),
        BinaryOp::Ge => Some(BinaryOp::Le),
        _ => None,
    };
    let (op, e) = match d.key {
        1 => (op, d),
        -1 => (flip(op)?, d.scaled(-1)),
        _ => return None,
    };
    // Visible when `j + e op 0` holds (negated when the -inf arm is the true one).
    let op = if visible_when_true {
        op
    } else {
        match op {
            BinaryOp::Lt => BinaryOp::Ge,
            BinaryOp::Le => BinaryOp::Gt,
            BinaryOp::Gt => BinaryOp::Le,
            BinaryOp::Ge => BinaryOp::Lt,
            _ => return None,
        }
    };
    // j < -e (Lt) or j < -e + 1 (Le).
    let extra = match op {
        BinaryOp::Lt => 0,
        BinaryOp::Le => 1,
        _ => return None,
    };
    let neg = Linear { key: 0, ..e }.scaled(-1);
    Some(Bound {
        c: neg.c + extra,
        terms: neg.terms,
        ax,
        chain,
        logits: x,
    })
}

/// Appends the ops computing the bound `[.., M, 1]` (i32): the terms at key 0, times their
/// coefficients, plus the constant, taken up the condition's views with the key axis of
/// size 1. Each op is typed by its rule ([`Builder`]); the constants, slices and view ops,
/// which carry their shapes, are given the key axis of size 1.
fn build_bound(g: &mut Graph, b: &Bound) -> Value {
    // The recogniser checked the shapes the bound's ops have; a refusal is a bug here.
    let ok = |r: Built| r.unwrap_or_else(|e| panic!("attention built an ill-typed bound op: {e}"));
    let i32t = |shape: Vec<u64>| TensorType::new(DType::I32, shape);
    let with_one = |s: &Shape, ax: usize| -> Vec<u64> {
        let mut s = s.0.clone();
        s[ax] = 1;
        s
    };
    let cmp_shape = match b.terms.first() {
        Some(&(w, _)) => g.ty(w).shape.clone(),
        None => {
            let base = crate::view::view_base(g, b.chain.last().copied().unwrap_or(b.logits));
            g.ty(base).shape.clone()
        }
    };
    let row = with_one(&cmp_shape, b.ax);
    let rank = row.len();
    let mut g = Builder::new(g);
    // Always the three ops (the builder's `full` would drop an identity broadcast).
    let constant = |g: &mut Builder, k: i64| -> Value {
        let c = ok(g.op(Op::Const { value: k as f64 }, Some(i32t(vec![]))));
        let r = ok(g.op(Op::Reshape { arg: c }, Some(i32t(vec![1; rank]))));
        ok(g.op(Op::Broadcast { arg: r }, Some(i32t(row.clone()))))
    };
    let mut cur = constant(&mut g, b.c);
    for &(w, coef) in &b.terms {
        if coef == 0 {
            continue;
        }
        let mut t = ok(g.slice(w, b.ax as u32, 0, 1));
        if coef.abs() != 1 {
            let k = constant(&mut g, coef.abs());
            t = ok(g.mul(t, k));
        }
        cur = ok(if coef > 0 {
            g.add(cur, t)
        } else {
            g.sub(cur, t)
        });
    }
    let g = g.graph;
    // Up the views, innermost first, each with the key axis of size 1. The key axis of
    // each view's result: recomputed from the logits down, as `key_bound` did.
    let rank = g.ty(b.logits).shape.rank();
    let mut axes = vec![rank - 1];
    for &w in &b.chain {
        let ax = *axes.last().expect("starts with the logits' axis");
        let a = match &g.ops[w] {
            Op::Reshape { arg } => {
                reshape_axis(&g.ty(*arg).shape, &g.ty(w).shape, ax).expect("checked")
            }
            Op::Permute { perm, .. } => perm[ax] as usize,
            _ => ax,
        };
        axes.push(a);
    }
    for (k, &w) in b.chain.iter().enumerate().rev() {
        let shape = with_one(&g.ty(w).shape, axes[k]);
        let op = match &g.ops[w] {
            Op::Permute { perm, .. } => Op::Permute {
                arg: cur,
                perm: perm.clone(),
            },
            Op::Broadcast { .. } => Op::Broadcast { arg: cur },
            _ => Op::Reshape { arg: cur },
        };
        let view = ok(Builder::new(g).op(op, Some(i32t(shape))));
        debug_assert_eq!(g.ty(view).shape.0, with_one(&g.ty(w).shape, axes[k]));
        cur = view;
    }
    debug_assert!(b.chain.iter().all(|&w| is_view_op(&g.ops[w])));
    cur
}

/// The graph with dead values dropped and every op after its operands (the bound's ops
/// were appended at the end, after the attention that reads them).
fn reorder_live(g: &Graph) -> Graph {
    let mut live: Vec<bool> = vec![false; g.ops.len()];
    let mut stack: Vec<Value> = g.outputs.iter().map(|(_, v)| *v).collect();
    stack.extend(g.inputs.iter().map(|(_, v)| *v));
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut live[v.index()], true) {
            continue;
        }
        stack.extend(g.ops[v].args());
    }
    let mut out = Graph::new(g.name.clone());
    let mut map: HashMap<Value, Value> = HashMap::new();
    // Depth-first from each live value in order: operands first.
    fn visit(g: &Graph, v: Value, out: &mut Graph, map: &mut HashMap<Value, Value>) -> Value {
        if let Some(&n) = map.get(&v) {
            return n;
        }
        let mut op = g.ops[v].clone();
        for a in op.args_mut() {
            *a = visit(g, *a, out, map);
        }
        let n = out.push(op, g.ty(v).clone());
        map.insert(v, n);
        n
    }
    for (_, v) in &g.inputs {
        visit(g, *v, &mut out, &mut map);
    }
    for (v, _) in g.ops.iter() {
        if live[v.index()] {
            visit(g, v, &mut out, &mut map);
        }
    }
    out.inputs = g.inputs.iter().map(|(n, v)| (n.clone(), map[v])).collect();
    out.outputs = g.outputs.iter().map(|(n, v)| (n.clone(), map[v])).collect();
    out
}
