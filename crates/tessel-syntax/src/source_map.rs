//! Several source files in one space of byte offsets, as rustc's `SourceMap`: file `k`'s text
//! occupies `base_k .. base_k + len_k`, with one byte between files, so that an end-of-file
//! point (`Span::point(len)`) still belongs to its file. A [`Span`] stays a plain range: the
//! file it lies in follows from its start, and the lexer and parser of a file simply add
//! its base ([`crate::parse_items`]).
//!
//! The first file added starts at 0, so a program of one file has the offsets a lone
//! [`crate::parse`] gives it.

use std::path::{Path, PathBuf};

use crate::diagnostic::{file_index, line_col, render_files, FileView};
use crate::{Diagnostic, Span};

/// One file of a [`SourceMap`].
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// How the file is shown in diagnostics: the path it was loaded by, for the first file
    /// as given on the command line, for an import joined to its importer's directory.
    pub name: String,
    /// The path it was read from.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// The global offset of its first byte.
    pub base: usize,
}

impl SourceFile {
    /// The global offset one past its last byte.
    pub fn end(&self) -> usize {
        self.base + self.text.len()
    }

    /// `span` (global offsets) as offsets within this file's text.
    pub fn local(&self, span: Span) -> Span {
        Span::new(
            span.start.saturating_sub(self.base),
            span.end.saturating_sub(self.base),
        )
    }
}

/// The files of one program, each at its own range of global offsets.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file after the last one and returns its index; its base is one past the end
    /// of the previous file (0 for the first).
    pub fn add(&mut self, name: impl Into<String>, path: impl AsRef<Path>, text: String) -> usize {
        let base = self.files.last().map_or(0, |f| f.end() + 1);
        self.files.push(SourceFile {
            name: name.into(),
            path: path.as_ref().to_path_buf(),
            text,
            base,
        });
        self.files.len() - 1
    }

    /// The files, in the order they were added.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// File `index`.
    pub fn file(&self, index: usize) -> &SourceFile {
        &self.files[index]
    }

    /// The index of the file the global `offset` lies in (the first file for an offset
    /// before every file; the last for one past every file). `None` for an empty map.
    pub fn lookup(&self, offset: usize) -> Option<usize> {
        if self.files.is_empty() {
            return None;
        }
        Some(file_index(&self.views(), offset))
    }

    fn views(&self) -> Vec<FileView<'_>> {
        self.files
            .iter()
            .map(|f| FileView {
                name: &f.name,
                text: &f.text,
                base: f.base,
            })
            .collect()
    }

    /// Renders `d` as an ariadne report: located in the file of its primary span, and each
    /// label shown against the name and text of the file it lies in. With `color == false`
    /// the output has no ANSI escapes. An empty map renders the plain form.
    pub fn render(&self, d: &Diagnostic, color: bool) -> String {
        if self.files.is_empty() {
            return format!("{d}\n");
        }
        render_files(d, &self.views(), color)
    }

    /// `file:line:col: error[E0101]: message` for the primary span's file.
    pub fn short(&self, d: &Diagnostic) -> String {
        let Some(i) = self.lookup(d.primary_span().start) else {
            return format!("{}[{}]: {}", d.severity, d.code, d.message);
        };
        let f = &self.files[i];
        let (line, col) = line_col(&f.text, f.local(d.primary_span()).start);
        format!(
            "{}:{line}:{col}: {}[{}]: {}",
            f.name, d.severity, d.code, d.message
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_disjoint_and_end_of_file_points_stay_in_their_file() {
        let mut m = SourceMap::new();
        assert_eq!(m.lookup(0), None);
        m.add("a.tsl", "a.tsl", "abc".into());
        m.add("b.tsl", "b.tsl", "".into());
        m.add("c.tsl", "c.tsl", "xy\nz".into());
        let bases: Vec<usize> = m.files().iter().map(|f| f.base).collect();
        assert_eq!(bases, [0, 4, 5]);
        assert_eq!(m.lookup(3), Some(0), "the end of a.tsl");
        assert_eq!(m.lookup(4), Some(1), "the (empty) text of b.tsl");
        assert_eq!(m.lookup(5), Some(2));
        assert_eq!(m.lookup(1000), Some(2));
    }

    #[test]
    fn labels_render_against_their_own_file() {
        let mut m = SourceMap::new();
        m.add(
            "main.tsl",
            "main.tsl",
            "import \"lib.tsl\";\nfn f() -> f32 { 1.0 }\n".into(),
        );
        let lib = m.add("lib.tsl", "lib.tsl", "fn f() -> f32 { 2.0 }\n".into());
        let base = m.file(lib).base;
        let d = Diagnostic::error("E0201", "`f` is defined twice")
            .with_label(Span::new(21, 22), "this fn redefines `f`")
            .with_secondary(Span::new(base + 3, base + 4), "first defined here");
        let text = m.render(&d, false);
        assert!(text.contains("╭─[ main.tsl:2:4 ]"), "{text}");
        assert!(text.contains("├─[ lib.tsl:1:4 ]"), "{text}");
        assert!(text.contains("fn f() -> f32 { 2.0 }"), "{text}");
        assert_eq!(
            m.short(&d),
            "main.tsl:2:4: error[E0201]: `f` is defined twice"
        );
        // Every span renders, whichever files it touches or passes.
        for start in 0..base + 30 {
            for end in [start, start + 1, start + 40, 0] {
                let d = Diagnostic::error("E9999", "x").with_label(Span::new(start, end), "here");
                let _ = m.render(&d, false);
                let _ = m.short(&d);
            }
        }
    }
}
