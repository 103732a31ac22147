//! The `tessel` command as a user meets it: argument errors, output paths, inputs and the
//! messages it prints. Each test runs the built binary on small programs in a scratch
//! directory; none needs a GPU (without one, `run` and `invariance` use the CPU executor).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{scratch, tessel, text, write};

#[test]
fn fill_accepts_every_start_whose_last_value_fits_in_i32() {
    let d = scratch("fill");
    write(&d, "pos.tsl", "step s(pos: i32[4]) -> i32[4] { pos * 1 }\n");
    let run = |start: &str| {
        tessel(
            &d,
            &[
                "run",
                "pos.tsl",
                "--cpu",
                "--fill",
                &format!("pos=iota:{start}"),
            ],
        )
    };
    // 2147483644 ..= 2147483647 fits; so does the most negative start.
    for start in ["2147483644", "-2147483648"] {
        let o = run(start);
        assert!(o.status.success(), "iota:{start}: {}", text(&o));
    }
    // One more wraps; so would i64::MAX (it panicked in debug builds).
    for (start, last) in [
        ("2147483645", "2147483648"),
        ("9223372036854775807", "9223372036854775810"),
        ("-2147483649", "-2147483646"),
    ] {
        let o = run(start);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "iota:{start}: {t}");
        assert!(t.contains("input `pos` (i32[4]) has 4 elements"), "{t}");
        assert!(t.contains(&format!("{start} ..= {last}")), "{t}");
        assert!(
            t.contains("START must be in -2147483648 ..= 2147483644"),
            "{t}"
        );
        assert!(!t.contains("panicked"), "{t}");
    }
}

#[test]
fn output_paths_are_checked_before_anything_else() {
    let d = scratch("paths");
    std::fs::write(d.join("afile"), "").unwrap();
    // The source does not exist: an output error proves the paths were checked first.
    let cases: &[(&[&str], &str)] = &[
        (
            &["build", "missing.tsl", "-o", "afile/out"],
            "cannot write -o afile/out: ",
        ),
        (
            &["run", "missing.tsl", "-o", "afile/o.safetensors"],
            "cannot write -o afile/o.safetensors: ",
        ),
        (
            &[
                "run",
                "missing.tsl",
                "-o",
                "ok/o.safetensors",
                "--save-inputs",
                "afile/i.safetensors",
            ],
            "cannot write --save-inputs afile/i.safetensors: ",
        ),
        (
            &["check", "missing.tsl", "--json", "afile/r.json"],
            "cannot write --json afile/r.json: ",
        ),
        (
            &["bench", "missing.tsl", "--json", "afile/r.json"],
            "cannot write --json afile/r.json: ",
        ),
    ];
    for (args, want) in cases {
        let o = tessel(&d, args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(want), "{args:?}: {t}");
        assert!(
            t.contains("afile is a file, not a directory"),
            "{args:?}: {t}"
        );
        assert_eq!(t.lines().count(), 1, "one message: {t}");
    }
    // The check creates nothing: not the good path of a command with a bad one.
    assert!(!d.join("ok").exists());
    // `-o` of run names a file, not a directory.
    std::fs::create_dir(d.join("dir")).unwrap();
    let t = text(&tessel(&d, &["run", "missing.tsl", "-o", "dir"]));
    assert!(t.contains("cannot write -o dir: it is a directory"), "{t}");
    // A missing directory is created, and the outputs land in it.
    write(
        &d,
        "two.tsl",
        "step a(x: f32[2]) -> f32[2] { x * 2.0 }\nstep b(x: f32[2]) -> f32[2] { -x }\n",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "two.tsl",
            "--cpu",
            "-o",
            "new/sub/r.safetensors",
            "--save-inputs",
            "new/in.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = tessel(&d, &["check", "two.tsl", "--cpu", "--json", "j/r.json"]);
    assert!(d.join("j/r.json").is_file(), "{}", text(&o));
    // A command that fails before writing leaves no directory behind.
    write(&d, "bad.tsl", "step s(x: f32[2]) -> f32[3] { x }\n");
    let o = tessel(&d, &["build", "bad.tsl", "-o", "fresh"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!d.join("fresh").exists());
    for f in [
        "new/sub/r.a.safetensors",
        "new/sub/r.b.safetensors",
        "new/in.a.safetensors",
        "new/in.b.safetensors",
    ] {
        assert!(d.join(f).is_file(), "{f}: {}", text(&o));
    }
}

#[test]
fn invariance_refuses_what_would_pass_vacuously() {
    let d = scratch("invariance");
    write(
        &d,
        "rows.tsl",
        "step s(x: f32[M, 8]) -> f32[M, 8] { x * 2.0 }\n",
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["--batch-dim", "Q"],
            "--batch-dim Q: no parameter of any step of rows.tsl has a dim `Q`; the dims are M",
        ),
        (&["--batch-dim", "M", "--seeds", "0"], "--seeds 0"),
        (
            &["--batch-dim", "M", "--sizes", "1"],
            "--sizes needs at least two batch sizes",
        ),
        (
            &["--batch-dim", "M", "--sizes", "4,4"],
            "--sizes lists 4 twice",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["invariance", "rows.tsl", "--cpu"];
        all.extend_from_slice(args);
        let o = tessel(&d, &all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(want), "{args:?}: {t}");
        assert!(!t.contains("PASS"), "{args:?}: {t}");
    }
    // A batch dim no written tensor starts with compares nothing: an error too.
    write(
        &d,
        "cols.tsl",
        "step s(x: f32[8, M]) -> f32[8, M] { x * 2.0 }\n",
    );
    let o = tessel(
        &d,
        &[
            "invariance",
            "cols.tsl",
            "--cpu",
            "--batch-dim",
            "M",
            "--sizes",
            "2,3",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("nothing was compared"), "{}", text(&o));
    // Without --cpu it runs anyway: on the GPU, or on the executor with a note.
    let o = tessel(
        &d,
        &[
            "invariance",
            "rows.tsl",
            "--batch-dim",
            "M",
            "--sizes",
            "1,2,5",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("invariance: PASS"), "{t}");
    if t.contains("executor") {
        assert!(
            t.contains("note: running on the CPU kernel-IR executor"),
            "{t}"
        );
    }
}

/// A size at which the step writes fewer intermediates than at the largest (RoPE's
/// inverse-frequency table is computed inside the kernel at T = 1 and written at larger
/// T): tensors are paired by name, and one a size does not write is not compared there.
/// Before, pairing by position indexed past the end (a panic) or compared different
/// tensors (false failures; found by a new-user trial).
#[test]
fn invariance_pairs_tensors_by_name_when_the_intermediates_change_with_the_size() {
    let d = scratch("invariance-names");
    let rope = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/qwen3_14b/rope.tsl")
        .display()
        .to_string();
    let o = tessel(
        &d,
        &[
            "invariance",
            &rope,
            "--cpu",
            "--profile",
            "invariant",
            "--batch-dim",
            "T",
            "--sizes",
            "1,2,17",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("invariance: PASS"), "{t}");
}

/// Issue 17: at B = 1 the identity broadcast of `f32(iota(16))[None, :]` is left out, so
/// every graph value after it (and every `t<N>` intermediate) is numbered one lower than at
/// B = 4; pairing intermediates by name compared `a` with `b` and reported a FAIL where
/// every output was bit-identical. Paired by what they compute, both are compared, and pass.
#[test]
fn invariance_pairs_intermediates_by_what_they_compute() {
    let d = scratch("invariance-keys");
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../../tests/programs/regressions/invariance_pairs_intermediates_by_what_they_compute.tsl",
    );
    let o = tessel(
        &d,
        &[
            "invariance",
            &file.display().to_string(),
            "--cpu",
            "--batch-dim",
            "B",
            "--sizes",
            "1,4",
            "--profile",
            "invariant",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("invariance: PASS") && !t.contains("FAIL"), "{t}");
    // Both intermediates (the normalised `a` and the product `b`) have a partner at B = 1.
    assert!(t.contains("intermediates t11, t12 compared"), "{t}");
    assert!(!t.contains("no partner"), "{t}");
}

/// A step far larger than any machine's memory is refused before anything is allocated,
/// with the estimate, the largest tensors and the dims given; before, `run` allocated until
/// the allocator aborted the process ("memory allocation of 8000000000 bytes failed").
#[test]
fn a_step_too_large_for_memory_is_refused_before_it_allocates() {
    let d = scratch("too-large");
    // 16 inputs of 16 GB each: 544 GB on the executor (the inputs, the buffers holding them
    // and the output, and the output read back).
    let params: Vec<String> = (0..16).map(|i| format!("x{i}: f32[T, 4]")).collect();
    let sum: Vec<String> = (0..16).map(|i| format!("x{i}")).collect();
    write(
        &d,
        "big.tsl",
        &format!(
            "step big({}) -> f32[T, 4] {{ {} }}\n",
            params.join(", "),
            sum.join(" + ")
        ),
    );
    for cmd in [
        vec!["run", "big.tsl", "--cpu", "--dim", "T=1000000000"],
        vec![
            "invariance",
            "big.tsl",
            "--cpu",
            "--dim",
            "T=1000000000",
            "--batch-dim",
            "T",
            "--sizes",
            "1,1000000000",
        ],
    ] {
        let o = tessel(&d, &cmd);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {t}");
        assert!(
            t.contains("error: step `big` does not fit in memory: it needs about 544.0 GB on the CPU executor")
                && t.contains("f32[1000000000, 4] (16.0 GB)")
                && t.contains("given --dim T=1000000000"),
            "{cmd:?}: {t}"
        );
        assert!(
            !t.contains("panicked") && !t.contains("memory allocation"),
            "{cmd:?}: {t}"
        );
    }
}

/// Issue 17: "invalid shape, data type, or offset for tensor" named neither the file nor
/// the tensor. Every header fault of an `--inputs` file or a `--weights` checkpoint names
/// both, and what is wrong.
#[test]
fn a_corrupt_safetensors_file_is_named_with_its_tensor() {
    let d = scratch("corrupt-st");
    let file = |name: &str, header: &str, data: usize| {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.extend(std::iter::repeat_n(0u8, data));
        std::fs::write(d.join(name), b).unwrap();
    };
    file(
        "size.safetensors",
        r#"{"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[2,3],"data_offsets":[4,24]}}"#,
        24,
    );
    file(
        "gap.safetensors",
        r#"{"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}}"#,
        32,
    );
    file(
        "dtype.safetensors",
        r#"{"x":{"dtype":"F99","shape":[2,3],"data_offsets":[0,24]}}"#,
        24,
    );
    file(
        "short.safetensors",
        r#"{"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}"#,
        20,
    );
    file(
        "shape.safetensors",
        r#"{"x":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]}}"#,
        24,
    );
    write(
        &d,
        "s.tsl",
        "step s(x: f32[2, 3]) -> f32[2, 3] { x * 2.0 }\n",
    );
    write(
        &d,
        "w.tsl",
        "step s(x: f32[2, 3] from \"x\") -> f32[2, 3] { x * 2.0 }\n",
    );
    let cases = [
        (
            "size.safetensors",
            "size.safetensors is truncated or corrupt: tensor `x`: F32[2, 3] is 24 bytes, but its data_offsets [4, 24] hold 20",
        ),
        (
            "gap.safetensors",
            "gap.safetensors is truncated or corrupt: tensor `x`: its data_offsets [8, 32] start at byte 8, not where the previous tensor `y` ends, byte 4",
        ),
        (
            "dtype.safetensors",
            "dtype.safetensors is truncated or corrupt: tensor `x`: unknown dtype \"F99\"",
        ),
        (
            "short.safetensors",
            "short.safetensors is truncated or corrupt: tensor `x`: its data_offsets [0, 24] run past the end of the data (20 bytes after the header)",
        ),
    ];
    for (f, want) in cases {
        for (prog, opt) in [("s.tsl", "--inputs"), ("w.tsl", "--weights")] {
            let o = tessel(&d, &["run", prog, "--cpu", opt, f]);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(2), "{opt} {f}: {t}");
            assert!(t.contains(want), "{opt} {f}: want {want}\n---\n{t}");
            assert!(!t.contains("invalid shape, data type"), "{opt} {f}: {t}");
        }
    }
    // A valid file whose tensor is not what the step takes: the file, the tensor, both types.
    let t = text(&tessel(
        &d,
        &["run", "s.tsl", "--cpu", "--inputs", "shape.safetensors"],
    ));
    assert!(
        t.contains("--inputs shape.safetensors: tensor `x` is F32[3, 2], but step `s` takes input `x` as f32[2, 3] (the shapes differ)"),
        "{t}"
    );
}

/// Issue 17: `check` printed PASS and exited 0 when most steps were skipped. It counts the
/// steps judged and skipped (and why), and `--fail-on-skip` (alias `--no-skip`) makes a
/// skip fail.
#[test]
fn check_counts_skipped_steps_and_can_fail_on_them() {
    let d = scratch("check-skips");
    write(
        &d,
        "examples/a.tsl",
        "step fixed(x: f32[4]) -> f32[4] { x * 2.0 }\n\
         step free(x: f32[N]) -> f32[N] { x + 1.0 }\n",
    );
    write(
        &d,
        "examples/b.tsl",
        "step rows(x: f32[T, 8]) -> f32[T, 8] { -x }\n",
    );
    let o = tessel(&d, &["check", "--cpu"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("check: PASS: 1 step judged, 2 skipped (2 need --dim); --fail-on-skip makes a skip fail"),
        "{t}"
    );
    for flag in ["--fail-on-skip", "--no-skip"] {
        let o = tessel(&d, &["check", "--cpu", flag]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{flag}: {t}");
        assert!(
            t.contains("check: FAIL: 1 step judged, 2 skipped (2 need --dim); --fail-on-skip makes a skipped step a failure"),
            "{flag}: {t}"
        );
    }
    // Nothing skipped: nothing to fail on.
    let o = tessel(
        &d,
        &[
            "check",
            "--cpu",
            "--fail-on-skip",
            "--dim",
            "N=3",
            "--dim",
            "T=2",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("check: PASS: 3 steps judged\n"), "{t}");
}

/// `fuzz --tp --save` is accepted (it was refused, so a tensor-parallel failure could not
/// be kept); a run without a defect saves nothing. What a failure saves, and its replay, is
/// tested in tessel-fuzz's `corpus` tests.
#[test]
fn fuzz_tp_takes_save() {
    let d = scratch("fuzz-tp-save");
    let o = tessel(
        &d,
        &["fuzz", "--tp", "--count", "1", "--cpu", "--save", "kept"],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("1 blocks, 1 bit-identical at every world size, 0 defects"),
        "{t}"
    );
    let kept: Vec<_> = std::fs::read_dir(d.join("kept"))
        .map(|r| r.collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "{t}");
}

/// `fuzz --grad` runs gradient programs and reports how many gradient elements it compared
/// with finite differences; `--grad --tp` is refused.
#[test]
fn fuzz_grad_compares_gradients() {
    let d = scratch("fuzz-grad");
    let o = tessel(&d, &["fuzz", "--grad", "--count", "5", "--cpu"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("gradient programs"), "{t}");
    assert!(t.contains("5 programs: 5 passed"), "{t}");
    let compared: u64 = t
        .split("fuzz: gradients: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(compared >= 20, "{t}");
    let o = tessel(&d, &["fuzz", "--grad", "--tp", "--count", "1", "--cpu"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("cannot be used with"), "{t}");
}

/// Writes a safetensors file holding f32 tensors `names` of shape [2].
fn safetensors_with(path: &Path, names: &[&str]) {
    let data = vec![0u8; 8];
    let views: Vec<(String, safetensors::tensor::TensorView)> = names
        .iter()
        .map(|n| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data)
                .expect("view");
            (n.to_string(), v)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write safetensors");
}

#[test]
fn inputs_missing_from_the_file_are_an_error_unless_allowed() {
    let d = scratch("inputs");
    write(
        &d,
        "sw.tsl",
        "step s(gate: f32[2], up: f32[2]) -> f32[2] { gate * up }\n",
    );
    safetensors_with(&d.join("in.safetensors"), &["gate", "upp"]);
    for cmd in ["run", "check"] {
        let o = tessel(&d, &[cmd, "sw.tsl", "--cpu", "--inputs", "in.safetensors"]);
        let t = text(&o);
        assert!(
            t.contains(
                "has no tensor `up`, an input of step `s` (closest name in the file: `upp`)"
            ),
            "{cmd}: {t}"
        );
        assert!(t.contains("--allow-random"), "{cmd}: {t}");
        assert!(!o.status.success(), "{cmd}: {t}");
        assert!(!t.contains("PASS"), "{cmd}: {t}");
    }
    let o = tessel(
        &d,
        &[
            "run",
            "sw.tsl",
            "--cpu",
            "--inputs",
            "in.safetensors",
            "--allow-random",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("warning: --inputs in.safetensors has no `up`"),
        "{t}"
    );
    assert!(t.contains("SEEDED RANDOM"), "{t}");
    // An extra name stays a note; every input given runs silently otherwise.
    safetensors_with(&d.join("full.safetensors"), &["gate", "up", "bias"]);
    let o = tessel(
        &d,
        &["run", "sw.tsl", "--cpu", "--inputs", "full.safetensors"],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("note: --inputs full.safetensors has `bias`"),
        "{t}"
    );
    assert!(!t.contains("warning"), "{t}");
}

/// New-user trial: `check --inputs` of a file with two steps printed the note about a tensor
/// neither step takes once per step. Each note is printed once for the file and names every
/// step it concerns; a step-specific note (`y`, which only `a` does not take) is kept.
#[test]
fn input_notes_are_printed_once_for_all_steps_of_a_file() {
    let d = scratch("input-notes");
    write(
        &d,
        "two.tsl",
        "step a(x: f32[2]) -> f32[2] { x * 2.0 }\n\
         step b(x: f32[2], y: f32[2]) -> f32[2] { x + y }\n",
    );
    safetensors_with(&d.join("in.safetensors"), &["x", "y", "extra"]);
    for cmd in ["check", "run"] {
        let o = tessel(
            &d,
            &[
                cmd,
                "two.tsl",
                "--cpu",
                "--inputs",
                "in.safetensors",
                "--fill",
                "pos=iota",
            ],
        );
        let t = text(&o);
        assert!(o.status.success(), "{cmd}: {t}");
        for (note, once) in [
            (
                "note: --inputs in.safetensors has `extra`",
                "note: --inputs in.safetensors has `extra`, which steps `a` and `b` do not take; \
                 ignored",
            ),
            (
                "note: --inputs in.safetensors has `y`",
                "note: --inputs in.safetensors has `y`, which step `a` does not take; ignored",
            ),
            (
                "note: --fill pos",
                "note: --fill pos: steps `a` and `b` have no input `pos`; ignored",
            ),
        ] {
            assert_eq!(t.matches(note).count(), 1, "{cmd}: `{note}` once:\n{t}");
            assert!(t.contains(once), "{cmd}: {t}");
        }
        assert_eq!(t.matches("note:").count(), 3, "{cmd}: {t}");
    }
}

#[test]
fn run_says_what_it_timed_and_counts_kernels_in_english() {
    let d = scratch("messages");
    write(&d, "one.tsl", "step s(x: f32[4]) -> f32[4] { exp(x) }\n");
    let o = tessel(&d, &["run", "one.tsl", "--cpu", "-o", "o.safetensors"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("step s: 1 kernel, "), "{t}");
    assert!(t.contains("ms on the CPU executor"), "{t}");
    assert!(!t.contains("including transfers"), "{t}");
    let t = text(&tessel(&d, &["explain", "one.tsl"]));
    assert!(
        t.contains(
            "step s: 1 kernel; memory 32 B (inputs 16 B, outputs 16 B, intermediates 0 B)\n"
        ),
        "{t}"
    );
    assert!(t.contains("writes out (value "), "{t}");
    // How -o names the files of several steps is in the help.
    let t = text(&tessel(&d, &["run", "--help"]));
    assert!(t.contains("DIR/STEM.STEP.safetensors"), "{t}");
}

#[test]
fn intermediates_are_labelled_as_such() {
    let d = scratch("temps");
    // Two matmuls: the first product is written between kernels.
    write(
        &d,
        "mm.tsl",
        "step s(x: f32[4, 8], a: f32[2, 8], b: f32[8, 2]) -> f32[4, 8] { let u = x @ a^T; u @ b^T }\n",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "mm.tsl",
            "--cpu",
            "--dump-temps",
            "-o",
            "o.safetensors",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let temp = t
        .lines()
        .find(|l| l.trim_start().starts_with('t') && l.contains("digest"))
        .unwrap_or_else(|| panic!("no intermediate in {t}"));
    assert!(temp.contains("(intermediate: graph value v"), "{temp}");
    let t = text(&tessel(&d, &["explain", "mm.tsl"]));
    assert!(t.contains("writes intermediate t"), "{t}");
}

#[test]
fn i32_division_by_zero_is_defined_as_documented() {
    // docs/language.md, "Operators": x / 0 = 0, x % 0 = x, i32::MIN / -1 wraps; `%` is
    // torch.remainder, the divisor's sign (-7 % 2 = 1).
    let d = scratch("div");
    write(
        &d,
        "div.tsl",
        "step s(a: i32[4], b: i32[4]) -> (i32[4], i32[4]) { (a / b, a % b) }\n",
    );
    let a: Vec<u8> = [7i32, -7, -7, i32::MIN]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b: Vec<u8> = [0i32, 0, 2, -1]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view = |data| {
        safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![4], data).unwrap()
    };
    safetensors::serialize_to_file(
        vec![("a".to_string(), view(&a)), ("b".to_string(), view(&b))],
        None,
        &d.join("ab.safetensors"),
    )
    .unwrap();
    let o = tessel(
        &d,
        &[
            "run",
            "div.tsl",
            "--cpu",
            "--inputs",
            "ab.safetensors",
            "-o",
            "q.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(d.join("q.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let get = |n: &str| -> Vec<i32> {
        st.tensor(n)
            .unwrap()
            .data()
            .chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    assert_eq!(get("out0"), [0, 0, -3, i32::MIN]);
    assert_eq!(get("out1"), [7, -7, 1, 0]);
}

#[test]
fn check_judges_each_step_and_refuses_usage_errors_up_front() {
    let d = scratch("check-steps");
    write(
        &d,
        "three.tsl",
        "step good(x: f32[N]) -> f32[N] { x * 2.0 }\n\
         step bad(x: f32[N]) -> f32[N] { clamp(x) }\n\
         step good2(x: f32[N]) -> f32[N] { x + 1.0 }\n",
    );
    // A step that does not compile is one FAIL; the steps beside it are still judged.
    let o = tessel(&d, &["check", "three.tsl", "--cpu", "--dim", "N=8"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("step bad: FAIL") && t.contains("E0310"), "{t}");
    assert_eq!(t.matches(": PASS").count(), 2, "{t}");
    // Usage errors are errors (exit 2), not a FAIL of a program.
    for args in [
        vec!["check", "missing.tsl", "--cpu"],
        vec![
            "check",
            "three.tsl",
            "--cpu",
            "--dim",
            "N=8",
            "--step",
            "nope",
        ],
        vec![
            "check",
            "three.tsl",
            "--cpu",
            "--dim",
            "N=8",
            "--dim",
            "N=9",
        ],
    ] {
        let o = tessel(&d, &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(!t.contains("FAIL"), "{args:?}: {t}");
    }
}

#[test]
fn fuzz_refuses_what_would_run_nothing_or_wrap() {
    let d = scratch("fuzz-args");
    for (args, want) in [
        (vec!["fuzz", "--count", "0", "--cpu"], "0 is not in 1.."),
        (
            vec![
                "fuzz",
                "--seed",
                "18446744073709551615",
                "--count",
                "2",
                "--cpu",
            ],
            "past 2^64 - 1",
        ),
        (
            vec!["fuzz", "--profile", "quick", "--cpu"],
            "the profiles are exact, invariant and fast, or all",
        ),
    ] {
        let o = tessel(&d, &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(want), "{args:?}: {t}");
    }
    let o = tessel(
        &d,
        &["fuzz", "--count", "20", "--cpu", "--profile", "exact,exact"],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("profiles exact by turns") && t.contains("20 passed"),
        "{t}"
    );
}

#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let d = scratch("pipe");
    write(&d, "e.tsl", "step s(x: f32[N]) -> f32[N] { exp(x) }\n");
    // `| head -c 1`: the reader goes away after the first byte.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessel"))
        .args(["fuzz", "--count", "300", "--cpu"])
        .current_dir(&*d)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    let mut first = [0u8; 1];
    std::io::Read::read_exact(&mut out, &mut first).expect("some output");
    drop(out);
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn build_emits_and_stops_after_every_registered_pass() {
    let d = scratch("stages");
    write(
        &d,
        "n.tsl",
        "step norm(x: f32[T, 64]) -> f32[T, 64] { x * rsqrt(mean(x * x, axis: -1, keep: true) + 1e-6) }\n",
    );
    let read = |f: &str| std::fs::read_to_string(d.join("o").join(f)).unwrap_or_default();
    for p in tessel_passes::PASSES {
        let ext = if p.run.gives() == tessel_passes::Level::Kernel {
            "kir"
        } else {
            "graph"
        };
        let file = format!("norm.{}.{ext}", p.name);
        let o = tessel(
            &d,
            &[
                "build", "n.tsl", "--dim", "T=4", "--emit", p.name, "-o", "o",
            ],
        );
        assert!(o.status.success(), "--emit {}: {}", p.name, text(&o));
        assert!(!read(&file).is_empty(), "--emit {} wrote no {file}", p.name);
        // Stopping there gives the same text, and nothing after it is compiled or written.
        let o = tessel(
            &d,
            &[
                "build",
                "n.tsl",
                "--dim",
                "T=4",
                "--stop-after",
                p.name,
                "-o",
                "s",
            ],
        );
        let t = text(&o);
        assert!(o.status.success(), "--stop-after {}: {t}", p.name);
        // The target line, then the one file of the stage.
        assert!(t.starts_with("target: "), "{t}");
        let wrote: Vec<&str> = t.lines().filter(|l| l.starts_with("wrote")).collect();
        assert_eq!(
            wrote,
            [format!("wrote s/{file}")],
            "--stop-after {}",
            p.name
        );
        let stopped = std::fs::read_to_string(d.join("s").join(&file)).expect("stopped output");
        assert_eq!(stopped, read(&file), "--stop-after {}", p.name);
    }
    // The stage names from before the registry write what the passes they stand for do.
    let o = tessel(
        &d,
        &[
            "build",
            "n.tsl",
            "--dim",
            "T=4",
            "--emit",
            "graph,fused,lowered,kernel",
            "-o",
            "o",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    for (alias, pass) in [
        ("norm.graph", "norm.check.graph"),
        ("norm.fused.graph", "norm.schedule.graph"),
        ("norm.lowered.kir", "norm.lower.kir"),
        ("norm.kir", "norm.dependent-launch.kir"),
    ] {
        assert!(!read(alias).is_empty(), "{alias}");
        assert_eq!(read(alias), read(pass), "{alias} and {pass}");
    }
    let o = tessel(
        &d,
        &[
            "build",
            "n.tsl",
            "--dim",
            "T=4",
            "--stop-after",
            "fuse",
            "--emit",
            "ptx",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("--emit ptx: that stage comes after --stop-after fuse"),
        "{}",
        text(&o)
    );
    let o = tessel(&d, &["build", "n.tsl", "--emit", "fusion"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("expand-math"),
        "the error lists the passes: {}",
        text(&o)
    );
}

#[test]
fn build_and_explain_take_a_named_target_without_a_gpu() {
    let d = scratch("target");
    write(&d, "n.tsl", "step s(x: f32[N]) -> f32[N] { exp(x) }\n");
    for name in ["h200", "h100"] {
        let o = tessel(
            &d,
            &[
                "build", "n.tsl", "--dim", "N=8", "--target", name, "-o", "out",
            ],
        );
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(t.contains(&format!("from preset `{name}`")), "{t}");
        let ptx = std::fs::read_to_string(d.join("out/s.ptx")).expect("ptx written");
        // The header comes from the target, through the compiled step: Hopper's `a` target,
        // whose wgmma and setmaxnreg the presets have.
        assert!(ptx.contains("\n.version 8.0\n.target sm_90a\n"), "{ptx}");
        let o = tessel(&d, &["explain", "n.tsl", "--dim", "N=8", "--target", name]);
        let t = text(&o);
        assert!(o.status.success() && t.contains("target: NVIDIA H"), "{t}");
        assert!(
            t.contains(
                "sm_90a, 132 SMs, 227 KiB shared memory per CTA, wgmma, TMA, setmaxnreg, clusters"
            ),
            "{t}"
        );
        assert!(
            t.contains("PTX header: .version 8.0, .target sm_90a"),
            "{t}"
        );
    }
    let o = tessel(&d, &["build", "n.tsl", "--dim", "N=8", "--target", "a100"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("the targets are h200, h100"),
        "{}",
        text(&o)
    );
}

/// Reads tensor `name` of a safetensors file as f64s (f32 and bf16).
fn read_floats(path: &Path, name: &str) -> Vec<f64> {
    let bytes = std::fs::read(path).expect("read outputs");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor(name).expect("output present");
    match t.dtype() {
        safetensors::Dtype::F32 => t
            .data()
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        safetensors::Dtype::BF16 => t
            .data()
            .chunks(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) as f64)
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

#[test]
fn softmax_of_a_fully_masked_row_is_zero() {
    // docs/language.md, "Builtins": a row whose every element is -inf gives 0 (flash-
    // attention's convention); a row with a finite element is the usual softmax, its -inf
    // elements exactly 0; NaN or +inf in a row makes the row NaN (IEEE arithmetic).
    let d = scratch("masked-softmax");
    // The issue's program: every row masked.
    write(
        &d,
        "m.tsl",
        "step m(a: f32[T, S]) -> f32[T, S] { let mk = iota(S)[None, :] < 0; \
         softmax(where(mk, a, -1.0 / 0.0), axis: -1) }\n",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "m.tsl",
            "--cpu",
            "--dim",
            "T=2",
            "--dim",
            "S=3",
            "-o",
            "x.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let x = read_floats(&d.join("x.safetensors"), "out");
    assert!(x.iter().all(|v| v.to_bits() == 0), "{x:?}");

    // Rows given as inputs, in f32 and bf16 (every value exact in both).
    let ninf = f32::NEG_INFINITY;
    let rows = [
        [ninf, ninf, ninf, ninf],
        [ninf, 2.0, ninf, ninf],
        [1.0, ninf, 1.0, ninf],
        [0.0, 0.0, 0.0, 0.0],
        [ninf, f32::INFINITY, 0.0, ninf],
        [ninf, f32::NAN, ninf, ninf],
    ];
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    let f32_bytes: Vec<u8> = flat.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bf16_bytes: Vec<u8> = flat
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    for (dt, st_dt, bytes) in [
        ("f32", safetensors::Dtype::F32, &f32_bytes),
        ("bf16", safetensors::Dtype::BF16, &bf16_bytes),
    ] {
        write(
            &d,
            "rows.tsl",
            &format!("step s(a: {dt}[6, 4]) -> {dt}[6, 4] {{ softmax(a, axis: -1) }}\n"),
        );
        let view = safetensors::tensor::TensorView::new(st_dt, vec![6, 4], bytes).unwrap();
        safetensors::serialize_to_file(vec![("a".to_string(), view)], None, &d.join("a.st"))
            .unwrap();
        let o = tessel(
            &d,
            &[
                "run",
                "rows.tsl",
                "--cpu",
                "--inputs",
                "a.st",
                "-o",
                "p.safetensors",
            ],
        );
        assert!(o.status.success(), "{dt}: {}", text(&o));
        let p = read_floats(&d.join("p.safetensors"), "out");
        let want: [[f64; 4]; 4] = [
            [0.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.5, 0.0, 0.5, 0.0],
            [0.25, 0.25, 0.25, 0.25],
        ];
        for (r, w) in want.iter().enumerate() {
            for c in 0..4 {
                // Bit for bit: a masked element and a fully masked row are +0.
                assert_eq!(p[r * 4 + c].to_bits(), w[c].to_bits(), "{dt} [{r}, {c}]");
            }
        }
        assert!(p[16..].iter().all(|v| v.is_nan()), "{dt}: {:?}", &p[16..]);
        // The judge agrees: exactly 0 is the only value it allows on the masked rows.
        let o = tessel(&d, &["check", "rows.tsl", "--cpu", "--inputs", "a.st"]);
        let t = text(&o);
        assert!(o.status.success() && t.contains(": PASS"), "{dt}: {t}");
    }
}

#[test]
fn causal_masks_hold_the_documented_values() {
    // docs/language.md, "Builtins": causal(t, s, offset: p)[i, j] = j <= i + p, with
    // p = s - t by default (the last query sees every key).
    let d = scratch("causal");
    write(
        &d,
        "c.tsl",
        "step masks(q: f32[T, 2], k: f32[S, 2]) -> (i32[4, 6], i32, bool, bool, i32[T]) {\n\
         \x20   let m = i32(causal(4, 6));\n\
         \x20   (m, sum(sum(m, axis: 1), axis: 0), causal(4, 6)[0, 2], causal(4, 6)[0, 3],\n\
         \x20    sum(i32(causal(T, S, offset: 0)), axis: -1))\n\
         }\n",
    );
    let o = tessel(
        &d,
        &[
            "run",
            "c.tsl",
            "--cpu",
            "--dim",
            "T=5",
            "--dim",
            "S=3",
            "-o",
            "c.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(d.join("c.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ints = |n: &str| -> Vec<i32> {
        st.tensor(n)
            .unwrap()
            .data()
            .chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let byte = |n: &str| st.tensor(n).unwrap().data()[0];
    #[rustfmt::skip]
    let want = [
        1, 1, 1, 0, 0, 0,
        1, 1, 1, 1, 0, 0,
        1, 1, 1, 1, 1, 0,
        1, 1, 1, 1, 1, 1,
    ];
    assert_eq!(ints("out0"), want);
    assert_eq!(ints("out1"), [18]);
    assert_eq!((byte("out2"), byte("out3")), (1, 0));
    // offset 0 with 5 queries and 3 keys: query i sees min(i + 1, 3) keys.
    assert_eq!(ints("out4"), [1, 2, 3, 3, 3]);
}

/// The bytes of tensor `name` in the safetensors file at `path`.
fn tensor_bytes(path: &Path, name: &str) -> Vec<u8> {
    let bytes = std::fs::read(path).expect("read safetensors");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse safetensors");
    st.tensor(name)
        .unwrap_or_else(|e| panic!("{name} in {}: {e}", path.display()))
        .data()
        .to_vec()
}

#[test]
fn run_writes_an_inout_cache_updated_in_place() {
    let d = scratch("inout");
    write(
        &d,
        "kv.tsl",
        "step append(k_new: bf16[B, 2, 1, 8], pos: i32[B], k_cache: inout bf16[B, 2, S, 8]) -> i32[B] {\n    \
         let k = update(k_cache, k_new, at: pos, axis: 2);\n    pos + 1\n}\n",
    );
    // B = 2 sequences at positions 14 and 15 of S = 16: both rows land, the second in the
    // cache's last position.
    let o = tessel(
        &d,
        &[
            "run",
            "kv.tsl",
            "--cpu",
            "--dim",
            "B=2",
            "--dim",
            "S=16",
            "--fill",
            "pos=iota:14",
            "--save-inputs",
            "in.safetensors",
            "-o",
            "out.safetensors",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("k_cache (inout, updated in place): bf16[2, 2, 16, 8]"),
        "{t}"
    );
    let row = 8 * 2; // bytes of one position of one head
    let check = |out: &str, written: &[(usize, usize)]| {
        let given = tensor_bytes(&d.join("in.safetensors"), "k_cache");
        let got = tensor_bytes(&d.join(out), "k_cache");
        let new = tensor_bytes(&d.join("in.safetensors"), "k_new");
        assert_eq!(given.len(), got.len());
        for (j, (a, b)) in given.chunks(row).zip(got.chunks(row)).enumerate() {
            let (seq, head, pos) = (j / 32, j / 16 % 2, j % 16);
            if written.contains(&(seq, pos)) {
                let k = seq * 2 + head;
                assert_eq!(
                    b,
                    &new[k * row..(k + 1) * row],
                    "row {pos} of ({seq}, {head})"
                );
            } else {
                assert_eq!(a, b, "untouched row {pos} of ({seq}, {head}) changed");
            }
        }
    };
    check("out.safetensors", &[(0, 14), (1, 15)]);
    // The same inputs read back with --inputs give the same cache, bit for bit.
    let o = tessel(
        &d,
        &[
            "run",
            "kv.tsl",
            "--cpu",
            "--dim",
            "B=2",
            "--dim",
            "S=16",
            "--inputs",
            "in.safetensors",
            "-o",
            "again.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        tensor_bytes(&d.join("again.safetensors"), "k_cache"),
        tensor_bytes(&d.join("out.safetensors"), "k_cache")
    );
    // Positions 15 and 16: the second sequence's row is past the end and not written.
    let o = tessel(
        &d,
        &[
            "run",
            "kv.tsl",
            "--cpu",
            "--dim",
            "B=2",
            "--dim",
            "S=16",
            "--inputs",
            "in.safetensors",
            "--fill",
            "pos=iota:15",
            "-o",
            "past.safetensors",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    check("past.safetensors", &[(0, 15)]);
}

/// An error is reported as the step's it is in, and `--step a` checks only step `a` and
/// the fns it calls: a broken step `b` (or a fn no built step calls) does not stop it, as
/// PyTorch raises a NameError only when the function runs and `cargo build --bin a`
/// leaves `b` alone. Without `--step`, every step is built and `b`'s error is `b`'s.
#[test]
fn an_error_belongs_to_its_step_and_step_selects_what_is_checked() {
    let d = scratch("step_errors");
    write(
        &d,
        "two.tsl",
        "fn twice(x: f32[4]) -> f32[4] { x + x }\n\
         fn unused(x: f32[4]) -> f32[4] { nothing(x) }\n\
         step a(x: f32[4]) -> f32[4] { twice(exp(x)) }\n\
         step b(x: f32[4]) -> f32[4] { foo(x) }\n",
    );
    let o = tessel(&d, &["build", "two.tsl", "--step", "a", "-o", "out_a"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = tessel(&d, &["build", "two.tsl", "--step", "b", "-o", "out_b"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("unknown function `foo`"), "{t}");
    assert!(t.contains("1 error in step `b`"), "{t}");
    assert!(!t.contains("nothing"), "{t}");
    let o = tessel(&d, &["build", "two.tsl", "-o", "out_all"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("1 error in step `b`"), "{t}");
    assert!(!t.contains("in step `a`"), "{t}");
    // An error in a fn a step calls is that step's.
    write(
        &d,
        "called.tsl",
        "fn helper(x: f32[4]) -> f32[4] { bar(x) }\n\
         step a(x: f32[4]) -> f32[4] { helper(x) }\n\
         step b(x: f32[4]) -> f32[4] { exp(x) }\n",
    );
    let o = tessel(&d, &["build", "called.tsl", "--step", "b", "-o", "out_c"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = tessel(&d, &["build", "called.tsl", "--step", "a", "-o", "out_d"]);
    let t = text(&o);
    assert!(
        t.contains("unknown function `bar`") && t.contains("1 error in step `a`"),
        "{t}"
    );
}

/// A Python floor division is an error naming the spelling, not a comment that silently
/// drops the rest of the line.
#[test]
fn floor_division_is_not_a_silent_comment() {
    let d = scratch("floor_division");
    write(
        &d,
        "fd.tsl",
        "step s(x: f32[4]) -> f32[4] {\n    let y = x // 2.0\n        * 3.0;\n    y\n}\n",
    );
    let o = tessel(&d, &["build", "fd.tsl", "-o", "out"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("E0006"), "{t}");
    assert!(t.contains("floor_divide(a, b)"), "{t}");
}

/// By default a large bf16 projection in `fast` that the ping-pong tile does not take
/// (here: `--no-wgmma-pingpong`) runs on the warp-specialised TMA tile (`wgmma: tma`);
/// `--no-wgmma-tma` keeps it on the warpgroup tile (`wgmma: 1`), `--wgmma-tma` is accepted
/// and changes nothing, and `invariant` never takes the TMA tile.
#[test]
fn wgmma_tma_is_the_default_and_the_flag_turns_it_off() {
    let d = scratch("wgmma_tma");
    write(
        &d,
        "p.tsl",
        "step s(x: bf16[M, K], w: bf16[N, K]) -> bf16[M, N] { x @ w^T }\n",
    );
    let args = [
        "explain",
        "p.tsl",
        "--dim",
        "M=4096",
        "--dim",
        "K=5120",
        "--dim",
        "N=5120",
        "--profile",
        "fast",
        "--target",
        "h200",
        "--no-wgmma-pingpong",
    ];
    let default = text(&tessel(&d, &args));
    assert!(
        default.contains("wgmma: tma") && default.contains("warp-specialised"),
        "{default}"
    );
    let mut with = args.to_vec();
    with.push("--wgmma-tma");
    assert_eq!(text(&tessel(&d, &with)), default);
    let mut without = args.to_vec();
    without.push("--no-wgmma-tma");
    let plain = text(&tessel(&d, &without));
    assert!(
        plain.contains("wgmma: 1") && !plain.contains("wgmma: tma"),
        "{plain}"
    );
    let mut invariant = args.to_vec();
    invariant[9] = "invariant";
    let inv = text(&tessel(&d, &invariant));
    assert!(!inv.contains("wgmma: tma"), "{inv}");
    let both = tessel(&d, &[&with[..], &["--no-wgmma-tma"]].concat());
    assert!(!both.status.success(), "{}", text(&both));
}

/// Issue 19: the invariant profile split K by the chosen tile's column tiles, whose width
/// follows M, so N = 136, K = 2048 was split at M = 16 (16 × 128 tiles: 2 column tiles)
/// and not at M = 65 (64 × 64: 3) — rows differed between the batches. Decided by N alone,
/// both take one chain.
#[test]
fn invariance_split_k_is_decided_by_n() {
    let d = scratch("invariance-split");
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/programs/regressions/invariance_split_k_by_n.tsl");
    let o = tessel(
        &d,
        &[
            "invariance",
            &file.display().to_string(),
            "--cpu",
            "--batch-dim",
            "M",
            "--sizes",
            "16,65",
            "--dim",
            "K=2048",
            "--dim",
            "N=136",
            "--profile",
            "invariant",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("invariance: PASS") && !t.contains("FAIL"), "{t}");
}

/// A large bf16 projection in `fast` whose 128 × 256 tiles fill their last wave past half
/// (M = 4096, N = 5120: 640 tiles, 112 in the last wave of 132) takes the persistent
/// ping-pong tile by default (`wgmma: pingpong, ctas: 132` on an H100: one CTA per SM);
/// one whose last wave is at most half full (M = 2048, N = 17408: 1088 tiles, 32 in the
/// last wave) takes the TMA tile with that wave split (`wgmma: tma, tail: 32`), and the
/// ping-pong tile under `--no-wgmma-tma`. `--no-wgmma-pingpong`
/// puts it on the TMA tile (`wgmma: tma`), or with `--no-wgmma-tma` too on the warpgroup
/// tile (`wgmma: 1`); `build --help` documents the flags.
#[test]
fn wgmma_pingpong_is_the_default_and_the_flag_turns_it_off() {
    let d = scratch("wgmma_pingpong");
    write(
        &d,
        "p.tsl",
        "step s(x: bf16[M, K], w: bf16[N, K]) -> bf16[M, N] { x @ w^T }\n",
    );
    let args = [
        "explain",
        "p.tsl",
        "--dim",
        "M=4096",
        "--dim",
        "K=5120",
        "--dim",
        "N=5120",
        "--profile",
        "fast",
        "--target",
        "h100",
    ];
    let out = text(&tessel(&d, &args));
    assert!(
        out.contains("wgmma: pingpong, ctas: 132") && out.contains("grid [132, 1, 1]"),
        "{out}"
    );
    let mut off = args.to_vec();
    off.push("--no-wgmma-pingpong");
    let out = text(&tessel(&d, &off));
    assert!(
        out.contains("wgmma: tma") && !out.contains("pingpong"),
        "{out}"
    );
    off.push("--no-wgmma-tma");
    let out = text(&tessel(&d, &off));
    assert!(
        out.contains("wgmma: 1") && !out.contains("pingpong") && !out.contains("wgmma: tma"),
        "{out}"
    );
    let mut split = args.to_vec();
    split[3] = "M=2048";
    split[7] = "N=17408";
    let out = text(&tessel(&d, &split));
    assert!(
        out.contains("wgmma: tma, tail: 32 }")
            && out.contains("grid [1120, 1, 1]")
            && out.contains("taken before the ping-pong tile"),
        "{out}"
    );
    split.push("--no-wgmma-tma");
    let out = text(&tessel(&d, &split));
    assert!(
        out.contains("wgmma: pingpong, ctas: 132") && !out.contains("wgmma: tma"),
        "{out}"
    );
    let help = text(&tessel(&d, &["build", "--help"]));
    assert!(
        help.contains("--no-wgmma-pingpong") && help.contains("--no-wgmma-tma"),
        "{help}"
    );
}

/// Causal attention at 40 heads over 16384 positions (issue 19's longest benchmark) has
/// 40 · 16384² ≈ 2^33.3 scores: `fast` compiles it, the fused kernel never storing them,
/// and `exact`, which fuses no attention, would store them — refused at lowering with the
/// reason, not a wrong index. `check` skips it (its CPU references would hold the scores).
#[test]
fn attention_past_32_bit_scores_compiles_fused_and_is_refused_unfused() {
    let d = scratch("attention-16384");
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/programs/attention_bench.tsl")
        .display()
        .to_string();
    let args = |profile| {
        [
            "explain",
            &file,
            "--step",
            "prefill",
            "--dim",
            "T=16384",
            "--target",
            "h100",
            "--profile",
            profile,
        ]
        .map(str::to_string)
    };
    let o = tessel(&d, &args("fast").each_ref().map(String::as_str));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("(group g0, Attention) writes intermediate") && t.contains("16384, 128]"),
        "{t}"
    );
    let o = tessel(&d, &args("exact").each_ref().map(String::as_str));
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("10737418240 elements") && t.contains("only a fused attention's scores"),
        "{t}"
    );
}

#[test]
fn bench_plot_takes_svg_or_png_only_and_is_refused_before_anything_runs() {
    let d = scratch("plot");
    write(&d, "n.tsl", "step s(x: f32[N]) -> f32[N] { exp(x) }\n");
    for bad in ["a.jpg", "a", "a.svg.txt"] {
        let o = tessel(&d, &["bench", "n.tsl", "--dim", "N=4", "--plot", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        let t = text(&o);
        assert!(
            t.contains(&format!("invalid value '{bad}' for '--plot"))
                && t.contains("the allowed extensions are .svg and .png"),
            "{bad}: {t}"
        );
    }
    let o = tessel(
        &d,
        &[
            "bench", "n.tsl", "--plot", "a.svg", "--tp", "2", "--dim", "N=4",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("cannot be used with"), "{}", text(&o));
    // Its directory is checked with the other outputs, before the GPU is looked for.
    write(&d, "f", "a file, not a directory");
    let o = tessel(&d, &["bench", "n.tsl", "--plot", "f/a.png"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("cannot write --plot f/a.png"),
        "{}",
        text(&o)
    );
}

/// Runs `tessel ARGS` in `dir` with `TESSEL_INJECT_FAULT=fault` (a failure on purpose).
fn tessel_failing(dir: &Path, fault: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessel"))
        .args(args)
        .current_dir(dir)
        .env("TESSEL_INJECT_FAULT", fault)
        .output()
        .expect("run tessel")
}

/// The bundle directory `reproducer written to PATH` names on stderr, relative to `dir`.
fn bundle_written(dir: &Path, o: &std::process::Output) -> PathBuf {
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("reproducer written to "))
        .unwrap_or_else(|| panic!("no reproducer line: {}", text(o)));
    dir.join(line)
}

#[test]
fn a_failing_step_leaves_a_reproducer_bundle_where_asked() {
    let d = scratch("repro");
    let src = "step s(x: f32[T]) -> f32[T] { exp(x) * 2.0 }\n";
    write(&d, "n.tsl", src);
    // A wrong answer: check fails (exit 1) and says where the bundle is.
    let o = tessel_failing(
        &d,
        "mismatch",
        &[
            "check",
            "n.tsl",
            "--dim",
            "T=5",
            "--seed",
            "3",
            "--repro-dir",
            "b",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let bundle = bundle_written(&d, &o);
    assert!(bundle.starts_with(d.join("b")), "{}", bundle.display());
    assert_eq!(
        std::fs::read_to_string(bundle.join("src/n.tsl")).expect("the source"),
        src
    );
    for f in [
        "bundle.json",
        "command.txt",
        "s.ptx",
        "ptxas.sh",
        "stages/s.legalize.kir",
    ] {
        assert!(bundle.join(f).is_file(), "no {f}");
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("bundle.json")).expect("json"))
            .expect("bundle.json is JSON");
    assert!(
        j["failure"]
            .as_str()
            .is_some_and(|f| f.contains("\"output\":\"out\"")),
        "{j}"
    );
    assert!(
        j["command"]
            .as_str()
            .is_some_and(|c| c.ends_with("check n.tsl --dim T=5 --seed 3 --repro-dir b")),
        "{j}"
    );
    // The command it gives reproduces the step from the bundle (here it passes: the wrong
    // answer was made on purpose).
    let reproduce = j["reproduce"].as_str().expect("a command");
    let args: Vec<&str> = reproduce.split(' ').collect();
    assert_eq!(args[..2], ["tessel", "check"], "{reproduce}");
    assert!(reproduce.contains("--seed 3"), "{reproduce}");
    let o = tessel(&bundle, &args[1..]);
    assert!(o.status.success(), "{reproduce}: {}", text(&o));
    assert!(
        text(&o).contains("check: PASS: 1 step judged"),
        "{}",
        text(&o)
    );

    // The executor failing under `run`: the error, and a bundle in ./tessel-repro.
    let o = tessel_failing(&d, "executor", &["run", "n.tsl", "--dim", "T=5"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("a fault injected by TESSEL_INJECT_FAULT"),
        "{}",
        text(&o)
    );
    let bundle = bundle_written(&d, &o);
    assert!(
        bundle.starts_with(d.join("tessel-repro")),
        "{}",
        bundle.display()
    );
    assert!(bundle.join("s.ptx").is_file());

    // --no-repro writes none; a step that passes leaves none.
    std::fs::remove_dir_all(d.join("tessel-repro")).expect("remove");
    let o = tessel_failing(
        &d,
        "executor",
        &["check", "n.tsl", "--dim", "T=5", "--no-repro"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!text(&o).contains("reproducer"), "{}", text(&o));
    let o = tessel(&d, &["check", "n.tsl", "--dim", "T=5"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!d.join("tessel-repro").exists());

    // --repro-dir is checked before anything runs, like every output.
    let o = tessel(
        &d,
        &["run", "n.tsl", "--dim", "T=5", "--repro-dir", "n.tsl"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--repro-dir n.tsl"), "{}", text(&o));
}
