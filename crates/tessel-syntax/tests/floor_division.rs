//! The floor-division check (E0006: a `//` comment after an operand whose text reads as an
//! operand) has no false positives in the repository: no `.tsl` file under `examples/`,
//! `tests/` or `crates/*/tests/` gets it, except the cases written to show it
//! (`floor_division_*.tsl`). Every trailing comment in them stays a comment.

use std::fs;
use std::path::{Path, PathBuf};

fn tsl_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target" || n == ".git") {
                continue;
            }
            tsl_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "tsl") {
            out.push(p);
        }
    }
}

#[test]
fn no_tsl_file_in_the_repository_is_taken_for_a_floor_division() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in ["examples", "tests"] {
        tsl_files(&root.join(dir), &mut files);
    }
    for krate in fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        tsl_files(&krate.path().join("tests"), &mut files);
    }
    files.sort();
    assert!(files.len() > 100, "found only {} .tsl files", files.len());
    let mut trailing = 0;
    for path in &files {
        let source = fs::read_to_string(path).expect("read .tsl");
        let shows_it = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("floor_division"));
        let (_, errors) = tessel_syntax::lexer::lex(&source);
        let flagged: Vec<_> = errors
            .iter()
            .filter(|e| e.kind == tessel_syntax::lexer::LexErrorKind::FloorDivision)
            .map(|e| &source[e.span.range()])
            .collect();
        if shows_it {
            assert!(!flagged.is_empty(), "{}: not flagged", path.display());
        } else {
            assert!(flagged.is_empty(), "{}: {flagged:?}", path.display());
        }
        trailing += source
            .lines()
            .filter(|l| {
                l.split_once("//")
                    .is_some_and(|(code, _)| !code.trim().is_empty())
            })
            .count();
    }
    // The corpus has trailing comments to be wrong about (the examples' `// Hugging Face
    // order: ...`, parameters' `// the input`).
    assert!(trailing > 10, "only {trailing} trailing comments");
}
