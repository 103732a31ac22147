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
//! 16-byte chunks (`globalStrides`), no strided view.

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
}

impl TmaPlan {
    /// Bytes one stage receives: the complete-tx its loads count on the mbarrier (a box
    /// past the tensor's edges counts whole, its zeros included).
    pub(in crate::lower) fn stage_bytes(&self) -> u32 {
        self.boxes.boxes * self.boxes.box_bytes
    }
}

impl Gen<'_> {
    /// The TMA plan of operand `op` into `ring` (rows of the stage are the operand's rows,
    /// its columns K): adds the tensor-map parameter and its launch argument. `value` names
    /// the matmul in errors.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] where TMA cannot load the operand: a strided view, K not
    /// the contiguous dim, rows not whole 16-byte chunks, a stage layout TMA does not write,
    /// or a box of more than 256 rows.
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
        if op.view.is_some() || !op.k_contiguous {
            return Err(unsupported("a strided view or K not contiguous"));
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
        let index = self.b.kernel.params.len() as u32;
        self.b.kernel.params.push(Param {
            name: format!("tmap{index}"),
            kind: ParamKind::TensorMap,
        });
        self.extra_args.push(LaunchArg::TensorMap(desc));
        let tmap = self.b.op(RegType::U64, Op::Param(index), &[]);
        Ok(TmaPlan { tmap, boxes })
    }

    /// The TMA loads of one stage at shared address `stage` (aligned to the layout's
    /// pattern): the operand's rows from `row0` and K from `k0`, completing on the mbarrier
    /// at `mbar` (armed beforehand with [`TmaPlan::stage_bytes`]).
    pub(in crate::lower) fn issue_tma(
        &mut self,
        plan: &TmaPlan,
        stage: Reg,
        (k0, row0): (Ix, Ix),
        mbar: Reg,
    ) {
        let b = plan.boxes;
        for i in 0..b.boxes {
            let dst = self.shared_addr(stage, Ix::C((i * b.box_bytes) as u64));
            let k = self.iadd(k0, Ix::C((i * b.box_cols) as u64));
            let coords: Vec<Operand> = vec![self.ix_op(k), self.ix_op(row0)];
            self.b.push(Stmt::TmaLoad {
                dst,
                tmap: plan.tmap,
                coords,
                mbar,
            });
        }
    }
}
