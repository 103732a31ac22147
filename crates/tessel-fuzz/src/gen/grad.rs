//! Gradient programs: a float computation in `fn f` and a step that returns
//! `grad(f, params.., wrt: [..], grad_output: (dy0, ..))` of some of its parameters (and
//! sometimes `f`'s value too), for the judge of [`crate::fd`]: the `grad` pass's gradient
//! against central finite differences of the forward on the f64 oracle, beside the usual
//! judgement of the compiled step against the reference.
//!
//! The computation grows as an ordinary program does ([`super`]), from a table of the ops
//! the `grad` pass has rules for, drawn so that finite differences can check them:
//! - parameters are f32 (finite differences move them by ±h exactly); 16-bit values come
//!   from casts (`bf16(x)`, `f32(bf16(x))`), and the widened matmul reads
//!   `f32(x16) @ f32(bf16(w))ᵀ`;
//! - the math functions with a restricted domain take shifted-positive operands
//!   (`log(x·x + 0.5)`, `sqrt(x·x + 0.25)`, `rsqrt(x·x + 0.5)`, `pow(x·x + 0.5, e)`,
//!   `y / (x·x + 1)`), so no derivative is infinite;
//! - `where` selects by a boolean *parameter* or a `causal`/length mask, never by a
//!   comparison of the data (a jump that ±h could cross);
//! - the ops with kinks (`relu`, `abs`, `maximum`, `clamp`, the `max`/`min` reductions,
//!   `floor`) are drawn rarely: where ±h crosses a kink the judge sees it (its two
//!   extrapolations disagree) and does not judge that element; elsewhere they are judged.
//!
//! Every value `f` computes is float (the outputs are float: `grad` needs it); integer
//! parameters are gather indices and boolean ones masks. The parameters differentiated by
//! are a random non-empty subset of the f32 ones that reach an output.

use super::{broadcast, one, promote, Gen, Rule, MATMUL_SIZES};
use crate::program::{Dim, GradSpec, Let, Program, Ty};
use tessel_ir::DType;

impl Gen {
    /// Builds a gradient program into `self.p`.
    pub(super) fn grad_program(&mut self) {
        // Redrawn (the generator's state moves on) until some f32 parameter reaches an
        // output: `grad` needs one.
        for _attempt in 0..20 {
            self.p = Program {
                dims: vec![],
                params: vec![],
                inout: vec![],
                lets: vec![],
                outputs: vec![],
                grad: None,
            };
            self.grad_attempt();
            if self.p.grad.as_ref().is_some_and(|g| !g.wrt.is_empty()) {
                return;
            }
        }
    }

    fn grad_attempt(&mut self) {
        let syms = 2 + self.below(3) as usize;
        for _ in 0..syms {
            let v = self.size();
            self.p.dims.push(v);
        }
        if self.chance(0.4) {
            self.p.dims[1] = self.p.dims[0];
        }
        for _ in 0..1 + self.below(2) {
            let mut t = self.random_ty();
            t.dtype = DType::F32;
            self.fresh_param(t);
        }
        let lets = 1 + self.below(self.cfg.max_lets as u64) as usize;
        self.grad_lets(lets);
        self.wrap_in_grad();
    }

    /// `n` differentiable operations appended.
    fn grad_lets(&mut self, n: usize) {
        for _ in 0..n {
            for _attempt in 0..30 {
                if let Some(l) = self.grad_step() {
                    self.p.lets.push(l);
                    break;
                }
            }
        }
    }

    /// A gradient program with an attention block ([`Config::grad`] with
    /// [`Config::attention`]): the block as the attention mode draws it — prefill only,
    /// since `grad` takes no `inout` parameter — its 16-bit parameters made f32 and cast
    /// where read, then up to `max_lets` differentiable operations; `grad` runs after the
    /// `attention` pass, so a fused attention is differentiated by its rule.
    ///
    /// [`Config::grad`]: super::Config::grad
    /// [`Config::attention`]: super::Config::attention
    pub(super) fn grad_attention_program(&mut self) {
        for _attempt in 0..20 {
            self.p = Program {
                dims: vec![],
                params: vec![],
                inout: vec![],
                lets: vec![],
                outputs: vec![],
                grad: None,
            };
            self.keep.clear();
            self.consumed.clear();
            self.attention_block();
            if !self.p.inout.is_empty() {
                continue;
            }
            let mut lets = std::mem::take(&mut self.p.lets);
            for l in lets.iter_mut() {
                self.cast_params(0, l);
            }
            self.p.lets = lets;
            for (_, t) in self.p.params.iter_mut() {
                if matches!(t.dtype, DType::Bf16 | DType::F16) {
                    t.dtype = DType::F32;
                }
            }
            let n = self.below(self.cfg.max_lets as u64 + 1) as usize;
            self.grad_lets(n);
            self.wrap_in_grad();
            if self.p.grad.as_ref().is_some_and(|g| !g.wrt.is_empty()) {
                return;
            }
        }
    }

    /// Makes the program so far a gradient program: `f`'s outputs (one or two float
    /// values no later `let` reads; sometimes reduced to a scalar loss), and the f32
    /// parameters to differentiate by.
    fn wrap_in_grad(&mut self) {
        let mut outputs: Vec<String> = self
            .sinks()
            .into_iter()
            .filter(|n| self.ty(n).dtype.is_float())
            .collect();
        // (Around an attention block, every sink: the block's output among them.)
        if !self.cfg.attention {
            outputs.truncate(2);
        }
        if outputs.is_empty() {
            outputs.push(self.p.params[0].0.clone());
        }
        self.p.outputs = outputs;
        // Sometimes a scalar loss with no `grad_output:` (the seed is 1).
        let mut scalar_loss = false;
        if self.chance(0.25) {
            let o = self.p.outputs[0].clone();
            let t = self.ty(&o);
            let name = self.fresh_let(0);
            let f = self.pick(&["sum", "mean"]);
            let template = if t.rank() == 0 {
                "{0} * 2.0".to_string()
            } else {
                format!("{f}(reshape({{0}}, [-1]), axis: 0)")
            };
            self.p.lets.push(Let {
                names: vec![name.clone()],
                tys: vec![Ty::new(t.dtype, vec![])],
                template,
                operands: vec![o],
            });
            self.p.outputs = vec![name];
            scalar_loss = true;
        }
        let reach = self.reaching();
        let mut wrt: Vec<String> = reach.iter().filter(|_| self.chance(0.7)).cloned().collect();
        if wrt.is_empty() {
            if let Some(w) = reach.first() {
                wrt.push(w.clone());
            }
        }
        self.p.grad = Some(GradSpec {
            wrt,
            forward: self.chance(0.3),
            scalar_loss,
        });
    }

    /// The f32 parameters on a path of float values to an output.
    fn reaching(&self) -> Vec<String> {
        let mut live: Vec<String> = self.p.outputs.clone();
        for l in self.p.lets.iter().rev() {
            let float_live = l
                .names
                .iter()
                .zip(&l.tys)
                .any(|(n, t)| t.dtype.is_float() && live.contains(n));
            if float_live {
                live.extend(l.operands.iter().cloned());
            }
        }
        self.p
            .params
            .iter()
            .filter(|(n, t)| t.dtype == DType::F32 && live.contains(n))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// One differentiable operation; None if the chosen one does not apply.
    fn grad_step(&mut self) -> Option<Let> {
        let w: &[(u32, Rule)] = &[
            (14, Gen::smooth_unary),
            (16, Gen::smooth_arith),
            (4, Gen::mask_select),
            (2, Gen::min_max),
            (1, Gen::clamp),
            (5, Gen::round_trip),
            (8, Gen::reduce),
            (4, Gen::softmax),
            (4, Gen::masked_softmax),
            (5, Gen::scan_or_lse),
            (5, Gen::slice),
            (2, Gen::index_select),
            (3, Gen::index_by_tensor),
            (3, Gen::take_along),
            (2, Gen::new_axis),
            (5, Gen::reshape),
            (5, Gen::transpose),
            (4, Gen::concat),
            (3, Gen::split),
            (10, Gen::grad_matmul),
        ];
        let total: u32 = w.iter().map(|x| x.0).sum();
        let mut r = self.below(total as u64) as u32;
        let params_before = self.p.params.len();
        for (weight, f) in w {
            if r < *weight {
                let mut l = f(self)?;
                self.f32_params(params_before, &mut l);
                let float = l.tys.iter().any(|t| t.dtype.is_float());
                return (float && l.tys.iter().all(|t| self.fits(t))).then_some(l);
            }
            r -= weight;
        }
        None
    }

    /// The 16-bit parameters a rule made (a part to `concat` of x's dtype) become f32
    /// ones cast where `l` reads them, so that finite differences can move them.
    fn f32_params(&mut self, from: usize, l: &mut Let) {
        self.cast_params(from, l);
        for (_, t) in self.p.params[from..].iter_mut() {
            if matches!(t.dtype, DType::Bf16 | DType::F16) {
                t.dtype = DType::F32;
            }
        }
    }

    /// `l` reading the 16-bit parameters from `from` on through casts to their dtypes.
    fn cast_params(&self, from: usize, l: &mut Let) {
        for (name, ty) in &self.p.params[from..] {
            let cast = match ty.dtype {
                DType::Bf16 => "bf16",
                DType::F16 => "f16",
                _ => continue,
            };
            for (i, o) in l.operands.iter().enumerate() {
                if o == name {
                    l.template = l
                        .template
                        .replace(&format!("{{{i}}}"), &format!("{cast}({{{i}}})"));
                }
            }
        }
    }

    /// The math functions on operands where their derivatives are finite.
    fn smooth_unary(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let name = self.fresh_let(0);
        let template = self
            .pick(&[
                "exp({0})",
                "exp({0} * -0.5)",
                "log({0} * {0} + 0.5)",
                "sqrt({0} * {0} + 0.25)",
                "rsqrt({0} * {0} + 0.5)",
                "sin({0})",
                "cos({0})",
                "tanh({0})",
                "sigmoid({0})",
                "silu({0})",
                "erf({0})",
                "gelu({0})",
                "gelu({0}, approximate: true)",
                "-{0}",
                "pow({0} * {0} + 0.5, 1.5)",
                "pow({0} * {0} + 0.5, -1.0)",
                "pow({0} * {0} + 0.25, 0.5)",
                "pow({0}, 2.0)",
                "pow({0}, 3.0)",
                "relu({0})",
                "abs({0})",
                "floor({0}) + {0}",
            ])
            .to_string();
        one(vec![name], t, template, vec![x])
    }

    /// `+ - *` with a partner or a literal, and division by a shifted-positive partner.
    fn smooth_arith(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let name = self.fresh_let(0);
        if self.chance(0.3) {
            let lit = self.pick(&["2.0", "0.5", "-1.5", "3.0"]);
            let template = match self.below(4) {
                0 => format!("{{0}} * {lit}"),
                1 => format!("{lit} - {{0}}"),
                2 => format!("{{0}} + {lit}"),
                _ => format!("{lit} / ({{0}} * {{0}} + 1.0)"),
            };
            return one(vec![name], t, template, vec![x]);
        }
        let (y, u) = self.partner(&t.shape, |d| d.is_float());
        let shape = broadcast(&t.shape, &u.shape)?;
        let dt = promote(t.dtype, u.dtype);
        let template = match self.below(4) {
            0 => "{0} + {1}",
            1 => "{0} - {1}",
            2 => "{0} * {1}",
            _ => "{0} / ({1} * {1} + 1.0)",
        };
        let ops = if self.chance(0.5) {
            vec![x, y]
        } else {
            vec![y, x]
        };
        one(vec![name], Ty::new(dt, shape), template.into(), ops)
    }

    /// `where(m, x, y)` by a boolean parameter or a causal mask: smooth in `x` and `y`.
    fn mask_select(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let r = t.rank();
        let name = self.fresh_let(0);
        let (mask, mut operands, mut shape) = if r >= 2 && self.chance(0.4) {
            let (a, b) = (
                self.dim_text(&t.shape[r - 2]),
                self.dim_text(&t.shape[r - 1]),
            );
            (format!("causal({a}, {b})"), vec![x], t.shape.clone())
        } else {
            let (c, ct) = self.partner(&t.shape, |d| d == DType::Bool);
            let shape = broadcast(&t.shape, &ct.shape)?;
            ("{1}".to_string(), vec![x, c], shape)
        };
        let other = if self.chance(0.3) {
            self.pick(&["0.0", "1.5"]).to_string()
        } else {
            let k = operands.len();
            let (y, u) = self.partner(&shape, |d| d.is_float());
            shape = broadcast(&shape, &u.shape)?;
            operands.push(y);
            format!("{{{k}}}")
        };
        let dt = operands
            .iter()
            .filter(|o| self.ty(o).dtype.is_float())
            .map(|o| self.ty(o).dtype)
            .reduce(promote)?;
        let template = if self.chance(0.5) {
            format!("where({mask}, {{0}}, {other})")
        } else {
            format!("where({mask}, {other}, {{0}})")
        };
        one(vec![name], Ty::new(dt, shape), template, operands)
    }

    /// A cast to a 16-bit dtype, or a round trip through one.
    fn round_trip(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let name = self.fresh_let(0);
        let (template, dt) = match (t.dtype, self.below(3)) {
            (DType::F32, 0) => ("bf16({0})", DType::Bf16),
            (DType::F32, 1) => ("f16({0})", DType::F16),
            (DType::F32, _) => ("f32(bf16({0}))", DType::F32),
            (_, _) => ("f32({0})", DType::F32),
        };
        one(vec![name], Ty::new(dt, t.shape), template.into(), vec![x])
    }

    /// `logsumexp`, `cumsum` or `topk`'s values along an axis.
    fn scan_or_lse(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let a = self.axis_text(axis, t.rank());
        match self.below(3) {
            0 => {
                let name = self.fresh_let(0);
                one(vec![name], t, format!("cumsum({{0}}, axis: {a})"), vec![x])
            }
            1 => {
                let len = t.shape[axis].value(&self.p.dims);
                let k = len.min(1 + self.below(3));
                let mut shape = t.shape.clone();
                shape[axis] = Dim::Lit(k);
                Some(Let {
                    names: vec![self.fresh_let(0), self.fresh_let(1)],
                    tys: vec![Ty::new(t.dtype, shape.clone()), Ty::new(DType::I32, shape)],
                    template: format!("topk({{0}}, {k}, axis: {a})"),
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
                let keep_text = if keep { ", keep: true" } else { "" };
                let name = self.fresh_let(0);
                one(
                    vec![name],
                    Ty::new(t.dtype, shape),
                    format!("logsumexp({{0}}, axis: {a}{keep_text})"),
                    vec![x],
                )
            }
        }
    }

    /// `x @ w`, `x @ wᵀ` (batched when x is), or the widened 16-bit product
    /// `f32(x16) @ f32(bf16(w))ᵀ`, with a fresh f32 weight.
    fn grad_matmul(&mut self) -> Option<Let> {
        let (x, t) = match self.operand() {
            (x, t) if (2..=3).contains(&t.rank()) && self.chance(0.6) => (x, t),
            _ => {
                let m = if self.chance(0.5) {
                    self.sym()
                } else {
                    let v = self.pick(&[1u64, 2, 3, 7, 8, 16, 17, 33]);
                    self.new_sym(v)
                };
                let kv = self.pick(&MATMUL_SIZES[..10]);
                let k = self.new_sym(kv);
                let t = Ty::new(DType::F32, vec![m, k]);
                if !self.fits(&t) {
                    return None;
                }
                (self.fresh_param(t.clone()), t)
            }
        };
        let r = t.rank();
        let k = t.shape[r - 1].clone();
        let n = if self.chance(0.3) {
            self.sym()
        } else {
            let v = self.pick(&MATMUL_SIZES[..10]);
            self.new_sym(v)
        };
        let fmas = t.numel(&self.p.dims) * n.value(&self.p.dims);
        if fmas > self.cfg.max_fmas {
            return None;
        }
        let sixteen = matches!(t.dtype, DType::Bf16 | DType::F16);
        let widen = self.chance(0.35);
        let transposed = self.chance(0.5) || widen;
        let mut ws = if self.chance(0.3) {
            vec![]
        } else {
            t.shape[..r - 2].to_vec()
        };
        if transposed {
            ws.extend([n.clone(), k]);
        } else {
            ws.extend([k, n.clone()]);
        }
        let wt = Ty::new(DType::F32, ws);
        if !self.fits(&wt) {
            return None;
        }
        let w = self.fresh_param(wt);
        let mut out = t.shape[..r - 1].to_vec();
        out.push(n);
        let name = self.fresh_let(0);
        let (template, dt) = if widen {
            let w16 = if t.dtype == DType::F16 { "f16" } else { "bf16" };
            let x16 = if sixteen {
                "f32({0})".to_string()
            } else {
                "f32(bf16({0}))".to_string()
            };
            (format!("{x16} @ f32({w16}({{1}}))^T"), DType::F32)
        } else if transposed {
            ("{0} @ {1}^T".to_string(), promote(t.dtype, DType::F32))
        } else {
            ("{0} @ {1}".to_string(), promote(t.dtype, DType::F32))
        };
        one(vec![name], Ty::new(dt, out), template, vec![x, w])
    }
}

#[cfg(test)]
mod tests {
    use super::super::{generate, Config};

    /// The gradient programs reach the ops the issue names, and every one differentiates
    /// something.
    #[test]
    fn gradient_programs_cover_the_ops() {
        let cfg = Config::grad();
        let mut seen = std::collections::BTreeMap::<&str, u32>::new();
        let keys = [
            "grad(f, ",
            "grad_output:",
            "@",
            "^T",
            ") @ f32(bf16(",
            "softmax(where(",
            "logsumexp(",
            "cumsum(",
            "topk(",
            "sum(",
            "mean(",
            "max(",
            "reshape(",
            "permute(",
            "concat(",
            "split(",
            "bf16(",
            "take_along_axis(",
            "gather(",
            "where(",
        ];
        for seed in 0..400 {
            let p = generate(seed, &cfg);
            assert!(!p.wrt().is_empty(), "seed {seed}: nothing differentiated");
            let src = p.source_body();
            for k in keys {
                *seen.entry(k).or_default() += src.contains(k) as u32;
            }
        }
        eprintln!("{seen:?}");
        for k in keys {
            assert!(seen[k] >= 8, "`{k}` in {} of 400 programs", seen[k]);
        }
        assert!(seen["grad_output:"] < 390, "no scalar losses");
    }
}
