//! The signature of a step or `fn`: its symbols bound (from `--dim`, a `const` of the same
//! name, or a `fn` call's arguments), its declared types resolved to concrete ones, and a
//! body's result conformed to the declared return type; the names of a step's outputs.

use std::collections::{BTreeMap, HashSet};

use tessel_ir::{TensorType, Value};
use tessel_syntax::ast::{self, DimKind, Expr, Func, Module, RetType};
use tessel_syntax::{Diagnostic, Span};

use super::lit::Lit;
use super::{codes, dtype, dtype_rank, suggest, Bindings, Checker, Reported, Val, R};

impl<'m> Checker<'m> {
    /// Binds the step's symbols from `dims`: every symbol must have a value of at least 1.
    pub(crate) fn step_bindings(
        &mut self,
        func: &Func,
        dims: &BTreeMap<String, u64>,
    ) -> R<Bindings> {
        let mut b = Bindings::default();
        let mut seen = HashSet::new();
        let mut ok = true;
        let types = func.params.iter().map(|p| &p.ty).chain(func.ret.types());
        for ty in types {
            for d in &ty.dims {
                let DimKind::Symbol(s) = &d.kind else {
                    continue;
                };
                if !seen.insert(s.clone()) {
                    continue;
                }
                // A `const` of the dim's name gives its value (`const H = 40;` then
                // `bf16[T, H, 128]`); a `--dim` of that name must agree with it.
                if let Some(Some(Lit::Int(n))) = self.consts.get(s.as_str()) {
                    let n = *n;
                    let given = dims.get(s).copied();
                    if n >= 1 && given.is_none_or(|g| g as i64 == n) {
                        b.syms
                            .insert(s.clone(), (n as u64, format!("`const {s} = {n}`")));
                    } else {
                        ok = false;
                        let why = if n < 1 {
                            format!("the const `{s}` is {n}; a dim is at least 1")
                        } else {
                            format!(
                                "the const `{s}` is {n}, and `--dim {s}={}` was given",
                                given.unwrap_or_default()
                            )
                        };
                        self.error(
                            Diagnostic::error(codes::BAD_DIM, format!("dim `{s}`: {why}"))
                                .with_label(d.span, format!("`{s}` is used here")),
                        );
                    }
                    continue;
                }
                match dims.get(s) {
                    Some(&n) if n >= 1 => {
                        b.syms.insert(s.clone(), (n, format!("`--dim {s}={n}`")));
                    }
                    Some(_) => {
                        ok = false;
                        self.error(
                            Diagnostic::error(codes::BAD_DIM, format!("dim `{s}` is bound to 0"))
                                .with_label(d.span, format!("`{s}` is used here"))
                                .with_help(format!(
                                    "every dim is at least 1: pass `--dim {s}=<n>` with n >= 1"
                                )),
                        );
                    }
                    None => {
                        ok = false;
                        let mut diag = Diagnostic::error(
                            codes::UNBOUND_DIM,
                            format!("dim `{s}` of step `{}` has no value", func.name.node),
                        )
                        .with_label(d.span, format!("`{s}` is not bound"))
                        .with_help(format!("pass `--dim {s}=<n>`"));
                        let used = |k: &&String| !step_symbols(func).contains(k.as_str());
                        if let Some(close) =
                            suggest(s, dims.keys().filter(used).map(String::as_str))
                        {
                            diag = diag
                                .with_note(format!("`--dim {close}=...` was given; is it a typo?"));
                        }
                        self.error(diag);
                    }
                }
            }
        }
        if ok {
            Ok(b)
        } else {
            Err(Reported)
        }
    }

    /// The concrete type of a declared type under `b`. A `fn`'s return dim that no parameter
    /// bound is reported at the dim, and [`Checker::error`] labels the call being inlined.
    pub(crate) fn resolve_type(&mut self, ty: &ast::Type, b: &Bindings) -> R<TensorType> {
        let mut shape = Vec::new();
        for d in &ty.dims {
            match &d.kind {
                DimKind::Fixed(n) => match u64::try_from(*n) {
                    Ok(n) if n >= 1 => shape.push(n),
                    _ => {
                        return Err(self.error(
                            Diagnostic::error(codes::BAD_DIM, format!("dim {n} is not a size"))
                                .with_label(d.span, "every dim is at least 1"),
                        ))
                    }
                },
                DimKind::Symbol(s) => match b.syms.get(s) {
                    Some((n, _)) => shape.push(*n),
                    None => {
                        return Err(self.error(
                            Diagnostic::error(
                                codes::UNBOUND_DIM,
                                format!("dim `{s}` is not bound by any parameter"),
                            )
                            .with_label(d.span, format!("`{s}` appears only here")),
                        ));
                    }
                },
                DimKind::Rest => match &b.rest {
                    Some((r, _)) => shape.extend(r.iter().copied()),
                    None => {
                        return Err(self.error(
                            Diagnostic::error(
                                codes::UNBOUND_DIM,
                                "`...` is not bound by any parameter",
                            )
                            .with_label(d.span, "`...` appears only here"),
                        ));
                    }
                },
            }
        }
        Ok(TensorType::new(dtype(ty.dtype.node), shape))
    }

    /// Checks a body's result against the declared return type(s) and returns the values.
    /// A weak scalar takes the declared dtype; anything else must match exactly. For a `fn`,
    /// [`Checker::error`] labels the call being inlined.
    pub(crate) fn conform(&mut self, val: Val, func: &Func, b: &Bindings) -> R<Vec<Value>> {
        let tail = func.body.tail;
        let tail_span = self.m.span(tail);
        let declared = func.ret.types();
        let elems = match (&func.ret, val) {
            (RetType::Single(_), Val::Tuple(vs)) => {
                return Err(self.return_shape_error(func, format!("a tuple of {}", vs.len())));
            }
            (RetType::Single(_), v) => vec![v],
            (RetType::Tuple(..), Val::Tuple(vs)) if vs.len() == declared.len() => vs,
            (RetType::Tuple(..), v) => {
                let what = self.describe(&v);
                return Err(self.return_shape_error(func, what));
            }
        };
        let spans: Vec<Span> = match self.m.expr(tail) {
            Expr::Tuple(es) if es.len() == elems.len() => {
                es.iter().map(|e| self.m.span(*e)).collect()
            }
            _ => vec![tail_span; elems.len()],
        };
        let mut out = Vec::new();
        let mut failed = false;
        for ((v, decl), span) in elems.into_iter().zip(declared).zip(spans) {
            let want = self.resolve_type(decl, b)?;
            let got = match v {
                Val::Weak(l) if l.rank() <= dtype_rank(want.dtype) => {
                    self.materialize(l, want.dtype, span)?
                }
                Val::T(v) => v,
                other => {
                    let what = self.describe(&other);
                    self.error(
                        Diagnostic::error(
                            codes::RETURN_TYPE,
                            format!("result type mismatch: declared {want}, found {what}"),
                        )
                        .with_label(span, format!("this is {what}"))
                        .with_secondary(decl.span, format!("declared {want}")),
                    );
                    failed = true;
                    continue;
                }
            };
            let have = self.graph.ty(got).clone();
            if have != want {
                let mut d = Diagnostic::error(
                    codes::RETURN_TYPE,
                    format!(
                        "result type mismatch in `{}`: declared {want}, found {have}",
                        func.name.node
                    ),
                )
                .with_label(span, format!("this is {have}"))
                .with_secondary(decl.span, format!("declared {want}"));
                if have.shape == want.shape {
                    d = d.with_help(format!(
                        "results are not converted implicitly: write `{}(...)`",
                        want.dtype
                    ));
                }
                self.error(d);
                failed = true;
                continue;
            }
            out.push(got);
        }
        if failed {
            Err(Reported)
        } else {
            Ok(out)
        }
    }

    pub(crate) fn return_shape_error(&mut self, func: &Func, found: String) -> Reported {
        let n = func.ret.types().len();
        let want = match &func.ret {
            RetType::Single(_) => "one tensor".to_string(),
            RetType::Tuple(..) => format!("a tuple of {n}"),
        };
        self.error(
            Diagnostic::error(
                codes::RETURN_TYPE,
                format!(
                    "`{}` must return {want}, but its body gives {found}",
                    func.name.node
                ),
            )
            .with_label(self.m.span(func.body.tail), format!("this is {found}"))
            .with_secondary(func.ret.span(), "declared here"),
        )
    }
}

/// The symbolic dims a step's signature uses.
pub(crate) fn step_symbols(func: &Func) -> HashSet<&str> {
    func.params
        .iter()
        .map(|p| &p.ty)
        .chain(func.ret.types())
        .flat_map(|t| t.dims.iter())
        .filter_map(|d| match &d.kind {
            DimKind::Symbol(s) => Some(s.as_str()),
            _ => None,
        })
        .collect()
}

/// Result names: see the module docs.
pub(crate) fn output_names(m: &Module, func: &Func, n: usize) -> Vec<String> {
    let defaults = || -> Vec<String> {
        if matches!(func.ret, RetType::Single(_)) {
            vec!["out".to_string()]
        } else {
            (0..n).map(|i| format!("out{i}")).collect()
        }
    };
    let tail_names: Vec<&Expr> = match m.expr(func.body.tail) {
        Expr::Tuple(es) if matches!(func.ret, RetType::Tuple(..)) => {
            es.iter().map(|e| m.expr(*e)).collect()
        }
        e if matches!(func.ret, RetType::Single(_)) => vec![e],
        _ => return defaults(),
    };
    let params: HashSet<&str> = func.params.iter().map(|p| p.name.node.as_str()).collect();
    let lets: HashSet<&str> = func
        .body
        .stmts
        .iter()
        .flat_map(|ast::Stmt::Let { pat, .. }| pat.names().iter().map(|n| n.node.as_str()))
        .collect();
    let mut names = Vec::new();
    let mut seen = HashSet::new();
    for e in tail_names {
        match e {
            Expr::Name(s)
                if lets.contains(s.as_str())
                    && !params.contains(s.as_str())
                    && seen.insert(s.clone()) =>
            {
                names.push(s.clone())
            }
            _ => return defaults(),
        }
    }
    if names.len() == n {
        names
    } else {
        defaults()
    }
}

/// A declared type as written: `bf16[..., D]`, `f32`.
pub(crate) fn printer_type(ty: &ast::Type) -> String {
    if ty.dims.is_empty() {
        return ty.dtype.node.name().to_string();
    }
    let dims: Vec<String> = ty
        .dims
        .iter()
        .map(|d| match &d.kind {
            DimKind::Fixed(n) => n.to_string(),
            DimKind::Symbol(s) => s.clone(),
            DimKind::Rest => "...".to_string(),
        })
        .collect();
    format!("{}[{}]", ty.dtype.node.name(), dims.join(", "))
}
