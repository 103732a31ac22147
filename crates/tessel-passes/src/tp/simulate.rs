//! [`simulate`]: the ranks of a plan as one graph, for checking the plan on one device.

use super::REDUCE_CHUNKS;
use super::{block, built, k_ranges, local_operand, round_to, slice_block, subtree_sum, tree_sum};
use super::{Sharding, TpError, TpPlan};
use cranelift_entity::EntityRef;
use tessel_ir::builder::Builder;
use tessel_ir::graph::{Graph, Op, UpdateAt};
use tessel_ir::Value;

/// One graph that computes what the `plan.tp` ranks of `plan` compute, for checking the
/// plan's promise on one machine: every rank's ops on its blocks (each split input sliced
/// at the rank's offset; a replicated operand of a split op sliced there too; replicated
/// values computed once), each row-parallel matmul as its `8 / tp` local K ranges — each
/// a widened `f32(x_range) @ f32(w_range)ᵀ`, of the same shape at every `tp` — summed along
/// the rank's subtree, the collective as the tree's adds over the ranks' subtree sums (the
/// all-gather moves data only), rounded once; a split step result concatenated over the
/// ranks. Its outputs are the step's, in order, so it runs like the step itself.
///
/// An update (decode's KV cache) is one update of the whole tensor with the ranks' rows
/// concatenated along their split axis — the union of each rank's writes into its own
/// block — after which each rank reads its block; the updated tensor is returned whole.
///
/// Errors: an update of a tensor the simulation does not hold whole (not an input or an
/// update of one).
pub fn simulate(g: &Graph, plan: &TpPlan) -> Result<Graph, TpError> {
    let n = plan.tp as usize;
    let err = |value: Value, what: &str| TpError {
        tp: plan.tp,
        value: Some(value),
        what: what.to_string(),
    };
    let mut s = Graph::new(format!("{}_tp{}", g.name, plan.tp));
    let mut inputs = std::collections::HashMap::new();
    // Values the simulation holds whole as well: the inputs and the updated tensors.
    let mut whole: std::collections::HashMap<Value, Value> = Default::default();
    // val[r][v]: rank r's value for v.
    let mut val: Vec<cranelift_entity::SecondaryMap<Value, Option<Value>>> =
        vec![Default::default(); n];
    let row_parallel = plan.row_parallel();
    let tp = plan.tp;
    for (v, op) in g.ops.iter() {
        let sh = plan.sharding[v.index()];
        let ty = g.ty(v).clone();
        match op {
            Op::Update { dst, rows, at } => {
                // Each rank writes its block of the rows into its block of the tensor: all
                // of them together are one update of the whole tensor with the ranks' rows
                // concatenated; each rank then reads its block of the result.
                let Some(&d) = whole.get(dst) else {
                    return Err(err(
                        v,
                        "an update of a tensor the simulation does not hold whole",
                    ));
                };
                let rows_all = match plan.sharding[rows.index()] {
                    Sharding::Split { axis: a } => {
                        let args = (0..n).map(|r| val[r][*rows].expect("computed")).collect();
                        concat(&mut s, args, a, g.ty(*rows))
                    }
                    _ => val[0][*rows].expect("computed"),
                };
                let at = at.map(|at| UpdateAt {
                    pos: val[0][at.pos].expect("positions are replicated"),
                    axis: at.axis,
                });
                let y = built(Builder::new(&mut s).op(
                    Op::Update {
                        dst: d,
                        rows: rows_all,
                        at,
                    },
                    None,
                ));
                debug_assert_eq!(s.ty(y), &ty);
                whole.insert(v, y);
                for (r, m) in val.iter_mut().enumerate() {
                    m[v] = Some(match sh {
                        Sharding::Split { axis: a } => slice_block(&mut s, y, a, r as u32, tp),
                        _ => y,
                    });
                }
                continue;
            }
            Op::Input { .. } => {
                let x = s.push(op.clone(), ty.clone());
                inputs.insert(v, x);
                whole.insert(v, x);
                for (r, m) in val.iter_mut().enumerate() {
                    m[v] = Some(match sh {
                        Sharding::Split { axis } => slice_block(&mut s, x, axis, r as u32, tp),
                        _ => x,
                    });
                }
                continue;
            }
            _ if row_parallel.contains(&v) => {
                // Each rank's subtree, then the ranks' sums along the rest of the tree: the
                // same association as the 8 ranges in one tree, at every `tp`.
                let Op::MatMul { lhs, rhs } = *op else {
                    unreachable!("row-parallel values are matmuls");
                };
                let sums = (0..n)
                    .map(|r| {
                        let (x, w) = (
                            val[r][lhs].expect("computed"),
                            val[r][rhs].expect("computed"),
                        );
                        let (per, rank) = (REDUCE_CHUNKS / tp, ty.shape.rank() as u32);
                        let xs = k_ranges(&mut s, x, rank - 1, per);
                        let ws = k_ranges(&mut s, w, rank - 2, per);
                        subtree_sum(&mut s, &ty, &xs, &ws)
                    })
                    .collect();
                let sum = tree_sum(&mut s, sums);
                let y = round_to(&mut s, sum, &ty);
                for m in val.iter_mut() {
                    m[v] = Some(y);
                }
                continue;
            }
            _ => {}
        }
        // Replicated with the same operands on every rank: computed once.
        let args = op.args();
        let shared = sh == Sharding::Replicated
            && args.iter().all(|&a| (1..n).all(|r| val[r][a] == val[0][a]));
        let ranks = if shared { 1 } else { n };
        for r in 0..ranks {
            let mut o = op.clone();
            for a in o.args_mut() {
                let x = val[r][*a].expect("operands come first");
                *a = local_operand(&mut s, (g, plan), op, (v, *a), x, r as u32);
            }
            // The plan's block: given to the ops that carry their type, and what the rule
            // gives the others from their operands' blocks.
            let b = block(&ty, sh, tp);
            let y = built(Builder::new(&mut s).op(o, Some(b.clone())));
            debug_assert_eq!(s.ty(y), &b, "{v}'s block");
            if shared {
                for m in val.iter_mut() {
                    m[v] = Some(y);
                }
            } else {
                val[r][v] = Some(y);
            }
        }
    }
    s.inputs = g
        .inputs
        .iter()
        .map(|(name, v)| (name.clone(), inputs[v]))
        .collect();
    for (name, o) in &g.outputs {
        let y = match plan.sharding[o.index()] {
            // An updated tensor is returned as the update itself (the `inout` chain's end).
            _ if matches!(g.ops[*o], Op::Update { .. }) => whole[o],
            Sharding::Split { axis } => {
                let args = (0..n).map(|r| val[r][*o].expect("computed")).collect();
                concat(&mut s, args, axis, g.ty(*o))
            }
            _ => val[0][*o].expect("computed"),
        };
        s.outputs.push((name.clone(), y));
    }
    Ok(s)
}

/// The ranks' blocks `args` joined along `axis` into the whole tensor of type `whole`:
/// always a concat (the builder's `concat` of one block is the block).
fn concat(s: &mut Graph, args: Vec<Value>, axis: u32, whole: &tessel_ir::TensorType) -> Value {
    let w = built(Builder::new(s).op(Op::Concat { args, axis }, None));
    debug_assert_eq!(s.ty(w), whole);
    w
}
