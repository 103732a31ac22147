//! The elementwise ops of issue 17 (tests/programs/elementwise_ops.tsl): every step at odd
//! shapes (M = 1, sizes that are not a multiple of any tile) in every profile on the CPU
//! executor, judged by the dtype-following reference; hand-picked values (NaN, ±inf, -0,
//! ties at .5, huge values, negative operands, zero divisors, i32 edges) against what
//! PyTorch gives; and `gelu(x @ w^T + b)` compiled to one GEMM with its epilogue.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case, Outcome};
use tessel_ir::DType;
use tessel_passes::{compile, Options, Profile};
use tessel_ref::Tensor;

fn source() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/elementwise_ops.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/elementwise_ops.tsl")
}

const STEPS: [&str; 16] = [
    "erf_f32",
    "gelu_f32",
    "gelu_tanh_f32",
    "gelu_bf16",
    "gelu_tanh_bf16",
    "gelu_epilogue",
    "relu_clamp",
    "clamp_i32",
    "clamp_bf16",
    "rounding_f32",
    "rounding_bf16",
    "rounding_i32",
    "divmod_i32",
    "divmod_f32",
    "fmod_f32",
    "divmod_bf16",
];

#[test]
fn every_step_passes_the_reference_at_odd_shapes_in_every_profile() {
    let src = source();
    let mut failures = Vec::new();
    for step in STEPS {
        for (t, d, k) in [(1, 7, 5), (13, 33, 40), (3, 130, 17)] {
            for profile in Profile::ALL {
                let dims: Vec<(String, u64)> = [("T", t), ("D", d), ("K", k)]
                    .iter()
                    .map(|(a, b)| (a.to_string(), *b))
                    .collect();
                for seed in [1, 2] {
                    let o = run_case(&src, step, &dims, profile, seed, None);
                    if o != Outcome::Pass {
                        failures.push(format!(
                            "{step} T={t} D={d} K={k} {} seed {seed}: {}: {}",
                            profile.name(),
                            o.kind(),
                            o.message()
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Compiles `src`'s step `step` (dims `T`, `D` from the value count) and runs it on the
/// executor with `inputs`, returning its one output.
fn run(src: &str, step: &str, dims: &[(&str, u64)], inputs: &[Tensor]) -> Tensor {
    let module = tessel_syntax::parse(src).expect("parses");
    let d: BTreeMap<String, u64> = dims.iter().map(|(a, b)| (a.to_string(), *b)).collect();
    let g = tessel_passes::check::run(&module, step, &d).expect("checks");
    let opts = Options {
        profile: Profile::Exact,
        verify: true,
        ..Default::default()
    };
    let p = compile(&g, &opts).expect("compiles").program;
    let mut out = tessel_ref::run_program(&p, inputs).expect("runs");
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_f32(DType::F32, vec![v.len() as u64], v)
}

/// Bitwise equality, any NaN equal to any NaN.
fn same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what}[{i}]: got {g:e} ({:#010x}), want {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

fn unary_f32(body: &str, xs: &[f32]) -> Vec<f32> {
    let src = format!("step s(x: f32[N]) -> f32[N] {{ {body} }}");
    run(&src, "s", &[("N", xs.len() as u64)], &[f32s(xs)]).to_f32_vec()
}

fn binary_f32(body: &str, xs: &[f32], ys: &[f32]) -> Vec<f32> {
    let src = format!("step s(x: f32[N], y: f32[N]) -> f32[N] {{ {body} }}");
    run(&src, "s", &[("N", xs.len() as u64)], &[f32s(xs), f32s(ys)]).to_f32_vec()
}

fn binary_i32(body: &str, xs: &[i32], ys: &[i32]) -> Vec<i32> {
    let src = format!("step s(x: i32[N], y: i32[N]) -> i32[N] {{ {body} }}");
    let n = xs.len() as u64;
    run(
        &src,
        "s",
        &[("N", n)],
        &[Tensor::from_i32(vec![n], xs), Tensor::from_i32(vec![n], ys)],
    )
    .to_i32_vec()
}

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

#[test]
fn rounding_functions_are_exact_at_ties_zeros_and_huge_values() {
    let xs = [
        0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.0, 0.0, -0.3, 0.3, 1e30, -1e30, 8388609.0,
        16777216.0, INF, -INF, NAN, 1e-45, -1e-45, 2.7, -2.7,
    ];
    let floor = [
        0.0, 1.0, 2.0, -1.0, -2.0, -3.0, 0.0, -0.0, 0.0, -1.0, 0.0, 1e30, -1e30, 8388609.0,
        16777216.0, INF, -INF, NAN, 0.0, -1.0, 2.0, -3.0,
    ];
    let ceil = [
        1.0, 2.0, 3.0, -0.0, -1.0, -2.0, 1.0, -0.0, 0.0, -0.0, 1.0, 1e30, -1e30, 8388609.0,
        16777216.0, INF, -INF, NAN, 1.0, -0.0, 3.0, -2.0,
    ];
    // torch.round: half to even; -0.5 gives -0.
    let round = [
        0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, -0.0, 0.0, -0.0, 0.0, 1e30, -1e30, 8388609.0,
        16777216.0, INF, -INF, NAN, 0.0, -0.0, 3.0, -3.0,
    ];
    let trunc = [
        0.0, 1.0, 2.0, -0.0, -1.0, -2.0, 0.0, -0.0, 0.0, -0.0, 0.0, 1e30, -1e30, 8388609.0,
        16777216.0, INF, -INF, NAN, 0.0, -0.0, 2.0, -2.0,
    ];
    same(&unary_f32("floor(x)", &xs), &floor, "floor");
    same(&unary_f32("ceil(x)", &xs), &ceil, "ceil");
    same(&unary_f32("round(x)", &xs), &round, "round");
    same(&unary_f32("trunc(x)", &xs), &trunc, "trunc");
}

#[test]
fn erf_gelu_relu_at_special_values() {
    let xs = [0.0, -0.0, INF, -INF, NAN, 1e-40, -3.0, 10.0];
    let erf = unary_f32("erf(x)", &xs);
    same(
        &erf[..5],
        &[0.0, -0.0, 1.0, -1.0, NAN],
        "erf at 0, -0, inf, -inf, NaN",
    );
    // A denormal: 2/sqrt(pi)·x within one denormal ulp.
    let want = std::f64::consts::FRAC_2_SQRT_PI * f64::from(1e-40f32);
    assert!(
        (f64::from(erf[5]) - want).abs() <= 2f64.powi(-149),
        "{:e}",
        erf[5]
    );
    assert_eq!(erf[7], 1.0);
    // gelu(+inf) = inf, gelu(-inf) = -inf·0 = NaN in torch's formula too.
    let g = unary_f32("gelu(x)", &xs);
    same(&g[..5], &[0.0, -0.0, INF, NAN, NAN], "gelu");
    let r = unary_f32("relu(x)", &[-1.0, -0.0, 2.0, NAN, -INF, INF]);
    same(&r, &[0.0, 0.0, 2.0, NAN, 0.0, INF], "relu");
}

#[test]
fn clamp_propagates_nan_and_gives_hi_when_lo_exceeds_it() {
    let xs = [-5.0, 0.5, 5.0, NAN, 1.0, -0.0];
    let lo = [0.0, 0.0, 0.0, 0.0, NAN, 2.0];
    let got = binary_f32("clamp(x, y, 1.0)", &xs, &lo);
    // The last: lo = 2 > hi = 1 gives hi.
    same(&got, &[0.0, 0.5, 1.0, NAN, NAN, 1.0], "clamp");
    let m = binary_f32(
        "maximum(x, y) + minimum(x, y) * 0.0",
        &[1.0, NAN],
        &[2.0, 0.0],
    );
    same(&m, &[2.0, NAN], "maximum/minimum");
}

#[test]
fn float_floor_divide_remainder_and_fmod_match_torch() {
    let a = [
        7.0, -7.0, 7.0, -7.0, 7.5, -7.5, -4.0, 4.0, 1.0, -1.0, 0.0, 5.0, INF, 3.0, 1e-30,
    ];
    let b = [
        2.0, 2.0, -2.0, -2.0, 2.0, 2.0, 2.0, -2.0, 0.0, 0.0, 0.0, INF, 2.0, NAN, 1.0,
    ];
    // torch.floor_divide / torch.remainder / torch.fmod on these f32 tensors.
    let fd = [
        3.0, -4.0, -4.0, 3.0, 3.0, -4.0, -2.0, -2.0, INF, -INF, NAN, 0.0, NAN, NAN, 0.0,
    ];
    let rem = [
        1.0, 1.0, -1.0, -1.0, 1.5, 0.5, -0.0, 0.0, NAN, NAN, NAN, 5.0, NAN, NAN, 1e-30,
    ];
    let fm = [
        1.0, -1.0, 1.0, -1.0, 1.5, -1.5, -0.0, 0.0, NAN, NAN, NAN, 5.0, NAN, NAN, 1e-30,
    ];
    same(
        &binary_f32("floor_divide(x, y)", &a, &b),
        &fd,
        "floor_divide",
    );
    same(&binary_f32("remainder(x, y)", &a, &b), &rem, "remainder");
    same(&binary_f32("x % y", &a, &b), &rem, "%");
    same(&binary_f32("fmod(x, y)", &a, &b), &fm, "fmod");
    // remainder(-1e-30, 1) = 1 - 1e-30 rounded: 1.0 (torch and Python alike).
    same(
        &binary_f32("x % y", &[-1e-30], &[1.0]),
        &[1.0],
        "rounded remainder",
    );
    // Exact fmod where the quotient is huge: 2^100 mod 3 = 1 (2 = -1 mod 3, even power).
    same(
        &binary_f32("fmod(x, y)", &[2f32.powi(100), f32::MAX], &[3.0, 1e-45]),
        &[1.0, 0.0],
        "huge quotients",
    );
}

#[test]
fn integer_floor_divide_and_remainder_have_pythons_signs() {
    let a = [7, -7, 7, -7, 6, -6, 5, -5, 0, i32::MIN, i32::MIN, i32::MAX];
    let b = [2, 2, -2, -2, 3, 3, 0, 0, -3, -1, 1, -1];
    assert_eq!(
        binary_i32("floor_divide(x, y)", &a, &b),
        [3, -4, -4, 3, 2, -2, 0, 0, 0, i32::MIN, i32::MIN, -i32::MAX]
    );
    assert_eq!(
        binary_i32("remainder(x, y)", &a, &b),
        [1, 1, -1, -1, 0, 0, 5, -5, 0, 0, 0, 0]
    );
    assert_eq!(
        binary_i32("x % y", &a, &b),
        binary_i32("remainder(x, y)", &a, &b)
    );
    assert_eq!(
        binary_i32("fmod(x, y)", &a, &b),
        [1, -1, 1, -1, 0, 0, 5, -5, 0, 0, 0, 0]
    );
    // floor and friends on i32 are the value itself.
    assert_eq!(
        binary_i32("floor(x) + round(y) * 0 + trunc(ceil(x)) - x", &a, &b),
        a.to_vec()
    );
}

/// `gelu(x @ w^T + b)` is one GEMM whose epilogue holds the bias, the GELU and the
/// rounding, in every profile.
#[test]
fn gelu_fuses_into_the_gemm_epilogue() {
    let src = source();
    let module = tessel_syntax::parse(&src).expect("parses");
    for profile in Profile::ALL {
        let d: BTreeMap<String, u64> = [("T", 64), ("D", 96), ("K", 128)]
            .iter()
            .map(|(a, b)| (a.to_string(), *b))
            .collect();
        let g = tessel_passes::check::run(&module, "gelu_epilogue", &d).expect("checks");
        let opts = Options {
            profile,
            verify: true,
            ..Default::default()
        };
        let p = compile(&g, &opts).expect("compiles").program;
        // One GEMM (in exact a split-K GEMM and its fixed-order sum, which runs the
        // epilogue, as for silu) and no elementwise kernel after it.
        let schedules: Vec<&String> = p.kernels.values().map(|k| &k.schedule).collect();
        let want = if profile == Profile::Exact { 2 } else { 1 };
        assert!(
            schedules.len() == want && schedules.iter().all(|s| !s.starts_with("elementwise")),
            "{}: {schedules:?}",
            profile.name()
        );
    }
}
