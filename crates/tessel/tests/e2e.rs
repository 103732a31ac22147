//! End-to-end tests through the whole pipeline, without a GPU (design §9):
//! - every example's PTX is snapshotted in `golden/` and assembled by ptxas 13.0 for the
//!   target its header names (`sm_90a`, the default H200 preset's), with registers and
//!   spills reported;
//! - every example's outputs, in every profile, for fixed seeds, as digests in `golden/`
//!   (`digests__*.snap`), so a change in numerics shows in review as a PTX change does;
//! - no emitted PTX uses an approximate instruction or flushes denormals;
//! - semantics: the kernel-IR executor against the f64 oracle — f32 paths within rel-RMS
//!   1e-6, 16-bit outputs within rel-RMS 2^-8 (the bf16 unit roundoff: a few roundings of
//!   at most half an ulp each) — at odd shapes (T = 1, 3, 7, ...), every access bounds- and
//!   alignment-checked by the executor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessel_driver::{Config, Source, Weights};
use tessel_ir::DType;
use tessel_passes::{check, compile, Options, PtxHeader};
use tessel_ref::{error_stats, eval_graph, run_program, Tensor};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The single-file examples of examples/qwen3_14b. The whole decoder layers
/// (`layer.tsl`, which import examples/lib/qwen.tsl) are not here: their GEMMs at the
/// models' hidden sizes take minutes on the executor. crates/tessel/tests/layers.rs
/// compiles them and checks the same library at a small hidden size; on the GPU,
/// scripts/gpu-layers.sh compares them with transformers.
fn examples() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in ["examples/qwen3_14b"] {
        for e in std::fs::read_dir(root().join(dir)).expect("examples dir") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "tsl")
                && p.file_name().is_some_and(|n| n != "layer.tsl")
            {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

struct Step {
    name: String,
    checked: tessel_ir::graph::Graph,
    program: tessel_ir::kernel::Program,
    /// The PTX header the step was compiled under (from the default target).
    header: PtxHeader,
}

fn compile_file_with(
    path: &Path,
    dims: &[(&str, u64)],
    profile: tessel_passes::Profile,
) -> Vec<Step> {
    let src = Source::load(path, false).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config = Config {
        dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        options: Options {
            verify: true,
            profile,
            ..Default::default()
        },
        tp: None,
    };
    // `checked` has the step's `grad`s differentiated: what the references evaluate.
    src.compile_steps(None, &config, &Weights::none())
        .unwrap_or_else(|e| panic!("{}: {:#}", path.display(), anyhow::Error::from(e)))
        .into_iter()
        .map(|s| Step {
            name: s.name,
            checked: s.checked,
            program: s.compiled.program,
            header: s.compiled.ptx,
        })
        .collect()
}

/// The PTX module of `p` under `h`, the header of the step it was compiled in (as the CLI
/// writes it).
fn ptx(p: &tessel_ir::kernel::Program, h: &PtxHeader) -> String {
    tessel_driver::device::ptx_of(p, h).expect("ptx")
}

/// The golden cases: every Qwen3-14B example at T = 4096 in the default (`exact`) profile,
/// and the tensor-core schedules in the `fast` profile — the GEMV at T = 8, the large tile
/// (the projections at T = 4096), and the LoRA step's skinny and split-K TF32 GEMMs (with
/// its `exact` SIMT counterparts).
/// A golden case: a file, its dims and the profile.
type GoldenCase = (PathBuf, Vec<(&'static str, u64)>, tessel_passes::Profile);

fn golden_cases() -> Vec<GoldenCase> {
    use tessel_passes::Profile;
    let mut v: Vec<_> = examples()
        .into_iter()
        .map(|p| (p, vec![("T", 4096)], Profile::Exact))
        .collect();
    let q = root().join("examples/qwen3_14b");
    v.push((q.join("gate_proj.tsl"), vec![("T", 8)], Profile::Fast));
    v.push((q.join("projections.tsl"), vec![("T", 4096)], Profile::Fast));
    let lora = root().join("examples/lora/lora_step.tsl");
    let dims = vec![("M", 8192), ("K", 4096), ("N", 4096), ("R", 16)];
    v.push((lora.clone(), dims.clone(), Profile::Exact));
    v.push((lora, dims.clone(), Profile::Fast));
    // The LoRA delta with its backward from `grad` (bf16, the seed report's contract).
    let delta = root().join("examples/lora/lora_delta.tsl");
    v.push((delta.clone(), dims.clone(), Profile::Invariant));
    v.push((delta, dims, Profile::Fast));
    v
}

#[test]
fn golden_ptx_of_every_example_assembles() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    for (path, dims, profile) in golden_cases() {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("x")
            .to_string();
        let src = std::fs::read_to_string(&path).expect("read");
        let dim_flags: Vec<String> = dims.iter().map(|(k, v)| format!("--dim {k}={v}")).collect();
        // The snapshot of the exact profile at T = 4096 keeps its historical name.
        let suffix = if profile == tessel_passes::Profile::Exact && dims == [("T", 4096)] {
            String::new()
        } else {
            let d: Vec<String> = dims.iter().map(|(k, v)| format!("{k}{v}")).collect();
            format!("__{}_{}", profile.name(), d.join("_"))
        };
        for step in compile_file_with(&path, &dims, profile) {
            let text = ptx(&step.program, &step.header);
            let mut settings = insta::Settings::clone_current();
            settings.set_snapshot_path(root().join("golden"));
            settings.set_prepend_module_to_snapshot(false);
            settings.set_description(format!(
                "{} step {} {} --profile {}",
                path.display(),
                step.name,
                dim_flags.join(" "),
                profile.name()
            ));
            settings.bind(|| {
                insta::assert_snapshot!(
                    format!("{stem}__{}{suffix}", step.name),
                    format!("SOURCE\n{src}\nPTX\n{text}")
                )
            });
            if let Some(ptxas) = &ptxas {
                let report = ptxas
                    .assemble(&text, &step.header.target)
                    .unwrap_or_else(|e| {
                        panic!("{stem}:{}: ptxas rejected the PTX: {e}", step.name)
                    });
                for k in report.kernels() {
                    println!(
                        "{stem}:{} {}: {} registers, {} B stack, spills {} B stored / {} B loaded",
                        step.name,
                        k.name,
                        k.registers,
                        k.stack_frame_bytes,
                        k.spill_store_bytes,
                        k.spill_load_bytes
                    );
                    assert!(!k.spills(), "{}: register spills", k.name);
                }
            }
        }
    }
}

/// Design §5: never an approximate instruction, never flush-to-zero.
#[test]
fn no_approximate_instructions_in_any_emitted_ptx() {
    let mut files = examples();
    files.push(root().join("tests/programs/f32_paths.tsl"));
    files.push(root().join("tests/programs/shapes.tsl"));
    files.push(root().join("tests/programs/matmul.tsl"));
    files.push(root().join("examples/lora/lora_step.tsl"));
    let dims = [
        ("T", 7),
        ("D", 33),
        ("M", 40),
        ("K", 72),
        ("N", 24),
        ("R", 16),
    ];
    let profiles = tessel_passes::Profile::ALL;
    for (path, profile) in files
        .iter()
        .flat_map(|f| profiles.iter().map(move |&p| (f, p)))
    {
        for step in compile_file_with(path, &dims, profile) {
            let text = ptx(&step.program, &step.header);
            for bad in [
                "sin.approx",
                "cos.approx",
                "ex2.approx",
                "lg2.approx",
                "rsqrt.approx",
                "rcp.approx",
                ".approx",
                ".ftz",
            ] {
                assert!(
                    !text.contains(bad),
                    "{} step {}: `{bad}` in the PTX",
                    path.display(),
                    step.name
                );
            }
            // Every f32 add/sub/mul is explicitly rounded (design §7), so ptxas cannot
            // contract it into an fma the executor does not perform.
            for line in text.lines() {
                let l = line.trim_start();
                for op in ["add.f32", "sub.f32", "mul.f32"] {
                    assert!(!l.starts_with(op), "unrounded `{l}` in {}", path.display());
                }
            }
        }
    }
}

/// Matmuls of widening casts of 16-bit tensors (tests/programs/widened_matmul.tsl) in every
/// schedule — the SIMT GEMV and tile, split-K, the tensor-core GEMV and tile on bf16/f16
/// fragments — assemble with ptxas for their target (sm_90a) without spills, with no
/// approximate instruction.
#[test]
fn widened_matmul_ptx_assembles() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    let path = root().join("tests/programs/widened_matmul.tsl");
    for (m, k, n) in [
        (1, 40, 7),
        (4, 64, 20),
        (64, 520, 17),
        (70, 100, 130),
        (64, 2048, 16),
    ] {
        for &profile in &tessel_passes::Profile::ALL {
            let dims = [("M", m), ("K", k), ("N", n)];
            for step in compile_file_with(&path, &dims, profile) {
                let what = format!("{} M={m} K={k} N={n} {}", step.name, profile.name());
                let text = ptx(&step.program, &step.header);
                assert!(
                    !text.contains(".approx") && !text.contains(".ftz"),
                    "{what}"
                );
                if let Some(ptxas) = &ptxas {
                    let report = ptxas
                        .assemble(&text, &step.header.target)
                        .unwrap_or_else(|e| panic!("{what}: ptxas rejected the PTX: {e}"));
                    for kr in report.kernels() {
                        assert!(!kr.spills(), "{what}: {} spills", kr.name);
                    }
                }
            }
        }
    }
}

/// The ops along an axis (tests/programs/select_scan.tsl: argmax/argmin, topk, logsumexp and
/// the cumsum scan kernel) assemble with ptxas for their target (sm_90a) in every profile,
/// without spills or approximate instructions, at a row length that is no multiple of a
/// chunk or vector.
#[test]
fn select_scan_ptx_assembles() {
    let ptxas = tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas");
    let path = root().join("tests/programs/select_scan.tsl");
    for (t, d) in [(3, 3), (2, 37)] {
        for &profile in &tessel_passes::Profile::ALL {
            for step in compile_file_with(&path, &[("T", t), ("D", d)], profile) {
                let what = format!("{} T={t} D={d} {}", step.name, profile.name());
                let text = ptx(&step.program, &step.header);
                assert!(
                    !text.contains(".approx") && !text.contains(".ftz"),
                    "{what}"
                );
                if let Some(ptxas) = &ptxas {
                    let report = ptxas
                        .assemble(&text, &step.header.target)
                        .unwrap_or_else(|e| panic!("{what}: ptxas rejected the PTX: {e}"));
                    for kr in report.kernels() {
                        assert!(!kr.spills(), "{what}: {} spills", kr.name);
                    }
                }
            }
        }
    }
}

/// Runs every step of `path` at `dims` on the executor and compares with the oracle.
/// Returns (step, output, dtype, rel-RMS).
fn semantics(path: &Path, dims: &[(&str, u64)], seed: u64) -> Vec<(String, String, DType, f64)> {
    semantics_with(path, dims, seed, tessel_passes::Profile::Exact)
}

fn semantics_with(
    path: &Path,
    dims: &[(&str, u64)],
    seed: u64,
    profile: tessel_passes::Profile,
) -> Vec<(String, String, DType, f64)> {
    let mut out = Vec::new();
    for step in compile_file_with(path, dims, profile) {
        let p = &step.program;
        let inputs: Vec<Tensor> = p
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (name, b))| {
                let ty = p.buffers[*b].ty.clone();
                if name == "pos" {
                    // Positions 0.. as RoPE uses them.
                    let n = ty.shape.numel() as i32;
                    Tensor::from_i32(ty.shape.0.clone(), &(0..n).collect::<Vec<_>>())
                } else {
                    Tensor::random(ty, seed * 100 + i as u64)
                }
            })
            .collect();
        let got = run_program(p, &inputs)
            .unwrap_or_else(|e| panic!("{} step {}: executor: {e}", path.display(), step.name));
        let want = eval_graph(&step.checked, &inputs).expect("oracle");
        for (i, (name, _)) in p.outputs.iter().enumerate() {
            let s = error_stats(&got[i], &want[i]).expect("stats");
            assert_eq!(
                s.nan_mismatch, 0,
                "{} {name}: NaN where the oracle has none",
                step.name
            );
            out.push((step.name.clone(), name.clone(), got[i].ty.dtype, s.rel_rms));
        }
    }
    out
}

const F32_REL_RMS: f64 = 1e-6;
const BF16_REL_RMS: f64 = 1.0 / 256.0;
/// f32 through TF32 tensor cores (the `fast` profile): 2^-10, as `tessel check`.
const TF32_REL_RMS: f64 = 1.0 / 1024.0;

#[test]
fn f32_paths_meet_the_contract_at_odd_shapes() {
    let path = root().join("tests/programs/f32_paths.tsl");
    for (t, d) in [(1, 1), (3, 7), (7, 33), (5, 130), (2, 1000)] {
        for (step, name, dt, rel) in semantics(&path, &[("T", t), ("D", d)], t + d) {
            println!("T={t} D={d} {step}.{name}: rel-RMS {rel:.3e}");
            assert_eq!(dt, DType::F32);
            assert!(
                rel <= F32_REL_RMS,
                "T={t} D={d} {step}.{name}: rel-RMS {rel:e} above {F32_REL_RMS:e}"
            );
        }
    }
}

#[test]
fn examples_at_odd_token_counts_match_the_oracle() {
    // gate_proj and the projections carry weights of 50 to 360 MB: too slow for the executor
    // in a debug test. Their schedules are checked at small shapes by
    // `matmuls_match_the_oracle_at_every_shape` and at full size on the GPU (`tessel check`,
    // docs/perf/).
    for path in examples()
        .into_iter()
        .filter(|p| !p.ends_with("gate_proj.tsl") && !p.ends_with("projections.tsl"))
    {
        for t in [1, 3, 7] {
            for (step, name, dt, rel) in semantics(&path, &[("T", t)], t) {
                println!(
                    "{} T={t} {step}.{name} ({dt}): rel-RMS {rel:.3e}",
                    path.display()
                );
                assert!(rel <= BF16_REL_RMS, "{step}.{name}: rel-RMS {rel:e}");
            }
        }
    }
}

#[test]
fn odd_shapes_run_in_bounds_and_match_the_oracle() {
    let path = root().join("tests/programs/shapes.tsl");
    // D >= 2: `x[:, 1:]` of a one-column tensor is empty, which the language rejects.
    // 1024, 1280 and 2056 straddle the row held in registers (lower/rows.rs): bf16 rows of
    // 4 chunks per thread exactly, of 5 (looped), and of 257 chunks over 288 threads (one
    // each, the last threads' past the row's end, the warps combined in shared memory).
    for (t, d) in [
        (1, 2),
        (1, 7),
        (3, 5),
        (7, 33),
        (4, 129),
        (2, 5120),
        (2, 1024),
        (3, 1280),
        (2, 2056),
    ] {
        for (step, name, dt, rel) in semantics(&path, &[("T", t), ("D", d)], 3) {
            println!("T={t} D={d} {step}.{name} ({dt}): rel-RMS {rel:.3e}");
            let bound = if dt == DType::F32 {
                F32_REL_RMS
            } else {
                BF16_REL_RMS
            };
            assert!(
                rel <= bound,
                "T={t} D={d} {step}.{name}: rel-RMS {rel:e} > {bound:e}"
            );
        }
    }
}

#[test]
fn small_programs_match_the_oracle() {
    let path = root().join("tests/programs/small.tsl");
    for t in [1, 4, 9] {
        for (step, name, dt, rel) in semantics(&path, &[("T", t)], t) {
            println!("T={t} {step}.{name} ({dt}): rel-RMS {rel:.3e}");
            let bound = match dt {
                DType::F32 => F32_REL_RMS,
                DType::Bf16 | DType::F16 => BF16_REL_RMS,
                _ => 0.0,
            };
            assert!(
                rel <= bound,
                "T={t} {step}.{name}: rel-RMS {rel:e} > {bound:e}"
            );
        }
    }
}

/// Token-level mutations of every test program: whatever checks must compile (or fail
/// with an error) and run on the executor (or fault with an error), never panic.
#[test]
fn mutated_programs_never_panic_anywhere_in_the_pipeline() {
    // Not gate_proj and the projections: their weights make every mutant a minute of
    // executor time.
    let mut files: Vec<PathBuf> = examples()
        .into_iter()
        .filter(|p| !p.ends_with("gate_proj.tsl") && !p.ends_with("projections.tsl"))
        .collect();
    for f in ["f32_paths.tsl", "shapes.tsl", "small.tsl", "matmul.tsl"] {
        files.push(root().join("tests/programs").join(f));
    }
    let swaps = [
        "@", "x", "1", "2", "-1", "0", "1.0", "+", "-", "*", "/", "%", ":", "None", "axis", "f32",
        "bf16", "i32", "sin", "exp", "mean", "sum", "max", "concat", "split", "where", "iota",
        "pow", "softmax", "causal", "inf", "(", ")", "[", "]", ",", "^T", "<", "abs", "sqrt",
        "log",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut compiled = 0;
    for path in files {
        let src = std::fs::read_to_string(&path).expect("read");
        let toks: Vec<String> = {
            let mut v = Vec::new();
            let mut cur = String::new();
            for ch in src.chars() {
                if ch.is_alphanumeric() || ch == '_' || ch == '.' {
                    cur.push(ch);
                } else {
                    if !cur.is_empty() {
                        v.push(std::mem::take(&mut cur));
                    }
                    v.push(ch.to_string());
                }
            }
            v.push(cur);
            v
        };
        for _ in 0..300 {
            let mut t = toks.clone();
            for _ in 0..1 + next(2) {
                let i = next(t.len());
                if t[i].trim().is_empty() {
                    continue;
                }
                t[i] = swaps[next(swaps.len())].to_string();
            }
            let text: String = t.concat();
            let Ok(m) = tessel_syntax::parse(&text) else {
                continue;
            };
            for name in check::steps(&m) {
                let dims: BTreeMap<String, u64> = [
                    ("T".to_string(), 3),
                    ("D".to_string(), 5),
                    ("N".to_string(), 2),
                ]
                .into();
                let Ok(g) = check::run(&m, &name, &dims) else {
                    continue;
                };
                let opts = Options {
                    verify: true,
                    ..Default::default()
                };
                let r = std::panic::catch_unwind(|| {
                    let Ok(c) = compile(&g, &opts) else {
                        return false;
                    };
                    let _ = ptx(&c.program, &c.ptx);
                    let inputs: Vec<Tensor> = c
                        .program
                        .inputs
                        .iter()
                        .map(|(_, b)| Tensor::random(c.program.buffers[*b].ty.clone(), 1))
                        .collect();
                    // Faults (e.g. an integer division by zero) are errors, not panics.
                    let _ = run_program(&c.program, &inputs);
                    let _ = eval_graph(&g, &inputs);
                    true
                });
                match r {
                    Ok(ok) => compiled += ok as u32,
                    Err(_) => panic!("the pipeline panicked on step `{name}` of:\n{text}"),
                }
            }
        }
    }
    println!("{compiled} mutated steps compiled and ran");
    assert!(compiled > 100, "only {compiled} mutants compiled");
}

/// Every matmul schedule at shapes with tails in every dimension, in every profile (GEMV
/// and SIMT in `exact`; the tensor-core tile in `invariant`; tensor-core tile, tensor-core
/// GEMV and split-K in `fast`), on the executor against the oracle: f32 within 1e-6
/// (2^-10 for the fast profile's TF32), 16-bit within 2^-8.
#[test]
fn matmuls_match_the_oracle_at_every_shape() {
    let path = root().join("tests/programs/matmul.tsl");
    let shapes = [
        (1, 1, 1),
        (1, 7, 5),
        (3, 64, 17),
        (8, 520, 33),
        (16, 24, 9),
        (17, 33, 65),
        (64, 16, 64),
        (70, 100, 130),
        // GEMV with 4 columns per warp and a partial last warp (4230 = 264·16 + 6).
        (2, 64, 4230),
        // Two-level K sums in the SIMT tile at production K.
        (20, 4096, 24),
        // The tensor-core GEMV with two 8-wide fragments (M = 13) and a partial CTA.
        (13, 264, 37),
        // One output tile over K = 4096: split-K in `exact` and `fast`.
        (64, 4096, 16),
    ];
    for (profile, (m, k, n)) in tessel_passes::Profile::ALL
        .iter()
        .flat_map(|&p| shapes.iter().map(move |&s| (p, s)))
    {
        let dims = [("M", m), ("K", k), ("N", n)];
        for (step, name, dt, rel) in semantics_with(&path, &dims, m + k, profile) {
            println!(
                "{} M={m} K={k} N={n} {step}.{name} ({dt}): rel-RMS {rel:.3e}",
                profile.name()
            );
            let bound = match dt {
                // TF32 tensor cores, except where a decode GEMV keeps f32 (M ≤ 16, read
                // along K) — which the bound then still holds with room to spare.
                DType::F32 if profile == tessel_passes::Profile::Fast => TF32_REL_RMS,
                DType::F32 => F32_REL_RMS,
                _ => BF16_REL_RMS,
            };
            assert!(
                rel <= bound,
                "M={m} K={k} N={n} {step}.{name}: rel-RMS {rel:e} > {bound:e}"
            );
        }
    }
}

/// Compiles `step` of `path` with `profile`; the program's intermediate buffers are appended
/// to its outputs so that a test can compare every tensor the step writes.
fn compile_with_temps(
    path: &Path,
    step: &str,
    dims: &[(&str, u64)],
    profile: tessel_passes::Profile,
) -> tessel_ir::kernel::Program {
    let src = Source::load(path, false).expect("load");
    let config = Config {
        dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        options: Options {
            verify: true,
            profile,
            ..Default::default()
        },
        tp: None,
    };
    let mut p = src
        .compile_step(step, &config, &Weights::none())
        .expect("compile")
        .compiled
        .program;
    let temps: Vec<_> = p
        .buffers
        .iter()
        .filter(|(_, d)| d.role == tessel_ir::kernel::BufferRole::Temp)
        .map(|(b, d)| (d.name.clone(), b))
        .collect();
    p.outputs.extend(temps);
    p
}

/// Rows `r0 .. r0 + m` of a row-major tensor whose first dim is the batch.
fn rows(t: &Tensor, r0: usize, m: usize) -> Vec<u8> {
    let row = t.data.len() / t.ty.shape.0[0] as usize;
    t.data[r0 * row..(r0 + m) * row].to_vec()
}

/// Rows `r0 .. r0 + m` of a tensor of a batch of `full` rows: along its first dim, or, for
/// split-K partials `[ranges, full, N]`, along the second dim of every range.
fn batch_rows(t: &Tensor, full: usize, r0: usize, m: usize) -> Vec<u8> {
    let dims = &t.ty.shape.0;
    if dims[0] as usize == full || dims.len() < 2 {
        return rows(t, r0, m);
    }
    let ranges = dims[0] as usize;
    let per = t.data.len() / ranges;
    let row = per / full;
    (0..ranges)
        .flat_map(|s| t.data[s * per + r0 * row..s * per + (r0 + m) * row].to_vec())
        .collect()
}

/// Runs `step` on rows `r0 .. r0 + m` of the `full`-row inputs `x_full` (other inputs as
/// given) and returns every tensor the step writes.
fn run_rows(
    path: &Path,
    step: &str,
    (k, r, n): (u64, u64, u64),
    profile: tessel_passes::Profile,
    x_full: &Tensor,
    others: &[Tensor],
    (r0, m): (usize, usize),
) -> Vec<Tensor> {
    let p = compile_with_temps(
        path,
        step,
        &[("M", m as u64), ("K", k), ("R", r), ("N", n)],
        profile,
    );
    let x = Tensor {
        ty: tessel_ir::TensorType::new(x_full.ty.dtype, vec![m as u64, k]),
        data: rows(x_full, r0, m),
    };
    let mut inputs = vec![x];
    inputs.extend(others.iter().cloned());
    run_program(&p, &inputs).expect("executor")
}

/// Issue 3, `invariant` profile: a row's result never depends on the batch — for M in
/// {1, 2, 3, 8, 17, 64, 256}, at several positions in the batch, over two seeds, at small
/// and production K, on every tensor the step writes (the intermediate u and the output).
#[test]
fn invariant_profile_rows_do_not_depend_on_the_batch() {
    use tessel_passes::Profile;
    let path = root().join("tests/programs/lora.tsl");
    let (r, n) = (16u64, 32u64);
    let full = 256usize;
    for step in ["lora_f32", "lora_bf16"] {
        for k in [64u64, 4096] {
            for seed in [1u64, 2] {
                let dt = if step == "lora_f32" {
                    DType::F32
                } else {
                    DType::Bf16
                };
                let ty = |s: Vec<u64>| tessel_ir::TensorType::new(dt, s);
                let x = Tensor::random(ty(vec![full as u64, k]), seed * 10 + 1);
                let others = [
                    Tensor::random(ty(vec![r, k]), seed * 10 + 2),
                    Tensor::random(ty(vec![n, r]), seed * 10 + 3),
                ];
                let want = run_rows(
                    &path,
                    step,
                    (k, r, n),
                    Profile::Invariant,
                    &x,
                    &others,
                    (0, full),
                );
                // u and y, and at the long K the split-K partials of u = x·Aᵀ (the
                // invariant profile splits a skinny GEMM's K by K alone: [ranges, M, R]).
                let written = if k >= 512 { 3 } else { 2 };
                assert!(want.len() == written, "{step} K={k}: u, y and the partials");
                for m in [1usize, 2, 3, 8, 17, 64, 256] {
                    for r0 in [0, full - m, (full - m) / 3] {
                        let got = run_rows(
                            &path,
                            step,
                            (k, r, n),
                            Profile::Invariant,
                            &x,
                            &others,
                            (r0, m),
                        );
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                g.data == batch_rows(w, full, r0, m),
                                "{step} K={k} seed {seed}: tensor {i} of rows {r0}..{} differs between M={m} and M={full}",
                                r0 + m
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The probe above can fail: in the `exact` profile, M ≤ 16 takes the GEMV, whose k order
/// differs from the tile's, and at K = 4096 some row's bits change.
#[test]
fn exact_profile_gemv_changes_rows_the_invariance_probe_sees() {
    use tessel_passes::Profile;
    let path = root().join("tests/programs/lora.tsl");
    let (k, r, n) = (4096u64, 16u64, 32u64);
    let ty = |s: Vec<u64>| tessel_ir::TensorType::new(DType::F32, s);
    let x = Tensor::random(ty(vec![64, k]), 7);
    let others = [
        Tensor::random(ty(vec![r, k]), 8),
        Tensor::random(ty(vec![n, r]), 9),
    ];
    let want = run_rows(
        &path,
        "lora_f32",
        (k, r, n),
        Profile::Exact,
        &x,
        &others,
        (0, 64),
    );
    let got = run_rows(
        &path,
        "lora_f32",
        (k, r, n),
        Profile::Exact,
        &x,
        &others,
        (0, 8),
    );
    assert_ne!(
        got[1].data,
        rows(&want[1], 0, 8),
        "GEMV (M = 8) and the SIMT tile (M = 64) gave identical u at K = 4096"
    );
}

/// The dims of the golden output digests: decode-sized Qwen3-14B steps (T = 5) and a small
/// LoRA step. Each step takes the dims it declares and ignores the others.
const DIGEST_DIMS: [(&str, u64); 5] = [("T", 5), ("M", 24), ("K", 64), ("N", 32), ("R", 16)];

/// Examples whose inputs at [`DIGEST_DIMS`] exceed this many bytes (the Qwen3-14B weight
/// matrices, 50 to 360 MB) take about a minute on the executor in a debug build: their
/// digests are checked by an `#[ignore]`d test.
const DIGEST_HEAVY_BYTES: u64 = 16 << 20;

/// FNV-1a, 64 bits (Fowler, Noll, Vo; the published offset basis and prime): a digest of an
/// output's bytes that any tool can recompute.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Every `.tsl` file under `examples/`, sorted.
fn all_examples() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("examples dir") {
            let p = e.expect("entry").path();
            // The whole layers and their library: see [`examples`].
            let layer = p
                .file_name()
                .is_some_and(|n| n == "layer.tsl" || n == "lib");
            if layer {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "tsl") {
                // Whole layers that import examples/lib (the LoRA training steps): the same
                // reason, tested at a small size by crates/tessel/tests/training.rs.
                let imports = std::fs::read_to_string(&p).is_ok_and(|s| s.contains("import \""));
                if !imports {
                    out.push(p);
                }
            }
        }
    }
    let mut v = Vec::new();
    walk(&root().join("examples"), &mut v);
    v.sort();
    v
}

/// Every example's steps compiled in each profile (in [`Profile::ALL`] order) at
/// [`DIGEST_DIMS`], and whether the example is heavy (see [`DIGEST_HEAVY_BYTES`]).
///
/// [`Profile::ALL`]: tessel_passes::Profile::ALL
fn digest_cases() -> Vec<(PathBuf, Vec<Vec<Step>>, bool)> {
    all_examples()
        .into_iter()
        .map(|path| {
            let per_profile: Vec<Vec<Step>> = tessel_passes::Profile::ALL
                .iter()
                .map(|&profile| compile_file_with(&path, &DIGEST_DIMS, profile))
                .collect();
            let heavy = per_profile[0].iter().any(|s| {
                let p = &s.program;
                let bytes: u64 = p
                    .inputs
                    .iter()
                    .map(|(_, b)| p.buffers[*b].ty.size_bytes())
                    .sum();
                bytes > DIGEST_HEAVY_BYTES
            });
            (path, per_profile, heavy)
        })
        .collect()
}

/// Checks the golden digests of `path`'s outputs: every step run on the executor in every
/// profile from the inputs `tessel run --seed 0` makes (input `i` is `Tensor::random` with
/// seed `0 · 1000 + i`), one FNV-1a 64 per output, against `golden/digests__<stem>.snap`.
fn assert_output_digests(path: &Path, per_profile: &[Vec<Step>]) {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("x");
    let rel = path.strip_prefix(root()).unwrap_or(path);
    let dims: Vec<String> = DIGEST_DIMS
        .iter()
        .map(|(k, v)| format!("--dim {k}={v}"))
        .collect();
    let mut rows: Vec<(String, String, Vec<String>)> = Vec::new();
    for (s, step) in per_profile[0].iter().enumerate() {
        let p = &step.program;
        let inputs: Vec<Tensor> = p
            .inputs
            .iter()
            .enumerate()
            .map(|(i, (_, b))| Tensor::random(p.buffers[*b].ty.clone(), i as u64))
            .collect();
        let first = rows.len();
        for (profile, steps) in tessel_passes::Profile::ALL.iter().zip(per_profile) {
            let q = &steps[s].program;
            let outs = run_program(q, &inputs).unwrap_or_else(|e| {
                panic!(
                    "{} step {} ({}): {e}",
                    rel.display(),
                    step.name,
                    profile.name()
                )
            });
            for (o, ((name, _), t)) in q.outputs.iter().zip(&outs).enumerate() {
                if rows.len() == first + o {
                    rows.push((
                        format!("{}.{name}", step.name),
                        t.ty.to_string(),
                        Vec::new(),
                    ));
                }
                rows[first + o]
                    .2
                    .push(format!("{} {:016x}", profile.name(), fnv1a64(&t.data)));
            }
        }
    }
    let wn = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let wt = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (name, ty, digests) in &rows {
        text += &format!("{name:wn$}  {ty:wt$}  {}\n", digests.join("  "));
    }
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("golden"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_description(format!(
        "FNV-1a 64 of each output's bytes: the digest `tessel run {} {} --seed 0 --cpu \
         --profile P` prints, for each profile P",
        rel.display(),
        dims.join(" ")
    ));
    settings.bind(|| insta::assert_snapshot!(format!("digests__{stem}"), text));
}

/// Golden output digests (design §1: `golden/` holds them beside the PTX): a change in any example's numbers, in any profile,
/// shows in review as a changed line in `golden/digests__*.snap`, as a PTX change does in
/// the PTX snapshots. Blessing them on purpose: docs/testing.md.
#[test]
fn golden_output_digests_of_every_example() {
    for (path, per_profile, heavy) in digest_cases() {
        if !heavy {
            assert_output_digests(&path, &per_profile);
        }
    }
}

/// The digests of the examples with weight matrices (about a minute):
/// `cargo test -p tessel --test e2e -- --ignored golden_output`.
#[test]
#[ignore = "about a minute on the executor: run with -- --ignored"]
fn golden_output_digests_of_the_weight_heavy_examples() {
    for (path, per_profile, heavy) in digest_cases() {
        if heavy {
            assert_output_digests(&path, &per_profile);
        }
    }
}
