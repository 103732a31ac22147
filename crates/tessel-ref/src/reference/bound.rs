//! One element of the dtype-following reference: its value and the values a correct kernel
//! may produce instead, with the elementwise rules that propagate both.
//!
//! Every rule has the same shape: evaluate the exact function on the operands' ranges
//! (endpoints, plus the interior points where a non-monotone function turns), widen by the
//! error the kernel's own instruction sequence may add (1 ulp-grade for the math library,
//! nothing for correctly rounded IEEE operations), then round each end both ways a kernel
//! may round it — once to the dtype, or first to f32 and then to the dtype, as kernels that
//! compute 16-bit values in f32 do. Rounding is monotone, so the rounded ends bound every
//! rounded value in between (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
//! ed., 2002, §2.1 for the model; interval arithmetic as in Moore, Kearfott, Cloud,
//! *Introduction to Interval Analysis*, SIAM 2009, ch. 2-5).

use crate::oracle::sigmoid;
use crate::round::{rn32, round_to};
use tessel_ir::graph::{BinaryOp, UnaryOp};
use tessel_ir::DType;

/// One element: the reference value and the allowed set.
///
/// Invariants: `r` is in the allowed set (`nan` if `r` is NaN, else `lo <= r <= hi`), and
/// the set is not empty (`nan` or `lo <= hi`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Bound {
    /// The dtype-following reference: every operation exact on the reference values of its
    /// operands, rounded once to the dtype the program gives its result.
    pub r: f64,
    /// The non-NaN values a correct kernel may produce, `lo ..= hi` (`-0` equals `+0`);
    /// none when `lo > hi`.
    pub lo: f64,
    pub hi: f64,
    /// Whether a correct kernel may produce NaN.
    pub nan: bool,
}

/// The f32 machine epsilon's half, the unit roundoff of one f32 rounding to nearest.
pub const U32: f64 = 1.0 / 16_777_216.0; // 2^-24

/// Error of the math library per call, in f32 ulps of the exact result: the design's
/// contract is 1 ulp (docs/numerics.md measures at most 0.76); 2 keeps the bound valid
/// across a binade edge, where the ulp of the result and of the range's end differ.
const MATH_ULPS: f64 = 2.0;

impl Bound {
    /// An exact value (an input, a constant).
    pub fn point(x: f64) -> Bound {
        if x.is_nan() {
            Bound {
                r: x,
                lo: f64::INFINITY,
                hi: f64::NEG_INFINITY,
                nan: true,
            }
        } else {
            Bound {
                r: x,
                lo: x,
                hi: x,
                nan: false,
            }
        }
    }

    /// The bound of a value known never to be negative (a square): its negative part cut
    /// off. `-0` compares equal to `0`, so a kernel's `-0` stays allowed.
    pub fn nonnegative(mut self) -> Bound {
        if !self.empty() && self.hi >= 0.0 {
            self.lo = self.lo.max(0.0);
        }
        self
    }

    /// True if the non-NaN part of the allowed set is empty.
    pub fn empty(&self) -> bool {
        self.lo > self.hi
    }

    /// True if exactly one value is allowed (NaN excluded; -0 and +0 are two values).
    pub fn is_point(&self) -> bool {
        !self.nan && self.lo.to_bits() == self.hi.to_bits()
    }

    /// True if `x` is an allowed value.
    pub fn allows(&self, x: f64) -> bool {
        if x.is_nan() {
            self.nan
        } else {
            self.lo <= x && x <= self.hi
        }
    }

    /// The union of two allowed sets; the reference value is `r`.
    pub fn hull(a: &Bound, b: &Bound, r: f64) -> Bound {
        Bound {
            r,
            lo: lower(a.lo, b.lo),
            hi: upper(a.hi, b.hi),
            nan: a.nan || b.nan,
        }
    }
}

/// The lesser of two range ends, with -0 below +0: ranges carry the sign of a zero end,
/// which decides `1 / x` (IEEE 754-2019 §5.3.1 orders zeros the same way for `minimum`).
pub(crate) fn lower(a: f64, b: f64) -> f64 {
    if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// The greater of two range ends, with +0 above -0.
pub(crate) fn upper(a: f64, b: f64) -> f64 {
    if a > b || (a == b && a.is_sign_positive()) {
        a
    } else {
        b
    }
}

/// The values a kernel may store for an exact result `x` of dtype `dt`: `x` rounded once,
/// or rounded to f32 first (16-bit values are computed in f32). As (least, greatest).
fn stored(dt: DType, x: f64) -> (f64, f64) {
    match dt {
        DType::Bf16 | DType::F16 => {
            let (a, b) = (round_to(dt, x), round_to(dt, rn32(x)));
            (lower(a, b), upper(a, b))
        }
        DType::F32 => (rn32(x), rn32(x)),
        DType::I32 | DType::Bool => (x, x),
    }
}

/// The f32 ulp at `x` (2^-149 below the normal range).
fn ulp32(x: f64) -> f64 {
    crate::round::ulp(DType::F32, x)
}

/// Candidate values of a function over a range: their least and greatest non-NaN value
/// and whether any is NaN.
#[derive(Default)]
struct Span {
    lo: f64,
    hi: f64,
    any: bool,
    nan: bool,
}

impl Span {
    fn new() -> Span {
        Span {
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
            any: false,
            nan: false,
        }
    }
    fn add(&mut self, v: f64) {
        if v.is_nan() {
            self.nan = true;
        } else {
            self.any = true;
            self.lo = lower(self.lo, v);
            self.hi = upper(self.hi, v);
        }
    }
}

/// Rounds an exact range to the stored dtype (both ways a kernel may round), widening it
/// first by `math_ulps` f32 ulps at each end; `r` is the exact reference value.
fn finish(dt: DType, r: f64, s: Span, math_ulps: f64, nan: bool) -> Bound {
    let r = round_to(dt, r);
    let nan = nan || s.nan || r.is_nan();
    if !s.any {
        return Bound {
            r,
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
            nan,
        };
    }
    let (mut lo, mut hi) = (s.lo, s.hi);
    if math_ulps > 0.0 {
        lo -= math_ulps * ulp32(lo);
        hi += math_ulps * ulp32(hi);
    }
    let (lo, hi) = (stored(dt, lo).0, stored(dt, hi).1);
    let (lo, hi) = if r.is_nan() {
        (lo, hi)
    } else {
        (lower(lo, r), upper(hi, r))
    };
    Bound { r, lo, hi, nan }
}

/// An interval of i32 values `[lo, hi]` as a bound: the corners when they fit in i32,
/// else every i32 (the kernel's 32-bit arithmetic may have wrapped).
fn int_range(r: f64, s: Span) -> Bound {
    let (lo, hi) = if s.lo >= i32::MIN as f64 && s.hi <= i32::MAX as f64 {
        (s.lo, s.hi)
    } else {
        (i32::MIN as f64, i32::MAX as f64)
    };
    Bound {
        r,
        lo: lo.min(r),
        hi: hi.max(r),
        nan: false,
    }
}

/// The two ends of a range.
fn ends(b: &Bound) -> [f64; 2] {
    [b.lo, b.hi]
}

/// A monotone or piecewise-monotone function on a range: `f` at the ends, at every
/// `turns` point strictly inside, and at ±0 when the range crosses zero.
fn over(b: &Bound, f: impl Fn(f64) -> f64, turns: &[f64]) -> Span {
    let mut s = Span::new();
    if b.nan {
        s.nan = true;
    }
    if b.empty() {
        return s;
    }
    for x in ends(b) {
        s.add(f(x));
    }
    for &t in turns {
        if b.lo < t && t < b.hi {
            s.add(f(t));
        }
    }
    for z in zeros_in(b) {
        s.add(f(z));
    }
    s
}

/// Where silu turns: silu'(x) = σ(x)·(1 + x·(1 - σ(x))) vanishes where 1 + x + e^x = 0,
/// at x0 = -1.2784645427610738 (Newton's method in f64; the unit test checks the root).
const SILU_MIN_AT: f64 = -1.278_464_542_761_074;

fn silu(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        // The kernel gives NaN (x·sigmoid(x) = -inf·0), the limit is -0.
        f64::NAN
    } else {
        x * sigmoid(x)
    }
}

/// sin or cos on a range: the ends, and ±1 at every turn inside; the whole [-1, 1] when
/// the range is wider than a period or too far out to find the turns in f64.
fn trig(b: &Bound, f: fn(f64) -> f64, phase: f64) -> Span {
    let mut s = Span::new();
    s.nan = b.nan;
    if b.empty() {
        return s;
    }
    if !b.lo.is_finite() || !b.hi.is_finite() {
        s.nan = true;
    }
    let finite_lo = b.lo.max(-f64::MAX);
    let finite_hi = b.hi.min(f64::MAX);
    if b.lo == b.hi {
        s.add(f(b.lo));
        return s;
    }
    if finite_hi - finite_lo >= 2.0 * std::f64::consts::PI
        || finite_lo.abs().max(finite_hi.abs()) > 2f64.powi(40)
    {
        s.add(-1.0);
        s.add(1.0);
        return s;
    }
    s.add(f(finite_lo));
    s.add(f(finite_hi));
    // Turns at phase + kπ.
    let pi = std::f64::consts::PI;
    let k0 = ((finite_lo - phase) / pi).floor() as i64;
    let k1 = ((finite_hi - phase) / pi).ceil() as i64;
    for k in k0..=k1 {
        let t = phase + k as f64 * pi;
        if finite_lo <= t && t <= finite_hi {
            s.add(f(t));
            // f64 π is not π: take the exact extreme too.
            s.add(if f(t) > 0.0 { 1.0 } else { -1.0 });
        }
    }
    s
}

/// An elementwise op of one operand of dtype `dt` (the result's dtype too).
pub fn unary(op: UnaryOp, dt: DType, a: &Bound) -> Bound {
    let int = dt == DType::I32;
    match op {
        UnaryOp::Neg if int => {
            let r = wrap(-(a.r as i64));
            let mut s = Span::new();
            s.add(-a.hi);
            s.add(-a.lo);
            int_range(r, s)
        }
        UnaryOp::Abs if int => {
            let r = wrap((a.r as i64).abs());
            int_range(r, over(a, f64::abs, &[]))
        }
        UnaryOp::Not => Bound {
            r: (a.r == 0.0) as u8 as f64,
            lo: 1.0 - a.hi,
            hi: 1.0 - a.lo,
            nan: false,
        },
        // Sign changes and sqrt.rn are exact or correctly rounded: no widening.
        UnaryOp::Neg => Bound {
            r: -a.r,
            lo: -a.hi,
            hi: -a.lo,
            nan: a.nan,
        },
        UnaryOp::Abs => finish(dt, a.r.abs(), over(a, f64::abs, &[]), 0.0, false),
        UnaryOp::Sqrt => {
            let mut s = over(a, f64::sqrt, &[]);
            s.nan |= a.lo < 0.0;
            finish(dt, a.r.sqrt(), s, 0.0, false)
        }
        UnaryOp::Exp => finish(dt, a.r.exp(), over(a, f64::exp, &[]), MATH_ULPS, false),
        UnaryOp::Log => {
            let mut s = over(a, f64::ln, &[]);
            s.nan |= a.lo < 0.0;
            finish(dt, a.r.ln(), s, MATH_ULPS, false)
        }
        UnaryOp::Rsqrt => {
            let f = |x: f64| 1.0 / x.sqrt();
            let mut s = over(a, f, &[]);
            s.nan |= a.lo < 0.0;
            finish(dt, f(a.r), s, MATH_ULPS, false)
        }
        UnaryOp::Sin => finish(
            dt,
            a.r.sin(),
            trig(a, f64::sin, std::f64::consts::FRAC_PI_2),
            MATH_ULPS,
            false,
        ),
        UnaryOp::Cos => finish(dt, a.r.cos(), trig(a, f64::cos, 0.0), MATH_ULPS, false),
        UnaryOp::Tanh => finish(dt, a.r.tanh(), over(a, f64::tanh, &[]), MATH_ULPS, false),
        UnaryOp::Sigmoid => finish(dt, sigmoid(a.r), over(a, sigmoid, &[]), MATH_ULPS, false),
        UnaryOp::Silu => {
            let mut s = over(a, silu, &[SILU_MIN_AT]);
            if a.lo == f64::NEG_INFINITY && !a.empty() {
                // Values near -inf give silu near -0 (the limit), which the ends miss.
                s.add(-0.0);
            }
            finish(dt, silu(a.r), s, MATH_ULPS, false)
        }
        UnaryOp::Erf => finish(
            dt,
            libm::erf(a.r),
            over(a, libm::erf, &[]),
            MATH_ULPS,
            false,
        ),
        UnaryOp::Gelu | UnaryOp::GeluTanh => gelu_bound(op, dt, a),
        // Monotone and exact (roundToIntegral; a 16-bit value's integral neighbour is a
        // 16-bit value).
        UnaryOp::Floor => finish(dt, a.r.floor(), over(a, f64::floor, &[]), 0.0, false),
        UnaryOp::Ceil => finish(dt, a.r.ceil(), over(a, f64::ceil, &[]), 0.0, false),
        UnaryOp::Round => finish(
            dt,
            a.r.round_ties_even(),
            over(a, f64::round_ties_even, &[]),
            0.0,
            false,
        ),
        UnaryOp::Trunc => finish(dt, a.r.trunc(), over(a, f64::trunc, &[]), 0.0, false),
    }
}

/// Where GELU turns (its minimum), gelu'(x) = 0: -0.7517915247 for the erf form and
/// -0.7524614044 for the tanh form with its f32 constants (mpmath `findroot`).
const GELU_MIN_AT: f64 = -0.751_791_524_693_564_5;
const GELU_TANH_MIN_AT: f64 = -0.752_461_404_408_722_6;

/// GELU on a range: the exact function at the ends and the turn, widened by what the
/// kernel's f32 sequence may add. Its factor `1 + erf(..)` (or `1 + tanh(..)`) is formed
/// with an absolute error of at most 8·2^-24 (the rounded argument moves erf or tanh by
/// under 2^-23 — their slopes times the argument are below 0.5 — plus the function's 2 ulps
/// and the addition's rounding), and `x/2` times it then errs by `|x|/2 · 8·2^-24`; the
/// final products add 2 f32 roundings (relative 2^-23, taken twice). Near -inf the factor
/// cancels to almost nothing, which is why the error term is absolute in the factor.
fn gelu_bound(op: UnaryOp, dt: DType, a: &Bound) -> Bound {
    let (f, turn): (fn(f64) -> f64, f64) = if op == UnaryOp::Gelu {
        (crate::oracle::gelu, GELU_MIN_AT)
    } else {
        (crate::oracle::gelu_tanh, GELU_TANH_MIN_AT)
    };
    let mut s = over(a, f, &[turn]);
    if s.any {
        let xmax = a.lo.abs().max(a.hi.abs());
        let abs_err = 0.5 * xmax * 8.0 * U32;
        s.lo = s.lo - abs_err - 4.0 * U32 * s.lo.abs();
        s.hi = s.hi + abs_err + 4.0 * U32 * s.hi.abs();
    }
    finish(dt, f(a.r), s, 0.0, false)
}

/// Wraps an integer result to i32, as the kernels' 32-bit arithmetic does.
fn wrap(x: i64) -> f64 {
    x as i32 as f64
}

/// An elementwise op of two operands of dtype `dt`; the result has dtype `out` (`bool` for
/// comparisons, else `dt`).
pub fn binary(op: BinaryOp, dt: DType, out: DType, a: &Bound, b: &Bound) -> Bound {
    use BinaryOp::*;
    let r = crate::oracle::binary_value(op, dt, a.r, b.r).unwrap_or(f64::NAN);
    match op {
        Eq | Ne | Lt | Le | Gt | Ge => return compare(op, a, b, r),
        And | Or if dt == DType::Bool => {
            let (lo, hi) = if op == And {
                (a.lo.min(b.lo), a.hi.min(b.hi))
            } else {
                (a.lo.max(b.lo), a.hi.max(b.hi))
            };
            return Bound {
                r,
                lo,
                hi,
                nan: false,
            };
        }
        _ => {}
    }
    if dt == DType::I32 || dt == DType::Bool {
        if a.is_point() && b.is_point() {
            return Bound::point(r);
        }
        return match op {
            Add | Sub | Mul | Min | Max => int_range(r, corners(op, a, b)),
            _ => int_range(r, full_i32()),
        };
    }
    let nan = a.nan || b.nan;
    let (s, math) = match op {
        Add | Sub | Mul | Min | Max => (corners(op, a, b), 0.0),
        Div => {
            let mut s = corners(op, a, b);
            if !b.empty() && b.lo < 0.0 && 0.0 < b.hi {
                // A pole inside the divisor's range.
                s.add(f64::NEG_INFINITY);
                s.add(f64::INFINITY);
                if !a.empty() && a.lo <= 0.0 && 0.0 <= a.hi {
                    s.nan = true;
                }
            }
            (s, 0.0)
        }
        Rem => {
            if a.is_point() && b.is_point() {
                // fmod is exact.
                let mut s = Span::new();
                s.add(a.r % b.r);
                (s, 0.0)
            } else {
                let m = b.lo.abs().max(b.hi.abs());
                let mut s = Span::new();
                s.add(-m);
                s.add(m);
                s.nan = true;
                (s, 0.0)
            }
        }
        Pow => (pow_span(a, b), MATH_ULPS),
        _ => unreachable!("handled above"),
    };
    finish(out, r, s, math, nan)
}

fn full_i32() -> Span {
    let mut s = Span::new();
    s.add(i32::MIN as f64);
    s.add(i32::MAX as f64);
    s
}

/// `op` at the four corners of the operands' ranges (exact for monotone ops; `+`, `-`,
/// `*`, min and max are monotone in each operand on each side of zero, and the ±0 ends
/// cover the sign of a zero product).
fn corners(op: BinaryOp, a: &Bound, b: &Bound) -> Span {
    let mut s = Span::new();
    s.nan = a.nan || b.nan;
    if a.empty() || b.empty() {
        return s;
    }
    let f = |x: f64, y: f64| crate::oracle::binary_value(op, DType::F32, x, y).unwrap_or(f64::NAN);
    for x in ends(a) {
        for y in ends(b) {
            s.add(f(x, y));
        }
    }
    if op == BinaryOp::Div || op == BinaryOp::Mul {
        // Signed zeros inside a range decide the sign of a zero or an infinite result.
        for x in zeros_in(a).chain(ends(a)) {
            for y in zeros_in(b).chain(ends(b)) {
                s.add(f(x, y));
            }
        }
    }
    s
}

/// Both signed zeros if the range holds both, in the order of [`lower`] and [`upper`] (-0
/// below +0): its lower end at or below -0 and its upper end at or above +0. A zero end
/// carries its own sign, so `[+0, 1]` holds +0 only, but `[-0, 1]` holds +0 too (the hull
/// of -0 and +0 keeps -0 as its end: `sqrt` of `[-0.5, 1]`), and so does `[-1, +0]` hold
/// -0; a rule that reads only the ends would miss the other zero (`1 / +0 = +inf`).
fn zeros_in(b: &Bound) -> impl Iterator<Item = f64> {
    let z = lower(b.lo, -0.0).to_bits() == b.lo.to_bits()
        && upper(b.hi, 0.0).to_bits() == b.hi.to_bits();
    [0.0, -0.0].into_iter().filter(move |_| z)
}

/// pow on a box. For x >= 0 pow is monotone in x for fixed y and in y for fixed x, with
/// the value 1 where the box crosses y = 0 or x = 1, so its corners and 1 bound it. A fixed
/// integer y (`pow(t, 2.0)`) is `±|x|^y` for negative x too (as the kernels' pow gives it,
/// tessel-math `pow.rs`), monotone on each side of 0: the ends and the signed zeros inside
/// bound it, a pole at 0 included. Any other box that reaches negative x (where the result
/// depends on y being an odd integer) allows anything.
fn pow_span(a: &Bound, b: &Bound) -> Span {
    let mut s = Span::new();
    s.nan = a.nan || b.nan;
    if a.empty() || b.empty() {
        return s;
    }
    let p = |x: f64, y: f64| x.powf(y);
    if a.is_point() && b.is_point() {
        s.add(p(a.lo, b.lo));
        return s;
    }
    let integer_y = b.is_point() && b.lo.fract() == 0.0;
    if a.lo < 0.0 && !integer_y {
        s.add(f64::NEG_INFINITY);
        s.add(f64::INFINITY);
        s.nan = true;
        return s;
    }
    for x in zeros_in(a).chain(ends(a)) {
        for y in zeros_in(b).chain(ends(b)) {
            s.add(p(x, y));
        }
    }
    if (b.lo <= 0.0 && 0.0 <= b.hi) || (a.lo <= 1.0 && 1.0 <= a.hi) {
        s.add(1.0);
    }
    s
}

/// A comparison: `true` allowed where some pair of allowed operands satisfies it, `false`
/// where some pair does not (NaN compares unequal and unordered).
fn compare(op: BinaryOp, a: &Bound, b: &Bound, r: f64) -> Bound {
    use BinaryOp::*;
    let both = !a.empty() && !b.empty();
    let nan = a.nan || b.nan;
    let overlap = both && a.lo <= b.hi && b.lo <= a.hi;
    let same_point = both && a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
    let (can_true, can_false) = match op {
        Eq => (overlap, !same_point || nan),
        Ne => (!same_point || nan, overlap),
        Lt => (both && a.lo < b.hi, (both && a.hi >= b.lo) || nan),
        Le => (both && a.lo <= b.hi, (both && a.hi > b.lo) || nan),
        Gt => (both && a.hi > b.lo, (both && a.lo <= b.hi) || nan),
        Ge => (both && a.hi >= b.lo, (both && a.lo < b.hi) || nan),
        _ => unreachable!("not a comparison"),
    };
    // Ne is true for NaN operands.
    let can_true = can_true || (op == Ne && nan);
    Bound {
        r,
        lo: if can_false { 0.0 } else { 1.0 },
        hi: if can_true { 1.0 } else { 0.0 },
        nan: false,
    }
    .containing_r()
}

impl Bound {
    /// Widens the range to hold `r`, and allows NaN if `r` is NaN.
    pub(crate) fn containing_r(mut self) -> Bound {
        if self.r.is_nan() {
            self.nan = true;
        } else {
            self.lo = lower(self.lo, self.r);
            self.hi = upper(self.hi, self.r);
        }
        self
    }
}

/// A conversion from `from` to `to` (graph `Cast` semantics; see `tessel_ir::graph::Op`).
pub fn cast(from: DType, to: DType, a: &Bound) -> Bound {
    use DType::*;
    if from == to {
        return *a;
    }
    match (from, to) {
        (Bf16 | F16 | F32, Bf16 | F16 | F32) => {
            // The source is exact in f32: one rounding.
            let rr = round_to(to, a.r);
            if a.empty() {
                return Bound { r: rr, ..*a };
            }
            Bound {
                r: rr,
                lo: round_to(to, a.lo),
                hi: round_to(to, a.hi),
                nan: a.nan,
            }
        }
        (I32, Bf16 | F16 | F32) => {
            // cvt.rn.f32.s32, then to the 16-bit dtype.
            let mut s = Span::new();
            s.add(a.lo);
            s.add(a.hi);
            finish(to, a.r, s, 0.0, false)
        }
        (Bf16 | F16 | F32, I32) => {
            // Truncate toward zero, saturate, NaN to 0 (`cvt.rzi.s32.f32`).
            let t = |x: f64| x as i32 as f64;
            let r = t(a.r);
            let (mut lo, mut hi) = if a.empty() {
                (f64::INFINITY, f64::NEG_INFINITY)
            } else {
                (t(a.lo), t(a.hi))
            };
            if a.nan {
                lo = lo.min(0.0);
                hi = hi.max(0.0);
            }
            Bound {
                r,
                lo,
                hi,
                nan: false,
            }
            .containing_r()
        }
        (Bool, _) => Bound { nan: false, ..*a },
        (_, Bool) => {
            let zero_only = !a.nan && a.lo == 0.0 && a.hi == 0.0;
            let has_zero = !a.empty() && a.lo <= 0.0 && 0.0 <= a.hi;
            let r = (a.r != 0.0) as u8 as f64;
            Bound {
                r,
                lo: if has_zero { 0.0 } else { 1.0 },
                hi: if zero_only { 0.0 } else { 1.0 },
                nan: false,
            }
            .containing_r()
        }
        _ => *a,
    }
}

/// `cond ? t : f`, with `cond` a bool bound: both arms where the condition is uncertain.
pub fn select(cond: &Bound, t: &Bound, f: &Bound) -> Bound {
    let r = if cond.r != 0.0 { t.r } else { f.r };
    if cond.lo == cond.hi {
        let chosen = if cond.lo != 0.0 { t } else { f };
        return Bound { r, ..*chosen };
    }
    Bound::hull(t, f, r)
}

/// A float sum's bound: exact sums of the ends widened by the worst-case error of `n - 1`
/// f32 additions in any order, `γ_(n-1) · Σ|x|` with `γ_k = k·u / (1 - k·u)`, u = `unit`
/// (Higham 2002, §4.2, eq. 4.4); `abs` is Σ max(|lo|, |hi|). Infinite when the terms may
/// reach f32's overflow threshold: a partial sum may overflow in some order, and +inf meet
/// -inf, so the third value, "NaN possible", is true.
pub fn sum_range(lo: f64, hi: f64, abs: f64, n: u64, unit: f64) -> (f64, f64, bool) {
    if abs.is_nan() || abs >= f32::MAX as f64 {
        return (f64::NEG_INFINITY, f64::INFINITY, true);
    }
    let k = n.saturating_sub(1) as f64;
    let ku = k * unit;
    if ku >= 0.5 {
        return (f64::NEG_INFINITY, f64::INFINITY, false);
    }
    let err = ku / (1.0 - ku) * abs;
    if err == 0.0 {
        // Zeros only: the sum is exact, and so is the sign of its zero.
        return (lo, hi, false);
    }
    (lo - err, hi + err, false)
}

/// The bound of a value computed in f32 from an exact range, then stored as `dt`.
pub fn from_f32_range(dt: DType, r_exact: f64, lo: f64, hi: f64, nan: bool) -> Bound {
    let mut s = Span::new();
    if lo <= hi {
        s.add(lo);
        s.add(hi);
    }
    finish(dt, r_exact, s, 0.0, nan)
}

/// Extends an exact range by the values an f32 rounding of it may take (for intermediate
/// f32 results of a composite op, which are not stored in any dtype).
pub fn with_f32_rounding(lo: f64, hi: f64) -> (f64, f64) {
    (lower(lo, rn32(lo)), upper(hi, rn32(hi)))
}

/// A float range through one math-library call's error (`MATH_ULPS` f32 ulps each end).
pub fn widen_math(lo: f64, hi: f64) -> (f64, f64) {
    (lo - MATH_ULPS * ulp32(lo), hi + MATH_ULPS * ulp32(hi))
}

#[cfg(test)]
mod tests;
