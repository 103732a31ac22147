//! [`ranks`]: the program each rank runs — phases of local work separated by the plan's
//! all-gathers (tessel-ir [`tessel_ir::ranks`]).

use super::{block, built, k_ranges, local_operand, round_to, subtree_sum, tree_sum};
use super::{Sharding, TpError, TpPlan, REDUCE_CHUNKS};
use cranelift_entity::EntityRef;
use std::collections::{BTreeMap, HashMap, HashSet};
use tessel_ir::builder::Builder as OpBuilder;
use tessel_ir::graph::{Graph, Op};
use tessel_ir::ranks::{Block, Exchange, Phase, Rank, RankInput, RankOutput};
use tessel_ir::{Shape, TensorType, Value};

/// The program of every rank of `plan` (made by [`super::plan`] from `g`), rank 0 first.
///
/// Phases: an op runs in the first phase where all its operands are available. Step inputs
/// are bound in every phase that reads them, and what is computed from inputs, constants
/// and iotas alone by views and elementwise ops (a weight's transpose, RoPE's tables) is
/// rebuilt in every phase that reads it (it fuses into its readers: nothing is carried); a
/// value computed in an earlier phase is carried (an output of its phase, an input of the
/// later one, slot `"vN:carry"`). A row-parallel matmul (a [`super::Collective::SumPartials`])
/// splits its phase: the rank's `8 / tp` K ranges — each weight range its own input slot
/// `"{param}:range{i}"`, cut from the checkpoint when it is loaded, so that the range's
/// GEMM reads it in place — summed along their subtree are the phase's output
/// `"vN:partial"` (f32, the matmul's whole shape), all-gathered into `"vN:gathered"`
/// (`[tp, ...]`) after it; the next phase adds the ranks' sums along the rest of the fixed
/// tree and rounds once — the association of [`super::simulate`] and of every world size.
/// A split step result (a [`super::Collective::Gather`]) is all-gathered after its phase and
/// concatenated in one more phase; an updated KV cache stays split (each rank keeps its
/// heads, [`RankOutput::split`]).
///
/// Phase graphs are named `{step}_tp{tp}_p{k}`; they compile like any step.
///
/// Errors: an `inout` tensor read in a later phase than the one that updates it (its old
/// value is gone), or updated in two phases.
pub fn ranks(g: &Graph, plan: &TpPlan) -> Result<Vec<Rank<Graph>>, TpError> {
    let layout = Layout::new(g, plan)?;
    (0..plan.tp).map(|r| layout.rank(r)).collect()
}

/// Where everything runs; the same for every rank.
struct Layout<'a> {
    g: &'a Graph,
    plan: &'a TpPlan,
    /// The phase that computes each value (for a row-parallel matmul: the phase after its
    /// exchange, which completes it). Free values: 0 (they are built where they are read).
    home: Vec<usize>,
    /// Values computed from non-`inout` inputs, constants and iotas by views and elementwise
    /// ops alone: rebuilt in each phase that reads them, never carried.
    free: Vec<bool>,
    row_parallel: HashSet<Value>,
    /// The phase that updates each `inout` input.
    updated_in: HashMap<Value, usize>,
    /// The split step results, gathered after their phase and concatenated in the last.
    gathered: Vec<(String, Value, u32)>,
    phases: usize,
}

/// Whether `op` makes a free value when its operands are free (see [`Layout::free`]).
fn rebuildable(op: &Op) -> bool {
    match op {
        Op::Input { inout, .. } => !inout,
        Op::Const { .. } | Op::Iota { .. } => true,
        Op::Unary { .. }
        | Op::Binary { .. }
        | Op::Select { .. }
        | Op::Cast { .. }
        | Op::Broadcast { .. }
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Slice { .. }
        | Op::Concat { .. } => true,
        _ => false,
    }
}

fn slot(v: Value, what: &str) -> String {
    format!("{v}:{what}")
}

impl<'a> Layout<'a> {
    fn new(g: &'a Graph, plan: &'a TpPlan) -> Result<Layout<'a>, TpError> {
        let err = |value: Value, what: String| TpError {
            tp: plan.tp,
            value: Some(value),
            what,
        };
        let row_parallel = plan.row_parallel();
        let mut home = vec![0; g.ops.len()];
        let mut free = vec![false; g.ops.len()];
        for (v, op) in g.ops.iter() {
            let args = op.args();
            let at = args.iter().map(|a| home[a.index()]).max().unwrap_or(0);
            home[v.index()] = at + row_parallel.contains(&v) as usize;
            free[v.index()] = rebuildable(op) && args.iter().all(|a| free[a.index()]);
        }
        let mut updated_in = HashMap::new();
        for (v, op) in g.ops.iter() {
            if let Op::Update { .. } = op {
                let root = g.storage_root(v);
                if let Some(&k) = updated_in.get(&root) {
                    if k != home[v.index()] {
                        return Err(err(
                            v,
                            format!("the inout tensor {root} is updated in two phases (before and after an all-gather)"),
                        ));
                    }
                }
                updated_in.insert(root, home[v.index()]);
            }
        }
        // An inout tensor's old value exists only until its update.
        for (v, op) in g.ops.iter() {
            for a in op.args() {
                if let Some(&k) = updated_in.get(&a) {
                    let is_update = matches!(op, Op::Update { dst, .. } if *dst == a);
                    // A row-parallel matmul reads its operands in the phase before the
                    // one that completes it.
                    let reads_in = home[v.index()] - row_parallel.contains(&v) as usize;
                    if !is_update && reads_in > k {
                        return Err(err(
                            v,
                            format!("it reads the old value of {a} after a collective, in a phase after the one that updates it in place"),
                        ));
                    }
                }
            }
        }
        let gathered: Vec<(String, Value, u32)> = g
            .outputs
            .iter()
            .filter_map(|(name, o)| match plan.sharding[o.index()] {
                Sharding::Split { axis }
                    if !matches!(g.ops[*o], Op::Update { .. } | Op::Input { .. }) =>
                {
                    Some((name.clone(), *o, axis))
                }
                _ => None,
            })
            .collect();
        let last = home.iter().copied().max().unwrap_or(0);
        let phases = last + 1 + !gathered.is_empty() as usize;
        Ok(Layout {
            g,
            plan,
            home,
            free,
            row_parallel,
            updated_in,
            gathered,
            phases,
        })
    }

    fn rank(&self, r: u32) -> Result<Rank<Graph>, TpError> {
        let (g, plan, tp) = (self.g, self.plan, self.plan.tp);
        let mut b = Builder {
            layout: self,
            r,
            loads: BTreeMap::new(),
            graphs: (0..self.phases)
                .map(|k| Graph::new(format!("{}_tp{tp}_p{k}", g.name)))
                .collect(),
            local: vec![HashMap::new(); self.phases],
            exchanges: vec![Vec::new(); self.phases],
            carried: HashSet::new(),
            whole: HashMap::new(),
        };
        for (v, op) in g.ops.iter() {
            // Inputs and free values are made where they are read.
            if self.free[v.index()] || matches!(op, Op::Input { .. }) {
                continue;
            }
            let k = self.home[v.index()];
            let y = if self.row_parallel.contains(&v) {
                b.row_parallel(v, op, k)
            } else {
                b.build(k, v)
            };
            b.local[k].insert(v, y);
        }
        let mut outputs = Vec::new();
        for (name, o) in &g.outputs {
            let split = match plan.sharding[o.index()] {
                Sharding::Split { axis } => Some(axis),
                _ => None,
            };
            // A result's slot is `out:NAME`, apart from the parameters' (a parameter may be
            // named like an unnamed result: `out0`) — except an updated `inout` tensor
            // returned under its parameter's name, which is that parameter's slot.
            let out_slot = format!("out:{name}");
            if let Some(&(_, _, axis)) = self.gathered.iter().find(|(n, _, _)| n == name) {
                b.gather_output(&out_slot, *o, axis);
                outputs.push(RankOutput {
                    name: name.clone(),
                    slot: out_slot,
                    split: None,
                });
                continue;
            }
            let slot = match g.ops[*o] {
                // Returned as it was given: the input's slot (loaded, whether or not a
                // phase reads it).
                Op::Input { .. } => {
                    b.get(0, *o);
                    g.inputs
                        .iter()
                        .find(|(_, v)| v == o)
                        .map(|(n, _)| n.clone())
                        .expect("an input value is a parameter")
                }
                // The end of an `inout` chain under its parameter's own name: that name is the
                // slot, the buffer updated in place. Returned under another name as well, it
                // takes an `out:` slot like any result.
                Op::Update { .. }
                    if g.inputs
                        .iter()
                        .any(|(n, v)| n == name && *v == g.storage_root(*o)) =>
                {
                    let k = self.home[o.index()];
                    let y = b.get(k, *o);
                    b.graphs[k].outputs.push((name.clone(), y));
                    name.clone()
                }
                _ => {
                    let k = self.home[o.index()];
                    let y = b.get(k, *o);
                    b.graphs[k].outputs.push((out_slot.clone(), y));
                    out_slot
                }
            };
            outputs.push(RankOutput {
                name: name.clone(),
                slot,
                split,
            });
        }
        let inputs = b.loads.into_values().collect();
        let phases = b
            .graphs
            .into_iter()
            .zip(b.exchanges)
            .map(|(body, exchanges)| Phase { body, exchanges })
            .collect();
        Ok(Rank {
            rank: r,
            tp,
            params: g.inputs.iter().map(|(n, _)| n.clone()).collect(),
            inputs,
            phases,
            outputs,
        })
    }
}

/// One rank's phase graphs under construction.
struct Builder<'l, 'a> {
    layout: &'l Layout<'a>,
    r: u32,
    /// The input slots loaded, by (parameter, name).
    loads: BTreeMap<(u32, String), RankInput>,
    graphs: Vec<Graph>,
    /// local[k][v]: phase k's value for the step's value v.
    local: Vec<HashMap<Value, Value>>,
    exchanges: Vec<Vec<Exchange>>,
    /// The values already output for a later phase (`"vN:carry"`).
    carried: HashSet<Value>,
    /// The gathered split results (the last phase's concatenation).
    whole: HashMap<Value, Value>,
}

impl Builder<'_, '_> {
    /// Phase `k`'s value for the step's value `v`: computed there, bound or rebuilt there
    /// (inputs, free values), or carried from the phase that computed it.
    fn get(&mut self, k: usize, v: Value) -> Value {
        if let Some(&y) = self.local[k].get(&v) {
            return y;
        }
        let (g, plan) = (self.layout.g, self.layout.plan);
        let y = match &g.ops[v] {
            Op::Input { inout, .. } => {
                let param = g
                    .inputs
                    .iter()
                    .position(|(_, x)| *x == v)
                    .expect("an input value is a parameter");
                let name = g.inputs[param].0.clone();
                let sh = plan.sharding[v.index()];
                let ty = block(g.ty(v), sh, plan.tp);
                let b = match sh {
                    Sharding::Split { axis } => Some(Block {
                        axis,
                        index: self.r,
                        count: plan.tp,
                    }),
                    _ => None,
                };
                self.load(param as u32, &name, b, &ty);
                // In place only in the phase that updates it.
                let inout = *inout && self.layout.updated_in.get(&v) == Some(&k);
                self.input(k, name, ty, inout)
            }
            _ if self.layout.free[v.index()] => self.build(k, v),
            _ => {
                let from = self.layout.home[v.index()];
                debug_assert!(from < k, "{v} is carried forward only");
                let name = slot(v, "carry");
                if self.carried.insert(v) {
                    let x = self.get(from, v);
                    self.graphs[from].outputs.push((name.clone(), x));
                }
                let ty = block(g.ty(v), plan.sharding[v.index()], plan.tp);
                self.input(k, name, ty, false)
            }
        };
        self.local[k].insert(v, y);
        y
    }

    /// Rank `r`'s copy of op `v` in phase `k`, on its blocks (a replicated operand of a split
    /// elementwise op sliced to the rank's block).
    fn build(&mut self, k: usize, v: Value) -> Value {
        let (g, plan) = (self.layout.g, self.layout.plan);
        let op = &g.ops[v];
        let mut o = op.clone();
        for a in o.args_mut() {
            let x = self.get(k, *a);
            *a = local_operand(&mut self.graphs[k], (g, plan), op, (v, *a), x, self.r);
        }
        // The plan's block: what the ops that carry their type (reshape, slice, ...) are
        // given, and what the rule gives the others from the blocks of their operands.
        let ty = block(g.ty(v), plan.sharding[v.index()], plan.tp);
        let y = built(OpBuilder::new(&mut self.graphs[k]).op(o, Some(ty.clone())));
        debug_assert_eq!(self.graphs[k].ty(y), &ty, "{v}'s block");
        y
    }

    /// Records that the rank loads slot `name`: block `b` (or all) of parameter `param`.
    fn load(&mut self, param: u32, name: &str, b: Option<Block>, ty: &TensorType) {
        self.loads
            .entry((param, name.to_string()))
            .or_insert_with(|| RankInput {
                name: name.to_string(),
                param,
                block: b,
                ty: ty.clone(),
            });
    }

    /// Phase `k`'s K ranges of the row-parallel weight `w` (the matmul's operand: an input
    /// under casts and permutes, split along K by the plan): each range of the input its
    /// own slot, the casts and permutes applied to it.
    fn weight_ranges(&mut self, k: usize, w: Value) -> Vec<Value> {
        let (g, plan) = (self.layout.g, self.layout.plan);
        let mut chain = vec![w];
        while !matches!(g.ops[*chain.last().expect("nonempty")], Op::Input { .. }) {
            let arg = g.ops[*chain.last().expect("nonempty")].args()[0];
            chain.push(arg);
        }
        let input = chain.pop().expect("an input under the chain");
        let param = g
            .inputs
            .iter()
            .position(|(_, x)| *x == input)
            .expect("an input value is a parameter");
        // The ranges' type of a value of the chain: its split dim over REDUCE_CHUNKS.
        let range_ty = |v: Value| -> TensorType {
            let mut t = g.ty(v).clone();
            if let Sharding::Split { axis } = plan.sharding[v.index()] {
                t.shape.0[axis as usize] /= REDUCE_CHUNKS as u64;
            }
            t
        };
        let Sharding::Split { axis } = plan.sharding[input.index()] else {
            unreachable!("a row-parallel weight is split");
        };
        let per = REDUCE_CHUNKS / plan.tp;
        (0..per)
            .map(|c| {
                let index = self.r * per + c;
                let name = format!("{}:range{index}", g.inputs[param].0);
                let ty = range_ty(input);
                let b = Block {
                    axis,
                    index,
                    count: REDUCE_CHUNKS,
                };
                self.load(param as u32, &name, Some(b), &ty);
                let mut y = self.input(k, name, ty, false);
                for &v in chain.iter().rev() {
                    let mut o = g.ops[v].clone();
                    for a in o.args_mut() {
                        *a = y;
                    }
                    // Casts carry the range's type; the rule gives permutes theirs.
                    let ty = range_ty(v);
                    y = built(OpBuilder::new(&mut self.graphs[k]).op(o, Some(ty.clone())));
                    debug_assert_eq!(self.graphs[k].ty(y), &ty);
                }
                y
            })
            .collect()
    }

    /// A new input of phase `k`.
    fn input(&mut self, k: usize, name: String, ty: TensorType, inout: bool) -> Value {
        let s = &mut self.graphs[k];
        let index = s.inputs.len() as u32;
        let x = s.push(Op::Input { index, inout }, ty);
        s.inputs.push((name, x));
        x
    }

    /// The row-parallel matmul `v`, completed in phase `k`: the rank's subtree sum in phase
    /// `k - 1`, all-gathered after it, the ranks' sums added in phase `k`.
    fn row_parallel(&mut self, v: Value, op: &Op, k: usize) -> Value {
        let Op::MatMul { lhs, rhs } = *op else {
            unreachable!("row-parallel values are matmuls");
        };
        let (g, tp) = (self.layout.g, self.layout.plan.tp);
        let ty = g.ty(v).clone();
        let x = self.get(k - 1, lhs);
        let rank = ty.shape.rank() as u32;
        let per = REDUCE_CHUNKS / tp;
        let xs = k_ranges(&mut self.graphs[k - 1], x, rank - 1, per);
        // A weight is read as its K ranges, each its own slot read in place; anything else
        // (an activation, an `inout` tensor updated later in the step, whose ranges cut
        // at load time would not follow its updates) as the rank's block cut into them.
        let ws = if ranged_weight(g, rhs) {
            self.weight_ranges(k - 1, rhs)
        } else {
            let w = self.get(k - 1, rhs);
            k_ranges(&mut self.graphs[k - 1], w, rank - 2, per)
        };
        let partial = subtree_sum(&mut self.graphs[k - 1], &ty, &xs, &ws);
        let sent = self.graphs[k - 1].ty(partial).clone();
        let gathered = self.exchange(k - 1, v, "partial", partial, k);
        let s = &mut self.graphs[k];
        let sums = (0..tp).map(|q| unstack(s, gathered, q, &sent)).collect();
        let sum = tree_sum(s, sums);
        round_to(s, sum, &ty)
    }

    /// Sends `x` (phase `k`'s value of `v`) as slot `"v:what"`, all-gathers it after phase
    /// `k` and returns the gathered tensor as an input of phase `into` (slots persist).
    fn exchange(&mut self, k: usize, v: Value, what: &str, x: Value, into: usize) -> Value {
        let sent = self.graphs[k].ty(x).clone();
        let (send, recv) = (slot(v, what), slot(v, "gathered"));
        self.graphs[k].outputs.push((send.clone(), x));
        self.exchanges[k].push(Exchange {
            send,
            recv: recv.clone(),
            ty: sent.clone(),
        });
        let mut dims = vec![self.layout.plan.tp as u64];
        dims.extend(&sent.shape.0);
        let stacked = TensorType {
            dtype: sent.dtype,
            shape: Shape(dims),
        };
        self.input(into, recv, stacked, false)
    }

    /// The split step result `o`: the rank's block all-gathered after its phase, the blocks
    /// concatenated along `axis` in the last phase as output `name`.
    fn gather_output(&mut self, name: &str, o: Value, axis: u32) {
        let (g, tp) = (self.layout.g, self.layout.plan.tp);
        let last = self.graphs.len() - 1;
        let whole = match self.whole.get(&o) {
            Some(&w) => w,
            None => {
                let k = self.layout.home[o.index()];
                let x = self.get(k, o);
                let sent = self.graphs[k].ty(x).clone();
                let gathered = self.exchange(k, o, "block", x, last);
                let s = &mut self.graphs[last];
                let args = (0..tp).map(|q| unstack(s, gathered, q, &sent)).collect();
                // Always a concat (the builder's `concat` of one block is the block).
                let w = built(OpBuilder::new(s).op(Op::Concat { args, axis }, None));
                debug_assert_eq!(s.ty(w), g.ty(o));
                self.whole.insert(o, w);
                w
            }
        };
        self.graphs[last].outputs.push((name.to_string(), whole));
    }
}

/// True when `w` is a step input that is not `inout`, under casts and permutes: a weight
/// whose K ranges [`Builder::weight_ranges`] loads.
fn ranged_weight(g: &Graph, w: Value) -> bool {
    let mut y = w;
    loop {
        match &g.ops[y] {
            Op::Input { inout, .. } => return !inout,
            Op::Cast { arg } | Op::Permute { arg, .. } => y = *arg,
            _ => return false,
        }
    }
}

/// Rank `q`'s tensor of type `sent` out of the all-gathered `[tp, ...]` tensor `stacked`.
fn unstack(s: &mut Graph, stacked: Value, q: u32, sent: &TensorType) -> Value {
    let mut b = OpBuilder::new(s);
    let row = built(b.slice(stacked, 0, q as u64, 1));
    // `[1, ..]` to `sent`'s rank: never equal shapes, so always the reshape.
    built(b.reshape(row, &sent.shape.0))
}
