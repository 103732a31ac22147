//! Expression evaluation: names, literals, operators, indexing, blocks and the inlining of
//! `fn` calls. Builtin calls are in `builtins.rs`.
//!
//! An expression tree is evaluated iteratively in post-order (operands left to right, then
//! the expression), so a deeply nested expression needs no stack; only `fn` inlining
//! recurses, bounded by [`super::MAX_CALL_DEPTH`].

use std::collections::HashMap;

use tessel_ir::graph::{BinaryOp as IrBinary, Op, UnaryOp as IrUnary};
use tessel_ir::{DType, TensorType, Value};
use tessel_syntax::ast::{
    self, BinaryOp, Block, Callee, Expr, ExprId, Func, IndexItem, IndexKind, LetPat, Stmt, UnaryOp,
};
use tessel_syntax::{Diagnostic, Span};

use super::lit::{fold_binary, Lit};
use super::names::children;
use super::{codes, dtype, dtype_rank, Bindings, Checker, Env, Reported, Val, MAX_CALL_DEPTH, R};

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
            return v.clone().ok_or(Reported);
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
        Err(self.error(
            Diagnostic::error(codes::UNKNOWN_NAME, format!("unknown name `{name}`"))
                .with_label(span, "not found in this scope"),
        ))
    }

    // ---- values -------------------------------------------------------------------------

    pub(crate) fn shape(&self, v: Value) -> Vec<u64> {
        self.graph.ty(v).shape.0.clone()
    }

    pub(crate) fn dtype_of(&self, v: Value) -> DType {
        self.graph.ty(v).dtype
    }

    /// A weak scalar as a `[]` constant of `dtype`, rounded to it.
    pub(crate) fn materialize(&mut self, l: Lit, dtype: DType, span: Span) -> R<Value> {
        match l.value_in(dtype) {
            Ok(value) => self.push(Op::Const { value }, TensorType::new(dtype, vec![]), span),
            Err(why) => Err(self.error(
                Diagnostic::error(
                    codes::LITERAL_RANGE,
                    format!("{} does not fit {dtype}", l.describe()),
                )
                .with_label(span, format!("this takes the dtype {dtype}"))
                .with_note(why),
            )),
        }
    }

    /// The value as one tensor: weak scalars take their default dtype; tuples and lists are
    /// errors.
    pub(crate) fn tensor(&mut self, v: Val, span: Span) -> R<Value> {
        match v {
            Val::T(v) => Ok(v),
            Val::Weak(l) => self.materialize(l, l.default_dtype(), span),
            other => {
                let what = self.describe(&other);
                Err(self.error(
                    Diagnostic::error(
                        codes::NOT_A_TENSOR,
                        format!("expected a tensor, found {what}"),
                    )
                    .with_label(span, format!("this is {what}")),
                ))
            }
        }
    }

    /// `v` converted to `dtype` (no op when it already has it).
    pub(crate) fn cast(&mut self, v: Value, dtype: DType, span: Span) -> R<Value> {
        if self.dtype_of(v) == dtype {
            return Ok(v);
        }
        let shape = self.shape(v);
        self.push(Op::Cast { arg: v }, TensorType::new(dtype, shape), span)
    }

    /// An operand (weak or tensor) as a tensor of `dtype`.
    pub(crate) fn operand(&mut self, v: Val, dtype: DType, span: Span) -> R<Value> {
        match v {
            Val::Weak(l) => self.materialize(l, dtype, span),
            other => {
                let t = self.tensor(other, span)?;
                self.cast(t, dtype, span)
            }
        }
    }

    /// `v` broadcast to `shape` (which numpy-broadcasts from `v`'s shape): leading 1s by
    /// [`Op::Reshape`], then [`Op::Broadcast`].
    pub(crate) fn broadcast_to(&mut self, v: Value, shape: &[u64], span: Span) -> R<Value> {
        let mut cur = self.shape(v);
        if cur == shape {
            return Ok(v);
        }
        let dt = self.dtype_of(v);
        let mut v = v;
        if cur.len() < shape.len() {
            let mut padded = vec![1; shape.len() - cur.len()];
            padded.extend(&cur);
            cur = padded;
            v = self.push(
                Op::Reshape { arg: v },
                TensorType::new(dt, cur.clone()),
                span,
            )?;
        }
        if cur == shape {
            return Ok(v);
        }
        self.push(
            Op::Broadcast { arg: v },
            TensorType::new(dt, shape.to_vec()),
            span,
        )
    }

    pub(crate) fn permute(&mut self, v: Value, perm: Vec<u32>, span: Span) -> R<Value> {
        if perm.iter().enumerate().all(|(i, p)| *p as usize == i) {
            return Ok(v);
        }
        let shape = self.shape(v);
        let out: Vec<u64> = perm
            .iter()
            .filter_map(|p| shape.get(*p as usize).copied())
            .collect();
        let dt = self.dtype_of(v);
        self.push(Op::Permute { arg: v, perm }, TensorType::new(dt, out), span)
    }

    pub(crate) fn reshape(&mut self, v: Value, shape: Vec<u64>, span: Span) -> R<Value> {
        if self.shape(v) == shape {
            return Ok(v);
        }
        let dt = self.dtype_of(v);
        self.push(Op::Reshape { arg: v }, TensorType::new(dt, shape), span)
    }

    /// `v[.., start .. start + len, ..]` along `axis` (no op for the full axis).
    pub(crate) fn slice(
        &mut self,
        v: Value,
        axis: usize,
        start: u64,
        len: u64,
        span: Span,
    ) -> R<Value> {
        let mut shape = self.shape(v);
        if start == 0 && shape.get(axis) == Some(&len) {
            return Ok(v);
        }
        if let Some(d) = shape.get_mut(axis) {
            *d = len;
        }
        let dt = self.dtype_of(v);
        self.push(
            Op::Slice {
                arg: v,
                axis: axis as u32,
                start,
            },
            TensorType::new(dt, shape),
            span,
        )
    }

    /// The dtype operands of different dtypes are promoted to (design §3): tensors by
    /// category (bool < i32 < floats; two different float dtypes give f32), then weak
    /// scalars join only when their category is higher (a float literal with an i32 tensor
    /// gives f32). Only weak scalars: their default dtype.
    pub(crate) fn join(&self, vals: &[&Val]) -> DType {
        let mut strong: Option<DType> = None;
        for v in vals {
            if let Val::T(t) = v {
                let d = self.dtype_of(*t);
                strong = Some(match strong {
                    None => d,
                    Some(s) if s == d => s,
                    Some(s) if dtype_rank(s) != dtype_rank(d) => {
                        if dtype_rank(s) > dtype_rank(d) {
                            s
                        } else {
                            d
                        }
                    }
                    Some(_) => DType::F32,
                });
            }
        }
        let weak_max = vals
            .iter()
            .filter_map(|v| match v {
                Val::Weak(l) => Some(*l),
                _ => None,
            })
            .max_by_key(|l| l.rank());
        match (strong, weak_max) {
            (Some(s), Some(l)) if l.rank() > dtype_rank(s) => l.default_dtype(),
            (Some(s), _) => s,
            (None, Some(l)) => l.default_dtype(),
            (None, None) => DType::F32,
        }
    }

    /// The numpy broadcast of several shapes, or a diagnostic naming them all.
    pub(crate) fn broadcast_shapes(
        &mut self,
        what: &str,
        span: Span,
        ops: &[(Vec<u64>, Span)],
    ) -> R<Vec<u64>> {
        let rank = ops.iter().map(|(s, _)| s.len()).max().unwrap_or(0);
        let mut out = vec![1u64; rank];
        let mut ok = true;
        for (s, _) in ops {
            let off = rank - s.len();
            for (i, d) in s.iter().enumerate() {
                let o = &mut out[off + i];
                if *o == 1 {
                    *o = *d;
                } else if *d != 1 && *d != *o {
                    ok = false;
                }
            }
        }
        if ok {
            return Ok(out);
        }
        let shapes: Vec<String> = ops.iter().map(|(s, _)| fmt_shape(s)).collect();
        let mut d = Diagnostic::error(
            codes::BROADCAST,
            format!(
                "shape mismatch: {what} of {} does not broadcast",
                shapes.join(" and ")
            ),
        )
        .with_label(span, "in this operation");
        for ((s, sp), text) in ops.iter().zip(&shapes) {
            let _ = s;
            d = d.with_secondary(*sp, format!("this has shape {text}"));
        }
        Err(self.error(d.with_note(
            "shapes broadcast when, aligned from the right, each pair of dims is equal or one of them is 1",
        )))
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
                Ok(Val::T(self.push(Op::Unary { op: ir, arg: x }, ty, span)?))
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
        if ir == IrBinary::Rem && self.join(&[&a.0, &b.0]).is_float() {
            // fmod is exact in IEEE arithmetic but needs a long division in the kernels,
            // which the math library does not have yet: refuse here, not in `lower`.
            return Err(self.error(
                Diagnostic::error(
                    codes::FLOAT_REM_UNSUPPORTED,
                    "`%` on float tensors is not supported yet",
                )
                .with_label(span, "a float remainder")
                .with_help("`%` works on i32 (convert with `i32(x)`); `x - d * f32(i32(x / d))` is a truncated remainder with the rounding of its steps"),
            ));
        }
        let desc = format!("`{}`", op.symbol());
        Ok(Val::T(self.elementwise(ir, &desc, span, a, b)?))
    }

    /// `a @ b`: `[.., M, K] @ [.., K, N] -> [.., M, N]` over the last two axes, leading dims
    /// broadcast (numpy `matmul` rules, without the 1-D special cases: a vector operand is
    /// written `x[None, :]` or `x[:, None]`). Operands are promoted to one float dtype.
    fn matmul(&mut self, span: Span, a: Arg, b: Arg) -> R<Value> {
        let (aspan, bspan) = (a.1, b.1);
        let dt = self.join(&[&a.0, &b.0]);
        if !dt.is_float() {
            let found = self.describe(&a.0);
            return Err(self.error(
                Diagnostic::error(
                    codes::FLOAT_REQUIRED,
                    format!("`@` needs float operands, found {dt}"),
                )
                .with_label(span, "matmul of non-float tensors")
                .with_secondary(aspan, format!("this is {found}"))
                .with_help("cast first, e.g. `f32(x) @ w`"),
            ));
        }
        let x = self.operand(a.0, dt, aspan)?;
        let y = self.operand(b.0, dt, bspan)?;
        let (sx, sy) = (self.shape(x), self.shape(y));
        for (s, sp) in [(&sx, aspan), (&sy, bspan)] {
            if s.len() < 2 {
                return Err(self.error(
                    Diagnostic::error(
                        codes::RANK,
                        format!("`@` needs operands of rank 2 or more, found {}", fmt_shape(s)),
                    )
                    .with_label(sp, format!("this has rank {}", s.len()))
                    .with_help("make a vector a matrix with `x[None, :]` (a row) or `x[:, None]` (a column)"),
                ));
            }
        }
        let (m, k) = (sx[sx.len() - 2], sx[sx.len() - 1]);
        let (k2, n) = (sy[sy.len() - 2], sy[sy.len() - 1]);
        if k != k2 {
            return Err(self.error(
                Diagnostic::error(
                    codes::BROADCAST,
                    format!(
                        "shape mismatch: `@` of {} and {}: the contracted dims differ ({k} and {k2})",
                        fmt_shape(&sx),
                        fmt_shape(&sy)
                    ),
                )
                .with_label(span, "[.., M, K] @ [.., K, N] needs the same K")
                .with_secondary(aspan, format!("K = {k} here"))
                .with_secondary(bspan, format!("K = {k2} here"))
                .with_help("a weight stored [N, K] is used as `x @ w^T`"),
            ));
        }
        let batch = self.broadcast_shapes(
            "the batch dims of `@`",
            span,
            &[
                (sx[..sx.len() - 2].to_vec(), aspan),
                (sy[..sy.len() - 2].to_vec(), bspan),
            ],
        )?;
        let with = |tail: [u64; 2]| batch.iter().copied().chain(tail).collect::<Vec<u64>>();
        let x = self.broadcast_to(x, &with([m, k]), aspan)?;
        let y = self.broadcast_to(y, &with([k, n]), bspan)?;
        self.push(
            Op::MatMul { lhs: x, rhs: y },
            TensorType::new(dt, with([m, n])),
            span,
        )
    }

    /// A binary elementwise op on two operands: promotion, casts, broadcasting.
    /// `pow` computes in a float dtype (f32 when both operands are integers or bools).
    pub(crate) fn elementwise(
        &mut self,
        op: IrBinary,
        what: &str,
        span: Span,
        a: Arg,
        b: Arg,
    ) -> R<Value> {
        let compare = matches!(
            op,
            IrBinary::Eq | IrBinary::Ne | IrBinary::Lt | IrBinary::Le | IrBinary::Gt | IrBinary::Ge
        );
        let mut dt = self.join(&[&a.0, &b.0]);
        if op == IrBinary::Pow && !dt.is_float() {
            dt = DType::F32;
        }
        if !compare && dt == DType::Bool {
            let found = self.describe(&a.0);
            return Err(self.bool_arith(what.trim_matches('`'), span, a.1, found));
        }
        let (aspan, bspan) = (a.1, b.1);
        let x = self.operand(a.0, dt, aspan)?;
        let y = self.operand(b.0, dt, bspan)?;
        let shape = self.broadcast_shapes(
            what,
            span,
            &[(self.shape(x), aspan), (self.shape(y), bspan)],
        )?;
        let rdt = if compare { DType::Bool } else { dt };
        // A result too large to index is blamed on the operator, not on the operand whose
        // broadcast would be the first tensor of that size.
        self.addressable(&TensorType::new(rdt, shape.clone()), span, None)?;
        let x = self.broadcast_to(x, &shape, aspan)?;
        let y = self.broadcast_to(y, &shape, bspan)?;
        self.push(
            Op::Binary { op, lhs: x, rhs: y },
            TensorType::new(rdt, shape),
            span,
        )
    }

    /// `op` applied to bools; `operand` (one of them) is `found`.
    fn bool_arith(&mut self, op: &str, span: Span, operand: Span, found: String) -> Reported {
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

    // ---- indexing -----------------------------------------------------------------------

    /// `base[items]`; `vals` are the evaluated slice bounds and index expressions in order.
    fn index(
        &mut self,
        span: Span,
        (base, bspan): Arg,
        items: &[IndexItem],
        vals: Vec<Arg>,
    ) -> R<Val> {
        let x = self.tensor(base, bspan)?;
        let shape = self.shape(x);
        let rank = shape.len();
        let consuming = items
            .iter()
            .filter(|i| matches!(i.kind, IndexKind::Slice { .. } | IndexKind::Expr(_)))
            .count();
        if consuming > rank {
            let ty = self.graph.ty(x).clone();
            let extra = items
                .iter()
                .filter(|i| matches!(i.kind, IndexKind::Slice { .. } | IndexKind::Expr(_)))
                .nth(rank)
                .map_or(span, |i| i.span);
            return Err(self.error(
                Diagnostic::error(
                    codes::TOO_MANY_INDICES,
                    format!("too many indices: {consuming} for a tensor of rank {rank} ({ty})"),
                )
                .with_label(extra, "no axis left for this index")
                .with_secondary(bspan, format!("this is {ty}")),
            ));
        }
        let mut vals = vals.into_iter();
        let mut cur = x;
        let mut axis = 0usize;
        let mut out_shape = Vec::new();
        for item in items {
            match &item.kind {
                IndexKind::NewAxis => out_shape.push(1),
                IndexKind::Ellipsis => {
                    for _ in 0..rank - consuming {
                        out_shape.push(shape.get(axis).copied().unwrap_or(1));
                        axis += 1;
                    }
                }
                IndexKind::Slice { start, end } => {
                    let len = shape.get(axis).copied().unwrap_or(1) as i64;
                    let mut bound = |present: bool, default: i64, this: &mut Self| -> R<i64> {
                        if !present {
                            return Ok(default);
                        }
                        let (v, s) = vals.next().ok_or(Reported)?;
                        let i = this.const_int(&v, s, "a slice bound")?;
                        let i = if i < 0 { i.saturating_add(len) } else { i };
                        Ok(i.clamp(0, len))
                    };
                    let s = bound(start.is_some(), 0, self)?;
                    let e = bound(end.is_some(), len, self)?;
                    if e <= s {
                        let ty = self.graph.ty(x).clone();
                        return Err(self.error(
                            Diagnostic::error(
                                codes::INDEX_RANGE,
                                format!("empty slice: axis {axis} of {ty} has length {len}, the slice selects {s}..{e}"),
                            )
                            .with_label(item.span, "selects nothing")
                            .with_note("every dim is at least 1"),
                        ));
                    }
                    cur = self.slice(cur, axis, s as u64, (e - s) as u64, span)?;
                    out_shape.push((e - s) as u64);
                    axis += 1;
                }
                IndexKind::Expr(_) => {
                    let (v, s) = vals.next().ok_or(Reported)?;
                    let len = shape.get(axis).copied().unwrap_or(1) as i64;
                    let i = match v {
                        Val::Weak(Lit::Int(i)) => i,
                        Val::T(t) => {
                            let ty = self.graph.ty(t).clone();
                            return Err(self.error(
                                Diagnostic::error(codes::GATHER_UNSUPPORTED, "indexing by a tensor is not supported yet")
                                    .with_label(s, format!("this index is a tensor {ty}"))
                                    .with_note("gather lands in a later version of tessel; indices must be integer constants"),
                            ));
                        }
                        other => {
                            let what = self.describe(&other);
                            return Err(self.error(
                                Diagnostic::error(
                                    codes::INTEGER_REQUIRED,
                                    format!("an index must be an integer, found {what}"),
                                )
                                .with_label(s, format!("this is {what}")),
                            ));
                        }
                    };
                    let j = if i < 0 { i.saturating_add(len) } else { i };
                    if j < 0 || j >= len {
                        let ty = self.graph.ty(x).clone();
                        return Err(self.error(
                            Diagnostic::error(
                                codes::INDEX_RANGE,
                                format!("index {i} is out of range for axis {axis} of {ty} (length {len})"),
                            )
                            .with_label(s, format!("valid indices are {} ..= {}", -len, len - 1)),
                        ));
                    }
                    cur = self.slice(cur, axis, j as u64, 1, span)?;
                    axis += 1;
                }
            }
        }
        out_shape.extend(shape.iter().skip(axis));
        Ok(Val::T(self.reshape(cur, out_shape, span)?))
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

    // ---- fn calls -----------------------------------------------------------------------

    /// Inlines a call of the `fn` `f`: binds its parameters to the arguments (unifying the
    /// symbolic dims and `...`), evaluates its body, and checks the result type.
    fn call_fn(
        &mut self,
        f: &'m Func,
        span: Span,
        pos: Vec<Arg>,
        named: &[(&ast::NamedArg, Val)],
    ) -> R<Val> {
        let name = f.name.node.as_str();
        // Each inlined call counts against the expansion bound (a fn whose body adds no
        // node still costs its call), with the callee at the end of the reported chain.
        self.call_stack.push((name.to_string(), span));
        let within = self.expand(span);
        self.call_stack.pop();
        within?;
        if let Some(i) = self.call_stack.iter().position(|(n, _)| n == name) {
            let chain: Vec<&str> = self.call_stack[i..]
                .iter()
                .map(|(n, _)| n.as_str())
                .chain([name])
                .collect();
            let mut d =
                Diagnostic::error(codes::RECURSIVE_CALL, format!("recursive call of `{name}`"))
                    .with_label(
                        span,
                        format!("`{name}` calls itself: {}", chain.join(" -> ")),
                    )
                    .with_note("fns are inlined at each call, so they cannot recurse");
            if let Some((_, outer)) = self.call_stack.get(i) {
                d = d.with_secondary(*outer, format!("`{name}` is called here first"));
            }
            return Err(self.error(d));
        }
        if self.call_stack.len() >= MAX_CALL_DEPTH {
            return Err(self.error(
                Diagnostic::error(
                    codes::CALL_DEPTH,
                    format!("fn calls nested more than {MAX_CALL_DEPTH} deep"),
                )
                .with_label(span, "this call is too deep"),
            ));
        }
        // Arguments to parameters: positional first, then by name.
        let mut slots: Vec<Option<Arg>> = vec![None; f.params.len()];
        let npos = pos.len();
        if npos > f.params.len() {
            let extra = pos.get(f.params.len()).map_or(span, |(_, s)| *s);
            return Err(self.error(
                Diagnostic::error(
                    codes::ARG_COUNT,
                    format!(
                        "`{name}` takes {} arguments, but {npos} were given",
                        f.params.len()
                    ),
                )
                .with_label(extra, "unexpected argument")
                .with_secondary(f.name.span, format!("`{name}` is declared here")),
            ));
        }
        for (slot, a) in slots.iter_mut().zip(pos) {
            *slot = Some(a);
        }
        for (n, v) in named {
            match f.params.iter().position(|p| p.name.node == n.name.node) {
                Some(i) if slots.get(i).is_some_and(|s| s.is_none()) => {
                    if let Some(s) = slots.get_mut(i) {
                        *s = Some((v.clone(), n.value_span(self.m)));
                    }
                }
                Some(_) => {
                    return Err(self.error(
                        Diagnostic::error(
                            codes::UNKNOWN_NAMED_ARG,
                            format!("argument `{}` is given twice", n.name.node),
                        )
                        .with_label(n.span, "also given by position"),
                    ))
                }
                None => {
                    let mut d = Diagnostic::error(
                        codes::UNKNOWN_NAMED_ARG,
                        format!("`{name}` has no parameter named `{}`", n.name.node),
                    )
                    .with_label(n.name.span, "unknown argument name")
                    .with_secondary(f.name.span, format!("`{name}` is declared here"));
                    if let Some(s) =
                        super::suggest(&n.name.node, f.params.iter().map(|p| p.name.node.as_str()))
                    {
                        d = d.with_help(format!("did you mean `{s}`?"));
                    }
                    return Err(self.error(d));
                }
            }
        }
        let missing: Vec<&str> = f
            .params
            .iter()
            .zip(&slots)
            .filter(|(_, s)| s.is_none())
            .map(|(p, _)| p.name.node.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(self.error(
                Diagnostic::error(
                    codes::ARG_COUNT,
                    format!(
                        "`{name}` takes {} arguments, but {} were given: missing {}",
                        f.params.len(),
                        f.params.len() - missing.len(),
                        missing
                            .iter()
                            .map(|m| format!("`{m}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_label(span, "in this call")
                .with_secondary(f.name.span, format!("`{name}` is declared here")),
            ));
        }

        let mut b = Bindings::default();
        let mut locals = Vec::new();
        let mut failed = false;
        for (p, slot) in f.params.iter().zip(slots) {
            let Some((v, aspan)) = slot else {
                return Err(Reported);
            };
            match self.bind_param(f, p, v, aspan, &mut b, failed) {
                Ok(v) => locals.push((p.name.node.clone(), Some(Val::T(v)))),
                Err(Reported) => failed = true,
            }
        }
        if failed {
            return Err(Reported);
        }
        let mut env = Env { locals, dims: b };
        self.call_stack.push((name.to_string(), span));
        let result = self.eval_block(&mut env, &f.body);
        let result = result.and_then(|v| self.conform(v, f, &env.dims, Some(span)));
        self.call_stack.pop();
        let values = result?;
        Ok(match f.ret {
            ast::RetType::Single(_) => Val::T(values.into_iter().next().ok_or(Reported)?),
            ast::RetType::Tuple(..) => Val::Tuple(values.into_iter().map(Val::T).collect()),
        })
    }

    /// Checks one argument against its parameter and extends the call's bindings.
    /// `skip_shapes` is set once an earlier argument failed (its bindings are not trusted).
    fn bind_param(
        &mut self,
        f: &Func,
        p: &ast::Param,
        v: Val,
        aspan: Span,
        b: &mut Bindings,
        skip_shapes: bool,
    ) -> R<Value> {
        let want = dtype(p.ty.dtype.node);
        let declared = super::printer_type(&p.ty);
        let x = match v {
            Val::Weak(l) if l.rank() <= dtype_rank(want) => self.materialize(l, want, aspan)?,
            Val::T(t) => t,
            other => {
                let what = self.describe(&other);
                return Err(self.error(
                    Diagnostic::error(
                        codes::DTYPE_MISMATCH,
                        format!(
                            "argument `{}` of `{}` must be {declared}, found {what}",
                            p.name.node, f.name.node
                        ),
                    )
                    .with_label(aspan, format!("this is {what}"))
                    .with_secondary(
                        p.ty.span,
                        format!("parameter `{}` is declared here", p.name.node),
                    ),
                ));
            }
        };
        let ty = self.graph.ty(x).clone();
        if ty.dtype != want {
            return Err(self.error(
                Diagnostic::error(
                    codes::DTYPE_MISMATCH,
                    format!(
                        "dtype mismatch in argument `{}` of `{}`: expected {want}, found {}",
                        p.name.node, f.name.node, ty.dtype
                    ),
                )
                .with_label(aspan, format!("this is {ty}"))
                .with_secondary(
                    p.ty.span,
                    format!("parameter `{}` is declared {declared}", p.name.node),
                )
                .with_help(format!(
                    "arguments are not converted implicitly: write `{want}(...)`"
                )),
            ));
        }
        if skip_shapes {
            return Ok(x);
        }
        let origin = format!("argument `{}` ({ty})", p.name.node);
        let shape = &ty.shape.0;
        let has_rest =
            p.ty.dims
                .first()
                .is_some_and(|d| d.kind == ast::DimKind::Rest);
        let fixed: Vec<&ast::Dim> =
            p.ty.dims
                .iter()
                .filter(|d| d.kind != ast::DimKind::Rest)
                .collect();
        let mismatch = |this: &mut Self, b: &Bindings, why: String| -> Reported {
            let expected = expected_shape(&p.ty, b);
            let mut d = Diagnostic::error(
                codes::ARG_SHAPE,
                format!(
                    "shape mismatch in argument `{}` of `{}`: expected {expected}, found {}",
                    p.name.node,
                    f.name.node,
                    fmt_shape(shape)
                ),
            )
            .with_label(aspan, format!("this has shape {}", fmt_shape(shape)))
            .with_secondary(
                p.ty.span,
                format!("parameter `{}` is declared {declared}", p.name.node),
            );
            if !why.is_empty() {
                d = d.with_note(why);
            }
            this.error(d)
        };
        let ok_rank = if has_rest {
            shape.len() >= fixed.len()
        } else {
            shape.len() == fixed.len()
        };
        if !ok_rank {
            let why = format!(
                "{declared} has {} dims{}, the argument has {}",
                fixed.len(),
                if has_rest { " after `...`" } else { "" },
                shape.len()
            );
            return Err(mismatch(self, b, why));
        }
        let lead = shape.len() - fixed.len();
        if has_rest {
            let prefix = shape.get(..lead).unwrap_or(&[]).to_vec();
            match &b.rest {
                Some((r, from)) if *r != prefix => {
                    let why = format!("`...` is {} from {from}", fmt_shape(r));
                    return Err(mismatch(self, b, why));
                }
                Some(_) => {}
                None => b.rest = Some((prefix, origin.clone())),
            }
        }
        for (d, &n) in fixed.iter().zip(shape.iter().skip(lead)) {
            match &d.kind {
                ast::DimKind::Fixed(k) if u64::try_from(*k) == Ok(n) => {}
                ast::DimKind::Fixed(_) => return Err(mismatch(self, b, String::new())),
                ast::DimKind::Symbol(s) => match b.syms.get(s) {
                    Some((m, _)) if *m == n => {}
                    Some((m, from)) => {
                        let why = format!("`{s}` is {m} from {from}");
                        return Err(mismatch(self, b, why));
                    }
                    None => {
                        b.syms.insert(s.clone(), (n, origin.clone()));
                    }
                },
                ast::DimKind::Rest => {}
            }
        }
        Ok(x)
    }
}

trait NamedArgExt {
    fn value_span(&self, m: &ast::Module) -> Span;
}

impl NamedArgExt for ast::NamedArg {
    fn value_span(&self, m: &ast::Module) -> Span {
        m.span(self.value)
    }
}

/// `[4096, 5120]`.
pub(crate) fn fmt_shape(s: &[u64]) -> String {
    let dims: Vec<String> = s.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// A declared shape with the symbols bound so far replaced by their sizes:
/// `[4096, 5120]`, or `[..., D]` where nothing is known yet.
fn expected_shape(ty: &ast::Type, b: &Bindings) -> String {
    let mut parts = Vec::new();
    for d in &ty.dims {
        match &d.kind {
            ast::DimKind::Fixed(n) => parts.push(n.to_string()),
            ast::DimKind::Symbol(s) => match b.syms.get(s) {
                Some((n, _)) => parts.push(n.to_string()),
                None => parts.push(s.clone()),
            },
            ast::DimKind::Rest => match &b.rest {
                Some((r, _)) => parts.extend(r.iter().map(u64::to_string)),
                None => parts.push("...".into()),
            },
        }
    }
    format!("[{}]", parts.join(", "))
}
