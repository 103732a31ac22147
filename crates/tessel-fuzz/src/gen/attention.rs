//! Attention blocks: `cast16(softmax(f(q @ kᵀ))) @ v` written from primitives as models
//! write it, with the variations the `attention` pass (tessel-passes `attention.rs`) and
//! fuse rule 7 (q computed in the attention kernel's prologue) must tell apart, so that the
//! fused kernel and its near misses are both compiled, run and judged.
//!
//! A block draws, as one shape ([`Block`]):
//! - q, k and v of bf16 or f16 in the layouts the projections write (`[B?, T, H, D]`) or
//!   heads first (`[B?, H, T, D]`), k and v independently of q; a batch dim or none, and k
//!   and v sometimes shared by every batch entry (broadcast over it);
//! - GQA: `H = KV · G` query heads, G (the pack) from 1 to 5, written as
//!   `docs/language.md` writes it (`reshape` of the heads into `[KV, H / KV]`, `permute`,
//!   K and V broadcast through `[:, None]`), or plain multi-head attention;
//! - head dims that are powers of two from 16 to 256 (fusable), 8, 24 and 48 (must stay
//!   unfused); v's head dim the same or another;
//! - T queries and S keys with tails of the 16-row fragment and the 64-key block (1, 7,
//!   17, 65, 129, 300); S = T (prefill) often; S from 513 to 1100 with at most 64 query rows
//!   per batch entry (the split-key schedule) sometimes. Sizes are redrawn until the block
//!   costs at most `max_fmas` multiply-adds, so the CPU executor runs it in milliseconds.
//!
//! Then its parts, each a `let`, so that the shrinker can cut any of them:
//! - q, k and v stored, sliced out of a larger tensor (one fused QKV tensor; a longer
//!   cache; the head dim at an offset, sometimes one no 16-byte copy can read), cast
//!   from f32, or a projection's output reshaped (`x @ wᵀ`, sometimes with a bias;
//!   [`Gen::projection`]), whose row-wise chain fuse rule 8 computes in the GEMM's
//!   epilogue; or, in decode, k and v `inout` caches that `update` writes the new rows into
//!   at each sequence's length before the attention reads them ([`Gen::cache_update`]),
//!   the mask mostly `j <= len + i` on that length;
//! - q computed by a chain of row-wise operations over the head dim ([`Gen::q_chain`]):
//!   RMSNorm, max/min/sum/mean reductions over the last axis, RoPE by `split`/`concat` with
//!   cos/sin tables of positions, elementwise ops and casts — what fuse rule 7 computes in
//!   the prologue — or with a reduction over another axis, or also read elsewhere (a step
//!   result, a reduction), which must keep it out of the prologue; sometimes computed for
//!   more heads and sliced ([`Gen::wide_q`]); k sometimes computed too (RMSNorm, RoPE,
//!   reductions, elementwise ops: its own kernel, or a projection's epilogue);
//! - the scores `f32(q @ kᵀ) * scale`, `bf16(f32(q @ kᵀ) * scale)` read through `f32`, or
//!   the 16-bit product scaled after the cast ([`Gen::scores`]);
//! - the logits ([`Gen::logits`]), soft-capped or with ALiBi's distance term sometimes: no
//!   mask, `causal(T, S)` with and without `offset:`, the arms swapped, a length per batch
//!   entry, KV head, query head or query row from a random i32 input (`abs(r) · m % (S +
//!   1)`, 0 for every other entry sometimes: fully masked rows), the decode form `j <= len +
//!   i`, a mask written per query head and reshaped to GQA's heads, any comparison of sums
//!   of `j`, `i`, a length and a constant ([`Gen::linear_mask`]: the key bound solved from
//!   it, or none), a sliding window, an additive bias, an additive mask, a bool input, a
//!   finite fill instead of -inf, the mask applied to 16-bit scores before `f32`;
//! - `softmax` over the last axis, the probabilities cast to v's dtype, `@ v`, and the
//!   result permuted back to `[B?, T, H, E]`;
//! - near misses: the scores, logits or probabilities also read elsewhere, the softmax
//!   over another axis, q or the probabilities of the other 16-bit dtype, logits left in
//!   16 bits, k stored transposed, a slice of the head dim no 16-byte copy can read: none
//!   may fuse, all must stay right; and sometimes a second attention over the same q, k
//!   and v.
//!
//! Why a mode of its own ([`super::Config::attention`], `tessel fuzz --attention`) rather
//! than a row in [`Gen::step`]'s table: a block is a dozen lets sized as a whole (its head
//! dims, pack, key count and batch decide both whether it fuses and what it costs), its
//! tensors are far larger than the ordinary programs' 8k elements (a head dim of 128 times
//! hundreds of keys), and a new row in the table would change the program of every
//! existing seed — the seeds the regression corpus, the judge-sharpness figures and
//! docs/testing.md's runs name. In this mode every program has one block, then up to two
//! ordinary operations on any value so far (which may read the scores or the
//! probabilities: more near misses).

use super::{promote, Gen};
use crate::program::{dtype_name, Dim, Let, Ty};
use tessel_ir::DType;

/// Query counts: decode's 1, and tails of the 16-row fragment and the 64-row CTA.
const QUERIES: &[u64] = &[1, 2, 3, 7, 16, 17, 33, 64, 65, 129, 300];
/// Key counts: tails of the 64-key block (32 in the split schedule).
const KEYS: &[u64] = &[1, 5, 7, 17, 63, 64, 65, 129, 300];
/// Key counts past two ranges of 256: the split-key (flash-decoding) schedule, taken when
/// a batch entry has at most 64 query rows (tessel-passes `schedule/attention.rs`).
const LONG_KEYS: &[u64] = &[513, 600, 777, 1024, 1100];
/// Head dims and their weights: powers of two from 16 to 256 fuse, 8, 24 and 48 must not.
const HEAD_DIMS: &[(u64, u32)] = &[
    (16, 6),
    (32, 6),
    (64, 6),
    (128, 5),
    (256, 1),
    (8, 1),
    (24, 1),
    (48, 1),
];

/// The shape of one attention block; dims are symbols of the program.
struct Block {
    dt: DType,
    /// The batch dim, if any.
    b: Option<Dim>,
    /// Whether k and v have the batch dim (else every batch entry reads the same).
    kv_batch: bool,
    t: Dim,
    s: Dim,
    kv: Dim,
    /// `KV · G` (the KV symbol itself when G = 1).
    h: Dim,
    d: Dim,
    e: Dim,
    /// The heads split as `[KV, H / KV]` (GQA, a pack of G); else one head axis of H.
    gqa: bool,
    /// q is `[B?, T, H, D]` (else `[B?, H, T, D]`).
    q_tokens: bool,
    /// k and v are `[B?, S, KV, D]` (else `[B?, KV, S, D]`).
    kv_tokens: bool,
    /// k stored `[B?, KV, D, S]` and read as it is (no `^T`): its head dim is not
    /// contiguous, so no fused kernel can read it.
    k_stored_t: bool,
}

impl Block {
    fn nb(&self) -> usize {
        self.b.is_some() as usize
    }

    /// q as stored: `[B?, T, H, D]` or `[B?, H, T, D]`.
    fn q_ty(&self) -> Ty {
        let mut s: Vec<Dim> = self.b.iter().cloned().collect();
        if self.q_tokens {
            s.extend([self.t.clone(), self.h.clone()]);
        } else {
            s.extend([self.h.clone(), self.t.clone()]);
        }
        s.push(self.d.clone());
        Ty::new(self.dt, s)
    }

    /// k (head dim `last` = D) or v (E) as stored; `transposed`: `[B?, KV, last, S]`.
    fn kv_ty(&self, last: &Dim, transposed: bool) -> Ty {
        let mut s: Vec<Dim> = self.b.iter().filter(|_| self.kv_batch).cloned().collect();
        if transposed {
            s.extend([self.kv.clone(), last.clone(), self.s.clone()]);
            return Ty::new(self.dt, s);
        }
        if self.kv_tokens {
            s.extend([self.s.clone(), self.kv.clone()]);
        } else {
            s.extend([self.kv.clone(), self.s.clone()]);
        }
        s.push(last.clone());
        Ty::new(self.dt, s)
    }

    /// The group size `H / KV` as a dim.
    fn g(&self) -> Dim {
        Dim::Div(Box::new(self.h.clone()), Box::new(self.kv.clone()))
    }

    /// The batch dims of the logits: `[B?, KV, G]` or `[B?, H]`.
    fn heads(&self) -> Vec<Dim> {
        let mut s: Vec<Dim> = self.b.iter().cloned().collect();
        if self.gqa {
            s.extend([self.kv.clone(), self.g()]);
        } else {
            s.push(self.h.clone());
        }
        s
    }

    /// `[heads.., rows, last]`.
    fn with_heads(&self, rows: &Dim, last: &Dim) -> Vec<Dim> {
        let mut s = self.heads();
        s.extend([rows.clone(), last.clone()]);
        s
    }
}

/// True if every symbol in `d` is in `bound`.
fn bound_in(d: &Dim, bound: &[Dim]) -> bool {
    match d {
        Dim::Sym(_) => bound.contains(d),
        Dim::Lit(_) => true,
        Dim::Add(a, b) | Dim::Mul(a, b) | Dim::Div(a, b) => {
            bound_in(a, bound) && bound_in(b, bound)
        }
    }
}

/// The last dim of `t` (a head dim).
fn last(t: &Ty) -> Dim {
    t.shape.last().cloned().expect("rows of a head dim")
}

/// Adds `name` to a template's operands; returns its placeholder (`{k}`).
fn arg(ops: &mut Vec<String>, name: String) -> String {
    ops.push(name);
    format!("{{{}}}", ops.len() - 1)
}

fn list(xs: &[String]) -> String {
    format!("[{}]", xs.join(", "))
}

fn perm_text(p: &[usize]) -> String {
    list(&p.iter().map(usize::to_string).collect::<Vec<_>>())
}

impl Gen {
    /// One attention block appended to the program (its parameters and lets).
    pub(super) fn attention_block(&mut self) {
        let bl = self.draw_block();
        let cached = bl.b.is_some()
            && bl.kv_batch
            && !bl.k_stored_t
            && bl.t.value(&self.p.dims) <= bl.s.value(&self.p.dims)
            && self.chance(0.2);
        let mut len = None;
        let (q, mut k, v) = if cached {
            // Decode: the T new keys and values of each sequence written into its caches
            // at its length, the queries reading the updated caches.
            let q = self.source(&bl.q_ty());
            let q = self.q_chain(&bl, q);
            let b = bl.b.clone().expect("a batch dim");
            let l = self.length_of(&bl, &b);
            let k = self.cache_update(&bl, &bl.d, &l);
            let v = self.cache_update(&bl, &bl.e, &l);
            len = Some(l);
            (q, k, v)
        } else if self.chance(0.1) {
            let q = self.wide_q(&bl);
            let kt = bl.kv_ty(&bl.d, bl.k_stored_t);
            let vt = bl.kv_ty(&bl.e, false);
            (q, self.source(&kt), self.source(&vt))
        } else {
            let (q, k, v) = self.qkv(&bl);
            (self.q_chain(&bl, q), k, v)
        };
        // K as a projection writes it, then mostly its row-wise chain (QK-norm, RoPE): the
        // prefill K of a Qwen layer, which fuse rule 8 computes in the GEMM's epilogue.
        // Likelier where the rule can apply: tokens-first rows, more than one head (a
        // reshape to one head keeps the rows as they are), more rows than a decode GEMV.
        let mut projected = false;
        let kt = bl.kv_ty(&bl.d, false);
        let rows: u64 = kt.shape[..kt.rank() - 2]
            .iter()
            .map(|d| d.value(&self.p.dims))
            .product();
        let rule8_shape = bl.kv_tokens && bl.kv.value(&self.p.dims) > 1 && rows > 16;
        let p_projected = if rule8_shape { 0.6 } else { 0.25 };
        if !bl.k_stored_t && !cached && self.chance(p_projected) {
            if let Some(p) = self.projection(&kt) {
                k = p;
                projected = true;
            }
        }
        let p_chain = if projected { 0.85 } else { 0.2 };
        if !bl.k_stored_t && !cached && self.chance(p_chain) {
            // K computed (its norm, RoPE where q's tables fit it, a scale): a kernel of its
            // own writes it — or, over a projection, the GEMM's epilogue (rule 8) — and the
            // attention reads it from memory.
            let rope_fits = bl.t == bl.s && bl.kv_tokens == bl.q_tokens;
            for _ in 0..1 + self.below(2) {
                k = match self.below(4) {
                    0 => self.rms(k),
                    1 => self.row_reduce(k),
                    2 if rope_fits => self.rope(&bl, k),
                    _ => self.q_elementwise(k),
                };
            }
        }
        let (qh, kh, vh) = self.head_views(&bl, q, k, v);
        let (s, frag, sdt) = self.scores(&bl, &qh, &kh);
        let x = self.logits(&bl, &s, &frag, sdt, len.as_deref());
        let o = self.attend(&bl, &x, &vh);
        if self.chance(0.06) {
            // A second attention over the same q, k and v with other logits: q is read
            // twice, so neither computes it in its prologue.
            let (s, frag, sdt) = self.scores(&bl, &qh, &kh);
            let x = self.logits(&bl, &s, &frag, sdt, len.as_deref());
            self.attend(&bl, &x, &vh);
        }
        if self.chance(0.6) {
            self.tokens_first(&bl, &o);
        }
        // The ordinary rules that may follow write dims as symbols: a symbol no parameter
        // binds (H when q is sliced out of a larger tensor) becomes its value.
        let bound = self.bound_dims();
        let dims = self.p.dims.clone();
        for l in &mut self.p.lets {
            for t in &mut l.tys {
                for d in &mut t.shape {
                    if !bound_in(d, &bound) {
                        *d = Dim::Lit(d.value(&dims));
                    }
                }
            }
        }
    }

    /// A `let` of one name.
    fn put(&mut self, ty: Ty, template: String, operands: Vec<String>) -> String {
        let name = self.fresh_let(0);
        self.p.lets.push(Let {
            names: vec![name.clone()],
            tys: vec![ty],
            template,
            operands,
        });
        name
    }

    /// A size from `xs`, the smaller likelier.
    fn small(&mut self, xs: &[u64]) -> u64 {
        let n = xs.len() as u64;
        xs[self.below(n).min(self.below(n)) as usize]
    }

    fn head_dim(&mut self) -> u64 {
        let total: u32 = HEAD_DIMS.iter().map(|x| x.1).sum();
        let mut r = self.below(total as u64) as u32;
        for &(d, w) in HEAD_DIMS {
            if r < w {
                return d;
            }
            r -= w;
        }
        HEAD_DIMS[0].0
    }

    /// The block's shape: sizes redrawn until it costs at most `max_fmas` multiply-adds
    /// (`B · H · T · S · (D + E)`), then made symbols.
    fn draw_block(&mut self) -> Block {
        let budget = self.cfg.max_fmas;
        // Sometimes a Qwen prefill's shape: tokens-first q, k and v, prefill's T keys, more
        // than one K/V head and more rows than a decode GEMV, so that a K projection with
        // its row-wise chain is what fuse rule 8 computes in the GEMM's epilogue (rare in
        // the free draws, whose budget favours few rows).
        let prefill = self.chance(0.15);
        let mut pick = (1, 1, 1, 1, 1, 16, 16);
        for _ in 0..60 {
            let d = self.head_dim();
            let e = if self.chance(0.8) { d } else { self.head_dim() };
            let kv = if prefill {
                self.pick(&[2u64, 3])
            } else {
                self.pick(&[1u64, 1, 2, 2, 3])
            };
            let g = 1 + self.below(5);
            let b = if self.chance(0.5) {
                0
            } else {
                self.pick(&[1u64, 2, 3])
            };
            let t = if prefill {
                self.pick(&[17u64, 33, 64, 65, 129])
            } else {
                self.small(QUERIES)
            };
            let s = if prefill || self.chance(0.35) {
                t
            } else if t * g <= 64 && self.chance(0.35) {
                self.pick(LONG_KEYS)
            } else {
                self.small(KEYS)
            };
            if b.max(1) * kv * g * t * s * (d + e) <= budget {
                pick = (b, t, s, kv, g, d, e);
                break;
            }
        }
        let (b, t, s, kv, g, d, e) = pick;
        let b = (b > 0).then(|| self.new_sym(b));
        let t = self.new_sym(t);
        // Prefill reads its own T keys: one symbol, as `causal(T, T)` writes it.
        let s = if s == t.value(&self.p.dims) && self.chance(0.7) {
            t.clone()
        } else {
            self.new_sym(s)
        };
        let kv = self.new_sym(kv);
        let h = if g == 1 {
            kv.clone()
        } else {
            self.new_sym(kv.value(&self.p.dims) * g)
        };
        let d = self.new_sym(d);
        let e = if e == d.value(&self.p.dims) {
            d.clone()
        } else {
            self.new_sym(e)
        };
        let kv_batch = b.is_some() && self.chance(0.85);
        Block {
            dt: self.pick(&[DType::Bf16, DType::F16]),
            b,
            kv_batch,
            t,
            s,
            kv,
            h,
            d,
            e,
            gqa: g > 1 || self.chance(0.5),
            q_tokens: prefill || self.chance(0.6),
            kv_tokens: prefill || self.chance(0.5),
            k_stored_t: !prefill && self.chance(0.04),
        }
    }

    /// q, k and v as the block reads them: stored, sliced out of a larger tensor, or cast.
    fn qkv(&mut self, bl: &Block) -> (String, String, String) {
        let (qt, kt, vt) = (
            bl.q_ty(),
            bl.kv_ty(&bl.d, bl.k_stored_t),
            bl.kv_ty(&bl.e, false),
        );
        let one_tensor = bl.q_tokens
            && bl.kv_tokens
            && bl.t == bl.s
            && bl.d == bl.e
            && !bl.k_stored_t
            && (bl.b.is_none() || bl.kv_batch);
        if one_tensor && self.chance(0.15) {
            // One fused QKV projection's output, `[B?, T, H + 2 KV, D]`, sliced by heads.
            let ax = bl.nb() + 1;
            let (h, kv) = (bl.h.value(&self.p.dims), bl.kv.value(&self.p.dims));
            let mut shape = qt.shape.clone();
            shape[ax] = Dim::Lit(h + 2 * kv);
            let all = self.fresh_param(Ty::new(bl.dt, shape));
            let part = |g: &mut Gen, ty: &Ty, lo: u64, n: u64| {
                let idx = g.index_text(ax, ty.rank(), &format!("{lo}:{}", lo + n));
                g.put(ty.clone(), format!("{{0}}{idx}"), vec![all.clone()])
            };
            let q = part(self, &qt, 0, h);
            let k = part(self, &kt, h, kv);
            let v = part(self, &vt, h + kv, kv);
            return (q, k, v);
        }
        (self.source(&qt), self.source(&kt), self.source(&vt))
    }

    /// An `inout` cache `[B, KV, S, last]` (or `[B, S, KV, last]`) with the T new rows of
    /// each sequence written at its length `len` (`i32[B]`, 0 ..= S: rows past the end
    /// are not written); the rows stored, cast from f32 or RMS-normed (in the update's
    /// kernel, its reduction in a kernel of its own). Returns the updated cache.
    fn cache_update(&mut self, bl: &Block, last: &Dim, len: &str) -> String {
        let b = bl.b.clone().expect("a batch dim");
        let shape = |rows: &Dim| -> Vec<Dim> {
            let mut s = vec![b.clone()];
            if bl.kv_tokens {
                s.extend([rows.clone(), bl.kv.clone()]);
            } else {
                s.extend([bl.kv.clone(), rows.clone()]);
            }
            s.push(last.clone());
            s
        };
        let cache_ty = Ty::new(bl.dt, shape(&bl.s));
        let cache = self.fresh_param(cache_ty.clone());
        self.p.inout.push(cache.clone());
        let rows_ty = Ty::new(bl.dt, shape(&bl.t));
        let rows = match self.below(4) {
            0 => {
                let f = self.fresh_param(Ty::new(DType::F32, rows_ty.shape.clone()));
                let dn = dtype_name(bl.dt);
                self.put(rows_ty, format!("{dn}({{0}})"), vec![f])
            }
            1 => {
                let x = self.fresh_param(rows_ty);
                self.rms(x)
            }
            _ => self.fresh_param(rows_ty),
        };
        let axis = if bl.kv_tokens { 1 } else { 2 };
        let updated = self.put(
            cache_ty,
            format!("update({{0}}, {{1}}, at: {{2}}, axis: {axis})"),
            vec![cache.clone(), rows, len.to_string()],
        );
        self.consumed.push(cache);
        updated
    }

    /// q sliced out of a tensor that the row-wise chain computed whole: one with more
    /// heads (the view under the attention has an offset into a computed tensor, rows
    /// intact), or with longer rows (the chain's rows are not q's: it must not be computed
    /// in the prologue).
    fn wide_q(&mut self, bl: &Block) -> String {
        let qt = bl.q_ty();
        let r = qt.rank();
        let (ax, n, extra) = if self.chance(0.7) {
            let ax = bl.nb() + if bl.q_tokens { 1 } else { 0 };
            (ax, bl.h.value(&self.p.dims), self.pick(&[1u64, 2, 5]))
        } else {
            let d = bl.d.value(&self.p.dims);
            (r - 1, d, self.pick(&[8u64, 16, d]))
        };
        let lo = if ax + 1 == r {
            8 * self.below(extra / 8 + 1)
        } else {
            self.below(extra + 1)
        };
        let mut wide = qt.clone();
        wide.shape[ax] = Dim::Lit(n + extra);
        let x = self.source(&wide);
        let x = self.q_chain(bl, x);
        let idx = self.index_text(ax, r, &format!("{lo}:{}", lo + n));
        let t = Ty::new(self.ty(&x).dtype, qt.shape);
        self.put(t, format!("{{0}}{idx}"), vec![x])
    }

    /// A tensor of type `ty`: a parameter, a slice of a larger one (along any axis, at an
    /// offset 0, the whole extra, or anywhere), or a cast of an f32 one. A slice of the
    /// head dim is mostly one whose rows a 16-byte copy can read (its offset and the row
    /// length multiples of 8 elements).
    fn source(&mut self, ty: &Ty) -> String {
        if self.chance(0.15) {
            if let Some(x) = self.projection(ty) {
                return x;
            }
        }
        match self.below(10) {
            0..=6 => self.fresh_param(ty.clone()),
            7..=8 => {
                let r = ty.rank();
                let axis = self.below(r as u64) as usize;
                let n = ty.shape[axis].value(&self.p.dims);
                let aligned = axis + 1 < r || self.chance(0.85);
                let extra = if aligned {
                    self.pick(&[8u64, 16, 64])
                } else {
                    self.pick(&[1u64, 3, 8])
                };
                let lo = match self.below(3) {
                    0 => 0,
                    1 => extra,
                    _ if aligned => 8 * self.below(extra / 8 + 1),
                    _ => self.below(extra + 1),
                };
                let mut big = ty.clone();
                big.shape[axis] = Dim::Lit(n + extra);
                let all = self.fresh_param(big);
                let idx = self.index_text(axis, r, &format!("{lo}:{}", lo + n));
                self.put(ty.clone(), format!("{{0}}{idx}"), vec![all])
            }
            _ => {
                let f = self.fresh_param(Ty::new(DType::F32, ty.shape.clone()));
                let dn = dtype_name(ty.dtype);
                self.put(ty.clone(), format!("{dn}({{0}})"), vec![f])
            }
        }
    }

    /// A 16-bit tensor of type `ty` (rank ≥ 2) as a projection writes it: `x @ wᵀ` of a
    /// `[rows, K]` input (or, for rank 4, sometimes one with `ty`'s leading dims) and an
    /// `[N, K]` weight (rows the product of `ty`'s dims but the last two, N that of the
    /// last two), reshaped to `ty`; sometimes with Qwen2's bias
    /// rounded once (`cast16(f32(x) @ f32(w)ᵀ + f32(b))`). With the row-wise chain after it
    /// this is what fuse rule 8 computes in the GEMM's epilogue (heads-first layouts and
    /// reads of other rows must not be). `None` when the matmul would be too large.
    fn projection(&mut self, ty: &Ty) -> Option<String> {
        let r = ty.rank();
        if r < 2 || !matches!(ty.dtype, DType::Bf16 | DType::F16) {
            return None;
        }
        let sizes: Vec<u64> = ty.shape.iter().map(|d| d.value(&self.p.dims)).collect();
        let rows: u64 = sizes[..r - 2].iter().product();
        let n = sizes[r - 2] * sizes[r - 1];
        let k = self.pick(&[16u64, 24, 40, 64]);
        if rows * n * k > self.cfg.max_fmas {
            return None;
        }
        // The input flat (`[rows, K]`: the reshape splits the rows too) or with `ty`'s
        // leading dims (`[B, S, K]` for `[B, S, KV, D]`: the reshape splits only the last
        // axis, as fuse rule 8 asks).
        let x_shape = if r > 3 && self.chance(0.5) {
            let mut lead = ty.shape[..r - 2].to_vec();
            lead.push(Dim::Lit(k));
            lead
        } else {
            vec![Dim::Lit(rows), Dim::Lit(k)]
        };
        let x = self.fresh_param(Ty::new(ty.dtype, x_shape));
        let w = self.fresh_param(Ty::new(ty.dtype, vec![Dim::Lit(n), Dim::Lit(k)]));
        let shape: Vec<String> = ty.shape.iter().map(|d| self.dim_text(d)).collect();
        let shape = shape.join(", ");
        if self.chance(0.25) {
            let b = self.fresh_param(Ty::new(ty.dtype, vec![Dim::Lit(n)]));
            let dn = dtype_name(ty.dtype);
            return Some(self.put(
                ty.clone(),
                format!("reshape({dn}(f32({{0}}) @ f32({{1}})^T + f32({{2}})), [{shape}])"),
                vec![x, w, b],
            ));
        }
        Some(self.put(
            ty.clone(),
            format!("reshape({{0}} @ {{1}}^T, [{shape}])"),
            vec![x, w],
        ))
    }

    /// q through 0 to 3 row-wise operations over the head dim (what fuse rule 7 computes
    /// in the attention's prologue), sometimes one over another axis; then, sometimes, read
    /// elsewhere too, or cast to the other 16-bit dtype (no fusion at all).
    fn q_chain(&mut self, bl: &Block, mut q: String) -> String {
        let n = match self.below(10) {
            0..=3 => 0,
            4..=6 => 1,
            7..=8 => 2,
            _ => 3,
        };
        for _ in 0..n {
            q = match self.below(13) {
                0..=2 => self.rms(q),
                3..=4 => self.row_reduce(q),
                5..=7 => self.rope(bl, q),
                8..=9 => self.q_elementwise(q),
                10 => self.q_cast(q),
                _ => self.off_axis(q),
            };
        }
        let computed = self.p.lets.iter().any(|l| l.names.contains(&q));
        if computed && self.chance(0.12) {
            if self.chance(0.5) {
                self.keep.push(q.clone());
            } else {
                let t = self.ty(&q);
                let shape = t.shape[..t.rank() - 1].to_vec();
                self.put(
                    Ty::new(DType::F32, shape),
                    "sum(f32({0}), axis: -1)".into(),
                    vec![q.clone()],
                );
            }
        }
        if self.chance(0.03) {
            let other = Self::other16(bl.dt);
            let t = Ty::new(other, self.ty(&q).shape);
            q = self.put(t, format!("{}({{0}})", dtype_name(other)), vec![q]);
        }
        q
    }

    fn other16(dt: DType) -> DType {
        if dt == DType::Bf16 {
            DType::F16
        } else {
            DType::Bf16
        }
    }

    /// Qwen3's QK-norm: RMSNorm over the head dim in f32, with or without a weight.
    fn rms(&mut self, x: String) -> String {
        let t = self.ty(&x);
        let dn = dtype_name(t.dtype);
        let xf = self.put(
            Ty::new(DType::F32, t.shape.clone()),
            "f32({0})".into(),
            vec![x],
        );
        let eps = self.pick(&["0.000001", "0.00001"]);
        let norm =
            format!("{dn}({{0}} * rsqrt(mean({{0}} * {{0}}, axis: -1, keep: true) + {eps}))");
        if self.chance(0.7) {
            let w = self.fresh_param(Ty::new(t.dtype, vec![last(&t)]));
            self.put(t, format!("{{1}} * {norm}"), vec![xf, w])
        } else {
            self.put(t, norm, vec![xf])
        }
    }

    /// A reduction over the head dim, broadcast back along it.
    fn row_reduce(&mut self, x: String) -> String {
        let t = self.ty(&x);
        let dn = dtype_name(t.dtype);
        let f = self.pick(&["max", "min", "sum", "mean"]);
        let axis = if self.chance(0.5) {
            "-1".to_string()
        } else {
            (t.rank() - 1).to_string()
        };
        let template = match self.below(3) {
            0 => format!("{dn}(f32({{0}}) - {f}(f32({{0}}), axis: {axis}, keep: true))"),
            1 => format!(
                "{{0}} * {dn}(rsqrt({f}(f32({{0}}) * f32({{0}}), axis: {axis}, keep: true) + 1.0))"
            ),
            _ => {
                format!("{dn}(f32({{0}}) / (1.0 + abs({f}(f32({{0}}), axis: {axis})))[..., None])")
            }
        };
        self.put(t, template, vec![x])
    }

    /// RoPE, rotate-half: `x · cos + concat(-x2, x1) · sin` with tables `[T, D]` of the
    /// positions (an i32 input, or `iota(T)` plus an offset), in 16 bits or in f32.
    fn rope(&mut self, bl: &Block, x: String) -> String {
        let t = self.ty(&x);
        let dn = dtype_name(t.dtype);
        let d = last(&t);
        let dv = d.value(&self.p.dims);
        let half = Dim::Div(Box::new(d.clone()), Box::new(Dim::Lit(2)));
        let half_text = self.dim_text(&half);
        let base = self.pick(&["10000.0", "1000000.0"]);
        let inv = self.put(
            Ty::new(DType::F32, vec![half.clone()]),
            format!("1.0 / pow({base}, f32(iota({half_text}) * 2) / {dv}.0)"),
            vec![],
        );
        let tt = self.dim_text(&bl.t);
        let ang_ty = Ty::new(DType::F32, vec![bl.t.clone(), half.clone()]);
        let ang = if self.chance(0.5) {
            let pos = self.fresh_param(Ty::new(DType::I32, vec![bl.t.clone()]));
            self.put(
                ang_ty,
                "f32({0})[:, None] * {1}[None, :]".into(),
                vec![pos, inv],
            )
        } else {
            let off = self.pick(&["0", "7", "4096", "131000"]);
            self.put(
                ang_ty,
                format!("f32(iota({tt}) + {off})[:, None] * {{0}}[None, :]"),
                vec![inv],
            )
        };
        let emb = self.put(
            Ty::new(DType::F32, vec![bl.t.clone(), d.clone()]),
            "concat({0}, {0}, axis: -1)".into(),
            vec![ang],
        );
        // Tables [T, D] against x's [.., T, H, D] need a head axis; [.., H, T, D] broadcast.
        let bc = if bl.q_tokens { "[:, None, :]" } else { "" };
        let mut half_ty = t.clone();
        *half_ty.shape.last_mut().expect("q has a head dim") = half;
        let (x1, x2) = (self.fresh_let(0), self.fresh_let(1));
        self.p.lets.push(Let {
            names: vec![x1.clone(), x2.clone()],
            tys: vec![half_ty.clone(), half_ty],
            template: "split({0}, 2, axis: -1)".into(),
            operands: vec![x.clone()],
        });
        let table_ty = Ty::new(t.dtype, vec![bl.t.clone(), d]);
        if self.chance(0.7) {
            let c = self.put(
                table_ty.clone(),
                format!("{dn}(cos({{0}}))"),
                vec![emb.clone()],
            );
            let s = self.put(table_ty, format!("{dn}(sin({{0}}))"), vec![emb]);
            self.put(
                t,
                format!("{{0}} * {{1}}{bc} + concat(-{{3}}, {{2}}, axis: -1) * {{4}}{bc}"),
                vec![x, c, x1, x2, s],
            )
        } else {
            self.put(
                t,
                format!(
                    "{dn}(f32({{0}}) * cos({{1}}){bc} + f32(concat(-{{3}}, {{2}}, axis: -1)) * sin({{1}}){bc})"
                ),
                vec![x, emb, x1, x2],
            )
        }
    }

    /// An elementwise op on q: a scale, an activation, a bias over the head dim.
    fn q_elementwise(&mut self, x: String) -> String {
        let t = self.ty(&x);
        let dn = dtype_name(t.dtype);
        if self.chance(0.2) {
            let bias = self.fresh_param(Ty::new(t.dtype, vec![last(&t)]));
            return self.put(t, "{0} + {1}".into(), vec![x, bias]);
        }
        let template = match self.below(6) {
            0 => "{0} * 0.5".to_string(),
            1 => "-{0}".to_string(),
            2 => format!("{dn}(silu(f32({{0}})))"),
            3 => "tanh({0})".to_string(),
            4 => "abs({0})".to_string(),
            _ => format!("{dn}(f32({{0}}) * 2.0 + 0.25)"),
        };
        self.put(t, template, vec![x])
    }

    /// A round trip through f32 or the other 16-bit dtype.
    fn q_cast(&mut self, x: String) -> String {
        let t = self.ty(&x);
        let dn = dtype_name(t.dtype);
        let via = if self.chance(0.5) {
            "f32"
        } else {
            dtype_name(Self::other16(t.dtype))
        };
        self.put(t, format!("{dn}({via}({{0}}))"), vec![x])
    }

    /// A reduction over another axis than the head dim (the queries, the heads or the
    /// batch): never computable per row in the prologue.
    fn off_axis(&mut self, x: String) -> String {
        let t = self.ty(&x);
        let dn = dtype_name(t.dtype);
        let axis = self.below(t.rank() as u64 - 1);
        let f = self.pick(&["mean", "max", "sum"]);
        self.put(
            t,
            format!("{{0}} - {dn}({f}(f32({{0}}), axis: {axis}, keep: true) * 0.5)"),
            vec![x],
        )
    }

    /// q, k and v as the matmuls read them: `[B?, KV, G, T, D]`, `[B?, KV, 1, S, D]`,
    /// `[B?, KV, 1, S, E]` (GQA) or `[B?, H, T, D]`, `[B?, H, S, D]`, `[B?, H, S, E]` (k
    /// `[.., D, S]` when stored so).
    fn head_views(
        &mut self,
        bl: &Block,
        q: String,
        k: String,
        v: String,
    ) -> (String, String, String) {
        let nb = bl.nb();
        let dt = |g: &Gen, d: &Dim| g.dim_text(d);
        let qt = self.ty(&q);
        let mut bdims: Vec<Dim> = bl.b.iter().cloned().collect();
        let qh = if bl.gqa {
            let ty = Ty::new(qt.dtype, bl.with_heads(&bl.t, &bl.d));
            let mut split: Vec<Dim> = bdims.clone();
            if bl.q_tokens {
                split.extend([bl.t.clone(), bl.kv.clone(), bl.g(), bl.d.clone()]);
                let texts: Vec<String> = split.iter().map(|d| dt(self, d)).collect();
                let mut p: Vec<usize> = (0..nb).collect();
                p.extend([nb + 1, nb + 2, nb, nb + 3]);
                let tpl = format!(
                    "permute(reshape({{0}}, {}), {})",
                    list(&texts),
                    perm_text(&p)
                );
                self.put(ty, tpl, vec![q])
            } else {
                split.extend([bl.kv.clone(), bl.g(), bl.t.clone(), bl.d.clone()]);
                let texts: Vec<String> = split.iter().map(|d| dt(self, d)).collect();
                self.put(ty, format!("reshape({{0}}, {})", list(&texts)), vec![q])
            }
        } else if bl.q_tokens {
            let ty = Ty::new(qt.dtype, bl.with_heads(&bl.t, &bl.d));
            let mut p: Vec<usize> = (0..nb).collect();
            p.extend([nb + 1, nb, nb + 2]);
            self.put(ty, format!("permute({{0}}, {})", perm_text(&p)), vec![q])
        } else {
            q
        };
        if !bl.kv_batch {
            bdims.clear();
        }
        let view = |g: &mut Gen, x: String, last: &Dim, transposed: bool| -> String {
            let xt = g.ty(&x);
            let kb = bdims.len();
            let (rows, last) = if transposed {
                (last.clone(), bl.s.clone())
            } else {
                (bl.s.clone(), last.clone())
            };
            let mut shape = bdims.clone();
            shape.push(bl.kv.clone());
            let mut tpl = "{0}".to_string();
            if bl.kv_tokens && !transposed {
                let mut p: Vec<usize> = (0..kb).collect();
                p.extend([kb + 1, kb, kb + 2]);
                tpl = format!("permute({{0}}, {})", perm_text(&p));
            }
            if bl.gqa {
                shape.push(Dim::Lit(1));
                tpl = format!("{tpl}[{}None]", ":, ".repeat(kb + 1));
            }
            shape.extend([rows, last]);
            if tpl == "{0}" {
                x
            } else {
                g.put(Ty::new(xt.dtype, shape), tpl, vec![x])
            }
        };
        let kh = view(self, k, &bl.d, bl.k_stored_t);
        let vh = view(self, v, &bl.e, false);
        (qh, kh, vh)
    }

    /// The scores `s` and how the logits read them: a template fragment over `{0}` (the
    /// scores' name) and its dtype.
    fn scores(&mut self, bl: &Block, qh: &str, kh: &str) -> (String, String, DType) {
        let mm = promote(self.ty(qh).dtype, self.ty(kh).dtype);
        let shape = bl.with_heads(&bl.t, &bl.s);
        let kexpr = if bl.k_stored_t {
            "{1}"
        } else if self.chance(0.1) {
            "transpose({1}, -1, -2)"
        } else {
            "{1}^T"
        };
        let scale = self.pick(&[
            "* 0.125",
            "* 0.08838834764831845",
            "* 0.25",
            "* 0.0625",
            "* 2.0",
            "/ 8.0",
        ]);
        let ops = vec![qh.to_string(), kh.to_string()];
        let f32t = Ty::new(DType::F32, shape.clone());
        match self.below(20) {
            0..=9 => {
                let s = self.put(f32t, format!("f32({{0}} @ {kexpr}) {scale}"), ops);
                (s, "{0}".into(), DType::F32)
            }
            10..=14 => {
                // Rounded to 16 bits after the scale, as transformers' eager attention does.
                let dn = dtype_name(if mm == DType::F32 { bl.dt } else { mm });
                let t = Ty::new(if mm == DType::F32 { bl.dt } else { mm }, shape);
                let s = self.put(t, format!("{dn}(f32({{0}} @ {kexpr}) {scale})"), ops);
                (s, "f32({0})".into(), DType::F32)
            }
            15..=18 => {
                let s = self.put(Ty::new(mm, shape), format!("{{0}} @ {kexpr}"), ops);
                (s, format!("f32({{0}}) {scale}"), DType::F32)
            }
            _ => {
                // Logits in 16 bits: the softmax does not run over f32, no fusion.
                let s = self.put(
                    Ty::new(mm, shape),
                    format!("({{0}} @ {kexpr}) {scale}"),
                    ops,
                );
                (s, "{0}".into(), mm)
            }
        }
    }

    /// The logits: the scores (as `frag` reads them, of dtype `sdt`), sometimes soft-capped
    /// or with ALiBi's distance term, then masked, biased, or as they are. Returns the
    /// logits' name.
    /// With `len`, the caches' lengths (decode), mostly decode's mask `j <= len + i`.
    fn logits(&mut self, bl: &Block, s: &str, frag: &str, sdt: DType, len: Option<&str>) -> String {
        let st = self.ty(s);
        let r = st.rank();
        let shape = st.shape.clone();
        let (tt, ss) = (self.dim_text(&bl.t), self.dim_text(&bl.s));
        let fill = match self.below(20) {
            0 => "-1.0 / 0.0",
            1 => "-10000.0",
            _ => "-inf",
        };
        let mut ops = vec![s.to_string()];
        let mut frag = frag.to_string();
        let mut dt = sdt;
        match self.below(20) {
            0 => {
                // Gemma 2's soft cap.
                let cap = self.pick(&["30.0", "50.0"]);
                frag = format!("tanh({frag} / {cap}) * {cap}");
            }
            1 => {
                // ALiBi: a slope per head times the distance of key and query.
                let mut sh = bl.heads();
                if bl.b.is_some() {
                    sh[0] = Dim::Lit(1);
                }
                sh.extend([Dim::Lit(1), Dim::Lit(1)]);
                let slope = self.fresh_param(Ty::new(DType::F32, sh));
                let k = arg(&mut ops, slope);
                frag =
                    format!("{frag} - {k} * f32(abs(iota({tt})[:, None] - iota({ss})[None, :]))");
                dt = promote(dt, DType::F32);
            }
            _ => {}
        }
        let decode = len
            .filter(|_| self.chance(0.7))
            .map(|l| arg(&mut ops, l.into()));
        let template = match self.below(100) {
            _ if decode.is_some() => {
                let l = format!("{}{}", decode.expect("a length"), Self::along(0, r));
                let j = format!("iota({ss}){}", Self::along(r - 1, r));
                let i = format!("iota({tt}){}", Self::along(r - 2, r));
                if self.chance(0.8) {
                    self.masked(&format!("{j} <= {l} + {i}"), true, &frag, fill)
                } else {
                    self.masked(&format!("{j} < {l} + {tt}"), true, &frag, fill)
                }
            }
            0..=9 => frag,
            10..=29 => {
                let off = match self.below(6) {
                    0 => ", offset: 0".to_string(),
                    1 => ", offset: -1".to_string(),
                    2 => format!(", offset: {}", 1 + self.below(5)),
                    3 => format!(
                        ", offset: -{}",
                        1 + self.below(bl.t.value(&self.p.dims) + 2)
                    ),
                    _ => String::new(),
                };
                let mask = format!("causal({tt}, {ss}{off})");
                match self.below(5) {
                    0 => self.masked(&format!("!{mask}"), false, &frag, fill),
                    // Hidden where the key is past the query's last position.
                    1 if off.is_empty() => self.masked(
                        &format!("iota({ss})[None, :] > iota({tt})[:, None] + ({ss} - {tt})"),
                        false,
                        &frag,
                        fill,
                    ),
                    2 => {
                        // Causal and an additive bias.
                        let bias =
                            self.fresh_param(Ty::new(DType::F32, vec![bl.t.clone(), bl.s.clone()]));
                        let k = arg(&mut ops, bias);
                        dt = DType::F32;
                        format!("where({mask}, {frag} + {k}, {fill})")
                    }
                    _ => self.masked(&mask, true, &frag, fill),
                }
            }
            30..=49 => {
                let len = self.length(bl, r, &mut ops);
                let j = format!("iota({ss}){}", Self::along(r - 1, r));
                match self.below(4) {
                    0 => self.masked(&format!("{j} >= {len}"), false, &frag, fill),
                    1 => {
                        let i = format!("iota({tt}){}", Self::along(r - 2, r));
                        self.masked(&format!("{j} <= {len} + {i}"), true, &frag, fill)
                    }
                    _ => self.masked(&format!("{j} < {len}"), true, &frag, fill),
                }
            }
            50..=61 => {
                let cond = self.linear_mask(bl, r, &mut ops);
                let visible_true = self.chance(0.5);
                self.masked(&cond, visible_true, &frag, fill)
            }
            62..=65 => {
                // A sliding window: the outer mask bounds the keys, the inner one is part of
                // the logits' elementwise function (or the other way round: no bound).
                let (j, i) = (
                    format!("iota({ss})[None, :]"),
                    format!("iota({tt})[:, None]"),
                );
                let w = self.pick(&[1u64, 4, 16, 64]);
                let upper = format!("{j} <= {i} + ({ss} - {tt})");
                let lower = format!("{j} > {i} + ({ss} - {tt}) - {w}");
                let (outer, inner) = if self.chance(0.7) {
                    (upper, lower)
                } else {
                    (lower, upper)
                };
                format!("where({outer}, where({inner}, {frag}, {fill}), {fill})")
            }
            66..=75 => {
                // An additive bias: the whole logits' shape with some dims 1, or [T, S].
                let bshape = if self.chance(0.5) {
                    vec![bl.t.clone(), bl.s.clone()]
                } else {
                    shape
                        .iter()
                        .enumerate()
                        .map(|(i, d)| {
                            if i + 2 < r && self.chance(0.5) {
                                Dim::Lit(1)
                            } else {
                                d.clone()
                            }
                        })
                        .collect()
                };
                let bdt = self.pick(&[DType::F32, DType::F32, bl.dt]);
                let bias = self.fresh_param(Ty::new(bdt, bshape));
                let k = arg(&mut ops, bias);
                dt = promote(dt, bdt);
                format!("{frag} + {k}")
            }
            76..=83 => {
                dt = promote(dt, DType::F32);
                format!("{frag} + where(causal({tt}, {ss}), 0.0, {fill})")
            }
            84..=89 => {
                let m = self.fresh_param(Ty::new(DType::Bool, vec![bl.t.clone(), bl.s.clone()]));
                let k = arg(&mut ops, m);
                self.masked(&k, true, &frag, fill)
            }
            _ => {
                let cond = self.head_length_mask(bl, r, &mut ops);
                self.masked(&cond, true, &frag, fill)
            }
        };
        if template == "{0}" {
            return s.to_string();
        }
        let x = self.put(Ty::new(dt, shape), template, ops);
        if self.chance(0.04) {
            // Scores read by something else: they must be stored, nothing fuses.
            let t = self.ty(s);
            let red = Ty::new(t.dtype, t.shape[..r - 1].to_vec());
            self.put(red, "max({0}, axis: -1)".into(), vec![s.to_string()]);
        } else if self.chance(0.03) {
            self.keep.push(x.clone());
        }
        x
    }

    /// `where(cond, frag, fill)` (`visible_true`) or `where(cond, fill, frag)`; when the
    /// logits read 16-bit scores through `f32`, sometimes masked in 16 bits and cast after.
    fn masked(&mut self, cond: &str, visible_true: bool, frag: &str, fill: &str) -> String {
        let (inner, wrap) = if frag == "f32({0})" && self.chance(0.3) {
            ("{0}", true)
        } else {
            (frag, false)
        };
        let w = if visible_true {
            format!("where({cond}, {inner}, {fill})")
        } else {
            format!("where({cond}, {fill}, {inner})")
        };
        if wrap {
            format!("f32({w})")
        } else {
            w
        }
    }

    /// A length per batch entry, KV head, query head of a group or query row: a random i32
    /// input made a length in 0 ..= S (0 for every other entry sometimes: fully masked
    /// rows). Pushes its `let` and an operand; returns its text along its axis of the
    /// logits (rank `r`).
    fn length(&mut self, bl: &Block, r: usize, ops: &mut Vec<String>) -> String {
        let nb = bl.nb();
        let mut axes: Vec<(usize, Dim)> =
            vec![(nb, if bl.gqa { bl.kv.clone() } else { bl.h.clone() })];
        if bl.gqa {
            axes.push((nb + 1, bl.g()));
        }
        axes.push((r - 2, bl.t.clone()));
        if let Some(b) = &bl.b {
            axes.extend([(0, b.clone()), (0, b.clone())]);
        }
        let (ax, x) = self.pick(&axes);
        let len = self.length_of(bl, &x);
        let k = arg(ops, len);
        format!("{k}{}", Self::along(ax, r))
    }

    /// The `let` of a length `i32[x]` in 0 ..= S.
    fn length_of(&mut self, bl: &Block, x: &Dim) -> String {
        let sv = bl.s.value(&self.p.dims);
        let ss = self.dim_text(&bl.s);
        let r_in = self.fresh_param(Ty::new(DType::I32, vec![x.clone()]));
        // |r| ≤ 8 (`Tensor::random`): times about S / 8, the lengths spread over 0 ..= S.
        let m = sv / 8 + 1;
        let zeros = if self.chance(0.3) {
            format!(" * (iota({}) % 2)", self.dim_text(x))
        } else {
            String::new()
        };
        self.put(
            Ty::new(DType::I32, vec![x.clone()]),
            format!("(abs({{0}}) * {m}) % ({ss} + 1){zeros}"),
            vec![r_in],
        )
    }

    /// A comparison of two sums of the key index `j` (sometimes `2 j` or `-j`: no key
    /// bound), the query index `i`, a length and a constant, in any order: the key bound
    /// solved from it (`j < ..` or `j <= ..` once the arms are read) or none.
    fn linear_mask(&mut self, bl: &Block, r: usize, ops: &mut Vec<String>) -> String {
        let (tt, ss) = (self.dim_text(&bl.t), self.dim_text(&bl.s));
        let j = format!("iota({ss}){}", Self::along(r - 1, r));
        let i = format!("iota({tt}){}", Self::along(r - 2, r));
        let mut sides: [Vec<String>; 2] = Default::default();
        let key = match self.below(20) {
            0 => format!("{j} * 2"),
            1 => format!("-{j}"),
            _ => j,
        };
        sides[self.below(2) as usize].push(key);
        if self.chance(0.7) {
            let t = if self.chance(0.85) {
                i
            } else {
                format!("{i} * 2")
            };
            sides[self.below(2) as usize].push(t);
        }
        if self.chance(0.4) {
            let l = self.length(bl, r, ops);
            sides[self.below(2) as usize].push(l);
        }
        if self.chance(0.5) {
            let c = 1 + self.below(5);
            sides[self.below(2) as usize].push(c.to_string());
        }
        let text = |terms: &[String], g: &mut Gen| -> String {
            let mut out = String::new();
            for (k, t) in terms.iter().enumerate() {
                if k == 0 {
                    out += t;
                } else if g.chance(0.3) && !t.starts_with('-') {
                    out += &format!(" - {t}");
                } else {
                    out += &format!(" + {t}");
                }
            }
            if out.is_empty() {
                "0".into()
            } else {
                out
            }
        };
        let (a, b) = (sides[0].clone(), sides[1].clone());
        let (a, b) = (text(&a, self), text(&b, self));
        let op = self.pick(&["<", "<=", ">", ">="]);
        format!("{a} {op} {b}")
    }

    /// GQA's mask written per query head, `[B?, H, T, S]`-shaped from a length per query
    /// head, then reshaped to the logits' `[B?, KV, H / KV, T, S]`: the key bound through
    /// a reshape that splits the heads. Without GQA, a length mask.
    fn head_length_mask(&mut self, bl: &Block, r: usize, ops: &mut Vec<String>) -> String {
        if !bl.gqa {
            let len = self.length(bl, r, ops);
            let j = format!("iota({}){}", self.dim_text(&bl.s), Self::along(r - 1, r));
            return format!("{j} < {len}");
        }
        let nb = bl.nb();
        let r1 = r - 1;
        let len = self.length_of(bl, &bl.h);
        let k = arg(ops, len);
        let (tt, ss) = (self.dim_text(&bl.t), self.dim_text(&bl.s));
        let j = format!("iota({ss}){}", Self::along(r1 - 1, r1));
        let l = format!("{k}{}", Self::along(nb, r1));
        let with_i = self.chance(0.5);
        let cond = if with_i {
            let i = format!("iota({tt}){}", Self::along(r1 - 2, r1));
            format!("{j} <= {l} + {i}")
        } else {
            format!("{j} < {l}")
        };
        let mut to: Vec<String> = vec!["1".into(); nb];
        to.extend([self.dim_text(&bl.kv), self.dim_text(&bl.g())]);
        to.push(if with_i { tt } else { "1".into() });
        to.push(ss);
        format!("reshape({cond}, {})", list(&to))
    }

    /// `cast(softmax(x)) @ v`: the probabilities cast to v's dtype (sometimes to the other
    /// one, or not at all; the softmax sometimes over another axis: no fusion).
    fn attend(&mut self, bl: &Block, x: &str, vh: &str) -> String {
        let xt = self.ty(x);
        let r = xt.rank();
        let vt = self.ty(vh);
        let axis = match self.below(40) {
            0 => "-2".to_string(),
            1..=12 => (r - 1).to_string(),
            _ => "-1".to_string(),
        };
        let cast_to = match self.below(40) {
            0 => Some(Self::other16(vt.dtype)),
            1 => None,
            _ => Some(vt.dtype),
        };
        let pdt = cast_to.unwrap_or(xt.dtype);
        let pc = match cast_to {
            Some(c) if self.chance(0.3) => self.put(
                Ty::new(c, xt.shape.clone()),
                format!("{}(softmax({{0}}, axis: {axis}))", dtype_name(c)),
                vec![x.to_string()],
            ),
            _ => {
                let p = self.put(
                    xt.clone(),
                    format!("softmax({{0}}, axis: {axis})"),
                    vec![x.to_string()],
                );
                if self.chance(0.05) {
                    // Probabilities read by something else.
                    if self.chance(0.5) {
                        self.keep.push(p.clone());
                    } else {
                        let red = Ty::new(xt.dtype, xt.shape[..r - 1].to_vec());
                        self.put(red, "sum({0}, axis: -1)".into(), vec![p.clone()]);
                    }
                }
                match cast_to {
                    Some(c) => self.put(
                        Ty::new(c, xt.shape.clone()),
                        format!("{}({{0}})", dtype_name(c)),
                        vec![p],
                    ),
                    None => p,
                }
            }
        };
        let mut shape = xt.shape.clone();
        *shape.last_mut().expect("logits have rank 2 or more") = bl.e.clone();
        let odt = promote(pdt, vt.dtype);
        self.put(
            Ty::new(odt, shape),
            "{0} @ {1}".into(),
            vec![pc, vh.to_string()],
        )
    }

    /// The result back in the layout the projections read, `[B?, T, H, E]`.
    fn tokens_first(&mut self, bl: &Block, o: &str) -> String {
        let nb = bl.nb();
        let ot = self.ty(o);
        let mut p: Vec<usize> = (0..nb).collect();
        if bl.gqa {
            p.extend([nb + 2, nb, nb + 1, nb + 3]);
            let mut shape: Vec<Dim> = bl.b.iter().cloned().collect();
            shape.extend([bl.t.clone(), bl.h.clone(), bl.e.clone()]);
            let texts: Vec<String> = shape.iter().map(|d| self.dim_text(d)).collect();
            self.put(
                Ty::new(ot.dtype, shape),
                format!(
                    "reshape(permute({{0}}, {}), {})",
                    perm_text(&p),
                    list(&texts)
                ),
                vec![o.to_string()],
            )
        } else {
            p.extend([nb + 1, nb, nb + 2]);
            let shape: Vec<Dim> = p.iter().map(|&i| ot.shape[i].clone()).collect();
            self.put(
                Ty::new(ot.dtype, shape),
                format!("permute({{0}}, {})", perm_text(&p)),
                vec![o.to_string()],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{generate, Config};
    use std::collections::BTreeMap;

    /// The block's variations stay generated, and well-typed: among the first 1000
    /// programs every one passes the front end, and each kind of q computation, mask and
    /// shape appears often enough for `cargo test`'s 60 and a longer run to reach it.
    #[test]
    fn blocks_check_and_vary() {
        let cfg = Config::attention();
        let kinds: &[(&str, &str)] = &[
            ("RMSNorm of q", "rsqrt(mean("),
            ("RoPE of q", "split("),
            ("GQA's heads split", "/ D"),
            ("causal mask", "causal("),
            ("a length from an input", "(abs("),
            ("zero lengths", "% 2)"),
            ("a mask reshaped to GQA's heads", "reshape(iota("),
            ("ALiBi", "f32(abs(iota("),
            ("a sliding window", ", where(iota("),
            ("16-bit scores", "bf16(f32("),
            ("a KV cache updated in place", "update("),
        ];
        let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
        let (mut long_keys, mut odd_head) = (0, 0);
        for seed in 0..1000 {
            let p = generate(seed, &cfg);
            let src = p.source_body();
            let module = tessel_syntax::parse(&src).expect("parses");
            let dims = p.dim_bindings().into_iter().collect();
            if let Err(d) = tessel_passes::check::run(&module, "fuzz", &dims) {
                panic!("seed {seed}: {}\n{src}", d[0].message);
            }
            for (k, pat) in kinds {
                if src.contains(pat) {
                    *seen.entry(k).or_default() += 1;
                }
            }
            long_keys += p.dims.iter().any(|&d| d > 512) as u32;
            odd_head += p.dims.iter().any(|&d| [8, 24, 48].contains(&d)) as u32;
        }
        for (k, _) in kinds {
            assert!(seen.get(k).copied().unwrap_or(0) >= 10, "{k}: {seen:?}");
        }
        assert!(long_keys >= 50 && odd_head >= 50, "{long_keys} {odd_head}");
    }
}
