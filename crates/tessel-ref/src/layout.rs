//! The graph walk, shape checks and data movement shared by the graph-level references (the f64
//! [`crate::oracle`] and the dtype-following [`crate::reference`]): what each graph op
//! requires of its operands' shapes, and the ops that only move elements, generic over the
//! element type.

use crate::oracle::OracleError;
use crate::tensor::Tensor;
use tessel_ir::builder::{result_type, rule_name};
use tessel_ir::graph::{Graph, Op};
use tessel_ir::{Shape, Value};

/// The values of a graph during [`walk`]: each op's elements, by value index, `None` before
/// the op and after its last use.
pub type Values<T> = [Option<Vec<T>>];

/// Evaluates every op of `g` in order with `eval` (given the op's value, the op and the
/// values so far), after [`check_op`]; frees each value after its last use, so the live set
/// bounds memory, not the graph; returns the outputs' elements in `g.outputs` order.
///
/// Errors: [`OracleError::BadInputs`] if `inputs` has not one tensor per step input, what
/// `check_op` and `eval` report, and [`OracleError::Malformed`] for an op evaluated to the
/// wrong element count.
pub fn walk<T: Clone>(
    g: &Graph,
    inputs: &[Tensor],
    mut eval: impl FnMut(Value, &Op, &Values<T>) -> Result<Vec<T>, OracleError>,
) -> Result<Vec<Vec<T>>, OracleError> {
    if inputs.len() != g.inputs.len() {
        return Err(OracleError::BadInputs(format!(
            "{} given, the step takes {}",
            inputs.len(),
            g.inputs.len()
        )));
    }
    let mut uses = g.use_counts();
    let mut vals: Vec<Option<Vec<T>>> = vec![None; g.ops.len()];
    for (v, op) in g.ops.iter() {
        check_op(g, v, op)?;
        let data = eval(v, op, &vals)?;
        if data.len() as u64 != g.ty(v).shape.numel() {
            return Err(malformed(v, "evaluated to the wrong element count"));
        }
        vals[v.as_u32() as usize] = Some(data);
        for a in op.args() {
            uses[a] -= 1;
            if uses[a] == 0 {
                vals[a.as_u32() as usize] = None;
            }
        }
    }
    g.outputs
        .iter()
        .map(|(_, v)| {
            vals[v.as_u32() as usize]
                .clone()
                .ok_or_else(|| malformed(*v, "output never computed"))
        })
        .collect()
}

/// The elements of operand `v` of the op defining `at`.
pub fn operand<T>(vals: &Values<T>, v: Value, at: Value) -> Result<&[T], OracleError> {
    vals.get(v.as_u32() as usize)
        .and_then(|x| x.as_deref())
        .ok_or_else(|| malformed(at, format!("operand {v} is not defined before use")))
}

/// An [`OracleError::Malformed`] at `value`.
pub(crate) fn malformed(value: Value, msg: impl Into<String>) -> OracleError {
    OracleError::Malformed {
        value,
        msg: msg.into(),
    }
}

/// Checks `op` defining `v` before the references evaluate it: the op is one they evaluate,
/// and its declared type is the one its type rule gives
/// ([`tessel_ir::builder::result_type`], the verifier's `graph.*` rules, checked again so
/// the references never panic on a malformed graph).
///
/// Errors: [`OracleError::Malformed`] at `v` for a gradient placeholder or a fused
/// attention (not evaluated here), for the rule's error (with its name) and for a declared
/// type that is not the rule's.
pub fn check_op(g: &Graph, v: Value, op: &Op) -> Result<(), OracleError> {
    match op {
        // The references evaluate a graph the `grad` pass has differentiated
        // (`tessel_passes::grad::run`), which replaces every placeholder.
        Op::Grad { .. } => {
            return Err(malformed(
                v,
                "a gradient placeholder: differentiate the graph (the `grad` pass) before evaluating it",
            ))
        }
        // The references judge the program as written (the checked graph); this op exists
        // only after the `attention` pass has rewritten it.
        Op::Attention { .. } | Op::AttentionStat { .. } => {
            return Err(malformed(
                v,
                "a fused attention: the references evaluate the checked graph, before `attention`",
            ))
        }
        _ => {}
    }
    let Some(declared) = g.types.get(v) else {
        return Err(malformed(v, "has no type"));
    };
    match result_type(g, op, Some(declared)) {
        Err(e) => Err(malformed(v, e.to_string())),
        Ok(t) if t != *declared => Err(malformed(
            v,
            format!("{}: declared {declared}, the rule gives {t}", rule_name(op)),
        )),
        Ok(_) => Ok(()),
    }
}

/// Row-major multi-index of flat index `i` in `shape`, into `idx`.
pub fn unravel(mut i: u64, shape: &[u64], idx: &mut [u64]) {
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

/// `(outer, len, inner)` of `axis` in `shape`: element `(o, r, k)` of the axis' lanes is
/// at flat index `(o · len + r) · inner + k`.
pub fn lanes(shape: &[u64], axis: usize) -> (usize, usize, usize) {
    let inner = shape[axis + 1..].iter().product::<u64>() as usize;
    let outer = shape[..axis].iter().product::<u64>() as usize;
    (outer, shape[axis] as usize, inner)
}

/// `src` (of shape `from`) broadcast to `to` (same rank; `from`'s dims 1 or equal).
pub fn broadcast<T: Copy>(src: &[T], from: &[u64], to: &[u64]) -> Vec<T> {
    let sstr = Shape(from.to_vec()).strides();
    let n: u64 = to.iter().product();
    let mut idx = vec![0u64; to.len()];
    (0..n)
        .map(|i| {
            unravel(i, to, &mut idx);
            let j: u64 = (0..to.len())
                .map(|d| if from[d] == 1 { 0 } else { idx[d] * sstr[d] })
                .sum();
            src[j as usize]
        })
        .collect()
}

/// `src` (of shape `from`) with its axes permuted: result axis `i` is `from`'s `perm[i]`.
pub fn permute<T: Copy>(src: &[T], from: &[u64], perm: &[u32]) -> Vec<T> {
    let to: Vec<u64> = perm.iter().map(|&p| from[p as usize]).collect();
    let sstr = Shape(from.to_vec()).strides();
    let n: u64 = to.iter().product();
    let mut idx = vec![0u64; to.len()];
    (0..n)
        .map(|i| {
            unravel(i, &to, &mut idx);
            let j: u64 = (0..to.len()).map(|d| idx[d] * sstr[perm[d] as usize]).sum();
            src[j as usize]
        })
        .collect()
}

/// `len` positions of `src` (of shape `from`) along `axis`, from `start`.
pub fn slice<T: Copy>(src: &[T], from: &[u64], axis: usize, start: u64, len: u64) -> Vec<T> {
    let (outer, sl, inner) = lanes(from, axis);
    let mut out = Vec::with_capacity(outer * len as usize * inner);
    for o in 0..outer {
        let b = (o * sl + start as usize) * inner;
        out.extend_from_slice(&src[b..b + len as usize * inner]);
    }
    out
}

/// `parts` (each with its length along `axis`) joined along `axis` of `shape`.
pub fn concat<T: Copy>(parts: &[(&[T], u64)], shape: &[u64], axis: usize) -> Vec<T> {
    let (outer, _, inner) = lanes(shape, axis);
    let mut out = Vec::with_capacity(shape.iter().product::<u64>() as usize);
    for o in 0..outer {
        for (data, len) in parts {
            let chunk = *len as usize * inner;
            out.extend_from_slice(&data[o * chunk..(o + 1) * chunk]);
        }
    }
    out
}

/// `dst` (of shape `shape`) with `rows` (of shape `rows_shape`: `shape` but for `axis`)
/// written along `axis` from position `pos[b]` for each index `b` of the first dim; a row
/// whose position `pos[b] + i` falls outside `0 .. shape[axis]` is not written (the
/// semantics of `Op::Update`).
pub fn update<T: Copy>(
    dst: &[T],
    shape: &[u64],
    rows: &[T],
    rows_shape: &[u64],
    pos: &[i64],
    axis: usize,
) -> Vec<T> {
    let mut out = dst.to_vec();
    let dstr = Shape(shape.to_vec()).strides();
    let mut idx = vec![0u64; rows_shape.len()];
    for (j, &x) in rows.iter().enumerate() {
        unravel(j as u64, rows_shape, &mut idx);
        let at = pos[idx[0] as usize] + idx[axis] as i64;
        if at < 0 || at >= shape[axis] as i64 {
            continue;
        }
        let flat: u64 = (0..shape.len())
            .map(|d| if d == axis { at as u64 } else { idx[d] } * dstr[d])
            .sum();
        out[flat as usize] = x;
    }
    out
}

/// `src` (of shape `from`) read along `axis` at the positions `pos` (of shape `to`: `from`
/// but along `axis`), each already a position inside the axis
/// ([`tessel_ir::graph::gather_position`]): `out[i] = src[i with i_axis := pos[i]]` (the
/// semantics of `Op::Gather`).
pub fn gather<T: Copy>(src: &[T], from: &[u64], to: &[u64], pos: &[u64], axis: usize) -> Vec<T> {
    let sstr = Shape(from.to_vec()).strides();
    let mut idx = vec![0u64; to.len()];
    pos.iter()
        .enumerate()
        .map(|(j, &p)| {
            unravel(j as u64, to, &mut idx);
            let flat: u64 = (0..to.len())
                .map(|d| if d == axis { p } else { idx[d] } * sstr[d])
                .sum();
            src[flat as usize]
        })
        .collect()
}
