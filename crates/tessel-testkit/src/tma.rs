//! A hand-built warp-specialised kernel fed by TMA through mbarriers: one producer warp
//! (one lane of it) issues the tiled loads of a two-stage shared ring with `expect_tx`;
//! two consumer warps wait on the ring's FULL barriers by phase parity, read each tile at
//! its 128-byte-swizzled address, copy it to global memory and release the stage on its
//! EMPTY barrier. Run on the executor (`tessel-ref`'s `tests/tma.rs`) and assembled for
//! sm_90a (`tessel-ptx`'s `tests/tma.rs`).

use tessel_ir::kernel::{
    Builder, ICmp, Kernel, LaunchArg, Op, Operand, Param, ParamKind, RegType, Space, Special, Stmt,
    TensorMapDesc, TensorMapSwizzle, Width,
};
use tessel_ir::{BufferId, DType, Reg};

use crate::build::{close_for, close_if, kernel, param_gaddr, ptr, r, store, u};
use RegType::{Pred, U32, U64};

/// Columns of the input matrix `X` (f32, row-major): not a multiple of the box, so the last
/// box of every row block reads past the end and gets zeros.
pub const COLS: u32 = 100;
/// Rows of `X`: three row blocks, one per CTA.
pub const ROWS: u32 = 48;
/// The box: 32 f32 columns (128 bytes, the 128-byte swizzle's span) × 16 rows.
pub const BOX_COLS: u32 = 32;
pub const BOX_ROWS: u32 = 16;
/// Boxes along a row block: `ceil(COLS / BOX_COLS)`.
pub const BOXES: u32 = COLS.div_ceil(BOX_COLS);
/// Columns of the output `Y`: whole boxes.
pub const OUT_COLS: u32 = BOXES * BOX_COLS;
const STAGES: u32 = 2;
const STAGE_BYTES: u32 = BOX_COLS * BOX_ROWS * 4;
const CONSUMERS: u32 = 64;

/// The tensor map of `X` (buffer 0): `[ROWS, COLS]` f32, boxes of `[BOX_ROWS, BOX_COLS]`,
/// 128-byte swizzle.
pub fn x_map() -> TensorMapDesc {
    TensorMapDesc::new(
        BufferId::from_u32(0),
        DType::F32,
        &[COLS as u64, ROWS as u64],
        &[COLS as u64 * 4],
        &[BOX_COLS, BOX_ROWS],
        TensorMapSwizzle::B128,
    )
}

/// The launch arguments: the map of `X` (buffer 0) and `Y` (buffer 1).
pub fn args() -> Vec<LaunchArg> {
    vec![
        LaunchArg::TensorMap(x_map()),
        LaunchArg::Buffer(BufferId::from_u32(1)),
    ]
}

/// What `Y` must hold: `X` with its rows padded by zeros to `OUT_COLS`.
pub fn expected(x: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0; (ROWS * OUT_COLS) as usize];
    for row in 0..ROWS as usize {
        for col in 0..COLS as usize {
            y[row * OUT_COLS as usize + col] = x[row * COLS as usize + col];
        }
    }
    y
}

/// `addr` with the 128-byte swizzle: bits [4, 7) ^= bits [7, 10).
fn swizzle128(b: &mut Builder, addr: Reg) -> Reg {
    let line = b.op(U32, Op::ShrU, &[r(addr), u(7)]);
    let low = b.op(U32, Op::And, &[r(line), u(7)]);
    let chunk = b.op(U32, Op::Shl, &[r(low), u(4)]);
    b.op(U32, Op::Xor, &[r(addr), r(chunk)])
}

/// `base + 8·i`: the i-th of a row of mbarriers.
fn bar_at(b: &mut Builder, base: Reg, i: Reg) -> Reg {
    let off = b.op(U32, Op::Shl, &[r(i), u(3)]);
    b.op(U32, Op::IAdd, &[r(base), r(off)])
}

/// The kernel: 96 threads (warp 0 the producer, warps 1 and 2 the consumers), one CTA per
/// row block of `X`. With `read_before_wait`, the consumers read a tile before waiting for
/// it — a race the executor must report. With `setmaxnreg`, the producer warp lowers its
/// register budget and the consumers raise theirs (sm_90a only).
pub fn ring_kernel(read_before_wait: bool, setmaxnreg: bool) -> Kernel {
    let params = vec![
        Param {
            name: "x".to_owned(),
            kind: ParamKind::TensorMap,
        },
        ptr("y", DType::F32, true),
    ];
    let mut k = Kernel {
        schedule: "hand-built: TMA producer warp, two consumer warps, 2-stage ring".to_owned(),
        ..kernel("tma_ring", params, 96, ROWS / BOX_ROWS)
    };
    let tiles = k.new_shared(STAGES * STAGE_BYTES, 1024);
    let bars = k.new_shared(2 * STAGES * 8, 8);
    let mut b = Builder::new(&mut k);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let warp = b.op(U32, Op::ShrU, &[r(tid), u(5)]);
    let cta = b.op(U32, Op::Special(Special::CtaidX), &[]);
    let tmap = b.op(U64, Op::Param(0), &[]);
    let tile0 = b.op(U32, Op::SharedAddr(tiles), &[]);
    let full0 = b.op(U32, Op::SharedAddr(bars), &[]);
    let empty0 = b.op(U32, Op::IAdd, &[r(full0), u(STAGES * 8)]);

    // Thread 0 initialises the barriers: FULL counts the producer's one arrival (and the
    // bytes), EMPTY every consumer thread's.
    let t0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(tid), u(0)]);
    b.open();
    for s in 0..STAGES {
        let f = b.op(U32, Op::IAdd, &[r(full0), u(8 * s)]);
        b.push(Stmt::MbarInit {
            addr: f,
            count: u(1),
        });
        let e = b.op(U32, Op::IAdd, &[r(empty0), u(8 * s)]);
        b.push(Stmt::MbarInit {
            addr: e,
            count: u(CONSUMERS),
        });
    }
    b.push(Stmt::FenceMbarrierInit);
    close_if(&mut b, t0);
    b.push(Stmt::Barrier);

    let producer = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(0)]);
    // The producer warp.
    b.open();
    if setmaxnreg {
        b.push(Stmt::SetMaxNReg {
            inc: false,
            regs: 40,
        });
    }
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let l0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(lane), u(0)]);
    b.open();
    let row0 = b.op(U32, Op::IMulLo, &[r(cta), u(BOX_ROWS)]);
    let j = b.kernel.new_reg(U32);
    b.open();
    let s = b.op(U32, Op::And, &[r(j), u(STAGES - 1)]);
    let round = b.op(U32, Op::ShrU, &[r(j), u(STAGES.trailing_zeros())]);
    let ph = b.op(U32, Op::And, &[r(round), u(1)]);
    // The stage is free once the consumers released its previous round (parity 1 on a
    // fresh barrier: at once).
    let free = b.op(U32, Op::Xor, &[r(ph), u(1)]);
    let e = bar_at(&mut b, empty0, s);
    b.push(Stmt::MbarWait {
        addr: e,
        parity: r(free),
    });
    let f = bar_at(&mut b, full0, s);
    b.push(Stmt::MbarArriveExpectTx {
        addr: f,
        bytes: u(STAGE_BYTES),
    });
    let soff = b.op(U32, Op::IMulLo, &[r(s), u(STAGE_BYTES)]);
    let dst = b.op(U32, Op::IAdd, &[r(tile0), r(soff)]);
    let col0 = b.op(U32, Op::IMulLo, &[r(j), u(BOX_COLS)]);
    b.push(Stmt::TmaLoad {
        dst,
        tmap,
        coords: vec![r(col0), r(row0)],
        mbar: f,
    });
    close_for(&mut b, j, u(0), u(BOXES), u(1));
    close_if(&mut b, l0);
    let then_body = b.close();

    // The consumer warps: thread t reads elements t, t + 64, ... of each tile.
    b.open();
    if setmaxnreg {
        b.push(Stmt::SetMaxNReg {
            inc: true,
            regs: 232,
        });
    }
    let ct = b.op(U32, Op::ISub, &[r(tid), u(32)]);
    let j = b.kernel.new_reg(U32);
    b.open();
    let s = b.op(U32, Op::And, &[r(j), u(STAGES - 1)]);
    let round = b.op(U32, Op::ShrU, &[r(j), u(STAGES.trailing_zeros())]);
    let ph = b.op(U32, Op::And, &[r(round), u(1)]);
    let f = bar_at(&mut b, full0, s);
    let wait = Stmt::MbarWait {
        addr: f,
        parity: r(ph),
    };
    if !read_before_wait {
        b.push(wait.clone());
    }
    let soff = b.op(U32, Op::IMulLo, &[r(s), u(STAGE_BYTES)]);
    let stage = b.op(U32, Op::IAdd, &[r(tile0), r(soff)]);
    let e_i = b.kernel.new_reg(U32);
    b.open();
    let e = b.op(U32, Op::IAdd, &[r(e_i), r(ct)]);
    let row = b.op(U32, Op::ShrU, &[r(e), u(BOX_COLS.trailing_zeros())]);
    let col = b.op(U32, Op::And, &[r(e), u(BOX_COLS - 1)]);
    let rb = b.op(U32, Op::Shl, &[r(row), u(7)]);
    let cb = b.op(U32, Op::Shl, &[r(col), u(2)]);
    let lin = b.op(U32, Op::IAdd, &[r(rb), r(cb)]);
    let at = b.op(U32, Op::IAdd, &[r(stage), r(lin)]);
    let sw = swizzle128(&mut b, at);
    let v = b.kernel.new_reg(U32);
    b.push(Stmt::Load {
        dsts: vec![v],
        space: Space::Shared,
        width: Width::B32,
        addr: sw,
        offset: 0,
    });
    // Y[cta · BOX_ROWS + row][j · BOX_COLS + col].
    let grow = b.op(U32, Op::IMulLo, &[r(cta), u(BOX_ROWS)]);
    let grow = b.op(U32, Op::IAdd, &[r(grow), r(row)]);
    let gcol = b.op(U32, Op::IMulLo, &[r(j), u(BOX_COLS)]);
    let gcol = b.op(U32, Op::IAdd, &[r(gcol), r(col)]);
    let gi = b.op(U32, Op::IMulLo, &[r(grow), u(OUT_COLS)]);
    let gi = b.op(U32, Op::IAdd, &[r(gi), r(gcol)]);
    let ya = param_gaddr(&mut b, 1, gi, 4);
    store(&mut b, Width::B32, Space::Global, ya, &[Operand::Reg(v)]);
    close_for(&mut b, e_i, u(0), u(BOX_COLS * BOX_ROWS), u(CONSUMERS));
    if read_before_wait {
        b.push(wait);
    }
    let e = bar_at(&mut b, empty0, s);
    b.push(Stmt::MbarArrive { addr: e });
    close_for(&mut b, j, u(0), u(BOXES), u(1));
    let else_body = b.close();
    b.push(Stmt::If {
        cond: producer,
        then_body,
        else_body,
    });
    b.finish();
    k
}
