//! The graph walk, shape checks and data movement shared by the graph-level references (the f64
//! [`crate::oracle`] and the dtype-following [`crate::reference`]): what each graph op
//! requires of its operands' shapes, and the ops that only move elements, generic over the
//! element type.

use crate::oracle::OracleError;
use crate::tensor::Tensor;
use tessel_ir::graph::{Graph, Op, UnaryOp};
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

/// Checks the shape rules of `op` defining `v`, and that math functions get floats (the
/// verifier's rules, checked again so the references never panic on a malformed graph).
pub fn check_op(g: &Graph, v: Value, op: &Op) -> Result<(), OracleError> {
    let ty = g.ty(v);
    let shape = &ty.shape.0;
    let same_shape = |a: Value| -> Result<(), OracleError> {
        if g.ty(a).shape != ty.shape {
            return Err(malformed(
                v,
                format!(
                    "operand {a} has shape {}, expected {}",
                    g.ty(a).shape,
                    ty.shape
                ),
            ));
        }
        Ok(())
    };
    let src = |a: &Value| &g.ty(*a).shape.0;
    match op {
        Op::Input { .. } | Op::Const { .. } => Ok(()),
        // The references judge the program as written (the checked graph); this op exists
        // only after the `attention` pass has rewritten it.
        // The references evaluate a graph the `grad` pass has differentiated
        // (`tessel_passes::grad::run`), which replaces every placeholder.
        Op::Grad { .. } => Err(malformed(
            v,
            "a gradient placeholder: differentiate the graph (the `grad` pass) before evaluating it",
        )),
        Op::Attention { .. } => Err(malformed(
            v,
            "a fused attention: the references evaluate the checked graph, before `attention`",
        )),
        Op::Iota { axis } => {
            if *axis as usize >= shape.len() {
                return Err(malformed(
                    v,
                    format!("iota axis {axis} of rank {}", shape.len()),
                ));
            }
            Ok(())
        }
        Op::Unary { arg, .. } | Op::Cast { arg } | Op::Softmax { arg, .. } => {
            same_shape(*arg)?;
            if let Op::Unary { op, .. } = op {
                let dt = g.ty(*arg).dtype;
                let math = !matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Not);
                if math && !dt.is_float() {
                    return Err(malformed(v, format!("{op:?} of a {dt} value")));
                }
            }
            if let Op::Softmax { axis, .. } = op {
                if *axis as usize >= shape.len() || !ty.dtype.is_float() {
                    return Err(malformed(v, format!("softmax on axis {axis} of {ty}")));
                }
            }
            Ok(())
        }
        Op::Binary { lhs, rhs, .. } => {
            same_shape(*lhs)?;
            same_shape(*rhs)
        }
        Op::Select {
            cond,
            on_true,
            on_false,
        } => {
            same_shape(*cond)?;
            same_shape(*on_true)?;
            same_shape(*on_false)
        }
        Op::Broadcast { arg } => {
            let s = src(arg);
            if s.len() != shape.len() || s.iter().zip(shape).any(|(&a, &d)| a != 1 && a != d) {
                return Err(malformed(
                    v,
                    format!("cannot broadcast {} to {}", g.ty(*arg).shape, ty.shape),
                ));
            }
            Ok(())
        }
        Op::Reshape { arg } => {
            if g.ty(*arg).shape.numel() != ty.shape.numel() {
                return Err(malformed(
                    v,
                    format!("cannot reshape {} to {}", g.ty(*arg).shape, ty.shape),
                ));
            }
            Ok(())
        }
        Op::Permute { arg, perm } => {
            let s = src(arg);
            let mut seen = vec![false; s.len()];
            let ok = perm.len() == s.len()
                && perm.len() == shape.len()
                && perm.iter().enumerate().all(|(i, &p)| {
                    let p = p as usize;
                    p < s.len() && !std::mem::replace(&mut seen[p], true) && s[p] == shape[i]
                });
            if !ok {
                return Err(malformed(
                    v,
                    format!(
                        "permutation {perm:?} of {} to {}",
                        g.ty(*arg).shape,
                        ty.shape
                    ),
                ));
            }
            Ok(())
        }
        Op::Reduce { arg, axis, .. } => {
            let s = src(arg);
            let ax = *axis as usize;
            let mut want = s.clone();
            if ax < want.len() {
                want[ax] = 1;
            }
            if ax >= s.len() || want != *shape {
                return Err(malformed(
                    v,
                    format!("reduce axis {ax} of {} to {}", g.ty(*arg).shape, ty.shape),
                ));
            }
            Ok(())
        }
        Op::TopK { arg, axis, .. } => {
            let s = src(arg);
            let ax = *axis as usize;
            let ok = ax < s.len()
                && s.len() == shape.len()
                && (0..s.len()).all(|d| d == ax || s[d] == shape[d])
                && shape[ax] >= 1
                && shape[ax] <= s[ax];
            if !ok {
                return Err(malformed(
                    v,
                    format!("topk on axis {ax} of {} to {}", g.ty(*arg).shape, ty.shape),
                ));
            }
            Ok(())
        }
        Op::Cumsum { arg, axis } => {
            same_shape(*arg)?;
            if *axis as usize >= shape.len() {
                return Err(malformed(v, format!("cumsum on axis {axis} of {ty}")));
            }
            Ok(())
        }
        Op::Slice { arg, axis, start } => {
            let s = src(arg);
            let ax = *axis as usize;
            let ok = ax < s.len()
                && s.len() == shape.len()
                && (0..s.len()).all(|d| d == ax || s[d] == shape[d])
                && start + shape[ax] <= s[ax];
            if !ok {
                return Err(malformed(
                    v,
                    format!(
                        "slice at {start} on axis {ax} of {} to {}",
                        g.ty(*arg).shape,
                        ty.shape
                    ),
                ));
            }
            Ok(())
        }
        Op::MatMul { lhs, rhs } => {
            let (ls, rs) = (src(lhs), src(rhs));
            let r = shape.len();
            let ok = r >= 2
                && ls.len() == r
                && rs.len() == r
                && ls[..r - 2] == shape[..r - 2]
                && rs[..r - 2] == shape[..r - 2]
                && ls[r - 1] == rs[r - 2]
                && ls[r - 2] == shape[r - 2]
                && rs[r - 1] == shape[r - 1];
            if !ok {
                return Err(malformed(
                    v,
                    format!("matmul of {} and {} to {}", g.ty(*lhs), g.ty(*rhs), ty),
                ));
            }
            Ok(())
        }
        Op::Update {
            dst,
            rows,
            pos,
            axis,
        } => {
            let (d, r, p) = (g.ty(*dst), g.ty(*rows), g.ty(*pos));
            let ax = *axis as usize;
            let n = shape.len();
            let ok = *d == *ty
                && r.dtype == ty.dtype
                && ax >= 1
                && ax < n
                && r.shape.rank() == n
                && (0..n).all(|i| i == ax || r.shape.0[i] == shape[i])
                && r.shape.0[ax] <= shape[ax]
                && p.dtype == tessel_ir::DType::I32
                && p.shape.0 == [shape[0]];
            if !ok {
                return Err(malformed(
                    v,
                    format!("update of {d} with rows {r} at {p} along axis {axis} to {ty}"),
                ));
            }
            Ok(())
        }
        Op::Gather { arg, index, axis } => {
            let (a, i) = (g.ty(*arg), g.ty(*index));
            let ax = *axis as usize;
            let n = shape.len();
            let ok = a.dtype == ty.dtype
                && i.dtype == tessel_ir::DType::I32
                && i.shape == ty.shape
                && ax < n
                && a.shape.rank() == n
                && (0..n).all(|d| d == ax || a.shape.0[d] == shape[d])
                && a.shape.0[ax] <= i32::MAX as u64;
            if !ok {
                return Err(malformed(
                    v,
                    format!("gather of {a} at {i} along axis {axis} to {ty}"),
                ));
            }
            Ok(())
        }
        Op::Concat { args, axis } => {
            let ax = *axis as usize;
            if ax >= shape.len() {
                return Err(malformed(
                    v,
                    format!("concat axis {ax} of rank {}", shape.len()),
                ));
            }
            let mut total = 0;
            for a in args {
                let s = src(a);
                if s.len() != shape.len() || (0..s.len()).any(|d| d != ax && s[d] != shape[d]) {
                    return Err(malformed(
                        v,
                        format!(
                            "concat operand {a} of shape {} into {}",
                            g.ty(*a).shape,
                            ty.shape
                        ),
                    ));
                }
                total += s[ax];
            }
            if total != shape[ax] {
                return Err(malformed(
                    v,
                    format!("concat sizes sum to {total}, not {}", shape[ax]),
                ));
            }
            Ok(())
        }
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
