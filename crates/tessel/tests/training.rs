//! Training steps obtained with `grad`, on the kernel-IR executor (no GPU):
//! - the LoRA delta's backward from `grad` gives the bits of the hand-written contract
//!   (examples/lora/lora_delta.tsl `backward` vs `by_hand`) in every profile;
//! - the f32 adapter's `grad` gives the bits of examples/lora/lora_step.tsl's six GEMMs;
//! - in `invariant`, every row of U, ΔY and dX is the same bits whatever the batch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::kernel::Program;
use tessel_passes::{check, compile, Options, Profile};
use tessel_ref::{run_program, Tensor};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Step `step` of `file` compiled at `dims` in `profile`.
fn program(file: &str, step: &str, dims: &[(&str, u64)], profile: Profile) -> Program {
    let path = root().join(file);
    let src = std::fs::read_to_string(&path).expect("read the example");
    let module = tessel_syntax::parse(&src).expect("parses");
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let g = check::run(&module, step, &dims)
        .unwrap_or_else(|d| panic!("{step}: {}", d[0].render("f", &src, false)));
    let opts = Options {
        verify: true,
        profile,
        ..Default::default()
    };
    compile(&g, &opts)
        .unwrap_or_else(|e| panic!("{step}: {e}"))
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
