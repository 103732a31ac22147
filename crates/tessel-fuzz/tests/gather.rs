//! Indexing by a tensor (tests/programs/gather.tsl): every step on the CPU executor, judged
//! by the dtype-following reference in every profile, with indices in range, repeated,
//! negative (Python's: -1 is the last position) and out of range (clamped to the nearest
//! end), at odd shapes (V = 1, H not a multiple of any vector width, ids of rank 0, 1, 2),
//! bf16, f32 and i32 tables. Beside the reference (which shares the clamp's definition),
//! the rows are checked against the table by hand, bit for bit; and the kernels: a lookup
//! and its scale or norm are one kernel that reads the table in place.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case_with_inputs, Outcome};
use tessel_ir::kernel::{BufferRole, Program};
use tessel_ir::{DType, TensorType};
use tessel_passes::{compile, Options, Profile};
use tessel_ref::{run_program_with, ExecOptions, Tensor};

const PROFILES: [Profile; 3] = [Profile::Exact, Profile::Invariant, Profile::Fast];

fn source() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/gather.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/gather.tsl")
}

fn dims(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn ints(shape: &[u64], v: &[i32]) -> Tensor {
    Tensor::from_i32(shape.to_vec(), v)
}

/// `n` indices into an axis of `len`: in range, repeated, the ends, negative ones inside
/// (`-1`, `-len`) and outside (`-len - 1`, `i32::MIN`), past the end (`len`, `i32::MAX`).
fn indices(len: i64, n: usize) -> Vec<i32> {
    let pool = [
        0,
        len - 1,
        len / 2,
        len - 1,
        -1,
        -len,
        -len - 1,
        len,
        len + 3,
        i32::MAX as i64,
        i32::MIN as i64,
        1 % len,
        0,
    ];
    (0..n)
        .map(|i| pool[(i * 7 + 3) % pool.len()] as i32)
        .collect()
}

/// Runs `step` with the inputs `given` in every profile and asserts it passes.
fn pass(step: &str, d: &[(&str, u64)], given: &[(&str, Tensor)]) {
    let src = source();
    for profile in PROFILES {
        for seed in [1, 2] {
            let o = run_case_with_inputs(&src, step, &dims(d), profile, seed, given, None);
            assert_eq!(
                o,
                Outcome::Pass,
                "{step} {d:?} ({}, seed {seed})",
                profile.name()
            );
        }
    }
}

#[test]
fn embedding_lookups_at_odd_shapes() {
    for (v, h, t) in [
        (1, 1, 1),
        (1, 5, 4),
        (5, 3, 13),
        (17, 8, 7),
        (33, 13, 9),
        (7, 64, 3),
    ] {
        let ids = ints(&[t], &indices(v as i64, t as usize));
        let d = [("V", v), ("H", h), ("T", t)];
        pass("embed", &d, &[("ids", ids.clone())]);
        pass("embed_norm", &d, &[("ids", ids.clone())]);
        pass("embed_of_computed", &d, &[("ids", ids)]);
        let b = 2;
        let ids2 = ints(&[b, t], &indices(v as i64, (b * t) as usize));
        pass(
            "embed_scaled",
            &[("V", v), ("H", h), ("B", b), ("T", t)],
            &[("ids", ids2)],
        );
        for id in [0, v as i32 - 1, -1, v as i32, -(v as i32) - 1] {
            pass(
                "embed_one",
                &[("V", v), ("H", h)],
                &[("id", ints(&[], &[id]))],
            );
        }
    }
}

#[test]
fn other_axes_and_take_along_axis() {
    for (b, v, h, t) in [(1, 1, 1, 1), (2, 5, 3, 4), (3, 9, 8, 6)] {
        let idx = ints(&[t], &indices(v as i64, t as usize));
        pass(
            "columns",
            &[("B", b), ("V", v), ("H", h), ("T", t)],
            &[("idx", idx.clone())],
        );
        pass(
            "last_axis",
            &[("B", b), ("V", v), ("T", t)],
            &[("idx", idx)],
        );
    }
    for (t, v) in [(1, 1), (4, 7), (9, 33), (3, 130)] {
        let target = ints(&[t], &indices(v as i64, t as usize));
        let d = [("T", t), ("V", v)];
        pass("target_logit", &d, &[("target", target.clone())]);
        pass("cross_entropy", &d, &[("target", target)]);
        let k = 5;
        let idx = ints(&[1, k], &indices(v as i64, k as usize));
        pass(
            "along_broadcast",
            &[("T", t), ("V", v), ("K", k)],
            &[("idx", idx)],
        );
        let (r, k) = (t.div_ceil(2), 3);
        let idx = ints(&[r, k], &indices(v as i64, (r * k) as usize));
        pass(
            "torch_gather",
            &[("T", t), ("V", v), ("R", r), ("K", k)],
            &[("idx", idx)],
        );
    }
    for (t, k, n, v) in [(1, 3, 5, 2), (5, 17, 9, 4), (20, 64, 33, 1)] {
        let ids = ints(&[t], &indices(v as i64, t as usize));
        let d = [("T", t), ("K", k), ("N", n), ("V", v)];
        pass("matmul_bias", &d, &[("ids", ids)]);
    }
    // Seeded indices in -8..=8, times 2 minus 1: most outside an axis of 3.
    for (v, b, h, k) in [(3, 2, 5, 4), (1, 1, 1, 2), (20, 3, 2, 7)] {
        pass(
            "along_first",
            &[("V", v), ("B", b), ("H", h), ("K", k)],
            &[],
        );
    }
}

fn program(step: &str, d: &[(&str, u64)], profile: Profile) -> Program {
    let src = source();
    let m = tessel_syntax::parse(&src).expect("parses");
    let dd: BTreeMap<String, u64> = dims(d).into_iter().collect();
    let g = tessel_passes::check::run(&m, step, &dd).expect("checks");
    let opts = Options {
        profile,
        verify: true,
        ..Default::default()
    };
    compile(&g, &opts).expect("compiles").program
}

/// The rows the executor returns are the table's rows at the clamped positions, bit for
/// bit, for bf16, f32 and i32 tables: `-1` the last row, `-V` the first, anything below
/// `-V` the first, anything past the end the last.
#[test]
fn rows_are_the_tables_rows_at_the_clamped_positions() {
    let (v, h, t) = (6u64, 13u64, 10u64);
    let ids = [0, 5, -1, -6, -7, 6, 100, i32::MIN, i32::MAX, 3];
    let want = [0u64, 5, 5, 0, 0, 5, 5, 0, 5, 3];
    for (step, dt) in [("embed", DType::Bf16), ("embed_scaled", DType::F32)] {
        let d: Vec<(&str, u64)> = if step == "embed" {
            vec![("V", v), ("H", h), ("T", t)]
        } else {
            vec![("V", v), ("H", h), ("B", 1), ("T", t)]
        };
        for profile in PROFILES {
            let p = program(step, &d, profile);
            let table = Tensor::random(TensorType::new(dt, vec![v, h]), 7);
            let shape: Vec<u64> = if step == "embed" { vec![t] } else { vec![1, t] };
            let inputs = vec![table.clone(), ints(&shape, &ids)];
            let (out, _) = run_program_with(&p, &inputs, &ExecOptions::default()).unwrap();
            let scale = if step == "embed" { 1.0 } else { 0.5 };
            for (row, &w) in want.iter().enumerate() {
                for c in 0..h as usize {
                    let got = out[0].get_f64(row * h as usize + c);
                    let exp = table.get_f64(w as usize * h as usize + c) * scale;
                    assert_eq!(got.to_bits(), exp.to_bits(), "{step} row {row} col {c}");
                }
            }
        }
    }
    let p = program("embed_one", &[("V", v), ("H", h)], Profile::Exact);
    let table = Tensor::random(TensorType::new(DType::I32, vec![v, h]), 3);
    for (id, w) in [(-1, 5), (9, 5), (-9, 0), (2, 2)] {
        let (out, _) = run_program_with(
            &p,
            &[table.clone(), ints(&[], &[id])],
            &ExecOptions::default(),
        )
        .unwrap();
        for c in 0..h as usize {
            assert_eq!(
                out[0].get_f64(c),
                table.get_f64(w * h as usize + c),
                "id {id}"
            );
        }
    }
}

/// What fuses: a lookup and its scale are one elementwise kernel, a lookup and its norm one
/// row-reduction kernel, a cast of the table is computed at the gathered rows — no kernel
/// writes a copy of the rows or of the table.
#[test]
fn gathers_fuse_into_the_kernel_that_reads_them() {
    for (step, d) in [
        (
            "embed_scaled",
            vec![("V", 50), ("H", 64), ("B", 2), ("T", 8)],
        ),
        ("embed_norm", vec![("V", 50), ("H", 64), ("T", 8)]),
        ("embed_of_computed", vec![("V", 50), ("H", 64), ("T", 8)]),
        ("target_logit", vec![("T", 8), ("V", 50)]),
        (
            "matmul_bias",
            vec![("T", 20), ("K", 64), ("N", 32), ("V", 7)],
        ),
    ] {
        for profile in PROFILES {
            let p = program(step, &d, profile);
            let temps: Vec<&String> = p
                .buffers
                .values()
                .filter(|b| b.role == BufferRole::Temp)
                .map(|b| &b.name)
                .collect();
            assert!(
                temps.is_empty(),
                "{step} ({}): temporaries {temps:?}",
                profile.name()
            );
            assert_eq!(p.launches.len(), 1, "{step} ({})", profile.name());
        }
    }
    // The lookup keeps 16-byte loads of the table's rows (one position per vector).
    let p = program("embed", &[("V", 50), ("H", 64), ("T", 8)], Profile::Exact);
    let k = p.kernels.values().next().unwrap();
    assert!(k.schedule.contains("vector: 8"), "{}", k.schedule);
    let text = tessel_ir::text::write_kernel(k);
    assert!(text.contains("load.global.v4"), "{text}");
}

/// The random-program generator reaches every spelling: of seeds 0..300 (the batch `tessel
/// fuzz --count 300` runs, all passing), the checked graphs of many hold gathers, and the
/// three spellings each occur.
#[test]
fn the_generator_makes_gathers() {
    use tessel_fuzz::gen::{generate, Config};
    let (mut graphs, mut along, mut torch, mut indexed) = (0, 0, 0, 0);
    for seed in 0..300 {
        let p = generate(seed, &Config::default());
        let src = p.source_body();
        let m = tessel_syntax::parse(&src).expect("parses");
        let dims: BTreeMap<String, u64> = p.dim_bindings().into_iter().collect();
        let g = tessel_passes::check::run(&m, "fuzz", &dims).expect("checks");
        let gathers = g
            .ops
            .values()
            .filter(|op| matches!(op, tessel_ir::graph::Op::Gather { .. }))
            .count();
        graphs += (gathers > 0) as u32;
        along += src.contains("take_along_axis(") as u32;
        torch += src.contains(" gather(") as u32;
        indexed +=
            (gathers > 0 && !src.contains("take_along_axis(") && !src.contains(" gather(")) as u32;
    }
    assert!(graphs >= 40, "{graphs} of 300 programs gather");
    assert!(
        along >= 10 && torch >= 5 && indexed >= 10,
        "{along} {torch} {indexed}"
    );
}
