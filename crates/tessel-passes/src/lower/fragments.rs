//! Tensor-core fragments: where each register of an `mma.sync` operand comes from in a
//! ring stage (PTX ISA §9.7.14.5.7–8), and its loads (`ldmatrix`, §9.7.14.5.15, or scalar
//! loads where the layout does not allow it).

use super::ring::{Operand2d, Ring};
use super::{Gen, Ix};
use std::collections::HashMap;
use tessel_ir::kernel::{MmaShape, Op, RegType, Space, Stmt, Width};
use tessel_ir::Reg;

/// Where a fragment's registers come from in a stage.
#[derive(Clone)]
pub(super) enum FragSrc {
    /// One `ldmatrix.x4`; the lane's row address: a byte offset in the stage (shared by the
    /// fragments whose rows differ by whole swizzle periods) plus an immediate.
    Ldmatrix(Ix, i32),
    /// One 32-bit load per register (TF32 stored transposed).
    Scalar(Vec<Ix>),
}

/// The fragment sources of a warp for every k step of a slice: `a[step][i]` for
/// m-fragment i, `b[step][p]` for the pair of n-fragments 2p, 2p + 1.
pub(super) struct FragPlan {
    pub(super) a: Vec<Vec<FragSrc>>,
    pub(super) b: Vec<Vec<FragSrc>>,
    pub(super) a_trans: bool,
    pub(super) b_trans: bool,
}

impl FragPlan {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        gen: &mut Gen<'_>,
        shape: MmaShape,
        ra: &Ring,
        rb: &Ring,
        a: &Operand2d,
        b: &Operand2d,
        (wm0, wn0): (Ix, Ix),
        lane: Ix,
        (mi, ni): (u32, u32),
        bk: u32,
    ) -> FragPlan {
        let tf32 = shape == MmaShape::M16N8K8Tf32;
        let kstep = shape.k() as u64;
        // Element columns per 8-wide ldmatrix matrix column: 8 16-bit or 4 f32 elements.
        let half = if tf32 { 4 } else { 8 };
        let r8 = gen.irem_c(lane, 8);
        let j8 = gen.idiv_c(lane, 8);
        let j_lo = gen.irem_c(j8, 2);
        let j_hi = gen.idiv_c(j8, 2);
        let l16 = gen.irem_c(lane, 16);
        let h16 = gen.idiv_c(lane, 16);
        let g = gen.idiv_c(lane, 4);
        let t = gen.irem_c(lane, 4);
        let steps = (bk as u64 / kstep) as usize;
        // Rows 16 apart have the same swizzle (its period is at most 8 rows), so a fragment
        // 16·q rows further down is the same offset plus 16·q row lengths, an immediate: the
        // K-contiguous layouts (rows are m or n) need one offset per k step, the transposed
        // ones (rows are k, steps of 8 or 16 rows) one per fragment.
        let (rba, rbb) = (ra.row_bytes() as i32, rb.row_bytes() as i32);
        let mut fa = Vec::new();
        let mut fb = Vec::new();
        for s in 0..steps {
            let kk = s as u64 * kstep;
            let mut row_a = Vec::new();
            for i in 0..mi as u64 {
                let m = gen.iadd(wm0, Ix::C(16 * i));
                row_a.push(if a.k_contiguous {
                    // Matrices (rows 0-7 | 8-15) × (k 0.. | k half..): lane l → row l mod 16,
                    // k half·(l / 16).
                    let row = gen.iadd(wm0, l16);
                    let kc = gen.imul_c(h16, half);
                    let col = gen.iadd(Ix::C(kk), kc);
                    let off = gen.ring_offset(ra, row, col);
                    FragSrc::Ldmatrix(off, 16 * i as i32 * rba)
                } else if !tf32 {
                    // Stored [k][m]: matrix j holds k 8·(j / 2).., m 8·(j mod 2)..; trans.
                    let kr = gen.imul_c(j_hi, 8);
                    let row = gen.iadd(kr, r8);
                    let mc = gen.imul_c(j_lo, 8);
                    let col = gen.iadd(m, mc);
                    let off = gen.ring_offset(ra, row, col);
                    FragSrc::Ldmatrix(off, kk as i32 * rba)
                } else {
                    // Register q: (m g + 8·(q mod 2), k t + 4·(q / 2)), stored at [k][m].
                    FragSrc::Scalar(
                        (0..4u64)
                            .map(|q| {
                                let kr = gen.iadd(t, Ix::C(kk + 4 * (q / 2)));
                                let mc = gen.iadd(m, g);
                                let mc = gen.iadd(mc, Ix::C(8 * (q % 2)));
                                gen.ring_offset(ra, kr, mc)
                            })
                            .collect(),
                    )
                });
            }
            fa.push(row_a);
            let mut row_b = Vec::new();
            for p in 0..(ni as u64).div_ceil(2) {
                let nb = gen.iadd(wn0, Ix::C(16 * p));
                row_b.push(if b.k_contiguous {
                    // Matrices: (n 0-7, k 0..), (n 0-7, k half..), (n 8-15, k 0..), (n 8-15,
                    // k half..): B registers 0, 1 of fragment 2p, then of 2p + 1.
                    let nr = gen.imul_c(j_hi, 8);
                    let nr = gen.iadd(nr, r8);
                    let row = gen.iadd(wn0, nr);
                    let kc = gen.imul_c(j_lo, half);
                    let col = gen.iadd(Ix::C(kk), kc);
                    let off = gen.ring_offset(rb, row, col);
                    FragSrc::Ldmatrix(off, 16 * p as i32 * rbb)
                } else if !tf32 {
                    // Stored [k][n]: matrix j holds k 8·(j mod 2).., n 8·(j / 2)..; trans.
                    let kr = gen.imul_c(j_lo, 8);
                    let row = gen.iadd(kr, r8);
                    let nc = gen.imul_c(j_hi, 8);
                    let col = gen.iadd(nb, nc);
                    let off = gen.ring_offset(rb, row, col);
                    FragSrc::Ldmatrix(off, kk as i32 * rbb)
                } else {
                    // Fragment 2p + f, register q: (k t + 4q, n g + 8f), stored at [k][n].
                    FragSrc::Scalar(
                        (0..4u64)
                            .map(|fq| {
                                let (f, q) = (fq / 2, fq % 2);
                                let kr = gen.iadd(t, Ix::C(kk + 4 * q));
                                let nc = gen.iadd(nb, g);
                                let nc = gen.iadd(nc, Ix::C(8 * f));
                                gen.ring_offset(rb, kr, nc)
                            })
                            .collect(),
                    )
                });
            }
            fb.push(row_b);
        }
        FragPlan {
            a: fa,
            b: fb,
            a_trans: !a.k_contiguous,
            b_trans: !b.k_contiguous,
        }
    }
}

impl Gen<'_> {
    /// Loads one A fragment (or a pair of B fragments) with `ldmatrix.x4` from the stage at
    /// `stage` (TF32 values are then rounded with `cvt.rna.tf32.f32`), or element by
    /// element for TF32 operands stored transposed (`ldmatrix` moves 16-bit halves).
    pub(super) fn load_frag(
        &mut self,
        shape: MmaShape,
        (stage, addrs): (Reg, &mut HashMap<Ix, Reg>),
        src: &FragSrc,
        trans: bool,
    ) -> Vec<Reg> {
        let regs: Vec<Reg> = match src {
            FragSrc::Ldmatrix(off, imm) => {
                let addr = match addrs.get(off) {
                    Some(&a) => a,
                    None => {
                        let a = self.shared_addr(stage, *off);
                        addrs.insert(*off, a);
                        a
                    }
                };
                let dsts: Vec<Reg> = (0..4)
                    .map(|_| self.b.kernel.new_reg(RegType::U32))
                    .collect();
                self.b.push(Stmt::Ldmatrix {
                    dsts: dsts.clone(),
                    trans,
                    addr,
                    offset: *imm,
                });
                dsts
            }
            FragSrc::Scalar(offs) => offs
                .iter()
                .map(|off| {
                    let addr = self.shared_addr(stage, *off);
                    let d = self.b.kernel.new_reg(RegType::U32);
                    self.b.push(Stmt::Load {
                        dsts: vec![d],
                        space: Space::Shared,
                        width: Width::B32,
                        addr,
                        offset: 0,
                    });
                    d
                })
                .collect(),
        };
        if shape != MmaShape::M16N8K8Tf32 {
            return regs;
        }
        regs.into_iter()
            .map(|r| {
                let f = self.b.op(RegType::F32, Op::BitsToF32, &[r.into()]);
                self.b.op(RegType::U32, Op::CvtRnaTf32F32, &[f.into()])
            })
            .collect()
    }
}
