//! The ops along an axis (issue 17): `argmax`/`argmin`, `topk`, `logsumexp`, `cumsum`
//! (tests/programs/select_scan.tsl).
//!
//! - every step judged by the dtype-following reference in every profile at lengths 1, 3,
//!   1000 and 4099 (no multiple of any chunk or vector), and the vocabulary-sized row
//!   (152064, Qwen's) in `exact`;
//! - the executor's values against torch's semantics, computed here independently, on rows
//!   of ties, NaN, ±inf, -0 and all-equal values (the bits of the selected values too);
//! - cumsum's bits against its documented order (chunks of 32, a function of the length
//!   only) and the same bits for a row at any batch size.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case, run_case_with_inputs, Outcome};
use tessel_ir::{DType, TensorType};
use tessel_passes::{compile, Options, Profile};
use tessel_ref::Tensor;

fn source() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/select_scan.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/select_scan.tsl")
}

fn dims(t: u64, d: u64) -> Vec<(String, u64)> {
    vec![("T".into(), t), ("D".into(), d)]
}

const STEPS: [&str; 13] = [
    "argmax_last",
    "argmax_first_axis",
    "argmax_int",
    "argmax_of_sum",
    "topk_one",
    "topk_all",
    "topk_bf16_axis0",
    "topk_int",
    "lse",
    "lse_bf16",
    "cumsum_f32",
    "cumsum_bf16",
    "cumsum_int",
];

#[test]
fn every_step_passes_the_reference_in_every_profile_at_odd_lengths() {
    let src = source();
    let mut failures = Vec::new();
    for (t, d) in [(3, 1), (1, 3), (2, 1000), (3, 4099)] {
        for step in STEPS {
            // topk of the whole row is k rounds over it: small rows only.
            if step == "topk_all" && d > 3 {
                continue;
            }
            for profile in Profile::ALL {
                let o = run_case(&src, step, &dims(t, d), profile, 5, None);
                if o != Outcome::Pass {
                    failures.push(format!(
                        "{step} T={t} D={d} {}: {}: {}",
                        profile.name(),
                        o.kind(),
                        o.message()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_vocabulary_row_passes_the_reference() {
    let src = source();
    for step in ["argmax_last", "topk_one", "lse", "cumsum_bf16"] {
        let o = run_case(&src, step, &dims(1, 152064), Profile::Exact, 1, None);
        assert_eq!(o, Outcome::Pass, "{step}: {}", o.message());
    }
}

/// Compiles `step` at T × D in `profile` and runs it on the executor.
fn run(step: &str, t: u64, d: u64, profile: Profile, inputs: &[Tensor]) -> Vec<Tensor> {
    let module = tessel_syntax::parse(&source()).expect("parses");
    let dm: BTreeMap<String, u64> = dims(t, d).into_iter().collect();
    let g = tessel_passes::check::run(&module, step, &dm).expect("checks");
    let opts = Options {
        profile,
        verify: true,
        ..Default::default()
    };
    let p = compile(&g, &opts).expect("compiles").program;
    tessel_ref::run_program(&p, inputs).expect("runs")
}

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

/// Rows of 7 with what torch's order has to get right.
fn special_rows() -> Vec<[f32; 7]> {
    vec![
        [1.0, 3.0, 3.0, -2.0, 3.0, 0.0, 1.0], // ties of the max, ties of 1
        [1.0, 5.0, NAN, -4.0, 2.0, NAN, 9.0], // NaN: the first NaN is argmax and argmin
        [-INF; 7],                            // all -inf
        [-0.0, 0.0, -0.0, 0.0, -1.0, -0.0, 0.0], // -0 ties +0
        [2.0, -INF, INF, 1.0, INF, -INF, 0.5], // ±inf, twice each
        [5.0; 7],                             // all equal
        [NAN; 7],                             // all NaN
    ]
}

/// torch's order (`torch.topk(sorted=True)` with ties to the lower index, `torch.argmax`):
/// the indices of `row`, best first.
fn torch_order(row: &[f32], largest: bool) -> Vec<usize> {
    // Selection by repeated scans, independent of the oracle's sort.
    let better = |a: f32, b: f32| -> bool {
        // Is a strictly better than b? NaN is the largest number.
        match (a.is_nan(), b.is_nan()) {
            (true, false) => largest,
            (false, true) => !largest,
            (true, true) => false,
            _ => {
                if largest {
                    a > b
                } else {
                    a < b
                }
            }
        }
    };
    let mut taken = vec![false; row.len()];
    let mut out = Vec::new();
    for _ in 0..row.len() {
        let mut best: Option<usize> = None;
        for j in 0..row.len() {
            if taken[j] {
                continue;
            }
            if best.is_none_or(|b| better(row[j], row[b])) {
                best = Some(j);
            }
        }
        let b = best.expect("one left");
        taken[b] = true;
        out.push(b);
    }
    out
}

fn f32_input(rows: &[[f32; 7]]) -> Tensor {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    Tensor::from_f32(DType::F32, vec![rows.len() as u64, 7], &flat)
}

#[test]
fn argmax_and_argmin_follow_torch_on_ties_nan_inf_and_signed_zeros() {
    let rows = special_rows();
    let x = f32_input(&rows);
    for profile in Profile::ALL {
        let out = run(
            "argmax_last",
            rows.len() as u64,
            7,
            profile,
            std::slice::from_ref(&x),
        );
        let (amax, amin) = (out[0].to_i32_vec(), out[1].to_i32_vec());
        for (r, row) in rows.iter().enumerate() {
            assert_eq!(
                amax[r] as usize,
                torch_order(row, true)[0],
                "argmax row {r}"
            );
            // torch.argmin takes the first NaN too (`less_or_nan`), unlike topk's smallest.
            let first_nan = row.iter().position(|x| x.is_nan());
            let want = first_nan.unwrap_or(torch_order(row, false)[0]);
            assert_eq!(amin[r] as usize, want, "argmin row {r}");
        }
        let o = run_case_with_inputs(
            &source(),
            "argmax_last",
            &dims(7, 7),
            profile,
            0,
            &[("x", x.clone())],
            None,
        );
        assert_eq!(o, Outcome::Pass, "{}", o.message());
        // Hand-checked values for the rows torch documents least.
        assert_eq!(amax, [1, 2, 0, 0, 2, 0, 0]);
        assert_eq!(amin, [3, 2, 0, 4, 1, 0, 0]);
    }
}

#[test]
fn topk_follows_torch_on_ties_nan_inf_and_signed_zeros_with_the_elements_bits() {
    let rows = special_rows();
    let x = f32_input(&rows);
    for profile in Profile::ALL {
        let out = run(
            "topk_all",
            rows.len() as u64,
            7,
            profile,
            std::slice::from_ref(&x),
        );
        for (o, largest) in [(0, true), (2, false)] {
            let (vals, idx) = (out[o].to_f32_vec(), out[o + 1].to_i32_vec());
            for (r, row) in rows.iter().enumerate() {
                let want = torch_order(row, largest);
                for t in 0..7 {
                    let (got_i, got_v) = (idx[r * 7 + t] as usize, vals[r * 7 + t]);
                    assert_eq!(got_i, want[t], "largest={largest} row {r} position {t}");
                    // The element's bits (a NaN's payload is the kernel's canonical one).
                    let w = row[want[t]];
                    assert!(
                        got_v.to_bits() == w.to_bits() || (got_v.is_nan() && w.is_nan()),
                        "largest={largest} row {r} position {t}: {got_v:?}, want {w:?}"
                    );
                }
            }
        }
        // The reference agrees with the same inputs.
        let o = run_case_with_inputs(
            &source(),
            "topk_all",
            &dims(7, 7),
            profile,
            0,
            &[("x", x.clone())],
            None,
        );
        assert_eq!(o, Outcome::Pass, "{}", o.message());
    }
}

#[test]
fn logsumexp_gives_torchs_special_cases() {
    let rows = special_rows();
    let x = f32_input(&rows);
    let out = run(
        "lse",
        rows.len() as u64,
        7,
        Profile::Exact,
        std::slice::from_ref(&x),
    );
    let l = out[0].to_f32_vec();
    let close = |a: f32, b: f64| (a as f64 - b).abs() <= 1e-6 * b.abs().max(1.0);
    // log(e^1 + 3e^3 + e^-2 + 1 + e^1)
    let r0 = (2.0 * 1f64.exp() + 3.0 * 3f64.exp() + (-2f64).exp() + 1.0).ln();
    assert!(close(l[0], r0), "{} vs {r0}", l[0]);
    assert!(l[1].is_nan(), "NaN in the row");
    assert_eq!(l[2], f32::NEG_INFINITY, "all -inf");
    let r3 = (6.0 + (-1f64).exp()).ln();
    assert!(close(l[3], r3), "{} vs {r3}", l[3]);
    assert_eq!(l[4], f32::INFINITY, "+inf in the row");
    let r5 = 5.0 + 7f64.ln();
    assert!(close(l[5], r5), "{} vs {r5}", l[5]);
    assert!(l[6].is_nan());
    for profile in Profile::ALL {
        let o = run_case_with_inputs(
            &source(),
            "lse",
            &dims(7, 7),
            profile,
            0,
            &[("x", x.clone())],
            None,
        );
        assert_eq!(o, Outcome::Pass, "{}", o.message());
    }
}

/// Cumsum in the order `docs/numerics.md` documents, for a row of f32: chunks of 32
/// (rows up to 262144), each total from -0 left to right, the totals' exclusive prefix
/// from -0 left to right, each output its chunk's prefix plus the chunk up to it.
fn documented_cumsum(row: &[f32]) -> Vec<f32> {
    let chunk = 32;
    let totals: Vec<f32> = row
        .chunks(chunk)
        .map(|c| c.iter().fold(-0.0f32, |a, &x| a + x))
        .collect();
    let mut prefix = Vec::new();
    let mut run = -0.0f32;
    for t in &totals {
        prefix.push(run);
        run += t;
    }
    let mut out = Vec::new();
    for (c, p) in row.chunks(chunk).zip(prefix) {
        let mut acc = p;
        for &x in c {
            acc += x;
            out.push(acc);
        }
    }
    out
}

#[test]
fn cumsum_has_the_documented_order_and_the_same_bits_at_any_batch() {
    for d in [1u64, 31, 32, 33, 1000, 4099] {
        let t = 3u64;
        let x = Tensor::random(TensorType::new(DType::F32, vec![t, d]), d);
        for profile in Profile::ALL {
            let out = run("cumsum_f32", t, d, profile, std::slice::from_ref(&x));
            let got = out[0].to_f32_vec();
            let xs = x.to_f32_vec();
            for r in 0..t as usize {
                let row = &xs[r * d as usize..(r + 1) * d as usize];
                let want = documented_cumsum(row);
                let g = &got[r * d as usize..(r + 1) * d as usize];
                for (i, (a, b)) in g.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "D={d} row {r} element {i}");
                }
            }
            // The first row alone: the same bits (batch invariance).
            let one = Tensor::from_f32(DType::F32, vec![1, d], &xs[..d as usize]);
            let alone = run("cumsum_f32", 1, d, profile, &[one]);
            let a = alone[0].to_f32_vec();
            assert!(
                a.iter()
                    .zip(&got[..d as usize])
                    .all(|(p, q)| p.to_bits() == q.to_bits()),
                "D={d} {}: row 0 differs alone",
                profile.name()
            );
        }
    }
}

#[test]
fn cumsum_of_integers_is_exact_and_i32_wraps() {
    // Integers below 2^24 sum exactly in f32: the cumsum is the exact prefix.
    let d = 70u64;
    let xs: Vec<f32> = (0..d).map(|i| (i as f32) - 20.0).collect();
    let x = Tensor::from_f32(DType::F32, vec![1, d], &xs);
    let out = run("cumsum_f32", 1, d, Profile::Exact, &[x]);
    let mut s = 0.0f64;
    for (i, v) in out[0].to_f32_vec().iter().enumerate() {
        s += xs[i] as f64;
        assert_eq!(*v as f64, s, "element {i}");
    }
    // i32: x * 10^8 then the running sum, wrapping past 2^31 as the kernels add.
    let xi: Vec<i32> = vec![10, 20, -5, 7, 30];
    let x = Tensor::from_i32(vec![1, 5], &xi);
    let out = run("cumsum_int", 1, 5, Profile::Exact, &[x]);
    let mut acc = 0i32;
    let want: Vec<i32> = xi
        .iter()
        .map(|&v| {
            acc = acc.wrapping_add(v.wrapping_mul(100_000_000));
            acc
        })
        .collect();
    assert_eq!(out[0].to_i32_vec(), want);
}

#[test]
fn argmax_of_an_int_tensor_and_along_the_first_axis() {
    let xi: Vec<i32> = vec![3, -1, 3, 7, 7, 0, i32::MIN, i32::MIN, i32::MAX];
    let x = Tensor::from_i32(vec![3, 3], &xi);
    let out = run("argmax_int", 3, 3, Profile::Exact, &[x]);
    assert_eq!(out[0].to_i32_vec(), [0, 0, 2]);
    assert_eq!(out[1].to_i32_vec(), [1, 2, 0]);
    // bf16 [3, 2] along axis 0.
    let xs = [1.0f32, -3.0, 4.0, -3.0, 4.0, 8.0];
    let x = Tensor::from_f32(DType::Bf16, vec![3, 2], &xs);
    let out = run("argmax_first_axis", 3, 2, Profile::Exact, &[x]);
    assert_eq!(out[0].to_i32_vec(), [1, 2]);
    assert_eq!(out[1].to_i32_vec(), [0, 0]);
}

/// The random-program generator draws every one of these ops (`tessel fuzz` judges them).
#[test]
fn the_fuzzer_generates_every_op_along_an_axis() {
    let cfg = tessel_fuzz::gen::Config::default();
    let mut seen = BTreeMap::new();
    // 1000 seeds: with the other ops of issue 17 in the mix, `largest: false` came up in
    // none of the first 300.
    for seed in 0..1000 {
        let src = tessel_fuzz::gen::generate(seed, &cfg).source(&[]);
        for op in [
            "argmax(",
            "argmin(",
            "topk(",
            "cumsum(",
            "logsumexp(",
            "largest: false",
        ] {
            if src.contains(op) {
                *seen.entry(op).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(seen.len(), 6, "drawn: {seen:?}");
}
