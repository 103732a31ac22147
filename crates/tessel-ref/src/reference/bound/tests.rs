//! The elementwise rules of the reference on hand-picked operands.

use super::*;

fn range(lo: f64, hi: f64) -> Bound {
    Bound {
        r: lo,
        lo,
        hi,
        nan: false,
    }
}

#[test]
fn correctly_rounded_ops_on_points_stay_points() {
    let a = Bound::point(0.1f32 as f64);
    let b = Bound::point(0.2f32 as f64);
    let s = binary(BinaryOp::Add, DType::F32, DType::F32, &a, &b);
    assert!(s.is_point());
    assert_eq!(s.r, (0.1f32 + 0.2f32) as f64);
    // bf16: rounded once or through f32; for a product of bf16s both are the same.
    let x = Bound::point(1.0078125);
    let p = binary(BinaryOp::Mul, DType::Bf16, DType::Bf16, &x, &x);
    assert!(p.is_point(), "{p:?}");
}

#[test]
fn math_functions_allow_their_error_and_nothing_more() {
    let x = Bound::point(0.5);
    let e = unary(UnaryOp::Exp, DType::F32, &x);
    let y = rn32(0.5f64.exp());
    assert_eq!(e.r, y);
    assert!(e.allows(y) && e.allows(y + ulp32(y)) && e.allows(y - ulp32(y)));
    assert!(!e.allows(y + 4.0 * ulp32(y)));
    // Rounded to bf16, the f32 slack disappears unless near a rounding boundary.
    let eb = unary(UnaryOp::Exp, DType::Bf16, &x);
    assert!(eb.is_point(), "{eb:?}");
}

#[test]
fn non_monotone_functions_include_their_turns() {
    let s = unary(UnaryOp::Sin, DType::F32, &range(1.0, 2.0));
    assert!(s.allows(1.0), "sin turns at π/2 inside [1, 2]: {s:?}");
    let c = unary(UnaryOp::Cos, DType::F32, &range(-0.5, 0.5));
    assert!(c.allows(1.0));
    let x0 = SILU_MIN_AT;
    assert!((1.0 + x0 + x0.exp()).abs() < 1e-15);
    let z = unary(UnaryOp::Silu, DType::F32, &range(-3.0, 0.0));
    assert!(z.allows(-0.2784645427610738));
    assert!(!z.allows(-0.3));
    let a = unary(UnaryOp::Abs, DType::F32, &range(-1.0, 2.0));
    assert_eq!((a.lo, a.hi), (0.0, 2.0));
}

#[test]
fn comparisons_know_when_they_are_sure() {
    let lt = binary(
        BinaryOp::Lt,
        DType::F32,
        DType::Bool,
        &range(0.0, 1.0),
        &range(2.0, 3.0),
    );
    assert_eq!((lt.lo, lt.hi), (1.0, 1.0));
    let unsure = binary(
        BinaryOp::Lt,
        DType::F32,
        DType::Bool,
        &range(0.0, 2.5),
        &range(2.0, 3.0),
    );
    assert_eq!((unsure.lo, unsure.hi), (0.0, 1.0));
    let nan = binary(
        BinaryOp::Ne,
        DType::F32,
        DType::Bool,
        &Bound::point(f64::NAN),
        &Bound::point(1.0),
    );
    assert_eq!((nan.r, nan.lo, nan.hi), (1.0, 1.0, 1.0));
}

#[test]
fn division_through_a_pole_allows_anything() {
    let q = binary(
        BinaryOp::Div,
        DType::F32,
        DType::F32,
        &Bound::point(1.0),
        &range(-1.0, 1.0),
    );
    assert!(q.allows(f64::INFINITY) && q.allows(f64::NEG_INFINITY) && q.allows(7.0));
    let z = binary(
        BinaryOp::Div,
        DType::F32,
        DType::F32,
        &Bound::point(1.0),
        &Bound::point(-0.0),
    );
    assert_eq!(z.r, f64::NEG_INFINITY);
    assert!(z.is_point());
}

/// pow of a base that may be negative, by an integer exponent, is `±|x|^y`: finite for a
/// finite base, with a pole at 0 only for a negative exponent. The TF32 bound of an exact
/// 0 reaches 2^-128 either side of it; `t^2` and `t^1` there once allowed anything
/// (tests/programs/regressions/pow_gradient_at_zero_fast_reference_nan.tsl).
#[test]
fn integer_powers_of_a_base_that_may_be_negative_stay_finite() {
    let t = Bound {
        r: 0.0,
        ..range(-2.5e-39, 2.5e-39)
    };
    let pow = |y: f64| binary(BinaryOp::Pow, DType::F32, DType::F32, &t, &Bound::point(y));
    let sq = pow(2.0);
    // Within the math library's 2 ulps of 0 (f32's least subnormal is 1.4e-45).
    assert!(
        sq.allows(0.0) && !sq.nan && sq.lo > -1e-44 && sq.hi < 1e-44,
        "{sq:?}"
    );
    let one = pow(1.0);
    assert!(
        one.allows(2.5e-39) && one.allows(-2.5e-39) && !one.nan,
        "{one:?}"
    );
    assert!(!one.allows(1e-30) && !one.allows(-1e-30), "{one:?}");
    let cube = pow(3.0);
    assert!(cube.hi < 1e-44 && cube.lo > -1e-44 && !cube.nan, "{cube:?}");
    // A negative odd exponent has its pole at 0, of either sign.
    let inv = pow(-1.0);
    assert!(
        inv.allows(f64::INFINITY) && inv.allows(f64::NEG_INFINITY),
        "{inv:?}"
    );
    // A fractional exponent of a negative base is NaN: anything goes.
    let half = pow(0.5);
    assert!(
        half.nan && half.allows(f64::INFINITY) && half.allows(-1.0),
        "{half:?}"
    );
}

#[test]
fn casts_truncate_and_saturate() {
    let c = cast(DType::F32, DType::I32, &range(-1.5, 2.5));
    assert_eq!((c.lo, c.hi), (-1.0, 2.0));
    let n = cast(DType::F32, DType::I32, &Bound::point(f64::NAN));
    assert_eq!((n.r, n.lo, n.hi, n.nan), (0.0, 0.0, 0.0, false));
    let b = cast(DType::F32, DType::Bool, &range(-1.0, 1.0));
    assert_eq!((b.lo, b.hi), (0.0, 1.0));
    // i32 → bf16 goes through f32 on the GPU: 2^24 + 1 rounds twice.
    let big = Bound::point((1 << 24) as f64 + 1.0 + 65536.0 * 2.0);
    let d = cast(DType::I32, DType::Bf16, &big);
    assert!(d.allows(d.r));
}

#[test]
fn sums_widen_by_the_worst_case_of_any_order() {
    let (lo, hi, nan) = sum_range(1.0, 1.0, 3.0, 4, U32);
    let err = 3.0 * U32 / (1.0 - 3.0 * U32) * 3.0;
    assert_eq!((lo, hi, nan), (1.0 - err, 1.0 + err, false));
    // Terms that reach f32's overflow: +inf and -inf partial sums may meet as NaN.
    let (lo, hi, nan) = sum_range(0.0, 0.0, 4e38, 4, U32);
    assert!(lo.is_infinite() && hi.is_infinite() && nan);
    // Zeros only: exact, and the sign of the zero is kept.
    let (lo, hi, _) = sum_range(-0.0, -0.0, 0.0, 4, U32);
    assert!(lo.is_sign_negative() && hi.is_sign_negative());
}

#[test]
fn zero_ends_keep_their_signs() {
    assert!(lower(0.0, -0.0).is_sign_negative() && upper(-0.0, 0.0).is_sign_positive());
    // x * 0 over a range through zero is either zero; 1 / it either infinity.
    let z = binary(
        BinaryOp::Mul,
        DType::F32,
        DType::F32,
        &range(-1.0, 2.0),
        &Bound::point(0.0),
    );
    assert!(z.lo.is_sign_negative() && z.hi.is_sign_positive(), "{z:?}");
    assert!(!z.is_point());
    let q = binary(
        BinaryOp::Div,
        DType::F32,
        DType::F32,
        &Bound::point(1.0),
        &z,
    );
    assert!(q.allows(f64::INFINITY) && q.allows(f64::NEG_INFINITY));
    // A known -0 stays one value.
    let n = binary(
        BinaryOp::Div,
        DType::F32,
        DType::F32,
        &Bound::point(1.0),
        &Bound::point(-0.0),
    );
    assert!(n.is_point() && n.r == f64::NEG_INFINITY);
}

#[test]
fn a_zero_end_of_a_range_through_zero_holds_both_zeros() {
    // tests/programs/regressions/fuzz_390060_wrong_answer.tsl, element [1, 0] at seed 0:
    // `a1 / sqrt(softmax(a0)[:, -1:] % 0.5)` as `check` builds `%` (fmod, then `+ 0.5` where
    // the signs differ). The remainder of a range is [-0.5, 0.5]; the select's hull with
    // its `+ 0.5` is [-0.5, 1], whose sqrt is [-0, 1]: +0 included. Reading -0 as the only
    // zero, the quotient's bound was [-inf, r], and the executor's r + 1 ulp failed it.
    let p = Bound {
        r: 2.392408438026905e-2,
        lo: 2.3924052715301514e-2,
        hi: 2.3924116045236588e-2,
        nan: false,
    };
    let half = Bound::point(0.5);
    let zero = Bound::point(0.0);
    let f = DType::F32;
    let m = binary(BinaryOp::Rem, f, f, &p, &half);
    let nz = binary(BinaryOp::Ne, f, DType::Bool, &m, &zero);
    let m_neg = binary(BinaryOp::Lt, f, DType::Bool, &m, &zero);
    let half_neg = binary(BinaryOp::Lt, f, DType::Bool, &half, &zero);
    let differ = binary(BinaryOp::Ne, DType::Bool, DType::Bool, &m_neg, &half_neg);
    let fix = binary(BinaryOp::And, DType::Bool, DType::Bool, &nz, &differ);
    let shifted = binary(BinaryOp::Add, f, f, &m, &half);
    let t2 = select(&fix, &shifted, &m);
    let t3 = unary(UnaryOp::Sqrt, f, &t2);
    assert!(
        t3.lo == 0.0 && t3.lo.is_sign_negative() && t3.hi == 1.0,
        "{t3:?}"
    );
    let t5 = binary(BinaryOp::Div, f, f, &Bound::point(1.2604225873947144), &t3);
    assert_eq!(t5.r, 8.148890495300293);
    let got = 8.14889144897461;
    assert_eq!(got as f32 as f64, got);
    assert!(t5.allows(got), "{t5:?}");
    assert_eq!(
        (t5.lo, t5.hi, t5.nan),
        (f64::NEG_INFINITY, f64::INFINITY, true)
    );

    // The same of the other zero end, and through a unary function.
    let one = Bound::point(1.0);
    let q = binary(BinaryOp::Div, f, f, &one, &range(-1.0, 0.0));
    assert!(q.allows(f64::NEG_INFINITY) && q.allows(-1.0) && q.allows(f64::INFINITY));
    let s = unary(UnaryOp::Rsqrt, f, &range(-0.0, 1.0));
    assert!(
        s.allows(f64::INFINITY) && s.allows(f64::NEG_INFINITY),
        "{s:?}"
    );
    // A +0 end holds +0 only, and a -0 upper end -0 only: those stay one-sided.
    let q = binary(BinaryOp::Div, f, f, &one, &range(0.0, 1.0));
    assert_eq!((q.lo, q.hi), (1.0, f64::INFINITY));
    let q = binary(BinaryOp::Div, f, f, &one, &range(-1.0, -0.0));
    assert_eq!((q.lo, q.hi), (f64::NEG_INFINITY, -1.0));
}
