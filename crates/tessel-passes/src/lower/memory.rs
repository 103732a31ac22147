//! Global memory: byte addresses of materialised values, loads and stores of `lanes`
//! consecutive elements as the widest aligned accesses (at most 16 bytes), and the
//! packing of 16-bit values.

use super::{Gen, Ix, LowerError};
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Stmt, Width};
use tessel_ir::{DType, Reg, Value};

impl Gen<'_> {
    /// Byte address of element `idx` of materialised value `v`.
    pub(super) fn address(&mut self, v: Value, idx: &[Ix]) -> Reg {
        let ty = self.g.ty(v).clone();
        let flat = self.flatten(idx, &ty.shape);
        let fo = self.ix_op(flat);
        let bytes = self.b.op(
            RegType::U64,
            Op::MulWideU32,
            &[fo, Operand::U32(ty.dtype.size_bytes() as u32)],
        );
        let base = self.ptr[&v];
        self.b
            .op(RegType::U64, Op::AddU64, &[base.into(), bytes.into()])
    }

    /// Accesses of at most 16 bytes covering `lanes` elements of `dt`: (width, elements).
    pub(super) fn accesses(dt: DType, lanes: u32) -> Vec<(Width, u32)> {
        let esz = dt.size_bytes() as u32;
        if dt == DType::Bool || lanes == 1 {
            return vec![
                (
                    match esz {
                        1 => Width::B8,
                        2 => Width::B16,
                        _ => Width::B32,
                    },
                    1,
                );
                lanes as usize
            ];
        }
        let total = esz * lanes;
        let mut out = Vec::new();
        let mut left = total;
        while left > 0 {
            let (w, b) = match left {
                l if l >= 16 => (Width::V4, 16),
                l if l >= 8 => (Width::V2, 8),
                l if l >= 4 => (Width::B32, 4),
                _ => (Width::B16, 2),
            };
            out.push((w, b / esz));
            left -= b;
        }
        out
    }

    pub(super) fn load(
        &mut self,
        v: Value,
        idx: &[Ix],
        lanes: u32,
    ) -> Result<Vec<Operand>, LowerError> {
        let dt = self.g.ty(v).dtype;
        // A vector access is aligned only if the tensor's rows are a multiple of the vector
        // (the chunk's first element is then at a multiple of `lanes`, which every index
        // rewrite keeps); otherwise (e.g. `x[:, 0:4]` of an `[T, 9]` tensor) one load per lane.
        if lanes > 1 && self.g.ty(v).shape.last() % lanes as u64 != 0 {
            return self.per_lane(v, idx, lanes);
        }
        let addr = self.address(v, idx);
        let mut out = Vec::new();
        let mut byte = 0i32;
        for (w, _) in Self::accesses(dt, lanes) {
            let cls = if dt == DType::F32 && matches!(w, Width::B32 | Width::V2 | Width::V4) {
                RegType::F32
            } else {
                RegType::U32
            };
            let dsts: Vec<Reg> = (0..w.regs()).map(|_| self.b.kernel.new_reg(cls)).collect();
            self.b.push(Stmt::Load {
                dsts: dsts.clone(),
                space: Space::Global,
                width: w,
                addr,
                offset: byte,
            });
            byte += w.bytes() as i32;
            for d in dsts {
                out.extend(self.unpack(d, dt, w));
            }
        }
        Ok(out)
    }

    /// The elements held in one loaded 32-bit (or narrower) register.
    pub(super) fn unpack(&mut self, r: Reg, dt: DType, w: Width) -> Vec<Operand> {
        match dt {
            DType::F32 => vec![r.into()],
            DType::I32 => vec![r.into()],
            DType::Bool => {
                vec![self
                    .b
                    .op(
                        RegType::Pred,
                        Op::ICmp(ICmp::Ne),
                        &[r.into(), Operand::U32(0)],
                    )
                    .into()]
            }
            DType::Bf16 => {
                let lo = self
                    .b
                    .op(RegType::U32, Op::Shl, &[r.into(), Operand::U32(16)]);
                let lo = self.b.op(RegType::F32, Op::BitsToF32, &[lo.into()]);
                if w == Width::B16 {
                    return vec![lo.into()];
                }
                let hi = self.b.op(
                    RegType::U32,
                    Op::And,
                    &[r.into(), Operand::U32(0xffff_0000)],
                );
                let hi = self.b.op(RegType::F32, Op::BitsToF32, &[hi.into()]);
                vec![lo.into(), hi.into()]
            }
            DType::F16 => {
                let lo = self.b.op(RegType::F32, Op::F16ToF32, &[r.into()]);
                if w == Width::B16 {
                    return vec![lo.into()];
                }
                let h = self
                    .b
                    .op(RegType::U32, Op::ShrU, &[r.into(), Operand::U32(16)]);
                let hi = self.b.op(RegType::F32, Op::F16ToF32, &[h.into()]);
                vec![lo.into(), hi.into()]
            }
        }
    }

    pub(super) fn store(
        &mut self,
        v: Value,
        idx: &[Ix],
        vals: &[Operand],
    ) -> Result<(), LowerError> {
        let dt = self.g.ty(v).dtype;
        let lanes = vals.len() as u32;
        let addr = self.address(v, idx);
        let mut byte = 0i32;
        let mut k = 0usize;
        for (w, n) in Self::accesses(dt, lanes) {
            let n = if dt == DType::Bool || lanes == 1 {
                1
            } else {
                n
            } as usize;
            let elems = &vals[k..k + n];
            k += n;
            let words: Vec<Operand> = match dt {
                DType::F32 | DType::I32 => elems.to_vec(),
                DType::Bool => vec![self
                    .b
                    .op(
                        RegType::U32,
                        Op::Select,
                        &[elems[0], Operand::U32(1), Operand::U32(0)],
                    )
                    .into()],
                DType::Bf16 | DType::F16 => {
                    let pack = if dt == DType::Bf16 {
                        Op::PackBf16x2
                    } else {
                        Op::PackF16x2
                    };
                    if n == 1 {
                        vec![self
                            .b
                            .op(RegType::U32, pack, &[Operand::f32(0.0), elems[0]])
                            .into()]
                    } else {
                        elems
                            .chunks(2)
                            .map(|p| self.b.op(RegType::U32, pack, &[p[1], p[0]]).into())
                            .collect()
                    }
                }
            };
            self.b.push(Stmt::Store {
                space: Space::Global,
                width: w,
                addr,
                offset: byte,
                values: words,
            });
            byte += w.bytes() as i32;
        }
        Ok(())
    }
}
