//! The tensor-parallel plan's rules on small steps: what it splits, and what it refuses
//! with a reason rather than replicating silently.

use std::collections::BTreeMap;
use tessel_passes::tp::{plan, Collective, Sharding};
use tessel_passes::{check, decompose};

fn graph(src: &str, dims: &[(&str, u64)]) -> tessel_ir::graph::Graph {
    let m = tessel_syntax::parse(src).expect("parses");
    let d: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    decompose::run(&check::run(&m, "s", &d).expect("checks"))
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
