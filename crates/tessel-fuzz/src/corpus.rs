//! Regression files: a `.tsl` file whose header comment says how to run it.
//!
//! ```text
//! // caught: reductions over different axes fused when T = D (issue 7)
//! // profile: exact            (optional; exact, invariant or fast, or several: exact fast)
//! // seed: 0                   (optional; the inputs' seed, as `tessel run --seed`)
//! // dims: T=4 D=4             (the `--dim` bindings)
//! step c3(a: f32[T, D]) -> f32[D] { ... }
//! ```
//!
//! Every step of the file is run in every profile named and must pass
//! ([`crate::run::Outcome::Pass`]): a bug once found stays found.

use crate::program::Program;
use crate::run::{run_case, Outcome};
use std::path::Path;
use tessel_passes::Profile;

/// How a regression file is run.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub dims: Vec<(String, u64)>,
    pub profiles: Vec<Profile>,
    pub seed: u64,
}

/// Reads the `// key: value` lines of `src` (any comment line; unknown keys are ignored).
///
/// Errors: a malformed `dims`, `profile` or `seed` value, named.
pub fn header(src: &str) -> Result<Header, String> {
    let mut h = Header {
        dims: vec![],
        profiles: vec![Profile::Exact],
        seed: 0,
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
            let o = run_case(&src, &step, &h.dims, profile, h.seed, None);
            out.push((step.clone(), profile, o));
        }
    }
    Ok(out)
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
    }
}
