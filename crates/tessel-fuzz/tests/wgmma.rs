//! Random GEMM programs on the warpgroup tiles (issue 19): `x @ wᵀ` in bf16 or f16 at
//! random M, N and K past 64 / 64 / 32 (tails everywhere), under a random epilogue (none,
//! bias, silu, residual, scale, an f32 result, SwiGLU's product of two GEMMs), compiled in
//! `fast` for an H200 of 1 SM (the 128 × 256 tile; 128 × 128 for N ≤ 128) or of one SM
//! more than the GEMM has 128 × 256 tiles (the 128 × 128 tile) — and judged by the
//! dtype-following reference on the executor. Each program must take a wgmma tile (checked
//! through the kernels' schedules) and pass. The same programs, K rounded up to a multiple
//! of 8 (a TMA row's whole 16-byte chunks), also run on the persistent ping-pong tile
//! (`Options::wgmma_pingpong`) for an H200 of 1 to 3 SMs, so CTAs and consumer
//! warpgroups take several tiles each; and in `invariant` at M from 1 (wgmma for every M:
//! the 64-row warpgroup tile at M ≤ 64). The same programs with the weights stored
//! `[K, N]` (`x @ w`: an MN-major B, read through wgmma's transposed descriptors) run on
//! the `wgmma: 1` tile at any N and on the ping-pong tile at N a multiple of 8.

use tessel_fuzz::run::{run_case_traced, Device, Outcome, Trace};
use tessel_passes::{Profile, Target};
use tessel_ref::tensor::SplitMix64;

/// `run_case_traced` of step `fuzz` on an H200 of `sms` SMs, the ping-pong and TMA tiles
/// allowed or not.
fn run_on(
    src: &str,
    dims: &[(String, u64)],
    profile: Profile,
    seed: u64,
    (sms, pingpong, tma): (u32, bool, bool),
) -> (Outcome, Trace) {
    let target = Target {
        sm_count: sms,
        ..Target::h200()
    };
    let device = Device {
        target: &target,
        run: None,
        wgmma_attention: false,
        wgmma_pingpong: pingpong,
        wgmma_tma: tma,
    };
    run_case_traced(src, "fuzz", dims, profile, seed, Some(device))
}

fn pick<T: Copy>(rng: &mut SplitMix64, xs: &[T]) -> T {
    xs[(rng.next_u64() % xs.len() as u64) as usize]
}

/// A program and its dims from `seed`.
fn program(seed: u64) -> (String, Vec<(String, u64)>) {
    let mut rng = SplitMix64::new(seed);
    let m = 65 + rng.next_u64() % 260;
    let n = 65 + rng.next_u64() % 540;
    let k = 33 + rng.next_u64() % 300;
    let dt = pick(&mut rng, &["bf16", "f16"]);
    let (params, body, out) = match rng.next_u64() % 7 {
        0 => ("".to_string(), "x @ w^T".to_string(), dt.to_string()),
        1 => (
            format!(", b: {dt}[N]"),
            "x @ w^T + b".to_string(),
            dt.to_string(),
        ),
        2 => ("".to_string(), "silu(x @ w^T)".to_string(), dt.to_string()),
        3 => (
            format!(", r: {dt}[M, N]"),
            "r + x @ w^T".to_string(),
            dt.to_string(),
        ),
        4 => (
            "".to_string(),
            "(x @ w^T) * 0.125".to_string(),
            dt.to_string(),
        ),
        5 => (
            "".to_string(),
            "f32(x) @ f32(w)^T".to_string(),
            "f32".to_string(),
        ),
        _ => (
            format!(", u: {dt}[N, K]"),
            "silu(x @ w^T) * (x @ u^T)".to_string(),
            dt.to_string(),
        ),
    };
    let src = format!(
        "step fuzz(x: {dt}[M, K], w: {dt}[N, K]{params}) -> {out}[M, N] {{\n    {body}\n}}\n"
    );
    let dims = vec![("M".into(), m), ("N".into(), n), ("K".into(), k)];
    (src, dims)
}

/// [`program`] with its weights stored `[K, N]` and read as stored (`x @ w`: an MN-major
/// B).
fn mn_major(src: &str) -> String {
    src.replace("[N, K]", "[K, N]")
        .replace("w^T", "w")
        .replace("f32(w)^T", "f32(w)")
        .replace("u^T", "u")
}

/// The random programs on the `wgmma: 1` tile (`tma` false) or its warp-specialised TMA
/// variant (`wgmma: tma`, K rounded up to a multiple of 8), each of both widths; every one
/// must take the tile and pass the reference.
fn random_gemms_on_the_warpgroup_tile(seeds: std::ops::Range<u64>, tma: bool) {
    let tile = if tma { "wgmma: tma" } else { "wgmma: 1" };
    let mut failures = Vec::new();
    let mut widths = std::collections::BTreeSet::new();
    for seed in seeds {
        let (src, mut dims) = program(seed);
        if tma {
            // A tensor map's rows are whole 16-byte chunks: K a multiple of 8.
            dims[2].1 = dims[2].1.next_multiple_of(8);
        }
        // Even seeds on 1 SM (the 128 × 256 tile, or 128 × 128 for N ≤ 128); odd ones
        // with N > 128 on one SM more than the GEMM has 128 × 256 tiles (128 × 128).
        let (m, n) = (dims[0].1, dims[1].1);
        let sms = if seed % 2 == 1 && n > 128 {
            (m.div_ceil(128) * n.div_ceil(256) + 1) as u32
        } else {
            1
        };
        let (o, t) = run_on(&src, &dims, Profile::Fast, seed, (sms, false, tma));
        let wg: Vec<&String> = t.schedules.iter().filter(|s| s.contains(tile)).collect();
        for s in &wg {
            widths.insert(s.contains("bn: 256"));
        }
        if o != Outcome::Pass || wg.is_empty() {
            failures.push(format!(
                "seed {seed} {dims:?}: {} ({} wgmma kernels): {}\n{src}",
                o.kind(),
                wg.len(),
                o.message()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(widths.len(), 2, "{tile}: both tile widths (128, 256) drawn");
}

#[test]
fn random_gemms_on_the_wgmma_tiles_pass_the_reference() {
    random_gemms_on_the_warpgroup_tile(0..24, false);
}

/// The TMA tile is the default where the ping-pong tile does not apply (`Options::wgmma_tma`).
#[test]
fn random_gemms_on_the_tma_tile_pass_the_reference() {
    random_gemms_on_the_warpgroup_tile(24..40, true);
}

#[test]
fn random_gemms_on_the_pingpong_tile_pass_the_reference() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for seed in 0..24u64 {
        let (src, mut dims) = program(seed);
        dims[2].1 = dims[2].1.next_multiple_of(8);
        let (m, n) = (dims[0].1, dims[1].1);
        // 1 to 3 SMs, never more than half the 128 × 128 tiles (the tile's condition).
        let tiles = m.div_ceil(128) * n.div_ceil(128);
        if tiles < 2 {
            continue;
        }
        let sms = (1 + seed % 3).min(tiles / 2) as u32;
        let target = Target {
            sm_count: sms,
            ..Target::h200()
        };
        let device = Device {
            target: &target,
            run: None,
            wgmma_pingpong: true,
            wgmma_tma: false,
            wgmma_attention: false,
        };
        let (o, t) = run_case_traced(&src, "fuzz", &dims, Profile::Fast, seed, Some(device));
        ran += 1;
        let pp = t
            .schedules
            .iter()
            .filter(|s| s.contains("wgmma: pingpong"))
            .count();
        if o != Outcome::Pass || pp == 0 {
            failures.push(format!(
                "seed {seed} {dims:?} on {sms} SMs: {} ({pp} ping-pong kernels): {}\n{src}",
                o.kind(),
                o.message()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 20, "{ran} of 24 programs have two tiles or more");
}

/// The random programs with an MN-major B (`x @ w`, [`mn_major`]): on the `wgmma: 1` tile
/// for an H200 of 1 SM at any N (rows of N not 16-byte aligned are copied element by
/// element into the panels), and on the ping-pong tile on 1 to 3 SMs with N rounded up to
/// a multiple of 8 (a tensor map's rows). Each must take its tile, read B MN-major, and
/// pass the reference.
#[test]
fn random_mn_major_gemms_on_the_wgmma_tiles_pass_the_reference() {
    let mut failures = Vec::new();
    let mut ran = [0, 0];
    for seed in 200..216u64 {
        let (src, mut dims) = program(seed);
        let src = mn_major(&src);
        let pingpong = seed % 2 == 1;
        let (tile, sms) = if pingpong {
            dims[1].1 = dims[1].1.next_multiple_of(8);
            dims[2].1 = dims[2].1.next_multiple_of(8);
            let tiles = dims[0].1.div_ceil(128) * dims[1].1.div_ceil(128);
            if tiles < 2 {
                continue;
            }
            ("wgmma: pingpong", (1 + seed % 3).min(tiles / 2) as u32)
        } else {
            ("wgmma: 1", 1)
        };
        let (o, t) = run_on(&src, &dims, Profile::Fast, seed, (sms, pingpong, false));
        ran[pingpong as usize] += 1;
        let taken = t.schedules.iter().filter(|s| s.contains(tile)).count();
        if o != Outcome::Pass || taken == 0 {
            failures.push(format!(
                "seed {seed} {dims:?} on {sms} SMs: {} ({taken} {tile} kernels): {}\n{src}",
                o.kind(),
                o.message()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        ran[0] == 8 && ran[1] >= 6,
        "programs run on (wgmma: 1, ping-pong): {ran:?}"
    );
}

/// The same random programs in `invariant`, at any M from 1 (the decode sizes the 64-row
/// warpgroup tile serves) to 324: each GEMM must take a wgmma tile at every M (`invariant`
/// chooses it by N, K and the layouts alone; K > 32 here and N > 64, so never split) and
/// pass the reference.
#[test]
fn random_gemms_in_invariant_take_wgmma_at_every_m() {
    let mut failures = Vec::new();
    let mut rows = std::collections::BTreeSet::new();
    let target = Target::h200();
    for seed in 100..124u64 {
        let (src, mut dims) = program(seed);
        // M from 1 to 324: a third of the programs at decode sizes (≤ 16).
        let m = if seed % 3 == 0 {
            1 + seed % 16
        } else {
            dims[0].1 - 64 + seed % 3
        };
        dims[0].1 = m;
        let device = Device {
            target: &target,
            run: None,
            wgmma_attention: false,
            wgmma_pingpong: false,
            wgmma_tma: false,
        };
        let (o, t) = run_case_traced(&src, "fuzz", &dims, Profile::Invariant, seed, Some(device));
        let wg: Vec<&String> = t
            .schedules
            .iter()
            .filter(|s| s.contains("wgmma: 1"))
            .collect();
        for s in &wg {
            rows.insert(s.contains("bm: 64"));
        }
        if o != Outcome::Pass || wg.is_empty() {
            failures.push(format!(
                "seed {seed} {dims:?}: {} ({} wgmma kernels): {}\n{src}",
                o.kind(),
                wg.len(),
                o.message()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        rows.len(),
        2,
        "both warpgroup heights (64 and 128 rows) drawn"
    );
}
