//! The tensor-parallel plan (`tessel explain --tp N`, tessel-passes `tp`) of the three
//! Qwen layers, prefill and decode, at every world size it takes: q/k/v and gate/up split
//! by output columns, o and down by input rows with one deterministic all-reduce after
//! each, KV caches split by heads, the attention output gathered, the layer output
//! replicated; and the sizes the plan refuses, with their reasons.

mod common;
use common::{scratch, tessel, text};
use std::path::PathBuf;

fn root(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
        .display()
        .to_string()
}

/// (model, hidden, query heads · head dim, KV heads, intermediate).
const MODELS: [(&str, u64, u64, u64, u64); 3] = [
    ("qwen3_14b", 5120, 5120, 8, 17408),
    ("qwen2_5_14b", 5120, 5120, 8, 13824),
    ("qwen3_32b", 5120, 8192, 8, 25600),
];

fn plan(model: &str, step: &str, dims: &[&str], tp: u32) -> (bool, String) {
    let d = scratch(&format!("tp-{model}-{step}-{tp}"));
    let file = root(&format!("examples/{model}/layer.tsl"));
    let tp = tp.to_string();
    let mut args = vec![
        "explain", &file, "--step", step, "--target", "h200", "--tp", &tp,
    ];
    for x in dims {
        args.extend(["--dim", x]);
    }
    let o = tessel(&d, &args);
    (o.status.success(), text(&o))
}

fn line<'a>(t: &'a str, start: &str) -> &'a str {
    t.lines()
        .find(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no line `{start}` in\n{t}"))
}

#[test]
fn every_layer_splits_megatron_style_at_every_world_size() {
    for (model, hidden, qd, kv, inter) in MODELS {
        for (step, dims, rows) in [
            ("prefill", vec!["T=64"], 64u64),
            ("decode", vec!["B=2", "T=3", "S=64"], 6),
        ] {
            // Every world size for one model, the largest for the others (each `explain`
            // compiles the step and assembles it with ptxas when installed: seconds).
            let sizes: &[u32] = if model == "qwen3_14b" {
                &[1, 2, 4, 8]
            } else {
                &[8]
            };
            for &tp in sizes {
                let (ok, t) = plan(model, step, &dims, tp);
                assert!(ok, "{model} {step} --tp {tp}: {t}");
                let n = tp as u64;
                let split = |name: &str, axis: u32, block: [u64; 2]| {
                    let l = line(&t, &format!("input {name} "));
                    let want = format!("split along dim {axis}: rank r holds block r, {block:?}");
                    assert!(l.contains(&want), "{model} {step} --tp {tp}: {l}");
                };
                split("wq", 0, [qd / n, hidden]);
                split("wk", 0, [kv * 128 / n, hidden]);
                split("wv", 0, [kv * 128 / n, hidden]);
                split("wo", 1, [hidden, qd / n]);
                split("wg", 0, [inter / n, hidden]);
                split("wu", 0, [inter / n, hidden]);
                split("wd", 1, [hidden, inter / n]);
                for name in ["x ", "input_norm", "post_norm"] {
                    assert!(line(&t, &format!("input {name}")).contains("whole on every rank"));
                }
                let reduce: Vec<&str> = t
                    .lines()
                    .filter(|l| l.contains("(row-parallel matmul)"))
                    .collect();
                assert_eq!(reduce.len(), 2, "{model} {step} --tp {tp}: o and down\n{t}");
                let bytes = (n - 1) * rows * hidden * 4;
                for l in reduce {
                    assert!(l.contains(&format!("[{rows}, {hidden}]")), "{l}");
                    assert!(l.contains(&format!(" {bytes} bytes sent per rank")), "{l}");
                }
                assert!(line(&t, "result attn").contains("gathered"), "{t}");
                assert!(
                    !t.contains("result out"),
                    "the layer output is replicated\n{t}"
                );
                // Rank 0's program: the o and down partials and the attention output's
                // block all-gathered, in that order; the partials f32 and whole-shaped.
                let gathers: Vec<&str> = t
                    .lines()
                    .filter(|l| l.trim_start().starts_with("then all-gather"))
                    .collect();
                assert_eq!(gathers.len(), 3, "{model} {step} --tp {tp}\n{t}");
                let partial = format!("f32[{rows}, {hidden}], {} bytes)", rows * hidden * 4);
                let partials = gathers.iter().filter(|l| l.contains(":partial`")).count();
                assert_eq!(partials, 2, "{gathers:?}");
                assert!(gathers
                    .iter()
                    .filter(|l| l.contains(":partial`"))
                    .all(|l| l.contains(&partial)));
                // [T, heads · d / tp] in prefill, [B, T, heads · d / tp] in decode.
                let block = format!(", {}], {} bytes)", qd / n, rows * qd / n * 2);
                assert!(gathers
                    .iter()
                    .any(|l| l.contains(":block`") && l.contains(&block)));
                assert!(
                    line(&t, "rank 0 of").contains("in 4 phases, 3 all-gathers"),
                    "{t}"
                );
                if step == "decode" {
                    for cache in ["k_cache", "v_cache"] {
                        let l = line(&t, &format!("input {cache}"));
                        let want = format!(
                            "split along dim 1: rank r holds block r, [2, {}, 64, 128]",
                            kv / n
                        );
                        assert!(l.contains(&want), "{model} --tp {tp}: {l}");
                    }
                }
            }
        }
    }
}

#[test]
fn world_sizes_the_plan_cannot_take_are_refused_with_the_reason() {
    let (ok, t) = plan("qwen3_14b", "prefill", &["T=64"], 3);
    assert!(
        !ok && t.contains("--tp 3: the world size must divide the 8 K ranges"),
        "{t}"
    );
    let (ok, t) = plan("qwen3_14b", "decode", &["B=1", "T=1", "S=16"], 16);
    assert!(!ok && t.contains("1, 2, 4 or 8"), "{t}");
}

/// `tessel run --tp N` runs the simulated ranks (tessel-passes `tp::simulate`): the small
/// 4-KV-head layer's outputs (tests/programs/layer_tp.tsl) have the same digests at 1, 2
/// and 4 ranks in the invariant profile; `--tp 3` is refused with the reason.
#[test]
fn run_with_tp_gives_the_same_outputs_at_every_world_size() {
    let file = root("tests/programs/layer_tp.tsl");
    let digests: Vec<Vec<String>> = [1, 2, 4]
        .iter()
        .map(|n| {
            let d = scratch(&format!("tp-run-{n}"));
            let n = n.to_string();
            let args = [
                "run",
                &file,
                "--cpu",
                "--dim",
                "T=9",
                "--profile",
                "invariant",
                "--tp",
                &n,
            ];
            let o = tessel(&d, &args);
            let t = text(&o);
            assert!(o.status.success(), "--tp {n}: {t}");
            // The ranks run, apart, with their all-gathers (not the one-graph simulation).
            let ranks = format!("ranks: {n} on the executor one after another");
            assert!(t.contains(&ranks), "--tp {n}: {t}");
            let each = if n == "1" {
                "1 rank, each".to_string()
            } else {
                format!("{n} ranks, each")
            };
            assert!(t.contains(&each), "--tp {n}: {t}");
            t.lines()
                .filter(|l| l.contains("digest"))
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(digests[0].len(), 2, "{:?}", digests[0]);
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    let d = scratch("tp-run-3");
    let o = tessel(&d, &["run", &file, "--cpu", "--dim", "T=9", "--tp", "3"]);
    assert!(
        !o.status.success() && text(&o).contains("1, 2, 4 or 8"),
        "{}",
        text(&o)
    );
}

/// `tessel tp-check` on the executor: the small layers' ranks at 1 and 2 give every output
/// bit-identical (prefill and decode, caches included); too few sizes, a world size the
/// plan does not take, and `--tp` with `check` are refused with the reason.
#[test]
fn tp_check_compares_the_ranks_at_every_world_size() {
    let file = root("tests/programs/layer_small.tsl");
    let d = scratch("tp-check");
    let dims = ["--dim", "B=3", "--dim", "T=2", "--dim", "S=24"];
    let mut args = vec!["tp-check", &file, "--cpu", "--sizes", "1,2"];
    args.extend(dims);
    let o = tessel(&d, &args);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("tp-check: PASS"), "{t}");
    // Five steps (qwen3, qwen2, qwen3_decode and the batched llama, llama_decode), one
    // comparison each (--tp 2 against --tp 1), the decodes' 4 outputs.
    assert_eq!(t.matches("bit-identical").count(), 5, "{t}");
    assert!(t.contains("4 outputs (80640 bytes) bit-identical"), "{t}");
    for (sizes, want) in [("2", "at least two world sizes"), ("1,3", "1, 2, 4 or 8")] {
        let mut args = vec!["tp-check", &file, "--cpu", "--sizes", sizes];
        args.extend(dims);
        let o = tessel(&d, &args);
        assert!(
            !o.status.success() && text(&o).contains(want),
            "--sizes {sizes}: {}",
            text(&o)
        );
    }
    let o = tessel(&d, &["check", &file, "--cpu", "--tp", "2"]);
    assert!(
        !o.status.success() && text(&o).contains("tessel tp-check"),
        "{}",
        text(&o)
    );
}

/// The LoRA training steps under `--tp`: `tessel tp-check` on the executor gives every
/// output — the gradients, the loss, every adapter and AdamW moment after the update —
/// bit-identical at 1, 2 and 4 ranks in `exact` and `invariant` for the 4-KV-head layer
/// (tests/programs/lora_layer_tp.tsl), and at 1 and 2 for the 2-KV-head one
/// (tests/programs/lora_layer_small.tsl), whose heads 4 ranks cannot divide (refused).
#[test]
fn tp_check_of_the_lora_training_steps_at_every_world_size() {
    let file = root("tests/programs/lora_layer_tp.tsl");
    let d = scratch("tp-check-lora");
    let dims = ["--dim", "T=9", "--dim", "R=4"];
    for profile in ["exact", "invariant"] {
        let mut args = vec![
            "tp-check",
            &file,
            "--cpu",
            "--sizes",
            "1,2,4",
            "--profile",
            profile,
        ];
        args.extend(dims);
        let o = tessel(&d, &args);
        let t = text(&o);
        assert!(o.status.success() && t.contains("tp-check: PASS"), "{t}");
        // Three steps, two comparisons each; the train step's 43 outputs (the loss, 14
        // adapters, 28 moments).
        assert_eq!(t.matches("bit-identical").count(), 6, "{t}");
        assert_eq!(
            t.matches("43 outputs (182788 bytes) bit-identical").count(),
            2,
            "{t}"
        );
    }
    let small = root("tests/programs/lora_layer_small.tsl");
    let mut args = vec!["tp-check", &small, "--cpu", "--sizes", "1,2"];
    args.extend(dims);
    let o = tessel(&d, &args);
    let t = text(&o);
    assert!(o.status.success() && t.contains("tp-check: PASS"), "{t}");
    assert_eq!(t.matches("bit-identical").count(), 3, "{t}");
    let mut args = vec!["tp-check", &small, "--cpu", "--sizes", "1,4"];
    args.extend(dims);
    let o = tessel(&d, &args);
    assert!(
        !o.status.success() && text(&o).contains("heads must divide among the ranks"),
        "{}",
        text(&o)
    );
}

/// The Qwen3-14B LoRA training steps (examples/lora/qwen3_14b_lora.tsl) are split
/// Megatron-style at 4 ranks: the base weights by heads and intermediate columns, each
/// adapter with its base (B of q/k/v/gate/up by rows, A of o/down by columns, the others
/// whole), the AdamW moments with their adapters; the sharded gradients gathered.
#[test]
fn the_lora_training_steps_split_like_the_layer() {
    let file = root("examples/lora/qwen3_14b_lora.tsl");
    let d = scratch("tp-lora-14b");
    for step in ["grads", "train"] {
        let args = [
            "explain", &file, "--step", step, "--target", "h200", "--tp", "4", "--dim", "T=8",
            "--dim", "R=16",
        ];
        let o = tessel(&d, &args);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(!t.contains("nothing is split"), "{t}");
        for (input, want) in [
            (
                "wq [5120, 5120]",
                "split along dim 0: rank r holds block r, [1280, 5120]",
            ),
            (
                "wk [1024, 5120]",
                "split along dim 0: rank r holds block r, [256, 5120]",
            ),
            (
                "wo [5120, 5120]",
                "split along dim 1: rank r holds block r, [5120, 1280]",
            ),
            (
                "wg [17408, 5120]",
                "split along dim 0: rank r holds block r, [4352, 5120]",
            ),
            (
                "wd [5120, 17408]",
                "split along dim 1: rank r holds block r, [5120, 4352]",
            ),
            ("aq [16, 5120]", "whole on every rank"),
            (
                "bq [5120, 16]",
                "split along dim 0: rank r holds block r, [1280, 16]",
            ),
            (
                "ao [16, 5120]",
                "split along dim 1: rank r holds block r, [16, 1280]",
            ),
            ("bo [5120, 16]", "whole on every rank"),
            ("bd [5120, 16]", "whole on every rank"),
        ] {
            let l = line(&t, &format!("input {input}:"));
            assert!(l.contains(want), "{step} {input}: {l}");
        }
        if step == "train" {
            let l = line(&t, "input m_bg [17408, 16]:");
            assert!(l.contains("[4352, 16]"), "{l}");
            let l = line(&t, "input v_ad [16, 17408]:");
            assert!(l.contains("[16, 4352]"), "{l}");
        } else {
            for g in ["dbq", "dbk", "dbv", "dao", "dbg", "dbu", "dad"] {
                line(&t, &format!("result {g} "));
            }
            assert!(!t.contains("result dx "), "{t}");
        }
    }
}
