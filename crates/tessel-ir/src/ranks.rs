//! Tensor-parallel programs: what each of `tp` ranks runs (issue 10).
//!
//! A step partitioned over `tp` ranks (tessel-passes `tp::ranks`) becomes one [`Rank`] per
//! rank. A rank's work is a list of [`Phase`]s, each an ordinary step (a graph before
//! compilation, a kernel [`crate::kernel::Program`] after: the type parameter `P`) with
//! the [`Exchange`]s that follow it. Between phases, data moves by name through the rank's
//! *slots*:
//!
//! - a step input is the slot of its name, holding the rank's block of it ([`RankInput`]);
//! - a phase's outputs are slots of their names; a later phase names them as inputs (a
//!   value that crosses an exchange is carried this way); an `inout` phase input updated in
//!   place is the slot of its name, updated;
//! - an exchange is an all-gather: every rank sends its slot `send` (all ranks' of one
//!   type) and every rank receives slot `recv`, the ranks' tensors stacked along a new
//!   leading axis in rank order (`[tp, ...]`): NCCL's `ncclAllGather` layout.
//!
//! A runtime needs nothing else: the executor (tessel-ref `exec::run_ranks`) runs the ranks
//! in one process with host copies for the exchanges, the GPU harness runs one thread per
//! GPU over NCCL.

use crate::types::TensorType;

/// One rank's program.
#[derive(Clone, Debug)]
pub struct Rank<P> {
    /// This rank, `0..tp`.
    pub rank: u32,
    /// The world size.
    pub tp: u32,
    /// The step's parameters, by name, in order: what [`RankInput::param`] counts.
    pub params: Vec<String>,
    /// What the rank holds of the step's inputs, by parameter; a parameter may give several
    /// slots (a row-parallel weight: one per K range) or none.
    pub inputs: Vec<RankInput>,
    /// The phases in the order they run.
    pub phases: Vec<Phase<P>>,
    /// The step's outputs in result order.
    pub outputs: Vec<RankOutput>,
}

/// A slot a rank loads from one step input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInput {
    /// The slot's name: the parameter's, or `"{param}:range{i}"` for one K range of a
    /// row-parallel weight.
    pub name: String,
    /// The step parameter it is cut from, by position.
    pub param: u32,
    /// Which block of the whole tensor the slot holds; `None`: all of it.
    pub block: Option<Block>,
    /// The slot's type (the block's).
    pub ty: TensorType,
}

/// Block `index` of `count` equal contiguous blocks along `axis` of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub axis: u32,
    pub index: u32,
    pub count: u32,
}

/// A step of one rank and the collectives after it.
#[derive(Clone, Debug)]
pub struct Phase<P> {
    /// The phase's step: its inputs and outputs are slots, by name.
    pub body: P,
    /// All-gathers that run once the phase is done, in order.
    pub exchanges: Vec<Exchange>,
}

/// An all-gather over the ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The slot every rank sends (the same type on every rank).
    pub send: String,
    /// The slot every rank receives: the sent tensors stacked in rank order, `[tp, ...]`.
    pub recv: String,
    /// The type sent by each rank.
    pub ty: TensorType,
}

/// One step output as a rank holds it when the last phase is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankOutput {
    /// The step's name for it.
    pub name: String,
    /// The slot holding it.
    pub slot: String,
    /// `Some(axis)`: the rank holds its block along `axis` (an updated KV cache stays split:
    /// each rank keeps its heads); the whole is the blocks concatenated in rank order.
    /// `None`: every rank holds all of it.
    pub split: Option<u32>,
}

impl<P> Rank<P> {
    /// The same rank with every phase's body mapped by `f` (e.g. compiled), stopping at
    /// the first error.
    pub fn try_map<Q, E>(self, mut f: impl FnMut(P) -> Result<Q, E>) -> Result<Rank<Q>, E> {
        let phases = self
            .phases
            .into_iter()
            .map(|p| {
                Ok(Phase {
                    body: f(p.body)?,
                    exchanges: p.exchanges,
                })
            })
            .collect::<Result<_, E>>()?;
        Ok(Rank {
            rank: self.rank,
            tp: self.tp,
            params: self.params,
            inputs: self.inputs,
            phases,
            outputs: self.outputs,
        })
    }

    /// The same rank with every phase's body `f` of this one's (e.g. the program of a
    /// compilation result).
    pub fn map<Q>(&self, mut f: impl FnMut(&P) -> Q) -> Rank<Q> {
        Rank {
            rank: self.rank,
            tp: self.tp,
            params: self.params.clone(),
            inputs: self.inputs.clone(),
            phases: self
                .phases
                .iter()
                .map(|p| Phase {
                    body: f(&p.body),
                    exchanges: p.exchanges.clone(),
                })
                .collect(),
            outputs: self.outputs.clone(),
        }
    }

    /// Every exchange of the rank, in the order they run.
    pub fn exchanges(&self) -> impl Iterator<Item = &Exchange> {
        self.phases.iter().flat_map(|p| &p.exchanges)
    }
}
