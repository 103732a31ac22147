//! No input makes the front end panic.
//!
//! Thousands of deterministic pseudo-random inputs (mutations of the examples
//! and of the `tests/ok/` corpus: byte deletions, token insertions, truncations,
//! span swaps; plus random token soup, multi-byte UTF-8 included) go through
//! `parse`; every diagnostic is rendered (coloured and not), displayed and
//! shortened, and every module that parses is printed and must re-parse to the
//! same printed form.

use std::fs;
use std::path::Path;

/// SplitMix64: a tiny deterministic generator (no dependency, same sequence everywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// Fragments to insert: every token kind, near-tokens, and multi-byte text.
const FRAGMENTS: &[&str] = &[
    "const",
    "fn",
    "step",
    "let",
    "import",
    "from",
    "inout",
    "\"lib.tsl\"",
    "\"m.{layer}.w\"",
    "{x}",
    "None",
    "true",
    "false",
    "bf16",
    "f16",
    "f32",
    "i32",
    "bool",
    "x",
    "T",
    "mean",
    "axis",
    "0",
    "1",
    "128",
    "1.0",
    "1e-6",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ";",
    ":",
    "=",
    "->",
    "...",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "@",
    "!",
    "^T",
    "^",
    ".",
    "..",
    "/*",
    "*/",
    "//",
    "\n",
    " ",
    "\t",
    "é",
    "∑",
    "🙂",
    "\u{0}",
    "\r\n",
    "1.",
    "1e",
    "0x1",
    "99999999999999999999",
    "$",
    "\"",
    "'",
    "#",
];

fn render_all(source: &str) {
    match tessel_syntax::parse(source) {
        Ok(module) => {
            let printed = module.to_string();
            let again = tessel_syntax::parse(&printed).unwrap_or_else(|ds| {
                panic!(
                    "printed form does not re-parse\n--- input\n{source}\n--- printed\n{printed}\n--- errors\n{}",
                    ds.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
                )
            });
            assert_eq!(printed, again.to_string(), "input:\n{source}");
        }
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty());
            for d in &diagnostics {
                assert!(!d.labels.is_empty(), "{d}");
                for label in &d.labels {
                    assert!(label.span.start <= label.span.end && label.span.end <= source.len());
                    assert!(source.is_char_boundary(label.span.start));
                    assert!(source.is_char_boundary(label.span.end));
                }
                let plain = d.render("fuzz.tsl", source, false);
                assert!(!plain.contains('\u{1b}'), "uncoloured output has escapes");
                assert!(plain.contains(d.code));
                let _ = d.render("fuzz.tsl", source, true);
                let _ = d.to_string();
                let _ = d.short("fuzz.tsl", source);
            }
        }
    }
}

fn mutate(rng: &mut Rng, base: &str) -> String {
    let mut bytes = base.as_bytes().to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                let len = 1 + rng.below(3);
                bytes.drain(at..(at + len).min(bytes.len()));
            }
            1 => {
                let at = rng.below(bytes.len() + 1);
                let frag = rng.pick(FRAGMENTS).as_bytes().to_vec();
                bytes.splice(at..at, frag);
            }
            2 => {
                let at = rng.below(bytes.len() + 1);
                bytes.truncate(at);
            }
            3 if bytes.len() > 2 => {
                // Duplicate a random slice somewhere else.
                let a = rng.below(bytes.len());
                let b = (a + 1 + rng.below(16)).min(bytes.len());
                let slice = bytes[a..b].to_vec();
                let at = rng.below(bytes.len() + 1);
                bytes.splice(at..at, slice);
            }
            _ => {
                if let Some(at) = (!bytes.is_empty()).then(|| rng.below(bytes.len())) {
                    bytes[at] = b" ()[]{},;:=+-*/@!.^e0xT"[rng.below(23)];
                }
            }
        }
    }
    // Byte edits can split a multi-byte char: lossy decoding turns that into U+FFFD,
    // which is itself multi-byte input for the lexer and the renderer.
    String::from_utf8_lossy(&bytes).into_owned()
}

fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in [root.join("../../examples/qwen3_14b"), root.join("tests/ok")] {
        let mut paths: Vec<_> = fs::read_dir(&dir)
            .expect("read seed dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "tsl"))
            .collect();
        paths.sort();
        for p in paths {
            out.push(fs::read_to_string(p).expect("read seed"));
        }
    }
    out
}

#[test]
fn mutations_never_panic() {
    let seeds = seeds();
    assert!(seeds.len() >= 13);
    let mut rng = Rng(0x7e55e1);
    let mut parsed = 0usize;
    let mut total = 0usize;
    for seed in &seeds {
        for _ in 0..1000 {
            let input = mutate(&mut rng, seed);
            render_all(&input);
            parsed += tessel_syntax::parse(&input).is_ok() as usize;
            total += 1;
        }
    }
    // Sanity: the mutations are not all fatal, so the printer path is exercised too.
    assert!(
        parsed > total / 50,
        "only {parsed} of {total} mutations parsed"
    );
}

#[test]
fn truncations_never_panic() {
    for seed in seeds() {
        let mut cut = 0;
        while cut <= seed.len() {
            if seed.is_char_boundary(cut) {
                render_all(&seed[..cut]);
            }
            cut += 1;
        }
    }
}

#[test]
fn token_soup_never_panics() {
    let mut rng = Rng(42);
    for _ in 0..4000 {
        let n = rng.below(40);
        let mut s = String::new();
        for _ in 0..n {
            s.push_str(rng.pick(FRAGMENTS));
            if rng.below(3) == 0 {
                s.push(' ');
            }
        }
        render_all(&s);
    }
}

#[test]
fn edge_inputs_never_panic() {
    for s in [
        "",
        " ",
        "\n",
        "é",
        "/*",
        "/*/",
        "*/",
        "//",
        "0",
        "-",
        "...",
        "fn",
        "fn f(",
        "step s(x: f32) -> f32 {",
        "step s(x: f32) -> f32 { x }\u{0}",
        "\u{feff}step",
        "\r\n\r\n",
        "🙂🙂🙂",
        "step s() -> f32 { 1 } }",
    ] {
        render_all(s);
    }
}
