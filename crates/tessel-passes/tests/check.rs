//! The `check` pass on the example programs: they check for every step at several `T`,
//! the graphs verify and have the declared output types, and a few structural facts hold.
//! Plus a no-panic test over token-level mutations of the examples.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessel_ir::graph::{Graph, Op, ReduceOp, UnaryOp};
use tessel_ir::{DType, TensorType};
use tessel_passes::check;
use tessel_ref::{judge, Tensor};

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/qwen3_14b")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dims(t: u64) -> BTreeMap<String, u64> {
    BTreeMap::from([("T".to_string(), t)])
}

/// Checks `step` of `src` and verifies the graph.
fn build(src: &str, step: &str, t: u64) -> Graph {
    let m = tessel_syntax::parse(src).unwrap_or_else(|d| panic!("parse: {d:?}"));
    let g = match check::run(&m, step, &dims(t)) {
        Ok(g) => g,
        Err(ds) => {
            let text: Vec<String> = ds.iter().map(|d| d.render("example", src, false)).collect();
            panic!("{step} (T={t}) does not check:\n{}", text.join("\n"));
        }
    };
    if let Err(errs) = tessel_ir::verify::verify_graph(&g, None, None) {
        panic!(
            "{step} (T={t}): graph does not verify: {errs:?}\n{}",
            tessel_ir::text::write_graph(&g, None, None)
        );
    }
    g
}

fn out_types(g: &Graph) -> Vec<TensorType> {
    g.outputs.iter().map(|(_, v)| g.ty(*v).clone()).collect()
}

fn bf16(shape: &[u64]) -> TensorType {
    TensorType::new(DType::Bf16, shape.to_vec())
}

fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    g.ops.values().filter(|op| pred(op)).count()
}

const TS: [u64; 3] = [4096, 1, 7];

#[test]
fn steps_in_source_order() {
    let m = tessel_syntax::parse(&example("rms_norm.tsl")).unwrap();
    assert_eq!(check::steps(&m), ["hidden_norm", "qk_norm"]);
}

#[test]
fn rms_norm_checks() {
    let src = example("rms_norm.tsl");
    for t in TS {
        let g = build(&src, "hidden_norm", t);
        assert_eq!(out_types(&g), [bf16(&[t, 5120])]);
        assert_eq!(g.outputs[0].0, "out");
        let names: Vec<&str> = g.inputs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x", "w"]);
        // Exactly one mean, over the last axis of [T, 5120] f32.
        let reduces: Vec<&Op> = g
            .ops
            .values()
            .filter(|op| matches!(op, Op::Reduce { .. }))
            .collect();
        assert_eq!(reduces.len(), 1);
        assert!(matches!(
            reduces[0],
            Op::Reduce {
                op: ReduceOp::Mean,
                axis: 1,
                ..
            }
        ));
        assert_eq!(
            count(&g, |op| matches!(
                op,
                Op::Unary {
                    op: UnaryOp::Rsqrt,
                    ..
                }
            )),
            1
        );
        // EPS is the f32 nearest 1e-6.
        let eps: Vec<f64> = g
            .ops
            .values()
            .filter_map(|op| match op {
                Op::Const { value } => Some(*value),
                _ => None,
            })
            .collect();
        assert_eq!(eps, [1e-6f32 as f64]);

        let g = build(&src, "qk_norm", t);
        assert_eq!(out_types(&g), [bf16(&[t, 40, 128]), bf16(&[t, 8, 128])]);
        let outs: Vec<&str> = g.outputs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(outs, ["out0", "out1"]);
        assert_eq!(
            count(&g, |op| matches!(
                op,
                Op::Reduce {
                    op: ReduceOp::Mean,
                    axis: 2,
                    ..
                }
            )),
            2
        );
    }
}

#[test]
fn rope_checks() {
    let src = example("rope.tsl");
    for t in TS {
        let g = build(&src, "rope_qk", t);
        assert_eq!(out_types(&g), [bf16(&[t, 40, 128]), bf16(&[t, 8, 128])]);
        assert!(
            count(&g, |op| matches!(
                op,
                Op::Unary {
                    op: UnaryOp::Sin,
                    ..
                }
            )) >= 1
        );
        assert!(
            count(&g, |op| matches!(
                op,
                Op::Unary {
                    op: UnaryOp::Cos,
                    ..
                }
            )) >= 1
        );
        assert!(count(&g, |op| matches!(op, Op::Iota { .. })) >= 1);
        assert!(
            count(&g, |op| matches!(
                op,
                Op::Binary {
                    op: tessel_ir::graph::BinaryOp::Pow,
                    ..
                }
            )) >= 1
        );
        // split(x, 2, axis: -1) of [T, N, 128]: halves at 0 and 64 along axis 2.
        assert!(g.ops.values().any(|op| matches!(
            op,
            Op::Slice {
                axis: 2,
                start: 64,
                ..
            }
        )));
        // THETA = 1e6 is exact in f32.
        assert!(g
            .ops
            .values()
            .any(|op| matches!(op, Op::Const { value } if *value == 1e6)));
    }
}

#[test]
fn swiglu_checks() {
    let src = example("swiglu.tsl");
    for t in TS {
        let g = build(&src, "swiglu", t);
        assert_eq!(out_types(&g), [bf16(&[t, 17408])]);
        assert_eq!(
            count(&g, |op| matches!(
                op,
                Op::Unary {
                    op: UnaryOp::Silu,
                    ..
                }
            )),
            1
        );
        assert_eq!(
            g.ops.len(),
            4,
            "two inputs, silu, mul:\n{}",
            tessel_ir::text::write_graph(&g, None, None)
        );
    }
}

/// A program whose step `s` is checked at T = 4, its inputs (row-major, in parameter
/// order) and the outputs worked out by hand, with their types.
struct Case {
    src: &'static str,
    inputs: Vec<Vec<f64>>,
    want: Vec<(TensorType, Vec<f64>)>,
    /// Whether the reference value may differ from `want` within its allowed set (math
    /// functions whose result is not exact in f32); otherwise it must equal `want`.
    rounded: bool,
}

fn case(src: &'static str, inputs: Vec<Vec<f64>>, want: Vec<(TensorType, Vec<f64>)>) -> Case {
    Case {
        src,
        inputs,
        want,
        rounded: false,
    }
}

fn f32t(shape: &[u64]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

fn i32t(shape: &[u64]) -> TensorType {
    TensorType::new(DType::I32, shape.to_vec())
}

/// `n` values of `f(i)` for i in 0..n.
fn table(n: usize, f: impl Fn(usize) -> f64) -> Vec<f64> {
    (0..n).map(f).collect()
}

/// The step's inputs as tensors of the checked graph's input types.
fn tensors(g: &Graph, values: &[Vec<f64>]) -> Vec<Tensor> {
    assert_eq!(g.inputs.len(), values.len(), "input count");
    g.inputs
        .iter()
        .zip(values)
        .map(|((name, v), x)| {
            let t = tensor(g.ty(*v), x);
            assert!(
                same(&t.to_f64_vec(), x),
                "input {name}: {x:?} is not exact in {}",
                t.ty
            );
            t
        })
        .collect()
}

/// `values` as a tensor of `ty`, rounded to its dtype.
fn tensor(ty: &TensorType, values: &[f64]) -> Tensor {
    let shape = ty.shape.0.clone();
    match ty.dtype {
        DType::I32 => {
            Tensor::from_i32(shape, &values.iter().map(|&x| x as i32).collect::<Vec<_>>())
        }
        DType::Bool => {
            Tensor::from_bool(shape, &values.iter().map(|&x| x != 0.0).collect::<Vec<_>>())
        }
        dt => Tensor::from_f32(
            dt,
            shape,
            &values.iter().map(|&x| x as f32).collect::<Vec<_>>(),
        ),
    }
}

/// Equal element by element, NaN equal to NaN.
fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

/// Small programs for the semantics the examples do not reach: each checked graph is
/// evaluated by the dtype-following reference on small inputs, and its outputs must be the
/// values worked out by hand (and the types declared).
#[test]
fn semantics() {
    let bf16_1e6 = 9.98377799987793e-7; // the bf16 nearest 1e-6 (see below)
    let rows = vec![
        1.0, 2.0, 3.0, 4.0, 5.0, 6.0, //
        -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, //
        0.0, 0.0, 0.0, 0.0, 0.0, 7.0, //
        0.5, 0.25, 0.0, 0.0, 0.0, 0.0,
    ];
    // a[t][c] = 10t + c over [4, 6].
    let a46 = table(24, |i| (10 * (i / 6) + i % 6) as f64);
    // a[t][j][k] = 100t + 10j + k over [4, 6, 5].
    let a465 = table(120, |i| (100 * (i / 30) + 10 * (i / 5 % 6) + i % 5) as f64);
    let ninf = f64::NEG_INFINITY;
    let cases = vec![
        // Promotion: bf16 + f16 → f32, so 1 + 2^-10 and 257 survive (bf16 would round both).
        case(
            "step s(a: bf16[T], b: f16[T]) -> f32[T] { a + b }",
            vec![vec![1.0, -2.0, 256.0, 0.5], vec![1.0 / 1024.0, 0.25, 1.0, -0.5]],
            vec![(f32t(&[4]), vec![1.0009765625, -1.75, 257.0, 0.0])],
        ),
        // An int literal with bf16 stays bf16.
        case(
            "step s(a: bf16[T]) -> bf16[T] { a * 2 }",
            vec![vec![1.5, -3.0, 255.0, 0.0078125]],
            vec![(bf16(&[4]), vec![3.0, -6.0, 510.0, 0.015625])],
        ),
        // A float literal with i32 → f32: 2^24 + 1 becomes 2^24 on the way.
        case(
            "step s(a: i32[T]) -> f32[T] { a * 0.5 }",
            vec![vec![3.0, -7.0, 0.0, 16777217.0]],
            vec![(f32t(&[4]), vec![1.5, -3.5, 0.0, 8388608.0])],
        ),
        // i32 division truncates toward zero; `%` is torch.remainder, the divisor's sign
        // (-9 / 2 = -4, and -4 % 3 = 2).
        case(
            "step s(a: i32[T]) -> i32[T] { a / 2 % 3 }",
            vec![vec![9.0, -9.0, 5.0, 1.0]],
            vec![(i32t(&[4]), vec![1.0, 2.0, 2.0, 0.0])],
        ),
        // NaN < 0 is false, so its negation is true.
        case(
            "step s(a: f32[T], b: f32[T]) -> bool[T] { !(a < b) }",
            vec![vec![1.0, 2.0, f64::NAN, 3.0], vec![2.0, 2.0, 0.0, -1.0]],
            vec![(
                TensorType::new(DType::Bool, vec![4]),
                vec![0.0, 1.0, 1.0, 1.0],
            )],
        ),
        // Broadcasting, where, reductions with keep, indexing, reshape, permute, transpose.
        case(
            "step s(a: f32[T, 1], b: f32[3]) -> f32[T, 3] { where(a > 0.0, a, b) }",
            vec![vec![1.0, -1.0, 0.0, 2.0], vec![10.0, 20.0, 30.0]],
            vec![(
                f32t(&[4, 3]),
                vec![1.0, 1.0, 1.0, 10.0, 20.0, 30.0, 10.0, 20.0, 30.0, 2.0, 2.0, 2.0],
            )],
        ),
        case(
            "step s(a: f32[T, 6]) -> f32[T] { sum(a, axis: 1) + max(a, axis: -1) }",
            vec![rows.clone()],
            vec![(f32t(&[4]), vec![21.0 + 6.0, -21.0 - 1.0, 7.0 + 7.0, 0.75 + 0.5])],
        ),
        case(
            "step s(a: f32[T, 6]) -> f32[1, 6] { min(a, axis: 0, keep: true) }",
            vec![rows],
            vec![(f32t(&[1, 6]), vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])],
        ),
        // a[3, :, 1..3]
        case(
            "step s(a: f32[T, 6, 5]) -> f32[6, 2] { a[-1, :, 1:-2] }",
            vec![a465.clone()],
            vec![(f32t(&[6, 2]), table(12, |i| (301 + 10 * (i / 2) + i % 2) as f64))],
        ),
        case(
            "step s(a: f32[T, 6, 5]) -> f32[T, 1, 6, 5] { a[:, None, ...] }",
            vec![a465.clone()],
            vec![(f32t(&[4, 1, 6, 5]), a465)],
        ),
        // out[i][t][k] = a[t][2i + k]
        case(
            "step s(a: f32[T, 6]) -> f32[3, T, 2] { permute(reshape(a, [T, 3, -1]), [1, 0, 2]) }",
            vec![a46.clone()],
            vec![(
                f32t(&[3, 4, 2]),
                table(24, |x| (10 * (x / 2 % 4) + 2 * (x / 8) + x % 2) as f64),
            )],
        ),
        // out[c][t] = 2·a[t][c]
        case(
            "step s(a: f32[T, 6]) -> f32[6, T] { a^T + transpose(a, 0, -1) }",
            vec![a46.clone()],
            vec![(f32t(&[6, 4]), table(24, |x| (2 * (10 * (x % 4) + x / 4)) as f64))],
        ),
        // causal(t, s): [i, j] = j <= i + s - t, the last query sees every key; an offset
        // moves the diagonal; with more queries than keys the first ones see none.
        case(
            "step s() -> (bool[3, 5], bool[4, 4], bool[5, 3], bool[3, 5], bool[2, 3]) {
                 (causal(3, 5), causal(4, 4), causal(5, 3), causal(3, 5, offset: -1),
                  causal(2, 3, offset: 100)) }",
            vec![],
            vec![
                (
                    TensorType::new(DType::Bool, vec![3, 5]),
                    vec![
                        1.0, 1.0, 1.0, 0.0, 0.0, //
                        1.0, 1.0, 1.0, 1.0, 0.0, //
                        1.0, 1.0, 1.0, 1.0, 1.0,
                    ],
                ),
                (
                    TensorType::new(DType::Bool, vec![4, 4]),
                    table(16, |x| (x % 4 <= x / 4) as u8 as f64),
                ),
                (
                    TensorType::new(DType::Bool, vec![5, 3]),
                    table(15, |x| (x % 3 + 2 <= x / 3) as u8 as f64),
                ),
                (
                    TensorType::new(DType::Bool, vec![3, 5]),
                    table(15, |x| (x % 5 < x / 5) as u8 as f64),
                ),
                (TensorType::new(DType::Bool, vec![2, 3]), vec![1.0; 6]),
            ],
        ),
        // Inside a fn, on the fn's dims; the mask counted as i32.
        case(
            "fn keys_seen(x: f32[Q, K]) -> i32[Q] { sum(i32(causal(Q, K)), axis: -1) }
             step s(a: f32[T, 6]) -> i32[T] { keys_seen(a) }",
            vec![vec![0.0; 24]],
            vec![(i32t(&[4]), vec![3.0, 4.0, 5.0, 6.0])],
        ),
        // `-inf` written as such: masked elements get nothing, a fully masked row is 0.
        case(
            "step s(a: bf16[T, 3]) -> bf16[T, 3] { softmax(where(a > 0.0, a, -inf), axis: -1) }",
            vec![[
                [-1.0, -2.0, -3.0],
                [-1.0, 2.0, -3.0],
                [1.0, -2.0, 1.0],
                [-0.5, -0.25, 0.0],
            ]
            .concat()],
            vec![(
                bf16(&[4, 3]),
                [
                    [0.0, 0.0, 0.0],
                    [0.0, 1.0, 0.0],
                    [0.5, 0.0, 0.5],
                    [0.0, 0.0, 0.0],
                ]
                .concat(),
            )],
        ),
        // Equal logits share evenly whatever their size; -inf gets nothing.
        Case {
            rounded: true,
            ..case(
                "step s(a: f32[T, 6]) -> f32[T, 6] { softmax(a, axis: -1) }",
                vec![[
                    [0.0; 6],
                    [100.0; 6],
                    [0.0, 0.0, 0.0, ninf, ninf, ninf],
                    [ninf, 5.0, ninf, ninf, 5.0, ninf],
                ]
                .concat()],
                vec![(
                    f32t(&[4, 6]),
                    [
                        [1.0 / 6.0; 6],
                        [1.0 / 6.0; 6],
                        [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0, 0.0, 0.0],
                        [0.0, 0.5, 0.0, 0.0, 0.5, 0.0],
                    ]
                    .concat(),
                )],
            )
        },
        // (y, x) of the halves x = a[:, 0:3], y = a[:, 3:6].
        case(
            "step s(a: f32[T, 6]) -> (f32[T, 3], f32[T, 3]) { let (x, y) = split(a, 2, axis: 1); (y, x) }",
            vec![a46],
            vec![
                (f32t(&[4, 3]), table(12, |i| (10 * (i / 3) + 3 + i % 3) as f64)),
                (f32t(&[4, 3]), table(12, |i| (10 * (i / 3) + i % 3) as f64)),
            ],
        ),
        // K = 5.
        case(
            "const K = 2 * 3 - 1; step s(a: f32[T]) -> f32[T] { pow(a, K) + min(a, 1) }",
            vec![vec![2.0, -1.0, 0.5, 3.0]],
            vec![(f32t(&[4]), vec![32.0 + 1.0, -1.0 - 1.0, 0.03125 + 0.5, 243.0 + 1.0])],
        ),
        case(
            "step s(a: i32[T]) -> f32[T] { pow(a, 2) }",
            vec![vec![3.0, -4.0, 0.0, 7.0]],
            vec![(f32t(&[4]), vec![9.0, 16.0, 0.0, 49.0])],
        ),
        // The f32 quotient, correctly rounded.
        case(
            "step s() -> f32 { 1.0 / 3.0 }",
            vec![],
            vec![(f32t(&[]), vec![(1.0f32 / 3.0f32) as f64])],
        ),
        case(
            "step s() -> i32[5] { iota(5) - 1 }",
            vec![],
            vec![(i32t(&[5]), vec![-1.0, 0.0, 1.0, 2.0, 3.0])],
        ),
        // Each sum rounded to bf16: 1 + 1e-6 is 1, and 3 + 1e-6 is 3.
        case(
            "step s(a: f32[T]) -> bf16[T] { bf16(a) + bf16(1e-6) }",
            vec![vec![1.0, 0.0, 3.0, 1e-6f32 as f64]],
            vec![(bf16(&[4]), vec![1.0, bf16_1e6, 3.0, 2.0 * bf16_1e6])],
        ),
        // A literal in `+ - * /` is PyTorch's f32 opmath value, the result rounded once:
        // a leaky ReLU's `a * 0.01` on bf16 is bf16(f32(a) · f32(0.01)); with bf16(0.01) =
        // 0.010009765625 the first two would be -0.040771484375 and -0.04296875.
        case(
            "step s(a: bf16[T]) -> bf16[T] { where(a < 0.0, a * 0.01, a) }",
            vec![vec![-4.0625, -4.28125, 2.0, -1.0]],
            vec![(
                bf16(&[4]),
                vec![-0.04052734375, -0.042724609375, 2.0, -0.010009765625],
            )],
        ),
        // Beyond f16's range in f32, as PyTorch keeps it: 0.5 · 70000 = 35000 → 35008.
        case(
            "step s(a: f16[T]) -> f16[T] { a * 70000.0 }",
            vec![vec![0.5, 0.25, -0.5, 0.0]],
            vec![(
                TensorType::new(DType::F16, vec![4]),
                vec![35008.0, 17504.0, -35008.0, 0.0],
            )],
        ),
        // A divisor is a product with its f32 reciprocal (PyTorch's div_true_kernel_cuda):
        // 1.0009765625 · f32(1/3) = 0.3336588740348816, where the division gives
        // 0.3336588442325592.
        case(
            "step s(a: f32[T]) -> f32[T] { a / 3.0 }",
            vec![vec![1.0009765625, 3.0, -6.0, 0.0]],
            vec![(
                f32t(&[4]),
                vec![
                    0.3336588740348816,
                    (3.0f32 * (1.0f32 / 3.0)) as f64,
                    (-6.0f32 * (1.0f32 / 3.0)) as f64,
                    0.0,
                ],
            )],
        ),
        // A dividend is the reciprocal times the number (torch/_tensor.py `__rdiv__`):
        // f32(1 / 1.0048828125) · 3 = 2.9854226112365723, the division 2.9854228496551514.
        case(
            "step s(a: f32[T]) -> f32[T] { 3.0 / a }",
            vec![vec![1.0048828125, 1.0, -4.0, 0.5]],
            vec![(f32t(&[4]), vec![2.9854226112365723, 3.0, -0.75, 6.0])],
        ),
        // A comparison reads the literal in the tensor's dtype: bf16(0.01) == bf16(0.01).
        case(
            "step s(a: bf16[T]) -> bool[T] { a == 0.01 }",
            vec![vec![0.010009765625, 0.0, 1.0, -0.010009765625]],
            vec![(
                TensorType::new(DType::Bool, vec![4]),
                vec![1.0, 0.0, 0.0, 0.0],
            )],
        ),
        // fn with `...`, named arguments and a tuple result: (a·b, b) summed, (t + h + 1)·d.
        case(
            "fn f(x: f32[..., D], y: f32[D]) -> (f32[..., D], f32[D]) { (x * y, y) }
             step s(a: f32[T, 2, 8], b: f32[8]) -> f32[T, 2, 8] { let (p, q) = f(y: b, x: a); p + q }",
            vec![table(64, |i| (i / 16 + i / 8 % 2) as f64), table(8, |d| d as f64)],
            vec![(
                f32t(&[4, 2, 8]),
                table(64, |i| ((i / 16 + i / 8 % 2 + 1) * (i % 8)) as f64),
            )],
        ),
    ];
    for c in cases {
        let g = build(c.src, "s", 4);
        let types: Vec<TensorType> = c.want.iter().map(|(t, _)| t.clone()).collect();
        assert_eq!(out_types(&g), types, "{}", c.src);
        let inputs = tensors(&g, &c.inputs);
        let outs = tessel_ref::eval_reference(&g, &inputs, &tessel_ref::Model::default())
            .unwrap_or_else(|e| panic!("{}: {e}", c.src));
        for (i, ((ty, want), got)) in c.want.iter().zip(&outs).enumerate() {
            let expected = tensor(ty, want);
            if !c.rounded {
                assert!(
                    same(&expected.to_f64_vec(), want),
                    "{}: output {i}: {want:?} is not exact in {ty}",
                    c.src
                );
                let r: Vec<f64> = got.data.iter().map(|b| b.r).collect();
                assert!(
                    same(&r, want),
                    "{}: output {i}: {r:?}, want {want:?}",
                    c.src
                );
            }
            let v = judge(&expected, got).unwrap_or_else(|e| panic!("{}: {e}", c.src));
            assert!(v.pass(), "{}: output {i}: {v}", c.src);
        }
    }
}

fn consts(g: &Graph) -> Vec<(DType, f64)> {
    g.ops
        .iter()
        .filter_map(|(v, op)| match op {
            Op::Const { value } => Some((g.ty(v).dtype, *value)),
            _ => None,
        })
        .collect()
}

#[test]
fn literals_round_to_their_dtype() {
    // In a comparison a literal takes the tensor's dtype, as PyTorch's compare kernels
    // read it: the bf16 nearest 1e-6, 2^-20 · (1 + 3/128) = 9.98377799987793e-7.
    let g = build("step s(a: bf16[T]) -> bool[T] { a < 1e-6 }", "s", 2);
    assert_eq!(consts(&g), [(DType::Bf16, 9.98377799987793e-7)]);
    // In `+ - * /` it is PyTorch's f32 opmath value: the sum is computed in f32 and
    // rounded once to bf16.
    let g = build("step s(a: bf16[T]) -> bf16[T] { a + 1e-6 }", "s", 2);
    assert_eq!(consts(&g), [(DType::F32, 1e-6f32 as f64)]);
    assert_eq!(count(&g, |op| matches!(op, Op::Cast { .. })), 2);
    // A literal exact in bf16 keeps the plain bf16 operation: the same bits.
    let g = build("step s(a: bf16[T]) -> bf16[T] { a * 0.125 + 3.0 }", "s", 2);
    assert_eq!(count(&g, |op| matches!(op, Op::Cast { .. })), 0);
    // A divisor is a product with its f32 reciprocal, unless that is exact.
    let g = build("step s(a: f32[T]) -> f32[T] { a / 3.0 }", "s", 2);
    assert_eq!(consts(&g), [(DType::F32, (1.0f32 / 3.0f32) as f64)]);
    let g = build("step s(a: f32[T]) -> f32[T] { a / 128.0 }", "s", 2);
    assert_eq!(consts(&g), [(DType::F32, 128.0)]);
    let g = build("step s(a: f32[T]) -> f32[T] { a + 0.1 }", "s", 2);
    assert!(g
        .ops
        .values()
        .any(|op| matches!(op, Op::Const { value } if *value == 0.1f32 as f64)));
}

#[test]
fn output_names_follow_let_names() {
    let g = build(
        "step s(a: f32[T]) -> (f32[T], f32[T]) { let y = a * 2.0; let z = a + 1.0; (y, z) }",
        "s",
        3,
    );
    let outs: Vec<&str> = g.outputs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(outs, ["y", "z"]);
    let g = build("step s(a: f32[T]) -> f32[T] { let a = a * 2.0; a }", "s", 3);
    assert_eq!(g.outputs[0].0, "out");
}

#[test]
fn unused_dims_and_dead_values() {
    let src =
        "step s(a: f32[T]) -> f32[T] { let (x, y) = split(a, 2, axis: 0); let z = sin(a); a }";
    let m = tessel_syntax::parse(src).unwrap();
    let mut d = dims(4);
    d.insert("UNUSED".into(), 9);
    let g = check::run(&m, "s", &d).unwrap();
    assert_eq!(g.ops.len(), 1, "only the input stays");
}

/// Deterministic xorshift, so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Splits source into rough tokens (words, numbers, single punctuation) with the
/// whitespace kept in between, so mutated programs stay close to parsing.
fn tokens(src: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        let mut t = c.to_string();
        if c.is_alphanumeric() || c == '_' || c == '.' {
            while let Some(&n) = chars.peek() {
                if n.is_alphanumeric() || n == '_' || n == '.' {
                    t.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
        }
        out.push(t);
    }
    out
}

#[test]
fn mutations_never_panic() {
    let replacements = [
        "x",
        "w",
        "T",
        "D",
        "1",
        "0",
        "-1",
        "2",
        "3",
        "64",
        "128",
        "5120",
        "1.0",
        "1e-6",
        "true",
        "+",
        "-",
        "*",
        "/",
        "%",
        "@",
        "<",
        "==",
        "!",
        "^T",
        ":",
        "None",
        "...",
        "axis",
        "keep",
        "f32",
        "bf16",
        "i32",
        "bool",
        "sin",
        "mean",
        "sum",
        "max",
        "concat",
        "split",
        "reshape",
        "where",
        "iota",
        "pow",
        "softmax",
        "causal",
        "offset",
        "inf",
        "rms_norm",
        "rope",
        "permute",
        "transpose",
        "EPS",
        "THETA",
        "(",
        ")",
        "[",
        "]",
        ",",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    for file in ["rms_norm.tsl", "rope.tsl", "swiglu.tsl"] {
        let src = example(file);
        let toks = tokens(&src);
        let m0 = tessel_syntax::parse(&src).unwrap();
        let steps = check::steps(&m0);
        for _ in 0..1500 {
            let mut t = toks.clone();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(t.len());
                match rng.below(3) {
                    0 => t[i] = replacements[rng.below(replacements.len())].to_string(),
                    1 => {
                        t.remove(i);
                    }
                    _ => {
                        let j = rng.below(t.len());
                        let tok = t[j].clone();
                        t.insert(i, tok);
                    }
                }
            }
            let mutated: String = t.concat();
            let Ok(m) = tessel_syntax::parse(&mutated) else {
                continue;
            };
            for step in &steps {
                for tval in [1, 4] {
                    match check::run(&m, step, &dims(tval)) {
                        Ok(g) => {
                            if let Err(e) = tessel_ir::verify::verify_graph(&g, None, None) {
                                panic!(
                                    "mutated program checks but does not verify: {e:?}\n{mutated}"
                                );
                            }
                        }
                        Err(ds) => {
                            assert!(!ds.is_empty());
                            for d in &ds {
                                let _ = d.render("m.tsl", &mutated, false);
                            }
                        }
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "only {checked} mutants parsed");
}

#[test]
fn deep_expressions_do_not_overflow_the_stack() {
    let mut src = String::from("step s(a: f32[T]) -> f32[T] { ");
    src.push_str(&"-".repeat(20000));
    src.push_str("a + 0.0");
    for _ in 0..20000 {
        src.push_str(" + a");
    }
    src.push_str(" }");
    let Ok(m) = tessel_syntax::parse(&src) else {
        return;
    };
    let _ = check::run(&m, "s", &dims(2));
}

/// The diagnostics of checking step `s` of `src` at `T = 4`; panics if it checks.
fn errors(src: &str) -> Vec<tessel_syntax::Diagnostic> {
    let m = tessel_syntax::parse(src).unwrap_or_else(|d| panic!("parse: {d:?}"));
    match check::run(&m, "s", &dims(4)) {
        Ok(_) => panic!("checked without errors:\n{src}"),
        Err(ds) => ds,
    }
}

/// The source text under a diagnostic's primary label.
fn primary<'a>(src: &'a str, d: &tessel_syntax::Diagnostic) -> &'a str {
    &src[d.primary_span().range()]
}

#[test]
fn iota_counts_at_most_to_the_largest_i32() {
    // iota(2^31) ends at i32::MAX: fine. One more would wrap to a negative value.
    let ok = "step s() -> i32[2147483648] { iota(2147483648) }";
    let m = tessel_syntax::parse(ok).unwrap();
    assert!(check::run(&m, "s", &dims(4)).is_ok());
    for n in ["2147483649", "3000000000", "9223372036854775807"] {
        let src = format!("step s() -> i32[T] {{ iota({n})[0:T] }}");
        let ds = errors(&src);
        assert_eq!(ds.len(), 1, "{ds:?}");
        assert_eq!(ds[0].code, check::codes::LITERAL_RANGE);
        assert_eq!(primary(&src, &ds[0]), n);
    }
}

#[test]
fn tensors_past_32_bit_offsets_are_refused_at_their_source() {
    // The largest tensor kernels can index checks; one element more does not.
    let limit = check::MAX_NUMEL;
    assert_eq!(limit, u32::MAX as u64 - 1);
    let ok = format!("step s(x: i32[{limit}]) -> i32[{limit}] {{ x }}");
    let m = tessel_syntax::parse(&ok).unwrap();
    assert!(check::run(&m, "s", &dims(4)).is_ok());

    // An input: blamed on its declared type, named, with the size and the limit.
    let src = "step s(x: bf16[3, 4294967295]) -> bf16[T] { x[0, 0:T] }";
    let ds = errors(src);
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].code, check::codes::BAD_DIM);
    assert_eq!(primary(src, &ds[0]), "bf16[3, 4294967295]");
    assert!(ds[0].message.contains("input `x`"), "{}", ds[0].message);
    assert!(
        ds[0].message.contains("12884901885 elements"),
        "{}",
        ds[0].message
    );
    assert!(ds[0].notes[0].contains("4294967294"), "{:?}", ds[0].notes);

    // Computed values: a broadcast sum, a reshape, a `where` and a matmul, each blamed on
    // its own expression.
    for (body, blamed) in [
        ("x[None, :] + x[:, None]", "x[None, :] + x[:, None]"),
        (
            "where(x[None, :] > 0.0, x[:, None], 0.0)",
            "where(x[None, :] > 0.0, x[:, None], 0.0)",
        ),
        ("x[:, None] @ x[None, :]", "x[:, None] @ x[None, :]"),
    ] {
        let src = format!("step s(x: f32[65536]) -> f32[T] {{ let y = {body}; y[0, 0:T] }}");
        let ds = errors(&src);
        assert_eq!(ds.len(), 1, "{body}: {ds:?}");
        assert_eq!(ds[0].code, check::codes::BAD_DIM, "{body}");
        assert_eq!(primary(&src, &ds[0]), blamed);
        assert!(
            ds[0].message.contains("f32[65536, 65536]"),
            "{}",
            ds[0].message
        );
    }
}

/// Causal attention over 65536 positions of one head: its scores, f32[1, 65536, 65536], hold
/// 2^32 elements — past what a kernel may store or index, but a fused attention kernel
/// computes them block by block and never stores them.
const HUGE_ATTENTION: &str =
    "step s(q: bf16[65536, 64], k: bf16[65536, 64], v: bf16[65536, 64]) -> bf16[65536, 64] {
    let s = f32(q[None] @ k[None]^T) * 0.125;
    let p = softmax(where(causal(65536, 65536)[None], s, -inf), axis: -1);
    (bf16(p) @ v[None])[0]
}";

#[test]
fn a_fused_attentions_scores_may_pass_32_bit_offsets_and_nothing_else() {
    let m = tessel_syntax::parse(HUGE_ATTENTION).unwrap();
    let g = check::run(&m, "s", &dims(4)).unwrap_or_else(|d| panic!("{d:?}"));
    let biggest = g.ops.keys().map(|v| g.ty(v).shape.numel()).max();
    assert_eq!(biggest, Some(1 << 32), "the scores are in the graph");

    // The same scores, also returned: an output is stored, so it is refused, at its source.
    let src = HUGE_ATTENTION
        .replace(
            "-> bf16[65536, 64] {",
            "-> (bf16[65536, 64], f32[1, 65536, 65536]) {",
        )
        .replace(
            "(bf16(p) @ v[None])[0]\n}",
            "((bf16(p) @ v[None])[0], s)\n}",
        );
    assert_ne!(src, HUGE_ATTENTION);
    let ds = errors(&src);
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].code, check::codes::BAD_DIM);
    assert_eq!(primary(&src, &ds[0]), "f32(q[None] @ k[None]^T) * 0.125");
    assert!(
        ds[0].help.iter().any(|h| h.contains("fused attention")),
        "{ds:?}"
    );

    // Softmax over the scores with no `@ v` after it is no attention: refused, blamed on the
    // last value of the chain (the softmax), not on the scores under it.
    let src = "step s(q: bf16[65536, 64], k: bf16[65536, 64]) -> f32[64] {
    let p = softmax(f32(q @ k^T), axis: -1);
    p[0, 0:64]
}";
    let ds = errors(src);
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].code, check::codes::BAD_DIM);
    assert_eq!(primary(src, &ds[0]), "softmax(f32(q @ k^T), axis: -1)");

    // Past 2^40 elements even attention's scores are refused at once.
    let src = "step s(q: bf16[1048577, 64], k: bf16[1048577, 64], v: bf16[1048577, 64]) -> bf16[1048577, 64] {
    let s = f32(q[None] @ k[None]^T);
    (bf16(softmax(s, axis: -1)) @ v[None])[0]
}";
    let ds = errors(src);
    assert_eq!(ds[0].code, check::codes::BAD_DIM, "{ds:?}");
    assert!(
        ds[0].message.contains("1099513724929 elements"),
        "{}",
        ds[0].message
    );
}

#[test]
fn exponential_inlining_stops_with_the_call_chain() {
    // h40 doubles h39 doubles ... : 2^40 nodes if inlined. It must stop quickly, once,
    // naming the chain outermost first.
    let mut src = String::from("fn h0(a: f32[T]) -> f32[T] { a * 2.0 }\n");
    for i in 1..=40 {
        src.push_str(&format!(
            "fn h{i}(a: f32[T]) -> f32[T] {{ h{}(a) + h{}(a) }}\n",
            i - 1,
            i - 1
        ));
    }
    src.push_str("step s(x: f32[T]) -> f32[T] { h40(x) }\n");
    let start = std::time::Instant::now();
    let ds = errors(&src);
    assert!(start.elapsed().as_secs() < 60, "took {:?}", start.elapsed());
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].code, check::codes::EXPANSION);
    assert_eq!(primary(&src, &ds[0]), "h40(x)");
    let chain: Vec<String> = (0..=40).rev().map(|i| format!("h{i}")).collect();
    let want = chain[..chain.len() - 1].join(" -> ");
    assert!(
        ds[0].notes.iter().any(|n| n.contains(&want)),
        "{:?}",
        ds[0].notes
    );

    // Calls that add no node still count: `let`s that are never used.
    let mut src = String::from("fn h0(a: f32[T]) -> f32[T] { a }\n");
    for i in 1..=40 {
        src.push_str(&format!(
            "fn h{i}(a: f32[T]) -> f32[T] {{ let b = h{}(a); let c = h{}(a); a }}\n",
            i - 1,
            i - 1
        ));
    }
    src.push_str("step s(x: f32[T]) -> f32[T] { h40(x) }\n");
    let ds = errors(&src);
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].code, check::codes::EXPANSION);
}

#[test]
fn long_misspelled_names_are_answered_at_once() {
    // Two 100,000-character names one letter apart: the edit distance alone took 16 s.
    let long = "a".repeat(100_000);
    let src = format!("step s(x: f32[T]) -> f32[T] {{ let {long} = x; x + {long}b }}");
    let start = std::time::Instant::now();
    let ds = errors(&src);
    assert!(
        start.elapsed().as_millis() < 2000,
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].code, check::codes::UNKNOWN_NAME);
    assert_eq!(ds[0].help, None);
    // Short typos are still suggested.
    let ds = errors("step s(x: f32[T]) -> f32[T] { let hidden = x; hiden }");
    assert_eq!(ds[0].help.as_deref(), Some("did you mean `hidden`?"));
}

#[test]
fn pytorch_argument_names_point_to_tessels() {
    for (call, help) in [
        (
            "softmax(x, dim: -1)",
            "PyTorch's `dim` is `axis` in tessel: `softmax(x, axis: ...)`",
        ),
        (
            "sum(x, axis: -1, keepdim: true)",
            "PyTorch's `keepdim` is `keep` in tessel: `sum(x, keep: ...)`",
        ),
    ] {
        let src = format!("step s(x: f32[T, T]) -> f32[T, T] {{ {call} }}");
        let ds = errors(&src);
        // One error: `axis:` is not reported missing a second time.
        assert_eq!(ds.len(), 1, "{call}: {ds:?}");
        assert_eq!(ds[0].code, check::codes::UNKNOWN_NAMED_ARG);
        assert_eq!(ds[0].help.as_deref(), Some(help));
    }
}

#[test]
fn a_const_binds_a_step_dim_of_its_name() {
    let src = "const H = 2;\nstep s(x: f32[H, T]) -> f32[T] { sum(x, axis: 0) * H }";
    let g = build(src, "s", 5);
    assert_eq!(
        g.ty(g.inputs[0].1),
        &TensorType::new(DType::F32, vec![2, 5])
    );
    // A --dim that disagrees with the const is an error at the dim.
    let m = tessel_syntax::parse(src).expect("parses");
    let mut d = dims(5);
    d.insert("H".into(), 3);
    let errs = check::run(&m, "s", &d).expect_err("H = 2 and --dim H=3 conflict");
    assert!(
        errs[0].message.contains("the const `H` is 2"),
        "{:?}",
        errs[0].message
    );
    d.insert("H".into(), 2);
    assert!(check::run(&m, "s", &d).is_ok());
}

#[test]
fn inf_is_a_float_literal_that_takes_its_dtype() {
    let consts = |g: &Graph| -> Vec<(f64, DType)> {
        g.ops
            .iter()
            .filter_map(|(v, op)| match op {
                Op::Const { value } => Some((*value, g.ty(v).dtype)),
                _ => None,
            })
            .collect()
    };
    let ninf = f64::NEG_INFINITY;
    // Beside bf16 scores, -inf is a bf16 constant (no f32 constant, no cast).
    for (dt, d) in [
        ("bf16", DType::Bf16),
        ("f16", DType::F16),
        ("f32", DType::F32),
    ] {
        let src = format!(
            "step s(a: {dt}[T, 3]) -> {dt}[T, 3] {{ softmax(where(a > 0.0, a, -inf), axis: -1) }}"
        );
        let g = build(&src, "s", 2);
        assert!(consts(&g).contains(&(ninf, d)), "{dt}: {:?}", consts(&g));
        assert_eq!(count(&g, |op| matches!(op, Op::Cast { .. })), 0, "{dt}");
    }
    // Alone it is f32, as any float literal; consts and folding take it like one.
    let g = build(
        "const NEG = -inf; step s() -> (f32, f32, f32) { (NEG, inf, -inf * 2.0) }",
        "s",
        2,
    );
    assert_eq!(
        consts(&g),
        [
            (ninf, DType::F32),
            (f64::INFINITY, DType::F32),
            (ninf, DType::F32)
        ]
    );
    // With an integer tensor it promotes to f32, as `0.5` does.
    let g = build("step s(a: i32[T]) -> f32[T] { a + inf }", "s", 2);
    assert_eq!(out_types(&g), [f32t(&[2])]);
    // A let, parameter or const of that name shadows it.
    let g = build(
        "step s(a: f32[T]) -> f32[T] { let inf = 2.0; a * inf }",
        "s",
        2,
    );
    assert_eq!(consts(&g), [(2.0, DType::F32)]);
    let g = build("const inf = 3.0; step s() -> f32 { inf }", "s", 2);
    assert_eq!(consts(&g), [(3.0, DType::F32)]);
    // Where an integer is needed it is an error, and a near miss is answered with it.
    let src = "step s() -> i32[4] { iota(inf) }";
    let ds = errors(src);
    assert_eq!(ds[0].code, check::codes::INTEGER_REQUIRED, "{ds:?}");
    assert!(ds[0].message.contains("float constant inf"), "{ds:?}");
    let src = "step s(a: f32[T]) -> f32[T] { where(a > 0.0, a, -Inf) }";
    let ds = errors(src);
    assert_eq!(ds[0].code, check::codes::UNKNOWN_NAME);
    let text = ds[0].render("s.tsl", src, false);
    assert!(text.contains("did you mean `inf`?"), "{text}");
}

#[test]
fn causal_takes_compile_time_counts() {
    use check::codes;
    // Tensors, a zero or negative count, a float, a count past i32 and an unknown named
    // argument: each argument is diagnosed at its own span.
    let src = "step s(q: f32[T, 4], k: f32[T, 4]) -> bool[T, T] { causal(q, k) }";
    let ds = errors(src);
    assert_eq!(ds.len(), 2, "{ds:?}");
    assert!(ds.iter().all(|d| d.code == codes::NOT_CONSTANT), "{ds:?}");
    assert_eq!((primary(src, &ds[0]), primary(src, &ds[1])), ("q", "k"));
    let text = ds[0].render("s.tsl", src, false);
    assert!(text.contains("write `causal(T, S)`"), "{text}");

    let src = "step s() -> bool[2, 2] { causal(0, -2, offset: 1.5) }";
    let ds = errors(src);
    let got: Vec<(&str, &str)> = ds.iter().map(|d| (d.code, primary(src, d))).collect();
    assert_eq!(
        got,
        [
            (codes::BAD_DIM, "0"),
            (codes::BAD_DIM, "-2"),
            (codes::INTEGER_REQUIRED, "1.5")
        ]
    );
    assert!(ds[0].message.contains("at least one query"), "{ds:?}");
    assert!(ds[1].message.contains("at least one key"), "{ds:?}");

    let src = "step s() -> bool[1, 2147483649] { causal(1, 2147483649) }";
    let ds = errors(src);
    assert_eq!(ds[0].code, codes::LITERAL_RANGE, "{ds:?}");
    assert_eq!(primary(src, &ds[0]), "2147483649");

    let src = "step s() -> bool[T, T] { causal(T, T, diagonal: 1) }";
    let ds = errors(src);
    assert_eq!(ds[0].code, codes::UNKNOWN_NAMED_ARG, "{ds:?}");

    // A negative offset is allowed (j <= i - 1: the diagonal masked too), and offsets far
    // outside -t ..= s - 1 give the all-false and all-true masks without wrapping i32.
    for (offset, ones) in [
        ("-1", 6),
        ("-9223372036854775807", 0),
        ("9223372036854775807", 16),
    ] {
        let src = format!(
            "step s() -> i32 {{ sum(sum(i32(causal(4, 4, offset: {offset})), axis: 1), axis: 0) }}"
        );
        let g = build(&src, "s", 4);
        let out = tessel_ref::eval_reference(&g, &[], &tessel_ref::Model::default()).unwrap();
        assert_eq!(out[0].data[0].r, ones as f64, "offset {offset}");
    }
}
