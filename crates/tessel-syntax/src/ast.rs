//! The AST: what the parser produces and the checker (in `tessel-passes`)
//! consumes.
//!
//! Data model: items, signatures and statements are ordinary owned structs;
//! every expression lives in one arena per module, [`Module::exprs`]
//! (a `PrimaryMap<ExprId, Expr>`), and refers to its operands by [`ExprId`].
//! The span of each expression is a fact kept beside the arena in
//! [`Module::expr_spans`]; every other node carries a `span` field (or is a
//! [`Spanned`]). The grammar's actions allocate straight into the arena, so a
//! deeply nested expression is never a deep tree of boxes (no recursive drop,
//! no recursion in the parser).
//!
//! Syntax sugar is not kept: `(e)` is just `e` (its span is the inner one),
//! and `:` in an index is a [`IndexKind::Slice`] with no bounds. The printer
//! in [`crate::printer`] writes the canonical form back.

use std::fmt;

use cranelift_entity::{entity_impl, PrimaryMap, SecondaryMap};

pub use crate::span::{Span, Spanned};

/// An expression in [`Module::exprs`]. Made only by the parser's builder, in
/// the order the parser reduces them (operands before the expression using them).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(u32);
entity_impl!(ExprId, "e");

/// A name as written, with its span.
pub type Ident = Spanned<String>;

/// Element types. `bool` is the result of comparisons and the mask type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// bfloat16.
    Bf16,
    /// IEEE binary16.
    F16,
    /// IEEE binary32.
    F32,
    /// 32-bit signed integer.
    I32,
    /// Boolean.
    Bool,
}

impl DType {
    /// The keyword spelling (`bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One parsed source file.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// Items in source order.
    pub items: Vec<Item>,
    /// Every expression of every item.
    pub exprs: PrimaryMap<ExprId, Expr>,
    /// Source span of each expression in [`Module::exprs`] (total: every id has one).
    pub expr_spans: SecondaryMap<ExprId, Span>,
}

impl Module {
    /// The expression `id`.
    pub fn expr(&self, id: ExprId) -> &Expr {
        &self.exprs[id]
    }

    /// The source span of expression `id`.
    pub fn span(&self, id: ExprId) -> Span {
        self.expr_spans[id]
    }

    /// The `fn`s and `step`s, in source order.
    pub fn funcs(&self) -> impl Iterator<Item = &Func> {
        self.items.iter().filter_map(|i| match i {
            Item::Func(f) => Some(f),
            _ => None,
        })
    }

    /// The `const`s, in source order.
    pub fn consts(&self) -> impl Iterator<Item = &Const> {
        self.items.iter().filter_map(|i| match i {
            Item::Const(c) => Some(c),
            _ => None,
        })
    }

    /// The `import`s, in source order.
    pub fn imports(&self) -> impl Iterator<Item = &Import> {
        self.items.iter().filter_map(|i| match i {
            Item::Import(im) => Some(im),
            _ => None,
        })
    }
}

/// A top-level item.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `const NAME = expr;`
    Const(Const),
    /// `fn ...` or `step ...`
    Func(Func),
    /// `import "path.tsl";`
    Import(Import),
}

impl Item {
    /// The item's span, from its keyword to its end.
    pub fn span(&self) -> Span {
        match self {
            Item::Const(c) => c.span,
            Item::Func(f) => f.span,
            Item::Import(i) => i.span,
        }
    }
}

/// `import "path.tsl";` — brings the `fn`s and `const`s of another file (not its `step`s)
/// into this one. The parser keeps the path as written; [`crate::load`] resolves it against
/// the importing file's directory and reads the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    /// The path between the quotes; the span covers the quotes.
    pub path: Spanned<String>,
    /// `import` through `;`.
    pub span: Span,
}

/// `const NAME = expr;` — a scalar constant; `expr` may name earlier consts.
#[derive(Clone, Debug, PartialEq)]
pub struct Const {
    /// The constant's name.
    pub name: Ident,
    /// Its value.
    pub value: ExprId,
    /// `const` through `;`.
    pub span: Span,
}

/// Whether a function is a helper or an entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FuncKind {
    /// `fn`: inlined at each call; symbolic dims unified per call; may use `...` dims.
    Fn,
    /// `step`: compiled and run; symbolic dims bound by `--dim NAME=VALUE`.
    Step,
}

impl FuncKind {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            FuncKind::Fn => "fn",
            FuncKind::Step => "step",
        }
    }
}

/// `fn name(params) -> ret { body }` or the same with `step`.
#[derive(Clone, Debug, PartialEq)]
pub struct Func {
    /// `fn` or `step`.
    pub kind: FuncKind,
    /// The function's name.
    pub name: Ident,
    /// Parameters in order.
    pub params: Vec<Param>,
    /// The declared result type(s).
    pub ret: RetType,
    /// The body.
    pub body: Block,
    /// Keyword through closing `}`.
    pub span: Span,
}

/// `name: Type`, or for a step `name: inout Type` (updated in place) and/or
/// `name: Type from "tensor.name"`.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// The parameter's name.
    pub name: Ident,
    /// The `inout` keyword, when the step updates this parameter in place: its buffer is
    /// both an input and, under the parameter's name, an output of the step, and `update`
    /// writes into it without a copy. The parser rejects it on a `fn` parameter (E0116).
    pub inout: Option<Span>,
    /// Its declared type.
    pub ty: Type,
    /// Where a step parameter's data is in a checkpoint (`from "..."`); `None` for a plain
    /// parameter. The parser rejects it on a `fn` parameter (E0114).
    pub from: Option<TensorName>,
    /// Name through type (through the tensor name when there is one).
    pub span: Span,
}

/// A tensor-name template, `"model.layers.{layer}.self_attn.q_proj.weight"`: the name of a
/// tensor in a checkpoint, where `{layer}` stands for the layer number given on the command
/// line (`--layer N`). `{layer}` is the only placeholder; the parser rejects any other `{`
/// or `}` and an empty name (E0115).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorName {
    /// The template between the quotes.
    pub template: String,
    /// The string literal, quotes included.
    pub span: Span,
}

impl TensorName {
    /// The one placeholder a template may hold.
    pub const LAYER: &'static str = "{layer}";

    /// Whether the template holds `{layer}`.
    pub fn uses_layer(&self) -> bool {
        self.template.contains(Self::LAYER)
    }

    /// The tensor's name with `{layer}` replaced by `layer`; `None` when the template holds
    /// `{layer}` and no layer is given.
    pub fn resolve(&self, layer: Option<u64>) -> Option<String> {
        match layer {
            Some(n) => Some(self.template.replace(Self::LAYER, &n.to_string())),
            None if self.uses_layer() => None,
            None => Some(self.template.clone()),
        }
    }

    /// The byte ranges, within the template, of every `{` or `}` that is not part of a
    /// `{layer}`: an unknown `{name}` through its `}`, a `{` never closed through the end,
    /// a lone `{` or `}`. Empty for a valid template.
    pub fn bad_braces(template: &str) -> Vec<std::ops::Range<usize>> {
        let mut bad = Vec::new();
        let mut i = 0;
        while let Some(off) = template[i..].find(['{', '}']) {
            let at = i + off;
            if template[at..].starts_with(Self::LAYER) {
                i = at + Self::LAYER.len();
            } else if template.as_bytes()[at] == b'{' {
                // Through the matching `}`; a `{` opened again first is a lone `{`.
                let end = match template[at + 1..].find(['{', '}']).map(|j| at + 1 + j) {
                    Some(j) if template.as_bytes()[j] == b'}' => j + 1,
                    Some(_) => at + 1,
                    None => template.len(),
                };
                bad.push(at..end);
                i = end;
            } else {
                bad.push(at..at + 1);
                i = at + 1;
            }
        }
        bad
    }
}

/// A declared result type: one type, or a tuple `(A, B, ...)` of one or more.
#[derive(Clone, Debug, PartialEq)]
pub enum RetType {
    /// `-> bf16[T, D]`
    Single(Type),
    /// `-> (bf16[T, D], f32[T])`; a one-element tuple is written `(A,)`.
    Tuple(Vec<Type>, Span),
}

impl RetType {
    /// The result types in order (one for [`RetType::Single`]).
    pub fn types(&self) -> &[Type] {
        match self {
            RetType::Single(t) => std::slice::from_ref(t),
            RetType::Tuple(ts, _) => ts,
        }
    }

    /// The whole return type's span.
    pub fn span(&self) -> Span {
        match self {
            RetType::Single(t) => t.span,
            RetType::Tuple(_, s) => *s,
        }
    }
}

/// A tensor type `dtype[d0, d1, ...]`, or a scalar `dtype` (no dims).
#[derive(Clone, Debug, PartialEq)]
pub struct Type {
    /// Element type.
    pub dtype: Spanned<DType>,
    /// Dims, outermost first; empty for a scalar. The grammar requires at
    /// least one dim inside brackets (`f32[]` is an error).
    pub dims: Vec<Dim>,
    /// Whole type.
    pub span: Span,
}

/// One dim of a [`Type`].
#[derive(Clone, Debug, PartialEq)]
pub struct Dim {
    /// What the dim is.
    pub kind: DimKind,
    /// Where it was written.
    pub span: Span,
}

/// A dim: a size, a symbol, or the rank-polymorphic rest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DimKind {
    /// A literal size, e.g. `5120`.
    Fixed(i64),
    /// A symbolic size, e.g. `T`: bound by `--dim T=...` for steps, unified per
    /// call for fns.
    Symbol(String),
    /// `...`: any number of leading dims. The parser accepts it only as the
    /// first dim of a `fn`'s parameter or return type.
    Rest,
}

/// `{ stmts; tail }`
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// `let` statements in order.
    pub stmts: Vec<Stmt>,
    /// The result expression (a tuple expression for several outputs).
    pub tail: ExprId,
    /// `{` through `}`.
    pub span: Span,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `let pat = value;`
    Let {
        /// What is bound.
        pat: LetPat,
        /// The bound expression.
        value: ExprId,
        /// `let` through `;`.
        span: Span,
    },
}

/// The left side of a `let`.
#[derive(Clone, Debug, PartialEq)]
pub enum LetPat {
    /// `let x = ...`
    Name(Ident),
    /// `let (a, b) = ...` (one or more names; one is written `(a,)`).
    Tuple(Vec<Ident>, Span),
}

impl LetPat {
    /// The bound names in order.
    pub fn names(&self) -> &[Ident] {
        match self {
            LetPat::Name(n) => std::slice::from_ref(n),
            LetPat::Tuple(ns, _) => ns,
        }
    }
}

/// Prefix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `!x` (logical not)
    Not,
}

impl UnaryOp {
    /// The operator's spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            UnaryOp::Neg => "-",
            UnaryOp::Not => "!",
        }
    }
}

/// Infix operators. See [`BinaryOp::precedence`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*` (elementwise)
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `@` (matmul over the last two axes, batch dims broadcast)
    MatMul,
}

impl BinaryOp {
    /// The operator's spelling.
    pub fn symbol(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Eq => "==",
            Ne => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Rem => "%",
            MatMul => "@",
        }
    }

    /// Binding strength: 1 comparisons (non-associative), 2 `+ -`, 3 `* / % @`
    /// (left-associative). Unary operators are 4, postfix 5.
    pub fn precedence(self) -> u8 {
        use BinaryOp::*;
        match self {
            Eq | Ne | Lt | Le | Gt | Ge => 1,
            Add | Sub => 2,
            Mul | Div | Rem | MatMul => 3,
        }
    }
}

/// An expression; operands are [`ExprId`]s into [`Module::exprs`].
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An integer literal (non-negative; `-1` is `Neg` of `1`).
    Int(i64),
    /// A float literal (finite, non-negative).
    Float(f64),
    /// `true` / `false`.
    Bool(bool),
    /// A name: a local, a parameter or a const.
    Name(String),
    /// `-x`, `!x`.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        operand: ExprId,
    },
    /// `lhs op rhs`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        lhs: ExprId,
        /// Right operand.
        rhs: ExprId,
    },
    /// `f(args, name: value)` or a cast `f32(x)`.
    Call(Call),
    /// `base[items]`.
    Index {
        /// The indexed tensor.
        base: ExprId,
        /// One item per written position (at least one).
        items: Vec<IndexItem>,
    },
    /// `x^T`: swap the last two axes.
    Transpose(ExprId),
    /// `(a, b, ...)` (one element is written `(a,)`).
    Tuple(Vec<ExprId>),
    /// `[a, b, ...]`, e.g. a shape for `reshape` (may be empty).
    List(Vec<ExprId>),
}

/// A call. Builtins are resolved by name later; the parser knows none.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// What is called.
    pub callee: Callee,
    /// Positional arguments.
    pub args: Vec<ExprId>,
    /// Named arguments, after all positional ones, names distinct.
    pub named: Vec<NamedArg>,
}

/// The called thing: a function name, or a dtype used as a cast.
#[derive(Clone, Debug, PartialEq)]
pub enum Callee {
    /// `mean(...)`, `rms_norm(...)`.
    Name(Ident),
    /// `f32(x)`: convert to that dtype.
    Cast(Spanned<DType>),
}

/// `name: value` in a call.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedArg {
    /// The argument name.
    pub name: Ident,
    /// Its value.
    pub value: ExprId,
    /// Name through value.
    pub span: Span,
}

/// One position of an index expression.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexItem {
    /// What it selects.
    pub kind: IndexKind,
    /// Where it was written.
    pub span: Span,
}

/// What one index position selects.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexKind {
    /// `a:b`, `a:`, `:b`, or `:` (both bounds `None`: the full axis).
    Slice {
        /// Inclusive start; `None` is 0.
        start: Option<ExprId>,
        /// Exclusive end; `None` is the axis length.
        end: Option<ExprId>,
    },
    /// `None`: insert an axis of size 1.
    NewAxis,
    /// `...`: as many full axes as needed (at most one per index).
    Ellipsis,
    /// An integer (drops the axis) or an index tensor (gather).
    Expr(ExprId),
}
