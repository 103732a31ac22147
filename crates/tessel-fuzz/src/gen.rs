//! The generator: random well-typed programs over every op of the language.
//!
//! A program starts from a few parameters and grows one `let` at a time: each picks an
//! operation and operands from the values so far (the newest value half the time, so
//! chains form — a matmul followed by its epilogue, a reduction by what uses it), or from
//! fresh parameters made to fit (a bias of the right shape, a weight of the right K). The
//! result type of each operation follows the language's rules (docs/language.md), so a
//! program the checker rejects is a disagreement to report, not noise.
//!
//! Shapes are where fusion goes wrong, so they are chosen to provoke it: dims are symbols
//! with values from small sizes, primes and non-multiples of every tile (1, 3, 7, 17, 33,
//! 65, 129, ...), and two different symbols often have the same value — the `T = D`
//! coincidence that once fused reductions over different axes. Matmul shapes reach the
//! GEMV (M ≤ 16), the skinny and split-K schedules (small outputs, K up to 600).
//!
//! Randomness is splitmix64 ([`tessel_ref::tensor::SplitMix64`]): a seed gives the same
//! program on every machine and with every dependency version.

use crate::program::{Dim, Let, Program, Ty};
use tessel_ir::DType;
use tessel_ref::tensor::SplitMix64;

/// Size limits for generated programs.
#[derive(Clone, Debug)]
pub struct Config {
    /// `let`s per program, at most.
    pub max_lets: usize,
    /// Elements per value, at most.
    pub max_numel: u64,
    /// Multiply-adds per matmul, at most.
    pub max_fmas: u64,
}

impl Default for Config {
    /// Small enough that the CPU executor runs a program in milliseconds.
    fn default() -> Config {
        Config {
            max_lets: 7,
            max_numel: 1 << 13,
            max_fmas: 1 << 19,
        }
    }
}

/// Sizes dims take: 1, tiny, primes, and one off a power of two on either side.
const SIZES: &[u64] = &[1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 64, 65];
/// Sizes of a long dim: rows spread over several warps, with and without tails.
const LONG_SIZES: &[u64] = &[100, 128, 129, 256, 257, 513, 1024, 2048, 4099];
/// Sizes for a matmul's K and N, up to split-K's reach.
const MATMUL_SIZES: &[u64] = &[1, 3, 8, 16, 17, 24, 33, 64, 65, 100, 128, 129, 256, 600];

/// The program of `seed`.
pub fn generate(seed: u64, cfg: &Config) -> Program {
    let mut g = Gen {
        rng: SplitMix64::new(seed),
        cfg: cfg.clone(),
        p: Program {
            dims: vec![],
            params: vec![],
            lets: vec![],
            outputs: vec![],
        },
    };
    let syms = 2 + g.below(3) as usize;
    for _ in 0..syms {
        let v = g.size();
        g.p.dims.push(v);
    }
    if g.chance(0.4) {
        // Two symbols with one value: the coincidence that must never change a result.
        g.p.dims[1] = g.p.dims[0];
    } else if g.chance(0.3) {
        // One long dim: rows that take several warps, vectors with tails.
        let k = g.below(syms as u64) as usize;
        g.p.dims[k] = g.pick(LONG_SIZES);
    }
    for _ in 0..1 + g.below(2) {
        let t = g.random_ty();
        g.fresh_param(t);
    }
    let lets = 1 + g.below(g.cfg.max_lets as u64) as usize;
    for _ in 0..lets {
        for _attempt in 0..30 {
            if let Some(l) = g.step() {
                g.p.lets.push(l);
                break;
            }
        }
    }
    // Every value no later `let` reads is an output, so every operation is observed.
    let used: Vec<&String> = g.p.lets.iter().flat_map(|l| l.operands.iter()).collect();
    let mut sinks: Vec<String> =
        g.p.lets
            .iter()
            .flat_map(|l| l.names.iter())
            .filter(|n| !used.contains(n))
            .cloned()
            .collect();
    sinks.reverse();
    sinks.truncate(4);
    if sinks.is_empty() {
        sinks.push(g.p.params[0].0.clone());
    }
    g.p.outputs = sinks;
    g.p
}

/// One kind of operation: a `let` built from the program so far, or None if it does not
/// apply to the operands drawn.
type Rule = fn(&mut Gen) -> Option<Let>;

struct Gen {
    rng: SplitMix64,
    cfg: Config,
    p: Program,
}

/// Promotion category: bool < i32 < floats (docs/language.md, "Literals, consts and
/// dtypes").
fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I32 => 1,
        _ => 2,
    }
}

/// The dtype two tensors promote to.
fn promote(a: DType, b: DType) -> DType {
    if a == b {
        a
    } else if category(a) != category(b) {
        if category(a) > category(b) {
            a
        } else {
            b
        }
    } else {
        DType::F32
    }
}

/// The dtype of a tensor of `d` meeting a weak literal of category `lit` (1 integer,
/// 2 float).
fn with_literal(d: DType, lit: u8) -> DType {
    if lit > category(d) {
        if lit == 2 {
            DType::F32
        } else {
            DType::I32
        }
    } else {
        d
    }
}

/// NumPy broadcasting of two shapes, dims equal or 1; None if they do not broadcast.
fn broadcast(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let x = (i + a.len()).checked_sub(n).map(|j| &a[j]);
        let y = (i + b.len()).checked_sub(n).map(|j| &b[j]);
        out.push(match (x, y) {
            (Some(x), None) => x.clone(),
            (None, Some(y)) => y.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(Dim::Lit(1)), Some(y)) => y.clone(),
            (Some(x), Some(Dim::Lit(1))) => x.clone(),
            _ => return None,
        });
    }
    Some(out)
}

fn one(names: Vec<String>, ty: Ty, template: String, operands: Vec<String>) -> Option<Let> {
    Some(Let {
        names,
        tys: vec![ty],
        template,
        operands,
    })
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.next_f64() < p
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize].clone()
    }

    /// A dim size, small ones likelier.
    fn size(&mut self) -> u64 {
        let i = self
            .below(SIZES.len() as u64)
            .min(self.below(SIZES.len() as u64));
        SIZES[i as usize]
    }

    fn dtype(&mut self) -> DType {
        match self.below(100) {
            0..=49 => DType::F32,
            50..=66 => DType::Bf16,
            67..=76 => DType::F16,
            77..=91 => DType::I32,
            _ => DType::Bool,
        }
    }

    fn float_dtype(&mut self) -> DType {
        self.pick(&[DType::F32, DType::F32, DType::Bf16, DType::F16])
    }

    fn sym(&mut self) -> Dim {
        Dim::Sym(self.below(self.p.dims.len() as u64) as usize)
    }

    /// A new symbol with value `v`.
    fn new_sym(&mut self, v: u64) -> Dim {
        self.p.dims.push(v);
        Dim::Sym(self.p.dims.len() - 1)
    }

    fn random_ty(&mut self) -> Ty {
        let rank = match self.below(100) {
            0..=4 => 0,
            5..=34 => 1,
            35..=79 => 2,
            _ => 3,
        };
        let dtype = self.dtype();
        let mut shape = Vec::new();
        for _ in 0..rank {
            let d = if self.chance(0.1) {
                Dim::Lit(1)
            } else {
                self.sym()
            };
            shape.push(d);
        }
        let mut t = Ty::new(dtype, shape);
        while t.numel(&self.p.dims) > self.cfg.max_numel {
            t.shape.remove(0);
        }
        t
    }

    /// A new parameter of type `ty` (a computed dim becomes its value: a signature names
    /// dims by symbols and literals only).
    fn fresh_param(&mut self, mut ty: Ty) -> String {
        for d in ty.shape.iter_mut() {
            if !d.is_plain() {
                *d = Dim::Lit(d.value(&self.p.dims));
            }
        }
        let name = format!("a{}", self.p.params.len());
        self.p.params.push((name.clone(), ty));
        name
    }

    fn fresh_let(&self, k: usize) -> String {
        let used: usize = self.p.lets.iter().map(|l| l.names.len()).sum();
        format!("t{}", used + k)
    }

    fn names(&self) -> Vec<String> {
        self.p
            .params
            .iter()
            .map(|(n, _)| n.clone())
            .chain(self.p.lets.iter().flat_map(|l| l.names.iter().cloned()))
            .collect()
    }

    fn ty(&self, name: &str) -> Ty {
        self.p
            .ty_of(name)
            .cloned()
            .expect("generated names have types")
    }

    /// An operand: the newest value half the time, else any value.
    fn operand(&mut self) -> (String, Ty) {
        let names = self.names();
        let newest = self.p.lets.last().map(|l| l.names[0].clone());
        let name = match newest {
            Some(n) if self.chance(0.6) => n,
            _ => self.pick(&names),
        };
        let t = self.ty(&name);
        (name, t)
    }

    fn fits(&self, t: &Ty) -> bool {
        t.numel(&self.p.dims) <= self.cfg.max_numel
    }

    /// A second operand broadcasting against `shape`: an existing value, or a fresh
    /// parameter of a suffix of `shape` with some dims 1.
    fn partner(&mut self, shape: &[Dim], want: impl Fn(DType) -> bool) -> (String, Ty) {
        if self.chance(0.5) {
            let cands: Vec<String> = self
                .names()
                .into_iter()
                .filter(|n| {
                    let t = self.ty(n);
                    want(t.dtype)
                        && broadcast(shape, &t.shape)
                            .is_some_and(|s| s.len() == shape.len() || shape.is_empty())
                })
                .collect();
            if !cands.is_empty() {
                let n = self.pick(&cands);
                let t = self.ty(&n);
                return (n, t);
            }
        }
        let keep = self.below(shape.len() as u64 + 1) as usize;
        let mut s: Vec<Dim> = shape[shape.len() - keep..].to_vec();
        for d in s.iter_mut() {
            if self.chance(0.2) {
                *d = Dim::Lit(1);
            }
        }
        let mut dt = self.dtype();
        while !want(dt) {
            dt = self.dtype();
        }
        let t = Ty::new(dt, s);
        (self.fresh_param(t.clone()), t)
    }

    fn literal(&mut self, float: bool) -> (String, u8) {
        if float {
            (
                self.pick(&["2.0", "0.5", "-1.5", "1e-3", "3.0", "0.0"])
                    .into(),
                2,
            )
        } else {
            (self.pick(&["2", "3", "-1", "7", "0", "1"]).into(), 1)
        }
    }

    fn axis_text(&mut self, axis: usize, rank: usize) -> String {
        if self.chance(0.4) {
            format!("-{}", rank - axis)
        } else {
            axis.to_string()
        }
    }

    /// One operation; None if the chosen one does not apply (the caller tries again).
    fn step(&mut self) -> Option<Let> {
        let w: &[(u32, Rule)] = &[
            (12, Gen::unary),
            (18, Gen::arith),
            (5, Gen::compare),
            (5, Gen::select),
            (3, Gen::min_max),
            (2, Gen::pow),
            (7, Gen::cast),
            (12, Gen::reduce),
            (5, Gen::softmax),
            (6, Gen::slice),
            (3, Gen::index_select),
            (2, Gen::new_axis),
            (6, Gen::reshape),
            (5, Gen::transpose),
            (5, Gen::concat),
            (3, Gen::split),
            (9, Gen::matmul),
            (2, Gen::iota),
        ];
        let total: u32 = w.iter().map(|x| x.0).sum();
        let mut r = self.below(total as u64) as u32;
        for (weight, f) in w {
            if r < *weight {
                let l = f(self)?;
                return l.tys.iter().all(|t| self.fits(t)).then_some(l);
            }
            r -= weight;
        }
        None
    }

    fn unary(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let name = self.fresh_let(0);
        let template = match t.dtype {
            DType::Bool => "!{0}".to_string(),
            DType::I32 => self.pick(&["-{0}", "abs({0})"]).to_string(),
            _ => {
                let f = self.pick(&[
                    "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "silu", "abs",
                    "-", "log_abs", "sqrt_abs",
                ]);
                match f {
                    "-" => "-{0}".into(),
                    // Domains where the math functions give numbers, not NaN.
                    "log_abs" => "log(abs({0}) + 1.0)".into(),
                    "sqrt_abs" => "sqrt(abs({0}))".into(),
                    _ => format!("{f}({{0}})"),
                }
            }
        };
        one(vec![name], t, template, vec![x])
    }

    fn arith(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.dtype == DType::Bool {
            return None;
        }
        let ops: &[&str] = if t.dtype == DType::I32 {
            &["+", "-", "*", "/", "%"]
        } else {
            &["+", "-", "*", "/"]
        };
        let op = self.pick(ops);
        let name = self.fresh_let(0);
        if self.chance(0.3) {
            let float = t.dtype.is_float() || (op != "%" && self.chance(0.3));
            let (lit, cat) = self.literal(float);
            let dt = with_literal(t.dtype, cat);
            if op == "%" && dt != DType::I32 {
                return None;
            }
            let template = if self.chance(0.5) {
                format!("{{0}} {op} {lit}")
            } else {
                format!("{lit} {op} {{0}}")
            };
            return one(vec![name], Ty::new(dt, t.shape), template, vec![x]);
        }
        let int_only = op == "%";
        let (y, u) = self.partner(&t.shape, |d| {
            d != DType::Bool && (!int_only || d == DType::I32)
        });
        let shape = broadcast(&t.shape, &u.shape)?;
        let dt = promote(t.dtype, u.dtype);
        let template = format!("{{0}} {op} {{1}}");
        let ops = if self.chance(0.5) {
            vec![x, y]
        } else {
            vec![y, x]
        };
        one(vec![name], Ty::new(dt, shape), template, ops)
    }

    fn compare(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let op = if t.dtype == DType::Bool {
            self.pick(&["==", "!="])
        } else {
            self.pick(&["==", "!=", "<", "<=", ">", ">="])
        };
        let bool_ok = t.dtype == DType::Bool;
        let (y, u) = self.partner(&t.shape, |d| (d == DType::Bool) == bool_ok);
        let shape = broadcast(&t.shape, &u.shape)?;
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(DType::Bool, shape),
            format!("{{0}} {op} {{1}}"),
            vec![x, y],
        )
    }

    fn select(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let (c, ct) = self.partner(&t.shape, |d| d == DType::Bool);
        let name = self.fresh_let(0);
        let shape = broadcast(&t.shape, &ct.shape)?;
        if self.chance(0.3) && t.dtype != DType::Bool {
            let (lit, cat) = self.literal(t.dtype.is_float());
            let dt = with_literal(t.dtype, cat);
            return one(
                vec![name],
                Ty::new(dt, shape),
                format!("where({{1}}, {{0}}, {lit})"),
                vec![x, c],
            );
        }
        let (y, u) = self.partner(&shape, |_| true);
        let shape = broadcast(&shape, &u.shape)?;
        let dt = promote(t.dtype, u.dtype);
        one(
            vec![name],
            Ty::new(dt, shape),
            "where({1}, {0}, {2})".into(),
            vec![x, c, y],
        )
    }

    fn min_max(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.dtype == DType::Bool {
            return None;
        }
        let f = self.pick(&["min", "max"]);
        let (y, u) = self.partner(&t.shape, |d| d != DType::Bool);
        let shape = broadcast(&t.shape, &u.shape)?;
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(promote(t.dtype, u.dtype), shape),
            format!("{f}({{0}}, {{1}})"),
            vec![x, y],
        )
    }

    fn pow(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if !t.dtype.is_float() {
            return None;
        }
        let name = self.fresh_let(0);
        let e = self.pick(&["2.0", "0.5", "3.0", "-1.0", "1.5"]);
        // A non-negative base: pow of a negative base with a non-integer exponent is NaN.
        one(vec![name], t, format!("pow(abs({{0}}), {e})"), vec![x])
    }

    fn cast(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let mut dt = self.dtype();
        if dt == t.dtype {
            dt = if dt == DType::F32 {
                DType::Bf16
            } else {
                DType::F32
            };
        }
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(dt, t.shape),
            format!("{}({{0}})", crate::program::dtype_name(dt)),
            vec![x],
        )
    }

    fn reduce(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 || t.dtype == DType::Bool {
            return None;
        }
        let f = if t.dtype.is_float() {
            self.pick(&["sum", "max", "min", "mean"])
        } else {
            self.pick(&["sum", "max", "min"])
        };
        let axis = self.below(t.rank() as u64) as usize;
        let keep = self.chance(0.4);
        let mut shape = t.shape.clone();
        if keep {
            shape[axis] = Dim::Lit(1);
        } else {
            shape.remove(axis);
        }
        let a = self.axis_text(axis, t.rank());
        let keep_text = if keep {
            ", keep: true"
        } else if self.chance(0.2) {
            ", keep: false"
        } else {
            ""
        };
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{f}({{0}}, axis: {a}{keep_text})"),
            vec![x],
        )
    }

    fn softmax(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 || !t.dtype.is_float() {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let a = self.axis_text(axis, t.rank());
        let name = self.fresh_let(0);
        one(vec![name], t, format!("softmax({{0}}, axis: {a})"), vec![x])
    }

    /// `[:, :, item]`-style index text with `item` at `axis`.
    fn index_text(&mut self, axis: usize, rank: usize, item: &str) -> String {
        if axis + 1 == rank && rank > 1 && self.chance(0.3) {
            return format!("[..., {item}]");
        }
        let mut items: Vec<String> = vec![":".into(); axis];
        items.push(item.into());
        format!("[{}]", items.join(", "))
    }

    fn slice(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let v = t.shape[axis].value(&self.p.dims);
        let lo = self.below(v);
        let hi = lo + 1 + self.below(v - lo);
        let lo_t = if lo > 0 && self.chance(0.3) {
            format!("{}", lo as i64 - v as i64)
        } else if lo == 0 && self.chance(0.5) {
            String::new()
        } else {
            lo.to_string()
        };
        let hi_t = if hi == v && self.chance(0.5) {
            String::new()
        } else if hi < v && self.chance(0.3) {
            format!("{}", hi as i64 - v as i64)
        } else {
            hi.to_string()
        };
        let item = format!("{lo_t}:{hi_t}");
        let idx = self.index_text(axis, t.rank(), &item);
        let mut shape = t.shape.clone();
        if !(lo == 0 && hi == v) {
            shape[axis] = Dim::Lit(hi - lo);
        }
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}{idx}"),
            vec![x],
        )
    }

    fn index_select(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let v = t.shape[axis].value(&self.p.dims);
        let i = self.below(v);
        let item = if self.chance(0.3) {
            format!("{}", i as i64 - v as i64)
        } else {
            i.to_string()
        };
        let idx = self.index_text(axis, t.rank(), &item);
        let mut shape = t.shape.clone();
        shape.remove(axis);
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}{idx}"),
            vec![x],
        )
    }

    fn new_axis(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() >= 4 {
            return None;
        }
        let axis = self.below(t.rank() as u64 + 1) as usize;
        let mut items: Vec<&str> = vec![":"; axis];
        items.push("None");
        let mut shape = t.shape.clone();
        shape.insert(axis, Dim::Lit(1));
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("{{0}}[{}]", items.join(", ")),
            vec![x],
        )
    }

    fn reshape(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let mut shape = t.shape.clone();
        let mut texts: Vec<String> = shape.iter().map(Dim::text).collect();
        match self.below(3) {
            0 if t.rank() >= 2 => {
                // Merge two adjacent axes.
                let a = self.below(t.rank() as u64 - 1) as usize;
                let d = Dim::Mul(Box::new(shape[a].clone()), Box::new(shape[a + 1].clone()));
                texts.splice(a..a + 2, [d.text()]);
                shape.splice(a..a + 2, [d]);
            }
            1 => {
                // Split an axis by a factor of its value.
                let a = self.below(t.rank() as u64) as usize;
                let v = shape[a].value(&self.p.dims);
                let f = [2u64, 3, 4].into_iter().find(|f| v % f == 0 && v > *f)?;
                let d = match shape[a] {
                    Dim::Lit(n) => Dim::Lit(n / f),
                    ref s => Dim::Div(Box::new(s.clone()), f),
                };
                texts.splice(a..a + 1, [d.text(), f.to_string()]);
                shape.splice(a..a + 1, [d, Dim::Lit(f)]);
            }
            _ => {
                // Flatten, one dim inferred.
                let d = shape
                    .iter()
                    .cloned()
                    .reduce(|a, b| Dim::Mul(Box::new(a), Box::new(b)))?;
                texts = vec!["-1".into()];
                shape = vec![d];
            }
        }
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(t.dtype, shape),
            format!("reshape({{0}}, [{}])", texts.join(", ")),
            vec![x],
        )
    }

    fn transpose(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        let r = t.rank();
        if r < 2 {
            return None;
        }
        let mut shape = t.shape.clone();
        let template = match self.below(3) {
            0 => {
                shape.swap(r - 2, r - 1);
                "{0}^T".to_string()
            }
            1 => {
                let a = self.below(r as u64) as usize;
                let b = (a + 1 + self.below(r as u64 - 1) as usize) % r;
                shape.swap(a, b);
                format!("transpose({{0}}, {a}, {})", self.axis_text(b, r))
            }
            _ => {
                let mut perm: Vec<usize> = (0..r).collect();
                for i in (1..r).rev() {
                    let j = self.below(i as u64 + 1) as usize;
                    perm.swap(i, j);
                }
                shape = perm.iter().map(|&p| t.shape[p].clone()).collect();
                let ps: Vec<String> = perm.iter().map(usize::to_string).collect();
                format!("permute({{0}}, [{}])", ps.join(", "))
            }
        };
        let name = self.fresh_let(0);
        one(vec![name], Ty::new(t.dtype, shape), template, vec![x])
    }

    fn concat(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        // The other part: same dims but `axis`, which is the same or another size.
        let other = if self.chance(0.5) {
            t.shape[axis].clone()
        } else if self.chance(0.5) {
            Dim::Lit(1 + self.below(4))
        } else {
            self.sym()
        };
        let mut shape = t.shape.clone();
        shape[axis] = other.clone();
        let dt = if self.chance(0.7) {
            t.dtype
        } else {
            self.dtype()
        };
        let u = Ty::new(dt, shape.clone());
        let y = self.fresh_param(u);
        let mut out = t.shape.clone();
        out[axis] = Dim::Add(Box::new(t.shape[axis].clone()), Box::new(other));
        let a = self.axis_text(axis, t.rank());
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(promote(t.dtype, dt), out),
            format!("concat({{0}}, {{1}}, axis: {a})"),
            vec![x, y],
        )
    }

    fn split(&mut self) -> Option<Let> {
        let (x, t) = self.operand();
        if t.rank() == 0 {
            return None;
        }
        let axis = self.below(t.rank() as u64) as usize;
        let v = t.shape[axis].value(&self.p.dims);
        let n = [2u64, 3].into_iter().find(|n| v % n == 0)?;
        let part = match t.shape[axis] {
            Dim::Lit(k) => Dim::Lit(k / n),
            ref d => Dim::Div(Box::new(d.clone()), n),
        };
        let mut shape = t.shape.clone();
        shape[axis] = part;
        let names: Vec<String> = (0..n as usize).map(|k| self.fresh_let(k)).collect();
        let a = self.axis_text(axis, t.rank());
        Some(Let {
            tys: vec![Ty::new(t.dtype, shape); n as usize],
            names,
            template: format!("split({{0}}, {n}, axis: {a})"),
            operands: vec![x],
        })
    }

    /// `x @ w` or `x @ w^T` with a fresh weight; x an existing float value of rank ≥ 2 or
    /// a fresh `[M, K]` of matmul sizes.
    fn matmul(&mut self) -> Option<Let> {
        let (x, t) = match self.operand() {
            (x, t) if t.rank() >= 2 && t.rank() <= 3 && t.dtype.is_float() && self.chance(0.6) => {
                (x, t)
            }
            _ => {
                let m = if self.chance(0.5) {
                    self.sym()
                } else {
                    let v = self.pick(&[1u64, 2, 3, 7, 8, 16, 17, 33, 64, 129]);
                    self.new_sym(v)
                };
                let kv = self.pick(MATMUL_SIZES);
                let k = self.new_sym(kv);
                let dt = self.float_dtype();
                let t = Ty::new(dt, vec![m, k]);
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
            let v = self.pick(MATMUL_SIZES);
            self.new_sym(v)
        };
        let batch = t.shape[..r - 2].to_vec();
        let fmas = t.numel(&self.p.dims) * n.value(&self.p.dims);
        if fmas > self.cfg.max_fmas {
            return None;
        }
        let dt = if self.chance(0.8) {
            t.dtype
        } else {
            self.float_dtype()
        };
        let transposed = self.chance(0.5);
        // The weight's batch dims: the same, or none (broadcast over x's batch).
        let mut ws = if self.chance(0.3) {
            vec![]
        } else {
            batch.clone()
        };
        if transposed {
            ws.extend([n.clone(), k]);
        } else {
            ws.extend([k, n.clone()]);
        }
        let wt = Ty::new(dt, ws);
        if !self.fits(&wt) {
            return None;
        }
        let w = self.fresh_param(wt);
        let mut out = t.shape[..r - 1].to_vec();
        out.push(n);
        let name = self.fresh_let(0);
        // The weight as stored, or computed first (then it is no stored tensor to read in
        // place).
        let wexpr = self.pick(&["{1}", "{1}", "{1}", "({1} * 0.5)", "(-{1})"]);
        one(
            vec![name],
            Ty::new(promote(t.dtype, dt), out),
            if transposed {
                format!("{{0}} @ {wexpr}^T")
            } else {
                format!("{{0}} @ {wexpr}")
            },
            vec![x, w],
        )
    }

    fn iota(&mut self) -> Option<Let> {
        // A symbol is a name in the body only if the signature binds it.
        let mut bound: Vec<Dim> = self
            .p
            .params
            .iter()
            .flat_map(|(_, t)| t.shape.iter().filter(|d| matches!(d, Dim::Sym(_))).cloned())
            .collect();
        bound.dedup();
        let d = if bound.is_empty() || self.chance(0.2) {
            Dim::Lit(self.size())
        } else {
            self.pick(&bound)
        };
        let name = self.fresh_let(0);
        one(
            vec![name],
            Ty::new(DType::I32, vec![d.clone()]),
            format!("iota({})", d.text()),
            vec![],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_one_program() {
        let cfg = Config::default();
        assert_eq!(generate(5, &cfg), generate(5, &cfg));
        assert_ne!(generate(5, &cfg), generate(6, &cfg));
    }

    #[test]
    fn broadcasting_follows_numpy() {
        let (a, b) = (Dim::Sym(0), Dim::Sym(1));
        let ab = vec![a.clone(), b.clone()];
        assert_eq!(broadcast(&ab, &ab[1..]), Some(ab.clone()));
        assert_eq!(broadcast(&[a, Dim::Lit(1)], &ab[1..]), Some(ab.clone()));
        assert_eq!(broadcast(&ab[..1], &ab[1..]), None);
        assert_eq!(promote(DType::Bf16, DType::F16), DType::F32);
        assert_eq!(promote(DType::I32, DType::Bf16), DType::Bf16);
        assert_eq!(with_literal(DType::I32, 2), DType::F32);
        assert_eq!(with_literal(DType::Bf16, 2), DType::Bf16);
    }
}
