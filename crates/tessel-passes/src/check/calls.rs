//! `fn` calls: every call is inlined, its parameters bound to the arguments (dims unified
//! per call, a leading `...` matched), its result conformed to the declared return type.
//!
//! A diagnostic raised while a call is inlined points into the callee's body, which may be
//! a library the user did not write; [`Checker::in_calls`] labels it with every call being
//! inlined, so the report also shows the user's own call and the shapes it passed.

use tessel_ir::Value;
use tessel_syntax::ast::{self, Func};
use tessel_syntax::{Diagnostic, Span};

use super::eval::{fmt_shape, Arg};
use super::{codes, dtype, dtype_rank, Bindings, Checker, Env, Reported, Val, MAX_CALL_DEPTH, R};

/// One `fn` call being inlined (an entry of [`Checker::call_stack`]).
#[derive(Clone, Debug)]
pub(crate) struct CallSite {
    /// The callee.
    pub(crate) name: String,
    /// The whole call expression, `attention(q, k, v, mask, 0.125)`.
    pub(crate) span: Span,
    /// The bound arguments, `q: bf16[8, 6, 64], k: bf16[8, 4, 64]`; empty while they are
    /// not bound yet.
    pub(crate) args: String,
}

/// Most call sites one diagnostic labels: a deeper chain labels the outermost and innermost
/// half of this each (a chain [`MAX_CALL_DEPTH`] deep would otherwise quote 64 lines).
const MAX_CALL_LABELS: usize = 8;

impl<'m> Checker<'m> {
    // ---- fn calls -----------------------------------------------------------------------
    /// Inlines a call of the `fn` `f`: binds its parameters to the arguments (unifying the
    /// symbolic dims and `...`), evaluates its body, and checks the result type.
    pub(crate) fn call_fn(
        &mut self,
        f: &'m Func,
        span: Span,
        pos: Vec<Arg>,
        named: &[(&ast::NamedArg, Val)],
    ) -> R<Val> {
        let name = f.name.node.as_str();
        // Each inlined call counts against the expansion bound (a fn whose body adds no
        // node still costs its call), with the callee at the end of the reported chain.
        self.call_stack.push(CallSite {
            name: name.to_string(),
            span,
            args: String::new(),
        });
        let within = self.expand(span);
        self.call_stack.pop();
        within?;
        if let Some(i) = self.call_stack.iter().position(|c| c.name == name) {
            let chain: Vec<&str> = self.call_stack[i..]
                .iter()
                .map(|c| c.name.as_str())
                .chain([name])
                .collect();
            let mut d =
                Diagnostic::error(codes::RECURSIVE_CALL, format!("recursive call of `{name}`"))
                    .with_label(
                        span,
                        format!("`{name}` calls itself: {}", chain.join(" -> ")),
                    )
                    .with_note("fns are inlined at each call, so they cannot recurse");
            if let Some(outer) = self.call_stack.get(i) {
                d = d.with_secondary(outer.span, format!("`{name}` is called here first"));
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
        let args: Vec<String> = locals
            .iter()
            .filter_map(|(n, v)| match v {
                // As the source declares it: a scalar is `f32`, not `f32[]`.
                Some(Val::T(v)) => Some(match self.graph.ty(*v) {
                    t if t.shape.0.is_empty() => format!("{n}: {}", t.dtype),
                    t => format!("{n}: {t}"),
                }),
                _ => None,
            })
            .collect();
        let mut env = Env { locals, dims: b };
        self.call_stack.push(CallSite {
            name: name.to_string(),
            span,
            args: args.join(", "),
        });
        let result = self.eval_block(&mut env, &f.body);
        let result = result.and_then(|v| self.conform(v, f, &env.dims));
        self.call_stack.pop();
        let values = result?;
        Ok(match f.ret {
            ast::RetType::Single(_) => Val::T(values.into_iter().next().ok_or(Reported)?),
            ast::RetType::Tuple(..) => Val::Tuple(values.into_iter().map(Val::T).collect()),
        })
    }

    /// `d` with a secondary label on each call in [`Checker::call_stack`] (its arguments'
    /// types when they are bound) and a note naming the chain of calls, outermost first.
    /// The labels go where the user wrote each call, so an error in a library `fn` also
    /// points at the user's file. A call already labelled by `d` keeps its label; past
    /// [`MAX_CALL_LABELS`] calls only the outermost and innermost ones are labelled.
    pub(crate) fn in_calls(&self, mut d: Diagnostic) -> Diagnostic {
        let n = self.call_stack.len();
        if n == 0 {
            return d;
        }
        let half = MAX_CALL_LABELS / 2;
        for (i, c) in self.call_stack.iter().enumerate() {
            let shown = n <= MAX_CALL_LABELS || i < half || i >= n - half;
            if !shown || d.labels.iter().any(|l| l.span == c.span) {
                continue;
            }
            let message = if c.args.is_empty() {
                format!("in this call of `{}`", c.name)
            } else {
                format!("in this call: {}({})", c.name, c.args)
            };
            d = d.with_secondary(c.span, message);
        }
        let note = match self.call_stack.as_slice() {
            [c] => format!(
                "raised while inlining `{}` at the call labelled above",
                c.name
            ),
            calls => {
                let chain: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
                let which = if n <= MAX_CALL_LABELS {
                    "each call is labelled above".to_string()
                } else {
                    format!("the outermost {half} and innermost {half} calls are labelled above")
                };
                format!(
                    "raised while inlining {} (outermost first); {which}",
                    chain.join(" -> ")
                )
            }
        };
        d.with_note(note)
    }

    /// Checks one argument against its parameter and extends the call's bindings.
    /// `skip_shapes` is set once an earlier argument failed (its bindings are not trusted).
    pub(crate) fn bind_param(
        &mut self,
        f: &Func,
        p: &ast::Param,
        v: Val,
        aspan: Span,
        b: &mut Bindings,
        skip_shapes: bool,
    ) -> R<Value> {
        let want = dtype(p.ty.dtype.node);
        let declared = super::signature::printer_type(&p.ty);
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
