//! The lexer: source text to `(start, Token, end)` triples for the lalrpop
//! parser, with byte offsets.
//!
//! Tokens borrow identifiers from the source; numbers are validated and
//! converted here, so the grammar never sees a literal it cannot represent.
//! Whitespace, `// line` comments and `/* block */` comments (which nest) are
//! skipped. Lexical errors (unknown character, malformed number, unterminated
//! block comment) become [`Diagnostic`]s through [`LexError::to_diagnostic`].
//!
//! The grammar's `extern` block (`grammar.lalrpop`) lists one terminal per
//! variant here; [`Token::terminal_name`] and [`describe_terminal`] are the two
//! directions of that mapping and must change with it.

use std::fmt;

use logos::{Lexer, Logos};

use crate::ast::DType;
use crate::diagnostic::{codes, Diagnostic};
use crate::porting;
use crate::span::Span;

/// What went wrong while lexing; the span is added by [`lex`].
#[derive(Clone, Debug, Default, PartialEq)]
pub enum LexErrorKind {
    /// A character that starts no token (`None` only for logos' default error).
    UnknownChar(Option<char>),
    /// A number-like word that is not a valid literal, with the reason.
    MalformedNumber(&'static str),
    /// A `/*` never closed.
    UnterminatedComment,
    /// A `"` with no closing `"` on the same line.
    UnterminatedString,
    /// A `\` in a string literal: strings have no escape sequences.
    StringEscape,
    /// A `//` comment after an operand on its line whose text reads as an operand, as
    /// Python's floor division `x // 2.0` would: the rest of the line is silently dropped.
    FloorDivision,
    /// Fallback required by logos; never produced by this grammar of tokens.
    #[default]
    Other,
}

impl LexErrorKind {
    fn from_lexer<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Self {
        LexErrorKind::UnknownChar(lex.slice().chars().next())
    }
}

/// A lexical error with its source span.
#[derive(Clone, Debug, PartialEq)]
pub struct LexError {
    /// What went wrong.
    pub kind: LexErrorKind,
    /// The offending bytes (for an unterminated comment: from `/*` to end of file).
    pub span: Span,
}

impl LexError {
    /// The diagnostic for this error, quoting `source` where useful.
    pub fn to_diagnostic(&self, source: &str) -> Diagnostic {
        let text = source.get(self.span.range()).unwrap_or("");
        match &self.kind {
            LexErrorKind::UnknownChar(c) => {
                if *c == Some('.') {
                    if let Some(d) = method_or_attribute(source, self.span) {
                        return d;
                    }
                }
                let shown = match c {
                    Some('\u{feff}') => "U+FEFF (a byte-order mark)".to_string(),
                    Some(c) if c.is_control() || c.is_whitespace() => format!("{:?}", c),
                    Some(c) => format!("`{c}`"),
                    None => format!("`{text}`"),
                };
                let d =
                    Diagnostic::error(codes::UNKNOWN_CHAR, format!("unexpected character {shown}"))
                        .with_label(self.span, "not part of any token");
                match c {
                    Some('^') => d.with_help("transpose is written `x^T`, with no space"),
                    Some('.') => d.with_help(
                        "a float literal needs digits on both sides of the point (`0.5`); `...` is the ellipsis",
                    ),
                    Some('\'') => d.with_note(
                        "string literals are written in double quotes, e.g. `import \"lib.tsl\";`",
                    ),
                    Some('\u{feff}') => {
                        d.with_note("a byte-order mark is skipped only at the start of a file")
                    }
                    _ => d,
                }
            }
            LexErrorKind::MalformedNumber(why) => Diagnostic::error(
                codes::MALFORMED_NUMBER,
                format!("malformed number `{text}`"),
            )
            .with_label(self.span, *why)
            .with_note("integers are decimal digits (`128`); floats are `1.0`, `1e-6`, `2.5E+3`"),
            LexErrorKind::UnterminatedComment => {
                let open = Span::new(self.span.start, (self.span.start + 2).min(self.span.end));
                Diagnostic::error(codes::UNTERMINATED_COMMENT, "unterminated block comment")
                    .with_label(open, "this comment is never closed")
                    .with_secondary(Span::point(self.span.end), "file ends here")
                    .with_help("close it with `*/` (block comments nest)")
            }
            LexErrorKind::UnterminatedString => {
                Diagnostic::error(codes::UNTERMINATED_STRING, "unterminated string literal")
                    .with_label(self.span, "this string is never closed")
                    .with_help("close it with `\"` on the same line (strings cannot span lines)")
            }
            LexErrorKind::StringEscape => Diagnostic::error(
                codes::STRING_ESCAPE,
                "string literals have no escape sequences",
            )
            .with_label(self.span, "this string contains `\\`")
            .with_note("a tensor name or an import path is written as it is: `\"lib/norms.tsl\"`"),
            LexErrorKind::FloorDivision => {
                let slashes = Span::new(self.span.start, (self.span.start + 2).min(self.span.end));
                let text = source.get(self.span.start + 2..self.span.end).unwrap_or("");
                let operand = comment_operand(text).unwrap_or(text.trim());
                let lead = text.len() - text.trim_start().len();
                let at = self.span.start + 2 + lead;
                let operand_span = Span::new(at, at + operand.len());
                Diagnostic::error(
                    codes::FLOOR_DIVISION_COMMENT,
                    "`//` starts a comment in tessel, not a floor division",
                )
                .with_label(
                    slashes,
                    "everything from here to the end of the line is ignored",
                )
                .with_secondary(
                    operand_span,
                    format!("`{operand}` reads as the right operand of Python's `//`"),
                )
                .with_help(
                    "floor division is `floor_divide(a, b)`; to keep this as a comment, \
                     put it on its own line or after the `;`",
                )
                .with_note(
                    "the next line continues the expression, so `let y = x // 2.0` then \
                     `* 3.0;` would compute `x * 3.0`",
                )
            }
            LexErrorKind::Other => {
                Diagnostic::error(codes::UNKNOWN_CHAR, format!("invalid input `{text}`"))
                    .with_label(self.span, "not part of any token")
            }
        }
    }
}

/// The diagnostic for a `.` that follows an expression and starts a name, as in PyTorch's
/// `x.sum(-1)`, `w.T`, `x.shape` or `torch.matmul(x, w)`: tessel has no methods, attributes
/// or modules, so the help spells the tessel form from [`porting::HINTS`] with the user's
/// own arguments. A name with no row there gets no spelling, only the rule. `None` when the
/// `.` is not in such a place.
fn method_or_attribute(source: &str, dot: Span) -> Option<Diagnostic> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let before = source.get(..dot.start)?;
    let after = source.get(dot.end..)?;
    let prev = before.chars().next_back()?;
    if !(is_ident(prev) || prev == ')' || prev == ']') {
        return None;
    }
    let name_len = after.find(|c: char| !is_ident(c)).unwrap_or(after.len());
    let name = after.get(..name_len)?;
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    // The receiver when it is a plain name; `x` stands for anything longer.
    let recv_start = before.rfind(|c: char| !is_ident(c)).map_or(0, |i| i + 1);
    let recv = if is_ident(prev) {
        before
            .get(recv_start..)
            .filter(|r| !r.starts_with(|c: char| c.is_ascii_digit()))
    } else {
        None
    };
    // The whole dotted path `torch.nn.functional.softmax`, when it names a module's item.
    if let Some(r) = recv {
        let mut end = dot.end + name_len;
        while let Some(rest) = source.get(end..).and_then(|t| t.strip_prefix('.')) {
            let n = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            if n == 0 || !rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                break;
            }
            end += 1 + n;
        }
        let path = source.get(recv_start..end)?;
        let module = porting::split_module(path)
            .or_else(|| porting::MODULES.contains(&r).then_some((r, name)));
        if let Some((module, item)) = module {
            let end = if porting::split_module(path).is_some() {
                end
            } else {
                dot.end + name_len
            };
            let rest = source.get(end..).unwrap_or("");
            return Some(qualified(
                Span::new(recv_start, end),
                source.get(recv_start..end)?,
                module,
                item,
                rest,
            ));
        }
    }
    let (recv, stand_in) = match recv {
        Some(r) => (r, false),
        None => ("x", true),
    };
    let span = Span::new(dot.start, dot.end + name_len);
    let rest = after.get(name_len..).unwrap_or("");
    let d = if let Some(args) = rest.strip_prefix('(') {
        let mut all = vec![porting::Arg {
            name: None,
            value: recv,
        }];
        // The label covers the whole call, so a `.` in its arguments (`torch.bfloat16`) is
        // part of this report.
        let mut label = span;
        match call_args(args) {
            Some((args, close)) => {
                all.extend(args.into_iter().map(porting::Arg::parse));
                label = Span::new(dot.start, span.end + 1 + close + 1);
            }
            None => all.clear(),
        }
        let d = Diagnostic::error(
            codes::UNKNOWN_CHAR,
            format!("tessel has no method calls: `.{name}(...)`"),
        )
        .with_label(label, "a method call");
        with_spelling(d, name, &all)
    } else if name == "T" || name == "mT" {
        Diagnostic::error(
            codes::UNKNOWN_CHAR,
            format!("tessel has no attributes: `.{name}`"),
        )
        .with_label(span, "an attribute")
        .with_help(format!("the transpose of the last two axes is `{recv}^T`"))
    } else {
        let d = Diagnostic::error(
            codes::UNKNOWN_CHAR,
            format!("tessel has no attributes: `.{name}`"),
        )
        .with_label(span, "an attribute");
        match name {
            "shape" | "dtype" | "ndim" => d.with_note(
                "a tensor's dtype and shape are in its declared type, e.g. `bf16[T, 5120]`",
            ),
            _ => d.with_note("functions take the tensor as their first argument: `exp(x)`"),
        }
    };
    Some(if stand_in {
        d.with_note("`x` stands for the expression before the `.`")
    } else {
        d
    })
}

/// The diagnostic for `module.item` (`torch.matmul(x, w)`, `F.softmax(x, dim=-1)`,
/// `torch.bfloat16`): `path` at `span` is the whole dotted name, `rest` the source after it.
fn qualified(span: Span, path: &str, module: &str, item: &str, rest: &str) -> Diagnostic {
    let library = if module.starts_with("np") || module == "numpy" {
        "NumPy"
    } else {
        "PyTorch"
    };
    if let Some(args) = rest.strip_prefix('(') {
        let (args, label) = match call_args(args) {
            Some((args, close)) => (
                args.into_iter().map(porting::Arg::parse).collect(),
                Span::new(span.start, span.end + 1 + close + 1),
            ),
            None => (Vec::new(), span),
        };
        let d = Diagnostic::error(
            codes::UNKNOWN_CHAR,
            format!("tessel has no modules: `{path}` is {library}'s"),
        )
        .with_label(label, format!("a {library} function"));
        with_spelling(d, item, &args)
    } else if let Some(dt) = porting::dtype_name(path) {
        Diagnostic::error(
            codes::UNKNOWN_CHAR,
            format!("tessel has no modules: `{path}` is {library}'s"),
        )
        .with_label(span, format!("a {library} dtype"))
        .with_help(format!(
            "the dtype is `{dt}`; a cast is the dtype called as a function: `{dt}(x)`"
        ))
    } else {
        Diagnostic::error(
            codes::UNKNOWN_CHAR,
            format!("tessel has no modules: `{path}` is {library}'s"),
        )
        .with_label(span, format!("a {library} name"))
        .with_note("tessel's builtins are plain names: `exp(x)`, `softmax(x, axis: -1)`")
    }
}

/// `d` with the tessel spelling of the call `name(args)` (`args[0]` the tensor) as its help,
/// or, when the hint table has none, the rule and where the table is.
fn with_spelling(d: Diagnostic, name: &str, args: &[porting::Arg<'_>]) -> Diagnostic {
    match porting::suggest(name, args) {
        Some((spelling, note)) => {
            let d = d.with_help(format!("write `{spelling}`"));
            match note {
                Some(n) => d.with_note(n),
                None => d,
            }
        }
        None if porting::HINTS.iter().any(|h| h.names.contains(&name)) => d.with_note(format!(
            "`{name}` is written as in docs/language.md, \"Porting from PyTorch\", e.g. `{}`",
            porting::HINTS
                .iter()
                .find(|h| h.names.contains(&name))
                .map_or("", |h| h.tessel)
        )),
        None => d.with_note(format!(
            "tessel has no `{name}`; functions take the tensor as their first argument (`exp(x)`), \
             and docs/language.md, \"Porting from PyTorch\", lists the PyTorch calls tessel spells differently"
        )),
    }
}

/// The arguments of a call that starts right after its `(` in `text`, split at top-level
/// commas and trimmed, and the offset of its `)` in `text`; `None` when the `)` is not on
/// the same line or the list is long.
fn call_args(text: &str) -> Option<(Vec<&str>, usize)> {
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices().take(200) {
        match c {
            '(' | '[' => depth += 1,
            ')' if depth == 0 => {
                let last = text.get(start..i)?.trim();
                if !last.is_empty() || !args.is_empty() {
                    args.push(last);
                }
                return Some((args, i));
            }
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                args.push(text.get(start..i)?.trim());
                start = i + 1;
            }
            '\n' => return None,
            _ => {}
        }
    }
    None
}

/// Longest comment text [`reads_as_operand`] looks at: the floor divisions it catches are
/// short, and the check parses the text.
const MAX_OPERAND_COMMENT: usize = 200;

/// A `// line` comment, just matched: skipped, unless it follows an operand on its line
/// and its text reads as an operand (`x // 2.0`, `n // k`, `a // (b + c)`), which is
/// Python's floor division and would make tessel drop the rest of the line silently
/// ([`LexErrorKind::FloorDivision`]). Comments on their own line, after `;`, `,`, `{` or
/// an operator, and prose or shapes after an operand (`// cast, then weight`, `// [T, D]`)
/// stay comments.
fn line_comment<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Result<(), LexErrorKind> {
    let start = lex.span().start;
    let source = lex.source();
    let line = source[..start].rfind('\n').map_or(0, |i| i + 1);
    let before = source[line..start].trim_end();
    let after_operand =
        before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ')' || c == ']');
    if after_operand && reads_as_operand(&lex.slice()[2..]) {
        Err(LexErrorKind::FloorDivision)
    } else {
        Ok(())
    }
}

/// Whether a line comment's `text` starts with an expression a floor division could take
/// as its right operand: a number, a name, a parenthesised or negated expression, ending
/// at the end of the text or at `;`, `,` or a closing bracket. Prose (`Hugging Face
/// order`), lists (`[T, D]`, a shape) and text with a `:` or `=` are not operands.
pub(crate) fn reads_as_operand(text: &str) -> bool {
    comment_operand(text).is_some()
}

/// The operand a line comment's `text` starts with, per [`reads_as_operand`].
fn comment_operand(text: &str) -> Option<&str> {
    let text = text.trim();
    if text.len() > MAX_OPERAND_COMMENT
        || text.contains("//")
        || !text
            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '(' || c == '-')
    {
        return None;
    }
    // The operand ends where an enclosing expression would go on: the first `;` or `,` or
    // closing bracket outside brackets.
    let mut depth = 0usize;
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' | '}' if depth == 0 => {
                end = i;
                break;
            }
            ')' | ']' => depth -= 1,
            ';' | ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let operand = text[..end].trim();
    (!operand.is_empty() && crate::parse(&format!("const OPERAND = {operand};")).is_ok())
        .then_some(operand)
}

/// Scans past a (nesting) block comment whose `/*` was just matched.
fn block_comment<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Result<(), LexErrorKind> {
    let rest = lex.remainder().as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while i < rest.len() {
        match (rest[i], rest.get(i + 1)) {
            (b'*', Some(b'/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    lex.bump(i);
                    return Ok(());
                }
            }
            (b'/', Some(b'*')) => {
                depth += 1;
                i += 2;
            }
            _ => i += 1,
        }
    }
    // `i` may sit past a multi-byte char's first byte only at the very end, which is fine:
    // `rest.len()` is a char boundary.
    lex.bump(rest.len());
    Err(LexErrorKind::UnterminatedComment)
}

/// Scans a string literal whose opening `"` was just matched, up to the closing `"` on the
/// same line, and gives its contents. There are no escape sequences: a `\\` is an error
/// (reserved for them), and so is a line or file that ends first.
fn string<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Result<&'src str, LexErrorKind> {
    let rest = lex.remainder();
    let line_end = rest.find('\n').unwrap_or(rest.len());
    match rest[..line_end].find('"') {
        Some(close) => {
            lex.bump(close + 1);
            let text = &rest[..close];
            if text.contains('\\') {
                Err(LexErrorKind::StringEscape)
            } else {
                Ok(text)
            }
        }
        None => {
            // The span ends before the line break, so the label stays on the string's line.
            lex.bump(rest[..line_end].trim_end_matches('\r').len());
            Err(LexErrorKind::UnterminatedString)
        }
    }
}

fn bad_number<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Result<(), LexErrorKind> {
    let s = lex.slice();
    let why = if s.starts_with("0x") || s.starts_with("0b") || s.starts_with("0o") {
        "only decimal literals are supported"
    } else if s.ends_with('.') {
        "a float needs digits after the point"
    } else if s.matches('.').count() > 1 {
        "a number has at most one point"
    } else if s.ends_with(['e', 'E', '+', '-']) {
        "the exponent has no digits"
    } else {
        "a number cannot be followed directly by letters"
    };
    Err(LexErrorKind::MalformedNumber(why))
}

fn int<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Result<i64, LexErrorKind> {
    lex.slice()
        .parse::<i64>()
        .map_err(|_| LexErrorKind::MalformedNumber("integer literal does not fit in 64 bits"))
}

fn float<'src>(lex: &mut Lexer<'src, Token<'src>>) -> Result<f64, LexErrorKind> {
    match lex.slice().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(LexErrorKind::MalformedNumber("float literal out of range")),
    }
}

/// A token. Keyword and punctuation variants carry nothing; identifiers borrow
/// the source; literals carry their value.
///
/// Builtin functions (`exp`, `mean`, `concat`, ...) are plain identifiers.
#[derive(Logos, Clone, Copy, Debug, PartialEq)]
#[logos(error(LexErrorKind, LexErrorKind::from_lexer))]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip("//[^\n]*", callback = line_comment, allow_greedy = true))]
#[logos(skip("/\\*", callback = block_comment))]
// Anything that starts with a digit and continues like a number or a word, but is
// not an integer or float literal (those win on equal length by priority).
#[logos(skip("[0-9]([0-9A-Za-z_.]|[eE][+-])*", callback = bad_number, priority = 1))]
pub enum Token<'src> {
    /// `const`
    #[token("const")]
    Const,
    /// `fn`
    #[token("fn")]
    Fn,
    /// `step`
    #[token("step")]
    Step,
    /// `let`
    #[token("let")]
    Let,
    /// `import`
    #[token("import")]
    Import,
    /// `from` (a step parameter's tensor in a checkpoint)
    #[token("from")]
    From,
    /// `inout` (a step parameter the step updates in place)
    #[token("inout")]
    Inout,
    /// `None` (new axis in an index)
    #[token("None")]
    None,
    /// `true`
    #[token("true")]
    True,
    /// `false`
    #[token("false")]
    False,
    /// A dtype keyword: `bf16 f16 f32 i32 bool`.
    #[token("bf16", |_| DType::Bf16)]
    #[token("f16", |_| DType::F16)]
    #[token("f32", |_| DType::F32)]
    #[token("i32", |_| DType::I32)]
    #[token("bool", |_| DType::Bool)]
    Dtype(DType),
    /// An identifier: `[A-Za-z_][A-Za-z0-9_]*`, not a keyword.
    #[regex("[A-Za-z_][A-Za-z0-9_]*")]
    Ident(&'src str),
    /// A string literal `"..."`, one line, no escapes; the token holds what is between the
    /// quotes. Used for import paths and tensor names.
    #[token("\"", string)]
    Str(&'src str),
    /// A decimal integer literal that fits in `i64` (no sign: `-1` is negation).
    #[regex("[0-9]+", int, priority = 10)]
    Int(i64),
    /// A finite float literal: `1.0`, `1e-6`, `2.5E+3`.
    #[regex(
        r"[0-9]+\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+",
        float,
        priority = 10
    )]
    Float(f64),
    /// `(`
    #[token("(")]
    LParen,
    /// `)`
    #[token(")")]
    RParen,
    /// `[`
    #[token("[")]
    LBracket,
    /// `]`
    #[token("]")]
    RBracket,
    /// `{`
    #[token("{")]
    LBrace,
    /// `}`
    #[token("}")]
    RBrace,
    /// `,`
    #[token(",")]
    Comma,
    /// `;`
    #[token(";")]
    Semi,
    /// `:`
    #[token(":")]
    Colon,
    /// `=`
    #[token("=")]
    Assign,
    /// `->`
    #[token("->")]
    Arrow,
    /// `...`
    #[token("...")]
    Ellipsis,
    /// `==`
    #[token("==")]
    EqEq,
    /// `!=`
    #[token("!=")]
    NotEq,
    /// `<`
    #[token("<")]
    Lt,
    /// `<=`
    #[token("<=")]
    Le,
    /// `>`
    #[token(">")]
    Gt,
    /// `>=`
    #[token(">=")]
    Ge,
    /// `+`
    #[token("+")]
    Plus,
    /// `-`
    #[token("-")]
    Minus,
    /// `*`
    #[token("*")]
    Star,
    /// `/`
    #[token("/")]
    Slash,
    /// `%`
    #[token("%")]
    Percent,
    /// `@` (matmul)
    #[token("@")]
    At,
    /// `!`
    #[token("!")]
    Bang,
    /// `^T` (transpose of the last two axes), one token.
    #[token("^T")]
    Transpose,
}

impl Token<'_> {
    /// The terminal's name in `grammar.lalrpop`'s `extern` block.
    pub fn terminal_name(&self) -> &'static str {
        use Token::*;
        match self {
            Const => "const",
            Fn => "fn",
            Step => "step",
            Let => "let",
            Import => "import",
            From => "from",
            Inout => "inout",
            None => "None",
            True => "true",
            False => "false",
            Dtype(_) => "dtype",
            Ident(_) => "identifier",
            Str(_) => "string",
            Int(_) => "integer",
            Float(_) => "float",
            LParen => "(",
            RParen => ")",
            LBracket => "[",
            RBracket => "]",
            LBrace => "{",
            RBrace => "}",
            Comma => ",",
            Semi => ";",
            Colon => ":",
            Assign => "=",
            Arrow => "->",
            Ellipsis => "...",
            EqEq => "==",
            NotEq => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Plus => "+",
            Minus => "-",
            Star => "*",
            Slash => "/",
            Percent => "%",
            At => "@",
            Bang => "!",
            Transpose => "^T",
        }
    }
}

/// How a terminal named in lalrpop's "expected" lists reads in a message.
///
/// lalrpop reports terminals as their quoted grammar names (`"\"(\""`); the quotes
/// are optional here. Classes of tokens read as words ("identifier"); fixed
/// tokens are shown in backticks like [`Token`]'s `Display`.
pub fn describe_terminal(name: &str) -> String {
    let bare = name
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(name)
        .replace("\\\"", "\"")
        .replace("\\\\", "\\");
    match bare.as_str() {
        "identifier" => "identifier".into(),
        "string" => "string literal".into(),
        "integer" => "integer literal".into(),
        "float" => "float literal".into(),
        "dtype" => "dtype".into(),
        other => format!("`{other}`"),
    }
}

/// Tokens as they read in error messages: "`)`", "identifier `x`", "integer `3`".
impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "identifier `{s}`"),
            Token::Str(s) => write!(f, "string \"{s}\""),
            Token::Int(v) => write!(f, "integer `{v}`"),
            Token::Float(v) => write!(f, "float `{v:?}`"),
            Token::Dtype(d) => write!(f, "dtype `{d}`"),
            other => write!(f, "`{}`", other.terminal_name()),
        }
    }
}

/// The diagnostics of `errors` (from one [`lex`] of `source`), in order. A `.` inside a
/// dotted name already reported whole (`torch.nn.functional.softmax`: one report for the
/// path, not one per `.`) is left out.
pub fn diagnostics(errors: &[LexError], source: &str) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::new();
    for e in errors {
        let covered = e.kind == LexErrorKind::UnknownChar(Some('.'))
            && out.last().is_some_and(|d| {
                let p = d.primary_span();
                p.start <= e.span.start && e.span.end <= p.end
            });
        if !covered {
            out.push(e.to_diagnostic(source));
        }
    }
    out
}

/// A token with its byte span, as lalrpop consumes it.
pub type SpannedToken<'src> = (usize, Token<'src>, usize);

/// Lexes all of `source`, returning every token and every lexical error (lexing
/// continues after an error, so one run reports all of them).
pub fn lex(source: &str) -> (Vec<SpannedToken<'_>>, Vec<LexError>) {
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    let mut lexer = Token::lexer(source);
    // A UTF-8 byte-order mark (which some Windows editors write) is skipped at the start of
    // the file only; spans keep counting from the file's first byte.
    if source.starts_with('\u{feff}') {
        lexer.bump('\u{feff}'.len_utf8());
    }
    while let Some(result) = lexer.next() {
        let span = lexer.span();
        match result {
            Ok(tok) => tokens.push((span.start, tok, span.end)),
            Err(kind) => errors.push(LexError {
                kind,
                span: span.into(),
            }),
        }
    }
    (tokens, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Token<'_>> {
        let (toks, errs) = lex(src);
        assert!(errs.is_empty(), "{errs:?}");
        toks.into_iter().map(|t| t.1).collect()
    }

    #[test]
    fn numbers() {
        assert_eq!(
            kinds("1 1.0 1e-6 2.5E+3 1000000.0"),
            vec![
                Token::Int(1),
                Token::Float(1.0),
                Token::Float(1e-6),
                Token::Float(2.5e3),
                Token::Float(1e6)
            ]
        );
        assert_eq!(
            kinds("x[1:2]"),
            vec![
                Token::Ident("x"),
                Token::LBracket,
                Token::Int(1),
                Token::Colon,
                Token::Int(2),
                Token::RBracket
            ]
        );
        assert_eq!(
            kinds("3-1"),
            vec![Token::Int(3), Token::Minus, Token::Int(1)]
        );
    }

    #[test]
    fn bad_numbers() {
        for src in [
            "1.",
            "1.2.3",
            "2x",
            "1e",
            "1e-",
            "0x10",
            "99999999999999999999",
            "1e999",
        ] {
            let (_, errs) = lex(src);
            assert_eq!(errs.len(), 1, "{src}: {errs:?}");
            assert!(
                matches!(errs[0].kind, LexErrorKind::MalformedNumber(_)),
                "{src}"
            );
            assert_eq!(errs[0].span, Span::new(0, src.len()), "{src}");
        }
    }

    #[test]
    fn keywords_and_idents() {
        assert_eq!(
            kinds("fn fnx f32 f32x None x^T ..."),
            vec![
                Token::Fn,
                Token::Ident("fnx"),
                Token::Dtype(DType::F32),
                Token::Ident("f32x"),
                Token::None,
                Token::Ident("x"),
                Token::Transpose,
                Token::Ellipsis
            ]
        );
    }

    #[test]
    fn comments() {
        assert_eq!(
            kinds("a /* b /* c */ d */ e // f g\ng"),
            vec![Token::Ident("a"), Token::Ident("e"), Token::Ident("g")]
        );
        let (_, errs) = lex("a /* b /* c */");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, LexErrorKind::UnterminatedComment);
    }

    #[test]
    fn byte_order_mark_is_skipped_at_the_start_only() {
        let src = "\u{feff}step s";
        let (toks, errs) = lex(src);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(toks[0], (3, Token::Step, 7));
        let (_, errs) = lex("step \u{feff}s");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, LexErrorKind::UnknownChar(Some('\u{feff}')));
    }

    #[test]
    fn pytorch_methods_become_calls() {
        let hint = |src: &str| {
            let (_, errs) = lex(src);
            let ds = diagnostics(&errs, src);
            assert_eq!(ds.len(), 1, "{src}: {ds:?}");
            ds[0].help.clone().unwrap_or_default()
        };
        assert!(hint("x.sum(-1)").contains("`sum(x, axis: -1)`"));
        assert!(hint("x.mean(dim=0, keepdim=True)").contains("`mean(x, axis: 0, keep: true)`"));
        assert!(hint("h.float()").contains("`f32(h)`"));
        assert!(hint("x.exp()").contains("`exp(x)`"));
        assert!(hint("w.T").contains("`w^T`"));
        // Not after an expression, or not before a name: the plain message.
        assert!(hint("a + .5").contains("digits on both sides"));
        assert!(hint("x. 5").contains("digits on both sides"));
    }

    /// The issue's cases: module functions are functions of their first argument, and every
    /// method gets the spelling tessel has (or none), never a function that does not exist.
    #[test]
    fn pytorch_calls_get_the_tessel_spelling() {
        let report = |src: &str| {
            let (_, errs) = lex(src);
            let ds = diagnostics(&errs, src);
            assert_eq!(ds.len(), 1, "{src}: {ds:?}");
            ds.into_iter().next().unwrap()
        };
        let help = |src: &str| report(src).help.unwrap_or_default();
        assert_eq!(help("torch.matmul(x, w)"), "write `x @ w`");
        assert_eq!(help("F.softmax(x, dim=-1)"), "write `softmax(x, axis: -1)`");
        assert_eq!(
            help("torch.nn.functional.softmax(s, dim=-1)"),
            "write `softmax(s, axis: -1)`"
        );
        assert_eq!(help("nn.functional.silu(h)"), "write `silu(h)`");
        assert_eq!(help("np.exp(a)"), "write `exp(a)`");
        assert_eq!(help("x.view(4, 4)"), "write `reshape(x, [4, 4])`");
        assert_eq!(help("x.view((4, 4))"), "write `reshape(x, [4, 4])`");
        assert_eq!(help("x.unsqueeze(1)"), "write `x[:, None]`");
        assert_eq!(help("x.unsqueeze(-1)"), "write `x[..., None]`");
        assert_eq!(help("x.t()"), "write `x^T`");
        assert_eq!(help("s.masked_fill(m, -inf)"), "write `where(m, -inf, s)`");
        assert_eq!(help("x.clamp(-1.0, 1.0)"), "write `min(max(x, -1.0), 1.0)`");
        assert_eq!(help("x.clamp(min=0.0)"), "write `max(x, 0.0)`");
        assert_eq!(help("x.to(torch.bfloat16)"), "write `bf16(x)`");
        assert_eq!(help("x.to(dtype=torch.float32)"), "write `f32(x)`");
        assert_eq!(
            help("torch.cat([a, b], dim=-1)"),
            "write `concat(a, b, axis: -1)`"
        );
        let d = report("torch.matmul(x, w)");
        assert_eq!(
            d.message,
            "tessel has no modules: `torch.matmul` is PyTorch's"
        );
        assert_eq!(d.primary_span(), Span::new(0, 18));
        // A name with no row: the rule, no made-up function.
        let d = report("x.frobnicate(2)");
        assert_eq!(d.help, None);
        assert!(
            d.notes[0].contains("tessel has no `frobnicate`"),
            "{:?}",
            d.notes
        );
        let d = report("torch.frobnicate(x)");
        assert_eq!(d.help, None);
        assert!(report("torch.bfloat16").help.unwrap().contains("`bf16`"));
        // A reduction of everything has no one-call spelling: the row's example instead.
        let d = report("x.sum()");
        assert_eq!(d.help, None);
        assert!(d.notes[0].contains("`sum(x, axis: -1)`"), "{:?}", d.notes);
    }

    /// Every row's example becomes the row's spelling through the lexer's diagnostic, so
    /// the table (printed in docs/language.md) says what users see.
    #[test]
    fn every_hint_row_renders_its_example() {
        for row in porting::HINTS {
            let (_, errs) = lex(row.example);
            let ds = diagnostics(&errs, row.example);
            assert_eq!(ds.len(), 1, "{}: {ds:?}", row.example);
            assert_eq!(
                ds[0].help.as_deref(),
                Some(format!("write `{}`", row.tessel).as_str()),
                "{}",
                row.example
            );
        }
    }

    #[test]
    fn floor_division_is_an_error() {
        let kinds = |src: &str| {
            let (_, errs) = lex(src);
            errs.into_iter().map(|e| e.kind).collect::<Vec<_>>()
        };
        for src in [
            "let y = x // 2.0\n * 3.0;",
            "let q = n // k;",
            "let q = a[0] // (b + c)",
            "f(x // 2, y)",
            "let z = x // -1",
        ] {
            assert_eq!(kinds(src), vec![LexErrorKind::FloorDivision], "{src}");
        }
        for src in [
            "w * bf16(xf * rsqrt(var + EPS))   // Hugging Face order: cast, then weight",
            "x: bf16[T], // the input",
            "// 2.0 on its own line\nx",
            "let y = x; // 2.0",
            "let q = x @ w^T  // [T, 5120]",
            "x + // 2\n y",
            "x // note: not a division",
            "x // + bias",
            "x // a // b",
        ] {
            assert_eq!(kinds(src), vec![], "{src}");
        }
        let src = "let y = x // 2.0\n";
        let (_, errs) = lex(src);
        let d = errs[0].to_diagnostic(src);
        assert_eq!(d.code, codes::FLOOR_DIVISION_COMMENT);
        assert!(d.help.unwrap().contains("floor_divide(a, b)"));
    }

    #[test]
    fn strings() {
        assert_eq!(
            kinds("import \"lib/a b.tsl\"; from \"m.{layer}.w\" \"\""),
            vec![
                Token::Import,
                Token::Str("lib/a b.tsl"),
                Token::Semi,
                Token::From,
                Token::Str("m.{layer}.w"),
                Token::Str("")
            ]
        );
        // Not closed on its line: the error stops at the line's end and lexing goes on.
        let (toks, errs) = lex("\"abc\r\nx");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, LexErrorKind::UnterminatedString);
        assert_eq!(errs[0].span, Span::new(0, 4));
        assert_eq!(toks[0].1, Token::Ident("x"));
        let (_, errs) = lex("\"abc");
        assert_eq!(errs[0].kind, LexErrorKind::UnterminatedString);
        let (_, errs) = lex("\"a\\b\" x");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, LexErrorKind::StringEscape);
        assert_eq!(errs[0].span, Span::new(0, 5));
    }

    #[test]
    fn unknown_multibyte() {
        let src = "x ∑ y";
        let (toks, errs) = lex(src);
        assert_eq!(toks.len(), 2);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, LexErrorKind::UnknownChar(Some('∑')));
        assert_eq!(&src[errs[0].span.range()], "∑");
    }

    #[test]
    fn terminal_names_read_like_display() {
        for tok in [Token::LParen, Token::Transpose, Token::Const, Token::None] {
            assert_eq!(
                describe_terminal(&format!("{:?}", tok.terminal_name())),
                tok.to_string()
            );
        }
        assert_eq!(describe_terminal("\"identifier\""), "identifier");
    }
}
