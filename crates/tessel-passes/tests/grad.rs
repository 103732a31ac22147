//! `grad` against central finite differences on the f64 oracle, one program per rule.
//!
//! Each case is a `fn f` and the parameters to differentiate by. The harness makes two
//! steps of it — `fwd(params.., dy) = f(params..)` and `bwd(params.., dy) =
//! grad(f, params.., wrt: [..], grad_output: dy)` — differentiates `bwd` (the `grad` pass),
//! and evaluates both on the oracle, which computes in f64 with nothing rounded in between
//! (so the casts of a bf16 program do not disturb the differences). Every element of every
//! gradient is compared with the Richardson-extrapolated central difference of
//! `Σ dy · f` (steps 2^-9 and 2^-10, error O(h^4)); inputs lie on a grid of 2^-7 in
//! [-1, 1], so `x ± h` is exact in f32.

use std::collections::BTreeMap;

use tessel_ir::DType;
use tessel_passes::{check, grad};
use tessel_ref::{eval_graph, Tensor};

/// One parameter: name and declared type (`f32[3, 5]`).
struct Param {
    name: &'static str,
    ty: &'static str,
}

fn p(name: &'static str, ty: &'static str) -> Param {
    Param { name, ty }
}

/// `(dims, values)` of a type like `f32[3, 5]`.
fn dims_of(ty: &str) -> Vec<u64> {
    let inner = ty.split('[').nth(1).unwrap_or("]").trim_end_matches(']');
    inner
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().expect("a literal dim"))
        .collect()
}

/// Distinct grid values in [-1, 1): `((i·37 + 11·seed) mod 256 - 128) · 2^-7` for
/// `n <= 256`, scaled by `scale`.
fn grid(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 37 + 11 * seed + 5) % 256) as f32 - 128.0) / 128.0 * scale)
        .collect()
}

fn build(src: &str, step: &str) -> tessel_ir::graph::Graph {
    let m = tessel_syntax::parse(src).unwrap_or_else(|d| panic!("parse: {d:?}\n{src}"));
    match check::run(&m, step, &BTreeMap::new()) {
        Ok(g) => g,
        Err(ds) => {
            let text: Vec<String> = ds.iter().map(|d| d.render("case", src, false)).collect();
            panic!("{step} does not check:\n{}\n{src}", text.join("\n"));
        }
    }
}

/// Checks `grad` of `f` (whose result has type `ret`) by every parameter in `wrt` against
/// finite differences, with inputs scaled by `scale`; `tol` is the allowed error relative to
/// the gradient's largest magnitude.
fn fd_case(f: &str, params: &[Param], ret: &str, wrt: &[&str], scale: f32, tol: f64) {
    let sig: Vec<String> = params
        .iter()
        .map(|q| format!("{}: {}", q.name, q.ty))
        .collect();
    let names: Vec<&str> = params.iter().map(|q| q.name).collect();
    let wrt_types: Vec<&str> = wrt
        .iter()
        .map(|w| {
            params
                .iter()
                .find(|q| q.name == *w)
                .expect("a parameter")
                .ty
        })
        .collect();
    let grads_ty = if wrt.len() == 1 {
        wrt_types[0].to_string()
    } else {
        format!("({})", wrt_types.join(", "))
    };
    let src = format!(
        "{f}\nstep fwd({sig}, dy: {ret}) -> {ret} {{ f({args}) }}\n\
         step bwd({sig}, dy: {ret}) -> {grads_ty} {{ grad(f, {args}, wrt: [{wrt}], grad_output: dy) }}\n",
        sig = sig.join(", "),
        args = names.join(", "),
        wrt = wrt.join(", "),
    );
    let fwd = build(&src, "fwd");
    let bwd = build(&src, "bwd");
    tessel_ir::verify::verify_graph(&bwd, None, None).expect("bwd verifies");
    let diff = grad::run(&bwd).expect("grad runs");
    if let Err(e) = tessel_ir::verify::verify_graph(&diff, None, None) {
        panic!(
            "the differentiated graph does not verify: {e:?}\n{}",
            tessel_ir::text::write_graph(&diff, None, None)
        );
    }
    assert!(
        !diff
            .ops
            .values()
            .any(|op| matches!(op, tessel_ir::graph::Op::Grad { .. })),
        "a placeholder survived"
    );
    // Inputs: every parameter (f32 on the grid), then dy.
    let mut vals: Vec<Vec<f32>> = params
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let n: u64 = dims_of(q.ty).iter().product();
            grid(n as usize, i, scale)
        })
        .collect();
    let ndy: u64 = dims_of(ret).iter().product();
    vals.push(grid(ndy as usize, 7, 1.0));
    let mut types: Vec<&str> = params.iter().map(|q| q.ty).collect();
    types.push(ret);
    let tensors = |vals: &[Vec<f32>]| -> Vec<Tensor> {
        vals.iter()
            .zip(&types)
            .map(|(v, t)| Tensor::from_f32(DType::F32, dims_of(t), v))
            .collect()
    };
    let grads = eval_graph(&diff, &tensors(&vals)).expect("oracle of bwd");
    let loss = |vals: &[Vec<f32>]| -> f64 {
        let out = eval_graph(&fwd, &tensors(vals)).expect("oracle of fwd");
        let dy = &vals[vals.len() - 1];
        out[0].data.iter().zip(dy).map(|(y, d)| y * *d as f64).sum()
    };
    for (k, w) in wrt.iter().enumerate() {
        let pi = params
            .iter()
            .position(|q| q.name == *w)
            .expect("a parameter");
        let gk = &grads[k].data;
        let peak = gk.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-3);
        for i in 0..vals[pi].len() {
            let central = |h: f32| -> f64 {
                let mut plus = vals.clone();
                plus[pi][i] += h;
                let mut minus = vals.clone();
                minus[pi][i] -= h;
                (loss(&plus) - loss(&minus)) / (2.0 * h as f64)
            };
            let (d1, d2) = (central(1.0 / 512.0), central(1.0 / 1024.0));
            let fd = (4.0 * d2 - d1) / 3.0;
            let err = (gk[i] - fd).abs() / peak;
            assert!(
                err <= tol,
                "d/d{w}[{i}]: grad {} vs finite differences {fd} (relative error {err:.2e} > {tol:.0e})\n{src}",
                gk[i]
            );
        }
    }
}

const TOL: f64 = 1e-6;

#[test]
fn matmul_forms() {
    fd_case(
        "fn f(x: f32[3, 5], w: f32[4, 5]) -> f32[3, 4] { x @ w^T }",
        &[p("x", "f32[3, 5]"), p("w", "f32[4, 5]")],
        "f32[3, 4]",
        &["x", "w"],
        1.0,
        TOL,
    );
    fd_case(
        "fn f(x: f32[2, 3, 5], w: f32[5, 4]) -> f32[2, 3, 4] { x @ w }",
        &[p("x", "f32[2, 3, 5]"), p("w", "f32[5, 4]")],
        "f32[2, 3, 4]",
        &["x", "w"],
        1.0,
        TOL,
    );
    fd_case(
        "fn f(a: f32[2, 3, 4], b: f32[2, 4, 3]) -> f32[2, 3, 3] { a @ b }",
        &[p("a", "f32[2, 3, 4]"), p("b", "f32[2, 4, 3]")],
        "f32[2, 3, 3]",
        &["a", "b"],
        1.0,
        TOL,
    );
    // The LoRA delta's 16-bit reads: f32(u) @ f32(b)^T (exact on the oracle, which rounds
    // nothing).
    fd_case(
        "fn f(x: f32[5, 6], a: f32[2, 6], b: f32[3, 2]) -> f32[5, 3] {\n\
           let u = bf16(x) @ bf16(a)^T;\n\
           (f32(u) @ f32(bf16(b))^T) * 0.5\n}",
        &[
            p("x", "f32[5, 6]"),
            p("a", "f32[2, 6]"),
            p("b", "f32[3, 2]"),
        ],
        "f32[5, 3]",
        &["x", "a", "b"],
        1.0,
        TOL,
    );
}

#[test]
fn elementwise_math() {
    for (body, scale) in [
        ("exp(x) * y", 1.0),
        ("log(x * x + 0.5) - y / (x * x + 1.0)", 1.0),
        ("sqrt(x * x + 0.25) * rsqrt(y * y + 0.5)", 1.0),
        ("sin(x) * cos(y) + tanh(x * y)", 1.0),
        ("sigmoid(x) - silu(y) + erf(x * y)", 2.0),
        ("gelu(x) + gelu(y, approximate: true)", 3.0),
        ("pow(x * x + 0.5, y)", 1.0),
        ("-abs(x - 0.3) * y", 1.0),
        ("maximum(x, y) + minimum(x, y * 0.5)", 1.0),
        ("fmod(x * 3.0, y + 2.0)", 1.0),
        ("floor(x + 0.3) * y + x", 1.0),
        ("where(x > 0.1, x * y, exp(y))", 1.0),
        ("clamp(x, -0.5, 0.5) * relu(y)", 1.0),
    ] {
        fd_case(
            &format!("fn f(x: f32[4, 5], y: f32[4, 5]) -> f32[4, 5] {{ {body} }}"),
            &[p("x", "f32[4, 5]"), p("y", "f32[4, 5]")],
            "f32[4, 5]",
            &["x", "y"],
            scale,
            TOL,
        );
    }
}

#[test]
fn reductions_and_softmax() {
    for body in [
        "sum(x * y, axis: 1, keep: true)",
        "mean(x, axis: 1, keep: true) * sum(y * y, axis: 1, keep: true)",
        "max(x, axis: 1, keep: true) + min(y, axis: 1, keep: true)",
        "logsumexp(x * 3.0, axis: 1, keep: true) * y[:, 0:1]",
        "sum(softmax(x * 2.0, axis: 1) * y, axis: 1, keep: true)",
        "sum(softmax(where(causal(4, 5), x, -inf), axis: -1) * y, axis: 1, keep: true)",
        "sum(cumsum(x, axis: 1) * y, axis: 1, keep: true)",
        "let (tv, ti) = topk(x, 2, axis: 1); sum(tv * y[:, 0:2], axis: 1, keep: true)",
    ] {
        fd_case(
            &format!("fn f(x: f32[4, 5], y: f32[4, 5]) -> f32[4, 1] {{ {body} }}"),
            &[p("x", "f32[4, 5]"), p("y", "f32[4, 5]")],
            "f32[4, 1]",
            &["x", "y"],
            1.0,
            TOL,
        );
    }
}

#[test]
fn shape_ops() {
    for body in [
        "let (a, b) = split(x, 2, axis: 1); concat(b * y[:, 0:3], a, axis: 1)",
        "reshape(permute(reshape(x, [2, 2, 6]), [2, 0, 1]), [4, 6]) * y",
        "x[1:3, :][None, :, :][0] * y[0:2, :]",
        "concat(x[:, 0:2], x[:, 4:6], axis: 1) * y[:, 0:4]",
    ] {
        let ret = if body.contains("y[0:2") {
            "f32[2, 6]"
        } else if body.contains("y[:, 0:4]") {
            "f32[4, 4]"
        } else {
            "f32[4, 6]"
        };
        fd_case(
            &format!("fn f(x: f32[4, 6], y: f32[4, 6]) -> {ret} {{ {body} }}"),
            &[p("x", "f32[4, 6]"), p("y", "f32[4, 6]")],
            ret,
            &["x", "y"],
            1.0,
            TOL,
        );
    }
}

#[test]
fn gathers_scatter_their_gradient() {
    fd_case(
        "fn f(e: f32[6, 3], w: f32[3, 3]) -> f32[4, 3] {\n\
           let ids = i32(iota(4) * 5 % 6 - 2);\n\
           e[ids] @ w\n}",
        &[p("e", "f32[6, 3]"), p("w", "f32[3, 3]")],
        "f32[4, 3]",
        &["e", "w"],
        1.0,
        TOL,
    );
    fd_case(
        "fn f(x: f32[3, 5]) -> f32[3, 4] {\n\
           let idx = i32(iota(4) * 3 % 5)[None, :] + i32(iota(3))[:, None] % 2;\n\
           take_along_axis(x, idx, axis: 1) * 2.0\n}",
        &[p("x", "f32[3, 5]")],
        "f32[3, 4]",
        &["x"],
        1.0,
        TOL,
    );
}

#[test]
fn layer_pieces() {
    // RMSNorm (HF order), RoPE on a table, SwiGLU — written as examples/lib writes them.
    fd_case(
        "fn f(x: f32[3, 8], g: f32[8]) -> f32[3, 8] {\n\
           let var = mean(x * x, axis: -1, keep: true);\n\
           g * (x * rsqrt(var + 0.000001))\n}",
        &[p("x", "f32[3, 8]"), p("g", "f32[8]")],
        "f32[3, 8]",
        &["x", "g"],
        1.0,
        TOL,
    );
    fd_case(
        "fn f(x: f32[3, 2, 4]) -> f32[3, 2, 4] {\n\
           let inv = 1.0 / pow(10000.0, f32(iota(2) * 2) / 4.0);\n\
           let ang = f32(iota(3))[:, None] * inv[None, :];\n\
           let c = cos(concat(ang, ang, axis: -1))[:, None, :];\n\
           let s = sin(concat(ang, ang, axis: -1))[:, None, :];\n\
           let (x1, x2) = split(x, 2, axis: -1);\n\
           x * c + concat(-x2, x1, axis: -1) * s\n}",
        &[p("x", "f32[3, 2, 4]")],
        "f32[3, 2, 4]",
        &["x"],
        1.0,
        TOL,
    );
    fd_case(
        "fn f(x: f32[3, 4], wg: f32[5, 4], wu: f32[5, 4], wd: f32[4, 5]) -> f32[3, 4] {\n\
           (silu(x @ wg^T) * (x @ wu^T)) @ wd^T\n}",
        &[
            p("x", "f32[3, 4]"),
            p("wg", "f32[5, 4]"),
            p("wu", "f32[5, 4]"),
            p("wd", "f32[4, 5]"),
        ],
        "f32[3, 4]",
        &["x", "wg", "wu", "wd"],
        1.0,
        TOL,
    );
}

#[test]
fn attention_as_written() {
    // softmax(mask(q·kᵀ·scale))·v with GQA (2 query heads per key head), causal.
    fd_case(
        "fn f(q: f32[4, 4, 3], k: f32[4, 2, 3], v: f32[4, 2, 3]) -> f32[4, 4, 3] {\n\
           let qh = permute(reshape(q, [4, 2, 2, 3]), [1, 2, 0, 3]);\n\
           let kh = permute(k, [1, 0, 2])[:, None];\n\
           let vh = permute(v, [1, 0, 2])[:, None];\n\
           let s = (qh @ kh^T) * 0.5;\n\
           let p = softmax(where(causal(4, 4), s, -inf), axis: -1);\n\
           reshape(permute(p @ vh, [2, 0, 1, 3]), [4, 4, 3])\n}",
        &[
            p("q", "f32[4, 4, 3]"),
            p("k", "f32[4, 2, 3]"),
            p("v", "f32[4, 2, 3]"),
        ],
        "f32[4, 4, 3]",
        &["q", "k", "v"],
        1.0,
        TOL,
    );
}

#[test]
fn parameters_not_listed_cost_nothing() {
    // d/dx only: no op of the backward reads w's gradient path (no matmul produces a
    // [4, 5] value).
    let src = "fn f(x: f32[3, 5], w: f32[4, 5]) -> f32[3, 4] { x @ w^T }\n\
               step bwd(x: f32[3, 5], w: f32[4, 5], dy: f32[3, 4]) -> f32[3, 5] { grad(f, x, w, wrt: [x], grad_output: dy) }";
    let g = grad::run(&build(src, "bwd")).unwrap();
    let matmuls = g
        .ops
        .iter()
        .filter(|(_, op)| matches!(op, tessel_ir::graph::Op::MatMul { .. }))
        .count();
    assert_eq!(
        matmuls,
        1,
        "{}",
        tessel_ir::text::write_graph(&g, None, None)
    );
}

#[test]
fn the_untaken_branch_of_where_gives_zero_not_nan() {
    // where(x > 0, log(x), 0) at x = 0 and sqrt at 0 behind a where; exp of a large
    // argument behind a where.
    let src = "fn f(x: f32[4]) -> f32 {\n\
                 let a = where(x > 0.0, log(x), 0.0);\n\
                 let b = where(x > 0.0, sqrt(x), 0.0);\n\
                 let c = where(x < 50.0, x, exp(x * 100.0));\n\
                 sum(a + b + c, axis: 0)\n}\n\
               step s(x: f32[4]) -> f32[4] { grad(f, x, wrt: [x]) }";
    let g = grad::run(&build(src, "s")).unwrap();
    let x = Tensor::from_f32(DType::F32, vec![4], &[0.0, -1.0, 4.0, 0.25]);
    let out = eval_graph(&g, &[x]).unwrap();
    let want = [1.0, 1.0, 1.0 + 0.25 + 0.25, 1.0 + 4.0 + 1.0];
    for (i, (&got, want)) in out[0].data.iter().zip(want).enumerate() {
        assert!(
            (got - want).abs() < 1e-12,
            "element {i}: {got} (want {want})"
        );
    }
}

#[test]
fn a_scalar_loss_needs_no_grad_output() {
    let src = "fn loss(x: f32[3], t: f32[3]) -> f32 { mean((x - t) * (x - t), axis: 0) }\n\
               step s(x: f32[3], t: f32[3]) -> f32[3] { grad(loss, x, t, wrt: [x]) }";
    let g = grad::run(&build(src, "s")).unwrap();
    let x = Tensor::from_f32(DType::F32, vec![3], &[1.0, 2.0, 3.0]);
    let t = Tensor::from_f32(DType::F32, vec![3], &[0.5, 2.0, 4.0]);
    let out = eval_graph(&g, &[x, t]).unwrap();
    // d/dx mean((x - t)²) = 2 (x - t) / 3
    let want = [1.0 / 3.0, 0.0, -2.0 / 3.0];
    for (got, want) in out[0].data.iter().zip(want) {
        assert!((got - want).abs() < 1e-7, "{got} vs {want}");
    }
}

#[test]
fn an_updates_rows_get_the_gradient_of_where_they_were_written() {
    // u = c with r² written at pos[b] + i along axis 1; d/dr Σu² = 4r³ where the row lands
    // inside the axis, 0 for a row past its end (pos = 4: row 1 of batch 1 falls at 5).
    let src = "fn f(c: f32[2, 5, 3], r: f32[2, 2, 3], pos: i32[2]) -> f32 {\n\
                 let u = update(c, r * r, at: pos, axis: 1);\n\
                 sum(sum(sum(u * u, axis: 2), axis: 1), axis: 0)\n}\n\
               step s(c: inout f32[2, 5, 3], r: f32[2, 2, 3], pos: i32[2]) -> f32[2, 2, 3] {\n\
                 grad(f, c, r, pos, wrt: [r])\n}";
    let g = grad::run(&build(src, "s")).unwrap();
    let rv = grid(12, 3, 1.0);
    let ins = [
        Tensor::from_f32(DType::F32, vec![2, 5, 3], &grid(30, 1, 1.0)),
        Tensor::from_f32(DType::F32, vec![2, 2, 3], &rv),
        Tensor::from_i32(vec![2], &[1, 4]),
    ];
    let out = eval_graph(&g, &ins).unwrap();
    for (i, (&got, &r)) in out[0].data.iter().zip(&rv).enumerate() {
        let want = if i >= 9 {
            0.0
        } else {
            4.0 * (r as f64).powi(3)
        };
        assert!(
            (got - want).abs() < 1e-12,
            "element {i}: {got} (want {want})"
        );
    }
}

#[test]
fn a_step_and_its_gradient_share_one_fused_attention() {
    // `y = f(q, k, v)` and `grad(f, ..)` inline f twice; decompose merges the two copies of
    // the attention (its logits' ops are the attentions' own and merge only among
    // themselves), so one kernel computes O.
    let src = "fn f(q: bf16[2, 8, 16], k: bf16[2, 8, 16], v: bf16[2, 8, 16]) -> bf16[2, 8, 16] {\n\
                 let s = bf16(f32(q @ k^T) * 0.25);\n\
                 let vis = iota(8)[None, :] <= iota(8)[:, None];\n\
                 bf16(softmax(where(vis, f32(s), -inf), axis: -1)) @ v\n}\n\
               step s(q: bf16[2, 8, 16], k: bf16[2, 8, 16], v: bf16[2, 8, 16], dy: bf16[2, 8, 16]) -> (bf16[2, 8, 16], bf16[2, 8, 16]) {\n\
                 (f(q, k, v), grad(f, q, k, v, wrt: [q], grad_output: dy))\n}";
    let g = build(src, "s");
    let g = tessel_passes::attention::run(&g, tessel_passes::Profile::Fast);
    let g = tessel_passes::decompose::run(&grad::run(&g).unwrap());
    let count = |f: fn(&tessel_ir::graph::Op) -> bool| g.ops.values().filter(|op| f(op)).count();
    let text = tessel_ir::text::write_graph(&g, None, None);
    assert_eq!(
        count(|op| matches!(op, tessel_ir::graph::Op::Attention { .. })),
        1,
        "{text}"
    );
}
