//! Weak scalars: literals, `const`s and the compile-time arithmetic over them.
//!
//! A weak scalar has a kind (bool, integer, float) but no dtype yet; it takes one when it
//! meets a tensor (PyTorch's rule for Python scalars) or when an expression made only of
//! weak scalars is used as a value (i32 for integers, f32 for floats). Until then it is
//! folded in 64 bits, as the run-time operators compute, not as Python does: `i64` with
//! overflow and division-by-zero checks for integers, `/` truncating and `%` taking the
//! dividend's sign (C); IEEE `f64` for floats, so `1.0 / 0.0` folds to inf (a useful mask
//! value) and `%` is `fmod`. Only exact IEEE operations are folded (`+ - * / %`,
//! comparisons, negation); nothing that would need a math library. `docs/language.md`
//! ("Literals, consts and dtypes") documents this for users.

use tessel_ir::DType;
use tessel_syntax::ast::BinaryOp;

/// A compile-time scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Lit {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Lit {
    /// 0 bool, 1 integer, 2 float: the promotion lattice (design §3, PyTorch's categories).
    pub(crate) fn rank(self) -> u8 {
        match self {
            Lit::Bool(_) => 0,
            Lit::Int(_) => 1,
            Lit::Float(_) => 2,
        }
    }

    /// The dtype an expression made only of weak scalars gets.
    pub(crate) fn default_dtype(self) -> DType {
        match self {
            Lit::Bool(_) => DType::Bool,
            Lit::Int(_) => DType::I32,
            Lit::Float(_) => DType::F32,
        }
    }

    /// "integer literal 3", for messages.
    pub(crate) fn describe(self) -> String {
        match self {
            Lit::Bool(b) => format!("bool constant {b}"),
            Lit::Int(i) => format!("integer constant {i}"),
            Lit::Float(f) => format!("float constant {f:?}"),
        }
    }

    /// The value as a number (a bool is 0 or 1).
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Lit::Bool(b) => f64::from(u8::from(b)),
            Lit::Int(i) => i as f64,
            Lit::Float(f) => f,
        }
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            Lit::Bool(b) => Some(i64::from(b)),
            Lit::Int(i) => Some(i),
            Lit::Float(_) => None,
        }
    }

    /// The exact value this scalar takes in `dtype`, for an [`tessel_ir::graph::Op::Const`].
    /// Floats round to nearest even; a finite value that overflows the dtype, an integer out
    /// of the `i32` range and a float as `i32` are errors (the message says why).
    pub(crate) fn value_in(self, dtype: DType) -> Result<f64, String> {
        match dtype {
            DType::Bool => Ok(if self.as_f64() != 0.0 { 1.0 } else { 0.0 }),
            DType::I32 => match self.as_i64() {
                Some(i) if i32::try_from(i).is_ok() => Ok(i as f64),
                Some(_) => Err("i32 holds -2147483648 ..= 2147483647".into()),
                None => Err("a float is not converted to i32 implicitly".into()),
            },
            DType::Bf16 | DType::F16 | DType::F32 => {
                let x = self.as_f64();
                let r = round_to(x, dtype);
                if x.is_finite() && !r.is_finite() {
                    Err(format!("{x:?} rounds to infinity in {dtype}"))
                } else {
                    Ok(r)
                }
            }
        }
    }
}

pub(crate) use tessel_ir::builder::round_to;

/// Folds `a op b`. Errors are messages (arithmetic on bools, division by zero, overflow).
pub(crate) fn fold_binary(op: BinaryOp, a: Lit, b: Lit) -> Result<Lit, String> {
    use BinaryOp::*;
    let float = a.rank() == 2 || b.rank() == 2;
    match op {
        Eq | Ne | Lt | Le | Gt | Ge => {
            let ord = if float {
                a.as_f64().partial_cmp(&b.as_f64())
            } else {
                a.as_i64().zip(b.as_i64()).map(|(x, y)| x.cmp(&y))
            };
            use std::cmp::Ordering::*;
            let r = match (op, ord) {
                (Ne, None) => true,
                (_, None) => false,
                (Eq, Some(o)) => o == Equal,
                (Ne, Some(o)) => o != Equal,
                (Lt, Some(o)) => o == Less,
                (Le, Some(o)) => o != Greater,
                (Gt, Some(o)) => o == Greater,
                (_, Some(o)) => o != Less,
            };
            Ok(Lit::Bool(r))
        }
        MatMul => Err("matmul of scalars".into()),
        _ if a.rank() == 0 && b.rank() == 0 => {
            Err(format!("`{}` is not defined on bool", op.symbol()))
        }
        _ if float => {
            let (x, y) = (a.as_f64(), b.as_f64());
            Ok(Lit::Float(match op {
                Add => x + y,
                Sub => x - y,
                Mul => x * y,
                Div => x / y,
                // `%` is torch.remainder: fmod, then the divisor's sign.
                _ => {
                    let r = x % y;
                    if r != 0.0 && (r < 0.0) != (y < 0.0) {
                        r + y
                    } else {
                        r
                    }
                }
            }))
        }
        _ => {
            let (x, y) = a.as_i64().zip(b.as_i64()).ok_or("not integers")?;
            if matches!(op, Div | Rem) && y == 0 {
                return Err("integer division by zero".into());
            }
            let r = match op {
                Add => x.checked_add(y),
                Sub => x.checked_sub(y),
                Mul => x.checked_mul(y),
                Div => x.checked_div(y),
                // `%` is torch.remainder: the divisor's sign.
                _ => x.checked_rem(y).map(|r| {
                    if r != 0 && (r < 0) != (y < 0) {
                        r + y
                    } else {
                        r
                    }
                }),
            };
            r.map(Lit::Int)
                .ok_or_else(|| format!("{x} {} {y} overflows a 64-bit integer", op.symbol()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folding documented in docs/language.md: C integer division, `%` with the
    /// divisor's sign (torch.remainder), IEEE floats.
    #[test]
    fn folding_follows_the_run_time_operators() {
        use BinaryOp::*;
        let (i, f) = (Lit::Int, Lit::Float);
        assert_eq!(fold_binary(Div, i(-7), i(2)), Ok(i(-3)));
        assert_eq!(fold_binary(Rem, i(-7), i(2)), Ok(i(1)));
        assert_eq!(fold_binary(Rem, i(7), i(-2)), Ok(i(-1)));
        assert_eq!(fold_binary(Rem, i(-6), i(2)), Ok(i(0)));
        assert!(fold_binary(Div, i(1), i(0)).is_err());
        assert!(fold_binary(Rem, i(1), i(0)).is_err());
        assert_eq!(fold_binary(Div, f(1.0), f(0.0)), Ok(f(f64::INFINITY)));
        assert_eq!(fold_binary(Div, f(-1.0), i(0)), Ok(f(f64::NEG_INFINITY)));
        assert!(matches!(fold_binary(Div, f(0.0), f(0.0)), Ok(Lit::Float(x)) if x.is_nan()));
        assert_eq!(fold_binary(Rem, f(-7.5), f(2.0)), Ok(f(0.5)));
        assert_eq!(fold_binary(Rem, f(7.5), f(-2.0)), Ok(f(-0.5)));
    }

    #[test]
    fn f32_rounding_matches_as_cast() {
        for x in [
            1e-6,
            0.1,
            1.0 / 3.0,
            1e-40,
            3.4028235677973366e38,
            1e39,
            6.0e-46,
        ] {
            assert_eq!(round_to(x, DType::F32), x as f32 as f64, "{x:e}");
            assert_eq!(round_to(-x, DType::F32), -x as f32 as f64, "{x:e}");
        }
    }

    #[test]
    fn bf16_and_f16_rounding() {
        // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 → even (1).
        assert_eq!(round_to(1.0 + 2f64.powi(-8), DType::Bf16), 1.0);
        assert_eq!(
            round_to(1.0 + 3.0 * 2f64.powi(-8), DType::Bf16),
            1.0 + 2f64.powi(-6)
        );
        // Just above the tie rounds up; through f32 it would have been a tie (double rounding).
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(round_to(x, DType::Bf16), 1.0 + 2f64.powi(-7));
        assert_eq!(round_to(65520.0, DType::F16), f64::INFINITY);
        assert_eq!(round_to(65519.0, DType::F16), 65504.0);
        assert_eq!(round_to(2f64.powi(-25), DType::F16), 0.0);
        assert_eq!(round_to(2f64.powi(-24), DType::F16), 2f64.powi(-24));
    }

    #[test]
    fn folding() {
        assert_eq!(
            fold_binary(BinaryOp::Div, Lit::Int(7), Lit::Int(-2)),
            Ok(Lit::Int(-3))
        );
        assert_eq!(
            fold_binary(BinaryOp::Div, Lit::Int(1), Lit::Float(4.0)),
            Ok(Lit::Float(0.25))
        );
        assert!(fold_binary(BinaryOp::Rem, Lit::Int(1), Lit::Int(0)).is_err());
        assert!(fold_binary(BinaryOp::Add, Lit::Bool(true), Lit::Bool(true)).is_err());
        assert_eq!(
            fold_binary(BinaryOp::Lt, Lit::Int(1), Lit::Float(1.5)),
            Ok(Lit::Bool(true))
        );
    }
}
