//! The fused attention tile ([`TileConfig::Attention`]): FlashAttention-2's loop (Dao, 2023)
//! on `mma.sync`, with the query heads of a KV group packed into one CTA's rows.

use crate::target::Target;
use crate::view::strided;
use tessel_ir::graph::{Graph, Op, Schedule, TileConfig};
use tessel_ir::Value;

/// Keys per block: 64 (FlashAttention-2's block for head dim 128 on sm_80+; 4 pairs of
/// 8-key fragments per k step of P·V).
const BLOCK_N: u32 = 64;
/// Double-buffered K and V: one block copied while the other is multiplied.
const STAGES: u32 = 2;
/// At most 4 warps (64 query rows) per CTA, FlashAttention-2's forward default.
const MAX_WARPS: u32 = 4;

/// What the attention kernel reads, from the shapes of its matmul `s = q @ kᵀ` and `v`.
pub struct AttentionShape {
    /// Batch dims of the logits (everything but the last two).
    pub batch: Vec<u64>,
    /// Batch dims along which K and V are broadcast but Q is not: the query heads of a KV
    /// group, packed into one CTA's rows.
    pub pack_dims: Vec<usize>,
    pub pack: u64,
    /// Queries, keys, head dim of q and k, head dim of v.
    pub m: u64,
    pub n: u64,
    pub d: u64,
    pub e: u64,
}

/// The shape of attention `a` (an [`Op::Attention`] whose logits come from matmul `s`).
pub fn attention_shape(g: &Graph, s: Value, a: Value) -> AttentionShape {
    let Op::MatMul { lhs, rhs } = g.ops[s] else {
        unreachable!("the attention group's first reduction is its matmul")
    };
    let Op::Attention { v, .. } = g.ops[a] else {
        unreachable!("the attention group's second reduction is the attention")
    };
    let ls = &g.ty(s).shape.0;
    let r = ls.len();
    let batch = ls[..r - 2].to_vec();
    let (q, k, vv) = (strided(g, lhs), strided(g, rhs), strided(g, v));
    let pack_dims: Vec<usize> = match (q, k, vv) {
        (Some(q), Some(k), Some(vv)) => (0..r - 2)
            .filter(|&i| {
                batch[i] > 1 && k.strides[i] == 0 && vv.strides[i] == 0 && q.strides[i] != 0
            })
            .collect(),
        _ => vec![],
    };
    let pack = pack_dims.iter().map(|&i| batch[i]).product();
    AttentionShape {
        batch,
        pack_dims,
        pack,
        m: ls[r - 2],
        n: ls[r - 1],
        d: g.ty(lhs).shape.last(),
        e: g.ty(v).shape.last(),
    }
}

/// Shared memory of the tile's rings: Q's rows once, then `stages` blocks of K and of V
/// (bf16/f16); the kernel adds 4 bytes per warp for combining the rows' key bounds.
pub fn attention_shared_bytes(warps: u32, block_n: u32, stages: u32, d: u64, e: u64) -> u32 {
    2 * (16 * warps * d as u32 + stages * block_n * (d + e) as u32)
}

/// The tile for attention `a` computed from matmul `s`.
pub(super) fn choose(g: &Graph, s: Value, a: Value, t: &Target) -> Schedule {
    let sh = attention_shape(g, s, a);
    let rows = sh.m * sh.pack;
    let warps = (rows.div_ceil(16) as u32).clamp(1, MAX_WARPS);
    let mut stages = STAGES;
    while stages > 1
        && attention_shared_bytes(warps, BLOCK_N, stages, sh.d, sh.e) + 4 * warps
            > t.max_shared_per_cta
    {
        stages -= 1;
    }
    let batch: u64 = sh.batch.iter().product::<u64>() / sh.pack.max(1);
    let ctas = rows.div_ceil(16 * warps as u64) * batch;
    Schedule {
        tile: TileConfig::Attention {
            warps,
            block_n: BLOCK_N,
            stages: stages.max(2),
            pack: sh.pack as u32,
        },
        why: format!(
            "attention over {} queries × {} keys, head dims {} and {}, batch {:?}: the {} query heads of each K/V head packed into {rows} rows per batch, {warps} warps of 16 rows per CTA, keys in blocks of {BLOCK_N} double-buffered, {ctas} CTAs",
            sh.m, sh.n, sh.d, sh.e, sh.batch, sh.pack
        ),
    }
}

/// The reduction order of the attention tile, in words (design §5).
pub fn order(block_n: u32) -> String {
    format!(
        "each row: keys in blocks of {block_n} from key 0 in order, up to the row block's bound; per block the scores by one mma.sync per 16 of the head dim in order into f32 accumulators starting at 0, rounded to the matmul's dtype, then the logits' elementwise ops; the row maximum m over the blocks so far; each of the 4 lanes of a row keeps a partial sum of exp(x - m) over its 2 keys of each 8-key fragment, rescaled by exp(m_old - m) per block, then the block's values added in key order; O per element: rescaled by exp(m_old - m), then one mma.sync per 16 keys in key order of exp(x - m) rounded to v's dtype times v; at the end the 4 partial sums added by butterfly xor 1, 2, and O divided by the sum (0 for a row that sees no key)"
    )
}
