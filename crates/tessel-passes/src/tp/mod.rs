//! Tensor-parallel partitioning (issue 10): which part of every value each of `tp` ranks
//! holds, which weights each rank loads, and where the collectives go — Megatron-LM's
//! split of a transformer layer (Shoeybi et al. 2019, "Megatron-LM", §3), derived by
//! propagating shardings through the graph rather than by matching a layer's shape.
//!
//! Input: the graph `check` made, before every other pass (the scores are a plain batched
//! matmul and a softmax here). Output: a [`TpPlan`], printed by `tessel explain --tp N`
//! ([`TpPlan::describe`]); from it, [`ranks`] makes the program of every rank — phases that
//! compile like any step (each rank's attention is fused by the `attention` pass, its
//! norms decomposed, ...) with all-gathers between them — and [`simulate`] one graph that
//! computes what all the ranks do, for checking the plan on one device.
//!
//! Shardings ([`Sharding`]): a value is *replicated* (every rank holds all of it), *split*
//! along one axis (rank r holds the r-th of `tp` equal contiguous blocks), or a *partial
//! sum* (a matmul whose K is split: every rank holds a sum over its part of K, and a
//! collective completes the matmul). Propagation, in graph order:
//! - a 2-D matmul `x @ wᵀ` of a replicated `x` and a weight input `w` (`[N, K]` read
//!   transposed, or `[K, N]` read as it is; possibly under a widening cast) is
//!   *column-parallel*: `w` split along N, the result split along its last axis (q, k, v,
//!   gate, up);
//! - a matmul whose `x` is split along K (its last axis) and whose weight is an input is
//!   *row-parallel*: `w` split along K, the result a partial sum (o, down), completed by a
//!   [`Collective::SumPartials`];
//! - a matmul whose operands are both split along the dim it contracts (a backward's
//!   `dX = dY·W` of a column-parallel `Y = X·Wᵀ`, an adapter's `dU = dV·B`) is a partial
//!   sum too, completed by the same collective: the gradient of a replicated value summed
//!   from the ranks' contributions in the fixed tree, one association at every `tp`;
//! - a low-rank adapter — `(x·Aᵀ)·Bᵀ`, two matmuls by weights with casts between, beside a
//!   base matmul `x·Wᵀ` of the same `x` and width (LoRA) — is split like its base: its rank
//!   is never split; for a column-parallel base A is whole and B split with W's rows; after
//!   a row-parallel base `x·Aᵀ` is row-parallel (A split with W's columns) and B is whole;
//! - a matmul of two activations split along the same batch axis (the scores `q @ kᵀ` and
//!   `p @ v`, GQA's broadcast K and V) stays split along it; so does one whose other
//!   operand is replicated with size 1 there (broadcast) or the whole size (each rank
//!   slices its block: a stored K of every head);
//! - a matmul whose left operand is split by rows (M), or whose right one is split by
//!   columns (N), with the other replicated, is split the same way;
//! - elementwise ops take the split of their split operands (all the same axis); a
//!   replicated operand is sliced locally by each rank (no communication), which needs its
//!   size along that axis to be the result's or 1;
//! - a gather (`emb[ids]`, `take_along_axis`) is split like an elementwise op of its table
//!   and its indices, along any axis but the one it gathers along: a table or indices split
//!   along that axis is refused (a rank's block would not hold the rows its indices name),
//!   and a weight read by a gather is never split for a matmul that also reads it (tied
//!   embeddings: that matmul runs whole);
//! - a reshape moves a split to the outermost result dim of the group of dims that the split
//!   axis belongs to (`[T, N] → [T, H, D]`: N split into heads when `tp` divides H), and
//!   refuses one that would not be contiguous blocks; permutes move it; broadcasts keep it;
//!   slices, concats and reductions along other axes keep it;
//! - an input used split is loaded split (each rank reads its block of the checkpoint
//!   tensor); an input used replicated everywhere is loaded whole; a KV cache updated with
//!   rows split along its heads is split along them (whole rows written into a split cache
//!   are sliced by each rank); a cache split this way must have no other reader, which
//!   would need it whole; a weight may have later readers that take its block by these
//!   rules — matmuls (a backward reads every weight again), elementwise ops and whole
//!   updates (an optimizer's) — and where one of them cannot, the weight is read whole
//!   everywhere and the plan made again, with a note; an `inout` tensor updated whole with
//!   split rows (an AdamW moment) that elementwise ops read before the update is loaded
//!   split from the start;
//! - a partial sum is completed right after its matmul; a split step result is gathered
//!   ([`Collective::Gather`]: a concatenation, exact).
//!
//! Anything else — a slice, concat or reduction along the split axis, two operands split
//! along different axes, a split that is not contiguous blocks, a dim that `tp` does not
//! divide, a weight or cache read elsewhere too, a cache split along the dim its positions
//! index — is a [`TpError`] naming the op and the dims. A step where no rule applies (no
//! 2-D matmul by a weight) is planned fully replicated, and [`TpPlan::describe`] and
//! `tessel run --tp` say so ([`NOTHING_SPLIT`]).
//!
//! The deterministic reduction: a row-parallel matmul's K is cut into [`REDUCE_CHUNKS`]
//! equal ranges whatever `tp` is, each summed from 0 into an f32 partial, and the partials
//! are added along a fixed binary tree — `((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))`
//! — then rounded once to the matmul's dtype. Rank r owns the contiguous ranges of one
//! subtree, sums them in the tree's order and sends one f32 tensor; every rank adds the
//! gathered subtree sums in the tree's order. The association never depends on `tp`
//! (any power of two up to 8), so the result's bits do not either.

mod ranks;
mod simulate;

pub use ranks::ranks;
pub use simulate::simulate;

use cranelift_entity::EntityRef;
use std::fmt::Write as _;
use tessel_ir::builder::{Builder, Built};
use tessel_ir::graph::{Graph, Op};
use tessel_ir::{DType, TensorType, Value};

/// The number of K ranges of a row-parallel matmul's deterministic reduction, at every
/// `tp` (a power of two that `tp` divides: 1, 2, 4 or 8).
pub const REDUCE_CHUNKS: u32 = 8;

/// What part of a value each rank holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// Every rank holds all of it.
    Replicated,
    /// Rank r holds block r of `tp` equal contiguous blocks along `axis`.
    Split { axis: u32 },
    /// Every rank holds a partial sum over its part of a matmul's K (the matmul is row-
    /// parallel); [`Collective::SumPartials`] completes it.
    Partial,
}

/// A communication step of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Collective {
    /// Completes the row-parallel matmul `matmul`: every rank sums its K ranges along
    /// the fixed tree into one f32 tensor of the matmul's shape, the ranks all-gather those
    /// (`bytes` per rank sent), and every rank adds them in the tree's order and rounds.
    SumPartials { matmul: Value, bytes: u64 },
    /// Gathers the split step result `value`, returned as `names` (a concatenation;
    /// `bytes` per rank sent).
    Gather {
        value: Value,
        names: Vec<String>,
        axis: u32,
        bytes: u64,
    },
}

/// How one weight or input is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputShard {
    pub name: String,
    pub value: Value,
    pub sharding: Sharding,
    /// What it is for: column-parallel, row-parallel, a split cache, ...
    pub role: &'static str,
}

/// The partitioned plan of a step at `tp` ranks.
#[derive(Clone, Debug)]
pub struct TpPlan {
    pub tp: u32,
    /// The sharding of every value (indexed like the graph's ops).
    pub sharding: Vec<Sharding>,
    /// Every step input, in parameter order.
    pub inputs: Vec<InputShard>,
    /// The collectives, in the order they run.
    pub collectives: Vec<Collective>,
    /// What the plan chose not to split, and why (a weight also read elsewhere: that matmul
    /// runs whole on every rank — the same choice at every world size).
    pub notes: Vec<String>,
}

/// Why a step cannot be partitioned at `tp` ranks: what, and the graph value of the op
/// that cannot be split (none for a world size the plan does not take).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--tp {tp}: {what}{}", value.map(|v| format!(" (value {v})")).unwrap_or_default())]
pub struct TpError {
    pub tp: u32,
    pub value: Option<Value>,
    pub what: String,
}

/// Partitions `g` (as `check` made it, before any other pass) over `tp` ranks.
///
/// Errors: `tp` not 1, 2, 4 or 8; any op the propagation rules above cannot split (the
/// message names the op's value and the dims involved).
pub fn plan(g: &Graph, tp: u32) -> Result<TpPlan, TpError> {
    let err = |value: Value, what: String| TpError {
        tp,
        value: Some(value),
        what,
    };
    if !matches!(tp, 1 | 2 | 4 | 8) {
        return Err(TpError {
            tp,
            value: None,
            what: format!(
                "the world size must divide the {REDUCE_CHUNKS} K ranges of the deterministic reduction: 1, 2, 4 or 8"
            ),
        });
    }
    // A weight split for one matmul may be read later by ops that take its block (a
    // backward reads every weight again); one whose split leads to a refusal makes the
    // weight whole: planned again with it read whole everywhere (`strict`). An `inout`
    // tensor read before its update by elementwise ops is planned again loaded split
    // (`presplit`). Each key is added once: the loop ends.
    let mut strict: std::collections::HashMap<Value, String> = Default::default();
    let mut presplit: std::collections::HashMap<Value, u32> = Default::default();
    let mut p = loop {
        let mut p = Propagation {
            g,
            users: crate::analysis::users(g),
            tp,
            sh: vec![Sharding::Replicated; g.ops.len()],
            role: vec![None; g.ops.len()],
            collectives: Vec::new(),
            notes: Vec::new(),
            strict: &strict,
            relaxed: Default::default(),
            presplit: &presplit,
            hint: None,
        };
        match p.propagate() {
            Ok(()) => break p,
            Err(_) if p.hint.is_some_and(|(x, _)| !presplit.contains_key(&x)) => {
                let (x, a) = p.hint.expect("a hint");
                presplit.insert(x, a);
            }
            Err((v, what)) => {
                match p.culprit(v) {
                    Some((reader, w)) if !strict.contains_key(&w) => {
                        strict.insert(
                        w,
                        format!("its later reader {reader} cannot take a rank's block: at {v}, {what}"),
                    );
                    }
                    _ => return Err(err(v, what)),
                }
            }
        }
    };
    for (name, o) in &g.outputs {
        // An updated cache stays split: each rank keeps its heads' rows for the next step;
        // a split input returned as it is was cut from the whole the caller holds.
        let kept = matches!(g.ops[*o], Op::Update { .. } | Op::Input { .. });
        if let (Sharding::Split { axis }, false) = (p.sh[o.index()], kept) {
            // One gather per value, however many results name it.
            let known = p.collectives.iter_mut().find_map(|c| match c {
                Collective::Gather { value, names, .. } if value == o => Some(names),
                _ => None,
            });
            match known {
                Some(names) => names.push(name.clone()),
                None => {
                    let block = g.ty(*o).shape.numel() / tp as u64;
                    let bytes = block * g.ty(*o).dtype.size_bytes() * (tp as u64 - 1);
                    p.collectives.push(Collective::Gather {
                        value: *o,
                        names: vec![name.clone()],
                        axis,
                        bytes,
                    });
                }
            }
        }
    }
    let inputs = g
        .inputs
        .iter()
        .map(|(name, v)| InputShard {
            name: name.clone(),
            value: *v,
            sharding: p.sh[v.index()],
            role: p.role[v.index()].unwrap_or("replicated input"),
        })
        .collect();
    Ok(TpPlan {
        tp,
        sharding: p.sh,
        inputs,
        collectives: p.collectives,
        notes: p.notes,
    })
}

struct Propagation<'a> {
    g: &'a Graph,
    users: cranelift_entity::SecondaryMap<Value, Vec<Value>>,
    tp: u32,
    sh: Vec<Sharding>,
    role: Vec<Option<&'static str>>,
    collectives: Vec<Collective>,
    notes: Vec<String>,
    /// Weights read whole everywhere, with the reason: a later reader could not take the
    /// block (see [`plan`]).
    strict: &'a std::collections::HashMap<Value, String>,
    /// The readers a split weight was admitted with ([`Others::Later`]; the casts and
    /// permutes under them too), and the weight: a refusal their split reaches makes it
    /// whole ([`Self::culprit`]).
    relaxed: std::collections::HashMap<Value, Value>,
    /// `inout` inputs loaded split from the start, along an axis: tensors updated whole with
    /// split rows that elementwise ops read before the update.
    presplit: &'a std::collections::HashMap<Value, u32>,
    /// Set when an update asks for its tensor to be loaded split ([`Self::presplit`]).
    hint: Option<(Value, u32)>,
}

/// Who else may read a value loaded split, besides the op it is split for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Others {
    /// Matmuls (directly or through casts and permutes), elementwise ops and whole updates
    /// of it later in graph order: they see the block and take it by their own rules (a
    /// backward's `dX = dY·W` contracts the split dim: a partial sum; `dY·Wo` keeps Wo's
    /// split columns; an optimizer's `update(p, p·decay − ...)` updates the block). A
    /// weight's readers. One whose split leads to a refusal makes the weight whole instead
    /// ([`plan`] plans again).
    Later,
    /// No one: a cache's or an updated tensor's other readers would see a block of what
    /// they read whole (an `inout` tensor read by elementwise ops before its update is
    /// loaded split from the start instead: [`Propagation::hint`]).
    None,
}

impl Propagation<'_> {
    /// Every op's sharding in graph order; a partial sum completed right after its matmul.
    /// Errors: the op that cannot be split, and why.
    fn propagate(&mut self) -> Result<(), (Value, String)> {
        let (g, tp) = (self.g, self.tp);
        for (v, op) in g.ops.iter() {
            let s = self.op_sharding(v, op).map_err(|w| (v, w))?;
            self.sh[v.index()] = s;
            if s == Sharding::Partial {
                // A ring all-gather: every rank forwards the other ranks' tensors once.
                let bytes = g.ty(v).shape.numel() * 4 * (tp as u64 - 1);
                self.collectives
                    .push(Collective::SumPartials { matmul: v, bytes });
                // Completed right after the matmul: every reader sees it whole.
                self.sh[v.index()] = Sharding::Replicated;
            }
        }
        Ok(())
    }

    /// The admitted reader of a split weight ([`Others::Later`]) whose split reaches `v`,
    /// the op that could not be split, through split operands — the nearest one — and
    /// its weight; none when no admitted split reaches it (a genuine refusal).
    fn culprit(&self, v: Value) -> Option<(Value, Value)> {
        let mut stack = vec![v];
        let mut seen = std::collections::HashSet::new();
        let mut best: Option<(Value, Value)> = None;
        while let Some(y) = stack.pop() {
            if !seen.insert(y) {
                continue;
            }
            if let Some(&w) = self.relaxed.get(&y) {
                if best.is_none_or(|(r, _)| y > r) {
                    best = Some((y, w));
                }
            }
            for a in self.g.ops[y].args() {
                if matches!(self.of(a), Sharding::Split { .. }) {
                    stack.push(a);
                }
            }
        }
        best
    }

    fn of(&self, v: Value) -> Sharding {
        self.sh[v.index()]
    }

    /// `v` for messages: a step input by its parameter's name.
    fn named(&self, v: Value) -> String {
        match self.g.inputs.iter().find(|(_, x)| *x == v) {
            Some((name, _)) => format!("`{name}` ({v})"),
            None => v.to_string(),
        }
    }

    fn dims(&self, v: Value) -> &[u64] {
        &self.g.ty(v).shape.0
    }

    /// Requires `tp` to divide dim `axis` of `v`.
    fn divides(&self, v: Value, axis: u32) -> Result<(), String> {
        let n = self.dims(v)[axis as usize];
        if n % self.tp as u64 != 0 {
            return Err(format!(
                "dim {axis} of {v} ({:?}) is {n}, which {} ranks cannot split evenly",
                self.dims(v),
                self.tp
            ));
        }
        Ok(())
    }

    /// The step input under `x` through casts and permutes, if `x` is 2-D and one is.
    fn input_under(&self, x: Value) -> Option<Value> {
        let mut y = x;
        loop {
            match &self.g.ops[y] {
                Op::Input { .. } => return (self.dims(y).len() == 2).then_some(y),
                Op::Cast { arg } | Op::Permute { arg, .. } => y = *arg,
                _ => return None,
            }
        }
    }

    /// True when every use of `u` is a matmul, directly or through casts and permutes.
    fn read_by_matmuls(&self, u: Value) -> bool {
        match &self.g.ops[u] {
            Op::MatMul { .. } => true,
            Op::Cast { .. } | Op::Permute { .. } => {
                self.users[u].iter().all(|&w| self.read_by_matmuls(w))
            }
            _ => false,
        }
    }

    /// `u` and the casts and permutes under it down to its matmuls (see
    /// [`Self::read_by_matmuls`]), recorded as readers admitted for the weight `w`.
    fn admit(&mut self, u: Value, w: Value) {
        self.relaxed.insert(u, w);
        if matches!(self.g.ops[u], Op::Cast { .. } | Op::Permute { .. }) {
            for x in self.users[u].clone() {
                self.admit(x, w);
            }
        }
    }

    /// Marks the input under `x` (`x` itself, or a chain of casts and permutes down to it),
    /// which the op `by` reads, as loaded split along `axis` of `x`; returns the input.
    ///
    /// Refused (with the reason) when the chain has anything but casts and permutes down to
    /// a step input, or when a value of it has another reader that `others` does not
    /// admit: that reader would see only a rank's block of what it reads whole.
    fn split_input(
        &mut self,
        x: Value,
        by: Value,
        axis: u32,
        role: &'static str,
        others: Others,
    ) -> Result<Value, String> {
        let mut chain = vec![x];
        let mut y = x;
        let mut axis_here = axis;
        loop {
            match &self.g.ops[y] {
                Op::Input { .. } => break,
                Op::Cast { arg } => y = *arg,
                Op::Permute { arg, perm } => {
                    axis_here = perm[axis_here as usize];
                    y = *arg;
                }
                op => {
                    return Err(format!(
                        "{} is computed by {} from its step input: only casts and permutes of a step input are loaded split",
                        self.named(x),
                        op_words(op)
                    ))
                }
            }
            chain.push(y);
        }
        let input = y;
        let strict = self.strict.get(&input);
        // The chain's values, each with its reader in the chain (`by` for `x`).
        let mut admitted = Vec::new();
        for (i, &c) in chain.iter().enumerate() {
            let reader = if i == 0 { by } else { chain[i - 1] };
            // The reader once; any other use, the reader's second operand included.
            let mut refused: Vec<String> = Vec::new();
            let mut seen = false;
            for &u in &self.users[c] {
                if u == reader && !seen {
                    seen = true;
                    continue;
                }
                let ok = match others {
                    _ if u == reader => false,
                    Others::Later => {
                        strict.is_none()
                            && u > by
                            && (self.read_by_matmuls(u)
                                || elementwise(&self.g.ops[u])
                                || matches!(self.g.ops[u], Op::Update { dst, at: None, .. } if dst == c))
                    }
                    Others::None => false,
                };
                if ok {
                    admitted.push(u);
                } else {
                    refused.push(u.to_string());
                }
            }
            if !refused.is_empty() {
                let also = match strict {
                    Some(why) => {
                        format!(" ({} is read whole everywhere: {why})", self.named(input))
                    }
                    None => String::new(),
                };
                return Err(format!(
                    "{} is also read by {}{also}: splitting it for the {role} would leave that reader only a rank's block (each rank would need all of it)",
                    self.named(c),
                    refused.join(", ")
                ));
            }
        }
        if others == Others::Later {
            for u in admitted {
                self.admit(u, input);
            }
        }
        self.sh[input.index()] = Sharding::Split { axis: axis_here };
        self.role[input.index()] = Some(role);
        // The chain above the input carries the split along its own axes.
        let mut a = axis_here;
        for &c in chain.iter().rev().skip(1) {
            if let Op::Permute { perm, .. } = &self.g.ops[c] {
                a = perm.iter().position(|&p| p == a).expect("a permutation") as u32;
            }
            self.sh[c.index()] = Sharding::Split { axis: a };
        }
        Ok(input)
    }

    fn op_sharding(&mut self, v: Value, op: &Op) -> Result<Sharding, String> {
        Ok(match op {
            // Decided by their first use (a matmul's weight, a cache's update) or replicated.
            Op::Input { .. } if self.presplit.contains_key(&v) && !self.strict.contains_key(&v) => {
                let a = self.presplit[&v];
                self.role[v.index()] = Some("tensor updated whole, split like its new value");
                for u in self.users[v].clone() {
                    self.admit(u, v);
                }
                Sharding::Split { axis: a }
            }
            Op::Input { .. } | Op::Const { .. } | Op::Iota { .. } => self.of(v),
            Op::Unary { arg, .. } | Op::Cast { arg } => self.of(*arg),
            Op::Binary { lhs, rhs, .. } => self.elementwise(v, &[*lhs, *rhs])?,
            Op::Select {
                cond,
                on_true,
                on_false,
            } => self.elementwise(v, &[*cond, *on_true, *on_false])?,
            Op::Broadcast { arg } => match self.of(*arg) {
                // Same rank: a split axis (size > 1) keeps its place.
                Sharding::Split { axis } => Sharding::Split { axis },
                s => s,
            },
            Op::Permute { arg, perm } => match self.of(*arg) {
                Sharding::Split { axis } => Sharding::Split {
                    axis: perm.iter().position(|&p| p == axis).expect("a permutation") as u32,
                },
                s => s,
            },
            Op::Reshape { arg } => match self.of(*arg) {
                Sharding::Split { axis } => {
                    let (from, to) = (self.dims(*arg), self.dims(v));
                    let Some(land) = reshape_split(from, to, axis) else {
                        return Err(format!(
                            "a reshape {from:?} → {to:?} of a value split along dim {axis}: no dim of the result holds its blocks contiguously"
                        ));
                    };
                    if to[land as usize] % self.tp as u64 != 0 {
                        return Err(format!(
                            "a reshape {from:?} → {to:?} of a value split along dim {axis}: the result's dim {land} is {}, which {} ranks cannot split evenly (heads must divide among the ranks)",
                            to[land as usize], self.tp
                        ));
                    }
                    Sharding::Split { axis: land }
                }
                s => s,
            },
            Op::Slice { arg, axis, .. } => match self.of(*arg) {
                Sharding::Split { axis: a } if a == *axis => {
                    return Err(format!("a slice along dim {a}, the partitioned one"))
                }
                s => s,
            },
            Op::Concat { args, axis } => {
                let s = self.elementwise(v, args)?;
                if s == (Sharding::Split { axis: *axis }) {
                    return Err(format!("a concat along dim {axis}, the partitioned one"));
                }
                s
            }
            Op::Reduce { arg, axis, .. } => match self.of(*arg) {
                Sharding::Split { axis: a } if a == *axis => {
                    return Err(format!(
                        "a reduction along dim {a}, the partitioned one (its sum would need a collective the plan does not place)"
                    ))
                }
                s => s,
            },
            Op::Softmax { arg, axis } => match self.of(*arg) {
                Sharding::Split { axis: a } if a == *axis => {
                    return Err(format!("a softmax along dim {a}, the partitioned one"))
                }
                s => s,
            },
            Op::TopK { arg, axis, .. } => match self.of(*arg) {
                Sharding::Split { axis: a } if a == *axis => {
                    return Err(format!("a topk along dim {a}, the partitioned one"))
                }
                s => s,
            },
            Op::Cumsum { arg, axis } => match self.of(*arg) {
                Sharding::Split { axis: a } if a == *axis => {
                    return Err(format!("a cumsum along dim {a}, the partitioned one"))
                }
                s => s,
            },
            // Rows read at positions known only at run time: a block of the gathered axis on
            // each rank would hold other rows than its indices name (a vocab-parallel
            // embedding needs a masked read and a sum the plan does not place). Split along
            // another axis, each rank gathers its block (an embedding split along H); a
            // table also read by a matmul is never split for it (`split_input` refuses a
            // weight with another reader), so it is read whole here.
            Op::Gather { arg, index, axis } => {
                for x in [*arg, *index] {
                    if self.of(x) == (Sharding::Split { axis: *axis }) {
                        return Err(format!(
                            "a gather along dim {axis} of {}, split along that dim: each rank would hold only a block of the rows the indices name",
                            self.named(x)
                        ));
                    }
                }
                self.elementwise(v, &[*arg, *index])?
            }
            Op::MatMul { lhs, rhs } => self.matmul(v, *lhs, *rhs)?,
            Op::Attention { .. } | Op::AttentionStat { .. } => {
                return Err("a fused attention op: partition before the `attention` pass".into())
            }
            Op::Grad { .. } => {
                return Err("a gradient placeholder: differentiate (the `grad` pass) before partitioning".into())
            }
            Op::Update { dst, rows, at } => {
                let what = match at {
                    Some(_) => "KV cache, split by heads",
                    None => "tensor updated whole, split like its new value",
                };
                let split = match (self.of(*rows), self.of(*dst)) {
                    (Sharding::Replicated, Sharding::Replicated) => None,
                    // Rows split by heads: the cache is loaded split like them.
                    (Sharding::Split { axis: a }, d) => {
                        if d != (Sharding::Split { axis: a }) {
                            self.divides(*dst, a)?;
                            let split = self.split_input(*dst, v, a, what, Others::None);
                            if let Err(e) = split {
                                // Read by elementwise ops before it is updated (an optimizer's
                                // moment): load it split from the start, so that they read
                                // its block (the plan is made again).
                                let early = matches!(self.g.ops[*dst], Op::Input { .. })
                                    && self.users[*dst]
                                        .iter()
                                        .all(|&u| u == v || u < v && elementwise(&self.g.ops[u]));
                                if early && !self.strict.contains_key(dst) {
                                    self.hint = Some((*dst, a));
                                }
                                return Err(format!("an update with rows split along dim {a}: {e}"));
                            }
                        }
                        Some(a)
                    }
                    // Whole rows into a split cache: each rank writes its block of them.
                    (Sharding::Replicated, Sharding::Split { axis: a }) => Some(a),
                    (Sharding::Partial, _) | (_, Sharding::Partial) => {
                        unreachable!("partials are completed at once")
                    }
                };
                let axis = match at {
                    Some(at) => at.axis,
                    // A whole update has no positions: any split is the value's.
                    None => return Ok(split.map_or(Sharding::Replicated, |a| Sharding::Split { axis: a })),
                };
                match split {
                    None => Sharding::Replicated,
                    Some(a) if a == axis => {
                        return Err(format!(
                            "an update split along dim {a}, the axis it writes at"
                        ))
                    }
                    Some(0) => {
                        return Err(
                            "an update split along dim 0, the one its positions index (each rank would need its part of the positions)"
                                .into(),
                        )
                    }
                    Some(a) => Sharding::Split { axis: a },
                }
            }
        })
    }

    /// The sharding of an elementwise op of `args`: the split of its split operands (one
    /// axis), each replicated operand sliced locally (its dim there the result's or 1).
    fn elementwise(&self, v: Value, args: &[Value]) -> Result<Sharding, String> {
        let mut axis = None;
        for &a in args {
            if let Sharding::Split { axis: x } = self.of(a) {
                match axis {
                    None => axis = Some(x),
                    Some(y) if y != x => {
                        return Err(format!("operands split along different dims ({y} and {x})"))
                    }
                    _ => {}
                }
            }
        }
        let Some(axis) = axis else {
            return Ok(Sharding::Replicated);
        };
        let n = self.dims(v)[axis as usize];
        for &a in args {
            if self.of(a) == Sharding::Replicated {
                let d = self.dims(a).get(axis as usize).copied().unwrap_or(1);
                if d != n && d != 1 {
                    return Err(format!(
                        "a replicated operand {a} of size {d} along the split dim {axis} (the result's is {n})"
                    ));
                }
            }
        }
        Ok(Sharding::Split { axis })
    }

    /// `v` under its casts.
    fn uncast(&self, mut v: Value) -> Value {
        while let Op::Cast { arg } = self.g.ops[v] {
            v = arg;
        }
        v
    }

    /// True for a 2-D matmul whose right operand is a weight ([`Self::input_under`]).
    fn by_weight(&self, m: Value) -> bool {
        matches!(self.g.ops[m], Op::MatMul { rhs, .. } if self.dims(m).len() == 2 && self.input_under(rhs).is_some())
    }

    /// The base layer of an adapter whose first factor `first` reads `x`: the last matmul
    /// by a weight before `first` whose left operand is `x` under casts, with `n` output
    /// columns (several projections of one `x` have adapters: each follows its own).
    fn base_of(&self, x: Value, first: Value, n: u64) -> Option<Value> {
        let mut stack = vec![x];
        let mut base = None;
        while let Some(y) = stack.pop() {
            for &u in &self.users[y] {
                match &self.g.ops[u] {
                    Op::Cast { .. } => stack.push(u),
                    Op::MatMul { lhs, .. }
                        if *lhs == y && u < first && self.by_weight(u) && self.dims(u)[1] == n =>
                    {
                        base = base.max(Some(u));
                    }
                    _ => {}
                }
            }
        }
        base
    }

    /// Why the matmul by a weight `v` (its operands replicated) is computed whole as part
    /// of a low-rank adapter, if it is one — a factored map `(x·Aᵀ)·Bᵀ` (each a matmul by a
    /// weight, casts between) beside a base matmul `x·Wᵀ` of the same `x` and width
    /// (LoRA: `W·x + B·A·x`), split like its base: Megatron's split of `W` applied to the
    /// product `B·A`. The rank between A and B is never split: for a column-parallel base,
    /// A is whole and B split by rows like W (the rule for `·Bᵀ` does that); after a
    /// row-parallel base, `x·Aᵀ` is a row-parallel partial like the base's, completed, and B
    /// is whole (this returns the reason for both whole cases).
    fn adapter_whole(&self, v: Value) -> Option<String> {
        let Op::MatMul { lhs, .. } = self.g.ops[v] else {
            return None;
        };
        // `v = x·Aᵀ`, read by `·Bᵀ`.
        let mut stack = vec![v];
        while let Some(y) = stack.pop() {
            for &u in &self.users[y] {
                match &self.g.ops[u] {
                    Op::Cast { .. } => stack.push(u),
                    Op::MatMul { lhs: l, .. } if *l == y && self.by_weight(u) => {
                        if let Some(base) = self.base_of(self.uncast(lhs), v, self.dims(u)[1]) {
                            return Some(format!(
                                "it is the first factor of a low-rank adapter ({v}, then {u}) of the base matmul {base}: its rank ({}) is not split",
                                self.dims(v)[1]
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        // `v = (x·Aᵀ)·Bᵀ` after a base that is not split by columns.
        let first = self.uncast(lhs);
        if self.by_weight(first) {
            let Op::MatMul { lhs: x, .. } = self.g.ops[first] else {
                unreachable!("by_weight is a matmul")
            };
            let base = self.base_of(self.uncast(x), first, self.dims(v)[1])?;
            if self.of(base) != (Sharding::Split { axis: 1 }) {
                return Some(format!(
                    "it is the second factor of a low-rank adapter ({first}, then {v}) of the base matmul {base}, which is whole on every rank (row-parallel and completed, or unsplit): it is whole too"
                ));
            }
        }
        None
    }

    fn matmul(&mut self, v: Value, lhs: Value, rhs: Value) -> Result<Sharding, String> {
        let rank = self.dims(v).len() as u32;
        let (sl, sr) = (self.of(lhs), self.of(rhs));
        // A weight: a 2-D step input under casts and permutes (stored [N, K] and read
        // transposed, as checkpoints store projections, or stored [K, N]), the right
        // operand of a 2-D matmul.
        let weight = (rank == 2).then(|| self.input_under(rhs)).flatten();
        match (sl, sr, weight) {
            // Column-parallel: x replicated, the weight split along N — or, where the weight
            // cannot be split because something else reads it, the matmul computed whole on
            // every rank, with a note saying why. (An N the ranks do not divide is an error,
            // not a replication: the plan's structure must not depend on the world size, or
            // neither would its sums' association.)
            (Sharding::Replicated, Sharding::Replicated, Some(w)) => {
                if let Some(why) = self.adapter_whole(v) {
                    self.notes.push(format!(
                        "{v} (a matmul by the weight {}) is computed whole on every rank: {why}",
                        self.named(w)
                    ));
                    return Ok(Sharding::Replicated);
                }
                self.divides(v, rank - 1)?;
                let split = self.split_input(
                    rhs,
                    v,
                    rank - 1,
                    "column-parallel weight (output columns)",
                    Others::Later,
                );
                match split {
                    Ok(_) => Ok(Sharding::Split { axis: rank - 1 }),
                    Err(why) => {
                        self.notes.push(format!(
                            "{v} (a matmul by the weight {}) is computed whole on every rank: {why}",
                            self.named(w)
                        ));
                        Ok(Sharding::Replicated)
                    }
                }
            }
            // Row-parallel: x split along K, the weight split along K.
            (Sharding::Split { axis }, Sharding::Replicated, Some(_)) if axis == rank - 1 => {
                let k = self.dims(lhs)[axis as usize];
                if k % (REDUCE_CHUNKS as u64) != 0 {
                    return Err(format!(
                        "a row-parallel matmul with K = {k}, not a multiple of the {REDUCE_CHUNKS} ranges of the deterministic reduction"
                    ));
                }
                self.split_input(
                    rhs,
                    v,
                    rank - 2,
                    "row-parallel weight (input rows)",
                    Others::Later,
                )?;
                Ok(Sharding::Partial)
            }
            // Both operands split along the dim the matmul contracts (a backward's
            // `dX = dY·W` of a column-parallel `Y = X·Wᵀ`, `dU = dV·B` of an adapter's B):
            // each rank's product is a partial sum over its part of K, completed as a
            // row-parallel matmul's is — K in the same 8 ranges, the same fixed tree.
            (Sharding::Split { axis: a }, Sharding::Split { axis: b }, _)
                if a == rank - 1 && b == rank - 2 =>
            {
                let k = self.dims(lhs)[a as usize];
                if k % (REDUCE_CHUNKS as u64) != 0 {
                    return Err(format!(
                        "a matmul contracting its split dim with K = {k}, not a multiple of the {REDUCE_CHUNKS} ranges of the deterministic reduction"
                    ));
                }
                Ok(Sharding::Partial)
            }
            (Sharding::Replicated, Sharding::Replicated, None) => Ok(Sharding::Replicated),
            // Activations split along a batch axis (heads): the matmul runs per head.
            // Rows of x (M) or columns of an activation on the right (N) split: each rank
            // multiplies its block by the whole other operand.
            (Sharding::Split { axis }, Sharding::Replicated, _) if axis == rank - 2 => {
                Ok(Sharding::Split { axis })
            }
            (Sharding::Replicated, Sharding::Split { axis }, _) if axis == rank - 1 => {
                Ok(Sharding::Split { axis })
            }
            (a, b, _) => {
                let batch = |s: Sharding, x: Value| {
                    match s {
                    Sharding::Split { axis } if axis + 2 < self.dims(x).len() as u32 => {
                        Ok(Some(axis))
                    }
                    Sharding::Replicated => Ok(None),
                    Sharding::Split { axis } => Err(format!(
                        "a matmul operand {x} split along dim {axis}, which it contracts (K) or which is not a batch dim: its products would need a collective the plan does not place"
                    )),
                    Sharding::Partial => unreachable!("partials are completed at once"),
                }
                };
                let (ba, bb) = (batch(a, lhs)?, batch(b, rhs)?);
                match (ba, bb) {
                    (Some(x), Some(y)) if x == y => Ok(Sharding::Split { axis: x }),
                    (Some(x), None) | (None, Some(x)) => {
                        // The replicated operand broadcasts along the split dim (size 1), or
                        // each rank takes its block of it (the result's size there).
                        let other = if ba.is_some() { rhs } else { lhs };
                        let d = self.dims(other)[x as usize];
                        if d != 1 && d != self.dims(v)[x as usize] {
                            return Err(format!(
                                "a matmul of an operand split along batch dim {x} and a replicated one of size {d} there"
                            ));
                        }
                        Ok(Sharding::Split { axis: x })
                    }
                    (a, b) => Err(format!(
                        "a matmul whose operands are split along different dims ({}, {})",
                        a.map_or("none".to_string(), |x| x.to_string()),
                        b.map_or("none".to_string(), |x| x.to_string())
                    )),
                }
            }
        }
    }
}

/// Where a split along `axis` of shape `from` lands after a reshape to `to` (the split
/// dim's size a multiple of `tp`). Rank r holds the flat indices whose digit of base `tp`
/// at place `hi / tp` is r, where `hi` is the product of the split dim and the dims inside
/// it; a result dim with the same `hi`, its size a multiple of `tp` (the caller checks),
/// holds exactly those as its block r. `None` when no result dim has that `hi`.
fn reshape_split(from: &[u64], to: &[u64], axis: u32) -> Option<u32> {
    let top = |s: &[u64], k: usize| -> u64 { s[k..].iter().product() };
    let hi = top(from, axis as usize);
    (0..to.len())
        .find(|&k| to[k] > 1 && top(to, k) == hi)
        .map(|k| k as u32)
}

/// An op computed element by element from operands of its own shape (or broadcast to it).
fn elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary { .. } | Op::Binary { .. } | Op::Select { .. } | Op::Cast { .. }
    )
}

/// What a plan that splits nothing means, in words.
pub const NOTHING_SPLIT: &str = "nothing is split: every rank computes the whole step (the plan splits 2-D matmuls whose right operand is a weight, a step input read in place, and what follows from them)";

impl TpPlan {
    /// The row-parallel matmuls (each completed by a [`Collective::SumPartials`]).
    pub fn row_parallel(&self) -> std::collections::HashSet<Value> {
        self.collectives
            .iter()
            .filter_map(|c| match c {
                Collective::SumPartials { matmul, .. } => Some(*matmul),
                Collective::Gather { .. } => None,
            })
            .collect()
    }

    /// True when every value is replicated: each rank would compute the whole step.
    pub fn splits_nothing(&self) -> bool {
        self.sharding.iter().all(|x| *x == Sharding::Replicated) && self.collectives.is_empty()
    }

    /// The plan in words, as `tessel explain --tp N` prints it: each input's shard, each
    /// collective with the bytes each rank sends.
    pub fn describe(&self, g: &Graph) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tensor-parallel plan over {} (Megatron-LM split; K of each row-parallel matmul in {REDUCE_CHUNKS} ranges summed along a fixed tree, one association at every world size; docs/tensor-parallel.md):",
            if self.tp == 1 { "1 rank".to_string() } else { format!("{} ranks", self.tp) }
        );
        for i in &self.inputs {
            let shape = &g.ty(i.value).shape.0;
            let what = match i.sharding {
                Sharding::Replicated => "whole on every rank".to_string(),
                Sharding::Split { axis } => {
                    let mut block = shape.clone();
                    block[axis as usize] /= self.tp as u64;
                    format!("split along dim {axis}: rank r holds block r, {block:?}")
                }
                Sharding::Partial => "partial".to_string(),
            };
            let _ = writeln!(s, "  input {} {shape:?}: {what} ({})", i.name, i.role);
        }
        for c in &self.collectives {
            match c {
                Collective::SumPartials { matmul, bytes } => {
                    let _ = writeln!(
                        s,
                        "  after {matmul} {:?} (row-parallel matmul): all-gather of each rank's f32 subtree sum, {bytes} bytes sent per rank, then the fixed-tree sum and one rounding on every rank",
                        g.ty(*matmul).shape.0
                    );
                }
                Collective::Gather {
                    value,
                    names,
                    axis,
                    bytes,
                } => {
                    let _ = writeln!(
                        s,
                        "  result {} {:?}: gathered along dim {axis}, {bytes} bytes sent per rank",
                        names.join(" = "),
                        g.ty(*value).shape.0
                    );
                }
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        if self.splits_nothing() {
            let _ = writeln!(s, "  {NOTHING_SPLIT}");
        }
        s
    }
}

/// `ty` as a rank holds it under `sh`: along a split axis, one of `tp` equal blocks.
fn block(ty: &TensorType, sh: Sharding, tp: u32) -> TensorType {
    let mut t = ty.clone();
    if let Sharding::Split { axis } = sh {
        t.shape.0[axis as usize] /= tp as u64;
    }
    t
}

/// The value a [`Builder`] call made: the plan's blocks and ranges divide their axes
/// evenly (`plan` checks it), so the rules refuse nothing the rank graphs are built from.
///
/// Panics if one does: a bug in this pass.
pub(super) fn built(r: Built) -> Value {
    r.unwrap_or_else(|e| panic!("tp built an ill-typed op: {e}"))
}

/// Rank `r`'s block along `axis` of the value `x` of `s` (one of `tp` equal blocks).
fn slice_block(s: &mut Graph, x: Value, axis: u32, r: u32, tp: u32) -> Value {
    let len = block(s.ty(x), Sharding::Split { axis }, tp).shape.0[axis as usize];
    built(Builder::new(s).slice(x, axis, r as u64 * len, len))
}

/// Operand `x` (in `s`) of rank `r`'s copy of `op`, whose result is split as `sh`, where the
/// original operand `a` is replicated: an elementwise op's replicated operand, a matmul's
/// along a batch axis, or an update's rows, of the whole size along the split axis is
/// sliced to the rank's block (no communication; the plan allowed only that size or 1 there). Other
/// operands are used as they are.
fn local_operand(
    s: &mut Graph,
    (g, plan): (&Graph, &TpPlan),
    op: &Op,
    (v, a): (Value, Value),
    x: Value,
    r: u32,
) -> Value {
    let (sh, a_sh) = (plan.sharding[v.index()], plan.sharding[a.index()]);
    let (Sharding::Split { axis }, Sharding::Replicated) = (sh, a_sh) else {
        return x;
    };
    let sliced = match op {
        Op::Unary { .. }
        | Op::Binary { .. }
        | Op::Select { .. }
        | Op::Cast { .. }
        | Op::Concat { .. }
        | Op::Gather { .. } => true,
        Op::MatMul { .. } => axis as usize + 2 < g.ty(v).shape.rank(),
        // Whole rows written into a split cache: the rank's block of them.
        Op::Update { rows, .. } => a == *rows,
        _ => false,
    };
    let whole = g.ty(a).shape.0.get(axis as usize) == Some(&g.ty(v).shape.0[axis as usize]);
    if sliced && whole {
        slice_block(s, x, axis, r, plan.tp)
    } else {
        x
    }
}

/// `v` (in `s`) cut along `axis` into `count` equal contiguous ranges, in order.
fn k_ranges(s: &mut Graph, v: Value, axis: u32, count: u32) -> Vec<Value> {
    let len = s.ty(v).shape.0[axis as usize] / count as u64;
    let mut b = Builder::new(s);
    (0..count as u64)
        .map(|c| built(b.slice(v, axis, c * len, len)))
        .collect()
}

/// `v` (in `s`) as f32: itself, or its widening cast (exact).
fn widened(s: &mut Graph, v: Value) -> Value {
    built(Builder::new(s).cast(v, DType::F32))
}

/// One rank's part of a row-parallel matmul whose whole result has type `out`: its K
/// ranges (`xs[c]` `[.., M, K / REDUCE_CHUNKS]` and `ws[c]` `[.., K / REDUCE_CHUNKS, N]`,
/// `REDUCE_CHUNKS / tp` of them, in K order), each `f32(x_range) @ f32(w_range)` summed from
/// 0, added along their subtree of the fixed tree ([`tree_sum`]) into one f32 tensor.
fn subtree_sum(s: &mut Graph, out: &TensorType, xs: &[Value], ws: &[Value]) -> Value {
    let leaves = xs
        .iter()
        .zip(ws)
        .map(|(&x, &w)| {
            let (xf, wf) = (widened(s, x), widened(s, w));
            let mm = built(Builder::new(s).matmul(xf, wf));
            debug_assert_eq!(s.ty(mm).shape, out.shape);
            mm
        })
        .collect();
    tree_sum(s, leaves)
}

/// `leaves` (f32, one type, a power of two of them) added pairwise, level by level, in
/// order: `((l0 + l1) + (l2 + l3)) + ...`. The fixed tree of the deterministic reduction:
/// a rank's subtree is one call over its ranges, the ranks' sums one call over the ranks.
fn tree_sum(s: &mut Graph, mut leaves: Vec<Value>) -> Value {
    while leaves.len() > 1 {
        leaves = leaves
            .chunks(2)
            .map(|p| built(Builder::new(s).add(p[0], p[1])))
            .collect();
    }
    leaves[0]
}

/// The f32 `sum` rounded once to `ty`'s dtype (nothing to do for f32).
fn round_to(s: &mut Graph, sum: Value, ty: &TensorType) -> Value {
    debug_assert_eq!(s.ty(sum).shape, ty.shape);
    built(Builder::new(s).cast(sum, ty.dtype))
}

/// An op's kind in words, for messages.
fn op_words(op: &Op) -> &'static str {
    match op {
        Op::Input { .. } => "an input",
        Op::Const { .. } => "a constant",
        Op::Iota { .. } => "an iota",
        Op::Unary { .. } => "a unary op",
        Op::Binary { .. } => "a binary op",
        Op::Select { .. } => "a select",
        Op::Cast { .. } => "a cast",
        Op::Broadcast { .. } => "a broadcast",
        Op::Reshape { .. } => "a reshape",
        Op::Permute { .. } => "a permute",
        Op::Slice { .. } => "a slice",
        Op::Concat { .. } => "a concat",
        Op::Reduce { .. } => "a reduction",
        Op::Softmax { .. } => "a softmax",
        Op::TopK { .. } => "a topk",
        Op::Cumsum { .. } => "a cumsum",
        Op::MatMul { .. } => "a matmul",
        Op::Attention { .. } => "an attention",
        Op::AttentionStat { .. } => "an attention's row statistic",
        Op::Update { .. } => "an update",
        Op::Gather { .. } => "a gather",
        Op::Grad { .. } => "a gradient",
    }
}
