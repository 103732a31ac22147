//! Pass filetests (Cranelift `filetests/`, Triton `test/TritonGPU/*.mlir`): every
//! `ir/<pass>/*.tir` at the top of the repository holds one pass's input and its expected
//! output, and this test runs exactly that pass on the input and compares.
//!
//! The passes are the registry's (`tessel_passes::PASSES`), in pipeline order: each
//! registered pass must have a folder with at least one file, and each is run through the
//! function it registers, reading and printing the IR level its `Run` variant names.
//!
//! A file reads:
//!
//! ```text
//! ; pass: fuse                      header: `;` lines naming the pass (and, for `check`,
//! ; what the case is about           `; step: NAME dims: T=4`) and saying what is tested
//! graph g { ... }                   the input: graph IR; tessel source for `check`; a
//!                                   kernel or a program for `expand-math` and `legalize`
//! ; expected:
//! graph g { ... g0 = ... }          the output as the textual IR prints it
//! ```
//!
//! What each pass reads and prints, by its `Run` variant:
//!
//! | pass          | input                         | output                                   |
//! |---------------|-------------------------------|------------------------------------------|
//! | `check`       | source                        | `write_graph` of the step's graph        |
//! | `decompose`   | graph                         | `write_graph`                            |
//! | `fuse`        | graph                         | `write_graph` with the fusion groups     |
//! | `schedule`    | graph with fusion groups      | `write_graph` with groups and schedules  |
//! | `lower`       | graph, groups and schedules   | `write_program` (math placeholders in)   |
//! | `expand-math` | kernel or program             | `write_kernel` / `write_program`         |
//! | `legalize`    | kernel or program, expanded   | `write_kernel` / `write_program`         |
//!
//! The IR verifier runs on the input (as the pass's precondition) and on the output; a
//! rejection fails the file, as does an output that does not read back to the same text.
//! `;` lines inside the input are comments (blanked, so reader errors keep their line).
//!
//! Bless: `TESSEL_BLESS=1 cargo test -p tessel-passes --test filetests` rewrites every
//! expected section with the pass's output (and adds one to a file that has none). Read the
//! diff before committing it: a blessed expectation is a claim that the output is right.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::fs;
use std::path::{Path, PathBuf};

use tessel_ir::graph::{Fusion, Graph, Schedules};
use tessel_ir::kernel::Kernel;
use tessel_ir::text;
use tessel_ir::verify;
use tessel_passes::{
    pipeline, CompileError, Level, Options, PassInfo, Profile, Run, Target, PASSES,
};

const SEPARATOR: &str = "; expected:";

/// One parsed filetest.
struct FileTest {
    /// The pass named by `; pass:`.
    pass: String,
    /// For `check`: the step and its dims, from `; step: NAME dims: T=4 N=8`.
    step: Option<(String, BTreeMap<String, u64>)>,
    /// For `schedule`: the profile, from `; profile: invariant` (default exact).
    profile: Profile,
    /// The input, with `;` lines blanked.
    input: String,
    /// Everything up to and including the separator line (kept verbatim when blessing).
    head: String,
    /// The expected output, or `None` when the file has no separator yet.
    expected: Option<String>,
}

fn parse_file(text: &str) -> Result<FileTest, String> {
    let (head, expected) = match text
        .match_indices(SEPARATOR)
        .find(|&(i, _)| i == 0 || text.as_bytes()[i - 1] == b'\n')
    {
        Some((i, _)) => {
            let end = text[i..].find('\n').map_or(text.len(), |n| i + n + 1);
            let rest = &text[end..];
            (text[..end].to_string(), Some(rest.to_string()))
        }
        None => (text.to_string(), None),
    };
    let mut pass = None;
    let mut step = None;
    let mut profile = Profile::Exact;
    let mut input = String::new();
    let mut in_header = true;
    for line in head.lines() {
        let t = line.trim_start();
        if let Some(c) = t.strip_prefix(';') {
            let c = c.trim();
            if in_header {
                if let Some(p) = c.strip_prefix("pass:") {
                    pass = Some(p.trim().to_string());
                } else if let Some(s) = c.strip_prefix("step:") {
                    step = Some(parse_step(s)?);
                } else if let Some(p) = c.strip_prefix("profile:") {
                    profile = Profile::from_name(p.trim())
                        .ok_or_else(|| format!("unknown profile `{}`", p.trim()))?;
                }
            }
            input.push('\n');
        } else {
            in_header &= t.is_empty();
            input.push_str(line);
            input.push('\n');
        }
    }
    let pass = pass.ok_or("no `; pass: NAME` header line")?;
    Ok(FileTest {
        pass,
        step,
        profile,
        input,
        head: if head.ends_with('\n') || head.is_empty() {
            head
        } else {
            head + "\n"
        },
        expected,
    })
}

/// `NAME dims: T=4 N=8` (the dims are optional).
fn parse_step(s: &str) -> Result<(String, BTreeMap<String, u64>), String> {
    let (name, dims) = s.split_once("dims:").unwrap_or((s, ""));
    let dims = dims
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or(format!("bad dim `{kv}`"))?;
            let v = v.parse().map_err(|_| format!("bad dim `{kv}`"))?;
            Ok((k.to_string(), v))
        })
        .collect::<Result<_, String>>()?;
    Ok((name.trim().to_string(), dims))
}

/// Formats verifier errors, one per line.
fn errors<E: Display>(what: &str, es: Vec<E>, text: &str) -> String {
    let mut s = format!("the verifier rejects the {what}:\n");
    for e in es {
        s += &format!("  {e}\n");
    }
    s + &format!("--- {what} ---\n{text}")
}

fn read<T, E: Display>(r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("input does not read: {e}"))
}

fn check_graph(
    what: &str,
    g: &Graph,
    f: Option<&Fusion>,
    s: Option<&Schedules>,
) -> Result<(), String> {
    verify::verify_graph(g, f, s).map_err(|es| errors(what, es, &text::write_graph(g, f, s)))
}

/// Runs the file's pass, as the registry runs it, on its input; returns the printed output.
fn run_pass(info: &PassInfo, t: &FileTest) -> Result<String, String> {
    let opts = Options {
        target: Target::h200(),
        profile: t.profile,
        verify: true,
        tensor_parallel: false,
        wgmma_tma: false,
        wgmma_attention: false,
        wgmma_attention_keys: 0,
        wgmma_pingpong: false,
        merge_launches: true,
        dependent_launch: true,
    };
    let out = match &info.run {
        Run::Check(check) => {
            let (step, dims) = t
                .step
                .as_ref()
                .ok_or("a `check` test needs `; step: NAME dims: T=4`")?;
            let m = tessel_syntax::parse(&t.input).map_err(|ds| {
                let r: Vec<String> = ds
                    .iter()
                    .map(|d| d.render("input", &t.input, false))
                    .collect();
                format!("input does not parse:\n{}", r.concat())
            })?;
            let g = check(&m, step, dims).map_err(|ds| {
                let r: Vec<String> = ds
                    .iter()
                    .map(|d| d.render("input", &t.input, false))
                    .collect();
                format!("input does not check:\n{}", r.concat())
            })?;
            check_graph("output", &g, None, None)?;
            text::write_graph(&g, None, None)
        }
        Run::Graph(run) => {
            let (g, _, _) = read(text::read_graph(&t.input))?;
            check_graph("input", &g, None, None)?;
            let out = run(&g, &opts).map_err(|e| format!("the pass failed: {e}"))?;
            check_graph("output", &out, None, None)?;
            text::write_graph(&out, None, None)
        }
        Run::Fuse(run) => {
            let (g, _, _) = read(text::read_graph(&t.input))?;
            check_graph("input", &g, None, None)?;
            let f = run(&g, &opts);
            check_graph("output", &g, Some(&f), None)?;
            text::write_graph(&g, Some(&f), None)
        }
        Run::Schedule(run) => {
            let (g, f, _) = read(text::read_graph(&t.input))?;
            check_graph("input", &g, Some(&f), None)?;
            let s = run(&g, &f, &opts);
            check_graph("output", &g, Some(&f), Some(&s))?;
            text::write_graph(&g, Some(&f), Some(&s))
        }
        Run::Lower(run) => {
            let (g, f, s) = read(text::read_graph(&t.input))?;
            check_graph("input", &g, Some(&f), Some(&s))?;
            let p = run(&g, &f, &s)
                .map_err(|e| format!("{} failed: {}", info.name, chain(&e)))?
                .program;
            let printed = text::write_program(&p);
            verify::verify_program(&p, false).map_err(|es| errors("output", es, &printed))?;
            printed
        }
        Run::Kernel { run, expands_math } => run_kernel_pass(info, *run, *expands_math, t)?,
        Run::Program(run) => {
            let expanded = pipeline::math_expanded_before(info);
            let mut p = read(text::read_program(&t.input))?;
            verify::verify_program(&p, expanded)
                .map_err(|es| errors("input", es, &text::write_program(&p)))?;
            run(&mut p, &opts);
            let printed = text::write_program(&p);
            verify::verify_program(&p, expanded).map_err(|es| errors("output", es, &printed))?;
            printed
        }
    };
    round_trip(info, &out)?;
    Ok(out)
}

/// A kernel pass on a kernel, or on every kernel of a program.
fn run_kernel_pass(
    info: &PassInfo,
    run: fn(&mut Kernel) -> Result<(), CompileError>,
    expands_math: bool,
    t: &FileTest,
) -> Result<String, String> {
    let pass = |k: &mut Kernel| -> Result<(), String> {
        run(k).map_err(|e| format!("{} failed: {}", info.name, chain(&e)))
    };
    // The input of a pass after `expand-math` has no math placeholders left.
    let input_expanded = pipeline::math_expanded_before(info);
    let output_expanded = input_expanded || expands_math;
    if first_word(&t.input) == Some("program") {
        let mut p = read(text::read_program(&t.input))?;
        verify::verify_program(&p, input_expanded)
            .map_err(|es| errors("input", es, &text::write_program(&p)))?;
        for (_, k) in p.kernels.iter_mut() {
            pass(k)?;
        }
        let printed = text::write_program(&p);
        verify::verify_program(&p, output_expanded).map_err(|es| errors("output", es, &printed))?;
        Ok(printed)
    } else {
        let mut k = read(text::read_kernel(&t.input))?;
        verify::verify_kernel(&k, input_expanded)
            .map_err(|es| errors("input", es, &text::write_kernel(&k)))?;
        pass(&mut k)?;
        let printed = text::write_kernel(&k);
        verify::verify_kernel(&k, output_expanded).map_err(|es| errors("output", es, &printed))?;
        Ok(printed)
    }
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s += &format!(": {x}");
        src = x.source();
    }
    s
}

/// The printed output must read back and print the same (one textual form).
fn round_trip(info: &PassInfo, out: &str) -> Result<(), String> {
    let again = match info.run.gives() {
        Level::Kernel if first_word(out) == Some("program") => {
            text::read_program(out).map(|p| text::write_program(&p))
        }
        Level::Kernel => text::read_kernel(out).map(|k| text::write_kernel(&k)),
        Level::Source | Level::Graph | Level::Fused | Level::Scheduled => text::read_graph(out)
            .map(|(g, f, s)| {
                let f = (!f.groups.is_empty()).then_some(&f);
                let s = (s.values().any(Option::is_some)).then_some(&s);
                text::write_graph(&g, f, s)
            }),
    };
    match again {
        Ok(a) if a == out => Ok(()),
        Ok(a) => Err(format!(
            "the output does not print the same after reading it back:\n{}",
            diff(out, &a, 1)
        )),
        Err(e) => Err(format!("the output does not read back: {e}\n{out}")),
    }
}

fn first_word(s: &str) -> Option<&str> {
    s.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .flat_map(str::split_whitespace)
        .next()
}

/// A unified-style line diff of `expected` against `actual` (`-` expected, `+` actual),
/// with three lines of context around each change. `first_line` is the line number of
/// `expected`'s first line in its file, so hunk headers point into the file.
fn diff(expected: &str, actual: &str, first_line: usize) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    // Longest common subsequence table over the suffixes.
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // The edit script: (' ' | '-' | '+', line in a, line in b, text).
    let mut ops = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', i, j, a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i, j, a[i]));
            i += 1;
        } else {
            ops.push(('+', i, j, b[j]));
            j += 1;
        }
    }
    const CONTEXT: usize = 3;
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut out = String::from("--- expected\n+++ actual\n");
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 2 * CONTEXT + 1 {
            end = changed[k];
            k += 1;
        }
        let end = (end + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let (ca, cb) = (
            hunk.iter().filter(|o| o.0 != '+').count(),
            hunk.iter().filter(|o| o.0 != '-').count(),
        );
        out += &format!(
            "@@ -{},{ca} +{},{cb} @@\n",
            hunk[0].1 + first_line,
            hunk[0].2 + first_line
        );
        for (c, _, _, line) in hunk {
            out += &format!("{c}{line}\n");
        }
    }
    out
}

/// What running one file gave.
enum Outcome {
    Ok,
    /// The expected section was rewritten (bless mode only).
    Blessed,
    Fail(String),
}

/// Runs one file.
fn run_file(path: &Path, info: &PassInfo, bless: bool) -> Outcome {
    match try_file(path, info, bless) {
        Ok(o) => o,
        Err(e) => Outcome::Fail(e),
    }
}

fn try_file(path: &Path, info: &PassInfo, bless: bool) -> Result<Outcome, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let t = parse_file(&text)?;
    if t.pass != info.name {
        return Err(format!(
            "the header names pass `{}` but the file is under ir/{}/",
            t.pass, info.name
        ));
    }
    let actual = run_pass(info, &t)?;
    let matches = t
        .expected
        .as_deref()
        .is_some_and(|e| e.trim_end() == actual.trim_end());
    if matches {
        return Ok(Outcome::Ok);
    }
    if bless {
        let head = if t.expected.is_some() {
            t.head
        } else {
            format!("{}{SEPARATOR}\n", t.head)
        };
        let body = format!("{head}{}\n", actual.trim_end());
        fs::write(path, body).map_err(|e| format!("cannot bless: {e}"))?;
        return Ok(Outcome::Blessed);
    }
    Err(match &t.expected {
        None => format!(
            "no `{SEPARATOR}` section; run with TESSEL_BLESS=1 to add one\n--- actual ---\n{actual}"
        ),
        Some(e) => format!(
            "output differs from the expected section (TESSEL_BLESS=1 to rewrite it)\n{}",
            diff(e.trim_end(), actual.trim_end(), t.head.lines().count() + 1)
        ),
    })
}

#[test]
fn filetests() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ir");
    let bless = std::env::var_os("TESSEL_BLESS").is_some_and(|v| v != "0" && !v.is_empty());
    let mut failed = Vec::new();
    let mut count = 0;
    for info in PASSES {
        let pass = info.name;
        let dir = root.join(pass);
        let mut paths: Vec<PathBuf> = match fs::read_dir(&dir) {
            Ok(rd) => rd
                .map(|e| e.expect("directory entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "tir"))
                .collect(),
            Err(e) => {
                println!("ir/{pass}/: FAIL (cannot read: {e})");
                failed.push(format!("ir/{pass}/"));
                continue;
            }
        };
        paths.sort();
        if paths.is_empty() {
            println!("ir/{pass}/: FAIL (no .tir files)");
            failed.push(format!("ir/{pass}/ (empty)"));
        }
        for path in paths {
            let name = format!("ir/{pass}/{}", path.file_name().unwrap().to_string_lossy());
            count += 1;
            match run_file(&path, info, bless) {
                Outcome::Ok => println!("{name}: ok"),
                Outcome::Blessed => println!("{name}: blessed"),
                Outcome::Fail(why) => {
                    println!("{name}: FAIL\n{why}");
                    failed.push(name);
                }
            }
        }
    }
    println!("{count} filetests, {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "{} filetest(s) failed:\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
}
