//! The driver without a GPU: each error is its typed variant, carrying what a caller shows;
//! a step compiled, its inputs bound by name and run on the CPU executor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessel_driver::{Config, Error, RequestError, Source, Weights};
use tessel_ir::DType;
use tessel_ref::Tensor;

const ADD: &str = "step add(x: f32[T], y: f32[T]) -> f32[T] {\n    x * 2.0 + y\n}\n";

/// Writes `text` to a fresh file named `name` in the test's own directory.
fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-driver-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write source");
    path
}

fn config(t: u64) -> Config {
    Config {
        dims: BTreeMap::from([("T".to_string(), t)]),
        ..Config::default()
    }
}

#[test]
fn a_missing_file_is_a_read_error() {
    match Source::load(Path::new("/nonexistent/x.tsl"), false) {
        Err(Error::Read { path, .. }) => assert_eq!(path, "/nonexistent/x.tsl"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("loaded a missing file"),
    }
}

#[test]
fn a_syntax_error_carries_its_diagnostics_and_report() {
    let path = file("syntax.tsl", "step f(x: f32[T]) -> f32[T] { x + }\n");
    let Err(Error::Source(d)) = Source::load(&path, false) else {
        panic!("expected source diagnostics");
    };
    assert!(!d.diagnostics.is_empty());
    assert!(
        d.rendered.contains(&d.diagnostics[0].message),
        "{}",
        d.rendered
    );
    assert!(
        d.rendered
            .ends_with(&format!("syntax error loading {}", path.display())),
        "{}",
        d.rendered
    );
}

#[test]
fn unbound_dims_name_the_dims() {
    let src = Source::load(&file("unbound.tsl", ADD), false).expect("loads");
    match src.compile_step("add", &Config::default(), &Weights::none()) {
        Err(Error::UnboundDims(u)) => {
            assert_eq!(u.step, "add");
            assert_eq!(u.dims, ["T"]);
            assert!(u.to_string().ends_with("in step `add`"), "{u}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("compiled without T"),
    }
}

#[test]
fn an_unknown_step_lists_the_steps() {
    let src = Source::load(&file("steps.tsl", ADD), false).expect("loads");
    match src.step_names(Some("mul")) {
        Err(Error::Request(RequestError::NoSuchStep { step, steps, .. })) => {
            assert_eq!(step, "mul");
            assert_eq!(steps, ["add"]);
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn a_step_runs_on_the_executor_with_inputs_by_name() {
    let src = Source::load(&file("run.tsl", ADD), false).expect("loads");
    let step = src
        .compile_step("add", &config(5), &Weights::none())
        .expect("compiles");
    let x = Tensor::from_f32(DType::F32, vec![5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let y = Tensor::from_f32(DType::F32, vec![5], &[0.5; 5]);
    let inputs = step
        .inputs_by_name(vec![("y".into(), y), ("x".into(), x)])
        .expect("binds");
    let out = step.run_executor(&inputs).expect("runs");
    assert_eq!(out[0].to_f32_vec(), [2.5, 4.5, 6.5, 8.5, 10.5]);
}

#[test]
fn inputs_by_name_reports_every_problem() {
    let src = Source::load(&file("bind.tsl", ADD), false).expect("loads");
    let step = src
        .compile_step("add", &config(5), &Weights::none())
        .expect("compiles");
    let bf = Tensor::from_f32(DType::Bf16, vec![5], &[0.0; 5]);
    let z = Tensor::from_f32(DType::F32, vec![5], &[0.0; 5]);
    let Err(Error::Weights(e)) = step.inputs_by_name(vec![("x".into(), bf), ("z".into(), z)])
    else {
        panic!("expected a weights error");
    };
    let m = e.message();
    assert!(
        m.contains("input `x` of step `add` is f32[5], given bf16[5]"),
        "{m}"
    );
    assert!(m.contains("step `add` has no input `z`"), "{m}");
    assert!(m.contains("input `y` of step `add` is not given"), "{m}");
}

#[test]
fn external_memory_must_fit_every_buffer_of_the_program() {
    use tessel_cuda::{check_buffers, ExternalBuffer, ExternalError};
    use tessel_driver::device::{external_requirements, BUFFER_ALIGN};
    let src = Source::load(&file("external.tsl", ADD), false).expect("loads");
    let step = src
        .compile_step("add", &config(5), &Weights::none())
        .expect("compiles");
    let need = external_requirements(&step.compiled.program);
    assert_eq!(need.len(), step.compiled.program.buffers.len());
    assert!(
        need.iter()
            .all(|r| r.bytes == 20 && r.align == BUFFER_ALIGN),
        "{need:?}"
    );
    // SAFETY: never launched on; only the host checks read them.
    let fits: Vec<ExternalBuffer> = (0..need.len() as u64)
        .map(|i| unsafe { ExternalBuffer::from_raw(0x10_0000 + i * 256, 20) }.expect("valid"))
        .collect();
    assert_eq!(check_buffers(&need, &fits), Ok(()));
    assert!(matches!(
        check_buffers(&need, &fits[1..]),
        Err(ExternalError::Count { .. })
    ));
    // SAFETY: as above.
    let odd = unsafe { ExternalBuffer::from_raw(0x10_0004, 20) }.expect("valid");
    let mut misaligned = fits.clone();
    misaligned[0] = odd;
    assert!(matches!(
        check_buffers(&need, &misaligned),
        Err(ExternalError::Misaligned { .. })
    ));
}

#[test]
fn external_tensors_are_bound_by_name_dtype_and_shape() {
    use tessel_cuda::ExternalBuffer;
    use tessel_driver::device::{bind_external, ExternalTensor};
    let src = Source::load(&file("bind_external.tsl", ADD), false).expect("loads");
    let step = src
        .compile_step("add", &config(5), &Weights::none())
        .expect("compiles");
    let p = &step.compiled.program;
    let at = |i: u64| {
        // SAFETY: never launched on; only the host checks read it.
        unsafe { ExternalBuffer::from_raw(0x20_0000 + i * 256, 20) }.expect("valid")
    };
    let tensor = |name: &str, dtype, i| ExternalTensor {
        name: name.into(),
        dtype,
        shape: vec![5],
        buffer: at(i),
    };
    let mut all: Vec<ExternalTensor> = p
        .inputs
        .iter()
        .chain(&p.outputs)
        .enumerate()
        .map(|(i, (n, _))| tensor(n, DType::F32, i as u64))
        .collect();
    all.extend(
        p.buffers
            .iter()
            .filter(|(_, d)| d.role == tessel_ir::kernel::BufferRole::Temp)
            .enumerate()
            .map(|(i, (_, d))| tensor(&d.name, DType::F32, 100 + i as u64)),
    );
    let bound = bind_external(p, &all).expect("binds");
    assert_eq!(bound.len(), p.buffers.len());
    // Two inputs may share memory; the output may not overlap an input.
    let mut shared = all.clone();
    shared[1].buffer = shared[0].buffer;
    bind_external(p, &shared).expect("inputs sharing memory bind");
    let mut aliased = all.clone();
    let out = aliased
        .iter()
        .position(|t| t.name == "out")
        .expect("an output");
    aliased[out].buffer = aliased[0].buffer;
    let Err(Error::Weights(e)) = bind_external(p, &aliased) else {
        panic!("expected an overlap error");
    };
    assert!(
        e.message()
            .contains("share memory, and the step writes `out`"),
        "{}",
        e.message()
    );
    // The wrong dtype, and nothing for `y`.
    let wrong = vec![tensor("x", DType::Bf16, 0)];
    let Err(Error::Weights(e)) = bind_external(p, &wrong) else {
        panic!("expected a binding error");
    };
    assert!(
        e.message().contains("`x` is f32[5], given bf16[5]"),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("`y` (f32[5]) is not given"),
        "{}",
        e.message()
    );
}
