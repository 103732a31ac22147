//! A generated program: parameters, one `let` per operation, outputs — what the generator
//! builds, the shrinker rewrites and [`Program::source`] prints as a `.tsl` step.
//!
//! Shapes are written with symbolic dims `D0, D1, ...` whose values are bound separately
//! ([`Program::dims`]), so the shrinker can make a failing program smaller by binding a
//! dim to a smaller value without rewriting the text (a binding that makes the program
//! ill-typed is simply rejected by the checker).

use std::fmt::Write as _;
use tessel_ir::DType;

/// A dim in a type: a symbol `D<k>`, a literal, or arithmetic over them (as `reshape` and
/// `split` write results, and GQA's `H / KV` query heads per K/V head).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Sym(usize),
    Lit(u64),
    Add(Box<Dim>, Box<Dim>),
    Mul(Box<Dim>, Box<Dim>),
    Div(Box<Dim>, Box<Dim>),
}

impl Dim {
    /// The value under `dims` (the values of `D0, D1, ...`).
    pub fn value(&self, dims: &[u64]) -> u64 {
        match self {
            Dim::Sym(k) => dims[*k],
            Dim::Lit(n) => *n,
            Dim::Add(a, b) => a.value(dims) + b.value(dims),
            Dim::Mul(a, b) => a.value(dims) * b.value(dims),
            Dim::Div(a, n) => a.value(dims) / n.value(dims),
        }
    }

    /// The source text: `D0`, `7`, `D0 * D1`, `D2 / 3`, `D2 / D1`.
    pub fn text(&self) -> String {
        match self {
            Dim::Sym(k) => format!("D{k}"),
            Dim::Lit(n) => n.to_string(),
            Dim::Add(a, b) => format!("{} + {}", a.text(), b.text()),
            Dim::Mul(a, b) => format!("{} * {}", a.factor(), b.factor()),
            Dim::Div(a, n) => format!("{} / {}", a.factor(), n.factor()),
        }
    }

    /// The text as an operand of `*` or `/`: parenthesised unless a symbol or literal.
    fn factor(&self) -> String {
        if self.is_plain() {
            self.text()
        } else {
            format!("({})", self.text())
        }
    }

    /// True if the dim's text names a symbol (a signature may only use symbols and
    /// literals: arithmetic appears in bodies).
    pub fn is_plain(&self) -> bool {
        matches!(self, Dim::Sym(_) | Dim::Lit(_))
    }
}

/// A value's type, its dims symbolic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ty {
    pub dtype: DType,
    pub shape: Vec<Dim>,
}

impl Ty {
    pub fn new(dtype: DType, shape: Vec<Dim>) -> Ty {
        Ty { dtype, shape }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self, dims: &[u64]) -> u64 {
        self.shape.iter().map(|d| d.value(dims)).product()
    }

    /// The type as source: `f32`, `bf16[D0, 3]`.
    pub fn text(&self) -> String {
        let dt = dtype_name(self.dtype);
        if self.shape.is_empty() {
            return dt.to_string();
        }
        let dims: Vec<String> = self.shape.iter().map(Dim::text).collect();
        format!("{dt}[{}]", dims.join(", "))
    }
}

/// The dtype's keyword.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::Bf16 => "bf16",
        DType::F16 => "f16",
        DType::F32 => "f32",
        DType::I32 => "i32",
        DType::Bool => "bool",
    }
}

/// One `let`: an expression template over operand names (`{0}`, `{1}`, ...) binding one
/// name, or several for `split` (`let (a, b) = ...`).
#[derive(Clone, Debug, PartialEq)]
pub struct Let {
    pub names: Vec<String>,
    pub tys: Vec<Ty>,
    /// Source with `{i}` standing for `operands[i]`.
    pub template: String,
    /// Names of earlier values (parameters or lets).
    pub operands: Vec<String>,
}

impl Let {
    /// The expression's source with the operands substituted.
    pub fn expr(&self) -> String {
        let mut s = self.template.clone();
        // Highest index first, so `{1}` is not found inside `{10}`.
        for (i, o) in self.operands.iter().enumerate().rev() {
            s = s.replace(&format!("{{{i}}}"), o);
        }
        s
    }
}

/// A step program: `step fuzz(params) -> outputs { lets; (outputs) }` — or, with
/// [`Program::grad`], a `fn f(params) -> outputs { lets; (outputs) }` and a step that
/// returns its gradients ([`GradSpec`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Values of `D0, D1, ...`.
    pub dims: Vec<u64>,
    pub params: Vec<(String, Ty)>,
    /// The parameters declared `inout` (a KV cache that `update` writes in place); the
    /// step also returns each, after `outputs`.
    pub inout: Vec<String>,
    pub lets: Vec<Let>,
    /// Names of the returned values, at least one.
    pub outputs: Vec<String>,
    /// A gradient program: the lets are the body of `fn f`, and the step `fuzz` returns
    /// the gradients of its outputs by some of its parameters.
    pub grad: Option<GradSpec>,
}

/// How a gradient program's step differentiates `fn f` (the lets and outputs of the
/// [`Program`]): `step fuzz(params.., dy0, ..) -> (grads.., [outputs..]) { grad(f, params..,
/// wrt: [wrt..], grad_output: (dy0, ..)) }`, one `dy` per output of `f`, of its type.
#[derive(Clone, Debug, PartialEq)]
pub struct GradSpec {
    /// The parameters differentiated by (those no longer parameters are left out: the
    /// shrinker may cut them off).
    pub wrt: Vec<String>,
    /// The step also returns `f`'s outputs (the forward beside the backward).
    pub forward: bool,
    /// `f` returns one one-element value and the step leaves `grad_output:` out (the seed
    /// is 1); when `f` no longer does, `dy` is given as usual.
    pub scalar_loss: bool,
}

impl Program {
    /// The type of a parameter or `let` name.
    pub fn ty_of(&self, name: &str) -> Option<&Ty> {
        if let Some((_, t)) = self.params.iter().find(|(n, _)| n == name) {
            return Some(t);
        }
        self.lets
            .iter()
            .find_map(|l| l.names.iter().position(|n| n == name).map(|i| &l.tys[i]))
    }

    /// The `--dim` bindings: `[("D0", 4), ...]` for every symbol the program uses.
    pub fn dim_bindings(&self) -> Vec<(String, u64)> {
        let src = self.source_body();
        (0..self.dims.len())
            .filter(|k| mentions(&src, &format!("D{k}")))
            .map(|k| (format!("D{k}"), self.dims[k]))
            .collect()
    }

    /// The step's source (no header comment): the step, or for a gradient program the
    /// `fn f` and the step `fuzz` that differentiates it.
    pub fn source_body(&self) -> String {
        match &self.grad {
            None => self.body("step fuzz"),
            Some(spec) => self.body("fn f") + &self.grad_step(spec),
        }
    }

    /// The parameters a gradient program's step differentiates by: [`GradSpec::wrt`]
    /// less those no longer parameters.
    pub fn wrt(&self) -> Vec<String> {
        self.grad.as_ref().map_or(vec![], |g| {
            g.wrt
                .iter()
                .filter(|w| self.params.iter().any(|(n, _)| n == *w))
                .cloned()
                .collect()
        })
    }

    /// True if the gradient program's step leaves `grad_output:` out.
    fn scalar_seed(&self) -> bool {
        self.grad.as_ref().is_some_and(|g| g.scalar_loss)
            && self.outputs.len() == 1
            && self
                .ty_of(&self.outputs[0])
                .is_some_and(|t| t.numel(&self.dims) == 1)
    }

    /// The step of a gradient program.
    fn grad_step(&self, spec: &GradSpec) -> String {
        let wrt = self.wrt();
        let sig = |t: &Ty| self.signature(t).text();
        let out_tys: Vec<String> = self
            .outputs
            .iter()
            .map(|o| self.ty_of(o).map_or("?".into(), sig))
            .collect();
        let mut params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {}", t.text()))
            .collect();
        let scalar = self.scalar_seed();
        let dys: Vec<String> = (0..self.outputs.len()).map(|k| format!("dy{k}")).collect();
        if !scalar {
            params.extend(dys.iter().zip(&out_tys).map(|(d, t)| format!("{d}: {t}")));
        }
        let mut rets: Vec<String> = wrt
            .iter()
            .map(|w| self.ty_of(w).map_or("?".into(), sig))
            .collect();
        let gs: Vec<String> = (0..wrt.len()).map(|k| format!("g{k}")).collect();
        let mut tail = gs.clone();
        if spec.forward {
            rets.extend(out_tys.iter().cloned());
            tail.extend((0..self.outputs.len()).map(|k| format!("y{k}")));
        }
        let tuple = |xs: &[String]| {
            if xs.len() == 1 {
                xs[0].clone()
            } else {
                format!("({})", xs.join(", "))
            }
        };
        let args: Vec<&str> = self.params.iter().map(|(n, _)| n.as_str()).collect();
        let seed = if scalar {
            String::new()
        } else {
            format!(", grad_output: {}", tuple(&dys))
        };
        let mut s = String::new();
        let _ = writeln!(s, "step fuzz({}) -> {} {{", params.join(", "), tuple(&rets));
        let _ = writeln!(
            s,
            "    let {} = grad(f, {}, wrt: [{}]{seed});",
            tuple(&gs),
            args.join(", "),
            wrt.join(", ")
        );
        if spec.forward {
            let ys: Vec<String> = (0..self.outputs.len()).map(|k| format!("y{k}")).collect();
            let _ = writeln!(s, "    let {} = f({});", tuple(&ys), args.join(", "));
        }
        let _ = writeln!(s, "    {}\n}}", tuple(&tail));
        s
    }

    /// `head(params) -> outputs { lets; outputs }`: the step, or a gradient program's fn.
    fn body(&self, head: &str) -> String {
        let mut s = String::new();
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| {
                let inout = if self.inout.contains(n) { "inout " } else { "" };
                format!("{n}: {inout}{}", t.text())
            })
            .collect();
        // A signature names dims by symbols and literals only: computed dims by value.
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|o| {
                self.ty_of(o)
                    .map_or("?".into(), |t| self.signature(t).text())
            })
            .collect();
        let ret = if outs.len() == 1 {
            outs[0].clone()
        } else {
            format!("({})", outs.join(", "))
        };
        let _ = writeln!(s, "{head}({}) -> {ret} {{", params.join(", "));
        for l in &self.lets {
            let lhs = if l.names.len() == 1 {
                l.names[0].clone()
            } else {
                format!("({})", l.names.join(", "))
            };
            let _ = writeln!(s, "    let {lhs} = {};", l.expr());
        }
        let tail = if self.outputs.len() == 1 {
            self.outputs[0].clone()
        } else {
            format!("({})", self.outputs.join(", "))
        };
        let _ = writeln!(s, "    {tail}\n}}");
        s
    }

    /// `t` with every computed dim replaced by its value.
    fn signature(&self, t: &Ty) -> Ty {
        let shape = t
            .shape
            .iter()
            .map(|d| {
                if d.is_plain() {
                    d.clone()
                } else {
                    Dim::Lit(d.value(&self.dims))
                }
            })
            .collect();
        Ty::new(t.dtype, shape)
    }

    /// The whole file: a header comment with the dims (as `tessel check --dim` takes
    /// them) and `extra` lines, then the step.
    pub fn source(&self, extra: &[String]) -> String {
        let mut s = String::new();
        for e in extra {
            let _ = writeln!(s, "// {e}");
        }
        let dims: Vec<String> = self
            .dim_bindings()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        let _ = writeln!(s, "// dims: {}", dims.join(" "));
        s + &self.source_body()
    }

    /// How many elements the program's values hold in all (a size for shrinking).
    pub fn weight(&self) -> u64 {
        let p: u64 = self.params.iter().map(|(_, t)| t.numel(&self.dims)).sum();
        let l: u64 = self
            .lets
            .iter()
            .flat_map(|l| l.tys.iter())
            .map(|t| t.numel(&self.dims))
            .sum();
        p + l + self.lets.len() as u64 * 1000
    }
}

/// True if `word` occurs in `src` as a whole identifier.
pub fn mentions(src: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    src.match_indices(word).any(|(i, _)| {
        let before = src[..i].chars().next_back();
        let after = src[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_a_step_with_its_dims() {
        let p = Program {
            dims: vec![4, 4, 9],
            inout: vec![],
            params: vec![(
                "a0".into(),
                Ty::new(DType::F32, vec![Dim::Sym(0), Dim::Sym(1)]),
            )],
            lets: vec![Let {
                names: vec!["t0".into()],
                tys: vec![Ty::new(DType::F32, vec![Dim::Sym(1)])],
                template: "sum({0}, axis: 0)".into(),
                operands: vec!["a0".into()],
            }],
            outputs: vec!["t0".into()],
            grad: None,
        };
        assert_eq!(
            p.source(&["fuzz seed 1".into()]),
            "// fuzz seed 1\n// dims: D0=4 D1=4\nstep fuzz(a0: f32[D0, D1]) -> f32[D1] {\n    let t0 = sum(a0, axis: 0);\n    t0\n}\n"
        );
        assert!(mentions("x + D1", "D1") && !mentions("D10", "D1"));
        assert_eq!(
            Dim::Div(
                Box::new(Dim::Mul(Box::new(Dim::Sym(0)), Box::new(Dim::Lit(3)))),
                Box::new(Dim::Lit(2))
            )
            .text(),
            "(D0 * 3) / 2"
        );
        assert_eq!(
            Dim::Mul(
                Box::new(Dim::Add(Box::new(Dim::Sym(1)), Box::new(Dim::Lit(2)))),
                Box::new(Dim::Sym(0))
            )
            .text(),
            "(D1 + 2) * D0"
        );
    }
}
