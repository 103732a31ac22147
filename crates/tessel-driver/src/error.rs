//! The driver's one error type, [`Error`]: each variant says which stage failed and keeps
//! what a caller needs to show it (the diagnostics and their rendered report, the runtime's
//! error, the pass's error), never only a terminal string.

use tessel_syntax::Diagnostic;

/// Everything that can go wrong between a source file and a step's outputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The source file (or a file it imports, when the import could not be read as such)
    /// could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file as the caller named it.
        path: String,
        /// The operating system's error.
        #[source]
        error: std::io::Error,
    },
    /// The compile cache's directory or an entry's file could not be written
    /// ([`crate::cache::store`]).
    #[error("cannot write the compile cache at {path}")]
    Cache {
        /// The directory or file.
        path: String,
        /// The operating system's error.
        #[source]
        error: std::io::Error,
    },
    /// Lexer, parser, import, name, dtype or shape errors: the diagnostics and their
    /// ariadne report (displayed as the report).
    #[error(transparent)]
    Source(#[from] SourceDiagnostics),
    /// `check` found only dims without a value (E0214): the step needs more dims bound.
    #[error(transparent)]
    UnboundDims(#[from] UnboundDims),
    /// The caller asked for a step the file does not have, or a file without steps.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A checkpoint or input file problem: missing, corrupt, of the wrong dtype or shape, or
    /// an input that cannot be made.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// A compiler pass failed after `check` accepted the step (a compiler limitation or bug).
    #[error("compiling step `{step}` of {file}{}", rank.map(|r| format!(": rank {r}")).unwrap_or_default())]
    Compile {
        /// The step's name.
        step: String,
        /// The source file as the caller named it.
        file: String,
        /// With tensor parallelism, the rank whose program failed.
        rank: Option<u32>,
        /// The pass's error.
        #[source]
        error: tessel_passes::CompileError,
    },
    /// Differentiating the step's `grad(...)`s for the references, or planning or
    /// splitting it over tensor-parallel ranks, failed.
    #[error("step `{step}` of {file}: {message}")]
    Transform {
        /// The step's name.
        step: String,
        /// The source file as the caller named it.
        file: String,
        /// The `grad` or `tp` pass's error, as it words it.
        message: String,
    },
    /// The PTX writer could not print a kernel (an internal error: a legalized, verified
    /// kernel always prints).
    #[error(transparent)]
    Ptx(#[from] tessel_ptx::PtxError),
    /// The GPU runtime failed (no GPU, an allocation, a copy, a tensor map, a synchronize).
    #[error(transparent)]
    Device(#[from] tessel_cuda::Error),
    /// The driver's JIT could not load the step's PTX module.
    #[error("loading the PTX module")]
    LoadModule(#[source] tessel_cuda::Error),
    /// A kernel's launch was refused, or it faulted while running.
    #[error("kernel `{kernel}`")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// The runtime's error.
        #[source]
        error: tessel_cuda::Error,
    },
    /// A reproducer bundle's directory or one of its files could not be written
    /// (`repro::write_bundle`).
    #[error("cannot write the reproducer bundle's {}", path.display())]
    Bundle {
        /// The directory or file.
        path: std::path::PathBuf,
        /// The operating system's error.
        #[source]
        error: std::io::Error,
    },
    /// The CPU executor failed while running the step (a fault such as an out-of-bounds
    /// access, or memory that cannot be had).
    #[error("executing step `{step}` on the CPU")]
    Executor {
        /// The step's name.
        step: String,
        /// The executor's error.
        #[source]
        error: tessel_ref::ExecError,
    },
}

/// Diagnostics of one source file and the files it imports, with their report rendered by
/// ariadne against the file each lies in (coloured or not, as the caller asked when it
/// loaded the source), and a last line counting them (`2 errors in step `mlp``).
#[derive(Debug, thiserror::Error)]
#[error("{rendered}")]
pub struct SourceDiagnostics {
    /// The diagnostics, in the order they were found.
    pub diagnostics: Vec<Diagnostic>,
    /// The whole report: every diagnostic rendered, then the count line.
    pub rendered: String,
}

/// A step whose only errors are dims without a value (E0214): `tessel check` over the
/// default example list reports it as skipped rather than failed.
#[derive(Debug, thiserror::Error)]
#[error("{}", .source_report.rendered)]
pub struct UnboundDims {
    /// The step's name.
    pub step: String,
    /// The dims it needs, in the order the diagnostics name them.
    pub dims: Vec<String>,
    /// The diagnostics and their report.
    pub source_report: SourceDiagnostics,
}

/// A request the source cannot answer: a step it does not have, or no step at all.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No step of that name; `steps` are the file's steps.
    #[error("{file} has no step `{step}`; its steps are: {}", steps.join(", "))]
    NoSuchStep {
        file: String,
        step: String,
        steps: Vec<String>,
    },
    /// The file has only `fn`s and `const`s.
    #[error("{file} has no `step` to compile")]
    NoSteps { file: String },
    /// A `fn` that has no forward/backward companion steps ([`crate::Source::grad_companion`]).
    #[error("`fn {name}` of {file} cannot be made an autograd function: {why}")]
    Companion {
        file: String,
        name: String,
        why: String,
    },
}

/// A weights or inputs problem, worded for the user (a checkpoint's or input file's path,
/// the tensor, the parameter, what differs); several problems of one step are listed in
/// one message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct WeightsError {
    message: String,
}

impl WeightsError {
    /// An error saying `message`.
    pub fn new(message: impl Into<String>) -> WeightsError {
        WeightsError {
            message: message.into(),
        }
    }

    /// What went wrong, as displayed.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// `e` and every error under it, joined by `: ` (as `anyhow` prints a chain with `{:#}`).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        s.push_str(": ");
        s.push_str(&c.to_string());
        next = c.source();
    }
    s
}

/// The weights and inputs modules' way of building a [`WeightsError`]: `bail!` returns one
/// formatted as `format!` does, `context`/`with_context` put a line before a cause.
pub(crate) mod weights_result {
    use super::{chain, WeightsError};

    pub type Result<T, E = WeightsError> = std::result::Result<T, E>;

    macro_rules! weights_error {
        ($($arg:tt)*) => {
            $crate::error::WeightsError::new(format!($($arg)*))
        };
    }
    macro_rules! bail {
        ($($arg:tt)*) => {
            return Err($crate::error::weights_result::weights_error!($($arg)*))
        };
    }
    pub(crate) use {bail, weights_error};

    /// `context`: `CONTEXT: CAUSE`, the cause's own chain included.
    pub trait Context<T> {
        fn context(self, what: impl std::fmt::Display) -> Result<T>;
        fn with_context<D: std::fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T>;
    }

    impl<T, E: std::error::Error> Context<T> for std::result::Result<T, E> {
        fn context(self, what: impl std::fmt::Display) -> Result<T> {
            self.map_err(|e| WeightsError::new(format!("{what}: {}", chain(&e))))
        }
        fn with_context<D: std::fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T> {
            self.map_err(|e| WeightsError::new(format!("{}: {}", what(), chain(&e))))
        }
    }
}
