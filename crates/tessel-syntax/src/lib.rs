//! tessel-syntax: the front end of the pipeline, `source.tsl --parse--> AST`.
//!
//! - [`lexer`]: logos tokens with byte spans; lexical errors as diagnostics.
//! - `grammar.lalrpop`: the LR grammar, whose actions build the AST directly.
//! - [`ast`]: items and signatures as structs, expressions in one
//!   `PrimaryMap<ExprId, Expr>` arena with spans in a side table.
//! - [`printer`]: `Display` for [`ast::Module`], printing canonical source back.
//! - [`diagnostic`]: the [`Diagnostic`] type every front-end stage (this crate,
//!   and the name / dtype / shape checks later) reports with, rendered by ariadne.
//! - [`source_map`]: the files of a program in one space of byte offsets, so a
//!   [`Span`] says which file it is in; diagnostics render against that file.
//! - [`load`]: a file and the files it imports (`import "lib.tsl";`), read and
//!   parsed into one [`source_map::SourceMap`] and one [`ast::Module`].
//!
//! - [`porting`]: the PyTorch spellings tessel answers with its own (`x.view(4, 4)` is
//!   `reshape(x, [4, 4])`), for the diagnostics.
//!
//! Entry points: [`load()`] for a program on disk, [`parse`] for one text.
//! Nothing here type-checks or resolves names; builtins are plain identifiers.
//! The language is described in `docs/language.md`.

pub mod ast;
pub mod diagnostic;
pub mod lexer;
pub mod load;
mod parser;
pub mod porting;
pub mod printer;
pub mod source_map;
pub mod span;

pub use diagnostic::{Diagnostic, Label, Severity};
pub use load::{load, LoadError, Loaded};
pub use parser::{describe_expected, parse, parse_items};
pub use source_map::{SourceFile, SourceMap};
pub use span::{Span, Spanned};
