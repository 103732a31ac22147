//! Hand-built kernels that together use every op, width, space and control structure of
//! the kernel IR. `tessel-ptx`'s tests legalize, print, scan and assemble each of them and
//! snapshot three (`row_sum`, `square_bf16`, `control`): a change here changes those
//! snapshots, so keep each kernel's ops in their order.

use tessel_ir::kernel::{
    Builder, FCmp, ICmp, Kernel, Op, Operand, Param, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{DType, Reg};

use crate::build::{
    close_for, close_if, f, gaddr, global_index, load, ptr, r, scalar, store, store_at, u,
};
use crate::ir::ALL_FCMP;
use RegType::{Pred, F32, U32, U64};

/// A kernel of `threads` threads on 4 CTAs, its PTX comment saying it is hand-built.
fn kernel(name: &str, params: Vec<Param>, threads: u32) -> Kernel {
    Kernel {
        schedule: "hand-built test kernel".to_owned(),
        ..crate::build::kernel(name, params, threads, 4)
    }
}

/// Every f32 op and comparison: loads four floats per thread, stores four results.
pub fn float_ops() -> Kernel {
    let mut k = kernel(
        "float_ops",
        vec![ptr("x", DType::F32, false), ptr("y", DType::F32, true)],
        128,
    );
    let mut b = Builder::new(&mut k);
    let x = b.op(U64, Op::Param(0), &[]);
    let y = b.op(U64, Op::Param(1), &[]);
    let i = global_index(&mut b);
    let xa = gaddr(&mut b, x, i, 16);
    let ya = gaddr(&mut b, y, i, 16);
    let v: Vec<Reg> = (0..4).map(|_| b.kernel.new_reg(F32)).collect();
    b.push(Stmt::Load {
        dsts: v.clone(),
        space: Space::Global,
        width: Width::V4,
        addr: xa,
        offset: 0,
    });
    let (a, c, d, e) = (v[0], v[1], v[2], v[3]);
    let s = b.op(F32, Op::FAdd, &[r(a), r(c)]);
    let t = b.op(F32, Op::FSub, &[r(s), r(d)]);
    let m = b.op(F32, Op::FMul, &[r(t), f(0.5)]);
    let q = b.op(F32, Op::FDiv, &[r(m), r(e)]);
    let fma = b.op(F32, Op::FFma, &[r(q), r(a), f(-0.0)]);
    let abs = b.op(F32, Op::FAbs, &[r(fma)]);
    let sqrt = b.op(F32, Op::FSqrt, &[r(abs)]);
    let neg = b.op(F32, Op::FNeg, &[r(sqrt)]);
    let min = b.op(F32, Op::FMin, &[r(neg), r(c)]);
    let max = b.op(F32, Op::FMax, &[r(min), f(1.0e-30)]);
    let rint = b.op(F32, Op::FRint, &[r(max)]);
    let acc = b.op(F32, Op::Mov, &[r(rint)]);
    for cmp in ALL_FCMP {
        let p = b.op(Pred, Op::FCmp(cmp), &[r(a), r(c)]);
        b.assign(acc, Op::Select, &[r(p), r(acc), r(d)]);
    }
    let nan = b.op(F32, Op::Mov, &[Operand::F32(0x7fc0_0001)]);
    let denormal = b.op(F32, Op::Mov, &[Operand::F32(1)]);
    store(
        &mut b,
        Width::V4,
        Space::Global,
        ya,
        &[r(acc), r(rint), r(nan), r(denormal)],
    );
    b.finish();
    k
}

/// Every integer, predicate, conversion and special-register op.
pub fn int_ops() -> Kernel {
    let mut k = kernel(
        "int_ops",
        vec![ptr("out", DType::I32, true), scalar("n")],
        256,
    );
    let mut b = Builder::new(&mut k);
    let out = b.op(U64, Op::Param(0), &[]);
    let n = b.op(U32, Op::Param(1), &[]);
    let i = global_index(&mut b);
    let cta_y = b.op(U32, Op::Special(Special::CtaidY), &[]);
    let nctaid = b.op(U32, Op::Special(Special::NctaidX), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let acc = b.op(U32, Op::Xor, &[r(cta_y), r(nctaid)]);
    let mix = |b: &mut Builder, v: Reg| b.assign(acc, Op::Xor, &[r(acc), r(v)]);

    let sub = b.op(U32, Op::ISub, &[r(i), r(lane)]);
    mix(&mut b, sub);
    let hi = b.op(U32, Op::UMulHi, &[r(i), u(0x9e37_79b9)]);
    mix(&mut b, hi);
    let div = b.op(U32, Op::UDiv, &[r(i), r(n)]);
    mix(&mut b, div);
    let rem = b.op(U32, Op::URem, &[r(i), r(n)]);
    mix(&mut b, rem);
    let div7 = b.op(U32, Op::UDiv, &[r(i), u(7)]);
    mix(&mut b, div7);
    let div8 = b.op(U32, Op::UDiv, &[r(i), u(8)]);
    mix(&mut b, div8);
    let rem8 = b.op(U32, Op::URem, &[r(i), u(8)]);
    mix(&mut b, rem8);
    let shl = b.op(U32, Op::Shl, &[r(i), u(3)]);
    mix(&mut b, shl);
    let shru = b.op(U32, Op::ShrU, &[r(i), r(lane)]);
    mix(&mut b, shru);
    let shrs = b.op(U32, Op::ShrS, &[r(sub), u(2)]);
    mix(&mut b, shrs);
    let shrs_imm = b.op(U32, Op::ShrS, &[u(0x8000_0000), r(lane)]);
    mix(&mut b, shrs_imm);
    let and = b.op(U32, Op::And, &[r(i), u(0xffff)]);
    mix(&mut b, and);
    let or = b.op(U32, Op::Or, &[r(i), r(n)]);
    mix(&mut b, or);
    let not = b.op(U32, Op::Not, &[r(acc)]);
    mix(&mut b, not);

    let mut preds = Vec::new();
    for (cmp, rhs) in [
        (ICmp::Eq, r(n)),
        (ICmp::Ne, u(0)),
        (ICmp::LtU, r(n)),
        (ICmp::LeU, u(100)),
        (ICmp::GtU, r(n)),
        (ICmp::GeU, u(3)),
        (ICmp::LtS, u(u32::MAX)),
        (ICmp::LeS, r(n)),
        (ICmp::GtS, u(0xffff_fff0)),
        (ICmp::GeS, r(lane)),
    ] {
        preds.push(b.op(Pred, Op::ICmp(cmp), &[r(i), rhs]));
    }
    let pand = b.op(Pred, Op::PAnd, &[r(preds[0]), r(preds[1])]);
    let por = b.op(Pred, Op::POr, &[r(pand), r(preds[2])]);
    let pnot = b.op(Pred, Op::PNot, &[r(por)]);
    let psel = b.op(Pred, Op::Select, &[r(preds[3]), r(pnot), r(preds[4])]);
    let mut p = psel;
    for &q in &preds[5..] {
        p = b.op(Pred, Op::PAnd, &[r(p), r(q)]);
    }
    let sel = b.op(U32, Op::Select, &[r(p), r(acc), u(7)]);
    mix(&mut b, sel);

    let fl = b.op(F32, Op::BitsToF32, &[r(acc)]);
    let bits = b.op(U32, Op::F32ToBits, &[r(fl)]);
    mix(&mut b, bits);
    let rni = b.op(U32, Op::CvtRniS32F32, &[r(fl)]);
    mix(&mut b, rni);
    let rzi = b.op(U32, Op::CvtRziS32F32, &[r(fl)]);
    mix(&mut b, rzi);
    let fs = b.op(F32, Op::CvtF32S32, &[r(rni)]);
    let fu = b.op(F32, Op::CvtF32U32, &[r(i)]);
    let bf = b.op(U32, Op::PackBf16x2, &[r(fs), r(fu)]);
    mix(&mut b, bf);
    let hf = b.op(U32, Op::PackF16x2, &[r(fu), r(fs)]);
    mix(&mut b, hf);
    let h = b.op(F32, Op::F16ToF32, &[r(hf)]);
    let hbits = b.op(U32, Op::F32ToBits, &[r(h)]);
    mix(&mut b, hbits);

    let wide = b.op(U64, Op::CvtU64U32, &[r(acc)]);
    let prod = b.op(U64, Op::MulWideU32, &[r(i), r(i)]);
    let sum = b.op(U64, Op::AddU64, &[r(wide), r(prod)]);
    let p64 = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(i), r(n)]);
    let addr = b.op(U64, Op::Select, &[r(p64), r(out), r(out)]);
    let _ = sum;
    let a = gaddr(&mut b, addr, i, 4);
    store(&mut b, Width::B32, Space::Global, a, &[r(acc)]);
    b.finish();
    k
}

/// Every width in both spaces, immediates among stored values, two shared buffers (one
/// unused), a barrier.
pub fn memory() -> Kernel {
    let mut k = kernel("memory", vec![ptr("g", DType::I32, true)], 64);
    let used = k.new_shared(64 * 32, 16);
    let _unused = k.new_shared(128, 4);
    let mut b = Builder::new(&mut k);
    let g = b.op(U64, Op::Param(0), &[]);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let ga = gaddr(&mut b, g, tid, 32);
    let base = b.op(U32, Op::SharedAddr(used), &[]);
    let off = b.op(U32, Op::Shl, &[r(tid), u(5)]);
    let sa = b.op(U32, Op::IAdd, &[r(base), r(off)]);

    let b8 = b.kernel.new_reg(U32);
    let b16 = b.kernel.new_reg(U32);
    let w32 = b.kernel.new_reg(F32);
    let v2 = [b.kernel.new_reg(U32), b.kernel.new_reg(F32)];
    let v4: Vec<Reg> = (0..4).map(|_| b.kernel.new_reg(U32)).collect();
    let loads = [
        (vec![b8], Width::B8, 0),
        (vec![b16], Width::B16, 2),
        (vec![w32], Width::B32, 4),
        (v2.to_vec(), Width::V2, 8),
        (v4.clone(), Width::V4, 16),
    ];
    for (dsts, width, offset) in loads.iter().cloned() {
        b.push(Stmt::Load {
            dsts,
            space: Space::Global,
            width,
            addr: ga,
            offset,
        });
    }
    let stores = [
        (vec![r(b8)], Width::B8, 0),
        (vec![u(0xbeef)], Width::B16, 2),
        (vec![r(w32)], Width::B32, 4),
        (vec![r(v2[0]), f(2.5)], Width::V2, 8),
        (vec![r(v4[0]), u(1), r(v4[2]), r(b16)], Width::V4, 16),
    ];
    for (values, width, offset) in stores.iter().cloned() {
        b.push(Stmt::Store {
            space: Space::Shared,
            width,
            addr: sa,
            offset,
            values,
        });
    }
    b.push(Stmt::Barrier);
    // Read the neighbour's slot back (offset -32 from the next thread's slot).
    let sb = b.op(U32, Op::IAdd, &[r(sa), u(32)]);
    for (dsts, width, offset) in loads.iter().cloned() {
        b.push(Stmt::Load {
            dsts,
            space: Space::Shared,
            width,
            addr: sb,
            offset: offset - 32,
        });
    }
    for (values, width, offset) in stores {
        b.push(Stmt::Store {
            space: Space::Global,
            width,
            addr: ga,
            offset,
            values,
        });
    }
    b.finish();
    k
}

/// Nested loops and every shape of `If` (then only, else only, both, nested).
pub fn control() -> Kernel {
    let mut k = kernel("control", vec![ptr("y", DType::F32, true), scalar("n")], 32);
    let mut b = Builder::new(&mut k);
    let y = b.op(U64, Op::Param(0), &[]);
    let n = b.op(U32, Op::Param(1), &[]);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let acc = b.op(F32, Op::Mov, &[f(0.0)]);
    let i = b.kernel.new_reg(U32);
    let j = b.kernel.new_reg(U32);
    b.open();
    {
        let small = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(i), u(4)]);
        b.open();
        b.assign(acc, Op::FAdd, &[r(acc), f(1.0)]);
        let then_body = b.close();
        b.open();
        b.open();
        b.assign(acc, Op::FMul, &[r(acc), f(0.5)]);
        close_for(&mut b, j, r(i), u(8), u(2));
        let else_body = b.close();
        b.push(Stmt::If {
            cond: small,
            then_body,
            else_body,
        });
        let odd = b.op(U32, Op::And, &[r(i), u(1)]);
        let even = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(odd), u(0)]);
        b.open();
        b.assign(acc, Op::FSub, &[r(acc), f(0.25)]);
        close_if(&mut b, even);
        // Else only, holding a nested if.
        b.open();
        let first = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(tid), u(0)]);
        b.open();
        b.assign(acc, Op::FNeg, &[r(acc)]);
        close_if(&mut b, first);
        let else_only = b.close();
        b.push(Stmt::If {
            cond: even,
            then_body: vec![],
            else_body: else_only,
        });
    }
    close_for(&mut b, i, u(0), r(n), u(1));
    let a = gaddr(&mut b, y, tid, 4);
    store(&mut b, Width::B32, Space::Global, a, &[r(acc)]);
    b.finish();
    k
}

/// A row sum: strided loop, warp butterfly shuffles, partial sums through shared memory,
/// a barrier, and a second shuffle round in warp 0. One CTA per row, 256 threads.
pub fn row_sum() -> Kernel {
    let mut k = kernel(
        "row_sum",
        vec![
            ptr("x", DType::F32, false),
            ptr("y", DType::F32, true),
            scalar("n"),
        ],
        256,
    );
    k.schedule = "row-reduction: 256 threads, thread t sums elements t, t+256, ...;\n\
                  then warp butterfly 16,8,4,2,1; then warp 0 over the 8 warp sums"
        .to_owned();
    let partials = k.new_shared(8 * 4, 4);
    let mut b = Builder::new(&mut k);
    let x = b.op(U64, Op::Param(0), &[]);
    let y = b.op(U64, Op::Param(1), &[]);
    let n = b.op(U32, Op::Param(2), &[]);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let row = b.op(U32, Op::Special(Special::CtaidX), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let warp = b.op(U32, Op::ShrU, &[r(tid), u(5)]);
    let start = b.op(U32, Op::IMulLo, &[r(row), r(n)]);
    let row_ptr = gaddr(&mut b, x, start, 4);
    let acc = b.op(F32, Op::Mov, &[f(0.0)]);
    let i = b.kernel.new_reg(U32);
    b.open();
    let a = gaddr(&mut b, row_ptr, i, 4);
    let v = load(&mut b, F32, Width::B32, Space::Global, a)[0];
    b.assign(acc, Op::FAdd, &[r(acc), r(v)]);
    close_for(&mut b, i, r(tid), r(n), u(256));
    let butterfly = |b: &mut Builder, acc: Reg| {
        for off in [16, 8, 4, 2, 1] {
            let other = b.op(F32, Op::ShflBfly, &[r(acc), u(off)]);
            b.assign(acc, Op::FAdd, &[r(acc), r(other)]);
        }
    };
    butterfly(&mut b, acc);
    let base = b.op(U32, Op::SharedAddr(partials), &[]);
    let lead = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(lane), u(0)]);
    b.open();
    let slot_off = b.op(U32, Op::Shl, &[r(warp), u(2)]);
    let slot = b.op(U32, Op::IAdd, &[r(base), r(slot_off)]);
    store(&mut b, Width::B32, Space::Shared, slot, &[r(acc)]);
    close_if(&mut b, lead);
    b.push(Stmt::Barrier);
    let warp0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(0)]);
    b.open();
    {
        let total = b.op(F32, Op::Mov, &[f(0.0)]);
        let has = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(lane), u(8)]);
        b.open();
        let off = b.op(U32, Op::Shl, &[r(lane), u(2)]);
        let at = b.op(U32, Op::IAdd, &[r(base), r(off)]);
        b.push(Stmt::Load {
            dsts: vec![total],
            space: Space::Shared,
            width: Width::B32,
            addr: at,
            offset: 0,
        });
        close_if(&mut b, has);
        butterfly(&mut b, total);
        let first = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(tid), u(0)]);
        b.open();
        let out = gaddr(&mut b, y, row, 4);
        store(&mut b, Width::B32, Space::Global, out, &[r(total)]);
        close_if(&mut b, first);
    }
    close_if(&mut b, warp0);
    b.finish();
    k
}

/// Elementwise over bf16 and f16 storage: `y = bf16(x * x)` where `x` is bf16, and an f16
/// side output, with a bounds check, a predicate select and a power-of-two division.
pub fn elementwise_bf16() -> Kernel {
    let mut k = kernel(
        "square_bf16",
        vec![
            ptr("x", DType::Bf16, false),
            ptr("y", DType::Bf16, true),
            ptr("z", DType::F16, true),
            scalar("n"),
        ],
        128,
    );
    k.schedule = "elementwise: one element per thread".to_owned();
    let mut b = Builder::new(&mut k);
    let x = b.op(U64, Op::Param(0), &[]);
    let y = b.op(U64, Op::Param(1), &[]);
    let z = b.op(U64, Op::Param(2), &[]);
    let n = b.op(U32, Op::Param(3), &[]);
    let i = global_index(&mut b);
    let inside = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(i), r(n)]);
    b.open();
    let xa = gaddr(&mut b, x, i, 2);
    let h = load(&mut b, U32, Width::B16, Space::Global, xa)[0];
    let bits = b.op(U32, Op::Shl, &[r(h), u(16)]);
    let v = b.op(F32, Op::BitsToF32, &[r(bits)]);
    let sq = b.op(F32, Op::FMul, &[r(v), r(v)]);
    let packed = b.op(U32, Op::PackBf16x2, &[f(0.0), r(sq)]);
    let ya = gaddr(&mut b, y, i, 2);
    store(&mut b, Width::B16, Space::Global, ya, &[r(packed)]);
    // Even elements also go to z as f16 (round trip through F16ToF32 on odd ones).
    let pair = b.op(U32, Op::UDiv, &[r(i), u(2)]);
    let back = b.op(U32, Op::Shl, &[r(pair), u(1)]);
    let even = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(back), r(i)]);
    let big = b.op(Pred, Op::FCmp(FCmp::Gt), &[r(sq), f(1.0)]);
    let keep = b.op(Pred, Op::Select, &[r(even), r(big), r(inside)]);
    let half = b.op(U32, Op::PackF16x2, &[r(sq), r(sq)]);
    let round_trip = b.op(F32, Op::F16ToF32, &[r(half)]);
    let again = b.op(U32, Op::PackF16x2, &[r(round_trip), r(round_trip)]);
    let out = b.op(U32, Op::Select, &[r(keep), r(half), r(again)]);
    let za = gaddr(&mut b, z, i, 2);
    store(&mut b, Width::B16, Space::Global, za, &[r(out)]);
    close_if(&mut b, inside);
    b.finish();
    k
}

/// Immediates in every operand position legalize leaves alone, and the ones it moves (a
/// shuffled value, stored values).
pub fn immediates() -> Kernel {
    let mut k = kernel("immediates", vec![ptr("y", DType::I32, true)], 32);
    let mut b = Builder::new(&mut k);
    let y = b.op(U64, Op::Param(0), &[]);
    let two = b.op(U32, Op::IAdd, &[u(1), u(1)]);
    let p = b.op(Pred, Op::ICmp(ICmp::LtS), &[u(5), r(two)]);
    let fp = b.op(Pred, Op::FCmp(FCmp::Le), &[f(1.5), f(2.5)]);
    let sel = b.op(U32, Op::Select, &[r(p), u(10), u(20)]);
    let fsel = b.op(F32, Op::Select, &[r(fp), f(1.0), f(-1.0)]);
    let cvt = b.op(U32, Op::CvtRziS32F32, &[f(-3.75)]);
    let fcvt = b.op(F32, Op::CvtF32S32, &[u(u32::MAX)]);
    let pack = b.op(U32, Op::PackBf16x2, &[f(1.0), f(-2.0)]);
    let half = b.op(F32, Op::F16ToF32, &[u(0x3c00)]);
    let wide = b.op(U64, Op::MulWideU32, &[u(3), r(sel)]);
    let wide2 = b.op(U64, Op::CvtU64U32, &[u(7)]);
    let sum = b.op(U64, Op::AddU64, &[r(wide), Operand::U64(1 << 40)]);
    let sum = b.op(U64, Op::AddU64, &[r(sum), r(wide2)]);
    let fma = b.op(F32, Op::FFma, &[f(2.0), r(fsel), f(0.5)]);
    let fma = b.op(F32, Op::FAdd, &[r(fma), r(half)]);
    let fma = b.op(F32, Op::FAdd, &[r(fma), r(fcvt)]);
    let shuffled = b.op(U32, Op::ShflBfly, &[u(42), u(1)]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let shuffled_f = b.op(F32, Op::ShflBfly, &[f(3.0), r(lane)]);
    let fbits = b.op(U32, Op::F32ToBits, &[r(fma)]);
    let from_imm = b.op(F32, Op::BitsToF32, &[u(0x3f80_0000)]);
    let imm_mov = b.op(U64, Op::Mov, &[Operand::U64(u64::MAX)]);
    let _ = imm_mov;
    let a = gaddr(&mut b, sum, lane, 16);
    store(
        &mut b,
        Width::V4,
        Space::Global,
        a,
        &[r(cvt), r(pack), r(shuffled), r(fbits)],
    );
    store(
        &mut b,
        Width::V2,
        Space::Global,
        y,
        &[r(shuffled_f), r(from_imm)],
    );
    store_at(
        &mut b,
        Width::V4,
        Space::Global,
        y,
        16,
        &[u(1), f(2.0), u(3), Operand::F32(0x8000_0000)],
    );
    store_at(&mut b, Width::B8, Space::Global, y, -1, &[u(255)]);
    b.finish();
    k
}

/// Every test kernel, by name.
pub fn all() -> Vec<Kernel> {
    vec![
        float_ops(),
        int_ops(),
        memory(),
        control(),
        row_sum(),
        elementwise_bf16(),
        immediates(),
    ]
}
