//! `schedule`: picks a [`TileConfig`] for every fusion group — a deterministic function of
//! the group's shapes, dtypes and the [`Target`]'s properties; no autotuning.
//!
//! Before: a graph with its [`Fusion`]. After: a [`Schedule`] for every group, with the
//! reason in words (printed by `tessel explain`).
//!
//! Knobs and why (H200 numbers: 132 SMs, 2048 threads and 64 warps resident per SM,
//! 16-byte vector accesses are the widest single global load/store, PTX ISA §9.7.9.8 `ld`):
//! - vector width `v`: the widest of 8, 4, 2, 1 elements that divides the row (last) length
//!   and keeps one access at most 16 bytes for the widest dtype the kernel stores;
//! - elementwise: 256 threads per CTA (8 warps; enough CTAs per SM to hide latency), fewer
//!   for tiny tensors;
//! - row reduction: the row's `D / v` chunks are shared by `threads_per_row` threads — the
//!   next power of two ≥ the chunk count if it is ≤ 32 (a sub-warp per row, several rows per
//!   CTA), else a multiple of 32 that divides the chunk count evenly with 4 or more chunks
//!   per thread (the most threads that still gives every thread the same work), falling
//!   back to the multiple of 32 with the least idle work. CTAs hold at least 128 threads.

use crate::target::{Profile, Target};
use tessel_ir::graph::{Fusion, Graph, GroupKind, Schedule, Schedules, TileConfig};
use tessel_ir::{DType, Group};

/// Runs the pass.
pub fn run(g: &Graph, fusion: &Fusion, target: &Target, profile: Profile) -> Schedules {
    let mut s = Schedules::new();
    for (grp, data) in fusion.groups.iter() {
        s[grp] = Some(choose(g, fusion, grp, data.kind, target, profile));
    }
    s
}

fn choose(
    g: &Graph,
    fusion: &Fusion,
    grp: Group,
    kind: GroupKind,
    t: &Target,
    profile: Profile,
) -> Schedule {
    let data = &fusion.groups[grp];
    let out = data.outputs[0];
    let out_bytes = data
        .outputs
        .iter()
        .map(|&o| g.ty(o).dtype.size_bytes())
        .max()
        .unwrap_or(4);
    let max_v_bytes = (16 / out_bytes.max(1)).max(1) as u32;
    match kind {
        GroupKind::Matmul => matmul(g, data.reductions[0], t, profile),
        GroupKind::Elementwise => {
            let ty = g.ty(out);
            let last = ty.shape.last();
            let v = widest_vector(last, max_v_bytes);
            let work = ty.shape.numel().div_ceil(v as u64);
            let threads = if work >= 256 {
                256
            } else {
                (work.div_ceil(32) * 32).max(32) as u32
            };
            let ctas = work.div_ceil(threads as u64);
            Schedule {
                tile: TileConfig::Elementwise { threads, vector: v },
                why: format!(
                    "elementwise over {} elements: vector {v} (widest of 8/4/2/1 dividing the last dim {last} within 16 bytes), {threads} threads per CTA, {ctas} CTAs",
                    ty.shape.numel()
                ),
            }
        }
        GroupKind::RowReduction => {
            let rows_shape = crate::fuse::row_shape(g, out);
            let d = rows_shape.last();
            let rows = rows_shape.numel() / d.max(1);
            let v = widest_vector(d, max_v_bytes.min(8));
            let chunks = d / v as u64;
            let (tpr, how) = threads_per_row(chunks);
            let rows_per_cta = (128 / tpr).max(1);
            Schedule {
                tile: TileConfig::RowReduction {
                    threads_per_row: tpr,
                    rows_per_cta,
                    vector: v,
                },
                why: format!(
                    "row reduction over {rows} rows of {d}: vector {v}, {chunks} chunks per row, {tpr} threads per row ({how}), {rows_per_cta} rows per CTA"
                ),
            }
        }
    }
}

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

/// Reads M, N, K and the operand layouts of the matmul `mm`.
pub fn matmul_shape(g: &Graph, mm: tessel_ir::Value) -> MatmulShape {
    let tessel_ir::graph::Op::MatMul { lhs, rhs } = g.ops[mm] else {
        unreachable!("matmul groups list their matmul");
    };
    let (ls, rs) = (&g.ty(lhs).shape.0, &g.ty(rhs).shape.0);
    let r = ls.len();
    let swaps_last_two = |v: tessel_ir::Value| match &g.ops[v] {
        tessel_ir::graph::Op::Permute { perm, .. } => swaps_last_two(perm),
        _ => false,
    };
    MatmulShape {
        batch: ls[..r - 2].iter().product(),
        m: ls[r - 2],
        k: ls[r - 1],
        n: rs[r - 1],
        rhs_k_contiguous: swaps_last_two(rhs),
        lhs_k_contiguous: !matches!(g.ops[lhs], tessel_ir::graph::Op::Permute { .. }),
        operands_2d: [lhs, rhs].iter().all(|&x| {
            !matches!(g.ops[x], tessel_ir::graph::Op::Permute { .. }) || swaps_last_two(x)
        }),
    }
}

/// The tensors the matmul `mm` reads, `(lhs, rhs)`: each operand itself or, when it is the
/// swap of the last two dims of a tensor (`w^T`), that tensor, read transposed in place
/// ([`MatmulShape`]'s `*_k_contiguous` say which). `None` when an operand is any other
/// permute ([`MatmulShape::operands_2d`] false).
pub fn stored_operands(
    g: &Graph,
    mm: tessel_ir::Value,
) -> Option<(tessel_ir::Value, tessel_ir::Value)> {
    use tessel_ir::graph::Op;
    let Op::MatMul { lhs, rhs } = g.ops[mm] else {
        unreachable!("matmul groups list their matmul");
    };
    let stored = |x: tessel_ir::Value| match &g.ops[x] {
        Op::Permute { arg, perm } => swaps_last_two(perm).then_some(*arg),
        _ => Some(x),
    };
    Some((stored(lhs)?, stored(rhs)?))
}

/// The matmul schedule: a deterministic function of M, N, K, the batch, the operand
/// layouts and dtype, the profile and the target's SM count. In order:
///
/// 1. **Decode** — M ≤ 16, no batch, both operands read along K (`x @ w^T` with `w` stored
///    `[N, K]`): the weight dominates the traffic (N·K elements against M·K), so the kernel
///    streams it once with 16-byte loads.
///    - `fast`, 16-bit operands, K a multiple of 8, M ≥ 2: the tensor-core GEMV (`gemv_mma`):
///      8 weight rows per CTA — N/8 CTAs, 2176 for Qwen3-14B's gate projection, so that
///      every SM gets within 3% of the same number of weight bytes (with 16 rows, 1088 CTAs
///      leave some SMs 9 and others 8: 12% idle) — with the most warps per CTA (4, 2 or 1)
///      splitting K that keeps every warp of the grid resident at once (64 per SM: one
///      wave, and the most loads in flight); 8 chunks of 32 k in flight per warp (4 for
///      M > 8, whose second left fragment doubles the registers).
///    - `exact` and `fast` otherwise: the SIMT GEMV, 4 warps per CTA, each warp `columns`
///      output columns (M·columns ≤ 32 accumulators, ≥ 264 CTAs — 2 per SM). At M = 1 it
///      streams the weight at the copy bandwidth (measured 42.3 µs for the gate projection,
///      against 47.1 µs for the tensor-core GEMV, whose 16-row fragment is 1/16 used).
///    - `invariant`: neither (their k orders differ from the tile's); the tile below.
/// 2. **Tensor-core tile** (`mma`) — `fast` and `invariant`, for bf16/f16 operands, and
///    f32 operands in `fast` only (rounded to TF32: `invariant` keeps f32 accuracy), when
///    both operands are stored tensors or their transposes:
///    - skinny N (N ≤ 64, the LoRA ranks): `bn` = N rounded up to a power of two ≥ 16,
///      `bm` = 64 over 4 warps stacked along M;
///    - skinny M (M ≤ 64): `bm` = M rounded up likewise, `bn` = 128 over 4 warps along N;
///    - short K (K ≤ 32, a LoRA up-projection): 64 × 64 over 2 × 2 warps — the output's
///      stores dominate, and many small CTAs overlap them;
///    - otherwise 128 × 256 over 2 × 4 warps (64 × 64 per warp: 8 ldmatrix.x4 feed 32 mma
///      per k step, 128 bytes of shared memory read per mma instead of 192 with 64 × 32),
///      or 64 × 64 over 2 × 2 when the large tiles would not give every SM one CTA. Measured
///      on the Qwen3-14B projections at T = 4096 (docs/perf/2026-11-29-h200-issue3-part2.md):
///      128 × 256 over 2 × 4 warps 1.59–1.65× cuBLAS's time, 128 × 128 over 2 × 2 1.70–1.73×,
///      256 × 128 over 4 × 2 1.63–1.68×; 3 stages instead of 2 no different;
///    - K slices of 128 bytes per row (`bk` 64 for 16-bit, 32 for TF32: every 16-byte
///      chunk of a row in a different bank group of one 128-byte line, after the swizzle),
///      or K rounded up to a power of two ≥ 16 when that is less (a LoRA up-projection's
///      K = 16 is one slice of 16),
///      as many stages as fit in 96 KiB, at most 4 and at most one more than K has slices
///      (2 for the 128 × 256 tile; dynamic shared memory beyond 48 KiB).
/// 3. **SIMT FMA tile** otherwise (the `exact` schedule for every non-decode shape): a
///    64×64 output tile per CTA of 256 threads, 4×4 outputs per thread, K in slices of 16
///    through shared memory; each slice's products are summed in k order into a partial,
///    the partials added in order — two levels, so the rounding error grows like
///    (16 + K/16)·u instead of K·u (a single f32 chain at K = 4096 measured rel-RMS
///    1.16e-6, above the 1e-6 contract) — and bits depend on neither the output tile nor M.
///    Skinny N ≤ 32: 128 × 16 tiles, 8 × 1 outputs per thread; skinny M ≤ 32: 16 × 128,
///    2 × 4 (a 64-row tile would compute 48 rows of zeros for a rank-16 LoRA's dA; 1 × 8
///    made ptxas spill). Operand slices are loaded 16 bytes at a time along whichever dim
///    the stored tensor is contiguous in, when its rows are a multiple of 4.
/// 4. **Split-K** (`exact` and `fast`; never `invariant`, where it would make the order
///    depend on M): when the tiles do not give every SM a CTA and K has at least 8 slices,
///    K is cut into `split_k` ranges of whole slices, enough for two CTAs per SM and at
///    least 4 slices each; partials go to scratch and are summed in range order.
fn matmul(g: &Graph, mm: tessel_ir::Value, t: &Target, profile: Profile) -> Schedule {
    let s = matmul_shape(g, mm);
    // A matmul's operands and result have one dtype (the graph verifier's rule).
    let dt = g.ty(mm).dtype;
    let esz = dt.size_bytes() as u32;
    let sixteen_bit = matches!(dt, DType::Bf16 | DType::F16);
    let decode = s.m <= 16 && s.batch == 1 && s.rhs_k_contiguous && s.lhs_k_contiguous;
    let sms = t.sm_count as u64;
    if decode && profile == Profile::Fast && sixteen_bit && s.k % 8 == 0 && s.m > 1 {
        let ctas = s.n.div_ceil(8);
        let warps = [4u32, 2, 1]
            .into_iter()
            .find(|&w| ctas * w as u64 <= 64 * sms)
            .unwrap_or(1);
        // Registers: every CTA resident means ⌈CTAs / SMs⌉ per SM, so 65536 / (that ·
        // threads) per thread (255 at most); about 24 go to the accumulators, pointers and
        // indices, the rest hold the loads in flight: 16 bytes of the weight and of each
        // left fragment (one for M ≤ 8, two above) per chunk.
        let per_sm = ctas.div_ceil(sms).max(1);
        let cap = (65536 / (per_sm * 32 * warps as u64)).min(255);
        let per_chunk = 4 * (1 + s.m.div_ceil(8));
        let unroll = (cap.saturating_sub(24) / per_chunk).clamp(1, 8) as u32;
        return Schedule {
            tile: TileConfig::GemvMma { warps, unroll },
            why: format!(
                "M = {} ≤ 16 with the weight [N = {}, K = {}] read along K, {dt}, fast profile: tensor-core GEMV, 8 weight rows per CTA ({ctas} CTAs), {warps} warp(s) per CTA splitting K (the most that keeps every warp resident at once: ≤ {} warps), {unroll} chunks of 32 k in flight per warp",
                s.m,
                s.n,
                s.k,
                64 * sms
            ),
        };
    }
    if decode && profile != Profile::Invariant {
        let v = widest_vector(s.k, 16 / esz);
        let columns = [4u32, 2, 1]
            .into_iter()
            .find(|&c| s.m * c as u64 <= 32 && s.n.div_ceil(4 * c as u64) >= 2 * sms)
            .unwrap_or(1);
        return Schedule {
            tile: TileConfig::Gemv {
                warps: 4,
                vector: v,
                columns,
            },
            why: format!(
                "M = {} ≤ 16 with the weight [N = {}, K = {}] read along K: GEMV, {columns} output column(s) per warp (M·columns ≤ 32 accumulators, ≥ {} CTAs), vector {v} (widest dividing K within 16 bytes), 4 warps per CTA, {} CTAs",
                s.m,
                s.n,
                s.k,
                2 * sms,
                s.n.div_ceil(4 * columns as u64)
            ),
        };
    }
    let because = if decode {
        "the invariant profile keeps one k order for every M, so no GEMV; "
    } else {
        ""
    };
    let tensor_cores = s.operands_2d
        && match profile {
            Profile::Exact => false,
            Profile::Invariant => sixteen_bit,
            Profile::Fast => sixteen_bit || dt == DType::F32,
        };
    let may_split = profile != Profile::Invariant;
    if tensor_cores {
        let pow2 = |x: u64| x.max(16).next_power_of_two() as u32;
        let (bm, bn, warps_m, warps_n, shape_why) = if s.n <= 64 {
            (64, pow2(s.n), 4, 1, "skinny-N")
        } else if s.m <= 64 {
            (pow2(s.m), 128, 1, 4, "skinny-M")
        } else if s.k <= 32 {
            (
                64,
                64,
                2,
                2,
                "short-K (the output's stores dominate: many small CTAs)",
            )
        } else if s.m.div_ceil(128) * s.n.div_ceil(256) * s.batch >= sms {
            (128, 256, 2, 4, "large")
        } else {
            (64, 64, 2, 2, "mid-size (128-tiles would leave SMs idle)")
        };
        let bk = (128 / esz).min(s.k.next_power_of_two().max(16) as u32);
        let stage = (bm + bn) * bk * esz;
        let slices = s.k.div_ceil(bk as u64).max(1) as u32;
        let stages = (96 * 1024 / stage).min(4).min(slices + 1).max(2);
        let tiles = s.m.div_ceil(bm as u64) * s.n.div_ceil(bn as u64) * s.batch;
        let split = if may_split {
            split_k(tiles, s.k, bk, sms)
        } else {
            1
        };
        let tile = TileConfig::Mma {
            bm,
            bn,
            bk,
            warps_m,
            warps_n,
            stages,
            split_k: split,
        };
        let mma = if dt == DType::F32 {
            "m16n8k8 on TF32-rounded f32"
        } else {
            "m16n8k16"
        };
        return Schedule {
            why: format!(
                "{because}M = {}, N = {}, K = {}, batch {}, {dt}, {} profile: tensor cores ({mma}), {shape_why} tile {bm}×{bn} over {warps_m}×{warps_n} warps, K slices of {bk} in {stages} stages, {tiles} tiles{}",
                s.m,
                s.n,
                s.k,
                s.batch,
                profile.name(),
                split_why(split, tiles)
            ),
            tile,
        };
    }
    let (bm, bn, tm, tn, shape_why) = if s.n <= 32 {
        (128, 16, 8, 1, "skinny N: 128×16 tile, 8×1")
    } else if s.m <= 32 {
        (16, 128, 2, 4, "skinny M: 16×128 tile, 2×4")
    } else {
        (64, 64, 4, 4, "64×64 tile, 4×4")
    };
    let bk = 16;
    let tiles = s.m.div_ceil(bm as u64) * s.n.div_ceil(bn as u64) * s.batch;
    let split = if may_split {
        split_k(tiles, s.k, bk, sms)
    } else {
        1
    };
    Schedule {
        why: format!(
            "{because}M = {}, N = {}, K = {}, batch {}: SIMT FMA, {shape_why} outputs per thread, K slices of 16, {tiles} tiles{}",
            s.m,
            s.n,
            s.k,
            s.batch,
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

/// The widest of 8, 4, 2, 1 that divides `n` and is at most `max`.
fn widest_vector(n: u64, max: u32) -> u32 {
    [8u32, 4, 2, 1]
        .into_iter()
        .find(|&v| v <= max && n % v as u64 == 0)
        .unwrap_or(1)
}

fn threads_per_row(chunks: u64) -> (u32, &'static str) {
    if chunks <= 32 {
        return (
            chunks.max(1).next_power_of_two() as u32,
            "a sub-warp: the next power of two ≥ the chunk count",
        );
    }
    let even = (1..=32u64)
        .rev()
        .map(|w| w * 32)
        .find(|&t| chunks % t == 0 && chunks / t >= 4);
    if let Some(t) = even {
        return (
            t as u32,
            "the most threads dividing the chunks evenly, ≥ 4 each",
        );
    }
    let best = (1..=32u64)
        .map(|w| w * 32)
        .filter(|&t| chunks.div_ceil(t) >= 2 || t >= chunks)
        .min_by_key(|&t| (chunks.div_ceil(t) * t - chunks, std::cmp::Reverse(t)))
        .unwrap_or(32);
    (best as u32, "the multiple of 32 with the least idle work")
}

/// The reduction-order signature of a row-reduction tile (design §5): the exact order in
/// which each row's sums are formed. Also printed in the kernel IR.
pub fn reduction_order(tile: &TileConfig, row_len: u64) -> String {
    match *tile {
        TileConfig::RowReduction {
            threads_per_row,
            vector,
            ..
        } => {
            let lanes = threads_per_row.min(32);
            let mut s = format!(
                "row of {row_len}: thread j of {threads_per_row} folds chunks j, j+{threads_per_row}, ... of {vector} consecutive elements, left to right, into one f32 accumulator"
            );
            if lanes > 1 {
                let xs: Vec<String> =
                    std::iter::successors(Some(lanes / 2), |&m| (m > 1).then_some(m / 2))
                        .map(|m| m.to_string())
                        .collect();
                s += &format!(
                    "; then butterfly shuffles xor {} (acc + partner)",
                    xs.join(", ")
                );
            }
            if threads_per_row > 32 {
                s += &format!(
                    "; then the {} warp partials summed in warp order from shared memory",
                    threads_per_row / 32
                );
            }
            s
        }
        TileConfig::Elementwise { .. } => "no reduction".to_string(),
        TileConfig::Gemv { vector, .. } => format!(
            "each output: lane j of a warp folds k = j*{vector} + i*{} (i = 0, 1, ...), {vector} consecutive products left to right, into one f32 accumulator; then butterfly shuffles xor 16, 8, 4, 2, 1",
            32 * vector
        ),
        TileConfig::Simt { bk, split_k, .. } => format!(
            "each output: the products of each K slice of {bk} summed in k order into a partial starting at 0, the partials added in slice order into one f32 accumulator starting at 0 (independent of M, N and the output tile){}",
            split_order(split_k)
        ),
        TileConfig::Mma { split_k, .. } => format!(
            "each output: one f32 accumulator starting at 0, updated by one mma.sync per k step of 16 (8 for TF32) in k order; inside a step the tensor core's order is not specified by NVIDIA (the executor models it as an fma chain in k order){}",
            split_order(split_k)
        ),
        TileConfig::GemvMma { warps, .. } => {
            let mut o = format!(
                "each output: warp w of {warps} accumulates, in one f32 register starting at 0, one mma.sync per 16 products of the chunks of 32 k numbered w, w+{warps}, ... in order (in chunk c, k = 32c + 8t + j sits at fragment position 2t + (j mod 2) + 8*(j div 2 mod 2) of mma j div 4)"
            );
            if warps > 1 {
                o += &format!("; then the {warps} warp results added in warp order to 0");
            }
            o
        }
    }
}

/// The second phase of a split-K matmul, in words (empty without split-K).
fn split_order(split_k: u32) -> String {
    if split_k > 1 {
        format!(
            "; K cut into {split_k} ranges of whole slices, each range's sum (as above) stored to scratch, then the {split_k} range sums added in range order to 0"
        )
    } else {
        String::new()
    }
}
