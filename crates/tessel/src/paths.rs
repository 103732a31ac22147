//! Output paths, checked before any work: `build -o DIR`, `run -o FILE`, `--save-inputs
//! FILE`, `--json FILE`. A run that compiles, executes for minutes and then cannot write its
//! result has wasted the user's time, so every command checks each of its output paths
//! first, with one rule and one message that names the option and the path.
//!
//! The rule: the directory an output goes into must exist or be creatable — its nearest
//! existing ancestor must be a directory, and writable — and an output file that already
//! exists must be a file, not a directory, and writable (it is replaced). The check changes
//! nothing; missing directories are created (like `mkdir -p`) when the first file is written
//! into them ([`write_file`], and `inputs::write_outputs`), so a command that fails before
//! writing leaves no empty directory behind.

use anyhow::{bail, Context, Result};
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

/// Checks every `(option, path, kind)` (see the module docs); the error names the option
/// and the path.
pub fn check_outputs(outputs: &[(&str, PathBuf, Kind)]) -> Result<()> {
    for (option, path, kind) in outputs {
        check_output(option, path, *kind)?;
    }
    Ok(())
}

/// Writes `contents` to `option`'s `path`, creating its directory first.
pub fn write_file(option: &str, path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    create_parent(path)?;
    fs::write(path, contents).with_context(|| format!("cannot write {option} {}", path.display()))
}

/// Creates the directory `path` goes into, if it is missing.
pub fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display())),
        _ => Ok(()),
    }
}

/// Checks one output path without changing anything.
fn check_output(option: &str, path: &Path, kind: Kind) -> Result<()> {
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
    Ok(())
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
    fn missing_directories_are_accepted_and_made_on_write() {
        let d = scratch("create");
        let file = d.join("a/b/out.json");
        let dir = d.join("c/d");
        check_outputs(&[
            ("--json", file.clone(), Kind::File),
            ("-o", dir.clone(), Kind::Dir),
        ])
        .unwrap();
        assert!(
            !d.join("a").exists() && !d.join("c").exists(),
            "the check changes nothing"
        );
        assert_eq!(fs::read_dir(&d).unwrap().count(), 0, "no probe left");
        write_file("--json", &file, "{}").unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "{}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_in_the_way_is_named() {
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
        let e = check_outputs(&[("-o", d.clone(), Kind::File)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
