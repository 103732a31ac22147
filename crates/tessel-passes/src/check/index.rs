//! Indexing: `x[items]`, one item per axis from the left — slices, integer selection,
//! `None`, `...`, and at most one i32 tensor, which gathers along its axis (`gather.rs`;
//! docs/language.md, "Indexing").

use tessel_syntax::ast::{IndexItem, IndexKind};
use tessel_syntax::{Diagnostic, Span};

use super::eval::Arg;
use super::lit::Lit;
use super::{codes, Checker, Reported, Val, R};
use tessel_ir::Value;

impl<'m> Checker<'m> {
    // ---- indexing -----------------------------------------------------------------------
    /// `base[items]`; `vals` are the evaluated slice bounds and index expressions in order.
    pub(crate) fn index(
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
        // The tensor index, if any: its value and span, and its axis in `out_shape`.
        let mut gathered: Option<(Value, Span, usize)> = None;
        // The first integer selection (NumPy treats it as a second array index beside a
        // tensor, with other placement rules; refused then).
        let mut selected: Option<Span> = None;
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
                            let t = self.index_tensor(t, s, "a tensor index")?;
                            if let Some((_, first, _)) = gathered {
                                return Err(self.error(
                                    Diagnostic::error(
                                        codes::TENSOR_INDEX_MIX,
                                        "one tensor index per `[...]`",
                                    )
                                    .with_label(s, "a second tensor index")
                                    .with_secondary(first, "the first")
                                    .with_note("NumPy broadcasts several index arrays together (pointwise indexing); tessel gathers along one axis at a time")
                                    .with_help("for one element per row, `take_along_axis(x, idx, axis: k)`; else index twice, `x[i][:, j]`"),
                                ));
                            }
                            gathered = Some((t, s, out_shape.len()));
                            out_shape.push(len as u64);
                            axis += 1;
                            continue;
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
                    selected.get_or_insert(s);
                    cur = self.slice(cur, axis, j as u64, 1, span)?;
                    axis += 1;
                }
            }
        }
        out_shape.extend(shape.iter().skip(axis));
        let view = self.reshape(cur, out_shape, span)?;
        let Some((t, tspan, k)) = gathered else {
            return Ok(Val::T(view));
        };
        if let Some(sel) = selected {
            return Err(self.error(
                Diagnostic::error(
                    codes::TENSOR_INDEX_MIX,
                    "an integer index beside a tensor index in one `[...]`",
                )
                .with_label(sel, "this integer")
                .with_secondary(tspan, "this tensor index")
                .with_note("NumPy counts the integer as a second index array and, where a slice lies between them, moves the indexed dims to the front")
                .with_help("select first, then gather: `x[0][idx]`"),
            ));
        }
        Ok(Val::T(self.index_by_tensor(span, view, k, (t, tspan))?))
    }
}
