//! The builtin functions: math, `pow`, `min`/`max`, reductions, `softmax`, `where`, `iota`,
//! `causal`, `transpose`, `permute` (`concat`, `split` and `reshape` are in `layout.rs`,
//! `update` in `inplace.rs`); and the argument checks they share.

use tessel_ir::graph::{BinaryOp as IrBinary, Op, ReduceOp, UnaryOp as IrUnary};
use tessel_ir::{DType, TensorType, Value};
use tessel_syntax::ast::NamedArg;
use tessel_syntax::{Diagnostic, Span};

use super::eval::Arg;
use super::lit::Lit;
use super::{codes, suggest, Checker, Reported, Val, R};

pub(super) type Named<'a, 'n> = &'a [(&'n NamedArg, Val)];

impl Checker<'_> {
    /// Calls builtin `name` (one of [`super::BUILTINS`]).
    pub(crate) fn builtin(
        &mut self,
        name: &str,
        span: Span,
        pos: Vec<Arg>,
        named: Named,
    ) -> R<Val> {
        let unary = match name {
            "exp" => Some(IrUnary::Exp),
            "log" => Some(IrUnary::Log),
            "sqrt" => Some(IrUnary::Sqrt),
            "rsqrt" => Some(IrUnary::Rsqrt),
            "sin" => Some(IrUnary::Sin),
            "cos" => Some(IrUnary::Cos),
            "tanh" => Some(IrUnary::Tanh),
            "sigmoid" => Some(IrUnary::Sigmoid),
            "silu" => Some(IrUnary::Silu),
            "erf" => Some(IrUnary::Erf),
            "abs" => Some(IrUnary::Abs),
            _ => None,
        };
        if let Some(op) = unary {
            self.check_args(name, span, &pos, named, 1, Some(1), &[])?;
            let (v, vspan) = first(pos)?;
            let x = self.tensor(v, vspan)?;
            let ty = self.graph.ty(x).clone();
            let ok = if op == IrUnary::Abs {
                ty.dtype != DType::Bool
            } else {
                ty.dtype.is_float()
            };
            if !ok {
                let need = if op == IrUnary::Abs {
                    "a number"
                } else {
                    "a float tensor"
                };
                return Err(self.error(
                    Diagnostic::error(
                        codes::FLOAT_REQUIRED,
                        format!("`{name}` needs {need}, found {ty}"),
                    )
                    .with_label(vspan, format!("this is {ty}"))
                    .with_secondary(span, format!("`{name}` is defined on bf16, f16 and f32"))
                    .with_help("convert first, e.g. `f32(x)`"),
                ));
            }
            return Ok(Val::T(self.build(Op::Unary { op, arg: x }, None, span)?));
        }
        if super::elementwise::NAMES.contains(&name) {
            return self.torch_elementwise(name, span, pos, named);
        }
        match name {
            "pow" => {
                self.check_args(name, span, &pos, named, 2, Some(2), &[])?;
                let (a, b) = two(pos)?;
                Ok(Val::T(self.elementwise(
                    IrBinary::Pow,
                    "`pow`",
                    span,
                    a,
                    b,
                )?))
            }
            "min" | "max" if named.is_empty() && pos.len() == 2 => {
                let (a, b) = two(pos)?;
                let op = if name == "min" {
                    IrBinary::Min
                } else {
                    IrBinary::Max
                };
                Ok(Val::T(self.elementwise(
                    op,
                    &format!("`{name}`"),
                    span,
                    a,
                    b,
                )?))
            }
            "sum" | "mean" | "min" | "max" | "argmax" | "argmin" | "logsumexp" => {
                self.reduce(name, span, pos, named)
            }
            "topk" => self.topk(span, pos, named),
            "cumsum" => self.cumsum(span, pos, named),
            "softmax" => {
                self.check_args(name, span, &pos, named, 1, Some(1), &[("axis", true)])?;
                let (v, vspan) = first(pos)?;
                let x = self.tensor(v, vspan)?;
                let ty = self.graph.ty(x).clone();
                if !ty.dtype.is_float() {
                    return Err(self.float_required(name, vspan, &ty));
                }
                let axis = self.axis_arg(named, "axis", span, x, vspan)?;
                Ok(Val::T(self.build(
                    Op::Softmax {
                        arg: x,
                        axis: axis as u32,
                    },
                    None,
                    span,
                )?))
            }
            "where" => {
                self.check_args(name, span, &pos, named, 3, Some(3), &[])?;
                let mut it = pos.into_iter();
                let (c, a, b) = match (it.next(), it.next(), it.next()) {
                    (Some(c), Some(a), Some(b)) => (c, a, b),
                    _ => return Err(Reported),
                };
                self.select(span, c, a, b)
            }
            "iota" => {
                self.check_args(name, span, &pos, named, 1, Some(1), &[])?;
                let (v, vspan) = first(pos)?;
                let n = self.const_int(&v, vspan, "the length of `iota`")?;
                if n < 1 {
                    return Err(self.error(
                        Diagnostic::error(codes::BAD_DIM, format!("`iota({n})` has no elements"))
                            .with_label(vspan, "the length must be at least 1"),
                    ));
                }
                // The last value, n - 1, must be an i32.
                if n - 1 > i64::from(i32::MAX) {
                    return Err(self.error(
                        Diagnostic::error(
                            codes::LITERAL_RANGE,
                            format!("`iota({n})` counts past the largest i32"),
                        )
                        .with_label(vspan, format!("its last value would be {}", n - 1))
                        .with_note(format!(
                            "iota gives i32 values 0 ..= n - 1, so n is at most 2^31 = {}",
                            i64::from(i32::MAX) + 1
                        )),
                    ));
                }
                Ok(Val::T(self.build(
                    Op::Iota { axis: 0 },
                    Some(TensorType::new(DType::I32, vec![n as u64])),
                    span,
                )?))
            }
            "causal" => self.causal(span, pos, named),
            "concat" => self.concat(span, pos, named),
            "update" => self.update_call(span, pos, named),
            "take_along_axis" | "gather" => self.gather_call(name, span, pos, named),
            "split" => self.split(span, pos, named),
            "reshape" => {
                self.check_args(name, span, &pos, named, 2, Some(2), &[])?;
                let (a, b) = two(pos)?;
                self.reshape_call(span, a, b)
            }
            "transpose" => {
                self.check_args(name, span, &pos, named, 3, Some(3), &[])?;
                let mut it = pos.into_iter();
                let (x, a, b) = match (it.next(), it.next(), it.next()) {
                    (Some(x), Some(a), Some(b)) => (x, a, b),
                    _ => return Err(Reported),
                };
                let t = self.tensor(x.0, x.1)?;
                let i = self.axis(&a.0, a.1, t, x.1)?;
                let j = self.axis(&b.0, b.1, t, x.1)?;
                let mut perm: Vec<u32> = (0..self.shape(t).len() as u32).collect();
                perm.swap(i, j);
                Ok(Val::T(self.permute(t, perm, span)?))
            }
            "permute" => {
                self.check_args(name, span, &pos, named, 2, Some(2), &[])?;
                let (x, p) = two(pos)?;
                let t = self.tensor(x.0, x.1)?;
                let items = self.int_list(&p.0, p.1, "the permutation")?;
                let rank = self.shape(t).len();
                let mut perm = Vec::new();
                for i in &items {
                    let a = if *i < 0 {
                        i.saturating_add(rank as i64)
                    } else {
                        *i
                    };
                    if a < 0 || a >= rank as i64 || perm.contains(&(a as u32)) {
                        perm.clear();
                        break;
                    }
                    perm.push(a as u32);
                }
                if perm.len() != rank {
                    let ty = self.graph.ty(t).clone();
                    let list: Vec<String> = items.iter().map(i64::to_string).collect();
                    return Err(self.error(
                        Diagnostic::error(
                            codes::RANK,
                            format!(
                                "[{}] is not a permutation of the {rank} axes of {ty}",
                                list.join(", ")
                            ),
                        )
                        .with_label(p.1, format!("expected each of 0..{rank} once"))
                        .with_secondary(x.1, format!("this is {ty}")),
                    ));
                }
                Ok(Val::T(self.permute(t, perm, span)?))
            }
            _ => Err(Reported),
        }
    }

    /// Checks the argument list of builtin `name`: between `min` and `max` positional
    /// arguments; named arguments among `allowed` (name, required).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_args(
        &mut self,
        name: &str,
        span: Span,
        pos: &[Arg],
        named: Named,
        min: usize,
        max: Option<usize>,
        allowed: &[(&str, bool)],
    ) -> R<()> {
        let n = pos.len();
        if n < min || max.is_some_and(|m| n > m) {
            let want = match max {
                Some(m) if m == min => format!("{min}"),
                Some(m) => format!("{min} to {m}"),
                None => format!("at least {min}"),
            };
            let plural = if want == "1" { "" } else { "s" };
            let label_span = pos.get(max.unwrap_or(usize::MAX)).map_or(span, |(_, s)| *s);
            let mut d = Diagnostic::error(
                codes::ARG_COUNT,
                format!("`{name}` takes {want} positional argument{plural}, but {n} were given"),
            )
            .with_label(
                label_span,
                if n > min {
                    "unexpected argument"
                } else {
                    "in this call"
                },
            );
            if (name == "min" || name == "max") && named.is_empty() {
                d = d.with_note(format!(
                    "`{name}(a, b)` is elementwise; `{name}(x, axis: k)` reduces"
                ));
            }
            // PyTorch passes `dim` (and `keepdim`) by position: `softmax(x, -1)`.
            let takes_axis = allowed.iter().any(|(a, _)| *a == "axis");
            let axis_given = named.iter().any(|(n, _)| n.name.node == "axis");
            if let (Some(m @ 1), true, false) = (max, takes_axis, axis_given) {
                if n > m {
                    let mut spelled: Vec<String> = vec!["x".into()];
                    let names = ["axis", "keep"]
                        .into_iter()
                        .filter(|k| allowed.iter().any(|(a, _)| a == k));
                    for (k, (v, _)) in names.zip(&pos[m..]) {
                        let v = match v {
                            Val::Weak(Lit::Int(i)) => i.to_string(),
                            Val::Weak(Lit::Bool(b)) => b.to_string(),
                            _ => "...".into(),
                        };
                        spelled.push(format!("{k}: {v}"));
                    }
                    d = d.with_help(format!(
                        "the axis is a named argument: `{name}({})` (PyTorch's positional `dim`)",
                        spelled.join(", ")
                    ));
                }
            }
            return Err(self.error(d));
        }
        let mut ok = true;
        for (arg, _) in named {
            if !allowed.iter().any(|(a, _)| *a == arg.name.node) {
                ok = false;
                let mut d = Diagnostic::error(
                    codes::UNKNOWN_NAMED_ARG,
                    format!("`{name}` has no argument named `{}`", arg.name.node),
                )
                .with_label(arg.name.span, "unknown argument name");
                if let Some(t) =
                    torch_name(&arg.name.node).filter(|t| allowed.iter().any(|(a, _)| a == t))
                {
                    d = d.with_help(format!(
                        "PyTorch's `{}` is `{t}` in tessel: `{name}(x, {t}: ...)`",
                        arg.name.node
                    ));
                } else if let Some(s) = suggest(&arg.name.node, allowed.iter().map(|(a, _)| *a)) {
                    d = d.with_help(format!("did you mean `{s}`?"));
                } else if allowed.is_empty() {
                    d = d.with_note(format!("`{name}` takes no named arguments"));
                } else {
                    let names: Vec<String> =
                        allowed.iter().map(|(a, _)| format!("`{a}`")).collect();
                    d = d.with_note(format!("`{name}` takes {}", names.join(", ")));
                }
                self.error(d);
            }
        }
        for (a, required) in allowed {
            // `dim:` given for a missing `axis:` is reported above, with the name to use.
            let given = |n: &str| n == *a || torch_name(n) == Some(*a);
            if *required && !named.iter().any(|(n, _)| given(&n.name.node)) {
                ok = false;
                self.error(
                    Diagnostic::error(
                        codes::MISSING_NAMED_ARG,
                        format!("`{name}` needs the named argument `{a}`"),
                    )
                    .with_label(span, format!("`{a}:` is missing"))
                    .with_help(format!("e.g. `{name}(x, {a}: -1)`")),
                );
            }
        }
        if ok {
            Ok(())
        } else {
            Err(Reported)
        }
    }

    fn named_arg<'v>(&self, named: &'v [(&NamedArg, Val)], key: &str) -> Option<(&'v Val, Span)> {
        named
            .iter()
            .find(|(n, _)| n.name.node == key)
            .map(|(n, v)| (v, self.m.span(n.value)))
    }

    /// The named axis argument `key` of a call, normalised against `x`'s rank.
    pub(super) fn axis_arg(
        &mut self,
        named: Named,
        key: &str,
        span: Span,
        x: Value,
        xspan: Span,
    ) -> R<usize> {
        match self.named_arg(named, key) {
            Some((v, s)) => {
                let v = v.clone();
                self.axis(&v, s, x, xspan)
            }
            None => Err(self.error(
                Diagnostic::error(
                    codes::MISSING_NAMED_ARG,
                    format!("the named argument `{key}` is missing"),
                )
                .with_label(span, "here"),
            )),
        }
    }

    /// An axis of `x`: a compile-time integer in `-rank .. rank` (negative counts from the end).
    pub(crate) fn axis(&mut self, v: &Val, span: Span, x: Value, xspan: Span) -> R<usize> {
        let k = self.const_int(v, span, "an axis")?;
        let ty = self.graph.ty(x).clone();
        let rank = ty.shape.rank() as i64;
        let a = if k < 0 { k.saturating_add(rank) } else { k };
        if a < 0 || a >= rank {
            let valid = if rank == 0 {
                "a scalar has no axes".to_string()
            } else {
                format!("valid axes are {} ..= {}", -rank, rank - 1)
            };
            return Err(self.error(
                Diagnostic::error(
                    codes::BAD_AXIS,
                    format!("axis {k} is out of range for {ty} (rank {rank})"),
                )
                .with_label(span, valid)
                .with_secondary(xspan, format!("this is {ty}")),
            ));
        }
        Ok(a as usize)
    }

    pub(super) fn float_required(&mut self, name: &str, span: Span, ty: &TensorType) -> Reported {
        self.error(
            Diagnostic::error(
                codes::FLOAT_REQUIRED,
                format!("`{name}` needs a float tensor, found {ty}"),
            )
            .with_label(span, format!("this is {ty}"))
            .with_help("convert first, e.g. `f32(x)`"),
        )
    }

    /// `sum/mean/max/min/argmax/argmin/logsumexp(x, axis: k, keep: bool = false)`;
    /// `argmax`/`argmin` give i32 and are not defined on bool (E0320), `mean` and
    /// `logsumexp` need a float.
    fn reduce(&mut self, name: &str, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args(
            name,
            span,
            &pos,
            named,
            1,
            Some(1),
            &[("axis", true), ("keep", false)],
        )?;
        let (v, vspan) = first(pos)?;
        let x = self.tensor(v, vspan)?;
        let ty = self.graph.ty(x).clone();
        let op = match name {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "argmax" => ReduceOp::ArgMax,
            "argmin" => ReduceOp::ArgMin,
            "logsumexp" => ReduceOp::LogSumExp,
            _ => ReduceOp::Min,
        };
        if matches!(op, ReduceOp::Mean | ReduceOp::LogSumExp) && !ty.dtype.is_float() {
            return Err(self.float_required(name, vspan, &ty));
        }
        let index = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
        if index && ty.dtype == DType::Bool {
            return Err(self.unordered_bool(name, vspan, &ty));
        }
        if ty.dtype == DType::Bool {
            return Err(self.error(
                Diagnostic::error(
                    codes::BOOL_ARITHMETIC,
                    format!("`{name}` is not defined on bool, found {ty}"),
                )
                .with_label(vspan, format!("this is {ty}"))
                .with_help("convert first, e.g. `i32(mask)`"),
            ));
        }
        let axis = self.axis_arg(named, "axis", span, x, vspan)?;
        let keep = match self.named_arg(named, "keep") {
            None => false,
            Some((Val::Weak(Lit::Bool(b)), _)) => *b,
            Some((other, s)) => {
                let what = self.describe(other);
                return Err(self.error(
                    Diagnostic::error(
                        codes::NOT_CONSTANT,
                        format!("`keep` must be `true` or `false`, found {what}"),
                    )
                    .with_label(s, format!("this is {what}")),
                ));
            }
        };
        let r = self.build(
            Op::Reduce {
                op,
                arg: x,
                axis: axis as u32,
            },
            None,
            span,
        )?;
        if keep {
            return Ok(Val::T(r));
        }
        let mut kept = self.shape(r);
        kept.remove(axis);
        Ok(Val::T(self.reshape(r, kept, span)?))
    }

    /// `where(c, a, b)`: `c` bool; `a` and `b` promoted together; all three broadcast.
    fn select(&mut self, span: Span, (c, cspan): Arg, a: Arg, b: Arg) -> R<Val> {
        let cond = match c {
            Val::Weak(Lit::Bool(_)) | Val::T(_) => self.operand_bool(c, cspan)?,
            other => {
                let what = self.describe(&other);
                return Err(self.error(
                    Diagnostic::error(
                        codes::BOOL_REQUIRED,
                        format!("the condition of `where` must be bool, found {what}"),
                    )
                    .with_label(cspan, format!("this is {what}")),
                ));
            }
        };
        let dt = self.join(&[&a.0, &b.0]);
        let (aspan, bspan) = (a.1, b.1);
        let x = self.operand(a.0, dt, aspan)?;
        let y = self.operand(b.0, dt, bspan)?;
        let shapes = [
            (self.shape(cond), cspan),
            (self.shape(x), aspan),
            (self.shape(y), bspan),
        ];
        let shape = self.broadcast_shapes("`where`", span, &shapes)?;
        self.addressable(&TensorType::new(dt, shape.clone()), span, None)?;
        let cond = self.broadcast_to(cond, &shape, cspan)?;
        let x = self.broadcast_to(x, &shape, aspan)?;
        let y = self.broadcast_to(y, &shape, bspan)?;
        Ok(Val::T(self.build(
            Op::Select {
                cond,
                on_true: x,
                on_false: y,
            },
            None,
            span,
        )?))
    }

    fn operand_bool(&mut self, c: Val, span: Span) -> R<Value> {
        let t = self.tensor(c, span)?;
        let ty = self.graph.ty(t).clone();
        if ty.dtype != DType::Bool {
            return Err(self.error(
                Diagnostic::error(
                    codes::BOOL_REQUIRED,
                    format!("the condition of `where` must be bool, found {ty}"),
                )
                .with_label(span, format!("this is {ty}"))
                .with_help("compare to get a mask, e.g. `x > 0.0`"),
            ));
        }
        Ok(t)
    }

    /// `causal(t, s, offset: p)`: the attention mask `bool[t, s]` with `[i, j] = j <= i + p`,
    /// `p = s - t` by default (query i of a block of `t` queries at the end of `s` keys sees
    /// keys 0 ..= i + s - t, as transformers' and flash-attention's causal masks do; the
    /// last query sees every key). `t` and `s` are compile-time integers from 1 to 2^31, `p`
    /// any compile-time integer.
    ///
    /// Built from iotas, so it fuses into whatever reads it like any elementwise
    /// expression: `(iota_1 - iota_0) <= p'`, where `j - i` lies in `-(t-1) ..= s-1` (no
    /// i32 wrap) and `p' = clamp(p, -t, s - 1)` gives the same mask (`p >= s - 1` keeps
    /// every key, `p <= -t` none) as an i32 constant.
    fn causal(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args(
            "causal",
            span,
            &pos,
            named,
            2,
            Some(2),
            &[("offset", false)],
        )?;
        let ((a, aspan), (b, bspan)) = two(pos)?;
        // Each argument is diagnosed on its own.
        let t = self.causal_len(&a, aspan, ("query", "queries"));
        let s = self.causal_len(&b, bspan, ("key", "keys"));
        let offset = match self.named_arg(named, "offset") {
            Some((v, vspan)) => {
                let v = v.clone();
                self.const_int(&v, vspan, "the offset of `causal`")
                    .map(Some)
            }
            None => Ok(None),
        };
        let (t, s, offset) = (t?, s?, offset?);
        let offset = offset.unwrap_or(s - t);
        let shape = vec![t as u64, s as u64];
        let ity = TensorType::new(DType::I32, shape.clone());
        let i = self.build(Op::Iota { axis: 0 }, Some(ity.clone()), span)?;
        let j = self.build(Op::Iota { axis: 1 }, Some(ity), span)?;
        let d = self.build(
            Op::Binary {
                op: IrBinary::Sub,
                lhs: j,
                rhs: i,
            },
            None,
            span,
        )?;
        let p = self.materialize(Lit::Int(offset.clamp(-t, s - 1)), DType::I32, span)?;
        let p = self.broadcast_to(p, &shape, span)?;
        Ok(Val::T(self.build(
            Op::Binary {
                op: IrBinary::Le,
                lhs: d,
                rhs: p,
            },
            None,
            span,
        )?))
    }

    /// A length argument of `causal` (`what`: "query" or "key", and its plural): a
    /// compile-time integer from 1 to 2^31 (its positions 0 ..= n - 1 are i32).
    fn causal_len(&mut self, v: &Val, span: Span, (what, whats): (&str, &str)) -> R<i64> {
        if let Val::T(x) = v {
            let ty = self.graph.ty(*x).clone();
            return Err(self.error(
                Diagnostic::error(
                    codes::NOT_CONSTANT,
                    format!(
                        "the {what} count of `causal` must be a compile-time integer, found a \
                         tensor {ty}"
                    ),
                )
                .with_label(span, format!("this is a tensor {ty}"))
                .with_help(
                    "`causal` takes lengths, not tensors: for q: [T, D] and k: [S, D], write \
                     `causal(T, S)`",
                ),
            ));
        }
        let n = self.const_int(v, span, &format!("the {what} count of `causal`"))?;
        if n < 1 {
            return Err(self.error(
                Diagnostic::error(
                    codes::BAD_DIM,
                    format!("`causal` needs at least one {what}, found {n}"),
                )
                .with_label(span, format!("{n} {whats}"))
                .with_note("the mask is bool[queries, keys]; every dim is at least 1"),
            ));
        }
        if n - 1 > i64::from(i32::MAX) {
            return Err(self.error(
                Diagnostic::error(
                    codes::LITERAL_RANGE,
                    format!("`causal` with {n} {whats} counts past the largest i32"),
                )
                .with_label(span, format!("its last {what} would be {}", n - 1))
                .with_note(format!(
                    "positions are i32 values 0 ..= n - 1, so n is at most 2^31 = {}",
                    i64::from(i32::MAX) + 1
                )),
            ));
        }
        Ok(n)
    }
}

pub(super) fn first(pos: Vec<Arg>) -> R<Arg> {
    pos.into_iter().next().ok_or(Reported)
}

pub(super) fn two(pos: Vec<Arg>) -> R<(Arg, Arg)> {
    let mut it = pos.into_iter();
    match (it.next(), it.next()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(Reported),
    }
}

/// The tessel name of a named argument spelled as in PyTorch (`dim`, `keepdim`).
fn torch_name(name: &str) -> Option<&'static str> {
    match name {
        "dim" => Some("axis"),
        "keepdim" => Some("keep"),
        _ => None,
    }
}
