//! The operation trait every math function is written against, and its native `f32` instance.
//!
//! Contract for implementors (the kernel-IR builder is the other one): every method is one PTX
//! instruction with IEEE-754 binary32 semantics, round-to-nearest-even where it rounds, denormals
//! kept (never `.ftz`), no approximate instructions. A faithful implementation makes every
//! function of this crate give the same bits as [`Native`], because the functions are nothing
//! but a fixed sequence of these calls.
//!
//! | method | PTX |
//! |---|---|
//! | `fadd fsub fmul fdiv` | `add.rn.f32 sub.rn.f32 mul.rn.f32 div.rn.f32` |
//! | `ffma` | `fma.rn.f32` (one rounding) |
//! | `fsqrt` | `sqrt.rn.f32` |
//! | `fneg fabs` | `neg.f32 abs.f32` |
//! | `fmin fmax` | `min.NaN.f32 max.NaN.f32` (NaN if either is NaN; -0 < +0) |
//! | `frint` | `cvt.rni.f32.f32` |
//! | `feq flt fle fgt fge` | `setp.{eq,lt,le,gt,ge}.f32` (ordered: false with NaN) |
//! | `fne` | `setp.neu.f32` (unordered: true with NaN) |
//! | `fis_nan` | `setp.nan.f32` |
//! | `select select_u` | `selp.f32 selp.b32` |
//! | `pand por pnot` | `and.pred or.pred not.pred` |
//! | `f_to_bits f_from_bits` | `mov.b32` |
//! | `uadd usub umul_lo umul_hi` | `add.u32 sub.u32 mul.lo.u32 mul.hi.u32` |
//! | `ushl ushr sshr` | `shl.b32 shr.u32 shr.s32` (amount in `0..32`, never clamped) |
//! | `uand uor uxor unot` | `and.b32 or.b32 xor.b32 not.b32` |
//! | `ueq une ult ugt slt sle sgt sge` | `setp.{eq,ne,lo,hi,lt,le,gt,ge}.{u32,s32}` |
//! | `cvt_rni_s32 cvt_rzi_s32` | `cvt.rni.s32.f32 cvt.rzi.s32.f32` (saturating, NaN to 0) |
//! | `cvt_s32_f32 cvt_u32_f32` | `cvt.rn.f32.s32 cvt.rn.f32.u32` |
//! | `cond` | `@p bra` around two arms that each assign the N result registers |
//!
//! NaN payloads are not part of the contract (x86 and PTX produce different default NaNs);
//! everything else is bit for bit.

/// The scalar operations the math library may use. See the module doc for the PTX of each.
///
/// `F` is an f32 value, `U` a 32-bit integer value (signedness is in the method name),
/// `P` a predicate. Integer arithmetic wraps.
pub trait MathOps {
    /// An f32 value.
    type F: Copy;
    /// A 32-bit integer value.
    type U: Copy;
    /// A predicate.
    type P: Copy;

    /// An f32 immediate.
    fn fconst(&mut self, c: f32) -> Self::F;
    /// A 32-bit immediate.
    fn uconst(&mut self, c: u32) -> Self::U;

    /// `a + b`, rounded to nearest even.
    fn fadd(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a - b`, rounded to nearest even.
    fn fsub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b`, rounded to nearest even.
    fn fmul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a / b`, correctly rounded.
    fn fdiv(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b + c` with one rounding.
    fn ffma(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// Correctly rounded square root (`sqrt(-0) = -0`, negative to NaN).
    fn fsqrt(&mut self, a: Self::F) -> Self::F;
    /// `-a` (flips the sign bit).
    fn fneg(&mut self, a: Self::F) -> Self::F;
    /// `|a|` (clears the sign bit).
    fn fabs(&mut self, a: Self::F) -> Self::F;
    /// Minimum; NaN if either operand is NaN; `min(-0, +0) = -0`.
    fn fmin(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// Maximum; NaN if either operand is NaN; `max(-0, +0) = +0`.
    fn fmax(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// Round to the nearest integral value, ties to even (result is an f32).
    fn frint(&mut self, a: Self::F) -> Self::F;

    /// `a == b` (false with NaN).
    fn feq(&mut self, a: Self::F, b: Self::F) -> Self::P;
    /// `a != b` (true with NaN).
    fn fne(&mut self, a: Self::F, b: Self::F) -> Self::P;
    /// `a < b` (false with NaN).
    fn flt(&mut self, a: Self::F, b: Self::F) -> Self::P;
    /// `a <= b` (false with NaN).
    fn fle(&mut self, a: Self::F, b: Self::F) -> Self::P;
    /// `a > b` (false with NaN).
    fn fgt(&mut self, a: Self::F, b: Self::F) -> Self::P;
    /// `a >= b` (false with NaN).
    fn fge(&mut self, a: Self::F, b: Self::F) -> Self::P;
    /// `a` is NaN.
    fn fis_nan(&mut self, a: Self::F) -> Self::P;

    /// `if p { a } else { b }`.
    fn select(&mut self, p: Self::P, a: Self::F, b: Self::F) -> Self::F;
    /// `if p { a } else { b }` on integers.
    fn select_u(&mut self, p: Self::P, a: Self::U, b: Self::U) -> Self::U;
    /// `p && q`.
    fn pand(&mut self, p: Self::P, q: Self::P) -> Self::P;
    /// `p || q`.
    fn por(&mut self, p: Self::P, q: Self::P) -> Self::P;
    /// `!p`.
    fn pnot(&mut self, p: Self::P) -> Self::P;

    /// The bits of an f32.
    fn f_to_bits(&mut self, a: Self::F) -> Self::U;
    /// The f32 with these bits.
    fn f_from_bits(&mut self, a: Self::U) -> Self::F;

    /// `a + b` mod 2^32.
    fn uadd(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// `a - b` mod 2^32.
    fn usub(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// Low 32 bits of `a * b`.
    fn umul_lo(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// High 32 bits of the unsigned 64-bit product `a * b`.
    fn umul_hi(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// `a << s`, `s` in `0..32`.
    fn ushl(&mut self, a: Self::U, s: Self::U) -> Self::U;
    /// Logical `a >> s`, `s` in `0..32`.
    fn ushr(&mut self, a: Self::U, s: Self::U) -> Self::U;
    /// Arithmetic `a >> s` (a as i32), `s` in `0..32`.
    fn sshr(&mut self, a: Self::U, s: Self::U) -> Self::U;
    /// Bitwise and.
    fn uand(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// Bitwise or.
    fn uor(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// Bitwise xor.
    fn uxor(&mut self, a: Self::U, b: Self::U) -> Self::U;
    /// Bitwise not.
    fn unot(&mut self, a: Self::U) -> Self::U;
    /// `a == b`.
    fn ueq(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a != b`.
    fn une(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a < b` unsigned.
    fn ult(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a > b` unsigned.
    fn ugt(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a < b` signed.
    fn slt(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a <= b` signed.
    fn sle(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a > b` signed.
    fn sgt(&mut self, a: Self::U, b: Self::U) -> Self::P;
    /// `a >= b` signed.
    fn sge(&mut self, a: Self::U, b: Self::U) -> Self::P;

    /// f32 to i32, round to nearest even; saturating; NaN gives 0.
    fn cvt_rni_s32(&mut self, a: Self::F) -> Self::U;
    /// f32 to i32, toward zero; saturating; NaN gives 0.
    fn cvt_rzi_s32(&mut self, a: Self::F) -> Self::U;
    /// i32 to f32, round to nearest even.
    fn cvt_s32_f32(&mut self, a: Self::U) -> Self::F;
    /// u32 to f32, round to nearest even.
    fn cvt_u32_f32(&mut self, a: Self::U) -> Self::F;

    /// A real branch: runs `then` if `c`, else `otherwise`; both arms produce `N` f32 values
    /// (integers travel through it bitcast). The GPU builder emits both arms under an if/else;
    /// [`Native`] runs one. Meant for rare slow paths only.
    fn cond<const N: usize>(
        &mut self,
        c: Self::P,
        then: impl FnOnce(&mut Self) -> [Self::F; N],
        otherwise: impl FnOnce(&mut Self) -> [Self::F; N],
    ) -> [Self::F; N];
}

/// The CPU instance: `F = f32`, `U = u32`, `P = bool`, with Rust's IEEE operations (all correctly
/// rounded; `mul_add` is a true fma; denormals are kept on every target Rust supports).
#[derive(Clone, Copy, Debug, Default)]
pub struct Native;

impl MathOps for Native {
    type F = f32;
    type U = u32;
    type P = bool;

    #[inline(always)]
    fn fconst(&mut self, c: f32) -> f32 {
        c
    }
    #[inline(always)]
    fn uconst(&mut self, c: u32) -> u32 {
        c
    }
    #[inline(always)]
    fn fadd(&mut self, a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn fsub(&mut self, a: f32, b: f32) -> f32 {
        a - b
    }
    #[inline(always)]
    fn fmul(&mut self, a: f32, b: f32) -> f32 {
        a * b
    }
    #[inline(always)]
    fn fdiv(&mut self, a: f32, b: f32) -> f32 {
        a / b
    }
    #[inline(always)]
    fn ffma(&mut self, a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn fsqrt(&mut self, a: f32) -> f32 {
        a.sqrt()
    }
    #[inline(always)]
    fn fneg(&mut self, a: f32) -> f32 {
        -a
    }
    #[inline(always)]
    fn fabs(&mut self, a: f32) -> f32 {
        a.abs()
    }
    #[inline(always)]
    fn fmin(&mut self, a: f32, b: f32) -> f32 {
        // Rust's f32::min ignores a NaN operand; PTX min.NaN does not.
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else if a == b {
            f32::from_bits(a.to_bits() | b.to_bits()) // -0 wins over +0
        } else if a < b {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn fmax(&mut self, a: f32, b: f32) -> f32 {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else if a == b {
            f32::from_bits(a.to_bits() & b.to_bits()) // +0 wins over -0
        } else if a > b {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn frint(&mut self, a: f32) -> f32 {
        a.round_ties_even()
    }
    #[inline(always)]
    fn feq(&mut self, a: f32, b: f32) -> bool {
        a == b
    }
    #[inline(always)]
    fn fne(&mut self, a: f32, b: f32) -> bool {
        a != b
    }
    #[inline(always)]
    fn flt(&mut self, a: f32, b: f32) -> bool {
        a < b
    }
    #[inline(always)]
    fn fle(&mut self, a: f32, b: f32) -> bool {
        a <= b
    }
    #[inline(always)]
    fn fgt(&mut self, a: f32, b: f32) -> bool {
        a > b
    }
    #[inline(always)]
    fn fge(&mut self, a: f32, b: f32) -> bool {
        a >= b
    }
    #[inline(always)]
    fn fis_nan(&mut self, a: f32) -> bool {
        a.is_nan()
    }
    #[inline(always)]
    fn select(&mut self, p: bool, a: f32, b: f32) -> f32 {
        if p {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn select_u(&mut self, p: bool, a: u32, b: u32) -> u32 {
        if p {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn pand(&mut self, p: bool, q: bool) -> bool {
        p & q
    }
    #[inline(always)]
    fn por(&mut self, p: bool, q: bool) -> bool {
        p | q
    }
    #[inline(always)]
    fn pnot(&mut self, p: bool) -> bool {
        !p
    }
    #[inline(always)]
    fn f_to_bits(&mut self, a: f32) -> u32 {
        a.to_bits()
    }
    #[inline(always)]
    fn f_from_bits(&mut self, a: u32) -> f32 {
        f32::from_bits(a)
    }
    #[inline(always)]
    fn uadd(&mut self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn usub(&mut self, a: u32, b: u32) -> u32 {
        a.wrapping_sub(b)
    }
    #[inline(always)]
    fn umul_lo(&mut self, a: u32, b: u32) -> u32 {
        a.wrapping_mul(b)
    }
    #[inline(always)]
    fn umul_hi(&mut self, a: u32, b: u32) -> u32 {
        ((u64::from(a) * u64::from(b)) >> 32) as u32
    }
    #[inline(always)]
    fn ushl(&mut self, a: u32, s: u32) -> u32 {
        a.wrapping_shl(s)
    }
    #[inline(always)]
    fn ushr(&mut self, a: u32, s: u32) -> u32 {
        a.wrapping_shr(s)
    }
    #[inline(always)]
    fn sshr(&mut self, a: u32, s: u32) -> u32 {
        (a as i32).wrapping_shr(s) as u32
    }
    #[inline(always)]
    fn uand(&mut self, a: u32, b: u32) -> u32 {
        a & b
    }
    #[inline(always)]
    fn uor(&mut self, a: u32, b: u32) -> u32 {
        a | b
    }
    #[inline(always)]
    fn uxor(&mut self, a: u32, b: u32) -> u32 {
        a ^ b
    }
    #[inline(always)]
    fn unot(&mut self, a: u32) -> u32 {
        !a
    }
    #[inline(always)]
    fn ueq(&mut self, a: u32, b: u32) -> bool {
        a == b
    }
    #[inline(always)]
    fn une(&mut self, a: u32, b: u32) -> bool {
        a != b
    }
    #[inline(always)]
    fn ult(&mut self, a: u32, b: u32) -> bool {
        a < b
    }
    #[inline(always)]
    fn ugt(&mut self, a: u32, b: u32) -> bool {
        a > b
    }
    #[inline(always)]
    fn slt(&mut self, a: u32, b: u32) -> bool {
        (a as i32) < (b as i32)
    }
    #[inline(always)]
    fn sle(&mut self, a: u32, b: u32) -> bool {
        (a as i32) <= (b as i32)
    }
    #[inline(always)]
    fn sgt(&mut self, a: u32, b: u32) -> bool {
        (a as i32) > (b as i32)
    }
    #[inline(always)]
    fn sge(&mut self, a: u32, b: u32) -> bool {
        (a as i32) >= (b as i32)
    }
    #[inline(always)]
    fn cvt_rni_s32(&mut self, a: f32) -> u32 {
        a.round_ties_even() as i32 as u32 // `as` saturates and maps NaN to 0, like PTX
    }
    #[inline(always)]
    fn cvt_rzi_s32(&mut self, a: f32) -> u32 {
        a as i32 as u32
    }
    #[inline(always)]
    fn cvt_s32_f32(&mut self, a: u32) -> f32 {
        a as i32 as f32
    }
    #[inline(always)]
    fn cvt_u32_f32(&mut self, a: u32) -> f32 {
        a as f32
    }
    #[inline(always)]
    fn cond<const N: usize>(
        &mut self,
        c: bool,
        then: impl FnOnce(&mut Self) -> [f32; N],
        otherwise: impl FnOnce(&mut Self) -> [f32; N],
    ) -> [f32; N] {
        if c {
            then(self)
        } else {
            otherwise(self)
        }
    }
}
