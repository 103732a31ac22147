//! Double-f32 ("double-word") building blocks: a value carried as an unevaluated sum `hi + lo`.
//!
//! The error-free transformations are the classical ones: Fast2Sum (Dekker 1971, needs
//! `exponent(a) >= exponent(b)` or `a = 0`), 2Sum (Knuth, TAOCP vol. 2, 4.2.2; Møller 1965) and
//! the fma product error `fma(a, b, -a*b)` (exact when no underflow). See Muller et al.,
//! "Handbook of Floating-Point Arithmetic", 2nd ed. (2018), chapter 4.

use crate::MathOps;

/// `(s, e)` with `s = RN(a + b)` and `s + e = a + b` exactly, given `|a| >= |b|` (or `a = 0`).
#[inline(always)]
pub(crate) fn fast_two_sum<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> (O::F, O::F) {
    let s = o.fadd(a, b);
    let z = o.fsub(s, a);
    let e = o.fsub(b, z);
    (s, e)
}

/// `(s, e)` with `s = RN(a + b)` and `s + e = a + b` exactly, for any `a`, `b` (no overflow).
#[inline(always)]
pub(crate) fn two_sum<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> (O::F, O::F) {
    let s = o.fadd(a, b);
    let bb = o.fsub(s, a);
    let ab = o.fsub(s, bb);
    let da = o.fsub(a, ab);
    let db = o.fsub(b, bb);
    let e = o.fadd(da, db);
    (s, e)
}

/// `(p, e)` with `p = RN(a * b)` and `p + e = a * b` exactly (when `e` does not underflow).
#[inline(always)]
pub(crate) fn two_prod<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> (O::F, O::F) {
    let p = o.fmul(a, b);
    let np = o.fneg(p);
    let e = o.ffma(a, b, np);
    (p, e)
}

/// Horner evaluation `c[0] + t*(c[1] + t*(...))` with fma.
#[inline(always)]
pub(crate) fn horner<O: MathOps>(o: &mut O, t: O::F, c: &[f32]) -> O::F {
    let mut acc = o.fconst(c[c.len() - 1]);
    for &ci in c[..c.len() - 1].iter().rev() {
        let k = o.fconst(ci);
        acc = o.ffma(acc, t, k);
    }
    acc
}
