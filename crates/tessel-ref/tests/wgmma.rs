//! The executor on the warpgroup statements: `wgmma` (bf16, f16, tf32; n from 8 to 256;
//! one and two warpgroups) against the documented model (bit for bit) and an f64 reference
//! (within the f32 accumulation bound), read through 128-byte-swizzled descriptors; and the
//! misuses the model reports: an operand written without `fence.proxy.async`, a store into
//! an operand before `wgmma.wait`, a descriptor the model does not know; and accumulators
//! read before the wait, which hold their old values in the model (products land at the
//! wait). The kernel and its
//! inputs are `tessel_testkit`'s (shared with the PTX and GPU tests).

use tessel_ir::kernel::{Kernel, SmemDesc, Stmt, WgmmaInput, WgmmaSwizzle};
use tessel_ref::{run_kernel, ExecError, ExecOptions};
use tessel_testkit::host::{wgmma_case, wgmma_mn_case, MatmulCase};
use tessel_testkit::wgmma as wk;

fn verified(k: Kernel) -> Kernel {
    if let Err(e) = tessel_ir::verify::verify_kernel(&k, true) {
        panic!("{e:?}\n{}", tessel_ir::text::write_kernel(&k));
    }
    k
}

/// Runs `wgmma_gemm(input, n, wg)` at reduction length `kk`; checks every output against
/// the model (one fma chain over k in order, from 0) bit for bit and against f64 within
/// `(K + 1)·2^-24·Σ|a_k b_k|`.
fn check(input: WgmmaInput, n: usize, wg: usize, kk: usize, seed: u64) {
    let k = verified(wk::wgmma_gemm(input, n as u32, wg as u32));
    let m = 64 * wg;
    let MatmulCase {
        a,
        b,
        mut bufs,
        args,
        ..
    } = wgmma_case(input, n, wg, kk, seed);
    run_kernel(&k, &mut bufs, &args, &ExecOptions::default()).unwrap();
    let d = bufs[2].to_f32_vec();
    let mut worst = 0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut acc, mut exact, mut mag) = (0f32, 0f64, 0f64);
            for x in 0..kk {
                let (p, q) = (a[i * kk + x], b[x * n + j]);
                acc = p.mul_add(q, acc);
                exact += p as f64 * q as f64;
                mag += (p as f64 * q as f64).abs();
            }
            let got = d[i * n + j];
            assert_eq!(got.to_bits(), acc.to_bits(), "{input:?} n {n} D[{i}][{j}]");
            let err = (got as f64 - exact).abs();
            assert!(err <= (kk as f64 + 1.0) * 2f64.powi(-24) * mag);
            worst = worst.max(err);
        }
    }
    eprintln!(
        "wgmma {} {m}x{n}x{kk}: max |D - f64| = {worst:e}",
        input.name()
    );
}

#[test]
fn wgmma_matches_the_model_for_every_input_type() {
    check(WgmmaInput::Bf16, 64, 1, 128, 1);
    check(WgmmaInput::F16, 8, 1, 64, 2);
    check(WgmmaInput::Tf32, 32, 1, 96, 3);
}

#[test]
fn wgmma_two_warpgroups_at_n_256() {
    check(WgmmaInput::Bf16, 256, 2, 64, 4);
}

/// Runs `wgmma_rs_mn(input, n, wg)` (A from registers, B MN-major) at reduction length
/// `kk`; checks every output against the model bit for bit and against f64 as [`check`].
fn check_rs_mn(input: WgmmaInput, n: usize, wg: usize, kk: usize, seed: u64) {
    let k = verified(wk::wgmma_rs_mn(input, n as u32, wg as u32));
    let m = 64 * wg;
    let MatmulCase {
        a,
        b,
        mut bufs,
        args,
        ..
    } = wgmma_mn_case(input, n, wg, kk, seed);
    run_kernel(&k, &mut bufs, &args, &ExecOptions::default()).unwrap();
    let d = bufs[2].to_f32_vec();
    for i in 0..m {
        for j in 0..n {
            let (mut acc, mut exact, mut mag) = (0f32, 0f64, 0f64);
            for x in 0..kk {
                let (p, q) = (a[i * kk + x], b[x * n + j]);
                acc = p.mul_add(q, acc);
                exact += p as f64 * q as f64;
                mag += (p as f64 * q as f64).abs();
            }
            let got = d[i * n + j];
            assert_eq!(got.to_bits(), acc.to_bits(), "{input:?} n {n} D[{i}][{j}]");
            assert!((got as f64 - exact).abs() <= (kk as f64 + 1.0) * 2f64.powi(-24) * mag);
        }
    }
}

#[test]
fn wgmma_with_a_in_registers_and_an_mn_major_b_matches_the_model() {
    check_rs_mn(WgmmaInput::Bf16, 128, 1, 128, 7);
    check_rs_mn(WgmmaInput::F16, 64, 2, 64, 8);
    check_rs_mn(WgmmaInput::Bf16, 256, 1, 64, 9);
}

#[test]
fn mn_major_addresses_follow_the_canonical_layout() {
    // 128-byte swizzle, MN-major: ((8,8,m),(8,k)) : ((1,8,LBO),(64,SBO)) in bf16 elements,
    // then Swizzle<3,4,3> on the byte address (PTX ISA §9.7.15.5.1.2.1.3).
    let d = SmemDesc {
        start: 0x800,
        lbo: 8192,
        sbo: 1024,
        swizzle: WgmmaSwizzle::B128,
    };
    for k in 0..16u32 {
        for n in 0..128u32 {
            let logical = 0x800 + (n / 64) * 8192 + (k / 8) * 1024 + (k % 8) * 128 + 2 * (n % 64);
            let swizzled = logical ^ (((logical >> 7) & 7) << 4);
            assert_eq!(d.address_mn(k, 2 * n), swizzled, "k {k} n {n}");
        }
    }
}

/// Removes every statement `drop` selects, in nested blocks too.
fn without(body: &mut Vec<Stmt>, drop: &dyn Fn(&Stmt) -> bool) {
    body.retain(|s| !drop(s));
    for s in body {
        match s {
            Stmt::For { body, .. } => without(body, drop),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                without(then_body, drop);
                without(else_body, drop);
            }
            _ => {}
        }
    }
}

fn run_err(k: &Kernel) -> ExecError {
    let MatmulCase { mut bufs, args, .. } = wgmma_case(WgmmaInput::Bf16, 64, 1, 64, 5);
    run_kernel(k, &mut bufs, &args, &ExecOptions::default()).expect_err("a misuse")
}

#[test]
fn an_operand_written_without_a_proxy_fence_is_reported() {
    let mut k = wk::wgmma_gemm(WgmmaInput::Bf16, 64, 1);
    without(&mut k.body, &|s| matches!(s, Stmt::FenceProxyAsync));
    let e = run_err(&k);
    assert!(
        matches!(&e, ExecError::Wgmma { msg, .. } if msg.contains("no fence.proxy.async")),
        "{e}"
    );
}

#[test]
fn a_store_into_an_operand_before_the_wait_is_reported() {
    // Without the wait the next slice's copies land in bytes the wgmma still reads.
    let mut k = wk::wgmma_gemm(WgmmaInput::Bf16, 64, 1);
    without(&mut k.body, &|s| matches!(s, Stmt::WgmmaWait(_)));
    let MatmulCase { mut bufs, args, .. } = wgmma_case(WgmmaInput::Bf16, 64, 1, 128, 6);
    let e = run_kernel(&k, &mut bufs, &args, &ExecOptions::default()).expect_err("a misuse");
    assert!(
        matches!(&e, ExecError::Wgmma { msg, .. } if msg.contains("no wgmma.wait")),
        "{e}"
    );
}

#[test]
fn accumulators_read_before_the_wait_hold_the_old_values() {
    // One slice of K, no wait: the epilogue stores D before the products land, which the
    // model applies only at a wait (the GPU's values there are undefined) — the zeros the
    // accumulators started with, never the product.
    let mut k = wk::wgmma_gemm(WgmmaInput::Bf16, 64, 1);
    without(&mut k.body, &|s| matches!(s, Stmt::WgmmaWait(_)));
    let MatmulCase { mut bufs, args, .. } = wgmma_case(WgmmaInput::Bf16, 64, 1, 64, 10);
    run_kernel(&k, &mut bufs, &args, &ExecOptions::default()).unwrap();
    assert!(bufs[2].to_f32_vec().iter().all(|&x| x == 0.0));
    // A in registers is read at the wait too: with the waits, the product is there.
    let k = verified(wk::wgmma_rs_mn(WgmmaInput::Bf16, 64, 1));
    let MatmulCase { mut bufs, args, .. } = wgmma_mn_case(WgmmaInput::Bf16, 64, 1, 64, 11);
    run_kernel(&k, &mut bufs, &args, &ExecOptions::default()).unwrap();
    assert!(bufs[2].to_f32_vec().iter().any(|&x| x != 0.0));
}

#[test]
fn descriptors_encode_and_decode() {
    let d = SmemDesc {
        start: 0x1_2340,
        lbo: 16,
        sbo: 1024,
        swizzle: WgmmaSwizzle::B128,
    };
    let bits = d.encode();
    // start >> 4 in bits 13..0, lbo >> 4 in 29..16, sbo >> 4 in 45..32, mode 1 in 63..62.
    assert_eq!(bits, 0x1234 | 1 << 16 | 64 << 32 | 1 << 62);
    assert_eq!(SmemDesc::decode(bits), Ok(d));
    assert_eq!(d.fixed_bits() + (0x1_2340 >> 4), bits);
    assert!(SmemDesc::decode(bits & !(3 << 62)).is_err());
    assert!(SmemDesc::decode(bits | 1 << 49).is_err());
    // Row 9, byte 20 of a 128-byte swizzled operand: group 1 (1024 on), row 1 of the
    // pattern (128 on), chunk 1 XOR 1 = 0.
    let z = SmemDesc { start: 0, ..d };
    assert_eq!(z.address(9, 20), 1024 + 128 + 4);
    let b32 = SmemDesc {
        swizzle: WgmmaSwizzle::B32,
        sbo: 256,
        ..z
    };
    // 32-byte rows: row 4 is at 128, whose bit 7 flips the chunk.
    assert_eq!(b32.address(4, 0), 128 + 16);
    assert_eq!(b32.address(3, 16), 96 + 16);
}
