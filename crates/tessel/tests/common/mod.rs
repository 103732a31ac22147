//! What the tests of the `tessel` command share: a scratch directory per test, running the
//! built binary in it, and its output as text.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh scratch directory for one test, removed when the test passes (kept for a look
/// when it panics).
pub struct Scratch(pub PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("tessel-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    Scratch(d)
}

/// Runs `tessel ARGS` in `dir`.
pub fn tessel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessel"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tessel")
}

/// stdout and stderr together.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes `src` to `dir/name`, making the directories `name` goes into.
pub fn write(dir: &Path, name: &str, src: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("make the source's directory");
    }
    std::fs::write(path, src).expect("write source");
}

/// Seeded inputs of `p`: input `i` from seed `100 + i`, in its parameter order.
pub fn seeded_inputs(p: &tessel_ir::kernel::Program) -> Vec<tessel_ref::Tensor> {
    p.inputs
        .iter()
        .enumerate()
        .map(|(i, (_, buf))| tessel_ref::Tensor::random(p.buffers[*buf].ty.clone(), 100 + i as u64))
        .collect()
}

/// `lower` and every kernel and program pass after it, as the registry lists them (the
/// program passes with `opts`), on a graph whose schedules a test has edited; the program
/// verified.
pub fn lower_scheduled(
    g: &tessel_ir::graph::Graph,
    f: &tessel_ir::graph::Fusion,
    s: &tessel_ir::graph::Schedules,
    opts: &tessel_passes::Options,
) -> tessel_ir::kernel::Program {
    use tessel_passes::pipeline::Run;
    let mut p = None;
    for info in tessel_passes::PASSES {
        match (&info.run, &mut p) {
            (Run::Lower(run), None) => p = Some(run(g, f, s).expect("lowers").program),
            (Run::Kernel { run, .. }, Some(p)) => {
                for (_, k) in p.kernels.iter_mut() {
                    run(k).expect("kernel pass");
                }
            }
            (Run::Program(run), Some(p)) => {
                run(p, opts);
            }
            _ => {}
        }
    }
    let p = p.expect("a lower pass");
    if let Err(e) = tessel_ir::verify::verify_program(&p, true) {
        panic!("{}: {e:?}", g.name);
    }
    p
}

/// Runs two compilations of one step on the executor from the same seeded inputs
/// ([`seeded_inputs`] of `a`) and requires every output to be the same bytes; `what` names
/// the case in the failure.
pub fn assert_same_outputs(
    a: &tessel_ir::kernel::Program,
    b: &tessel_ir::kernel::Program,
    what: &str,
) {
    use tessel_ref::run_program;
    let ins = seeded_inputs(a);
    let x = run_program(a, &ins).unwrap_or_else(|e| panic!("{what}, first: {e}"));
    let y = run_program(b, &ins).unwrap_or_else(|e| panic!("{what}, second: {e}"));
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(p.data == q.data, "{what}: output {i} differs");
    }
}
