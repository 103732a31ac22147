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
    for model in ["qwen3_14b", "qwen2_5_14b", "qwen3_32b"] {
        let file = root(&format!("examples/{model}/layer.tsl"));
        for profile in ["exact", "invariant", "fast"] {
            let common = ["--profile", profile, "--target", "h200"];
            let mut prefill = vec!["explain", &file, "--step", "prefill", "--dim", "T=7"];
            prefill.extend(common);
            let t = ok(&d, &prefill);
            let want = usize::from(profile != "exact");
            assert_eq!(
                t.matches(", Attention)").count(),
                want,
                "{model} {profile}\n{t}"
            );
            // Decode over 4096 cache rows: the keys split into ranges, merged by a second
            // kernel of the same group; each cache written by one update kernel.
            let mut decode = vec!["explain", &file, "--step", "decode"];
            decode.extend(["--dim", "B=8", "--dim", "T=1", "--dim", "S=4096"]);
            decode.extend(common);
            let t = ok(&d, &decode);
            assert_eq!(
                t.matches(", Attention)").count(),
                2 * want,
                "{model} {profile}\n{t}"
            );
            assert_eq!(t.matches(", Update)").count(), 2, "{model} {profile}\n{t}");
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
    // Decode: the outputs include both caches, their untouched rows judged bit for bit.
    for (b, t, s) in [("2", "1", "1"), ("3", "1", "600"), ("2", "8", "40")] {
        for profile in ["exact", "invariant", "fast"] {
            let dims = [format!("B={b}"), format!("T={t}"), format!("S={s}")];
            let mut args = vec!["check", &file, "--step", "qwen3_decode", "--cpu"];
            args.extend(["--profile", profile]);
            for dm in &dims {
                args.extend(["--dim", dm.as_str()]);
            }
            let out = ok(&d, &args);
            assert_eq!(out.matches(": PASS — ").count(), 4, "{args:?}: {out}");
        }
    }
}
