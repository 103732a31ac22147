//! The matmul schedules' selection: a deterministic function of M, N, K, the batch, the
//! operand layouts and dtype, the profile and the [`Target`]. The candidates are rows of
//! data below ([`MMA_TILES`], [`SIMT_TILES`]); the first that applies is taken. In order:
//!
//! 1. **Decode** — M ≤ 16, no batch, both operands read along K (`x @ w^T` with `w` stored
//!    `[N, K]`): the weight dominates the traffic (N·K elements against M·K), so the kernel
//!    streams it once with 16-byte loads.
//!    - `fast`, 16-bit operands, K a multiple of 8, M ≥ 2: the tensor-core GEMV (`gemv_mma`):
//!      8 weight rows per CTA — N/8 CTAs, 2176 for Qwen3-14B's gate projection, so that
//!      every SM gets within 3% of the same number of weight bytes (with 16 rows, 1088 CTAs
//!      leave some SMs 9 and others 8: 12% idle) — with the most warps per CTA (4, 2 or 1)
//!      splitting K that keeps every warp of the grid resident at once (the target's warps
//!      per SM: one wave, and the most loads in flight); 8 chunks of 32 k in flight per warp (4 for
//!      M > 8, whose second left fragment doubles the registers).
//!    - `exact` and `fast` otherwise: the SIMT GEMV, 4 warps per CTA, each warp `columns`
//!      output columns (M·columns ≤ 32 accumulators, ≥ 1056 CTAs — 8 per SM), loading
//!      several chunks of k per iteration (`GEMV_VECTORS_IN_FLIGHT`). At M = 1 it
//!      streams the weight at the copy bandwidth (measured 42.3 µs for the gate projection,
//!      against 47.1 µs for the tensor-core GEMV, whose 16-row fragment is 1/16 used).
//!    - `invariant`: neither (their k orders differ from the tile's); the tile below.
//! 2. **Tensor-core tile** (`mma`; in `invariant` on sm_90a the warpgroup tiles of
//!    `INVARIANT_WGMMA_TILES` for every M where `invariant_wgmma` holds) — `fast` and
//!    `invariant`, for bf16/f16 operands, and
//!    f32 operands in `fast` only (rounded to TF32: `invariant` keeps f32 accuracy), when
//!    both operands are stored tensors or their transposes (in `fast` on sm_90a, 16-bit,
//!    M, N > 64, K > 32, the warpgroup tiles first — `wgmma_shape`: A read along K, B along
//!    K or along N, an `x @ w` with `w` stored `[K, N]` read by wgmma's transposed B —
//!    then, by `prefer_pingpong`, the persistent ping-pong tile where TMA loads them):
//!    - skinny N (N ≤ 64, the LoRA ranks): `bn` = N rounded up to a power of two ≥ 16,
//!      `bm` = 64 over 4 warps stacked along M;
//!    - skinny M (M ≤ 64): `bm` = M rounded up likewise, `bn` = 128 over 4 warps along N;
//!    - short K (K ≤ 32, a LoRA up-projection): 64 × 64 over 2 × 2 warps — the output's
//!      stores dominate, and many small CTAs overlap them;
//!    - otherwise 128 × 256 over 2 × 4 warps (64 × 64 per warp: 8 ldmatrix.x4 feed 32 mma
//!      per k step, 128 bytes of shared memory read per mma instead of 192 with 64 × 32),
//!      or 64 × 64 over 2 × 2 when the large tiles would not give every SM one CTA. Measured
//!      on the Qwen3-14B projections at T = 4096 (docs/perf/2026-11-29-h200-issue3-part2.md):
//!      128 × 256 over 2 × 4 warps 1.59–1.65× cuBLAS's time, 128 × 128 over 2 × 2 1.70–1.73×,
//!      256 × 128 over 4 × 2 1.63–1.68×; 3 stages instead of 2 no different;
//!    - K slices of 128 bytes per row (`bk` 64 for 16-bit, 32 for TF32: every 16-byte
//!      chunk of a row in a different bank group of one 128-byte line, after the swizzle),
//!      or K rounded up to a power of two ≥ 16 when that is less (a LoRA up-projection's
//!      K = 16 is one slice of 16),
//!      as many stages as fit in 96 KiB, at most 4 and at most one more than K has slices
//!      (2 for the 128 × 256 tile; dynamic shared memory beyond 48 KiB).
//!
//! A matmul of widening casts of 16-bit tensors (`f32(x) @ f32(w)^T`, both bf16 or both
//! f16; [`Graph::matmul_reads`]) reads the 16-bit tensors: its operands count as 16-bit
//! above (the bf16/f16 `mma` shape, the tensor-core GEMV), and the SIMT schedules load
//! 16-bit values and convert them exactly. Every product of two 16-bit floats is exact in
//! f32, so this is the f32 matmul the program names; the SIMT GEMV keeps the f32 vector
//! width in the `exact` profile, so there the bits are those of the f32 copies' program.
//!
//! 3. **SIMT FMA tile** otherwise (the `exact` schedule for every non-decode shape): a
//!    64×64 output tile per CTA of 256 threads, 4×4 outputs per thread, K in slices of 16
//!    through shared memory; each slice's products are summed in k order into a partial,
//!    the partials added in order — two levels, so the rounding error grows like
//!    (16 + K/16)·u instead of K·u (a single f32 chain at K = 4096 measured rel-RMS
//!    1.16e-6, above the 1e-6 contract) — and bits depend on neither the output tile nor M.
//!    Skinny N ≤ 32: 128 × 16 tiles, 8 × 1 outputs per thread; skinny M ≤ 32: 16 × 128,
//!    2 × 4 (a 64-row tile would compute 48 rows of zeros for a rank-16 LoRA's dA; 1 × 8
//!    made ptxas spill). Operand slices are loaded 16 bytes at a time along whichever dim
//!    the stored tensor is contiguous in, when its rows are a multiple of 4.
//! 4. **Split-K** (`exact` and `fast`): when the tiles do not give every SM a CTA and K
//!    has at least 8 slices, K is cut into `split_k` ranges of whole slices, enough for two
//!    CTAs per SM and at least 4 slices each; partials go to scratch and are summed in
//!    range order. In `invariant` that choice would make the order depend on M; there a
//!    skinny-N GEMM (N at most [`INVARIANT_SPLIT_MAX_N`], whatever the tile) with a long K
//!    (at least [`INVARIANT_SPLIT_MIN_SLICES`] slices) is split by K and N alone
//!    ([`invariant_split_k`]: ranges of [`INVARIANT_SPLIT_SLICES`] slices), the same for
//!    every M — LoRA's `x·Aᵀ` and `dY·B` at decode sizes, which one CTA would otherwise walk
//!    alone.

use super::{offers, widest_vector};
use crate::target::{Features, Profile, Target};
use tessel_ir::graph::{Graph, MatmulRead, MmaEngine, MmaEpilogue, Schedule, TileConfig};
use tessel_ir::kernel::MmaShape;
use tessel_ir::{DType, Value};

/// The shape and operand layout of a matmul, as the schedules see it.
pub struct MatmulShape {
    /// Product of the leading (batch) dims.
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// The right operand is a transposed `[.., N, K]` tensor (a weight), contiguous along K.
    pub rhs_k_contiguous: bool,
    /// The left operand is a plain `[.., M, K]` tensor, contiguous along K.
    pub lhs_k_contiguous: bool,
    /// Each operand is a stored tensor or the swap of its last two dims (what the
    /// tensor-core tile copies; any other permute goes through the SIMT tile).
    pub operands_2d: bool,
    /// The dtype the operands are read in: the matmul's, or the 16-bit dtype under
    /// widening casts (`f32(x) @ f32(w)^T`, [`Graph::matmul_reads`]).
    pub read: DType,
    /// The operands are widening casts read as 16-bit tensors.
    pub widened: bool,
    /// An operand is a strided view read in place ([`matmul_shape_in`]).
    pub views: bool,
}

/// Whether the permutation `perm` swaps the last two dims and keeps the others in place
/// (a matrix transpose, the form `x^T` and `w^T` take).
pub fn swaps_last_two(perm: &[u32]) -> bool {
    let n = perm.len();
    n >= 2
        && perm[n - 1] as usize == n - 2
        && perm[n - 2] as usize == n - 1
        && perm[..n - 2]
            .iter()
            .enumerate()
            .all(|(i, &p)| p as usize == i)
}

/// Reads M, N, K and the operand layouts of the matmul `mm`, as its kernels read the
/// operands ([`Graph::matmul_reads`]).
pub fn matmul_shape(g: &Graph, mm: tessel_ir::Value) -> MatmulShape {
    let tessel_ir::graph::Op::MatMul { lhs, rhs } = g.ops[mm] else {
        unreachable!("matmul groups list their matmul");
    };
    let (ls, rs) = (&g.ty(lhs).shape.0, &g.ty(rhs).shape.0);
    let r = ls.len();
    let [a, b] = g.matmul_reads(mm).expect("a matmul");
    let swapped = |x: &MatmulRead| x.perm.as_deref().is_some_and(swaps_last_two);
    MatmulShape {
        batch: ls[..r - 2].iter().product(),
        m: ls[r - 2],
        k: ls[r - 1],
        n: rs[r - 1],
        rhs_k_contiguous: swapped(&b),
        lhs_k_contiguous: a.perm.is_none(),
        operands_2d: [&a, &b].iter().all(|x| x.perm.is_none() || swapped(x)),
        read: g.ty(a.stored).dtype,
        widened: a.widened,
        views: false,
    }
}

/// The matmul operand `x` as a strided view read in place by the tensor-core tile, with
/// whether its last dim is the contiguous one (else the one before): `x` is a chain of
/// views (permute, reshape, broadcast, slice: [`crate::view::strided_until`]) of a
/// materialised tensor, the first materialised value under `x`, and one of its last two
/// dims has stride 1 (or size 1). Head views of a projection (`[T, H·d]` as `[H, T, d]`) and GQA's
/// broadcast of K and V over a group's heads are; a permute that moves the contiguous dim
/// into the batch dims is not (the SIMT tile reads it).
pub fn strided_operand(
    g: &Graph,
    materialized: &dyn Fn(Value) -> bool,
    x: Value,
) -> Option<(crate::view::StridedView, bool)> {
    let sv = crate::view::strided_until(g, x, materialized)?;
    let r = sv.shape.len();
    if r < 2 || !materialized(sv.base) {
        return None;
    }
    let unit = |k: usize| sv.strides[k] == 1 || sv.shape[k] == 1;
    let last = if unit(r - 1) {
        true
    } else if unit(r - 2) {
        false
    } else {
        return None;
    };
    Some((sv, last))
}

/// [`matmul_shape`] with operands that are strided views read in place
/// ([`strided_operand`]) counted as tensor-core operands, their layouts from their strides.
pub fn matmul_shape_in(g: &Graph, materialized: &dyn Fn(Value) -> bool, mm: Value) -> MatmulShape {
    let mut s = matmul_shape(g, mm);
    if s.operands_2d || s.widened {
        return s;
    }
    let tessel_ir::graph::Op::MatMul { lhs, rhs } = g.ops[mm] else {
        unreachable!("matmul groups list their matmul");
    };
    let [a, b] = g.matmul_reads(mm).expect("a matmul");
    let flat = |x: &MatmulRead| x.perm.as_deref().is_none_or(swaps_last_two);
    // Each operand's K contiguity: as read today where it is stored or a transpose, else
    // from its view's strides (the lhs's K is its last dim, the rhs's the one before).
    let lhs_k = if flat(&a) {
        Some(s.lhs_k_contiguous)
    } else {
        strided_operand(g, materialized, lhs).map(|(_, last)| last)
    };
    let rhs_k = if flat(&b) {
        Some(s.rhs_k_contiguous)
    } else {
        strided_operand(g, materialized, rhs).map(|(_, last)| !last)
    };
    if let (Some(l), Some(r)) = (lhs_k, rhs_k) {
        s.lhs_k_contiguous = l;
        s.rhs_k_contiguous = r;
        s.operands_2d = true;
        s.views = true;
    }
    s
}

/// The tensors the matmul `mm` reads, `(lhs, rhs)`: each operand itself or, when it is the
/// swap of the last two dims of a tensor (`w^T`), that tensor, read transposed in place
/// ([`MatmulShape`]'s `*_k_contiguous` say which), under a widening cast when both are
/// ([`Graph::matmul_reads`]). `None` when an operand is any other permute
/// ([`MatmulShape::operands_2d`] false).
pub fn stored_operands(g: &Graph, mm: Value) -> Option<(Value, Value)> {
    let [a, b] = g.matmul_reads(mm).expect("a matmul");
    let stored = |x: MatmulRead| match x.perm {
        Some(perm) => swaps_last_two(&perm).then_some(x.stored),
        None => Some(x.stored),
    };
    Some((stored(a)?, stored(b)?))
}

/// Elements of padding per row of the staged epilogue's tile in shared memory (f32, or the
/// matmul's 16-bit dtype): puts the rows of a fragment store in different banks (see
/// `lower::epilogue`'s `stage_accumulators`).
pub const STAGED_ROW_PAD: u32 = 8;

/// Shared memory of the tensor-core ring stages, bytes: at most this much goes to
/// `stages` (measured: 3 stages no better than 2 for the large tile, docs/perf/
/// 2026-11-29-h200-issue3-part2.md); the rest of the SM is left to a second CTA.
const RING_BUDGET: u32 = 96 * 1024;

/// Shared memory of a tensor-core tile, bytes: its ring of `stages` slices of A and B, or
/// the staged epilogue's `bm × (bn + STAGED_ROW_PAD)` tile where larger (it reuses the
/// ring), counted as f32 (a 16-bit matmul's tile is half that: `lower::epilogue`'s
/// `staged_esz`).
pub fn mma_shared_bytes(
    (bm, bn, bk): (u32, u32, u32),
    stages: u32,
    esz: u32,
    epilogue: MmaEpilogue,
) -> u32 {
    let ring = stages * (bm + bn) * bk * esz;
    if epilogue == MmaEpilogue::Staged {
        ring.max(bm * (bn + STAGED_ROW_PAD) * 4)
    } else {
        ring
    }
}

/// A candidate tensor-core tile: the target features its kernel needs, when it applies, and
/// its `(bm, bn, warps_m, warps_n)`.
struct MmaRow {
    name: &'static str,
    /// Tried only on a target that has these ([`offers`]); none for the `mma.sync` tiles.
    needs: Features,
    /// A warpgroup tile (`TileConfig::Mma`'s `engine`, not `Sync`): tried only in `fast`,
    /// for 16-bit operands, A read along K, B along K or N ([`wgmma_shape`]).
    wgmma: bool,
    applies: fn(&MatmulShape, &Target) -> bool,
    tile: fn(&MatmulShape) -> (u32, u32, u32, u32),
}

/// The rows of `rows` that apply to `s`, in order, leaving out those that need a feature
/// the target lacks ([`offers`]) — with, for each of these, why, in words.
fn tried<'r>(rows: &'r [MmaRow], s: &MatmulShape, t: &Target) -> (Vec<&'r MmaRow>, Vec<String>) {
    let (mut ok, mut lacking) = (Vec::new(), Vec::new());
    for row in rows.iter().filter(|r| (r.applies)(s, t)) {
        match offers(t, row.needs) {
            Ok(()) => ok.push(row),
            Err(missing) => lacking.push(format!("{} needs {missing}", row.name)),
        }
    }
    (ok, lacking)
}

/// What the warpgroup tiles need of the target.
const WGMMA: Features = Features {
    wgmma: true,
    ..Features::NONE
};

/// A GEMM the warpgroup tiles serve: the left operand read along K (the K-major layout
/// wgmma reads A in from the ring), the right one along K (`x @ wᵀ`) or, for 16-bit
/// operands, along N (`x @ w` with `w` stored `[K, N]`, the backward's `dY · W`: wgmma's
/// transposed B, [`mn_major_b`]), and M, N and K past the skinny and short-K rows.
fn wgmma_shape(s: &MatmulShape) -> bool {
    s.lhs_k_contiguous && (s.rhs_k_contiguous || mn_major_b(s)) && s.n > 64 && s.m > 64 && s.k > 32
}

/// Whether the warpgroup tiles read the right operand of `s` MN-major: it is stored
/// contiguous along N, and 16-bit (wgmma transposes B only for 16-bit inputs, PTX ISA
/// §9.7.15.5.1.2: a TF32 B stays K-major, so an f32 `x @ w` keeps the `mma.sync` tile).
fn mn_major_b(s: &MatmulShape) -> bool {
    !s.rhs_k_contiguous && matches!(s.read, DType::Bf16 | DType::F16)
}

/// Output tiles of 128 × `bn`.
fn wgmma_tiles(s: &MatmulShape, bn: u64) -> u64 {
    s.m.div_ceil(128) * s.n.div_ceil(bn) * s.batch
}

/// A side of a skinny tile: the dim rounded up to a power of two, at least 16.
fn pow2(x: u64) -> u32 {
    x.max(16).next_power_of_two() as u32
}

/// The tensor-core tiles, tried in order (the module doc gives the measurements).
const MMA_TILES: [MmaRow; 7] = [
    MmaRow {
        name: "wgmma large (sm_90a: 2 warpgroups of m64n256k16)",
        needs: WGMMA,
        wgmma: true,
        applies: |s, t| wgmma_shape(s) && s.n > 128 && wgmma_tiles(s, 256) >= t.sm_count as u64,
        tile: |_| (128, 256, 8, 1),
    },
    MmaRow {
        name: "wgmma 128×128 (sm_90a: 2 warpgroups of m64n128k16; N ≤ 128, or 128×256 would leave SMs idle)",
        needs: WGMMA,
        wgmma: true,
        applies: |s, t| wgmma_shape(s) && 4 * wgmma_tiles(s, 128) >= 3 * t.sm_count as u64,
        tile: |_| (128, 128, 8, 1),
    },
    MmaRow {
        name: "skinny-N",
        needs: Features::NONE,
        wgmma: false,
        applies: |s, _| s.n <= 64,
        tile: |s| (64, pow2(s.n), 4, 1),
    },
    MmaRow {
        name: "skinny-M",
        needs: Features::NONE,
        wgmma: false,
        applies: |s, _| s.m <= 64,
        tile: |s| (pow2(s.m), 128, 1, 4),
    },
    MmaRow {
        name: "short-K (the output's stores dominate: many small CTAs)",
        needs: Features::NONE,
        wgmma: false,
        applies: |s, _| s.k <= 32,
        tile: |_| (64, 64, 2, 2),
    },
    MmaRow {
        name: "large",
        needs: Features::NONE,
        wgmma: false,
        applies: |s, t| s.m.div_ceil(128) * s.n.div_ceil(256) * s.batch >= t.sm_count as u64,
        tile: |_| (128, 256, 2, 4),
    },
    MmaRow {
        name: "mid-size (128-tiles would leave SMs idle)",
        needs: Features::NONE,
        wgmma: false,
        applies: |_, _| true,
        tile: |_| (64, 64, 2, 2),
    },
];

/// The warpgroup tiles of the `invariant` profile, tried in order where
/// [`invariant_wgmma`] holds: one instruction (`wgmma.mma_async`, one per k step of 16
/// from 0) for every M of a GEMM, the tile's size following M, N and the SM count as in
/// `fast` (a tile's size does not change a row's sums: each output is one accumulator).
/// M ≤ 64 (decode, LoRA's small batches) takes one warpgroup of 64 rows.
const INVARIANT_WGMMA_TILES: [MmaRow; 4] = [
    MmaRow {
        name: "wgmma skinny-N (sm_90a, invariant: n = N rounded up to a power of two)",
        needs: WGMMA,
        wgmma: true,
        applies: |s, _| s.n <= 64,
        tile: |s| {
            let bm = if s.m <= 64 { 64 } else { 128 };
            (bm, pow2(s.n), bm / 16, 1)
        },
    },
    MmaRow {
        name: "wgmma skinny-M (sm_90a, invariant: 1 warpgroup of m64n128k16)",
        needs: WGMMA,
        wgmma: true,
        applies: |s, _| s.m <= 64,
        tile: |_| (64, 128, 4, 1),
    },
    MmaRow {
        name: "wgmma large (sm_90a: 2 warpgroups of m64n256k16)",
        needs: WGMMA,
        wgmma: true,
        applies: |s, t| s.n > 128 && wgmma_tiles(s, 256) >= t.sm_count as u64,
        tile: |_| (128, 256, 8, 1),
    },
    MmaRow {
        name: "wgmma 128×128 (sm_90a: 2 warpgroups of m64n128k16)",
        needs: WGMMA,
        wgmma: true,
        applies: |_, _| true,
        tile: |_| (128, 128, 8, 1),
    },
];

/// Whether an `invariant` GEMM takes [`INVARIANT_WGMMA_TILES`]: on a target with wgmma,
/// 16-bit operands (`sixteen_bit`), both stored tensors read along K (`x @ wᵀ`), K past
/// the short-K tile's 32 (a LoRA up-projection's K = r = 16 keeps `mma.sync`'s many small
/// CTAs, not a 64-deep zero-filled wgmma slice), and no split-K ([`invariant_split_k`] at wgmma's K slice of 64 — the wgmma tile does not split
/// K). Every condition is of N, K, the layouts and the target, none of M, so each GEMM
/// runs one instruction at every batch size.
fn invariant_wgmma(s: &MatmulShape, t: &Target, sixteen_bit: bool) -> bool {
    t.features.wgmma
        && sixteen_bit
        && s.operands_2d
        && s.lhs_k_contiguous
        && s.rhs_k_contiguous
        && s.k > 32
        && invariant_split_k(s.n, s.k, 64) == 1
}

/// A candidate SIMT tile: when it applies, its `(bm, bn, tm, tn)` and its description.
struct SimtRow {
    applies: fn(&MatmulShape) -> bool,
    tile: (u32, u32, u32, u32),
    name: &'static str,
}

/// The SIMT tiles, tried in order.
const SIMT_TILES: [SimtRow; 3] = [
    SimtRow {
        applies: |s| s.n <= 32,
        tile: (128, 16, 8, 1),
        name: "skinny N: 128×16 tile, 8×1",
    },
    SimtRow {
        applies: |s| s.m <= 32,
        tile: (16, 128, 2, 4),
        name: "skinny M: 16×128 tile, 2×4",
    },
    SimtRow {
        applies: |_| true,
        tile: (64, 64, 4, 4),
        name: "64×64 tile, 4×4",
    },
];

/// Why a schedule cannot serve a matmul, said in the reason of the one chosen instead.
pub struct NotApplicable(pub String);

/// The schedule of the matmul `mm` whose group writes `out`; `rows` is `Some(d)` when the
/// group's epilogue computes whole rows of `d` output columns (`fuse` rule 8: QK-norm and
/// RoPE of the projection's heads), which only [`row_epilogue_tile`] serves; split-K only
/// where `split_k_ok` (see [`super::run`]).
pub(super) fn choose(
    g: &Graph,
    (mm, materialized): (Value, &dyn Fn(Value) -> bool),
    out: Value,
    rows: Option<u64>,
    t: &Target,
    (profile, split_k_ok): (Profile, bool),
) -> Schedule {
    if let Some(d) = rows {
        // `fuse` asked the same question with the same target and profile; a group read
        // from text may not fit, and then the verifier rejects the tile chosen below.
        if let Some((tile, why)) = row_epilogue_tile(g, mm, d, t, profile) {
            return Schedule { tile, why };
        }
    }
    let s = matmul_shape_in(g, materialized, mm);
    // A matmul's operands and result have one dtype (the graph verifier's rule); the
    // kernels read the operands in `s.read`, 16-bit under widening casts. Tensor cores
    // take those as 16-bit operands. The SIMT GEMV keeps the f32 matmul's vector in the
    // exact profile: its k order, and so every bit, stay those of the f32 program (the
    // loads are 16-bit, converted exactly).
    let dt = g.ty(mm).dtype;
    // The GEMVs read stored tensors (the tensor-core GEMV copies their rows), so decode
    // is decided on the operands as stored, not through views.
    let plain = matmul_shape(g, mm);
    let decode =
        plain.m <= 16 && plain.batch == 1 && plain.rhs_k_contiguous && plain.lhs_k_contiguous;
    if decode {
        if let Ok(sched) = gemv_mma(&plain, plain.read, t, profile) {
            return sched;
        }
        if profile != Profile::Invariant {
            let vector_dt = if profile == Profile::Exact {
                dt
            } else {
                s.read
            };
            return gemv(&s, vector_dt, t);
        }
    }
    let because = if decode {
        "the invariant profile keeps one k order for every M, so no GEMV; "
    } else {
        ""
    };
    // How the output is laid out against the matmul's rows: the staged epilogue writes any
    // output that keeps them (`[B·T, N]` as `[B, T, N]`), the pairs epilogue only the
    // matmul's own shape (verifier rule `schedule.mma`).
    let rows = g.matmul_layout(mm, out) == Some(tessel_ir::graph::MatmulLayout::Rows);
    let same = g.ty(out).shape == g.ty(mm).shape;
    let mut why_not = String::new();
    match mma(&s, s.read, (rows, same), (None, split_k_ok), t, profile) {
        Ok((tile, why)) => {
            return Schedule {
                tile,
                why: format!("{because}{why}"),
            }
        }
        Err(NotApplicable(w)) if !w.is_empty() => why_not = format!("tensor cores: {w}; "),
        Err(_) => {}
    }
    let row = SIMT_TILES
        .iter()
        .find(|r| (r.applies)(&s))
        .expect("the last SIMT row always applies");
    let (bm, bn, tm, tn) = row.tile;
    let bk = 16;
    let tiles = s.m.div_ceil(bm as u64) * s.n.div_ceil(bn as u64) * s.batch;
    let split = if !split_k_ok {
        1
    } else if profile == Profile::Invariant {
        invariant_split_k(s.n, s.k, bk)
    } else {
        split_k(tiles, s.k, bk, t.sm_count as u64)
    };
    Schedule {
        why: format!(
            "{because}{why_not}{}M = {}, N = {}, K = {}, batch {}: SIMT FMA, {} outputs per thread, K slices of 16, {tiles} tiles{}",
            widened_why(&s),
            s.m,
            s.n,
            s.k,
            s.batch,
            row.name,
            split_why(split, tiles)
        ),
        tile: TileConfig::Simt {
            bm,
            bn,
            bk,
            tm,
            tn,
            split_k: split,
        },
    }
}

/// The tensor-core GEMV for decode (the caller has checked the decode shape).
fn gemv_mma(
    s: &MatmulShape,
    dt: DType,
    t: &Target,
    profile: Profile,
) -> Result<Schedule, NotApplicable> {
    let sixteen_bit = matches!(dt, DType::Bf16 | DType::F16);
    if !(profile == Profile::Fast && sixteen_bit && s.k % 8 == 0 && s.m > 1) {
        return Err(NotApplicable(String::new()));
    }
    let sms = t.sm_count as u64;
    let ctas = s.n.div_ceil(8);
    let warps = [4u32, 2, 1]
        .into_iter()
        .find(|&w| ctas * w as u64 <= t.resident_warps())
        .unwrap_or(1);
    // Registers: every CTA resident means ⌈CTAs / SMs⌉ per SM, so the SM's registers over
    // (that · threads) per thread (at most the ISA's per-thread limit); about 24 go to the
    // accumulators, pointers and indices, the rest hold the loads in flight: 16 bytes of
    // the weight and of each left fragment (one for M ≤ 8, two above) per chunk.
    let per_sm = ctas.div_ceil(sms).max(1);
    let cap = (t.registers_per_sm as u64 / (per_sm * 32 * warps as u64))
        .min(t.max_registers_per_thread as u64);
    let per_chunk = 4 * (1 + s.m.div_ceil(8));
    let unroll = (cap.saturating_sub(24) / per_chunk).clamp(1, 8) as u32;
    Ok(Schedule {
        // Every CTA of the grid resident at once (the grid and `unroll` are sized for it):
        // ptxas otherwise aims at full occupancy (32 registers for 64 threads) and
        // interleaves the loads with the mma, leaving one or two loads in flight per warp.
        tile: TileConfig::GemvMma {
            warps,
            unroll,
            min_ctas_per_sm: per_sm as u32,
        },
        why: format!(
            "{}M = {} ≤ 16 with the weight [N = {}, K = {}] read along K, {dt}, fast profile: tensor-core GEMV, 8 weight rows per CTA ({ctas} CTAs), {warps} warp(s) per CTA splitting K (the most that keeps every warp resident at once: ≤ {} warps), {unroll} chunks of 32 k in flight per warp",
            widened_why(s),
            s.m,
            s.n,
            s.k,
            t.resident_warps()
        ),
    })
}

/// Vectors (16 bytes each at most) a lane of the SIMT GEMV loads per main-loop iteration,
/// over its `columns` weight rows and the M left rows: 80 registers of loads in flight.
/// With one iteration's loads (`unroll` 1) the Qwen3-14B o projection (N = K = 5120, 320
/// CTAs of 4 warps: 10 warps per SM) read its weight at about half the copy bandwidth
/// (docs/perf/2026-12-01-issue10/run3a/bench.txt, decode_10 and decode_14: 50–53%), where
/// the gate projection's 1088 CTAs (33 warps per SM) reached 95–99%: too few bytes in
/// flight per SM. Little's law on an H100 (3.35 TB/s, about 700 ns to DRAM) asks for about
/// 18 KB in flight per SM; 10 warps of 32 lanes × 4 columns × 4 chunks × 16 bytes are 80 KB.
/// Measured on the H200 (docs/perf/2026-12-06-h200-issue19.md, run 7, Qwen3-14B decode at
/// B = 1): the k and v GEMVs 6.3 → 5.1 µs, o 18.2 → 17.9 µs, down 53.6 → 52.5 µs — the
/// N = 5120 GEMVs stayed at about 1.4× their memory floor: the number of warps was their
/// limit ([`GEMV_MIN_CTAS_PER_SM`]).
const GEMV_VECTORS_IN_FLIGHT: u64 = 20;

/// The SIMT GEMV's chunks of k per main-loop iteration: [`GEMV_VECTORS_IN_FLIGHT`] over the
/// `columns` weight vectors and `m` left vectors a chunk loads, 1 to 8.
fn gemv_unroll(m: u64, columns: u32) -> u32 {
    (GEMV_VECTORS_IN_FLIGHT / (m + columns as u64)).clamp(1, 8) as u32
}

/// CTAs per SM (of 4 warps) the SIMT GEMV's columns per warp are chosen to reach: 8, so
/// 32 warps an SM stream the weight. Nsight Compute on the Qwen3-14B decode layer at B = 1
/// (docs/perf/2026-12-06-issue19/run10, H100) found the q and down GEMVs, at 4 columns a
/// warp (320 CTAs, 2.4 an SM), stalled on their loads 85% of the time with DRAM at 66% and
/// 75%: too few warps to cover the latency, whatever each keeps in flight. With 1 column
/// a warp (1280 CTAs) on the H200 (run 12): q 16.7 → 14.0 µs, down 52.4 → 44.1 µs (95% of
/// the copy bandwidth), the layer 225.6 → 212.7 µs; with 2 columns (4 CTAs an SM) 221.5.
const GEMV_MIN_CTAS_PER_SM: u64 = 8;

/// The SIMT GEMV for decode, its vector the widest of `dt` elements within 16 bytes: the
/// most columns a warp (4, 2, 1) whose M·columns accumulators fit 32 registers and whose
/// CTAs number [`GEMV_MIN_CTAS_PER_SM`] an SM (the left rows are then shared by the
/// columns' loads), else 1.
fn gemv(s: &MatmulShape, dt: DType, t: &Target) -> Schedule {
    let sms = t.sm_count as u64;
    let v = widest_vector(s.k, 16 / dt.size_bytes() as u32);
    let min_ctas = GEMV_MIN_CTAS_PER_SM * sms;
    let columns = [4u32, 2, 1]
        .into_iter()
        .find(|&c| s.m * c as u64 <= 32 && s.n.div_ceil(4 * c as u64) >= min_ctas)
        .unwrap_or(1);
    let unroll = gemv_unroll(s.m, columns);
    Schedule {
        tile: TileConfig::Gemv {
            warps: 4,
            vector: v,
            columns,
            unroll,
        },
        why: format!(
            "{}M = {} ≤ 16 with the weight [N = {}, K = {}] read along K: GEMV, {columns} output column(s) per warp (M·columns ≤ 32 accumulators, ≥ {} CTAs), vector {v} (widest dividing K within 16 bytes{}), 4 warps per CTA, {} CTAs, {unroll} chunks of k loaded per iteration ({GEMV_VECTORS_IN_FLIGHT} vectors of 16 bytes in flight per lane over the weight rows and the left rows)",
            widened_why(s),
            s.m,
            s.n,
            s.k,
            min_ctas,
            match (s.widened, dt) {
                (false, _) => String::new(),
                (true, DType::F32) => {
                    " of f32, so that the k order and the bits are the f32 matmul's".into()
                }
                (true, _) => format!(" of {dt}"),
            },
            s.n.div_ceil(4 * columns as u64)
        ),
    }
}

/// The tensor-core tile of the matmul `mm` when its epilogue computes whole rows of `d`
/// output columns (`fuse` rule 8): [`MMA_TILES`]' choice with the staged epilogue, `bn`
/// raised to `d` where it is less (a power of two: every column tile then holds whole
/// rows), no split-K (a row's values must all be in one CTA), and the tile's `bm · bn / 8`
/// chunks of 8 columns a multiple of its threads (every lane takes part in each pass's
/// shuffles). `None` where the matmul would get no such tile: the decode GEMV shapes
/// (M ≤ 16, one batch entry, both operands read along K), the exact profile or f32
/// operands outside the fast profile (no tensor cores), N not a multiple of `d`.
pub fn row_epilogue_tile(
    g: &Graph,
    mm: Value,
    d: u64,
    t: &Target,
    profile: Profile,
) -> Option<(TileConfig, String)> {
    let s = matmul_shape(g, mm);
    let decode = s.m <= 16 && s.batch == 1 && s.rhs_k_contiguous && s.lhs_k_contiguous;
    if decode || d == 0 || s.n % d != 0 {
        return None;
    }
    mma(&s, s.read, (true, true), (Some(d), false), t, profile).ok()
}

/// Whether TMA can load the operands of matmul `s` on `t` for a warp-specialised tile
/// whose shared memory is `shared` bytes: the target has TMA and setmaxnreg, no batch,
/// both stored tensors read in place (no strided view) — `x @ w^T`, both along K, or for
/// 16-bit operands `x @ w` with `w` stored `[K, N]` ([`mn_major_b`]) — in rows of whole
/// 16-byte chunks (a tensor map's row stride: K · esz bytes for A and a K-major B, N ·
/// esz for an MN-major B; CUDA Driver API `cuTensorMapEncodeTiled`, `globalStrides`
/// multiples of 16), and `shared` fits.
fn tma_loads(s: &MatmulShape, shared: u32, t: &Target) -> bool {
    let needs = Features {
        tma: true,
        setmaxnreg: true,
        ..Features::NONE
    };
    let esz = s.read.size_bytes();
    let b_rows = if s.rhs_k_contiguous { s.k } else { s.n };
    offers(t, needs).is_ok()
        && s.batch == 1
        && s.operands_2d
        && !s.views
        && s.lhs_k_contiguous
        && (s.rhs_k_contiguous || mn_major_b(s))
        && (s.k * esz) % 16 == 0
        && (b_rows * esz) % 16 == 0
        && shared <= t.max_shared_per_cta
}

/// The warp-specialised TMA variant of a warpgroup schedule (`wgmma: 1` → `wgmma: tma`,
/// the same tile, stages and epilogue, one CTA an SM; `lower/wgmma_tma.rs`), where TMA can
/// load the operands ([`tma_loads`]) and the ring with its mbarriers fits the shared
/// memory, with the last wave's tiles split in two where that shortens it ([`tma_tail`];
/// not for a row epilogue, `row_epilogue`). Any other schedule is returned as it is. Taken
/// under `Options::wgmma_tma` (on by default) in `fast`; its order of sums is the `wgmma:
/// 1` tile's, whatever the tail.
pub fn prefer_tma(g: &Graph, mm: Value, row_epilogue: bool, sch: Schedule, t: &Target) -> Schedule {
    let TileConfig::Mma {
        bm,
        bn,
        bk,
        stages,
        epilogue,
        engine: MmaEngine::Wgmma,
        ..
    } = sch.tile
    else {
        return sch;
    };
    let s = matmul_shape(g, mm);
    let esz = s.read.size_bytes() as u32;
    let shared =
        mma_shared_bytes((bm, bn, bk), stages, esz, epilogue).next_multiple_of(8) + 16 * stages;
    if !tma_loads(&s, shared, t) {
        return sch;
    }
    let tiles = s.m.div_ceil(bm as u64) * s.n.div_ceil(bn as u64);
    let tail = match row_epilogue {
        true => 0,
        false => tma_tail(tiles, bn, t.sm_count as u64),
    };
    let mut tile = sch.tile;
    if let TileConfig::Mma {
        engine,
        min_ctas_per_sm,
        ..
    } = &mut tile
    {
        *engine = MmaEngine::WgmmaTma { tail };
        // What the kernel asks of ptxas anyway (`lower/mod.rs`): a register count at entry,
        // without which ptxas ignores setmaxnreg.
        *min_ctas_per_sm = 1;
    }
    let split = match tail {
        0 => String::new(),
        _ => format!(
            "; the last wave's {tail} tiles split in two of {bm} × {} ({} CTAs for {tiles} tiles, one an SM: {} whole waves, then {} halves; taken before the ping-pong tile)",
            bn / 2,
            tiles + tail as u64,
            (tiles - tail as u64) / t.sm_count as u64,
            2 * tail
        ),
    };
    Schedule {
        tile,
        why: format!(
            "{}; warp-specialised: one producer warpgroup (setmaxnreg 40) loads both operands' K slices by TMA into the {stages}-stage ring, the 2 consumer warpgroups (setmaxnreg 232) take them through FULL/EMPTY mbarriers{split}",
            sch.why
        ),
    }
}

/// The tiles of a TMA tile's last wave to compute as two halves of `bn / 2` columns each
/// (`MmaEngine::WgmmaTma`'s `tail`), for `tiles` tiles of `bn` columns on `sms` SMs, one
/// CTA an SM (the ring of 4 stages of 48 KiB fills an SM's shared memory): the tiles past
/// the last whole wave, where their halves fit in one wave (at most `sms / 2` of them) —
/// that wave then takes about half a tile's time instead of a whole one's (Qwen3-14B's q
/// projection at T = 2048 on an H100: 320 tiles of 128 × 256, two waves of 132 and 112
/// halves where there were 56 whole tiles). 0 where there is no partial wave, where the
/// halves would make more than one, and for tiles narrower than 128 columns (halves
/// under 64, the width of an MN-major B's panel).
pub fn tma_tail(tiles: u64, bn: u32, sms: u64) -> u32 {
    let last = tiles % sms.max(1);
    match last > 0 && 2 * last <= sms && bn % 128 == 0 {
        true => last as u32,
        false => 0,
    }
}

/// The ping-pong tile's output tile: each consumer warpgroup computes 128 × 128
/// (`lower/wgmma_pingpong.rs` says why this size).
pub const PINGPONG_TILE: u32 = 128;

/// The ping-pong tile's ring stages: 4 × 32 KiB with the two consumers' staging tiles
/// (2 × 17 KiB of bf16, 2 × 34 KiB of f32) fills 162 KiB (196 KiB) of the 227. Five and
/// six stages fit beside bf16 staging tiles but were slower: the Qwen3-14B gate, up and
/// down GEMMs by 10–12%, the q GEMM unchanged (H100, docs/perf/2026-12-07-stop37.md).
pub const PINGPONG_STAGES: u32 = 4;

/// Shared memory of the ping-pong tile, bytes: the ring (`stages` slices of A's and B's
/// 128 rows of `bk` elements of `esz` bytes), for the staged epilogue one `64 × (128 +
/// STAGED_ROW_PAD)` tile of `staged_esz`-byte elements per consumer warpgroup (each
/// stages its 128 × 128 tile in two halves of 64 rows, beside the ring, which the producer
/// keeps filling meanwhile), then the FULL and EMPTY mbarriers (8 bytes each per stage).
pub fn pingpong_shared_bytes(
    bk: u32,
    stages: u32,
    esz: u32,
    (epilogue, staged_esz): (MmaEpilogue, u32),
) -> u32 {
    let t = PINGPONG_TILE;
    let ring = stages * 2 * t * bk * esz;
    let staging = if epilogue == MmaEpilogue::Staged {
        2 * (t / 2) * (t + STAGED_ROW_PAD) * staged_esz
    } else {
        0
    };
    ring + staging + 16 * stages
}

/// The persistent ping-pong variant of a warpgroup schedule (`wgmma: 1` → `wgmma:
/// pingpong, ctas: N`; `lower/wgmma_pingpong.rs`): 128 × 128 tiles, [`PINGPONG_STAGES`]
/// stages, the epilogue kind kept, one CTA an SM, `N` = the target's SMs. Taken where TMA
/// can load the operands ([`tma_loads`]), the GEMM has at least two 128 × 128 tiles per
/// SM (with fewer, some CTA would run one tile on one consumer warpgroup while the other
/// idles: the `wgmma: 1` or `wgmma: tma` tile's two warpgroups on one tile serve better),
/// and a row epilogue's rows (`rows`, of `d` columns) divide the 128 columns of a tile.
/// Any other schedule is returned as it is. Taken under `Options::wgmma_pingpong` (on by
/// default) in `fast`, after a TMA tile that splits its last wave ([`tma_tail`]); its order
/// of sums is the `wgmma: 1` tile's.
pub fn prefer_pingpong(
    g: &Graph,
    mm: Value,
    rows: Option<u64>,
    sch: Schedule,
    t: &Target,
) -> Schedule {
    let TileConfig::Mma {
        bk,
        epilogue,
        shape,
        engine: MmaEngine::Wgmma,
        ..
    } = sch.tile
    else {
        return sch;
    };
    let s = matmul_shape(g, mm);
    let esz = s.read.size_bytes() as u32;
    let stages = PINGPONG_STAGES;
    // The staged tile holds the matmul's value: 16-bit unless the matmul is f32 or widened
    // (`lower::epilogue`'s `staged_esz`; the ping-pong tile never splits K).
    let staged_esz = if s.widened { 4 } else { esz };
    let shared = pingpong_shared_bytes(bk, stages, esz, (epilogue, staged_esz));
    let tb = PINGPONG_TILE as u64;
    let tiles = s.m.div_ceil(tb) * s.n.div_ceil(tb);
    let rows_fit = rows.is_none_or(|d| d > 0 && tb % d == 0);
    if !tma_loads(&s, shared, t) || tiles < 2 * t.sm_count as u64 || !rows_fit {
        return sch;
    }
    let ctas = tiles.min(t.sm_count as u64) as u32;
    Schedule {
        tile: TileConfig::Mma {
            bm: PINGPONG_TILE,
            bn: PINGPONG_TILE,
            bk,
            warps_m: 8,
            warps_n: 1,
            stages,
            split_k: 1,
            shape,
            epilogue,
            min_ctas_per_sm: 1,
            engine: MmaEngine::WgmmaPingpong { ctas },
        },
        why: format!(
            "{}; persistent ping-pong instead: {ctas} CTAs walk the {tiles} tiles of 128 × 128 in grouped order, one producer warpgroup (setmaxnreg 40) loads their K slices by TMA into a {stages}-stage ring, 2 consumer warpgroups (setmaxnreg 232) take the CTA's tiles in turn, one's epilogue running while the other's wgmma main loop runs ({shared} bytes of shared memory)",
            sch.why
        ),
    }
}

/// The tensor-core tile and its reason, or why there is none: the profile or the operands
/// rule tensor cores out (said by nothing: the SIMT tile is the schedule), or no row of
/// [`MMA_TILES`] fits the target's shared memory (said). With `rows = Some(d)`, only tiles
/// that suit an epilogue over whole rows of `d` ([`row_epilogue_tile`]); split-K only where
/// `split_k_ok`.
fn mma(
    s: &MatmulShape,
    dt: DType,
    (out_rows, out_same): (bool, bool),
    (rows, split_k_ok): (Option<u64>, bool),
    t: &Target,
    profile: Profile,
) -> Result<(TileConfig, String), NotApplicable> {
    let shape = match dt {
        DType::Bf16 => MmaShape::M16N8K16Bf16,
        DType::F16 => MmaShape::M16N8K16F16,
        DType::F32 => MmaShape::M16N8K8Tf32,
        _ => return Err(NotApplicable(String::new())),
    };
    let sixteen_bit = dt != DType::F32;
    let allowed = match profile {
        Profile::Exact => false,
        Profile::Invariant => sixteen_bit,
        Profile::Fast => true,
    };
    if !(s.operands_2d && allowed) {
        return Err(NotApplicable(String::new()));
    }
    // How the accumulators reach memory: 16-byte row vectors through shared memory where
    // rows are whole vectors, else pairs where rows are even (see `MmaEpilogue`).
    let epilogue = match s.n {
        n if out_rows && n % 4 == 0 => MmaEpilogue::Staged,
        n if out_same && n % 2 == 0 => MmaEpilogue::Pairs,
        _ => MmaEpilogue::Single,
    };
    let esz = dt.size_bytes() as u32;
    // `invariant` runs one instruction for every M of a GEMM: wgmma where it can for any
    // M, else `mma.sync` (`fast` picks by the tile count).
    let invariant_wgmma = profile == Profile::Invariant && invariant_wgmma(s, t, sixteen_bit);
    // K slices of 128 bytes per row (every 16-byte chunk of a row in a different bank
    // group of one 128-byte line, after the swizzle), or K rounded up to a power of two
    // ≥ 16 when that is less — except for wgmma, whose slice is one 128-byte swizzle span
    // (a shorter K is zero-filled to it).
    let bk_sync = (128 / esz).min(s.k.next_power_of_two().max(16) as u32);
    let sms = t.sm_count as u64;
    let mut too_big = Vec::new();
    let table: &[MmaRow] = if invariant_wgmma {
        &INVARIANT_WGMMA_TILES
    } else {
        &MMA_TILES
    };
    let (rows_tried, lacking) = tried(table, s, t);
    for row in rows_tried {
        // The warpgroup tile reads 16-bit operands, A K-major, B K- or MN-major;
        // `invariant` takes it only from its own table (one instruction for every M).
        if row.wgmma && !(sixteen_bit && (profile == Profile::Fast || invariant_wgmma)) {
            continue;
        }
        let bk = if row.wgmma { 128 / esz } else { bk_sync };
        let slices = s.k.div_ceil(bk as u64).max(1) as u32;
        let (bm, mut bn, warps_m, warps_n) = (row.tile)(s);
        if let Some(d) = rows {
            bn = bn.max(d as u32);
            let whole = bn as u64 % d == 0 && (bm * bn / 8) % (32 * warps_m * warps_n) == 0;
            if !whole {
                continue;
            }
        }
        let stage = (bm + bn) * bk * esz;
        // The warpgroup tile runs one CTA per SM with as many stages as fit (4 of 48 KiB
        // for 128 × 256), at least 3: two slices in flight while one wgmma group runs.
        // The warpgroup tiles run one CTA per SM with 4 stages (48 KiB each for 128 × 256,
        // 32 KiB for 128 × 128). Measured on the H100 (docs/perf/2026-12-06-h100-issue19.md,
        // run 3): 128 × 128 with 3 stages at 2 CTAs per SM took 73–83 µs for the Qwen3-14B
        // k and v projections at T = 2048, with 4 stages at one CTA 45–54 µs; and where
        // 128 × 256 fills the SMs it is faster than 128 × 128 even when its last wave is
        // mostly idle (o at T = 2048: 207 µs against 223–236).
        let stages = if row.wgmma {
            (t.max_shared_per_cta / stage).clamp(3, 4)
        } else {
            (RING_BUDGET / stage).min(4).min(slices + 1).max(2)
        };
        let shared = mma_shared_bytes((bm, bn, bk), stages, esz, epilogue);
        if shared > t.max_shared_per_cta {
            too_big.push(format!("{} {bm}×{bn} needs {shared} bytes", row.name));
            continue;
        }
        let tiles = s.m.div_ceil(bm as u64) * s.n.div_ceil(bn as u64) * s.batch;
        let split = if rows.is_some() || !split_k_ok || row.wgmma {
            1
        } else if profile == Profile::Invariant {
            invariant_split_k(s.n, s.k, bk)
        } else {
            split_k(tiles, s.k, bk, sms)
        };
        // Two CTAs per SM for 16-bit tiles, so one's mma overlaps the other's barrier and
        // copies: registers capped at 65536 / (2 · threads) when the shared memory allows
        // two. Not for TF32 tiles, whose transposed operands load fragments element by
        // element and spill under the cap.
        let min_ctas_per_sm = if sixteen_bit && !row.wgmma && 2 * shared <= t.max_shared_per_cta {
            2
        } else {
            0
        };
        let mma_name = if row.wgmma && mn_major_b(s) {
            format!("wgmma m64n{bn}k16, A K-major and B MN-major (stored [K, N], wgmma's transposed B in 128-byte column panels) through 128-byte-swizzled descriptors")
        } else if row.wgmma {
            format!("wgmma m64n{bn}k16, operands K-major through 128-byte-swizzled descriptors")
        } else if dt == DType::F32 {
            "m16n8k8 on TF32-rounded f32".to_string()
        } else {
            "m16n8k16".to_string()
        };
        let why = format!(
            "{}{}M = {}, N = {}, K = {}, batch {}, {dt}, {} profile: tensor cores ({mma_name}), {} tile {bm}×{bn} over {warps_m}×{warps_n} warps, K slices of {bk} in {stages} stages, {tiles} tiles{}",
            widened_why(s),
            if s.views {
                "operands read in place through their strided views; "
            } else {
                ""
            },
            s.m,
            s.n,
            s.k,
            s.batch,
            profile.name(),
            row.name,
            split_why(split, tiles)
        );
        let why = match rows {
            Some(d) => format!(
                "{why}; the epilogue computes whole rows of {d} columns ({} per column tile of {bn}, no split-K), {} threads per row",
                bn as u64 / d,
                d / 8
            ),
            None => why,
        };
        let tile = TileConfig::Mma {
            bm,
            bn,
            bk,
            warps_m,
            warps_n,
            stages,
            split_k: split,
            shape,
            epilogue,
            min_ctas_per_sm,
            engine: if row.wgmma {
                MmaEngine::Wgmma
            } else {
                MmaEngine::Sync
            },
        };
        return Ok((tile, why));
    }
    let lacking = if lacking.is_empty() {
        String::new()
    } else {
        format!("; {}", lacking.join(", "))
    };
    Err(NotApplicable(format!(
        "no tile fits the {} bytes of shared memory a CTA may have ({}){lacking}",
        t.max_shared_per_cta,
        too_big.join(", ")
    )))
}

/// The reasons' opening words for a matmul whose operands are widening casts: the
/// kernel reads the 16-bit tensors and converts each element exactly at load.
fn widened_why(s: &MatmulShape) -> String {
    if s.widened {
        format!(
            "operands read as {} under an f32 cast (no f32 copy; every product exact in f32, the f32 accumulator goes to the epilogue unrounded); ",
            s.read
        )
    } else {
        String::new()
    }
}

/// Split-K ranges for `tiles` output tiles: 1 when the tiles give every SM a CTA or K has
/// fewer than 8 slices of `bk`; else enough ranges for two CTAs per SM with at least 4
/// slices each, normalised so that no range is empty (`lower` checks the same).
fn split_k(tiles: u64, k: u64, bk: u32, sms: u64) -> u32 {
    let slices = k.div_ceil(bk as u64);
    if tiles >= sms || slices < 8 {
        return 1;
    }
    let want = (2 * sms).div_ceil(tiles).min(slices / 4).max(1);
    let per = slices.div_ceil(want);
    slices.div_ceil(per) as u32
}

/// Widest GEMM output (N) that `invariant` splits along K ([`invariant_split_k`]): two
/// column tiles of the 64-wide tiles. A bound on N itself, not on the chosen tile's column
/// tiles: the tile's width depends on M (16 × 128 for M ≤ 64, 64 × 64 above), so counting
/// its tiles split N = 200, K = 4096 at M = 16 and not at M = 200 — rows that differed
/// between the two batches (tests/programs/regressions/invariance_split_k_by_n.tsl).
pub const INVARIANT_SPLIT_MAX_N: u64 = 128;
/// Fewest K slices of a GEMM that `invariant` splits along K.
pub const INVARIANT_SPLIT_MIN_SLICES: u64 = 32;
/// K slices per range of an `invariant` split-K.
pub const INVARIANT_SPLIT_SLICES: u64 = 8;

/// The `invariant` profile's split-K of a GEMM of `n` output columns and a K of `k` in
/// slices of `bk` (a function of K and the dtype): a function of N and K alone, never of M
/// (nor of the tile, which M chooses), so that every row of every batch sums its K in one
/// order. Skinny outputs (N at most [`INVARIANT_SPLIT_MAX_N`]) over at least
/// [`INVARIANT_SPLIT_MIN_SLICES`] slices are cut into ranges of
/// [`INVARIANT_SPLIT_SLICES`] slices (at most 64 ranges: longer K gets longer ranges);
/// everything else is not split (1).
pub fn invariant_split_k(n: u64, k: u64, bk: u32) -> u32 {
    let slices = k.div_ceil(bk as u64);
    if n > INVARIANT_SPLIT_MAX_N || slices < INVARIANT_SPLIT_MIN_SLICES {
        return 1;
    }
    let per = INVARIANT_SPLIT_SLICES.max(slices.div_ceil(64));
    slices.div_ceil(per) as u32
}

fn split_why(split: u32, tiles: u64) -> String {
    if split > 1 {
        format!(
            "; split-K into {split} ranges ({} CTAs), partials summed in range order by a second kernel",
            tiles * split as u64
        )
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u64, n: u64, k: u64) -> MatmulShape {
        MatmulShape {
            batch: 1,
            m,
            n,
            k,
            rhs_k_contiguous: true,
            lhs_k_contiguous: true,
            operands_2d: true,
            read: DType::Bf16,
            widened: false,
            views: false,
        }
    }

    /// A row that needs an sm_90a feature is tried on the Hopper presets and left out, with
    /// the reason, on a target without it; rows that need nothing are tried everywhere.
    #[test]
    fn rows_needing_a_feature_are_tried_only_where_the_target_has_it() {
        let rows = [
            MmaRow {
                name: "warpgroup",
                needs: Features {
                    wgmma: true,
                    tma: true,
                    ..Features::NONE
                },
                wgmma: true,
                applies: |_, _| true,
                tile: |_| (128, 256, 2, 4),
            },
            MmaRow {
                name: "mma.sync",
                needs: Features::NONE,
                wgmma: false,
                applies: |_, _| true,
                tile: |_| (64, 64, 2, 2),
            },
        ];
        let s = shape(4096, 4096, 4096);
        let (ok, lacking) = tried(&rows, &s, &Target::h200());
        let names: Vec<&str> = ok.iter().map(|r| r.name).collect();
        assert_eq!(names, ["warpgroup", "mma.sync"]);
        assert!(lacking.is_empty(), "{lacking:?}");

        let sm80 = Target {
            name: "an sm_80 machine".into(),
            compute_capability: (8, 0),
            features: Features::NONE,
            ..Target::h200()
        };
        let (ok, lacking) = tried(&rows, &s, &sm80);
        let names: Vec<&str> = ok.iter().map(|r| r.name).collect();
        assert_eq!(names, ["mma.sync"]);
        assert_eq!(
            lacking,
            ["warpgroup needs wgmma, TMA, which the target (an sm_80 machine, sm_80) lacks"]
        );

        // A later machine keeps TMA but not wgmma (sm_90a's alone).
        let later = Target {
            name: "a later machine".into(),
            compute_capability: (10, 0),
            features: Features::of_compute_capability((10, 0)),
            ..Target::h200()
        };
        let (_, lacking) = tried(&rows, &s, &later);
        assert_eq!(
            lacking,
            ["warpgroup needs wgmma, which the target (a later machine, sm_100) lacks"]
        );
    }

    /// The `mma.sync` tiles (sm_80) need no feature; the warpgroup tiles need wgmma.
    #[test]
    fn the_mma_sync_tiles_need_no_feature() {
        for row in &MMA_TILES {
            let want = Features {
                wgmma: row.wgmma,
                ..Features::NONE
            };
            assert_eq!(row.needs, want, "{}", row.name);
        }
        assert!(MMA_TILES.iter().any(|r| r.wgmma));
    }
}
