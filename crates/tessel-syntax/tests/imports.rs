//! Loading programs of several files (`import "lib.tsl";`), on the programs under
//! `tests/programs/imports/`: what is loaded, in what order, and the diagnostics of the
//! programs that fail to load, rendered against the file each lies in and snapshotted
//! under `tests/snapshots/` (`imports__NAME.snap`).

use std::path::Path;

use tessel_syntax::ast::{FuncKind, Item};
use tessel_syntax::{load, LoadError, Loaded};

/// `tests/programs/imports/REL` as the tests name it (relative to this crate, so the
/// snapshots show the same file names on every machine).
fn program(rel: &str) -> String {
    format!("../../tests/programs/imports/{rel}")
}

fn loaded(rel: &str) -> Loaded {
    match load(Path::new(&program(rel))) {
        Ok(l) => l,
        Err(LoadError::Read { path, error }) => panic!("{}: {error}", path.display()),
        Err(LoadError::Diagnostics {
            sources,
            diagnostics,
        }) => {
            let text: String = diagnostics
                .iter()
                .map(|d| sources.render(d, false))
                .collect();
            panic!("{rel} failed to load:\n{text}")
        }
    }
}

/// The rendered diagnostics of a program that must fail to load.
fn load_errors(rel: &str) -> String {
    match load(Path::new(&program(rel))) {
        Ok(_) => panic!("{rel} loaded without errors"),
        Err(LoadError::Read { path, error }) => panic!("{}: {error}", path.display()),
        Err(LoadError::Diagnostics {
            sources,
            diagnostics,
        }) => diagnostics
            .iter()
            .map(|d| sources.render(d, false))
            .collect(),
    }
}

/// Names of the module's items in order, with `step`s marked.
fn item_names(l: &Loaded) -> Vec<String> {
    l.module
        .items
        .iter()
        .map(|i| match i {
            Item::Const(c) => format!("const {}", c.name.node),
            Item::Func(f) if f.kind == FuncKind::Step => format!("step {}", f.name.node),
            Item::Func(f) => format!("fn {}", f.name.node),
            Item::Import(im) => format!("import {}", im.path.node),
        })
        .collect()
}

#[test]
fn imports_are_transitive_and_relative_to_the_importing_file() {
    let l = loaded("mlp_block.tsl");
    let names: Vec<&str> = l.sources.files().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            program("mlp_block.tsl"),
            program("lib/norms.tsl"),
            program("lib/activations.tsl"),
        ]
    );
    // Dependencies first; the libraries' steps are not brought in; the root keeps all.
    assert_eq!(
        item_names(&l),
        [
            "fn swiglu",
            "const EPS",
            "fn rms_norm",
            "import lib/norms.tsl",
            "const HALF_EPS",
            "step mlp_block",
        ]
    );
    // Every span lies in the file whose text it quotes.
    for item in &l.module.items {
        let span = item.span();
        let f = l.sources.file(l.sources.lookup(span.start).unwrap());
        let text = &f.text[f.local(span).range()];
        assert!(
            ["fn ", "const ", "import ", "step "]
                .iter()
                .any(|k| text.starts_with(k)),
            "{}: {text}",
            f.name
        );
    }
    // `--emit ast` prints the first file alone, and it parses back.
    let root = l.root_module().to_string();
    assert!(root.starts_with("import \"lib/norms.tsl\";\n"), "{root}");
    assert!(!root.contains("fn rms_norm"), "{root}");
    tessel_syntax::parse(&root).expect("the printed root parses");
}

#[test]
fn a_file_imported_twice_is_loaded_once() {
    let l = loaded("diamond/main.tsl");
    let names: Vec<&str> = l.sources.files().iter().map(|f| f.name.as_str()).collect();
    // `./base.tsl` from right.tsl is the same file as `base.tsl` from left.tsl.
    assert_eq!(
        names,
        [
            program("diamond/main.tsl"),
            program("diamond/left.tsl"),
            program("diamond/base.tsl"),
            program("diamond/right.tsl"),
        ]
    );
    assert_eq!(
        item_names(&l),
        [
            "const SCALE",
            "fn scaled",
            "fn left",
            "fn right",
            "import left.tsl",
            "import right.tsl",
            "step both",
        ]
    );
}

#[test]
fn a_program_of_one_file_loads_as_it_parses() {
    let path = "../../examples/qwen3_14b/rms_norm.tsl";
    let l = load(Path::new(path)).expect("loads");
    let text = std::fs::read_to_string(path).unwrap();
    let parsed = tessel_syntax::parse(&text).unwrap();
    assert_eq!(l.sources.files().len(), 1);
    assert_eq!(l.module.items, parsed.items);
    assert_eq!(l.module.expr_spans, parsed.expr_spans);
}

#[test]
fn a_root_that_cannot_be_read_is_an_io_error() {
    match load(Path::new("../../tests/programs/imports/no_such_file.tsl")) {
        Err(LoadError::Read { path, error }) => {
            assert!(path.ends_with("no_such_file.tsl"));
            assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn import_cycle_names_the_chain() {
    insta::assert_snapshot!("cycle", load_errors("errors/cycle/a.tsl"));
}

#[test]
fn a_file_that_imports_itself() {
    insta::assert_snapshot!("self_import", load_errors("errors/self_import.tsl"));
}

#[test]
fn missing_file_is_reported_at_the_import_with_the_resolved_path() {
    insta::assert_snapshot!("missing", load_errors("errors/missing.tsl"));
}

#[test]
fn syntax_error_in_an_imported_file_is_shown_in_that_file() {
    insta::assert_snapshot!("syntax_in_import", load_errors("errors/syntax/main.tsl"));
}
