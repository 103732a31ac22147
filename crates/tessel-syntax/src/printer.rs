//! The pretty-printer: AST back to canonical source (`tessel build --emit ast`).
//!
//! Output is deterministic and re-parses to the same printed form: four-space
//! indentation, one statement per line, a blank line between items, binary
//! operators spaced, parentheses only where precedence needs them, floats in
//! Rust's shortest round-trip form (`1e-6`, `1000000.0`). Comments and the
//! original layout are not kept.
//!
//! Expressions print recursively, so printing needs stack in proportion to the
//! expression nesting depth (parsing does not).

use std::fmt::{self, Display, Formatter, Write};

use crate::ast::*;

/// Precedence of postfix operations (`x[i]`, `x^T`).
const POSTFIX: u8 = 5;
/// Precedence of prefix operations (`-x`, `!x`).
const UNARY: u8 = 4;
/// Precedence of atoms (literals, names, calls, tuples, lists).
const ATOM: u8 = 6;

/// Prints `module.exprs[id]`; made by [`Module::display_expr`].
pub struct ExprDisplay<'a> {
    module: &'a Module,
    id: ExprId,
}

impl Module {
    /// A `Display` of one expression of this module.
    pub fn display_expr(&self, id: ExprId) -> ExprDisplay<'_> {
        ExprDisplay { module: self, id }
    }
}

impl Display for ExprDisplay<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_expr(f, self.module, self.id, 0)
    }
}

fn precedence(e: &Expr) -> u8 {
    match e {
        Expr::Binary { op, .. } => op.precedence(),
        Expr::Unary { .. } => UNARY,
        Expr::Index { .. } | Expr::Transpose(_) => POSTFIX,
        _ => ATOM,
    }
}

fn comma_list<T>(
    f: &mut Formatter<'_>,
    items: &[T],
    mut each: impl FnMut(&mut Formatter<'_>, &T) -> fmt::Result,
) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        each(f, item)?;
    }
    Ok(())
}

/// Writes expression `id`, parenthesised if it binds less tightly than `min`.
fn write_expr(f: &mut Formatter<'_>, m: &Module, id: ExprId, min: u8) -> fmt::Result {
    let expr = &m.exprs[id];
    let prec = precedence(expr);
    let parens = prec < min;
    if parens {
        f.write_char('(')?;
    }
    match expr {
        Expr::Int(v) => write!(f, "{v}")?,
        Expr::Float(v) => write!(f, "{v:?}")?,
        Expr::Bool(v) => write!(f, "{v}")?,
        Expr::Name(n) => f.write_str(n)?,
        Expr::Unary { op, operand } => {
            f.write_str(op.symbol())?;
            write_expr(f, m, *operand, UNARY)?;
        }
        Expr::Binary { op, lhs, rhs } => {
            let p = op.precedence();
            // Left-associative levels take an equal-precedence left operand;
            // comparisons (level 1) do not associate at all.
            let left_min = if p == 1 { p + 1 } else { p };
            write_expr(f, m, *lhs, left_min)?;
            write!(f, " {} ", op.symbol())?;
            write_expr(f, m, *rhs, p + 1)?;
        }
        Expr::Call(call) => {
            match &call.callee {
                Callee::Name(n) => f.write_str(&n.node)?,
                Callee::Cast(d) => write!(f, "{}", d.node)?,
            }
            f.write_char('(')?;
            comma_list(f, &call.args, |f, a| write_expr(f, m, *a, 0))?;
            if !call.args.is_empty() && !call.named.is_empty() {
                f.write_str(", ")?;
            }
            comma_list(f, &call.named, |f, a| {
                write!(f, "{}: ", a.name.node)?;
                write_expr(f, m, a.value, 0)
            })?;
            f.write_char(')')?;
        }
        Expr::Index { base, items } => {
            write_expr(f, m, *base, POSTFIX)?;
            f.write_char('[')?;
            comma_list(f, items, |f, item| match &item.kind {
                IndexKind::Slice { start, end } => {
                    if let Some(s) = start {
                        write_expr(f, m, *s, 0)?;
                    }
                    f.write_char(':')?;
                    if let Some(e) = end {
                        write_expr(f, m, *e, 0)?;
                    }
                    Ok(())
                }
                IndexKind::NewAxis => f.write_str("None"),
                IndexKind::Ellipsis => f.write_str("..."),
                IndexKind::Expr(e) => write_expr(f, m, *e, 0),
            })?;
            f.write_char(']')?;
        }
        Expr::Transpose(base) => {
            write_expr(f, m, *base, POSTFIX)?;
            f.write_str("^T")?;
        }
        Expr::Tuple(es) => {
            f.write_char('(')?;
            comma_list(f, es, |f, e| write_expr(f, m, *e, 0))?;
            if es.len() == 1 {
                f.write_char(',')?;
            }
            f.write_char(')')?;
        }
        Expr::List(es) => {
            f.write_char('[')?;
            comma_list(f, es, |f, e| write_expr(f, m, *e, 0))?;
            f.write_char(']')?;
        }
    }
    if parens {
        f.write_char(')')?;
    }
    Ok(())
}

impl Display for Dim {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DimKind::Fixed(v) => write!(f, "{v}"),
            DimKind::Symbol(s) => f.write_str(s),
            DimKind::Rest => f.write_str("..."),
        }
    }
}

/// `bf16[T, 5120]`, or `f32` for a scalar.
impl Display for Type {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dtype.node)?;
        if !self.dims.is_empty() {
            f.write_char('[')?;
            comma_list(f, &self.dims, |f, d| write!(f, "{d}"))?;
            f.write_char(']')?;
        }
        Ok(())
    }
}

impl Display for RetType {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            RetType::Single(t) => write!(f, "{t}"),
            RetType::Tuple(ts, _) => {
                f.write_char('(')?;
                comma_list(f, ts, |f, t| write!(f, "{t}"))?;
                if ts.len() == 1 {
                    f.write_char(',')?;
                }
                f.write_char(')')
            }
        }
    }
}

impl Display for LetPat {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            LetPat::Name(n) => f.write_str(&n.node),
            LetPat::Tuple(ns, _) => {
                f.write_char('(')?;
                comma_list(f, ns, |f, n| f.write_str(&n.node))?;
                if ns.len() == 1 {
                    f.write_char(',')?;
                }
                f.write_char(')')
            }
        }
    }
}

/// The whole module as canonical source, items separated by blank lines.
impl Display for Module {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_char('\n')?;
            }
            match item {
                Item::Import(i) => writeln!(f, "import \"{}\";", i.path.node)?,
                Item::Const(c) => {
                    writeln!(f, "const {} = {};", c.name.node, self.display_expr(c.value))?;
                }
                Item::Func(func) => {
                    write!(f, "{} {}(", func.kind.keyword(), func.name.node)?;
                    comma_list(f, &func.params, |f, p| {
                        let inout = if p.inout.is_some() { "inout " } else { "" };
                        write!(f, "{}: {inout}{}", p.name.node, p.ty)?;
                        match &p.from {
                            Some(t) => write!(f, " from \"{}\"", t.template),
                            None => Ok(()),
                        }
                    })?;
                    writeln!(f, ") -> {} {{", func.ret)?;
                    for stmt in &func.body.stmts {
                        match stmt {
                            Stmt::Let { pat, value, .. } => {
                                writeln!(f, "    let {pat} = {};", self.display_expr(*value))?
                            }
                        }
                    }
                    writeln!(f, "    {}", self.display_expr(func.body.tail))?;
                    writeln!(f, "}}")?;
                }
            }
        }
        Ok(())
    }
}
