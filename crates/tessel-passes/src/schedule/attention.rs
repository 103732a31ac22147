//! The fused attention tile ([`TileConfig::Attention`]): FlashAttention-2's loop (Dao, 2023)
//! on `mma.sync`, with the query heads of a KV group packed into one CTA's rows.

use super::offers;
use crate::analysis::attention_shape;
use crate::target::{Features, Target};
use crate::view::strided;
use tessel_ir::graph::{Graph, Op as GOp, Schedule, TileConfig};
use tessel_ir::Value;

/// Keys per block: 64 (FlashAttention-2's block for head dim 128 on sm_80+; 4 pairs of
/// 8-key fragments per k step of P·V).
const BLOCK_N: u32 = 64;
/// Keys per block in the split (decode) schedule.
const DECODE_BLOCK_N: u32 = 32;
/// Double-buffered K and V: one block copied while the other is multiplied.
const STAGES: u32 = 2;
/// At most 4 warps (64 query rows) per CTA, FlashAttention-2's forward default.
const MAX_WARPS: u32 = 4;
/// Keys per range when the keys are split over CTAs (flash-decoding: Dao, Haziza, Massa,
/// Sizov, "Flash-Decoding for long-context inference", 2023): 4 blocks, so a cache of 4096
/// keys gives 16 CTAs per row block. A fixed count of keys, not of ranges: a row's order
/// depends on its own keys only, never on the batch (design §12).
const SPLIT_KEYS: u32 = 4 * BLOCK_N;
/// The smallest range the `fast` profile halves [`SPLIT_KEYS`] to: 4 blocks of
/// [`DECODE_BLOCK_N`], so each CTA still walks a pipeline of several blocks.
const MIN_FILL_SPLIT: u32 = 4 * DECODE_BLOCK_N;
/// Split the keys when a batch entry has at most this many query rows (decode: a few new
/// tokens times the query heads of a KV group) and more than two ranges of keys.
const SPLIT_MAX_ROWS: u64 = 64;

/// Shared memory of the tile's rings: Q's rows once, then `stages` blocks of K and of V
/// (bf16/f16); the kernel adds 8 bytes per warp for combining the rows' key bounds.
pub fn attention_shared_bytes(warps: u32, block_n: u32, stages: u32, d: u64, e: u64) -> u32 {
    2 * (16 * warps * d as u32 + stages * block_n * (d + e) as u32)
}

/// Warps of the warpgroup tile (`wgmma: 1`): two consumer warpgroups of 64 query rows, 128
/// rows a CTA, fed by a producer warpgroup that loads K and V by TMA (128 threads more)
/// — FlashAttention-3's tile for head dim 128 (Shah, Bikshandi, Zhang, Thakkar, Ramani,
/// Dao, "FlashAttention-3: Fast and Accurate Attention with Asynchrony and
/// Low-precision", 2024, §3.1).
const WGMMA_WARPS: u32 = 8;
/// Keys per block of the warpgroup tile by default: 64, the mma.sync tile's ([`BLOCK_N`]),
/// so that both sum in one order and give the same bits on the executor (the running
/// maximum and sum are rescaled per block). FlashAttention-3 takes 128 at head dim 128
/// (S's wgmma m64n128k16, 64 accumulators a thread for S and 64 for O): asked for
/// (`Options::wgmma_attention_keys`), the tile takes 128, with another order of sums
/// (`tests/wgmma_attention.rs` checks both against the mma.sync tile at the same keys per
/// block); which is faster is the GPU's to say (issue 19).
const WGMMA_BLOCK_N: u32 = BLOCK_N;
/// Ring stages of the warpgroup tile: 3, so that a block's P·V can run behind the next
/// block's S (FlashAttention-3's intra-warpgroup overlap, §3.2: the softmax of block j
/// runs on the CUDA cores while P·V of block j - 1 runs on the tensor cores) while block
/// j + 1 is loaded: K and V of blocks j - 1, j and j + 1 are resident. With 2 the tile
/// lowers without the overlap (S, softmax, P·V in turn), taken where 3 do not fit.
const WGMMA_STAGES: u32 = 3;

/// Shared memory of the warpgroup tile: its rings ([`attention_shared_bytes`] at
/// [`WGMMA_WARPS`]), 8 bytes per warp of the CTA (producer included) for combining the
/// rows' key bounds, and the ring's FULL and EMPTY mbarriers, 8 bytes each per stage.
pub fn wgmma_attention_shared_bytes(block_n: u32, stages: u32, d: u64, e: u64) -> u32 {
    attention_shared_bytes(WGMMA_WARPS, block_n, stages, d, e) + 8 * (WGMMA_WARPS + 4) + 16 * stages
}

/// The warpgroup tile (`wgmma: 1`) in place of `sch`, an attention tile chosen by
/// [`choose`], where it can serve: the `fast` profile on a target with wgmma, 16-bit V,
/// head dims `d` and `e` multiples of 64 up to 256 (whole 128-byte panels; e is P·V's n),
/// keys not split (a prefill's rows, not a decode's), its rings within the target's shared
/// memory. Otherwise `sch`, its reason saying why not. `q_prologue`: the kernel computes
/// q ([`crate::analysis::q_in_prologue`]). `keys`: keys per block, 64 (0 means 64) or 128
/// (`Options::wgmma_attention_keys`), `None` where `Options::wgmma_attention` is off (on
/// by default since the GPU checked the tile, docs/perf/2026-12-07-stop36.md; the reason
/// then says so where `fast` on the target would have offered the tile). The order of
/// every sum is the `mma.sync` tile's at the same keys per block ([`order`]).
pub fn prefer_wgmma(
    g: &Graph,
    (s, a): (Value, Value),
    sch: Schedule,
    t: &Target,
    (q_prologue, fast, keys): (bool, bool, Option<u32>),
) -> Schedule {
    let TileConfig::Attention {
        pack,
        split,
        wgmma: false,
        ..
    } = sch.tile
    else {
        return sch;
    };
    let needs = Features {
        wgmma: true,
        ..Features::NONE
    };
    let Some(keys) = keys else {
        let why = match fast && split == 0 && offers(t, needs).is_ok() {
            true => format!(
                "{}; not the wgmma tile: not asked for (--no-wgmma-attention)",
                sch.why
            ),
            false => sch.why,
        };
        return Schedule {
            tile: sch.tile,
            why,
        };
    };
    let sh = attention_shape(g, s, a);
    let whole = |x: u64| x % 64 == 0 && (64..=256).contains(&x);
    let sixteen = matches!(
        g.ty(a).dtype,
        tessel_ir::DType::Bf16 | tessel_ir::DType::F16
    );
    let block_n = if keys == 0 { WGMMA_BLOCK_N } else { keys };
    // Three stages where they fit (P·V behind S), else two.
    let stages = match wgmma_attention_shared_bytes(block_n, WGMMA_STAGES, sh.d, sh.e) {
        x if x <= t.max_shared_per_cta => WGMMA_STAGES,
        _ => 2,
    };
    let shared = wgmma_attention_shared_bytes(block_n, stages, sh.d, sh.e);
    // K and V are loaded by TMA (`lower/attention_tma.rs`): each a view a tensor map can
    // describe — K `[.., d, n]` by its columns d and rows n, V `[.., n, e]` by e and n.
    let tma_why = {
        let (GOp::MatMul { rhs, .. }, GOp::Attention { v, .. }) = (&g.ops[s], &g.ops[a]) else {
            unreachable!("an attention's scores are a matmul")
        };
        let r = sh.batch.len() + 2;
        let batch: Vec<usize> = (0..r - 2).collect();
        [(*rhs, (r - 2, r - 1)), (*v, (r - 1, r - 2))]
            .into_iter()
            .find_map(|(x, (c, w))| {
                let esz = g.ty(x).dtype.size_bytes();
                strided(g, x)?.tma_error((c, w, &batch), esz)
            })
    };
    let why_not = if !fast {
        Some("the fast profile only".to_string())
    } else if block_n != 64 && block_n != 128 {
        Some(format!("{block_n} keys per block asked for (64 or 128)"))
    } else if let Err(e) = offers(t, needs) {
        Some(format!("it needs {e}"))
    } else if !sixteen {
        Some("v is not 16-bit".into())
    } else if !whole(sh.d) || !whole(sh.e) {
        Some(format!(
            "head dims {} and {} are not multiples of 64 up to 256",
            sh.d, sh.e
        ))
    } else if split > 0 {
        Some("the keys are split (decode)".into())
    } else if let Some(e) = tma_why {
        Some(format!("TMA cannot load K or V: {e}"))
    } else if shared > t.max_shared_per_cta {
        Some(format!("its {shared} bytes of shared memory do not fit"))
    } else {
        None
    };
    if let Some(reason) = why_not {
        return Schedule {
            tile: sch.tile,
            why: format!("{}; not the wgmma tile: {reason}", sch.why),
        };
    }
    let rows = sh.m * sh.pack;
    let batch: u64 = sh.batch.iter().product::<u64>() / sh.pack.max(1);
    let ctas = rows.div_ceil(16 * WGMMA_WARPS as u64) * batch;
    let prologue_why = match q_prologue {
        true => ", q (its RoPE and norm) computed by each CTA for its own rows before the key loop, never stored",
        false => "",
    };
    let keys_why = match block_n == BLOCK_N {
        true => "",
        false => " (asked for: not the mma.sync tile's 64, so another order of sums)",
    };
    Schedule {
        tile: TileConfig::Attention {
            warps: WGMMA_WARPS,
            block_n,
            stages,
            pack,
            split: 0,
            wgmma: true,
        },
        why: format!(
            "attention over {} queries × {} keys, head dims {} and {}, batch {:?}: the {} query heads of each K/V head packed into {rows} rows per batch, {} consumer warpgroups of 64 rows per CTA on wgmma (S = Q·Kᵀ from shared memory, P·V with P in registers and V MN-major) and a producer warpgroup (FlashAttention-3's warp specialisation: setmaxnreg gives its registers to the consumers), keys in blocks of {block_n}{keys_why} through a ring of {stages} stages that the producer fills by TMA (the block that crosses the CTA's last visible key by cp.async, zero past it) and the consumers release through mbarriers, exactly the blocks the consumers walk (one key bound for both), {}{prologue_why}, {ctas} CTAs",
            sh.m, sh.n, sh.d, sh.e, sh.batch, sh.pack, WGMMA_WARPS / 4,
            match stages >= 3 {
                true => "each block's P·V issued behind the next block's S (its softmax overlapping the tensor cores), and the two consumer warpgroups taking turns to issue a block's GEMMs at named barriers (ping-pong: one's softmax overlapping the other's GEMMs)",
                false => "each block's S, softmax and P·V in turn (three stages do not fit)",
            }
        ),
    }
}

/// The order of the reductions of a prologue computing q (rows of head dim `d`), in words:
/// exactly a row-reduction kernel's at `d / 8` threads per row and vector 8 (one chunk of
/// 8 per thread).
pub fn prologue_order(d: u64) -> String {
    format!("q computed in the prologue, per {}", chunk_rows_order(d))
}

/// The order of the reductions of a matmul's row epilogue (`fuse` rule 8, rows of `d`):
/// the same as [`prologue_order`]'s.
pub fn row_epilogue_order(d: u64) -> String {
    format!("the epilogue's rows, per {}", chunk_rows_order(d))
}

/// The order of the reductions an update kernel computes over its rows of `d` (`fuse`
/// rule 6): the same as [`prologue_order`]'s.
pub fn update_rows_order(d: u64) -> String {
    format!("the rows' reductions, per {}", chunk_rows_order(d))
}

/// A row-reduction kernel's order at `d / 8` threads per row and vector 8 (one chunk of 8
/// per thread), in words.
fn chunk_rows_order(d: u64) -> String {
    let rows = TileConfig::RowReduction {
        threads_per_row: (d / 8) as u32,
        rows_per_cta: 1,
        vector: 8,
    };
    super::reduction_order(&rows, d)
}

/// The tile for attention `a` computed from matmul `s`; `q_prologue` when the kernel
/// computes q itself ([`q_in_prologue`]), `stats` when it also writes its rows' maximum
/// and sum (for a backward): those are whole rows', so the keys are not split.
///
/// In the `fast` profile (`fill`), a split's range is the multiple of [`DECODE_BLOCK_N`]
/// from [`MIN_FILL_SPLIT`] to half the keys that fills whole waves of resident CTAs best
/// ([`fill_split`]): one sequence over 4096 keys (8 KV heads) takes ranges of 128, 256 CTAs
/// on 132 SMs; eight take ranges of 352, 768 CTAs, one wave of six per SM, where ranges of
/// 256 would leave a second wave of 232. The range size then depends on the batch, so
/// `invariant` keeps [`SPLIT_KEYS`].
pub(super) fn choose(
    g: &Graph,
    (s, a): (Value, Value),
    (q_prologue, stats): (bool, bool),
    fill: bool,
    t: &Target,
) -> Schedule {
    let sh = attention_shape(g, s, a);
    let rows = sh.m * sh.pack;
    let warps = (rows.div_ceil(16) as u32).clamp(1, MAX_WARPS);
    let batch: u64 = sh.batch.iter().product::<u64>() / sh.pack.max(1);
    let row_blocks = rows.div_ceil(16 * warps as u64);
    let mut split = if !stats && rows <= SPLIT_MAX_ROWS && sh.n > 2 * SPLIT_KEYS as u64 {
        SPLIT_KEYS
    } else {
        0
    };
    // Split ranges are walked by CTAs of one to four warps: blocks of 32 keys halve their
    // shared memory (36 KiB at head dim 128), so twice as many CTAs share an SM and hide
    // each other's latency.
    let block_n = if split > 0 { DECODE_BLOCK_N } else { BLOCK_N };
    let mut stages = STAGES;
    while stages > 1
        && attention_shared_bytes(warps, block_n, stages, sh.d, sh.e) + 8 * warps
            > t.max_shared_per_cta
    {
        stages -= 1;
    }
    let mut resident = 0;
    if fill && split > 0 {
        let shared = attention_shared_bytes(warps, block_n, stages.max(2), sh.d, sh.e) + 8 * warps;
        resident = resident_ctas(t, warps, shared);
        split = fill_split(sh.n, row_blocks * batch, resident);
    }
    let ranges = if split > 0 {
        sh.n.div_ceil(split as u64)
    } else {
        1
    };
    let ctas = row_blocks * batch * ranges;
    let split_why = if split > 0 {
        let fill_why = if resident > 0 {
            format!(" (fast profile: the range from {MIN_FILL_SPLIT} keys up that fills whole waves of {resident} resident CTAs best)")
        } else {
            String::new()
        };
        format!(", keys split into {ranges} ranges of {split}{fill_why} merged by a second kernel (at most {SPLIT_MAX_ROWS} rows per batch entry)")
    } else {
        String::new()
    };
    let stats_why = if stats {
        ", each row's maximum and sum written too (for the backward)"
    } else {
        ""
    };
    let prologue_why = if q_prologue {
        ", q (its RoPE and norm) computed by each CTA for its own rows before the key loop, never stored"
    } else {
        ""
    };
    Schedule {
        tile: TileConfig::Attention {
            warps,
            block_n,
            stages: stages.max(2),
            pack: sh.pack as u32,
            split,
            wgmma: false,
        },
        why: format!(
            "attention over {} queries × {} keys, head dims {} and {}, batch {:?}: the {} query heads of each K/V head packed into {rows} rows per batch, {warps} warps of 16 rows per CTA, keys in blocks of {block_n} double-buffered{split_why}{prologue_why}{stats_why}, {ctas} CTAs",
            sh.m, sh.n, sh.d, sh.e, sh.batch, sh.pack
        ),
    }
}

/// CTAs of `warps` warps and `shared` bytes of shared memory that fit on the target at once:
/// each SM's shared memory (1 KiB of it reserved per CTA, CUDA C++ Programming Guide,
/// "Shared Memory"), its warps, and its registers at the most a thread may have (the
/// split tile's 236, rounded up, fit the same count), at most 32 CTAs per SM (compute
/// capability 9.0, "Compute Capabilities").
fn resident_ctas(t: &Target, warps: u32, shared: u32) -> u64 {
    let by_shared = t.max_shared_per_sm / (shared + 1024).max(1);
    let by_warps = t.max_warps_per_sm / warps.max(1);
    let by_regs =
        t.registers_per_sm / (t.max_registers_per_thread.next_multiple_of(8) * 32 * warps).max(1);
    let per_sm = by_shared.min(by_warps).min(by_regs).clamp(1, 32);
    u64::from(per_sm) * u64::from(t.sm_count)
}

/// The range of keys, a multiple of [`DECODE_BLOCK_N`] from [`MIN_FILL_SPLIT`] to half of
/// `n` (at least two ranges), for `groups` row blocks × batch entries on `resident` CTAs
/// at once: the least waves × range (each wave's CTAs walk a range of keys in about the
/// same time), the smaller range on a tie. Ranges of 352 for 64 groups over 4096 keys on
/// 792 resident CTAs: 12 ranges, 768 CTAs, one wave (ranges of 256 cost two: 1024 CTAs).
pub(super) fn fill_split(n: u64, groups: u64, resident: u64) -> u32 {
    let lo = u64::from(MIN_FILL_SPLIT);
    let hi = (n.div_ceil(2))
        .next_multiple_of(u64::from(DECODE_BLOCK_N))
        .max(lo);
    let cost = |s: u64| (groups * n.div_ceil(s)).div_ceil(resident.max(1)) * s;
    let best = (lo..=hi)
        .step_by(DECODE_BLOCK_N as usize)
        .min_by_key(|&s| (cost(s), s))
        .unwrap_or(lo);
    best as u32
}

/// The reduction order of the attention tile, in words (design §5). The warpgroup tile
/// (`wgmma`) sums in the same order: a wgmma's per-element sum over its k of 16 is, in the
/// executor's model, the fma chain an m16n8k16 `mma.sync` forms, and a lane holds the same
/// two rows and columns of every 8-column fragment in both (`WgmmaShape::d_pos`).
pub fn order(block_n: u32, split: u32, wgmma: bool) -> String {
    let ins = if wgmma {
        "wgmma (m64nNk16: 4 warps of 16 rows)"
    } else {
        "mma.sync"
    };
    let mut o = format!(
        "each row: keys in blocks of {block_n} from key 0 in order, up to the row block's bound; per block the scores by one {ins} per 16 of the head dim in order into f32 accumulators starting at 0, rounded to the matmul's dtype, then the logits' elementwise ops; the row maximum m over the blocks so far; each of the 4 lanes of a row keeps a partial sum of exp(x - m) over its 2 keys of each 8-key fragment, rescaled by exp(m_old - m) per block, then the block's values added in key order; O per element: rescaled by exp(m_old - m), then one {ins} per 16 keys in key order of exp(x - m) rounded to v's dtype times v; at the end the 4 partial sums added by butterfly xor 1, 2, and O divided by the sum (0 for a row that sees no key)"
    );
    if split > 0 {
        o += &format!("; with the keys cut into ranges of {split} (each range as above, from its first key, without the division): the ranges merged in range order, m the maximum of the ranges' maxima, the sum and O each the ranges' values times exp(m_range - m) added in range order to 0, then O divided by the sum (0 for a row that sees no key)");
    }
    o
}

/// Rows per CTA of the attention backward: 4 warps of 16 (FlashAttention-2's backward
/// uses 64-row blocks at head dim 128 on sm_80+).
const BWD_WARPS: u32 = 4;
/// Columns per block of the dq kernel (keys) and the dkv kernel (queries). Either kernel
/// runs one 16-column loop body per sub-block (`lower/attention_bwd.rs`), so the width sets
/// the ring's stage size — copies and barriers per block — and shared memory, not the
/// code size or the bits. Measured on an H100 (docs/perf/2026-12-06-h100-issue18.md run
/// 15, prefill_grads, 40/8 heads, d 128, T = 2048): dq 1373 µs at 16, 1387 at 32, 1562 at
/// 64 (98 KB of shared memory a CTA: 2 CTAs an SM instead of 4); dkv 1010 µs at 32, 973 at
/// 64 (its 249 registers allow 2 CTAs an SM either way).
const BWD_BLOCK_DQ: u32 = 16;
const BWD_BLOCK_DKV: u32 = 64;

/// The tile of an attention backward kernel (`dq`: rows = queries; else rows = keys)
/// whose score matmuls are `scores`.
pub(super) fn choose_bwd(g: &Graph, scores: &[Value], dq: bool, t: &Target) -> Schedule {
    let sh = &g.ty(scores[0]).shape;
    let r = sh.rank();
    let (m, n) = (sh.0[r - 2], sh.0[r - 1]);
    let batch: u64 = sh.0[..r - 2].iter().product();
    let rows = if dq { m } else { n };
    let warps = (rows.div_ceil(16) as u32).clamp(1, BWD_WARPS);
    // No wider than the columns need (a power of two, 16 at least: the verifier's
    // `schedule.tile` rule).
    let cols = if dq { n } else { m };
    let block_n =
        if dq { BWD_BLOCK_DQ } else { BWD_BLOCK_DKV }.min(cols.next_power_of_two().max(16) as u32);
    let ctas = rows.div_ceil(16 * warps as u64) * batch;
    let side = if dq {
        "query rows, keys"
    } else {
        "key rows, queries"
    };
    let _ = t;
    Schedule {
        tile: TileConfig::AttentionBwd { warps, block_n },
        why: format!(
            "attention backward over {m} queries × {n} keys, batch {batch}: {side} in blocks of {block_n} double-buffered, {warps} warps of 16 rows per CTA, the scores recomputed per block from {} matmul(s), {ctas} CTAs",
            scores.len()
        ),
    }
}

/// The reduction order of the attention backward tile, in words (design §5).
pub fn bwd_order(block_n: u32) -> String {
    format!(
        "each score: one mma.sync per 16 of the head dim in order into an f32 accumulator starting at 0 (q's fragments as A for query rows, k's as A for key rows: the same products), rounded to the matmul's dtype; each row reduction (query rows): per lane its 2 scores of each 8-column fragment, blocks of {block_n} columns from column 0 in order, folded into one f32 accumulator from the identity, then the row's 4 lanes by butterfly xor 1, 2 — one sweep over the blocks per reduction level; each product element: one f32 accumulator starting at 0, one mma.sync per 16 columns in column order of the block, blocks in order, rounded to the product's dtype at the end"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_split_fills_whole_waves() {
        // H100/H200: 132 SMs × 6 one-warp split CTAs (36 KiB of shared memory each).
        let t = Target::h200();
        let shared = attention_shared_bytes(1, DECODE_BLOCK_N, 2, 128, 128) + 8;
        assert_eq!(resident_ctas(&t, 1, shared), 132 * 6);
        // Qwen3-14B decode over 4096 keys: 8 KV heads per sequence.
        let ranges = |s: u32| 4096u64.div_ceil(u64::from(s));
        // One sequence: the smallest range, 256 CTAs in one wave.
        assert_eq!(fill_split(4096, 8, 792), 128);
        // Four: 22 ranges of 192 (704 CTAs, one wave) beat 32 of 128 (two waves).
        assert_eq!(fill_split(4096, 32, 792), 192);
        // Eight: 12 ranges of 352, 768 CTAs, one wave.
        let s = fill_split(4096, 64, 792);
        assert_eq!((s, ranges(s) * 64), (352, 768));
        // Every range a multiple of the block, at least two ranges.
        for groups in [1, 3, 8, 64, 100, 512, 4096] {
            for n in [600u64, 1100, 4096, 32768] {
                let s = fill_split(n, groups, 792);
                assert_eq!(s % DECODE_BLOCK_N, 0, "{n} {groups}");
                assert!(s >= MIN_FILL_SPLIT && u64::from(s) <= n.div_ceil(2).next_multiple_of(32));
            }
        }
    }
}
