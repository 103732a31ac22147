//! The judge must catch wrong answers, not only pass right ones: on random programs, one
//! element of each float output moved by 1% must fall outside its bound almost always, and
//! most bounds must be a single value (the reference's exact rounding, nothing to spare).

use std::collections::BTreeMap;
use tessel_fuzz::gen::{generate, Config};
use tessel_passes::{Options, Profile, Target};
use tessel_ref::Tensor;

#[test]
fn a_one_percent_error_is_caught_and_most_bounds_are_points() {
    let cfg = Config::default();
    let (mut perturbed, mut caught) = (0u64, 0u64);
    let mut widths: Vec<f64> = Vec::new();
    for seed in 0..600u64 {
        let p = generate(seed, &cfg);
        let module = tessel_syntax::parse(&p.source_body()).expect("generated programs parse");
        let dims: BTreeMap<String, u64> = p.dim_bindings().into_iter().collect();
        let g = tessel_passes::check::run(&module, "fuzz", &dims).expect("and check");
        let profile = [Profile::Exact, Profile::Invariant, Profile::Fast][(seed % 3) as usize];
        let opts = Options {
            target: Target::h200(),
            profile,
            verify: false,
            tensor_parallel: false,
            wgmma_tma: false,
            wgmma_attention: false,
            wgmma_attention_keys: 0,
            wgmma_pingpong: false,
            merge_launches: true,
            dependent_launch: true,
        };
        let c = tessel_passes::compile(&g, &opts).expect("and compile");
        let inputs: Vec<Tensor> = c
            .program
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (_, b))| {
                Tensor::random(c.program.buffers[*b].ty.clone(), seed * 1000 + i as u64)
            })
            .collect();
        let exec = tessel_ref::run_program(&c.program, &inputs).expect("and run");
        let model = tessel_ref::judge::model_of(&c.program);
        let reference = tessel_ref::eval_reference(&g, &inputs, &model).expect("reference");
        for (out, r) in exec.iter().zip(&reference) {
            if !out.ty.dtype.is_float() || out.numel() == 0 {
                continue;
            }
            let i = (seed as usize * 7919) % out.numel();
            let x = out.get_f64(i);
            let y = Tensor::from_f32(out.ty.dtype, vec![1], &[(x * 1.01) as f32]);
            if !x.is_finite() || x == 0.0 || y.get_f64(0) == x {
                continue;
            }
            let b = &r.data[i];
            widths.push((b.hi - b.lo) / x.abs());
            let mut wrong = out.clone();
            let size = out.ty.dtype.size_bytes() as usize;
            wrong.data[i * size..(i + 1) * size].copy_from_slice(&y.data);
            perturbed += 1;
            caught += !tessel_ref::judge(&wrong, r).expect("same type").pass() as u64;
        }
    }
    widths.sort_by(f64::total_cmp);
    assert!(perturbed > 500, "too few outputs sampled: {perturbed}");
    let rate = caught as f64 / perturbed as f64;
    let q = |f: f64| widths[((widths.len() - 1) as f64 * f) as usize];
    eprintln!(
        "{caught} of {perturbed} caught; bound width relative to the value: median {:e}, p90 {:e}, p99 {:e}",
        q(0.5),
        q(0.9),
        q(0.99)
    );
    assert!(
        rate >= 0.95,
        "a 1% error caught in only {caught} of {perturbed}"
    );
    assert_eq!(
        widths[widths.len() / 2],
        0.0,
        "the median bound is not a point"
    );
}
