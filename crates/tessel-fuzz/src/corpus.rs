//! Regression files: a `.tsl` file whose header comment says how to run it.
//!
//! ```text
//! // caught: reductions over different axes fused when T = D (issue 7)
//! // profile: exact            (optional; exact, invariant or fast, or several: exact fast)
//! // seed: 0                   (optional; the inputs' seed, as `tessel run --seed`)
//! // dims: T=4 D=4             (the `--dim` bindings)
//! // tp: 1 2 4                 (optional: a tensor-parallel case, run as ranks at these
//! //                            world sizes, the first the reference; see below)
//! step c3(a: f32[T, D]) -> f32[D] { ... }
//! ```
//!
//! Every step of the file is run in every profile named and must pass
//! ([`crate::run::Outcome::Pass`]): a bug once found stays found. A file with a `tp` line
//! is a tensor-parallel case instead (what `tessel fuzz --tp --save` writes): every step is
//! planned and run as ranks at each world size ([`crate::tp::tp_case`]), and must give the
//! same bits at every size ([`TpOutcome::Same`]); one the plan no longer splits compares
//! nothing and fails too, so that a kept case keeps testing what it caught.

use crate::program::Program;
use crate::run::{run_case, Outcome};
use crate::tp::{tp_case, TpOutcome};
use std::path::Path;
use tessel_passes::Profile;

/// How a regression file is run.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub dims: Vec<(String, u64)>,
    pub profiles: Vec<Profile>,
    pub seed: u64,
    /// World sizes of a tensor-parallel case (the first the reference); empty for an
    /// ordinary one.
    pub tp: Vec<u32>,
}

/// Reads the `// key: value` lines of `src` (any comment line; unknown keys are ignored).
///
/// Errors: a malformed `dims`, `profile` or `seed` value, named.
pub fn header(src: &str) -> Result<Header, String> {
    let mut h = Header {
        dims: vec![],
        profiles: vec![Profile::Exact],
        seed: 0,
        tp: vec![],
    };
    for line in src.lines() {
        let Some(c) = line.trim().strip_prefix("//") else {
            continue;
        };
        let Some((key, value)) = c.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "dims" => {
                for b in value.split_whitespace() {
                    let (n, v) = b
                        .split_once('=')
                        .ok_or_else(|| format!("dims: `{b}` is not NAME=SIZE"))?;
                    let v = v
                        .parse()
                        .map_err(|_| format!("dims: `{b}`: the size is not a number"))?;
                    h.dims.push((n.to_string(), v));
                }
            }
            "profile" => {
                h.profiles = value
                    .split_whitespace()
                    .map(|p| Profile::from_name(p).ok_or_else(|| format!("profile: `{p}`")))
                    .collect::<Result<_, _>>()?;
            }
            "seed" => {
                h.seed = value
                    .parse()
                    .map_err(|_| format!("seed: `{value}` is not a number"))?;
            }
            "tp" => {
                h.tp = value
                    .split_whitespace()
                    .map(|n| match n.parse::<u32>() {
                        Ok(n @ (1 | 2 | 4 | 8)) => Ok(n),
                        _ => Err(format!("tp: `{n}` is not a world size (1, 2, 4 or 8)")),
                    })
                    .collect::<Result<_, _>>()?;
                if h.tp.len() < 2 {
                    return Err(format!(
                        "tp: `{value}`: at least two world sizes, the first the reference"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(h)
}

/// Runs every step of the file at `path` in every profile its header names.
///
/// Errors: the file cannot be read or parsed, or its header is malformed.
pub fn run_file(path: &Path) -> Result<Vec<(String, Profile, Outcome)>, String> {
    let src = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let h = header(&src).map_err(|e| format!("{}: {e}", path.display()))?;
    let module = tessel_syntax::parse(&src)
        .map_err(|d| format!("{}: does not parse: {:?}", path.display(), d.first()))?;
    let mut out = Vec::new();
    for step in tessel_passes::check::steps(&module) {
        for &profile in &h.profiles {
            let o = if h.tp.is_empty() {
                run_case(&src, &step, &h.dims, profile, h.seed, None)
            } else {
                tp_outcome(tp_case(&src, &step, &h.dims, profile, h.seed, &h.tp))
            };
            out.push((step.clone(), profile, o));
        }
    }
    Ok(out)
}

/// A tensor-parallel case's outcome as a regression's: the same bits at every world size
/// pass; different bits are a wrong answer; a case that no longer compares anything (the
/// plan refuses it, or splits nothing) is an error, since it no longer tests what it caught.
fn tp_outcome(o: TpOutcome) -> Outcome {
    match o {
        TpOutcome::Same => Outcome::Pass,
        TpOutcome::Differ(m) => Outcome::Fail(m),
        TpOutcome::Error(m) => Outcome::Error(m),
        TpOutcome::Rejected(m) => Outcome::Rejected(m),
        TpOutcome::Unplanned(m) => Outcome::Error(format!(
            "the plan no longer partitions it, so nothing is compared: {m}"
        )),
        TpOutcome::Replicated => {
            Outcome::Error("the plan replicates every value, so nothing is compared".to_string())
        }
    }
}

/// A tensor-parallel case that failed (`tessel fuzz --tp`: `source`, its inputs' `seed`, run
/// in `profile` at world sizes `sizes`) as a regression file: [`header`] reads it back with
/// its `tp` line, and [`run_file`] replays it as a tensor-parallel case. Not shrunk.
pub fn tp_regression_source(
    source: &str,
    seed: u64,
    profile: Profile,
    sizes: &[u32],
    outcome: &TpOutcome,
) -> String {
    let (kind, msg) = match outcome {
        TpOutcome::Differ(m) => ("wrong answer", m.as_str()),
        TpOutcome::Error(m) => ("error", m.as_str()),
        TpOutcome::Rejected(m) => ("rejected", m.as_str()),
        TpOutcome::Unplanned(m) => ("unplanned", m.as_str()),
        TpOutcome::Replicated => ("replicated", ""),
        TpOutcome::Same => ("pass", ""),
    };
    let msg: String = msg.chars().take(300).collect::<String>().replace('\n', " ");
    let sizes: Vec<String> = sizes.iter().map(u32::to_string).collect();
    format!(
        "// Found by `tessel fuzz --tp` (seed {seed}), not shrunk; what it caught, when found:\n\
         // caught: {kind}: {msg}\n\
         // profile: {}\n\
         // seed: {seed}\n\
         // tp: {}\n\
         {source}",
        profile.name(),
        sizes.join(" ")
    )
}

/// A shrunk failing program as a regression file.
pub fn regression_source(p: &Program, seed: u64, profile: Profile, outcome: &Outcome) -> String {
    let mut msg: String = outcome.message().chars().take(300).collect();
    msg = msg.replace('\n', " ");
    p.source(&[
        format!("Found by `tessel fuzz` (seed {seed}) and shrunk; what it caught, when found:"),
        format!("caught: {}: {msg}", outcome.kind()),
        format!("profile: {}", profile.name()),
        format!("seed: {seed}"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_header() {
        let h = header("// caught: x: y\n// profile: exact fast\n// seed: 3\n// dims: T=4 D=5\nstep s() -> f32 { 1.0 }\n").unwrap();
        assert_eq!(h.profiles, vec![Profile::Exact, Profile::Fast]);
        assert_eq!(h.seed, 3);
        assert_eq!(h.dims, vec![("T".into(), 4), ("D".into(), 5)]);
        assert!(header("// dims: T\n").is_err());
        assert!(header("// profile: quick\n").is_err());
        assert_eq!(h.tp, Vec::<u32>::new());
        assert_eq!(header("// tp: 1 2 4\n").unwrap().tp, vec![1, 2, 4]);
        assert!(header("// tp: 1 3\n").is_err());
        assert!(header("// tp: 2\n").is_err());
    }

    /// A tensor-parallel case saved by `tessel fuzz --tp --save` reads back with its world
    /// sizes, profile and seed, and replays as ranks: a generated block that gives the same
    /// bits at 1, 2 and 4 ranks passes.
    #[test]
    fn a_saved_tensor_parallel_case_replays_as_ranks() {
        let (src, _) = crate::tp::tp_program(3);
        let o = TpOutcome::Differ("--tp 2 against --tp 1: out1 differ".into());
        let saved = tp_regression_source(&src, 3, Profile::Invariant, &[1, 2, 4], &o);
        let h = header(&saved).unwrap();
        assert_eq!(h.tp, vec![1, 2, 4]);
        assert_eq!((h.seed, h.profiles.clone()), (3, vec![Profile::Invariant]));
        assert!(saved.contains("// caught: wrong answer: --tp 2 against --tp 1: out1 differ"));
        let dir = std::env::temp_dir().join(format!("tessel-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fuzz_tp_3_wrong_answer.tsl");
        std::fs::write(&path, &saved).unwrap();
        let runs = run_file(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].2, Outcome::Pass, "{:?}", runs[0]);
        // A case the plan cannot split compares nothing: not a pass.
        assert!(tp_outcome(TpOutcome::Unplanned("x".into())).is_defect());
    }
}
