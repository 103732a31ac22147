//! The builtins that rearrange a tensor's layout: `concat`, `split`, `reshape` (called from
//! `builtins.rs`, beside the shape ops of `graph_ops.rs`).

use tessel_ir::graph::Op;
use tessel_syntax::{Diagnostic, Span};

use super::builtins::{two, Named};
use super::eval::{fmt_shape, Arg};
use super::{codes, Checker, Reported, Val, R};

impl Checker<'_> {
    /// `concat(a, b, ..., axis: k)`: dtypes promoted, ranks equal, other dims equal.
    pub(super) fn concat(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args("concat", span, &pos, named, 1, None, &[("axis", true)])?;
        let dt = {
            let refs: Vec<&Val> = pos.iter().map(|(v, _)| v).collect();
            self.join(&refs)
        };
        let mut ts = Vec::new();
        for (v, s) in pos {
            let t = self.operand(v, dt, s)?;
            ts.push((t, s));
        }
        let Some(&(t0, s0)) = ts.first() else {
            return Err(Reported);
        };
        let axis = self.axis_arg(named, "axis", span, t0, s0)?;
        let shape0 = self.shape(t0);
        let mut total = 0u64;
        let mut bad = false;
        for (t, _) in &ts {
            let s = self.shape(*t);
            let same = s.len() == shape0.len()
                && s.iter()
                    .zip(&shape0)
                    .enumerate()
                    .all(|(i, (a, b))| i == axis || a == b);
            bad |= !same;
            total = total.saturating_add(s.get(axis).copied().unwrap_or(0));
        }
        if bad {
            let shapes: Vec<String> = ts.iter().map(|(t, _)| fmt_shape(&self.shape(*t))).collect();
            let mut d = Diagnostic::error(
                codes::CONCAT_MISMATCH,
                format!(
                    "shape mismatch in `concat` along axis {axis}: {}",
                    shapes.join(", ")
                ),
            )
            .with_label(span, format!("every dim but axis {axis} must be equal"));
            for ((_, s), text) in ts.iter().zip(&shapes) {
                d = d.with_secondary(*s, format!("this has shape {text}"));
            }
            return Err(self.error(d));
        }
        let mut out = shape0;
        if let Some(d) = out.get_mut(axis) {
            *d = total;
        }
        let args = ts.iter().map(|(t, _)| *t).collect();
        let c = self.build(
            Op::Concat {
                args,
                axis: axis as u32,
            },
            None,
            span,
        )?;
        debug_assert_eq!(self.shape(c), out);
        Ok(Val::T(c))
    }

    /// `split(x, n, axis: k)`: a tuple of `n` equal slices.
    pub(super) fn split(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args("split", span, &pos, named, 2, Some(2), &[("axis", true)])?;
        let ((v, vspan), (n, nspan)) = two(pos)?;
        let x = self.tensor(v, vspan)?;
        let n = self.const_int(&n, nspan, "the number of parts")?;
        let axis = self.axis_arg(named, "axis", span, x, vspan)?;
        let ty = self.graph.ty(x).clone();
        let len = ty.shape.0.get(axis).copied().unwrap_or(1);
        if n < 1 || len % (n as u64) != 0 {
            return Err(self.error(
                Diagnostic::error(
                    codes::SPLIT_NOT_DIVISIBLE,
                    format!("cannot split axis {axis} of {ty} (length {len}) into {n} equal parts"),
                )
                .with_label(nspan, format!("{len} is not divisible by {n}"))
                .with_secondary(vspan, format!("this is {ty}")),
            ));
        }
        let part = len / n as u64;
        let mut parts = Vec::new();
        for i in 0..n as u64 {
            parts.push(Val::T(self.slice(x, axis, i * part, part, span)?));
        }
        Ok(Val::Tuple(parts))
    }

    /// `reshape(x, [d0, d1, ...])` with at most one `-1`.
    pub(super) fn reshape_call(&mut self, span: Span, (v, vspan): Arg, (l, lspan): Arg) -> R<Val> {
        let x = self.tensor(v, vspan)?;
        let dims = self.int_list(&l, lspan, "the shape")?;
        let ty = self.graph.ty(x).clone();
        let numel = ty.shape.0.iter().product::<u64>();
        let bad = |this: &mut Self, msg: String, label: String| -> Reported {
            this.error(
                Diagnostic::error(codes::RESHAPE, msg)
                    .with_label(lspan, label)
                    .with_secondary(vspan, format!("this is {ty} ({numel} elements)")),
            )
        };
        let written: Vec<String> = dims.iter().map(i64::to_string).collect();
        let written = format!("[{}]", written.join(", "));
        if dims.iter().filter(|d| **d == -1).count() > 1 {
            return Err(bad(
                self,
                format!("`reshape` to {written}: at most one dim may be -1"),
                "two -1 dims".into(),
            ));
        }
        if let Some(d) = dims.iter().find(|d| **d == 0 || **d < -1) {
            return Err(bad(
                self,
                format!("`reshape` to {written}: {d} is not a size"),
                "every dim is at least 1 (or -1)".into(),
            ));
        }
        let known = dims
            .iter()
            .filter(|d| **d > 0)
            .try_fold(1u64, |acc, d| acc.checked_mul(*d as u64));
        let out: Option<Vec<u64>> = known.and_then(|k| {
            let fill = if k > 0 && numel % k == 0 {
                Some(numel / k)
            } else {
                None
            };
            dims.iter()
                .map(|d| if *d == -1 { fill } else { Some(*d as u64) })
                .collect()
        });
        match out {
            Some(shape) if shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d)) == Some(numel) => {
                Ok(Val::T(self.reshape(x, shape, span)?))
            }
            _ => Err(bad(
                self,
                format!("cannot reshape {ty} ({numel} elements) to {written}"),
                format!("{written} does not hold {numel} elements"),
            )),
        }
    }

    /// A list of compile-time integers (`[4, -1]`).
    pub(super) fn int_list(&mut self, v: &Val, span: Span, what: &str) -> R<Vec<i64>> {
        match v {
            Val::List(items) => {
                let mut out = Vec::new();
                for it in items {
                    out.push(self.const_int(it, span, &format!("each entry of {what}"))?);
                }
                Ok(out)
            }
            other => {
                let found = self.describe(other);
                Err(self.error(
                    Diagnostic::error(
                        codes::NOT_A_TENSOR,
                        format!("{what} must be a list like `[4, -1]`, found {found}"),
                    )
                    .with_label(span, format!("this is {found}")),
                ))
            }
        }
    }
}
