//! Tensors updated in place: a step's `inout` parameters, the `update` builtin, and the
//! rules that let every update write into the parameter's own buffer with no copy.
//!
//! Each `inout` parameter starts a *chain*: the parameter's value, then the value each
//! `update` of the chain returns. An update consumes the chain value it is given (its
//! `dst`): from then on that value's old contents are gone, so
//! - `dst` must be a chain value ([`codes::UPDATE_NOT_INOUT`] otherwise);
//! - reading a consumed chain value again — the parameter's name, or an earlier update's
//!   result — is [`codes::STALE_READ`], checked where a name is read ([`Checker::fresh`]);
//! - so is using, after the update, a value that was computed from the consumed value before
//!   it, and computing the update's own rows or positions from it
//!   ([`codes::READ_BEFORE_UPDATE`], checked on the whole graph by
//!   [`Checker::check_reads_before_updates`]): such a value would be computed by a kernel
//!   that runs after the update overwrote what it reads.
//!
//! The end of each chain becomes a step output named after the parameter, after the
//! step's declared results (see `mod.rs`). Together these give the graph `Op::Update`'s
//! in-place invariant (`graph.update` in the verifier).

use std::collections::{BTreeSet, HashMap};

use tessel_ir::graph::{Op, UpdateAt};
use tessel_ir::{DType, Value};
use tessel_syntax::ast::NamedArg;
use tessel_syntax::{Diagnostic, Span};

use super::eval::{fmt_shape, Arg};
use super::{codes, Checker, Reported, Val, R};

/// One value of a chain.
#[derive(Clone, Debug)]
pub(crate) struct Link {
    /// The `inout` parameter the chain starts at.
    pub(crate) param: String,
    /// The update that consumed this value, and the span of its call.
    pub(crate) updated: Option<(Value, Span)>,
}

/// The chains of a step's `inout` parameters.
#[derive(Clone, Debug, Default)]
pub(crate) struct InPlace {
    /// Every chain value: the parameters' inputs and the updates' results.
    pub(crate) links: HashMap<Value, Link>,
    /// Each `inout` parameter in declaration order, with the end of its chain so far.
    pub(crate) ends: Vec<(String, Value)>,
}

impl Checker<'_> {
    /// Errors if `val`, read through the name `name` at `span`, holds a chain value that an
    /// update has consumed.
    pub(crate) fn fresh(&mut self, name: &str, val: &Val, span: Span) -> R<()> {
        let mut stack = vec![val];
        while let Some(v) = stack.pop() {
            match v {
                Val::T(x) => {
                    let Some(Link {
                        param,
                        updated: Some((_, at)),
                    }) = self.inplace.links.get(x).cloned()
                    else {
                        continue;
                    };
                    let what = if name == param {
                        format!("`{param}`")
                    } else {
                        format!("`{name}` (a value of `{param}`)")
                    };
                    return Err(self.error(
                        Diagnostic::error(
                            codes::STALE_READ,
                            format!("{what} was updated in place; use the value `update` returned"),
                        )
                        .with_label(span, "read after the update")
                        .with_secondary(at, format!("`{param}` is updated in place here"))
                        .with_note(format!(
                            "`update` writes into `{param}`'s buffer: the value before it no \
                             longer exists (keeping it would need a copy of the tensor)"
                        ))
                        .with_help(format!(
                            "bind the result, `let {param}_new = update({name}, ...);`, and \
                             read that from then on"
                        )),
                    ));
                }
                Val::Tuple(vs) | Val::List(vs) => stack.extend(vs),
                Val::Weak(_) => {}
            }
        }
        Ok(())
    }

    /// `update(dst, rows, at: pos, axis: k)`: `dst` with `rows` written along axis `k` from
    /// position `pos[b]` for each index `b` of `dst`'s first dim; `update(dst, value)`:
    /// `dst` overwritten with `value`, every element.
    pub(crate) fn update_call(
        &mut self,
        span: Span,
        pos: Vec<Arg>,
        named: &[(&NamedArg, Val)],
    ) -> R<Val> {
        self.check_args(
            "update",
            span,
            &pos,
            named,
            2,
            Some(2),
            &[("at", false), ("axis", false)],
        )?;
        let at_given = self.named_value(named, "at").is_some();
        let axis_given = self.named_value(named, "axis").is_some();
        if at_given != axis_given {
            let (given, missing) = if at_given {
                ("at", "axis")
            } else {
                ("axis", "at")
            };
            return Err(self.error(
                Diagnostic::error(
                    codes::MISSING_NAMED_ARG,
                    format!("`update` with `{given}:` needs the named argument `{missing}`"),
                )
                .with_label(span, format!("`{missing}:` is missing"))
                .with_note(
                    "`update(dst, rows, at: pos, axis: k)` writes rows from position `pos` along \
                     axis `k`; `update(dst, value)`, with neither, writes the whole tensor",
                ),
            ));
        }
        let mut it = pos.into_iter();
        let (Some((dv, dspan)), Some((rv, rspan))) = (it.next(), it.next()) else {
            return Err(Reported);
        };
        // The tensor updated: a chain value, not yet consumed. A consumed one is reported
        // where its name is read; this catches one that reached here another way.
        if let Some(l) = match &dv {
            Val::T(x) => self.inplace.links.get(x).cloned(),
            _ => None,
        } {
            self.fresh(&l.param, &dv, dspan)?;
        }
        let dst = match &dv {
            Val::T(x) if self.inplace.links.contains_key(x) => *x,
            other => {
                let what = self.describe(other);
                let input = match other {
                    Val::T(x) => self.graph.inputs.iter().find(|(_, v)| v == x).cloned(),
                    _ => None,
                };
                let mut d = Diagnostic::error(
                    codes::UPDATE_NOT_INOUT,
                    "`update` writes only into a step parameter declared `inout`",
                )
                .with_label(dspan, format!("this is {what}, not an `inout` parameter"))
                .with_note(
                    "the first argument of `update` is an `inout` step parameter, or what an \
                     earlier `update` of one returned: the tensor is written in place, never \
                     copied",
                );
                if let Some((n, x)) = input {
                    let ty = self.graph.ty(x).clone();
                    d = d.with_help(format!(
                        "declare it in the step's signature: `{n}: inout {ty}`"
                    ));
                }
                return Err(self.error(d));
            }
        };
        let dty = self.graph.ty(dst).clone();
        let rows = self.tensor(rv, rspan)?;
        let rty = self.graph.ty(rows).clone();
        if rty.dtype != dty.dtype {
            let what = if at_given { "rows" } else { "values" };
            return Err(self.error(
                Diagnostic::error(
                    codes::DTYPE_MISMATCH,
                    format!(
                        "`update` writes {} {what} into a {} tensor",
                        rty.dtype, dty.dtype
                    ),
                )
                .with_label(rspan, format!("this is {rty}"))
                .with_secondary(dspan, format!("this is {dty}"))
                .with_note(format!(
                    "the {what} are stored as they are: they must have the tensor's dtype"
                ))
                .with_help(format!("convert them first, e.g. `{}({what})`", dty.dtype)),
            ));
        }
        if !at_given {
            return self.update_whole(span, (dst, dspan), (rows, rspan));
        }
        let (axis_val, axis_span) = self.named_value(named, "axis").ok_or(Reported)?;
        let axis = self.axis(&axis_val, axis_span, dst, dspan)?;
        let rank = dty.shape.rank();
        if axis == 0 {
            return Err(self.error(
                Diagnostic::error(
                    codes::BAD_AXIS,
                    format!("`update` along axis 0 of {dty}"),
                )
                .with_label(axis_span, "the first axis holds the entries positions are given for")
                .with_note(
                    "`at:` gives one position per index of the first dim (a batch of sequences); \
                     the rows are written along a later axis",
                ),
            ));
        }
        let (ds, rs) = (&dty.shape.0, &rty.shape.0);
        let fits = rs.len() == rank
            && (0..rank).all(|i| i == axis || rs[i] == ds[i])
            && rs[axis] <= ds[axis];
        if !fits {
            let why = if rs.len() != rank {
                format!("the rows have rank {}, the tensor {rank}", rs.len())
            } else if rs[axis] > ds[axis] {
                format!(
                    "{} rows along axis {axis} do not fit its length {}",
                    rs[axis], ds[axis]
                )
            } else {
                format!("every dim but axis {axis} must equal the tensor's")
            };
            return Err(self.error(
                Diagnostic::error(
                    codes::UPDATE_SHAPE,
                    format!(
                        "rows {} do not fit {} along axis {axis}",
                        fmt_shape(rs),
                        fmt_shape(ds)
                    ),
                )
                .with_label(rspan, format!("rows of shape {}", fmt_shape(rs)))
                .with_secondary(dspan, format!("tensor of shape {}", fmt_shape(ds)))
                .with_note(why),
            ));
        }
        if ds[axis] > i32::MAX as u64 {
            return Err(self.error(
                Diagnostic::error(
                    codes::UPDATE_SHAPE,
                    format!("axis {axis} of {dty} is too long for i32 positions"),
                )
                .with_label(dspan, format!("{} positions", ds[axis]))
                .with_note("positions are i32: an updated axis has at most 2^31 - 1 entries"),
            ));
        }
        // One position per entry of the first dim; a scalar stands for all of them.
        let (pv, pspan) = self.named_value(named, "at").ok_or(Reported)?;
        let p = match pv {
            Val::Weak(l) => self.materialize(l, DType::I32, pspan)?,
            other => self.tensor(other, pspan)?,
        };
        let pty = self.graph.ty(p).clone();
        let b = ds[0];
        if pty.dtype != DType::I32 || !matches!(&pty.shape.0[..], [] | [1]) && pty.shape.0 != [b] {
            return Err(self.error(
                Diagnostic::error(
                    codes::UPDATE_SHAPE,
                    format!("`at:` must be i32[{b}] (one position per index of the first dim), found {pty}"),
                )
                .with_label(pspan, format!("this is {pty}"))
                .with_secondary(dspan, format!("the first dim of {dty} is {b}")),
            ));
        }
        let p = self.broadcast_to(p, &[b], pspan)?;
        let u = self.build(
            Op::Update {
                dst,
                rows,
                at: Some(UpdateAt {
                    pos: p,
                    axis: axis as u32,
                }),
            },
            None,
            span,
        )?;
        Ok(Val::T(self.consume(dst, u, span)))
    }

    /// `update(dst, value)`: every element of `dst` written with `value`'s, which has
    /// `dst`'s type (its dtype is checked by the caller). The value may be computed from
    /// `dst` itself — AdamW's `p - lr * ...`: the update's kernel reads each element where
    /// it writes it, and any other reading of `dst` is finished by an earlier kernel.
    fn update_whole(
        &mut self,
        span: Span,
        (dst, dspan): (Value, Span),
        (value, vspan): (Value, Span),
    ) -> R<Val> {
        let (ds, vs) = (
            self.graph.ty(dst).shape.0.clone(),
            self.graph.ty(value).shape.0.clone(),
        );
        if ds != vs {
            return Err(self.error(
                Diagnostic::error(
                    codes::UPDATE_SHAPE,
                    format!(
                        "`update` writes a value of shape {} into the whole of a tensor of shape {}",
                        fmt_shape(&vs),
                        fmt_shape(&ds)
                    ),
                )
                .with_label(vspan, format!("shape {}", fmt_shape(&vs)))
                .with_secondary(dspan, format!("shape {}", fmt_shape(&ds)))
                .with_note(
                    "without `at:` and `axis:`, `update(dst, value)` overwrites every element: \
                     the value has the tensor's shape exactly (no broadcast)",
                )
                .with_help(
                    "broadcast it first, or write rows with `update(dst, rows, at: pos, axis: k)`",
                ),
            ));
        }
        let u = self.build(
            Op::Update {
                dst,
                rows: value,
                at: None,
            },
            None,
            span,
        )?;
        Ok(Val::T(self.consume(dst, u, span)))
    }

    /// Records that update `u` (at `span`) consumed chain value `dst`: `u` is the chain's
    /// new end. Returns `u`.
    fn consume(&mut self, dst: Value, u: Value, span: Span) -> Value {
        let param = self.inplace.links[&dst].param.clone();
        if let Some(l) = self.inplace.links.get_mut(&dst) {
            l.updated = Some((u, span));
        }
        self.inplace.links.insert(
            u,
            Link {
                param: param.clone(),
                updated: None,
            },
        );
        if let Some(end) = self.inplace.ends.iter_mut().find(|(n, _)| *n == param) {
            end.1 = u;
        }
        u
    }

    fn named_value(&self, named: &[(&NamedArg, Val)], key: &str) -> Option<(Val, Span)> {
        named
            .iter()
            .find(|(n, _)| n.name.node == key)
            .map(|(n, v)| (v.clone(), self.m.span(n.value)))
    }

    /// Reports every op that reads, after an update (or as the update's own rows or
    /// positions), a value computed from the tensor the update overwrites: the graph is in
    /// source order, so "after" is "defined later".
    pub(crate) fn check_reads_before_updates(&mut self) {
        let consumed: HashMap<Value, (Value, Span, String)> = self
            .inplace
            .links
            .iter()
            .filter_map(|(v, l)| l.updated.map(|(u, s)| (*v, (u, s, l.param.clone()))))
            .collect();
        if consumed.is_empty() {
            return;
        }
        // The consumed chain values each value is computed from (not through an update).
        let mut from: HashMap<Value, BTreeSet<Value>> = HashMap::new();
        let ops: Vec<(Value, Op)> = self.graph.ops.iter().map(|(v, o)| (v, o.clone())).collect();
        for (x, op) in ops {
            // An update's own `dst` is what it consumes; a whole update's value may be
            // computed from it (its kernel reads each element where it writes it).
            let whole = matches!(op, Op::Update { at: None, .. });
            let args = match &op {
                Op::Update { .. } => op.update_sources(),
                _ => op.args(),
            };
            let mut deps: BTreeSet<Value> = BTreeSet::new();
            let mut bad: Option<(Value, Value)> = None;
            for a in args {
                let mut d = from.get(&a).cloned().unwrap_or_default();
                if consumed.contains_key(&a) {
                    d.insert(a);
                }
                for &c in &d {
                    let own = whole && consumed[&c].0 == x;
                    if consumed[&c].0 <= x && !own && bad.is_none() {
                        bad = Some((a, c));
                    }
                }
                deps.extend(d);
            }
            if let Some((a, c)) = bad {
                self.report_read_before_update(x, a, &consumed[&c]);
                // Reported once: values computed from this one are not reported again.
                continue;
            }
            // What an update wrote is read from its buffer, never computed again: reading
            // it later reads none of the values its rows were computed from.
            if !deps.is_empty() && !matches!(op, Op::Update { .. }) {
                from.insert(x, deps);
            }
        }
    }

    fn report_read_before_update(
        &mut self,
        x: Value,
        a: Value,
        (u, uspan, param): &(Value, Span, String),
    ) {
        let d = if x == *u {
            Diagnostic::error(
                codes::READ_BEFORE_UPDATE,
                format!("the rows or positions of this `update` are computed from `{param}`, which it overwrites"),
            )
            .with_label(self.spans[a], format!("computed from `{param}`"))
            .with_note(
                "the update's kernel writes into the tensor while computing its rows: \
                 rows read from the same tensor would race with the writes",
            )
            .with_help("compute the rows from another tensor")
        } else {
            Diagnostic::error(
                codes::READ_BEFORE_UPDATE,
                format!(
                    "this uses a value computed from `{param}` before its update, which overwrote `{param}` in place"
                ),
            )
            .with_label(self.spans[x], "used after the update")
            .with_secondary(self.spans[a], format!("computed from `{param}` before the update"))
            .with_secondary(*uspan, format!("`{param}` is updated in place here"))
            .with_note(format!(
                "every value computed from `{param}` as it was must be finished before the \
                 update writes into its buffer; using one afterwards would need a copy of the \
                 tensor"
            ))
            .with_help("use the value before the update, or compute it from the value `update` returned")
        };
        self.error(d);
    }
}
