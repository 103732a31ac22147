//! The verdict on a step's outputs: what `tessel check` and the fuzzer decide by.
//!
//! One output passes when every element lies in the set the dtype-following
//! [`crate::reference`] allows it, NaN only where NaN is allowed ([`judge`]). A step
//! ([`judge_step`]) adds, per output, the f64 oracle's error as a figure (not a gate: an
//! ill-conditioned program is far from the mathematical value by its own arithmetic), and
//! for a GPU run: bits equal to the executor's where the kernels promise it, or the same
//! reference verdict where tensor cores run (NVIDIA does not specify their accumulation,
//! PTX ISA §9.7.14, so the executor's model of it is not bit-exact).
//!
//! Units: distances in ulps of the output dtype at the larger magnitude of the two values
//! compared ([`crate::round::ulp`]); for `i32` and `bool`, units of 1.

use crate::compare::{bit_diff, error_stats, BitDiff, CompareError, ErrorStats};
use crate::oracle::{eval_graph, OracleError};
use crate::reference::{eval_reference, MatmulModel, Model, RefTensor};
use crate::round::ulp;
use crate::tensor::Tensor;
use std::fmt;
use tessel_ir::graph::Graph;
use tessel_ir::kernel::Program;

/// An element outside its allowed set.
#[derive(Clone, Debug, PartialEq)]
pub struct Outside {
    /// Row-major multi-index.
    pub index: Vec<u64>,
    pub got: f64,
    /// The reference value and the allowed range (NaN allowed or not).
    pub reference: f64,
    pub lo: f64,
    pub hi: f64,
    pub nan_allowed: bool,
}

/// The judgement of one output against the reference.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub elements: u64,
    /// Elements outside their allowed set: any makes the output wrong.
    pub outside: u64,
    /// The first of them.
    pub first: Option<Outside>,
    /// Elements whose value differs from the reference value (allowed or not).
    pub differ: u64,
    /// Of those, the elements NaN on exactly one side (the ulp figures leave them out).
    pub nan_differ: u64,
    /// max |out - reference| in ulps of the dtype at the larger magnitude of the two, over
    /// elements where neither is NaN.
    pub max_ulp: f64,
    /// The widest deviation the bound allows, in the same units (max over elements of
    /// the distance from the reference to the farther end of its range). Taken over all
    /// elements, so it can be smaller than `max_ulp`, which may come from another element
    /// with a wider range; `max_bound_used` is the per-element comparison.
    pub max_allowed_ulp: f64,
    /// The largest share of its own allowed deviation any element inside its range used:
    /// |out − reference| over the distance from the reference to the end of the range on
    /// the output's side (0 when every element equals the reference, at most 1 when the
    /// output passes).
    pub max_bound_used: f64,
}

impl Verdict {
    /// True if every element is allowed.
    pub fn pass(&self) -> bool {
        self.outside == 0
    }
}

impl fmt::Display for Outside {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let idx: Vec<String> = self.index.iter().map(u64::to_string).collect();
        write!(
            f,
            "[{}]: got {:e}, reference {:e}, allowed ",
            idx.join(", "),
            self.got,
            self.reference
        )?;
        if self.lo <= self.hi {
            write!(f, "[{:e}, {:e}]", self.lo, self.hi)?;
            if self.nan_allowed {
                write!(f, " or NaN")?;
            }
            Ok(())
        } else {
            write!(f, "NaN only")
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if let Some(first) = &self.first {
            write!(
                f,
                "{} of {} elements outside the reference's bound; first at {first}",
                self.outside, self.elements
            )
        } else if self.differ == 0 {
            write!(f, "all {} elements equal the reference", self.elements)
        } else {
            write!(
                f,
                "within the bound: {} of {} elements differ from the reference",
                self.differ, self.elements
            )?;
            if self.nan_differ > 0 {
                write!(f, " ({} NaN on one side only)", self.nan_differ)?;
            }
            if self.differ > self.nan_differ {
                // Two significant digits below 10% ("0.09%", not "0%": a bound barely used
                // is worth seeing).
                let used = 100.0 * self.max_bound_used;
                let used = if used < 10.0 {
                    format!("{used:.2}")
                } else {
                    format!("{used:.0}")
                };
                write!(
                    f,
                    ", by at most {} ulp, no element past {used}% of its own bound (the widest \
                     bound allows {} ulp at its far end)",
                    fmt_ulp(self.max_ulp),
                    fmt_ulp(self.max_allowed_ulp)
                )?;
            }
            Ok(())
        }
    }
}

fn fmt_ulp(x: f64) -> String {
    if x.is_infinite() {
        "inf".into()
    } else if x >= 100.0 {
        format!("{x:.3e}")
    } else {
        format!("{x:.2}")
    }
}

/// |a - b| in ulps of `dt` at the larger magnitude of the two: near zero (a cancelled sum
/// whose reference is 0) the ulp at the reference alone would make any difference look
/// enormous.
fn ulps(dt: tessel_ir::DType, a: f64, b: f64) -> f64 {
    if a == b {
        return 0.0;
    }
    (a - b).abs() / ulp(dt, a.abs().max(b.abs()))
}

/// Judges `out` against `reference` (same shape; `out`'s dtype decides the ulp).
///
/// Errors: [`CompareError::Shape`] or [`CompareError::Length`] on a mismatch,
/// [`CompareError::DType`] if the dtypes differ.
pub fn judge(out: &Tensor, reference: &RefTensor) -> Result<Verdict, CompareError> {
    if out.ty.shape.0 != reference.shape {
        return Err(CompareError::Shape {
            a: out.ty.shape.0.clone(),
            b: reference.shape.clone(),
        });
    }
    if out.ty.dtype != reference.dtype {
        return Err(CompareError::DType {
            a: out.ty.dtype,
            b: reference.dtype,
        });
    }
    if out.data.len() as u64 != out.ty.size_bytes() || reference.data.len() != out.numel() {
        return Err(CompareError::Length {
            len: out.data.len(),
            want: out.ty.size_bytes(),
        });
    }
    let dt = out.ty.dtype;
    let mut v = Verdict {
        elements: out.numel() as u64,
        ..Default::default()
    };
    for (i, b) in reference.data.iter().enumerate() {
        let o = out.get_f64(i);
        let same = (o.is_nan() && b.r.is_nan()) || o == b.r;
        if !same {
            v.differ += 1;
            v.nan_differ += (o.is_nan() || b.r.is_nan()) as u64;
        }
        if !b.r.is_nan() {
            if !o.is_nan() && !same {
                v.max_ulp = v.max_ulp.max(ulps(dt, o, b.r));
                if b.allows(o) {
                    let room = if o > b.r { b.hi - b.r } else { b.r - b.lo };
                    v.max_bound_used = v.max_bound_used.max((o - b.r).abs() / room);
                }
            }
            if b.lo <= b.hi {
                let wide = ulps(dt, b.hi, b.r).max(ulps(dt, b.lo, b.r));
                v.max_allowed_ulp = v.max_allowed_ulp.max(wide);
            }
        }
        if !b.allows(o) {
            v.outside += 1;
            if v.first.is_none() {
                let mut index = vec![0; reference.shape.len()];
                crate::layout::unravel(i as u64, &reference.shape, &mut index);
                v.first = Some(Outside {
                    index,
                    got: o,
                    reference: b.r,
                    lo: b.lo,
                    hi: b.hi,
                    nan_allowed: b.nan,
                });
            }
        }
    }
    Ok(v)
}

/// Why a step could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("the references could not evaluate the step: {0}")]
    Reference(#[from] OracleError),
    #[error("output `{name}`: {err}")]
    Compare { name: String, err: CompareError },
    #[error("the step has {want} outputs, {got} were given ({what})")]
    Count {
        want: usize,
        got: usize,
        what: &'static str,
    },
}

/// The reference's model of `p`'s kernels: tensor cores (TF32 or 16-bit) where any kernel
/// issues `mma.sync`, else one fma per product; flash-attention's rounding of
/// probabilities where a kernel is a fused attention.
pub fn model_of(p: &Program) -> Model {
    let tc = p.tensor_cores();
    Model {
        // A kernel's schedule text starts with its TileConfig (`lower`).
        flash_softmax: p
            .kernels
            .values()
            .any(|k| k.schedule.starts_with("attention {")),
        matmul: if tc.tf32 {
            MatmulModel::Tf32
        } else if tc.mma {
            MatmulModel::TensorCore
        } else {
            MatmulModel::Fma
        },
    }
}

/// How a GPU's output was judged.
#[derive(Clone, Debug, PartialEq)]
pub enum GpuJudgement {
    /// Against the executor, bit for bit (kernels without tensor cores).
    Bits(BitDiff),
    /// Against the reference, as the executor is (kernels with tensor cores); the bit
    /// difference from the executor is reported, not judged.
    Reference(Verdict, BitDiff),
}

impl GpuJudgement {
    pub fn pass(&self) -> bool {
        match self {
            GpuJudgement::Bits(d) => d.identical(),
            GpuJudgement::Reference(v, _) => v.pass(),
        }
    }
}

impl fmt::Display for GpuJudgement {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            GpuJudgement::Bits(d) if d.identical() => write!(f, "== executor bit for bit"),
            GpuJudgement::Bits(d) => write!(f, "differs from the executor: {d}"),
            GpuJudgement::Reference(v, d) => write!(
                f,
                "{v} ({} elements differ from the executor)",
                d.differing_elements
            ),
        }
    }
}

/// The judgement of one output of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputJudgement {
    pub name: String,
    /// The executor's output against the reference.
    pub executor: Verdict,
    /// The executor's output against the f64 oracle (a figure, not a gate).
    pub oracle: ErrorStats,
    pub gpu: Option<GpuJudgement>,
}

impl OutputJudgement {
    pub fn pass(&self) -> bool {
        self.executor.pass() && self.gpu.as_ref().is_none_or(GpuJudgement::pass)
    }
}

/// Judges a step: `checked` is its graph straight from the `check` pass, `program` what it
/// compiled to, `exec` the executor's outputs on `inputs` and `gpu` the GPU's, if run.
///
/// Errors: the references' ([`JudgeError::Reference`]), outputs that do not match the
/// graph's ([`JudgeError::Count`], [`JudgeError::Compare`]).
pub fn judge_step(
    checked: &Graph,
    program: &Program,
    inputs: &[Tensor],
    exec: &[Tensor],
    gpu: Option<&[Tensor]>,
) -> Result<Vec<OutputJudgement>, JudgeError> {
    let n = checked.outputs.len();
    for (got, what) in [(exec.len(), "executor"), (gpu.map_or(n, <[_]>::len), "GPU")] {
        if got != n {
            return Err(JudgeError::Count { want: n, got, what });
        }
    }
    let oracle = eval_graph(checked, inputs)?;
    let model = model_of(program);
    let reference = eval_reference(checked, inputs, &model)?;
    let mut out = Vec::with_capacity(n);
    for (i, (name, _)) in checked.outputs.iter().enumerate() {
        let cmp = |err| JudgeError::Compare {
            name: name.clone(),
            err,
        };
        let executor = judge(&exec[i], &reference[i]).map_err(cmp)?;
        let oracle = error_stats(&exec[i], &oracle[i]).map_err(cmp)?;
        let gpu = match gpu {
            Some(g) => {
                let d = bit_diff(&g[i], &exec[i]).map_err(cmp)?;
                Some(if model.matmul == MatmulModel::Fma {
                    GpuJudgement::Bits(d)
                } else {
                    GpuJudgement::Reference(judge(&g[i], &reference[i]).map_err(cmp)?, d)
                })
            }
            None => None,
        };
        out.push(OutputJudgement {
            name: name.clone(),
            executor,
            oracle,
            gpu,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Bound;
    use tessel_ir::DType;

    fn reference(bounds: Vec<Bound>) -> RefTensor {
        RefTensor {
            dtype: DType::F32,
            shape: vec![bounds.len() as u64],
            data: bounds,
        }
    }

    #[test]
    fn inside_passes_outside_fails_with_its_place() {
        let b = |r: f64, w: f64| Bound {
            r,
            lo: r - w,
            hi: r + w,
            nan: false,
        };
        let rf = reference(vec![b(1.0, 0.0), b(2.0, 2f64.powi(-22)), b(4.0, 0.0)]);
        let ok = Tensor::from_f32(DType::F32, vec![3], &[1.0, 2.0 + 2f32.powi(-22), 4.0]);
        let v = judge(&ok, &rf).unwrap();
        assert!(v.pass(), "{v}");
        assert_eq!(v.differ, 1);
        assert_eq!(v.max_ulp, 1.0);
        assert_eq!(v.max_allowed_ulp, 1.0);
        assert_eq!(v.max_bound_used, 1.0);
        // Half of a two-ulp range used: 50%, though the difference equals `max_allowed_ulp`'s
        // figure of another element.
        let rf2 = reference(vec![b(2.0, 2f64.powi(-21)), b(1.0, 2f64.powi(-20))]);
        let half = Tensor::from_f32(DType::F32, vec![2], &[2.0 + 2f32.powi(-22), 1.0]);
        let v = judge(&half, &rf2).unwrap();
        assert_eq!((v.max_ulp, v.max_bound_used), (1.0, 0.5));
        assert!(
            v.to_string()
                .contains("no element past 50% of its own bound"),
            "{v}"
        );
        let bad = Tensor::from_f32(DType::F32, vec![3], &[1.0, 2.0, 4.5]);
        let v = judge(&bad, &rf).unwrap();
        assert!(!v.pass());
        assert_eq!(v.first.as_ref().unwrap().index, vec![2]);
        assert!(v.to_string().contains("first at [2]: got 4.5e0"), "{v}");
    }

    #[test]
    fn nan_only_where_allowed() {
        let rf = reference(vec![Bound::point(f64::NAN), Bound::point(1.0)]);
        let both_nan = Tensor::from_f32(DType::F32, vec![2], &[f32::NAN, f32::NAN]);
        let v = judge(&both_nan, &rf).unwrap();
        assert_eq!(v.outside, 1);
        assert_eq!(v.first.unwrap().index, vec![1]);
        let fine = Tensor::from_f32(DType::F32, vec![2], &[f32::NAN, 1.0]);
        assert!(judge(&fine, &rf).unwrap().pass());
        let not_nan = Tensor::from_f32(DType::F32, vec![2], &[0.0, 1.0]);
        assert!(!judge(&not_nan, &rf).unwrap().pass());
    }
}
