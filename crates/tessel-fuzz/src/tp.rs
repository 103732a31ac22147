//! The tensor-parallel property on generated programs (issue 10): a program the plan can
//! partition (tessel-passes `tp`) must give the same bits at every world size, its ranks
//! run apart on the executor with the all-gathers between their phases
//! (tessel-ref `ranks::run_ranks`). Generated programs reach plans no hand-written layer
//! does: heads split through odd reshapes, a bias or a table sliced per rank, caches
//! updated by heads, reductions and concats beside the split axis.

use crate::run::{first_message, panic_message};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tessel_ir::kernel::Program;
use tessel_ir::ranks::Rank;
use tessel_passes::tp::{plan, ranks, Sharding};
use tessel_passes::{Options, Profile, Target};
use tessel_ref::Tensor;

/// What happened to a program.
#[derive(Clone, Debug, PartialEq)]
pub enum TpOutcome {
    /// The front end refused the program (the generator and the language disagree).
    Rejected(String),
    /// The plan refused to partition it at the largest world size (with its reason).
    Unplanned(String),
    /// Planned, but every value is replicated: nothing to compare.
    Replicated,
    /// Every output bit-identical at every world size.
    Same,
    /// A wrong answer: outputs that differ between world sizes.
    Differ(String),
    /// Partitioned but failed to compile or run, or panicked: a defect too.
    Error(String),
}

impl TpOutcome {
    /// True for the outcomes that are defects.
    pub fn is_defect(&self) -> bool {
        matches!(self, TpOutcome::Differ(_) | TpOutcome::Error(_))
    }
}

/// Runs every rank of a step on a device (the CLI's GPU runtime) from the whole inputs and
/// returns the whole outputs.
pub type RunRanks<'a> = &'a dyn Fn(&[Rank<Program>], &[Tensor]) -> Result<Vec<Tensor>, String>;

/// Runs step `step` of `source` with `dims` bound as ranks at each of `sizes` (the first
/// the reference) in `profile` on the executor, on the seeded inputs [`crate::run`] uses
/// (`Tensor::random` with seed `seed · 1000 + i` for input `i`), and compares the outputs.
pub fn tp_case(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    sizes: &[u32],
) -> TpOutcome {
    tp_case_on(source, step, dims, profile, seed, sizes, None)
}

/// [`tp_case`], and with `device` the ranks run there too at every size: the device's
/// outputs must be the same bits at every size, and in `exact` the executor's.
pub fn tp_case_on(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    sizes: &[u32],
    device: Option<RunRanks>,
) -> TpOutcome {
    catch_unwind(AssertUnwindSafe(|| {
        tp_inner(source, step, dims, profile, seed, sizes, device)
    }))
    .unwrap_or_else(|e| TpOutcome::Error(format!("panic: {}", panic_message(e.as_ref()))))
}

fn tp_inner(
    source: &str,
    step: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    sizes: &[u32],
    device: Option<RunRanks>,
) -> TpOutcome {
    let module = match tessel_syntax::parse(source) {
        Ok(m) => m,
        Err(d) => return TpOutcome::Rejected(first_message(&d)),
    };
    let dims: BTreeMap<String, u64> = dims.iter().cloned().collect();
    let g = match tessel_passes::check::run(&module, step, &dims) {
        Ok(g) => g,
        Err(d) => return TpOutcome::Rejected(first_message(&d)),
    };
    let largest = sizes.iter().copied().max().unwrap_or(1);
    match plan(&g, largest) {
        Err(e) => return TpOutcome::Unplanned(e.to_string()),
        Ok(p)
            if p.sharding.iter().all(|s| *s == Sharding::Replicated)
                && p.collectives.is_empty() =>
        {
            return TpOutcome::Replicated
        }
        Ok(_) => {}
    }
    let whole: Vec<Tensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, v))| {
            Tensor::random(
                g.ty(*v).clone(),
                seed.wrapping_mul(1000).wrapping_add(i as u64),
            )
        })
        .collect();
    let opts = Options {
        target: Target::h200(),
        profile,
        verify: true,
        tensor_parallel: true,
        wgmma_tma: false,
        wgmma_attention: false,
        wgmma_attention_keys: 0,
        wgmma_pingpong: false,
    };
    let mut first: Option<(Vec<Tensor>, Option<Vec<Tensor>>)> = None;
    let mut shape: Option<(Vec<Sharding>, usize)> = None;
    for &n in sizes {
        let p = match plan(&g, n) {
            Ok(p) => p,
            Err(e) => {
                return TpOutcome::Error(format!(
                    "--tp {n}: planned at {largest} but not here: {e}"
                ))
            }
        };
        // The plan's structure must not depend on the world size (or its sums'
        // association would not either).
        match &shape {
            None => shape = Some((p.sharding.clone(), p.collectives.len())),
            Some((sh, c)) if *sh != p.sharding || *c != p.collectives.len() => {
                return TpOutcome::Error(format!(
                    "--tp {n}: the plan splits other values than at --tp {}",
                    sizes[0]
                ))
            }
            Some(_) => {}
        }
        let rs = match ranks(&g, &p) {
            Ok(r) => r,
            Err(e) => return TpOutcome::Error(format!("--tp {n}: ranks: {e}")),
        };
        let compiled: Result<Vec<_>, _> = rs
            .into_iter()
            .map(|r| r.try_map(|ph| tessel_passes::compile(&ph, &opts).map(|c| c.program)))
            .collect();
        let compiled = match compiled {
            Ok(c) => c,
            Err(e) => return TpOutcome::Error(format!("--tp {n}: compile: {e}")),
        };
        let out = match tessel_ref::ranks::run_ranks(&compiled, &whole) {
            Ok(o) => o,
            Err(e) => return TpOutcome::Error(format!("--tp {n}: run: {e}")),
        };
        let on_device = match device.map(|run| run(&compiled, &whole)) {
            None => None,
            Some(Ok(o)) => Some(o),
            Some(Err(e)) => return TpOutcome::Error(format!("--tp {n}: device: {e}")),
        };
        let names: Vec<&str> = g.outputs.iter().map(|(n, _)| n.as_str()).collect();
        let differ = |a: &[Tensor], b: &[Tensor]| -> Vec<&str> {
            names
                .iter()
                .zip(a.iter().zip(b))
                .filter(|(_, (x, y))| x.data != y.data)
                .map(|(n, _)| *n)
                .collect()
        };
        if let (Some(d), Profile::Exact) = (&on_device, profile) {
            let bad = differ(d, &out);
            if !bad.is_empty() {
                return TpOutcome::Differ(format!(
                    "--tp {n}: the device's {} differ from the executor's",
                    bad.join(", ")
                ));
            }
        }
        match &first {
            None => first = Some((out, on_device)),
            Some((want, want_device)) => {
                let bad = differ(&out, want);
                if !bad.is_empty() {
                    return TpOutcome::Differ(format!(
                        "--tp {n} against --tp {}: {} differ",
                        sizes[0],
                        bad.join(", ")
                    ));
                }
                if let (Some(d), Some(w)) = (&on_device, want_device) {
                    let bad = differ(d, w);
                    if !bad.is_empty() {
                        return TpOutcome::Differ(format!(
                            "on the device, --tp {n} against --tp {}: {} differ",
                            sizes[0],
                            bad.join(", ")
                        ));
                    }
                }
            }
        }
    }
    TpOutcome::Same
}

/// A random pre-norm transformer block for the tensor-parallel property: a source text with
/// every dim concrete, and a one-line summary of what it drew. The plan must partition it at
/// 1, 2 and 4 ranks (heads, head groups, MLP width and the K ranges all divide), so every
/// program compares something. Drawn: the dtype (bf16, or f32, where any other association
/// of a sum shows), T, the hidden size, heads (4 or 8 KV heads, groups of 1 or 2), the head
/// dim, the MLP width; q/k/v biases (Qwen2), per-head RMSNorm of q and k (Qwen3), RoPE; the
/// attention output and the residual stream as extra results (gathered and whole); a
/// second MLP; a scale of a branch before its residual add; decode (K and V appended to
/// `inout` caches split by heads, attention over them up to `len`); the down weight stored
/// `[F, E]`; a parameter named like an unnamed result (`out`, `out0`).
pub fn tp_program(seed: u64) -> (String, String) {
    let mut rng = tessel_ref::tensor::SplitMix64::new(seed ^ 0x007e_55e1_0000);
    let mut pick = |n: u64| rng.next_u64() % n;
    let dt = ["bf16", "f32"][pick(2) as usize];
    let t = [1, 2, 5, 9, 17][pick(5) as usize];
    let e = [16, 32, 64][pick(3) as usize];
    let kv = [4, 8][pick(2) as usize];
    let g = [1, 2][pick(2) as usize];
    let h = kv * g;
    let d = [16, 32][pick(2) as usize];
    let f = [32, 64, 96][pick(3) as usize];
    let bias = pick(3) == 0;
    let qk_norm = pick(2) == 0;
    let rope = pick(2) == 0;
    let out_attn = pick(2) == 0;
    let out_mid = pick(4) == 0;
    let mlp2 = pick(4) == 0;
    let scaled = pick(3) == 0;
    // Decode: K and V appended to `inout` caches of S rows at `len`, attention over them.
    let decode = pick(3) == 0;
    let s_len = t + [0, 3, 20][pick(3) as usize];
    // The down weight stored [F, E] and read as it is; the post-norm weight named like an
    // unnamed result (the parameter and the result must not be confused).
    let wd_plain = pick(3) == 0;
    let n2 = ["n2", "out", "out0"][pick(3) as usize];
    let (hq, hk) = (h * d, kv * d);
    let mut params = vec![
        format!("x: {dt}[{t}, {e}]"),
        format!("pos: i32[{t}]"),
        format!("n1: {dt}[{e}]"),
        format!("wq: {dt}[{hq}, {e}]"),
        format!("wk: {dt}[{hk}, {e}]"),
        format!("wv: {dt}[{hk}, {e}]"),
    ];
    if bias {
        params.extend([
            format!("bq: {dt}[{hq}]"),
            format!("bk: {dt}[{hk}]"),
            format!("bv: {dt}[{hk}]"),
        ]);
    }
    if qk_norm {
        params.extend([format!("qn: {dt}[{d}]"), format!("kn: {dt}[{d}]")]);
    }
    params.extend([
        format!("wo: {dt}[{e}, {hq}]"),
        format!("{n2}: {dt}[{e}]"),
        format!("wg: {dt}[{f}, {e}]"),
        format!("wu: {dt}[{f}, {e}]"),
        if wd_plain {
            format!("wd: {dt}[{f}, {e}]")
        } else {
            format!("wd: {dt}[{e}, {f}]")
        },
    ]);
    if decode {
        params.extend([
            "len: i32[1]".to_string(),
            format!("kc: inout {dt}[1, {kv}, {s_len}, {d}]"),
            format!("vc: inout {dt}[1, {kv}, {s_len}, {d}]"),
        ]);
    }
    if mlp2 {
        params.extend([
            format!("wg2: {dt}[{f}, {e}]"),
            format!("wd2: {dt}[{e}, {f}]"),
        ]);
    }
    let norm = |x: &str, w: &str| {
        format!("{w} * {dt}(f32({x}) * rsqrt(mean(f32({x}) * f32({x}), axis: -1, keep: true) + 0.000001))")
    };
    let proj = |w: &str, b: &str, heads: u64| {
        let lin = if bias {
            format!("{dt}(f32(h) @ f32({w})^T + f32({b}))")
        } else {
            format!("h @ {w}^T")
        };
        format!("reshape({lin}, [{t}, {heads}, {d}])")
    };
    let mut body = vec![format!("    let h = {};", norm("x", "n1"))];
    body.push(format!("    let q0 = {};", proj("wq", "bq", h)));
    body.push(format!("    let k0 = {};", proj("wk", "bk", kv)));
    body.push(format!("    let v = {};", proj("wv", "bv", kv)));
    let (mut q, mut k) = ("q0".to_string(), "k0".to_string());
    if qk_norm {
        body.push(format!("    let q1 = {};", norm(&q, "qn")));
        body.push(format!("    let k1 = {};", norm(&k, "kn")));
        (q, k) = ("q1".into(), "k1".into());
    }
    if rope {
        let half = d / 2;
        body.push(format!(
            "    let inv = 1.0 / pow(10000.0, f32(iota({half}) * 2) / {d}.0);"
        ));
        body.push("    let ang = f32(pos)[:, None] * inv[None, :];".into());
        body.push("    let emb = concat(ang, ang, axis: -1);".into());
        body.push(format!("    let c = {dt}(cos(emb))[:, None, :];"));
        body.push(format!("    let s = {dt}(sin(emb))[:, None, :];"));
        for (name, x) in [("q2", q.clone()), ("k2", k.clone())] {
            body.push(format!(
                "    let {name} = {x} * c + concat(-{x}[:, :, {half}:{d}], {x}[:, :, 0:{half}], axis: -1) * s;"
            ));
        }
        (q, k) = ("q2".into(), "k2".into());
    }
    let scale = 1.0 / (d as f64).sqrt();
    body.push(format!(
        "    let qh = permute(reshape({q}, [{t}, {kv}, {g}, {d}]), [1, 2, 0, 3]);"
    ));
    let mask = if decode {
        body.push(format!(
            "    let kc2 = update(kc, reshape(permute({k}, [1, 0, 2]), [1, {kv}, {t}, {d}]), at: len, axis: 2);"
        ));
        body.push(format!(
            "    let vc2 = update(vc, reshape(permute(v, [1, 0, 2]), [1, {kv}, {t}, {d}]), at: len, axis: 2);"
        ));
        body.push(format!(
            "    let kh = reshape(kc2, [{kv}, {s_len}, {d}])[:, None];"
        ));
        body.push(format!(
            "    let vh = reshape(vc2, [{kv}, {s_len}, {d}])[:, None];"
        ));
        format!(
            "iota({s_len})[None, None, None, :] <= len[:, None, None, None] + iota({t})[None, None, :, None]"
        )
    } else {
        body.push(format!("    let kh = permute({k}, [1, 0, 2])[:, None];"));
        body.push("    let vh = permute(v, [1, 0, 2])[:, None];".into());
        format!("causal({t}, {t})")
    };
    body.push(format!("    let sc = f32(qh @ kh^T) * {scale};"));
    body.push(format!(
        "    let p = softmax(where({mask}, sc, -inf), axis: -1);"
    ));
    body.push(format!(
        "    let attn = reshape(permute({dt}(p) @ vh, [2, 0, 1, 3]), [{t}, {hq}]);"
    ));
    let o = if scaled {
        "(attn @ wo^T) * 0.5"
    } else {
        "attn @ wo^T"
    };
    body.push(format!("    let mid = x + {o};"));
    body.push(format!("    let h2 = {};", norm("mid", n2)));
    let wd = if wd_plain { "wd" } else { "wd^T" };
    body.push(format!(
        "    let out1 = mid + (silu(h2 @ wg^T) * (h2 @ wu^T)) @ {wd};"
    ));
    let last = if mlp2 {
        body.push("    let out = out1 + silu(out1 @ wg2^T) @ wd2^T;".into());
        "out"
    } else {
        "out1"
    };
    let mut results = vec![(last.to_string(), format!("{dt}[{t}, {e}]"))];
    if out_attn {
        results.push(("attn".into(), format!("{dt}[{t}, {hq}]")));
    }
    if out_mid {
        results.push(("mid".into(), format!("{dt}[{t}, {e}]")));
    }
    let (names, types): (Vec<String>, Vec<String>) = results.into_iter().unzip();
    let (ret, value) = if names.len() == 1 {
        (types[0].clone(), names[0].clone())
    } else {
        (
            format!("({})", types.join(", ")),
            format!("({})", names.join(", ")),
        )
    };
    let src = format!(
        "step fuzz({}) -> {ret} {{\n{}\n    {value}\n}}\n",
        params.join(", "),
        body.join("\n")
    );
    let what = format!(
        "{dt} T={t} E={e} heads {h}/{kv} d={d} F={f}{}{}{}{}{}{}{}{}{}{}",
        if decode {
            format!(" decode S={s_len}")
        } else {
            String::new()
        },
        if wd_plain { " wd[F,E]" } else { "" },
        if n2 != "n2" {
            format!(" param {n2}")
        } else {
            String::new()
        },
        if bias { " bias" } else { "" },
        if qk_norm { " qk-norm" } else { "" },
        if rope { " rope" } else { "" },
        if out_attn { " +attn" } else { "" },
        if out_mid { " +mid" } else { "" },
        if mlp2 { " mlp2" } else { "" },
        if scaled { " scaled" } else { "" },
    );
    (src, what)
}
