//! The operations the generator draws from, one rule each: a `let` built from the program
//! so far (its result type by the language's rules, docs/language.md), or None when the
//! operands drawn do not fit (the caller draws again). A new builtin brings a rule here and
//! a row in [`Gen::step`]'s table.

use super::{broadcast, one, promote, with_literal, Gen, Rule, MATMUL_SIZES};
use crate::program::{Dim, Let, Ty};
use tessel_ir::DType;

impl Gen {
    /// One operation; None if the chosen one does not apply (the caller tries again).
    pub(super) fn step(&mut self) -> Option<Let> {
        let w: &[(u32, Rule)] = &[
            (12, Gen::unary),
            (18, Gen::arith),
            (5, Gen::compare),
            (5, Gen::select),
            (3, Gen::min_max),
            (3, Gen::divmod),
            (2, Gen::clamp),
            (2, Gen::pow),
            (7, Gen::cast),
            (12, Gen::reduce),
            (5, Gen::softmax),
            (5, Gen::masked_softmax),
            (6, Gen::along_axis),
            (2, Gen::causal),
            (6, Gen::slice),
            (3, Gen::index_select),
            (3, Gen::index_by_tensor),
            (3, Gen::take_along),
            (2, Gen::new_axis),
            (6, Gen::reshape),
            (5, Gen::transpose),
            (5, Gen::concat),
            (3, Gen::split),
            (9, Gen::matmul),
            (2, Gen::iota),
            (2, Gen::whole_update),
        ];
        let total: u32 = w.iter().map(|x| x.0).sum();
        let mut r = self.below(total as u64) as u32;
        for (weight, f) in w {
            if r < *weight {
                let l = f(self)?;
                return l.tys.iter().all(|t| self.fits(t)).then_some(l);
            }
            r -= weight;
        }
        None
    }

    fn unary(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let name = self.fresh_let(0);
        let template = match t.dtype {
            DType::Bool => "!{0}".to_string(),
            DType::I32 => self
                .pick(&["-{0}", "abs({0})", "relu({0})", "floor({0})"])
                .to_string(),
            _ => {
                let f = self.pick(&[
                    "exp",
                    "log",
                    "sqrt",
                    "rsqrt",
                    "sin",
                    "cos",
                    "tanh",
                    "sigmoid",
                    "silu",
                    "abs",
                    "-",
                    "log_abs",
                    "sqrt_abs",
                    "erf",
                    "gelu",
                    "gelu_tanh",
                    "relu",
                    "floor",
                    "ceil",
                    "round",
                    "trunc",
                ]);
                match f {
                    "-" => "-{0}".into(),
                    "gelu_tanh" => "gelu({0}, approximate: true)".into(),
                    // Domains where the math functions give numbers, not NaN.
                    "log_abs" => "log(abs({0}) + 1.0)".into(),
                    "sqrt_abs" => "sqrt(abs({0}))".into(),
                    _ => format!("{f}({{0}})"),
                }
            }
        };
        one(vec![name], t, template, vec![x])
    }

    fn arith(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.dtype == DType::Bool {
            return None;
        }
        let op = self.pick(&["+", "-", "*", "/", "%"]);
        let name = self.fresh_let(0);
        if self.chance(0.3) {
            let float = t.dtype.is_float() || self.chance(0.3);
            let (lit, cat) = self.literal(float);
            let dt = with_literal(t.dtype, cat);
            let template = if self.chance(0.5) {
                format!("{{0}} {op} {lit}")
            } else {
                format!("{lit} {op} {{0}}")
            };
            return one(vec![name], Ty::new(dt, t.shape), template, vec![x]);
        }
        let (y, u) = self.partner(&t.shape, |d| d != DType::Bool);
        let shape = broadcast(&t.shape, &u.shape)?;
        let dt = promote(t.dtype, u.dtype);
        let template = format!("{{0}} {op} {{1}}");
        let ops = if self.chance(0.5) {
            vec![x, y]
        } else {
            vec![y, x]
        };
        one(vec![name], Ty::new(dt, shape), template, ops)
    }

    fn compare(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let op = if t.dtype == DType::Bool {
            self.pick(&["==", "!="])
        } else {
            self.pick(&["==", "!=", "<", "<=", ">", ">="])
        };
        let bool_ok = t.dtype == DType::Bool;
        let (y, u) = self.partner(&t.shape, |d| (d == DType::Bool) == bool_ok);
        let shape = broadcast(&t.shape, &u.shape)?;
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(DType::Bool, shape),
            format!("{{0}} {op} {{1}}"),
            vec![x, y],
        )
    }

    fn select(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let (c, ct) = self.partner(&t.shape, |d| d == DType::Bool);
        let name = self.fresh_let(0);
        let shape = broadcast(&t.shape, &ct.shape)?;
        if self.chance(0.3) && t.dtype != DType::Bool {
            let (mut lit, cat) = self.literal(t.dtype.is_float());
            if t.dtype.is_float() && self.chance(0.2) {
                lit = "-inf".into();
            }
            let dt = with_literal(t.dtype, cat);
            return one(
                vec![name],
                Ty::new(dt, shape),
                format!("where({{1}}, {{0}}, {lit})"),
                vec![x, c],
            );
        }
        let (y, u) = self.partner(&shape, |_| true);
        let shape = broadcast(&shape, &u.shape)?;
        let dt = promote(t.dtype, u.dtype);
        one(
            vec![name],
            Ty::new(dt, shape),
            "where({1}, {0}, {2})".into(),
            vec![x, c, y],
        )
    }

    pub(super) fn min_max(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.dtype == DType::Bool {
            return None;
        }
        let f = self.pick(&["min", "max", "maximum", "minimum"]);
        let (y, u) = self.partner(&t.shape, |d| d != DType::Bool);
        let shape = broadcast(&t.shape, &u.shape)?;
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(promote(t.dtype, u.dtype), shape),
            format!("{f}({{0}}, {{1}})"),
            vec![x, y],
        )
    }

    /// `floor_divide`, `remainder`, `fmod` of two numbers (broadcast, promoted).
    fn divmod(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.dtype == DType::Bool {
            return None;
        }
        let f = self.pick(&["floor_divide", "remainder", "fmod"]);
        let (y, u) = self.partner(&t.shape, |d| d != DType::Bool);
        let shape = broadcast(&t.shape, &u.shape)?;
        let name = self.fresh_let(0);
        let ops = if self.chance(0.5) {
            vec![x, y]
        } else {
            vec![y, x]
        };
        one(
            vec![name],
            Ty::new(promote(t.dtype, u.dtype), shape),
            format!("{f}({{0}}, {{1}})"),
            ops,
        )
    }

    /// `clamp(x, lo, hi)` with literal bounds (either may be left out, or `lo > hi`), or a
    /// tensor lower bound.
    pub(super) fn clamp(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.dtype == DType::Bool {
            return None;
        }
        let name = self.fresh_let(0);
        if self.chance(0.6) {
            let float = t.dtype.is_float();
            let (lo, _) = self.literal(float);
            let (hi, _) = self.literal(float);
            let template = match self.below(3) {
                0 => format!("clamp({{0}}, {lo}, {hi})"),
                1 => format!("clamp({{0}}, min: {lo})"),
                _ => format!("clamp({{0}}, max: {hi})"),
            };
            return one(vec![name], t, template, vec![x]);
        }
        let (y, u) = self.partner(&t.shape, |d| d != DType::Bool);
        let shape = broadcast(&t.shape, &u.shape)?;
        one(
            vec![name],
            Ty::new(promote(t.dtype, u.dtype), shape),
            "clamp({0}, {1}, 1)".into(),
            vec![x, y],
        )
    }

    fn pow(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if !t.dtype.is_float() {
            return None;
        }
        let name = self.fresh_let(0);
        let e = self.pick(&["2.0", "0.5", "3.0", "-1.0", "1.5"]);
        // A non-negative base: pow of a negative base with a non-integer exponent is NaN.
        one(vec![name], t, format!("pow(abs({{0}}), {e})"), vec![x])
    }

    fn cast(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let mut dt = self.dtype();
        if dt == t.dtype {
            dt = if dt == DType::F32 {
                DType::Bf16
            } else {
                DType::F32
            };
        }
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(dt, t.shape),
            format!("{}({{0}})", crate::program::dtype_name(dt)),
            vec![x],
        )
    }

    pub(super) fn reduce(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 || t.dtype == DType::Bool {
            return None;
        }
        let f = if t.dtype.is_float() {
            self.pick(&["sum", "max", "min", "mean"])
        } else {
            self.pick(&["sum", "max", "min"])
        };
        let axis = self.below(t.rank() as u64) as usize;
        let keep = self.chance(0.4);
        let mut shape = t.shape.clone();
        if keep {
            shape[axis] = Dim::Lit(1);
        } else {
            shape.remove(axis);
        }
        let a = self.axis_text(axis, t.rank());
        let keep_text = if keep {
            ", keep: true"
        } else if self.chance(0.2) {
            ", keep: false"
        } else {
            ""
        };
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{f}({{0}}, axis: {a}{keep_text})"),
            vec![x],
        )
    }

    /// An op along an axis that selects or scans: `argmax`/`argmin` (i32, `keep` sometimes),
    /// `logsumexp` (floats), `cumsum`, or `topk` of k = 1 to 3 (a tuple of the values and
    /// the i32 indices, largest or smallest, the axis given or the last by default).
    fn along_axis(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 || t.dtype == DType::Bool {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let a = self.axis_text(axis, t.rank());
        let f = if t.dtype.is_float() {
            self.pick(&["argmax", "argmin", "logsumexp", "cumsum", "topk"])
        } else {
            self.pick(&["argmax", "argmin", "cumsum", "topk"])
        };
        match f {
            "cumsum" => {
                let name = self.fresh_let(0);
                one(vec![name], t, format!("cumsum({{0}}, axis: {a})"), vec![x])
            }
            "topk" => {
                let len = t.shape[axis].value(&self.p.dims);
                let k = len.min(1 + self.below(3));
                let mut shape = t.shape.clone();
                shape[axis] = Dim::Lit(k);
                let axis_text = if axis + 1 == t.rank() && self.chance(0.5) {
                    String::new()
                } else {
                    format!(", axis: {a}")
                };
                let order = if self.chance(0.3) {
                    ", largest: false"
                } else {
                    ""
                };
                Some(Let {
                    names: vec![self.fresh_let(0), self.fresh_let(1)],
                    tys: vec![Ty::new(t.dtype, shape.clone()), Ty::new(DType::I32, shape)],
                    template: format!("topk({{0}}, {k}{axis_text}{order})"),
                    operands: vec![x],
                })
            }
            _ => {
                let keep = self.chance(0.4);
                let mut shape = t.shape.clone();
                if keep {
                    shape[axis] = Dim::Lit(1);
                } else {
                    shape.remove(axis);
                }
                let dt = if f == "logsumexp" {
                    t.dtype
                } else {
                    DType::I32
                };
                let keep_text = if keep { ", keep: true" } else { "" };
                let name = self.fresh_let(0);
                one(
                    vec![name],
                    Ty::new(dt, shape),
                    format!("{f}({{0}}, axis: {a}{keep_text})"),
                    vec![x],
                )
            }
        }
    }

    pub(super) fn softmax(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 || !t.dtype.is_float() {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let a = self.axis_text(axis, t.rank());
        let name = self.fresh_let(0);
        one(vec![name], t, format!("softmax({{0}}, axis: {a})"), vec![x])
    }

    /// `softmax(where(mask, x, -inf), axis: a)` (or the additive `x + where(mask, 0.0,
    /// -inf)`), the masks attention uses: a `causal` mask over the last two dims, a length
    /// per row (`iota` along the axis below a length that is 0 for every third row, so
    /// fully masked rows are common), or any bool value that broadcasts.
    pub(super) fn masked_softmax(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 || !t.dtype.is_float() {
            return None;
        }
        let r = t.rank();
        let axis = self.below(r as u64) as usize;
        let mut operands = vec![x];
        let mut shape = t.shape.clone();
        let mask = match self.below(3) {
            0 if r >= 2 => {
                let (a, b) = (
                    self.dim_text(&t.shape[r - 2]),
                    self.dim_text(&t.shape[r - 1]),
                );
                let offset = if self.chance(0.5) {
                    String::new()
                } else {
                    format!(
                        ", offset: {}",
                        self.pick(&["0", "-1", "1", "-2", "3", "-100"])
                    )
                };
                format!("causal({a}, {b}{offset})")
            }
            0 | 1 => {
                // Keys kept along `axis`: a length per row along another axis, or one length.
                let n = self.dim_text(&t.shape[axis]);
                let keys = format!("iota({n}){}", Self::along(axis, r));
                let len = if r >= 2 && self.chance(0.7) {
                    let b = (axis + 1 + self.below(r as u64 - 1) as usize) % r;
                    let m = self.dim_text(&t.shape[b]);
                    // 0 for every third row: fully masked rows.
                    let step = self.pick(&["1", "2", n.as_str()]).to_string();
                    format!("iota({m}){} % 3 * ({step})", Self::along(b, r))
                } else {
                    self.pick(&["0", "1", n.as_str()]).to_string()
                };
                format!("{keys} < {len}")
            }
            _ => {
                let (c, ct) = self.partner(&t.shape, |d| d == DType::Bool);
                shape = broadcast(&t.shape, &ct.shape)?;
                operands.push(c);
                "{1}".to_string()
            }
        };
        let fill = if self.chance(0.8) {
            "-inf"
        } else {
            "-1.0 / 0.0"
        };
        let a = self.axis_text(axis, r);
        let name = self.fresh_let(0);
        // The additive form's `where` of two literals is f32, so a 16-bit x promotes.
        let (template, dt) = if self.chance(0.25) {
            (
                format!("softmax({{0}} + where({mask}, 0.0, {fill}), axis: {a})"),
                promote(t.dtype, DType::F32),
            )
        } else {
            (
                format!("softmax(where({mask}, {{0}}, {fill}), axis: {a})"),
                t.dtype,
            )
        };
        one(vec![name], Ty::new(dt, shape), template, operands)
    }

    /// `causal(t, s)` or `causal(t, s, offset: p)` on dims the signature binds: a mask
    /// for later operations to use (`where`, casts, comparisons, reductions after `i32`).
    fn causal(&mut self) -> Option<Let> {
        let bound = self.bound_dims();
        let dim = |g: &mut Gen| {
            if bound.is_empty() || g.chance(0.2) {
                Dim::Lit(g.size())
            } else {
                g.pick(&bound)
            }
        };
        let (a, b) = (dim(self), dim(self));
        let offset = match self.below(3) {
            0 => format!(", offset: {}", self.pick(&["0", "-1", "2", "-3"])),
            _ => String::new(),
        };
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(DType::Bool, vec![a.clone(), b.clone()]),
            format!("causal({}, {}{offset})", a.text(), b.text()),
            vec![],
        )
    }

    /// `[None, :, None]`-style index text that puts a vector along `axis` of rank `rank`.
    pub(super) fn along(axis: usize, rank: usize) -> String {
        if rank == 1 {
            return String::new();
        }
        let items: Vec<&str> = (0..rank)
            .map(|i| if i == axis { ":" } else { "None" })
            .collect();
        format!("[{}]", items.join(", "))
    }

    /// `[:, :, item]`-style index text with `item` at `axis`.
    pub(super) fn index_text(&mut self, axis: usize, rank: usize, item: &str) -> String {
        if axis + 1 == rank && rank > 1 && self.chance(0.3) {
            return format!("[..., {item}]");
        }
        let mut items: Vec<String> = vec![":".into(); axis];
        items.push(item.into());
        format!("[{}]", items.join(", "))
    }

    pub(super) fn slice(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let v = t.shape[axis].value(&self.p.dims);
        let lo = self.below(v);
        let hi = lo + 1 + self.below(v - lo);
        let lo_t = if lo > 0 && self.chance(0.3) {
            format!("{}", lo as i64 - v as i64)
        } else if lo == 0 && self.chance(0.5) {
            String::new()
        } else {
            lo.to_string()
        };
        let hi_t = if hi == v && self.chance(0.5) {
            String::new()
        } else if hi < v && self.chance(0.3) {
            format!("{}", hi as i64 - v as i64)
        } else {
            hi.to_string()
        };
        let item = format!("{lo_t}:{hi_t}");
        let idx = self.index_text(axis, t.rank(), &item);
        let mut shape = t.shape.clone();
        if !(lo == 0 && hi == v) {
            shape[axis] = Dim::Lit(hi - lo);
        }
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}{idx}"),
            vec![x],
        )
    }

    pub(super) fn index_select(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let v = t.shape[axis].value(&self.p.dims);
        let i = self.below(v);
        let item = if self.chance(0.3) {
            format!("{}", i as i64 - v as i64)
        } else {
            i.to_string()
        };
        let idx = self.index_text(axis, t.rank(), &item);
        let mut shape = t.shape.clone();
        shape.remove(axis);
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}{idx}"),
            vec![x],
        )
    }

    /// An i32 index tensor of `shape`: an existing i32 value of that shape (computed ones
    /// too: casts of floats, sums), else a fresh parameter — seeded inputs are uniform in
    /// -8..=8, so along short axes many are negative or out of range (clamped) — sometimes
    /// moved further (`{1} * 3 - 4`).
    fn index_tensor(&mut self, shape: &[Dim]) -> (String, String) {
        let cands: Vec<String> = self
            .names()
            .into_iter()
            .filter(|n| {
                let t = self.ty(n);
                t.dtype == DType::I32 && t.shape == shape
            })
            .collect();
        let name = if !cands.is_empty() && self.chance(0.5) {
            self.pick(&cands)
        } else {
            self.fresh_param(Ty::new(DType::I32, shape.to_vec()))
        };
        let text = self
            .pick(&["{1}", "{1}", "{1}", "{1} * 3 - 4", "{1} + 9", "-{1}"])
            .to_string();
        (name, text)
    }

    /// `x[:, .., idx]`: NumPy's integer-array indexing along one axis (an embedding lookup
    /// when `x` is a table and the axis the first), indices of rank 0 to 2.
    pub(super) fn index_by_tensor(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let irank = self.below(3) as usize;
        let ishape: Vec<Dim> = (0..irank).map(|_| self.sym()).collect();
        let (i, itext) = self.index_tensor(&ishape);
        let item = if itext == "{1}" {
            itext
        } else {
            format!("({itext})")
        };
        let idx = self.index_text(axis, t.rank(), &item);
        let mut shape = t.shape[..axis].to_vec();
        shape.extend(ishape);
        shape.extend(t.shape[axis + 1..].iter().cloned());
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}{idx}"),
            vec![x, i],
        )
    }

    /// `take_along_axis(x, idx, axis: k)` with indices of `x`'s rank, broadcast against it
    /// off the axis (some of their dims 1), or `gather(x, idx, axis: k)` with indices
    /// matching `x` off the axis.
    pub(super) fn take_along(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let torch = self.chance(0.3);
        let mut ishape = t.shape.clone();
        ishape[axis] = if self.chance(0.3) {
            Dim::Lit(1)
        } else {
            self.sym()
        };
        if !torch {
            for (d, s) in ishape.iter_mut().enumerate() {
                if d != axis && self.chance(0.2) {
                    *s = Dim::Lit(1);
                }
            }
        }
        let (i, itext) = self.index_tensor(&ishape);
        let (mut off_x, mut off_i) = (t.shape.clone(), ishape.clone());
        off_x[axis] = Dim::Lit(1);
        off_i[axis] = Dim::Lit(1);
        let mut shape = broadcast(&off_x, &off_i)?;
        shape[axis] = ishape[axis].clone();
        let f = if torch { "gather" } else { "take_along_axis" };
        let ax = self.axis_text(axis, t.rank());
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{f}({{0}}, {itext}, axis: {ax})"),
            vec![x, i],
        )
    }

    pub(super) fn new_axis(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() >= 4 {
            return None;
        }
        let axis = self.below(t.rank() as u64 + 1) as usize;
        let mut items: Vec<&str> = vec![":"; axis];
        items.push("None");
        let mut shape = t.shape.clone();
        shape.insert(axis, Dim::Lit(1));
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}[{}]", items.join(", ")),
            vec![x],
        )
    }

    pub(super) fn reshape(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let mut shape = t.shape.clone();
        let mut texts: Vec<String> = shape.iter().map(Dim::text).collect();
        match self.below(3) {
            0 if t.rank() >= 2 => {
                // Merge two adjacent axes.
                let a = self.below(t.rank() as u64 - 1) as usize;
                let d = Dim::Mul(Box::new(shape[a].clone()), Box::new(shape[a + 1].clone()));
                texts.splice(a..a + 2, [d.text()]);
                shape.splice(a..a + 2, [d]);
            }
            1 => {
                // Split an axis by a factor of its value.
                let a = self.below(t.rank() as u64) as usize;
                let v = shape[a].value(&self.p.dims);
                let f = [2u64, 3, 4].into_iter().find(|f| v % f == 0 && v > *f)?;
                let d = match shape[a] {
                    Dim::Lit(n) => Dim::Lit(n / f),
                    ref s => Dim::Div(Box::new(s.clone()), Box::new(Dim::Lit(f))),
                };
                texts.splice(a..a + 1, [d.text(), f.to_string()]);
                shape.splice(a..a + 1, [d, Dim::Lit(f)]);
            }
            _ => {
                // Flatten, one dim inferred.
                let d = shape
                    .iter()
                    .cloned()
                    .reduce(|a, b| Dim::Mul(Box::new(a), Box::new(b)))?;
                texts = vec!["-1".into()];
                shape = vec![d];
            }
        }
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("reshape({{0}}, [{}])", texts.join(", ")),
            vec![x],
        )
    }

    pub(super) fn transpose(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let r = t.rank();
        if r < 2 {
            return None;
        }
        let mut shape = t.shape.clone();
        let template = match self.below(3) {
            0 => {
                shape.swap(r - 2, r - 1);
                "{0}^T".to_string()
            }
            1 => {
                let a = self.below(r as u64) as usize;
                let b = (a + 1 + self.below(r as u64 - 1) as usize) % r;
                shape.swap(a, b);
                format!("transpose({{0}}, {a}, {})", self.axis_text(b, r))
            }
            _ => {
                let mut perm: Vec<usize> = (0..r).collect();
                for i in (1..r).rev() {
                    let j = self.below(i as u64 + 1) as usize;
                    perm.swap(i, j);
                }
                shape = perm.iter().map(|&p| t.shape[p].clone()).collect();
                let ps: Vec<String> = perm.iter().map(usize::to_string).collect();
                format!("permute({{0}}, [{}])", ps.join(", "))
            }
        };
        let name = self.fresh_let(0);
        one(vec![name], Ty::new(t.dtype, shape), template, vec![x])
    }

    pub(super) fn concat(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        // The other part: same dims but `axis`, which is the same or another size.
        let other = if self.chance(0.5) {
            t.shape[axis].clone()
        } else if self.chance(0.5) {
            Dim::Lit(1 + self.below(4))
        } else {
            self.sym()
        };
        let mut shape = t.shape.clone();
        shape[axis] = other.clone();
        let dt = if self.chance(0.7) {
            t.dtype
        } else {
            self.dtype()
        };
        let u = Ty::new(dt, shape.clone());
        let y = self.fresh_param(u);
        let mut out = t.shape.clone();
        out[axis] = Dim::Add(Box::new(t.shape[axis].clone()), Box::new(other));
        let a = self.axis_text(axis, t.rank());
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(promote(t.dtype, dt), out),
            format!("concat({{0}}, {{1}}, axis: {a})"),
            vec![x, y],
        )
    }

    pub(super) fn split(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let v = t.shape[axis].value(&self.p.dims);
        let n = [2u64, 3].into_iter().find(|n| v % n == 0)?;
        let part = match t.shape[axis] {
            Dim::Lit(k) => Dim::Lit(k / n),
            ref d => Dim::Div(Box::new(d.clone()), Box::new(Dim::Lit(n))),
        };
        let mut shape = t.shape.clone();
        shape[axis] = part;
        let names: Vec<String> = (0..n as usize).map(|k| self.fresh_let(k)).collect();
        let a = self.axis_text(axis, t.rank());
        Some(Let {
            tys: vec![Ty::new(t.dtype, shape); n as usize],
            names,
            template: format!("split({{0}}, {n}, axis: {a})"),
            operands: vec![x],
        })
    }

    /// `x @ w` or `x @ w^T` with a fresh weight — or, for 16-bit x, sometimes the f32
    /// product of widening casts, `f32(x) @ f32(w)^T` — x an existing float value of rank
    /// ≥ 2 or a fresh `[M, K]` of matmul sizes.
    fn matmul(&mut self) -> Option<Let> {
        let projection = if !self.cfg.grad && self.chance(0.35) {
            self.projection_sizes()
        } else {
            None
        };
        let (x, t) = match (projection, self.operand()) {
            (Some((m, k, _)), _) => {
                let t = Ty::new(
                    self.pick(&[DType::Bf16, DType::F16]),
                    vec![self.new_sym(m), self.new_sym(k)],
                );
                (self.fresh_param(t.clone()), t)
            }
            (None, (x, t))
                if t.rank() >= 2 && t.rank() <= 3 && t.dtype.is_float() && self.chance(0.6) =>
            {
                (x, t)
            }
            _ => {
                let m = if self.chance(0.5) {
                    self.sym()
                } else {
                    let v = self.pick(&[1u64, 2, 3, 7, 8, 16, 17, 33, 64, 129]);
                    self.new_sym(v)
                };
                let kv = self.pick(MATMUL_SIZES);
                let k = self.new_sym(kv);
                let dt = self.float_dtype();
                let t = Ty::new(dt, vec![m, k]);
                if !self.fits(&t) {
                    return None;
                }
                (self.fresh_param(t.clone()), t)
            }
        };
        let r = t.rank();
        let k = t.shape[r - 1].clone();
        let n = if let Some((_, _, n)) = projection {
            self.new_sym(n)
        } else if self.chance(0.3) {
            self.sym()
        } else {
            let v = self.pick(MATMUL_SIZES);
            self.new_sym(v)
        };
        let batch = t.shape[..r - 2].to_vec();
        let fmas = t.numel(&self.p.dims) * n.value(&self.p.dims);
        if fmas > self.cfg.max_fmas {
            return None;
        }
        // Sometimes the f32 product of 16-bit operands, `f32(x) @ f32(w)^T`, which kernels
        // read as 16-bit tensors; now and then with the weight in the other 16-bit dtype,
        // which they read as f32 copies.
        let sixteen = |d: DType| matches!(d, DType::Bf16 | DType::F16);
        let widen = sixteen(t.dtype) && self.chance(0.4);
        let dt = if widen {
            if self.chance(0.85) {
                t.dtype
            } else {
                self.pick(&[DType::Bf16, DType::F16])
            }
        } else if self.chance(0.8) {
            t.dtype
        } else {
            self.float_dtype()
        };
        let transposed = self.chance(0.5);
        // The weight's batch dims: the same, or none (broadcast over x's batch).
        let mut ws = if self.chance(0.3) {
            vec![]
        } else {
            batch.clone()
        };
        if transposed {
            ws.extend([n.clone(), k]);
        } else {
            ws.extend([k, n.clone()]);
        }
        let wt = Ty::new(dt, ws);
        if !self.fits(&wt) {
            return None;
        }
        let w = self.fresh_param(wt);
        let mut out = t.shape[..r - 1].to_vec();
        out.push(n);
        let name = self.fresh_let(0);
        // The weight as stored, or computed first (then it is no stored tensor to read in
        // place).
        let wexpr = self.pick(&["{1}", "{1}", "{1}", "({1} * 0.5)", "(-{1})"]);
        let template = match (widen, transposed) {
            (false, true) => format!("{{0}} @ {wexpr}^T"),
            (false, false) => format!("{{0}} @ {wexpr}"),
            // The cast outside the transpose reads the same.
            (true, true) if self.chance(0.3) => format!("f32({{0}}) @ f32({wexpr}^T)"),
            (true, true) => format!("f32({{0}}) @ f32({wexpr})^T"),
            (true, false) => format!("f32({{0}}) @ f32({wexpr})"),
        };
        let dt_out = if widen {
            DType::F32
        } else {
            promote(t.dtype, dt)
        };
        one(vec![name], Ty::new(dt_out, out), template, vec![x, w])
    }

    /// `(M, K, N)` of a projection the warpgroup GEMM tiles take (16-bit `x @ w^T` past 64
    /// rows and columns, K above 32; for a target of 1 SM, `tessel fuzz --sm-count 1`:
    /// the ping-pong tile from two 128 × 128 tiles, else the TMA tile or, at K rows not
    /// whole 16-byte chunks, the plain warpgroup tile), within the program's size limits;
    /// `None` when no draw fits. The free draws almost never reach them: their values
    /// hold at most `max_numel` elements.
    fn projection_sizes(&mut self) -> Option<(u64, u64, u64)> {
        for _ in 0..8 {
            let m = self.pick(&[65u64, 72, 90, 129, 200, 257]);
            let k = self.pick(&[40u64, 45, 48, 64, 72, 136]);
            let n = self.pick(&[65u64, 72, 88, 136, 256]);
            let fits = [m * k, k * n, m * n]
                .iter()
                .all(|&e| e <= self.cfg.max_numel);
            if fits && m * n * k <= self.cfg.max_fmas {
                return Some((m, k, n));
            }
        }
        None
    }

    /// The symbols the signature binds so far (a symbol is a name in the body only then).
    pub(super) fn bound_dims(&self) -> Vec<Dim> {
        let mut bound: Vec<Dim> = self
            .p
            .params
            .iter()
            .flat_map(|(_, t)| t.shape.iter().filter(|d| matches!(d, Dim::Sym(_))).cloned())
            .collect();
        bound.dedup();
        bound
    }

    /// `d` as an integer expression in the body: its text when every symbol in it is
    /// bound by the signature, else its value.
    pub(super) fn dim_text(&self, d: &Dim) -> String {
        fn syms(d: &Dim, out: &mut Vec<usize>) {
            match d {
                Dim::Sym(k) => out.push(*k),
                Dim::Lit(_) => {}
                Dim::Add(a, b) | Dim::Mul(a, b) | Dim::Div(a, b) => {
                    syms(a, out);
                    syms(b, out);
                }
            }
        }
        let bound = self.bound_dims();
        let mut used = Vec::new();
        syms(d, &mut used);
        if used.iter().all(|k| bound.contains(&Dim::Sym(*k))) {
            d.text()
        } else {
            d.value(&self.p.dims).to_string()
        }
    }

    fn iota(&mut self) -> Option<Let> {
        let bound = self.bound_dims();
        let d = if bound.is_empty() || self.chance(0.2) {
            Dim::Lit(self.size())
        } else {
            self.pick(&bound)
        };
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(DType::I32, vec![d.clone()]),
            format!("iota({})", d.text()),
            vec![],
        )
    }

    /// A fresh `inout` parameter `p` of an operand's type updated whole in place from
    /// itself: read at the element written (`x + p`), transposed (`x + p^T`, square), or
    /// through a reduction over its rows (`x + sum(p, ..)`) — the last two read elements
    /// other threads write, which `fuse` must finish in earlier kernels (rule 6).
    fn whole_update(&mut self) -> Option<Let> {
        if self.cfg.grad {
            return None;
        }
        let (x, t) = self.operand();
        if t.dtype == DType::Bool || t.rank() == 0 {
            return None;
        }
        let r = t.rank();
        let square = r >= 2 && t.shape[r - 1] == t.shape[r - 2];
        let value = match self.below(3) {
            1 if square => "{1} + {0}^T".to_string(),
            2 => format!("{{1}} - sum({{0}}, axis: {}, keep: true)", r - 1),
            _ => "{1} + {0}".to_string(),
        };
        let p = self.fresh_param(t.clone());
        self.p.inout.push(p.clone());
        self.consumed.push(p.clone());
        let name = self.fresh_let(0);
        one(vec![name], t, format!("update({{0}}, {value})"), vec![p, x])
    }
}
