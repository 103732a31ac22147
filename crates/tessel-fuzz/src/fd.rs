//! The gradient judge: every `grad(...)` of a step against central finite differences of
//! its forward on the f64 oracle.
//!
//! A step's graph from `check` holds one [`Op::Grad`] placeholder per differentiated
//! parameter: the gradient of `L = Σ_k ⟨seed_k, out_k⟩` with respect to a step input. The
//! gradient under test is the oracle's value of the `grad` pass's backward
//! ([`tessel_passes::grad::run`]); the truth it is compared with is computed from the
//! forward alone — the placeholder's `outputs`, evaluated by the same oracle ([`eval_graph`],
//! f64 with nothing rounded, so the casts of a bf16 program do not disturb the differences)
//! with that one input moved by ±h.
//!
//! Central differences at h₁ = 2⁻¹¹, h₂ = 2⁻¹², h₃ = 2⁻¹³, two Richardson extrapolations
//! `R(h, h/2) = (4·D(h/2) − D(h)) / 3` (error O(h⁴)): R₁ from (h₁, h₂), R₂ from (h₂, h₃).
//! Where `L` is smooth on `[x − h₁, x + h₁]` the two agree to far below the tolerance; where
//! they do not (by more than 1e-6 of the gradient's peak, plus the noise below), a kink or
//! a jump lies within the step (a `max` whose top two are closer than
//! h₁, a `relu` at 0, a `floor` at an integer): that element is *inconclusive*, counted and
//! not judged — there is no derivative to compare with. (At an exact tie of two different
//! elements both differences give the average of the one-sided slopes, which is what the
//! rules' tie conventions give too.) Otherwise the gradient must be within `2·tol` of R₂.
//!
//! A second test of smoothness reads the differences alone: the steps must be small enough
//! for `L` there that the differences converge as a smooth function's do. With
//! `D(h) = f' + c₂h² + O(h⁴)`, `D(h₂) − D(h₃)` is a quarter of `D(h₁) − D(h₂)`; it must be,
//! within 1/64 of that plus the rounding noise (`converges` argues both). Where it is not
//! (`sin(exp(t))` with `exp(t)·h` near 1 or more: the differences sample the oscillation,
//! and R₁, R₂ may agree within a tolerance that the large gradient there makes wide —
//! regression `fuzz_105706_wrong_answer.tsl`), the element is inconclusive too. This test
//! needs no scale: `D(h₂) − D(h₃) − (D(h₁) − D(h₂))/4` is `(3/4)·(R₁ − R₂)`, the first test's
//! quantity, here measured against the differences' own `h²` term instead of the peak. It
//! does not read the gradient under test, so it cannot hide a wrong one where the
//! differences behave; it only leaves elements uncompared, and the fuzzer reports how many.
//!
//! The tolerance `tol = 1e-6 · peak + 2¹⁰ · ε · (S + 1) / h₃`: relative to the gradient's
//! peak (the largest magnitude of the gradient tensor and of the converging differences
//! computed for it), as `crates/tessel-passes/tests/grad.rs` measures it (its cases reach 1e-6); plus the
//! rounding noise of the differences themselves, `L` being an f64 sum whose terms add up to
//! `S = Σ |seed · out|` (ε = 2⁻⁵², the 2¹⁰ a margin for the error of the oracle's own
//! evaluation: ~K roundings per matmul element, cancellation in the step's arithmetic). On
//! the O(1) values the generator makes, that is 1e-6 of the peak plus ~2e-9 · S.
//!
//! What is compared, per gradient: every element when the input has at most
//! [`COORDINATES`] of them; else that many (the first, the last, the rest drawn by a seed)
//! and [`DIRECTIONS`] directional derivatives along seeded ±1 directions over every element
//! (`⟨g, v⟩` against the difference along `v`, its tolerance relative to `Σ|g|`), so that an
//! error anywhere in a large gradient is seen.
//!
//! Inputs: float inputs are moved by ±h exactly, so they must be f32 values on a grid of
//! 2⁻²⁰ ([`fd_inputs`] rounds them there; below 2³ in magnitude `x ± h` is then exact in
//! f32). A gradient by a 16-bit input, or by a value that is no step input, is not judged:
//! [`judge`] says so in an error.

use tessel_ir::graph::{Graph, Op};
use tessel_ir::{DType, Value};
use tessel_ref::oracle::OracleTensor;
use tessel_ref::tensor::SplitMix64;
use tessel_ref::{eval_graph, Tensor};

/// Elements compared per gradient (all of them for smaller inputs).
pub const COORDINATES: usize = 24;
/// Directional derivatives compared per gradient.
pub const DIRECTIONS: usize = 2;
/// The steps of the central differences.
const STEPS: [f64; 3] = [1.0 / 2048.0, 1.0 / 4096.0, 1.0 / 8192.0];
/// Relative tolerance to the gradient's peak.
pub const RTOL: f64 = 1e-6;
/// Float inputs lie on this grid (2⁻²⁰).
const GRID: f64 = 1.0 / 1_048_576.0;

/// What the judge found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FdReport {
    /// Elements and directions compared with a derivative.
    pub checked: u64,
    /// Elements and directions where `L` is not smooth within the step (or not finite), or
    /// its differences do not converge: nothing to compare with.
    pub inconclusive: u64,
    /// The largest `|g − R₂| / tol` of the compared ones (≤ 2 passes).
    pub worst: f64,
    /// One line per wrong element or direction (the first few per gradient).
    pub wrong: Vec<String>,
}

impl FdReport {
    pub fn pass(&self) -> bool {
        self.wrong.is_empty()
    }
}

/// `inputs` with every f32 value rounded to the grid of 2⁻²⁰ (other dtypes as they are):
/// the inputs [`judge`] can move by ±h exactly.
pub fn fd_inputs(inputs: &[Tensor]) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|t| {
            if t.ty.dtype != DType::F32 {
                return t.clone();
            }
            let v: Vec<f32> = t
                .to_f64_vec()
                .iter()
                .map(|x| ((x / GRID).round() * GRID) as f32)
                .collect();
            Tensor::from_f32(DType::F32, t.ty.shape.0.clone(), &v)
        })
        .collect()
}

/// True if `g` holds a `grad(...)` placeholder.
pub fn has_grad(g: &Graph) -> bool {
    g.ops.values().any(|op| matches!(op, Op::Grad { .. }))
}

/// Judges every gradient the step `g` (a graph from `check`) returns, on `inputs` (in
/// `g.inputs` order; [`fd_inputs`] makes them movable), the gradients computed by the
/// oracle from the `grad` pass's graph. `seed` draws the elements and directions compared.
///
/// Errors: the `grad` pass or the oracle failing, a gradient by a value that is not an f32
/// step input.
pub fn judge(g: &Graph, inputs: &[Tensor], seed: u64) -> Result<FdReport, String> {
    let diff = tessel_passes::grad::run(g).map_err(|e| format!("grad: {e}"))?;
    let outs = eval_graph(&diff, inputs).map_err(|e| format!("oracle of the backward: {e}"))?;
    judge_gradients(g, inputs, &outs, seed)
}

/// [`judge`] with the step's outputs given (`outs[i]` for `g.outputs[i]`; only those that
/// are gradients are read): a test feeds wrong ones to see them caught.
///
/// Errors: as [`judge`].
pub fn judge_gradients(
    g: &Graph,
    inputs: &[Tensor],
    outs: &[OracleTensor],
    seed: u64,
) -> Result<FdReport, String> {
    let mut report = FdReport::default();
    let mut rng = SplitMix64::new(seed ^ 0x6772_6164);
    // One forward per (outputs, seeds) pair: its outputs and seeds, placeholders removed.
    let mut forwards: Vec<(Vec<Value>, Vec<Value>, Forward)> = Vec::new();
    for (i, (name, v)) in g.outputs.iter().enumerate() {
        let Op::Grad {
            wrt,
            outputs,
            seeds,
        } = &g.ops[*v]
        else {
            continue;
        };
        let Some(j) = g.inputs.iter().position(|(_, x)| x == wrt) else {
            return Err(format!(
                "`{name}`: a gradient by a value that is not a step input (not judged)"
            ));
        };
        if inputs[j].ty.dtype != DType::F32 {
            return Err(format!(
                "`{name}`: a gradient by the {} input `{}`, which ±h cannot move exactly (not judged)",
                inputs[j].ty.dtype, g.inputs[j].0
            ));
        }
        let k = match forwards
            .iter()
            .position(|(o, s, _)| o == outputs && s == seeds)
        {
            Some(k) => k,
            None => {
                let f = Forward::new(g, outputs, seeds, inputs)?;
                forwards.push((outputs.clone(), seeds.clone(), f));
                forwards.len() - 1
            }
        };
        let label = format!("`{name}` = d/d{}", g.inputs[j].0);
        forwards[k]
            .2
            .check(&label, j, &outs[i].data, inputs, &mut rng, &mut report)?;
    }
    Ok(report)
}

/// The two Richardson extrapolations `(R₁, R₂)` of the central differences `d` at [`STEPS`].
fn richardson(d: &[f64; 3]) -> (f64, f64) {
    ((4.0 * d[1] - d[0]) / 3.0, (4.0 * d[2] - d[1]) / 3.0)
}

/// How far `D(h₂) − D(h₃)` may be from `(D(h₁) − D(h₂)) / 4`, relative to the latter, for
/// [`converges`] (beside the rounding noise).
const CONVERGENCE: f64 = 1.0 / 64.0;

/// Whether the central differences `d` at [`STEPS`] converge as a smooth function's do:
/// `D(h) = f' + c₂h² + c₄h⁴ + …`, so with each step half the last, `D(h₂) − D(h₃)` is a
/// quarter of `D(h₁) − D(h₂)` up to a relative `−(45/48)·(c₄/c₂)·h₁²`. Where `h` is small
/// against the scale on which `L` varies, that is far below [`CONVERGENCE`]: along a
/// sinusoid of frequency ω (`D(h) = f'·sin(ωh)/(ωh)` exactly) it is `(3/64)·(ωh₁)²`, so the
/// test fails from ωh₁ ≈ 0.58 (ω ≈ 1200) on — where R₂'s own truncation error,
/// `(ωh₂)⁴/480` of the derivative, reaches 1.4e-5 of it, 14 times [`RTOL`]. Beyond that the
/// steps cannot follow `L` (`sin(exp(t))` with `exp(t)·h` near 1 or more: the three
/// differences are samples of the oscillation, whatever the derivative is), and the two
/// Richardson estimates may agree by chance, or within a tolerance that a large gradient
/// elsewhere makes wide. The test reads the differences only, never the gradient under
/// test, so it cannot pass a wrong gradient: it only leaves elements uncompared.
///
/// `noise` is the rounding noise of one difference at h₃ (`check`'s `noise`, which bounds
/// `|R₁ − R₂|` where `L` is smooth). `D(h₂) − D(h₃) − (D(h₁) − D(h₂))/4` is exactly
/// `(3/4)·(R₁ − R₂)`, so its noise is `(3/4)·noise` under the same bound on `L`'s rounding
/// error (per difference `err(L)/h`, here `(1/4 + 5/4·2 + 4)·err(L)/h₁ = (27/16)·err(L)/h₃`
/// in the worst case, which `noise`'s margin of 2¹⁰ over `ε·(S + 1)` covers as it does
/// for R₁ − R₂): where `L` is close to quadratic along the direction (`c₂ ≈ 0`, a matmul
/// or a sum), both sides are noise, and the element is compared. A smooth `L` of the
/// generator's O(1) values has `c₄·h₁⁴ = f⁽⁵⁾·h₁⁴/120` ~ 5e-16·f⁽⁵⁾, far below that noise
/// (~2e-9·(S + 1)), so even where
/// `c₂` vanishes (an inflection of the derivative) the test does not fail there.
fn converges(d: &[f64; 3], noise: f64) -> bool {
    let predicted = (d[0] - d[1]) / 4.0;
    let next = d[1] - d[2];
    (next - predicted).abs() <= CONVERGENCE * predicted.abs() + 0.75 * noise
}

/// The forward of one set of placeholders: a graph of its outputs, and the seeds (held
/// fixed: `grad` differentiates `⟨seed, f⟩` with the seed a constant).
struct Forward {
    graph: Graph,
    seeds: Vec<Vec<f64>>,
    /// `S = Σ |seed · out|` at the unmoved inputs.
    scale: f64,
}

impl Forward {
    fn new(
        g: &Graph,
        outputs: &[Value],
        seeds: &[Value],
        inputs: &[Tensor],
    ) -> Result<Forward, String> {
        let mut f = g.clone();
        f.outputs = outputs
            .iter()
            .enumerate()
            .map(|(k, v)| (format!("y{k}"), *v))
            .chain(seeds.iter().enumerate().map(|(k, v)| (format!("s{k}"), *v)))
            .collect();
        // The pass builds the (dead) backwards and removes them with the placeholders.
        let mut graph = tessel_passes::grad::run(&f).map_err(|e| format!("grad: {e}"))?;
        let vals = eval_graph(&graph, inputs).map_err(|e| format!("oracle: {e}"))?;
        let n = outputs.len();
        let seeds: Vec<Vec<f64>> = vals[n..].iter().map(|t| t.data.clone()).collect();
        let scale = vals[..n]
            .iter()
            .zip(&seeds)
            .flat_map(|(y, s)| y.data.iter().zip(s).map(|(a, b)| (a * b).abs()))
            .sum();
        graph.outputs.truncate(n);
        Ok(Forward {
            graph,
            seeds,
            scale,
        })
    }

    /// `L` at `inputs`.
    fn loss(&self, inputs: &[Tensor]) -> Result<f64, String> {
        let ys = eval_graph(&self.graph, inputs).map_err(|e| format!("oracle: {e}"))?;
        Ok(ys
            .iter()
            .zip(&self.seeds)
            .flat_map(|(y, s)| y.data.iter().zip(s).map(|(a, b)| a * b))
            .sum())
    }

    /// The central difference of `L` along `dir` (elements of input `j`, ±1 or 0) at
    /// step `h`; None if `L` is not finite there.
    fn central(
        &self,
        inputs: &[Tensor],
        j: usize,
        dir: &[(usize, f64)],
        h: f64,
    ) -> Result<Option<f64>, String> {
        let moved = |sign: f64| -> Tensor {
            let mut v = inputs[j].to_f32_vec();
            for &(i, d) in dir {
                v[i] = (v[i] as f64 + sign * d * h) as f32;
            }
            Tensor::from_f32(DType::F32, inputs[j].ty.shape.0.clone(), &v)
        };
        let mut xs = inputs.to_vec();
        xs[j] = moved(1.0);
        let plus = self.loss(&xs)?;
        xs[j] = moved(-1.0);
        let minus = self.loss(&xs)?;
        let d = (plus - minus) / (2.0 * h);
        Ok(d.is_finite().then_some(d))
    }

    /// The central differences `D(h₁), D(h₂), D(h₃)` along `dir`; None where `L` is not
    /// finite.
    fn differences(
        &self,
        inputs: &[Tensor],
        j: usize,
        dir: &[(usize, f64)],
    ) -> Result<Option<[f64; 3]>, String> {
        let mut d = [0.0; 3];
        for (k, h) in STEPS.iter().enumerate() {
            match self.central(inputs, j, dir, *h)? {
                Some(x) => d[k] = x,
                None => return Ok(None),
            }
        }
        Ok(Some(d))
    }

    /// Compares the gradient `grad` by input `j` with the differences.
    fn check(
        &self,
        label: &str,
        j: usize,
        grad: &[f64],
        inputs: &[Tensor],
        rng: &mut SplitMix64,
        report: &mut FdReport,
    ) -> Result<(), String> {
        let n = grad.len();
        let x = inputs[j].to_f64_vec();
        if let Some(i) = (0..n).find(|&i| {
            STEPS.iter().any(|h| {
                (x[i] + h) as f32 as f64 != x[i] + h || (x[i] - h) as f32 as f64 != x[i] - h
            })
        }) {
            return Err(format!(
                "{label}: element {i} = {} is off the grid ±h moves exactly (not judged)",
                x[i]
            ));
        }
        let noise = 1024.0 * f64::EPSILON * (self.scale + 1.0) / STEPS[2];
        let mut peak = grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        // The elements compared.
        let mut coords: Vec<usize> = if n <= COORDINATES {
            (0..n).collect()
        } else {
            let mut c = vec![0, n - 1];
            while c.len() < COORDINATES {
                let i = (rng.next_u64() % n as u64) as usize;
                if !c.contains(&i) {
                    c.push(i);
                }
            }
            c
        };
        coords.sort_unstable();
        // (what, gradient, R₁, R₂), and the scale of the tolerance (0: the peak).
        let mut results: Vec<(String, f64, f64, f64)> = Vec::new();
        let mut scales: Vec<f64> = Vec::new();
        for &i in &coords {
            match self.differences(inputs, j, &[(i, 1.0)])? {
                Some(d) if converges(&d, noise) => {
                    let (r1, r2) = richardson(&d);
                    peak = peak.max(r2.abs());
                    results.push((format!("element {i}"), grad[i], r1, r2));
                    scales.push(0.0);
                }
                _ => report.inconclusive += 1,
            }
        }
        for _ in 0..if n > COORDINATES { DIRECTIONS } else { 0 } {
            let dir: Vec<(usize, f64)> = (0..n)
                .map(|i| (i, if rng.next_u64() >> 63 == 0 { 1.0 } else { -1.0 }))
                .collect();
            let gv: f64 = dir.iter().map(|&(i, d)| grad[i] * d).sum();
            let l1: f64 = grad.iter().map(|g| g.abs()).sum();
            match self.differences(inputs, j, &dir)? {
                Some(d) if converges(&d, noise) => {
                    let (r1, r2) = richardson(&d);
                    results.push(("a ±1 direction over every element".into(), gv, r1, r2));
                    scales.push(l1.max(r2.abs()));
                }
                _ => report.inconclusive += 1,
            }
        }
        let mut wrong = 0;
        for ((what, g, r1, r2), s) in results.iter().zip(&scales) {
            // A direction's tolerance is relative to Σ|g|; its smoothness test is not: a
            // kink within ±h of one element moves R₁ − R₂ by a part of that element's
            // gradient, which a tolerance of Σ|g| would not see.
            let base = if *s > 0.0 { *s } else { peak };
            let tol = RTOL * base + noise;
            if (r1 - r2).abs() > RTOL * peak + noise {
                report.inconclusive += 1;
                continue;
            }
            report.checked += 1;
            let err = (g - r2).abs();
            let ratio = if tol > 0.0 {
                err / tol
            } else if err > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            if !g.is_finite() || ratio > 2.0 {
                wrong += 1;
                if wrong <= 3 {
                    report.wrong.push(format!(
                        "{label}, {what}: grad {g:e} vs finite differences {r2:e} (error {err:.2e}, tolerance {tol:.2e}, the gradient's peak {peak:.3e})"
                    ));
                }
            }
            if ratio.is_finite() {
                report.worst = report.worst.max(ratio);
            } else {
                report.worst = f64::INFINITY;
            }
        }
        if wrong > 3 {
            report
                .wrong
                .push(format!("{label}: {} more wrong", wrong - 3));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The central differences of `sin(ω·x)` at `x = 0.3`: `f'·sin(ωh)/(ωh)`.
    fn sinusoid(w: f64) -> [f64; 3] {
        STEPS.map(|h| ((w * (0.3 + h)).sin() - (w * (0.3 - h)).sin()) / (2.0 * h))
    }

    /// [`converges`] as its doc says: a sinusoid's differences converge while ωh₁ is below
    /// ~0.58 and not from there on, whatever the samples; differences equal up to rounding
    /// (`L` quadratic along the direction) converge.
    #[test]
    fn converges_where_the_steps_follow_the_function() {
        for w in [1.0, 10.0, 100.0, 1000.0] {
            assert!(converges(&sinusoid(w), 0.0), "ω = {w}");
        }
        for w in [1300.0, 3000.0, 1e4, 1e5, 1e6, 1e9] {
            assert!(!converges(&sinusoid(w), 0.0), "ω = {w}");
        }
        let d = 0.25;
        let noise = 1024.0 * f64::EPSILON * 2.0 / STEPS[2];
        let e = f64::EPSILON * 2.0;
        assert!(converges(
            &[d + e / STEPS[0], d - e / STEPS[1], d + e / STEPS[2]],
            noise
        ));
        assert!(!converges(&[d, d, d + 100.0 * noise], noise));
    }
}
