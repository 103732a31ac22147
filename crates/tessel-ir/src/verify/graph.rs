//! Graph IR, fusion and schedule checks.

use super::{Errors, VerifyError};
use crate::builder::{result_type, rule_name};
use crate::entities::Value;
use crate::graph::{Fusion, Graph, Op, Schedules};
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

/// The op's type rule ([`result_type`], where every `graph.*` type rule is stated), given
/// the declared result type: its error, or one message when the rule's type is not the
/// declared one.
fn types(g: &Graph, v: Value, op: &Op, e: &mut Errors) {
    let declared = g.ty(v);
    match result_type(g, op, Some(declared)) {
        Err(te) => e.push(te.rule, v.to_string(), te.message),
        Ok(t) if t != *declared => {
            let operands: Vec<String> = op
                .args()
                .iter()
                .map(|a| format!("{a} is {}", g.ty(*a)))
                .collect();
            e.push(
                rule_name(op),
                v.to_string(),
                format!(
                    "the result is declared {declared}, but the rule gives {t} (operands: {})",
                    operands.join(", ")
                ),
            );
        }
        Ok(_) => {}
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
        let Op::Update { dst, rows, at } = op else {
            continue;
        };
        if !op.args().iter().all(|a| exists(g, *a)) || *dst >= u {
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
                // An update's result is read from its own buffer, never computed again.
                from_dst[x.index()] = !matches!(xop, Op::Update { .. }) && args.iter().any(reads);
                continue;
            }
            // A rows update may not compute its rows or positions from `dst`; a whole
            // update's kernel reads `dst` at the element it writes only (`fuse` rule 6).
            let read: Vec<&Value> = match at {
                _ if x != u => args.iter().collect(),
                Some(at) => vec![rows, &at.pos],
                None => vec![],
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
