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

mod attention;
mod matmul;

pub use attention::{
    attention_shared_bytes, prologue_order, row_epilogue_order, update_rows_order,
    wgmma_attention_shared_bytes,
};

pub use matmul::{
    matmul_shape, mma_shared_bytes, pingpong_shared_bytes, prefer_pingpong, prefer_tma,
    row_epilogue_tile, stored_operands, strided_operand, swaps_last_two, tma_tail, MatmulShape,
    PINGPONG_STAGES, PINGPONG_TILE, STAGED_ROW_PAD,
};

use crate::target::{Features, Profile, Target};
use tessel_ir::graph::{
    cumsum_chunk, Fusion, Graph, GroupOps, MmaEngine, Op, Schedule, Schedules, TileConfig,
};
use tessel_ir::Group;

/// Runs the pass. `split_k`: whether a matmul may cut its K into ranges when its tiles
/// leave SMs idle (in the `invariant` profile only by K and N, never by M:
/// `matmul::invariant_split_k`; off when compiling tensor-parallel ranks, whose narrower
/// GEMMs would otherwise sum in another association than the whole). `wgmma_tma`: the
/// warpgroup tile becomes, in `fast`, its warp-specialised TMA variant where it can
/// ([`prefer_tma`]; `Options::wgmma_tma`), first of all where that variant splits its last
/// wave ([`tma_tail`]: on an H100 the Qwen3-14B prefill layer's q, gate and down GEMMs at
/// T = 2048 ran in 0.90–0.98x the ping-pong tile's time, its o and up GEMMs in
/// 1.00–1.04x, the layer in 0.95–0.97x; docs/perf/2026-12-08-stop39.md). `wgmma_pingpong`: in `fast`, the warpgroup tile
/// becomes the persistent ping-pong tile where it can ([`prefer_pingpong`];
/// `Options::wgmma_pingpong`), and where it cannot, the TMA variant if `wgmma_tma` asks for
/// it. `wgmma_attention`: a fused attention takes the warpgroup tile where it can
/// ([`attention::prefer_wgmma`]; `Options::wgmma_attention`), with its keys per block
/// (`Options::wgmma_attention_keys`; 0: 64).
pub fn run(
    g: &Graph,
    fusion: &Fusion,
    target: &Target,
    profile: Profile,
    (split_k, wgmma_tma, wgmma_pingpong, wgmma_attention): (bool, bool, bool, Option<u32>),
) -> Schedules {
    let mut s = Schedules::new();
    for grp in fusion.groups.keys() {
        let mut sch = choose(g, fusion, grp, target, (profile, split_k));
        if let Some(mm) = fusion.groups[grp].ops.matmul() {
            // Only in `fast`: in `invariant` the tile would follow M (it needs two tiles
            // per SM), and with it the wgmma instruction's width.
            let rows = crate::analysis::row_epilogue_rows(g, &fusion.groups[grp]);
            let fast = profile == Profile::Fast;
            let engine = |s: &Schedule| match s.tile {
                TileConfig::Mma { engine, .. } => Some(engine),
                _ => None,
            };
            let tma =
                (wgmma_tma && fast).then(|| prefer_tma(g, mm, rows.is_some(), sch.clone(), target));
            sch = match tma {
                // A TMA tile whose last wave splits (`tma_tail`) before the ping-pong tile.
                Some(t) if matches!(engine(&t), Some(MmaEngine::WgmmaTma { tail }) if tail > 0) => {
                    t
                }
                // Else the ping-pong tile where it applies, else the TMA tile.
                tma => {
                    let pingpong = match wgmma_pingpong && fast {
                        true => prefer_pingpong(g, mm, rows, sch, target),
                        false => sch,
                    };
                    match engine(&pingpong) {
                        Some(MmaEngine::WgmmaPingpong { .. }) => pingpong,
                        _ => tma.unwrap_or(pingpong),
                    }
                }
            };
        }
        if let GroupOps::Attention {
            scores, attention, ..
        } = &fusion.groups[grp].ops
        {
            let prologue = crate::analysis::q_in_prologue(g, fusion, *scores);
            sch = attention::prefer_wgmma(
                g,
                (*scores, *attention),
                sch,
                target,
                (prologue, profile == Profile::Fast, wgmma_attention),
            );
        }
        s[grp] = Some(sch);
    }
    s
}

/// Whether `t` has every feature `needed` (a candidate schedule's wgmma, TMA, setmaxnreg,
/// clusters: [`Features`]), or the ones it lacks in words, for the reason of the schedule
/// chosen instead: a schedule that needs an sm_90a feature is never chosen for a target
/// without it, and the PTX header (`Target::ptx_target`) follows the target.
pub fn offers(t: &Target, needed: Features) -> Result<(), String> {
    if t.features.covers(needed) {
        return Ok(());
    }
    let have = t.features.names();
    let missing: Vec<&str> = needed
        .names()
        .into_iter()
        .filter(|n| !have.contains(n))
        .collect();
    Err(format!(
        "{}, which the target ({}, {}) lacks",
        missing.join(", "),
        t.name,
        t.ptx_target()
    ))
}

fn choose(
    g: &Graph,
    fusion: &Fusion,
    grp: Group,
    t: &Target,
    (profile, split_k): (Profile, bool),
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
    match data.ops {
        GroupOps::Matmul { matmul, .. } => {
            let rows = crate::analysis::row_epilogue_rows(g, data);
            let materialized = |v: tessel_ir::Value| fusion.is_materialized(g, v);
            matmul::choose(g, (matmul, &materialized), out, rows, t, (profile, split_k))
        }
        GroupOps::Attention {
            scores: s,
            attention: a,
            ..
        } => {
            let fill = profile == Profile::Fast;
            let stats = data.outputs.len() > 1;
            let prologue = crate::analysis::q_in_prologue(g, fusion, s);
            attention::choose(g, (s, a), (prologue, stats), fill, t)
        }
        GroupOps::Update { ref row_reductions } => {
            update(g, out, !row_reductions.is_empty(), max_v_bytes)
        }
        GroupOps::Scan { cumsum } => scan(g, cumsum),
        GroupOps::AttentionDq { ref scores, .. } => attention::choose_bwd(g, scores, true, t),
        GroupOps::AttentionDkv { ref scores, .. } => attention::choose_bwd(g, scores, false, t),
        GroupOps::Elementwise => {
            let ty = g.ty(out);
            let last = ty.shape.last();
            let numel = ty.shape.numel();
            let widest = widest_vector(last, max_v_bytes);
            // A small kernel of math functions (RoPE's cos and sin of one decode step's
            // positions: 128 elements) is latency-bound on its threads' chains, not on
            // memory: it takes the narrowest vector that still fills one CTA of 256
            // threads (measured: decode's k RoPE kernel, 128 elements of sin and cos over
            // 32 threads of vector 8, 8.0 µs on the H200 in docs/perf/2026-12-06-h200-issue19.md).
            let v = if numel < 256 * widest as u64
                && crate::analysis::cone_calls_math(g, &data.outputs, |_, a| {
                    !fusion.is_materialized(g, a)
                }) {
                let mut v = widest;
                while v > 1 && numel.div_ceil(v as u64) < 256 {
                    v /= 2;
                }
                v
            } else {
                widest
            };
            let work = numel.div_ceil(v as u64);
            let threads = elementwise_threads(work);
            let ctas = work.div_ceil(threads as u64);
            let why_v = if v == widest {
                format!("widest of 8/4/2/1 dividing the last dim {last} within 16 bytes")
            } else {
                format!(
                    "narrowed from {widest}: math functions over few elements spread over more threads"
                )
            };
            Schedule {
                tile: TileConfig::Elementwise { threads, vector: v },
                why: format!(
                    "elementwise over {numel} elements: vector {v} ({why_v}), {threads} threads per CTA, {ctas} CTAs"
                ),
            }
        }
        GroupOps::RowReduction { ref reductions } => {
            let rows_shape = crate::analysis::row_shape(g, out);
            let d = rows_shape.last();
            let rows = rows_shape.numel() / d.max(1);
            let across = d <= 32 && reads_rows_across(g, fusion, reductions);
            let v = if across {
                1
            } else {
                widest_vector(d, max_v_bytes.min(8))
            };
            let chunks = d / v as u64;
            let (tpr, how) = if across {
                (
                    1,
                    "one: a short row read across memory (its axis permuted), so a warp's lanes take 32 consecutive rows and each load is contiguous across them",
                )
            } else {
                threads_per_row(chunks)
            };
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

/// True when a reduction of the group reads its row across memory: its operand, under the
/// elementwise ops on it, is a view of a materialised tensor in which the row's axis is not
/// the contiguous one (GQA's sum over the query heads of a group, `[.., T, d, heads]` of a
/// `[.., heads, T, d]` tensor). Lanes spread along such a row would each load from another
/// row of memory; lanes along the rows load consecutive elements.
fn reads_rows_across(g: &Graph, fusion: &Fusion, reductions: &[tessel_ir::Value]) -> bool {
    reductions.iter().any(|&r| {
        let Op::Reduce { mut arg, .. } = g.ops[r] else {
            return false;
        };
        while let Op::Cast { arg: a } | Op::Unary { arg: a, .. } = g.ops[arg] {
            arg = a;
        }
        if !crate::view::is_view_op(&g.ops[arg]) || fusion.is_materialized(g, arg) {
            return false;
        }
        crate::view::strided_until(g, arg, &|v| fusion.is_materialized(g, v)).is_some_and(|view| {
            view.shape.last().is_some_and(|&n| n > 1) && view.strides.last() != Some(&1)
        })
    })
}

/// A cumsum `c`: one CTA per row, a thread per chunk of the row up to 256 (whole warps);
/// the chunk is the order's ([`cumsum_chunk`]), so the threads change only who computes
/// which chunk, never a bit of the result. A row of one chunk (at most 32 elements) has
/// one thread's work: then a thread per row, 256 rows a CTA (fewer, whole warps, for few
/// rows), the same additions — a fold over a short axis such as `tessel.lora`'s sum over
/// sequences runs 81920 rows of 9 as 320 CTAs, not 81920 of one busy thread each.
fn scan(g: &Graph, c: tessel_ir::Value) -> Schedule {
    let ty = g.ty(c);
    let n = ty.shape.last();
    let rows = ty.shape.numel() / n.max(1);
    let chunk = cumsum_chunk(n);
    let chunks = n.div_ceil(chunk);
    if chunks == 1 {
        let threads = elementwise_threads(rows);
        return Schedule {
            tile: TileConfig::Scan {
                threads,
                chunk: chunk as u32,
                rows: threads,
            },
            why: format!(
                "cumsum over {rows} rows of {n}: rows of one chunk of {chunk} (the order's, fixed by the row length), so a thread per row, {threads} rows per CTA, {} CTAs",
                rows.div_ceil(threads as u64)
            ),
        };
    }
    let threads = (chunks.div_ceil(32) * 32).clamp(32, 256) as u32;
    Schedule {
        tile: TileConfig::Scan {
            threads,
            chunk: chunk as u32,
            rows: 1,
        },
        why: format!(
            "cumsum over {rows} rows of {n}: one CTA per row, {chunks} chunks of {chunk} (the order's, fixed by the row length), {threads} threads (a thread per chunk, whole warps, at most 256)"
        ),
    }
}

/// Threads per CTA for `work` independent items: 256, fewer (whole warps) for tiny tensors.
fn elementwise_threads(work: u64) -> u32 {
    if work >= 256 {
        256
    } else {
        (work.div_ceil(32) * 32).max(32) as u32
    }
}

/// An in-place update: elementwise over its rows — the work is the rows', never the
/// tensor's it writes into. A vector of consecutive elements along the last dim, as for
/// elementwise kernels, except when the update writes along the last axis: there each
/// element's position moves by a run-time offset, so one element per access.
///
/// With `reduces` (the kernel computes its rows' reductions: `fuse` rule 6), vector 8: a
/// row of `d` on `d / 8` consecutive threads (the fusion rule checked that `d / 8` is a
/// power of two ≤ 32 and that the rows are not written along their last axis).
fn update(g: &Graph, u: tessel_ir::Value, reduces: bool, max_v_bytes: u32) -> Schedule {
    let Op::Update { rows, at, .. } = &g.ops[u] else {
        unreachable!("an update group's output is an update (fusion.update)");
    };
    let shape = &g.ty(*rows).shape;
    let last = shape.last();
    let along_last = at.is_some_and(|at| at.axis as usize + 1 == shape.rank());
    let v = if reduces {
        8
    } else if along_last {
        1
    } else {
        widest_vector(last, max_v_bytes)
    };
    let work = shape.numel().div_ceil(v as u64);
    let threads = elementwise_threads(work);
    let ctas = work.div_ceil(threads as u64);
    let why_v = if reduces {
        format!(
            "vector 8, a row of {last} on {} consecutive threads, which form its reductions",
            last / 8
        )
    } else if along_last {
        "vector 1: the rows are written along the last axis, at a run-time offset".to_string()
    } else {
        format!("vector {v} (widest of 8/4/2/1 dividing the last dim {last} within 16 bytes)")
    };
    Schedule {
        tile: TileConfig::Update { threads, vector: v },
        why: match at {
            Some(at) => format!(
                "in-place update of {} row elements into {} along axis {} (the rows only, not the tensor): {why_v}, {threads} threads per CTA, {ctas} CTAs",
                shape.numel(),
                g.ty(u).shape,
                at.axis
            ),
            None => format!(
                "in-place update of all {} elements of {} (each read and written by one thread): {why_v}, {threads} threads per CTA, {ctas} CTAs",
                shape.numel(),
                g.ty(u).shape
            ),
        },
    }
}

/// The widest of 8, 4, 2, 1 that divides `n` and is at most `max`.
pub(super) fn widest_vector(n: u64, max: u32) -> u32 {
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
        TileConfig::Elementwise { .. } | TileConfig::Update { .. } => "no reduction".to_string(),
        TileConfig::Scan { chunk, .. } => scan_order(chunk as u64, row_len),
        TileConfig::Attention {
            block_n,
            split,
            wgmma,
            ..
        } => attention::order(block_n, split, wgmma),
        TileConfig::AttentionBwd { block_n, .. } => attention::bwd_order(block_n),
        TileConfig::Gemv { vector, .. } => format!(
            "each output: lane j of a warp folds k = j*{vector} + i*{} (i = 0, 1, ...), {vector} consecutive products left to right, into one f32 accumulator; then butterfly shuffles xor 16, 8, 4, 2, 1",
            32 * vector
        ),
        TileConfig::Simt { bk, split_k, .. } => format!(
            "each output: the products of each K slice of {bk} summed in k order into a partial starting at 0, the partials added in slice order into one f32 accumulator starting at 0 (independent of M, N and the output tile){}",
            split_order(split_k)
        ),
        TileConfig::Mma { engine, bn, .. } if engine.is_wgmma() => format!(
            "each output: one f32 accumulator starting at 0, updated by one wgmma.m64n{bn}k16 per k step of 16 in k order; inside a step the tensor core's order is not specified by NVIDIA (the executor models it as an fma chain in k order, as for mma.sync)"
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

/// A cumsum's order (design §5) for a row of `n` in chunks of `chunk`, the same whatever
/// the threads: it is [`tessel_ir::graph::Op::Cumsum`]'s.
pub fn scan_order(chunk: u64, n: u64) -> String {
    let chunks = n.div_ceil(chunk.max(1));
    format!(
        "cumsum of a row of {n}: {chunks} chunks of {chunk} elements; each chunk's total summed left to right from -0 (0 for i32); the exclusive prefix of the chunk totals summed left to right from -0; output i = its chunk's prefix + the chunk's elements up to i, left to right (a function of the row length only)"
    )
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
