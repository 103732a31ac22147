//! Whole decoder layers: the three models' layer files compile in every profile with one
//! fused attention kernel where tensor cores are allowed, and the same layers at a small
//! hidden size (tests/programs/layer_small.tsl, the same library) pass `tessel check` on the
//! CPU executor in every profile, at token counts with tails, at position offsets near
//! 131072 (RoPE's largest angles).

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

#[test]
fn every_model_layer_compiles_with_one_fused_attention() {
    let d = scratch("layers-explain");
    for model in ["qwen3_14b", "qwen2_5_14b", "qwen3_32b"] {
        let file = root(&format!("examples/{model}/layer.tsl"));
        for profile in ["exact", "invariant", "fast"] {
            let o = tessel(
                &d,
                &[
                    "explain",
                    &file,
                    "--dim",
                    "T=7",
                    "--profile",
                    profile,
                    "--target",
                    "h200",
                ],
            );
            let t = text(&o);
            assert!(o.status.success(), "{model} {profile}: {t}");
            let fused = t.matches(", Attention)").count();
            let want = usize::from(profile != "exact");
            assert_eq!(
                fused, want,
                "{model} {profile}: fused attention kernels\n{t}"
            );
        }
    }
}

#[test]
fn small_layers_pass_check_in_every_profile() {
    let d = scratch("layers-check");
    let file = root("tests/programs/layer_small.tsl");
    for (t, offset) in [("1", "0"), ("7", "131000"), ("70", "0")] {
        for profile in ["exact", "invariant", "fast"] {
            let o = tessel(
                &d,
                &[
                    "check",
                    &file,
                    "--cpu",
                    "--profile",
                    profile,
                    "--dim",
                    &format!("T={t}"),
                    "--fill",
                    &format!("pos=iota:{offset}"),
                ],
            );
            let out = text(&o);
            assert!(o.status.success(), "T={t} {profile}: {out}");
            assert_eq!(
                out.matches(": PASS — ").count(),
                4,
                "T={t} {profile}: {out}"
            );
        }
    }
}
