//! The tokenizer and token cursor shared by the graph and kernel readers.
//!
//! Tokens: words (`[A-Za-z0-9_][A-Za-z0-9_.]*`, which covers names, numbers with suffixes
//! and dotted mnemonics; a word that starts with a digit may hold an exponent sign, as in
//! `1e-7`; `..` ends a word), double-quoted strings, the punctuation `= , : [ ] { } ( ) + -`
//! and `..`. Whitespace and `//` comments separate tokens; newlines are not significant.

use super::ReadError;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Word(String),
    Str(String),
    Punct(char),
    DotDot,
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("`{w}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::DotDot => "`..`".to_string(),
            Tok::Eof => "the end of the text".to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: u32,
    pub col: u32,
}

/// A position in the text, for errors reported after parsing.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Pos {
    pub line: u32,
    pub col: u32,
}

impl Pos {
    pub fn error(self, message: impl Into<String>) -> ReadError {
        ReadError {
            line: self.line,
            col: self.col,
            message: message.into(),
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

pub(crate) fn lex(text: &str) -> Result<Vec<Token>, ReadError> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1u32, 1u32);
    // Advances over `n` characters that contain no newline.
    macro_rules! bump {
        ($n:expr) => {{
            i += $n;
            col = col.saturating_add($n as u32);
        }};
    }
    while i < chars.len() {
        let c = chars[i];
        let start = Pos { line, col };
        let push = |toks: &mut Vec<Token>, tok: Tok| {
            toks.push(Token {
                tok,
                line: start.line,
                col: start.col,
            })
        };
        if c == '\n' {
            i += 1;
            line = line.saturating_add(1);
            col = 1;
        } else if c.is_whitespace() {
            bump!(1);
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                bump!(1);
            }
        } else if c == '.' && chars.get(i + 1) == Some(&'.') {
            bump!(2);
            push(&mut toks, Tok::DotDot);
        } else if "=,:[]{}()+-".contains(c) {
            bump!(1);
            push(&mut toks, Tok::Punct(c));
        } else if c == '"' {
            bump!(1);
            let mut s = String::new();
            loop {
                let Some(&c) = chars.get(i) else {
                    return Err(start.error("unterminated string"));
                };
                match c {
                    '"' => {
                        bump!(1);
                        break;
                    }
                    '\n' => return Err(start.error("unterminated string (newline inside)")),
                    '\\' => {
                        let esc = Pos { line, col };
                        let Some(&e) = chars.get(i + 1) else {
                            return Err(start.error("unterminated string"));
                        };
                        bump!(2);
                        match e {
                            '"' => s.push('"'),
                            '\\' => s.push('\\'),
                            'n' => s.push('\n'),
                            't' => s.push('\t'),
                            'r' => s.push('\r'),
                            '0' => s.push('\0'),
                            'u' => {
                                if chars.get(i) != Some(&'{') {
                                    return Err(esc.error("expected `{` after `\\u`"));
                                }
                                bump!(1);
                                let mut hex = String::new();
                                while let Some(&h) = chars.get(i) {
                                    if h == '}' || hex.len() > 6 {
                                        break;
                                    }
                                    hex.push(h);
                                    bump!(1);
                                }
                                if chars.get(i) != Some(&'}') {
                                    return Err(esc.error("expected `}` to close `\\u{`"));
                                }
                                bump!(1);
                                let ch = u32::from_str_radix(&hex, 16)
                                    .ok()
                                    .and_then(char::from_u32)
                                    .ok_or_else(|| {
                                        esc.error(format!("`\\u{{{hex}}}` is not a character"))
                                    })?;
                                s.push(ch);
                            }
                            other => return Err(esc.error(format!("unknown escape `\\{other}`"))),
                        }
                    }
                    c => {
                        s.push(c);
                        bump!(1);
                    }
                }
            }
            push(&mut toks, Tok::Str(s));
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let numeric = c.is_ascii_digit();
            let hex = numeric && matches!(chars.get(i + 1), Some('x' | 'X' | 'f' | 'F'));
            let mut w = String::new();
            while let Some(&c) = chars.get(i) {
                if c == '.' && chars.get(i + 1) == Some(&'.') {
                    break;
                }
                let exp_sign = numeric
                    && !hex
                    && (c == '+' || c == '-')
                    && matches!(w.chars().last(), Some('e' | 'E'))
                    && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit());
                if !(is_word_char(c) || exp_sign) {
                    break;
                }
                w.push(c);
                bump!(1);
            }
            push(&mut toks, Tok::Word(w));
        } else {
            return Err(start.error(format!("unexpected character `{}`", c.escape_debug())));
        }
    }
    toks.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(toks)
}

/// A cursor over the tokens with the small parsing helpers both readers use.
pub(crate) struct Cursor {
    toks: Vec<Token>,
    at: usize,
}

impl Cursor {
    pub fn new(text: &str) -> Result<Self, ReadError> {
        Ok(Cursor {
            toks: lex(text)?,
            at: 0,
        })
    }

    pub fn peek(&self) -> &Tok {
        self.toks.get(self.at).map_or(&Tok::Eof, |t| &t.tok)
    }

    pub fn pos(&self) -> Pos {
        match self.toks.get(self.at).or(self.toks.last()) {
            Some(t) => Pos {
                line: t.line,
                col: t.col,
            },
            None => Pos { line: 1, col: 1 },
        }
    }

    pub fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.at < self.toks.len() {
            self.at += 1;
        }
        t
    }

    /// An error at the current token: "expected WHAT, found ...".
    pub fn expected(&self, what: &str) -> ReadError {
        self.pos()
            .error(format!("expected {what}, found {}", self.peek().describe()))
    }

    pub fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }

    pub fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Word(x) if x == w)
    }

    /// Consumes `c` if it is next.
    pub fn eat_punct(&mut self, c: char) -> bool {
        let yes = self.is_punct(c);
        if yes {
            self.bump();
        }
        yes
    }

    pub fn eat_word(&mut self, w: &str) -> bool {
        let yes = self.is_word(w);
        if yes {
            self.bump();
        }
        yes
    }

    pub fn punct(&mut self, c: char) -> Result<(), ReadError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{c}`")))
        }
    }

    pub fn keyword(&mut self, w: &str) -> Result<(), ReadError> {
        if self.eat_word(w) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{w}`")))
        }
    }

    pub fn dotdot(&mut self) -> Result<(), ReadError> {
        if *self.peek() == Tok::DotDot {
            self.bump();
            Ok(())
        } else {
            Err(self.expected("`..`"))
        }
    }

    /// Any word, with its position.
    pub fn word(&mut self, what: &str) -> Result<(String, Pos), ReadError> {
        let pos = self.pos();
        match self.peek() {
            Tok::Word(w) => {
                let w = w.clone();
                self.bump();
                Ok((w, pos))
            }
            _ => Err(self.expected(what)),
        }
    }

    pub fn string(&mut self, what: &str) -> Result<String, ReadError> {
        match self.peek() {
            Tok::Str(s) => {
                let s = s.clone();
                self.bump();
                Ok(s)
            }
            _ => Err(self.expected(what)),
        }
    }

    /// A name: a bare word or a quoted string.
    pub fn name(&mut self, what: &str) -> Result<String, ReadError> {
        match self.peek() {
            Tok::Str(_) => self.string(what),
            Tok::Word(_) => Ok(self.word(what)?.0),
            _ => Err(self.expected(what)),
        }
    }

    /// An unsigned decimal integer that fits in `u64`.
    pub fn u64(&mut self, what: &str) -> Result<u64, ReadError> {
        let (w, pos) = self.word(what)?;
        parse_uint(&w).ok_or_else(|| pos.error(format!("expected {what}, found `{w}`")))
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, ReadError> {
        let pos = self.pos();
        let x = self.u64(what)?;
        u32::try_from(x).map_err(|_| pos.error(format!("{what} {x} does not fit in 32 bits")))
    }

    /// An entity name `PREFIX<n>` (`v3`, `r12`, `smem0`): returns `n`.
    pub fn entity(&mut self, prefix: &str, what: &str) -> Result<(u32, Pos), ReadError> {
        let (w, pos) = self.word(what)?;
        entity_number(&w, prefix)
            .map(|n| (n, pos))
            .ok_or_else(|| pos.error(format!("expected {what}, found `{w}`")))
    }

    /// A comma-separated list in brackets, each element read by `f`.
    pub fn bracket_list<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<T, ReadError>,
    ) -> Result<Vec<T>, ReadError> {
        self.punct('[')?;
        let mut out = Vec::new();
        if self.eat_punct(']') {
            return Ok(out);
        }
        loop {
            out.push(f(self)?);
            if self.eat_punct(']') {
                return Ok(out);
            }
            self.punct(',')?;
        }
    }
}

/// `n` if `w` is `prefix` followed by decimal digits that fit in `u32`.
pub(crate) fn entity_number(w: &str, prefix: &str) -> Option<u32> {
    let digits = w.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A decimal integer (digits only) or `0x` hex.
pub(crate) fn parse_uint(w: &str) -> Option<u64> {
    if let Some(h) = w.strip_prefix("0x") {
        if h.is_empty() || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        return u64::from_str_radix(h, 16).ok();
    }
    if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    w.parse().ok()
}
