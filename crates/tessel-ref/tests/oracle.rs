//! f64 oracle tests on small hand-built graphs, checked against values worked out by hand.

use tessel_ir::graph::{BinaryOp, Graph, Op, ReduceOp, UnaryOp};
use tessel_ir::{DType, TensorType, Value};
use tessel_ref::{error_stats, eval_graph, OracleError, Tensor};

fn ty(dtype: DType, shape: &[u64]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn input(g: &mut Graph, name: &str, t: TensorType) -> Value {
    let index = g.inputs.len() as u32;
    let v = g.push(
        Op::Input {
            index,
            inout: false,
        },
        t,
    );
    g.inputs.push((name.into(), v));
    v
}

fn bin(g: &mut Graph, op: BinaryOp, lhs: Value, rhs: Value) -> Value {
    let t = g.ty(lhs).clone();
    let t = if matches!(
        op,
        BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
    ) {
        TensorType::new(DType::Bool, t.shape.0)
    } else {
        t
    };
    g.push(Op::Binary { op, lhs, rhs }, t)
}

fn un(g: &mut Graph, op: UnaryOp, arg: Value) -> Value {
    let t = g.ty(arg).clone();
    g.push(Op::Unary { op, arg }, t)
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-15 * b.abs().max(1e-300)
}

/// `w * bf16(xf * rsqrt(mean(xf²) + eps))` over `x: bf16[2, 4]`, `w: bf16[4]`, written
/// with the primitive ops the `check` pass produces.
fn rms_norm_graph(eps: f64, use_mean: bool) -> Graph {
    let mut g = Graph::new("rms_norm");
    let x = input(&mut g, "x", ty(DType::Bf16, &[2, 4]));
    let w = input(&mut g, "w", ty(DType::Bf16, &[4]));
    let xf = g.push(Op::Cast { arg: x }, ty(DType::F32, &[2, 4]));
    let sq = bin(&mut g, BinaryOp::Mul, xf, xf);
    let mean = if use_mean {
        g.push(
            Op::Reduce {
                op: ReduceOp::Mean,
                arg: sq,
                axis: 1,
            },
            ty(DType::F32, &[2, 1]),
        )
    } else {
        let s = g.push(
            Op::Reduce {
                op: ReduceOp::Sum,
                arg: sq,
                axis: 1,
            },
            ty(DType::F32, &[2, 1]),
        );
        let four = g.push(Op::Const { value: 4.0 }, ty(DType::F32, &[2, 1]));
        bin(&mut g, BinaryOp::Div, s, four)
    };
    let e = g.push(Op::Const { value: eps }, ty(DType::F32, &[2, 1]));
    let ve = bin(&mut g, BinaryOp::Add, mean, e);
    let r = un(&mut g, UnaryOp::Rsqrt, ve);
    let rb = g.push(Op::Broadcast { arg: r }, ty(DType::F32, &[2, 4]));
    let y = bin(&mut g, BinaryOp::Mul, xf, rb);
    let yb = g.push(Op::Cast { arg: y }, ty(DType::Bf16, &[2, 4]));
    let wr = g.push(Op::Reshape { arg: w }, ty(DType::Bf16, &[1, 4]));
    let wb = g.push(Op::Broadcast { arg: wr }, ty(DType::Bf16, &[2, 4]));
    let out = bin(&mut g, BinaryOp::Mul, wb, yb);
    g.outputs.push(("y".into(), out));
    g.outputs.push(("inv_rms".into(), r));
    g
}

#[test]
fn rms_norm_by_hand() {
    // Row 0: squares sum to 30, mean 7.5, + 0.5 = 8. Row 1: 0.25 + 2.25 + 0 + 9 = 11.5,
    // mean 2.875, + 0.5 = 3.375.
    let x = Tensor::from_f32(
        DType::Bf16,
        vec![2, 4],
        &[1.0, 2.0, 3.0, 4.0, 0.5, -1.5, 0.0, 3.0],
    );
    let w = Tensor::from_f32(DType::Bf16, vec![4], &[1.0, 0.5, -2.0, 0.125]);
    for use_mean in [false, true] {
        let g = rms_norm_graph(0.5, use_mean);
        let out = eval_graph(&g, &[x.clone(), w.clone()]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].shape, vec![2, 4]);
        assert_eq!(out[0].dtype, DType::Bf16);
        assert_eq!(out[1].shape, vec![2, 1]);
        let r = [1.0 / 8f64.sqrt(), 1.0 / 3.375f64.sqrt()];
        assert!(
            close(out[1].data[0], r[0]) && close(out[1].data[1], r[1]),
            "{:?}",
            out[1]
        );
        let xs = x.to_f64_vec();
        let ws = w.to_f64_vec();
        for i in 0..8 {
            let want = ws[i % 4] * xs[i] * r[i / 4];
            assert!(
                close(out[0].data[i], want),
                "{i}: {} vs {want}",
                out[0].data[i]
            );
        }
        // The bf16 cast is not applied: row 0 element 1 is 0.5 · 2/√8 = 0.3535…, not a bf16.
        assert!(close(out[0].data[1], 0.5 * 2.0 / 8f64.sqrt()));
    }
}

#[test]
fn shape_ops_by_hand() {
    let mut g = Graph::new("shapes");
    let i1 = g.push(Op::Iota { axis: 1 }, ty(DType::I32, &[2, 3]));
    let i0 = g.push(Op::Iota { axis: 0 }, ty(DType::I32, &[2, 3]));
    let three = g.push(Op::Const { value: 3.0 }, ty(DType::I32, &[2, 3]));
    let r3 = bin(&mut g, BinaryOp::Mul, i0, three);
    let a = bin(&mut g, BinaryOp::Add, r3, i1); // [[0,1,2],[3,4,5]]
    let p = g.push(
        Op::Permute {
            arg: a,
            perm: vec![1, 0],
        },
        ty(DType::I32, &[3, 2]),
    ); // [[0,3],[1,4],[2,5]]
    let s = g.push(
        Op::Slice {
            arg: p,
            axis: 0,
            start: 1,
        },
        ty(DType::I32, &[2, 2]),
    ); // [[1,4],[2,5]]
    let s1 = g.push(
        Op::Slice {
            arg: a,
            axis: 1,
            start: 2,
        },
        ty(DType::I32, &[2, 1]),
    ); // [[2],[5]]
    let c = g.push(
        Op::Concat {
            args: vec![s, s1, s],
            axis: 1,
        },
        ty(DType::I32, &[2, 5]),
    );
    let c0 = g.push(
        Op::Concat {
            args: vec![s, a],
            axis: 1,
        },
        ty(DType::I32, &[2, 5]),
    );
    let r = g.push(Op::Reshape { arg: c0 }, ty(DType::I32, &[5, 2]));
    let lt = bin(&mut g, BinaryOp::Lt, c, c0);
    let sel = g.push(
        Op::Select {
            cond: lt,
            on_true: c,
            on_false: c0,
        },
        ty(DType::I32, &[2, 5]),
    );
    let f = g.push(Op::Cast { arg: p }, ty(DType::F32, &[3, 2]));
    let b = g.push(Op::Broadcast { arg: s1 }, ty(DType::I32, &[2, 3]));
    let mx = g.push(
        Op::Reduce {
            op: ReduceOp::Max,
            arg: a,
            axis: 0,
        },
        ty(DType::I32, &[1, 3]),
    );
    for (name, v) in [
        ("p", p),
        ("c", c),
        ("r", r),
        ("sel", sel),
        ("f", f),
        ("b", b),
        ("mx", mx),
    ] {
        g.outputs.push((name.into(), v));
    }
    let out = eval_graph(&g, &[]).unwrap();
    let d = |i: usize| out[i].data.clone();
    assert_eq!(d(0), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(d(1), vec![1.0, 4.0, 2.0, 1.0, 4.0, 2.0, 5.0, 5.0, 2.0, 5.0]);
    assert_eq!(d(2), vec![1.0, 4.0, 0.0, 1.0, 2.0, 2.0, 5.0, 3.0, 4.0, 5.0]);
    // c < c0 elementwise: [1,4,2,1,4] vs [1,4,0,1,2] -> never; [2,5,5,2,5] vs [2,5,3,4,5] -> at 3.
    assert_eq!(d(3), vec![1.0, 4.0, 0.0, 1.0, 2.0, 2.0, 5.0, 3.0, 2.0, 5.0]);
    assert_eq!(d(4), d(0));
    assert_eq!(d(5), vec![2.0, 2.0, 2.0, 5.0, 5.0, 5.0]);
    assert_eq!(d(6), vec![3.0, 4.0, 5.0]);
    assert_eq!(out[1].shape, vec![2, 5]);
}

#[test]
fn integer_semantics() {
    let mut g = Graph::new("ints");
    let x = input(&mut g, "x", ty(DType::F32, &[4]));
    let i = g.push(Op::Cast { arg: x }, ty(DType::I32, &[4]));
    let two = g.push(Op::Const { value: 2.0 }, ty(DType::I32, &[4]));
    let q = bin(&mut g, BinaryOp::Div, i, two);
    let r = bin(&mut g, BinaryOp::Rem, i, two);
    let big = g.push(
        Op::Const {
            value: i32::MAX as f64,
        },
        ty(DType::I32, &[4]),
    );
    let w = bin(&mut g, BinaryOp::Add, i, big);
    let bo = g.push(Op::Cast { arg: x }, ty(DType::Bool, &[4]));
    let nb = un(&mut g, UnaryOp::Not, bo);
    for (n, v) in [("i", i), ("q", q), ("r", r), ("w", w), ("nb", nb)] {
        g.outputs.push((n.into(), v));
    }
    let xin = Tensor::from_f32(DType::F32, vec![4], &[-7.9, 7.9, f32::NAN, 1e10]);
    let out = eval_graph(&g, &[xin]).unwrap();
    let m = i32::MAX as f64;
    assert_eq!(out[0].data, vec![-7.0, 7.0, 0.0, m]);
    assert_eq!(out[1].data, vec![-3.0, 3.0, 0.0, (i32::MAX / 2) as f64]);
    assert_eq!(out[2].data, vec![-1.0, 1.0, 0.0, 1.0]);
    // MAX + 7 wraps; MAX + MAX = -2.
    assert_eq!(out[3].data, vec![m - 7.0, i32::MIN as f64 + 6.0, m, -2.0]);
    // NaN != 0 is true, so not(bool(NaN)) is false.
    assert_eq!(out[4].data, vec![0.0, 0.0, 0.0, 0.0]);

    let mut g = Graph::new("div0");
    let x = input(&mut g, "x", ty(DType::I32, &[2]));
    let z = g.push(Op::Const { value: 0.0 }, ty(DType::I32, &[2]));
    let q = bin(&mut g, BinaryOp::Div, x, z);
    let r = bin(&mut g, BinaryOp::Rem, x, z);
    g.outputs.push(("q".into(), q));
    g.outputs.push(("r".into(), r));
    // Defined as the kernels compute it: x / 0 = 0, x % 0 = x.
    let out = eval_graph(&g, &[Tensor::from_i32(vec![2], &[-5, 7])]).unwrap();
    assert_eq!(out[0].data, vec![0.0, 0.0]);
    assert_eq!(out[1].data, vec![-5.0, 7.0]);
}

#[test]
fn float_math_and_reductions() {
    let mut g = Graph::new("math");
    let x = input(&mut g, "x", ty(DType::F32, &[2, 3]));
    let names = [
        UnaryOp::Exp,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::Tanh,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Abs,
        UnaryOp::Neg,
    ];
    for op in names {
        let v = un(&mut g, op, x);
        g.outputs.push((format!("{op:?}"), v));
    }
    let sm = g.push(Op::Softmax { arg: x, axis: 1 }, ty(DType::F32, &[2, 3]));
    g.outputs.push(("softmax".into(), sm));
    let mn = g.push(
        Op::Reduce {
            op: ReduceOp::Min,
            arg: x,
            axis: 1,
        },
        ty(DType::F32, &[2, 1]),
    );
    g.outputs.push(("min".into(), mn));
    let sum = g.push(
        Op::Reduce {
            op: ReduceOp::Sum,
            arg: x,
            axis: 0,
        },
        ty(DType::F32, &[1, 3]),
    );
    g.outputs.push(("sum".into(), sum));
    let two = g.push(Op::Const { value: 2.0 }, ty(DType::F32, &[2, 3]));
    let pw = bin(&mut g, BinaryOp::Pow, two, x);
    g.outputs.push(("pow".into(), pw));
    let mx = bin(&mut g, BinaryOp::Max, x, two);
    g.outputs.push(("max".into(), mx));

    let xv = [0.0f32, -1000.0, 1.0, -0.0, 2.0, 1000.0];
    let out = eval_graph(&g, &[Tensor::from_f32(DType::F32, vec![2, 3], &xv)]).unwrap();
    let x64: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    for (k, x) in x64.iter().enumerate() {
        assert!(close(out[0].data[k], x.exp()));
        let s = 1.0 / (1.0 + (-x).exp());
        assert!(close(out[1].data[k], s), "sigmoid({x})");
        assert!(close(out[2].data[k], x * s), "silu({x})");
        assert!(close(out[3].data[k], x.tanh()));
        assert!(close(out[4].data[k], x.sin()));
        assert!(close(out[5].data[k], x.cos()));
        assert_eq!(out[6].data[k], x.abs());
        assert_eq!(out[7].data[k].to_bits(), (-x).to_bits());
        assert!(close(out[11].data[k], 2f64.powf(*x)));
    }
    // No overflow to NaN at the extremes.
    assert_eq!(out[1].data[1], 0.0);
    assert_eq!(out[2].data[1], 0.0);
    assert_eq!(out[2].data[5], 1000.0);
    // Softmax row 1 of [-0, 2, 1000]: the max term is 1, the others e^-1000 and e^-998.
    assert!(close(out[8].data[5], 1.0));
    // Row 0 of [0, -1000, 1]: exp(x - 1) = [e^-1, e^-1001, 1].
    let z = (-1f64).exp() + (-1001f64).exp() + 1.0;
    assert!(close(out[8].data[0], (-1f64).exp() / z) && close(out[8].data[2], 1.0 / z));
    // min of [0, -1000, 1] and of [-0, 2, 1000] (-0 < +0 kept).
    assert_eq!(out[9].data[0], -1000.0);
    assert_eq!(out[9].data[1].to_bits(), (-0.0f64).to_bits());
    assert_eq!(out[10].data, vec![0.0, -998.0, 1001.0]);
    assert_eq!(out[12].data, vec![2.0, 2.0, 2.0, 2.0, 2.0, 1000.0]);

    // NaN propagates through max and every reduction.
    let xn = [1.0f32, f32::NAN, 3.0, 4.0, 5.0, 6.0];
    let out = eval_graph(&g, &[Tensor::from_f32(DType::F32, vec![2, 3], &xn)]).unwrap();
    assert!(out[9].data[0].is_nan() && out[9].data[1] == 4.0);
    assert!(out[10].data[1].is_nan() && out[10].data[0] == 5.0);
    assert!(out[12].data[1].is_nan());
    assert!(out[8].data[..3].iter().all(|v| v.is_nan()));
}

#[test]
fn compensated_sum_and_oracle_comparison() {
    // 1 + 1e-16 · 10 000 - 1: a plain f64 sum loses every small term.
    let n = 10_002u64;
    let mut g = Graph::new("sum");
    let x = input(&mut g, "x", ty(DType::F32, &[1, n]));
    let s = g.push(
        Op::Reduce {
            op: ReduceOp::Sum,
            arg: x,
            axis: 1,
        },
        ty(DType::F32, &[1, 1]),
    );
    g.outputs.push(("s".into(), s));
    let mut v = vec![1e-16f32; n as usize];
    v[0] = 1.0;
    v[n as usize - 1] = -1.0;
    let out = eval_graph(&g, &[Tensor::from_f32(DType::F32, vec![1, n], &v)]).unwrap();
    let want = 10_000.0 * (1e-16f32 as f64);
    assert!(
        (out[0].data[0] - want).abs() < 1e-10 * want,
        "{}",
        out[0].data[0]
    );

    // The metrics against the oracle: an f32 result one ulp off.
    let got = Tensor::from_f32(
        DType::F32,
        vec![1, 1],
        &[f32::from_bits((want as f32).to_bits() + 1)],
    );
    let st = error_stats(&got, &out[0]).unwrap();
    assert_eq!(st.mismatches, 1);
    assert!(st.max_ulp > 0.5 && st.max_ulp < 1.5, "{st}");
}

#[test]
fn bad_inputs_are_errors() {
    let g = rms_norm_graph(0.5, false);
    let x = Tensor::zeros(ty(DType::Bf16, &[2, 4]));
    assert!(matches!(
        eval_graph(&g, std::slice::from_ref(&x)),
        Err(OracleError::BadInputs(_))
    ));
    let w = Tensor::zeros(ty(DType::F32, &[4]));
    assert!(matches!(
        eval_graph(&g, &[x, w]),
        Err(OracleError::BadInputs(_))
    ));
}

/// `update` by hand: `c: f32[3, 4, 2]` gets `rows: [3, 2, 2]` along axis 1 at positions
/// 0 (both rows written), 3 (the second row is past the end: not written) and -1 (the first
/// row is before the start: not written); every other element keeps its value. The
/// dtype-following reference scatters the same points.
#[test]
fn update_by_hand() {
    let mut g = Graph::new("update");
    let c = g.push(
        Op::Input {
            index: 0,
            inout: true,
        },
        ty(DType::F32, &[3, 4, 2]),
    );
    g.inputs.push(("c".into(), c));
    let r = input(&mut g, "r", ty(DType::F32, &[3, 2, 2]));
    let p = input(&mut g, "p", ty(DType::I32, &[3]));
    let u = g.push(
        Op::Update {
            dst: c,
            rows: r,
            at: Some(tessel_ir::graph::UpdateAt { pos: p, axis: 1 }),
        },
        ty(DType::F32, &[3, 4, 2]),
    );
    g.outputs.push(("c".into(), u));
    let cv: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let rv: Vec<f32> = (0..12).map(|i| -(i as f32) - 1.0).collect();
    let inputs = [
        Tensor::from_f32(DType::F32, vec![3, 4, 2], &cv),
        Tensor::from_f32(DType::F32, vec![3, 2, 2], &rv),
        Tensor::from_i32(vec![3], &[0, 3, -1]),
    ];
    let mut want: Vec<f64> = cv.iter().map(|&x| x as f64).collect();
    // b = 0: rows 0, 1 at positions 0, 1.
    want[..4].copy_from_slice(&[-1.0, -2.0, -3.0, -4.0]);
    // b = 1: row 0 at position 3; row 1 (position 4) is past the end.
    want[8 + 6..8 + 8].copy_from_slice(&[-5.0, -6.0]);
    // b = 2: row 0 (position -1) is before the start; row 1 at position 0.
    want[16..18].copy_from_slice(&[-11.0, -12.0]);
    let out = eval_graph(&g, &inputs).unwrap();
    assert_eq!(out[0].data, want);
    let reference = tessel_ref::eval_reference(&g, &inputs, &Default::default()).unwrap();
    let got: Vec<f64> = reference[0].data.iter().map(|b| b.r).collect();
    assert_eq!(got, want);
    assert!(reference[0].data.iter().all(|b| b.is_point()));
}

/// Softmax of a fully masked row (every element -inf) is 0 in the oracle and, as a point
/// bound, in the dtype-following reference (flash-attention's convention, design §12);
/// rows with a finite element are as before, -inf elements giving exactly 0; NaN and +inf
/// keep IEEE arithmetic (NaN). Rows of length 3 and of length 1, in f32 and bf16.
#[test]
fn softmax_of_a_fully_masked_row_is_zero() {
    use tessel_ref::{eval_reference, Model};
    let ninf = f32::NEG_INFINITY;
    for dt in [DType::F32, DType::Bf16] {
        let mut g = Graph::new("masked");
        let x = input(&mut g, "x", ty(dt, &[5, 3]));
        let sm = g.push(Op::Softmax { arg: x, axis: 1 }, ty(dt, &[5, 3]));
        g.outputs.push(("p".into(), sm));
        let xv = [
            ninf,
            ninf,
            ninf, // fully masked
            ninf,
            2.0,
            ninf, // all but one masked: [0, 1, 0]
            1.0,
            ninf,
            1.0, // [0.5, 0, 0.5]
            ninf,
            f32::INFINITY,
            ninf, // +inf: NaN
            ninf,
            f32::NAN,
            ninf, // NaN: NaN
        ];
        let inputs = [Tensor::from_f32(dt, vec![5, 3], &xv)];
        let o = &eval_graph(&g, &inputs).unwrap()[0].data;
        let r = &eval_reference(&g, &inputs, &Model::default()).unwrap()[0].data;
        for k in 0..3 {
            assert_eq!(o[k].to_bits(), 0f64.to_bits(), "{dt} oracle [0, {k}]");
            assert_eq!(
                r[k],
                tessel_ref::Bound::point(0.0),
                "{dt} reference [0, {k}]"
            );
        }
        let want = [0.0, 1.0, 0.0, 0.5, 0.0, 0.5];
        for (k, w) in want.iter().enumerate() {
            assert_eq!(o[3 + k], *w, "{dt} oracle [{}, {}]", 1 + k / 3, k % 3);
            // Exact in every dtype: the bound is the point itself.
            assert_eq!(r[3 + k].r, *w);
            assert!(r[3 + k].allows(*w) && !r[3 + k].allows(f64::NAN));
            assert!(!r[3 + k].allows(w + 1e-3) && !r[3 + k].allows(w - 1e-3));
        }
        for k in 9..15 {
            assert!(o[k].is_nan(), "{dt} oracle element {k}");
            assert!(
                r[k].r.is_nan() && r[k].allows(f64::NAN),
                "{dt} reference {k}"
            );
        }

        // A row of length 1: -inf gives 0, a finite value 1.
        let mut g = Graph::new("masked1");
        let x = input(&mut g, "x", ty(dt, &[2, 1]));
        let sm = g.push(Op::Softmax { arg: x, axis: 1 }, ty(dt, &[2, 1]));
        g.outputs.push(("p".into(), sm));
        let inputs = [Tensor::from_f32(dt, vec![2, 1], &[ninf, -3.0])];
        assert_eq!(eval_graph(&g, &inputs).unwrap()[0].data, vec![0.0, 1.0]);
        let r = &eval_reference(&g, &inputs, &Model::default()).unwrap()[0].data;
        assert_eq!(r[0], tessel_ref::Bound::point(0.0));
        assert!(r[1].r == 1.0 && r[1].allows(1.0) && !r[1].allows(f64::NAN));
        assert!(!r[1].allows(0.0));
    }
}

/// RMSNorm's `rsqrt(mean(x·x) + eps)` stays bounded when x's allowed range spans 0: a square
/// is never negative (interval arithmetic on `x · x`'s two operands alone would let it be),
/// and a float sum of terms that are never negative is never negative in any order (the
/// sum's widening for roundings must not reach below 0). Here x is the difference of two
/// f32 sums of the same 4096 values in any order — exactly 0, allowed anywhere in ±2·γ·Σ|a| —
/// broadcast over a row of 64. Without either rule the mean's lower end goes below -eps and
/// the rsqrt's bound is infinite: `tessel check` then passed any value of a layer's output.
#[test]
fn a_mean_of_squares_is_never_negative_in_the_reference() {
    use tessel_ref::{eval_reference, Model};
    let n = 4096;
    let mut g = Graph::new("rms");
    let a = input(&mut g, "a", ty(DType::F32, &[1, n]));
    let sum = |g: &mut Graph| {
        g.push(
            Op::Reduce {
                op: ReduceOp::Sum,
                arg: a,
                axis: 1,
            },
            ty(DType::F32, &[1, 1]),
        )
    };
    let (s1, s2) = (sum(&mut g), sum(&mut g));
    let f32x = |shape: &[u64]| ty(DType::F32, shape);
    let d = g.push(
        Op::Binary {
            op: BinaryOp::Sub,
            lhs: s1,
            rhs: s2,
        },
        f32x(&[1, 1]),
    );
    let x = g.push(Op::Broadcast { arg: d }, f32x(&[1, 64]));
    let sq = g.push(
        Op::Binary {
            op: BinaryOp::Mul,
            lhs: x,
            rhs: x,
        },
        f32x(&[1, 64]),
    );
    let var = g.push(
        Op::Reduce {
            op: ReduceOp::Mean,
            arg: sq,
            axis: 1,
        },
        f32x(&[1, 1]),
    );
    // A constant holds a value of its dtype (rule `graph.const`).
    let eps = g.push(
        Op::Const {
            value: 1e-6f32 as f64,
        },
        f32x(&[]),
    );
    let eps = g.push(Op::Reshape { arg: eps }, f32x(&[1, 1]));
    let ve = g.push(
        Op::Binary {
            op: BinaryOp::Add,
            lhs: var,
            rhs: eps,
        },
        f32x(&[1, 1]),
    );
    let r = g.push(
        Op::Unary {
            op: UnaryOp::Rsqrt,
            arg: ve,
        },
        f32x(&[1, 1]),
    );
    g.outputs.push(("x".into(), x));
    g.outputs.push(("r".into(), r));
    let vals: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0)
        .collect();
    let inputs = [Tensor::from_f32(DType::F32, vec![1, n], &vals)];
    let out = eval_reference(&g, &inputs, &Model::default()).unwrap();
    let x = &out[0].data[0];
    assert!(x.lo < 0.0 && 0.0 < x.hi, "x spans 0: {x:?}");
    let r = &out[1].data[0];
    assert!(!r.nan && r.hi.is_finite(), "rsqrt bounded: {r:?}");
    assert!(r.lo <= 1000.0 && 1000.0 <= r.hi, "allows rsqrt(eps): {r:?}");
}
