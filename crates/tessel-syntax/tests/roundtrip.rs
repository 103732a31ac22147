//! The examples parse, and parse → print → parse gives the same printed form
//! for the examples and for the corpus in `tests/ok/`.

use std::fs;
use std::path::{Path, PathBuf};

fn tsl_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tsl"))
        .collect();
    files.sort();
    files
}

fn examples() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut v = tsl_files(&root.join("qwen3_14b"));
    v.extend(tsl_files(&root.join("lora")));
    v
}

fn corpus() -> Vec<PathBuf> {
    tsl_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ok"))
}

fn parse_file(path: &Path) -> (String, tessel_syntax::ast::Module) {
    let source = fs::read_to_string(path).expect("read");
    let name = path.display().to_string();
    match tessel_syntax::parse(&source) {
        Ok(m) => (source, m),
        Err(ds) => {
            let text: String = ds.iter().map(|d| d.render(&name, &source, false)).collect();
            panic!("{name} failed to parse:\n{text}");
        }
    }
}

fn assert_round_trip(path: &Path) {
    let (_, module) = parse_file(path);
    let printed = module.to_string();
    let reparsed = tessel_syntax::parse(&printed).unwrap_or_else(|ds| {
        let text: String = ds
            .iter()
            .map(|d| d.render("printed", &printed, false))
            .collect();
        panic!(
            "printed form of {} does not parse:\n{printed}\n{text}",
            path.display()
        )
    });
    assert_eq!(printed, reparsed.to_string(), "{}", path.display());
    assert_eq!(module.items.len(), reparsed.items.len());
    assert_eq!(
        module.exprs.len(),
        reparsed.exprs.len(),
        "{}",
        path.display()
    );
}

#[test]
fn examples_parse() {
    let files = examples();
    let names: Vec<_> = files
        .iter()
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()))
        .collect();
    for want in ["rms_norm", "rope", "swiglu", "gate_proj"] {
        assert!(
            names.contains(&want),
            "missing example {want}.tsl: {names:?}"
        );
    }
    for path in &files {
        let (_, module) = parse_file(path);
        assert!(module
            .funcs()
            .any(|f| f.kind == tessel_syntax::ast::FuncKind::Step));
    }
}

#[test]
fn examples_round_trip() {
    for path in examples() {
        assert_round_trip(&path);
    }
}

#[test]
fn corpus_round_trip() {
    let files = corpus();
    assert!(files.len() >= 10);
    for path in files {
        assert_round_trip(&path);
    }
}

/// The canonical printed form of each example, reviewed once.
#[test]
fn examples_printed() {
    for path in examples() {
        let (_, module) = parse_file(&path);
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        insta::assert_snapshot!(format!("printed_{name}"), module.to_string());
    }
}

/// Spans point at what they describe.
#[test]
fn spans() {
    let path = examples()
        .into_iter()
        .find(|p| p.ends_with("rms_norm.tsl"))
        .unwrap();
    let (source, module) = parse_file(&path);
    let text = |s: tessel_syntax::Span| &source[s.range()];
    let f = module.funcs().next().unwrap();
    assert_eq!(text(f.name.span), "rms_norm");
    assert_eq!(text(f.params[0].span), "x: bf16[..., D]");
    assert_eq!(text(f.params[0].ty.dims[0].span), "...");
    assert_eq!(text(f.ret.span()), "bf16[..., D]");
    assert_eq!(
        text(module.span(f.body.tail)),
        "w * bf16(xf * rsqrt(var + EPS))"
    );
    assert!(text(f.span).starts_with("fn rms_norm(") && text(f.span).ends_with('}'));
    let c = module.consts().next().unwrap();
    assert_eq!(text(c.span), "const EPS = 1e-6;");
    // Every expression's span is inside its item and on char boundaries.
    for (id, _) in module.exprs.iter() {
        let s = module.span(id);
        assert!(s.start <= s.end && s.end <= source.len());
        assert!(!text(s).is_empty());
    }
}

/// Deep nesting must not overflow the stack: the LR parser keeps its own stack
/// and expressions live in an arena, not a tree of boxes.
#[test]
fn deep_nesting_parses() {
    let depth = 20_000;
    let src = format!(
        "const A = {}1{};\nconst B = {}1;\nconst C = {}1{};",
        "(".repeat(depth),
        ")".repeat(depth),
        "-".repeat(depth),
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let module = tessel_syntax::parse(&src).expect("deep nesting parses");
    assert_eq!(module.items.len(), 3);
}
