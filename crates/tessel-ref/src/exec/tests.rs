//! Tests of the executor's internals: the per-warp scheduler's waits (no kernel-IR
//! statement polls yet, so a test-only instruction stands in for `mbarrier.try_wait`) and
//! the lockstep order against digests of the structured interpreter it replaced.

use super::cta::Cta;
use super::flat::Inst;
use super::memory::{GlobalBuf, GlobalMem};
use super::slots::{assign_slots, Action, SlotKernel};
use super::{launch_params, ExecError};
use tessel_ir::kernel::{
    Builder, ICmp, Kernel, LaunchArg, Op, Operand, ParamKind, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{BufferId, DType, Reg};
use tessel_testkit::build::{kernel, param_gaddr, ptr, r, store, u};

/// The `r32` slot of a 32-bit register: its place among the kernel's 32-bit registers.
fn slot32(k: &Kernel, reg: Reg) -> u32 {
    k.regs
        .iter()
        .take_while(|(x, _)| *x != reg)
        .filter(|(_, t)| **t != RegType::U64)
        .count() as u32
}

/// Runs CTA 0 of `sk` over `bufs` (every buffer writable); the buffers after the run.
fn run_cta(
    sk: &SlotKernel,
    bufs: &[Vec<u8>],
    args: &[LaunchArg],
) -> (Result<u64, ExecError>, Vec<Vec<u8>>) {
    let mem = GlobalMem {
        bufs: bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                GlobalBuf::new(format!("buf{i}"), Some(b), b.len() as u64, false).unwrap()
            })
            .collect(),
    };
    let params = launch_params(sk, &mem, args).unwrap();
    let mut cta = Cta::new(sk, &mem, &params);
    let mut res = Ok(0);
    let grid: u64 = sk.grid.iter().map(|&g| g as u64).product();
    for c in 0..grid {
        if let Err(e) = cta.run(c) {
            res = Err(e);
            break;
        }
    }
    let res = res.map(|_| cta.lane_instructions);
    (
        res,
        mem.bufs.iter().map(|b| b.to_bytes().unwrap()).collect(),
    )
}

/// Warp 0 waits until the shared flag of its lane is `want`, then copies the shared data
/// word of its lane to `out`; warp 1 writes the data (`100 + lane`), then the flag
/// (`flag`). The wait stands where the marker `cp.async.wait 77` is.
fn flag_kernel(flag: u32) -> SlotKernel {
    let mut k = kernel("flag", vec![ptr("out", DType::F32, true)], 64, 1);
    let flags = k.new_shared(128, 4);
    let data = k.new_shared(128, 4);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let lane = b.op(RegType::U32, Op::Special(Special::LaneId), &[]);
    let warp = b.op(RegType::U32, Op::ShrU, &[r(tid), u(5)]);
    let l4 = b.op(RegType::U32, Op::Shl, &[r(lane), u(2)]);
    let fbase = b.op(RegType::U32, Op::SharedAddr(flags), &[]);
    let fa = b.op(RegType::U32, Op::IAdd, &[r(fbase), r(l4)]);
    let dbase = b.op(RegType::U32, Op::SharedAddr(data), &[]);
    let da = b.op(RegType::U32, Op::IAdd, &[r(dbase), r(l4)]);
    let want = b.op(RegType::U32, Op::Mov, &[u(1)]);
    let w0 = b.op(RegType::Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(0)]);
    // Warp 0: wait, read, store.
    b.open();
    b.push(Stmt::CpAsyncWait(77));
    let v = b.kernel.new_reg(RegType::U32);
    b.push(Stmt::Load {
        dsts: vec![v],
        space: Space::Shared,
        width: Width::B32,
        addr: da,
        offset: 0,
    });
    let oa = param_gaddr(&mut b, 0, lane, 4);
    store(&mut b, Width::B32, Space::Global, oa, &[r(v)]);
    let then_body = b.close();
    // Warp 1: data, then flag.
    b.open();
    let d = b.op(RegType::U32, Op::IAdd, &[r(lane), u(100)]);
    store(&mut b, Width::B32, Space::Shared, da, &[r(d)]);
    store(&mut b, Width::B32, Space::Shared, fa, &[Operand::U32(flag)]);
    let else_body = b.close();
    b.push(Stmt::If {
        cond: w0,
        then_body,
        else_body,
    });
    b.finish();
    let (addr, value) = (slot32(&k, fa), slot32(&k, want));
    let mut sk = assign_slots(&k).unwrap();
    let at = sk
        .code
        .insts
        .iter()
        .position(|i| matches!(i, Inst::Do(Action::CpAsyncWait(77))))
        .unwrap();
    sk.code.sites.push("body[13].then[0] `wait`".into());
    let site = sk.code.sites.len() as u32 - 1;
    sk.code.insts[at] = Inst::WaitWord { addr, value, site };
    sk
}

#[test]
fn a_failed_wait_yields_to_the_other_warps() {
    // Warp 0 comes first and its flag is not set: it must let warp 1 run, then go on.
    let sk = flag_kernel(1);
    let (res, bufs) = run_cta(
        &sk,
        &[vec![0; 128]],
        &[LaunchArg::Buffer(BufferId::from_u32(0))],
    );
    res.unwrap();
    let out: Vec<u32> = bufs[0]
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(out, (100..132).collect::<Vec<u32>>());
}

#[test]
fn a_wait_that_nothing_satisfies_is_a_deadlock() {
    let sk = flag_kernel(2);
    let (res, _) = run_cta(
        &sk,
        &[vec![0; 128]],
        &[LaunchArg::Buffer(BufferId::from_u32(0))],
    );
    assert_eq!(
        res.unwrap_err().to_string(),
        "kernel `flag`, CTA 0: deadlock: warp 0 waiting at body[13].then[0] `wait` (its condition does not hold); warp 1 exited"
    );
}

#[test]
fn a_named_barrier_phase_left_open_at_exit_is_an_error() {
    // Warp 1 arrives at barrier 3 for 64 threads; warp 0 never waits there. With
    // `matched`, warp 0 does (`bar.sync 3, 64`) and the CTA runs.
    for matched in [true, false] {
        let mut k = kernel("open", vec![ptr("out", DType::F32, true)], 64, 1);
        let mut b = Builder::new(&mut k);
        let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
        let warp = b.op(RegType::U32, Op::ShrU, &[r(tid), u(5)]);
        let w1 = b.op(RegType::Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(1)]);
        let else_body = match matched {
            true => vec![Stmt::BarSync { id: 3, threads: 64 }],
            false => vec![],
        };
        b.push(Stmt::If {
            cond: w1,
            then_body: vec![Stmt::BarArrive { id: 3, threads: 64 }],
            else_body,
        });
        b.finish();
        let sk = assign_slots(&k).unwrap();
        let (res, _) = run_cta(
            &sk,
            &[vec![0; 128]],
            &[LaunchArg::Buffer(BufferId::from_u32(0))],
        );
        match matched {
            true => {
                res.unwrap();
            }
            false => {
                let e = res.unwrap_err().to_string();
                assert!(
                    e.contains(
                        "the CTA exits with barrier 3's phase open: 32 of 64 threads arrived"
                    ),
                    "{e}"
                );
            }
        }
    }
}

/// Buffers and arguments for any kernel: 64 KiB of seeded bytes per pointer, `n` for
/// every scalar.
fn inputs(k: &Kernel, seed: u64, n: u32) -> (Vec<Vec<u8>>, Vec<LaunchArg>) {
    let mut bufs = Vec::new();
    let mut args = Vec::new();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for p in &k.params {
        match p.kind {
            ParamKind::Ptr { .. } => {
                let bytes = (0..65536)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Mostly small f32 and bf16 values, some raw bits.
                        (x >> 56) as u8 & if x & 3 == 0 { 0xFF } else { 0x3F }
                    })
                    .collect();
                args.push(LaunchArg::Buffer(BufferId::from_u32(bufs.len() as u32)));
                bufs.push(bytes);
            }
            ParamKind::U32 => args.push(LaunchArg::U32(n)),
            ParamKind::TensorMap => unreachable!("the digested kernels take no tensor map"),
        }
    }
    (bufs, args)
}

/// FNV-1a 64 of a run: its lane count or fault, then every buffer's bytes.
fn digest(run: &(Result<u64, ExecError>, Vec<Vec<u8>>)) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    match &run.0 {
        Ok(lanes) => eat(&lanes.to_le_bytes()),
        Err(e) => eat(e.to_string().as_bytes()),
    }
    for b in &run.1 {
        eat(b);
    }
    h
}

/// Digests ([`digest`]) of every testkit kernel's run on [`inputs`] by the structured
/// interpreter in CTA-wide lockstep, recorded from it before it was removed: the per-warp
/// interpreter's default order must give the same lane counts, faults and bytes.
const LOCKSTEP_DIGESTS: &[(&str, u64, u32, u64)] = &[
    ("float_ops", 1, 64, 0x6d800bfd2155f255),
    ("float_ops", 2, 1000, 0x804df457f1e42aaf),
    ("float_ops", 3, 4099, 0xe6df7a3fbce4395d),
    ("int_ops", 1, 64, 0xfface2f0db9f9279),
    ("int_ops", 2, 1000, 0xb3e9c7cf7d4aac67),
    ("int_ops", 3, 4099, 0x5b43112b2d0f0422),
    ("memory", 1, 64, 0x4e1576ea8b6a7686),
    ("memory", 2, 1000, 0xc0740ee8e0b425ba),
    ("memory", 3, 4099, 0x708ed9eecde36fb7),
    ("control", 1, 64, 0xc0fa3201939c8623),
    ("control", 2, 1000, 0xb5f10203bf99c533),
    ("control", 3, 4099, 0x2c29e4bf3b81fb7a),
    ("row_sum", 1, 64, 0xdf02b04383fb4ceb),
    ("row_sum", 2, 1000, 0x2ce01fbb9f6ed596),
    ("row_sum", 3, 4099, 0xd8a96e56ef6acf4b),
    ("square_bf16", 1, 64, 0x9657a54b0309b5a0),
    ("square_bf16", 2, 1000, 0x622b5fb2e458729a),
    ("square_bf16", 3, 4099, 0xd00f6dcb06661126),
    ("immediates", 1, 64, 0xc7c2ce0408b32db3),
    ("immediates", 2, 1000, 0x3332b1e9bb656567),
    ("immediates", 3, 4099, 0x7c409dbd0371f06c),
    ("mma_bf16", 1, 64, 0xf4caf1cca4adadc6),
    ("mma_bf16", 2, 1000, 0xd75a13b2f733aba3),
    ("mma_bf16", 3, 4099, 0x96b8a998250ae539),
    ("mma_f16", 1, 64, 0x497404843008b4ce),
    ("mma_f16", 2, 1000, 0xa41aea9e8793e088),
    ("mma_f16", 3, 4099, 0xd933580a7c873b14),
    ("mma_tf32", 1, 64, 0x752d3c83c541176f),
    ("mma_tf32", 2, 1000, 0xb8fcb07d2f551620),
    ("mma_tf32", 3, 4099, 0x588f89cc3c40e9f7),
    ("ldmatrix_all", 1, 64, 0x846d15bdc51bf25d),
    ("ldmatrix_all", 2, 1000, 0x9174b721d24f8590),
    ("ldmatrix_all", 3, 4099, 0x2df4bdb0f9591d75),
    ("cp_async_tail", 1, 64, 0xdea9e1659939848a),
    ("cp_async_tail", 2, 1000, 0x4d3dc771d1cf0f0f),
    ("cp_async_tail", 3, 4099, 0x7d3a00799e23c1e9),
    ("gemm_bf16", 1, 64, 0xaaf3751fa7d60b93),
    ("gemm_bf16", 2, 1000, 0x05eed0044f1045d1),
    ("gemm_bf16", 3, 4099, 0x2f856977a0670ec4),
];

#[test]
fn the_lockstep_order_keeps_the_structured_interpreters_results() {
    let mut kernels = tessel_testkit::kernels::all();
    kernels.extend(tessel_testkit::mma::all());
    let mut runs = LOCKSTEP_DIGESTS.iter();
    for k in &kernels {
        let sk = assign_slots(k).unwrap();
        for (seed, n) in [(1, 64), (2, 1000), (3, 4099)] {
            let &(name, s, nn, want) = runs.next().expect("a digest per run");
            assert_eq!((name, s, nn), (k.name.as_str(), seed, n));
            let (bufs, args) = inputs(k, seed, n);
            let got = digest(&run_cta(&sk, &bufs, &args));
            assert_eq!(got, want, "kernel {} seed {seed}: {got:#018x}", k.name);
        }
    }
    assert!(runs.next().is_none());
}
