//! The parse entry point: lex, run the lalrpop parser, and turn every error
//! into a [`Diagnostic`].
//!
//! The generated parser (from `grammar.lalrpop`) is fed the token vector
//! produced by [`crate::lexer::lex`]; its actions allocate into a [`Builder`]
//! that owns the expression arena and collects the syntactic checks made during
//! reductions (argument order, duplicate named arguments, `...` placement). If
//! lexing fails, all lexical errors are reported and the parser is not run.
//! Otherwise the parser stops at the first grammar error (no recovery), which
//! is reported together with any earlier check failures.

use lalrpop_util::ParseError;

use crate::ast::{
    Block, Call, Callee, DimKind, Expr, ExprId, Func, FuncKind, Ident, IndexItem, IndexKind, Item,
    Module, NamedArg, Param, RetType, TensorName,
};
use crate::diagnostic::{codes, Diagnostic};
use crate::lexer::{describe_terminal, lex, LexError, SpannedToken, Token};
use crate::span::Span;

#[allow(
    clippy::all,
    clippy::pedantic,
    unused_qualifications,
    unused_parens,
    missing_docs,
    dead_code
)]
mod generated {
    lalrpop_util::lalrpop_mod!(pub grammar);
}

/// One call argument as written, before positional and named are separated.
pub(crate) enum Arg {
    Positional(ExprId),
    Named(NamedArg),
}

/// The arena the grammar's actions allocate into, plus the checks they report.
#[derive(Default)]
pub(crate) struct Builder {
    module: Module,
    errors: Vec<Diagnostic>,
}

impl Builder {
    pub(crate) fn expr(&mut self, expr: Expr, l: usize, r: usize) -> ExprId {
        let id = self.module.exprs.push(expr);
        self.module.expr_spans[id] = Span::new(l, r);
        id
    }

    pub(crate) fn call(&mut self, callee: Callee, args: Vec<Arg>, span: Span) -> ExprId {
        let mut positional = Vec::new();
        let mut named: Vec<NamedArg> = Vec::new();
        for arg in args {
            match arg {
                Arg::Positional(e) => {
                    if let Some(first) = named.first() {
                        let e_span = self.module.expr_spans[e];
                        self.errors.push(
                            Diagnostic::error(
                                codes::POSITIONAL_AFTER_NAMED,
                                "positional argument after a named argument",
                            )
                            .with_label(e_span, "positional argument")
                            .with_secondary(first.span, "named arguments start here")
                            .with_help("put positional arguments first: `f(x, y, axis: -1)`"),
                        );
                    }
                    positional.push(e);
                }
                Arg::Named(a) => {
                    if let Some(prev) = named.iter().find(|p| p.name.node == a.name.node) {
                        self.errors.push(
                            Diagnostic::error(
                                codes::DUPLICATE_NAMED_ARG,
                                format!("named argument `{}` given twice", a.name.node),
                            )
                            .with_label(a.name.span, "given again here")
                            .with_secondary(prev.name.span, "first given here"),
                        );
                    }
                    named.push(a);
                }
            }
        }
        let (l, r) = (span.start, span.end);
        self.expr(
            Expr::Call(Call {
                callee,
                args: positional,
                named,
            }),
            l,
            r,
        )
    }

    pub(crate) fn index(&mut self, base: ExprId, items: Vec<IndexItem>, span: Span) -> ExprId {
        let mut ellipses = items.iter().filter(|i| i.kind == IndexKind::Ellipsis);
        if let (Some(first), Some(second)) = (ellipses.next(), ellipses.next()) {
            self.errors.push(
                Diagnostic::error(
                    codes::MULTIPLE_ELLIPSIS_INDEX,
                    "an index may contain at most one `...`",
                )
                .with_label(second.span, "second `...`")
                .with_secondary(first.span, "first `...`"),
            );
        }
        self.expr(Expr::Index { base, items }, span.start, span.end)
    }

    pub(crate) fn func(
        &mut self,
        kind: FuncKind,
        name: Ident,
        params: Vec<Param>,
        ret: RetType,
        body: Block,
        span: Span,
    ) -> Func {
        let types = params.iter().map(|p| &p.ty).chain(ret.types());
        for ty in types {
            for (i, dim) in ty.dims.iter().enumerate() {
                if dim.kind != DimKind::Rest {
                    continue;
                }
                let d = Diagnostic::error(
                    codes::MISPLACED_ELLIPSIS_DIM,
                    format!(
                        "`...` is not allowed here in `{} {}`",
                        kind.keyword(),
                        name.node
                    ),
                );
                if kind == FuncKind::Step {
                    self.errors.push(
                        d.with_label(dim.span, "rank-polymorphic dim in a step")
                            .with_note("a step's dims must be integers or symbols bound with `--dim NAME=VALUE`")
                            .with_help("move the rank-polymorphic code into a `fn` and call it from the step"),
                    );
                } else if i != 0 {
                    self.errors.push(
                        d.with_label(dim.span, "`...` must be the first dim")
                            .with_secondary(ty.span, "in this type")
                            .with_note(
                                "`...` stands for any number of leading dims, e.g. `bf16[..., D]`",
                            ),
                    );
                }
            }
        }
        for p in &params {
            if let (Some(kw), FuncKind::Fn) = (p.inout, kind) {
                self.errors.push(
                    Diagnostic::error(
                        codes::INOUT_ON_FN_PARAM,
                        format!(
                            "`inout` on parameter `{}` of `fn {}`",
                            p.name.node, name.node
                        ),
                    )
                    .with_label(kw, "only a step's parameters are updated in place")
                    .with_note(
                        "a fn is inlined: it takes the tensor to update from its caller and \
                         returns what `update` gives",
                    )
                    .with_help("declare the parameter `inout` on the step that passes it"),
                );
            }
            let Some(from) = &p.from else { continue };
            if kind == FuncKind::Fn {
                self.errors.push(
                    Diagnostic::error(
                        codes::FROM_ON_FN_PARAM,
                        format!(
                            "`from` on parameter `{}` of `fn {}`",
                            p.name.node, name.node
                        ),
                    )
                    .with_label(from.span, "only a step's parameters come from a checkpoint")
                    .with_note("a fn takes its tensors from its caller")
                    .with_help(
                        "declare the tensor name on the parameter of the step that passes it",
                    ),
                );
            }
            self.check_tensor_name(from);
        }
        Func {
            kind,
            name,
            params,
            ret,
            body,
            span,
        }
    }

    /// A tensor-name template must name something and hold no placeholder but `{layer}`.
    fn check_tensor_name(&mut self, from: &TensorName) {
        if from.template.is_empty() {
            self.errors.push(
                Diagnostic::error(codes::BAD_TENSOR_NAME, "empty tensor name")
                    .with_label(from.span, "names no tensor")
                    .with_note("write the checkpoint's name, e.g. `\"model.norm.weight\"`"),
            );
        }
        // Inside the quotes a byte of the template is a byte of the source (no escapes).
        let start = from.span.start + 1;
        for r in TensorName::bad_braces(&from.template) {
            let text = &from.template[r.clone()];
            let what = if text.len() > 2 && text.ends_with('}') {
                format!("unknown placeholder `{text}` in a tensor name")
            } else {
                format!("unmatched `{}` in a tensor name", &text[..1])
            };
            self.errors.push(
                Diagnostic::error(codes::BAD_TENSOR_NAME, what)
                    .with_label(Span::new(start + r.start, start + r.end), "not `{layer}`")
                    .with_note(
                        "`{layer}` is the only placeholder: the layer number `--layer N` gives",
                    ),
            );
        }
    }
}

/// Parses one source file.
///
/// Returns the module, or every diagnostic found: all lexical errors if there
/// are any; otherwise the first grammar error together with any syntactic check
/// that failed before it (sorted by position). Never panics, whatever the input.
/// Render the diagnostics with [`Diagnostic::render`] against the same `source`.
///
/// `import` items are kept as written, not followed: [`crate::load`] reads a file and the
/// files it imports.
pub fn parse(source: &str) -> Result<Module, Vec<Diagnostic>> {
    let mut module = Module::default();
    module.items = parse_items(source, 0, &mut module)?;
    Ok(module)
}

/// Parses one file of several: its expressions go into `module`'s arena (beside those of
/// the files parsed before) and its items are returned. Every span, in the items and in the
/// diagnostics, is `base` plus the byte offset in `source`: the global offsets of a
/// [`crate::SourceMap`], where this file starts at `base`. Errors as [`parse`].
pub fn parse_items(
    source: &str,
    base: usize,
    module: &mut Module,
) -> Result<Vec<Item>, Vec<Diagnostic>> {
    let (tokens, lex_errors) = lex(source);
    if !lex_errors.is_empty() {
        return Err(crate::lexer::diagnostics(&lex_errors, source)
            .into_iter()
            .map(|d| d.shifted(base))
            .collect());
    }
    let mut builder = Builder {
        module: std::mem::take(module),
        errors: Vec::new(),
    };
    let global = tokens
        .iter()
        .map(|&(l, t, r)| Ok::<_, LexError>((l + base, t, r + base)));
    let result = generated::grammar::ModuleParser::new().parse(&mut builder, global);
    *module = builder.module;
    let mut errors = builder.errors;
    match result {
        Ok(items) if errors.is_empty() => Ok(items),
        Ok(_) => Err(errors),
        Err(e) => {
            // The hints read the source around the error: work in file offsets, then shift.
            let local = e.map_location(|l| l - base);
            errors.push(parse_error_to_diagnostic(local, &tokens, source).shifted(base));
            errors.sort_by_key(|d| d.primary_span().start);
            Err(errors)
        }
    }
}

type LalrpopError<'src> = ParseError<usize, Token<'src>, LexError>;

/// Maps each lalrpop error variant to a diagnostic (see [`codes`]).
fn parse_error_to_diagnostic(
    err: LalrpopError<'_>,
    tokens: &[SpannedToken<'_>],
    source: &str,
) -> Diagnostic {
    match err {
        ParseError::InvalidToken { location } => {
            Diagnostic::error(codes::INVALID_TOKEN, "invalid token")
                .with_label(Span::point(location), "cannot start a token here")
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let mut d = Diagnostic::error(codes::UNEXPECTED_EOF, "unexpected end of file")
                .with_label(Span::point(location), "the file ends here");
            if let Some((span, open)) = innermost_unclosed(tokens) {
                d = d.with_secondary(span, format!("this `{open}` is never closed"));
            }
            with_expected(d, &expected)
        }
        ParseError::UnrecognizedToken {
            token: (l, tok, r),
            expected,
        } => {
            let wants = |t: &str| expected.iter().any(|e| describe_terminal(e) == t);
            if let Some(d) = porting_hint(&tok, l, r, tokens, source, wants("`:`")) {
                return d;
            }
            let span = Span::new(l, r);
            let mut d = Diagnostic::error(codes::UNEXPECTED_TOKEN, format!("unexpected {tok}"))
                .with_label(span, format!("unexpected {tok}"));
            // A missing `;` or `,` shows up at the next token, often on the next line:
            // point at the end of the previous token too.
            if let Some(prev_end) = tokens.iter().rev().map(|t| t.2).find(|&e| e <= l) {
                let gap = source.get(prev_end..l).unwrap_or("");
                if gap.contains('\n') {
                    if wants("`;`") {
                        d = d.with_secondary(Span::point(prev_end), "`;` may be missing here");
                    } else if wants("`,`") {
                        d = d.with_secondary(Span::point(prev_end), "`,` may be missing here");
                    }
                }
            }
            if tok == Token::Inout {
                d = d.with_help(
                    "`inout` goes between a step parameter's `:` and its type: `cache: inout bf16[B, S, 128]`",
                );
            }
            if tok == Token::RBrace && wants("`let`") {
                d = d.with_help("a body ends with its result expression, after the last `let`");
            }
            if matches!(
                tok,
                Token::Lt | Token::Le | Token::Gt | Token::Ge | Token::EqEq | Token::NotEq
            ) && !wants("`<`")
            {
                d = d.with_help("comparisons do not chain; use parentheses, e.g. `(a < b) == c`");
            }
            with_expected(d, &expected)
        }
        ParseError::ExtraToken { token: (l, tok, r) } => Diagnostic::error(
            codes::EXTRA_TOKEN,
            format!("unexpected {tok} after the end of the program"),
        )
        .with_label(Span::new(l, r), "extra token"),
        ParseError::User { error } => error.to_diagnostic(source),
    }
}

/// A grammar error that is what PyTorch code would say, with the tessel spelling: `a ** b`
/// (there is no power operator) and `f(x, dim=-1)` (named arguments are `name: value`).
/// `wants_colon` says the parser would have taken a `:` here, as after a named argument's
/// name.
fn porting_hint(
    tok: &Token<'_>,
    l: usize,
    r: usize,
    tokens: &[SpannedToken<'_>],
    source: &str,
    wants_colon: bool,
) -> Option<Diagnostic> {
    let at = tokens.iter().position(|t| t.0 == l)?;
    let prev = at.checked_sub(1).and_then(|i| tokens.get(i));
    let text = |t: &SpannedToken<'_>| source.get(t.0..t.2).unwrap_or("");
    match (tok, prev) {
        (Token::Star, Some(&(pl, Token::Star, pr))) if pr == l => {
            let base = at
                .checked_sub(2)
                .and_then(|i| tokens.get(i))
                .filter(|t| matches!(t.1, Token::Ident(_) | Token::RParen | Token::RBracket));
            let (base, stand_in) = match base {
                Some(t @ (_, Token::Ident(_), _)) => (text(t), false),
                _ => ("a", true),
            };
            let exp = tokens.get(at + 1);
            let help = match exp.map(|t| &t.1) {
                Some(Token::Int(2)) => {
                    format!("write `pow({base}, 2.0)`, or `{base} * {base}` for a square")
                }
                Some(Token::Int(n)) => format!("write `pow({base}, {n}.0)`"),
                Some(Token::Float(_)) => {
                    format!("write `pow({base}, {})`", exp.map(text).unwrap_or("y"))
                }
                _ => format!("write `pow({base}, y)` for `{base} ** y`"),
            };
            let d = Diagnostic::error(codes::UNEXPECTED_TOKEN, "tessel has no `**` operator")
                .with_label(Span::new(pl, r), "a power, as in Python")
                .with_help(help);
            Some(if stand_in {
                d.with_note("`a` stands for the left operand of `**`")
            } else {
                d
            })
        }
        (Token::Assign, Some(&(nl, Token::Ident(n), _))) if wants_colon => {
            // The value: the tokens up to the next `,` or `)` outside brackets.
            let mut depth = 0usize;
            let mut end = r;
            for t in tokens.iter().skip(at + 1) {
                match t.1 {
                    Token::LParen | Token::LBracket => depth += 1,
                    Token::RParen | Token::RBracket | Token::Comma if depth == 0 => break,
                    Token::RParen | Token::RBracket => depth -= 1,
                    _ => {}
                }
                end = t.2;
            }
            let value = source.get(r..end).unwrap_or("").trim();
            let value = match value {
                "True" => "true",
                "False" => "false",
                "" => "...",
                v => v,
            };
            let d = Diagnostic::error(
                codes::UNEXPECTED_TOKEN,
                "named arguments are written `name: value`",
            )
            .with_label(Span::new(nl, r), "`name=value`, as in Python");
            Some(match n {
                "dim" => d.with_help(format!(
                    "write `axis: {value}`: PyTorch's `dim` is `axis` in tessel"
                )),
                "keepdim" => d.with_help(format!(
                    "write `keep: {value}`: PyTorch's `keepdim` is `keep` in tessel"
                )),
                _ => d.with_help(format!("write `{n}: {value}`")),
            })
        }
        _ => None,
    }
}

/// Tokens that can start an expression, in the order they are listed.
const EXPR_START: &[&str] = &[
    "identifier",
    "integer literal",
    "float literal",
    "`true`",
    "`false`",
    "dtype",
    "`(`",
    "`[`",
    "`-`",
    "`!`",
];

/// Infix operators.
const OPERATORS: &[&str] = &[
    "`==`", "`!=`", "`<`", "`<=`", "`>`", "`>=`", "`+`", "`-`", "`*`", "`/`", "`%`", "`@`",
];

/// Readable "expected" list: terminals described like [`Token`]'s `Display`,
/// with the full set of expression starters shown as "an expression" and the
/// full set of infix operators as "an operator".
pub fn describe_expected(expected: &[String]) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for e in expected {
        let d = describe_terminal(e);
        if !items.contains(&d) {
            items.push(d);
        }
    }
    let has_all = |set: &[&str], items: &[String]| set.iter().all(|s| items.iter().any(|i| i == s));
    let mut out = Vec::new();
    let expr = has_all(EXPR_START, &items);
    let ops = has_all(OPERATORS, &items);
    for item in items {
        let covered = (expr && EXPR_START.contains(&item.as_str()))
            || (ops && OPERATORS.contains(&item.as_str()));
        if !covered {
            out.push(item);
        }
    }
    if expr {
        out.push("an expression".to_string());
    }
    if ops {
        out.push("an operator".to_string());
    }
    out
}

fn with_expected(d: Diagnostic, expected: &[String]) -> Diagnostic {
    let items = describe_expected(expected);
    match items.as_slice() {
        [] => d,
        [one] => d.with_note(format!("expected {one}")),
        many => d.with_note(format!("expected one of {}", many.join(", "))),
    }
}

/// The innermost `(`, `[` or `{` still open at the end of `tokens`.
fn innermost_unclosed(tokens: &[SpannedToken<'_>]) -> Option<(Span, &'static str)> {
    let mut stack: Vec<(Span, &'static str)> = Vec::new();
    for &(l, ref tok, r) in tokens {
        match tok {
            Token::LParen => stack.push((Span::new(l, r), "(")),
            Token::LBracket => stack.push((Span::new(l, r), "[")),
            Token::LBrace => stack.push((Span::new(l, r), "{")),
            Token::RParen | Token::RBracket | Token::RBrace => {
                stack.pop();
            }
            _ => {}
        }
    }
    stack.pop()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::DType;
    use crate::lexer::LexErrorKind;

    /// One token of every variant.
    fn every_token() -> Vec<Token<'static>> {
        use Token::*;
        vec![
            Const,
            Fn,
            Step,
            Let,
            Import,
            From,
            Inout,
            None,
            True,
            False,
            Dtype(DType::F32),
            Ident("x"),
            Str("x"),
            Int(1),
            Float(1.0),
            LParen,
            RParen,
            LBracket,
            RBracket,
            LBrace,
            RBrace,
            Comma,
            Semi,
            Colon,
            Assign,
            Arrow,
            Ellipsis,
            EqEq,
            NotEq,
            Lt,
            Le,
            Gt,
            Ge,
            Plus,
            Minus,
            Star,
            Slash,
            Percent,
            At,
            Bang,
            Transpose,
        ]
    }

    /// The grammar's `extern` block and `Token::terminal_name` agree, one for one.
    #[test]
    fn extern_block_matches_token_enum() {
        let grammar = include_str!("grammar.lalrpop");
        let mut pairs = Vec::new();
        for line in grammar.lines() {
            let line = line.trim();
            if let Some((name, pattern)) = line.split_once(" => Token::") {
                let name = name.trim_matches('"');
                let variant = pattern.split(['(', ',']).next().unwrap_or("");
                pairs.push((name.to_string(), variant.to_string()));
            }
        }
        let tokens = every_token();
        assert_eq!(pairs.len(), tokens.len(), "{pairs:?}");
        for tok in tokens {
            let variant = format!("{tok:?}");
            let variant = variant.split('(').next().unwrap_or("");
            let (name, _) = pairs
                .iter()
                .find(|(_, v)| v == variant)
                .unwrap_or_else(|| panic!("{variant} missing from the extern block"));
            assert_eq!(name, tok.terminal_name(), "{variant}");
        }
    }

    /// A file parsed at `base` has every span, and every diagnostic, `base` bytes on; its
    /// expressions join the arena after those already there.
    #[test]
    fn parse_items_places_a_file_at_its_base() {
        let src = "const A = 1;\nstep s(x: f32[2] from \"w.{layer}\") -> f32[2] { x * A }\n";
        let alone = crate::parse(src).unwrap();
        let mut m = crate::parse("const B = 2 + 3;").unwrap();
        let before = m.exprs.len();
        let items = parse_items(src, 100, &mut m).unwrap();
        assert_eq!(m.exprs.len(), before + alone.exprs.len());
        for (a, b) in alone.items.iter().zip(&items) {
            assert_eq!(a.span().start + 100, b.span().start);
            assert_eq!(a.span().end + 100, b.span().end);
        }
        let Item::Func(f) = &items[1] else { panic!() };
        let from = f.params[0].from.as_ref().unwrap();
        assert_eq!(
            &src[from.span.start - 100..from.span.end - 100],
            "\"w.{layer}\""
        );
        assert_eq!(from.resolve(Some(3)).as_deref(), Some("w.3"));
        assert_eq!(from.resolve(None), None);
        let tail = f.body.tail;
        assert_eq!(m.span(tail).start, 100 + src.find("x * A").unwrap());
        // Lexer, grammar and builder errors alike.
        for bad in ["fn f(", "step s(x: f32 from \"{k}\") -> f32 { x }", "x $"] {
            let local = crate::parse(bad).unwrap_err();
            let global = parse_items(bad, 100, &mut Module::default()).unwrap_err();
            assert_eq!(global.len(), local.len(), "{bad}");
            for (l, g) in local.iter().zip(&global) {
                assert_eq!(l.clone().shifted(100), *g, "{bad}");
            }
        }
    }

    /// Every lalrpop error variant becomes a labelled diagnostic.
    #[test]
    fn every_parse_error_variant_maps() {
        let source = "fn f(";
        let tokens = lex(source).0;
        let quoted = |s: &str| format!("{s:?}");
        let errors: Vec<(LalrpopError<'_>, &str)> = vec![
            (
                ParseError::InvalidToken { location: 2 },
                codes::INVALID_TOKEN,
            ),
            (
                ParseError::UnrecognizedEof {
                    location: 5,
                    expected: vec![quoted(")"), quoted("identifier")],
                },
                codes::UNEXPECTED_EOF,
            ),
            (
                ParseError::UnrecognizedToken {
                    token: (3, Token::Ident("f"), 4),
                    expected: vec![quoted("(")],
                },
                codes::UNEXPECTED_TOKEN,
            ),
            (
                ParseError::ExtraToken {
                    token: (4, Token::LParen, 5),
                },
                codes::EXTRA_TOKEN,
            ),
            (
                ParseError::User {
                    error: LexError {
                        kind: LexErrorKind::UnknownChar(Some('$')),
                        span: Span::new(0, 1),
                    },
                },
                codes::UNKNOWN_CHAR,
            ),
        ];
        for (err, code) in errors {
            let d = parse_error_to_diagnostic(err, &tokens, source);
            assert_eq!(d.code, code);
            assert!(d.labels.iter().any(|l| l.primary));
            let _ = d.render("t.tsl", source, false);
        }
        let eof = parse_error_to_diagnostic(
            ParseError::UnrecognizedEof {
                location: 5,
                expected: vec![quoted(")"), quoted("identifier")],
            },
            &tokens,
            source,
        );
        assert_eq!(
            eof.notes,
            vec!["expected one of `)`, identifier".to_string()]
        );
        assert_eq!(eof.labels[1].message, "this `(` is never closed");
    }
}
