//! Warp-wide statements of the SIMT interpreter: `mma` by the model in `Stmt::Mma`'s docs
//! and `ldmatrix`, each run once per warp with all 32 lanes active.

use super::{Cta, Span};
use crate::exec::numerics as nm;
use crate::exec::ExecError;
use tessel_ir::kernel::MmaShape;

impl Cta<'_> {
    /// The first thread of each warp of `sp` that reaches a warp-wide statement; a warp
    /// with some but not all of its 32 lanes active (or present) is an error.
    pub(super) fn full_warps(&self, sp: Span, op: &'static str) -> Result<Vec<usize>, ExecError> {
        let (n, mask) = (sp.hi, &self.masks[sp.d]);
        let mut out = Vec::new();
        for warp in (sp.lo..n).step_by(32) {
            if (warp..(warp + 32).min(n)).all(|j| mask[j] == 0) {
                continue;
            }
            if let Some(j) = (warp..warp + 32).find(|&j| j >= n || mask[j] == 0) {
                return Err(ExecError::WarpDivergent {
                    kernel: self.k.name.clone(),
                    cta: self.cta,
                    warp: (warp / 32) as u32,
                    inactive: j as u32,
                    op,
                });
            }
            out.push(warp);
        }
        Ok(out)
    }

    /// `D = A·B + C` per warp, by the model of `Stmt::Mma`: fragments gathered with the
    /// PTX layouts ([`MmaShape::a_pos`] and friends), then for each output element
    /// `acc = c; acc = fma(a[i][k], b[k][j], acc)` for k = 0, 1, ..., K-1.
    pub(super) fn mma(
        &mut self,
        shape: MmaShape,
        dst: &[u32; 4],
        a: &[u32; 4],
        b: &[u32; 2],
        c: &[u32; 4],
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        let elem = |h: u32| match shape {
            MmaShape::M16N8K16Bf16 => h << 16,
            MmaShape::M16N8K16F16 => nm::f16_to_f32(h),
            MmaShape::M16N8K8Tf32 => nm::tf32_operand(h),
        };
        let packed = shape != MmaShape::M16N8K8Tf32;
        for warp in self.full_warps(sp, "mma")? {
            // f32 bits: am[row][k], bm[k][col], acc[row][col].
            let mut am = [[0u32; 16]; 16];
            let mut bm = [[0u32; 8]; 16];
            let mut acc = [[0u32; 8]; 16];
            for lane in 0..32 {
                let th = warp + lane;
                for (i, &slot) in a.iter().enumerate() {
                    let v = self.r32[slot as usize * n + th];
                    let (row, col) = shape.a_pos(lane, i);
                    if packed {
                        am[row][col] = elem(v & 0xffff);
                        am[row][col + 1] = elem(v >> 16);
                    } else {
                        am[row][col] = elem(v);
                    }
                }
                for (i, &slot) in b.iter().enumerate() {
                    let v = self.r32[slot as usize * n + th];
                    let (k, col) = shape.b_pos(lane, i);
                    if packed {
                        bm[k][col] = elem(v & 0xffff);
                        bm[k + 1][col] = elem(v >> 16);
                    } else {
                        bm[k][col] = elem(v);
                    }
                }
                for (i, &slot) in c.iter().enumerate() {
                    let (row, col) = MmaShape::cd_pos(lane, i);
                    acc[row][col] = self.r32[slot as usize * n + th];
                }
            }
            for (row, acc_row) in acc.iter_mut().enumerate() {
                for (col, x) in acc_row.iter_mut().enumerate() {
                    for (k, b_row) in bm.iter().enumerate().take(shape.k()) {
                        *x = nm::ffma(am[row][k], b_row[col], *x);
                    }
                }
            }
            // D may be C: every input was read above.
            for lane in 0..32 {
                for (i, &slot) in dst.iter().enumerate() {
                    let (row, col) = MmaShape::cd_pos(lane, i);
                    self.r32[slot as usize * n + warp + lane] = acc[row][col];
                }
            }
        }
        Ok(())
    }

    /// `ldmatrix.m8n8.x{count}{.trans}.b16` per warp: row `r` of matrix `m` from the address
    /// of lane `8m + r`; lane `l` receives elements `(l / 4, 2(l % 4) + {0, 1})` of each
    /// matrix, or `(2(l % 4) + {0, 1}, l / 4)` transposed.
    pub(super) fn ldmatrix(
        &mut self,
        dsts: &[u32],
        trans: bool,
        addr: usize,
        offset: i32,
        sp: Span,
    ) -> Result<(), ExecError> {
        let n = self.n;
        for warp in self.full_warps(sp, "ldmatrix")? {
            // mats[m][row][col], 16-bit elements.
            let mut mats = [[[0u16; 8]; 8]; 4];
            for (m, mat) in mats.iter_mut().enumerate().take(dsts.len()) {
                for (r, row) in mat.iter_mut().enumerate() {
                    let th = warp + 8 * m + r;
                    let a = self.r32[addr * n + th].wrapping_add(offset as u32);
                    if a % 16 != 0 || !self.shared_range(a, 16) {
                        return Err(self.shared_fault(th, a, 16, false));
                    }
                    self.check_not_pending(th, a, 16, "ldmatrix")?;
                    let sh = &self.shared[a as usize..][..16];
                    for (e, c) in row.iter_mut().zip(sh.chunks_exact(2)) {
                        *e = u16::from_le_bytes([c[0], c[1]]);
                    }
                }
            }
            // Destinations may include the address register: all rows were read above.
            for lane in 0..32 {
                let (g, t) = (lane / 4, 2 * (lane % 4));
                for (m, &slot) in dsts.iter().enumerate() {
                    let (lo, hi) = if trans {
                        (mats[m][t][g], mats[m][t + 1][g])
                    } else {
                        (mats[m][g][t], mats[m][g][t + 1])
                    };
                    self.r32[slot as usize * n + warp + lane] = lo as u32 | (hi as u32) << 16;
                }
            }
        }
        Ok(())
    }
}
