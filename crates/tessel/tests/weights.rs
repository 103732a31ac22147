//! `--weights` and `--layer`: step parameters declared `from "tensor.name"` read from a
//! safetensors checkpoint laid out as Hugging Face writes one (one file, a directory with
//! `model.safetensors`, or a sharded directory with `model.safetensors.index.json`), written
//! here with the `safetensors` crate. Outputs are compared with the loaded tensors; each
//! problem a checkpoint can have must be one clear error naming the tensor or the file,
//! before anything compiles. No GPU needed (`--cpu`).

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::Path;

mod common;
use common::{scratch, tessel, text, write};

/// The bytes of f32 values, little-endian.
fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes a safetensors file holding `tensors` (name, dtype, shape, bytes).
fn checkpoint(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.to_string(),
                TensorView::new(*d, s.clone(), b).expect("view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write safetensors");
}

/// Tensor `name` of the safetensors file `path`, as f32 values.
fn read_f32(path: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("outputs parse");
    let t = st.tensor(name).expect("output tensor");
    assert_eq!(t.dtype(), Dtype::F32);
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Two layers of a 2x3 weight and a norm: exact small values, so `2 w + b` is exact too.
fn layer_weight(layer: usize) -> Vec<f32> {
    (0..6).map(|i| (layer * 10 + i) as f32 + 0.5).collect()
}
const NORM: [f32; 3] = [1.0, -2.0, 0.25];

const STEP: &str = "\
step s(
    x: f32[3],
    w: f32[2, 3] from \"model.layers.{layer}.mlp.weight\",
    b: f32[3] from \"model.norm.weight\",
) -> f32[2, 3] {
    w * 2.0 + b + x * 0.0
}
";

fn expected(layer: usize) -> Vec<f32> {
    layer_weight(layer)
        .iter()
        .enumerate()
        .map(|(i, w)| 2.0 * w + NORM[i % 3])
        .collect()
}

fn small_checkpoint(path: &Path) {
    checkpoint(
        path,
        &[
            (
                "model.layers.0.mlp.weight",
                Dtype::F32,
                vec![2, 3],
                f32s(&layer_weight(0)),
            ),
            (
                "model.layers.1.mlp.weight",
                Dtype::F32,
                vec![2, 3],
                f32s(&layer_weight(1)),
            ),
            ("model.norm.weight", Dtype::F32, vec![3], f32s(&NORM)),
        ],
    );
}

#[test]
fn a_single_file_feeds_the_from_parameters_of_the_layer_asked_for() {
    let d = scratch("weights-single");
    write(&d, "s.tsl", STEP);
    small_checkpoint(&d.join("ckpt.safetensors"));
    for layer in [0, 1] {
        let out = format!("out{layer}.safetensors");
        let l = layer.to_string();
        let args = [
            "run",
            "s.tsl",
            "--cpu",
            "--weights",
            "ckpt.safetensors",
            "--layer",
            &l,
        ];
        let o = tessel(&d, &[&args[..], &["-o", &out]].concat());
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(
            t.contains(&format!(
                "w from --weights: `model.layers.{layer}.mlp.weight` in ckpt.safetensors"
            )),
            "{t}"
        );
        assert_eq!(read_f32(&d.join(&out), "out"), expected(layer));
    }
    // `check` and `invariance` read the same tensors.
    let o = tessel(
        &d,
        &[
            "check",
            "s.tsl",
            "--cpu",
            "--weights",
            "ckpt.safetensors",
            "--layer",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    write(
        &d,
        "rows.tsl",
        "step r(x: f32[M, 3], w: f32[3] from \"model.norm.weight\") -> f32[M, 3] { x * w }\n",
    );
    let o = tessel(
        &d,
        &[
            "invariance",
            "rows.tsl",
            "--cpu",
            "--batch-dim",
            "M",
            "--sizes",
            "1,3",
            "--weights",
            "ckpt.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Without --weights the parameters are inputs as any other: seeded random.
    let o = tessel(&d, &["run", "s.tsl", "--cpu", "-o", "random.safetensors"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_ne!(read_f32(&d.join("random.safetensors"), "out"), expected(1));
}

#[test]
fn a_directory_with_model_safetensors() {
    let d = scratch("weights-dir");
    write(&d, "s.tsl", STEP);
    small_checkpoint(&d.join("Qwen3-tiny/model.safetensors"));
    let o = tessel(
        &d,
        &[
            "run",
            "s.tsl",
            "--cpu",
            "--weights",
            "Qwen3-tiny",
            "--layer",
            "1",
            "-o",
            "o.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("in Qwen3-tiny/model.safetensors"),
        "{}",
        text(&o)
    );
    assert_eq!(read_f32(&d.join("o.safetensors"), "out"), expected(1));
    // bf16 as stored: the top half of each f32 (1.5 and -3.0 are exact).
    let bf16: Vec<u8> = [1.5f32, -3.0]
        .iter()
        .flat_map(|x| x.to_le_bytes()[2..].to_vec())
        .collect();
    checkpoint(
        &d.join("half/model.safetensors"),
        &[("model.half", Dtype::BF16, vec![2], bf16)],
    );
    write(
        &d,
        "h.tsl",
        "step h(w: bf16[2] from \"model.half\") -> f32[2] { f32(w) * 2.0 }\n",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "h.tsl",
            "--cpu",
            "--weights",
            "half",
            "-o",
            "h.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(read_f32(&d.join("h.safetensors"), "out"), [3.0, -6.0]);
}

/// A sharded checkpoint: `model.safetensors.index.json` and the shards it names.
fn sharded(dir: &Path, extra_shard: bool) {
    checkpoint(
        &dir.join("model-00001-of-00002.safetensors"),
        &[
            (
                "model.layers.0.mlp.weight",
                Dtype::F32,
                vec![2, 3],
                f32s(&layer_weight(0)),
            ),
            (
                "model.layers.1.mlp.weight",
                Dtype::F32,
                vec![2, 3],
                f32s(&layer_weight(1)),
            ),
        ],
    );
    checkpoint(
        &dir.join("model-00002-of-00002.safetensors"),
        &[("model.norm.weight", Dtype::F32, vec![3], f32s(&NORM))],
    );
    let mut map = serde_json::json!({
        "model.layers.0.mlp.weight": "model-00001-of-00002.safetensors",
        "model.layers.1.mlp.weight": "model-00001-of-00002.safetensors",
        "model.norm.weight": "model-00002-of-00002.safetensors",
    });
    if extra_shard {
        map["lm_head.weight"] = "model-00003-of-00003.safetensors".into();
    }
    let index = serde_json::json!({"metadata": {"total_size": 60}, "weight_map": map});
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index).unwrap(),
    )
    .unwrap();
}

#[test]
fn a_sharded_checkpoint_is_read_through_its_index() {
    let d = scratch("weights-sharded");
    write(&d, "s.tsl", STEP);
    // The index names a third shard the directory lacks: no step needs it, so it is never
    // opened (a real checkpoint is read one layer at a time).
    sharded(&d.join("ckpt"), true);
    let o = tessel(
        &d,
        &[
            "run",
            "s.tsl",
            "--cpu",
            "--weights",
            "ckpt",
            "--layer",
            "0",
            "-o",
            "o.safetensors",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("`model.layers.0.mlp.weight` in ckpt/model-00001-of-00002.safetensors"),
        "{t}"
    );
    assert!(
        t.contains("`model.norm.weight` in ckpt/model-00002-of-00002.safetensors"),
        "{t}"
    );
    assert_eq!(read_f32(&d.join("o.safetensors"), "out"), expected(0));
    // A step that needs it: the missing shard is named.
    write(
        &d,
        "head.tsl",
        "step h(w: f32[3] from \"lm_head.weight\") -> f32[3] { w }\n",
    );
    let o = tessel(&d, &["run", "head.tsl", "--cpu", "--weights", "ckpt"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("parameter `w`: cannot open ckpt/model-00003-of-00003.safetensors"),
        "{t}"
    );
    assert!(
        t.contains("a shard ckpt/model.safetensors.index.json names"),
        "{t}"
    );
    assert!(!t.contains("panicked"), "{t}");
}

#[test]
fn every_problem_of_a_step_is_reported_at_once_before_compiling() {
    let d = scratch("weights-problems");
    small_checkpoint(&d.join("ckpt.safetensors"));
    checkpoint(
        &d.join("more.safetensors"),
        &[
            ("model.norm.weight", Dtype::F32, vec![3], f32s(&NORM)),
            ("model.bias", Dtype::F32, vec![3], f32s(&NORM)),
            ("model.rot", Dtype::F64, vec![3], vec![0; 24]),
        ],
    );
    write(
        &d,
        "p.tsl",
        "step p(
    a: f32[2, 3] from \"model.layers.{layer}.mlp.weight\",
    b: f32[3] from \"model.norm.weigth\",
    c: f32[4] from \"model.norm.weight\",
    d: bf16[3] from \"model.bias\",
    e: f32[3] from \"model.rot\",
) -> f32[3] {
    b
}
",
    );
    let o = tessel(
        &d,
        &["run", "p.tsl", "--cpu", "--weights", "more.safetensors"],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("--weights more.safetensors: step `p` cannot take its weights (5 problems):"),
        "{t}"
    );
    for want in [
        "parameter `a` (\"model.layers.{layer}.mlp.weight\") names its tensor with `{layer}`, and no --layer N says which layer",
        "parameter `b`: no tensor `model.norm.weigth` in more.safetensors; the closest of its 3 names: `model.norm.weight`, `model.rot`, `model.bias`",
        "parameter `c`: tensor `model.norm.weight` in more.safetensors is f32[3], the step declares f32[4] (the shapes differ)",
        "parameter `d`: tensor `model.bias` in more.safetensors is f32[3], the step declares bf16[3] (the dtypes differ; nothing is converted)",
        "parameter `e`: tensor `model.rot` in more.safetensors is F64[3] (no tessel dtype), the step declares f32[3]",
    ] {
        assert!(t.contains(want), "{want}\n---\n{t}");
    }
    // Nothing was compiled or run.
    assert!(!t.contains("device:") && !t.contains("kernel"), "{t}");
    // A missing layer names the tensor and the layers there are.
    write(&d, "s.tsl", STEP);
    let o = tessel(
        &d,
        &[
            "run",
            "s.tsl",
            "--cpu",
            "--weights",
            "ckpt.safetensors",
            "--layer",
            "7",
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("parameter `w`: no tensor `model.layers.7.mlp.weight` in ckpt.safetensors (it holds layers 0, 1); the closest of its 3 names: `model.layers.0.mlp.weight`, `model.layers.1.mlp.weight`"), "{t}");
    // Several tensors of a layer the checkpoint lacks: one problem naming them all, not one
    // per parameter; and several parameters needing `{layer}` without --layer: one problem.
    write(
        &d,
        "two.tsl",
        "step two(
    u: f32[2, 3] from \"model.layers.{layer}.mlp.weight\",
    v: f32[2, 3] from \"model.layers.{layer}.mlp.weight\",
) -> f32[2, 3] {
    u + v
}
",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "two.tsl",
            "--cpu",
            "--weights",
            "ckpt.safetensors",
            "--layer",
            "7",
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("(1 problem):"), "{t}");
    assert!(t.contains("2 tensors are not in ckpt.safetensors (it holds layers 0, 1): `model.layers.7.mlp.weight` (parameter `u`)"), "{t}");
    // The other missing names come first, then the names nearest the first one, labelled.
    assert!(t.contains("and 1 more (`model.layers.7.mlp.weight`); for `model.layers.7.mlp.weight`, the closest of its 3 names: `model.layers.0.mlp.weight`"), "{t}");
    let o = tessel(
        &d,
        &["run", "two.tsl", "--cpu", "--weights", "ckpt.safetensors"],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("2 parameters name their tensors (`u` (\"model.layers.{layer}.mlp.weight\"), `v` (\"model.layers.{layer}.mlp.weight\")) with `{layer}`, and no --layer N says which layer (it holds layers 0, 1)"), "{t}");
}

#[test]
fn a_parameter_with_two_sources_is_an_error() {
    let d = scratch("weights-two-sources");
    write(&d, "s.tsl", STEP);
    small_checkpoint(&d.join("ckpt.safetensors"));
    checkpoint(
        &d.join("in.safetensors"),
        &[("b", Dtype::F32, vec![3], f32s(&NORM))],
    );
    let o = tessel(
        &d,
        &[
            "check",
            "s.tsl",
            "--cpu",
            "--weights",
            "ckpt.safetensors",
            "--layer",
            "0",
            "--inputs",
            "in.safetensors",
            "--allow-random",
        ],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("parameter `b` has two sources: it is read from --weights (`from \"model.norm.weight\"`) and --inputs in.safetensors gives `b` too; drop one"),
        "{t}"
    );
    write(
        &d,
        "i.tsl",
        "step i(p: i32[3] from \"model.pos\") -> i32[3] { p }\n",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "i.tsl",
            "--cpu",
            "--weights",
            "ckpt.safetensors",
            "--fill",
            "p=iota",
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("parameter `p` has two sources") && t.contains("--fill gives `p` too"),
        "{t}"
    );
}

#[test]
fn layer_needs_weights() {
    let d = scratch("weights-layer");
    write(&d, "s.tsl", STEP);
    let o = tessel(&d, &["run", "s.tsl", "--cpu", "--layer", "3"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("--layer 3 fills `{layer}`") && t.contains("give --weights PATH too"),
        "{t}"
    );
    // A negative layer is a bad value, not an unknown option.
    let o = tessel(&d, &["run", "s.tsl", "--cpu", "--layer", "-1"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("a layer number is an integer, 0 or more"), "{t}");
}

#[test]
fn corrupt_checkpoints_are_errors_naming_the_file() {
    let d = scratch("weights-corrupt");
    write(&d, "s.tsl", STEP);
    small_checkpoint(&d.join("good.safetensors"));
    let good = std::fs::read(d.join("good.safetensors")).unwrap();
    // Truncated: the last tensor's bytes run past the end.
    std::fs::write(d.join("truncated.safetensors"), &good[..good.len() - 5]).unwrap();
    std::fs::write(d.join("tiny.safetensors"), b"hello").unwrap();
    // A header of invalid JSON.
    let mut bad_json = 6u64.to_le_bytes().to_vec();
    bad_json.extend_from_slice(b"{nope}");
    std::fs::write(d.join("badjson.safetensors"), bad_json).unwrap();
    // A header length far past the end of the file.
    let mut long = 1_000_000u64.to_le_bytes().to_vec();
    long.extend_from_slice(b"{}");
    std::fs::write(d.join("long.safetensors"), long).unwrap();
    // Indexes: not JSON; no weight_map; a shard that lacks what the index says it holds.
    write(
        &d,
        "notjson/model.safetensors.index.json",
        "{\"weight_map\": ",
    );
    write(
        &d,
        "nomap/model.safetensors.index.json",
        "{\"metadata\": {}}",
    );
    sharded(&d.join("liar"), false);
    let index = d.join("liar/model.safetensors.index.json");
    let lie = std::fs::read_to_string(&index).unwrap().replace(
        "\"model.norm.weight\": \"model-00002",
        "\"model.norm.weight\": \"model-00001",
    );
    std::fs::write(&index, lie).unwrap();
    std::fs::create_dir_all(d.join("empty")).unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "truncated.safetensors",
            "truncated.safetensors is truncated or corrupt: tensor `model.norm.weight`: its data_offsets [48, 60] run past the end of the data (55 bytes after the header): the file is truncated",
        ),
        ("tiny.safetensors", "tiny.safetensors is not a safetensors file: 5 bytes"),
        ("badjson.safetensors", "badjson.safetensors is truncated or corrupt: invalid JSON in header"),
        (
            "long.safetensors",
            "long.safetensors is truncated or corrupt: the header length its first 8 bytes give runs past the end of the file (10 bytes)",
        ),
        ("notjson", "notjson/model.safetensors.index.json is not valid JSON"),
        ("nomap", "nomap/model.safetensors.index.json has no \"weight_map\" object"),
        (
            "liar",
            "liar/model.safetensors.index.json lists tensor `model.norm.weight` in liar/model-00001-of-00002.safetensors, which does not hold it",
        ),
        ("empty", "the directory holds neither model.safetensors nor model.safetensors.index.json"),
        ("absent", "--weights absent: No such file or directory"),
    ];
    for (weights, want) in cases {
        let o = tessel(
            &d,
            &[
                "run",
                "s.tsl",
                "--cpu",
                "--weights",
                weights,
                "--layer",
                "0",
            ],
        );
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{weights}: {t}");
        assert!(t.contains(want), "{weights}: want {want}\n---\n{t}");
        assert!(!t.contains("panicked"), "{weights}: {t}");
    }
}

#[test]
fn every_command_that_takes_inputs_takes_weights() {
    let d = scratch("weights-help");
    for cmd in ["run", "check", "bench", "invariance"] {
        let t = text(&tessel(&d, &[cmd, "--help"]));
        assert!(
            t.contains("--weights <PATH>") && t.contains("--layer <N>"),
            "{cmd}: {t}"
        );
    }
}

/// `--tp N` reads every rank's block of each weight from the one checkpoint: the gate
/// weight's rows, the down weight's K ranges. Small integers make every sum exact, so the
/// output is the exact product at 1, 2, 4 and 8 ranks (a block or range cut at the wrong
/// offset changes it), and the same as without `--tp`.
#[test]
fn tensor_parallel_ranks_read_their_blocks_of_the_checkpoint() {
    let d = scratch("weights-tp");
    write(
        &d,
        "mlp.tsl",
        "step s(
            x: f32[3, 8],
            wg: f32[16, 8] from \"mlp.gate.weight\",
            wd: f32[8, 16] from \"mlp.down.weight\",
        ) -> f32[3, 8] {
            (x @ wg^T) @ wd^T
        }\n",
    );
    let val = |i: usize, m: usize| ((i * 7 + m) % 5) as f32 - 2.0;
    let x: Vec<f32> = (0..24).map(|i| val(i, 1)).collect();
    let wg: Vec<f32> = (0..128).map(|i| val(i, 2)).collect();
    let wd: Vec<f32> = (0..128).map(|i| val(i, 3)).collect();
    checkpoint(
        &d.join("ck.safetensors"),
        &[
            ("mlp.gate.weight", Dtype::F32, vec![16, 8], f32s(&wg)),
            ("mlp.down.weight", Dtype::F32, vec![8, 16], f32s(&wd)),
        ],
    );
    checkpoint(
        &d.join("x.safetensors"),
        &[("x", Dtype::F32, vec![3, 8], f32s(&x))],
    );
    let mut want = vec![0f32; 24];
    for t in 0..3 {
        let h: Vec<f32> = (0..16)
            .map(|n| (0..8).map(|k| x[t * 8 + k] * wg[n * 8 + k]).sum())
            .collect();
        for e in 0..8 {
            want[t * 8 + e] = (0..16).map(|n| h[n] * wd[e * 16 + n]).sum();
        }
    }
    for tp in [None, Some("1"), Some("2"), Some("4"), Some("8")] {
        let out = format!("out{}.safetensors", tp.unwrap_or("none"));
        let mut args = vec![
            "run",
            "mlp.tsl",
            "--cpu",
            "--weights",
            "ck.safetensors",
            "--inputs",
            "x.safetensors",
            "-o",
            &out,
        ];
        if let Some(n) = tp {
            args.extend(["--tp", n]);
        }
        let o = tessel(&d, &args);
        assert!(o.status.success(), "--tp {tp:?}: {}", text(&o));
        assert_eq!(read_f32(&d.join(&out), "out"), want, "--tp {tp:?}");
    }
}
