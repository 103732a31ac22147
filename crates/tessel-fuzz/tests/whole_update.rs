//! Tensors updated whole in place (tests/programs/whole_update.tsl): every step runs on the
//! CPU executor in every profile and is judged by the dtype-following reference, the updated
//! tensors included. The values read the tensor they overwrite at the element written and
//! elsewhere (a transpose, a row mean, a shift, a gather, a matmul); the sizes give the
//! update kernels several CTAs, so an element read after another CTA overwrote it — a
//! reading of the tensor left inside the update's kernel — gives other bits and fails.

use tessel_fuzz::run::{run_case_with_inputs, Outcome};
use tessel_passes::Profile;
use tessel_ref::Tensor;

fn source() -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/programs/whole_update.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/whole_update.tsl")
}

#[test]
fn whole_updates_read_their_tensor_only_where_they_write_it() {
    let src = source();
    for (m, n) in [(64u64, 64u64), (40, 40), (1, 1), (3, 5)] {
        for step in [
            "elementwise",
            "transposed",
            "normalized",
            "shifted",
            "gathered",
            "squared",
            "chain",
        ] {
            // The square steps take N = M.
            let n = if matches!(step, "transposed" | "squared") {
                m
            } else {
                n
            };
            // The chain adds a transpose (square shapes only); the shift needs N > 1.
            if (step == "chain" && m != n) || (step == "shifted" && n == 1) {
                continue;
            }
            let dims = vec![("M".to_string(), m), ("N".to_string(), n)];
            // Gather rows in reverse, so row i reads row M - 1 - i.
            let idx: Vec<i32> = (0..m as i32).rev().collect();
            let given = [("idx", Tensor::from_i32(vec![m], &idx))];
            for profile in Profile::ALL {
                for seed in [1, 2] {
                    let o = run_case_with_inputs(&src, step, &dims, profile, seed, &given, None);
                    assert_eq!(
                        o,
                        Outcome::Pass,
                        "{step} M={m} N={n} ({}, seed {seed})",
                        profile.name()
                    );
                }
            }
        }
    }
}
