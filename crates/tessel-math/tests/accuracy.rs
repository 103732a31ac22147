//! Max ulp error of every function against f64 references over >= 10^7 seeded samples plus the
//! edge values; each test asserts the bound stated in the crate docs. Print with --nocapture.

mod common;

use common::{edge_values, Rng, Worst};
use std::f64::consts::FRAC_PI_2;
use tessel_math::{self as tm, Native};

fn sin32(x: f32) -> f32 {
    tm::sin(&mut Native, x)
}
fn cos32(x: f32) -> f32 {
    tm::cos(&mut Native, x)
}

/// Largest k with k·π/2 <= 2^20.
const K_MAX: u32 = 667_544;

#[test]
fn sin_cos_rope_range() {
    let mut ws = Worst::new("sin |x|<=2^20");
    let mut wc = Worst::new("cos |x|<=2^20");
    let mut rng = Rng(1);
    let mut run = |x: f32| {
        let (s, c) = tm::sincos(&mut Native, x);
        let xd = x as f64;
        ws.add(&[x], s, xd.sin());
        wc.add(&[x], c, xd.cos());
    };
    let lim = 1_048_576.0;
    for _ in 0..4_000_000 {
        run(rng.uniform(-lim, lim));
    }
    for _ in 0..2_000_000 {
        let x = rng.log_uniform(-30.0, 20.0);
        run(rng.sign(x));
    }
    // The f32 nearest every multiple of π/2 up to 2^20 and two neighbours each side: the hardest
    // arguments for the reduction are among these.
    for k in 1..=K_MAX {
        let x0 = (k as f64 * FRAC_PI_2) as f32;
        if x0 > lim as f32 {
            continue;
        }
        let s = if k & 1 == 1 { 1.0 } else { -1.0 };
        for d in -2i32..=2 {
            run(s * f32::from_bits((x0.to_bits() as i32 + d) as u32));
        }
    }
    for _ in 0..1_000_000 {
        let k = 1 + rng.next_u32() % K_MAX;
        let x0 = (k as f64 * FRAC_PI_2) as f32;
        let d = (rng.next_u32() % 129) as i32 - 64;
        let x = f32::from_bits((x0.to_bits() as i32 + d) as u32);
        if x <= lim as f32 {
            run(rng.sign(x));
        }
    }
    for x in edge_values() {
        if x.is_nan() || x.abs() <= lim as f32 {
            run(x);
        }
    }
    // The requirement: faithful (< 1 ulp) on the whole RoPE range.
    ws.check(1.0);
    wc.check(1.0);
    // The stated bound (crate doc, docs/numerics.md).
    ws.check(0.6);
    wc.check(0.6);
}

#[test]
fn sin_cos_full_range() {
    let mut ws = Worst::new("sin all f32");
    let mut wc = Worst::new("cos all f32");
    let mut rng = Rng(2);
    let mut run = |x: f32| {
        let (s, c) = tm::sincos(&mut Native, x);
        let xd = x as f64;
        ws.add(&[x], s, xd.sin());
        wc.add(&[x], c, xd.cos());
    };
    for _ in 0..2_000_000 {
        let x = rng.log_uniform(20.0, 128.0);
        run(rng.sign(x));
    }
    // Around the CW/PH switch.
    for d in -1000i32..=1000 {
        run(f32::from_bits((0x4980_0000i32 + d) as u32));
    }
    // The f32 closest to a multiple of π/2 over the whole range (Muller, "Elementary Functions",
    // 3rd ed., table 11.1): 16367173·2^72.
    let hard = 16_367_173.0f32 * 2f32.powi(72);
    for d in -3i32..=3 {
        let x = f32::from_bits((hard.to_bits() as i32 + d) as u32);
        run(x);
        run(-x);
    }
    for x in edge_values() {
        run(x);
    }
    ws.check(0.6);
    wc.check(0.6);
}

#[test]
fn sin_cos_special_values() {
    assert_eq!(sin32(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(sin32(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(cos32(-0.0), 1.0);
    for x in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        assert!(sin32(x).is_nan() && cos32(x).is_nan());
    }
    let d = f32::from_bits(1);
    assert_eq!(sin32(d), d);
    assert_eq!(sin32(-d), -d);
    // sin/cos agree with sincos.
    let mut rng = Rng(3);
    for _ in 0..10_000 {
        let x = rng.any_bits();
        let (s, c) = tm::sincos(&mut Native, x);
        assert_eq!(s.to_bits(), sin32(x).to_bits());
        assert_eq!(c.to_bits(), cos32(x).to_bits());
    }
}

#[test]
fn exp_accuracy() {
    let mut w = Worst::new("exp");
    let mut rng = Rng(4);
    let mut run = |x: f32| w.add(&[x], tm::exp(&mut Native, x), (x as f64).exp());
    for _ in 0..6_000_000 {
        run(rng.uniform(-104.0, 89.0));
    }
    for _ in 0..2_000_000 {
        let x = rng.log_uniform(-30.0, 7.0);
        run(rng.sign(x));
    }
    for _ in 0..2_000_000 {
        run(rng.any_bits());
    }
    // overflow, last normal, denormal range, last non-zero
    for c in [
        88.722_83f32,
        88.722_84,
        -87.336_54,
        -87.336_55,
        -103.278_93,
        -103.972_08,
        -103.972_09,
    ] {
        for d in -64i32..=64 {
            run(f32::from_bits((c.to_bits() as i32 + d) as u32));
        }
    }
    for x in edge_values() {
        run(x);
    }
    w.check(0.51);
    assert_eq!(tm::exp(&mut Native, f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(tm::exp(&mut Native, f32::INFINITY), f32::INFINITY);
    assert_eq!(tm::exp(&mut Native, 88.8), f32::INFINITY);
    assert_eq!(tm::exp(&mut Native, -0.0), 1.0);
    assert_eq!(tm::exp(&mut Native, -104.0).to_bits(), 0);
    assert_eq!(tm::exp(&mut Native, -103.5).to_bits(), 1);
}

/// The online softmax's exp, on its domain (every f32 up to 43.6; its callers pass at most
/// 0): within 1 ulp; where the result is normal, within 0.8; and the bits of `exp_f32`
/// wherever both round `x/ln2` to the same integer — everywhere sampled but within an f32
/// rounding of a half-integer.
#[test]
fn exp_f32_nonpos_accuracy() {
    let mut w = Worst::new("exp_f32_nonpos");
    let mut normal = Worst::new("exp_f32_nonpos, normal results");
    let mut rng = Rng(41);
    let (mut same, mut total) = (0u64, 0u64);
    let mut run = |x: f32| {
        let y = tm::exp_f32_nonpos(&mut Native, x);
        w.add(&[x], y, (x as f64).exp());
        if x >= -87.33 {
            normal.add(&[x], y, (x as f64).exp());
        }
        total += 1;
        same += u64::from(y.to_bits() == tm::exp_f32(&mut Native, x).to_bits());
    };
    for _ in 0..3_000_000 {
        run(rng.uniform(-104.0, 0.0));
    }
    for _ in 0..1_000_000 {
        run(-rng.log_uniform(-30.0, 7.0));
    }
    for _ in 0..500_000 {
        run(rng.uniform(0.0, 43.6));
    }
    for _ in 0..1_000_000 {
        let x = f32::from_bits(rng.any_bits().to_bits() | 0x8000_0000);
        run(x);
    }
    // last normal, denormal range, last non-zero, the domain's end
    for c in [
        -87.336_54f32,
        -87.336_55,
        -103.278_93,
        -103.972_08,
        -103.972_09,
        43.6,
    ] {
        for d in -64i32..=64 {
            run(f32::from_bits((c.to_bits() as i32 + d) as u32));
        }
    }
    for x in edge_values()
        .into_iter()
        .filter(|x| x.is_nan() || *x <= 43.6)
    {
        run(x);
    }
    w.check(1.0);
    normal.check(0.8);
    assert!(
        same * 1000 >= total * 999,
        "exp_f32_nonpos and exp_f32 agree on {same} of {total} arguments"
    );
    let e = |x: f32| tm::exp_f32_nonpos(&mut Native, x);
    assert_eq!(e(f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(e(-0.0), 1.0);
    assert_eq!(e(0.0), 1.0);
    assert_eq!(e(-104.0).to_bits(), 0);
    assert!(e(f32::NAN).is_nan());
    assert_eq!(e(-1.0), tm::exp_f32(&mut Native, -1.0));
}

#[test]
fn log_accuracy() {
    let mut w = Worst::new("log");
    let mut rng = Rng(5);
    let mut run = |x: f32| w.add(&[x], tm::log(&mut Native, x), (x as f64).ln());
    for _ in 0..5_000_000 {
        run(f32::from_bits(rng.next_u32() & 0x7fff_ffff));
    }
    for _ in 0..3_000_000 {
        let d = rng.log_uniform(-24.0, -1.0);
        run(1.0 + rng.sign(d));
    }
    for _ in 0..2_000_000 {
        run(rng.uniform(0.5, 2.0));
    }
    for x in edge_values() {
        run(x);
    }
    w.check(0.51);
    let l = |x: f32| tm::log(&mut Native, x);
    assert_eq!(l(0.0), f32::NEG_INFINITY);
    assert_eq!(l(-0.0), f32::NEG_INFINITY);
    assert!(l(-1.0).is_nan() && l(f32::NEG_INFINITY).is_nan() && l(f32::NAN).is_nan());
    assert_eq!(l(f32::INFINITY), f32::INFINITY);
    assert_eq!(l(1.0).to_bits(), 0);
}

#[test]
fn rsqrt_accuracy() {
    let mut w = Worst::new("rsqrt");
    let mut rng = Rng(6);
    let mut run = |x: f32| w.add(&[x], tm::rsqrt(&mut Native, x), 1.0 / (x as f64).sqrt());
    for _ in 0..10_000_000 {
        run(f32::from_bits(rng.next_u32() & 0x7fff_ffff));
    }
    for x in edge_values() {
        run(x);
    }
    w.check(0.51);
    let r = |x: f32| tm::rsqrt(&mut Native, x);
    assert_eq!(r(0.0), f32::INFINITY);
    assert_eq!(r(-0.0), f32::NEG_INFINITY);
    assert_eq!(r(f32::INFINITY).to_bits(), 0);
    assert!(r(-1.0).is_nan() && r(f32::NAN).is_nan());
    assert_eq!(r(4.0), 0.5);
    assert_eq!(tm::sqrt(&mut Native, 2.0), 2f32.sqrt());
}

fn pow64(x: f32, y: f32) -> f64 {
    (x as f64).powf(y as f64)
}

#[test]
fn pow_accuracy() {
    let mut w = Worst::new("pow");
    let mut rng = Rng(7);
    let mut run = |x: f32, y: f32| w.add(&[x, y], tm::pow(&mut Native, x, y), pow64(x, y));
    for _ in 0..6_000_000 {
        let x = rng.log_uniform(-20.0, 20.0);
        let l = (x as f64).log2().abs().max(1e-3);
        let y = rng.uniform(-1.0, 1.0) * (130.0 / l) as f32;
        run(x, y);
    }
    for _ in 0..2_000_000 {
        let x = rng.uniform(0.5, 2.0);
        let m = rng.log_uniform(-10.0, 20.0);
        let y = rng.sign(m);
        run(x, y);
    }
    for _ in 0..1_000_000 {
        let x = -rng.uniform(0.5, 8.0);
        let y = ((rng.next_u32() % 81) as i32 - 40) as f32;
        run(x, y);
    }
    for _ in 0..1_000_000 {
        let x = rng.any_bits();
        let m = rng.log_uniform(-10.0, 10.0);
        let y = rng.sign(m);
        run(x, y);
    }
    let ev = edge_values();
    let mut ys = ev.clone();
    ys.extend([
        3.0, -3.0, 0.5, -0.5, 2.0, -2.0, 1.5, 1e10, -1e10, 16777217.0,
    ]);
    for &x in ev.iter().chain([-2.0, -0.5, 3.0].iter()) {
        for &y in &ys {
            run(x, y);
        }
    }
    w.check(0.6);
}

/// pow on the grids RoPE evaluates: theta^(2i/d) for the thetas of the Qwen configs.
#[test]
fn pow_rope_grid() {
    let mut w = Worst::new("pow RoPE grids");
    let mut not_cr = 0;
    let mut n = 0;
    for theta in [10_000.0f32, 500_000.0, 1_000_000.0, 5_000_000.0] {
        for d in [32u32, 64, 80, 128, 256] {
            for i in 0..=d {
                for y in [
                    i as f32 / d as f32,
                    (2 * i) as f32 / d as f32,
                    -(i as f32 / d as f32),
                ] {
                    let got = tm::pow(&mut Native, theta, y);
                    let r = pow64(theta, y);
                    w.add(&[theta, y], got, r);
                    n += 1;
                    if got != r as f32 {
                        not_cr += 1;
                    }
                }
            }
        }
    }
    println!("pow RoPE grids: {not_cr} of {n} results differ from the correctly rounded value");
    w.check(0.51);
    // Near-halfway cases can round the other way; they must stay rare.
    assert!(not_cr * 1000 < n, "{not_cr} of {n} not correctly rounded");
}

#[test]
fn pow_special_cases() {
    let p = |x: f32, y: f32| tm::pow(&mut Native, x, y);
    let mut vals = edge_values();
    vals.extend([3.0, -3.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e10, -1e10]);
    for &x in &vals {
        for &y in &vals {
            let got = p(x, y);
            let r = pow64(x, y);
            let want = r as f32;
            // Ordinary finite results within the accuracy bound, every special result bit-exact.
            let ordinary = want.is_finite() && want != 0.0 && want.abs() != 1.0;
            let ok = if ordinary {
                common::ulp_err(got, r) < 0.6
            } else {
                (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits()
            };
            assert!(ok, "pow({x:e}, {y:e}) = {got:e}, want {want:e}");
        }
    }
    assert_eq!(p(f32::NAN, 0.0), 1.0);
    assert_eq!(p(1.0, f32::NAN), 1.0);
    assert_eq!(p(-1.0, f32::INFINITY), 1.0);
    assert_eq!(p(-0.0, 3.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(p(-0.0, -3.0), f32::NEG_INFINITY);
    assert_eq!(p(-2.0, 3.0), -8.0);
    assert!(p(-2.0, 0.5).is_nan());
    assert_eq!(p(f32::NEG_INFINITY, 0.5), f32::INFINITY);
    assert_eq!(p(f32::NEG_INFINITY, -3.0).to_bits(), (-0.0f32).to_bits());
}

fn unary(
    name: &str,
    seed: u64,
    f: fn(f32) -> f32,
    r: fn(f64) -> f64,
    lo: f64,
    hi: f64,
    bound: f64,
) {
    let mut w = Worst::new(name);
    let mut rng = Rng(seed);
    let mut run = |x: f32| w.add(&[x], f(x), r(x as f64));
    for _ in 0..5_000_000 {
        run(rng.uniform(lo, hi));
    }
    for _ in 0..3_000_000 {
        let x = rng.log_uniform(-30.0, 7.0);
        run(rng.sign(x));
    }
    for _ in 0..2_000_000 {
        run(rng.any_bits());
    }
    for x in edge_values() {
        run(x);
    }
    w.check(bound);
}

#[test]
fn tanh_accuracy() {
    unary(
        "tanh",
        8,
        |x| tm::tanh(&mut Native, x),
        f64::tanh,
        -10.0,
        10.0,
        0.55,
    );
    assert_eq!(tm::tanh(&mut Native, -0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(tm::tanh(&mut Native, f32::NEG_INFINITY), -1.0);
    assert_eq!(tm::tanh(&mut Native, f32::MAX), 1.0);
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn sigmoid_accuracy() {
    unary(
        "sigmoid",
        9,
        |x| tm::sigmoid(&mut Native, x),
        sigmoid64,
        -110.0,
        30.0,
        0.51,
    );
    assert_eq!(tm::sigmoid(&mut Native, f32::INFINITY), 1.0);
    assert_eq!(tm::sigmoid(&mut Native, f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(tm::sigmoid(&mut Native, 0.0), 0.5);
}

fn silu64(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

#[test]
fn silu_accuracy() {
    unary(
        "silu",
        10,
        |x| tm::silu(&mut Native, x),
        silu64,
        -120.0,
        30.0,
        0.51,
    );
    let mut w = Worst::new("silu tail [-120, -60]");
    let mut rng = Rng(11);
    for _ in 0..1_000_000 {
        let x = rng.uniform(-120.0, -60.0);
        w.add(&[x], tm::silu(&mut Native, x), silu64(x as f64));
    }
    w.check(0.51);
    let s = |x: f32| tm::silu(&mut Native, x);
    // The tail: denormal results that a naive x·sigmoid(x) flushes or mangles.
    for x in [-90.0f32, -100.0, -103.0] {
        let y = s(x);
        assert!(y < 0.0, "silu({x}) = {y:e}");
        assert!(common::ulp_err(y, silu64(x as f64)) < 0.51);
    }
    assert_eq!(s(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(s(f32::INFINITY), f32::INFINITY);
    assert!(s(f32::NEG_INFINITY).is_nan());
    assert_eq!(s(f32::MAX), f32::MAX);
    assert_eq!(s(-f32::MAX).to_bits(), (-0.0f32).to_bits());
}

/// The single-f32 silu for 16-bit results: within 1 ulp on the samples (the exhaustive
/// run in tests/exhaustive.rs covers every f32), its tail and special values as [`silu`]'s.
#[test]
fn silu_f32_accuracy() {
    unary(
        "silu_f32",
        14,
        |x| tm::silu_f32(&mut Native, x),
        silu64,
        -120.0,
        30.0,
        1.0,
    );
    let s = |x: f32| tm::silu_f32(&mut Native, x);
    for x in [
        -90.0f32,
        -100.0,
        -103.0,
        -64.0,
        -63.99999,
        -17.0,
        -1.278_464_5,
        88.0,
        100.0,
    ] {
        let y = s(x);
        assert!(
            common::ulp_err(y, silu64(x as f64)) < 1.0,
            "silu_f32({x}) = {y:e}"
        );
    }
    assert_eq!(s(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(s(0.0).to_bits(), 0);
    assert_eq!(s(f32::INFINITY), f32::INFINITY);
    assert!(s(f32::NEG_INFINITY).is_nan());
    assert!(s(f32::NAN).is_nan());
    assert_eq!(s(f32::MAX), f32::MAX);
    assert_eq!(s(-f32::MAX).to_bits(), (-0.0f32).to_bits());
}

/// erf over 10M+ samples (uniform on [-5, 5], log-uniform tiny to large, random bit
/// patterns), plus every f32 within 4096 ulp of the branch point 1 and of the tail's end
/// 3.92, and the tail where erf rounds to ±1. libm's f64 erf is the reference.
#[test]
fn erf_accuracy() {
    let erf = |x: f32| tm::erf(&mut Native, x);
    unary("erf", 12, erf, libm::erf, -5.0, 5.0, 1.0);
    let mut w = Worst::new("erf near 1, 3.92, tails");
    let mut run = |x: f32| w.add(&[x], erf(x), libm::erf(x as f64));
    for c in [1.0f32, 3.92, 3.919_206] {
        for d in -4096i32..=4096 {
            let x = f32::from_bits((c.to_bits() as i32 + d) as u32);
            run(x);
            run(-x);
        }
    }
    let mut rng = Rng(13);
    for _ in 0..1_000_000 {
        run({
            let v = rng.uniform(2.5, 10.0);
            rng.sign(v)
        });
    }
    for _ in 0..1_000_000 {
        run({
            let v = rng.log_uniform(-149.0, -20.0);
            rng.sign(v)
        });
    }
    w.check(1.0);
    assert_eq!(erf(0.0).to_bits(), 0);
    assert_eq!(erf(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(erf(f32::INFINITY), 1.0);
    assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    assert_eq!(erf(3.92), 1.0);
    assert!(erf(f32::NAN).is_nan());
    let d = f32::from_bits(1);
    // erf(x) ≈ 1.128·x: the smallest denormal gives itself (1.128·2^-149 rounds to 2^-149).
    assert_eq!(erf(d), d);
    // Odd, bit for bit.
    let mut rng = Rng(14);
    for _ in 0..100_000 {
        let x = rng.any_bits();
        assert_eq!(erf(-x).to_bits(), (-erf(x)).to_bits(), "{x:e}");
    }
}

/// fmod is exact: the bits of Rust's `%` (C's `fmodf`) on random pairs of bit patterns,
/// pairs of every exponent gap (up to f32::MAX against the smallest denormal, 276
/// binades), zeros, infinities and NaNs.
#[test]
fn fmod_is_exact() {
    let fmod = |a: f32, b: f32| tm::fmod(&mut Native, a, b);
    let check = |a: f32, b: f32| {
        let (got, want) = (fmod(a, b), a % b);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "fmod({a:e}, {b:e}) = {got:e} ({:#010x}), want {want:e} ({:#010x})",
            got.to_bits(),
            want.to_bits()
        );
    };
    let mut rng = Rng(15);
    for _ in 0..3_000_000 {
        check(rng.any_bits(), rng.any_bits());
    }
    for _ in 0..1_000_000 {
        // Every exponent gap: a random significand in every binade pair.
        let a = {
            let v = rng.log_uniform(-149.0, 128.0);
            rng.sign(v)
        };
        let b = {
            let v = rng.log_uniform(-149.0, 128.0);
            rng.sign(v)
        };
        check(a, b);
        check(b, a);
    }
    for _ in 0..1_000_000 {
        // Small quotients (the common case) and near-integer ones.
        let b = {
            let v = rng.log_uniform(-10.0, 10.0);
            rng.sign(v)
        };
        let q = (rng.next_u32() % 1000) as f32 - 500.0;
        let a = q * b;
        check(a, b);
        check(f32::from_bits(a.to_bits().wrapping_add(1)), b);
        check(f32::from_bits(a.to_bits().wrapping_sub(1)), b);
        check(rng.uniform(-100.0, 100.0), b);
    }
    let edges = edge_values();
    for &a in &edges {
        for &b in &edges {
            check(a, b);
        }
    }
    check(f32::MAX, f32::from_bits(1));
    check(f32::MAX, f32::from_bits(3));
    check(-f32::MAX, f32::from_bits(0x007f_ffff));
    check(f32::from_bits(0x7f7f_fffe), 3.0);
    assert_eq!(fmod(-0.0, 1.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(fmod(-4.0, 2.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(fmod(5.5, f32::INFINITY), 5.5);
    assert!(fmod(1.0, 0.0).is_nan() && fmod(f32::INFINITY, 1.0).is_nan());
}
