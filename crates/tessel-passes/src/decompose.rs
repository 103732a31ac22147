//! `decompose`: rewrites composite graph ops into the primitive ones the later passes know.
//!
//! Before: a graph from `check` (any [`Op`]). After:
//! - no [`ReduceOp::Mean`]: `mean(x)` is `sum(x) / n`, both in f32 (bf16/f16 operands are cast
//!   to f32 first and the quotient is cast back, so the row is rounded once);
//! - no [`Op::Softmax`]: `m = max(x); e = exp(x - m); where(m == -inf, 0, e / sum(e))` in
//!   f32 along the axis (the select makes a fully masked row 0 rather than 0/0 = NaN; it
//!   passes every row with a finite or NaN max through unchanged);
//! - every [`Op::Reduce`] runs over the last axis (another axis is permuted last first);
//! - reductions of bf16/f16 operands accumulate in f32 explicitly (cast, reduce, cast back);
//! - a step output that is a step input gets an identity [`Op::Cast`], so every output is
//!   written by a kernel — except an `inout` input returned under its own name, whose
//!   buffer is the output (it is updated in place, or not at all: never copied);
//! - common subexpressions are merged: two ops with the same definition and type become one
//!   value (the `check` pass inlines each `fn` call, so `rope(q)` and `rope(k)` would otherwise
//!   compute the same cos/sin table twice) — except the ops of an [`Op::Attention`]'s logits
//!   (its `q @ kᵀ` and the elementwise ops from it to the logits), which stay its own: the
//!   `attention` pass fused them only because nothing else reads them, and the attention
//!   kernel computes them itself, so the same product written again elsewhere (a second
//!   attention over the same q and k, the scores as a step result) must not become a
//!   reader of them.
//!
//! It does not fuse, reorder arithmetic or change any rounding: the graph computes the same
//! bits before and after.

use std::collections::{HashMap, HashSet};
use tessel_ir::graph::{BinaryOp, Graph, Op, ReduceOp, UnaryOp};
use tessel_ir::{DType, TensorType, Value};

/// Runs the pass, returning the rewritten graph.
pub fn run(g: &Graph) -> Graph {
    let mut d = Rewriter {
        out: Graph::new(g.name.clone()),
        cse: HashMap::new(),
    };
    let own = attention_logits(g);
    let mut map: HashMap<Value, Value> = HashMap::new();
    for (v, op) in g.ops.iter() {
        let ty = g.ty(v).clone();
        let m = |x: &Value| map[x];
        let nv = match op {
            Op::Reduce { op: rop, arg, axis } => d.reduce(*rop, m(arg), *axis, ty),
            Op::Softmax { arg, axis } => d.softmax(m(arg), *axis, ty),
            other => {
                let mut o = other.clone();
                remap(&mut o, &map);
                if own.contains(&v) {
                    // Neither merged into an earlier value nor a value later ops merge into.
                    d.out.push(o, ty)
                } else {
                    d.emit(o, ty)
                }
            }
        };
        map.insert(v, nv);
    }
    d.out.inputs = g.inputs.iter().map(|(n, v)| (n.clone(), map[v])).collect();
    for (name, v) in &g.outputs {
        let mut nv = map[v];
        let own_buffer =
            d.out.is_inout_input(nv) && d.out.inputs.iter().any(|(n, x)| *x == nv && n == name);
        if matches!(d.out.ops[nv], Op::Input { .. }) && !own_buffer {
            let ty = d.out.ty(nv).clone();
            // Not through `emit`: an identity cast must not be merged away.
            nv = d.out.push(Op::Cast { arg: nv }, ty);
        }
        d.out.outputs.push((name.clone(), nv));
    }
    d.out
}

/// The values an [`Op::Attention`] computes itself: its logits' matmul and the elementwise
/// cone from it up to the logits ([`crate::attention::logits_matmul`]).
fn attention_logits(g: &Graph) -> HashSet<Value> {
    let mut own = HashSet::new();
    for (_, op) in g.ops.iter() {
        if let Op::Attention { logits, .. } = op {
            if let Some((s, cone)) = crate::attention::logits_matmul(g, *logits) {
                own.insert(s);
                own.extend(cone);
            }
        }
    }
    own
}

fn remap(op: &mut Op, map: &HashMap<Value, Value>) {
    for a in op.args_mut() {
        *a = map[a];
    }
}

struct Rewriter {
    out: Graph,
    /// Definition (op printed with its type) → value, for common-subexpression merging.
    cse: HashMap<String, Value>,
}

impl Rewriter {
    /// Appends `op`, or returns the existing value with the same definition and type.
    fn emit(&mut self, op: Op, ty: TensorType) -> Value {
        if matches!(op, Op::Input { .. }) {
            return self.out.push(op, ty);
        }
        // `{:?}` of an op prints f64 constants exactly (shortest round trip, -0 kept).
        let key = format!("{op:?}:{ty:?}");
        if let Some(&v) = self.cse.get(&key) {
            return v;
        }
        let v = self.out.push(op, ty);
        self.cse.insert(key, v);
        v
    }

    fn ty(&self, v: Value) -> TensorType {
        self.out.ty(v).clone()
    }

    fn with_dtype(&self, v: Value, dtype: DType) -> TensorType {
        TensorType {
            dtype,
            shape: self.out.ty(v).shape.clone(),
        }
    }

    fn cast(&mut self, v: Value, dtype: DType) -> Value {
        if self.out.ty(v).dtype == dtype {
            return v;
        }
        let ty = self.with_dtype(v, dtype);
        self.emit(Op::Cast { arg: v }, ty)
    }

    fn scalar_const(&mut self, value: f64, like: Value) -> Value {
        let ty = self.ty(like);
        let c = self.emit(Op::Const { value }, TensorType::new(ty.dtype, vec![]));
        let ones = TensorType::new(ty.dtype, vec![1; ty.shape.rank()]);
        let r = self.emit(Op::Reshape { arg: c }, ones);
        self.emit(Op::Broadcast { arg: r }, ty)
    }

    fn broadcast_to(&mut self, v: Value, like: Value) -> Value {
        let ty = self.ty(like);
        if self.out.ty(v).shape == ty.shape {
            return v;
        }
        let t = self.with_dtype(like, self.out.ty(v).dtype);
        self.emit(Op::Broadcast { arg: v }, t)
    }

    /// A reduction over the last axis, accumulating in f32 for 16-bit floats.
    fn reduce_last(&mut self, rop: ReduceOp, x: Value) -> Value {
        let dt = self.out.ty(x).dtype;
        let acc_dt = if matches!(dt, DType::Bf16 | DType::F16) {
            DType::F32
        } else {
            dt
        };
        let xa = self.cast(x, acc_dt);
        let mut shape = self.out.ty(xa).shape.0.clone();
        let n = shape.last().copied().unwrap_or(1);
        if let Some(l) = shape.last_mut() {
            *l = 1;
        }
        let rop_prim = if rop == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            rop
        };
        let mut r = self.emit(
            Op::Reduce {
                op: rop_prim,
                arg: xa,
                axis: (shape.len() - 1) as u32,
            },
            TensorType::new(acc_dt, shape),
        );
        if rop == ReduceOp::Mean {
            let c = self.scalar_const(n as f64, r);
            let ty = self.ty(r);
            r = self.emit(
                Op::Binary {
                    op: BinaryOp::Div,
                    lhs: r,
                    rhs: c,
                },
                ty,
            );
        }
        self.cast(r, dt)
    }

    /// `reduce(x, axis)` keeping `axis` with size 1; other axes are permuted last first.
    fn reduce(&mut self, rop: ReduceOp, x: Value, axis: u32, ty: TensorType) -> Value {
        let rank = self.out.ty(x).shape.rank() as u32;
        if rank == 0 {
            // `check` rejects reductions of scalars; nothing to reduce.
            return x;
        }
        let r = if axis + 1 == rank {
            self.reduce_last(rop, x)
        } else {
            let perm: Vec<u32> = (0..rank).filter(|&a| a != axis).chain([axis]).collect();
            let src = self.out.ty(x).clone();
            let pshape = perm.iter().map(|&p| src.shape.0[p as usize]).collect();
            let p = self.emit(
                Op::Permute {
                    arg: x,
                    perm: perm.clone(),
                },
                TensorType::new(src.dtype, pshape),
            );
            let r = self.reduce_last(rop, p);
            // The reduced axis has size 1, so moving it back is a reshape.
            self.emit(Op::Reshape { arg: r }, ty.clone())
        };
        debug_assert_eq!(self.out.ty(r), &ty);
        r
    }

    fn softmax(&mut self, x: Value, axis: u32, ty: TensorType) -> Value {
        let xf = self.cast(x, DType::F32);
        let fty = self.ty(xf);
        let m = self.reduce(ReduceOp::Max, xf, axis, reduced(&fty, axis));
        let mb = self.broadcast_to(m, xf);
        let d = self.emit(
            Op::Binary {
                op: BinaryOp::Sub,
                lhs: xf,
                rhs: mb,
            },
            fty.clone(),
        );
        let e = self.emit(
            Op::Unary {
                op: UnaryOp::Exp,
                arg: d,
            },
            fty.clone(),
        );
        let s = self.reduce(ReduceOp::Sum, e, axis, reduced(&fty, axis));
        let sb = self.broadcast_to(s, e);
        let q = self.emit(
            Op::Binary {
                op: BinaryOp::Div,
                lhs: e,
                rhs: sb,
            },
            fty.clone(),
        );
        // A fully masked row (every element -inf, so its max is -inf) gives 0, not
        // exp(-inf - -inf) / sum = NaN: flash-attention's convention (design §12). The test
        // is on the row's max, once per row in a row-reduction kernel; the select is one per
        // element and passes every other row's quotient through bit for bit. A row holding
        // NaN or +inf has a NaN or +inf max and stays NaN, as IEEE arithmetic gives.
        let ninf = self.scalar_const(f64::NEG_INFINITY, m);
        let empty = self.emit(
            Op::Binary {
                op: BinaryOp::Eq,
                lhs: m,
                rhs: ninf,
            },
            self.with_dtype(m, DType::Bool),
        );
        let empty = self.broadcast_to(empty, q);
        let zero = self.scalar_const(0.0, q);
        let r = self.emit(
            Op::Select {
                cond: empty,
                on_true: zero,
                on_false: q,
            },
            fty,
        );
        self.cast(r, ty.dtype)
    }
}

fn reduced(t: &TensorType, axis: u32) -> TensorType {
    let mut s = t.shape.0.clone();
    s[axis as usize] = 1;
    TensorType::new(t.dtype, s)
}
