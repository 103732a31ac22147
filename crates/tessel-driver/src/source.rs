//! A program's source: a file and the files it imports, parsed into one module, with the
//! sources kept so that every diagnostic renders against the file it lies in.

use crate::error::{Error, SourceDiagnostics};
use crate::words::plural;
use std::path::Path;
use tessel_syntax::ast::Module;
use tessel_syntax::{Diagnostic, LoadError, SourceMap};

/// A program: its file, the files it imports, and their items in one module.
pub struct Source {
    /// The file as the caller named it.
    pub name: String,
    /// Every file read, the named one first; diagnostics render against it.
    pub sources: SourceMap,
    /// The imported `fn`s and `const`s, then the file's own items (see `tessel_syntax::load`).
    pub module: Module,
    /// Whether diagnostics are rendered with ANSI colours.
    pub color: bool,
}

impl Source {
    /// Reads `path` and the files it imports, and parses them. Diagnostics are rendered
    /// with ANSI colours when `color` (a terminal), plain otherwise.
    ///
    /// # Errors
    /// [`Error::Read`] when `path` cannot be read; [`Error::Source`] for syntax and import
    /// errors, whose report ends `N syntax errors loading FILE` (`N errors` when an import
    /// failed).
    pub fn load(path: &Path, color: bool) -> Result<Source, Error> {
        let name = path.display().to_string();
        match tessel_syntax::load(path) {
            Ok(l) => Ok(Source {
                name,
                sources: l.sources,
                module: l.module,
                color,
            }),
            Err(LoadError::Read { error, .. }) => Err(Error::Read { path: name, error }),
            Err(LoadError::Diagnostics {
                sources,
                diagnostics,
            }) => {
                let syntax = diagnostics.iter().all(|d| !d.code.starts_with("E012"));
                let what = if syntax { "syntax error" } else { "error" };
                let rendered = format!(
                    "{}\n{} loading {name}",
                    render(&diagnostics, &sources, color),
                    plural(diagnostics.len(), what)
                );
                Err(SourceDiagnostics {
                    diagnostics,
                    rendered,
                }
                .into())
            }
        }
    }

    /// Parses `text`, a program of one file without imports (a generated program, a test's
    /// string), named `name` in its diagnostics.
    ///
    /// # Errors
    /// [`Error::Source`] for syntax errors, whose report ends `N syntax errors in NAME`.
    pub fn parse(name: &str, text: &str, color: bool) -> Result<Source, Error> {
        let mut sources = SourceMap::new();
        sources.add(name, name, text.to_string());
        match tessel_syntax::parse(text) {
            Ok(module) => Ok(Source {
                name: name.to_string(),
                sources,
                module,
                color,
            }),
            Err(diagnostics) => {
                let rendered = format!(
                    "{}\n{} in {name}",
                    render(&diagnostics, &sources, color),
                    plural(diagnostics.len(), "syntax error")
                );
                Err(SourceDiagnostics {
                    diagnostics,
                    rendered,
                }
                .into())
            }
        }
    }

    /// The named file's own items (imports included, imported items not), with the shared
    /// expression arena: what `tessel build --emit ast` prints.
    pub fn root_module(&self) -> Module {
        tessel_syntax::load::root_module(&self.module, &self.sources)
    }

    /// Renders `diags` (found in this source) as one report, each against its file.
    pub fn render(&self, diags: &[Diagnostic]) -> String {
        render(diags, &self.sources, self.color)
    }
}

fn render(diags: &[Diagnostic], sources: &SourceMap, color: bool) -> String {
    diags
        .iter()
        .map(|d| sources.render(d, color))
        .collect::<Vec<_>>()
        .join("\n")
}
