//! Porting hints: what a PyTorch (or NumPy) call is in tessel, spelled with the user's own
//! arguments.
//!
//! tessel has no methods and no modules, so `x.view(4, 4)`, `torch.matmul(x, w)` and
//! `F.softmax(x, dim=-1)` are lexical errors (a `.` after a name). The lexer's diagnostic
//! asks [`suggest`] for the tessel spelling: [`HINTS`] is the one table of them, one row per
//! PyTorch name, each row a small function of the arguments as written. A name with no row
//! gets no spelling (never a guess that names a function tessel does not have).
//!
//! Every row's `tessel` spelling uses only builtins and syntax that parses: the test
//! `crates/tessel-passes/tests/porting_hints.rs` walks the table, parses each spelling and
//! looks every function it calls up in the checker's builtins. `docs/language.md`, "Porting
//! from PyTorch", prints the table.

/// One argument of a call as written in the source: `name=value` or a bare value, trimmed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arg<'a> {
    /// The keyword, for `dim=-1`.
    pub name: Option<&'a str>,
    /// The value's source text (`-1`, `torch.bfloat16`, `(4, 4)`).
    pub value: &'a str,
}

impl<'a> Arg<'a> {
    /// Splits `dim=-1` into its keyword and value (`a == b` is a value, not a keyword).
    pub fn parse(text: &'a str) -> Arg<'a> {
        let text = text.trim();
        let named = text.split_once('=').filter(|(k, v)| {
            !v.starts_with('=') && !k.ends_with(['!', '<', '>', '=']) && is_ident(k.trim())
        });
        match named {
            Some((k, v)) => Arg {
                name: Some(k.trim()),
                value: v.trim(),
            },
            None => Arg {
                name: None,
                value: text,
            },
        }
    }
}

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One row of [`HINTS`].
pub struct Hint {
    /// The PyTorch names this row answers, as a method (`x.NAME(...)`) or a function of a
    /// module (`torch.NAME(x, ...)`, `F.NAME(x, ...)`, `np.NAME(x, ...)`).
    pub names: &'static [&'static str],
    /// A call as a porter writes it.
    pub example: &'static str,
    /// What [`suggest`] makes of `example` (the test checks both).
    pub tessel: &'static str,
    /// Said beside the spelling where the two differ in more than spelling.
    pub note: Option<&'static str>,
    /// The spelling of a call; `args[0]` is the tensor (the method's receiver or the
    /// function's first argument). `None` when the arguments do not fit the row.
    render: fn(&[Arg<'_>]) -> Option<String>,
}

/// The modules whose functions are recognised as such: `torch.matmul(x, w)` is the
/// function `matmul` with `x` first, not a method of a tensor named `torch`.
pub const MODULES: &[&str] = &[
    "torch",
    "torch.nn.functional",
    "nn.functional",
    "F",
    "np",
    "numpy",
    "torch.special",
    "torch.linalg",
];

/// A module path as the prefix of a dotted name: `torch.nn.functional.softmax` gives
/// (`torch.nn.functional`, `softmax`). `None` when the path does not start with a module.
pub fn split_module(path: &str) -> Option<(&str, &str)> {
    let (module, name) = path.rsplit_once('.')?;
    MODULES.contains(&module).then_some((module, name))
}

/// PyTorch's dtype names as tessel's dtype keywords.
fn dtype_of(torch: &str) -> Option<&'static str> {
    let bare = torch
        .trim_start_matches("torch.")
        .trim_start_matches("np.")
        .trim_start_matches("numpy.");
    match bare {
        "bfloat16" => Some("bf16"),
        "float16" | "half" => Some("f16"),
        "float32" | "float" => Some("f32"),
        "int32" | "int" => Some("i32"),
        "bool" => Some("bool"),
        _ => None,
    }
}

/// A dotted name that is a dtype (`torch.bfloat16`), as its tessel keyword.
pub fn dtype_name(path: &str) -> Option<&'static str> {
    split_module(path).and_then(|_| dtype_of(path))
}

/// The tessel keyword of a PyTorch named argument (`dim` is `axis`, `keepdim` is `keep`).
pub fn keyword(torch: &str) -> &str {
    match torch {
        "dim" => "axis",
        "keepdim" => "keep",
        other => other,
    }
}

/// A value as tessel writes it: Python's `True`/`False` are `true`/`false`.
fn value(v: &str) -> &str {
    match v {
        "True" => "true",
        "False" => "false",
        other => other,
    }
}

fn pos<'a>(args: &[Arg<'a>]) -> Vec<&'a str> {
    args.iter()
        .filter(|a| a.name.is_none())
        .map(|a| value(a.value))
        .collect()
}

fn named<'a>(args: &[Arg<'a>], key: &str) -> Option<&'a str> {
    args.iter()
        .find(|a| a.name == Some(key))
        .map(|a| value(a.value))
}

/// `x` followed by the other arguments with PyTorch's keywords mapped; a first positional
/// argument after the tensor is the axis when `axis_first` (reductions, `softmax`).
fn with_axis(f: &str, args: &[Arg<'_>], axis_first: bool) -> Option<String> {
    let mut out = Vec::new();
    let mut positional = 0;
    for a in args {
        match a.name {
            Some(k) => out.push(format!("{}: {}", keyword(k), value(a.value))),
            None if positional == 1 && axis_first => {
                positional += 1;
                out.push(format!("axis: {}", a.value));
            }
            None if positional == 2 && axis_first => {
                positional += 1;
                out.push(format!("keep: {}", value(a.value)));
            }
            None => {
                positional += 1;
                out.push(a.value.to_string());
            }
        }
    }
    // A reduction over everything (`x.sum()`) has no one-call spelling: tessel reduces one
    // named axis at a time.
    let has_axis = !axis_first || out.iter().any(|a| a.starts_with("axis: "));
    (positional >= 1 && has_axis).then(|| format!("{f}({})", out.join(", ")))
}

/// The items of a shape given as separate arguments (`view(4, 4)`) or as one tuple or list
/// (`view((4, 4))`).
fn dims(rest: &[&str]) -> String {
    match rest {
        [one] if one.starts_with(['(', '[']) => one
            .trim_start_matches(['(', '['])
            .trim_end_matches([')', ']'])
            .trim()
            .trim_end_matches(',')
            .to_string(),
        many => many.join(", "),
    }
}

/// An index that puts `item` at axis `d` (`None` to insert, `0` to select): `x[:, None]`
/// for axis 1, `x[..., None]` for axis -1. `None` when `d` is not an integer literal.
fn at_axis(x: &str, d: &str, item: &str) -> Option<String> {
    let d: i64 = d.parse().ok()?;
    Some(if d >= 0 {
        let mut items = vec![":"; d as usize];
        items.push(item);
        format!("{}[{}]", operand(x), items.join(", "))
    } else {
        // Axis -1 is the last: inserting there puts the new axis last, selecting there
        // takes the last axis; each step further left leaves one more axis after it.
        let after = -d - 1;
        let mut items = vec!["..."];
        items.push(item);
        items.extend(std::iter::repeat_n(":", after as usize));
        format!("{}[{}]", operand(x), items.join(", "))
    })
}

/// `x` as an operand of a postfix or infix operator: parenthesised unless it is a name or
/// already bracketed.
fn operand(x: &str) -> String {
    if is_ident(x) || (x.starts_with('(') && x.ends_with(')')) {
        x.to_string()
    } else {
        format!("({x})")
    }
}

fn call1(f: &str, args: &[Arg<'_>]) -> Option<String> {
    match pos(args).as_slice() {
        [x] => Some(format!("{f}({x})")),
        _ => None,
    }
}

macro_rules! hint {
    ($names:expr, $example:expr, $tessel:expr, $note:expr, $render:expr) => {
        Hint {
            names: $names,
            example: $example,
            tessel: $tessel,
            note: $note,
            render: $render,
        }
    };
}

/// The table: PyTorch's names and the tessel that computes the same. Rows whose tessel form
/// differs in numerics or meaning say so in their note.
pub const HINTS: &[Hint] = &[
    hint!(&["matmul", "mm", "bmm"], "torch.matmul(x, w)", "x @ w", None, |a| {
        match pos(a).as_slice() {
            [x, w] => Some(format!("{} @ {}", operand(x), operand(w))),
            _ => None,
        }
    }),
    hint!(
        &["linear"],
        "F.linear(x, w, b)",
        "x @ w^T + b",
        Some("PyTorch's `nn.Linear` adds the bias before rounding the product; `bf16(f32(x) @ f32(w)^T + f32(b))` is that one rounding"),
        |a| match pos(a).as_slice() {
            [x, w] => Some(format!("{} @ {}^T", operand(x), operand(w))),
            [x, w, b] => Some(format!("{} @ {}^T + {b}", operand(x), operand(w))),
            _ => None,
        }
    ),
    hint!(&["softmax"], "F.softmax(x, dim=-1)", "softmax(x, axis: -1)", None, |a| {
        with_axis("softmax", a, true)
    }),
    hint!(&["sum"], "x.sum(-1)", "sum(x, axis: -1)", None, |a| with_axis("sum", a, true)),
    hint!(
        &["mean"],
        "x.mean(dim=0, keepdim=True)",
        "mean(x, axis: 0, keep: true)",
        None,
        |a| with_axis("mean", a, true)
    ),
    hint!(
        &["amax"],
        "x.amax(-1)",
        "max(x, axis: -1)",
        None,
        |a| with_axis("max", a, true)
    ),
    hint!(
        &["amin"],
        "x.amin(-1)",
        "min(x, axis: -1)",
        None,
        |a| with_axis("min", a, true)
    ),
    hint!(
        &["max"],
        "torch.max(x, dim=-1)",
        "max(x, axis: -1)",
        Some("with an axis, tessel's `max` gives the values only (PyTorch's `.values`); `max(a, b)` of two tensors is elementwise"),
        |a| max_min("max", a)
    ),
    hint!(
        &["min"],
        "torch.min(x, dim=-1)",
        "min(x, axis: -1)",
        Some("with an axis, tessel's `min` gives the values only (PyTorch's `.values`); `min(a, b)` of two tensors is elementwise"),
        |a| max_min("min", a)
    ),
    hint!(&["maximum", "fmax"], "torch.maximum(a, b)", "max(a, b)", None, |a| {
        match pos(a).as_slice() {
            [x, y] => Some(format!("max({x}, {y})")),
            _ => None,
        }
    }),
    hint!(&["minimum", "fmin"], "torch.minimum(a, b)", "min(a, b)", None, |a| {
        match pos(a).as_slice() {
            [x, y] => Some(format!("min({x}, {y})")),
            _ => None,
        }
    }),
    hint!(
        &["clamp", "clip"],
        "x.clamp(lo, hi)",
        "min(max(x, lo), hi)",
        None,
        |a| {
            let p = pos(a);
            let x = p.first()?;
            let lo = named(a, "min").or_else(|| p.get(1).copied());
            let hi = named(a, "max").or_else(|| p.get(2).copied());
            match (lo, hi) {
                (Some(lo), Some(hi)) => Some(format!("min(max({x}, {lo}), {hi})")),
                (Some(lo), None) => Some(format!("max({x}, {lo})")),
                (None, Some(hi)) => Some(format!("min({x}, {hi})")),
                (None, None) => None,
            }
        }
    ),
    hint!(&["clamp_min"], "x.clamp_min(0.0)", "max(x, 0.0)", None, |a| {
        match pos(a).as_slice() {
            [x, lo] => Some(format!("max({x}, {lo})")),
            _ => None,
        }
    }),
    hint!(&["clamp_max"], "x.clamp_max(1.0)", "min(x, 1.0)", None, |a| {
        match pos(a).as_slice() {
            [x, hi] => Some(format!("min({x}, {hi})")),
            _ => None,
        }
    }),
    hint!(
        &["relu"],
        "F.relu(x)",
        "max(x, 0.0)",
        None,
        |a| pos(a).first().map(|x| format!("max({x}, 0.0)"))
    ),
    hint!(
        &["view", "reshape"],
        "x.view(4, 4)",
        "reshape(x, [4, 4])",
        None,
        |a| {
            let p = pos(a);
            let (x, rest) = p.split_first()?;
            (!rest.is_empty()).then(|| format!("reshape({x}, [{}])", dims(rest)))
        }
    ),
    hint!(
        &["unsqueeze", "expand_dims"],
        "x.unsqueeze(1)",
        "x[:, None]",
        None,
        |a| {
            let p = pos(a);
            let d = named(a, "dim").or(named(a, "axis")).or(p.get(1).copied())?;
            at_axis(p.first()?, d, "None")
        }
    ),
    hint!(
        &["squeeze"],
        "x.squeeze(0)",
        "x[0]",
        Some("selecting index 0 of an axis of size 1 drops it"),
        |a| {
            let p = pos(a);
            let d = named(a, "dim").or(named(a, "axis")).or(p.get(1).copied())?;
            at_axis(p.first()?, d, "0")
        }
    ),
    hint!(&["t"], "x.t()", "x^T", None, |a| match pos(a).as_slice() {
        [x] => Some(format!("{}^T", operand(x))),
        _ => None,
    }),
    hint!(
        &["transpose", "swapaxes"],
        "x.transpose(1, 2)",
        "transpose(x, 1, 2)",
        None,
        |a| match pos(a).as_slice() {
            [x, d0, d1] => Some(format!("transpose({x}, {d0}, {d1})")),
            _ => None,
        }
    ),
    hint!(
        &["permute"],
        "x.permute(0, 2, 1)",
        "permute(x, [0, 2, 1])",
        None,
        |a| {
            let p = pos(a);
            let (x, rest) = p.split_first()?;
            (!rest.is_empty()).then(|| format!("permute({x}, [{}])", dims(rest)))
        }
    ),
    hint!(
        &["masked_fill"],
        "x.masked_fill(m, v)",
        "where(m, v, x)",
        None,
        |a| match pos(a).as_slice() {
            [x, m, v] => Some(format!("where({m}, {v}, {x})")),
            _ => None,
        }
    ),
    hint!(
        &["where"],
        "torch.where(c, a, b)",
        "where(c, a, b)",
        None,
        |a| match pos(a).as_slice() {
            [c, x, y] => Some(format!("where({c}, {x}, {y})")),
            _ => None,
        }
    ),
    hint!(
        &["to", "type"],
        "x.to(torch.bfloat16)",
        "bf16(x)",
        Some("a cast is the dtype called as a function: `bf16 f16 f32 i32 bool`"),
        |a| {
            let p = pos(a);
            let x = p.first()?;
            let dt = named(a, "dtype")
                .or(p.get(1).copied())
                .and_then(dtype_of)?;
            Some(format!("{dt}({x})"))
        }
    ),
    hint!(&["float"], "h.float()", "f32(h)", None, |a| call1("f32", a)),
    hint!(&["half"], "h.half()", "f16(h)", None, |a| call1("f16", a)),
    hint!(&["bfloat16"], "h.bfloat16()", "bf16(h)", None, |a| call1("bf16", a)),
    hint!(&["int"], "h.int()", "i32(h)", None, |a| call1("i32", a)),
    hint!(&["bool"], "h.bool()", "bool(h)", None, |a| call1("bool", a)),
    hint!(
        &["cat", "concat", "concatenate"],
        "torch.cat([a, b], dim=-1)",
        "concat(a, b, axis: -1)",
        None,
        |a| {
            // PyTorch takes one list of tensors; tessel takes them as arguments.
            let p = pos(a);
            let tensors = dims(&p[..p.len().min(1)]);
            let axis = named(a, "dim")
                .or(named(a, "axis"))
                .or(p.get(1).copied())
                .unwrap_or("0");
            (!tensors.is_empty()).then(|| format!("concat({tensors}, axis: {axis})"))
        }
    ),
    hint!(
        &["chunk"],
        "x.chunk(2, dim=-1)",
        "split(x, 2, axis: -1)",
        Some("tessel's `split(x, n, axis: k)` is PyTorch's `chunk`: `n` equal parts"),
        |a| {
            let p = pos(a);
            let axis = named(a, "dim").or(p.get(2).copied()).unwrap_or("0");
            match p.as_slice() {
                [x, n, ..] => Some(format!("split({x}, {n}, axis: {axis})")),
                _ => None,
            }
        }
    ),
    hint!(
        &["arange"],
        "torch.arange(n)",
        "iota(n)",
        Some("`iota(n)` is i32 (PyTorch's `arange` is int64); it takes one compile-time length"),
        |a| match pos(a).as_slice() {
            [n] => Some(format!("iota({n})")),
            _ => None,
        }
    ),
    hint!(&["neg", "negative"], "x.neg()", "-x", None, |a| match pos(a).as_slice() {
        [x] => Some(format!("-{}", operand(x))),
        _ => None,
    }),
    hint!(
        &["reciprocal"],
        "x.reciprocal()",
        "1.0 / x",
        None,
        |a| match pos(a).as_slice() {
            [x] => Some(format!("1.0 / {}", operand(x))),
            _ => None,
        }
    ),
    hint!(&["square"], "x.square()", "x * x", None, |a| match pos(a).as_slice() {
        [x] => Some(format!("{} * {}", operand(x), operand(x))),
        _ => None,
    }),
    hint!(
        &["pow"],
        "x.pow(2.0)",
        "pow(x, 2.0)",
        None,
        |a| match pos(a).as_slice() {
            [x, y] => Some(format!("pow({x}, {y})")),
            _ => None,
        }
    ),
    hint!(&["exp"], "x.exp()", "exp(x)", None, |a| call1("exp", a)),
    hint!(&["log"], "x.log()", "log(x)", None, |a| call1("log", a)),
    hint!(&["sqrt"], "x.sqrt()", "sqrt(x)", None, |a| call1("sqrt", a)),
    hint!(&["rsqrt"], "torch.rsqrt(x)", "rsqrt(x)", None, |a| call1("rsqrt", a)),
    hint!(&["sin"], "x.sin()", "sin(x)", None, |a| call1("sin", a)),
    hint!(&["cos"], "x.cos()", "cos(x)", None, |a| call1("cos", a)),
    hint!(&["tanh"], "torch.tanh(x)", "tanh(x)", None, |a| call1("tanh", a)),
    hint!(&["sigmoid"], "torch.sigmoid(x)", "sigmoid(x)", None, |a| {
        call1("sigmoid", a)
    }),
    hint!(&["silu"], "F.silu(x)", "silu(x)", None, |a| call1("silu", a)),
    hint!(&["abs"], "x.abs()", "abs(x)", None, |a| call1("abs", a)),
    hint!(
        &["contiguous", "clone", "detach"],
        "x.contiguous()",
        "x",
        Some("tessel values have no memory layout or autograd state: drop the call"),
        |a| match pos(a).as_slice() {
            [x] => Some(x.to_string()),
            _ => None,
        }
    ),
];

fn max_min(f: &str, args: &[Arg<'_>]) -> Option<String> {
    let p = pos(args);
    let by_axis = named(args, "dim").is_some() || named(args, "axis").is_some();
    // `torch.max(a, b)` with a tensor `b` is elementwise; an integer literal is an axis.
    match p.as_slice() {
        [x, d] if !by_axis && d.parse::<i64>().is_ok() => Some(format!("{f}({x}, axis: {d})")),
        [x, y] if !by_axis => Some(format!("{f}({x}, {y})")),
        _ => with_axis(f, args, true),
    }
}

/// The tessel spelling of the PyTorch call `name(args)` (`args[0]` the tensor) and the
/// row's note. `None` when no row has the name or the arguments do not fit it.
pub fn suggest(name: &str, args: &[Arg<'_>]) -> Option<(String, Option<&'static str>)> {
    let row = HINTS.iter().find(|h| h.names.contains(&name))?;
    (row.render)(args).map(|s| (s, row.note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_split_at_keywords_only() {
        assert_eq!(
            Arg::parse(" dim=-1 "),
            Arg {
                name: Some("dim"),
                value: "-1"
            }
        );
        assert_eq!(Arg::parse("a == b").name, None);
        assert_eq!(Arg::parse("a <= b").name, None);
    }

    #[test]
    fn axes_for_new_and_selected_dims() {
        assert_eq!(at_axis("x", "0", "None").unwrap(), "x[None]");
        assert_eq!(at_axis("x", "2", "None").unwrap(), "x[:, :, None]");
        assert_eq!(at_axis("x", "-1", "None").unwrap(), "x[..., None]");
        assert_eq!(at_axis("x", "-2", "None").unwrap(), "x[..., None, :]");
        assert_eq!(at_axis("x", "-1", "0").unwrap(), "x[..., 0]");
        assert_eq!(at_axis("a + b", "1", "None").unwrap(), "(a + b)[:, None]");
        assert!(at_axis("x", "d", "None").is_none());
    }

    #[test]
    fn module_paths() {
        assert_eq!(
            split_module("torch.nn.functional.softmax"),
            Some(("torch.nn.functional", "softmax"))
        );
        assert_eq!(split_module("F.silu"), Some(("F", "silu")));
        assert_eq!(split_module("x.view"), None);
        assert_eq!(dtype_name("torch.bfloat16"), Some("bf16"));
    }
}
