//! Tensor-parallel ranks on the host (issue 10): each rank's inputs cut from the whole
//! tensors ([`shard`]), the whole outputs put back together from the ranks' ([`assemble`]),
//! and every rank of a step run on the executor with the all-gathers done by host copies
//! ([`run_ranks`]) — the CPU runtime of `tessel run --tp N --cpu` and of the tests, and the
//! reference the GPU runtime's bits are judged against.

use crate::exec::{run_program, ExecError};
use crate::Tensor;
use std::collections::HashMap;
use tessel_ir::kernel::Program;
use tessel_ir::ranks::Rank;
use tessel_ir::TensorType;

/// Why the ranks could not run, or disagree.
#[derive(Debug, thiserror::Error)]
pub enum RanksError {
    #[error("input `{name}` is {given}; rank {rank} of {tp} takes {block} of it, so the whole must be {whole}")]
    BadInput {
        name: String,
        given: String,
        whole: String,
        block: String,
        rank: u32,
        tp: u32,
    },
    #[error("{given} step inputs given, the step takes {takes}")]
    InputCount { given: usize, takes: usize },
    #[error("rank {rank}, phase {phase}: slot `{slot}` is read before anything wrote it")]
    MissingSlot {
        rank: u32,
        phase: usize,
        slot: String,
    },
    #[error("rank {rank}, phase {phase}: {source}")]
    Exec {
        rank: u32,
        phase: usize,
        source: Box<ExecError>,
    },
    #[error("the all-gather of `{slot}`: rank {rank} sends {given}, the exchange is of {ty}")]
    Exchange {
        slot: String,
        rank: u32,
        given: String,
        ty: String,
    },
    #[error("output `{name}` is meant to be whole on every rank, but rank {rank}'s differs from rank 0's")]
    Disagree { name: String, rank: u32 },
}

/// `rank`'s input slots, in [`Rank::inputs`] order, cut from the `whole` step inputs (in
/// parameter order): each slot's block of its parameter, or all of it.
///
/// Errors: a count or a type that is not the step's.
pub fn shard<P>(rank: &Rank<P>, whole: &[Tensor]) -> Result<Vec<Tensor>, RanksError> {
    if whole.len() != rank.params.len() {
        return Err(RanksError::InputCount {
            given: whole.len(),
            takes: rank.params.len(),
        });
    }
    rank.inputs
        .iter()
        .map(|i| {
            let t = &whole[i.param as usize];
            let mut want = i.ty.clone();
            if let Some(b) = i.block {
                want.shape.0[b.axis as usize] *= b.count as u64;
            }
            if t.ty != want || t.data.len() as u64 != want.size_bytes() {
                return Err(RanksError::BadInput {
                    name: rank.params[i.param as usize].clone(),
                    given: t.ty.to_string(),
                    whole: want.to_string(),
                    block: i.ty.to_string(),
                    rank: rank.rank,
                    tp: rank.tp,
                });
            }
            Ok(match i.block {
                Some(b) => t.block(b.axis, b.index, b.count),
                None => t.clone(),
            })
        })
        .collect()
}

/// The step's whole outputs from every rank's (`outputs[r]`: rank r's, in [`Rank::outputs`]
/// order): a split output's blocks concatenated in rank order, a whole one rank 0's — after
/// checking that every rank holds the same bits (the plan's promise).
pub fn assemble<P>(ranks: &[Rank<P>], outputs: &[Vec<Tensor>]) -> Result<Vec<Tensor>, RanksError> {
    ranks[0]
        .outputs
        .iter()
        .enumerate()
        .map(|(i, o)| match o.split {
            Some(axis) => {
                let parts: Vec<Tensor> = outputs.iter().map(|r| r[i].clone()).collect();
                Ok(Tensor::concat(axis, &parts))
            }
            None => {
                if let Some(r) = (1..outputs.len()).find(|&r| outputs[r][i] != outputs[0][i]) {
                    return Err(RanksError::Disagree {
                        name: o.name.clone(),
                        rank: r as u32,
                    });
                }
                Ok(outputs[0][i].clone())
            }
        })
        .collect()
}

/// The all-gather of `parts` (one per rank, each of type `ty`): stacked in rank order along
/// a new leading axis, `[tp, ...]` — what `ncclAllGather` leaves on every rank.
pub fn stack(parts: &[&Tensor], ty: &TensorType) -> Tensor {
    let mut t = ty.clone();
    t.shape.0.insert(0, parts.len() as u64);
    let mut data = Vec::with_capacity(t.size_bytes() as usize);
    for p in parts {
        data.extend_from_slice(&p.data);
    }
    Tensor { ty: t, data }
}

/// Runs every rank of a step (`ranks[r]` is rank r, each phase compiled) on the executor:
/// phase by phase, every rank's kernels and then the phase's all-gathers as host copies.
/// `whole` are the step's inputs, whole, in parameter order; the result is the step's
/// outputs, whole ([`assemble`]).
///
/// Errors: bad inputs, a kernel's fault (with its rank and phase), a slot read before it
/// is written, an exchange of the wrong type, ranks that disagree on a whole output.
pub fn run_ranks(ranks: &[Rank<Program>], whole: &[Tensor]) -> Result<Vec<Tensor>, RanksError> {
    let mut slots: Vec<HashMap<String, Tensor>> = ranks
        .iter()
        .map(|r| {
            let mine = shard(r, whole)?;
            Ok(r.inputs.iter().map(|i| i.name.clone()).zip(mine).collect())
        })
        .collect::<Result<_, RanksError>>()?;
    let phases = ranks[0].phases.len();
    for k in 0..phases {
        for (r, rank) in ranks.iter().enumerate() {
            let p = &rank.phases[k].body;
            let inputs = p
                .inputs
                .iter()
                .map(|(name, _)| {
                    slots[r]
                        .get(name)
                        .cloned()
                        .ok_or_else(|| RanksError::MissingSlot {
                            rank: rank.rank,
                            phase: k,
                            slot: name.clone(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let outs = run_program(p, &inputs).map_err(|source| RanksError::Exec {
                rank: rank.rank,
                phase: k,
                source: Box::new(source),
            })?;
            for ((name, _), t) in p.outputs.iter().zip(outs) {
                slots[r].insert(name.clone(), t);
            }
        }
        for e in &ranks[0].phases[k].exchanges {
            let mut parts = Vec::with_capacity(ranks.len());
            for (r, s) in slots.iter().enumerate() {
                let t = s.get(&e.send).ok_or_else(|| RanksError::MissingSlot {
                    rank: r as u32,
                    phase: k,
                    slot: e.send.clone(),
                })?;
                if t.ty != e.ty {
                    return Err(RanksError::Exchange {
                        slot: e.send.clone(),
                        rank: r as u32,
                        given: t.ty.to_string(),
                        ty: e.ty.to_string(),
                    });
                }
                parts.push(t);
            }
            let gathered = stack(&parts, &e.ty);
            for s in slots.iter_mut() {
                s.insert(e.recv.clone(), gathered.clone());
            }
        }
    }
    let outputs: Vec<Vec<Tensor>> = ranks
        .iter()
        .zip(&slots)
        .map(|(rank, s)| {
            rank.outputs
                .iter()
                .map(|o| {
                    s.get(&o.slot)
                        .cloned()
                        .ok_or_else(|| RanksError::MissingSlot {
                            rank: rank.rank,
                            phase: phases,
                            slot: o.slot.clone(),
                        })
                })
                .collect()
        })
        .collect::<Result<_, _>>()?;
    assemble(ranks, &outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessel_ir::DType;

    /// Blocks along any axis, concatenated in order, give the tensor back; a block's bytes
    /// are the elements whose index along the axis falls in it.
    #[test]
    fn blocks_concatenate_to_the_whole() {
        let t = Tensor::random(TensorType::new(DType::Bf16, vec![4, 6, 8]), 7);
        for axis in 0..3 {
            for n in [1, 2] {
                let parts: Vec<Tensor> = (0..n).map(|r| t.block(axis, r, n)).collect();
                assert_eq!(Tensor::concat(axis, &parts), t, "axis {axis}, {n} blocks");
            }
        }
        // Block 1 of 2 along axis 1 of a [2, 4] i32 tensor: columns 2 and 3 of each row.
        let x = Tensor::from_i32(vec![2, 4], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(x.block(1, 1, 2).to_i32_vec(), vec![2, 3, 6, 7]);
        assert_eq!(x.block(0, 1, 2).to_i32_vec(), vec![4, 5, 6, 7]);
    }

    /// The all-gather's layout: the ranks' tensors one after another, `[tp, ...]`.
    #[test]
    fn stack_puts_the_ranks_in_order_along_a_new_axis() {
        let ty = TensorType::new(DType::I32, vec![2]);
        let a = Tensor::from_i32(vec![2], &[1, 2]);
        let b = Tensor::from_i32(vec![2], &[3, 4]);
        let s = stack(&[&a, &b], &ty);
        assert_eq!(s.ty.shape.0, vec![2, 2]);
        assert_eq!(s.to_i32_vec(), vec![1, 2, 3, 4]);
    }
}
