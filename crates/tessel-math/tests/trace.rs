//! The generic code uses nothing but the trait: a recording `MathOps` whose values are symbols
//! builds a program (a toy kernel IR: straight-line ops plus structured `cond`), and an
//! independent interpreter of that program must give the bits `Native` gives. This is what the
//! kernel-IR builder does, so it also shows the trait is instantiable on a non-f32 type.

use std::collections::HashMap;
use tessel_math::{self as tm, MathOps, Native};

/// A symbolic value: an index into the program's value table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct V(u32);

#[derive(Debug)]
enum Node {
    Const(V, u32),
    Op(V, &'static str, Vec<V>),
    Cond {
        c: V,
        then_body: Vec<Node>,
        then_out: Vec<V>,
        else_body: Vec<Node>,
        else_out: Vec<V>,
        out: Vec<V>,
    },
}

struct Recorder {
    next: u32,
    blocks: Vec<Vec<Node>>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            next: 1,
            blocks: vec![vec![]],
        }
    }
    fn fresh(&mut self) -> V {
        self.next += 1;
        V(self.next)
    }
    fn op(&mut self, name: &'static str, args: &[V]) -> V {
        let v = self.fresh();
        self.blocks
            .last_mut()
            .unwrap()
            .push(Node::Op(v, name, args.to_vec()));
        v
    }
}

macro_rules! ops {
    ($($name:ident($($a:ident),*) -> $r:ident;)*) => {
        $(fn $name(&mut self, $($a: V),*) -> V { self.op(stringify!($name), &[$($a),*]) })*
    };
}

impl MathOps for Recorder {
    type F = V;
    type U = V;
    type P = V;
    fn fconst(&mut self, c: f32) -> V {
        let v = self.fresh();
        self.blocks
            .last_mut()
            .unwrap()
            .push(Node::Const(v, c.to_bits()));
        v
    }
    fn uconst(&mut self, c: u32) -> V {
        let v = self.fresh();
        self.blocks.last_mut().unwrap().push(Node::Const(v, c));
        v
    }
    ops! {
        fadd(a, b) -> F; fsub(a, b) -> F; fmul(a, b) -> F; fdiv(a, b) -> F; ffma(a, b, c) -> F;
        fsqrt(a) -> F; fneg(a) -> F; fabs(a) -> F; fmin(a, b) -> F; fmax(a, b) -> F; frint(a) -> F;
        feq(a, b) -> P; fne(a, b) -> P; flt(a, b) -> P; fle(a, b) -> P; fgt(a, b) -> P; fge(a, b) -> P;
        fis_nan(a) -> P; select(p, a, b) -> F; select_u(p, a, b) -> U; pand(p, q) -> P; por(p, q) -> P;
        pnot(p) -> P; f_to_bits(a) -> U; f_from_bits(a) -> F; uadd(a, b) -> U; usub(a, b) -> U;
        umul_lo(a, b) -> U; umul_hi(a, b) -> U; ushl(a, s) -> U; ushr(a, s) -> U; sshr(a, s) -> U;
        uand(a, b) -> U; uor(a, b) -> U; uxor(a, b) -> U; unot(a) -> U; ueq(a, b) -> P; une(a, b) -> P;
        ult(a, b) -> P; ugt(a, b) -> P; slt(a, b) -> P; sle(a, b) -> P; sgt(a, b) -> P; sge(a, b) -> P;
        cvt_rni_s32(a) -> U; cvt_rzi_s32(a) -> U; cvt_s32_f32(a) -> F; cvt_u32_f32(a) -> F;
    }
    fn cond<const N: usize>(
        &mut self,
        c: V,
        then: impl FnOnce(&mut Self) -> [V; N],
        otherwise: impl FnOnce(&mut Self) -> [V; N],
    ) -> [V; N] {
        self.blocks.push(vec![]);
        let then_out = then(self);
        let then_body = self.blocks.pop().unwrap();
        self.blocks.push(vec![]);
        let else_out = otherwise(self);
        let else_body = self.blocks.pop().unwrap();
        let out: [V; N] = std::array::from_fn(|_| self.fresh());
        self.blocks.last_mut().unwrap().push(Node::Cond {
            c,
            then_body,
            then_out: then_out.to_vec(),
            else_body,
            else_out: else_out.to_vec(),
            out: out.to_vec(),
        });
        out
    }
}

/// Runs a recorded program on the Native ops, every value held as its 32 bits.
fn run(body: &[Node], env: &mut HashMap<V, u32>, counts: &mut HashMap<&'static str, usize>) {
    let n = &mut Native;
    for node in body {
        match node {
            Node::Const(v, bits) => {
                env.insert(*v, *bits);
            }
            Node::Op(v, name, args) => {
                *counts.entry(name).or_default() += 1;
                let a: Vec<u32> = args.iter().map(|x| env[x]).collect();
                let f = |i: usize| f32::from_bits(a[i]);
                let p = |i: usize| a[i] != 0;
                let fb = |x: f32| x.to_bits();
                let pb = |x: bool| x as u32;
                let r = match *name {
                    "fadd" => fb(n.fadd(f(0), f(1))),
                    "fsub" => fb(n.fsub(f(0), f(1))),
                    "fmul" => fb(n.fmul(f(0), f(1))),
                    "fdiv" => fb(n.fdiv(f(0), f(1))),
                    "ffma" => fb(n.ffma(f(0), f(1), f(2))),
                    "fsqrt" => fb(n.fsqrt(f(0))),
                    "fneg" => fb(n.fneg(f(0))),
                    "fabs" => fb(n.fabs(f(0))),
                    "fmin" => fb(n.fmin(f(0), f(1))),
                    "fmax" => fb(n.fmax(f(0), f(1))),
                    "frint" => fb(n.frint(f(0))),
                    "feq" => pb(n.feq(f(0), f(1))),
                    "fne" => pb(n.fne(f(0), f(1))),
                    "flt" => pb(n.flt(f(0), f(1))),
                    "fle" => pb(n.fle(f(0), f(1))),
                    "fgt" => pb(n.fgt(f(0), f(1))),
                    "fge" => pb(n.fge(f(0), f(1))),
                    "fis_nan" => pb(n.fis_nan(f(0))),
                    "select" | "select_u" => {
                        if p(0) {
                            a[1]
                        } else {
                            a[2]
                        }
                    }
                    "pand" => pb(p(0) && p(1)),
                    "por" => pb(p(0) || p(1)),
                    "pnot" => pb(!p(0)),
                    "f_to_bits" | "f_from_bits" => a[0],
                    "uadd" => n.uadd(a[0], a[1]),
                    "usub" => n.usub(a[0], a[1]),
                    "umul_lo" => n.umul_lo(a[0], a[1]),
                    "umul_hi" => n.umul_hi(a[0], a[1]),
                    "ushl" => n.ushl(a[0], a[1]),
                    "ushr" => n.ushr(a[0], a[1]),
                    "sshr" => n.sshr(a[0], a[1]),
                    "uand" => a[0] & a[1],
                    "uor" => a[0] | a[1],
                    "uxor" => a[0] ^ a[1],
                    "unot" => !a[0],
                    "ueq" => pb(a[0] == a[1]),
                    "une" => pb(a[0] != a[1]),
                    "ult" => pb(n.ult(a[0], a[1])),
                    "ugt" => pb(n.ugt(a[0], a[1])),
                    "slt" => pb(n.slt(a[0], a[1])),
                    "sle" => pb(n.sle(a[0], a[1])),
                    "sgt" => pb(n.sgt(a[0], a[1])),
                    "sge" => pb(n.sge(a[0], a[1])),
                    "cvt_rni_s32" => n.cvt_rni_s32(f(0)),
                    "cvt_rzi_s32" => n.cvt_rzi_s32(f(0)),
                    "cvt_s32_f32" => fb(n.cvt_s32_f32(a[0])),
                    "cvt_u32_f32" => fb(n.cvt_u32_f32(a[0])),
                    other => panic!("op {other} is not a MathOps method"),
                };
                env.insert(*v, r);
            }
            Node::Cond {
                c,
                then_body,
                then_out,
                else_body,
                else_out,
                out,
            } => {
                *counts.entry("cond").or_default() += 1;
                let (body, res) = if env[c] != 0 {
                    (then_body, then_out)
                } else {
                    (else_body, else_out)
                };
                run(body, env, counts);
                for (o, r) in out.iter().zip(res) {
                    env.insert(*o, env[r]);
                }
            }
        }
    }
}

/// Records `f` on symbolic inputs, then checks the program against `native` on `inputs`.
fn check(
    name: &str,
    arity: usize,
    f: fn(&mut Recorder, &[V]) -> V,
    native: fn(&[f32]) -> f32,
    inputs: &[Vec<f32>],
) {
    let mut rec = Recorder::new();
    let args: Vec<V> = (0..arity).map(|_| rec.fresh()).collect();
    let out = f(&mut rec, &args);
    let program = rec.blocks.pop().unwrap();
    assert!(!program.is_empty());
    let mut total = HashMap::new();
    for x in inputs {
        let mut env = HashMap::new();
        for (a, v) in args.iter().zip(x) {
            env.insert(*a, v.to_bits());
        }
        let mut counts = HashMap::new();
        run(&program, &mut env, &mut counts);
        let got = f32::from_bits(env[&out]);
        let want = native(x);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "{name}({x:?}): recorded program gives {got:e}, Native gives {want:e}"
        );
        for (k, c) in counts {
            *total.entry(k).or_insert(0) += c;
        }
    }
    let mut ops: Vec<_> = total.into_iter().collect();
    ops.sort();
    println!("{name}: ops executed over {} inputs: {ops:?}", inputs.len());
}

fn samples() -> Vec<Vec<f32>> {
    let mut v: Vec<Vec<f32>> = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        3.0,
        1e-3,
        1e-40,
        80.0,
        -90.0,
        -100.0,
        1e5,
        1e6 - 0.5,
        1_048_576.0,
        3e7,
        1e30,
        -1e30,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        std::f32::consts::FRAC_PI_2,
        355.0,
        16_367_173.0 * 2f32.powi(72),
    ]
    .iter()
    .map(|x| vec![*x])
    .collect();
    v.extend(
        (1..200).map(|i| vec![(i as f32 * 1.37).powi(3) * if i % 2 == 0 { 1.0 } else { -1.0 }]),
    );
    v
}

#[test]
fn recorded_programs_match_native() {
    let s = samples();
    check(
        "sin",
        1,
        |o, a| tm::sin(o, a[0]),
        |x| tm::sin(&mut Native, x[0]),
        &s,
    );
    check(
        "cos",
        1,
        |o, a| tm::cos(o, a[0]),
        |x| tm::cos(&mut Native, x[0]),
        &s,
    );
    check(
        "exp",
        1,
        |o, a| tm::exp(o, a[0]),
        |x| tm::exp(&mut Native, x[0]),
        &s,
    );
    check(
        "log",
        1,
        |o, a| tm::log(o, a[0]),
        |x| tm::log(&mut Native, x[0]),
        &s,
    );
    check(
        "rsqrt",
        1,
        |o, a| tm::rsqrt(o, a[0]),
        |x| tm::rsqrt(&mut Native, x[0]),
        &s,
    );
    check(
        "tanh",
        1,
        |o, a| tm::tanh(o, a[0]),
        |x| tm::tanh(&mut Native, x[0]),
        &s,
    );
    check(
        "sigmoid",
        1,
        |o, a| tm::sigmoid(o, a[0]),
        |x| tm::sigmoid(&mut Native, x[0]),
        &s,
    );
    check(
        "silu",
        1,
        |o, a| tm::silu(o, a[0]),
        |x| tm::silu(&mut Native, x[0]),
        &s,
    );
    check(
        "exp_f32",
        1,
        |o, a| tm::exp_f32(o, a[0]),
        |x| tm::exp_f32(&mut Native, x[0]),
        &s,
    );
    check(
        "exp_f32_nonpos",
        1,
        |o, a| tm::exp_f32_nonpos(o, a[0]),
        |x| tm::exp_f32_nonpos(&mut Native, x[0]),
        &s,
    );
    check(
        "silu_f32",
        1,
        |o, a| tm::silu_f32(o, a[0]),
        |x| tm::silu_f32(&mut Native, x[0]),
        &s,
    );
    check(
        "erf",
        1,
        |o, a| tm::erf(o, a[0]),
        |x| tm::erf(&mut Native, x[0]),
        &s,
    );
    let pairs: Vec<Vec<f32>> = s
        .iter()
        .flat_map(|x| [0.5f32, -3.0, 0.015625, 2.0, f32::INFINITY].map(|y| vec![x[0], y]))
        .chain((0..=64).map(|i| vec![1e6, i as f32 / 64.0]))
        .collect();
    check(
        "pow",
        2,
        |o, a| tm::pow(o, a[0], a[1]),
        |x| tm::pow(&mut Native, x[0], x[1]),
        &pairs,
    );
    check(
        "fmod",
        2,
        |o, a| tm::fmod(o, a[0], a[1]),
        |x| tm::fmod(&mut Native, x[0], x[1]),
        &pairs,
    );
}

#[test]
fn sin_program_takes_both_reductions() {
    // The Payne-Hanek arm is only reachable through `cond`: large and small inputs must run
    // different arms of the same recorded program.
    let mut rec = Recorder::new();
    let x = rec.fresh();
    let out = tm::sin(&mut rec, x);
    let program = rec.blocks.pop().unwrap();
    let conds = program
        .iter()
        .filter(|n| matches!(n, Node::Cond { .. }))
        .count();
    assert_eq!(conds, 1, "sin has exactly one branch (the reduction)");
    for (input, umul) in [(1.0f32, false), (1e30, true)] {
        let mut env = HashMap::from([(x, input.to_bits())]);
        let mut counts = HashMap::new();
        run(&program, &mut env, &mut counts);
        assert_eq!(counts.contains_key("umul_hi"), umul, "input {input}");
        assert_eq!(env[&out], tm::sin(&mut Native, input).to_bits());
    }
}
