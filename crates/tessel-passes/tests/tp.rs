//! The tensor-parallel plan's rules on small steps: what it splits, and what it refuses
//! with a reason rather than replicating silently.

use std::collections::BTreeMap;
use tessel_passes::check;
use tessel_passes::tp::{plan, Collective, Sharding};

fn graph(src: &str, dims: &[(&str, u64)]) -> tessel_ir::graph::Graph {
    let m = tessel_syntax::parse(src).expect("parses");
    let d: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    check::run(&m, "s", &d).expect("checks")
}

const MLP: &str = "step s(x: bf16[T, 64], wg: bf16[256, 64], wd: bf16[64, 256]) -> bf16[T, 64] {
    let h = x @ wg^T;
    x + bf16(silu(f32(h))) @ wd^T
}";

#[test]
fn an_mlp_is_column_then_row_parallel_with_one_reduction() {
    let g = graph(MLP, &[("T", 5)]);
    for tp in [1, 2, 4, 8] {
        let p = plan(&g, tp).expect("plans");
        let shard = |name: &str| p.inputs.iter().find(|i| i.name == name).unwrap().sharding;
        assert_eq!(shard("x"), Sharding::Replicated);
        assert_eq!(shard("wg"), Sharding::Split { axis: 0 });
        assert_eq!(shard("wd"), Sharding::Split { axis: 1 });
        assert_eq!(p.collectives.len(), 1, "{:?}", p.collectives);
        let Collective::SumPartials { bytes, .. } = p.collectives[0] else {
            panic!("{:?}", p.collectives)
        };
        assert_eq!(bytes, (tp as u64 - 1) * 5 * 64 * 4);
    }
}

#[test]
fn splits_the_plan_cannot_place_are_errors() {
    // A reduction over the split columns; a slice of them; heads that do not divide.
    for (src, dims, tp, want) in [
        (
            "step s(x: bf16[T, 64], w: bf16[96, 64]) -> f32[T] { sum(f32(x @ w^T), axis: -1) }",
            vec![("T", 3)],
            2,
            "a reduction along dim 1, the partitioned one",
        ),
        (
            "step s(x: bf16[T, 64], w: bf16[96, 64]) -> bf16[T, 8] { (x @ w^T)[:, 0:8] }",
            vec![("T", 3)],
            2,
            "a slice along dim 1, the partitioned one",
        ),
        (
            "step s(x: bf16[T, 64], w: bf16[96, 64]) -> bf16[T, 3, 32] { reshape(x @ w^T, [T, 3, 32]) }",
            vec![("T", 3)],
            2,
            "the result's dim 1 is 3, which 2 ranks cannot split evenly",
        ),
        // Row-parallel with K = 60: not 8 equal ranges.
        (
            "step s(x: bf16[T, 64], w: bf16[60, 64], v: bf16[64, 60]) -> bf16[T, 64] { (x @ w^T) @ v^T }",
            vec![("T", 3)],
            2,
            "K = 60, not a multiple of the 8 ranges",
        ),
        // A cache read by something else too (found by a new user: that reader got a
        // rank's block where it read the whole).
        (
            "step s(x: f32[T, 64], wk: f32[64, 64], c: inout f32[1, 4, S, 16]) -> (f32[1, 1, 1, 1], f32[T, 64]) {
                let old = sum(sum(sum(sum(c, axis: 1, keep: true), axis: 2, keep: true), axis: 3, keep: true), axis: 0, keep: true);
                let k = x @ wk^T;
                let c2 = update(c, reshape(permute(reshape(k, [T, 4, 16]), [1, 0, 2]), [1, 4, T, 16]), at: 0, axis: 2);
                (old, k)
            }",
            vec![("T", 3), ("S", 8)],
            2,
            "is also read by",
        ),
        // A cache split along the dim its positions index.
        (
            "step s(x: f32[T, 64], w: f32[64, 64], p: i32[4], c: inout f32[4, S, 16]) -> f32[T, 64] {
                let h = x @ w^T;
                let c2 = update(c, permute(reshape(h, [T, 4, 16]), [1, 0, 2]), at: p, axis: 1);
                h
            }",
            vec![("T", 3), ("S", 8)],
            2,
            "the one its positions index",
        ),
        // The same with K = 64: planned.
        (
            "step s(x: bf16[T, 60], w: bf16[64, 60], v: bf16[60, 64]) -> bf16[T, 60] { (x @ w^T) @ v^T }",
            vec![("T", 3)],
            2,
            "",
        ),
    ] {
        let g = graph(src, &dims);
        match plan(&g, tp) {
            Err(e) if !want.is_empty() => assert!(e.to_string().contains(want), "{src}: {e}"),
            Ok(_) if want.is_empty() => {}
            r => panic!("{src}: {r:?}"),
        }
    }
}

/// Runs `g` on the CPU executor in `profile` with seeded inputs (by parameter position).
fn run(g: &tessel_ir::graph::Graph, profile: tessel_passes::Profile) -> Vec<tessel_ref::Tensor> {
    // The simulations compile as `--tp` does (no split-K); the steps as written do too,
    // which changes nothing at these sizes.
    let opts = tessel_passes::Options {
        profile,
        verify: true,
        tensor_parallel: true,
        ..Default::default()
    };
    let p = tessel_passes::compile(g, &opts).expect("compiles").program;
    let inputs: Vec<tessel_ref::Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (name, buf))| {
            let ty = p.buffers[*buf].ty.clone();
            if name == "pos" {
                let n = ty.shape.numel() as i32;
                let pos: Vec<i32> = (0..n).map(|j| 131000 + j).collect();
                tessel_ref::Tensor::from_i32(ty.shape.0.clone(), &pos)
            } else {
                tessel_ref::Tensor::random(ty, 40 + i as u64)
            }
        })
        .collect();
    tessel_ref::exec::run_program(&p, &inputs).expect("runs")
}

/// rel-RMS of `a` against `b`.
fn rel_rms(a: &tessel_ref::Tensor, b: &tessel_ref::Tensor) -> f64 {
    let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

/// The plan's promise, checked by simulating the ranks on one graph (`tp::simulate`): the
/// MLP at 1, 2, 4 and 8 ranks, a small Qwen3 layer with 4 KV heads
/// (tests/programs/layer_tp.tsl) at 1, 2 and 4, and the small Qwen layers of
/// tests/programs/layer_small.tsl (2 KV heads: prefill, and decode appending to its KV
/// caches) at 1 and 2 give the same bits, in the exact and fast profiles. A wrong
/// block offset, a split in the wrong place or a reduction that associates by rank count
/// changes them.
#[test]
fn simulated_ranks_give_the_same_bits_at_every_world_size() {
    use tessel_passes::tp::simulate;
    use tessel_passes::Profile;
    let mlp = graph(MLP, &[("T", 5)]);
    // In f32 with full-mantissa inputs every association of a sum rounds differently
    // (bf16 products are exact in f32 and their sums often too, which would hide a
    // reduction that associates by rank count).
    let mlp32 = graph(&MLP.replace("bf16", "f32"), &[("T", 5)]);
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let small = tessel_syntax::load(&root.join("tests/programs/layer_small.tsl"))
        .unwrap_or_else(|_| panic!("layer_small.tsl loads"));
    let dims: BTreeMap<String, u64> = [("T", 20), ("B", 3), ("S", 24)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let layers = ["qwen3", "qwen2", "qwen3_decode"]
        .map(|step| check::run(&small.module, step, &dims).expect("checks"));
    let four = tessel_syntax::load(&root.join("tests/programs/layer_tp.tsl"))
        .unwrap_or_else(|_| panic!("layer_tp.tsl loads"));
    let four = check::run(&four.module, "prefill", &dims).expect("checks");
    let cases: Vec<(&str, &tessel_ir::graph::Graph, Vec<u32>)> = vec![
        ("mlp", &mlp, vec![1, 2, 4, 8]),
        ("layer_tp", &four, vec![1, 2, 4]),
        ("mlp_f32", &mlp32, vec![1, 2, 4, 8]),
        ("qwen3", &layers[0], vec![1, 2]),
        ("qwen2", &layers[1], vec![1, 2]),
        ("qwen3_decode", &layers[2], vec![1, 2]),
    ];
    for (name, g, sizes) in cases {
        for profile in [Profile::Exact, Profile::Fast] {
            let outs: Vec<Vec<tessel_ref::Tensor>> = sizes
                .iter()
                .map(|&n| {
                    run(
                        &simulate(g, &plan(g, n).expect("plans")).expect("simulates"),
                        profile,
                    )
                })
                .collect();
            for (i, o) in outs.iter().enumerate().skip(1) {
                let same = o.iter().zip(&outs[0]).all(|(a, b)| a.data == b.data);
                assert!(
                    same,
                    "{name} {}: --tp {} differs from --tp 1",
                    profile.name(),
                    sizes[i]
                );
            }
            // And it is the step: only the row-parallel sums associate differently from the
            // step compiled as written (bf16 outputs: within a few bf16 roundings).
            for (a, b) in outs[0].iter().zip(&run(g, profile)) {
                let e = rel_rms(a, b);
                // f32 in `exact`: the f32 path's 1e-6; in `fast` the 8 ranges' GEMMs may take
                // TF32 tensor cores where the step's GEMV does not (2^-11 per operand).
                let bound = match (name, profile) {
                    ("mlp_f32", Profile::Exact) => 1e-6,
                    ("mlp_f32", _) => 2e-3,
                    _ => 1e-2,
                };
                assert!(
                    e < bound,
                    "{name} {}: rel-RMS {e:.2e} from the step itself",
                    profile.name()
                );
            }
        }
    }
}

/// q's heads from a column-parallel projection, multiplied by a stored K that holds every
/// head (replicated: each rank slices its heads), and the projection itself as the right
/// operand of a matmul with a replicated left one (split by its columns).
const STORED_K: &str = "step s(x: f32[T, 64], w: f32[128, 64], k: f32[4, 8, 32], a: f32[5, T]) -> (f32[4, T, 8], f32[5, 128]) {
    let h = x @ w^T;
    let q = permute(reshape(h, [T, 4, 32]), [1, 0, 2]);
    (q @ permute(k, [0, 2, 1]), a @ h)
}";

/// Seeded whole inputs of `g` (by parameter position; positions near 131072).
fn inputs_of(g: &tessel_ir::graph::Graph) -> Vec<tessel_ref::Tensor> {
    g.inputs
        .iter()
        .enumerate()
        .map(|(i, (name, v))| {
            let ty = g.ty(*v).clone();
            if name == "pos" {
                let n = ty.shape.numel() as i32;
                let pos: Vec<i32> = (0..n).map(|j| 131000 + j).collect();
                tessel_ref::Tensor::from_i32(ty.shape.0.clone(), &pos)
            } else {
                tessel_ref::Tensor::random(ty, 40 + i as u64)
            }
        })
        .collect()
}

/// The ranks themselves (`tp::ranks`: each rank's phases compiled on their own, the
/// all-gathers between them) run on the executor give, assembled, the same bits at every
/// world size — for the MLP, the 4-KV-head layer and the small Qwen layers (decode's caches
/// updated split by heads), in `exact` and `invariant` — and agree with the one-device
/// simulation within rounding (the ranks read each weight range in place, the simulation
/// slices it into a copy: the same sums, kernels of other layouts). A wrong block offset,
/// a partial summed in another order, an exchange in the wrong phase or a cache block
/// written at the wrong heads changes them.
#[test]
fn ranks_run_apart_give_the_same_bits_at_every_world_size() {
    use tessel_passes::tp::{ranks, simulate};
    use tessel_passes::Profile;
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dims: BTreeMap<String, u64> = [("T", 20), ("B", 3), ("S", 24)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let load = |file: &str, step: &str| {
        let m = tessel_syntax::load(&root.join(file)).unwrap_or_else(|_| panic!("{file} loads"));
        check::run(&m.module, step, &dims).expect("checks")
    };
    let cases: Vec<(&str, tessel_ir::graph::Graph, Vec<u32>)> = vec![
        ("mlp", graph(MLP, &[("T", 5)]), vec![1, 2, 4, 8]),
        (
            "mlp_f32",
            graph(&MLP.replace("bf16", "f32"), &[("T", 5)]),
            vec![1, 2, 8],
        ),
        (
            "layer_tp",
            load("tests/programs/layer_tp.tsl", "prefill"),
            vec![1, 2, 4],
        ),
        (
            "qwen3",
            load("tests/programs/layer_small.tsl", "qwen3"),
            vec![1, 2],
        ),
        (
            "qwen2",
            load("tests/programs/layer_small.tsl", "qwen2"),
            vec![1, 2],
        ),
        (
            "qwen3_decode",
            load("tests/programs/layer_small.tsl", "qwen3_decode"),
            vec![1, 2],
        ),
        // Heads from a projection against a stored K of all heads (each rank takes its
        // heads of it); an activation split by columns on the right of a matmul.
        ("stored_k", graph(STORED_K, &[("T", 6)]), vec![1, 2, 4]),
        // Found by a new user (wrong answers before the fixes): a parameter named like an
        // unnamed result (the result's slot overwrote the parameter's); a cache written
        // with rows split by heads and then with whole rows (each rank its block of them).
        (
            "param_named_out0",
            graph(
                "step s(x: f32[T, 32], w1: f32[64, 32], w2: f32[32, 64], out0: f32[T, 32]) -> (f32[T, 32], f32[T, 32]) {
                    (x * 2.0, (x @ w1^T) @ w2^T + out0)
                }",
                &[("T", 3)],
            ),
            vec![1, 2, 4],
        ),
        // An update returned under an unnamed result's name (`out1`) that a parameter also
        // has: the update's slot overwrote the parameter (second trial).
        (
            "update_named_like_a_param",
            graph(
                "step s(x: f32[T, 32], w1: f32[64, 32], w2: f32[32, 64], out1: f32[T, 32], c: inout f32[T, 32]) -> (f32[T, 32], f32[T, 32]) {
                    ((x @ w1^T) @ w2^T + out1, update(c, x, at: 0, axis: 1))
                }",
                &[("T", 3)],
            ),
            vec![1, 2, 4],
        ),
        (
            "cache_split_then_whole_rows",
            graph(
                "step s(x: f32[T, 64], w: f32[64, 64], c: inout f32[1, 4, S, 16]) -> f32[T, 64] {
                    let h = x @ w^T;
                    let rows = reshape(permute(reshape(h, [T, 4, 16]), [1, 0, 2]), [1, 4, T, 16]);
                    let whole = reshape(permute(reshape(x, [T, 4, 16]), [1, 0, 2]), [1, 4, T, 16]);
                    let c2 = update(update(c, rows, at: 0, axis: 2), whole, at: T, axis: 2);
                    h
                }",
                &[("T", 3), ("S", 8)],
            ),
            vec![1, 2, 4],
        ),
        // A step input returned as it is, read by nothing else: loaded all the same.
        (
            "pass_through",
            graph(
                "step s(x: f32[4, 8], w: f32[16, 8], y: f32[3]) -> (f32[4, 16], f32[3]) { (x @ w^T, y) }",
                &[],
            ),
            vec![1, 2],
        ),
    ];
    for (name, g, sizes) in &cases {
        let whole = inputs_of(g);
        for profile in [Profile::Exact, Profile::Invariant] {
            let opts = tessel_passes::Options {
                profile,
                verify: true,
                tensor_parallel: true,
                ..Default::default()
            };
            let run_at = |n: u32| {
                let rs: Vec<_> = ranks(g, &plan(g, n).expect("plans"))
                    .expect("partitions")
                    .into_iter()
                    .map(|r| {
                        r.try_map(|p| tessel_passes::compile(&p, &opts).map(|c| c.program))
                            .expect("compiles")
                    })
                    .collect();
                tessel_ref::ranks::run_ranks(&rs, &whole)
                    .unwrap_or_else(|e| panic!("{name} --tp {n}: {e}"))
            };
            let want = run_at(sizes[0]);
            for &n in &sizes[1..] {
                let got = run_at(n);
                for ((o, a), b) in g.outputs.iter().zip(&got).zip(&want) {
                    assert_eq!(a.ty, b.ty, "{name} {}", o.0);
                    assert!(
                        a.data == b.data,
                        "{name} {} --tp {n}: output `{}` differs from --tp {}",
                        profile.name(),
                        o.0,
                        sizes[0]
                    );
                }
            }
            let sim = tessel_passes::compile(&simulate(g, &plan(g, 1).unwrap()).unwrap(), &opts)
                .expect("compiles")
                .program;
            let sim = tessel_ref::exec::run_program(&sim, &whole).expect("runs");
            for ((o, a), b) in g.outputs.iter().zip(&want).zip(&sim) {
                let e = rel_rms(a, b);
                let bound = if *name == "mlp_f32" { 1e-6 } else { 1e-2 };
                assert!(
                    e < bound,
                    "{name} {}: `{}` rel-RMS {e:.2e} from the simulation",
                    profile.name(),
                    o.0
                );
            }
        }
    }
}

/// What each rank of the MLP loads and sends at 2 ranks: x whole, its block of the gate
/// weight's rows, the down weight as its 4 of 8 K-range slots (read in place by the
/// ranges' GEMMs), one all-gather of the f32 partial between two phases.
#[test]
fn an_mlps_ranks_load_their_blocks_and_k_ranges() {
    use tessel_ir::ranks::Block;
    let g = graph(MLP, &[("T", 5)]);
    let rs = tessel_passes::tp::ranks(&g, &plan(&g, 2).unwrap()).expect("partitions");
    assert_eq!(rs.len(), 2);
    for r in &rs {
        let loads: Vec<(String, u32, Option<Block>, Vec<u64>)> = r
            .inputs
            .iter()
            .map(|i| (i.name.clone(), i.param, i.block, i.ty.shape.0.clone()))
            .collect();
        let mut want = vec![
            ("x".to_string(), 0, None, vec![5, 64]),
            (
                "wg".to_string(),
                1,
                Some(Block {
                    axis: 0,
                    index: r.rank,
                    count: 2,
                }),
                vec![128, 64],
            ),
        ];
        for c in 0..4 {
            let index = r.rank * 4 + c;
            let b = Block {
                axis: 1,
                index,
                count: 8,
            };
            want.push((format!("wd:range{index}"), 2, Some(b), vec![64, 32]));
        }
        assert_eq!(loads, want, "rank {}", r.rank);
        assert_eq!(r.phases.len(), 2, "the partial's phase and the sum's");
        let ex: Vec<_> = r.exchanges().collect();
        assert_eq!(ex.len(), 1);
        assert_eq!(ex[0].ty.to_string(), "f32[5, 64]");
        assert_eq!(r.outputs.len(), 1);
        assert_eq!(
            r.outputs[0].split, None,
            "the MLP's output is whole on every rank"
        );
    }
}

/// A cache updated before a row-parallel matmul's all-gather and again after it would be
/// written by two phases: refused with the reason, not split into two in-place writes.
#[test]
fn a_cache_updated_around_a_collective_is_refused() {
    let src = "step s(x: bf16[T, 64], wa: bf16[128, 64], wb: bf16[64, 128], pos: i32[1], c: inout bf16[1, T, 64]) -> bf16[T, 64] {
        let u = update(c, reshape(x, [1, T, 64]), at: pos, axis: 1);
        let h = (x @ wa^T) @ wb^T;
        reshape(update(u, reshape(h, [1, T, 64]), at: pos, axis: 1), [T, 64])
    }";
    let g = graph(src, &[("T", 4)]);
    let e = tessel_passes::tp::ranks(&g, &plan(&g, 2).expect("plans")).unwrap_err();
    assert!(e.to_string().contains("updated in two phases"), "{e}");
}

/// The matmul rules beyond weights: a split batch dim against a replicated operand of the
/// whole size there (sliced by each rank, no communication), and an activation split by
/// columns on the right — both results split, nothing gathered but the step results.
#[test]
fn activation_matmuls_keep_their_operands_split() {
    let g = graph(STORED_K, &[("T", 6)]);
    let p = plan(&g, 2).expect("plans");
    let of = |name: &str| {
        let v = g.outputs.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let v = v.or_else(|| g.inputs.iter().find(|(n, _)| n == name).map(|(_, v)| *v));
        p.sharding[cranelift_entity::EntityRef::index(v.expect("named"))]
    };
    assert_eq!(of("k"), Sharding::Replicated);
    assert_eq!(of("a"), Sharding::Replicated);
    let outs: Vec<Sharding> = g
        .outputs
        .iter()
        .map(|(_, v)| p.sharding[cranelift_entity::EntityRef::index(*v)])
        .collect();
    assert_eq!(
        outs,
        vec![Sharding::Split { axis: 0 }, Sharding::Split { axis: 1 }]
    );
    let gathers = p
        .collectives
        .iter()
        .filter(|c| matches!(c, Collective::Gather { .. }))
        .count();
    assert_eq!((gathers, p.collectives.len()), (2, 2));
}

/// A weight that something else reads too (found by new users: `sum(wᵀ)` beside `x @ wᵀ`,
/// `x @ xᵀ`, `w @ w`) is not split under its other readers: that matmul runs whole on
/// every rank, and the plan says why in a note; the ranks then give the same bits at
/// every world size.
#[test]
fn a_weight_read_elsewhere_is_not_split() {
    for (src, dims) in [
        (
            "step s(x: f32[T, 32], w: f32[64, 32]) -> f32[T, 64] {
                let wt = w^T;
                x @ wt + sum(sum(wt, axis: 1, keep: true), axis: 0, keep: true)
            }",
            vec![("T", 3)],
        ),
        (
            "step s(x: f32[T, 32]) -> f32[T, T] { x @ x^T }",
            vec![("T", 8)],
        ),
        ("step s(w: f32[16, 16]) -> f32[16, 16] { w @ w }", vec![]),
    ] {
        let g = graph(src, &dims);
        for tp in [2, 4] {
            let p = plan(&g, tp).unwrap_or_else(|e| panic!("{src}: {e}"));
            assert!(
                p.notes.len() == 1 && p.notes[0].contains("is also read by"),
                "{src}: {:?}",
                p.notes
            );
            assert!(p.splits_nothing(), "{src}");
        }
        let whole = inputs_of(&g);
        let opts = tessel_passes::Options {
            verify: true,
            tensor_parallel: true,
            ..Default::default()
        };
        let outs: Vec<Vec<tessel_ref::Tensor>> = [1, 2, 4]
            .iter()
            .map(|&n| {
                let rs: Vec<_> = tessel_passes::tp::ranks(&g, &plan(&g, n).unwrap())
                    .unwrap()
                    .into_iter()
                    .map(|r| {
                        r.try_map(|p| tessel_passes::compile(&p, &opts).map(|c| c.program))
                            .unwrap()
                    })
                    .collect();
                tessel_ref::ranks::run_ranks(&rs, &whole).unwrap()
            })
            .collect();
        assert!(outs.iter().all(|o| *o == outs[0]), "{src}");
    }
}

/// A table read through a gather is never split along the axis it is gathered along: a
/// gather of a column-parallel product along its split columns is refused; a gather along
/// another axis keeps the split (each rank gathers its block of the columns); an embedding
/// table tied to the output projection is read whole by both (the projection runs whole,
/// with a note). Run apart at 1, 2 and 4 ranks, the last two give the same bits as one
/// rank, indices out of range included (seeded i32 inputs are -8..=8).
#[test]
fn a_table_read_through_a_gather_is_never_split_along_it() {
    let refused = graph(
        "step s(x: f32[T, 32], w: f32[64, 32], idx: i32[T, 3]) -> f32[T, 3] {
            take_along_axis(x @ w^T, idx, axis: -1)
        }",
        &[("T", 3)],
    );
    let e = plan(&refused, 2).expect_err("refused");
    assert!(e.to_string().contains("a gather along dim 1"), "{e}");
    for (src, split_nothing) in [
        (
            "step s(ids: i32[T], emb: f32[64, 32]) -> f32[T, 64] { let h = emb[ids]; h @ emb^T }",
            true,
        ),
        (
            "step s(x: f32[T, 32], w: f32[64, 32], ids: i32[5]) -> f32[5, 64] { (x @ w^T)[ids] * 2.0 }",
            false,
        ),
    ] {
        let g = graph(src, &[("T", 7)]);
        let p2 = plan(&g, 2).unwrap_or_else(|e| panic!("{src}: {e}"));
        assert_eq!(p2.splits_nothing(), split_nothing, "{src}: {:?}", p2.sharding);
        if split_nothing {
            assert!(
                p2.notes.iter().any(|n| n.contains("is also read by")),
                "{src}: {:?}",
                p2.notes
            );
        }
        let whole = inputs_of(&g);
        let opts = tessel_passes::Options {
            verify: true,
            tensor_parallel: true,
            ..Default::default()
        };
        let outs: Vec<Vec<tessel_ref::Tensor>> = [1, 2, 4]
            .iter()
            .map(|&n| {
                let rs: Vec<_> = tessel_passes::tp::ranks(&g, &plan(&g, n).unwrap())
                    .unwrap()
                    .into_iter()
                    .map(|r| {
                        r.try_map(|p| tessel_passes::compile(&p, &opts).map(|c| c.program))
                            .unwrap()
                    })
                    .collect();
                tessel_ref::ranks::run_ranks(&rs, &whole).unwrap()
            })
            .collect();
        assert!(outs.iter().all(|o| *o == outs[0]), "{src}");
        assert_eq!(outs[0], run(&g, tessel_passes::Profile::Exact), "{src}");
    }
}

/// A LoRA training step (tests/programs/lora_layer_tp.tsl, 8 query and 4 KV heads), checked
/// and differentiated (the `grad` pass) as `tessel --tp` plans it.
fn training_step(step: &str) -> tessel_ir::graph::Graph {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let m = tessel_syntax::load(&root.join("tests/programs/lora_layer_tp.tsl"))
        .unwrap_or_else(|_| panic!("lora_layer_tp.tsl loads"));
    let dims: BTreeMap<String, u64> = [("T", 9), ("R", 4)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let g = check::run(&m.module, step, &dims).expect("checks");
    tessel_passes::grad::run(&g).expect("differentiates")
}

/// The matmuls of `g` whose right operand is `rhs`, or a permute of it.
fn matmuls_by(
    g: &tessel_ir::graph::Graph,
    rhs: tessel_ir::Value,
    permuted: bool,
) -> Vec<tessel_ir::Value> {
    use tessel_ir::graph::Op;
    g.ops
        .iter()
        .filter_map(|(v, op)| match op {
            Op::MatMul { rhs: r, .. } => {
                let under = match &g.ops[*r] {
                    Op::Permute { arg, .. } => Some(*arg),
                    _ => None,
                };
                let hit = if permuted {
                    under == Some(rhs)
                } else {
                    *r == rhs
                };
                hit.then_some(v)
            }
            _ => None,
        })
        .collect()
}

/// The backward is split by the same plan as the forward (Megatron-LM's split of a LoRA
/// layer): q/k/v and gate/up column-parallel with their adapters' B split by the same
/// rows and A whole; o and down row-parallel with A split by the same columns and B
/// whole; every backward `dX = dY·W` of a column-parallel weight (and `dU = dV·B`) a
/// partial sum completed by the fixed tree, `dY·Wo` split by Wo's columns; the sharded
/// gradients (B of the column-parallel layers, A of the row-parallel ones) gathered, dX
/// and the other gradients whole — the same plan at 1, 2 and 4 ranks. In the training step
/// the AdamW moments of a split adapter are split like it (the update runs on the block).
#[test]
fn a_training_step_is_split_megatron_style() {
    use std::collections::BTreeSet;
    let g = training_step("qwen3_grads");
    let input = |name: &str| g.inputs.iter().find(|(n, _)| n == name).expect(name).1;
    let sh = |p: &tessel_passes::tp::TpPlan, v: tessel_ir::Value| {
        p.sharding[cranelift_entity::EntityRef::index(v)]
    };
    let plans: Vec<_> = [1, 2, 4].map(|n| plan(&g, n).expect("plans")).into();
    for p in &plans {
        let split = |name: &str| sh(p, input(name));
        for w in ["wq", "wk", "wv", "wg", "wu", "bq", "bk", "bv", "bg", "bu"] {
            assert_eq!(split(w), Sharding::Split { axis: 0 }, "{w}");
        }
        for w in ["wo", "wd", "ao", "ad"] {
            assert_eq!(split(w), Sharding::Split { axis: 1 }, "{w}");
        }
        for w in [
            "aq",
            "ak",
            "av",
            "ag",
            "au",
            "bo",
            "bd",
            "x",
            "dy",
            "input_norm",
        ] {
            assert_eq!(split(w), Sharding::Replicated, "{w}");
        }
        let rp = p.row_parallel();
        for w in ["wq", "wk", "wv", "wg", "wu"] {
            // The forward's `h·Wᵀ` (the step's and grad's own forward): column-parallel.
            let fwd = matmuls_by(&g, input(w), true);
            assert_eq!(fwd.len(), 2, "{w}");
            assert!(
                fwd.iter().all(|&m| sh(p, m) == Sharding::Split { axis: 1 }),
                "{w}"
            );
            // The backward's `dY·W`: contracts the split N, completed by the fixed tree.
            let bwd = matmuls_by(&g, input(w), false);
            assert_eq!(bwd.len(), 1, "{w}");
            assert!(rp.contains(&bwd[0]), "{w}: dX = dY·W is not reduced");
        }
        for w in ["wo", "wd", "ao", "ad"] {
            // The forward's row-parallel matmuls (both copies), reduced.
            assert!(
                matmuls_by(&g, input(w), true)
                    .iter()
                    .all(|m| rp.contains(m)),
                "{w}"
            );
            // `dY·Wo`: Wo's columns, split.
            let bwd = matmuls_by(&g, input(w), false);
            assert!(
                !bwd.is_empty() && bwd.iter().all(|&m| sh(p, m) == Sharding::Split { axis: 1 }),
                "{w}"
            );
        }
        for b in ["bq", "bk", "bv", "bg", "bu"] {
            // `dU = dV·B` contracts B's split rows.
            let bwd = matmuls_by(&g, input(b), false);
            assert!(bwd.len() == 1 && rp.contains(&bwd[0]), "{b}");
        }
        // The step's forward: o, down and their A; grad's own forward: o, its A and down's A
        // (the backward reads nothing else of it); the backward's 5 dX and 5 dU.
        assert_eq!(rp.len(), 4 + 3 + 10, "{:?}", p.collectives);
        let gathered: BTreeSet<String> = p
            .collectives
            .iter()
            .filter_map(|c| match c {
                Collective::Gather { names, .. } => Some(names.concat()),
                _ => None,
            })
            .collect();
        let want: BTreeSet<String> = ["dbq", "dbk", "dbv", "dao", "dbg", "dbu", "dad"]
            .map(String::from)
            .into();
        assert_eq!(gathered, want);
        for (name, o) in &g.outputs {
            if !want.contains(name) {
                assert_eq!(sh(p, *o), Sharding::Replicated, "{name}");
            }
        }
        // No base weight is left whole.
        assert!(
            !p.notes.iter().any(|n| ["`wq`", "`wo`", "`wg`", "`wd`"]
                .iter()
                .any(|w| n.contains(w))),
            "{:?}",
            p.notes
        );
    }
    // One structure at every world size (or the sums' association would change with it).
    assert!(plans.iter().all(|p| p.sharding == plans[0].sharding));
    let kinds = |p: &tessel_passes::tp::TpPlan| -> Vec<String> {
        p.collectives
            .iter()
            .map(|c| match c {
                Collective::SumPartials { matmul, .. } => format!("sum {matmul}"),
                Collective::Gather { value, axis, .. } => format!("gather {value} {axis}"),
            })
            .collect()
    };
    assert!(plans.iter().all(|p| kinds(p) == kinds(&plans[0])));

    let t = training_step("qwen3_train");
    let p = plan(&t, 2).expect("plans");
    let of = |name: &str| {
        p.sharding[cranelift_entity::EntityRef::index(
            t.inputs.iter().find(|(n, _)| n == name).expect(name).1,
        )]
    };
    for (x, s) in [
        ("m_bq", Sharding::Split { axis: 0 }),
        ("v_bu", Sharding::Split { axis: 0 }),
        ("m_ao", Sharding::Split { axis: 1 }),
        ("v_ad", Sharding::Split { axis: 1 }),
        ("m_aq", Sharding::Replicated),
        ("v_bo", Sharding::Replicated),
    ] {
        assert_eq!(of(x), s, "{x}");
    }
}

/// The training steps' ranks run apart on the executor give the same bits at 1, 2 and 4
/// ranks in `exact` and `invariant` — gradients (dX, every adapter's), the loss, and every
/// adapter and moment after the AdamW update — and agree with the step as written within
/// bf16 rounding (the partial sums' association is the 8 ranges' tree, not one accumulator).
#[test]
fn training_ranks_give_the_same_bits_at_every_world_size() {
    use tessel_passes::tp::ranks;
    use tessel_passes::Profile;
    for step in ["qwen3_grads", "qwen3_train"] {
        let g = training_step(step);
        let whole = inputs_of(&g);
        for profile in [Profile::Exact, Profile::Invariant] {
            let opts = tessel_passes::Options {
                profile,
                verify: true,
                tensor_parallel: true,
                ..Default::default()
            };
            let run_at = |n: u32| {
                let rs: Vec<_> = ranks(&g, &plan(&g, n).expect("plans"))
                    .expect("partitions")
                    .into_iter()
                    .map(|r| {
                        r.try_map(|p| tessel_passes::compile(&p, &opts).map(|c| c.program))
                            .expect("compiles")
                    })
                    .collect();
                tessel_ref::ranks::run_ranks(&rs, &whole)
                    .unwrap_or_else(|e| panic!("{step} --tp {n}: {e}"))
            };
            let want = run_at(1);
            for n in [2, 4] {
                let got = run_at(n);
                for ((o, a), b) in g.outputs.iter().zip(&got).zip(&want) {
                    assert!(
                        a.data == b.data,
                        "{step} {} --tp {n}: `{}` differs from --tp 1",
                        profile.name(),
                        o.0
                    );
                }
            }
            let written = tessel_passes::compile(&g, &opts).expect("compiles").program;
            let written = tessel_ref::exec::run_program(&written, &whole).expect("runs");
            for ((o, a), b) in g.outputs.iter().zip(&want).zip(&written) {
                let e = rel_rms(a, b);
                assert!(
                    e < 2e-2,
                    "{step} {}: `{}` rel-RMS {e:.2e} from the step as written",
                    profile.name(),
                    o.0
                );
            }
        }
    }
}
