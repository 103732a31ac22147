//! Building the graph for the checker: materialising literals, casts and promotion
//! (`join`), broadcasting (NumPy rules, with the diagnostic that spells every shape),
//! permutes, reshapes and slices, and the elementwise ops over them.

use tessel_ir::graph::{BinaryOp as IrBinary, Op};
use tessel_ir::{DType, TensorType, Value};
use tessel_syntax::{Diagnostic, Span};

use super::eval::{fmt_shape, Arg};
use super::lit::{round_to, Lit};
use super::{codes, dtype_rank, Checker, Val, R};

impl<'m> Checker<'m> {
    // ---- values -------------------------------------------------------------------------
    pub(crate) fn shape(&self, v: Value) -> Vec<u64> {
        self.graph.ty(v).shape.0.clone()
    }

    pub(crate) fn dtype_of(&self, v: Value) -> DType {
        self.graph.ty(v).dtype
    }

    /// A weak scalar as a `[]` constant of `dtype`, rounded to it.
    pub(crate) fn materialize(&mut self, l: Lit, dtype: DType, span: Span) -> R<Value> {
        match l.value_in(dtype) {
            Ok(value) => self.build(
                Op::Const { value },
                Some(TensorType::new(dtype, vec![])),
                span,
            ),
            Err(why) => Err(self.error(
                Diagnostic::error(
                    codes::LITERAL_RANGE,
                    format!("{} does not fit {dtype}", l.describe()),
                )
                .with_label(span, format!("this takes the dtype {dtype}"))
                .with_note(why),
            )),
        }
    }

    /// The value as one tensor: weak scalars take their default dtype; tuples and lists are
    /// errors.
    pub(crate) fn tensor(&mut self, v: Val, span: Span) -> R<Value> {
        match v {
            Val::T(v) => Ok(v),
            Val::Weak(l) => self.materialize(l, l.default_dtype(), span),
            other => {
                let what = self.describe(&other);
                Err(self.error(
                    Diagnostic::error(
                        codes::NOT_A_TENSOR,
                        format!("expected a tensor, found {what}"),
                    )
                    .with_label(span, format!("this is {what}")),
                ))
            }
        }
    }

    /// `v` converted to `dtype` (no op when it already has it).
    pub(crate) fn cast(&mut self, v: Value, dtype: DType, span: Span) -> R<Value> {
        if self.dtype_of(v) == dtype {
            return Ok(v);
        }
        let shape = self.shape(v);
        self.build(
            Op::Cast { arg: v },
            Some(TensorType::new(dtype, shape)),
            span,
        )
    }

    /// An operand (weak or tensor) as a tensor of `dtype`.
    pub(crate) fn operand(&mut self, v: Val, dtype: DType, span: Span) -> R<Value> {
        match v {
            Val::Weak(l) => self.materialize(l, dtype, span),
            other => {
                let t = self.tensor(other, span)?;
                self.cast(t, dtype, span)
            }
        }
    }

    /// `v` broadcast to `shape` (which numpy-broadcasts from `v`'s shape): leading 1s by
    /// [`Op::Reshape`], then [`Op::Broadcast`].
    pub(crate) fn broadcast_to(&mut self, v: Value, shape: &[u64], span: Span) -> R<Value> {
        let mut cur = self.shape(v);
        if cur == shape {
            return Ok(v);
        }
        let dt = self.dtype_of(v);
        let mut v = v;
        if cur.len() < shape.len() {
            let mut padded = vec![1; shape.len() - cur.len()];
            padded.extend(&cur);
            cur = padded;
            v = self.build(
                Op::Reshape { arg: v },
                Some(TensorType::new(dt, cur.clone())),
                span,
            )?;
        }
        if cur == shape {
            return Ok(v);
        }
        self.build(
            Op::Broadcast { arg: v },
            Some(TensorType::new(dt, shape.to_vec())),
            span,
        )
    }

    pub(crate) fn permute(&mut self, v: Value, perm: Vec<u32>, span: Span) -> R<Value> {
        if perm.iter().enumerate().all(|(i, p)| *p as usize == i) {
            return Ok(v);
        }
        self.build(Op::Permute { arg: v, perm }, None, span)
    }

    pub(crate) fn reshape(&mut self, v: Value, shape: Vec<u64>, span: Span) -> R<Value> {
        if self.shape(v) == shape {
            return Ok(v);
        }
        let dt = self.dtype_of(v);
        self.build(
            Op::Reshape { arg: v },
            Some(TensorType::new(dt, shape)),
            span,
        )
    }

    /// `v[.., start .. start + len, ..]` along `axis` (no op for the full axis).
    pub(crate) fn slice(
        &mut self,
        v: Value,
        axis: usize,
        start: u64,
        len: u64,
        span: Span,
    ) -> R<Value> {
        let mut shape = self.shape(v);
        if start == 0 && shape.get(axis) == Some(&len) {
            return Ok(v);
        }
        if let Some(d) = shape.get_mut(axis) {
            *d = len;
        }
        let dt = self.dtype_of(v);
        self.build(
            Op::Slice {
                arg: v,
                axis: axis as u32,
                start,
            },
            Some(TensorType::new(dt, shape)),
            span,
        )
    }

    /// The dtype operands of different dtypes are promoted to (design §3): tensors by
    /// category (bool < i32 < floats; two different float dtypes give f32), then weak
    /// scalars join only when their category is higher (a float literal with an i32 tensor
    /// gives f32). Only weak scalars: their default dtype.
    pub(crate) fn join(&self, vals: &[&Val]) -> DType {
        let mut strong: Option<DType> = None;
        for v in vals {
            if let Val::T(t) = v {
                let d = self.dtype_of(*t);
                strong = Some(match strong {
                    None => d,
                    Some(s) if s == d => s,
                    Some(s) if dtype_rank(s) != dtype_rank(d) => {
                        if dtype_rank(s) > dtype_rank(d) {
                            s
                        } else {
                            d
                        }
                    }
                    Some(_) => DType::F32,
                });
            }
        }
        let weak_max = vals
            .iter()
            .filter_map(|v| match v {
                Val::Weak(l) => Some(*l),
                _ => None,
            })
            .max_by_key(|l| l.rank());
        match (strong, weak_max) {
            (Some(s), Some(l)) if l.rank() > dtype_rank(s) => l.default_dtype(),
            (Some(s), _) => s,
            (None, Some(l)) => l.default_dtype(),
            (None, None) => DType::F32,
        }
    }

    /// The numpy broadcast of several shapes, or a diagnostic naming them all.
    pub(crate) fn broadcast_shapes(
        &mut self,
        what: &str,
        span: Span,
        ops: &[(Vec<u64>, Span)],
    ) -> R<Vec<u64>> {
        let rank = ops.iter().map(|(s, _)| s.len()).max().unwrap_or(0);
        let mut out = vec![1u64; rank];
        let mut ok = true;
        for (s, _) in ops {
            let off = rank - s.len();
            for (i, d) in s.iter().enumerate() {
                let o = &mut out[off + i];
                if *o == 1 {
                    *o = *d;
                } else if *d != 1 && *d != *o {
                    ok = false;
                }
            }
        }
        if ok {
            return Ok(out);
        }
        let shapes: Vec<String> = ops.iter().map(|(s, _)| fmt_shape(s)).collect();
        let mut d = Diagnostic::error(
            codes::BROADCAST,
            format!(
                "shape mismatch: {what} of {} does not broadcast",
                shapes.join(" and ")
            ),
        )
        .with_label(span, "in this operation");
        for ((s, sp), text) in ops.iter().zip(&shapes) {
            let _ = s;
            d = d.with_secondary(*sp, format!("this has shape {text}"));
        }
        Err(self.error(d.with_note(
            "shapes broadcast when, aligned from the right, each pair of dims is equal or one of them is 1",
        )))
    }

    /// A binary elementwise op on two operands: promotion, casts, broadcasting.
    /// `pow` computes in a float dtype (f32 when both operands are integers or bools).
    pub(crate) fn elementwise(
        &mut self,
        op: IrBinary,
        what: &str,
        span: Span,
        a: Arg,
        b: Arg,
    ) -> R<Value> {
        let compare = matches!(
            op,
            IrBinary::Eq | IrBinary::Ne | IrBinary::Lt | IrBinary::Le | IrBinary::Gt | IrBinary::Ge
        );
        let mut dt = self.join(&[&a.0, &b.0]);
        if op == IrBinary::Pow && !dt.is_float() {
            dt = DType::F32;
        }
        if !compare && dt == DType::Bool {
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
        let rdt = if compare { DType::Bool } else { dt };
        // A result too large to index is blamed on the operator, not on the operand whose
        // broadcast would be the first tensor of that size.
        self.addressable(&TensorType::new(rdt, shape.clone()), span, None)?;
        let x = self.broadcast_to(x, &shape, aspan)?;
        let y = self.broadcast_to(y, &shape, bspan)?;
        self.build(Op::Binary { op, lhs: x, rhs: y }, None, span)
    }

    /// `a op b` for `+ - * /` where one operand is a weak number (a literal or `const`) and
    /// the other a float tensor, computed as PyTorch computes a Python number with a CUDA
    /// tensor; `None` where that gives the same bits as [`Self::elementwise`] (the number is
    /// exact in the tensor's dtype, and a divisor is a power of two, zero, infinite or NaN),
    /// so those programs keep their graph.
    ///
    /// PyTorch reads the Python number as the op's f32 "opmath" value, not the tensor's
    /// dtype, and rounds the f32 result once: `ufunc_add_CUDA` (torchgen/dest/ufunc.py:
    /// `iter.scalar_value<opmath_t>`, `sub` is `add` with `alpha = -1`) and `mul_kernel_cuda`
    /// (aten/src/ATen/native/cuda/BinaryMulKernel.cu, `opmath_symmetric_gpu_kernel_with_scalars`,
    /// which reads `iter.original_scalar_value<opmath_t>`); a CPU scalar is never cast to
    /// the common dtype on CUDA (TensorIterator.cpp casts inputs only when the common device
    /// is the CPU). So `x * 0.01` on bf16 is `bf16(f32(x) * f32(0.01))`, not a product with
    /// `bf16(0.01) = 0.010009765625`. A scalar divisor is a product with its f32 reciprocal
    /// (`div_true_kernel_cuda`, BinaryDivTrueKernel.cu: `inv_b = opmath_t(1.0) /
    /// iter.scalar_value<opmath_t>(2)`, then `MulFunctor<opmath_t>`), in every float dtype;
    /// a scalar dividend is `reciprocal(x) * c` (torch/_tensor.py `__rdiv__`), the reciprocal
    /// rounded to the tensor's dtype. Comparisons, `min`/`max` and `where` keep the number in
    /// the tensor's dtype, as PyTorch does (`compare_kernel_impl` in CompareKernels.cu reads
    /// `iter.scalar_value<scalar_t>`; `clamp_scalar_kernel_impl` in TensorCompare.cu takes
    /// `min.to<scalar_t>()`; `where` casts its scalar to the result dtype).
    pub(crate) fn scalar_arith(
        &mut self,
        op: IrBinary,
        what: &str,
        span: Span,
        a: &Arg,
        b: &Arg,
    ) -> R<Option<Value>> {
        let (weak, wspan, tensor, tspan, weak_first) = match (&a.0, &b.0) {
            (Val::Weak(l), Val::T(t)) => (*l, a.1, *t, b.1, true),
            (Val::T(t), Val::Weak(l)) => (*l, b.1, *t, a.1, false),
            _ => return Ok(None),
        };
        let dt = self.join(&[&a.0, &b.0]);
        if !dt.is_float() || matches!(weak, Lit::Bool(_)) {
            return Ok(None);
        }
        let c = weak.as_f64();
        let c32 = round_to(c, DType::F32);
        if c.is_finite() && c32.is_infinite() {
            return Err(self.error(
                Diagnostic::error(
                    codes::LITERAL_RANGE,
                    format!("{} does not fit f32", weak.describe()),
                )
                .with_label(wspan, format!("an f32 value beside this {dt} tensor"))
                .with_note(format!(
                    "{c:?} rounds to infinity in f32; a number in `+ - * /` is PyTorch's f32 \
                     \"opmath\" value, whatever the tensor's dtype"
                )),
            ));
        }
        let same_in_dtype = round_to(c, dt) == c32;
        // `x / c` is `x * (1 / c)`: the same bits when the reciprocal is exact, or the
        // divisor is zero, infinite or NaN (either way: ±inf, ±0 or NaN).
        let inv = f64::from(1.0f32 / c32 as f32);
        let exact_reciprocal = inv * c32 == 1.0 || c32 == 0.0 || !c32.is_finite();
        let plain_division = same_in_dtype && exact_reciprocal;
        let f32_op = |me: &mut Self, x: Val, xspan: Span, op: IrBinary, k: f64| -> R<Value> {
            let x = me.tensor(x, xspan)?;
            let x = me.cast(x, DType::F32, xspan)?;
            let k = (Val::Weak(Lit::Float(k)), wspan);
            let x = (Val::T(x), xspan);
            let (l, r) = if weak_first { (k, x) } else { (x, k) };
            let y = me.elementwise(op, what, span, l, r)?;
            me.cast(y, dt, span)
        };
        match op {
            IrBinary::Add | IrBinary::Sub | IrBinary::Mul if !same_in_dtype => {
                Ok(Some(f32_op(self, Val::T(tensor), tspan, op, c32)?))
            }
            IrBinary::Div if !(weak_first || plain_division) => Ok(Some(f32_op(
                self,
                Val::T(tensor),
                tspan,
                IrBinary::Mul,
                inv,
            )?)),
            IrBinary::Div if weak_first && c32 != 1.0 => {
                // `c / x`: the reciprocal in the tensor's dtype, then `r * c` as above.
                let one = (Val::Weak(Lit::Float(1.0)), wspan);
                let r =
                    self.elementwise(IrBinary::Div, what, span, one, (Val::T(tensor), tspan))?;
                let r = self.cast(r, dt, span)?;
                let r = (Val::T(r), span);
                let k = (Val::Weak(weak), wspan);
                match self.scalar_arith(IrBinary::Mul, what, span, &r, &k)? {
                    Some(v) => Ok(Some(v)),
                    None => Ok(Some(self.elementwise(IrBinary::Mul, what, span, r, k)?)),
                }
            }
            _ => Ok(None),
        }
    }

    /// `a @ b`: `[.., M, K] @ [.., K, N] -> [.., M, N]` over the last two axes, leading dims
    /// broadcast (numpy `matmul` rules, without the 1-D special cases: a vector operand is
    /// written `x[None, :]` or `x[:, None]`). Operands are promoted to one float dtype.
    pub(crate) fn matmul(&mut self, span: Span, a: Arg, b: Arg) -> R<Value> {
        let (aspan, bspan) = (a.1, b.1);
        let dt = self.join(&[&a.0, &b.0]);
        if !dt.is_float() {
            let found = self.describe(&a.0);
            return Err(self.error(
                Diagnostic::error(
                    codes::FLOAT_REQUIRED,
                    format!("`@` needs float operands, found {dt}"),
                )
                .with_label(span, "matmul of non-float tensors")
                .with_secondary(aspan, format!("this is {found}"))
                .with_help("cast first, e.g. `f32(x) @ w`"),
            ));
        }
        let x = self.operand(a.0, dt, aspan)?;
        let y = self.operand(b.0, dt, bspan)?;
        let (sx, sy) = (self.shape(x), self.shape(y));
        for (s, sp) in [(&sx, aspan), (&sy, bspan)] {
            if s.len() < 2 {
                return Err(self.error(
                    Diagnostic::error(
                        codes::RANK,
                        format!("`@` needs operands of rank 2 or more, found {}", fmt_shape(s)),
                    )
                    .with_label(sp, format!("this has rank {}", s.len()))
                    .with_help("make a vector a matrix with `x[None, :]` (a row) or `x[:, None]` (a column)"),
                ));
            }
        }
        let (m, k) = (sx[sx.len() - 2], sx[sx.len() - 1]);
        let (k2, n) = (sy[sy.len() - 2], sy[sy.len() - 1]);
        if k != k2 {
            return Err(self.error(
                Diagnostic::error(
                    codes::BROADCAST,
                    format!(
                        "shape mismatch: `@` of {} and {}: the contracted dims differ ({k} and {k2})",
                        fmt_shape(&sx),
                        fmt_shape(&sy)
                    ),
                )
                .with_label(span, "[.., M, K] @ [.., K, N] needs the same K")
                .with_secondary(aspan, format!("K = {k} here"))
                .with_secondary(bspan, format!("K = {k2} here"))
                .with_help("a weight stored [N, K] is used as `x @ w^T`"),
            ));
        }
        if sy.len() == 2 && sx.len() > 2 {
            return self.folded_matmul(span, x, y, (m, k, n));
        }
        let batch = self.broadcast_shapes(
            "the batch dims of `@`",
            span,
            &[
                (sx[..sx.len() - 2].to_vec(), aspan),
                (sy[..sy.len() - 2].to_vec(), bspan),
            ],
        )?;
        let with = |tail: [u64; 2]| batch.iter().copied().chain(tail).collect::<Vec<u64>>();
        let x = self.broadcast_to(x, &with([m, k]), aspan)?;
        let y = self.broadcast_to(y, &with([k, n]), bspan)?;
        self.build(Op::MatMul { lhs: x, rhs: y }, None, span)
    }

    /// `x [.., M, K] @ w [K, N]` with a 2-D right operand (a weight, PyTorch's `x @ w.T` on
    /// batched activations): one GEMM over the `rows = prod(..) · M` rows of `x`, reading
    /// `w` once — `reshape(x, [rows, K]) @ w`, reshaped back to `[.., M, N]` — instead of
    /// broadcasting `w` to every batch entry (a copy of the weight per entry, and a
    /// batched GEMM that tensor parallelism cannot split). Row `i` of the result is the
    /// product of row `i` of `x` whatever the batch, so the profiles' per-row promises
    /// hold as for a 2-D `x`. A widening cast of a 16-bit `x` stays on top of the reshape
    /// (`f32(reshape(x)) @ f32(w)^T`), so the GEMM still reads the 16-bit tensor
    /// ([`tessel_ir::graph::Graph::matmul_reads`]); `fuse` reads the reshape in `x`'s
    /// buffer (an alias), and folds the reshape back into the GEMM's epilogue.
    fn folded_matmul(
        &mut self,
        span: Span,
        x: Value,
        w: Value,
        (m, k, n): (u64, u64, u64),
    ) -> R<Value> {
        let xs = self.shape(x);
        let dt = self.graph.ty(x).dtype;
        let rows = xs[..xs.len() - 1].iter().product::<u64>();
        let flat = match self.graph.ops[x] {
            Op::Cast { arg } => {
                let adt = self.graph.ty(arg).dtype;
                let r = self.build(
                    Op::Reshape { arg },
                    Some(TensorType::new(adt, vec![rows, k])),
                    span,
                )?;
                self.build(
                    Op::Cast { arg: r },
                    Some(TensorType::new(dt, vec![rows, k])),
                    span,
                )?
            }
            _ => self.build(
                Op::Reshape { arg: x },
                Some(TensorType::new(dt, vec![rows, k])),
                span,
            )?,
        };
        let mm = self.build(Op::MatMul { lhs: flat, rhs: w }, None, span)?;
        debug_assert_eq!(self.shape(mm), [rows, n]);
        let mut out = xs[..xs.len() - 2].to_vec();
        out.extend([m, n]);
        self.build(
            Op::Reshape { arg: mm },
            Some(TensorType::new(dt, out)),
            span,
        )
    }
}
