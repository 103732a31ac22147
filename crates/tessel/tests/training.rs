//! Training steps obtained with `grad`, on the kernel-IR executor (no GPU):
//! - the LoRA delta's backward from `grad` gives the bits of the hand-written contract
//!   (examples/lora/lora_delta.tsl `backward` vs `by_hand`) in every profile;
//! - the f32 adapter's `grad` gives the bits of examples/lora/lora_step.tsl's six GEMMs;
//! - in `invariant`, every row of U, ΔY and dX is the same bits whatever the batch;
//! - AdamW (examples/lora/adamw.tsl) is torch.optim.AdamW's update rounded op by op, over
//!   ten steps, and tracks the same updates in f64 within the bound its roundings allow.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::kernel::Program;
use tessel_passes::{check, Options, Profile};
use tessel_ref::{run_program, Tensor};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Step `step` of `file` compiled at `dims` in `profile`.
fn program(file: &str, step: &str, dims: &[(&str, u64)], profile: Profile) -> Program {
    let src = tessel_driver::Source::load(&root().join(file), false)
        .unwrap_or_else(|_| panic!("{file}: does not load (run `tessel check` on it)"));
    let config = tessel_driver::Config {
        dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        options: Options {
            verify: true,
            profile,
            ..Default::default()
        },
        tp: None,
    };
    src.compile_step(step, &config, &tessel_driver::Weights::none())
        .unwrap_or_else(|e| panic!("{step}: {e} (`tessel check` renders it)"))
        .compiled
        .program
}

/// Random inputs of `p` by name (`seed` per name), so that two programs with the same
/// parameter names get the same tensors.
fn inputs(p: &Program, seed: u64) -> Vec<Tensor> {
    p.inputs
        .iter()
        .map(|(name, b)| {
            let ty = p.buffers[*b].ty.clone();
            let h = name
                .bytes()
                .fold(seed, |h, c| h.wrapping_mul(31) ^ c as u64);
            Tensor::random(ty, h)
        })
        .collect()
}

fn run(p: &Program, ins: &[Tensor]) -> Vec<Tensor> {
    run_program(p, ins).unwrap_or_else(|e| panic!("executor: {e}"))
}

#[test]
fn the_lora_delta_backward_from_grad_is_the_hand_written_contract() {
    for &(m, k, n, r) in &[
        (1u64, 64u64, 32u64, 16u64),
        (7, 40, 24, 8),
        (24, 64, 32, 16),
    ] {
        let dims = [("M", m), ("K", k), ("N", n), ("R", r)];
        for profile in Profile::ALL {
            let g = program("examples/lora/lora_delta.tsl", "backward", &dims, profile);
            let h = program("examples/lora/lora_delta.tsl", "by_hand", &dims, profile);
            let ins = inputs(&g, 3);
            let (a, b) = (run(&g, &ins), run(&h, &ins));
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    x.data == y.data,
                    "{profile:?} M={m} K={k} N={n} R={r}: output {i} differs from the hand-written GEMMs"
                );
            }
        }
    }
}

#[test]
fn the_f32_adapter_grad_is_lora_steps_six_gemms() {
    let dims = [("M", 24), ("K", 64), ("N", 32), ("R", 16)];
    for profile in Profile::ALL {
        let g = program(
            "examples/lora/lora_grad_f32.tsl",
            "lora_grad",
            &dims,
            profile,
        );
        let h = program("examples/lora/lora_step.tsl", "lora_step", &dims, profile);
        let ins = inputs(&g, 5);
        let (a, b) = (run(&g, &ins), run(&h, &ins));
        assert_eq!(a.len(), 4);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                x.data == y.data,
                "{profile:?}: output {i} differs from lora_step's"
            );
        }
    }
}

/// Rows `r0 .. r0 + m` of a row-major tensor.
fn rows(t: &Tensor, r0: usize, m: usize) -> Vec<u8> {
    let row = t.data.len() / t.ty.shape.0[0] as usize;
    t.data[r0 * row..(r0 + m) * row].to_vec()
}

/// Rows `r0 .. r0 + m` of `t` as a tensor of its own.
fn sub(t: &Tensor, r0: usize, m: usize) -> Tensor {
    let mut ty = t.ty.clone();
    ty.shape.0[0] = m as u64;
    Tensor {
        ty,
        data: rows(t, r0, m),
    }
}

#[test]
fn the_invariant_lora_delta_rows_do_not_depend_on_the_batch() {
    // ΔY and U (`forward`) and dX (`backward`) for a batch of 37 rows, then
    // for sub-batches of it; each sub-batch's rows must be the whole batch's bits.
    let (k, n, r) = (72u64, 40u64, 8u64);
    let whole = 37usize;
    let dims = |m: u64| [("M", m), ("K", k), ("N", n), ("R", r)];
    let fwd = program(
        "examples/lora/lora_delta.tsl",
        "forward",
        &dims(whole as u64),
        Profile::Invariant,
    );
    let bwd = program(
        "examples/lora/lora_delta.tsl",
        "backward",
        &dims(whole as u64),
        Profile::Invariant,
    );
    let ins = inputs(&bwd, 11);
    // backward's inputs: x, a, b, alpha, dy; forward's: x, a, b, alpha.
    let dy_full = run(&fwd, &ins[..4]);
    let dx_full = run(&bwd, &ins);
    for &(r0, m) in &[(0usize, 1usize), (3, 5), (16, 16), (36, 1), (5, 32)] {
        let f = program(
            "examples/lora/lora_delta.tsl",
            "forward",
            &dims(m as u64),
            Profile::Invariant,
        );
        let b = program(
            "examples/lora/lora_delta.tsl",
            "backward",
            &dims(m as u64),
            Profile::Invariant,
        );
        let mut part = ins.clone();
        part[0] = sub(&ins[0], r0, m);
        part[4] = sub(&ins[4], r0, m);
        let y = run(&f, &part[..4]);
        for (o, what) in [(0, "ΔY"), (1, "U")] {
            assert_eq!(
                y[o].data,
                rows(&dy_full[o], r0, m),
                "{what} rows {r0}..{} differ from the batch of {whole}",
                r0 + m
            );
        }
        let d = run(&b, &part);
        assert_eq!(
            d[0].data,
            rows(&dx_full[0], r0, m),
            "dX rows {r0}..{} differ from the batch of {whole}",
            r0 + m
        );
    }
}

/// The whole LoRA training step of a small Qwen2 layer (tests/programs/lora_layer_small.tsl
/// `qwen2_mse_grads`: attention, RMSNorm, RoPE, SwiGLU between the adapters and the loss):
/// every adapter's gradient, on the f64 oracle of the differentiated step, against central
/// differences of the loss (the fuzzer's judge, `tessel_fuzz::fd`: 24 elements and 2
/// directions per adapter). The adapters are small grid values, as LoRA's are.
#[test]
fn the_lora_layer_gradients_match_finite_differences() {
    let path = root().join("tests/programs/lora_layer_small.tsl");
    let loaded = tessel_syntax::load::load(&path).expect("loads");
    let dims: BTreeMap<String, u64> = [("T".to_string(), 5u64), ("R".to_string(), 2u64)].into();
    let g = check::run(&loaded.module, "qwen2_mse_grads", &dims).expect("checks");
    let ins: Vec<Tensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (name, v))| {
            let ty = g.ty(*v).clone();
            if name == "pos" {
                let n = ty.shape.numel() as i32;
                return Tensor::from_i32(ty.shape.0.clone(), &(0..n).collect::<Vec<_>>());
            }
            if ty.dtype == tessel_ir::DType::F32 {
                let n = ty.shape.numel() as usize;
                let vals: Vec<f32> = (0..n)
                    .map(|j| (((j * 37 + i * 101 + 3) % 255) as f32 - 127.0) / 512.0)
                    .collect();
                return Tensor::from_f32(ty.dtype, ty.shape.0.clone(), &vals);
            }
            Tensor::random(ty, 40 + i as u64)
        })
        .collect();
    let report =
        tessel_fuzz::fd::judge(&g, &tessel_fuzz::fd::fd_inputs(&ins), 1).expect("the judge runs");
    assert!(report.pass(), "{:?}", report.wrong);
    let per = (tessel_fuzz::fd::COORDINATES + tessel_fuzz::fd::DIRECTIONS) as u64;
    assert_eq!(
        report.checked + report.inconclusive,
        14 * per,
        "the seven projections' A and B"
    );
    assert!(
        report.inconclusive <= per,
        "{} of {} inconclusive",
        report.inconclusive,
        14 * per
    );
}

/// One tensor's AdamW state as the test follows it: the parameter and its two moments.
#[derive(Clone)]
struct Adam {
    p: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// The hyperparameters of the AdamW test: torch.optim.AdamW's defaults but for a weight
/// decay of 0.01 (its default) and a learning rate of 1e-3 (its default).
const LR: f64 = 1e-3;
const BETAS: (f64, f64) = (0.9, 0.999);
const EPS: f64 = 1e-8;
const WEIGHT_DECAY: f64 = 0.01;

/// The f32 scalars AdamW's kernels receive at step `t`, computed in double as torch's
/// Python code computes them (torch/optim/adam.py `_multi_tensor_adam`), in the order of
/// examples/lora/adamw.tsl's parameters: 1 − β1, β2, 1 − β2, 1 − lr·λ, lr / bc1, √bc2, ε.
fn adamw_scalars(t: i32) -> [f32; 7] {
    let (b1, b2) = BETAS;
    let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
    [
        1.0 - b1,
        b2,
        1.0 - b2,
        1.0 - LR * WEIGHT_DECAY,
        LR / bc1,
        bc2.sqrt(),
        EPS,
    ]
    .map(|x| x as f32)
}

/// examples/lib/adamw.tsl's update in f32, operation by operation (Rust rounds every f32
/// operation once and never contracts a multiply-add).
fn adamw_f32(s: &mut Adam, g: &[f32], t: i32) {
    let [w1, b2, w2, decay, step, bc2_sqrt, eps] = adamw_scalars(t);
    for (i, &g) in g.iter().enumerate() {
        s.m[i] = s.m[i] + w1 * (g - s.m[i]);
        s.v[i] = s.v[i] * b2 + w2 * g * g;
        s.p[i] = s.p[i] * decay - step * (s.m[i] / (s.v[i].sqrt() / bc2_sqrt + eps));
    }
}

/// The same update in f64 (the algorithm, without f32 roundings), from the same gradients.
fn adamw_f64(p: &mut [f64], m: &mut [f64], v: &mut [f64], g: &[f32], t: i32) {
    let (b1, b2) = BETAS;
    let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
    for (i, &g) in g.iter().enumerate() {
        let g = g as f64;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        p[i] =
            p[i] * (1.0 - LR * WEIGHT_DECAY) - LR / bc1 * m[i] / (v[i].sqrt() / bc2.sqrt() + EPS);
    }
}

#[test]
fn adamw_is_torchs_update_rounded_op_by_op_over_ten_steps() {
    let (r, k, n) = (4u64, 40u64, 24u64);
    let dims = [("R", r), ("K", k), ("N", n)];
    let f32s = |t: &Tensor| t.to_f32_vec();
    for profile in Profile::ALL {
        let p = program("examples/lora/adamw.tsl", "adamw", &dims, profile);
        let start = inputs(&p, 11);
        let named = |name: &str| {
            let i = p.inputs.iter().position(|(n, _)| n == name).expect(name);
            start[i].clone()
        };
        // B starts at zero as PEFT's does; the moments at zero as torch's.
        let mut state = [
            Adam {
                p: f32s(&named("a")),
                m: vec![0.0; (r * k) as usize],
                v: vec![0.0; (r * k) as usize],
            },
            Adam {
                p: vec![0.0; (n * r) as usize],
                m: vec![0.0; (n * r) as usize],
                v: vec![0.0; (n * r) as usize],
            },
        ];
        let mut exact: Vec<[Vec<f64>; 3]> = state
            .iter()
            .map(|s| {
                let z = vec![0.0; s.p.len()];
                [s.p.iter().map(|&x| x as f64).collect(), z.clone(), z]
            })
            .collect();
        let shapes = [vec![r, k], vec![n, r]];
        for t in 1..=10 {
            // Gradients of a few different sizes per step, some elements tiny (ε matters).
            let grads: Vec<Vec<f32>> = (0..2)
                .map(|j| {
                    let g = f32s(&Tensor::random(
                        tessel_ir::TensorType::new(tessel_ir::DType::F32, shapes[j].clone()),
                        100 * t as u64 + j as u64,
                    ));
                    g.iter()
                        .enumerate()
                        .map(|(i, &x)| x * [1.0, 1e-3, 1e-9][i % 3])
                        .collect()
                })
                .collect();
            let [w1, b2, w2, decay, step, bc2_sqrt, eps] = adamw_scalars(t);
            let scalar = |x: f32| Tensor::from_f32(tessel_ir::DType::F32, vec![], &[x]);
            let t32 =
                |v: &[f32], j: usize| Tensor::from_f32(tessel_ir::DType::F32, shapes[j].clone(), v);
            let ins: Vec<Tensor> = p
                .inputs
                .iter()
                .map(|(name, _)| match name.as_str() {
                    "a" => t32(&state[0].p, 0),
                    "b" => t32(&state[1].p, 1),
                    "m_a" => t32(&state[0].m, 0),
                    "v_a" => t32(&state[0].v, 0),
                    "m_b" => t32(&state[1].m, 1),
                    "v_b" => t32(&state[1].v, 1),
                    "g_a" => t32(&grads[0], 0),
                    "g_b" => t32(&grads[1], 1),
                    "w1" => scalar(w1),
                    "beta2" => scalar(b2),
                    "w2" => scalar(w2),
                    "decay" => scalar(decay),
                    "step_size" => scalar(step),
                    "bc2_sqrt" => scalar(bc2_sqrt),
                    "eps" => scalar(eps),
                    other => panic!("unexpected input {other}"),
                })
                .collect();
            let outs = run(&p, &ins);
            let out = |name: &str| {
                let i = p.outputs.iter().position(|(n, _)| n == name).expect(name);
                f32s(&outs[i])
            };
            for (j, s) in state.iter_mut().enumerate() {
                adamw_f32(s, &grads[j], t);
                let e = &mut exact[j];
                let [ep, em, ev] = e;
                adamw_f64(ep, em, ev, &grads[j], t);
            }
            for (j, (pn, mn, vn)) in [("a", "m_a", "v_a"), ("b", "m_b", "v_b")]
                .into_iter()
                .enumerate()
            {
                for (name, want) in [(pn, &state[j].p), (mn, &state[j].m), (vn, &state[j].v)] {
                    let got = out(name);
                    let same = got
                        .iter()
                        .zip(want)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{profile:?} step {t}: {name} is not the f32 update");
                }
            }
        }
        // Against f64: each step rounds p twice (the decay, then the subtraction: at most
        // one ulp of |p| each; the update itself, ~lr, is off by some 1e-7 of itself from
        // its five roundings and the f32 scalars) — so after ten steps at most 20 ulp of
        // the largest |p| (or 1e-6·lr where p is still ~0, as B's first steps). The
        // moments, rounded two or three times a step from the same gradients with weights
        // off by at most half an ulp, stay within 1e-6 of their largest value.
        for (j, s) in state.iter().enumerate() {
            let top = exact[j][0].iter().fold(0f64, |a, &x| a.max(x.abs()));
            let ulp = if top > 0.0 {
                top * f32::EPSILON as f64
            } else {
                f64::MIN_POSITIVE
            };
            let worst =
                s.p.iter()
                    .zip(&exact[j][0])
                    .fold(0f64, |a, (&x, &y)| a.max((x as f64 - y).abs()));
            assert!(
                worst <= 20.0 * ulp.max(LR * 1e-6),
                "{profile:?}: tensor {j} drifts {worst:e} from f64 AdamW after ten steps (20 ulp = {:e})",
                20.0 * ulp
            );
            for (got, want) in [(&s.m, &exact[j][1]), (&s.v, &exact[j][2])] {
                let scale = want.iter().fold(0f64, |a, &x| a.max(x.abs()));
                let worst = got
                    .iter()
                    .zip(want)
                    .fold(0f64, |a, (&x, &y)| a.max((x as f64 - y).abs()));
                assert!(
                    worst <= 1e-6 * scale,
                    "{profile:?}: a moment drifts {worst:e} of {scale:e}"
                );
            }
        }
    }
}

/// The fused attention backward (fuse rule 10: an attention_dq and an attention_dkv
/// kernel): chosen for the causal GQA backward in `invariant` and `fast` (never in
/// `exact`), right by the reference at one key, a partial block and several blocks with
/// masked ones skipped, and in `invariant` each query's dQ row is the same bits whatever
/// the number of queries after it (causal rows see no later key).
#[test]
fn the_fused_attention_backward_is_right_and_batch_invariant() {
    let file = "tests/programs/grad_small.tsl";
    for profile in [Profile::Invariant, Profile::Fast, Profile::Exact] {
        for t in [1u64, 37, 130] {
            let dims = [("T", t)];
            let p = program(file, "attention_grads", &dims, profile);
            let fused = p
                .kernels
                .iter()
                .filter(|(_, k)| k.schedule.starts_with("attention_bwd"))
                .count();
            assert_eq!(
                fused,
                if profile == Profile::Exact { 0 } else { 2 },
                "{profile:?} T = {t}: the dq and dkv kernels"
            );
            let path = root().join(file);
            let module = tessel_syntax::load::load(&path).expect("loads").module;
            let dm: BTreeMap<String, u64> = [("T".to_string(), t)].into();
            let checked = check::run(&module, "attention_grads", &dm).expect("checks");
            // As `tessel check` judges it: `grad` differentiated, op for op.
            let checked = tessel_passes::grad::run(&checked).expect("differentiates");
            let ins = inputs(&p, 7 + t);
            let got = run(&p, &ins);
            let verdicts =
                tessel_ref::judge::judge_step(&checked, &p, &ins, &got, None).expect("judged");
            for v in verdicts {
                assert!(v.pass(), "{profile:?} T = {t}: {} {:?}", v.name, v.executor);
            }
        }
    }
    // Invariant: the first 40 queries' dQ rows at T = 40 and T = 130 (causal: the extra
    // queries change no earlier query's gradient; dy and q, k, v agree on those rows).
    let small = program(file, "attention_grads", &[("T", 40)], Profile::Invariant);
    let large = program(file, "attention_grads", &[("T", 130)], Profile::Invariant);
    let big_in = inputs(&large, 3);
    let small_in: Vec<Tensor> = big_in.iter().map(|x| sub(x, 0, 40)).collect();
    let (a, b) = (run(&small, &small_in), run(&large, &big_in));
    assert_eq!(
        rows(&a[0], 0, 40),
        rows(&b[0], 0, 40),
        "dQ rows of the first 40 queries"
    );
}

/// The attention backward's block width changes how often a CTA waits for its copies,
/// never the bits: its loop body covers 16 columns and runs `block_n / 16` times per block,
/// folding and multiplying in column order either way. Every output (and intermediate) of
/// the fused kernels is byte-identical on the executor at widths 16, 32 and 64 of each
/// kernel, at a partial block (T = 37: 37 keys, blocks past the end zero-filled) and at
/// several blocks with masked ones skipped (T = 130).
#[test]
fn the_attention_backward_bits_do_not_depend_on_its_block_width() {
    use tessel_ir::graph::{GroupOps, TileConfig};
    use tessel_passes::pipeline::{pass, run_passes, Ir, Run};
    let file = "tests/programs/grad_small.tsl";
    let path = root().join(file);
    let module = tessel_syntax::load::load(&path).expect("loads").module;
    for profile in [Profile::Invariant, Profile::Fast] {
        for t in [37u64, 130] {
            let dm: BTreeMap<String, u64> = [("T".to_string(), t)].into();
            let checked = check::run(&module, "attention_grads", &dm).expect("checks");
            let opts = Options {
                verify: true,
                profile,
                ..Default::default()
            };
            let Ir::Scheduled(g, f, s) =
                run_passes(&checked, &opts, pass("schedule"), &mut |_, _| {}).expect("compiles")
            else {
                panic!("stopped after schedule")
            };
            let lowered = |dq: u32, dkv: u32| -> Program {
                let mut s = s.clone();
                let mut seen = 0;
                for (grp, sch) in s.iter_mut() {
                    if let Some(sch) = sch {
                        if let TileConfig::AttentionBwd { block_n, .. } = &mut sch.tile {
                            let is_dq = matches!(f.groups[grp].ops, GroupOps::AttentionDq { .. });
                            *block_n = if is_dq { dq } else { dkv };
                            seen += 1;
                        }
                    }
                }
                assert_eq!(seen, 2, "{profile:?} T = {t}: the dq and dkv kernels");
                // `lower` and every kernel pass after it, as the registry lists them.
                let mut p = None;
                for info in tessel_passes::PASSES {
                    match (&info.run, &mut p) {
                        (Run::Lower(run), None) => {
                            p = Some(run(&g, &f, &s).expect("lowers").program)
                        }
                        (Run::Kernel { run, .. }, Some(p)) => {
                            for (_, k) in p.kernels.iter_mut() {
                                run(k).expect("kernel pass");
                            }
                        }
                        _ => {}
                    }
                }
                p.expect("a lower pass")
            };
            let base = lowered(16, 16);
            let ins = inputs(&base, 11 + t);
            let want = run(&base, &ins);
            for (dq, dkv) in [(32, 32), (64, 64), (16, 64), (64, 32)] {
                let got = run(&lowered(dq, dkv), &ins);
                for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                    assert!(
                        a.data == b.data,
                        "{profile:?} T = {t}: output {i} differs at dq {dq}, dkv {dkv}"
                    );
                }
            }
        }
    }
}
