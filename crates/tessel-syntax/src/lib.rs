//! tessel-syntax: the front end of the pipeline, `source.tsl --parse--> AST`.
//!
//! - [`lexer`]: logos tokens with byte spans; lexical errors as diagnostics.
//! - `grammar.lalrpop`: the LR grammar, whose actions build the AST directly.
//! - [`ast`]: items and signatures as structs, expressions in one
//!   `PrimaryMap<ExprId, Expr>` arena with spans in a side table.
//! - [`printer`]: `Display` for [`ast::Module`], printing canonical source back.
//! - [`diagnostic`]: the [`Diagnostic`] type every front-end stage (this crate,
//!   and the name / dtype / shape checks later) reports with, rendered by ariadne.
//!
//! Entry point: [`parse`]. Nothing here type-checks or resolves names; builtins
//! are plain identifiers. The language is described in `docs/language.md`.

pub mod ast;
pub mod diagnostic;
pub mod lexer;
mod parser;
pub mod printer;
pub mod span;

pub use diagnostic::{Diagnostic, Label, Severity};
pub use parser::{describe_expected, parse};
pub use span::{Span, Spanned};
