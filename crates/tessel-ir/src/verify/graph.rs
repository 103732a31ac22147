//! Graph IR, fusion and schedule checks.

use super::{Errors, VerifyError};
use crate::entities::Value;
use crate::graph::{BinaryOp, Fusion, Graph, Op, ReduceOp, Schedules, UnaryOp};
use crate::types::{DType, TensorType};
use cranelift_entity::EntityRef;

/// Checks `g` and, when given, its fusion groups and schedules against the invariants in
/// the module documentation. Returns every broken invariant found, not just the first.
pub fn verify_graph(
    g: &Graph,
    fusion: Option<&Fusion>,
    schedules: Option<&Schedules>,
) -> Result<(), Vec<VerifyError>> {
    let mut e = Errors::default();
    ops(g, &mut e);
    inputs_outputs(g, &mut e);
    in_place(g, &mut e);
    if let Some(f) = fusion {
        super::schedule::fusion_checks(g, f, &mut e);
    }
    if let Some(s) = schedules {
        super::schedule::schedule_checks(g, fusion, s, &mut e);
    }
    e.finish()
}

pub(super) fn exists(g: &Graph, v: Value) -> bool {
    v.index() < g.ops.len()
}

fn ops(g: &Graph, e: &mut Errors) {
    for (v, op) in g.ops.iter() {
        let mut ordered = true;
        for a in op.args() {
            if !exists(g, a) {
                e.push(
                    "graph.order",
                    v.to_string(),
                    format!("operand {a} is not a value"),
                );
                ordered = false;
            } else if a >= v {
                e.push(
                    "graph.order",
                    v.to_string(),
                    format!("operand {a} is used before its definition"),
                );
                ordered = false;
            }
        }
        if ordered {
            types(g, v, op, e);
        }
    }
}

/// `s` is exactly representable in a binary float with `p` significand bits, minimum
/// normal exponent `emin` and largest finite value `max`.
fn fits_float(x: f64, p: i32, emin: i32, max: f64) -> bool {
    if !x.is_finite() {
        return true;
    }
    if x == 0.0 {
        return true;
    }
    if x.abs() > max {
        return false;
    }
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // An f64 subnormal is far below every smaller format's range.
        return false;
    }
    let e = biased - 1023;
    let k = p - 1 - e.max(emin);
    // x · 2^k is exact in f64 for the k that can occur here (|k| < 200).
    let scaled = x * 2f64.powi(k);
    scaled.is_finite() && scaled.fract() == 0.0
}

pub(crate) fn const_fits(x: f64, dtype: DType) -> Result<(), String> {
    let ok = match dtype {
        DType::F32 => fits_float(x, 24, -126, f32::MAX as f64),
        DType::Bf16 => fits_float(x, 8, -126, 3.3895313892515355e38),
        DType::F16 => fits_float(x, 11, -14, 65504.0),
        DType::I32 => {
            return if x.fract() == 0.0 && (-2147483648.0..2147483648.0).contains(&x) {
                Ok(())
            } else {
                Err(format!("{x:?} is not an i32 (integral, in [-2^31, 2^31))"))
            }
        }
        DType::Bool => {
            return if x == 0.0 || x == 1.0 {
                Ok(())
            } else {
                Err(format!("{x:?} is not a bool (0 or 1)"))
            }
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{x:?} is not exactly representable in {dtype}"))
    }
}

fn types(g: &Graph, v: Value, op: &Op, e: &mut Errors) {
    let rt = g.ty(v);
    let at = |a: &Value| g.ty(*a);
    let loc = v.to_string();
    let mut err = |rule: &'static str, msg: String| e.push(rule, loc.clone(), msg);
    let same_dtype = |a: &TensorType| a.dtype == rt.dtype;
    match op {
        Op::Input { .. } => {}
        Op::Const { value } => {
            if let Err(m) = const_fits(*value, rt.dtype) {
                err("graph.const", m);
            }
        }
        Op::Iota { axis } => {
            if *axis as usize >= rt.shape.rank() {
                err(
                    "graph.iota",
                    format!("axis {axis} is out of range for {rt}"),
                );
            }
            if rt.dtype == DType::Bool {
                err("graph.iota", "iota of bool".to_string());
            }
        }
        Op::Unary { op, arg } => {
            let a = at(arg);
            if a != rt {
                err(
                    "graph.unary",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            let ok = match op {
                UnaryOp::Not => a.dtype == DType::Bool,
                UnaryOp::Neg | UnaryOp::Abs => a.dtype != DType::Bool,
                _ => a.dtype.is_float(),
            };
            if !ok {
                err(
                    "graph.unary",
                    format!("{op:?} is not defined on {}", a.dtype),
                );
            }
        }
        Op::Binary { op, lhs, rhs } => {
            let (l, r) = (at(lhs), at(rhs));
            if l != r {
                err(
                    "graph.binary",
                    format!("operands differ: {lhs} is {l}, {rhs} is {r}"),
                );
            }
            if l.shape != rt.shape {
                err(
                    "graph.binary",
                    format!("result shape {} is not the operands' {}", rt.shape, l.shape),
                );
            }
            use BinaryOp::*;
            let cmp = matches!(op, Eq | Ne | Lt | Le | Gt | Ge);
            let want = if cmp { DType::Bool } else { l.dtype };
            if rt.dtype != want {
                err(
                    "graph.binary",
                    format!("{op:?} of {} gives {want}, not {}", l.dtype, rt.dtype),
                );
            }
            let ok = match op {
                And | Or => l.dtype == DType::Bool,
                Pow => l.dtype.is_float(),
                Add | Sub | Mul | Div | Rem | Min | Max => l.dtype != DType::Bool,
                Eq | Ne | Lt | Le | Gt | Ge => true,
            };
            if !ok {
                err(
                    "graph.binary",
                    format!("{op:?} is not defined on {}", l.dtype),
                );
            }
        }
        Op::Attention { logits, v, bound } => {
            let (l, x) = (at(logits), at(v));
            if let Some(b) = bound {
                let b = at(b);
                let mut want = l.shape.0.clone();
                if let Some(last) = want.last_mut() {
                    *last = 1;
                }
                if b.dtype != DType::I32 || b.shape.0 != want {
                    err(
                        "graph.attention",
                        format!("the bound is {b}, not i32 with the logits' shape and 1 key"),
                    );
                }
            }
            let (ls, xs, os) = (&l.shape.0, &x.shape.0, &rt.shape.0);
            let n = ls.len();
            let ok = n >= 2
                && xs.len() == n
                && os.len() == n
                && ls[..n - 2] == xs[..n - 2]
                && os[..n - 2] == ls[..n - 2]
                && ls[n - 1] == xs[n - 2]
                && os[n - 2] == ls[n - 2]
                && os[n - 1] == xs[n - 1];
            if !ok {
                err(
                    "graph.attention",
                    format!(
                        "softmax({l}) @ {x} does not give {rt} ([.., M, N] @ [.., N, E] -> [.., M, E])"
                    ),
                );
            }
            if l.dtype != DType::F32 || x.dtype != rt.dtype || !x.dtype.is_float() {
                err(
                    "graph.attention",
                    format!(
                        "logits must be f32 and v and the result one float dtype: {} {} {}",
                        l.dtype, x.dtype, rt.dtype
                    ),
                );
            }
        }
        Op::MatMul { lhs, rhs } => {
            let (l, r) = (at(lhs), at(rhs));
            let (ls, rs, os) = (&l.shape.0, &r.shape.0, &rt.shape.0);
            let ok = ls.len() >= 2
                && ls.len() == rs.len()
                && os.len() == ls.len()
                && ls[..ls.len() - 2] == rs[..rs.len() - 2]
                && os[..os.len() - 2] == ls[..ls.len() - 2]
                && ls[ls.len() - 1] == rs[rs.len() - 2]
                && os[os.len() - 2] == ls[ls.len() - 2]
                && os[os.len() - 1] == rs[rs.len() - 1];
            if !ok {
                err(
                    "graph.matmul",
                    format!("{l} @ {r} does not give {rt} ([.., M, K] @ [.., K, N] -> [.., M, N])"),
                );
            }
            if l.dtype != r.dtype || l.dtype != rt.dtype || !l.dtype.is_float() {
                err(
                    "graph.matmul",
                    format!(
                        "operands {} and {} and result {} must be one float dtype",
                        l.dtype, r.dtype, rt.dtype
                    ),
                );
            }
        }
        Op::Select {
            cond,
            on_true,
            on_false,
        } => {
            let c = at(cond);
            if c.dtype != DType::Bool || c.shape != rt.shape {
                err(
                    "graph.select",
                    format!("condition {cond} is {c}, expected bool{}", rt.shape),
                );
            }
            for a in [on_true, on_false] {
                if at(a) != rt {
                    err(
                        "graph.select",
                        format!("arm {a} is {}, the result {rt}", at(a)),
                    );
                }
            }
        }
        Op::Cast { arg } => {
            if at(arg).shape != rt.shape {
                err(
                    "graph.cast",
                    format!(
                        "operand {arg} is {}, the result {rt}: shapes differ",
                        at(arg)
                    ),
                );
            }
        }
        Op::Broadcast { arg } => {
            let a = at(arg);
            if !same_dtype(a) {
                err(
                    "graph.broadcast",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            if a.shape.rank() != rt.shape.rank() {
                err(
                    "graph.broadcast",
                    format!(
                        "rank of {arg} ({}) is not the result's ({})",
                        a.shape, rt.shape
                    ),
                );
            } else if a
                .shape
                .0
                .iter()
                .zip(&rt.shape.0)
                .any(|(x, y)| *x != 1 && x != y)
            {
                err(
                    "graph.broadcast",
                    format!("{} does not broadcast to {}", a.shape, rt.shape),
                );
            }
        }
        Op::Reshape { arg } => {
            let a = at(arg);
            if !same_dtype(a) {
                err(
                    "graph.reshape",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            if a.shape.0.iter().try_fold(1u64, |p, d| p.checked_mul(*d))
                != rt.shape.0.iter().try_fold(1u64, |p, d| p.checked_mul(*d))
            {
                err(
                    "graph.reshape",
                    format!("{} and {} have different element counts", a.shape, rt.shape),
                );
            }
        }
        Op::Permute { arg, perm } => {
            let a = at(arg);
            if !same_dtype(a) {
                err(
                    "graph.permute",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            let n = a.shape.rank();
            let mut seen = vec![false; n];
            let is_perm = perm.len() == n
                && perm.iter().all(|&p| {
                    let p = p as usize;
                    p < n && !std::mem::replace(&mut seen[p], true)
                });
            if !is_perm {
                err(
                    "graph.permute",
                    format!("{perm:?} is not a permutation of the {n} axes of {arg}"),
                );
            } else if rt.shape.rank() != n
                || perm
                    .iter()
                    .enumerate()
                    .any(|(i, &p)| rt.shape.0[i] != a.shape.0[p as usize])
            {
                err(
                    "graph.permute",
                    format!(
                        "permuting {} by {perm:?} does not give {}",
                        a.shape, rt.shape
                    ),
                );
            }
        }
        Op::Reduce { op, arg, axis } => {
            let a = at(arg);
            let index = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
            if index && rt.dtype != DType::I32 {
                err(
                    "graph.reduce",
                    format!("an index reduction gives i32, not {}", rt.dtype),
                );
            } else if !index && !same_dtype(a) {
                err(
                    "graph.reduce",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            let float_only = matches!(op, ReduceOp::Mean | ReduceOp::LogSumExp);
            if (float_only && !a.dtype.is_float()) || (index && a.dtype == DType::Bool) {
                err(
                    "graph.reduce",
                    format!(
                        "{} is not defined on {}",
                        crate::text::reduce_name(*op),
                        a.dtype
                    ),
                );
            }
            let ax = *axis as usize;
            if ax >= a.shape.rank() {
                err(
                    "graph.reduce",
                    format!("axis {axis} is out of range for {a}"),
                );
            } else {
                let mut want = a.shape.clone();
                want.0[ax] = 1;
                if rt.shape != want {
                    err(
                        "graph.reduce",
                        format!(
                            "reducing axis {axis} of {} gives {want}, not {}",
                            a.shape, rt.shape
                        ),
                    );
                }
            }
        }
        Op::Slice { arg, axis, start } => {
            let a = at(arg);
            if !same_dtype(a) {
                err(
                    "graph.slice",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            let ax = *axis as usize;
            if ax >= a.shape.rank() || a.shape.rank() != rt.shape.rank() {
                err(
                    "graph.slice",
                    format!(
                        "axis {axis} of {} is out of range or ranks differ from {}",
                        a.shape, rt.shape
                    ),
                );
            } else {
                let end = start.checked_add(rt.shape.0[ax]);
                if end.is_none_or(|end| end > a.shape.0[ax]) {
                    err(
                        "graph.slice",
                        format!(
                            "slice {start}..{start}+{} is out of bounds of axis {axis} of {}",
                            rt.shape.0[ax], a.shape
                        ),
                    );
                }
                if (0..a.shape.rank()).any(|i| i != ax && a.shape.0[i] != rt.shape.0[i]) {
                    err(
                        "graph.slice",
                        format!("dims off axis {axis} differ: {} vs {}", a.shape, rt.shape),
                    );
                }
            }
        }
        Op::Concat { args, axis } => {
            let ax = *axis as usize;
            if args.is_empty() {
                err("graph.concat", "no operands".to_string());
            } else if ax >= rt.shape.rank() {
                err(
                    "graph.concat",
                    format!("axis {axis} is out of range for {rt}"),
                );
            } else {
                let mut total = 0u64;
                for a in args {
                    let t = at(a);
                    if !same_dtype(t)
                        || t.shape.rank() != rt.shape.rank()
                        || (0..t.shape.rank()).any(|i| i != ax && t.shape.0[i] != rt.shape.0[i])
                    {
                        err(
                            "graph.concat",
                            format!("operand {a} is {t}, which does not join into {rt} along axis {axis}"),
                        );
                    } else {
                        total = total.saturating_add(t.shape.0[ax]);
                    }
                }
                if total != rt.shape.0[ax] {
                    err(
                        "graph.concat",
                        format!(
                            "sizes along axis {axis} sum to {total}, not {}",
                            rt.shape.0[ax]
                        ),
                    );
                }
            }
        }
        Op::Update {
            dst,
            rows,
            pos,
            axis,
        } => {
            let (d, r, p) = (at(dst), at(rows), at(pos));
            let ax = *axis as usize;
            let n = d.shape.rank();
            if d != rt || r.dtype != rt.dtype {
                err(
                    "graph.update",
                    format!("dst {dst} is {d} and rows {rows} are {r}: both must have the result's dtype, dst its type {rt}"),
                );
            }
            if ax == 0 || ax >= n {
                err(
                    "graph.update",
                    format!("axis {axis} of {d}: an update writes along an axis after the first"),
                );
            } else {
                let fits = r.shape.rank() == n
                    && (0..n).all(|i| i == ax || r.shape.0[i] == d.shape.0[i])
                    && r.shape.0[ax] <= d.shape.0[ax]
                    && d.shape.0[ax] <= i32::MAX as u64;
                if !fits {
                    err(
                        "graph.update",
                        format!(
                            "rows {} do not fit {} along axis {axis} (same dims but the axis, at most its length, which is below 2^31)",
                            r.shape, d.shape
                        ),
                    );
                }
            }
            if p.dtype != DType::I32 || n == 0 || p.shape.0 != [d.shape.0[0]] {
                err(
                    "graph.update",
                    format!("positions {pos} are {p}, not i32 with one entry per index of {dst}'s first dim"),
                );
            }
        }
        Op::TopK {
            arg, axis, indices, ..
        } => {
            let a = at(arg);
            let ax = *axis as usize;
            let want = if *indices { DType::I32 } else { a.dtype };
            if rt.dtype != want || a.dtype == DType::Bool {
                err(
                    "graph.topk",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            if ax >= a.shape.rank() || a.shape.rank() != rt.shape.rank() {
                err(
                    "graph.topk",
                    format!("axis {axis} is out of range or ranks differ: {a} and {rt}"),
                );
            } else {
                let k = rt.shape.0[ax];
                let off_axis =
                    (0..a.shape.rank()).any(|i| i != ax && a.shape.0[i] != rt.shape.0[i]);
                if k < 1 || k > a.shape.0[ax] || off_axis {
                    err(
                        "graph.topk",
                        format!("{rt} is not k of {a} along axis {axis} (1 <= k <= its length)"),
                    );
                }
            }
        }
        Op::Gather { arg, index, axis } => {
            let (a, i) = (at(arg), at(index));
            let ax = *axis as usize;
            let n = a.shape.rank();
            if a.dtype != rt.dtype || i.dtype != DType::I32 || i.shape != rt.shape {
                err(
                    "graph.gather",
                    format!("operand {arg} is {a} and index {index} is {i}: the result {rt} must have the operand's dtype and the index's shape, the index i32"),
                );
            }
            if ax >= n {
                err(
                    "graph.gather",
                    format!("axis {axis} is out of range for {a}"),
                );
            } else {
                let fits = i.shape.rank() == n
                    && (0..n).all(|d| d == ax || i.shape.0[d] == a.shape.0[d])
                    && a.shape.0[ax] <= i32::MAX as u64;
                if !fits {
                    err(
                        "graph.gather",
                        format!(
                            "index {} does not fit {} (same dims but along axis {axis}, whose length is below 2^31)",
                            i.shape, a.shape
                        ),
                    );
                }
            }
        }
        Op::Grad {
            wrt,
            outputs,
            seeds,
        } => {
            let w = at(wrt);
            if w != rt || !w.dtype.is_float() {
                err(
                    "graph.grad",
                    format!("the gradient {rt} must have the float type of {wrt}, {w}"),
                );
            }
            if outputs.is_empty() || outputs.len() != seeds.len() {
                err(
                    "graph.grad",
                    format!(
                        "{} outputs and {} seeds: one seed per output, at least one",
                        outputs.len(),
                        seeds.len()
                    ),
                );
            }
            for (o, s) in outputs.iter().zip(seeds) {
                if at(o) != at(s) || !at(o).dtype.is_float() {
                    err(
                        "graph.grad",
                        format!(
                            "seed {s} is {}, output {o} is {}: one float type",
                            at(s),
                            at(o)
                        ),
                    );
                }
            }
        }
        Op::Cumsum { arg, axis } => {
            let a = at(arg);
            if a != rt || a.dtype == DType::Bool {
                err(
                    "graph.cumsum",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            if *axis as usize >= a.shape.rank() {
                err(
                    "graph.cumsum",
                    format!("axis {axis} is out of range for {a}"),
                );
            }
        }
        Op::Softmax { arg, axis } => {
            let a = at(arg);
            if a != rt {
                err(
                    "graph.softmax",
                    format!("operand {arg} is {a}, the result {rt}"),
                );
            }
            if !a.dtype.is_float() {
                err(
                    "graph.softmax",
                    format!("softmax is not defined on {}", a.dtype),
                );
            }
            if *axis as usize >= a.shape.rank() {
                err(
                    "graph.softmax",
                    format!("axis {axis} is out of range for {a}"),
                );
            }
        }
    }
}

fn inputs_outputs(g: &Graph, e: &mut Errors) {
    let mut seen = vec![false; g.inputs.len()];
    for (v, op) in g.ops.iter() {
        if let Op::Input { index, .. } = op {
            let i = *index as usize;
            match g.inputs.get(i) {
                None => e.push(
                    "graph.input",
                    v.to_string(),
                    format!(
                        "input index {index} is out of range ({} inputs)",
                        g.inputs.len()
                    ),
                ),
                Some((n, x)) => {
                    if *x != v {
                        e.push(
                            "graph.input",
                            v.to_string(),
                            format!("input {index} (\"{n}\") is {x}, not this value"),
                        );
                    }
                    if std::mem::replace(&mut seen[i], true) {
                        e.push(
                            "graph.input",
                            v.to_string(),
                            format!("input index {index} is used twice"),
                        );
                    }
                }
            }
        }
    }
    for (i, (n, v)) in g.inputs.iter().enumerate() {
        let ok =
            exists(g, *v) && matches!(g.ops[*v], Op::Input { index, .. } if index as usize == i);
        if !ok {
            e.push(
                "graph.input",
                format!("input {i} (\"{n}\")"),
                format!("{v} is not an `input {i}` op"),
            );
        }
    }
    for (n, v) in &g.outputs {
        if !exists(g, *v) {
            e.push(
                "graph.output",
                format!("output \"{n}\""),
                format!("{v} is not a value"),
            );
        }
    }
}

/// Rules `graph.update` (in place) and `graph.inout`: an update writes into the buffer of
/// its chain's `inout` input, so the value it overwrites must never be needed again.
fn in_place(g: &Graph, e: &mut Errors) {
    let n = g.ops.len();
    let mut updated_by: Vec<Option<Value>> = vec![None; n];
    for (u, op) in g.ops.iter() {
        let Op::Update { dst, rows, pos, .. } = op else {
            continue;
        };
        if !exists(g, *dst) || *dst >= u || !exists(g, *rows) || !exists(g, *pos) {
            continue; // `graph.order` says why
        }
        let root = g.storage_root(*dst);
        if !g.is_inout_input(root) {
            e.push(
                "graph.update",
                u.to_string(),
                format!("dst {dst} is not an `inout` input or an update of one"),
            );
        }
        if let Some(other) = updated_by[dst.index()].replace(u) {
            e.push(
                "graph.update",
                u.to_string(),
                format!("{dst} is already updated by {other}: one value is overwritten once"),
            );
        }
        // The values computed from `dst` other than through this update: their kernels must
        // all run before this one, which overwrites `dst` in place.
        let mut from_dst = vec![false; n];
        from_dst[dst.index()] = true;
        for (x, xop) in g.ops.iter().skip(dst.index() + 1) {
            let reads = |a: &Value| exists(g, *a) && *a < x && from_dst[a.index()];
            let args = xop.args();
            if x < u {
                from_dst[x.index()] = args.iter().any(reads);
                continue;
            }
            let read: Vec<&Value> = if x == u {
                vec![rows, pos]
            } else {
                args.iter().collect()
            };
            if let Some(a) = read.into_iter().find(|a| reads(a)) {
                let what = if a == dst {
                    format!("reads {dst}")
                } else {
                    format!("reads {a}, computed from {dst}")
                };
                e.push(
                    "graph.update",
                    x.to_string(),
                    format!("{what}, which update {u} (defined before) overwrites in place"),
                );
            }
        }
    }
    for (v, op) in g.ops.iter() {
        if !matches!(op, Op::Input { inout: true, .. }) {
            continue;
        }
        let Some((name, _)) = g.inputs.iter().find(|(_, x)| *x == v) else {
            continue; // `graph.input`
        };
        let mut end = v;
        while let Some(u) = updated_by[end.index()] {
            end = u;
        }
        if !g.outputs.iter().any(|(o, x)| o == name && *x == end) {
            e.push(
                "graph.inout",
                v.to_string(),
                format!("inout input \"{name}\" is not returned as output \"{name}\" = {end}, the end of its updates"),
            );
        }
    }
}
