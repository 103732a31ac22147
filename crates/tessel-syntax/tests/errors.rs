//! Diagnostics snapshots: every `tests/errors/*.tsl` must fail to parse, and its
//! diagnostics, rendered uncoloured, are snapshotted with the source under
//! `tests/snapshots/` (one `errors__<name>.tsl.snap` per input).
//!
//! Add a case by dropping a `.tsl` file into `tests/errors/` and running
//! `INSTA_UPDATE=always cargo test -p tessel-syntax --test errors` once, then
//! reading the new snapshot.

use std::fs;

/// One snapshot per malformed input: a SOURCE section and a DIAGNOSTIC section.
macro_rules! diagnostics_snapshot {
    ($glob:literal) => {
        insta::glob!($glob, |path| {
            let source = fs::read_to_string(path).expect("read test input");
            let name = format!(
                "errors/{}",
                path.file_name().expect("file name").to_string_lossy()
            );
            let diagnostics = match tessel_syntax::parse(&source) {
                Ok(_) => panic!("{name} parsed without errors"),
                Err(d) => d,
            };
            let mut rendered = String::new();
            for d in &diagnostics {
                rendered.push_str(&d.render(&name, &source, false));
            }
            insta::assert_snapshot!(format!(
                "---- SOURCE ----\n{source}---- DIAGNOSTIC ----\n{rendered}"
            ));
        });
    };
}

#[test]
fn errors() {
    diagnostics_snapshot!("errors/*.tsl");
}
