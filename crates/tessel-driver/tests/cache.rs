//! The compile cache: an entry reads back to the program and PTX that were stored (the
//! program's text round trip judged by the PTX it prints), the key follows every fact a
//! compiled step depends on and nothing else, and a damaged entry is a miss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessel_driver::{cache, device, Config, Source, Weights};
use tessel_ir::text::write_program;
use tessel_passes::{Options, Profile, Target};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn config(dims: &[(&str, u64)], options: Options) -> Config {
    Config {
        dims: dims.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        options,
        tp: None,
    }
}

fn fast_h200() -> Options {
    Options {
        target: Target::h200(),
        profile: Profile::Fast,
        verify: true,
        ..Options::default()
    }
}

/// Stores `step` of `file` compiled with `config`, loads it back and compares: the program's
/// text, and the PTX printed from the program read back against the PTX stored.
fn round_trip(file: &str, step: &str, config: &Config) {
    let src = Source::load(&repo(file), false).expect("loads");
    let compiled = src
        .compile_step(step, config, &Weights::none())
        .expect("compiles")
        .compiled;
    let ptx = device::ptx_of(&compiled.program, &compiled.ptx).expect("prints");
    let dir = scratch(&format!("rt-{step}"));
    let facts = cache::facts(&src, step, config, "test");
    let key = cache::key(&facts);
    let entry = cache::store(&dir, &key, &facts, &compiled.program, &ptx).expect("stores");
    assert_eq!(entry, dir.join(&key));
    let back = cache::load(&dir, &key).expect("reads back");
    assert_eq!(
        write_program(&back.program),
        write_program(&compiled.program)
    );
    assert_eq!(back.ptx, ptx);
    let reprinted = device::ptx_of(&back.program, &compiled.ptx).expect("prints");
    assert!(
        reprinted == ptx,
        "{file} {step}: the program read back prints other PTX"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_decoder_layer_reads_back_to_the_same_ptx() {
    // The small Qwen3 layer in fast on the H200: wgmma GEMMs, the fused attention, RoPE
    // tables, a row epilogue.
    round_trip(
        "tests/programs/layer_small.tsl",
        "qwen3",
        &config(&[("T", 130)], fast_h200()),
    );
    round_trip(
        "tests/programs/layer_small.tsl",
        "qwen3_decode",
        &config(&[("B", 2), ("T", 1), ("S", 96)], fast_h200()),
    );
}

#[test]
fn tma_tiles_read_back_to_the_same_ptx() {
    // Tensor maps as launch arguments, mbarrier rings, setmaxnreg: the warp-specialised
    // attention and GEMM tiles.
    let options = Options {
        wgmma_attention: true,
        wgmma_tma: true,
        wgmma_pingpong: false,
        merge_launches: true,
        dependent_launch: true,
        ..fast_h200()
    };
    round_trip(
        "tests/programs/attention.tsl",
        "prefill",
        &config(
            &[("T", 150), ("H", 4), ("KV", 2), ("D", 128)],
            options.clone(),
        ),
    );
    round_trip(
        "tests/programs/matmul.tsl",
        "linear",
        &config(&[("M", 300), ("K", 256), ("N", 384)], options),
    );
}

#[test]
fn the_key_follows_every_fact_and_nothing_else() {
    let dir = scratch("key");
    let lib = dir.join("lib.tsl");
    let main = dir.join("main.tsl");
    std::fs::write(&lib, "fn twice(x: f32[T]) -> f32[T] { x * 2.0 }\n").unwrap();
    std::fs::write(
        &main,
        "import \"lib.tsl\";\nstep f(x: f32[T]) -> f32[T] { twice(x) + 1.0 }\nstep g(x: f32[T]) -> f32[T] { x }\n",
    )
    .unwrap();
    let base = config(&[("T", 64)], fast_h200());
    let key_of = |step: &str, config: &Config, compiler: &str| {
        let src = Source::load(&main, false).expect("loads");
        cache::key(&cache::facts(&src, step, config, compiler))
    };
    let k = key_of("f", &base, "build-1");
    assert_eq!(k.len(), 64);
    assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        key_of("f", &base, "build-1"),
        k,
        "the same facts, the same key"
    );
    let others = [
        ("another step", key_of("g", &base, "build-1")),
        ("another build", key_of("f", &base, "build-2")),
        (
            "another dim",
            key_of("f", &config(&[("T", 65)], fast_h200()), "build-1"),
        ),
        (
            "another profile",
            key_of(
                "f",
                &config(
                    &[("T", 64)],
                    Options {
                        profile: Profile::Invariant,
                        ..fast_h200()
                    },
                ),
                "build-1",
            ),
        ),
        (
            "another target",
            key_of(
                "f",
                &config(
                    &[("T", 64)],
                    Options {
                        target: Target::h100(),
                        ..fast_h200()
                    },
                ),
                "build-1",
            ),
        ),
        (
            "another schedule choice",
            key_of(
                "f",
                &config(
                    &[("T", 64)],
                    Options {
                        wgmma_attention: false,
                        ..fast_h200()
                    },
                ),
                "build-1",
            ),
        ),
        (
            "tensor parallelism",
            key_of(
                "f",
                &Config {
                    tp: Some(2),
                    ..base.clone()
                },
                "build-1",
            ),
        ),
    ];
    for (what, other) in &others {
        assert_ne!(*other, k, "{what} must change the key");
    }
    // An imported file's text is a fact too.
    std::fs::write(&lib, "fn twice(x: f32[T]) -> f32[T] { x + x }\n").unwrap();
    assert_ne!(key_of("f", &base, "build-1"), k, "an import's text");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_entry_is_a_miss_and_is_replaced() {
    let src = Source::load(&repo("tests/programs/small.tsl"), false).expect("loads");
    let step = "promote".to_string();
    let config = Config {
        dims: BTreeMap::from([("T".to_string(), 100)]),
        ..Config::default()
    };
    let compiled = src
        .compile_step(&step, &config, &Weights::none())
        .expect("compiles")
        .compiled;
    let ptx = device::ptx_of(&compiled.program, &compiled.ptx).expect("prints");
    let dir = scratch("damaged");
    let facts = cache::facts(&src, &step, &config, "test");
    let key = cache::key(&facts);
    assert!(cache::load(&dir, &key).is_none(), "an empty cache");
    cache::store(&dir, &key, &facts, &compiled.program, &ptx).expect("stores");
    assert!(cache::load(&dir, &key).is_some());
    let program = dir.join(&key).join(cache::PROGRAM_FILE);
    let text = std::fs::read_to_string(&program).unwrap();
    // A truncated program, a malformed one, one edited into another valid program, a PTX
    // edited, a missing PTX file: each a miss.
    std::fs::write(&program, &text[..text.len() / 2]).unwrap();
    assert!(cache::load(&dir, &key).is_none(), "a truncated program");
    std::fs::write(&program, text.replacen("launch", "launch_", 1)).unwrap();
    assert!(cache::load(&dir, &key).is_none(), "a malformed program");
    let edited = text.replacen("buf0", "buf0 ", 1);
    assert!(
        tessel_ir::text::read_program(&edited).is_ok(),
        "still a program"
    );
    std::fs::write(&program, &edited).unwrap();
    assert!(cache::load(&dir, &key).is_none(), "an edited program");
    std::fs::write(&program, &text).unwrap();
    let ptx_file = dir.join(&key).join(cache::PTX_FILE);
    std::fs::write(&ptx_file, ptx.replacen(".entry", ".entry ", 1)).unwrap();
    assert!(cache::load(&dir, &key).is_none(), "an edited PTX");
    std::fs::write(&ptx_file, &ptx).unwrap();
    assert!(cache::load(&dir, &key).is_some(), "restored");
    std::fs::write(&program, &text).unwrap();
    std::fs::remove_file(dir.join(&key).join(cache::PTX_FILE)).unwrap();
    assert!(cache::load(&dir, &key).is_none(), "no PTX");
    // Storing again replaces the damaged entry.
    cache::store(&dir, &key, &facts, &compiled.program, &ptx).expect("stores");
    let back = cache::load(&dir, &key).expect("replaced");
    assert_eq!(back.ptx, ptx);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary directories left behind");
    let _ = std::fs::remove_dir_all(&dir);
}
