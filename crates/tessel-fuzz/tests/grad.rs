//! Gradient programs (issue 18, "Fuzzing"): `grad` against central finite differences on
//! the f64 oracle, and the compiled backward against the reference, on generated programs
//! (`gen::Config::grad`, `fd`) — and the finite-difference judge must catch a wrong
//! gradient, so that its passes mean something.

use std::collections::BTreeMap;
use tessel_fuzz::fd::{fd_inputs, has_grad, judge, judge_gradients};
use tessel_fuzz::gen::{generate, Config};
use tessel_fuzz::{fuzz, Options, Summary};
use tessel_ir::graph::{Graph, Op};
use tessel_passes::Profile;
use tessel_ref::{eval_graph, OracleTensor, Tensor};

fn run(first: u64, count: u64, config: Config) -> Summary {
    let opts = Options {
        first,
        count,
        profiles: vec![Profile::Exact, Profile::Invariant, Profile::Fast],
        config,
        device: None,
        shrink_budget: 300,
    };
    fuzz(&opts, |_, _| {})
}

fn assert_clean(s: &Summary) {
    let mut report = String::new();
    for f in &s.findings {
        report += &format!(
            "\nseed {} ({}): {}\n{}\n",
            f.seed,
            f.profile.name(),
            f.outcome.kind(),
            f.regression_source()
        );
    }
    assert!(
        s.findings.is_empty(),
        "{} defects:{report}",
        s.findings.len()
    );
    assert!(
        s.rejected.is_empty(),
        "{} programs rejected by the front end, first: {:?}",
        s.rejected.len(),
        s.rejected.first()
    );
    assert_eq!(s.passed, s.programs);
}

/// 400 gradient programs, every profile by turns: no defect, none refused, and the judge
/// compared thousands of gradient elements (a judge that compares nothing passes
/// everything). Of seeds 0..400, 9000 or so are compared and a few dozen are not (a kink
/// within ±h).
#[test]
fn random_gradient_programs_give_right_gradients() {
    let s = run(0, 400, Config::grad());
    assert_clean(&s);
    eprintln!(
        "{} compared, {} inconclusive",
        s.fd_checked, s.fd_inconclusive
    );
    assert!(s.fd_checked >= 6000, "{} compared", s.fd_checked);
    assert!(
        s.fd_inconclusive * 50 < s.fd_checked,
        "{} of {} inconclusive",
        s.fd_inconclusive,
        s.fd_checked
    );
}

/// 6 gradient programs around an attention block (`Config::grad_attention`): the
/// attention's gradient, fused or not, against finite differences and the compiled
/// backward against the reference; some of them compile to a fused attention kernel (the
/// forward, which `grad` differentiates by the attention rule after the `attention` pass).
/// Of seeds 0..6 (4 s in the test profile), one does, and 433 gradient elements are
/// compared.
#[test]
fn random_gradient_programs_through_attention_give_right_gradients() {
    let s = run(0, 6, Config::grad_attention());
    assert_clean(&s);
    eprintln!(
        "{} with a fused attention kernel; {} compared, {} inconclusive",
        s.fused_attention, s.fd_checked, s.fd_inconclusive
    );
    assert!(s.fused_attention >= 1, "{} fused", s.fused_attention);
    assert!(s.fd_checked >= 300, "{} compared", s.fd_checked);
}

/// A generated program's graph from `check`, its inputs (on the judge's grid) and the
/// oracle's values of its outputs, gradients included.
fn case(seed: u64) -> (Graph, Vec<Tensor>, Vec<OracleTensor>) {
    let p = generate(seed, &Config::grad());
    let m = tessel_syntax::parse(&p.source_body()).expect("generated programs parse");
    let dims: BTreeMap<String, u64> = p.dim_bindings().into_iter().collect();
    let g = tessel_passes::check::run(&m, "fuzz", &dims).expect("and check");
    assert!(has_grad(&g));
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, v))| Tensor::random(g.ty(*v).clone(), seed * 1000 + i as u64))
        .collect();
    let inputs = fd_inputs(&inputs);
    let diff = tessel_passes::grad::run(&g).expect("grad runs");
    let outs = eval_graph(&diff, &inputs).expect("the oracle runs");
    (g, inputs, outs)
}

/// Wrong gradients of the kinds a wrong rule gives — one element off by 0.1% of the peak,
/// every element 0.01% too large, the elements shifted by one place — are caught in at
/// least 95% of 150 generated programs' gradients, and the right ones pass in all.
#[test]
fn the_judge_catches_wrong_gradients() {
    let (mut tried, mut caught) = ([0u32; 3], [0u32; 3]);
    for seed in 0..150 {
        let (g, inputs, outs) = case(seed);
        let right = judge_gradients(&g, &inputs, &outs, seed).expect("judged");
        assert!(right.pass(), "seed {seed}: {:?}", right.wrong);
        for (i, (_, v)) in g.outputs.iter().enumerate() {
            if !matches!(g.ops[*v], Op::Grad { .. }) {
                continue;
            }
            let data = &outs[i].data;
            let peak = data.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if peak == 0.0 {
                continue;
            }
            let mut one = data.clone();
            one[0] += 1e-3 * peak;
            let scaled: Vec<f64> = data.iter().map(|x| x * (1.0 + 1e-4)).collect();
            let mut shifted = data.clone();
            shifted.rotate_right(1);
            for (k, wrong) in [one, scaled, shifted].into_iter().enumerate() {
                if wrong == *data {
                    continue; // (a shift of equal elements is no error)
                }
                let mut o = outs.clone();
                o[i].data = wrong;
                tried[k] += 1;
                let r = judge_gradients(&g, &inputs, &o, seed).expect("judged");
                caught[k] += !r.pass() as u32;
            }
        }
    }
    eprintln!("caught {caught:?} of {tried:?}");
    for k in 0..3 {
        assert!(tried[k] >= 100, "{} gradients mutated", tried[k]);
        assert!(
            caught[k] as f64 >= 0.95 * tried[k] as f64,
            "mutation {k}: {} of {} caught",
            caught[k],
            tried[k]
        );
    }
}

/// A hand-written backward with a wrong rule (`d sin = -cos`, and a transposed weight
/// gradient) fails; the right one passes — fed to the judge as the gradients of the
/// `grad(...)` step.
#[test]
fn a_wrong_backward_graph_fails() {
    let src = "fn f(x: f32[3, 5], w: f32[4, 5]) -> f32[3, 4] { sin(x) @ w^T }\n\
               step fuzz(x: f32[3, 5], w: f32[4, 5], dy: f32[3, 4]) -> (f32[3, 5], f32[4, 5]) {\n\
                   grad(f, x, w, wrt: [x, w], grad_output: dy)\n}\n\
               step right(x: f32[3, 5], w: f32[4, 5], dy: f32[3, 4]) -> (f32[3, 5], f32[4, 5]) {\n\
                   ((dy @ w) * cos(x), dy^T @ sin(x))\n}\n\
               step wrong_rule(x: f32[3, 5], w: f32[4, 5], dy: f32[3, 4]) -> (f32[3, 5], f32[4, 5]) {\n\
                   ((dy @ w) * -cos(x), dy^T @ sin(x))\n}\n\
               step wrong_layout(x: f32[3, 5], w: f32[4, 5], dy: f32[3, 4]) -> (f32[3, 5], f32[4, 5]) {\n\
                   ((dy @ w) * cos(x), reshape((sin(x)^T @ dy), [4, 5]))\n}\n";
    let m = tessel_syntax::parse(src).expect("parses");
    let dims = BTreeMap::new();
    let g = tessel_passes::check::run(&m, "fuzz", &dims).expect("checks");
    let inputs: Vec<Tensor> = (0..3u64)
        .map(|i| Tensor::random(g.ty(g.inputs[i as usize].1).clone(), 40 + i))
        .collect();
    let inputs = fd_inputs(&inputs);
    assert!(judge(&g, &inputs, 1).expect("judged").pass());
    for (step, pass) in [
        ("right", true),
        ("wrong_rule", false),
        ("wrong_layout", false),
    ] {
        let h = tessel_passes::check::run(&m, step, &dims).expect("checks");
        let outs = eval_graph(&h, &inputs).expect("the oracle runs");
        let r = judge_gradients(&g, &inputs, &outs, 1).expect("judged");
        assert_eq!(r.pass(), pass, "{step}: {:?}", r.wrong);
        assert_eq!(r.checked, 15 + 20, "{step}: every element compared");
    }
}

/// The judge's convergence test (`fd::converges`): on a smooth function with curvature in
/// every direction, every element is still compared and a gradient one element off by 0.1%
/// of the peak is still caught; on `sin(exp(a1 @ a2ᵀ))` of regression 105706, where
/// `exp(t)·h` is far above 1 and the differences cannot follow the oscillation, the
/// elements whose differences are samples of it are not compared — and the right gradient
/// passes, where before the test it was called wrong.
#[test]
fn differences_that_do_not_converge_are_not_compared() {
    // Smooth: every element of both gradients compared, a wrong one caught.
    let src = "fn f(x: f32[3, 5], w: f32[4, 5]) -> f32 {\n\
                   mean(reshape(exp(sin(x * 2.0) @ w^T) * tanh(x[:, 0:4]), [-1]), axis: 0)\n}\n\
               step fuzz(x: f32[3, 5], w: f32[4, 5]) -> (f32[3, 5], f32[4, 5]) {\n\
                   grad(f, x, w, wrt: [x, w])\n}\n";
    let m = tessel_syntax::parse(src).expect("parses");
    let dims = BTreeMap::new();
    let g = tessel_passes::check::run(&m, "fuzz", &dims).expect("checks");
    let inputs: Vec<Tensor> = (0..2u64)
        .map(|i| Tensor::random(g.ty(g.inputs[i as usize].1).clone(), 70 + i))
        .collect();
    let inputs = fd_inputs(&inputs);
    let diff = tessel_passes::grad::run(&g).expect("grad runs");
    let outs = eval_graph(&diff, &inputs).expect("the oracle runs");
    let right = judge_gradients(&g, &inputs, &outs, 1).expect("judged");
    assert!(right.pass(), "{:?}", right.wrong);
    assert_eq!(
        (right.checked, right.inconclusive),
        (15 + 20, 0),
        "every element compared"
    );
    for k in 0..2 {
        let peak = outs[k].data.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for e in [0, 7 % outs[k].data.len()] {
            let mut o = outs.clone();
            o[k].data[e] += 1e-3 * peak;
            let r = judge_gradients(&g, &inputs, &o, 1).expect("judged");
            assert!(!r.pass(), "gradient {k}, element {e} moved: not caught");
            assert_eq!(r.checked, 35);
        }
    }

    // Regression 105706, on the inputs the regression test gives it.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/programs/regressions/fuzz_105706_wrong_answer.tsl"
    );
    let src = std::fs::read_to_string(path).expect("the regression file");
    let h = tessel_fuzz::corpus::header(&src).expect("its header");
    let m = tessel_syntax::parse(&src).expect("parses");
    let dims: BTreeMap<String, u64> = h.dims.iter().cloned().collect();
    let g = tessel_passes::check::run(&m, "fuzz", &dims).expect("checks");
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, v))| Tensor::random(g.ty(*v).clone(), h.seed * 1000 + i as u64))
        .collect();
    let r = judge(&g, &fd_inputs(&inputs), h.seed).expect("judged");
    eprintln!("105706: {r:?}");
    assert!(r.pass(), "{:?}", r.wrong);
    assert!(r.inconclusive >= 10, "{r:?}");
}
