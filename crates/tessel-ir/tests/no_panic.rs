//! The readers never panic: mutated and truncated texts give errors (or, by chance, IR).

use tessel_ir::text::{read_graph, read_kernel, read_program, write_graph, write_program};
use tessel_ir::verify::{verify_graph, verify_program};
use tessel_testkit::ir::*;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "",
    " ",
    "\n",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ",",
    ":",
    "=",
    "+",
    "-",
    "..",
    ".",
    "\"",
    "\\",
    "//",
    "0",
    "1",
    "4294967296",
    "99999999999999999999999",
    "0x",
    "0f",
    "0fFFFFFFFF",
    "u32",
    "u64",
    "f32",
    "e-",
    "nan",
    "inf",
    "v0",
    "v99",
    "g0",
    "r0",
    "r999",
    "smem0",
    "buf0",
    "k0",
    "for",
    "if",
    "else",
    "barrier",
    "load.global.v4",
    "store.shared.b8",
    "param",
    "regs",
    "special",
    "tile",
    "why",
    "é",
    "\u{0}",
    "🦀",
    "\\u{110000}",
    "\"\\u{",
];

/// Texts derived from `base`: truncations, deletions, insertions, swaps, duplications.
fn mutants(base: &str, seed: u64, n: usize) -> Vec<String> {
    let mut rng = Rng(seed);
    let chars: Vec<char> = base.chars().collect();
    let mut out = Vec::new();
    let step = (chars.len() / 200).max(1);
    for cut in (0..chars.len()).step_by(step) {
        out.push(chars[..cut].iter().collect());
    }
    for _ in 0..n {
        let mut c = chars.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(c.len() + 1);
            match rng.below(5) {
                0 if at < c.len() => {
                    let len = 1 + rng.below(8);
                    c.drain(at..(at + len).min(c.len()));
                }
                1 => {
                    let p = PIECES[rng.below(PIECES.len())];
                    for (i, ch) in p.chars().enumerate() {
                        c.insert(at + i, ch);
                    }
                }
                2 if at < c.len() => {
                    let other = rng.below(c.len());
                    c.swap(at, other);
                }
                3 if at < c.len() => {
                    let len = rng.below(40).min(c.len() - at);
                    let dup: Vec<char> = c[at..at + len].to_vec();
                    for (i, ch) in dup.into_iter().enumerate() {
                        c.insert(at + i, ch);
                    }
                }
                _ => {
                    if at < c.len() {
                        c[at] = char::from(b' ' + (rng.below(95) as u8));
                    }
                }
            }
        }
        out.push(c.into_iter().collect());
    }
    out
}

#[test]
fn graph_reader_never_panics() {
    let (g, f, s) = kitchen_sink_graph();
    let text = write_graph(&g, Some(&f), Some(&s));
    for m in mutants(&text, 1, 3000) {
        // The verifier must not panic on whatever reads back either.
        if let Ok((g, f, s)) = read_graph(&m) {
            let _ = verify_graph(&g, Some(&f), Some(&s));
        }
    }
}

#[test]
fn program_and_kernel_readers_never_panic() {
    let text = write_program(&small_program());
    for m in mutants(&text, 2, 3000) {
        if let Ok(p) = read_program(&m) {
            let _ = verify_program(&p, false);
        }
    }
    let k = tessel_ir::text::write_kernel(&kitchen_sink_kernel());
    for m in mutants(&k, 3, 2000) {
        let _ = read_kernel(&m);
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(4);
    for _ in 0..2000 {
        let len = rng.below(64);
        let s: String = (0..len)
            .map(|_| PIECES[rng.below(PIECES.len())])
            .collect::<Vec<_>>()
            .join(" ");
        let _ = read_graph(&s);
        let _ = read_kernel(&s);
        let _ = read_program(&s);
        let _ = read_graph(&format!("graph g {{ {s} }}"));
        let _ = read_kernel(&format!(
            "kernel k block [1, 1, 1] grid [1, 1, 1] {{ regs r0: u32 {s} }}"
        ));
        let _ = read_program(&format!("program p {{ {s} }}"));
    }
}
