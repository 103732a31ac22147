//! Reproducer bundles (`tessel_driver::repro`), written for a step compiled from the test
//! programs without a GPU: every file is there, the sources byte for byte with their imports
//! laid out so that they resolve, every pass's IR, the PTX — which the bundle's own
//! `ptxas.sh` assembles with the pinned ptxas.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessel_driver::repro::{write_bundle, Failure};
use tessel_driver::{Config, Error, InputSpec, Source, Weights};
use tessel_passes::{Options, Target, PASSES};

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessel-repro-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config() -> Config {
    Config {
        dims: BTreeMap::from([("T".to_string(), 3)]),
        options: Options {
            target: Target::h100(),
            verify: true,
            wgmma_tma: false,
            ..Options::default()
        },
        tp: None,
    }
}

fn json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("bundle.json")).expect("bundle.json");
    serde_json::from_str(&text).expect("bundle.json is JSON")
}

#[test]
fn a_bundle_holds_the_sources_every_stage_and_ptx_that_assembles() {
    let root = programs().join("imports/mlp_block.tsl");
    let src = Source::load(&root, false).expect("loads");
    let config = config();
    let step = src
        .compile_step("mlp_block", &config, &Weights::none())
        .expect("compiles");
    let inputs = InputSpec {
        seed: 7,
        fills: vec![("unused".into(), 5)],
        ..InputSpec::default()
    };
    let failure = Failure {
        inputs: &inputs,
        what: "out: FAIL — 3 elements outside the bound".into(),
        command: Some("tessel check mlp_block.tsl --dim T=3".into()),
    };
    let parent = scratch("bundle");
    let dir = write_bundle(&src, &step, &config, &failure, &parent).expect("writes");
    assert_eq!(dir.parent(), Some(parent.as_path()));
    let name = dir.file_name().and_then(|n| n.to_str()).expect("a name");
    assert!(
        name.starts_with("mlp_block-") && name.len() == "mlp_block-".len() + 12,
        "{name}"
    );

    // The sources byte for byte, laid out as they import each other.
    for (rel, original) in [
        ("src/mlp_block.tsl", "imports/mlp_block.tsl"),
        ("src/lib/norms.tsl", "imports/lib/norms.tsl"),
        ("src/lib/activations.tsl", "imports/lib/activations.tsl"),
    ] {
        let copied = std::fs::read(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let original = std::fs::read(programs().join(original)).expect("the original");
        assert!(copied == original, "{rel} differs from its original");
    }
    // ... and they load and compile from there to the same PTX.
    let again = Source::load(&dir.join("src/mlp_block.tsl"), false).expect("the copy loads");
    let again = again
        .compile_step("mlp_block", &config, &Weights::none())
        .expect("the copy compiles");
    let ptx = std::fs::read_to_string(dir.join("mlp_block.ptx")).expect("the PTX");
    assert_eq!(
        ptx,
        tessel_driver::device::ptx_of(&again.compiled.program, &again.compiled.ptx)
            .expect("prints")
    );

    // Every pass's IR, named as `tessel build --emit` names it, and the parsed source.
    assert!(
        !std::fs::read_to_string(dir.join("stages/mlp_block.ast.tsl"))
            .expect("the ast stage")
            .is_empty()
    );
    for p in PASSES {
        let f = dir
            .join("stages")
            .join(format!("mlp_block.{}", tessel_driver::stage_suffix(p)));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!text.is_empty(), "{} is empty", f.display());
    }

    let j = json(&dir);
    assert_eq!(j["step"], "mlp_block");
    assert_eq!(j["root"], "src/mlp_block.tsl");
    assert_eq!(j["dims"]["T"], 3);
    assert_eq!(j["profile"], "exact");
    assert_eq!(j["target"]["preset"], "h100");
    assert_eq!(j["target"]["ptx_target"], "sm_90a");
    assert_eq!(j["schedule"]["wgmma_tma"], false);
    assert_eq!(j["tessel"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(j["failure"], failure.what);
    assert_eq!(j["command"], "tessel check mlp_block.tsl --dim T=3");
    assert_eq!(j["stages"].as_array().map(Vec::len), Some(PASSES.len() + 1));
    // Each input's seed is the one make_inputs uses for its position.
    let each = j["inputs"]["each"].as_array().expect("inputs");
    assert_eq!(each.len(), step.compiled.program.inputs.len());
    for (i, v) in each.iter().enumerate() {
        assert_eq!(v["from"], "random");
        assert_eq!(v["seed"], tessel_driver::random_seed(7, i));
    }
    let reproduce = j["reproduce"].as_str().expect("a command");
    assert_eq!(
        reproduce,
        "tessel check src/mlp_block.tsl --step mlp_block --dim T=3 --profile exact \
         --target h100 --no-wgmma-tma --seed 7 --fill unused=iota:5"
    );
    let command = std::fs::read_to_string(dir.join("command.txt")).expect("command.txt");
    assert!(command.contains(reproduce), "{command}");
    assert!(
        command.contains("ptxas -arch=sm_90a -v mlp_block.ptx -o mlp_block.cubin"),
        "{command}"
    );

    // The same failure lands in the same directory.
    let second = write_bundle(&src, &step, &config, &failure, &parent).expect("writes");
    assert_eq!(second, dir);

    // The bundle's own ptxas command assembles its PTX with the pinned ptxas.
    match tessel_ptx::ptxas::Ptxas::locate_unless_skipped().expect("ptxas") {
        Some(ptxas) => {
            let o = std::process::Command::new(dir.join("ptxas.sh"))
                .env("TESSEL_PTXAS", ptxas.path())
                .output()
                .expect("runs ptxas.sh");
            assert!(
                o.status.success(),
                "ptxas.sh: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let cubin = std::fs::metadata(dir.join("mlp_block.cubin")).expect("a cubin");
            assert!(cubin.len() > 0);
        }
        None => eprintln!("skipping the ptxas check: TESSEL_SKIP_PTXAS=1 and no ptxas"),
    }
    let _ = std::fs::remove_dir_all(&parent);
}

#[test]
fn a_program_without_a_file_and_an_unwritable_parent() {
    let src = Source::parse(
        "gen.tsl",
        "step s(x: f32[T]) -> f32[T] { x + 1.0 }\n",
        false,
    )
    .expect("parses");
    let config = config();
    let step = src
        .compile_step("s", &config, &Weights::none())
        .expect("compiles");
    let inputs = InputSpec::default();
    let failure = Failure {
        inputs: &inputs,
        what: "executor fault".into(),
        command: None,
    };
    let parent = scratch("parsed");
    let dir = write_bundle(&src, &step, &config, &failure, &parent).expect("writes");
    assert_eq!(
        std::fs::read_to_string(dir.join("src/gen.tsl")).expect("the source"),
        "step s(x: f32[T]) -> f32[T] { x + 1.0 }\n"
    );
    assert!(json(&dir)["command"].is_null());
    assert!(!std::fs::read_to_string(dir.join("command.txt"))
        .expect("command.txt")
        .contains("failed"));

    // A parent that is a file: a typed error naming the path, not a panic.
    let file = parent.join("a-file");
    std::fs::write(&file, "x").expect("write");
    match write_bundle(&src, &step, &config, &failure, &file) {
        Err(Error::Bundle { path, .. }) => assert!(path.starts_with(&file), "{path:?}"),
        Err(e) => panic!("{e}"),
        Ok(d) => panic!("wrote {}", d.display()),
    }
    let _ = std::fs::remove_dir_all(&parent);
}
