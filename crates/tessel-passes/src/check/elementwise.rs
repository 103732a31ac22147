//! The elementwise builtins a PyTorch port reaches for, with torch's names and semantics:
//! `gelu`, `relu`, `clamp`, `maximum`/`minimum`, `floor`/`ceil`/`round`/`trunc`,
//! `floor_divide`, `remainder` (which `%` is) and `fmod` (called from `builtins.rs`).
//!
//! `relu`, `clamp`, `maximum`/`minimum`, `remainder` and `floor_divide` are composites written
//! here in existing graph ops, in the operation order of PyTorch's CUDA kernels (each file is
//! named at its builder), so that the reference judges every step and the ops fuse like any
//! elementwise expression. Float composites of 16-bit operands compute in f32 and round once
//! at the end, as torch's `opmath_t` kernels do. GELU is one graph op ([`IrUnary::Gelu`],
//! [`IrUnary::GeluTanh`]; `lower` writes its f32 sequence), because it reads `x` twice and a
//! GEMM epilogue is a chain of single-use ops; the rounding functions are graph ops of their
//! own (exact, `cvt.rmi/rpi/rni/rzi.f32.f32`), and `fmod` is [`IrBinary::Rem`].

use tessel_ir::graph::{BinaryOp as IrBinary, Op, UnaryOp as IrUnary};
use tessel_ir::{DType, TensorType, Value};
use tessel_syntax::{Diagnostic, Span};

use super::builtins::{two, Named};
use super::eval::Arg;
use super::lit::Lit;
use super::{codes, Checker, Reported, Val, R};

/// The builtins of this file (each also in [`super::BUILTINS`]).
pub(super) const NAMES: &[&str] = &[
    "gelu",
    "relu",
    "clamp",
    "maximum",
    "minimum",
    "floor",
    "ceil",
    "round",
    "trunc",
    "fmod",
    "remainder",
    "floor_divide",
];

impl Checker<'_> {
    /// Calls builtin `name`, one of [`NAMES`].
    pub(super) fn torch_elementwise(
        &mut self,
        name: &str,
        span: Span,
        pos: Vec<Arg>,
        named: Named,
    ) -> R<Val> {
        match name {
            "gelu" => self.gelu(span, pos, named),
            "relu" => self.relu(span, pos, named),
            "clamp" => self.clamp(span, pos, named),
            "maximum" | "minimum" => (|| {
                self.check_args(name, span, &pos, named, 2, Some(2), &[])?;
                let (a, b) = two(pos)?;
                let op = if name == "maximum" {
                    IrBinary::Max
                } else {
                    IrBinary::Min
                };
                Ok(Val::T(self.elementwise(
                    op,
                    &format!("`{name}`"),
                    span,
                    a,
                    b,
                )?))
            })(),
            "floor" | "ceil" | "round" | "trunc" => self.rounding(name, span, pos, named),
            "fmod" => (|| {
                self.check_args(name, span, &pos, named, 2, Some(2), &[])?;
                let (a, b) = two(pos)?;
                Ok(Val::T(self.elementwise(
                    IrBinary::Rem,
                    "`fmod`",
                    span,
                    a,
                    b,
                )?))
            })(),
            "remainder" | "floor_divide" => (|| {
                self.check_args(name, span, &pos, named, 2, Some(2), &[])?;
                let (a, b) = two(pos)?;
                if name == "remainder" {
                    self.remainder(&format!("`{name}`"), span, a, b).map(Val::T)
                } else {
                    self.floor_divide(span, a, b).map(Val::T)
                }
            })(),
            _ => Err(Reported),
        }
    }

    /// `op(x, y)` on two values of one type (a comparison gives bool).
    fn bin(&mut self, op: IrBinary, x: Value, y: Value, span: Span) -> R<Value> {
        self.build(Op::Binary { op, lhs: x, rhs: y }, None, span)
    }

    fn un(&mut self, op: IrUnary, x: Value, span: Span) -> R<Value> {
        self.build(Op::Unary { op, arg: x }, None, span)
    }

    /// `value` as a tensor of `like`'s type.
    fn full_like(&mut self, value: Lit, like: Value, span: Span) -> R<Value> {
        let ty = self.graph.ty(like).clone();
        let c = self.materialize(value, ty.dtype, span)?;
        self.broadcast_to(c, &ty.shape.0, span)
    }

    fn sel(&mut self, c: Value, t: Value, f: Value, span: Span) -> R<Value> {
        self.build(
            Op::Select {
                cond: c,
                on_true: t,
                on_false: f,
            },
            None,
            span,
        )
    }

    /// Both operands promoted to one dtype (`join`) and broadcast to one shape; bool is
    /// refused (`what` names the operation).
    fn two_numbers(&mut self, what: &str, span: Span, a: Arg, b: Arg) -> R<(Value, Value)> {
        let dt = self.join(&[&a.0, &b.0]);
        if dt == DType::Bool {
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
        self.addressable(&TensorType::new(dt, shape.clone()), span, None)?;
        let x = self.broadcast_to(x, &shape, aspan)?;
        let y = self.broadcast_to(y, &shape, bspan)?;
        Ok((x, y))
    }

    /// `gelu(x, approximate: false)`, `torch.nn.functional.gelu`: float `x`, its dtype and
    /// shape. `ActivationGeluKernel.cu`'s order, in f32 with one rounding to `x`'s dtype:
    /// exact `x·0.5·(1 + erf(x·kAlpha))`; `approximate: true` (torch's
    /// `approximate='tanh'`) `0.5·x·(1 + tanh(kBeta·(x + kKappa·x·x·x)))`, where `x·x·x` is
    /// `(x·x)·x` and every product and sum is rounded on its own (an nvcc build may
    /// contract `x + kKappa·x³` into an fma, one rounding fewer; the tanh's 1-ulp bound
    /// covers the difference).
    fn gelu(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args(
            "gelu",
            span,
            &pos,
            named,
            1,
            Some(1),
            &[("approximate", false)],
        )?;
        let tanh_form = match named.iter().find(|(n, _)| n.name.node == "approximate") {
            None => false,
            Some((_, Val::Weak(Lit::Bool(b)))) => *b,
            Some((n, other)) => {
                let what = self.describe(other);
                let vspan = self.m.span(n.value);
                return Err(self.error(
                    Diagnostic::error(
                        codes::GELU_APPROXIMATE,
                        format!("`approximate` must be `true` or `false`, found {what}"),
                    )
                    .with_label(vspan, format!("this is {what}"))
                    .with_help(
                        "PyTorch's `approximate='tanh'` is `approximate: true`; the default, \
                         `approximate='none'`, is `false` (the erf form)",
                    ),
                ));
            }
        };
        let (v, vspan) = pos.into_iter().next().ok_or(Reported)?;
        let x = self.tensor(v, vspan)?;
        let ty = self.graph.ty(x).clone();
        if !ty.dtype.is_float() {
            return Err(self.float_required("gelu", vspan, &ty));
        }
        let op = if tanh_form {
            IrUnary::GeluTanh
        } else {
            IrUnary::Gelu
        };
        Ok(Val::T(self.un(op, x, span)?))
    }

    /// `relu(x)` (`torch.relu`, which is `clamp_min(x, 0)`): `max(x, 0)` in `x`'s dtype, a
    /// number (i32 or float; not bool, as torch refuses it); NaN stays NaN.
    fn relu(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args("relu", span, &pos, named, 1, Some(1), &[])?;
        let (v, vspan) = pos.into_iter().next().ok_or(Reported)?;
        let x = self.tensor(v, vspan)?;
        if self.dtype_of(x) == DType::Bool {
            let found = self.describe(&Val::T(x));
            return Err(self.bool_arith("relu", span, vspan, found));
        }
        let zero = self.full_like(Lit::Int(0), x, span)?;
        Ok(Val::T(self.bin(IrBinary::Max, x, zero, span)?))
    }

    /// `clamp(x, lo, hi)`, `clamp(x, lo)`, `clamp(x, min: lo)`, `clamp(x, max: hi)`
    /// (`torch.clamp`): `min(max(x, lo), hi)` with NaN-propagating max and min, so a NaN in
    /// any operand gives NaN and `lo > hi` gives `hi`, as torch's CUDA kernel does. Scalars
    /// or tensors; dtypes promoted and shapes broadcast together as in arithmetic.
    fn clamp(&mut self, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args(
            "clamp",
            span,
            &pos,
            named,
            1,
            Some(3),
            &[("min", false), ("max", false)],
        )?;
        let mut it = pos.into_iter();
        let x = it.next().ok_or(Reported)?;
        let mut lo = it.next();
        let mut hi = it.next();
        for (n, v) in named {
            let arg = (v.clone(), self.m.span(n.value));
            let slot = if n.name.node == "min" {
                &mut lo
            } else {
                &mut hi
            };
            if slot.is_some() {
                return Err(self.error(
                    Diagnostic::error(
                        codes::UNKNOWN_NAMED_ARG,
                        format!("`clamp` got its `{}` bound twice", n.name.node),
                    )
                    .with_label(n.name.span, "given again here"),
                ));
            }
            *slot = Some(arg);
        }
        if lo.is_none() && hi.is_none() {
            return Err(self.error(
                Diagnostic::error(
                    codes::CLAMP_BOUNDS,
                    "`clamp` needs at least one bound".to_string(),
                )
                .with_label(span, "neither `min` nor `max` is given")
                .with_help("e.g. `clamp(x, 0.0, 6.0)` or `clamp(x, min: 0.0)`"),
            ));
        }
        let mut r = x;
        for (bound, op) in [(lo, IrBinary::Max), (hi, IrBinary::Min)] {
            if let Some(b) = bound {
                let rspan = r.1;
                let v = self.elementwise(op, "`clamp`", span, r, b)?;
                r = (Val::T(v), rspan);
            }
        }
        Ok(r.0)
    }

    /// `floor`, `ceil`, `round` (half to even, `torch.round`) and `trunc`: exact on floats;
    /// on i32 the value itself (torch returns a copy for integer tensors); bool refused.
    fn rounding(&mut self, name: &str, span: Span, pos: Vec<Arg>, named: Named) -> R<Val> {
        self.check_args(name, span, &pos, named, 1, Some(1), &[])?;
        let (v, vspan) = pos.into_iter().next().ok_or(Reported)?;
        let x = self.tensor(v, vspan)?;
        let dt = self.dtype_of(x);
        if dt == DType::Bool {
            let found = self.describe(&Val::T(x));
            return Err(self.bool_arith(name, span, vspan, found));
        }
        if dt == DType::I32 {
            return Ok(Val::T(x));
        }
        let op = match name {
            "floor" => IrUnary::Floor,
            "ceil" => IrUnary::Ceil,
            "round" => IrUnary::Round,
            _ => IrUnary::Trunc,
        };
        Ok(Val::T(self.un(op, x, span)?))
    }

    /// `remainder(a, b)` and `a % b` (`torch.remainder`, Python's `%`): the sign of the
    /// divisor. As `BinaryRemainderKernel.cu`: `r = fmod(a, b)` (exact), then `r + b` where
    /// `r != 0` and the signs of `r` and `b` differ (that sum is rounded; a zero `r` keeps
    /// the dividend's sign). i32: the same on the truncating `%`; `remainder(a, 0) = a`
    /// (as `fmod(a, 0)`), where torch's CUDA kernel is undefined. 16-bit floats in f32,
    /// rounded once.
    pub(super) fn remainder(&mut self, what: &str, span: Span, a: Arg, b: Arg) -> R<Value> {
        let (x, y) = self.two_numbers(what, span, a, b)?;
        let dt = self.dtype_of(x);
        let work = if dt.is_float() { DType::F32 } else { dt };
        let x = self.cast(x, work, span)?;
        let y = self.cast(y, work, span)?;
        let r = self.bin(IrBinary::Rem, x, y, span)?;
        let zero = self.full_like(Lit::Int(0), r, span)?;
        let nz = self.bin(IrBinary::Ne, r, zero, span)?;
        let rneg = self.bin(IrBinary::Lt, r, zero, span)?;
        let yneg = self.bin(IrBinary::Lt, y, zero, span)?;
        let differ = self.bin(IrBinary::Ne, rneg, yneg, span)?;
        let fix = self.bin(IrBinary::And, nz, differ, span)?;
        let ry = self.bin(IrBinary::Add, r, y, span)?;
        let out = self.sel(fix, ry, r, span)?;
        self.cast(out, dt, span)
    }

    /// `floor_divide(a, b)` (`torch.floor_divide`, Python's `//`): the quotient rounded
    /// toward -inf. Floats as `div_floor_floating` (c10/util/generic_math.h, used by
    /// `BinaryDivFloorKernel.cu`): `b == 0` gives `a / b`; else `mod = fmod(a, b)`,
    /// `div = (a - mod) / b`, one less where `mod != 0` and the signs of `mod` and `b`
    /// differ, then `floor(div)`, plus 1 where `div - floor(div) > 0.5`, and a zero `div`
    /// gives a zero with the sign of `a / b`. 16-bit floats in f32, rounded once (torch
    /// rounds `floor(div)` to the 16-bit dtype before its `> 0.5` fix-up, which differs only
    /// where that floor is not representable). i32 as `div_floor_integer`: the truncating
    /// quotient, one less where the signs differ and the remainder is not 0;
    /// `floor_divide(a, 0) = 0` (as `/`; torch's CUDA kernel is undefined there) and
    /// `floor_divide(-2^31, -1) = -2^31` (wraps).
    fn floor_divide(&mut self, span: Span, a: Arg, b: Arg) -> R<Value> {
        let (x, y) = self.two_numbers("`floor_divide`", span, a, b)?;
        let dt = self.dtype_of(x);
        if dt == DType::I32 {
            let q = self.bin(IrBinary::Div, x, y, span)?;
            let r = self.bin(IrBinary::Rem, x, y, span)?;
            let zero = self.full_like(Lit::Int(0), x, span)?;
            let one = self.full_like(Lit::Int(1), x, span)?;
            let xneg = self.bin(IrBinary::Lt, x, zero, span)?;
            let yneg = self.bin(IrBinary::Lt, y, zero, span)?;
            let differ = self.bin(IrBinary::Ne, xneg, yneg, span)?;
            let rnz = self.bin(IrBinary::Ne, r, zero, span)?;
            let fix = self.bin(IrBinary::And, differ, rnz, span)?;
            let q1 = self.bin(IrBinary::Sub, q, one, span)?;
            let q = self.sel(fix, q1, q, span)?;
            let yzero = self.bin(IrBinary::Eq, y, zero, span)?;
            return self.sel(yzero, zero, q, span);
        }
        let x = self.cast(x, DType::F32, span)?;
        let y = self.cast(y, DType::F32, span)?;
        let zero = self.full_like(Lit::Int(0), x, span)?;
        let one = self.full_like(Lit::Int(1), x, span)?;
        let half = self.full_like(Lit::Float(0.5), x, span)?;
        let m = self.bin(IrBinary::Rem, x, y, span)?;
        let xm = self.bin(IrBinary::Sub, x, m, span)?;
        let div = self.bin(IrBinary::Div, xm, y, span)?;
        let mnz = self.bin(IrBinary::Ne, m, zero, span)?;
        let yneg = self.bin(IrBinary::Lt, y, zero, span)?;
        let mneg = self.bin(IrBinary::Lt, m, zero, span)?;
        let differ = self.bin(IrBinary::Ne, yneg, mneg, span)?;
        let fix = self.bin(IrBinary::And, mnz, differ, span)?;
        let div1 = self.bin(IrBinary::Sub, div, one, span)?;
        let div = self.sel(fix, div1, div, span)?;
        let fl = self.un(IrUnary::Floor, div, span)?;
        let frac = self.bin(IrBinary::Sub, div, fl, span)?;
        let up = self.bin(IrBinary::Gt, frac, half, span)?;
        let fl1 = self.bin(IrBinary::Add, fl, one, span)?;
        let fl = self.sel(up, fl1, fl, span)?;
        // copysign(0, a / b): a / b is finite here (|a| < |b| or a = 0), so 0·(a / b) is
        // the zero of its sign.
        let q = self.bin(IrBinary::Div, x, y, span)?;
        let signed_zero = self.bin(IrBinary::Mul, zero, q, span)?;
        let dnz = self.bin(IrBinary::Ne, div, zero, span)?;
        let r = self.sel(dnz, fl, signed_zero, span)?;
        let yzero = self.bin(IrBinary::Eq, y, zero, span)?;
        let r = self.sel(yzero, q, r, span)?;
        self.cast(r, dt, span)
    }
}
