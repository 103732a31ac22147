//! Expression evaluation: names, literals, operators, indexing, blocks and the inlining of
//! `fn` calls. Builtin calls are in `builtins.rs`.
//!
//! An expression tree is evaluated iteratively in post-order (operands left to right, then
//! the expression), so a deeply nested expression needs no stack; only `fn` inlining
//! recurses, bounded by [`super::MAX_CALL_DEPTH`].

use std::collections::HashMap;

use tessel_ir::graph::{BinaryOp as IrBinary, Op, UnaryOp as IrUnary};
use tessel_ir::DType;
use tessel_syntax::ast::{self, BinaryOp, Block, Callee, Expr, ExprId, LetPat, Stmt, UnaryOp};
use tessel_syntax::{Diagnostic, Span};

use super::lit::{fold_binary, Lit};
use super::names::children;
use super::{codes, dtype, Checker, Env, Reported, Val, R};

/// An evaluated operand with the span it came from.
pub(crate) type Arg = (Val, Span);
impl<'m> Checker<'m> {
    /// Evaluates a block: its `let`s in order, then its tail.
    pub(crate) fn eval_block(&mut self, env: &mut Env, block: &Block) -> R<Val> {
        for Stmt::Let { pat, value, .. } in &block.stmts {
            let r = self.eval_expr(env, *value);
            match pat {
                LetPat::Name(n) => env.locals.push((n.node.clone(), r.ok())),
                LetPat::Tuple(names, span) => {
                    let vals = match r {
                        Ok(Val::Tuple(vs)) if vs.len() == names.len() => Some(vs),
                        Ok(v) => {
                            let what = self.describe(&v);
                            self.error(
                                Diagnostic::error(
                                    codes::TUPLE_ARITY,
                                    format!("cannot bind {what} to {} names", names.len()),
                                )
                                .with_label(self.m.span(*value), format!("this is {what}"))
                                .with_secondary(
                                    *span,
                                    format!("this pattern takes a tuple of {}", names.len()),
                                ),
                            );
                            None
                        }
                        Err(Reported) => None,
                    };
                    match vals {
                        Some(vs) => {
                            for (n, v) in names.iter().zip(vs) {
                                env.locals.push((n.node.clone(), Some(v)));
                            }
                        }
                        None => {
                            for n in names {
                                env.locals.push((n.node.clone(), None));
                            }
                        }
                    }
                }
            }
        }
        self.eval_expr(env, block.tail)
    }

    /// Evaluates the expression tree `root`.
    pub(crate) fn eval_expr(&mut self, env: &Env, root: ExprId) -> R<Val> {
        let mut results: HashMap<ExprId, R<Val>> = HashMap::new();
        let mut stack = vec![(root, false)];
        while let Some((id, ready)) = stack.pop() {
            if ready {
                let r = self.eval_node(env, id, &mut results);
                results.insert(id, r);
            } else {
                stack.push((id, true));
                for c in children(self.m.expr(id)).into_iter().rev() {
                    stack.push((c, false));
                }
            }
        }
        results.remove(&root).unwrap_or(Err(Reported))
    }

    /// Evaluates one expression whose operands are in `results`. An operand that failed
    /// makes this one fail silently (its error is already reported).
    fn eval_node(
        &mut self,
        env: &Env,
        id: ExprId,
        results: &mut HashMap<ExprId, R<Val>>,
    ) -> R<Val> {
        let m = self.m;
        let expr = m.expr(id);
        let span = m.span(id);
        let kids = children(expr);
        let mut vals = Vec::with_capacity(kids.len());
        for k in &kids {
            vals.push(results.remove(k).unwrap_or(Err(Reported))?);
        }
        let mut args = kids.iter().zip(vals).map(|(k, v)| (v, m.span(*k)));
        let mut next = || args.next().ok_or(Reported);
        match expr {
            Expr::Int(i) => Ok(Val::Weak(Lit::Int(*i))),
            Expr::Float(f) => Ok(Val::Weak(Lit::Float(*f))),
            Expr::Bool(b) => Ok(Val::Weak(Lit::Bool(*b))),
            Expr::Name(n) => self.lookup(env, n, span),
            Expr::Unary { op, .. } => {
                let a = next()?;
                self.unary(*op, span, a)
            }
            Expr::Binary { op, .. } => {
                let a = next()?;
                let b = next()?;
                self.binary(*op, span, a, b)
            }
            Expr::Call(c) if super::grad::is_grad(c) => {
                let pos: Vec<Arg> = (1..c.args.len()).map(|_| next()).collect::<R<_>>()?;
                let named: Vec<(&ast::NamedArg, Val)> = c
                    .named
                    .iter()
                    .filter(|n| n.name.node != "wrt")
                    .map(|n| next().map(|(v, _)| (n, v)))
                    .collect::<R<_>>()?;
                self.grad_call(c, span, pos, &named)
            }
            Expr::Call(c) => {
                let pos: Vec<Arg> = (0..c.args.len()).map(|_| next()).collect::<R<_>>()?;
                let named: Vec<(&ast::NamedArg, Val)> = c
                    .named
                    .iter()
                    .map(|n| next().map(|(v, _)| (n, v)))
                    .collect::<R<_>>()?;
                match &c.callee {
                    Callee::Cast(d) => {
                        self.cast_call(dtype(d.node), d.node.name(), span, pos, &named)
                    }
                    Callee::Name(name) => {
                        if super::BUILTINS.contains(&name.node.as_str()) {
                            self.builtin(&name.node, span, pos, &named)
                        } else if let Some(f) = self.funcs.get(name.node.as_str()).copied() {
                            self.call_fn(f, span, pos, &named)
                        } else {
                            // The name pass reports unknown functions before any step is built.
                            Err(Reported)
                        }
                    }
                }
            }
            Expr::Index { items, .. } => {
                let base = next()?;
                let rest: Vec<Arg> = args.collect();
                self.index(span, base, items, rest)
            }
            Expr::Transpose(_) => {
                let (v, s) = next()?;
                let x = self.tensor(v, s)?;
                let rank = self.shape(x).len();
                if rank < 2 {
                    let ty = self.graph.ty(x).clone();
                    return Err(self.error(
                        Diagnostic::error(
                            codes::RANK,
                            format!("`^T` needs at least 2 dims, found {ty}"),
                        )
                        .with_label(s, format!("this is {ty}")),
                    ));
                }
                let mut perm: Vec<u32> = (0..rank as u32).collect();
                perm.swap(rank - 2, rank - 1);
                Ok(Val::T(self.permute(x, perm, span)?))
            }
            Expr::Tuple(_) => Ok(Val::Tuple(args.map(|(v, _)| v).collect())),
            Expr::List(_) => Ok(Val::List(args.map(|(v, _)| v).collect())),
        }
    }

    fn lookup(&mut self, env: &Env, name: &str, span: Span) -> R<Val> {
        if let Some((_, v)) = env.locals.iter().rev().find(|(n, _)| n == name) {
            let v = v.clone().ok_or(Reported)?;
            self.fresh(name, &v, span)?;
            return Ok(v);
        }
        if let Some(c) = self.consts.get(name) {
            return c.map(Val::Weak).ok_or(Reported);
        }
        if let Some((n, _)) = env.dims.syms.get(name) {
            return match i64::try_from(*n) {
                Ok(n) => Ok(Val::Weak(Lit::Int(n))),
                Err(_) => Err(Reported),
            };
        }
        if let Some((_, x)) = super::CONSTANTS.iter().find(|(n, _)| *n == name) {
            return Ok(Val::Weak(Lit::Float(*x)));
        }
        Err(self.error(
            Diagnostic::error(codes::UNKNOWN_NAME, format!("unknown name `{name}`"))
                .with_label(span, "not found in this scope"),
        ))
    }

    // ---- operators ----------------------------------------------------------------------
    fn unary(&mut self, op: UnaryOp, span: Span, (v, vspan): Arg) -> R<Val> {
        match (op, v) {
            (UnaryOp::Neg, Val::Weak(l)) => match l {
                Lit::Int(i) => i
                    .checked_neg()
                    .map(|i| Val::Weak(Lit::Int(i)))
                    .ok_or_else(|| {
                        self.const_error(span, format!("-({i}) overflows a 64-bit integer"))
                    }),
                Lit::Float(f) => Ok(Val::Weak(Lit::Float(-f))),
                Lit::Bool(_) => Err(self.bool_arith("-", span, vspan, "a bool constant".into())),
            },
            (UnaryOp::Not, Val::Weak(Lit::Bool(b))) => Ok(Val::Weak(Lit::Bool(!b))),
            (UnaryOp::Not, Val::Weak(l)) => Err(self.error(
                Diagnostic::error(
                    codes::BOOL_REQUIRED,
                    format!("`!` needs a bool, found {}", l.describe()),
                )
                .with_label(vspan, "not a bool"),
            )),
            (op, v) => {
                let x = self.tensor(v, vspan)?;
                let ty = self.graph.ty(x).clone();
                let ir = match op {
                    UnaryOp::Neg if ty.dtype == DType::Bool => {
                        return Err(self.bool_arith("-", span, vspan, format!("{ty}")));
                    }
                    UnaryOp::Neg => IrUnary::Neg,
                    UnaryOp::Not if ty.dtype != DType::Bool => {
                        return Err(self.error(
                            Diagnostic::error(
                                codes::BOOL_REQUIRED,
                                format!("`!` needs a bool tensor, found {ty}"),
                            )
                            .with_label(vspan, format!("this is {ty}"))
                            .with_help("compare to get a mask, e.g. `x != 0.0`"),
                        ));
                    }
                    UnaryOp::Not => IrUnary::Not,
                };
                Ok(Val::T(self.build(
                    Op::Unary { op: ir, arg: x },
                    None,
                    span,
                )?))
            }
        }
    }

    fn binary(&mut self, op: BinaryOp, span: Span, a: Arg, b: Arg) -> R<Val> {
        if op == BinaryOp::MatMul {
            return self.matmul(span, a, b).map(Val::T);
        }
        if let (Val::Weak(x), Val::Weak(y)) = (&a.0, &b.0) {
            return match fold_binary(op, *x, *y) {
                Ok(l) => Ok(Val::Weak(l)),
                Err(why) if x.rank() == 0 && y.rank() == 0 => {
                    Err(self.bool_arith(op.symbol(), span, a.1, why))
                }
                Err(why) => Err(self.const_error(span, why)),
            };
        }
        let ir = match op {
            BinaryOp::Eq => IrBinary::Eq,
            BinaryOp::Ne => IrBinary::Ne,
            BinaryOp::Lt => IrBinary::Lt,
            BinaryOp::Le => IrBinary::Le,
            BinaryOp::Gt => IrBinary::Gt,
            BinaryOp::Ge => IrBinary::Ge,
            BinaryOp::Add => IrBinary::Add,
            BinaryOp::Sub => IrBinary::Sub,
            BinaryOp::Mul => IrBinary::Mul,
            BinaryOp::Div => IrBinary::Div,
            BinaryOp::Rem | BinaryOp::MatMul => IrBinary::Rem,
        };
        if ir == IrBinary::Rem {
            // `%` is `torch.remainder` (the divisor's sign), as in Python and PyTorch.
            return Ok(Val::T(self.remainder("`%`", span, a, b)?));
        }
        let desc = format!("`{}`", op.symbol());
        if let Some(v) = self.scalar_arith(ir, &desc, span, &a, &b)? {
            return Ok(Val::T(v));
        }
        Ok(Val::T(self.elementwise(ir, &desc, span, a, b)?))
    }

    /// `op` applied to bools; `operand` (one of them) is `found`.
    pub(crate) fn bool_arith(
        &mut self,
        op: &str,
        span: Span,
        operand: Span,
        found: String,
    ) -> Reported {
        self.error(
            Diagnostic::error(
                codes::BOOL_ARITHMETIC,
                format!("`{op}` is not defined on bool"),
            )
            .with_label(span, "arithmetic on bools")
            .with_secondary(operand, format!("this is {found}"))
            .with_help("convert first, e.g. `i32(mask)`"),
        )
    }

    pub(crate) fn const_error(&mut self, span: Span, why: String) -> Reported {
        self.error(
            Diagnostic::error(
                codes::CONST_EVAL,
                format!("constant arithmetic failed: {why}"),
            )
            .with_label(span, "evaluated at compile time"),
        )
    }

    /// `f32(x)` and the other casts.
    fn cast_call(
        &mut self,
        to: DType,
        name: &str,
        span: Span,
        pos: Vec<Arg>,
        named: &[(&ast::NamedArg, Val)],
    ) -> R<Val> {
        self.check_args(name, span, &pos, named, 1, Some(1), &[])?;
        let Some((v, vspan)) = pos.into_iter().next() else {
            return Err(Reported);
        };
        match v {
            // A literal is rounded straight to the target (no double rounding through f32);
            // a float literal to i32 converts like the op (through f32, truncating).
            Val::Weak(l) if !(to == DType::I32 && l.rank() == 2) => {
                Ok(Val::T(self.materialize(l, to, span)?))
            }
            other => {
                let x = self.tensor(other, vspan)?;
                Ok(Val::T(self.cast(x, to, span)?))
            }
        }
    }

    /// A compile-time integer (an axis, a count, a bound).
    pub(crate) fn const_int(&mut self, v: &Val, span: Span, what: &str) -> R<i64> {
        match v {
            Val::Weak(Lit::Int(i)) => Ok(*i),
            other => {
                let found = self.describe(other);
                let code = if matches!(other, Val::Weak(_)) {
                    codes::INTEGER_REQUIRED
                } else {
                    codes::NOT_CONSTANT
                };
                Err(self.error(
                    Diagnostic::error(
                        code,
                        format!("{what} must be a compile-time integer, found {found}"),
                    )
                    .with_label(span, format!("this is {found}")),
                ))
            }
        }
    }
}

/// `[4096, 5120]`.
pub(crate) fn fmt_shape(s: &[u64]) -> String {
    let dims: Vec<String> = s.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}
