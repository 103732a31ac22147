//! `check`: AST in, a typed and shape-checked graph IR out — or diagnostics.
//!
//! ```text
//! source.tsl --parse--> AST --check--> graph IR --decompose--> ...
//! ```
//!
//! [`run`] builds the graph of one `step`: one [`Op::Input`] per step parameter (in order,
//! [`Graph::inputs`]), then the body with every `fn` call inlined, then the step's results
//! in [`Graph::outputs`]. The symbolic dims of the step (`T`) are bound from the `dims` map
//! (`--dim T=4096`), so every shape in the graph is concrete; a `fn`'s dims are unified per
//! call with its arguments.
//!
//! What it guarantees after: the graph satisfies `tessel_ir::verify::verify_graph` — no op
//! broadcasts or promotes implicitly (the pass inserts [`Op::Reshape`], [`Op::Broadcast`] and
//! [`Op::Cast`]), every literal is an [`Op::Const`] holding the exact value of the dtype it
//! took, every tensor dim is at least 1 and every tensor holds at most [`MAX_NUMEL`]
//! elements (kernels index with 32-bit offsets), and no value is dead (unused values, such as one
//! half of a `split`, are removed; every step input stays). The result types equal the
//! declared ones exactly.
//!
//! `@` is checked like the other operators: float operands promoted to one dtype, rank 2 or
//! more, the contracted dims equal, and the batch dims broadcast explicitly, giving one
//! [`Op::MatMul`] of `[.., M, K]` and `[.., K, N]`; a weight stored `[N, K]` is written
//! `x @ w^T` and reaches the graph as a [`Op::Permute`] of the last two dims, which `fuse`
//! and `lower` read in place.
//!
//! What it does not do: decompose composites (`mean`, `softmax` stay whole for `decompose`),
//! fuse, or pick schedules. The PyTorch-named elementwise builtins (`gelu`, `clamp`,
//! `remainder`, ...) are composites built here (`elementwise.rs`); `%` is `torch.remainder`.
//!
//! Errors are [`Diagnostic`]s with codes in [`codes`] (`E02xx` names, `E03xx` dtypes,
//! `E04xx` shapes, `E029x` not supported yet; E0290, once matmul's, E0291, once gather's,
//! and E0292, once float `%`'s, are retired; E0299 an internal error). Every op it builds
//! is typed by its rule ([`Checker::build`], `tessel_ir::builder::result_type`), so no
//! derived type is spelled out here. Name errors are collected first, over the
//! module's items and consts and over the step and the `fn`s it calls (another step's
//! errors are its own, reported when it is built); if there are none, the step is checked, collecting independent errors and stopping at the
//! first error of each chain (a value whose operand failed is not diagnosed again). The pass
//! never panics on any AST, and its work is bounded: [`MAX_CALL_DEPTH`] nested calls,
//! [`MAX_EXPANSION`] graph nodes and inlined calls per step.
//!
//! The language's semantics (promotion, broadcasting, builtins, indexing) are written down
//! in `docs/language.md`, section "Semantics".
//!
//! The pass, by file: this one (entry, checker state, consts, the step), `signature`
//! (binding dims, declared types, conforming results), `eval` (expressions, operators),
//! `graph_ops` (casts, promotion, broadcasting, shape ops), `index` (`x[...]`), `calls`
//! (inlining `fn`s), `builtins`, `gather` (indexing by a tensor), `inplace` (`inout` parameters, `update` and the rules that
//! keep an update in place), `names` (name resolution, suggestions), `lit` (weak literals
//! and constant folding).
//!
//! Output names: a step's results are named after the tail when the tail is a plain
//! let-bound name (or a tuple of such names), all distinct and none equal to a step
//! parameter's name; otherwise `out` for a single result and `out0`, `out1`, ... for a tuple.
//! After them, each `inout` parameter's final value (its last update, or the parameter itself
//! when it is never updated) is an output named after the parameter; a declared result that
//! would take such a name gets a `_` appended.

mod builtins;
mod calls;
mod elementwise;
mod eval;
mod gather;
mod grad;
mod graph_ops;
mod index;
mod inplace;
mod layout;
mod lit;
mod names;
mod scan;
mod signature;

use std::collections::{BTreeMap, HashMap, HashSet};

use cranelift_entity::SecondaryMap;

use tessel_ir::builder::result_type;
use tessel_ir::graph::{Graph, Op};
use tessel_ir::{DType, TensorType, Value};
use tessel_syntax::ast::{self, Func, FuncKind, Module};
use tessel_syntax::{Diagnostic, Span};

use lit::Lit;
pub use names::{edit_distance, suggest};
use signature::output_names;

/// Diagnostic codes of the checker.
pub mod codes {
    /// A name that is not a local, a parameter, a const or a dim in scope.
    pub const UNKNOWN_NAME: &str = "E0201";
    /// A call to a function that is neither a builtin nor a `fn` of the module.
    pub const UNKNOWN_FUNCTION: &str = "E0202";
    /// Two items (`fn`, `step`, `const`) with one name.
    pub const DUPLICATE_ITEM: &str = "E0203";
    /// A `fn` or `step` named like a builtin function.
    pub const SHADOWS_BUILTIN: &str = "E0204";
    /// Two parameters of one function with one name.
    pub const DUPLICATE_PARAM: &str = "E0205";
    /// The requested step does not exist.
    pub const UNKNOWN_STEP: &str = "E0206";
    /// A `fn` that calls itself, directly or through others.
    pub const RECURSIVE_CALL: &str = "E0207";
    /// A `const` that names a const defined after it.
    pub const CONST_FORWARD_REF: &str = "E0208";
    /// A call to a `step` (only `fn`s are callable).
    pub const STEP_CALLED: &str = "E0209";
    /// Too many or too few positional arguments.
    pub const ARG_COUNT: &str = "E0210";
    /// A named argument the function does not take, or an argument given twice.
    pub const UNKNOWN_NAMED_ARG: &str = "E0211";
    /// A required named argument (`axis:`) is missing.
    pub const MISSING_NAMED_ARG: &str = "E0212";
    /// `let (a, b) = e` where `e` is not a tuple of that many values.
    pub const TUPLE_ARITY: &str = "E0213";
    /// A symbolic dim with no value (`--dim T=<n>` missing, or a `fn`'s return dim that no
    /// parameter binds).
    pub const UNBOUND_DIM: &str = "E0214";
    /// A compile-time constant was needed (an axis, a slice bound, a `const`'s value).
    pub const NOT_CONSTANT: &str = "E0215";
    /// `fn` calls nested deeper than [`super::MAX_CALL_DEPTH`].
    pub const CALL_DEPTH: &str = "E0216";
    /// Inlining `fn` calls expands the step past [`super::MAX_EXPANSION`] graph nodes and
    /// calls.
    pub const EXPANSION: &str = "E0217";
    /// `update` of a value that is not an `inout` step parameter or an update of one.
    pub const UPDATE_NOT_INOUT: &str = "E0218";
    /// A read of an `inout` parameter (or an update's result) after an update consumed it:
    /// its old value no longer exists.
    pub const STALE_READ: &str = "E0219";
    /// A value computed from a tensor before its update, used after the update (or as the
    /// update's own rows or positions).
    pub const READ_BEFORE_UPDATE: &str = "E0220";
    /// `wrt:` of `grad` is not a list of the differentiated fn's parameter names, or names
    /// one twice.
    pub const GRAD_WRT: &str = "E0221";
    /// `grad`'s first argument does not name a fn (or a step without `inout` parameters).
    pub const GRAD_NOT_A_FN: &str = "E0222";
    /// A `wrt:` parameter that the result does not depend on through float values.
    pub const GRAD_NO_PATH: &str = "E0223";
    /// A `grad` of a fn that takes a gradient itself (second derivatives).
    pub const GRAD_NESTED: &str = "E0224";
    /// An op the checker built that its type rule (`tessel_ir::builder::result_type`)
    /// refuses: a bug in the checker, which diagnoses bad operands before it builds (reported
    /// at the expression rather than as a panic or a verifier error later).
    pub const INTERNAL: &str = "E0299";
    /// Code E0290 was "matmul is not supported yet"; matmul is supported and the code retired.
    pub const MATMUL_UNSUPPORTED: &str = "E0290";
    /// Code E0291 was "indexing by a tensor is not supported yet"; gather is supported
    /// (`x[idx]`, `take_along_axis`, `gather`) and the code retired.
    pub const GATHER_UNSUPPORTED: &str = "E0291";
    /// Code E0292 was "`%` on float tensors is not supported yet"; the kernels have an
    /// exact fmod now and the code is retired.
    pub const FLOAT_REM_UNSUPPORTED: &str = "E0292";
    /// An argument's dtype differs from the parameter's.
    pub const DTYPE_MISMATCH: &str = "E0301";
    /// A float dtype was needed (math functions, `mean`, `softmax`).
    pub const FLOAT_REQUIRED: &str = "E0302";
    /// A `bool` was needed (`!`, the condition of `where`).
    pub const BOOL_REQUIRED: &str = "E0303";
    /// Arithmetic on `bool`.
    pub const BOOL_ARITHMETIC: &str = "E0304";
    /// A literal that does not fit the dtype it takes.
    pub const LITERAL_RANGE: &str = "E0305";
    /// Compile-time arithmetic failed (division by zero, overflow).
    pub const CONST_EVAL: &str = "E0306";
    /// The result does not match the declared return type (dtype or shape).
    pub const RETURN_TYPE: &str = "E0307";
    /// A tuple or list where a tensor was needed, or the reverse.
    pub const NOT_A_TENSOR: &str = "E0308";
    /// An index or count that is not an integer.
    pub const INTEGER_REQUIRED: &str = "E0309";
    /// `clamp` with neither a lower nor an upper bound.
    pub const CLAMP_BOUNDS: &str = "E0310";
    /// `gelu`'s `approximate:` is not `true` or `false`.
    pub const GELU_APPROXIMATE: &str = "E0311";
    /// `argmax`, `argmin` or `topk` of a bool tensor (torch defines no order on bool for
    /// them either).
    pub const ORDER_ON_BOOL: &str = "E0320";
    /// A tensor index (`x[idx]`, the indices of `take_along_axis` or `gather`) that is not
    /// an i32 tensor: a float (convert with `i32(idx)`), a bool mask, a literal.
    pub const INDEX_DTYPE: &str = "E0315";
    /// A gradient of or with respect to a value that is not a float tensor (an integer, a
    /// bool, a literal).
    pub const GRAD_NOT_FLOAT: &str = "E0312";
    /// `grad` of a non-scalar result without `grad_output:`, or an upstream gradient whose
    /// type is not the result's.
    pub const GRAD_SEED: &str = "E0412";
    /// Shapes that do not broadcast.
    pub const BROADCAST: &str = "E0401";
    /// A `fn` argument whose shape does not fit the parameter's.
    pub const ARG_SHAPE: &str = "E0402";
    /// An axis out of range for the tensor's rank.
    pub const BAD_AXIS: &str = "E0403";
    /// `split` of an axis not divisible by the number of parts.
    pub const SPLIT_NOT_DIVISIBLE: &str = "E0404";
    /// `concat` operands whose ranks or other dims differ.
    pub const CONCAT_MISMATCH: &str = "E0405";
    /// `reshape` to a different element count, or a malformed shape list.
    pub const RESHAPE: &str = "E0406";
    /// More index items than the tensor has dims.
    pub const TOO_MANY_INDICES: &str = "E0407";
    /// An index out of range or an empty slice.
    pub const INDEX_RANGE: &str = "E0408";
    /// A rank the operation cannot take (`x^T` of a vector, a bad permutation).
    pub const RANK: &str = "E0409";
    /// A dim that is zero or negative, or a tensor too large to address.
    pub const BAD_DIM: &str = "E0410";
    /// `update` rows that do not fit the tensor along the axis, or positions that are not
    /// one i32 per index of its first dim.
    pub const UPDATE_SHAPE: &str = "E0411";
    /// `topk`'s `k` outside `1 ..= ` the length of the axis.
    pub const TOPK_K: &str = "E0430";
    /// `take_along_axis` / `gather` indices whose rank differs from the tensor's, or whose
    /// dims off the axis do not broadcast against it (`take_along_axis`) or exceed it
    /// (`gather`).
    pub const GATHER_SHAPE: &str = "E0425";
    /// Two tensor indices in one `x[...]`, or an integer index beside a tensor index.
    pub const TENSOR_INDEX_MIX: &str = "E0426";
    /// A gather along an axis of 2^31 or more positions (i32 indices cannot reach them).
    pub const GATHER_AXIS: &str = "E0427";
}

/// Deepest chain of nested `fn` calls that is inlined; deeper is a diagnostic (it also
/// bounds the checker's own stack).
pub const MAX_CALL_DEPTH: usize = 64;

/// Largest element count of one tensor: 2^32 - 2 = 4294967294. Kernels index with 32-bit
/// offsets, and `lower` refuses a tensor of `u32::MAX` elements or more (a loop bound of
/// `numel` must itself fit in a `u32`). Refusing here puts the error at the source span, before
/// anything is allocated. Only the values a fused attention kernel computes block by block
/// and never stores — its scores, masked logits and probabilities, and the mask under them
/// ([`crate::attention::in_kernel`]) — may hold more, up to [`MAX_FUSED_NUMEL`].
pub const MAX_NUMEL: u64 = u32::MAX as u64 - 1;

/// Largest element count of a value that no kernel stores or indexes whole (attention's
/// scores, see [`MAX_NUMEL`]): 2^40, so that element and byte counts stay far from `u64`'s
/// range. Causal attention at 40 heads over 16384 positions has 40 · 16384² ≈ 2^33.3.
pub const MAX_FUSED_NUMEL: u64 = 1 << 40;

/// Most graph nodes plus inlined `fn` calls one step may expand to. Every `fn` is inlined
/// at each call, so `fn g(a) { h(a) + h(a) }` nested 40 deep is 2^40 nodes; past this bound
/// the check stops with [`codes::EXPANSION`] naming the chain of calls being inlined. A
/// Qwen3 decoder layer is a few hundred nodes, so 2^21 leaves room for whole models while
/// the check of a step at the limit stays around a second.
pub const MAX_EXPANSION: u64 = 1 << 21;

/// The builtin functions (casts `f32(x)` etc. are separate: dtype keywords).
pub(crate) const BUILTINS: &[&str] = &[
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "silu",
    "erf",
    "gelu",
    "relu",
    "clamp",
    "maximum",
    "minimum",
    "floor",
    "ceil",
    "round",
    "trunc",
    "floor_divide",
    "remainder",
    "fmod",
    "abs",
    "pow",
    "min",
    "max",
    "sum",
    "mean",
    "softmax",
    "argmax",
    "argmin",
    "topk",
    "cumsum",
    "logsumexp",
    "where",
    "iota",
    "causal",
    "concat",
    "split",
    "reshape",
    "transpose",
    "permute",
    "update",
    "take_along_axis",
    "gather",
    "grad",
];

/// The builtin constants, looked up after every other name (a `let`, parameter, `const` or
/// dim of the same name shadows one): `inf`, a weak float (`-inf` is its negation), so a
/// mask reads `where(m, s, -inf)` and the infinity takes the dtype of `s`.
pub(crate) const CONSTANTS: &[(&str, f64)] = &[("inf", f64::INFINITY)];

/// The builtin function names (the casts `bf16 f16 f32 i32 bool` are dtype keywords, not
/// among them), for the front end's porting hints and their test.
pub fn builtin_names() -> &'static [&'static str] {
    BUILTINS
}

/// The step names of `m`, in source order.
pub fn steps(m: &ast::Module) -> Vec<String> {
    m.funcs()
        .filter(|f| f.kind == FuncKind::Step)
        .map(|f| f.name.node.clone())
        .collect()
}

/// Builds the graph IR of step `step` of `m`, with its symbolic dims bound by `dims`
/// (entries that no parameter uses are ignored). Returns every diagnostic found otherwise.
pub fn run(
    m: &ast::Module,
    step: &str,
    dims: &BTreeMap<String, u64>,
) -> Result<Graph, Vec<Diagnostic>> {
    let diags = names::check_module(m, Some(step));
    if !diags.is_empty() {
        return Err(diags);
    }
    let Some(func) = m.funcs().find(|f| f.name.node == step) else {
        // There is no source span to point at (the name comes from the command line), so
        // the hint goes into the message itself.
        let all = steps(m);
        let hint = match suggest(step, all.iter().map(String::as_str)) {
            Some(s) => format!("; did you mean `{s}`?"),
            None if all.is_empty() => "; the file has no steps".to_string(),
            None => format!("; the steps are: {}", all.join(", ")),
        };
        return Err(vec![Diagnostic::error(
            codes::UNKNOWN_STEP,
            format!("no step named `{step}`{hint}"),
        )]);
    };
    if func.kind != FuncKind::Step {
        return Err(vec![Diagnostic::error(
            codes::UNKNOWN_STEP,
            format!("`{step}` is a fn, not a step"),
        )
        .with_label(func.name.span, "declared with `fn`")
        .with_help("only steps are compiled; declare it with `step`")]);
    }
    let mut c = Checker::new(m);
    c.eval_consts();
    let result = c.check_step(func, dims);
    match result {
        Ok(()) if c.diags.is_empty() => {
            let (graph, old) = remove_dead_mapped(&c.graph);
            c.refuse_stored_past_32_bits(&graph, &old);
            if c.diags.is_empty() {
                Ok(graph)
            } else {
                Err(c.diags)
            }
        }
        _ => Err(c.diags),
    }
}

/// A diagnostic was reported (or an operand had failed, and it was reported there).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reported;

/// Checker results: the error is already in [`Checker::diags`].
pub(crate) type R<T> = Result<T, Reported>;

/// What an expression evaluates to.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// A graph value (a typed tensor; shape `[]` for a scalar).
    T(Value),
    /// A weak compile-time scalar.
    Weak(Lit),
    /// `(a, b)`, or the result of `split` or a tuple-returning `fn`.
    Tuple(Vec<Val>),
    /// `[a, b]`: only as the shape of `reshape` or the permutation of `permute`.
    List(Vec<Val>),
}

/// What a symbolic dim is bound to, and by which argument (for messages).
#[derive(Clone, Debug, Default)]
pub(crate) struct Bindings {
    /// Symbol → (size, where it was bound: "`--dim T=4096`" or "argument `x` (bf16[4, 5120])").
    pub(crate) syms: HashMap<String, (u64, String)>,
    /// What `...` stands for in this call, and where it was bound.
    pub(crate) rest: Option<(Vec<u64>, String)>,
}

/// The scope of one function body.
pub(crate) struct Env {
    /// Parameters and `let`s in order; `None` marks a binding whose value failed.
    pub(crate) locals: Vec<(String, Option<Val>)>,
    /// The function's dims, usable as integer constants in expressions.
    pub(crate) dims: Bindings,
}

pub(crate) struct Checker<'m> {
    pub(crate) m: &'m Module,
    pub(crate) graph: Graph,
    pub(crate) diags: Vec<Diagnostic>,
    /// Evaluated `const`s; `None` if its evaluation failed.
    pub(crate) consts: HashMap<String, Option<Lit>>,
    /// `fn`s and `step`s by name (the first of duplicates; those are diagnosed before).
    pub(crate) funcs: HashMap<&'m str, &'m Func>,
    /// The `fn` calls being inlined, outermost first; every diagnostic raised meanwhile
    /// labels them ([`Checker::in_calls`]).
    pub(crate) call_stack: Vec<calls::CallSite>,
    /// Graph nodes pushed plus `fn` calls inlined so far (bounded by [`MAX_EXPANSION`]).
    pub(crate) expansion: u64,
    /// Set once [`MAX_EXPANSION`] is reached and reported: every later push and call fails
    /// silently, so the rest of the call tree is not walked.
    pub(crate) exhausted: bool,
    /// The span of the expression each graph value was built for.
    pub(crate) spans: SecondaryMap<Value, Span>,
    /// The chains of the step's `inout` parameters (module `inplace`).
    pub(crate) inplace: inplace::InPlace,
}

impl<'m> Checker<'m> {
    fn new(m: &'m Module) -> Self {
        let mut funcs = HashMap::new();
        for f in m.funcs() {
            funcs.entry(f.name.node.as_str()).or_insert(f);
        }
        Checker {
            m,
            graph: Graph::default(),
            diags: Vec::new(),
            consts: HashMap::new(),
            funcs,
            call_stack: Vec::new(),
            expansion: 0,
            exhausted: false,
            spans: SecondaryMap::new(),
            inplace: inplace::InPlace::default(),
        }
    }

    /// Records `d`, labelled with the `fn` calls being inlined (if any).
    pub(crate) fn error(&mut self, d: Diagnostic) -> Reported {
        let d = self.in_calls(d);
        self.diags.push(d);
        Reported
    }

    /// Evaluates every `const` in source order. A const sees only the consts before it
    /// (the name pass has already rejected forward references).
    fn eval_consts(&mut self) {
        let env = Env {
            locals: Vec::new(),
            dims: Bindings::default(),
        };
        for c in self.m.consts() {
            let v = match self.eval_expr(&env, c.value) {
                Ok(Val::Weak(l)) => Some(l),
                Ok(other) => {
                    let what = self.describe(&other);
                    self.error(
                        Diagnostic::error(
                            codes::NOT_CONSTANT,
                            format!("const `{}` is not a compile-time scalar", c.name.node),
                        )
                        .with_label(self.m.span(c.value), format!("this is {what}"))
                        .with_note(
                            "a const is arithmetic over literals and earlier consts; \
                             it takes its dtype where it is used",
                        ),
                    );
                    None
                }
                Err(Reported) => None,
            };
            self.consts.insert(c.name.node.clone(), v);
        }
    }

    /// Builds the step: inputs, body, outputs.
    fn check_step(&mut self, func: &'m Func, dims: &BTreeMap<String, u64>) -> R<()> {
        self.graph = Graph::new(func.name.node.clone());
        let bindings = self.step_bindings(func, dims)?;
        let mut env = Env {
            locals: Vec::new(),
            dims: bindings,
        };
        let mut bad = false;
        for (index, p) in func.params.iter().enumerate() {
            let v = self.resolve_type(&p.ty, &env.dims).and_then(|ty| {
                self.addressable(&ty, p.ty.span, Some(&p.name.node))?;
                // An input's type is its declaration.
                self.push(
                    Op::Input {
                        index: index as u32,
                        inout: p.inout.is_some(),
                    },
                    ty,
                    p.ty.span,
                )
            });
            match v {
                Ok(v) => {
                    self.graph.inputs.push((p.name.node.clone(), v));
                    env.locals.push((p.name.node.clone(), Some(Val::T(v))));
                    if p.inout.is_some() {
                        self.inplace.links.insert(
                            v,
                            inplace::Link {
                                param: p.name.node.clone(),
                                updated: None,
                            },
                        );
                        self.inplace.ends.push((p.name.node.clone(), v));
                    }
                }
                Err(Reported) => bad = true,
            }
        }
        if bad {
            return Err(Reported);
        }
        let result = self.eval_block(&mut env, &func.body);
        self.check_reads_before_updates();
        let values = self.conform(result?, func, &env.dims)?;
        // A result that is a chain value an update consumed (`(c, update(c, ...))`) would
        // be read after the update overwrote it.
        let tail = func.body.tail;
        let spans: Vec<tessel_syntax::Span> = match self.m.expr(tail) {
            tessel_syntax::ast::Expr::Tuple(es) if es.len() == values.len() => {
                es.iter().map(|e| self.m.span(*e)).collect()
            }
            _ => vec![self.m.span(tail); values.len()],
        };
        for (&v, &end) in values.iter().zip(&spans) {
            let stale = self.inplace.links.get(&v).cloned();
            if let Some(inplace::Link {
                param,
                updated: Some((_, at)),
            }) = stale
            {
                self.error(
                    Diagnostic::error(
                        codes::STALE_READ,
                        format!("a result is `{param}` as it was before its update, which overwrote it in place"),
                    )
                    .with_label(end, "returned after the update")
                    .with_secondary(at, format!("`{param}` is updated in place here"))
                    .with_note(format!(
                        "`update` writes into `{param}`'s buffer: the value before it no \
                         longer exists (keeping it would need a copy of the tensor)"
                    ))
                    .with_help(format!(
                        "return the value `update` returned (the step returns `{param}`'s final value as `{param}` already), or a copy made before the update"
                    )),
                );
                return Err(Reported);
            }
        }
        let names = output_names(self.m, func, values.len());
        // An `inout` parameter's final value is returned under its own name, after the
        // declared results; a declared result that would be named like one gets a `_`.
        let inout: HashSet<&str> = self.inplace.ends.iter().map(|(n, _)| n.as_str()).collect();
        for (mut name, v) in names.into_iter().zip(values) {
            while inout.contains(name.as_str()) {
                name.push('_');
            }
            self.graph.outputs.push((name, v));
        }
        for (name, end) in &self.inplace.ends {
            self.graph.outputs.push((name.clone(), *end));
        }
        Ok(())
    }

    /// Pushes `op` typed by its rule ([`result_type`]; `given` for the ops that carry their
    /// type: casts, reshapes, broadcasts, slices, constants, iotas, topk), through
    /// [`Checker::push`].
    ///
    /// Errors: what `push` reports, and [`codes::INTERNAL`] at `span` if the rule refuses
    /// the op (the checker's own diagnostics should have refused its operands first).
    pub(crate) fn build(&mut self, op: Op, given: Option<TensorType>, span: Span) -> R<Value> {
        match result_type(&self.graph, &op, given.as_ref()) {
            Ok(ty) => self.push(op, ty, span),
            Err(e) => Err(self.error(
                Diagnostic::error(
                    codes::INTERNAL,
                    format!("internal error: the checker built an ill-typed op ({e})"),
                )
                .with_label(span, "while checking this")
                .with_note("this is a bug in tessel; please report it with the program"),
            )),
        }
    }

    /// Pushes an op after checking that its result is addressable (at most [`MAX_NUMEL`]
    /// elements; `span` is blamed otherwise) and that the step stays within
    /// [`MAX_EXPANSION`].
    pub(crate) fn push(&mut self, op: Op, ty: TensorType, span: Span) -> R<Value> {
        self.expand(span)?;
        self.addressable(&ty, span, None)?;
        let v = self.graph.push(op, ty);
        self.spans[v] = span;
        Ok(v)
    }

    /// Refuses at `span` a step input (`input` names the parameter whose declared type it
    /// is) of more than [`MAX_NUMEL`] elements, or a computed value of more than
    /// [`MAX_FUSED_NUMEL`]. A computed value past [`MAX_NUMEL`] is refused later, once the
    /// whole step is built, unless a fused attention kernel computes it without storing it
    /// ([`Checker::refuse_stored_past_32_bits`]).
    pub(crate) fn addressable(
        &mut self,
        ty: &TensorType,
        span: Span,
        input: Option<&str>,
    ) -> R<()> {
        let numel = ty
            .shape
            .0
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let limit = if input.is_some() {
            MAX_NUMEL
        } else {
            MAX_FUSED_NUMEL
        };
        if numel.is_some_and(|n| n <= limit) {
            return Ok(());
        }
        self.error(Self::too_large(ty, span, input, numel));
        Err(Reported)
    }

    /// Refuses each value of the finished step `g` past [`MAX_NUMEL`] elements that is a
    /// step result or that no fused attention kernel computes
    /// ([`crate::attention::in_kernel`]): a kernel would store it or index it whole with
    /// 32-bit offsets. Blamed, at the span of the expression each was built for (`old`
    /// maps `g`'s values to the checker's): such results where there are any, else the last
    /// value of each chain (`a + b` rather than the broadcasts of `a` and `b` under it).
    fn refuse_stored_past_32_bits(&mut self, g: &Graph, old: &HashMap<Value, Value>) {
        let big = |v: Value| g.ty(v).shape.numel() > MAX_NUMEL;
        if !g.ops.keys().any(big) {
            return;
        }
        let fused = crate::attention::in_kernel(g);
        let refused = |v: Value| big(v) && (g.is_output(v) || !fused.contains(&v));
        let users = crate::analysis::users(g);
        // A stored result is the cause where there is one (returning the scores keeps the
        // attention from fusing, and so refuses everything under it too).
        let results: Vec<Value> = g.ops.keys().filter(|&v| big(v) && g.is_output(v)).collect();
        let blamed: Vec<Value> = if results.is_empty() {
            g.ops
                .keys()
                .filter(|&v| refused(v) && !users[v].iter().any(|&u| refused(u)))
                .collect()
        } else {
            results
        };
        for v in blamed {
            let span = self.spans[old[&v]];
            let ty = g.ty(v).clone();
            let numel = Some(ty.shape.numel());
            let d = Self::too_large(&ty, span, None, numel).with_help(
                "only a fused attention's scores may be larger (its kernel never stores them); \
                 anything else must be split into smaller tensors",
            );
            self.diags.push(d);
        }
    }

    /// The diagnostic for a tensor of `numel` elements (`None`: more than 2^64) past what
    /// its kind may hold, at `span`; `input` names a step parameter whose declared type it is.
    fn too_large(
        ty: &TensorType,
        span: Span,
        input: Option<&str>,
        numel: Option<u64>,
    ) -> Diagnostic {
        let count = match numel {
            Some(n) => format!("{n} elements"),
            None => "more than 2^64 elements".to_string(),
        };
        let what = match input {
            Some(name) => format!("input `{name}`"),
            None => "this value".to_string(),
        };
        Diagnostic::error(
            codes::BAD_DIM,
            format!("{what} is too large: {ty} has {count}"),
        )
        .with_label(span, format!("{ty}: {count}"))
        .with_note(format!(
            "a tensor holds at most 2^32 - 2 = {MAX_NUMEL} elements, because kernels \
             index with 32-bit offsets"
        ))
    }

    /// Counts one graph node or inlined call against [`MAX_EXPANSION`]; the first time the
    /// bound is passed, reports it with the chain of `fn` calls being inlined.
    pub(crate) fn expand(&mut self, span: Span) -> R<()> {
        if self.exhausted {
            return Err(Reported);
        }
        self.expansion += 1;
        if self.expansion <= MAX_EXPANSION {
            return Ok(());
        }
        self.exhausted = true;
        let d = match self.call_stack.first() {
            // `error` adds the chain of calls being inlined.
            Some(calls::CallSite {
                name: outer,
                span: site,
                ..
            }) => Diagnostic::error(
                codes::EXPANSION,
                format!(
                    "inlining `{outer}` expands the step to more than {MAX_EXPANSION} \
                         graph nodes and calls"
                ),
            )
            .with_label(
                *site,
                format!("this call of `{outer}` is too large once inlined"),
            )
            .with_note(
                "every fn is inlined at each of its calls, so a fn that calls another \
                 twice doubles the size at each level",
            )
            .with_help(
                "where a fn calls another twice with the same arguments, bind the result \
                 once with `let` and use the name twice",
            ),
            None => Diagnostic::error(
                codes::EXPANSION,
                format!("the step expands to more than {MAX_EXPANSION} graph nodes"),
            )
            .with_label(span, "the limit is reached here"),
        };
        Err(self.error(d))
    }

    /// "a tensor f32[4, 128]", "a tuple of 2", ... for messages.
    pub(crate) fn describe(&self, v: &Val) -> String {
        match v {
            Val::T(v) => format!("a tensor {}", self.graph.ty(*v)),
            Val::Weak(l @ Lit::Int(_)) => format!("an {}", l.describe()),
            Val::Weak(l) => format!("a {}", l.describe()),
            Val::Tuple(vs) => format!("a tuple of {}", vs.len()),
            Val::List(vs) => format!("a list of {}", vs.len()),
        }
    }
}

/// The IR dtype of a source dtype.
pub(crate) fn dtype(d: ast::DType) -> DType {
    match d {
        ast::DType::Bf16 => DType::Bf16,
        ast::DType::F16 => DType::F16,
        ast::DType::F32 => DType::F32,
        ast::DType::I32 => DType::I32,
        ast::DType::Bool => DType::Bool,
    }
}

/// 0 bool, 1 i32, 2 floats: the promotion categories.
pub(crate) fn dtype_rank(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I32 => 1,
        DType::Bf16 | DType::F16 | DType::F32 => 2,
    }
}

/// A copy of `g` without values that no output needs (inputs always stay); also the
/// `grad` pass's last step.
pub(crate) fn remove_dead(g: &Graph) -> Graph {
    remove_dead_mapped(g).0
}

/// [`remove_dead`], with the value of `g` each value of the copy was.
fn remove_dead_mapped(g: &Graph) -> (Graph, HashMap<Value, Value>) {
    let mut live: HashSet<Value> = g.outputs.iter().map(|(_, v)| *v).collect();
    let ops: Vec<(Value, &Op)> = g.ops.iter().collect();
    // A live row statistic keeps its attention live: the attention's kernel forms it.
    let mut stats_of: HashSet<Value> = HashSet::new();
    for (v, op) in ops.iter().rev() {
        let needed = match op {
            Op::Attention { logits, .. } => stats_of.contains(logits),
            _ => false,
        };
        if live.contains(v) || needed || matches!(op, Op::Input { .. }) {
            live.insert(*v);
            live.extend(op.args());
            if let Op::AttentionStat { logits, .. } = op {
                stats_of.insert(*logits);
            }
        }
    }
    let mut out = Graph::new(g.name.clone());
    let mut map: HashMap<Value, Value> = HashMap::new();
    for (v, op) in ops {
        if !live.contains(&v) {
            continue;
        }
        let mut new_op = op.clone();
        for a in new_op.args_mut() {
            *a = map.get(a).copied().unwrap_or(*a);
        }
        let nv = out.push(new_op, g.ty(v).clone());
        map.insert(v, nv);
    }
    let f = |a: &Value| map.get(a).copied().unwrap_or(*a);
    out.inputs = g.inputs.iter().map(|(n, v)| (n.clone(), f(v))).collect();
    out.outputs = g.outputs.iter().map(|(n, v)| (n.clone(), f(v))).collect();
    let old = map.into_iter().map(|(o, n)| (n, o)).collect();
    (out, old)
}
