//! Shared test helpers: a seeded generator and the ulp error measure.
#![allow(dead_code)]

/// SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): deterministic, seeded, good enough to spread samples.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f32 {
        (lo + (hi - lo) * self.unit()) as f32
    }
    /// |x| = 2^u with u uniform in [lo, hi) (a random significand in a random binade).
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f32 {
        let u = lo + (hi - lo) * self.unit();
        (2f64.powf(u)) as f32
    }
    pub fn sign(&mut self, x: f32) -> f32 {
        if self.next_u64() & 1 == 1 {
            -x
        } else {
            x
        }
    }
    /// Any f32 bit pattern (all binades and denormals equally likely per binade width).
    pub fn any_bits(&mut self) -> f32 {
        f32::from_bits(self.next_u32())
    }
}

/// 2^128 - 2^103: at or above this magnitude a real number rounds to infinity in f32.
pub const OVERFLOW_THRESHOLD: f64 = 3.402_823_567_797_336_6e38;

/// |y - r| in units of the f32 ulp at r (ulp 2^-149 below 2^-126). NaN against NaN and equal
/// infinities count 0; an infinity against a finite r counts as 2^128 with ulp 2^104.
pub fn ulp_err(y: f32, r: f64) -> f64 {
    if r.is_nan() || y.is_nan() {
        return if r.is_nan() && y.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let yd = y as f64;
    if r.is_infinite() {
        return if yd == r { 0.0 } else { f64::INFINITY };
    }
    if y.is_infinite() && yd.signum() == r.signum() && r.abs() >= OVERFLOW_THRESHOLD {
        return 0.0;
    }
    let a = r.abs();
    let ulp_exp = if a == 0.0 {
        -149
    } else {
        let e = ((a.to_bits() >> 52) as i64 & 0x7ff) - 1023;
        e.max(-126) - 23
    };
    let ulp = 2f64.powi(ulp_exp as i32);
    let yv = if y.is_infinite() {
        2f64.powi(128).copysign(yd)
    } else {
        yd
    };
    (yv - r).abs() / ulp
}

/// Running maximum of the ulp error with the argument that produced it.
pub struct Worst {
    pub name: String,
    pub max: f64,
    pub at: Vec<f32>,
    pub got: f32,
    pub want: f64,
    pub n: u64,
}

impl Worst {
    pub fn new(name: &str) -> Self {
        Worst {
            name: name.into(),
            max: 0.0,
            at: vec![],
            got: 0.0,
            want: 0.0,
            n: 0,
        }
    }
    pub fn add(&mut self, args: &[f32], y: f32, r: f64) {
        self.n += 1;
        let e = ulp_err(y, r);
        if e > self.max || (e.is_nan() && !self.max.is_nan()) {
            self.max = e;
            self.at = args.to_vec();
            self.got = y;
            self.want = r;
        }
    }
    pub fn report(&self) {
        println!(
            "{:<34} max {:.4} ulp over {:>10} samples (at {:?}: got {:e}, f64 {:e})",
            self.name, self.max, self.n, self.at, self.got, self.want
        );
    }
    /// Prints and asserts `max < bound`.
    pub fn check(&self, bound: f64) {
        self.report();
        assert!(
            self.max < bound,
            "{}: max error {} ulp >= bound {} (at {:?}: got {:e} = {:#010x}, want {:e})",
            self.name,
            self.max,
            bound,
            self.at,
            self.got,
            self.got.to_bits(),
            self.want
        );
    }
}

/// The values every function is also checked at.
pub fn edge_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        f32::from_bits(1),           // smallest denormal
        f32::from_bits(0x007f_ffff), // largest denormal
        f32::MIN_POSITIVE,
        f32::EPSILON,
        0.5,
        1.0,
        2.0,
        f32::MAX,
        f32::INFINITY,
    ];
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v.push(f32::NAN);
    v
}
