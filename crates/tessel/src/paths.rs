//! Output paths, checked before any work: `build -o DIR`, `run -o FILE`, `--save-inputs
//! FILE`, `--json FILE`. A run that compiles, executes for minutes and then cannot write its
//! result has wasted the user's time, so every command checks each of its output paths
//! first, with one rule and one message that names the option and the path.
//!
//! The rule: the directory an output goes into is created if it is missing (like
//! `mkdir -p`; the default `out/` usually is) — so its nearest existing ancestor must be a
//! directory and writable — and an existing directory must be writable; an output file that
//! already exists must be a file, not a directory, and writable (it is replaced). Every path
//! of a command is checked first; only when all pass are the missing directories created,
//! still before any work, so a command that later fails to compile may leave an empty
//! directory behind.

use anyhow::{bail, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// What an output path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory that files are written into (`build -o DIR`).
    Dir,
    /// A file (`run -o FILE`, `--save-inputs FILE`, `--json FILE`).
    File,
}

/// Checks every `(option, path, kind)` (see the module docs), then creates the missing
/// directories. The error names the option and the path.
pub fn check_outputs(outputs: &[(&str, PathBuf, Kind)]) -> Result<()> {
    let mut dirs = Vec::new();
    for (option, path, kind) in outputs {
        dirs.push(check_output(option, path, *kind)?);
    }
    for ((option, path, _), dir) in outputs.iter().zip(dirs) {
        if let Err(e) = fs::create_dir_all(&dir) {
            bail!(
                "cannot write {option} {}: cannot create the directory {}: {e}",
                path.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// Checks one output path without changing anything; returns the directory it goes into.
fn check_output(option: &str, path: &Path, kind: Kind) -> Result<PathBuf> {
    let shown = path.display();
    let dir: PathBuf = match kind {
        Kind::Dir => path.to_path_buf(),
        Kind::File => {
            if path.is_dir() || path.as_os_str().to_string_lossy().ends_with('/') {
                bail!(
                    "cannot write {option} {shown}: it is a directory; {option} names a file, \
                     e.g. {}",
                    path.join("out.safetensors").display()
                );
            }
            match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            }
        }
    };
    // The nearest ancestor that exists (`dir` itself if it does) receives the new
    // directories, or the file.
    let existing = dir
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && a.exists())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    if !existing.is_dir() {
        bail!(
            "cannot write {option} {shown}: {} is a file, not a directory",
            existing.display()
        );
    }
    if let Err(e) = probe_writable(&existing) {
        bail!(
            "cannot write {option} {shown}: the directory {} is not writable: {e}",
            existing.display()
        );
    }
    if kind == Kind::File && path.exists() {
        if let Err(e) = fs::OpenOptions::new().append(true).open(path) {
            bail!("cannot write {option} {shown}: the file exists and cannot be replaced: {e}");
        }
    }
    Ok(dir)
}

/// Creates and removes a file in `dir`: the only portable test that a write will succeed
/// (permission bits say nothing about read-only mounts or ACLs, or about root).
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".tessel-write-check-{}", std::process::id()));
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tessel-paths-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn missing_directories_are_created() {
        let d = scratch("create");
        let file = d.join("a/b/out.safetensors");
        let dir = d.join("c/d");
        check_outputs(&[
            ("-o", file.clone(), Kind::File),
            ("-o", dir.clone(), Kind::Dir),
        ])
        .unwrap();
        assert!(d.join("a/b").is_dir() && dir.is_dir());
        assert!(!file.exists(), "the check writes no output");
        assert_eq!(
            fs::read_dir(d.join("a/b")).unwrap().count(),
            0,
            "no probe left"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_in_the_way_is_named_and_nothing_is_created() {
        let d = scratch("file");
        fs::write(d.join("f"), "").unwrap();
        let e = check_outputs(&[
            ("-o", d.join("new/out.safetensors"), Kind::File),
            ("--json", d.join("f/sub/r.json"), Kind::File),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("cannot write --json "), "{e}");
        assert!(e.contains("f/sub/r.json"), "{e}");
        assert!(
            e.contains(&format!("{} is a file", d.join("f").display())),
            "{e}"
        );
        assert!(!d.join("new").exists(), "one bad path creates nothing");
        let e = check_outputs(&[("-o", d.clone(), Kind::File)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
