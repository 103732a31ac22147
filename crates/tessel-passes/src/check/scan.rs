//! The builtins along an axis that are neither plain reductions nor layout: `topk` and
//! `cumsum` (called from `builtins.rs`; `argmax`, `argmin` and `logsumexp` are reductions
//! there).

use tessel_ir::graph::Op;
use tessel_ir::{DType, TensorType};
use tessel_syntax::{Diagnostic, Span};

use super::builtins::{first, two, Named};
use super::eval::Arg;
use super::lit::Lit;
use super::{codes, Checker, Reported, Val, R};

impl Checker<'_> {
    /// `topk(x, k, axis: -1, largest: true)` as `torch.topk(x, k, dim, largest, sorted=True)`:
    /// the tuple `(values, indices)`, values of `x`'s dtype and indices i32, both `x`'s
    /// shape with `k` along the axis. `k` is a compile-time integer in `1 ..=` the axis
    /// length (E0430); `x` is not bool (E0320).
    pub(super) fn topk(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args(
            "topk",
            span,
            &pos,
            named,
            2,
            Some(2),
            &[("axis", false), ("largest", false)],
        )?;
        let ((v, vspan), (k, kspan)) = two(pos)?;
        let x = self.tensor(v, vspan)?;
        let ty = self.graph.ty(x).clone();
        if ty.dtype == DType::Bool {
            return Err(self.unordered_bool("topk", vspan, &ty));
        }
        let k = self.const_int(&k, kspan, "`k` of `topk`")?;
        let axis = self.axis_or_last(named, span, x, vspan)?;
        let largest = self.bool_arg(named, "largest", true)?;
        let len = ty.shape.0[axis];
        if k < 1 || k as u64 > len {
            return Err(self.error(
                Diagnostic::error(
                    codes::TOPK_K,
                    format!("`topk` of {k} elements along axis {axis} of {ty}, which has {len}"),
                )
                .with_label(kspan, format!("k must be in 1 ..= {len}"))
                .with_secondary(vspan, format!("this is {ty}")),
            ));
        }
        let mut shape = ty.shape.0.clone();
        shape[axis] = k as u64;
        // `k` is the result's, so topk is given its type.
        let part = |this: &mut Self, indices: bool| {
            let dt = if indices { DType::I32 } else { ty.dtype };
            this.build(
                Op::TopK {
                    arg: x,
                    axis: axis as u32,
                    largest,
                    indices,
                },
                Some(TensorType::new(dt, shape.clone())),
                span,
            )
        };
        let values = part(self, false)?;
        let indices = part(self, true)?;
        Ok(Val::Tuple(vec![Val::T(values), Val::T(indices)]))
    }

    /// `cumsum(x, axis: k)` as `torch.cumsum`, in the fixed order of [`Op::Cumsum`]: the
    /// result has `x`'s type (i32 wraps; torch would give int64); not on bool (E0304).
    pub(super) fn cumsum(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args("cumsum", span, &pos, named, 1, Some(1), &[("axis", true)])?;
        let (v, vspan) = first(pos)?;
        let x = self.tensor(v, vspan)?;
        let ty = self.graph.ty(x).clone();
        if ty.dtype == DType::Bool {
            return Err(self.error(
                Diagnostic::error(
                    codes::BOOL_ARITHMETIC,
                    format!("`cumsum` is not defined on bool, found {ty}"),
                )
                .with_label(vspan, format!("this is {ty}"))
                .with_help("convert first, e.g. `i32(mask)`"),
            ));
        }
        let axis = self.axis_arg(named, "axis", span, x, vspan)?;
        Ok(Val::T(self.build(
            Op::Cumsum {
                arg: x,
                axis: axis as u32,
            },
            None,
            span,
        )?))
    }

    /// E0320: `name` orders the elements of a bool tensor.
    pub(super) fn unordered_bool(&mut self, name: &str, span: Span, ty: &TensorType) -> Reported {
        self.error(
            Diagnostic::error(
                codes::ORDER_ON_BOOL,
                format!("`{name}` compares values and is not defined on bool, found {ty}"),
            )
            .with_label(span, format!("this is {ty}"))
            .with_help("convert first, e.g. `i32(mask)`"),
        )
    }

    /// The named `axis` argument, or the last axis when it is absent.
    fn axis_or_last(
        &mut self,
        named: Named,
        span: Span,
        x: tessel_ir::Value,
        xspan: Span,
    ) -> R<usize> {
        if named.iter().any(|(n, _)| n.name.node == "axis") {
            return self.axis_arg(named, "axis", span, x, xspan);
        }
        self.axis(&Val::Weak(Lit::Int(-1)), span, x, xspan)
    }

    /// A named `true`/`false` argument, `default` when absent.
    fn bool_arg(&mut self, named: Named, key: &str, default: bool) -> R<bool> {
        let Some((n, v)) = named.iter().find(|(n, _)| n.name.node == key) else {
            return Ok(default);
        };
        match v {
            Val::Weak(Lit::Bool(b)) => Ok(*b),
            other => {
                let what = self.describe(other);
                let s = self.m.span(n.value);
                Err(self.error(
                    Diagnostic::error(
                        codes::NOT_CONSTANT,
                        format!("`{key}` must be `true` or `false`, found {what}"),
                    )
                    .with_label(s, format!("this is {what}")),
                ))
            }
        }
    }
}
