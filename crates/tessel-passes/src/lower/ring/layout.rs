//! The layout of one stage of a shared-memory ring: where element `(row, col)` of a
//! `rows × cols` tile of `esz`-byte elements (`cols` the contiguous dim) lies, in bytes from
//! the stage's start. One address function, [`StageLayout::offset_with`], written once over
//! [`IndexOps`]: the kernels' index arithmetic (`Gen`, constants folded) and the constant
//! evaluation of the tests ([`StageLayout::offset`]) are the same definition.
//!
//! The layout knows nothing of who fills a stage (the loaders: `cp_async.rs` today's 16-byte
//! `cp.async` copies, a TMA `cp.async.bulk.tensor` next) or who reads it (`fragments.rs`'s
//! `ldmatrix` rows, a wgmma matrix descriptor next); each asks it. Two swizzles of the
//! 16-byte chunks (`ldmatrix` reads one chunk per row, 8 rows per matrix; a bank group is
//! 16 of a 128-byte line's bytes):
//!
//! - [`Swizzle::Rows`], every kernel's today: rows stored whole, one after another; chunk
//!   `c` of row `r` at chunk `c ^ ((r >> shift) & mask)` of its row ([`StageLayout::row_xor`]).
//!   On byte offsets `a = r · row_bytes + c · 16 + w` this is CUTLASS's `Swizzle<B, 4, S>`
//!   (bits `[4, 4 + B)` XORed with bits `[4 + S, 4 + S + B)`). For rows of 32, 64 and 128
//!   bytes it is `Swizzle<1|2|3, 4, 3>`, the pattern TMA writes with
//!   `CU_TENSOR_MAP_SWIZZLE_32B/64B/128B` for a box as wide as the row, and the K-major
//!   layout of wgmma's swizzle mode of that width (PTX ISA §9.7.15.5.1.2, "Shared Memory
//!   Matrix Layout"; CUDA Driver API, `cuTensorMapEncodeTiled`): the GEMM's K-contiguous
//!   16-bit slices (`bk` = 64, 128-byte rows) are already TMA's and wgmma's 128-byte
//!   layout. Wider rows (attention's heads of 128, 256 bytes; a transposed operand's rows
//!   of `bm` or `bn`) XOR only the low three chunk bits with `r mod 8`: no TMA mode writes
//!   that.
//! - [`Swizzle::Panels128`]: TMA's and wgmma's 128-byte swizzle for tiles of any width: the
//!   tile cut into column panels of 128 bytes (64 16-bit or 32 f32 elements), each
//!   `rows × 128` bytes, panel after panel; inside a panel chunk `c` of row `r` at chunk
//!   `c ^ (r mod 8)`. A TMA box of `[rows, 128 bytes]` with `CU_TENSOR_MAP_SWIZZLE_128B`
//!   writes one panel (the box's inner dimension may not exceed the swizzle's 128 bytes).
//!   The warpgroup attention tile's Q, K and V and the wgmma GEMM tiles' MN-major B (64 K
//!   rows of a 128- or 256-wide N tile) are stored so: wgmma reads a panel K-major
//!   ([`StageLayout::wgmma_k_major`]) or, its rows being K, MN-major
//!   ([`StageLayout::wgmma_mn_major`]).
//!
//! Both repeat every [`StageLayout::PERIOD`] rows: row `r + 8k` is row `r` plus
//! `8k · row_pitch` bytes, so a loader or a fragment plan computes one row's offsets and
//! reaches the others by immediates. TMA applies its swizzle to shared-memory address bits,
//! so a stage it fills must start at a multiple of [`StageLayout::pattern_bytes`].

/// The index arithmetic [`StageLayout::offset_with`] is written in: on constants
/// ([`Consts`]), or on a kernel's index registers (`Gen`, which folds constants and emits
/// the rest).
pub(in crate::lower) trait IndexOps {
    /// An index: a number, or a register holding one.
    type Ix: Copy;
    /// `a / c`.
    fn div_c(&mut self, a: Self::Ix, c: u64) -> Self::Ix;
    /// `a mod c`.
    fn rem_c(&mut self, a: Self::Ix, c: u64) -> Self::Ix;
    /// `a · c`.
    fn mul_c(&mut self, a: Self::Ix, c: u64) -> Self::Ix;
    /// `a + b`.
    fn add(&mut self, a: Self::Ix, b: Self::Ix) -> Self::Ix;
    /// `(a >> shift) & mask`.
    fn shr_and(&mut self, a: Self::Ix, shift: u32, mask: u32) -> Self::Ix;
    /// `a ^ b`.
    fn xor(&mut self, a: Self::Ix, b: Self::Ix) -> Self::Ix;
}

/// [`IndexOps`] on numbers.
pub(in crate::lower) struct Consts;

impl IndexOps for Consts {
    type Ix = u64;
    fn div_c(&mut self, a: u64, c: u64) -> u64 {
        a / c
    }
    fn rem_c(&mut self, a: u64, c: u64) -> u64 {
        a % c
    }
    fn mul_c(&mut self, a: u64, c: u64) -> u64 {
        a * c
    }
    fn add(&mut self, a: u64, b: u64) -> u64 {
        a + b
    }
    fn shr_and(&mut self, a: u64, shift: u32, mask: u32) -> u64 {
        (a >> shift) & mask as u64
    }
    fn xor(&mut self, a: u64, b: u64) -> u64 {
        a ^ b
    }
}

/// How the 16-byte chunks of a stage's rows are permuted (see the module doc).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(in crate::lower) enum Swizzle {
    /// Rows whole, chunk `c` of row `r` at `c ^ ((r >> shift) & mask)`: today's rings.
    Rows,
    /// Column panels of 128 bytes, each TMA's / wgmma's 128-byte swizzle.
    Panels128,
}

/// The layout of one ring stage: `rows × cols` elements of `esz` bytes, `cols` the
/// contiguous dim, its 16-byte chunks permuted by `swizzle`. `cols · esz` is a multiple of
/// 16 bytes with a power-of-two chunk count (the schedules' K slices and head dims), and for
/// [`Swizzle::Panels128`] a multiple of 128 bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(in crate::lower) struct StageLayout {
    pub(in crate::lower) rows: u32,
    pub(in crate::lower) cols: u32,
    pub(in crate::lower) esz: u32,
    pub(in crate::lower) swizzle: Swizzle,
}

/// How TMA (`cp.async.bulk.tensor` through a `cuTensorMapEncodeTiled` tensor map) writes a
/// stage of a layout: `boxes` boxes of `rows × box_cols` elements, box `i` at byte
/// `i · box_bytes` of the stage, each with the swizzle of `swizzle_bytes` bytes
/// (`CU_TENSOR_MAP_SWIZZLE_32B/64B/128B`; 0 for `CU_TENSOR_MAP_SWIZZLE_NONE`), the stage
/// starting at a multiple of `align` bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(in crate::lower) struct TmaBoxes {
    pub(in crate::lower) box_cols: u32,
    pub(in crate::lower) boxes: u32,
    pub(in crate::lower) box_bytes: u32,
    pub(in crate::lower) swizzle_bytes: u32,
    pub(in crate::lower) align: u32,
}

/// A K-major wgmma operand (rows are M or N, columns K) stored in a layout, as its
/// shared-memory matrix descriptor says it (PTX ISA §9.7.15.5.1.2, "Shared Memory Matrix
/// Layout" and "Matrix Descriptor"): the swizzle mode, in bytes (128, 64, 32), and the
/// stride-dimension byte offset, the bytes between consecutive groups of 8 rows. The
/// leading-dimension byte offset is not used by the swizzled K-major layouts; a k step
/// inside a 128-byte panel moves the descriptor's start address by its bytes, and the next
/// panel starts `rows · 128` bytes on. To be checked against the GPU by the first wgmma
/// kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(in crate::lower) struct WgmmaKMajor {
    pub(in crate::lower) swizzle_bytes: u32,
    pub(in crate::lower) stride_byte_offset: u32,
}

/// An MN-major wgmma operand (rows K, columns M or N: a `[K, N]` B stored N-contiguous)
/// stored in a layout, as its shared-memory matrix descriptor says it (PTX ISA
/// §9.7.15.5.1.2, "Shared Memory Matrix Layout", canonical layout for the 128-byte swizzle
/// `((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))` in elements of 16 bytes `T`; the
/// executor's [`SmemDesc::address_mn`](tessel_ir::kernel::SmemDesc::address_mn)): the
/// swizzle mode, in bytes (128: one K row of a panel holds 128 bytes of M or N), the
/// leading-dimension byte offset (the bytes between the 128-byte column panels along M or
/// N: a panel's `rows · 128`), the stride-dimension byte offset (between groups of 8 K
/// rows: 1024), and the bytes a K row takes in a panel (128), so that a k step of 16 moves
/// the descriptor's start `16 · 128` bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(in crate::lower) struct WgmmaMnMajor {
    pub(in crate::lower) swizzle_bytes: u32,
    pub(in crate::lower) leading_byte_offset: u32,
    pub(in crate::lower) stride_byte_offset: u32,
    pub(in crate::lower) k_row_bytes: u32,
}

/// Bytes of a chunk: one `cp.async`, one `ldmatrix` row, one swizzled unit.
const CHUNK: u32 = 16;

impl StageLayout {
    /// Rows after which the swizzle repeats: `offset(r + PERIOD·k, c)` is
    /// `offset(r, c) + PERIOD·k·row_pitch()`.
    pub(in crate::lower) const PERIOD: u32 = 8;

    /// Today's layout ([`Swizzle::Rows`]) of `rows × cols` elements of `esz` bytes.
    pub(in crate::lower) fn rows(rows: u32, cols: u32, esz: u32) -> StageLayout {
        StageLayout {
            rows,
            cols,
            esz,
            swizzle: Swizzle::Rows,
        }
    }

    /// The 128-byte panels ([`Swizzle::Panels128`]) of `rows × cols` elements of `esz`
    /// bytes; `cols · esz` a multiple of 128.
    pub(in crate::lower) fn panels_128(rows: u32, cols: u32, esz: u32) -> StageLayout {
        assert!(
            (cols * esz) % 128 == 0,
            "128-byte panels of rows of {} bytes",
            cols * esz
        );
        StageLayout {
            rows,
            cols,
            esz,
            swizzle: Swizzle::Panels128,
        }
    }

    /// Bytes of one row's elements.
    pub(in crate::lower) fn row_bytes(&self) -> u32 {
        self.cols * self.esz
    }

    /// Bytes of one stage.
    pub(in crate::lower) fn stage_bytes(&self) -> u32 {
        self.rows * self.row_bytes()
    }

    /// 16-byte chunks per row (a power of two).
    pub(in crate::lower) fn chunks(&self) -> u32 {
        self.row_bytes() / CHUNK
    }

    /// Elements per 16-byte chunk.
    pub(in crate::lower) fn per_chunk(&self) -> u32 {
        CHUNK / self.esz
    }

    /// Bytes from a row to the row [`Self::PERIOD`] further on, over [`Self::PERIOD`]: the
    /// row length for [`Swizzle::Rows`], a panel's 128 bytes for [`Swizzle::Panels128`].
    pub(in crate::lower) fn row_pitch(&self) -> u32 {
        match self.swizzle {
            Swizzle::Rows => self.row_bytes(),
            Swizzle::Panels128 => 128,
        }
    }

    /// The chunk permutation of a row: `(shift, mask)`, chunk `c` of row `r` stored at
    /// `c ^ ((r >> shift) & mask)`. [`Swizzle::Rows`]: with 8 or more chunks per row, row
    /// `r mod 8` itself; with fewer, rows that share a 128-byte line are told apart by the
    /// higher bits of `r`. [`Swizzle::Panels128`]: `r mod 8` within a panel.
    pub(in crate::lower) fn row_xor(&self) -> (u32, u32) {
        let c = match self.swizzle {
            Swizzle::Rows => self.chunks(),
            Swizzle::Panels128 => 8,
        };
        if c >= 8 {
            (0, 7)
        } else {
            ((8 / c).trailing_zeros(), c - 1)
        }
    }

    /// Bytes after which the swizzle pattern repeats, and to which TMA needs a stage it
    /// fills aligned (it swizzles by shared-memory address bits): 8 rows of the swizzle's
    /// span (1024 for 128 bytes, 512 for 64, 256 for 32), at least 128.
    #[cfg_attr(not(test), allow(dead_code))] // the TMA loader's, next (issue 19)
    pub(in crate::lower) fn pattern_bytes(&self) -> u32 {
        (Self::PERIOD * self.row_pitch()).max(128)
    }

    /// Byte offset in the stage of element `col` of row `row`.
    #[cfg_attr(not(test), allow(dead_code))] // the TMA loader's plans, next (issue 19)
    pub(in crate::lower) fn offset(&self, row: u32, col: u32) -> u32 {
        self.offset_with(&mut Consts, row as u64, col as u64) as u32
    }

    /// Byte offset in the stage of element `col` of row `row`, computed by `a`: the one
    /// definition of the layout. For [`Swizzle::Rows`] the operations, in this order, are
    /// those every ring kernel has emitted since the ring was written (the golden PTX
    /// pins them).
    pub(in crate::lower) fn offset_with<A: IndexOps>(
        &self,
        a: &mut A,
        row: A::Ix,
        col: A::Ix,
    ) -> A::Ix {
        let epc = self.per_chunk() as u64;
        let (shift, mask) = self.row_xor();
        match self.swizzle {
            Swizzle::Rows => {
                let chunk = a.div_c(col, epc);
                let within = a.rem_c(col, epc);
                let swz = a.shr_and(row, shift, mask);
                let phys = a.xor(chunk, swz);
                let r = a.mul_c(row, self.row_bytes() as u64);
                let c = a.mul_c(phys, CHUNK as u64);
                let w = a.mul_c(within, self.esz as u64);
                let rc = a.add(r, c);
                a.add(rc, w)
            }
            Swizzle::Panels128 => {
                let per_panel = (128 / self.esz) as u64;
                let panel = a.div_c(col, per_panel);
                let in_panel = a.rem_c(col, per_panel);
                let chunk = a.div_c(in_panel, epc);
                let within = a.rem_c(in_panel, epc);
                let swz = a.shr_and(row, shift, mask);
                let phys = a.xor(chunk, swz);
                let p = a.mul_c(panel, self.rows as u64 * 128);
                let r = a.mul_c(row, 128);
                let c = a.mul_c(phys, CHUNK as u64);
                let w = a.mul_c(within, self.esz as u64);
                let pr = a.add(p, r);
                let prc = a.add(pr, c);
                a.add(prc, w)
            }
        }
    }

    /// How TMA writes a stage of this layout, or `None` where no TMA mode does (rows wider
    /// than 128 bytes stored whole).
    pub(in crate::lower) fn tma(&self) -> Option<TmaBoxes> {
        let rb = self.row_bytes();
        match self.swizzle {
            Swizzle::Rows if rb <= 128 => Some(TmaBoxes {
                box_cols: self.cols,
                boxes: 1,
                box_bytes: self.stage_bytes(),
                swizzle_bytes: if rb == CHUNK { 0 } else { rb },
                align: self.pattern_bytes(),
            }),
            Swizzle::Rows => None,
            Swizzle::Panels128 => Some(TmaBoxes {
                box_cols: 128 / self.esz,
                boxes: rb / 128,
                box_bytes: self.rows * 128,
                swizzle_bytes: 128,
                align: self.pattern_bytes(),
            }),
        }
    }

    /// This layout as a K-major wgmma operand's descriptor fields, or `None` where it is
    /// not a swizzled layout wgmma reads (rows of 16 bytes, or wider than 128 stored whole).
    pub(in crate::lower) fn wgmma_k_major(&self) -> Option<WgmmaKMajor> {
        let span = match self.swizzle {
            Swizzle::Rows if matches!(self.row_bytes(), 32 | 64 | 128) => self.row_bytes(),
            Swizzle::Rows => return None,
            Swizzle::Panels128 => 128,
        };
        Some(WgmmaKMajor {
            swizzle_bytes: span,
            stride_byte_offset: Self::PERIOD * span,
        })
    }

    /// This layout, its rows K and its columns M or N, as an MN-major wgmma operand's
    /// descriptor fields ([`WgmmaMnMajor`]), or `None` where it is not one wgmma reads:
    /// only [`Swizzle::Panels128`] (and rows of exactly 128 bytes, the same bytes) — the
    /// 128-byte panels TMA writes one box each.
    pub(in crate::lower) fn wgmma_mn_major(&self) -> Option<WgmmaMnMajor> {
        let panels = match self.swizzle {
            Swizzle::Panels128 => true,
            Swizzle::Rows => self.row_bytes() == 128,
        };
        panels.then(|| WgmmaMnMajor {
            swizzle_bytes: 128,
            leading_byte_offset: self.rows * 128,
            stride_byte_offset: Self::PERIOD * 128,
            k_row_bytes: 128,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every layout the tests walk: both swizzles, 16-bit and 32-bit elements, rows of 16
    /// to 512 bytes (128 and up for panels), 8 to 128 rows.
    fn layouts() -> Vec<StageLayout> {
        let mut v = Vec::new();
        for esz in [2, 4] {
            for row_bytes in [16, 32, 64, 128, 256, 512] {
                for rows in [8, 16, 64, 128] {
                    let cols = row_bytes / esz;
                    v.push(StageLayout::rows(rows, cols, esz));
                    if row_bytes % 128 == 0 {
                        v.push(StageLayout::panels_128(rows, cols, esz));
                    }
                }
            }
        }
        v
    }

    /// CUTLASS's `Swizzle<b, 4, 3>` on a byte offset: bits [4, 4 + b) XORed with bits
    /// [7, 7 + b). TMA's `CU_TENSOR_MAP_SWIZZLE_32B/64B/128B` are b = 1, 2, 3: the 16-byte
    /// chunk within a 2^b-chunk span XORed with the 128-byte line's index mod 2^b.
    fn tma_swizzle(a: u32, b: u32) -> u32 {
        let mask = (1 << b) - 1;
        a ^ (((a >> 7) & mask) << 4)
    }

    /// The kernel IR's statement of what TMA writes (`TensorMapSwizzle::apply`, which the
    /// executor's TMA model uses) is this reference, so a ring this layout describes is
    /// what a TMA load of its `tma()` boxes leaves on the executor.
    #[test]
    fn the_kernel_irs_tma_swizzle_is_this_reference() {
        use tessel_ir::kernel::TensorMapSwizzle;
        for (sw, b) in [
            (TensorMapSwizzle::B32, 1),
            (TensorMapSwizzle::B64, 2),
            (TensorMapSwizzle::B128, 3),
        ] {
            assert_eq!(sw.dst_align(), 8 * sw.bytes());
            for a in 0..8192 {
                assert_eq!(sw.apply(a), tma_swizzle(a, b), "{sw:?} at {a}");
            }
        }
        assert!((0..8192).all(|a| TensorMapSwizzle::None.apply(a) == a));
        // A stage's alignment for TMA is the kernel IR's destination rule.
        for l in layouts() {
            if let Some(t) = l.tma() {
                let sw = TensorMapSwizzle::ALL
                    .into_iter()
                    .find(|s| s.bytes() == t.swizzle_bytes)
                    .expect("a TMA swizzle");
                assert_eq!(t.align, sw.dst_align(), "{l:?}");
            }
        }
    }

    #[test]
    fn offset_is_a_bijection_onto_the_stage_keeping_chunks_whole() {
        for l in layouts() {
            let mut seen = HashSet::new();
            for r in 0..l.rows {
                for c in 0..l.cols {
                    let o = l.offset(r, c);
                    assert!(
                        o < l.stage_bytes() && o % l.esz == 0,
                        "{l:?} ({r}, {c}): {o}"
                    );
                    assert!(seen.insert(o), "{l:?}: ({r}, {c}) lands on {o} twice");
                    // The elements of a chunk stay together, in order: a 16-byte copy or
                    // `ldmatrix` row moves them at once.
                    if c % l.per_chunk() != 0 {
                        assert_eq!(o, l.offset(r, c - 1) + l.esz, "{l:?} ({r}, {c})");
                    } else {
                        assert_eq!(o % CHUNK, 0, "{l:?} ({r}, {c})");
                    }
                }
            }
            assert_eq!(seen.len() as u32 * l.esz, l.stage_bytes(), "{l:?}");
        }
    }

    /// The 8 rows of an `ldmatrix` matrix (rows 8k .. 8k + 7 at one column chunk) lie in 8
    /// different 16-byte bank groups of a 128-byte line: no bank conflict.
    #[test]
    fn ldmatrix_rows_fall_in_eight_bank_groups() {
        for l in layouts() {
            for r0 in (0..l.rows).step_by(8) {
                for c in (0..l.cols).step_by(l.per_chunk() as usize) {
                    let groups: HashSet<u32> =
                        (r0..r0 + 8).map(|r| (l.offset(r, c) / CHUNK) % 8).collect();
                    assert_eq!(groups.len(), 8, "{l:?} rows {r0}.. chunk at {c}");
                }
            }
        }
    }

    #[test]
    fn rows_a_period_apart_are_the_pitch_apart() {
        for l in layouts() {
            for r in 0..l.rows - StageLayout::PERIOD {
                for c in 0..l.cols {
                    assert_eq!(
                        l.offset(r + StageLayout::PERIOD, c),
                        l.offset(r, c) + StageLayout::PERIOD * l.row_pitch(),
                        "{l:?} ({r}, {c})"
                    );
                }
            }
        }
    }

    /// Today's swizzle, as it was written before the layout was its own type: the golden
    /// PTX pins the kernels; this pins the numbers.
    #[test]
    fn rows_swizzle_is_unchanged() {
        // (chunks per row) -> (shift, mask)
        for (row_bytes, want) in [
            (16, (3, 0)),
            (32, (2, 1)),
            (64, (1, 3)),
            (128, (0, 7)),
            (256, (0, 7)),
        ] {
            assert_eq!(StageLayout::rows(64, row_bytes / 2, 2).row_xor(), want);
        }
        // A GEMM slice of 64 bf16 (128-byte rows): chunk c of row r at c ^ (r mod 8).
        let gemm = StageLayout::rows(128, 64, 2);
        assert_eq!(gemm.offset(1, 0), 128 + 16);
        assert_eq!(gemm.offset(3, 9), 3 * 128 + (1 ^ 3) * 16 + 2);
        // Attention's heads of 128 bf16 (256-byte rows): only the low 3 chunk bits move.
        let head = StageLayout::rows(64, 128, 2);
        assert_eq!(head.offset(5, 64), 5 * 256 + (8 ^ 5) * 16);
        // Rows of 32 bytes: rows 4 apart alternate the two chunks.
        let narrow = StageLayout::rows(16, 16, 2);
        assert_eq!(narrow.offset(4, 0), 4 * 32 + 16);
        assert_eq!(narrow.offset(8, 0), 8 * 32);
    }

    /// Rows of 32, 64 and 128 bytes are TMA's swizzle of that width for a box as wide as
    /// the row (and rows of 16 bytes its unswizzled layout); wider rows are no TMA layout.
    #[test]
    fn rows_up_to_128_bytes_are_tmas_swizzle_of_their_width() {
        for l in layouts().into_iter().filter(|l| l.swizzle == Swizzle::Rows) {
            let rb = l.row_bytes();
            let Some(t) = l.tma() else {
                assert!(rb > 128, "{l:?}");
                assert!(l.wgmma_k_major().is_none(), "{l:?}");
                continue;
            };
            let b = (rb / CHUNK).trailing_zeros();
            assert_eq!(t.swizzle_bytes, if rb == 16 { 0 } else { rb }, "{l:?}");
            assert_eq!(
                (t.boxes, t.box_cols, t.box_bytes),
                (1, l.cols, l.stage_bytes())
            );
            assert_eq!(t.align, (8 * rb).max(128), "{l:?}");
            for r in 0..l.rows {
                for c in 0..l.cols {
                    let linear = r * rb + c * l.esz;
                    assert_eq!(l.offset(r, c), tma_swizzle(linear, b), "{l:?} ({r}, {c})");
                }
            }
        }
    }

    /// Panels are TMA boxes of 128 bytes with `CU_TENSOR_MAP_SWIZZLE_128B`, one after
    /// another; a stage of 128-byte rows is the same in both swizzles.
    #[test]
    fn panels_are_128_byte_swizzled_tma_boxes() {
        for l in layouts()
            .into_iter()
            .filter(|l| l.swizzle == Swizzle::Panels128)
        {
            let t = l.tma().expect("panels are TMA's");
            let per_panel = 128 / l.esz;
            assert_eq!(t.swizzle_bytes, 128);
            assert_eq!(t.box_cols, per_panel);
            assert_eq!(t.boxes, l.row_bytes() / 128);
            assert_eq!(t.box_bytes, l.rows * 128);
            assert_eq!(t.align, 1024);
            for r in 0..l.rows {
                for c in 0..l.cols {
                    let (panel, in_panel) = (c / per_panel, c % per_panel);
                    let want = panel * t.box_bytes + tma_swizzle(r * 128 + in_panel * l.esz, 3);
                    assert_eq!(l.offset(r, c), want, "{l:?} ({r}, {c})");
                }
            }
            if l.row_bytes() == 128 {
                let rows = StageLayout::rows(l.rows, l.cols, l.esz);
                for r in 0..l.rows {
                    for c in 0..l.cols {
                        assert_eq!(l.offset(r, c), rows.offset(r, c));
                    }
                }
            }
        }
    }

    #[test]
    fn wgmma_reads_the_swizzled_layouts_k_major() {
        // The GEMM's bf16 K slice of 64 and attention's head of 128 in panels: 128-byte
        // swizzle, 8-row groups 1024 bytes apart.
        for l in [
            StageLayout::rows(128, 64, 2),
            StageLayout::panels_128(64, 128, 2),
        ] {
            assert_eq!(
                l.wgmma_k_major(),
                Some(WgmmaKMajor {
                    swizzle_bytes: 128,
                    stride_byte_offset: 1024
                }),
                "{l:?}"
            );
        }
        let tf32_short = StageLayout::rows(64, 16, 4);
        assert_eq!(
            tf32_short.wgmma_k_major().map(|w| w.swizzle_bytes),
            Some(64)
        );
        assert_eq!(StageLayout::rows(64, 128, 2).wgmma_k_major(), None);
        assert_eq!(StageLayout::rows(64, 8, 2).wgmma_k_major(), None);
    }

    /// A GEMM's MN-major B stage — 64 K rows of a 128-wide N tile in two 128-byte panels
    /// — read through an MN-major descriptor (the executor's `SmemDesc::address_mn`, PTX
    /// ISA §9.7.15.5.1.2.1) is the layout, element for element: from the descriptor at
    /// the stage's start plus `16 · ks` K rows (k step `ks`), byte `b` of K row `k` of the
    /// step is element `(16 · ks + k, b / esz)`, for every panel and k step.
    #[test]
    fn wgmma_reads_panels_mn_major() {
        use tessel_ir::kernel::{SmemDesc, WgmmaSwizzle};
        for l in [
            StageLayout::panels_128(64, 128, 2),
            StageLayout::panels_128(64, 256, 2),
            StageLayout::panels_128(16, 64, 2),
        ] {
            let mn = l.wgmma_mn_major().expect("panels are MN-major operands");
            assert_eq!(mn.leading_byte_offset, l.rows * 128, "{l:?}");
            assert_eq!((mn.stride_byte_offset, mn.k_row_bytes), (1024, 128));
            // The stage at a 1024-aligned address, as the rings place it.
            let base = 3 * 1024;
            for ks in 0..l.rows / 16 {
                let desc = SmemDesc {
                    start: base + ks * 16 * mn.k_row_bytes,
                    lbo: mn.leading_byte_offset,
                    sbo: mn.stride_byte_offset,
                    swizzle: WgmmaSwizzle::B128,
                };
                for k in 0..16 {
                    for b in (0..l.row_bytes()).step_by(l.esz as usize) {
                        assert_eq!(
                            desc.address_mn(k, b),
                            base + l.offset(16 * ks + k, b / l.esz),
                            "{l:?} step {ks} row {k} byte {b}"
                        );
                    }
                }
            }
        }
        assert!(StageLayout::rows(64, 128, 2).wgmma_mn_major().is_none());
        assert!(StageLayout::rows(64, 64, 2).wgmma_mn_major().is_some());
    }
}
