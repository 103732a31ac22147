//! mbarriers and TMA loads on the executor: a warp-specialised kernel (a producer warp
//! issuing TMA loads, consumer warps waiting on phase parities) gives the right bits; the
//! swizzles land where `CU_TENSOR_MAP_SWIZZLE_*` puts them; reading a tile before its wait,
//! waits that never complete and mbarriers misused are reported.

use tessel_ir::kernel::{
    Builder, ICmp, Kernel, LaunchArg, Op, Operand, Param, ParamKind, RegType, Space, Special, Stmt,
    TensorMapDesc, TensorMapSwizzle, Width,
};
use tessel_ir::{BufferId, DType, Reg};
use tessel_ref::{run_kernel, ExecError, ExecOptions, Tensor};
use tessel_testkit::build::{close_for, close_if, kernel, param_gaddr, ptr, r, store, u};
use tessel_testkit::host::{f32_tensor, f32s, poison_f32, words};
use tessel_testkit::tma::{args, expected, ring_kernel, COLS, OUT_COLS, ROWS};
use RegType::{Pred, U32, U64};

fn x_values() -> Vec<f32> {
    (0..ROWS * COLS)
        .map(|i| (i as f32) * 0.25 - 17.0 + if i % 7 == 0 { 1e-30 } else { 0.0 })
        .collect()
}

fn run_ring(k: &Kernel) -> Result<Vec<f32>, ExecError> {
    let mut bufs = vec![
        f32_tensor(&x_values()),
        poison_f32((ROWS * OUT_COLS) as usize),
    ];
    run_kernel(k, &mut bufs, &args(), &ExecOptions::default())?;
    Ok(f32s(&bufs[1].data))
}

#[test]
fn a_producer_warp_feeds_consumer_warps_through_tma_and_mbarriers() {
    let y = run_ring(&ring_kernel(false, false)).unwrap();
    let want = expected(&x_values());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&y), bits(&want));
    // setmaxnreg changes nothing on the executor.
    let y = run_ring(&ring_kernel(false, true)).unwrap();
    assert_eq!(bits(&y), bits(&want));
}

#[test]
fn a_consumer_reading_a_tile_before_its_wait_is_reported() {
    let e = run_ring(&ring_kernel(true, false)).unwrap_err();
    match &e {
        ExecError::Mbarrier { thread, msg, .. } => {
            assert!(*thread >= 32, "{e}");
            assert!(msg.contains("shared load of 4 bytes"), "{e}");
            assert!(msg.contains("TMA load"), "{e}");
        }
        _ => panic!("expected an mbarrier error, got {e}"),
    }
}

/// One CTA of one warp; thread 0 runs `body` with `(tile, bar, tmap)`: a 2048-byte shared
/// buffer aligned to 1024, an 8-byte one for a barrier, and the tensor map's address
/// (parameter 0; parameter 1 is an f32 output).
fn one_thread(name: &str, body: impl FnOnce(&mut Builder, Reg, Reg, Reg)) -> Kernel {
    let params = vec![
        Param {
            name: "m".to_owned(),
            kind: ParamKind::TensorMap,
        },
        ptr("out", DType::F32, true),
    ];
    let mut k = kernel(name, params, 32, 1);
    let tile = k.new_shared(2048, 1024);
    let bar = k.new_shared(8, 8);
    let mut b = Builder::new(&mut k);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let t0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(tid), u(0)]);
    b.open();
    let tile = b.op(U32, Op::SharedAddr(tile), &[]);
    let bar = b.op(U32, Op::SharedAddr(bar), &[]);
    let tmap = b.op(U64, Op::Param(0), &[]);
    body(&mut b, tile, bar, tmap);
    close_if(&mut b, t0);
    b.finish();
    k
}

/// Runs a [`one_thread`] kernel over a map of `x` (f32 `[rows, cols]`, boxes
/// `[box_rows, box_cols]`); the output has `out_words` words.
fn run_map(
    k: &Kernel,
    map: TensorMapDesc,
    x: &[f32],
    out_words: usize,
) -> Result<Vec<u32>, ExecError> {
    let mut bufs: Vec<Tensor> = vec![f32_tensor(x), poison_f32(out_words)];
    let args = [
        LaunchArg::TensorMap(map),
        LaunchArg::Buffer(BufferId::from_u32(1)),
    ];
    run_kernel(k, &mut bufs, &args, &ExecOptions::default())?;
    Ok(words(&bufs[1].data))
}

fn map(cols: u64, rows: u64, box_cols: u32, box_rows: u32, sw: TensorMapSwizzle) -> TensorMapDesc {
    TensorMapDesc::new(
        BufferId::from_u32(0),
        DType::F32,
        &[cols, rows],
        &[cols * 4],
        &[box_cols, box_rows],
        sw,
    )
}

/// Thread 0: init, expect_tx(bytes), TMA load at `(col, row)`, wait parity 0, then copy
/// `words` shared words from the tile to `out`, linearly (the swizzled image).
fn load_and_dump(bytes: u32, col: u32, row: u32, dump: u32) -> Kernel {
    one_thread("dump", |b, tile, bar, tmap| {
        b.push(Stmt::MbarInit {
            addr: bar,
            count: u(1),
        });
        b.push(Stmt::FenceMbarrierInit);
        b.push(Stmt::MbarArriveExpectTx {
            addr: bar,
            bytes: u(bytes),
        });
        b.push(Stmt::TmaLoad {
            dst: tile,
            tmap,
            coords: vec![u(col), u(row)],
            mbar: bar,
        });
        b.push(Stmt::MbarWait {
            addr: bar,
            parity: u(0),
        });
        let i = b.kernel.new_reg(U32);
        b.open();
        let off = b.op(U32, Op::Shl, &[r(i), u(2)]);
        let a = b.op(U32, Op::IAdd, &[r(tile), r(off)]);
        let v = b.kernel.new_reg(U32);
        b.push(Stmt::Load {
            dsts: vec![v],
            space: Space::Shared,
            width: Width::B32,
            addr: a,
            offset: 0,
        });
        let o = param_gaddr(b, 1, i, 4);
        store(b, Width::B32, Space::Global, o, &[Operand::Reg(v)]);
        close_for(b, i, u(0), u(dump), u(1));
    })
}

/// `CU_TENSOR_MAP_SWIZZLE_*` on a shared byte address (CUTLASS's `Swizzle<b, 4, 3>`),
/// stated independently of the executor: bits [4, 4 + b) XORed with bits [7, 7 + b).
fn reference_swizzle(a: u32, b: u32) -> u32 {
    a ^ (((a >> 7) & ((1 << b) - 1)) << 4)
}

#[test]
fn every_swizzle_lands_where_the_tensor_map_puts_it() {
    // A [20, 40] f32 matrix; boxes as wide as the swizzle's span, 16 rows, at (4, 2) and
    // at (24, 8), the second partly outside (zeros).
    let (cols, rows) = (40u64, 20u64);
    let x: Vec<f32> = (0..cols * rows).map(|i| i as f32 + 0.5).collect();
    for (sw, b) in [
        (TensorMapSwizzle::None, 0),
        (TensorMapSwizzle::B32, 1),
        (TensorMapSwizzle::B64, 2),
        (TensorMapSwizzle::B128, 3),
    ] {
        let box_cols = if sw == TensorMapSwizzle::None {
            16
        } else {
            sw.bytes() / 4
        };
        let box_rows = 16u32;
        let bytes = box_cols * box_rows * 4;
        for (c0, r0) in [(4u32, 2u32), (24, 8)] {
            let k = load_and_dump(bytes, c0, r0, bytes / 4);
            let m = map(cols, rows, box_cols, box_rows, sw);
            let out =
                run_map(&k, m, &x, (bytes / 4) as usize).unwrap_or_else(|e| panic!("{sw:?}: {e}"));
            for row in 0..box_rows {
                for col in 0..box_cols {
                    let (gr, gc) = ((r0 + row) as u64, (c0 + col) as u64);
                    let want = if gr < rows && gc < cols {
                        x[(gr * cols + gc) as usize].to_bits()
                    } else {
                        0
                    };
                    // The tile is 1024-aligned: offsets swizzle as addresses do.
                    let lin = (row * box_cols + col) * 4;
                    let at = reference_swizzle(lin, b) / 4;
                    assert_eq!(
                        out[at as usize], want,
                        "{sw:?} box at ({c0}, {r0}) element ({row}, {col})"
                    );
                }
            }
        }
    }
}

fn mbar_msg(e: ExecError) -> String {
    match e {
        ExecError::Mbarrier { msg, .. } => msg,
        other => panic!("expected an mbarrier error, got {other}"),
    }
}

fn run_small(k: &Kernel) -> Result<Vec<u32>, ExecError> {
    let x: Vec<f32> = (0..32 * 16).map(|i| i as f32).collect();
    run_map(k, map(32, 16, 32, 16, TensorMapSwizzle::B128), &x, 512)
}

#[test]
fn a_wait_that_never_completes_is_a_deadlock() {
    // The phase expects 4096 bytes, the box brings 2048: the wait can never return.
    let k = one_thread("short", |b, tile, bar, tmap| {
        b.push(Stmt::MbarInit {
            addr: bar,
            count: u(1),
        });
        b.push(Stmt::MbarArriveExpectTx {
            addr: bar,
            bytes: u(4096),
        });
        b.push(Stmt::TmaLoad {
            dst: tile,
            tmap,
            coords: vec![u(0), u(0)],
            mbar: bar,
        });
        b.push(Stmt::MbarWait {
            addr: bar,
            parity: u(0),
        });
    });
    match run_small(&k).unwrap_err() {
        ExecError::Deadlock { msg, .. } => {
            assert!(msg.contains("warp 0 waiting at"), "{msg}");
            assert!(msg.contains("mbarrier.wait"), "{msg}");
            assert!(
                msg.contains("phase 0: 0 of 1 arrivals and a tx-count of 2048 bytes pending"),
                "{msg}"
            );
        }
        e => panic!("expected a deadlock, got {e}"),
    }
}

#[test]
fn mbarrier_misuse_is_reported() {
    let init = |b: &mut Builder, bar: Reg| {
        b.push(Stmt::MbarInit {
            addr: bar,
            count: u(1),
        })
    };
    // An mbarrier's bytes are not data.
    let k = one_thread("touch", |b, _, bar, _| {
        init(b, bar);
        store(b, Width::B32, Space::Shared, bar, &[u(0)]);
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("touches the mbarrier"));
    // Initialised twice.
    let k = one_thread("twice", |b, _, bar, _| {
        init(b, bar);
        init(b, bar);
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("still in use"));
    // An arrival on an address with no barrier.
    let k = one_thread("none", |b, tile, _, _| {
        b.push(Stmt::MbarArrive { addr: tile })
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("no mbarrier was initialised"));
    // A second arrival on a phase of one, which still waits for its bytes.
    let k = one_thread("extra", |b, _, bar, _| {
        init(b, bar);
        b.push(Stmt::MbarArriveExpectTx {
            addr: bar,
            bytes: u(16),
        });
        b.push(Stmt::MbarArrive { addr: bar });
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("no arrival left"));
    // A TMA destination off the swizzle's 1024-byte pattern.
    let k = one_thread("misaligned", |b, tile, bar, tmap| {
        init(b, bar);
        let d = b.op(U32, Op::IAdd, &[r(tile), u(128)]);
        b.push(Stmt::TmaLoad {
            dst: d,
            tmap,
            coords: vec![u(0), u(0)],
            mbar: bar,
        });
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("not 1024-byte aligned"));
    // A TMA load through something else than a tensor map.
    let k = one_thread("not_a_map", |b, tile, bar, _| {
        init(b, bar);
        let p = b.op(U64, Op::Param(1), &[]);
        b.push(Stmt::TmaLoad {
            dst: tile,
            tmap: p,
            coords: vec![u(0), u(0)],
            mbar: bar,
        });
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("no tensor-map parameter"));
    // Coordinates for another rank.
    let k = one_thread("rank", |b, tile, bar, tmap| {
        init(b, bar);
        b.push(Stmt::TmaLoad {
            dst: tile,
            tmap,
            coords: vec![u(0)],
            mbar: bar,
        });
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("1 coordinates"));
    // Exiting with a copy nobody waited for.
    let k = one_thread("exit", |b, tile, bar, tmap| {
        init(b, bar);
        b.push(Stmt::MbarArriveExpectTx {
            addr: bar,
            bytes: u(2048),
        });
        b.push(Stmt::TmaLoad {
            dst: tile,
            tmap,
            coords: vec![u(0), u(0)],
            mbar: bar,
        });
    });
    assert!(mbar_msg(run_small(&k).unwrap_err()).contains("exited with 1 TMA loads"));
}

#[test]
fn a_tensor_map_past_its_buffer_is_a_bad_launch() {
    let k = load_and_dump(2048, 0, 0, 1);
    let x = vec![0.0f32; 32 * 15];
    let e = run_map(&k, map(32, 16, 32, 16, TensorMapSwizzle::B128), &x, 1).unwrap_err();
    assert!(matches!(e, ExecError::BadLaunch { .. }), "{e}");
}

#[test]
fn a_program_passes_its_tensor_map_as_a_launch_argument() {
    use tessel_ir::kernel::{BufferDecl, BufferRole, Launch, Program};
    use tessel_ir::TensorType;
    let mut p = Program {
        name: "tma_step".into(),
        ..Default::default()
    };
    let x = p.buffers.push(BufferDecl {
        name: "x".into(),
        ty: TensorType::new(DType::F32, vec![ROWS as u64, COLS as u64]),
        role: BufferRole::Input(0),
    });
    let y = p.buffers.push(BufferDecl {
        name: "y".into(),
        ty: TensorType::new(DType::F32, vec![ROWS as u64, OUT_COLS as u64]),
        role: BufferRole::Output,
    });
    let k = p.kernels.push(ring_kernel(false, false));
    let mut a = args();
    a[1] = LaunchArg::Buffer(y);
    assert_eq!(a[0], LaunchArg::TensorMap(tessel_testkit::tma::x_map()));
    p.launches.push(Launch { kernel: k, args: a });
    p.inputs.push(("x".into(), x));
    p.outputs.push(("y".into(), y));
    tessel_ir::verify::verify_program(&p, true).unwrap();
    let xt = Tensor {
        ty: p.buffers[x].ty.clone(),
        data: f32_tensor(&x_values()).data,
    };
    let out = tessel_ref::run_program(&p, &[xt]).unwrap();
    let want: Vec<u32> = expected(&x_values()).iter().map(|v| v.to_bits()).collect();
    assert_eq!(words(&out[0].data), want);
}
