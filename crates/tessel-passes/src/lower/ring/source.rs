//! Where a ring's tiles come from: a matmul or attention operand as a 2-d tile source — a
//! materialised tensor, its transpose, or a strided view of one read in place — and the
//! global address of any of its elements. Every loader reads through it (the `cp.async`
//! copy plan today, a TMA tensor map's dims and strides next).

use crate::lower::{Gen, Ix};
use tessel_ir::graph::MatmulRead;
use tessel_ir::kernel::{Op, Operand, RegType};
use tessel_ir::{Reg, Value};

/// One matmul operand as the tile copies it: the materialised tensor `base` with its last
/// dim `cols` (contiguous), and whether `cols` is the K dim — or, with `view`, a strided
/// view of `base` read in place (a head view `[B, H, T, d]` of a `[B·T, H·d]` projection,
/// GQA's broadcast of K over a group's heads): `cols` its contiguous dim's size.
#[derive(Clone)]
pub(in crate::lower) struct Operand2d {
    pub(in crate::lower) base: Value,
    pub(in crate::lower) cols: u64,
    pub(in crate::lower) k_contiguous: bool,
    pub(in crate::lower) view: Option<ViewRead>,
}

/// Where a strided operand's elements are: tile index `[lead.., row, col]` (the matmul's
/// batch dims, then the operand's other dim and its contiguous one, stride 1) is element
/// `offset + Σ lead·strides + row·strides[last]` of `base` (crate::view::StridedView).
#[derive(Clone)]
pub(in crate::lower) struct ViewRead {
    pub(in crate::lower) offset: u64,
    /// Strides of the batch dims, then of the row.
    pub(in crate::lower) strides: Vec<u64>,
}

impl Operand2d {
    /// Elements between consecutive rows.
    pub(in crate::lower) fn row_stride(&self) -> u64 {
        match &self.view {
            Some(v) => *v.strides.last().expect("a row stride"),
            None => self.cols,
        }
    }

    /// Whether every row starts on a 16-byte boundary of `esz`-byte elements and holds
    /// whole 16-byte chunks (so a chunk never reaches into the next row).
    pub(in crate::lower) fn rows_aligned(&self, esz: u64) -> bool {
        let whole = (self.cols * esz) % 16 == 0;
        match &self.view {
            None => whole,
            Some(v) => {
                whole
                    && std::iter::once(v.offset)
                        .chain(v.strides.iter().copied())
                        .all(|x| (x * esz) % 16 == 0)
            }
        }
    }
}

impl Gen<'_> {
    /// A matmul operand, as its kernel reads it ([`Gen::operand_reads`]), as a 2-d tile
    /// source, or `None` if it is neither a materialised tensor nor the swap of the last
    /// two dims of one. Under a widening cast the source is the 16-bit tensor: the ring
    /// holds its elements as they are, and tensor cores take them as 16-bit operands.
    pub(in crate::lower) fn operand_2d(
        &self,
        read: &MatmulRead,
        k_is_last: bool,
    ) -> Option<Operand2d> {
        let base = read.stored;
        let swapped = match &read.perm {
            Some(perm) if !crate::schedule::swaps_last_two(perm) => return None,
            Some(_) => true,
            None => false,
        };
        if !self.fusion.is_materialized(self.g, base) {
            return None;
        }
        let s = &self.g.ty(base).shape.0;
        let r = s.len();
        Some(Operand2d {
            base,
            cols: s[r - 1],
            // The lhs [M, K] has K last unless swapped; the rhs [K, N] has K last only if
            // swapped (a [N, K] weight read transposed).
            k_contiguous: k_is_last != swapped,
            view: None,
        })
    }

    /// The matmul operand `x` (`[.., M, K]` for the lhs, `[.., K, N]` for the rhs, as
    /// `k_is_last` says) as a strided view of a materialised tensor read in place, when
    /// [`Gen::operand_2d`] has no tile source for it: its base the first materialised value
    /// of its view chain, one of its last two dims of stride 1
    /// ([`crate::schedule::strided_operand`], which the schedule asked).
    pub(in crate::lower) fn operand_view(&self, x: Value, k_is_last: bool) -> Option<Operand2d> {
        let (sv, last_contiguous) = crate::schedule::strided_operand(
            self.g,
            &|v| self.fusion.is_materialized(self.g, v),
            x,
        )?;
        let r = sv.shape.len();
        // Tile order: the contiguous dim last.
        let (row, col) = if last_contiguous {
            (r - 2, r - 1)
        } else {
            (r - 1, r - 2)
        };
        let mut strides = sv.strides[..r - 2].to_vec();
        strides.push(sv.strides[row]);
        Some(Operand2d {
            base: sv.base,
            cols: sv.shape[col],
            // The lhs has K at r - 1, the rhs at r - 2.
            k_contiguous: (col == r - 1) == k_is_last,
            view: Some(ViewRead {
                offset: sv.offset,
                strides,
            }),
        })
    }

    /// Byte address of tile index `idx` (`[lead.., row, col]`) of operand `op`.
    pub(in crate::lower) fn operand_address(&mut self, op: &Operand2d, idx: &[Ix]) -> Reg {
        let Some(v) = &op.view else {
            return self.address(op.base, idx);
        };
        let r = idx.len();
        let mut off = self.iadd(Ix::C(v.offset), idx[r - 1]);
        for (&i, &st) in idx[..r - 1].iter().zip(&v.strides) {
            let t = self.imul_c(i, st);
            off = self.iadd(off, t);
        }
        let fo = self.ix_op(off);
        let esz = self.g.ty(op.base).dtype.size_bytes() as u32;
        let bytes = self
            .b
            .op(RegType::U64, Op::MulWideU32, &[fo, Operand::U32(esz)]);
        let base = self.ptr[&op.base];
        self.b
            .op(RegType::U64, Op::AddU64, &[base.into(), bytes.into()])
    }
}
