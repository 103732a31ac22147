//! The name pass: duplicate items and parameters, `fn`s that shadow builtins, unknown names
//! and functions, calls to steps, and consts that name later consts. It runs before a step
//! is built, over every item of the module (duplicates, shadowed builtins), every `const`
//! (module-level code, as Python runs it on import), and the bodies of the step being built
//! and the `fn`s it calls, directly or not: an error in another step or in a `fn` no
//! checked step calls is that step's, reported when it is built (as PyTorch raises a
//! `NameError` only when the function runs, and `cargo build --bin a` leaves `b` alone).

use std::collections::{HashMap, HashSet};

use tessel_syntax::ast::{
    Callee, DimKind, Expr, ExprId, Func, FuncKind, IndexKind, Item, Module, Stmt,
};
use tessel_syntax::{Diagnostic, Span};

use super::{codes, BUILTINS, CONSTANTS};

/// Every name error of `m` that building step `step` meets (every body's when `step` is
/// `None` or names no step).
pub(super) fn check_module(m: &Module, step: Option<&str>) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut items: HashMap<&str, Span> = HashMap::new();
    for item in &m.items {
        let (name, what) = match item {
            Item::Const(c) => (&c.name, "const"),
            Item::Func(f) => (&f.name, f.kind.keyword()),
            // The loader has followed it: the imported items are in `m.items`.
            Item::Import(_) => continue,
        };
        if let Some(first) = items.get(name.node.as_str()) {
            diags.push(
                Diagnostic::error(
                    codes::DUPLICATE_ITEM,
                    format!("`{}` is defined twice", name.node),
                )
                .with_label(name.span, format!("this {what} redefines `{}`", name.node))
                .with_secondary(*first, "first defined here"),
            );
        } else {
            items.insert(&name.node, name.span);
        }
        if let Item::Func(f) = item {
            if BUILTINS.contains(&f.name.node.as_str()) {
                diags.push(
                    Diagnostic::error(
                        codes::SHADOWS_BUILTIN,
                        format!("`{}` is a builtin function", f.name.node),
                    )
                    .with_label(f.name.span, "a fn or step may not take a builtin's name")
                    .with_help("rename it"),
                );
            }
        }
    }

    let fns: HashMap<&str, &Func> = m.funcs().map(|f| (f.name.node.as_str(), f)).collect();
    let all_consts: HashSet<&str> = m.consts().map(|c| c.name.node.as_str()).collect();

    // Consts see the consts before them.
    let mut earlier: Vec<&str> = Vec::new();
    for c in m.consts() {
        let scope = Scope {
            locals: &[],
            values: &earlier,
        };
        walk(m, c.value, &scope, &fns, &mut diags, |name, span, diags| {
            if all_consts.contains(name) {
                diags.push(
                    Diagnostic::error(
                        codes::CONST_FORWARD_REF,
                        format!(
                            "const `{}` uses `{name}`, which is defined after it",
                            c.name.node
                        ),
                    )
                    .with_label(span, format!("`{name}` is not defined yet"))
                    .with_secondary(c.name.span, "in this const")
                    .with_help(format!("move `const {name}` above `const {}`", c.name.node)),
                );
                true
            } else {
                false
            }
        });
        earlier.push(&c.name.node);
    }

    let consts: Vec<&str> = all_consts.iter().copied().collect();
    let used = step.and_then(|s| reachable(m, &fns, s));
    for f in m.funcs() {
        if used
            .as_ref()
            .is_none_or(|u| u.contains(f.name.node.as_str()))
        {
            check_func(m, f, &fns, &consts, &mut diags);
        }
    }
    diags
}

/// The names of step `step` and of every `fn` it calls, directly or through other fns;
/// `None` when `m` has no step of that name.
fn reachable<'m>(
    m: &'m Module,
    fns: &HashMap<&str, &'m Func>,
    step: &str,
) -> Option<HashSet<&'m str>> {
    let root = m
        .funcs()
        .find(|f| f.kind == FuncKind::Step && f.name.node == step)?;
    let mut seen: HashSet<&str> = HashSet::from([root.name.node.as_str()]);
    let mut todo = vec![root];
    while let Some(f) = todo.pop() {
        let mut stack: Vec<ExprId> = f
            .body
            .stmts
            .iter()
            .map(|Stmt::Let { value, .. }| *value)
            .collect();
        stack.push(f.body.tail);
        while let Some(id) = stack.pop() {
            let e = m.expr(id);
            if let Expr::Call(c) = e {
                let mut callees: Vec<&str> = Vec::new();
                if let Callee::Name(n) = &c.callee {
                    callees.push(n.node.as_str());
                }
                // The fn `grad` differentiates is inlined like a call.
                if super::grad::is_grad(c) {
                    if let Some(Expr::Name(n)) = c.args.first().map(|a| m.expr(*a)) {
                        callees.push(n.as_str());
                    }
                }
                for n in callees {
                    if let Some(g) = fns.get(n) {
                        if seen.insert(g.name.node.as_str()) {
                            todo.push(g);
                        }
                    }
                }
            }
            stack.extend(children(e));
        }
    }
    Some(seen)
}

fn check_func(
    m: &Module,
    f: &Func,
    fns: &HashMap<&str, &Func>,
    consts: &[&str],
    diags: &mut Vec<Diagnostic>,
) {
    let mut locals: Vec<&str> = Vec::new();
    let mut seen: HashMap<&str, Span> = HashMap::new();
    for p in &f.params {
        if let Some(first) = seen.get(p.name.node.as_str()) {
            diags.push(
                Diagnostic::error(
                    codes::DUPLICATE_PARAM,
                    format!("parameter `{}` is declared twice", p.name.node),
                )
                .with_label(p.name.span, "declared again here")
                .with_secondary(*first, "first declared here"),
            );
        } else {
            seen.insert(&p.name.node, p.name.span);
        }
        locals.push(&p.name.node);
    }
    // The signature's dims are integer constants in the body; consts come after locals.
    let mut values: Vec<&str> = consts.to_vec();
    for ty in f.params.iter().map(|p| &p.ty).chain(f.ret.types()) {
        for d in &ty.dims {
            if let DimKind::Symbol(s) = &d.kind {
                values.push(s);
            }
        }
    }
    for Stmt::Let { pat, value, .. } in &f.body.stmts {
        let scope = Scope {
            locals: &locals,
            values: &values,
        };
        walk(m, *value, &scope, fns, diags, |_, _, _| false);
        locals.extend(pat.names().iter().map(|n| n.node.as_str()));
    }
    let scope = Scope {
        locals: &locals,
        values: &values,
    };
    walk(m, f.body.tail, &scope, fns, diags, |_, _, _| false);
}

struct Scope<'a> {
    locals: &'a [&'a str],
    values: &'a [&'a str],
}

/// Checks every name and callee in the expression tree `root` (iteratively: the tree may
/// be deep). `special` may claim an unknown name and report it itself.
fn walk(
    m: &Module,
    root: ExprId,
    scope: &Scope,
    fns: &HashMap<&str, &Func>,
    diags: &mut Vec<Diagnostic>,
    mut special: impl FnMut(&str, Span, &mut Vec<Diagnostic>) -> bool,
) {
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        let span = m.span(id);
        match m.expr(id) {
            Expr::Name(n) => {
                let constant = CONSTANTS.iter().any(|(c, _)| c == n);
                let known = scope.locals.contains(&n.as_str())
                    || scope.values.contains(&n.as_str())
                    || constant;
                if !known && !special(n, span, diags) {
                    let mut d =
                        Diagnostic::error(codes::UNKNOWN_NAME, format!("unknown name `{n}`"))
                            .with_label(span, "not found in this scope");
                    let candidates = scope
                        .locals
                        .iter()
                        .chain(scope.values.iter())
                        .copied()
                        .chain(CONSTANTS.iter().map(|(c, _)| *c));
                    if let Some(s) = suggest(n, candidates) {
                        d = d.with_help(format!("did you mean `{s}`?"));
                    } else if fns.contains_key(n.as_str()) || BUILTINS.contains(&n.as_str()) {
                        d = d.with_note(format!("`{n}` is a function; functions are not values"));
                    } else if n.starts_with(|c: char| c.is_ascii_uppercase()) {
                        // Capitalised names are dims by convention.
                        d = d.with_help(format!(
                            "if `{n}` is meant as a dim: a body can use only the dims of its own parameters' types \
                             (and `--dim` binds only those of the step's); add a parameter whose \
                             type has `{n}`, or compute the size from the dims it has"
                        ));
                    }
                    diags.push(d);
                }
            }
            Expr::Call(c) => {
                if let Callee::Name(name) = &c.callee {
                    check_callee(name.node.as_str(), name.span, fns, diags);
                }
            }
            _ => {}
        }
        let mut kids = children(m.expr(id));
        kids.reverse();
        stack.extend(kids);
    }
}

fn check_callee(name: &str, span: Span, fns: &HashMap<&str, &Func>, diags: &mut Vec<Diagnostic>) {
    if BUILTINS.contains(&name) {
        return;
    }
    match fns.get(name) {
        Some(f) if f.kind == FuncKind::Fn => {}
        Some(f) => diags.push(
            Diagnostic::error(
                codes::STEP_CALLED,
                format!("`{name}` is a step and cannot be called"),
            )
            .with_label(span, "called here")
            .with_secondary(f.name.span, "declared as a step here")
            .with_help("declare the shared code as a `fn` and call that from both steps"),
        ),
        None => {
            let mut d = Diagnostic::error(
                codes::UNKNOWN_FUNCTION,
                format!("unknown function `{name}`"),
            )
            .with_label(span, "no builtin or fn has this name");
            let user = fns
                .iter()
                .filter(|(_, f)| f.kind == FuncKind::Fn)
                .map(|(n, _)| *n);
            let mut candidates: Vec<&str> = BUILTINS.iter().copied().chain(user).collect();
            candidates.sort_unstable();
            if let Some(s) = suggest(name, candidates.into_iter()) {
                d = d.with_help(format!("did you mean `{s}`?"));
            }
            diags.push(d);
        }
    }
}

/// The operand expressions of `e`, in source order.
pub(super) fn children(e: &Expr) -> Vec<ExprId> {
    match e {
        Expr::Int(_) | Expr::Float(_) | Expr::Bool(_) | Expr::Name(_) => vec![],
        Expr::Unary { operand, .. } => vec![*operand],
        Expr::Binary { lhs, rhs, .. } => vec![*lhs, *rhs],
        // `grad(f, .., wrt: [p])`: `f` and `p` name a fn and its parameters, not values.
        Expr::Call(c) if super::grad::is_grad(c) => c
            .args
            .iter()
            .skip(1)
            .copied()
            .chain(
                c.named
                    .iter()
                    .filter(|n| n.name.node != "wrt")
                    .map(|n| n.value),
            )
            .collect(),
        Expr::Call(c) => c
            .args
            .iter()
            .copied()
            .chain(c.named.iter().map(|n| n.value))
            .collect(),
        Expr::Index { base, items } => {
            let mut v = vec![*base];
            for it in items {
                match &it.kind {
                    IndexKind::Slice { start, end } => {
                        v.extend(start.iter().chain(end.iter()).copied())
                    }
                    IndexKind::Expr(e) => v.push(*e),
                    IndexKind::NewAxis | IndexKind::Ellipsis => {}
                }
            }
            v
        }
        Expr::Transpose(e) => vec![*e],
        Expr::Tuple(es) | Expr::List(es) => es.clone(),
    }
}

/// Names longer than this get no "did you mean" suggestion: a typo in such a name is rare,
/// and the edit distance costs the product of the two lengths (two 100,000-character names
/// took 16 s).
pub(crate) const MAX_SUGGEST_LEN: usize = 64;

/// The closest of `candidates` to `name` by edit distance, if close enough to be a typo
/// (at most a third of the name's length, and at least 1). Names longer than
/// [`MAX_SUGGEST_LEN`] characters get none; candidates whose length differs by more than
/// the bound are skipped without computing the distance.
pub fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    if len > MAX_SUGGEST_LEN {
        return None;
    }
    let limit = (len / 3).max(1);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == name || c.chars().count().abs_diff(len) > limit {
            continue;
        }
        // Any one-letter name is one edit from any other: suggest only a change of case.
        if len == 1 && !c.eq_ignore_ascii_case(name) {
            continue;
        }
        let d = edit_distance(name, c);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// The Levenshtein distance between `a` and `b`, in `char`s: insertions, deletions and
/// substitutions of one character each.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
