//! Diagnostics snapshots of the `check` pass: every `check_errors/*.tsl` parses but fails
//! to check. Its first line says which step to build and the dims:
//! `// step: NAME dims: T=4 N=8`. The diagnostics, rendered uncoloured, are snapshotted
//! with the source under `check_snapshots/` (SOURCE and DIAGNOSTIC sections).
//!
//! Add a case by dropping a `.tsl` file into `check_errors/` and running
//! `INSTA_UPDATE=always cargo test -p tessel-passes --test check_errors` once, then
//! reading the new snapshot.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The step and dims named on the first line.
fn header(source: &str, name: &str) -> (String, BTreeMap<String, u64>) {
    let first = source.lines().next().unwrap_or_default();
    let rest = first
        .strip_prefix("// step:")
        .unwrap_or_else(|| panic!("{name}: first line must be `// step: NAME dims: T=4`"));
    let (step, dims) = rest.split_once("dims:").unwrap_or((rest, ""));
    let dims = dims
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("{name}: bad dim `{kv}`"));
            (
                k.to_string(),
                v.parse()
                    .unwrap_or_else(|_| panic!("{name}: bad dim `{kv}`")),
            )
        })
        .collect();
    (step.trim().to_string(), dims)
}

#[test]
fn check_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check_errors");
    let mut paths: Vec<_> = fs::read_dir(&dir)
        .expect("read tests/check_errors")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tsl"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 20, "the corpus has {} programs", paths.len());
    insta::with_settings!({ snapshot_path => "check_snapshots", prepend_module_to_snapshot => false }, {
        for path in &paths {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let name = format!("check_errors/{file}");
            let source = fs::read_to_string(path).expect("read test input");
            let (step, dims) = header(&source, &name);
            let module = match tessel_syntax::parse(&source) {
                Ok(m) => m,
                Err(d) => panic!("{name} does not parse: {d:?}"),
            };
            let diagnostics = match tessel_passes::check::run(&module, &step, &dims) {
                Ok(_) => panic!("{name} checked without errors"),
                Err(d) => d,
            };
            let mut rendered = String::new();
            for d in &diagnostics {
                rendered.push_str(&d.render(&name, &source, false));
            }
            let snapshot = file.trim_end_matches(".tsl").to_string();
            insta::assert_snapshot!(snapshot, format!("---- SOURCE ----\n{source}---- DIAGNOSTIC ----\n{rendered}"));
        }
    });
}
