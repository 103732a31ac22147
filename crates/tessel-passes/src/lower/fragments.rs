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

/// Which mma operand a plan is for. A's fragment is 16 rows of m by k; `ldmatrix.x4`'s
/// four matrices (and a TF32 fragment's four registers) take the two 8-row halves of m
/// first, then the two halves of k. A pair of B fragments (2p, 2p + 1) is 16 columns of n
/// by k, and takes the two halves of k first, then the two 8-column halves of n (PTX ISA
/// §9.7.14.5.7–8). Everything else is the same for both: one plan, mirrored by [`Role`].
#[derive(Copy, Clone)]
enum Role {
    A,
    B,
}

impl Role {
    /// The (outer, k) halves selected by bits (`lo`, `hi`) of a matrix or register index:
    /// outer is m for A, n for B.
    fn halves<T>(self, lo: T, hi: T) -> (T, T) {
        match self {
            Role::A => (lo, hi),
            Role::B => (hi, lo),
        }
    }
}

/// The parts of a lane index the plans use: `r8 = lane mod 8` (the row within an
/// `ldmatrix` matrix), the matrix index `lane / 8` as bits (`j_lo`, `j_hi`), and the mma
/// fragment coordinates `g = lane / 4`, `t = lane mod 4`.
struct LaneParts {
    r8: Ix,
    j_lo: Ix,
    j_hi: Ix,
    g: Ix,
    t: Ix,
}

impl FragPlan {
    /// The plan of a warp whose tile starts at (`wm0`, `wn0`) with `mi` A fragments and
    /// `ni` B fragments, for the ring stages `ra`, `rb` of operands `a`, `b`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        gen: &mut Gen<'_>,
        shape: MmaShape,
        (ra, a): (&Ring, &Operand2d),
        (rb, b): (&Ring, &Operand2d),
        (wm0, wn0): (Ix, Ix),
        lane: Ix,
        (mi, ni): (u32, u32),
        bk: u32,
    ) -> FragPlan {
        let r8 = gen.irem_c(lane, 8);
        let j8 = gen.idiv_c(lane, 8);
        let parts = LaneParts {
            r8,
            j_lo: gen.irem_c(j8, 2),
            j_hi: gen.idiv_c(j8, 2),
            g: gen.idiv_c(lane, 4),
            t: gen.irem_c(lane, 4),
        };
        let plan = |gen: &mut Gen<'_>, role, ring, op, outer0, count| {
            operand_frags(gen, (shape, bk), (role, ring, op), outer0, &parts, count)
        };
        FragPlan {
            a: plan(gen, Role::A, ra, a, wm0, mi),
            b: plan(gen, Role::B, rb, b, wn0, ni.div_ceil(2)),
            a_trans: !a.k_contiguous,
            b_trans: !b.k_contiguous,
        }
    }
}

/// The sources of one operand's fragments alone, for schedules whose other operand is in
/// registers or another ring (fused attention): `count` A fragments of 16 rows from
/// `outer0` (`b` false), or `count` pairs of B fragments of 8 columns (`b` true), for every
/// k step of a slice of `bk`.
#[allow(clippy::too_many_arguments)]
pub(super) fn one_operand(
    gen: &mut Gen<'_>,
    shape: MmaShape,
    (ring, op): (&Ring, &Operand2d),
    b: bool,
    outer0: Ix,
    lane: Ix,
    count: u32,
    bk: u32,
) -> Vec<Vec<FragSrc>> {
    let r8 = gen.irem_c(lane, 8);
    let j8 = gen.idiv_c(lane, 8);
    let parts = LaneParts {
        r8,
        j_lo: gen.irem_c(j8, 2),
        j_hi: gen.idiv_c(j8, 2),
        g: gen.idiv_c(lane, 4),
        t: gen.irem_c(lane, 4),
    };
    let role = if b { Role::B } else { Role::A };
    operand_frags(gen, (shape, bk), (role, ring, op), outer0, &parts, count)
}

/// The sources of one operand's `count` fragments (A) or fragment pairs (B), 16 outer rows
/// apart from `outer0`, for every k step of a slice of `bk`.
///
/// Rows 16 apart have the same swizzle (its period, `StageLayout::PERIOD`, is 8 rows), so a
/// fragment 16·f rows further down is the same offset plus 16·f row pitches
/// (`StageLayout::row_pitch`), an immediate: the K-contiguous layouts (rows are m or n) need
/// one offset per k step, the transposed ones (rows are k, steps of 8 or 16 rows) one per
/// fragment.
fn operand_frags(
    gen: &mut Gen<'_>,
    (shape, bk): (MmaShape, u32),
    (role, ring, op): (Role, &Ring, &Operand2d),
    outer0: Ix,
    lane: &LaneParts,
    count: u32,
) -> Vec<Vec<FragSrc>> {
    let tf32 = shape == MmaShape::M16N8K8Tf32;
    let kstep = shape.k() as u64;
    // Element columns per 8-wide ldmatrix matrix column: 8 16-bit or 4 f32 elements.
    let half = if tf32 { 4 } else { 8 };
    let pitch = ring.layout.row_pitch() as i32;
    let (o_sel, k_sel) = role.halves(lane.j_lo, lane.j_hi);
    // The lane's ldmatrix row, once: (outer row, k column) stored K-contiguous, (k row,
    // outer column offset) stored transposed. TF32 stored transposed has none: ldmatrix
    // moves 16-bit halves, so each register is loaded on its own.
    let row_of_lane = if op.k_contiguous {
        let o = gen.imul_c(o_sel, 8);
        let o = gen.iadd(o, lane.r8);
        Some((gen.iadd(outer0, o), gen.imul_c(k_sel, half)))
    } else if !tf32 {
        let k = gen.imul_c(k_sel, 8);
        Some((gen.iadd(k, lane.r8), gen.imul_c(o_sel, 8)))
    } else {
        None
    };
    let steps = (bk as u64 / kstep) as usize;
    let mut frags = Vec::with_capacity(steps);
    for s in 0..steps {
        let kk = s as u64 * kstep;
        // Stored K-contiguous, every fragment of the step reads from one offset.
        let step_off = match row_of_lane {
            Some((row, kc)) if op.k_contiguous => {
                let col = gen.iadd(Ix::C(kk), kc);
                Some(gen.ring_offset(ring, row, col))
            }
            _ => None,
        };
        let mut step = Vec::with_capacity(count as usize);
        for f in 0..count as u64 {
            step.push(match row_of_lane {
                Some(_) if op.k_contiguous => {
                    let off = step_off.expect("computed for K-contiguous operands");
                    FragSrc::Ldmatrix(off, 16 * f as i32 * pitch)
                }
                Some((row, oc)) => {
                    let outer = gen.iadd(outer0, Ix::C(16 * f));
                    let col = gen.iadd(outer, oc);
                    let off = gen.ring_offset(ring, row, col);
                    FragSrc::Ldmatrix(off, kk as i32 * pitch)
                }
                None => {
                    // Register r: outer g + 8·o, k t + 4·q, with (o, q) the halves of r.
                    let outer = gen.iadd(outer0, Ix::C(16 * f));
                    FragSrc::Scalar(
                        (0..4u64)
                            .map(|r| {
                                let (o, q) = role.halves(r % 2, r / 2);
                                let kr = gen.iadd(lane.t, Ix::C(kk + 4 * q));
                                let oc = gen.iadd(outer, lane.g);
                                let oc = gen.iadd(oc, Ix::C(8 * o));
                                gen.ring_offset(ring, kr, oc)
                            })
                            .collect(),
                    )
                }
            });
        }
        frags.push(step);
    }
    frags
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
