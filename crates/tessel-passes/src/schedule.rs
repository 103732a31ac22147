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
use tessel_ir::Group;

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
    _t: &Target,
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
        GroupKind::Matmul => matmul(g, data.reductions[0], profile),
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
}

/// Reads M, N, K and the operand layouts of the matmul `mm`.
pub fn matmul_shape(g: &Graph, mm: tessel_ir::Value) -> MatmulShape {
    let tessel_ir::graph::Op::MatMul { lhs, rhs } = g.ops[mm] else {
        unreachable!("matmul groups list their matmul");
    };
    let (ls, rs) = (&g.ty(lhs).shape.0, &g.ty(rhs).shape.0);
    let r = ls.len();
    let swaps_last_two = |v: tessel_ir::Value| match &g.ops[v] {
        tessel_ir::graph::Op::Permute { perm, .. } => {
            let n = perm.len();
            n >= 2
                && perm[n - 1] as usize == n - 2
                && perm[n - 2] as usize == n - 1
                && perm[..n - 2]
                    .iter()
                    .enumerate()
                    .all(|(i, &p)| p as usize == i)
        }
        _ => false,
    };
    MatmulShape {
        batch: ls[..r - 2].iter().product(),
        m: ls[r - 2],
        k: ls[r - 1],
        n: rs[r - 1],
        rhs_k_contiguous: swaps_last_two(rhs),
        lhs_k_contiguous: !matches!(g.ops[lhs], tessel_ir::graph::Op::Permute { .. }),
    }
}

/// GEMV for decode shapes; the SIMT FMA tile otherwise.
///
/// - GEMV when M ≤ 16, there is no batch, and both operands are read along K (the usual
///   `x @ w^T` with `w` stored `[N, K]`): the weight dominates the traffic (N·K elements
///   against M·K), so the kernel streams it once with 16-byte loads, 4 warps (one output
///   column each) per CTA — N/4 CTAs, 4352 for the 17408 columns of Qwen3-14B's gate
///   projection, enough to cover 132 SMs many times over.
/// - SIMT FMA otherwise: a 64×64 output tile per CTA of 256 threads, 4×4 outputs per thread,
///   K in slices of 16 through shared memory (8 KiB); every output sums each slice's products
///   in k order into a partial and adds the partials in order — two levels, so the rounding
///   error grows like (16 + K/16)·u instead of K·u (an f32 product at K = 4096 summed in one
///   chain measured rel-RMS 1.16e-6, above the 1e-6 contract) — and its bits depend on
///   neither the output tile nor M (batch-invariant by construction).
fn matmul(g: &Graph, mm: tessel_ir::Value, profile: Profile) -> Schedule {
    let s = matmul_shape(g, mm);
    let esz = g.ty(mm).dtype.size_bytes() as u32;
    let decode = s.m <= 16 && s.batch == 1 && s.rhs_k_contiguous && s.lhs_k_contiguous;
    if decode && profile != Profile::Invariant {
        let v = widest_vector(s.k, 16 / esz);
        // Columns per warp: each left chunk loaded is reused for every column, so more
        // columns cut the left-operand loads per weight byte; bounded by the accumulators
        // (M·columns ≤ 32 registers) and by keeping at least 2 CTAs per SM's worth of warps.
        let columns = [4u32, 2, 1]
            .into_iter()
            .find(|&c| s.m * c as u64 <= 32 && s.n.div_ceil(4 * c as u64) >= 264)
            .unwrap_or(1);
        return Schedule {
            tile: TileConfig::Gemv {
                warps: 4,
                vector: v,
                columns,
            },
            why: format!(
                "M = {} ≤ 16 with the weight [N = {}, K = {}] read along K: GEMV, {columns} output column(s) per warp (M·columns ≤ 32 accumulators, ≥ 264 CTAs), vector {v} (widest dividing K within 16 bytes), 4 warps per CTA, {} CTAs",
                s.m,
                s.n,
                s.k,
                s.n.div_ceil(4 * columns as u64)
            ),
        };
    }
    let tile = TileConfig::Simt {
        bm: 64,
        bn: 64,
        bk: 16,
        tm: 4,
        tn: 4,
    };
    let because = if decode {
        "the invariant profile keeps one k order for every M, so no GEMV: "
    } else {
        ""
    };
    Schedule {
        why: format!(
            "{because}M = {}, N = {}, K = {}, batch {}: SIMT FMA tile 64×64, K slices of 16, 4×4 outputs per thread, {} CTAs",
            s.m,
            s.n,
            s.k,
            s.batch,
            s.n.div_ceil(64) * s.m.div_ceil(64) * s.batch
        ),
        tile,
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
        TileConfig::Simt { bk, .. } => format!(
            "each output: the products of each K slice of {bk} summed in k order into a partial starting at 0, the partials added in slice order into one f32 accumulator (independent of M, N and the output tile)"
        ),
    }
}
