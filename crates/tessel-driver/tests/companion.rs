//! A `fn`'s generated forward and gradient steps: they load and compile, the forward step
//! computes the `fn`, and the backward step's gradient agrees with central finite
//! differences of the forward step (f32, on the CPU executor).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessel_driver::companion::{BACKWARD, FORWARD};
use tessel_driver::{Config, Error, RequestError, Source, Weights};
use tessel_ir::DType;
use tessel_ref::Tensor;

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-companion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// Loads `file`, generates `fn name`'s companion into a file beside it, and loads that.
fn companion(file: &Path, name: &str) -> (Source, Vec<bool>) {
    let src = Source::load(file, false).expect("loads");
    let import = file.canonicalize().unwrap().display().to_string();
    let c = src
        .grad_companion(name, &import, None)
        .expect("a companion");
    let generated = scratch(&format!("{name}.companion.tsl"), &c.text);
    (
        Source::load(&generated, false).expect("the generated source loads"),
        c.differentiable,
    )
}

const MLP: &str = "\
fn mlp(x: f32[T, 6], w: f32[5, 6], ids: i32[T], g: f32[5]) -> f32[T, 5] {
    let h = x @ w^T;
    silu(h) * g + f32(ids)[:, None] * 0.25
}
step unrelated(a: f32[3]) -> f32[3] { a }
";

#[test]
fn the_backward_step_agrees_with_finite_differences() {
    let file = scratch("mlp.tsl", MLP);
    let (src, differentiable) = companion(&file, "mlp");
    assert_eq!(differentiable, [true, true, false, true]);
    let config = Config {
        dims: BTreeMap::from([("T".to_string(), 3)]),
        ..Config::default()
    };
    let fwd = src
        .compile_step(FORWARD, &config, &Weights::none())
        .expect("forward");
    let bwd = src
        .compile_step(BACKWARD, &config, &Weights::none())
        .expect("backward");
    let ty = |step: &tessel_driver::Step, i: usize| {
        let p = &step.compiled.program;
        p.buffers[p.inputs[i].1].ty.clone()
    };
    let x = Tensor::random(ty(&fwd, 0), 1);
    let w = Tensor::random(ty(&fwd, 1), 2);
    let ids = Tensor::from_i32(vec![3], &[0, 5, -2]);
    let g = Tensor::random(ty(&fwd, 3), 3);
    let dy = Tensor::random(ty(&bwd, 4), 4);
    let grads = bwd
        .run_executor(&[x.clone(), w.clone(), ids.clone(), g.clone(), dy.clone()])
        .expect("runs");
    assert_eq!(grads.len(), 3, "dx, dw, dg");
    // d<dy, f(x)>/dx[i] by central differences, for every element of x, w and g.
    let loss = |x: &Tensor, w: &Tensor, g: &Tensor| -> f64 {
        let y = fwd
            .run_executor(&[x.clone(), w.clone(), ids.clone(), g.clone()])
            .expect("runs")
            .remove(0);
        y.to_f64_vec()
            .iter()
            .zip(dy.to_f64_vec())
            .map(|(a, b)| a * b)
            .sum()
    };
    let h = 1e-2f32;
    for (which, grad) in grads.iter().enumerate() {
        let base = [&x, &w, &g][which];
        let mut worst = 0f64;
        for i in 0..base.numel() {
            let shifted = |delta: f32| {
                let mut v = base.to_f32_vec();
                v[i] += delta;
                let t = Tensor::from_f32(DType::F32, base.ty.shape.0.clone(), &v);
                match which {
                    0 => loss(&t, &w, &g),
                    1 => loss(&x, &t, &g),
                    _ => loss(&x, &w, &t),
                }
            };
            let numeric = (shifted(h) - shifted(-h)) / (2.0 * h as f64);
            let analytic = grad.get_f64(i);
            worst = worst.max((numeric - analytic).abs() / (1.0 + numeric.abs()));
        }
        assert!(
            worst < 2e-3,
            "gradient {which}: worst relative difference {worst}"
        );
    }
}

#[test]
fn a_fn_without_a_companion_is_a_request_error() {
    let file = scratch(
        "bad.tsl",
        "fn two(x: f32[T]) -> (f32[T], f32[T]) { (x, x) }\nfn ints(i: i32[T]) -> i32[T] { i }\n",
    );
    let src = Source::load(&file, false).expect("loads");
    for (name, why) in [
        ("nope", "its `fn`s are: two, ints"),
        ("two", "it has 2 results"),
        ("ints", "no floating-point parameter"),
    ] {
        match src.grad_companion(name, "x.tsl", None) {
            Err(Error::Request(e @ RequestError::Companion { .. })) => {
                assert!(e.to_string().contains(why), "{e}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn a_seed_named_like_a_parameter_is_renamed() {
    let file = scratch(
        "seed.tsl",
        "fn f(grad_output: f32[T]) -> f32[T] { grad_output * grad_output }\n",
    );
    let (src, _) = companion(&file, "f");
    let config = Config {
        dims: BTreeMap::from([("T".to_string(), 4)]),
        ..Config::default()
    };
    let bwd = src
        .compile_step(BACKWARD, &config, &Weights::none())
        .expect("backward");
    let x = Tensor::from_f32(DType::F32, vec![4], &[1.0, -2.0, 0.5, 3.0]);
    let dy = Tensor::from_f32(DType::F32, vec![4], &[1.0, 1.0, 2.0, -1.0]);
    let dx = bwd.run_executor(&[x, dy]).expect("runs").remove(0);
    assert_eq!(dx.to_f32_vec(), [2.0, -4.0, 2.0, -6.0]);
}

#[test]
fn wrt_selects_the_gradients() {
    let file = scratch("mlp_wrt.tsl", MLP);
    let src = Source::load(&file, false).expect("loads");
    let import = file.canonicalize().unwrap().display().to_string();
    let wrt = ["x".to_string(), "g".to_string()];
    let c = src
        .grad_companion("mlp", &import, Some(&wrt))
        .expect("a companion");
    assert_eq!(c.differentiable, [true, false, false, true]);
    assert!(c.text.contains("wrt: [x, g]"), "{}", c.text);
    for (bad, why) in [
        (vec!["ids".to_string()], "`ids` is not floating-point"),
        (vec!["nope".to_string()], "no parameter `nope`"),
        (vec![], "no parameter named"),
    ] {
        let e = src.grad_companion("mlp", &import, Some(&bad)).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    // The pair compiles, and its backward returns two gradients.
    let generated = scratch("mlp_wrt.companion.tsl", &c.text);
    let src = Source::load(&generated, false).expect("loads");
    let config = Config {
        dims: BTreeMap::from([("T".to_string(), 2)]),
        ..Config::default()
    };
    let bwd = src
        .compile_step(BACKWARD, &config, &Weights::none())
        .expect("backward");
    assert_eq!(bwd.compiled.program.outputs.len(), 2);
}
