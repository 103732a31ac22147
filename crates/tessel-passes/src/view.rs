//! Strided views: a chain of shape ops (permute, reshape, broadcast, slice) over a stored
//! tensor, described as an element offset and one stride per dim, so that a kernel reads
//! the view in place instead of a copy (numpy's strided arrays; the reshape rule is
//! numpy's `_attempt_nocopy_reshape`: a reshape keeps a view only where the dims it merges
//! or splits are contiguous with one another).

use tessel_ir::graph::{Graph, Op};
use tessel_ir::Value;

/// `view[i_0, .., i_n]` is element `offset + Σ i_k · strides[k]` of the row-major tensor
/// `base` (a broadcast dim has stride 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StridedView {
    pub base: Value,
    pub offset: u64,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

impl StridedView {
    /// Elements between consecutive indices of `row_dim` as a TMA tensor map may take them
    /// (`ring/tma.rs`): the view's stride, or, for a dim of one index (whose stride is
    /// never used), the columns `col_dim` rounded up to whole 16-byte chunks of `esz`-byte
    /// elements.
    pub fn tma_row_stride(&self, (col_dim, row_dim): (usize, usize), esz: u64) -> u64 {
        match self.shape[row_dim] {
            1 => (self.shape[col_dim] * esz).next_multiple_of(16) / esz,
            _ => self.strides[row_dim],
        }
    }

    /// Why a TMA tensor map cannot describe tiles of this view (rows along `row_dim`,
    /// columns along `col_dim`, the dims `batch` named by coordinate; dims of one index or
    /// stride 0 left out), or `None` where it can: the columns not contiguous, a stride or
    /// the offset not whole 16-byte chunks (`cuTensorMapEncodeTiled`'s `globalStrides` and
    /// 16-byte aligned start), more than 5 dims. The schedule asks it before taking a tile
    /// that loads by TMA; the lowering asks it again.
    pub fn tma_error(
        &self,
        (col_dim, row_dim, batch): (usize, usize, &[usize]),
        esz: u64,
    ) -> Option<&'static str> {
        let whole = |s: u64| s > 0 && (s * esz) % 16 == 0;
        let kept: Vec<usize> = batch
            .iter()
            .copied()
            .filter(|&k| self.shape[k] > 1 && self.strides[k] > 0)
            .collect();
        if self.strides[col_dim] != 1 && self.shape[col_dim] > 1 {
            Some("a column stride other than 1")
        } else if kept.len() > 3 {
            Some("more than 5 dims")
        } else if !whole(self.tma_row_stride((col_dim, row_dim), esz))
            || kept.iter().any(|&k| !whole(self.strides[k]))
            || (self.offset * esz) % 16 != 0
        {
            Some("strides or an offset not whole 16-byte chunks")
        } else {
            None
        }
    }
}

/// True for the ops a [`StridedView`] looks through.
pub fn is_view_op(op: &Op) -> bool {
    matches!(
        op,
        Op::Permute { .. } | Op::Reshape { .. } | Op::Broadcast { .. } | Op::Slice { .. }
    )
}

/// The value under the chain of view ops ending at `x` (`x` itself if it is no view).
pub fn view_base(g: &Graph, x: Value) -> Value {
    let mut v = x;
    while is_view_op(&g.ops[v]) {
        v = g.ops[v].args()[0];
    }
    v
}

/// The values of the view chain ending at `x`, `x` first, its base excluded.
pub fn view_chain(g: &Graph, x: Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut v = x;
    while is_view_op(&g.ops[v]) {
        out.push(v);
        v = g.ops[v].args()[0];
    }
    out
}

/// `x` as a strided view of [`view_base`]`(g, x)`, or `None` where a reshape merges dims
/// that are not contiguous with one another (the view then needs a copy).
pub fn strided(g: &Graph, x: Value) -> Option<StridedView> {
    strided_until(g, x, &|_| false)
}

/// [`strided`], its base the first value of the view chain (from `x` down) for which
/// `stop` holds, or the chain's base: a view of a materialised value that is itself a view
/// of another (fuse wrote the reshape of a tensor that a kernel computes in place).
pub fn strided_until(g: &Graph, x: Value, stop: &dyn Fn(Value) -> bool) -> Option<StridedView> {
    let op = &g.ops[x];
    let shape = g.ty(x).shape.0.clone();
    if !is_view_op(op) || stop(x) {
        let mut strides = vec![1u64; shape.len()];
        for k in (0..shape.len().saturating_sub(1)).rev() {
            strides[k] = strides[k + 1] * shape[k + 1];
        }
        return Some(StridedView {
            base: x,
            offset: 0,
            shape,
            strides,
        });
    }
    let a = strided_until(g, op.args()[0], stop)?;
    let strides = match op {
        Op::Permute { perm, .. } => perm.iter().map(|&p| a.strides[p as usize]).collect(),
        Op::Broadcast { .. } => a
            .shape
            .iter()
            .zip(&shape)
            .zip(&a.strides)
            .map(|((&from, &to), &s)| if from == 1 && to != 1 { 0 } else { s })
            .collect(),
        Op::Slice { axis, start, .. } => {
            return Some(StridedView {
                offset: a.offset + start * a.strides[*axis as usize],
                shape,
                ..a
            })
        }
        _ => reshape_strides(&a.shape, &a.strides, &shape)?,
    };
    Some(StridedView {
        base: a.base,
        offset: a.offset,
        shape,
        strides,
    })
}

/// The strides of `new` (same element count as `old`) viewing the elements of `old` with
/// `old_strides` in row-major order, if the dims each group of `new` covers are contiguous.
fn reshape_strides(old: &[u64], old_strides: &[u64], new: &[u64]) -> Option<Vec<u64>> {
    let (os, ost): (Vec<u64>, Vec<u64>) = old
        .iter()
        .zip(old_strides)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .unzip();
    let mut ns = vec![0u64; new.len()];
    let (mut oi, mut ni) = (0, 0);
    while ni < new.len() && oi < os.len() {
        // The smallest groups new[ni..nj], os[oi..oj] of equal element count.
        let (mut nj, mut oj) = (ni + 1, oi + 1);
        let (mut np, mut op) = (new[ni], os[oi]);
        while np != op {
            if np < op {
                np *= *new.get(nj)?;
                nj += 1;
            } else {
                op *= *os.get(oj)?;
                oj += 1;
            }
        }
        if (oi..oj - 1).any(|k| ost[k] != ost[k + 1] * os[k + 1]) {
            return None;
        }
        ns[nj - 1] = ost[oj - 1];
        for k in (ni + 1..nj).rev() {
            ns[k - 1] = ns[k] * new[k];
        }
        ni = nj;
        oi = oj;
    }
    // Trailing dims of size 1 (or a tensor of one element): any stride.
    if new[ni..].iter().any(|&d| d != 1) || oi < os.len() {
        return None;
    }
    Some(ns)
}

#[cfg(test)]
mod tests {
    use super::reshape_strides;

    #[test]
    fn reshape_splits_and_merges_contiguous_dims() {
        // [T, 40, 128] contiguous → [T, 8, 5, 128].
        assert_eq!(
            reshape_strides(&[7, 40, 128], &[5120, 128, 1], &[7, 8, 5, 128]),
            Some(vec![5120, 640, 128, 1])
        );
        // A permuted [8, 7, 128] (strides of a [7, 8, 128] tensor) with a size-1 dim added.
        assert_eq!(
            reshape_strides(&[8, 7, 128], &[128, 1024, 1], &[8, 1, 7, 128]),
            Some(vec![128, 7168, 1024, 1])
        );
        // Merging the permuted dims 8 and 7 is not a view.
        assert_eq!(
            reshape_strides(&[8, 7, 128], &[128, 1024, 1], &[56, 128]),
            None
        );
        // Broadcast dims (stride 0) merge with each other.
        assert_eq!(
            reshape_strides(&[2, 3, 4], &[0, 0, 1], &[6, 4]),
            Some(vec![0, 1])
        );
    }
}
