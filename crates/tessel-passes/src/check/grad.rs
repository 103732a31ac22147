//! `grad(f, args.., wrt: [p, ..], grad_output: dy)`: the gradient of a `fn`'s result with
//! respect to some of its parameters (reverse mode, design §13).
//!
//! The call inlines `f(args..)` as any call does, then makes one [`Op::Grad`] placeholder per
//! name in `wrt`: the gradient of `Σ ⟨grad_output, f(args..)⟩` with respect to the
//! argument bound to that parameter, of its type. The `grad` pass (after `attention`)
//! replaces the placeholders with the backward graph. Here the call is checked so that the
//! pass cannot fail on it: `f` is a `fn` (or a step without `inout` parameters); every `wrt`
//! name is one of its parameters, bound to a float tensor; the result is float tensors; the
//! upstream gradient has the result's types, or the result is a scalar (one element) and
//! the upstream gradient is 1; each parameter reaches the result through float values; the
//! forward holds no other `grad`.

use tessel_ir::graph::Op;
use tessel_ir::{TensorType, Value};
use tessel_syntax::ast::{self, Callee, Expr, FuncKind, NamedArg};
use tessel_syntax::{Diagnostic, Span};

use super::eval::Arg;
use super::{codes, Checker, Val, R};

/// True for a call of the builtin `grad`, whose first argument names a function and whose
/// `wrt:` names its parameters: neither is an expression of the caller's scope.
pub(crate) fn is_grad(c: &ast::Call) -> bool {
    matches!(&c.callee, Callee::Name(n) if n.node == "grad")
}

impl<'m> Checker<'m> {
    /// Checks and builds `grad(...)`: `pos` are the arguments after the function's name,
    /// `named` the named arguments but `wrt:`, evaluated.
    pub(crate) fn grad_call(
        &mut self,
        c: &'m ast::Call,
        span: Span,
        mut pos: Vec<Arg>,
        named: &[(&'m NamedArg, Val)],
    ) -> R<Val> {
        let m = self.m;
        // The function.
        let Some(&fid) = c.args.first() else {
            return Err(self.error(
                Diagnostic::error(
                    codes::ARG_COUNT,
                    "`grad` needs the function to differentiate",
                )
                .with_label(span, "no function given")
                .with_help("write `grad(f, x, w, wrt: [w])`"),
            ));
        };
        let fspan = m.span(fid);
        let fname = match m.expr(fid) {
            Expr::Name(n) => n.clone(),
            _ => {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_NOT_A_FN,
                        "the first argument of `grad` must name a fn",
                    )
                    .with_label(fspan, "this is not a function's name")
                    .with_help("write `grad(f, x, w, wrt: [w])` for a `fn f(x, w)`"),
                ))
            }
        };
        let Some(f) = self.funcs.get(fname.as_str()).copied() else {
            let mut d = Diagnostic::error(
                codes::GRAD_NOT_A_FN,
                format!("`grad` of `{fname}`, which is not a fn of this module"),
            )
            .with_label(fspan, "no fn or step has this name");
            if super::BUILTINS.contains(&fname.as_str()) {
                d = d.with_note(format!(
                    "`{fname}` is a builtin; `grad` differentiates a fn: wrap the expression in one"
                ));
            } else if let Some(s) = super::suggest(&fname, self.funcs.keys().copied()) {
                d = d.with_help(format!("did you mean `{s}`?"));
            }
            return Err(self.error(d));
        };
        if f.kind == FuncKind::Step && f.params.iter().any(|p| p.inout.is_some()) {
            return Err(self.error(
                Diagnostic::error(
                    codes::GRAD_NOT_A_FN,
                    format!("`grad` of the step `{fname}`, which updates a tensor in place"),
                )
                .with_label(fspan, "a step with `inout` parameters")
                .with_secondary(f.name.span, "declared here")
                .with_help("differentiate a fn that computes the values; update in the step"),
            ));
        }
        // The named arguments: `wrt:` (required) and `grad_output:`.
        let Some(wrt) = c.named.iter().find(|n| n.name.node == "wrt") else {
            return Err(self.error(
                Diagnostic::error(codes::MISSING_NAMED_ARG, "`grad` needs `wrt:`")
                    .with_label(span, "the parameters to differentiate by are not named")
                    .with_help(format!(
                        "name them: `wrt: [{}]`",
                        f.params.first().map_or("w", |p| p.name.node.as_str())
                    )),
            ));
        };
        let mut seed: Option<(Val, Span)> = None;
        for (n, v) in named {
            if n.name.node == "grad_output" {
                seed = Some((v.clone(), m.span(n.value)));
            } else {
                return Err(self.error(
                    Diagnostic::error(
                        codes::UNKNOWN_NAMED_ARG,
                        format!("`grad` takes no argument `{}`", n.name.node),
                    )
                    .with_label(n.name.span, "unknown argument name")
                    .with_note("`grad` takes the fn, its arguments, `wrt:` and `grad_output:`"),
                ));
            }
        }
        // `wrt: [p, q]`: parameters of `f`, each once.
        let items: Vec<ast::ExprId> = match m.expr(wrt.value) {
            Expr::List(items) if !items.is_empty() => items.clone(),
            Expr::Name(_) => vec![wrt.value],
            _ => {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_WRT,
                        "`wrt:` is a list of the fn's parameter names",
                    )
                    .with_label(m.span(wrt.value), "not a list of names")
                    .with_help(format!(
                        "write `wrt: [{}]`",
                        f.params.first().map_or("w", |p| p.name.node.as_str())
                    )),
                ))
            }
        };
        let mut params: Vec<(usize, Span)> = Vec::new();
        for id in items {
            let ispan = m.span(id);
            let Expr::Name(n) = m.expr(id) else {
                return Err(self.error(
                    Diagnostic::error(codes::GRAD_WRT, "`wrt:` names parameters of the fn")
                        .with_label(ispan, "not a parameter name"),
                ));
            };
            let Some(i) = f.params.iter().position(|p| p.name.node == *n) else {
                let mut d = Diagnostic::error(
                    codes::GRAD_WRT,
                    format!("`{n}` is not a parameter of `{fname}`"),
                )
                .with_label(ispan, format!("`{fname}` has no parameter `{n}`"))
                .with_secondary(f.name.span, format!("`{fname}` is declared here"))
                .with_note(
                    "`wrt:` names the parameters of the differentiated fn, not the caller's values",
                );
                if let Some(s) = super::suggest(n, f.params.iter().map(|p| p.name.node.as_str())) {
                    d = d.with_help(format!("did you mean `{s}`?"));
                }
                return Err(self.error(d));
            };
            if let Some((_, first)) = params.iter().find(|(j, _)| *j == i) {
                let first = *first;
                return Err(self.error(
                    Diagnostic::error(codes::GRAD_WRT, format!("`{n}` is named twice in `wrt:`"))
                        .with_label(ispan, "named again here")
                        .with_secondary(first, "first named here"),
                ));
            }
            params.push((i, ispan));
        }
        if pos.len() != f.params.len() {
            // `call_fn` reports the count with the callee's declaration.
            return self.call_fn(f, span, pos, &[]);
        }
        // Each differentiated parameter is bound to a float tensor of its own: one that is
        // passed for another parameter too gets a copy (an identity reshape), so that its
        // gradient counts only this parameter's uses.
        let mut wrts: Vec<Value> = Vec::new();
        for &(i, ispan) in &params {
            let (val, aspan) = pos[i].clone();
            let pname = &f.params[i].name.node;
            let Val::T(x) = val else {
                let what = self.describe(&val);
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_NOT_FLOAT,
                        format!("the argument for `{pname}` is {what}, not a tensor"),
                    )
                    .with_label(aspan, "a gradient is taken with respect to a tensor")
                    .with_secondary(ispan, format!("`{pname}` is differentiated by here")),
                ));
            };
            let ty = self.graph.ty(x).clone();
            if !ty.dtype.is_float() {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_NOT_FLOAT,
                        format!(
                            "the gradient with respect to `{pname}`, which is {ty}: not a float"
                        ),
                    )
                    .with_label(aspan, format!("this is {ty}"))
                    .with_secondary(ispan, "named in `wrt:` here")
                    .with_note("integer and boolean values carry no gradient"),
                ));
            }
            let shared = pos
                .iter()
                .enumerate()
                .any(|(j, (v, _))| j != i && matches!(v, Val::T(y) if *y == x));
            let w = if shared || wrts.contains(&x) {
                self.build(Op::Reshape { arg: x }, Some(ty), aspan)?
            } else {
                x
            };
            pos[i].0 = Val::T(w);
            wrts.push(w);
        }
        let first_new = self.graph.ops.len();
        let result = self.call_fn(f, span, pos, &[])?;
        let outputs: Vec<Value> = match &result {
            Val::T(v) => vec![*v],
            Val::Tuple(vs) => vs
                .iter()
                .map(|v| match v {
                    Val::T(x) => Some(*x),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    self.error(
                        Diagnostic::error(
                            codes::GRAD_NOT_FLOAT,
                            format!("`{fname}` returns a nested tuple or a literal"),
                        )
                        .with_label(span, "its result is not a tensor or a tuple of tensors"),
                    )
                })?,
            other => {
                let what = self.describe(other);
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_NOT_FLOAT,
                        format!("`{fname}` returns {what}, not a tensor"),
                    )
                    .with_label(span, "nothing to differentiate"),
                ));
            }
        };
        for &o in &outputs {
            let ty = self.graph.ty(o).clone();
            if !ty.dtype.is_float() {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_NOT_FLOAT,
                        format!("`{fname}` returns {ty}, which has no gradient"),
                    )
                    .with_label(span, "differentiated here")
                    .with_note("integer and boolean values carry no gradient"),
                ));
            }
        }
        let seeds = self.grad_seeds(&fname, span, &outputs, seed)?;
        // No other `grad` in the forward, and every parameter reaches a result through
        // float values.
        if let Some(inner) = (first_new..self.graph.ops.len())
            .map(|k| Value::from_u32(k as u32))
            .find(|&v| matches!(self.graph.ops[v], Op::Grad { .. }))
        {
            let at = self.spans[inner];
            return Err(self.error(
                Diagnostic::error(
                    codes::GRAD_NESTED,
                    format!("`{fname}` takes a gradient itself: a gradient of a gradient"),
                )
                .with_label(span, "differentiated here")
                .with_secondary(at, "the inner gradient")
                .with_note("second derivatives are not supported"),
            ));
        }
        for (&(i, ispan), &w) in params.iter().zip(&wrts) {
            let pname = f.params[i].name.node.clone();
            let rel = crate::grad::relevant(&self.graph, &[w], &outputs);
            if !outputs.iter().any(|o| rel.contains(o)) {
                let mut d = Diagnostic::error(
                    codes::GRAD_NO_PATH,
                    format!("the result of `{fname}` does not depend differentiably on `{pname}`"),
                )
                .with_label(ispan, format!("`{pname}` is named here"));
                if let Some(cut) = self.cut_point(w, &outputs) {
                    let ty = self.graph.ty(cut).clone();
                    d = d.with_secondary(
                        self.spans[cut],
                        format!("the path goes through this {ty} value"),
                    );
                }
                d = d.with_note(
                    "a gradient flows through float values only: comparisons, indices and casts \
                     to integers carry none",
                );
                return Err(self.error(d));
            }
        }
        let mut grads = Vec::new();
        for &w in &wrts {
            grads.push(self.build(
                Op::Grad {
                    wrt: w,
                    outputs: outputs.clone(),
                    seeds: seeds.clone(),
                },
                None,
                span,
            )?);
        }
        Ok(match &grads[..] {
            [one] => Val::T(*one),
            _ => Val::Tuple(grads.into_iter().map(Val::T).collect()),
        })
    }

    /// The upstream gradient of each output: `grad_output:` (tensors of the outputs' types,
    /// a weak literal broadcast to them), or 1 for a one-element result.
    fn grad_seeds(
        &mut self,
        fname: &str,
        span: Span,
        outputs: &[Value],
        seed: Option<(Val, Span)>,
    ) -> R<Vec<Value>> {
        let Some((val, sspan)) = seed else {
            let mut seeds = Vec::new();
            for &o in outputs {
                let ty = self.graph.ty(o).clone();
                if ty.shape.numel() != 1 {
                    return Err(self.error(
                        Diagnostic::error(
                            codes::GRAD_SEED,
                            format!("`{fname}` returns {ty}, not a scalar: `grad` needs `grad_output:`"),
                        )
                        .with_label(span, "the gradient of a non-scalar result")
                        .with_help(format!(
                            "give the upstream gradient, a tensor {ty}: `grad_output: dy` (the vector-Jacobian product), or reduce the result to a scalar loss"
                        )),
                    ));
                }
                seeds.push(self.one_like(&ty, span)?);
            }
            return Ok(seeds);
        };
        let vals: Vec<Val> = match (&val, outputs.len()) {
            (Val::Tuple(vs), n) if vs.len() == n && n > 1 => vs.clone(),
            (Val::Tuple(vs), n) => {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_SEED,
                        format!("`grad_output:` holds {} values for {n} results", vs.len()),
                    )
                    .with_label(sspan, "one upstream gradient per result"),
                ))
            }
            (_, 1) => vec![val.clone()],
            (_, n) => {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GRAD_SEED,
                        format!("`{fname}` returns {n} results: `grad_output:` is a tuple of {n}"),
                    )
                    .with_label(sspan, "one tensor"),
                ))
            }
        };
        let mut seeds = Vec::new();
        for (&o, v) in outputs.iter().zip(vals) {
            let ty = self.graph.ty(o).clone();
            let s = match v {
                Val::Weak(l) => {
                    let c = self.materialize(l, ty.dtype, sspan)?;
                    self.broadcast_to(c, &ty.shape.0, sspan)?
                }
                other => {
                    let s = self.tensor(other, sspan)?;
                    let st = self.graph.ty(s).clone();
                    if st != ty {
                        return Err(self.error(
                            Diagnostic::error(
                                codes::GRAD_SEED,
                                format!("the upstream gradient is {st}, the result {ty}"),
                            )
                            .with_label(sspan, format!("this is {st}"))
                            .with_secondary(span, format!("`{fname}` returns {ty} here"))
                            .with_note("`grad_output:` has the result's dtype and shape"),
                        ));
                    }
                    s
                }
            };
            seeds.push(s);
        }
        Ok(seeds)
    }

    fn one_like(&mut self, ty: &TensorType, span: Span) -> R<Value> {
        let c = self.build(
            Op::Const { value: 1.0 },
            Some(TensorType::new(ty.dtype, vec![])),
            span,
        )?;
        self.broadcast_to(c, &ty.shape.0, span)
    }

    /// A value on a path from `w` to one of `outputs` that is not a float (where the
    /// gradient stops), if there is one.
    fn cut_point(&self, w: Value, outputs: &[Value]) -> Option<Value> {
        let g = &self.graph;
        let paths = crate::grad::on_paths(g, &[w], outputs, |_| true);
        g.ops
            .keys()
            .find(|v| paths.contains(v) && !g.ty(*v).dtype.is_float())
    }
}
