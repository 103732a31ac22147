//! A `fn`'s forward and gradient steps, written as a source of their own: what the Python
//! package's `tessel.autograd` compiles into a `torch.autograd.Function` (the forward step,
//! and the backward step that the `grad` pass differentiates, design §13).
//!
//! For `fn f(x: bf16[T, D], w: bf16[D], ids: i32[T]) -> bf16[T, D]` in FILE:
//!
//! ```text
//! import "FILE";
//! step forward(x: bf16[T, D], w: bf16[D], ids: i32[T]) -> bf16[T, D] { f(x, w, ids) }
//! step backward(x: bf16[T, D], w: bf16[D], ids: i32[T], grad_output: bf16[T, D])
//!     -> (bf16[T, D], bf16[D]) {
//!     grad(f, x, w, ids, wrt: [x, w], grad_output: grad_output)
//! }
//! ```
//!
//! The gradient is taken with respect to every floating-point parameter (`bf16`, `f16`,
//! `f32`), or those of them the caller names (a frozen weight needs none: a LoRA layer's
//! base weight), each gradient of its parameter's type; integer and `bool` parameters have
//! none.
//! The backward step takes the forward's inputs and recomputes what it needs from them (the
//! `grad` pass differentiates the forward inside it), so the autograd function saves only
//! its inputs. The types are the `fn`'s own text, so its symbolic dims are the steps' dims.

use crate::error::{Error, RequestError};
use crate::source::Source;
use tessel_syntax::ast::{DType, FuncKind, Type};

/// The names of the generated steps.
pub const FORWARD: &str = "forward";
/// See [`FORWARD`].
pub const BACKWARD: &str = "backward";

/// A generated forward/backward pair, and which parameters have gradients.
#[derive(Clone, Debug)]
pub struct Companion {
    /// The generated source: an import of the `fn`'s file and the two steps.
    pub text: String,
    /// For each parameter of the `fn`, in order, whether the backward step returns its
    /// gradient (in this order among the backward's results).
    pub differentiable: Vec<bool>,
}

impl Source {
    /// The text of `ty` as written in the source.
    fn type_text(&self, ty: &Type) -> Option<String> {
        let file = self.sources.file(self.sources.lookup(ty.span.start)?);
        let local = file.local(ty.span);
        file.text.get(local.start..local.end).map(str::to_string)
    }

    /// The forward and backward steps of `fn` `name` of this source, whose file is
    /// `import` (the path written in the generated source's `import`: absolute, or relative
    /// to where the generated file is written), with gradients for the parameters named in
    /// `wrt` (every floating-point parameter when `None`).
    ///
    /// # Errors
    /// [`Error::Request`] when the source has no `fn` `name` (the `fn`s it has are listed),
    /// when the `fn` has several results or no floating-point parameter, or when `wrt` names
    /// a parameter the `fn` does not have or one that is not floating-point, or none.
    pub fn grad_companion(
        &self,
        name: &str,
        import: &str,
        wrt: Option<&[String]>,
    ) -> Result<Companion, Error> {
        let fns: Vec<&tessel_syntax::ast::Func> = self
            .module
            .funcs()
            .filter(|f| f.kind == FuncKind::Fn)
            .collect();
        let refuse = |why: String| {
            Error::Request(RequestError::Companion {
                file: self.name.clone(),
                name: name.to_string(),
                why,
            })
        };
        // The language's string literals have no escapes (E0005): a path with a quote, a
        // backslash or a line break cannot be written in an `import`.
        if import.contains(['"', '\\', '\n', '\r']) {
            return Err(refuse(format!(
                "its file's path {import:?} has a quote, backslash or line break, which an \
                 `import` cannot name; move the file"
            )));
        }
        let Some(f) = fns.iter().find(|f| f.name.node == name) else {
            let have: Vec<&str> = fns.iter().map(|f| f.name.node.as_str()).collect();
            return Err(refuse(if have.is_empty() {
                "the file has no `fn`".into()
            } else {
                format!("its `fn`s are: {}", have.join(", "))
            }));
        };
        let [ret] = f.ret.types() else {
            return Err(refuse(format!(
                "it has {} results; autograd takes a `fn` of one result",
                f.ret.types().len()
            )));
        };
        let text_of = |ty: &Type| {
            self.type_text(ty)
                .ok_or_else(|| refuse("internal error: a type's span lies outside its file".into()))
        };
        let ret = text_of(ret)?;
        let mut params = Vec::new();
        let mut differentiable = Vec::new();
        for p in &f.params {
            params.push((p.name.node.clone(), text_of(&p.ty)?));
            differentiable.push(matches!(
                p.ty.dtype.node,
                DType::Bf16 | DType::F16 | DType::F32
            ));
        }
        if !differentiable.contains(&true) {
            return Err(refuse("it has no floating-point parameter".into()));
        }
        if let Some(wrt) = wrt {
            for w in wrt {
                match params.iter().position(|(n, _)| n == w) {
                    None => return Err(refuse(format!("wrt: it has no parameter `{w}`"))),
                    Some(i) if !differentiable[i] => {
                        return Err(refuse(format!(
                            "wrt: `{w}` is not floating-point, it has no gradient"
                        )))
                    }
                    Some(_) => {}
                }
            }
            if wrt.is_empty() {
                return Err(refuse("wrt: no parameter named".into()));
            }
            for (d, (n, _)) in differentiable.iter_mut().zip(&params) {
                *d &= wrt.contains(n);
            }
        }
        // The gradient's seed, named apart from the parameters.
        let mut seed = String::from("grad_output");
        while params.iter().any(|(n, _)| *n == seed) {
            seed.push('_');
        }
        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        let decls: Vec<String> = params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let wrt: Vec<&str> = names
            .iter()
            .zip(&differentiable)
            .filter(|(_, d)| **d)
            .map(|(n, _)| *n)
            .collect();
        let grads: Vec<&str> = params
            .iter()
            .zip(&differentiable)
            .filter(|(_, d)| **d)
            .map(|((_, t), _)| t.as_str())
            .collect();
        let grad_ret = match grads.as_slice() {
            [one] => one.to_string(),
            many => format!("({})", many.join(", ")),
        };
        let text = format!(
            "// The forward and gradient steps of `fn {name}` of {file}, for tessel.autograd.\n\
             import \"{import}\";\n\n\
             step {FORWARD}({decls}) -> {ret} {{\n    {name}({args})\n}}\n\n\
             step {BACKWARD}({decls}, {seed}: {ret}) -> {grad_ret} {{\n    \
             grad({name}, {args}, wrt: [{wrt}], grad_output: {seed})\n}}\n",
            file = self.name,
            decls = decls.join(", "),
            args = names.join(", "),
            wrt = wrt.join(", "),
        );
        Ok(Companion {
            text,
            differentiable,
        })
    }
}
