//! The warpgroup attention tile (`TileConfig::Attention` with `wgmma`) on the kernel-IR
//! executor: every program below is compiled twice in `fast` for an H100 — once under
//! `Options::wgmma_attention`, where its attention takes the wgmma tile (a TMA producer
//! warpgroup feeding two consumer warpgroups of 64 query rows through mbarriers, S = Q·Kᵀ
//! from shared memory, P·V with P in registers and V MN-major),
//! and once without, where it takes the `mma.sync` tile — and the two must give the same
//! bits: the tiles sum in one order (`schedule::attention::order`), and the executor models
//! wgmma and mma.sync as the same fma chain over k, so any difference is a wrong element
//! read or written (a descriptor, a panel, the MN-major V, P's register fragment, a row's
//! lanes, a key tail). The executor runs each warp in its own context (the producer's
//! EMPTY waits, the consumers' FULL waits, the named barriers) and checks the async-proxy
//! fences and waits as it runs: a read of a stage before its TMA has landed, a refill of
//! a stage a wgmma still reads, a deadlock, are errors. Shapes have tails: query rows and keys not multiples of 128. One layer also goes
//! through `tessel check`, which judges the executor by the reference.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessel_ir::graph::TileConfig;
use tessel_ir::kernel::{Program, Stmt, WgmmaA, WgmmaMajor};
use tessel_ir::DType;
use tessel_passes::target::Target;
use tessel_passes::{check, compile, Compiled, Options, Profile};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Step `step` of `file` at `dims`, compiled in `fast` for an H100, with or without the
/// warpgroup attention tile.
fn compiled(file: &str, step: &str, dims: &[(&str, u64)], wgmma_attention: bool) -> Compiled {
    compiled_keys(file, step, dims, wgmma_attention, 0)
}

/// [`compiled`] with the warpgroup tile's keys per block asked for (0: its default, 64).
fn compiled_keys(
    file: &str,
    step: &str,
    dims: &[(&str, u64)],
    wgmma_attention: bool,
    keys: u32,
) -> Compiled {
    let module = tessel_syntax::load::load(&root().join(file))
        .unwrap_or_else(|_| panic!("{file}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let g = check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message));
    let opts = Options {
        verify: true,
        profile: Profile::Fast,
        target: Target::h100(),
        wgmma_attention,
        wgmma_attention_keys: keys,
        ..Default::default()
    };
    compile(&g, &opts).unwrap_or_else(|e| panic!("{step}: {e}"))
}

/// The attention tiles of a compiled step, with their reasons.
fn attention_tiles(c: &Compiled) -> Vec<(TileConfig, String)> {
    c.fusion
        .groups
        .keys()
        .filter_map(|g| c.schedules[g].as_ref())
        .filter(|s| matches!(s.tile, TileConfig::Attention { .. }))
        .map(|s| (s.tile.clone(), s.why.clone()))
        .collect()
}

/// Per kernel with a wgmma: each wgmma's (n, A in registers, B MN-major).
fn wgmmas(p: &Program) -> Vec<Vec<(u32, bool, bool)>> {
    fn walk(body: &[Stmt], out: &mut Vec<(u32, bool, bool)>) {
        for s in body {
            match s {
                Stmt::Wgmma {
                    shape, a, b_major, ..
                } => out.push((
                    shape.n,
                    matches!(a, WgmmaA::Regs(_)),
                    *b_major == WgmmaMajor::Mn,
                )),
                Stmt::For { body, .. } => walk(body, out),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    walk(then_body, out);
                    walk(else_body, out);
                }
                _ => {}
            }
        }
    }
    p.kernels
        .values()
        .map(|k| {
            let mut v = Vec::new();
            walk(&k.body, &mut v);
            v
        })
        .filter(|v| !v.is_empty())
        .collect()
}

/// `step` lowered with or without the warpgroup tile, every attention's keys per block set
/// to `block_n` (the order of sums depends on it: the running maximum and sum are rescaled
/// per block) and the warpgroup tile's stages to `stages` (2: S, softmax and P·V in turn;
/// 3: P·V a block behind S), through `lower` and the kernel passes.
fn lowered(
    file: &str,
    step: &str,
    dims: &[(&str, u64)],
    wgmma_attention: bool,
    (block_n, stages): (u32, u32),
) -> Program {
    use tessel_passes::pipeline::{pass, run_passes, Ir, Run};
    let module = tessel_syntax::load::load(&root().join(file))
        .unwrap_or_else(|_| panic!("{file}: does not load"))
        .module;
    let dims: BTreeMap<String, u64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let g = check::run(&module, step, &dims).unwrap_or_else(|d| panic!("{step}: {}", d[0].message));
    let opts = Options {
        verify: true,
        profile: Profile::Fast,
        target: Target::h100(),
        wgmma_attention,
        ..Default::default()
    };
    let Ir::Scheduled(g, f, mut s) =
        run_passes(&g, &opts, pass("schedule"), &mut |_, _| {}).expect("schedules")
    else {
        panic!("stopped after schedule")
    };
    for (_, sch) in s.iter_mut() {
        if let Some(TileConfig::Attention {
            block_n: b,
            stages: st,
            wgmma,
            ..
        }) = sch.as_mut().map(|x| &mut x.tile)
        {
            *b = block_n;
            if *wgmma {
                *st = stages;
            }
        }
    }
    tessel_ir::verify::verify_graph(&g, Some(&f), Some(&s)).expect("verifies");
    let mut p = None;
    for info in tessel_passes::PASSES {
        match (&info.run, &mut p) {
            (Run::Lower(run), None) => p = Some(run(&g, &f, &s).expect("lowers").program),
            (Run::Kernel { run, .. }, Some(p)) => {
                for (_, k) in p.kernels.iter_mut() {
                    run(k).expect("kernel pass");
                }
            }
            _ => {}
        }
    }
    p.expect("a lower pass")
}

/// Compiles `step` with and without the warpgroup tile, checks that the attention takes it
/// (S: `d / 16` wgmma of n `block_n` from shared memory; P·V: `block_n / 16` of n `e` with
/// A in registers and B MN-major, in the loop and, pipelined, once more after it) and not
/// without, and compares every output bit for bit — at the tile's own keys per block (64,
/// the mma.sync tile's) and at 128, pipelined (3 stages, the tile's) and not (2).
fn same_bits(file: &str, step: &str, dims: &[(&str, u64)], (d, e): (u32, u32)) {
    let what = format!("{file} {step} {dims:?}");
    let with = compiled(file, step, dims, true);
    let tiles = attention_tiles(&with);
    assert_eq!(tiles.len(), 1, "{what}");
    assert!(
        matches!(
            tiles[0].0,
            TileConfig::Attention {
                wgmma: true,
                warps: 8,
                block_n: 64,
                stages: 3,
                ..
            }
        ),
        "{what}: {tiles:?}"
    );
    let without = compiled(file, step, dims, false);
    assert!(attention_tiles(&without)
        .iter()
        .all(|(t, _)| matches!(t, TileConfig::Attention { wgmma: false, .. })));
    assert!(wgmmas(&without.program).is_empty(), "{what}");
    common::assert_same_outputs(&with.program, &without.program, &what);
    for block_n in [64, 128] {
        let without = lowered(file, step, dims, false, (block_n, 2));
        for stages in [2, 3] {
            let with = lowered(file, step, dims, true, (block_n, stages));
            let mut want = vec![(block_n, false, false); (d / 16) as usize];
            let pv = (block_n / 16) as usize * if stages == 3 { 2 } else { 1 };
            want.extend(vec![(e, true, true); pv]);
            assert_eq!(wgmmas(&with), vec![want], "{what}");
            let what = format!("{what} block_n {block_n} stages {stages}");
            common::assert_same_outputs(&with, &without, &what);
        }
    }
}

const ATTENTION: &str = "tests/programs/attention.tsl";

#[test]
fn causal_gqa_prefill_with_tails_gives_the_mma_sync_tiles_bits() {
    // 4 query heads over 2 K/V heads: 2 packed, 300 rows (2 CTAs of 128 and a tail), 150
    // keys (a block of 128 and a tail of 22), causal blocks skipped.
    same_bits(
        ATTENTION,
        "prefill",
        &[("T", 150), ("H", 4), ("KV", 2), ("D", 128)],
        (128, 128),
    );
}

#[test]
fn head_dim_64_gives_the_mma_sync_tiles_bits() {
    // One 128-byte panel of Q, K and V per row; 8 heads over 1.
    same_bits(
        ATTENTION,
        "prefill",
        &[("T", 70), ("H", 8), ("KV", 1), ("D", 64)],
        (64, 64),
    );
}

#[test]
fn unmasked_f16_attention_gives_the_mma_sync_tiles_bits() {
    // No mask and no key bound; f16; 70 queries over 200 keys (two blocks, the second
    // with a tail of 72 zero-filled keys).
    same_bits(
        ATTENTION,
        "full_f16",
        &[("H", 2), ("T", 70), ("S", 200), ("D", 128)],
        (128, 128),
    );
}

#[test]
fn the_q_prologue_with_qk_norm_and_rope_gives_the_mma_sync_tiles_bits() {
    // q's RMSNorm and RoPE computed per CTA into the Q panels, never stored.
    let dims = [("T", 100), ("H", 4), ("KV", 2), ("D", 128)];
    same_bits(ATTENTION, "prologue", &dims, (128, 128));
    let c = compiled(ATTENTION, "prologue", &dims, true);
    assert!(attention_tiles(&c)[0].1.contains("q (its RoPE and norm)"));
}

#[test]
fn a_qwen3_layer_gives_the_mma_sync_tiles_bits() {
    same_bits(
        "tests/programs/layer_small.tsl",
        "qwen3",
        &[("T", 130)],
        (128, 128),
    );
}

#[test]
fn shapes_the_tile_cannot_serve_keep_the_mma_sync_tile_and_say_why() {
    // A v head dim of 32 (no whole 128-byte panel of P·V's n).
    let c = compiled(
        ATTENTION,
        "masked_arms",
        &[("H", 2), ("T", 40), ("D", 64)],
        true,
    );
    let tiles = attention_tiles(&c);
    assert!(matches!(
        tiles[0].0,
        TileConfig::Attention { wgmma: false, .. }
    ));
    assert!(
        tiles[0]
            .1
            .contains("not the wgmma tile: head dims 64 and 32 are not multiples of 64"),
        "{}",
        tiles[0].1
    );
    // Decode splits its keys: the mma.sync tile's flash-decoding.
    let c = compiled(
        ATTENTION,
        "decode",
        &[
            ("B", 1),
            ("N", 1),
            ("H", 4),
            ("KV", 1),
            ("S", 1024),
            ("D", 128),
        ],
        true,
    );
    let tiles = attention_tiles(&c);
    assert!(
        tiles[0]
            .1
            .contains("not the wgmma tile: the keys are split"),
        "{}",
        tiles[0].1
    );
}

#[test]
fn a_qwen3_layer_on_the_wgmma_tile_passes_check() {
    let d = common::scratch("wgmma-attention-check");
    let file = root().join("tests/programs/layer_small.tsl");
    let file = file.display().to_string();
    let args = [
        "check",
        &file,
        "--step",
        "qwen3",
        "--cpu",
        "--profile",
        "fast",
        "--target",
        "h100",
        "--dim",
        "T=70",
        "--fill",
        "pos=iota:131000",
        "--wgmma-attention",
    ];
    let o = common::tessel(&d, &args);
    let t = common::text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches(": PASS — ").count(), 2, "{t}");
}

/// Every statement of `body`, depth first.
fn flat(body: &[Stmt], out: &mut Vec<Stmt>) {
    for s in body {
        out.push(s.clone());
        match s {
            Stmt::For { body, .. } => flat(body, out),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                flat(then_body, out);
                flat(else_body, out);
            }
            _ => {}
        }
    }
}

#[test]
fn the_tile_is_a_tma_producer_warpgroup_and_two_consumers() {
    // FlashAttention-3's structure (Shah et al. 2024, §3.1): 384 threads, the producer's
    // registers given to the consumers, K and V by TMA through 3-d maps (head dim, key,
    // K/V head) on FULL/EMPTY mbarriers, the consumers' own named barrier, the producer's
    // for the block crossing the causal diagonal.
    let c = compiled(
        ATTENTION,
        "prefill",
        &[("T", 150), ("H", 4), ("KV", 2), ("D", 128)],
        true,
    );
    let k = c
        .program
        .kernels
        .values()
        .find(|k| k.schedule.contains("wgmma: 1"))
        .expect("a wgmma attention kernel");
    assert_eq!(k.block, [384, 1, 1]);
    assert_eq!(k.min_ctas_per_sm, 1);
    let mut all = Vec::new();
    flat(&k.body, &mut all);
    let count = |f: &dyn Fn(&Stmt) -> bool| all.iter().filter(|s| f(s)).count();
    assert_eq!(
        count(&|s| matches!(
            s,
            Stmt::SetMaxNReg {
                inc: false,
                regs: 56
            }
        )),
        1
    );
    assert_eq!(
        count(&|s| matches!(
            s,
            Stmt::SetMaxNReg {
                inc: true,
                regs: 224
            }
        )),
        1
    );
    // d / 64 boxes of K and e / 64 of V per block, each at (column, key, K/V head).
    assert_eq!(
        count(&|s| matches!(s, Stmt::TmaLoad { coords, .. } if coords.len() == 3)),
        4
    );
    assert_eq!(count(&|s| matches!(s, Stmt::MbarArriveExpectTx { .. })), 1);
    assert!(count(&|s| matches!(s, Stmt::MbarWait { .. })) >= 2);
    assert_eq!(
        count(&|s| matches!(
            s,
            Stmt::BarSync {
                id: 1,
                threads: 256
            }
        )),
        1
    );
    assert_eq!(
        count(&|s| matches!(
            s,
            Stmt::BarSync {
                id: 2,
                threads: 128
            }
        )),
        1
    );
    // Ping-pong (§3.1): each warpgroup waits for its turn at its barrier (3 or 4) and
    // hands it over at the other's once its block's GEMMs are issued — in both arms of the
    // first block's test, and the second warpgroup's first arrival before the loop.
    let bar = |sync: bool, id: u32| -> usize {
        count(&|s| match s {
            Stmt::BarSync {
                id: i,
                threads: 256,
            } => sync && *i == id,
            Stmt::BarArrive {
                id: i,
                threads: 256,
            } => !sync && *i == id,
            _ => false,
        })
    };
    assert_eq!((bar(true, 3), bar(true, 4)), (1, 1));
    assert_eq!((bar(false, 3), bar(false, 4)), (3, 2));
    // Q by the 256 consumer threads (2048 16-byte chunks: 8 each), K and V of the
    // crossing block by the producer's 128 threads (1024 chunks each: 8 + 8).
    assert_eq!(count(&|s| matches!(s, Stmt::CpAsync { .. })), 8 + 16);
    let tiles = attention_tiles(&c);
    assert!(tiles[0].1.contains("producer warpgroup"), "{}", tiles[0].1);
}

#[test]
fn keys_past_the_ctas_bound_never_reach_p_v_even_as_nan() {
    // 70 new queries over a cache of 256 keys, 4 query heads on 1 K/V head: 280 rows, not
    // split, on the wgmma tile. len = 50: no row sees key 120 or later, and those rows of
    // the cache hold NaN (unwritten). The block crossing a CTA's last visible key is
    // copied by the producer with cp.async, zero past it, as the mma.sync tile's copies
    // are; loaded by TMA whole, its NaN rows would reach P·V as 0 · NaN.
    let dims = [
        ("B", 1),
        ("N", 70),
        ("H", 4),
        ("KV", 1),
        ("S", 256),
        ("D", 64),
    ];
    let with = compiled(ATTENTION, "decode", &dims, true);
    assert!(
        matches!(
            attention_tiles(&with)[0].0,
            TileConfig::Attention { wgmma: true, .. }
        ),
        "{:?}",
        attention_tiles(&with)
    );
    let without = compiled(ATTENTION, "decode", &dims, false);
    let mut ins = common::seeded_inputs(&with.program);
    for ((name, _), t) in with.program.inputs.iter().zip(ins.iter_mut()) {
        match name.as_str() {
            "r" => *t = tessel_ref::Tensor::from_i32(vec![1], &[50]),
            "kc" | "vc" => {
                assert_eq!(t.ty.dtype, DType::Bf16);
                for key in 120..256usize {
                    for c in 0..64usize {
                        let at = 2 * (key * 64 + c);
                        t.data[at..at + 2].copy_from_slice(&0x7fc0u16.to_le_bytes());
                    }
                }
            }
            _ => {}
        }
    }
    let x = tessel_ref::run_program(&with.program, &ins).expect("runs with");
    let y = tessel_ref::run_program(&without.program, &ins).expect("runs without");
    assert!(x[0].to_f32_vec().iter().all(|v| v.is_finite()));
    assert!(x[0].data == y[0].data, "the tiles differ");
}

#[test]
fn one_query_and_odd_lengths_give_the_mma_sync_tiles_bits() {
    // T = 1: one key, 2 packed rows of a 128-row CTA; odd T (a tail of one key past a
    // block, 65 rows) at head dim 64; f16 without a mask over 1 and 129 keys.
    same_bits(
        ATTENTION,
        "prefill",
        &[("T", 1), ("H", 4), ("KV", 2), ("D", 64)],
        (64, 64),
    );
    same_bits(
        ATTENTION,
        "prefill",
        &[("T", 65), ("H", 2), ("KV", 2), ("D", 64)],
        (64, 64),
    );
    same_bits(
        ATTENTION,
        "full_f16",
        &[("H", 1), ("T", 1), ("S", 1), ("D", 64)],
        (64, 64),
    );
    same_bits(
        ATTENTION,
        "full_f16",
        &[("H", 3), ("T", 33), ("S", 129), ("D", 64)],
        (64, 64),
    );
}

#[test]
fn the_q_prologue_at_head_dim_64_and_odd_t_gives_the_mma_sync_tiles_bits() {
    same_bits(
        ATTENTION,
        "prologue",
        &[("T", 77), ("H", 4), ("KV", 1), ("D", 64)],
        (64, 64),
    );
}

#[test]
fn keys_in_blocks_of_128_when_asked_give_the_mma_sync_tiles_bits_at_128() {
    // FlashAttention-3's block at d = 128 (`Options::wgmma_attention_keys`): block_n 128,
    // 3 stages, the reason saying it is another order than the mma.sync tile's 64; bits
    // equal to the mma.sync tile's at 128 keys a block (another order: not its default).
    for (file, step, dims) in [
        (
            ATTENTION,
            "prefill",
            vec![("T", 300), ("H", 4), ("KV", 2), ("D", 128)],
        ),
        (
            ATTENTION,
            "prologue",
            vec![("T", 77), ("H", 4), ("KV", 1), ("D", 64)],
        ),
        (
            ATTENTION,
            "decode",
            vec![
                ("B", 1),
                ("N", 70),
                ("H", 4),
                ("KV", 1),
                ("S", 256),
                ("D", 64),
            ],
        ),
        ("tests/programs/layer_small.tsl", "qwen3", vec![("T", 130)]),
    ] {
        let what = format!("{file} {step} {dims:?}");
        let with = compiled_keys(file, step, &dims, true, 128);
        let tiles = attention_tiles(&with);
        assert!(
            matches!(
                tiles[0].0,
                TileConfig::Attention {
                    wgmma: true,
                    block_n: 128,
                    stages: 3,
                    ..
                }
            ),
            "{what}: {tiles:?}"
        );
        assert!(
            tiles[0].1.contains("keys in blocks of 128 (asked for"),
            "{}",
            tiles[0].1
        );
        let k = with
            .program
            .kernels
            .values()
            .find(|k| k.schedule.contains("wgmma: 1"))
            .expect("a wgmma attention kernel");
        assert!(
            k.schedule.contains("keys in blocks of 128 from key 0"),
            "{}",
            k.schedule
        );
        let without = lowered(file, step, &dims, false, (128, 2));
        common::assert_same_outputs(&with.program, &without, &what);
        // And not the mma.sync tile's own (64 keys a block) bits: the test can tell.
        if step == "prefill" {
            let own = compiled(file, step, &dims, false);
            let ins = common::seeded_inputs(&with.program);
            let x = tessel_ref::run_program(&with.program, &ins).expect("runs");
            let y = tessel_ref::run_program(&own.program, &ins).expect("runs");
            assert!(
                x[0].data != y[0].data,
                "{what}: 128 keys a block gave the bits of 64"
            );
        }
    }
}

#[test]
fn a_single_key_broadcast_over_the_batch_is_loaded_by_tma() {
    // Fuzz seed 9083 (--attention --large --wgmma-attention), shrunk: one key (K and V
    // [3, 1, 1, 128], broadcast over a batch of 2 × 3 × 5). The key dim has one index and
    // a stride of 0, which a tensor map cannot take: the lowering failed ("strides ... not
    // whole 16-byte chunks"); the map now takes whole rows there (a stride never used).
    let d = common::scratch("wgmma-attention-one-key");
    let src = "step fuzz(t12: f16[D3, 1, D2, D5], t11: f16[D3, 1, D2, D5], t10: f16[2, 3, 5, 7, 128]) -> f16[D0, D3, 5, D1, D5] {
    let t18 = f32(t10 @ transpose(t11, -1, -2)) * 0.0625;
    let t21 = softmax(t18, axis: 4);
    let t22 = f16(t21);
    t22 @ t12
}
";
    common::write(&d, "one_key.tsl", src);
    let file = d.join("one_key.tsl").display().to_string();
    let dims = [("D0", 2), ("D1", 7), ("D2", 1), ("D3", 3), ("D5", 128)];
    let with = compiled(&file, "fuzz", &dims, true);
    assert!(
        matches!(
            attention_tiles(&with)[0].0,
            TileConfig::Attention { wgmma: true, .. }
        ),
        "{:?}",
        attention_tiles(&with)
    );
    let without = compiled(&file, "fuzz", &dims, false);
    common::assert_same_outputs(&with.program, &without.program, "one key");
}

/// Whether every wgmma group committed in `body` has been waited for (`wait_group 0`) at
/// each `mbarrier.arrive` after the first wgmma, starting with `done` (none in flight):
/// both arms of an `if` must have waited, a loop's body is walked twice (its second pass
/// starting from the first's end). Counts the arrivals (first pass) in `n`; returns
/// whether nothing is in flight at the end.
fn released_after_waits(
    body: &[Stmt],
    mut done: bool,
    (seen, n, count): (&mut bool, &mut usize, bool),
) -> bool {
    for s in body {
        match s {
            Stmt::Wgmma { .. } => *seen = true,
            Stmt::WgmmaCommit => done = false,
            Stmt::WgmmaWait(0) => done = true,
            Stmt::MbarArrive { .. } if *seen => {
                assert!(done, "a stage released with a wgmma group in flight");
                if count {
                    *n += 1;
                }
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                let t = released_after_waits(then_body, done, (&mut *seen, &mut *n, count));
                let e = released_after_waits(else_body, done, (&mut *seen, &mut *n, count));
                done = t && e;
            }
            Stmt::For { body, .. } => {
                let end = released_after_waits(body, done, (&mut *seen, &mut *n, count));
                let again = released_after_waits(body, done && end, (&mut *seen, &mut *n, false));
                done = done && end && again;
            }
            _ => {}
        }
    }
    done
}

#[test]
fn a_stage_is_released_only_after_the_wgmmas_reading_it_complete() {
    // In program order, on every path, each consumer's EMPTY arrival comes after a
    // `wgmma.wait_group 0` with no wgmma committed in between: the S and P·V reading the
    // stage are complete, so the producer may refill it. (The executor reports a refill
    // under a wgmma in flight only when its schedule runs the producer in that window,
    // which its lowest-position-first order seldom does here; this checks the order.)
    for (stages, dims) in [
        (3, [("T", 150), ("H", 4), ("KV", 2), ("D", 128)]),
        (2, [("T", 150), ("H", 4), ("KV", 2), ("D", 64)]),
    ] {
        let p = lowered(ATTENTION, "prefill", &dims, true, (64, stages));
        let k = p
            .kernels
            .values()
            .find(|k| k.schedule.contains("wgmma: 1"))
            .expect("a wgmma attention kernel");
        let (mut seen, mut n) = (false, 0);
        released_after_waits(&k.body, true, (&mut seen, &mut n, true));
        assert_eq!(n, if stages == 3 { 2 } else { 1 }, "stages {stages}");
    }
}
