//! A tensor-core GEMM's staged epilogue that calls the math library runs as a loop over
//! its passes instead of unrolled (lower/epilogue.rs: an unrolled silu made the gate
//! GEMM's kernel 15× larger and 2.8× slower). tests/programs/gemm_math_epilogue.tsl at
//! shapes with tails (M, N, K not multiples of the tile; a partial last pass) in every
//! profile, judged by the dtype-following reference on the CPU executor; and the loop is
//! there exactly when the epilogue calls the math library.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case, Outcome};
use tessel_ir::kernel::Stmt;
use tessel_passes::{compile, Options, Profile};

fn source() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/programs/gemm_math_epilogue.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/gemm_math_epilogue.tsl")
}

fn dims(m: u64, k: u64, n: u64) -> Vec<(String, u64)> {
    [("M", m), ("K", k), ("N", n)]
        .iter()
        .map(|(a, b)| (a.to_string(), *b))
        .collect()
}

const SHAPES: [(u64, u64, u64); 4] = [(129, 72, 260), (64, 64, 64), (200, 40, 516), (17, 136, 100)];

#[test]
fn math_epilogues_pass_the_reference_in_every_profile() {
    let src = source();
    let mut failures = Vec::new();
    for step in ["gate", "exp_bias", "plain"] {
        for (m, k, n) in SHAPES {
            for profile in Profile::ALL {
                let o = run_case(&src, step, &dims(m, k, n), profile, 3, None);
                if o != Outcome::Pass {
                    failures.push(format!(
                        "{step} M={m} K={k} N={n} {}: {}: {}",
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

fn count_loops(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::For { body, .. } => 1 + count_loops(body),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => count_loops(then_body) + count_loops(else_body),
            _ => 0,
        })
        .sum()
}

/// The loops in the one tensor-core kernel of `step`, and its statement count.
fn mma_kernel_loops(step: &str, (m, k, n): (u64, u64, u64)) -> usize {
    let src = source();
    let module = tessel_syntax::parse(&src).expect("parses");
    let d: BTreeMap<String, u64> = dims(m, k, n).into_iter().collect();
    let g = tessel_passes::check::run(&module, step, &d).expect("checks");
    let opts = Options {
        profile: Profile::Fast,
        verify: true,
        ..Default::default()
    };
    let p = compile(&g, &opts).expect("compiles").program;
    let mut mma = p
        .kernels
        .values()
        .filter(|k| k.schedule.starts_with("mma {") && k.schedule.contains("staged"));
    let k = mma
        .next()
        .expect("a tensor-core kernel with a staged epilogue");
    count_loops(&k.body)
}

#[test]
fn the_staged_epilogue_loops_only_where_it_calls_the_math_library() {
    let shape = (256, 64, 512);
    let plain = mma_kernel_loops("plain", shape);
    assert_eq!(
        mma_kernel_loops("gate", shape),
        plain + 1,
        "silu's epilogue"
    );
    assert_eq!(
        mma_kernel_loops("exp_bias", shape),
        plain + 1,
        "exp's epilogue"
    );
}
