//! Diagnostics shared by every front-end stage: lexer, parser, and the later
//! name / dtype / shape checks in `tessel-passes`.
//!
//! A [`Diagnostic`] is plain data (severity, code, message, labelled spans,
//! notes, help); [`Diagnostic::render`] turns it into an ariadne report and
//! `Display` gives a one-line-per-part form for logs.
//!
//! # Codes
//!
//! | range   | stage                                            |
//! |---------|--------------------------------------------------|
//! | `E00xx` | lexer ([`crate::lexer`])                          |
//! | `E01xx` | parser: grammar errors and syntactic checks; `E012x` imports ([`crate::load`]) |
//! | `E02xx` | names (reserved for the checker)                  |
//! | `E03xx` | dtypes (reserved for the checker)                 |
//! | `E04xx` | shapes (reserved for the checker; spell out both shapes in the message) |
//!
//! The codes this crate emits are listed in [`codes`].

use std::fmt;

use ariadne::{Color, Config, IndexType, Label as AriadneLabel, Report, ReportKind};

use crate::span::Span;

/// Diagnostic codes emitted by `tessel-syntax`.
pub mod codes {
    /// A character that starts no token.
    pub const UNKNOWN_CHAR: &str = "E0001";
    /// A number-like word that is not an integer or float literal, or one out of range.
    pub const MALFORMED_NUMBER: &str = "E0002";
    /// A `/*` without its matching `*/`.
    pub const UNTERMINATED_COMMENT: &str = "E0003";
    /// A `"` with no closing `"` on its line.
    pub const UNTERMINATED_STRING: &str = "E0004";
    /// A `\` in a string literal (strings have no escapes).
    pub const STRING_ESCAPE: &str = "E0005";
    /// A `//` comment after an operand whose text reads as an operand: Python's floor
    /// division, which in tessel would drop the rest of the line.
    pub const FLOOR_DIVISION_COMMENT: &str = "E0006";
    /// A token the grammar does not allow at this point.
    pub const UNEXPECTED_TOKEN: &str = "E0101";
    /// The file ended in the middle of an item.
    pub const UNEXPECTED_EOF: &str = "E0102";
    /// A token after a complete program.
    pub const EXTRA_TOKEN: &str = "E0103";
    /// A token the parser's own lexer rejected (cannot happen with the logos lexer; kept for completeness).
    pub const INVALID_TOKEN: &str = "E0104";
    /// `...` somewhere other than the first dim of a `fn` parameter or return type.
    pub const MISPLACED_ELLIPSIS_DIM: &str = "E0110";
    /// A positional argument after a named one.
    pub const POSITIONAL_AFTER_NAMED: &str = "E0111";
    /// The same named argument given twice in one call.
    pub const DUPLICATE_NAMED_ARG: &str = "E0112";
    /// More than one `...` in one index expression.
    pub const MULTIPLE_ELLIPSIS_INDEX: &str = "E0113";
    /// `from "..."` on a `fn` parameter: only a step's parameters come from a checkpoint.
    pub const FROM_ON_FN_PARAM: &str = "E0114";
    /// A tensor-name template that is empty or has a `{...}` other than `{layer}`.
    pub const BAD_TENSOR_NAME: &str = "E0115";
    /// `inout` on a `fn` parameter: only a step's parameters are updated in place.
    pub const INOUT_ON_FN_PARAM: &str = "E0116";
    /// An imported file that cannot be read (missing, a directory, not UTF-8, ...).
    pub const IMPORT_UNREADABLE: &str = "E0120";
    /// A file that imports itself, directly or through other files.
    pub const IMPORT_CYCLE: &str = "E0121";
}

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Compilation cannot continue.
    Error,
    /// Suspicious but accepted.
    Warning,
    /// Extra information, usually attached after an error.
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// A span of source with a message under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The labelled bytes.
    pub span: Span,
    /// Text printed next to the span (may be empty).
    pub message: String,
    /// The primary label marks the offending source; secondary labels give context
    /// (where a delimiter was opened, where a name was first defined, ...).
    pub primary: bool,
}

/// One compiler message about one source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error, warning or note.
    pub severity: Severity,
    /// Stable code such as `"E0101"` (see the module docs for ranges).
    pub code: &'static str,
    /// One-line summary, e.g. "unexpected `)`" or
    /// "shape mismatch: [T, 5120] @ [17408, 5120] needs 5120 == 17408".
    pub message: String,
    /// Labelled spans; the first primary one is the report's location.
    pub labels: Vec<Label>,
    /// Extra lines printed after the source excerpt ("expected one of ...").
    pub notes: Vec<String>,
    /// A suggestion for the fix.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A new diagnostic with no labels, notes or help.
    pub fn new(severity: Severity, code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity,
            code,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
        }
    }

    /// A new error.
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, message)
    }

    /// A new warning.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, message)
    }

    /// Adds a primary label.
    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
            primary: true,
        });
        self
    }

    /// Adds a secondary (context) label.
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
            primary: false,
        });
        self
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Sets the help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The same diagnostic with every label moved `base` bytes on: a file's diagnostic made
    /// in offsets within the file, placed where the file starts in a [`crate::SourceMap`].
    pub fn shifted(mut self, base: usize) -> Self {
        for l in &mut self.labels {
            l.span = Span::new(l.span.start + base, l.span.end + base);
        }
        self
    }

    /// The span the report points at: the first primary label, else the first
    /// label, else the start of the file.
    pub fn primary_span(&self) -> Span {
        self.labels
            .iter()
            .find(|l| l.primary)
            .or_else(|| self.labels.first())
            .map(|l| l.span)
            .unwrap_or_default()
    }

    /// Renders the diagnostic as an ariadne report over `source`, which is named
    /// `file_name` in the header. With `color == false` the output has no ANSI
    /// escapes (what snapshots use).
    ///
    /// Spans are byte offsets; ariadne is configured with [`IndexType::Byte`].
    /// Spans that are out of range, reversed or not on a `char` boundary (a bug
    /// in whichever pass made them) are clamped instead of panicking. For a
    /// diagnostic about several files, see [`crate::SourceMap::render`].
    pub fn render(&self, file_name: &str, source: &str, color: bool) -> String {
        let file = FileView {
            name: file_name,
            text: source,
            base: 0,
        };
        render_files(self, &[file], color)
    }

    /// A compact `file:line:col: error[E0101]: message` line for logs, with
    /// 1-based line and column (columns count `char`s).
    pub fn short(&self, file_name: &str, source: &str) -> String {
        let (line, col) = line_col(source, self.primary_span().start);
        format!(
            "{file_name}:{line}:{col}: {}[{}]: {}",
            self.severity, self.code, self.message
        )
    }
}

/// One file as the renderer sees it: its name, its text, and where it starts in the global
/// offsets the spans use.
pub(crate) struct FileView<'a> {
    pub(crate) name: &'a str,
    pub(crate) text: &'a str,
    pub(crate) base: usize,
}

/// An ariadne source id: the file's position (so two files shown with one name stay two),
/// displayed as its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileId(usize, String);

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.1)
    }
}

/// The file a global offset lies in: the last whose base is at or before it (the first when
/// none is). `files` is non-empty and sorted by base.
pub(crate) fn file_index(files: &[FileView<'_>], offset: usize) -> usize {
    files
        .partition_point(|f| f.base <= offset)
        .saturating_sub(1)
}

/// `span` as a range in the file it starts in: that file's index and the span made local
/// and clamped to the file's text.
fn locate(files: &[FileView<'_>], span: Span) -> (usize, Span) {
    let i = file_index(files, span.start);
    let f = &files[i];
    let local = Span::new(
        span.start.saturating_sub(f.base),
        span.end.saturating_sub(f.base),
    );
    (i, clamp_span(local, f.text))
}

/// Renders `d` over `files` (non-empty, sorted by base): the report is located in the file
/// of its primary span, and each label is shown in the file its span starts in.
pub(crate) fn render_files(d: &Diagnostic, files: &[FileView<'_>], color: bool) -> String {
    let kind = match d.severity {
        Severity::Error => ReportKind::Error,
        Severity::Warning => ReportKind::Warning,
        Severity::Note => ReportKind::Advice,
    };
    let id = |i: usize| FileId(i, files[i].name.to_string());
    let (pi, primary) = locate(files, d.primary_span());
    let config = Config::default()
        .with_color(color)
        .with_index_type(IndexType::Byte);
    let mut report = Report::build(kind, (id(pi), primary.range()))
        .with_config(config)
        .with_code(d.code)
        .with_message(&d.message);
    // ariadne starts a new source group whenever a label's line is above the
    // previous label's, so hand them over in source order: the primary span's file first
    // (its group heads the report), then the others in order of their bases.
    let mut labels: Vec<&Label> = d.labels.iter().collect();
    labels.sort_by_key(|l| {
        let other_file = file_index(files, l.span.start) != pi;
        (other_file, l.span.start, l.span.end)
    });
    let mut used = vec![pi];
    for label in labels {
        let (i, span) = locate(files, label.span);
        if !used.contains(&i) {
            used.push(i);
        }
        let mut l = AriadneLabel::new((id(i), span.range()));
        if !label.message.is_empty() {
            l = l.with_message(&label.message);
        }
        if color {
            l = l.with_color(if label.primary {
                Color::Red
            } else {
                Color::Blue
            });
        }
        report = report.with_label(l);
    }
    for note in &d.notes {
        report = report.with_note(note);
    }
    if let Some(help) = &d.help {
        report = report.with_help(help);
    }
    let mut out = Vec::new();
    let cache = ariadne::sources(used.iter().map(|&i| (id(i), files[i].text)));
    if let Err(e) = report.finish().write(cache, &mut out) {
        // Writing into a Vec cannot fail for I/O reasons; keep whatever came out
        // plus the plain form so nothing is lost.
        return format!(
            "{}{d}\n(render failed: {e})\n",
            String::from_utf8_lossy(&out)
        );
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// 1-based line and `char` column of byte `offset` in `source` (clamped).
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = floor_char_boundary(source, offset.min(source.len()));
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

pub(crate) fn clamp_span(span: Span, source: &str) -> Span {
    let start = floor_char_boundary(source, span.start.min(source.len()));
    let end = ceil_char_boundary(source, span.end.min(source.len())).max(start);
    Span::new(start, end)
}

/// Plain multi-line form for logs: `error[E0101]: message`, then one line per
/// label (`  --> 10..11: text`), note and help. Spans are byte offsets; use
/// [`Diagnostic::short`] or [`Diagnostic::render`] when the source is at hand.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]: {}", self.severity, self.code, self.message)?;
        for label in &self.labels {
            let arrow = if label.primary { "-->" } else { "..." };
            write!(f, "\n  {arrow} {}", label.span)?;
            if !label.message.is_empty() {
                write!(f, ": {}", label.message)?;
            }
        }
        for note in &self.notes {
            write!(f, "\n  note: {note}")?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rendering never panics, whatever the spans: every start..end pair
    /// (reversed, out of range, mid-char, across CRLF and LF line ends, at EOF).
    #[test]
    fn render_any_span() {
        let source = "ab\r\né∑🙂\n\n\tx = 1;\n";
        for start in 0..source.len() + 3 {
            for end in 0..source.len() + 3 {
                let d = Diagnostic::error("E9999", "test")
                    .with_label(Span::new(start, end), "here")
                    .with_secondary(Span::point(end), "")
                    .with_note("n")
                    .with_help("h");
                let _ = d.render("t.tsl", source, false);
                let _ = d.render("t.tsl", source, true);
                let _ = d.short("t.tsl", source);
            }
        }
        let empty = Diagnostic::error("E9999", "no labels");
        assert!(empty.render("t.tsl", "", false).contains("no labels"));
    }

    #[test]
    fn plain_display() {
        let d = Diagnostic::error(codes::UNEXPECTED_TOKEN, "unexpected `)`")
            .with_label(Span::new(3, 4), "unexpected `)`")
            .with_secondary(Span::new(0, 1), "opened here")
            .with_note("expected one of `]`, `,`")
            .with_help("close the `[`");
        assert_eq!(
            d.to_string(),
            "error[E0101]: unexpected `)`\n  --> 3..4: unexpected `)`\n  ... 0..1: opened here\n  \
             note: expected one of `]`, `,`\n  help: close the `[`"
        );
        assert_eq!(
            d.short("a.tsl", "x\ny)"),
            "a.tsl:2:2: error[E0101]: unexpected `)`"
        );
    }
}
