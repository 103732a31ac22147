//! Programs of several files through every command: each goes through one loader
//! (`frontend::load`), and a diagnostic in an imported file is shown in that file.

use std::path::PathBuf;

mod common;
use common::{scratch, tessel, text, write};

/// `tests/programs/imports/REL`, absolute.
fn program(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/imports");
    p.join(rel).display().to_string()
}

#[test]
fn every_command_reads_the_imports() {
    let d = scratch("imports-commands");
    let mlp = program("mlp_block.tsl");
    let cases: &[&[&str]] = &[
        &["run", &mlp, "--cpu", "--dim", "T=3", "-o", "o.safetensors"],
        &["check", &mlp, "--cpu", "--dim", "T=3"],
        &["explain", &mlp, "--dim", "T=3", "--target", "h200"],
        &["build", &mlp, "--dim", "T=3", "--target", "h200", "-o", "b"],
    ];
    for args in cases {
        let o = tessel(&d, args);
        let t = text(&o);
        assert!(o.status.success(), "{args:?}: {t}");
        // Only the file's own step: the libraries' steps are theirs.
        assert!(
            !t.contains("norm_alone") && !t.contains("swiglu_alone"),
            "{t}"
        );
    }
    assert!(d.join("b/mlp_block.ptx").is_file());
    // Invariance on a program whose rows are its own (mlp_block's RMSNorm is not yet: its
    // row reduction's tile depends on T).
    write(
        &d,
        "lib/rows.tsl",
        "fn double(x: f32[M, 8]) -> f32[M, 8] { x * 2.0 }\n",
    );
    write(
        &d,
        "rows.tsl",
        "import \"lib/rows.tsl\";\nstep s(x: f32[M, 8]) -> f32[M, 8] { double(x) }\n",
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
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // `--emit ast` prints the file itself, its imports as written.
    let o = tessel(&d, &["build", &mlp, "--stop-after", "ast", "-o", "ast"]);
    assert!(o.status.success(), "{}", text(&o));
    let ast = std::fs::read_to_string(d.join("ast/mlp_block.ast.tsl")).unwrap();
    assert!(ast.starts_with("import \"lib/norms.tsl\";\n"), "{ast}");
    assert!(!ast.contains("fn rms_norm"), "{ast}");
    // A library's step is not the importer's.
    let o = tessel(
        &d,
        &["run", &mlp, "--cpu", "--dim", "T=3", "--step", "norm_alone"],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("has no step `norm_alone`; its steps are: mlp_block"),
        "{t}"
    );
}

#[test]
fn errors_in_an_imported_file_are_shown_in_that_file() {
    let d = scratch("imports-errors");
    write(
        &d,
        "main.tsl",
        "import \"lib/ops.tsl\";\n\nstep s(x: f32[4]) -> f32[4] { twice(x) }\n",
    );
    // A type error in the library: reported at its line, under its name.
    write(
        &d,
        "lib/ops.tsl",
        "// helpers\n\nfn twice(x: f32[4]) -> f32[4] {\n    x + iota(3)\n}\n",
    );
    let o = tessel(&d, &["run", "main.tsl", "--cpu"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("╭─[ lib/ops.tsl:4:"), "{t}");
    assert!(t.contains(" 4 │     x + iota(3)"), "{t}");
    // A syntax error in the library.
    write(
        &d,
        "lib/ops.tsl",
        "fn twice(x: f32[4]) -> f32[4] {\n    let y = x * 2.0\n    y\n}\n",
    );
    let o = tessel(&d, &["check", "main.tsl", "--cpu"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("╭─[ lib/ops.tsl:3:5 ]"), "{t}");
    assert!(t.contains("1 syntax error loading main.tsl"), "{t}");
    // A missing file: at the import, with the path it resolved to.
    std::fs::remove_file(d.join("lib/ops.tsl")).unwrap();
    let o = tessel(&d, &["build", "main.tsl", "-o", "out"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("[E0120] Error: cannot read `lib/ops.tsl`"),
        "{t}"
    );
    assert!(t.contains("resolved to lib/ops.tsl"), "{t}");
    assert!(t.contains("╭─[ main.tsl:1:8 ]"), "{t}");
    assert!(t.contains("1 error loading main.tsl"), "{t}");
    // A cycle, named file by file.
    write(&d, "lib/ops.tsl", "import \"../main.tsl\";\n");
    let t = text(&tessel(&d, &["explain", "main.tsl"]));
    assert!(
        t.contains("[E0121] Error: import cycle: main.tsl → lib/ops.tsl → main.tsl"),
        "{t}"
    );
}

#[test]
fn check_over_the_examples_skips_a_library() {
    let d = scratch("imports-library");
    write(
        &d,
        "examples/lib.tsl",
        "fn double(x: f32[4]) -> f32[4] { x * 2.0 }\n",
    );
    write(
        &d,
        "examples/use.tsl",
        "import \"lib.tsl\";\nstep s(x: f32[4]) -> f32[4] { double(x) }\n",
    );
    let o = tessel(&d, &["check", "--cpu"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("examples/lib.tsl: SKIPPED — no step: a library"),
        "{t}"
    );
    assert!(t.contains("examples/use.tsl step s"), "{t}");
    // Named explicitly, a file without a step is still a failure.
    let o = tessel(&d, &["check", "--cpu", "examples/lib.tsl"]);
    assert!(!o.status.success(), "{}", text(&o));
}
