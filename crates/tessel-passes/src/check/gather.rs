//! Indexing by a tensor: `x[idx]` (one i32 tensor among the items of an index: NumPy's
//! integer-array indexing along one axis; `emb[ids]` is the embedding lookup),
//! `take_along_axis(x, idx, axis: k)` (`numpy.take_along_axis`) and `gather(x, idx, axis:
//! k)` (`torch.gather`). All three become one [`Op::Gather`] with explicit shapes
//! (docs/language.md, "Indexing by a tensor"); an index out of range is clamped there.

use tessel_ir::graph::Op;
use tessel_ir::{DType, Value};
use tessel_syntax::{Diagnostic, Span};

use super::builtins::{two, Named};
use super::eval::{fmt_shape, Arg};
use super::{codes, Checker, Val, R};

/// Longest axis a gather reads along: its indices and positions are i32.
const MAX_GATHER_AXIS: u64 = i32::MAX as u64;

impl Checker<'_> {
    /// Refuses an index tensor that is not i32 (at its span), with the conversion to write.
    pub(crate) fn index_tensor(&mut self, t: Value, span: Span, what: &str) -> R<Value> {
        let ty = self.graph.ty(t).clone();
        if ty.dtype == DType::I32 {
            return Ok(t);
        }
        let mut d = Diagnostic::error(
            codes::INDEX_DTYPE,
            format!("{what} must be an i32 tensor, found {ty}"),
        )
        .with_label(span, format!("this is {ty}"));
        d = if ty.dtype == DType::Bool {
            d.with_note(
                "a bool mask selects a number of elements known only at run time, which a \
                 tensor's shape cannot be",
            )
            .with_help("keep the shape and zero the rest: `where(mask, x, 0.0)`")
        } else {
            d.with_help("convert the indices first: `i32(idx)` (truncates toward zero)")
        };
        Err(self.error(d))
    }

    /// `view[.., idx, ..]` with the tensor index `idx` (i32, any shape `I`) at `axis` of
    /// `view`: the result is `view.shape[..axis] + I + view.shape[axis + 1..]`, NumPy's
    /// integer-array indexing along one axis. Built as a gather along `axis` of `view` with
    /// the indices flattened and broadcast over the other axes.
    pub(crate) fn index_by_tensor(
        &mut self,
        span: Span,
        view: Value,
        axis: usize,
        (idx, ispan): (Value, Span),
    ) -> R<Value> {
        let shape = self.shape(view);
        self.gather_axis_fits(view, axis, ispan)?;
        let ishape = self.shape(idx);
        let n: u64 = ishape.iter().product();
        let mut lined = vec![1u64; shape.len()];
        lined[axis] = n;
        let flat = self.reshape(idx, lined, ispan)?;
        let mut spread = shape.clone();
        spread[axis] = n;
        let index = self.broadcast_to(flat, &spread, ispan)?;
        let g = self.build(
            Op::Gather {
                arg: view,
                index,
                axis: axis as u32,
            },
            None,
            span,
        )?;
        let mut out = shape[..axis].to_vec();
        out.extend(&ishape);
        out.extend(&shape[axis + 1..]);
        self.reshape(g, out, span)
    }

    /// `take_along_axis(x, idx, axis: k)` (NumPy: `idx` has `x`'s rank and broadcasts
    /// against `x` on every other axis) and `gather(x, idx, axis: k)` (PyTorch: no
    /// broadcast, `idx.shape[d] <= x.shape[d]` off the axis, and `x` is read in its leading
    /// `idx.shape[d]` positions there). The result has `x`'s dtype.
    pub(crate) fn gather_call(
        &mut self,
        name: &str,
        span: Span,
        pos: Vec<Arg>,
        named: Named,
    ) -> R<Val> {
        // PyTorch's order, `torch.gather(x, dim, index)`: the axis second and positional.
        if name == "gather" && pos.len() == 3 && matches!(pos[1].0, Val::Weak(_)) {
            return Err(self.error(
                Diagnostic::error(
                    codes::ARG_COUNT,
                    "`gather` takes the tensor and the indices, and the axis by name",
                )
                .with_label(pos[1].1, "the axis, in PyTorch's place")
                .with_help(
                    "PyTorch's `torch.gather(x, dim, index)` is `gather(x, index, axis: dim)` here",
                ),
            ));
        }
        self.check_args(name, span, &pos, named, 2, Some(2), &[("axis", true)])?;
        let ((xv, xspan), (iv, ispan)) = two(pos)?;
        let x = self.tensor(xv, xspan)?;
        let idx = match iv {
            Val::T(t) => t,
            other => {
                let what = self.describe(&other);
                return Err(self.error(
                    Diagnostic::error(
                        codes::INDEX_DTYPE,
                        format!("the indices of `{name}` must be an i32 tensor, found {what}"),
                    )
                    .with_label(ispan, format!("this is {what}"))
                    .with_help(format!(
                        "indices of the tensor's rank, e.g. `{name}(x, idx[:, None], axis: -1)`"
                    )),
                ));
            }
        };
        let idx = self.index_tensor(idx, ispan, &format!("the indices of `{name}`"))?;
        let axis = self.axis_arg(named, "axis", span, x, xspan)?;
        let (xs, is) = (self.shape(x), self.shape(idx));
        if xs.len() != is.len() {
            let (xt, it) = (self.graph.ty(x).clone(), self.graph.ty(idx).clone());
            return Err(self.error(
                Diagnostic::error(
                    codes::GATHER_SHAPE,
                    format!("`{name}` needs indices of the tensor's rank: {it} for {xt}"),
                )
                .with_label(ispan, format!("rank {}", is.len()))
                .with_secondary(xspan, format!("rank {}", xs.len()))
                .with_help("add the missing axes with `None`, e.g. `target[:, None]` for one index per row"),
            ));
        }
        let mut other_x = xs.clone();
        let mut other_i = is.clone();
        other_x[axis] = 1;
        other_i[axis] = 1;
        let (x_view, i_view, out) = if name == "gather" {
            let fits = (0..xs.len()).all(|d| d == axis || is[d] <= xs[d]);
            if !fits {
                return Err(self.error(
                    Diagnostic::error(
                        codes::GATHER_SHAPE,
                        format!(
                            "`gather` needs indices no larger than the tensor off axis {axis}: {} for {}",
                            fmt_shape(&is),
                            fmt_shape(&xs)
                        ),
                    )
                    .with_label(ispan, format!("shape {}", fmt_shape(&is)))
                    .with_secondary(xspan, format!("shape {}", fmt_shape(&xs)))
                    .with_note("as torch.gather: index.size(d) <= input.size(d) for every d != dim"),
                ));
            }
            // torch.gather reads the leading `is[d]` positions of `x` off the axis.
            let mut xv = x;
            for (d, &n) in is.iter().enumerate() {
                if d != axis {
                    xv = self.slice(xv, d, 0, n, span)?;
                }
            }
            (xv, idx, is.clone())
        } else {
            let common = self.broadcast_shapes(
                &format!("`{name}` (off axis {axis})"),
                span,
                &[(other_x, xspan), (other_i, ispan)],
            )?;
            let mut xt = common.clone();
            xt[axis] = xs[axis];
            let mut it = common;
            it[axis] = is[axis];
            let xv = self.broadcast_to(x, &xt, xspan)?;
            let iv = self.broadcast_to(idx, &it, ispan)?;
            (xv, iv, it)
        };
        self.gather_axis_fits(x_view, axis, ispan)?;
        let g = self.build(
            Op::Gather {
                arg: x_view,
                index: i_view,
                axis: axis as u32,
            },
            None,
            span,
        )?;
        debug_assert_eq!(self.shape(g), out);
        Ok(Val::T(g))
    }

    /// Refuses a gather along an axis of 2^31 or more positions (its indices are i32).
    fn gather_axis_fits(&mut self, x: Value, axis: usize, ispan: Span) -> R<()> {
        let len = self.shape(x)[axis];
        if len <= MAX_GATHER_AXIS {
            return Ok(());
        }
        let ty = self.graph.ty(x).clone();
        Err(self.error(
            Diagnostic::error(
                codes::GATHER_AXIS,
                format!("indexing axis {axis} of {ty} by a tensor: the axis has {len} positions"),
            )
            .with_label(ispan, "these i32 indices cannot reach every position")
            .with_note(format!(
                "a gathered axis has at most 2^31 - 1 = {MAX_GATHER_AXIS} positions"
            )),
        ))
    }
}
