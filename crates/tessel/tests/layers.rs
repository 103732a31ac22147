//! Whole decoder layers: the three models' layer files compile in every profile with one
//! fused attention where tensor cores are allowed (two kernels when decode splits the
//! keys), and the same layers at a small hidden size (tests/programs/layer_small.tsl, the
//! same library) pass `tessel check` on the CPU executor in every profile: prefill at token
//! counts with tails and at positions near 131072 (RoPE's largest angles), decode over a
//! KV cache updated in place (a cache of length 0, a cache split into key ranges, 8 new
//! tokens).

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

/// The fusion groups of each kernel `explain` prints, each with its kind: `kernel NAME
/// (group g3, Matmul)`, `(groups g1, g2, g3, Matmul)` for a kernel `merge-launches` made
/// of several of one kind, `(groups g1 Matmul, g4 Elementwise)` where they differ.
fn kernel_groups(t: &str) -> Vec<Vec<(String, String)>> {
    t.lines()
        .filter_map(|l| l.trim_start().strip_prefix("kernel "))
        .filter_map(|rest| {
            let inner = rest.split_once(" (group")?.1;
            let inner = inner.strip_prefix('s').unwrap_or(inner).trim_start();
            let list = inner.split_once(')')?.0;
            let mut parts: Vec<&str> = list.split(", ").collect();
            if parts.iter().all(|p| p.contains(' ')) {
                let each = parts.iter().filter_map(|p| p.split_once(' '));
                return Some(each.map(|(g, k)| (g.to_string(), k.to_string())).collect());
            }
            let kind = parts.pop()?;
            Some(
                parts
                    .iter()
                    .map(|g| (g.to_string(), kind.to_string()))
                    .collect(),
            )
        })
        .collect()
}

/// How many fusion groups of `kind` the kernels `explain` prints run.
fn groups_of_kind(t: &str, kind: &str) -> usize {
    kernel_groups(t)
        .iter()
        .flatten()
        .filter(|(_, k)| k == kind)
        .count()
}

/// Runs `tessel ARGS` in `dir` and returns its output, asserting success.
fn ok(dir: &std::path::Path, args: &[&str]) -> String {
    let o = tessel(dir, args);
    let t = text(&o);
    assert!(o.status.success(), "{args:?}: {t}");
    t
}

#[test]
fn every_model_layer_compiles_with_one_fused_attention() {
    let d = scratch("layers-explain");
    for model in ["qwen3_14b", "qwen2_5_14b", "qwen3_32b", "llama3_8b"] {
        let file = root(&format!("examples/{model}/layer.tsl"));
        for profile in ["exact", "invariant", "fast"] {
            let common = ["--profile", profile, "--target", "h200"];
            let mut prefill = vec!["explain", &file, "--step", "prefill", "--dim", "T=7"];
            if model == "llama3_8b" {
                // The batched form: x [B, T, 4096].
                prefill.extend(["--dim", "B=1"]);
            }
            prefill.extend(common);
            let t = ok(&d, &prefill);
            let want = usize::from(profile != "exact");
            assert_eq!(
                groups_of_kind(&t, "Attention"),
                want,
                "{model} {profile}\n{t}"
            );
            // Decode over 4096 cache rows: the keys split into ranges, merged by a second
            // kernel of the same group; each cache written by one update group (the two
            // run as one kernel, `merge-launches`).
            let mut decode = vec!["explain", &file, "--step", "decode"];
            decode.extend(["--dim", "B=8", "--dim", "T=1", "--dim", "S=4096"]);
            decode.extend(common);
            let t = ok(&d, &decode);
            assert_eq!(
                groups_of_kind(&t, "Attention"),
                2 * want,
                "{model} {profile}\n{t}"
            );
            assert_eq!(groups_of_kind(&t, "Update"), 2, "{model} {profile}\n{t}");
        }
    }
}

/// The batched form (examples/llama3_8b/layer.tsl: `x [B, T, 4096] @ w^T`): every
/// projection is one GEMM over the B·T rows that reads its 2-D weight in place — seven
/// matmul groups over B·T rows, none batched — and no kernel writes a copy of a weight (a
/// tensor with a weight's [N, K] in its last two dims). In `exact` the unfused attention
/// adds its own batched matmuls over the heads; split-K adds a second kernel to a group.
#[test]
fn the_batched_llama_layer_reads_each_weight_once() {
    let d = scratch("layers-batched");
    let file = root("examples/llama3_8b/layer.tsl");
    for profile in ["exact", "invariant", "fast"] {
        for (step, dims, rows) in [
            ("prefill", vec!["B=2", "T=33"], 66),
            ("decode", vec!["B=8", "T=1", "S=4096"], 8),
        ] {
            let mut args = vec!["explain", &file, "--step", step, "--profile", profile];
            for dm in &dims {
                args.extend(["--dim", dm]);
            }
            args.extend(["--target", "h200"]);
            let t = ok(&d, &args);
            // Each kernel's groups and reasons: `kernel NAME (group gN, Matmul) ...`, then
            // its `why:` line (`why (gN):` per group of a merged kernel).
            let mut projections = std::collections::BTreeSet::new();
            let mut groups: Vec<String> = vec![];
            for line in t.lines() {
                let line = line.trim_start();
                if line.starts_with("kernel ") {
                    groups = kernel_groups(line)
                        .into_iter()
                        .flatten()
                        .filter(|(_, k)| k == "Matmul")
                        .map(|(g, _)| g)
                        .collect();
                } else if let Some(rest) = line.strip_prefix("why") {
                    let (g, why) = match rest.strip_prefix(": ") {
                        Some(why) => (groups.first().cloned(), why),
                        None => match rest.strip_prefix(" (").and_then(|r| r.split_once("): ")) {
                            Some((g, why)) => (Some(g.to_string()), why),
                            None => continue,
                        },
                    };
                    let Some(g) = g.filter(|g| groups.contains(g)) else {
                        continue;
                    };
                    let over_rows = why.contains(&format!("M = {rows}, "))
                        || why.contains(&format!("M = {rows} ≤ 16"));
                    if over_rows {
                        assert!(why.contains("batch 1") || !why.contains("batch "), "{why}");
                        projections.insert(g.clone());
                    }
                }
            }
            assert_eq!(
                projections.len(),
                7,
                "{step} {profile}: {projections:?}\n{t}"
            );
            for w in ["4096, 4096]", "1024, 4096]", "14336, 4096]", "4096, 14336]"] {
                assert!(
                    !t.contains(w),
                    "{step} {profile}: a kernel writes a weight's shape {w}\n{t}"
                );
            }
        }
    }
}

#[test]
fn small_layers_pass_check_in_every_profile() {
    let d = scratch("layers-check");
    let file = root("tests/programs/layer_small.tsl");
    for (t, offset) in [("1", "0"), ("7", "131000"), ("70", "0")] {
        for profile in ["exact", "invariant", "fast"] {
            for step in ["qwen3", "qwen2"] {
                let (dim, fill) = (format!("T={t}"), format!("pos=iota:{offset}"));
                let args = [
                    "check",
                    &file,
                    "--step",
                    step,
                    "--cpu",
                    "--profile",
                    profile,
                    "--dim",
                    &dim,
                    "--fill",
                    &fill,
                ];
                let out = ok(&d, &args);
                assert_eq!(out.matches(": PASS — ").count(), 2, "{args:?}: {out}");
            }
        }
    }
    // The batched Llama prefill: two sequences, at positions with tails and near RoPE's
    // largest angles.
    for (b, t, offset) in [("1", "1", "0"), ("2", "7", "131000"), ("3", "5", "0")] {
        for profile in ["exact", "invariant", "fast"] {
            let (bd, td, fill) = (
                format!("B={b}"),
                format!("T={t}"),
                format!("pos=iota:{offset}"),
            );
            let args = [
                "check",
                &file,
                "--step",
                "llama",
                "--cpu",
                "--profile",
                profile,
                "--dim",
                &bd,
                "--dim",
                &td,
                "--fill",
                &fill,
            ];
            let out = ok(&d, &args);
            assert_eq!(out.matches(": PASS — ").count(), 2, "{args:?}: {out}");
        }
    }
    // Decode: the outputs include both caches, their untouched rows judged bit for bit.
    for step in ["qwen3_decode", "llama_decode"] {
        for (b, t, s) in [("2", "1", "1"), ("3", "1", "600"), ("2", "8", "40")] {
            for profile in ["exact", "invariant", "fast"] {
                let dims = [format!("B={b}"), format!("T={t}"), format!("S={s}")];
                let mut args = vec!["check", &file, "--step", step, "--cpu"];
                args.extend(["--profile", profile]);
                for dm in &dims {
                    args.extend(["--dim", dm.as_str()]);
                }
                let out = ok(&d, &args);
                assert_eq!(out.matches(": PASS — ").count(), 4, "{args:?}: {out}");
            }
        }
    }
}

/// The LoRA training steps at a small hidden size (tests/programs/lora_layer_small.tsl, the
/// library of examples/lora/*_lora.tsl): every output — the layer's, dX and the fourteen
/// adapter gradients, or the loss and the gradients, or the loss and the AdamW-updated
/// adapters and moments — judged against the references in every profile, at one and at
/// seven tokens.
#[test]
fn small_lora_training_steps_pass_check_in_every_profile() {
    let d = scratch("lora-layers-check");
    let file = root("tests/programs/lora_layer_small.tsl");
    for t in ["1", "7"] {
        for profile in ["exact", "invariant", "fast"] {
            // qwen3_train: the loss and the 14 adapters and 28 moments updated in place.
            for (step, outputs) in [
                ("qwen3_grads", 16),
                ("qwen2_mse_grads", 15),
                ("qwen3_train", 43),
            ] {
                let dim = format!("T={t}");
                let args = [
                    "check",
                    &file,
                    "--step",
                    step,
                    "--cpu",
                    "--profile",
                    profile,
                    "--dim",
                    &dim,
                    "--dim",
                    "R=4",
                    "--fill",
                    "pos=iota:0",
                ];
                let out = ok(&d, &args);
                assert_eq!(out.matches(": PASS — ").count(), outputs, "{args:?}: {out}");
            }
        }
    }
}

/// The whole-layer LoRA training steps of the two 14B models compile in every profile
/// (their executor runs are the small-size test's; the GPU runs are scripts/gpu-*.sh's).
#[test]
fn the_lora_training_examples_compile() {
    let d = scratch("lora-layers-build");
    for file in [
        "examples/lora/qwen3_14b_lora.tsl",
        "examples/lora/qwen2_5_14b_lora.tsl",
    ] {
        let file = root(file);
        for profile in ["exact", "invariant", "fast"] {
            let args = [
                "build",
                &file,
                "--profile",
                profile,
                "--dim",
                "T=64",
                "--dim",
                "R=16",
                "-o",
                "out",
            ];
            ok(&d, &args);
        }
    }
}
