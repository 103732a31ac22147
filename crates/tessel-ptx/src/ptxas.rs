//! Run NVIDIA's `ptxas` on emitted PTX text and read back what it says about each kernel.
//!
//! This is the test-time check that every kernel the writer prints really assembles, and the
//! source of the register, shared-memory and spill numbers the tests and `tessel explain`
//! report. It needs no GPU: `ptxas` is a plain host program.
//!
//! The pinned toolchain is the `ptxas` of CUDA 13.0 from the `nvidia-cuda-nvcc==13.0.88`
//! Python package, installed into `<workspace>/tools/nvcc/` by `scripts/install-ptxas.sh`.
//! [`Ptxas::locate`] looks, in order, at:
//!
//! 1. the `TESSEL_PTXAS` environment variable (the path of a `ptxas` binary; if it is set and
//!    wrong, that is an error rather than a silent fall-through);
//! 2. `tools/nvcc/nvidia/*/bin/ptxas` in the workspace, found by walking up from
//!    `CARGO_MANIFEST_DIR` (as set at run time by cargo, then as it was when this crate was
//!    built) and from the current directory;
//! 3. `ptxas` on `PATH`.
//!
//! [`Ptxas::assemble`] writes the PTX to a private temporary directory, runs
//! `ptxas -arch=<arch> -v`, and parses the `-v` report into one [`FunctionReport`] per
//! function. Assembly failures come back as [`PtxasError::Assembly`] with ptxas's stderr and
//! its diagnostics split into line and message.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Environment variable naming the `ptxas` binary to use; it overrides every other location.
pub const PTXAS_ENV: &str = "TESSEL_PTXAS";

/// Environment variable that, when set to `1`, lets tests skip ptxas checks if ptxas is absent.
pub const SKIP_ENV: &str = "TESSEL_SKIP_PTXAS";

/// Where `scripts/install-ptxas.sh` puts ptxas, relative to the workspace root (CUDA 13 wheels).
const TOOLS_NVCC: &str = "tools/nvcc/nvidia";

/// The file name ptxas sees for the input; it replaces the temporary path in every message so
/// that errors read the same on every machine.
const INPUT_NAME: &str = "input.ptx";

/// Errors from locating or running ptxas.
#[derive(Debug, thiserror::Error)]
pub enum PtxasError {
    /// No ptxas binary was found in any of the places [`Ptxas::locate`] looks.
    #[error(
        "ptxas not found (looked at: {searched}); run scripts/install-ptxas.sh, \
         or set {PTXAS_ENV} to the path of a CUDA 13.0 ptxas"
    )]
    NotFound {
        /// The locations that were tried, in order, separated by `, `.
        searched: String,
    },
    /// ptxas could not be started, or its input or output could not be written or read.
    #[error("ptxas I/O error while {action} ({path}): {source}")]
    Io {
        /// What was being done, e.g. `"writing the PTX input"`.
        action: &'static str,
        /// The file or program involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// ptxas ran and rejected the input (non-zero exit status).
    #[error("ptxas failed ({status}):\n{stderr}")]
    Assembly {
        /// How ptxas exited, e.g. `exit status: 255`.
        status: String,
        /// The diagnostics parsed from `stderr`, in the order ptxas printed them.
        diagnostics: Vec<Diagnostic>,
        /// ptxas's stderr, with the temporary input path replaced by `input.ptx`.
        stderr: String,
    },
}

/// How serious a ptxas diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// `error` or `fatal`: the input was rejected.
    Error,
    /// `warning`: the input assembled, but ptxas has a complaint (e.g. a spill warning).
    Warning,
}

/// One error or warning printed by ptxas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The 1-based line of the PTX input it refers to, when ptxas names one.
    pub line: Option<u32>,
    /// The message text after ptxas's `error   :` / `warning :` prefix.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        match self.line {
            Some(line) => write!(f, "line {line}: {severity}: {}", self.message),
            None => write!(f, "{severity}: {}", self.message),
        }
    }
}

/// What `ptxas -v` reports for one function of the module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionReport {
    /// The function's PTX name.
    pub name: String,
    /// `true` for a `.entry` (a kernel), `false` for a `.func` that was not inlined.
    pub is_entry: bool,
    /// Registers per thread.
    pub registers: u32,
    /// Named barriers used (`bar.sync` ids).
    pub barriers: u32,
    /// Static shared memory per CTA, bytes (dynamic shared memory is not included).
    pub shared_bytes: u64,
    /// Stack frame per thread, bytes (local memory: spills plus local arrays).
    pub stack_frame_bytes: u64,
    /// Bytes stored to local memory by register spills, per thread.
    pub spill_store_bytes: u64,
    /// Bytes loaded from local memory by register spills, per thread.
    pub spill_load_bytes: u64,
    /// Constant bank 0 bytes (kernel parameters and such), when ptxas reports it.
    pub const_bytes: u64,
    /// Stack including callees, bytes per thread, when ptxas reports it.
    pub cumulative_stack_bytes: u64,
}

impl FunctionReport {
    /// `true` when ptxas spilled registers to local memory in either direction.
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

/// The result of a successful [`Ptxas::assemble`].
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One entry per function, in the order ptxas reported them (not necessarily source order).
    pub functions: Vec<FunctionReport>,
    /// Warnings ptxas printed; an error would have made the run fail.
    pub warnings: Vec<Diagnostic>,
    /// The assembled SASS object (cubin) for the requested architecture.
    pub cubin: Vec<u8>,
    /// ptxas's full `-v` output, temporary paths replaced by `input.ptx`.
    pub log: String,
}

impl Report {
    /// The report for the function named `name`, if ptxas reported one.
    pub fn function(&self, name: &str) -> Option<&FunctionReport> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The reports of the `.entry` functions (kernels) only.
    pub fn kernels(&self) -> impl Iterator<Item = &FunctionReport> {
        self.functions.iter().filter(|f| f.is_entry)
    }
}

/// A located ptxas binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ptxas {
    path: PathBuf,
}

impl Ptxas {
    /// Uses the ptxas binary at `path` without checking it.
    pub fn at(path: impl Into<PathBuf>) -> Ptxas {
        Ptxas { path: path.into() }
    }

    /// Finds ptxas: `TESSEL_PTXAS`, then the workspace's `tools/nvcc`, then `PATH`.
    ///
    /// # Errors
    /// [`PtxasError::NotFound`] listing the places tried; its message says to run
    /// `scripts/install-ptxas.sh`.
    pub fn locate() -> Result<Ptxas, PtxasError> {
        let mut searched = Vec::new();

        if let Some(path) = std::env::var_os(PTXAS_ENV).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            if path.is_file() {
                return Ok(Ptxas { path });
            }
            // An explicit choice that is wrong should not be papered over by another ptxas.
            return Err(PtxasError::NotFound {
                searched: format!("{PTXAS_ENV}={}", path.display()),
            });
        }
        searched.push(format!("${PTXAS_ENV} (unset)"));

        let mut starts: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
            starts.push(PathBuf::from(dir));
        }
        starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        if let Ok(dir) = std::env::current_dir() {
            starts.push(dir);
        }
        for start in &starts {
            if let Some(path) = find_in_tools(start) {
                return Ok(Ptxas { path });
            }
            searched.push(format!(
                "{TOOLS_NVCC}/*/bin/ptxas in {} or above",
                start.display()
            ));
        }

        if let Some(path) = std::env::var_os("PATH").and_then(|p| find_on_path(&p)) {
            return Ok(Ptxas { path });
        }
        searched.push("ptxas on $PATH".to_owned());

        Err(PtxasError::NotFound {
            searched: searched.join(", "),
        })
    }

    /// Like [`Ptxas::locate`], but returns `Ok(None)` instead of `NotFound` when the
    /// environment variable `TESSEL_SKIP_PTXAS` is `1`: the switch tests use to run on a
    /// machine without the toolchain. Without it, a missing ptxas is an error, so a test
    /// that needs ptxas cannot pass silently.
    ///
    /// # Errors
    /// As [`Ptxas::locate`].
    pub fn locate_unless_skipped() -> Result<Option<Ptxas>, PtxasError> {
        match Ptxas::locate() {
            Ok(ptxas) => Ok(Some(ptxas)),
            Err(PtxasError::NotFound { .. })
                if std::env::var_os(SKIP_ENV).is_some_and(|v| v == "1") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The path of the ptxas binary.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version line of `ptxas --version`, e.g.
    /// `Cuda compilation tools, release 13.0, V13.0.88`.
    ///
    /// # Errors
    /// [`PtxasError::Io`] if ptxas cannot be run; [`PtxasError::Assembly`] if it exits non-zero.
    pub fn version(&self) -> Result<String, PtxasError> {
        let output = Command::new(&self.path)
            .arg("--version")
            .output()
            .map_err(|source| PtxasError::Io {
                action: "running ptxas --version",
                path: self.path.clone(),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            return Err(PtxasError::Assembly {
                status: output.status.to_string(),
                diagnostics: parse_diagnostics(&stderr),
                stderr,
            });
        }
        let line = stdout
            .lines()
            .find(|l| l.contains("release"))
            .or_else(|| stdout.lines().rev().find(|l| !l.trim().is_empty()))
            .unwrap_or_default();
        Ok(line.trim().to_owned())
    }

    /// Assembles `ptx` for `arch` (e.g. `"sm_90"`, `"sm_90a"`) with `ptxas -arch=<arch> -v`.
    ///
    /// # Errors
    /// [`PtxasError::Assembly`] carrying ptxas's stderr and parsed diagnostics when the PTX is
    /// rejected (or `arch` is unknown to ptxas); [`PtxasError::Io`] when the temporary files
    /// or the process cannot be handled.
    pub fn assemble(&self, ptx: &str, arch: &str) -> Result<Report, PtxasError> {
        let dir = TempDir::new()?;
        let input = dir.path().join(INPUT_NAME);
        let output = dir.path().join("output.cubin");
        fs::write(&input, ptx).map_err(|source| PtxasError::Io {
            action: "writing the PTX input",
            path: input.clone(),
            source,
        })?;

        let result = Command::new(&self.path)
            .arg(format!("-arch={arch}"))
            .arg("-v")
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .output()
            .map_err(|source| PtxasError::Io {
                action: "running ptxas",
                path: self.path.clone(),
                source,
            })?;

        let input_text = input.to_string_lossy();
        let clean = |bytes: &[u8]| String::from_utf8_lossy(bytes).replace(&*input_text, INPUT_NAME);
        let stderr = clean(&result.stderr);
        let stdout = clean(&result.stdout);

        if !result.status.success() {
            return Err(PtxasError::Assembly {
                status: result.status.to_string(),
                diagnostics: parse_diagnostics(&stderr),
                stderr,
            });
        }

        let cubin = fs::read(&output).map_err(|source| PtxasError::Io {
            action: "reading the assembled cubin",
            path: output.clone(),
            source,
        })?;
        // ptxas prints -v to stderr today; read both so a change of stream loses nothing.
        let log = if stdout.is_empty() {
            stderr
        } else {
            format!("{stdout}{stderr}")
        };
        Ok(Report {
            functions: parse_functions(&log),
            warnings: parse_diagnostics(&log)
                .into_iter()
                .filter(|d| d.severity == Severity::Warning)
                .collect(),
            cubin,
            log,
        })
    }
}

/// Locates ptxas and assembles `ptx` for `arch`; see [`Ptxas::locate`] and [`Ptxas::assemble`].
///
/// # Errors
/// As [`Ptxas::locate`] and [`Ptxas::assemble`].
pub fn assemble(ptx: &str, arch: &str) -> Result<Report, PtxasError> {
    Ptxas::locate()?.assemble(ptx, arch)
}

/// Looks for `<ancestor>/tools/nvcc/nvidia/<cuda>/bin/ptxas` above `start`, nearest first.
fn find_in_tools(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        let nvidia = dir.join(TOOLS_NVCC);
        // The CUDA 13 wheel uses `cu13`; read the directory so a later layout still works.
        let preferred = nvidia.join("cu13/bin/ptxas");
        if preferred.is_file() {
            return Some(preferred);
        }
        if let Ok(entries) = fs::read_dir(&nvidia) {
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin/ptxas"))
                .filter(|p| p.is_file())
                .collect();
            found.sort();
            if let Some(path) = found.pop() {
                return Some(path);
            }
        }
    }
    None
}

fn find_on_path(path: &OsString) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join("ptxas"))
        .find(|p| p.is_file())
}

/// Parses `ptxas ..., line N; error   : message` style lines.
fn parse_diagnostics(text: &str) -> Vec<Diagnostic> {
    text.lines().filter_map(parse_diagnostic).collect()
}

fn parse_diagnostic(line: &str) -> Option<Diagnostic> {
    let rest = line.strip_prefix("ptxas")?;
    let (head, message) = rest.split_once(" : ")?;
    let (location, kind) = match head.rsplit_once(';') {
        Some((location, kind)) => (Some(location), kind.trim()),
        None => (None, head.trim()),
    };
    let severity = match kind {
        "error" | "fatal" => Severity::Error,
        "warning" => Severity::Warning,
        _ => return None,
    };
    let line = location
        .and_then(|loc| loc.rsplit_once("line "))
        .and_then(|(_, n)| n.trim().parse().ok());
    Some(Diagnostic {
        severity,
        line,
        message: message.trim().to_owned(),
    })
}

/// Parses the `ptxas info :` lines of `-v` into one report per function.
///
/// The shape, as printed by ptxas 13.0:
/// ```text
/// ptxas info    : Compiling entry function 'k' for 'sm_90'
/// ptxas info    : Function properties for k
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 8 registers, used 0 barriers, 1024 bytes smem
/// ```
/// A non-inlined `.func` gets a `Function properties` block with no `Compiling` line.
fn parse_functions(log: &str) -> Vec<FunctionReport> {
    let mut functions: Vec<FunctionReport> = Vec::new();
    let mut current: Option<usize> = None;
    let mut entry_names: Vec<String> = Vec::new();

    let index_of = |functions: &mut Vec<FunctionReport>, name: &str, entry: bool| -> usize {
        if let Some(i) = functions.iter().position(|f| f.name == name) {
            functions[i].is_entry |= entry;
            return i;
        }
        functions.push(FunctionReport {
            name: name.to_owned(),
            is_entry: entry,
            ..FunctionReport::default()
        });
        functions.len() - 1
    };

    for line in log.lines() {
        let info = line
            .strip_prefix("ptxas info")
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, rest)| rest.trim());
        match info {
            Some(text) => {
                if let Some(rest) = text.strip_prefix("Compiling entry function ") {
                    if let Some(name) = quoted(rest) {
                        entry_names.push(name.to_owned());
                        current = Some(index_of(&mut functions, name, true));
                    }
                } else if let Some(name) = text.strip_prefix("Function properties for ") {
                    let name = name.trim();
                    let entry = entry_names.iter().any(|n| n == name);
                    current = Some(index_of(&mut functions, name, entry));
                } else if let Some(rest) = text.strip_prefix("Used ") {
                    if let Some(f) = current.and_then(|i| functions.get_mut(i)) {
                        apply_usage(f, &format!("Used {rest}"));
                    }
                }
            }
            None => {
                let text = line.trim();
                if text.contains("bytes stack frame") {
                    if let Some(f) = current.and_then(|i| functions.get_mut(i)) {
                        apply_usage(f, text);
                    }
                }
            }
        }
    }
    functions
}

/// Applies a comma-separated list such as `Used 8 registers, used 0 barriers, 1024 bytes smem`
/// or `0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`.
fn apply_usage(f: &mut FunctionReport, text: &str) {
    for item in text.split(',') {
        let words: Vec<&str> = item.split_whitespace().collect();
        let number = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        match words.as_slice() {
            [used, _, "registers"] if used.eq_ignore_ascii_case("used") => {
                f.registers = number(1).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
            }
            [used, _, "barriers"] if used.eq_ignore_ascii_case("used") => {
                f.barriers = number(1).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
            }
            [_, "bytes", "smem"] => f.shared_bytes = number(0).unwrap_or(0),
            [_, "bytes", "stack", "frame"] => f.stack_frame_bytes = number(0).unwrap_or(0),
            [_, "bytes", "spill", "stores"] => f.spill_store_bytes = number(0).unwrap_or(0),
            [_, "bytes", "spill", "loads"] => f.spill_load_bytes = number(0).unwrap_or(0),
            [_, "bytes", "cumulative", "stack", "size"] => {
                f.cumulative_stack_bytes = number(0).unwrap_or(0);
            }
            [_, "bytes", bank] if bank.starts_with("cmem[0]") => {
                f.const_bytes = number(0).unwrap_or(0);
            }
            _ => {}
        }
    }
}

fn quoted(text: &str) -> Option<&str> {
    let start = text.find('\'')? + 1;
    let len = text[start..].find('\'')?;
    Some(&text[start..start + len])
}

/// A private directory under the system temp dir, removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> Result<TempDir, PtxasError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut last_error = None;
        for _ in 0..16 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("tessel-ptxas-{}-{n}-{nanos}", std::process::id()));
            // create_dir (not create_dir_all) fails if the name is taken: the directory is ours.
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(source) => {
                    return Err(PtxasError::Io {
                        action: "creating a temporary directory",
                        path,
                        source,
                    })
                }
            }
        }
        Err(PtxasError::Io {
            action: "creating a temporary directory",
            path: base,
            source: last_error.unwrap_or_else(|| io::Error::other("no free name")),
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory in /tmp is not worth failing a build over.
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests;
