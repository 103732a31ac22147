//! The porting hints (`tessel_syntax::porting::HINTS`) name only what tessel has: every
//! row's tessel spelling parses, and every function it calls is a builtin of the checker
//! (or a cast). The docs' table ("Porting from PyTorch" in docs/language.md) lists every
//! row as it is.

use std::path::Path;

use tessel_passes::check;
use tessel_syntax::ast::{Callee, Expr};
use tessel_syntax::porting::HINTS;

#[test]
fn every_hint_names_a_builtin_or_syntax_that_parses() {
    let builtins = check::builtin_names();
    assert!(HINTS.len() >= 30, "{} rows", HINTS.len());
    for row in HINTS {
        let src = format!("const HINT = {};\n", row.tessel);
        let m = tessel_syntax::parse(&src)
            .unwrap_or_else(|d| panic!("{}: `{}` does not parse: {d:?}", row.example, row.tessel));
        for e in m.exprs.values() {
            if let Expr::Call(c) = e {
                if let Callee::Name(n) = &c.callee {
                    assert!(
                        builtins.contains(&n.node.as_str()),
                        "{}: `{}` calls `{}`, which is no builtin",
                        row.example,
                        row.tessel,
                        n.node
                    );
                }
            }
        }
    }
}

#[test]
fn the_docs_list_every_hint() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/language.md");
    let docs = std::fs::read_to_string(&path).expect("read docs/language.md");
    for row in HINTS {
        let line = format!("| `{}` | `{}` |", row.example, row.tessel);
        assert!(
            docs.contains(&line),
            "docs/language.md lacks the row {line}"
        );
    }
}
