//! Compiled steps on disk, so that a second process runs a step without compiling it again
//! (what the Python package's `tessel.compile` does first).
//!
//! An entry is keyed by everything the compiled program depends on ([`key`]): the text of
//! every source file read (the named one and its imports), the step's name, its bound dims,
//! the options every pass sees (target facts, profile, schedule choices, tensor
//! parallelism) and an identifier of the compiler build itself (the Python package passes
//! the SHA-256 of its extension module: a rebuilt compiler never reads an older build's
//! entries). The key is the SHA-256 of those facts, printed in one canonical text.
//!
//! An entry is a directory `DIR/KEY/` holding
//! - `program.tkir`: the kernel program in its textual form (tessel-ir `write_program`),
//!   which reads back to the same program (tested here against the PTX it prints);
//! - `step.ptx`: the PTX module;
//! - `key.txt`: the facts the key was hashed from, for a person wondering why two entries
//!   differ;
//! - `checksum`: the SHA-256 of the program's text and the PTX, checked on every read, so an
//!   entry edited or damaged after it was written (still readable, but not what was
//!   compiled) is a miss, not a wrong program.
//!
//! An entry is written to a temporary sibling and renamed into place, so a reader never
//! sees half of one; two processes that compile the same step both write, and one rename
//! wins. A missing, unreadable or malformed entry is a miss, never an error: [`load`]
//! returns `None` and the step is compiled again (and [`store`] overwrites the entry).

use crate::error::Error;
use crate::source::Source;
use crate::step::Config;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessel_ir::kernel::Program;
use tessel_ir::text::{read_program, write_program};

/// The file of an entry holding the kernel program.
pub const PROGRAM_FILE: &str = "program.tkir";
/// The file of an entry holding the PTX module.
pub const PTX_FILE: &str = "step.ptx";
/// The file of an entry holding the facts its key hashes.
pub const KEY_FILE: &str = "key.txt";
/// The file of an entry holding the checksum of its program and PTX.
pub const CHECKSUM_FILE: &str = "checksum";

/// The checksum of an entry's program text and PTX.
fn checksum(program: &str, ptx: &str) -> String {
    key(&format!("{}\n{program}\n{ptx}", program.len()))
}

/// A compiled step read from the cache: what running it needs (the executor runs the
/// program, the GPU loads the PTX).
#[derive(Debug)]
pub struct Entry {
    /// The kernel program.
    pub program: Program,
    /// Its PTX module, as [`crate::device::ptx_of`] printed it.
    pub ptx: String,
}

/// The facts a compiled step of `src` depends on, one per line, in a fixed order: `compiler`
/// (the build's identifier), each source file's name and text (every file read, the named
/// one first), `step`, each dim (sorted by name), and the [`Config`]'s options and
/// tensor parallelism as their `Debug` forms (the target's every fact among them).
pub fn facts(src: &Source, step: &str, config: &Config, compiler: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "compiler {compiler}");
    for f in src.sources.files() {
        // The length first, so that no text can pose as the end of another.
        let _ = writeln!(s, "file {:?} {} bytes", f.name, f.text.len());
        s.push_str(&f.text);
        s.push('\n');
    }
    let _ = writeln!(s, "step {step}");
    for (name, size) in &config.dims {
        let _ = writeln!(s, "dim {name} = {size}");
    }
    let _ = writeln!(s, "options {:?}", config.options);
    let _ = writeln!(s, "tp {:?}", config.tp);
    s
}

/// The key of [`facts`]: its SHA-256 (FIPS 180-4) as 64 lowercase hex digits.
pub fn key(facts: &str) -> String {
    Sha256::digest(facts.as_bytes())
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The entry `key` under `dir`, when it is there and reads back: `None` for a missing,
/// unreadable, altered (its checksum differs) or malformed entry (a program the reader or
/// the verifier refuses).
pub fn load(dir: &Path, key: &str) -> Option<Entry> {
    let entry = dir.join(key);
    let text = std::fs::read_to_string(entry.join(PROGRAM_FILE)).ok()?;
    let ptx = std::fs::read_to_string(entry.join(PTX_FILE)).ok()?;
    let sum = std::fs::read_to_string(entry.join(CHECKSUM_FILE)).ok()?;
    if sum.trim() != checksum(&text, &ptx) {
        return None;
    }
    let program = read_program(&text).ok()?;
    tessel_ir::verify::verify_program(&program, true).ok()?;
    Some(Entry { program, ptx })
}

/// Writes the entry `key` under `dir` (made if missing): `program`, `ptx` and `facts`,
/// into a temporary directory renamed into place. Returns the entry's directory.
///
/// # Errors
/// [`Error::Cache`] when the directory or a file cannot be written. An
/// entry another process renamed into place first is left as it is, not an error.
pub fn store(
    dir: &Path,
    key: &str,
    facts: &str,
    program: &Program,
    ptx: &str,
) -> Result<PathBuf, Error> {
    let io = |path: &Path, error| Error::Cache {
        path: path.display().to_string(),
        error,
    };
    let entry = dir.join(key);
    let tmp = dir.join(format!(".{key}.{}.tmp", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| io(&tmp, e))?;
    let text = write_program(program);
    let sum = checksum(&text, ptx);
    for (name, text) in [
        (PROGRAM_FILE, text),
        (PTX_FILE, ptx.to_string()),
        (KEY_FILE, facts.to_string()),
        (CHECKSUM_FILE, sum),
    ] {
        let path = tmp.join(name);
        std::fs::write(&path, text).map_err(|e| io(&path, e))?;
    }
    // A stale or malformed entry of this key is replaced; a fresh one that another process
    // renamed in between the removal and the rename stays, and ours is dropped.
    if entry.exists() && load(dir, key).is_none() {
        let _ = std::fs::remove_dir_all(&entry);
    }
    if std::fs::rename(&tmp, &entry).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        if !entry.is_dir() {
            return Err(io(
                &entry,
                std::io::Error::other("the entry could not be renamed into place"),
            ));
        }
    }
    Ok(entry)
}
