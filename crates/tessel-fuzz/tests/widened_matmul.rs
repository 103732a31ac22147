//! Matmuls of widening casts of 16-bit tensors (tests/programs/widened_matmul.tsl:
//! `f32(h) @ f32(w)^T`, plain, transposed on either side, the cast outside the transpose,
//! batched, a computed operand, the f32 copy also returned) at shapes with tails — M = 1
//! and 7 (the GEMVs), 64, K = 40 and 520 (not multiples of any slice), odd N, K = 2048 with
//! one output tile (split-K) — in every profile:
//!
//! - the executor's outputs are judged by the dtype-following reference (`tessel check
//!   --cpu`);
//! - the program reads the 16-bit tensors in place: no kernel reads an f32 tensor, none is
//!   written but the step's outputs and split-K partials, and no TF32 mma (tensor cores take
//!   the 16-bit values);
//! - in the `exact` profile the outputs are bit for bit those of the twin step `X_f32`,
//!   which takes the same values as f32 inputs — the f32 matmul the program computed when
//!   the casts were materialised — with the same kernels' reduction orders.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case, Outcome};
use tessel_ir::kernel::{BufferRole, ParamKind, Program};
use tessel_ir::DType;
use tessel_passes::{check, compile, Options, Profile};
use tessel_ref::{run_program, Tensor};

fn source() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/widened_matmul.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/widened_matmul.tsl")
}

/// The steps with widened operands; each has a twin `<step>_f32`.
const STEPS: [&str; 7] = [
    "linear_bias",
    "linear",
    "plain",
    "both_t",
    "cast_of_t",
    "batched",
    "computed",
];

/// (M, K, N).
const SHAPES: [(u64, u64, u64); 10] = [
    (1, 40, 7),
    (1, 520, 33),
    (7, 40, 5),
    (7, 520, 33),
    // The tensor-core GEMV (fast, M ≥ 2, K a multiple of 8), one and two fragments.
    (4, 64, 20),
    (13, 264, 37),
    (64, 40, 64),
    (64, 520, 17),
    (70, 100, 130),
    // One output tile over a long K: split-K in exact and fast.
    (64, 2048, 16),
];

fn compile_step(src: &str, step: &str, (m, k, n): (u64, u64, u64), profile: Profile) -> Program {
    let module = tessel_syntax::parse(src).expect("parse");
    let dims: BTreeMap<String, u64> = [("M", m), ("K", k), ("N", n)]
        .iter()
        .map(|(d, v)| (d.to_string(), *v))
        .collect();
    let g = check::run(&module, step, &dims).expect("check");
    let opts = Options {
        verify: true,
        profile,
        ..Default::default()
    };
    compile(&g, &opts)
        .unwrap_or_else(|e| panic!("{step} {m}×{k}×{n} {}: {e}", profile.name()))
        .program
}

/// The f32 tensors in memory: every buffer a kernel reads or writes, by name, except the
/// step's outputs and split-K partials.
fn f32_tensors(p: &Program) -> Vec<String> {
    let mut found: Vec<String> = p
        .buffers
        .values()
        .filter(|b| b.ty.dtype == DType::F32)
        .filter(|b| b.role != BufferRole::Output && !b.name.ends_with("_split_k"))
        .map(|b| b.name.clone())
        .collect();
    // A kernel reading an f32 tensor other than split-K partials or an output.
    for k in p.kernels.values() {
        for prm in &k.params {
            if let ParamKind::Ptr {
                dtype: DType::F32,
                writes: false,
            } = prm.kind
            {
                if !prm.name.starts_with("scratch") {
                    found.push(format!("{} reads {}", k.name, prm.name));
                }
            }
        }
    }
    found
}

#[test]
fn widened_matmuls_pass_the_reference_reading_16_bit_tensors() {
    let src = source();
    for &profile in &Profile::ALL {
        for &shape in &SHAPES {
            let (m, k, n) = shape;
            for step in STEPS {
                let what = format!("{step} M={m} K={k} N={n} {}", profile.name());
                let p = compile_step(&src, step, shape, profile);
                assert_eq!(f32_tensors(&p), Vec::<String>::new(), "{what}");
                let tc = p.tensor_cores();
                assert!(!tc.tf32, "{what}: a TF32 mma");
                if profile == Profile::Invariant {
                    assert!(tc.mma, "{what}: no 16-bit mma in the invariant profile");
                }
                let dims: Vec<(String, u64)> = [("M", m), ("K", k), ("N", n)]
                    .iter()
                    .map(|(d, v)| (d.to_string(), *v))
                    .collect();
                for seed in [1, 2] {
                    let o = run_case(&src, step, &dims, profile, seed, None);
                    assert_eq!(o, Outcome::Pass, "{what} seed {seed}");
                }
            }
        }
    }
}

/// The f32 copy also returned: written by its own kernel, while the matmul reads the bf16
/// weight; both outputs judged.
#[test]
fn a_returned_f32_copy_is_written_but_not_read() {
    let src = source();
    for &profile in &Profile::ALL {
        for shape in [(1, 40, 7), (7, 520, 33), (64, 40, 64)] {
            let (m, k, n) = shape;
            let what = format!("cast_out M={m} K={k} N={n} {}", profile.name());
            let p = compile_step(&src, "cast_out", shape, profile);
            assert_eq!(f32_tensors(&p), Vec::<String>::new(), "{what}");
            let dims: Vec<(String, u64)> = [("M", m), ("K", k), ("N", n)]
                .iter()
                .map(|(d, v)| (d.to_string(), *v))
                .collect();
            let o = run_case(&src, "cast_out", &dims, profile, 1, None);
            assert_eq!(o, Outcome::Pass, "{what}");
        }
    }
}

/// The schedules of the kernels a launch runs: the schedule itself, or, for a launch
/// `merge-launches` made (`one launch of N kernels; CTAs a..b: S1; CTAs b..c: S2`), each
/// part's.
fn launch_parts(schedule: &str) -> Vec<String> {
    let Some(rest) = schedule.strip_prefix("one launch of ") else {
        return vec![schedule.to_string()];
    };
    // Where each part starts: `CTAs a..b: ` (digits, `..`, digits, `: `).
    let range_at = |i: usize| -> Option<usize> {
        let t = rest[i..].strip_prefix("CTAs ")?;
        let (a, t) = t.split_once("..")?;
        let (b, _) = t.split_once(": ")?;
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
        (digits(a) && digits(b)).then(|| i + "CTAs ".len() + a.len() + 2 + b.len() + 2)
    };
    let starts: Vec<(usize, usize)> = rest
        .match_indices("CTAs ")
        .filter_map(|(i, _)| range_at(i).map(|body| (i, body)))
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(j, &(_, body))| {
            let end = starts.get(j + 1).map_or(rest.len(), |&(next, _)| next);
            rest[body..end].trim_end_matches("; ").to_string()
        })
        .collect()
}

/// `exact`: the widened program's outputs are the f32 program's bit for bit, through the
/// same schedules (each kernel's reduction order printed in its schedule), with fewer
/// kernels (no cast kernels) and no f32 copies.
#[test]
fn exact_profile_bits_are_the_f32_programs() {
    let src = source();
    let mut steps: Vec<&str> = STEPS.to_vec();
    steps.push("cast_out");
    for &shape in &SHAPES {
        let (m, k, n) = shape;
        for &step in &steps {
            let what = format!("{step} M={m} K={k} N={n}");
            let wide = compile_step(&src, step, shape, Profile::Exact);
            let twin = compile_step(&src, &format!("{step}_f32"), shape, Profile::Exact);
            // The matmul kernels' schedules (tile and reduction order) are the f32 ones,
            // each part of a merged launch on its own (`one launch of 2 kernels; CTAs 0..3:
            // elementwise ...; CTAs 3..4: simt ...`: the cast kernels the twin has and the
            // widened program has not change which kernels a tiny GEMM rides with).
            let orders = |p: &Program| -> Vec<String> {
                let mut parts: Vec<String> = p
                    .kernels
                    .values()
                    .flat_map(|k| launch_parts(&k.schedule))
                    .filter(|s| !s.starts_with("elementwise"))
                    .collect();
                parts.sort();
                parts
            };
            let (wo, to) = (orders(&wide), orders(&twin));
            assert!(!wo.is_empty(), "{what}: no matmul kernel");
            assert_eq!(wo, to, "{what}: schedules differ");
            assert_eq!(f32_tensors(&wide), Vec::<String>::new(), "{what}");
            for seed in [1u64, 2] {
                let inputs: Vec<Tensor> = wide
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(i, (_, b))| {
                        Tensor::random(wide.buffers[*b].ty.clone(), 100 * seed + i as u64)
                    })
                    .collect();
                // The twin's inputs: the same values, f32 where it takes f32.
                let twin_inputs: Vec<Tensor> = twin
                    .inputs
                    .iter()
                    .zip(&inputs)
                    .map(|((_, b), x)| {
                        let ty = &twin.buffers[*b].ty;
                        if ty.dtype == x.ty.dtype {
                            x.clone()
                        } else {
                            assert_eq!(ty.dtype, DType::F32);
                            Tensor::from_f32(DType::F32, ty.shape.0.clone(), &x.to_f32_vec())
                        }
                    })
                    .collect();
                let a = run_program(&wide, &inputs).expect("executor");
                let b = run_program(&twin, &twin_inputs).expect("executor");
                for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                    assert_eq!(x.ty, y.ty, "{what}: output {i}");
                    assert!(x.data == y.data, "{what}: output {i} differs (seed {seed})");
                }
            }
        }
    }
}
