//! tessel-math: the libm-free math library, written once.
//!
//! Role in the pipeline: the `expand-math` pass replaces every transcendental in kernel IR by
//! the operation sequence these functions emit, and the CPU references (`tessel-ref`) call the
//! same functions on `f32`. Every function is generic over [`MathOps`], a trait whose methods
//! are single, correctly rounded IEEE-754 binary32 operations (each one PTX instruction; no
//! approximate instructions, no flush-to-zero). Instantiated on [`Native`] the code runs on
//! `f32` on the CPU; instantiated on the kernel-IR builder it emits the identical sequence, so
//! the GPU result equals the CPU result bit for bit by construction (NaN payloads aside).
//! Inside the generic code there are no f32 methods, no libm calls and no `as` casts on values.
//!
//! Functions, with the maximum error measured against f64 references (ulp of the f32 result,
//! denormal ulp 2^-149; commands and details in `docs/numerics.md`, section "The math library"):
//!
//! | function | max error, every f32 (exhaustive) | sampled tests (10M+ each) |
//! |---|---|---|
//! | [`sin`], [`cos`], [`sincos`] on \|x\| <= 2^20 (RoPE) | 0.5704 / 0.5908 ulp | 0.5568 / 0.5802 |
//! | [`sin`], [`cos`] above 2^20 (Payne-Hanek) | 0.5713 / 0.5699 ulp | 0.5589 / 0.5582 |
//! | [`exp`] (denormal results included) | 0.5058 ulp | 0.5052 |
//! | [`log`] (denormal inputs included) | 0.5011 ulp | 0.5008 |
//! | [`sqrt`] | 0.5 ulp (the `sqrt.rn` instruction) | |
//! | [`rsqrt`] | 0.5000 ulp | 0.5000 |
//! | [`tanh`] | 0.5333 ulp | 0.5279 |
//! | [`sigmoid`] | 0.5058 ulp | 0.5049 |
//! | [`silu`] | 0.5065 ulp | 0.5052 (tail [-120, -60]: 0.5044) |
//! | [`pow`] | (two arguments: sampled only) | 0.5732 with \|y·log2 x\| <= 130; 0.5002 on RoPE grids θ^(i/d) |
//! | [`erf`] | (not yet run: `exhaustive_erf`) | 0.6019 (bound asserted: < 1) |
//! | [`fmod`] | exact (two arguments: sampled, bit for bit against C's `fmodf`) | 0 |
//!
//! The tests assert sin/cos < 0.6 (and < 1, the requirement, on |x| <= 2^20), pow < 0.6,
//! tanh < 0.55, erf < 1, fmod exact, the others < 0.51. Exhaustive runs are `#[ignore]`d tests
//! (`cargo test --release -p tessel-math --test exhaustive -- --ignored`).
//!
//! Modules: [`ops`] (the trait and [`Native`]), `dd` (double-f32 error-free transformations),
//! one file per family. Polynomial coefficients and split constants are derived by
//! `scripts/remez.py` (Remez minimax in 60-digit arithmetic); every constant's doc says where it
//! comes from.

pub mod ops;

mod dd;
mod erf;
mod exp;
mod fmod;
mod log;
mod pow;
mod rsqrt;
mod sigmoid;
mod sincos;
mod tanh;

pub use erf::erf;
pub use exp::{exp, exp_f32, exp_f32_nonpos};
pub use fmod::fmod;
pub use log::log;
pub use ops::{MathOps, Native};
pub use pow::pow;
pub use rsqrt::{rsqrt, sqrt};
pub use sigmoid::{sigmoid, silu, silu_f32};
pub use sincos::{cos, sin, sincos};
pub use tanh::tanh;
