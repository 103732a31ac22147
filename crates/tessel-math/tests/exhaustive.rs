//! Exhaustive checks over every f32 input, on demand:
//! `cargo test --release -p tessel-math --test exhaustive -- --ignored --nocapture`
//! (std threads, one chunk of the 2^32 bit patterns each).

mod common;

use common::ulp_err;
use tessel_math::{self as tm, Native};

/// Max ulp error (and its argument) of `f` against `r` over the bit patterns in `lo..=hi`,
/// both signs.
fn sweep(lo: u32, hi: u32, f: fn(f32) -> f32, r: fn(f64) -> f64) -> (f64, f32) {
    sweep_signs(lo, hi, &[0, 0x8000_0000], f, r)
}

/// [`sweep`] over the patterns `lo..=hi` with each sign bit of `signs` (0: positive,
/// 0x8000_0000: negative).
fn sweep_signs(
    lo: u32,
    hi: u32,
    signs: &'static [u32],
    f: fn(f32) -> f32,
    r: fn(f64) -> f64,
) -> (f64, f32) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let total = (hi - lo) as u64 + 1;
    let per = total.div_ceil(threads);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let a = lo as u64 + t * per;
                let b = (a + per).min(hi as u64 + 1);
                let mut worst = (0.0f64, 0.0f32);
                for bits in a..b {
                    for &sign in signs {
                        let x = f32::from_bits(bits as u32 | sign);
                        let e = ulp_err(f(x), r(x as f64));
                        if e > worst.0 || e.is_nan() {
                            worst = (e, x);
                        }
                    }
                }
                worst
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("worker panicked"))
        .fold((0.0, 0.0), |w, v| if v.0 > w.0 { v } else { w })
}

fn report(name: &str, w: (f64, f32), bound: f64) {
    println!(
        "{name:<28} max {:.5} ulp at {:e} ({:#010x})",
        w.0,
        w.1,
        w.1.to_bits()
    );
    assert!(w.0 < bound, "{name}: {} ulp >= {bound}", w.0);
}

/// Bits of 2^20: the RoPE range is every pattern up to this one.
const TWO20: u32 = 0x4980_0000;
const ALL: u32 = 0x7fff_ffff;

#[test]
#[ignore]
fn exhaustive_sin_cos_rope_range() {
    report(
        "sin |x| <= 2^20",
        sweep(0, TWO20, |x| tm::sin(&mut Native, x), f64::sin),
        0.6,
    );
    report(
        "cos |x| <= 2^20",
        sweep(0, TWO20, |x| tm::cos(&mut Native, x), f64::cos),
        0.6,
    );
}

#[test]
#[ignore]
fn exhaustive_sin_cos_above_2_20() {
    report(
        "sin |x| > 2^20",
        sweep(TWO20 + 1, ALL, |x| tm::sin(&mut Native, x), f64::sin),
        0.6,
    );
    report(
        "cos |x| > 2^20",
        sweep(TWO20 + 1, ALL, |x| tm::cos(&mut Native, x), f64::cos),
        0.6,
    );
}

/// The fused attention's single-f32 exp: below 1 ulp (the design's bound) over every f32,
/// where the result is normal and where it is denormal (rounded twice) alike.
#[test]
#[ignore]
fn exhaustive_exp_f32() {
    report(
        "exp_f32",
        sweep(0, ALL, |x| tm::exp_f32(&mut Native, x), f64::exp),
        1.0,
    );
}

/// The online softmax's exp on its domain: below 1 ulp over every f32 ≤ 0 and every
/// positive one up to 43.6; where the result is normal (x ≥ -87.33), below 0.8.
#[test]
#[ignore]
fn exhaustive_exp_f32_nonpos() {
    let f = |x| tm::exp_f32_nonpos(&mut Native, x);
    let edge = 87.33f32.to_bits();
    let normal_neg = sweep_signs(0, edge, &[0x8000_0000], f, f64::exp);
    let pos = sweep_signs(0, 43.6f32.to_bits(), &[0], f, f64::exp);
    let tiny = sweep_signs(edge + 1, ALL, &[0x8000_0000], f, f64::exp);
    let normal = if pos.0 > normal_neg.0 {
        pos
    } else {
        normal_neg
    };
    report("exp_f32_nonpos, normal results", normal, 0.8);
    report(
        "exp_f32_nonpos",
        if tiny.0 > normal.0 { tiny } else { normal },
        1.0,
    );
}

/// The single-f32 silu for 16-bit results: below 1 ulp (the design's bound) over every f32.
#[test]
#[ignore]
fn exhaustive_silu_f32() {
    report(
        "silu_f32",
        sweep(
            0,
            ALL,
            |x| tm::silu_f32(&mut Native, x),
            |x| x / (1.0 + (-x).exp()),
        ),
        1.0,
    );
}

#[test]
#[ignore]
fn exhaustive_exp_log() {
    report(
        "exp",
        sweep(0, ALL, |x| tm::exp(&mut Native, x), f64::exp),
        0.51,
    );
    report(
        "log",
        sweep(0, ALL, |x| tm::log(&mut Native, x), f64::ln),
        0.51,
    );
}

#[test]
#[ignore]
fn exhaustive_others() {
    report(
        "rsqrt",
        sweep(0, ALL, |x| tm::rsqrt(&mut Native, x), |x| 1.0 / x.sqrt()),
        0.51,
    );
    report(
        "tanh",
        sweep(0, ALL, |x| tm::tanh(&mut Native, x), f64::tanh),
        0.55,
    );
    report(
        "sigmoid",
        sweep(
            0,
            ALL,
            |x| tm::sigmoid(&mut Native, x),
            |x| 1.0 / (1.0 + (-x).exp()),
        ),
        0.51,
    );
    report(
        "silu",
        sweep(
            0,
            ALL,
            |x| tm::silu(&mut Native, x),
            |x| x / (1.0 + (-x).exp()),
        ),
        0.51,
    );
}

#[test]
#[ignore]
fn exhaustive_erf() {
    report(
        "erf",
        sweep(0, ALL, |x| tm::erf(&mut Native, x), libm::erf),
        1.0,
    );
}
