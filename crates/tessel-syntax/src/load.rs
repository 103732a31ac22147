//! Loading a program: a file and every file it imports, transitively, into one
//! [`SourceMap`] and one [`Module`].
//!
//! `import "path.tsl";` names a file relative to the importing file's directory (an
//! absolute path is taken as it is). Each file is read once, however many files import it
//! (files are told apart by their canonical path), and gets the next range of global
//! offsets, so every span of every file is distinct and a diagnostic renders against the
//! file it lies in ([`SourceMap::render`]).
//!
//! The module holds, in one expression arena, the `fn`s and `const`s of every imported file
//! (a file's dependencies before it: a `const` may use the consts of the files it imports),
//! then every item of the first file. An imported file's `step`s are its own entry points:
//! they are not in the module. Names are not resolved here: the check pass sees one
//! namespace, so a name defined in two files is its duplicate-definition error, with both
//! spans.
//!
//! Errors, all collected: every syntax error of every file read (the imports of a file that
//! does not parse are not followed), a file that cannot be read (E0120, at the import, with
//! the resolved path), and an import cycle (E0121, naming the chain of files).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use crate::ast::{FuncKind, Item, Module};
use crate::diagnostic::codes;
use crate::{parse_items, Diagnostic, SourceMap, Span};

/// A program loaded from its files.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Every file read: the first file at index 0 and offset 0, then the imports in the
    /// order they were first met.
    pub sources: SourceMap,
    /// The imported files' `fn`s and `const`s, dependencies first, then all of the first
    /// file's items (its `import`s and `step`s included).
    pub module: Module,
}

impl Loaded {
    /// The first file's items alone, with the shared arena: what `tessel build --emit ast`
    /// prints.
    pub fn root_module(&self) -> Module {
        root_module(&self.module, &self.sources)
    }
}

/// The items of `module` that lie in the first file of `sources`, with the whole arena.
pub fn root_module(module: &Module, sources: &SourceMap) -> Module {
    let end = sources.files().first().map_or(0, |f| f.end());
    let mut m = module.clone();
    m.items.retain(|i| i.span().start <= end);
    m
}

/// Why a program could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The first file itself cannot be read.
    Read {
        /// The path as given.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// Syntax and import errors in any of the files; render them with `sources`.
    Diagnostics {
        /// Every file read.
        sources: SourceMap,
        /// The errors, in the order found.
        diagnostics: Vec<Diagnostic>,
    },
}

/// Reads `path` and every file it imports; see the module docs.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    let read = |error| LoadError::Read {
        path: path.to_path_buf(),
        error,
    };
    let text = std::fs::read_to_string(path).map_err(read)?;
    let canonical = std::fs::canonicalize(path).map_err(read)?;
    let mut l = Loader::default();
    l.sources.add(path.display().to_string(), path, text);
    l.seen.insert(canonical, 0);
    l.items.push(Vec::new());
    l.visit(0);
    if !l.diags.is_empty() {
        return Err(LoadError::Diagnostics {
            sources: l.sources,
            diagnostics: l.diags,
        });
    }
    let mut module = l.module;
    for &f in &l.order {
        let items = std::mem::take(&mut l.items[f]);
        if f == 0 {
            module.items.extend(items);
        } else {
            module.items.extend(items.into_iter().filter(|i| match i {
                Item::Const(_) => true,
                Item::Func(func) => func.kind == FuncKind::Fn,
                Item::Import(_) => false,
            }));
        }
    }
    Ok(Loaded {
        sources: l.sources,
        module,
    })
}

#[derive(Default)]
struct Loader {
    sources: SourceMap,
    module: Module,
    /// Canonical path → file index, for every file read.
    seen: HashMap<PathBuf, usize>,
    /// Each file's items, once parsed (taken when the module is assembled).
    items: Vec<Vec<Item>>,
    /// Whether each file's imports have all been loaded.
    done: Vec<bool>,
    /// The files whose imports are being loaded, outermost first, each with the import it
    /// is following: the chain a cycle is reported with.
    stack: Vec<(usize, Span)>,
    /// Files in the order their imports were finished: dependencies before dependents.
    order: Vec<usize>,
    diags: Vec<Diagnostic>,
}

impl Loader {
    /// Parses file `file` and loads its imports, depth first.
    fn visit(&mut self, file: usize) {
        self.done.resize(self.sources.files().len(), false);
        let f = self.sources.file(file);
        let items = match parse_items(&f.text, f.base, &mut self.module) {
            Ok(items) => items,
            Err(d) => {
                self.diags.extend(d);
                self.done[file] = true;
                return;
            }
        };
        let imports: Vec<(String, Span, Span)> = items
            .iter()
            .filter_map(|i| match i {
                Item::Import(im) => Some((im.path.node.clone(), im.path.span, im.span)),
                _ => None,
            })
            .collect();
        self.items[file] = items;
        self.stack.push((file, Span::default()));
        for (written, path_span, span) in imports {
            if let Some(top) = self.stack.last_mut() {
                top.1 = span;
            }
            self.import(file, &written, path_span);
        }
        self.stack.pop();
        self.done[file] = true;
        self.order.push(file);
    }

    /// Follows `import "written";` of file `from`, whose path string is at `path_span`.
    fn import(&mut self, from: usize, written: &str, path_span: Span) {
        let importer = self.sources.file(from);
        let dir = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
        let path = dir(&importer.path).join(written);
        let name = normalize(&dir(Path::new(&importer.name)).join(written));
        let unreadable = |e: std::io::Error| {
            Diagnostic::error(
                codes::IMPORT_UNREADABLE,
                format!("cannot read `{written}`: {e}"),
            )
            .with_label(path_span, format!("resolved to {name}"))
            .with_note("an import's path is relative to the directory of the file that imports it")
        };
        let canonical = match std::fs::canonicalize(&path) {
            Ok(c) => c,
            Err(e) => return self.diags.push(unreadable(e)),
        };
        if let Some(&seen) = self.seen.get(&canonical) {
            if !self.done[seen] {
                let d = self.cycle(seen, path_span);
                self.diags.push(d);
            }
            return;
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => return self.diags.push(unreadable(e)),
        };
        let index = self.sources.add(name, &path, text);
        self.seen.insert(canonical, index);
        self.items.push(Vec::new());
        self.visit(index);
    }

    /// The error for an import, at `path_span` in the file on top of the stack, of file
    /// `target`, which is still loading its own imports (so is on the stack).
    fn cycle(&self, target: usize, path_span: Span) -> Diagnostic {
        let at = self
            .stack
            .iter()
            .position(|(f, _)| *f == target)
            .unwrap_or(0);
        let chain = &self.stack[at..];
        let name = |f: usize| self.sources.file(f).name.as_str();
        let mut names: Vec<&str> = chain.iter().map(|(f, _)| name(*f)).collect();
        names.push(name(target));
        let (message, label) = if chain.len() == 1 {
            (
                format!("`{}` imports itself", name(target)),
                "a file cannot import itself".to_string(),
            )
        } else {
            (
                format!("import cycle: {}", names.join(" → ")),
                format!(
                    "imports `{}`, which is still loading its imports",
                    name(target)
                ),
            )
        };
        let mut d = Diagnostic::error(codes::IMPORT_CYCLE, message).with_label(path_span, label);
        for (i, (f, span)) in chain.iter().enumerate().take(chain.len() - 1) {
            let next = chain[i + 1].0;
            d = d.with_secondary(
                *span,
                format!("`{}` imports `{}` here", name(*f), name(next)),
            );
        }
        d.with_help(
            "imports must not form a cycle: move what the files share into a file that each \
             imports",
        )
    }
}

/// `path` with `.` removed and `dir/..` folded, without touching the file system: the name an
/// imported file is shown by.
fn normalize(path: &Path) -> String {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            _ => out.push(c),
        }
    }
    out.iter().collect::<PathBuf>().display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalized_lexically() {
        let n = |p: &str| normalize(Path::new(p));
        assert_eq!(n("lib.tsl"), "lib.tsl");
        assert_eq!(n("./a/./lib.tsl"), "a/lib.tsl");
        assert_eq!(n("a/b/../../c/lib.tsl"), "c/lib.tsl");
        assert_eq!(n("../../x.tsl"), "../../x.tsl");
        assert_eq!(n("/a/../x.tsl"), "/x.tsl");
    }
}
