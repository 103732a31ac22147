//! The TMA loader of the ring: a stage of an operand's [`Ring`] filled by the Tensor Memory
//! Accelerator (`cp.async.bulk.tensor`, PTX ISA §9.7.9.25.5.1) instead of every thread's
//! `cp.async` (`cp_async.rs`). The stage's [`StageLayout`] says how TMA writes it
//! ([`StageLayout::tma`]: boxes of `rows × box_cols` elements with the 128-byte swizzle, each
//! `box_bytes` after the one before); the operand's stored tensor gives the tensor map's
//! dims and row stride, so the map's edges are the tensor's and TMA zero-fills whatever a
//! box reaches past them (M and N edges, the K tail): the kernel masks nothing.
//!
//! The map is a kernel parameter of kind [`ParamKind::TensorMap`] with its launch argument
//! [`LaunchArg::TensorMap`] (the runtime encodes it with `cuTensorMapEncodeTiled`); it
//! applies to a materialised tensor read along its contiguous last dim, rows of whole
//! 16-byte chunks (`globalStrides`). A strided view read in place (the attention's K and V
//! head views, [`Gen::tma_plan_view`]) is a map of up to 5 dims over the same buffer: its
//! contiguous dim, its rows, its batch dims; the view's element offset, which the map
//! cannot carry (it starts at the buffer's first byte), is absorbed into the coordinates
//! of the first two dims (`TmaPlan::origin`), their sizes grown by as much, so the map's
//! edge along the rows is still the view's.

use super::layout::TmaBoxes;
use super::{Operand2d, Ring};
use crate::lower::{Gen, Ix, LowerError};
use tessel_ir::kernel::{
    LaunchArg, Op, Operand, Param, ParamKind, RegType, Stmt, TensorMapDesc, TensorMapSwizzle,
};
use tessel_ir::{Reg, Value};

/// How one operand's stages are loaded by TMA: the tensor map's address (the `tmap` of
/// [`Stmt::TmaLoad`]) and the boxes of a stage.
pub(in crate::lower) struct TmaPlan {
    tmap: Reg,
    boxes: TmaBoxes,
    /// Added to each coordinate of a load (dims in the map's order; empty: all 0).
    origin: Vec<u64>,
    /// The map's first (contiguous) dim is the operand's K ([`Gen::issue_tma`] names a
    /// box by (K, row)); else its rows are K and its columns M or N (an MN-major operand:
    /// the box is named by (column, K)).
    k_inner: bool,
}

impl TmaPlan {
    /// Bytes one stage receives: the complete-tx its loads count on the mbarrier (a box
    /// past the tensor's edges counts whole, its zeros included).
    pub(in crate::lower) fn stage_bytes(&self) -> u32 {
        self.boxes.boxes * self.boxes.box_bytes
    }
}

impl Gen<'_> {
    /// The TMA plan of operand `op` into `ring`, whose stage's columns are the operand's
    /// contiguous dim: K for a K-major operand (the stage's rows its M or N), M or N for
    /// an MN-major one (a `[K, N]` B stored N-contiguous: the stage's rows K, in 128-byte
    /// panels, one box each). Adds the tensor-map parameter — over the stored tensor's
    /// `[rows, cols]` as they lie, inner dim `cols`, so boxes past K, M or N are zero-filled
    /// — and its launch argument. `value` names the matmul in errors.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] where TMA cannot load the operand: a strided view, rows
    /// not whole 16-byte chunks, a stage layout TMA does not write, or a box of more than
    /// 256 rows.
    pub(in crate::lower) fn tma_plan(
        &mut self,
        op: &Operand2d,
        ring: &Ring,
        value: Value,
    ) -> Result<TmaPlan, LowerError> {
        let unsupported = |what: &str| LowerError::Unsupported {
            what: format!("a TMA-loaded operand with {what}"),
            value,
        };
        let layout = ring.layout;
        let esz = layout.esz as u64;
        if op.view.is_some() {
            return Err(unsupported("a strided view"));
        }
        if !op.rows_aligned(esz) {
            return Err(unsupported("rows not whole 16-byte chunks"));
        }
        let boxes = layout
            .tma()
            .filter(|b| b.swizzle_bytes == 128)
            .ok_or_else(|| unsupported("a stage layout TMA does not write in 128-byte swizzle"))?;
        if layout.rows > 256 {
            return Err(unsupported("boxes of more than 256 rows"));
        }
        let buffer = *self
            .buffers
            .get(&op.base)
            .ok_or_else(|| unsupported("no buffer"))?;
        let ty = self.g.ty(op.base);
        let rows = ty.shape.numel() / op.cols.max(1);
        let desc = TensorMapDesc::new(
            buffer,
            ty.dtype,
            &[op.cols, rows],
            &[op.cols * esz],
            &[boxes.box_cols, layout.rows],
            TensorMapSwizzle::B128,
        );
        let tmap = self.tensor_map_param(desc);
        Ok(TmaPlan {
            tmap,
            boxes,
            origin: Vec::new(),
            k_inner: op.k_contiguous,
        })
    }

    /// The TMA plan of tiles of the strided view `view` into `ring`: the tile's rows along
    /// the view's dim `row_dim`, its columns along the view's contiguous dim `col_dim`
    /// (stride 1), and `batch_dims` (the dims a load names by coordinate, in this order
    /// after the rows; dims of size 1 or stride 0 are left out, their coordinate being 0).
    /// Loads name (column, row, batch…) in the view's own indices ([`Gen::issue_tma_at`]).
    /// Rows past the view's last are zero-filled by the map; columns never reach past it
    /// (the ring's stages hold whole rows of the view). `value` names the op in errors.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] where TMA cannot load the view
    /// ([`crate::view::StridedView::tma_error`]), a stage layout TMA does not write in the
    /// 128-byte swizzle, no buffer.
    pub(in crate::lower) fn tma_plan_view(
        &mut self,
        view: &crate::view::StridedView,
        (col_dim, row_dim, batch_dims): (usize, usize, &[usize]),
        ring: &Ring,
        value: Value,
    ) -> Result<TmaPlan, LowerError> {
        let unsupported = |what: &str| LowerError::Unsupported {
            what: format!("a TMA-loaded view with {what}"),
            value,
        };
        let layout = ring.layout;
        let esz = layout.esz as u64;
        let boxes = layout
            .tma()
            .filter(|b| b.swizzle_bytes == 128)
            .ok_or_else(|| unsupported("a stage layout TMA does not write in 128-byte swizzle"))?;
        if let Some(e) = view.tma_error((col_dim, row_dim, batch_dims), esz) {
            return Err(unsupported(e));
        }
        let row_stride = view.tma_row_stride((col_dim, row_dim), esz);
        let batch: Vec<usize> = batch_dims
            .iter()
            .copied()
            .filter(|&k| view.shape[k] > 1 && view.strides[k] > 0)
            .collect();
        let buffer = *self
            .buffers
            .get(&view.base)
            .ok_or_else(|| unsupported("no buffer"))?;
        // The offset as (column, row) of the map: element `offset + c + r · stride` is
        // (offset mod stride + c, offset / stride + r).
        let origin = vec![view.offset % row_stride, view.offset / row_stride];
        let mut dims = vec![
            origin[0] + view.shape[col_dim],
            origin[1] + view.shape[row_dim],
        ];
        let mut strides = vec![row_stride * esz];
        let mut box_dims = vec![boxes.box_cols, layout.rows];
        for &k in &batch {
            dims.push(view.shape[k]);
            strides.push(view.strides[k] * esz);
            box_dims.push(1);
        }
        let desc = TensorMapDesc::new(
            buffer,
            self.g.ty(view.base).dtype,
            &dims,
            &strides,
            &box_dims,
            TensorMapSwizzle::B128,
        );
        let tmap = self.tensor_map_param(desc);
        Ok(TmaPlan {
            tmap,
            boxes,
            origin,
            k_inner: true,
        })
    }

    /// The TMA loads of one stage at shared address `stage` (aligned to the layout's
    /// pattern): the operand's rows (M or N) from `row0` and K from `k0`, completing on the
    /// mbarrier at `mbar` (armed beforehand with [`TmaPlan::stage_bytes`]). The map names
    /// K first for a K-major operand, M or N first for an MN-major one.
    pub(in crate::lower) fn issue_tma(
        &mut self,
        plan: &TmaPlan,
        stage: Reg,
        (k0, row0): (Ix, Ix),
        mbar: Reg,
    ) {
        let at = if plan.k_inner { [k0, row0] } else { [row0, k0] };
        self.issue_tma_at(plan, stage, &at, mbar);
    }

    /// The TMA loads of one stage at shared address `stage`, the first box at coordinates
    /// `at` (the first the column, each later box one box further along it, plus the
    /// plan's origin), completing on the mbarrier at `mbar`.
    pub(in crate::lower) fn issue_tma_at(
        &mut self,
        plan: &TmaPlan,
        stage: Reg,
        at: &[Ix],
        mbar: Reg,
    ) {
        let b = plan.boxes;
        let at: Vec<Ix> = at
            .iter()
            .enumerate()
            .map(|(k, &x)| match plan.origin.get(k) {
                Some(&o) => self.iadd(x, Ix::C(o)),
                None => x,
            })
            .collect();
        for i in 0..b.boxes {
            let dst = self.shared_addr(stage, Ix::C((i * b.box_bytes) as u64));
            let c0 = self.iadd(at[0], Ix::C((i * b.box_cols) as u64));
            let mut coords: Vec<Operand> = vec![self.ix_op(c0)];
            for &x in &at[1..] {
                coords.push(self.ix_op(x));
            }
            self.b.push(Stmt::TmaLoad {
                dst,
                tmap: plan.tmap,
                coords,
                mbar,
            });
        }
    }
}

impl Gen<'_> {
    /// A kernel parameter for the host-encoded tensor map `desc` (passed by value, PTX ISA
    /// §5.5.8.1 `.param .align 64 .b8`), its launch argument, and the register holding
    /// the parameter's address that `cp.async.bulk.tensor` takes.
    fn tensor_map_param(&mut self, desc: TensorMapDesc) -> Reg {
        let index = self.b.kernel.params.len() as u32;
        self.b.kernel.params.push(Param {
            name: format!("tmap{index}"),
            kind: ParamKind::TensorMap,
        });
        self.extra_args.push(LaunchArg::TensorMap(desc));
        self.b.op(RegType::U64, Op::Param(index), &[])
    }
}
