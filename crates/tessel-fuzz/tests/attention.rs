//! Attention from primitives (tests/programs/attention.tsl) at shapes with tails: queries
//! and keys of 1, 7 and 129 (not multiples of the 64-key block or the 16-row fragment), a
//! KV cache of length 0 and 1 and one near its capacity, GQA packs of 1, 4 and 5, head dims
//! 16 to 128, bf16 and f16, and q computed by the attention kernel (QK-norm, RoPE). Every case runs on the CPU executor in every profile and is
//! judged by the dtype-following reference; in `invariant` and `fast` the attention must be
//! one fused kernel (a head dim of 48, not a power of two, must not), in `exact` it must
//! not be.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case, Outcome};
use tessel_passes::{compile, Options, Profile};

fn source() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/attention.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/attention.tsl")
}

fn dims(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The schedules of the kernels step `step` compiles to in `profile`.
fn schedules(src: &str, step: &str, dims: &[(String, u64)], profile: Profile) -> Vec<String> {
    let m = tessel_syntax::parse(src).expect("parses");
    let d: BTreeMap<String, u64> = dims.iter().cloned().collect();
    let g = tessel_passes::check::run(&m, step, &d).expect("checks");
    let opts = Options {
        profile,
        verify: true,
        ..Default::default()
    };
    let c = compile(&g, &opts).expect("compiles");
    c.program
        .kernels
        .values()
        .map(|k| k.schedule.clone())
        .collect()
}

/// Whether step `step` compiles to a fused attention kernel in `profile`.
fn fused(src: &str, step: &str, dims: &[(String, u64)], profile: Profile) -> bool {
    schedules(src, step, dims, profile)
        .iter()
        .any(|s| s.starts_with("attention {"))
}

/// Whether the fused attention kernel computes q itself (fuse rule 7).
fn q_in_prologue(src: &str, step: &str, dims: &[(String, u64)], profile: Profile) -> bool {
    schedules(src, step, dims, profile)
        .iter()
        .any(|s| s.starts_with("attention {") && s.contains("q computed in the prologue"))
}

/// The cases: (step, dims).
fn cases() -> Vec<(&'static str, Vec<(String, u64)>)> {
    let mut v = Vec::new();
    for (t, h, kv, d) in [
        (1, 8, 2, 64),
        (7, 5, 1, 32),
        (129, 4, 2, 64),
        (33, 40, 8, 128),
    ] {
        v.push(("prefill", dims(&[("T", t), ("H", h), ("KV", kv), ("D", d)])));
    }
    // S = N: a cache of length 0 (only the new keys); S = N + 1: length 0 or 1; S = 129:
    // lengths up to 128 - N.
    for (b, n, s, h, kv) in [
        (3, 1, 1, 8, 2),
        (2, 8, 9, 40, 8),
        (3, 2, 129, 8, 2),
        (1, 7, 70, 5, 1),
    ] {
        v.push((
            "decode",
            dims(&[
                ("B", b),
                ("N", n),
                ("S", s),
                ("H", h),
                ("KV", kv),
                ("D", 64),
            ]),
        ));
    }
    for (t, s) in [(1, 1), (7, 129), (65, 3)] {
        v.push(("full_f16", dims(&[("H", 3), ("T", t), ("S", s), ("D", 32)])));
    }
    for t in [1, 19, 64] {
        v.push(("masked_arms", dims(&[("H", 2), ("T", t), ("D", 64)])));
    }
    v.push((
        "full_f16",
        dims(&[("H", 2), ("T", 9), ("S", 17), ("D", 48)]),
    ));
    v.extend(prologue_cases());
    v
}

/// The steps whose q the attention kernel computes in its prologue (and `prologue_kept`,
/// whose q must stay in memory): head dims 16 to 128 (2 to 16 lanes per row), GQA packs
/// of 1, 4 and 5, query counts with tails; decode over a cache split into key ranges
/// (S = 1100: every range's CTA computes the prologue again).
fn prologue_cases() -> Vec<(&'static str, Vec<(String, u64)>)> {
    let mut v = Vec::new();
    for (t, h, kv, d) in [
        (1, 8, 2, 64),
        (7, 5, 1, 16),
        (129, 4, 1, 32),
        (33, 40, 8, 128),
    ] {
        for step in ["prologue", "prologue_kept"] {
            v.push((step, dims(&[("T", t), ("H", h), ("KV", kv), ("D", d)])));
        }
    }
    for (b, n, s, h, kv) in [(3, 1, 1, 8, 2), (2, 8, 70, 40, 8), (2, 2, 1100, 8, 2)] {
        v.push((
            "prologue_decode",
            dims(&[
                ("B", b),
                ("N", n),
                ("S", s),
                ("H", h),
                ("KV", kv),
                ("D", 64),
            ]),
        ));
    }
    v
}

#[test]
fn q_is_computed_in_the_prologue_only_where_nothing_else_reads_it() {
    let src = source();
    let mut failures = Vec::new();
    for (step, d) in prologue_cases() {
        for profile in Profile::ALL {
            let want = profile != Profile::Exact && step != "prologue_kept";
            if q_in_prologue(&src, step, &d, profile) != want {
                failures.push(format!(
                    "{step} {d:?} {}: q in the prologue {}expected",
                    profile.name(),
                    if want { "" } else { "not " }
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The prologue computes q exactly as the row-reduction kernel would (same reduction
/// order at d / 8 threads per row, vector 8), so the attention's bits do not change when
/// q is kept in memory: `prologue` and `prologue_kept` give the same output on the same
/// inputs, in both fused profiles, at head dims 32, 64 and 128.
#[test]
fn the_prologue_gives_the_bits_of_q_read_from_memory() {
    use tessel_ref::exec::run_program;
    use tessel_ref::Tensor;
    let src = source();
    let m = tessel_syntax::parse(&src).expect("parses");
    for (t, h, kv, dd) in [(7u64, 8u64, 2u64, 64u64), (40, 5, 1, 32), (19, 16, 2, 128)] {
        let d: BTreeMap<String, u64> = dims(&[("T", t), ("H", h), ("KV", kv), ("D", dd)])
            .into_iter()
            .collect();
        for profile in [Profile::Invariant, Profile::Fast] {
            let run = |step: &str| -> Vec<u8> {
                let g = tessel_passes::check::run(&m, step, &d).expect("checks");
                let opts = Options {
                    profile,
                    verify: true,
                    ..Default::default()
                };
                let p = compile(&g, &opts).expect("compiles").program;
                let inputs: Vec<Tensor> = p
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(i, (_, buf))| Tensor::random(p.buffers[*buf].ty.clone(), 500 + i as u64))
                    .collect();
                let out = run_program(&p, &inputs).expect("runs");
                out[0].data.clone()
            };
            assert_eq!(
                run("prologue"),
                run("prologue_kept"),
                "T={t} H={h} KV={kv} D={dd} {}",
                profile.name()
            );
        }
    }
}

#[test]
fn attention_passes_the_reference_in_every_profile_and_is_fused_with_tensor_cores() {
    let src = source();
    let mut failures = Vec::new();
    for (step, d) in cases() {
        for profile in Profile::ALL {
            for seed in [1, 2] {
                let o = run_case(&src, step, &d, profile, seed, None);
                if o != Outcome::Pass {
                    failures.push(format!(
                        "{step} {d:?} {} seed {seed}: {}: {}",
                        profile.name(),
                        o.kind(),
                        o.message()
                    ));
                }
            }
            // Head dims that are not a power of two stay unfused (the swizzle's limit).
            let pow2 = d.iter().all(|(k, v)| k != "D" || v.is_power_of_two());
            let want = profile != Profile::Exact && pow2;
            if fused(&src, step, &d, profile) != want {
                failures.push(format!(
                    "{step} {d:?} {}: fused attention {}expected",
                    profile.name(),
                    if want { "" } else { "not " }
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The invariant profile's promise for attention: a query row's result does not depend on
/// how many sequences are in the batch (each CTA's key loop and order depend on its own
/// rows only; the keys are split in ranges of a fixed size). The decode step at B = 1 and
/// B = 3 on the same first sequence, over a cache split into ranges, gives the same bits
/// for it.
#[test]
fn invariant_attention_rows_do_not_depend_on_the_batch() {
    use tessel_ref::exec::run_program;
    use tessel_ref::Tensor;
    let src = source();
    let m = tessel_syntax::parse(&src).expect("parses");
    let run = |b: u64| -> Vec<u8> {
        let d: BTreeMap<String, u64> = dims(&[
            ("B", b),
            ("N", 2),
            ("S", 100),
            ("H", 8),
            ("KV", 2),
            ("D", 64),
        ])
        .into_iter()
        .collect();
        let g = tessel_passes::check::run(&m, "decode", &d).expect("checks");
        let opts = Options {
            profile: Profile::Invariant,
            verify: true,
            ..Default::default()
        };
        let p = compile(&g, &opts).expect("compiles").program;
        // Sequence 0 is the same in both batches: the inputs of the larger batch, cut.
        let inputs: Vec<Tensor> = p
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (_, buf))| {
                let ty = p.buffers[*buf].ty.clone();
                let mut full = ty.clone();
                full.shape.0[0] = 3;
                let t = Tensor::random(full, 7000 + i as u64);
                let per = ty.size_bytes() as usize;
                Tensor {
                    ty,
                    data: t.data[..per].to_vec(),
                }
            })
            .collect();
        let out = run_program(&p, &inputs).expect("runs");
        let per_seq = out[0].data.len() / b as usize;
        out[0].data[..per_seq].to_vec()
    };
    assert_eq!(run(1), run(3));
}

/// Cache rows past every visible key are never read, so NaN there (an unwritten cache)
/// does not reach the output as 0 · NaN, also inside the last block of keys the kernel
/// walks. Decode over S = 300 keys with the lengths 10, 100 and 297 (the last ends inside
/// a block) and every v row from len + N on NaN: the fused kernel's outputs are finite.
#[test]
fn unwritten_cache_rows_past_the_lengths_are_not_read() {
    use tessel_ref::exec::run_program;
    use tessel_ref::Tensor;
    let src = source();
    let m = tessel_syntax::parse(&src).expect("parses");
    let (b, n, s) = (3u64, 2u64, 300u64);
    let d: BTreeMap<String, u64> =
        dims(&[("B", b), ("N", n), ("S", s), ("H", 8), ("KV", 2), ("D", 64)])
            .into_iter()
            .collect();
    let g = tessel_passes::check::run(&m, "decode", &d).expect("checks");
    for profile in [Profile::Invariant, Profile::Fast] {
        let opts = Options {
            profile,
            verify: true,
            ..Default::default()
        };
        let p = compile(&g, &opts).expect("compiles").program;
        let lens = [10i32, 100, 297];
        let inputs: Vec<Tensor> = p
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (name, buf))| {
                let ty = p.buffers[*buf].ty.clone();
                match name.as_str() {
                    // len = |r| mod (S - N + 1) = r.
                    "r" => Tensor::from_f32(ty.dtype, ty.shape.0.clone(), &lens.map(|l| l as f32)),
                    "vc" => {
                        let t = Tensor::random(ty.clone(), 9000 + i as u64);
                        let mut vals: Vec<f32> = (0..ty.shape.numel() as usize)
                            .map(|k| t.get_f64(k) as f32)
                            .collect();
                        // [B, KV, S, D]: rows from len + N on are NaN.
                        let (kv, dd) = (2usize, 64usize);
                        for (bi, &l) in lens.iter().enumerate() {
                            for h in 0..kv {
                                for row in (l as usize + n as usize)..s as usize {
                                    let at = ((bi * kv + h) * s as usize + row) * dd;
                                    vals[at..at + dd].fill(f32::NAN);
                                }
                            }
                        }
                        Tensor::from_f32(ty.dtype, ty.shape.0.clone(), &vals)
                    }
                    _ => Tensor::random(ty, 9000 + i as u64),
                }
            })
            .collect();
        let out = run_program(&p, &inputs).expect("runs");
        let nan = (0..out[0].ty.shape.numel() as usize)
            .filter(|&k| out[0].get_f64(k).is_nan())
            .count();
        assert_eq!(
            nan,
            0,
            "{}: NaN from cache rows no query sees",
            profile.name()
        );
    }
}
