//! What the tests of the `tessel` command share: a scratch directory per test, running the
//! built binary in it, and its output as text.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh scratch directory for one test, removed when the test passes (kept for a look
/// when it panics).
pub struct Scratch(pub PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("tessel-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    Scratch(d)
}

/// Runs `tessel ARGS` in `dir`.
pub fn tessel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessel"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tessel")
}

/// stdout and stderr together.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes `src` to `dir/name`, making the directories `name` goes into.
pub fn write(dir: &Path, name: &str, src: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("make the source's directory");
    }
    std::fs::write(path, src).expect("write source");
}
