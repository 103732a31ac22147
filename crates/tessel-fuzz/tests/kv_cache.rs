//! A KV cache updated in place (tests/programs/kv_cache.tsl): every step runs on the CPU
//! executor and is judged by the dtype-following reference, the cache included — so rows
//! written at the wrong place, rows written outside the cache, and any untouched row that
//! is not bit for bit the caller's all fail. Positions at the start of the cache, at its
//! end, partly and wholly past the end and before the start; 1 and 8 new rows; bf16 and
//! f32; two caches and a chain of two updates in one step; reads through the updated
//! value (a sum, a max, fused decode attention). And the proof that nothing copies the
//! cache: appending one row costs the same at S = 64 as at S = 4096.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tessel_fuzz::run::{run_case_with_inputs, Outcome};
use tessel_ir::kernel::{BufferRole, ParamKind, Program};
use tessel_passes::{compile, Options, Profile};
use tessel_ref::{run_program_with, ExecOptions, Tensor};

fn source() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/kv_cache.tsl");
    std::fs::read_to_string(&path).expect("tests/programs/kv_cache.tsl")
}

fn dims(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn positions(p: &[i32]) -> Tensor {
    Tensor::from_i32(vec![p.len() as u64], p)
}

/// Runs `step` with positions `pos` in `profile` and asserts every output passes.
fn pass(step: &str, d: &[(&str, u64)], pos: &[i32], profile: Profile) {
    let src = source();
    let given = [("pos", positions(pos))];
    for seed in [1, 2] {
        let o = run_case_with_inputs(&src, step, &dims(d), profile, seed, &given, None);
        assert_eq!(
            o,
            Outcome::Pass,
            "{step} {d:?} at {pos:?} ({}, seed {seed})",
            profile.name()
        );
    }
}

#[test]
fn append_positions() {
    let (s, kv, d) = (16, 2, 8);
    for (r, pos) in [
        // The first and the last position; one past the end (not written).
        (1, vec![0, 15, 16]),
        // Eight rows: from the start, ending at the end, half past the end, half before
        // the start, wholly past the end.
        (8, vec![0, 8, 12, -3, 16]),
    ] {
        let b = pos.len() as u64;
        let dd = [("B", b), ("KV", kv), ("R", r), ("D", d), ("S", s)];
        for step in ["append", "append_only", "two_caches", "via_fn"] {
            for profile in [Profile::Exact, Profile::Invariant] {
                pass(step, &dd, &pos, profile);
            }
        }
    }
}

#[test]
fn append_f32_and_last_axis() {
    for (r, pos) in [(1, vec![0, 9, 10, -1]), (8, vec![0, 2, 5, -7])] {
        let b = pos.len() as u64;
        for d in [4, 6] {
            pass(
                "append_f32",
                &[("B", b), ("R", r), ("D", d), ("S", 10)],
                &pos,
                Profile::Exact,
            );
        }
        pass(
            "append_last",
            &[("B", b), ("R", r), ("S", 10)],
            &pos,
            Profile::Exact,
        );
    }
}

#[test]
fn untouched_inout_comes_back_as_it_was() {
    pass(
        "untouched",
        &[("B", 3), ("S", 5), ("D", 4)],
        &[0, 1, 2],
        Profile::Exact,
    );
    // No kernel writes the cache: its buffer is the output, never copied.
    let p = program("untouched", &[("B", 3), ("S", 5), ("D", 4)], Profile::Exact);
    let cache = p.inputs.iter().find(|(n, _)| n == "cache").unwrap().1;
    assert_eq!(p.buffers[cache].role, BufferRole::InOut(1));
    assert!(p.outputs.contains(&("cache".to_string(), cache)));
    assert!(writers(&p, cache).is_empty());
}

#[test]
fn decode_attention_over_the_updated_cache() {
    for (b, n, s, pos) in [
        (2, 1, 40, vec![0, 39]),
        (2, 3, 40, vec![5, 37]),
        (3, 2, 70, vec![0, 33, 68]),
    ] {
        let d = [("B", b), ("N", n), ("H", 4), ("KV", 2), ("D", 32), ("S", s)];
        for profile in [Profile::Exact, Profile::Invariant, Profile::Fast] {
            pass("decode", &d, &pos, profile);
        }
        // Invariant: the attention reads the updated cache in place, in one fused kernel;
        // the new keys' norm and RoPE are computed in the update's kernel (only the norm's
        // sums have a kernel of their own): no buffer holds the rows.
        let p = program("decode", &d, Profile::Invariant);
        assert!(
            p.kernels
                .values()
                .any(|k| k.schedule.starts_with("attention {")),
            "decode is not fused at {d:?}"
        );
        // Two update schedules (the two run as one kernel: `merge-launches`).
        assert_eq!(
            p.kernels
                .values()
                .map(|k| k.schedule.matches("update {").count())
                .sum::<usize>(),
            2
        );
        let rows = [b, 2, n, 32];
        assert!(
            p.buffers
                .values()
                .all(|x| x.role != BufferRole::Temp || x.ty.shape.0 != rows),
            "the new rows are materialised: {:?}",
            p.buffers
                .values()
                .map(|x| (&x.name, &x.ty))
                .collect::<Vec<_>>()
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

/// The kernels (by name) whose launches write buffer `b`.
fn writers(p: &Program, b: tessel_ir::BufferId) -> Vec<String> {
    p.launches
        .iter()
        .filter(|l| {
            let k = &p.kernels[l.kernel];
            l.args.iter().zip(&k.params).any(|(a, prm)| {
                *a == tessel_ir::kernel::LaunchArg::Buffer(b)
                    && matches!(prm.kind, ParamKind::Ptr { writes: true, .. })
            })
        })
        .map(|l| p.kernels[l.kernel].name.clone())
        .collect()
}

/// Appending one row never copies the cache: the one kernel writing the cache is the
/// update's, its grid is the rows', and the whole step executes the same number of
/// instructions for a cache of 64 positions as of 4096; no other buffer is as large as
/// the cache.
#[test]
fn appending_a_row_costs_the_same_for_any_cache_length() {
    let mut work = Vec::new();
    for s in [64u64, 4096] {
        let d = [("B", 2), ("KV", 8), ("R", 1), ("D", 128), ("S", s)];
        let p = program("append_only", &d, Profile::Invariant);
        let cache = p.inputs.iter().find(|(n, _)| n == "k_cache").unwrap().1;
        assert_eq!(p.buffers[cache].role, BufferRole::InOut(2));
        assert_eq!(
            p.outputs.iter().filter(|(n, _)| n == "k_cache").count(),
            1,
            "the cache is returned once, under its name"
        );
        assert!(p.outputs.contains(&("k_cache".to_string(), cache)));
        let w = writers(&p, cache);
        assert_eq!(w.len(), 1, "one kernel writes the cache: {w:?}");
        let k = p.kernels.values().find(|k| k.name == w[0]).unwrap();
        // The update's kernel, or a launch of it with a rider (`merge-launches`: the
        // lengths' elementwise kernel, one CTA of 32 threads) on CTAs of its own.
        assert!(
            k.schedule.starts_with("update {") || k.schedule.contains(": update {"),
            "{}",
            k.schedule
        );
        // The update's threads cover the 2 * 8 * 1 * 128 row elements, not the cache.
        let threads: u64 = k.grid.iter().chain(&k.block).map(|&x| x as u64).product();
        assert!(
            threads <= 2 * 8 * 128,
            "{threads} threads for 2048 row elements"
        );
        let cache_bytes = p.buffers[cache].ty.size_bytes();
        for (b, decl) in p.buffers.iter() {
            if b != cache {
                assert!(
                    decl.ty.size_bytes() < cache_bytes,
                    "{} is as large as the cache",
                    decl.name
                );
            }
        }
        // Run it: the executor's instruction count is the step's work.
        let inputs: Vec<Tensor> = p
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (n, b))| {
                if n == "pos" {
                    positions(&[0, s as i32 - 1])
                } else {
                    Tensor::random(p.buffers[*b].ty.clone(), i as u64)
                }
            })
            .collect();
        let (out, stats) = run_program_with(&p, &inputs, &ExecOptions::default()).unwrap();
        work.push((stats.ctas, stats.lane_instructions));
        // The cache comes back with the new rows and every other byte as given.
        let i = p.outputs.iter().position(|(n, _)| n == "k_cache").unwrap();
        let (given, got) = (&inputs[2].data, &out[i].data);
        let row = 128 * 2; // bytes of one position of one head
        let mut changed = 0;
        for (j, (a, b)) in given.chunks(row).zip(got.chunks(row)).enumerate() {
            if a != b {
                let (batch, pos) = (j as u64 / (8 * s), j as u64 % s);
                assert!(
                    (batch, pos) == (0, 0) || (batch, pos) == (1, s - 1),
                    "row {pos} of sequence {batch} changed"
                );
                changed += 1;
            }
        }
        assert!(changed > 0 && changed <= 16, "{changed} rows changed");
    }
    assert_eq!(
        work[0], work[1],
        "(CTAs, instructions) at S = 64 and S = 4096"
    );
}

/// The update's kernel computes the new keys' norm itself (fuse rule 6: the sum of squares
/// of each row of D on D / 8 lanes, vector 8) in every profile, and the cache it writes
/// has the bits of the program whose rows a row kernel writes first (the same reduction
/// order): `append_normed` and `append_normed_kept`, at head dims 16 to 128, one and
/// several new tokens, positions at the start, inside and past the end. The near misses
/// keep a kernel for the norm's sums and pass the reference.
#[test]
fn the_update_kernel_computes_the_rows_norm_with_the_row_kernels_bits() {
    for (b, n, kv, dd, s, pos) in [
        (2, 1, 2, 128, 40, vec![0, 39]),
        (3, 4, 1, 16, 33, vec![0, 17, 31]),
        (1, 8, 3, 64, 64, vec![60]),
    ] {
        let d = [("B", b), ("N", n), ("KV", kv), ("D", dd), ("S", s)];
        for profile in [Profile::Exact, Profile::Invariant, Profile::Fast] {
            for step in ["append_normed", "append_head0", "append_across"] {
                pass(step, &d, &pos, profile);
            }
            let reduction_kernels = |step: &str| {
                program(step, &d, profile)
                    .kernels
                    .values()
                    .filter(|k| k.schedule.starts_with("row_reduction {"))
                    .count()
            };
            assert_eq!(
                reduction_kernels("append_normed"),
                0,
                "{d:?} {}",
                profile.name()
            );
            // With one KV head, head 0's norm is every row's own: `append_head0` fuses.
            let head0 = if kv == 1 { 0 } else { 1 };
            assert_eq!(
                reduction_kernels("append_head0"),
                head0,
                "{d:?} {}",
                profile.name()
            );
            assert_eq!(
                reduction_kernels("append_across"),
                1,
                "{d:?} {}",
                profile.name()
            );
            let cache = |step: &str| -> Vec<u8> {
                let p = program(step, &d, profile);
                let inputs: Vec<Tensor> = p
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(i, (name, buf))| {
                        let ty = p.buffers[*buf].ty.clone();
                        if name == "pos" {
                            positions(&pos)
                        } else {
                            Tensor::random(ty, 900 + i as u64)
                        }
                    })
                    .collect();
                tessel_ref::exec::run_program(&p, &inputs).expect("runs")[0]
                    .data
                    .clone()
            };
            assert_eq!(
                cache("append_normed"),
                cache("append_normed_kept"),
                "{d:?} {}",
                profile.name()
            );
        }
    }
}
