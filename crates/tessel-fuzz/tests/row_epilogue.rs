//! The row epilogue (fuse rule 8; tests/programs/row_epilogue.tsl): a projection's heads
//! normalised and rotated in the GEMM's epilogue. At shapes with tails (T of 1, 7, 17, 63,
//! 129; heads of 1 to 9; head dims 16 to 256; K not a multiple of the 64-wide slice):
//! - it applies exactly where it should: `invariant` and `fast` with T > 16, never in
//!   `exact`, at decode's T ≤ 16, or for the near misses;
//! - the epilogue's output has the bits of the row kernel's reading the projection from
//!   memory (same mma accumulators, same reduction order);
//! - every step passes the dtype-following reference on the CPU executor in every profile.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case, Outcome};
use tessel_passes::{compile, Options, Profile};
use tessel_ref::exec::run_program;
use tessel_ref::Tensor;

fn source() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/row_epilogue.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/row_epilogue.tsl")
}

fn dims(t: u64, h: u64, d: u64, k: u64) -> BTreeMap<String, u64> {
    // N: the projection's width for the [T, H, D] heads; M: for `heads_first`'s [H, T, D].
    [
        ("T", t),
        ("H", h),
        ("D", d),
        ("K", k),
        ("N", h * d),
        ("M", t * d),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// (T, H, D, K): tails of the 64-row tile and the 16-row fragment, one head and odd head
/// counts, every fusable head dim, K below and past a slice.
const SHAPES: [(u64, u64, u64, u64); 7] = [
    (1, 8, 64, 40),
    (7, 3, 128, 24),
    (17, 1, 16, 16),
    (63, 3, 16, 24),
    (129, 2, 128, 72),
    (40, 9, 32, 40),
    (33, 1, 256, 16),
];

fn compiled(
    src: &str,
    step: &str,
    d: &BTreeMap<String, u64>,
    profile: Profile,
) -> tessel_ir::kernel::Program {
    let m = tessel_syntax::parse(src).expect("parses");
    let g = tessel_passes::check::run(&m, step, d).expect("checks");
    let opts = Options {
        profile,
        verify: true,
        ..Default::default()
    };
    compile(&g, &opts).expect("compiles").program
}

/// Whether a kernel of the step computes whole rows in its GEMM's epilogue.
fn row_epilogue(src: &str, step: &str, d: &BTreeMap<String, u64>, profile: Profile) -> bool {
    compiled(src, step, d, profile)
        .kernels
        .values()
        .any(|k| k.schedule.contains("the epilogue's rows"))
}

const FUSING: [&str; 3] = ["norm_rope", "bias_rope", "two_reductions_f16"];
const NEAR_MISSES: [&str; 5] = [
    "norm_rope_kept",
    "bias_rope_kept",
    "other_head",
    "heads_first",
    "f32_norm",
];

#[test]
fn the_row_epilogue_applies_where_the_gemm_holds_whole_rows_and_nowhere_else() {
    let src = source();
    let mut wrong = Vec::new();
    for (t, h, dd, k) in SHAPES {
        let d = dims(t, h, dd, k);
        for step in FUSING.iter().chain(&NEAR_MISSES) {
            for profile in Profile::ALL {
                // An f32 result fuses in `fast` only (the invariant profile's order). One
                // head (d = N) is no row epilogue: `[T, 1, N]` holds the GEMM's rows as they
                // are (`Graph::matmul_layout`), the layout of a batched GEMM's `[B, 1, N]`,
                // so rule 8 needs d < N.
                let fuses =
                    FUSING.contains(step) || (*step == "f32_norm" && profile == Profile::Fast);
                let want = fuses && profile != Profile::Exact && t > 16 && h > 1;
                if row_epilogue(&src, step, &d, profile) != want {
                    wrong.push(format!(
                        "{step} T={t} H={h} D={dd} K={k} {}: row epilogue {}expected",
                        profile.name(),
                        if want { "" } else { "not " }
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The fused step's output equals, bit for bit, that of the same step with the projection
/// kept in memory (a row kernel computing the heads): the epilogue rounds each accumulator
/// to the matmul's dtype as the store does and forms each head's reductions in the row
/// kernel's order. A mutation that drops a butterfly step or reads the rotated half from
/// the wrong column fails here.
#[test]
fn the_row_epilogue_gives_the_bits_of_the_row_kernel() {
    let src = source();
    for (t, h, dd, k) in SHAPES.into_iter().filter(|s| s.0 > 16) {
        let d = dims(t, h, dd, k);
        for profile in [Profile::Invariant, Profile::Fast] {
            for (fused, kept) in [
                ("norm_rope", "norm_rope_kept"),
                ("bias_rope", "bias_rope_kept"),
            ] {
                let run = |step: &str| -> Vec<u8> {
                    let p = compiled(&src, step, &d, profile);
                    let inputs: Vec<Tensor> = p
                        .inputs
                        .iter()
                        .enumerate()
                        .map(|(i, (name, buf))| {
                            let ty = p.buffers[*buf].ty.clone();
                            if name == "pos" {
                                // Positions near the end of Qwen's 131072-token context.
                                let n = ty.shape.numel() as i32;
                                let pos: Vec<i32> = (0..n).map(|j| 131000 + 3 * j).collect();
                                Tensor::from_i32(ty.shape.0.clone(), &pos)
                            } else {
                                Tensor::random(ty, 700 + i as u64)
                            }
                        })
                        .collect();
                    run_program(&p, &inputs).expect("runs")[0].data.clone()
                };
                assert_eq!(
                    run(fused),
                    run(kept),
                    "{fused} T={t} H={h} D={dd} K={k} {}",
                    profile.name()
                );
            }
        }
    }
}

#[test]
fn row_epilogue_steps_pass_the_reference_in_every_profile() {
    let src = source();
    let mut failures = Vec::new();
    for (t, h, dd, k) in SHAPES {
        let d: Vec<(String, u64)> = dims(t, h, dd, k).into_iter().collect();
        for step in FUSING.iter().chain(&NEAR_MISSES) {
            for profile in Profile::ALL {
                let o = run_case(&src, step, &d, profile, 3, None);
                if o != Outcome::Pass {
                    failures.push(format!(
                        "{step} {d:?} {}: {}: {}",
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
