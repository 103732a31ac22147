//! The executor's per-warp contexts: warps that take different paths, named barriers
//! between a producer and its consumers, and the barrier misuse and deadlocks it reports.

use tessel_ir::kernel::{Builder, ICmp, Kernel, Op, RegType, Space, Special, Stmt, Width};
use tessel_ir::{DType, Reg};
use tessel_ref::{run_kernel, ExecError, ExecOptions};
use tessel_testkit::build::{close_for, close_if, kernel, param_gaddr, ptr, r, store, u};
use tessel_testkit::host::{buf, poison_f32, words};
use RegType::{Pred, U32};

/// `tid`, `lane` and `warp` of the thread.
fn ids(b: &mut Builder) -> (Reg, Reg, Reg) {
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let warp = b.op(U32, Op::ShrU, &[r(tid), u(5)]);
    (tid, lane, warp)
}

fn run(k: &Kernel, words_out: usize) -> Result<Vec<u32>, ExecError> {
    let mut bufs = vec![poison_f32(words_out)];
    run_kernel(k, &mut bufs, &[buf(0)], &ExecOptions::default())?;
    Ok(words(&bufs[0].data))
}

fn expect_err(k: &Kernel) -> ExecError {
    run(k, 1024).expect_err("the kernel must fault")
}

const ITERS: u32 = 6;
const FULL: u32 = 1; // barriers 1, 2: stage s is full
const EMPTY: u32 = 3; // barriers 3, 4: stage s is empty

/// Warp 0 produces `ITERS` rows of 32 words into a two-stage shared ring, warp 1 consumes
/// them: the producer arrives at stage s's FULL barrier after writing it and waits at its
/// EMPTY barrier before writing it again; the consumer waits at FULL, reads, and arrives at
/// EMPTY. Row `it`, lane `l` of CTA `c` is `it·1000 + l + 7c`; the consumer folds its rows
/// as `acc = 3·acc + v` (so every row and its order matter) and writes `acc` per lane.
/// `consumer_first`: the consumer's code comes first in the body, so the lowest-first
/// schedule runs it before the producer has written anything.
fn ring(consumer_first: bool) -> Kernel {
    let mut k = kernel("ring", vec![ptr("out", DType::F32, true)], 64, 2);
    let smem = k.new_shared(2 * 128, 16);
    let mut b = Builder::new(&mut k);
    let (_, lane, warp) = ids(&mut b);
    let cta = b.op(U32, Op::Special(Special::CtaidX), &[]);
    let base = b.op(U32, Op::SharedAddr(smem), &[]);
    let lane4 = b.op(U32, Op::Shl, &[r(lane), u(2)]);
    let mine = b.op(U32, Op::IAdd, &[r(base), r(lane4)]);

    // The consumer.
    b.open();
    let acc = b.op(U32, Op::Mov, &[u(0)]);
    let it = b.kernel.new_reg(U32);
    b.open();
    let stage = b.op(U32, Op::And, &[r(it), u(1)]);
    // Barrier ids are immediates: one arm per stage.
    let is1 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(stage), u(1)]);
    b.push(Stmt::If {
        cond: is1,
        then_body: vec![Stmt::BarSync {
            id: FULL + 1,
            threads: 64,
        }],
        else_body: vec![Stmt::BarSync {
            id: FULL,
            threads: 64,
        }],
    });
    let off = b.op(U32, Op::Shl, &[r(stage), u(7)]);
    let a = b.op(U32, Op::IAdd, &[r(mine), r(off)]);
    let v = b.kernel.new_reg(U32);
    b.push(Stmt::Load {
        dsts: vec![v],
        space: Space::Shared,
        width: Width::B32,
        addr: a,
        offset: 0,
    });
    b.assign(acc, Op::IMulLo, &[r(acc), u(3)]);
    b.assign(acc, Op::IAdd, &[r(acc), r(v)]);
    // Free the stage unless no row will be written to it again.
    let next = b.op(U32, Op::IAdd, &[r(it), u(2)]);
    let again = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(next), u(ITERS)]);
    b.push(Stmt::If {
        cond: again,
        then_body: vec![Stmt::If {
            cond: is1,
            then_body: vec![Stmt::BarArrive {
                id: EMPTY + 1,
                threads: 64,
            }],
            else_body: vec![Stmt::BarArrive {
                id: EMPTY,
                threads: 64,
            }],
        }],
        else_body: vec![],
    });
    close_for(&mut b, it, u(0), u(ITERS), u(1));
    let row = b.op(U32, Op::Shl, &[r(cta), u(5)]);
    let o = b.op(U32, Op::IAdd, &[r(row), r(lane)]);
    let oa = param_gaddr(&mut b, 0, o, 4);
    store(&mut b, Width::B32, Space::Global, oa, &[r(acc)]);
    let consumer = b.close();

    // The producer.
    b.open();
    let it = b.kernel.new_reg(U32);
    b.open();
    let stage = b.op(U32, Op::And, &[r(it), u(1)]);
    let is1 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(stage), u(1)]);
    let reuse = b.op(Pred, Op::ICmp(ICmp::GeU), &[r(it), u(2)]);
    b.push(Stmt::If {
        cond: reuse,
        then_body: vec![Stmt::If {
            cond: is1,
            then_body: vec![Stmt::BarSync {
                id: EMPTY + 1,
                threads: 64,
            }],
            else_body: vec![Stmt::BarSync {
                id: EMPTY,
                threads: 64,
            }],
        }],
        else_body: vec![],
    });
    let v = b.op(U32, Op::IMulLo, &[r(it), u(1000)]);
    let v = b.op(U32, Op::IAdd, &[r(v), r(lane)]);
    let c7 = b.op(U32, Op::IMulLo, &[r(cta), u(7)]);
    let v = b.op(U32, Op::IAdd, &[r(v), r(c7)]);
    let off = b.op(U32, Op::Shl, &[r(stage), u(7)]);
    let a = b.op(U32, Op::IAdd, &[r(mine), r(off)]);
    store(&mut b, Width::B32, Space::Shared, a, &[r(v)]);
    b.push(Stmt::If {
        cond: is1,
        then_body: vec![Stmt::BarArrive {
            id: FULL + 1,
            threads: 64,
        }],
        else_body: vec![Stmt::BarArrive {
            id: FULL,
            threads: 64,
        }],
    });
    close_for(&mut b, it, u(0), u(ITERS), u(1));
    let producer = b.close();

    let want = if consumer_first { 1 } else { 0 };
    let first = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(want)]);
    let (then_body, else_body) = if consumer_first {
        (consumer, producer)
    } else {
        (producer, consumer)
    };
    b.push(Stmt::If {
        cond: first,
        then_body,
        else_body,
    });
    b.finish();
    k
}

fn ring_expected() -> Vec<u32> {
    (0..2u32)
        .flat_map(|c| {
            (0..32u32).map(move |l| {
                (0..ITERS).fold(0u32, |acc, it| {
                    acc.wrapping_mul(3).wrapping_add(it * 1000 + l + 7 * c)
                })
            })
        })
        .collect()
}

#[test]
fn a_consumer_waits_for_its_producer_at_a_named_barrier() {
    // The consumer runs first and must block at FULL until the producer's row is there:
    // without the wait it would read the ring's poison.
    let k = ring(true);
    tessel_ir::verify::verify_kernel(&k, true).unwrap();
    assert_eq!(run(&k, 64).unwrap(), ring_expected());
}

#[test]
fn a_producer_waits_for_its_consumer_before_reusing_a_stage() {
    // The producer runs first and must block at EMPTY before it writes row 2 over row 0:
    // without the wait the consumer would fold row 2 twice and never see row 0.
    let k = ring(false);
    tessel_ir::verify::verify_kernel(&k, true).unwrap();
    assert_eq!(run(&k, 64).unwrap(), ring_expected());
}

/// Warp `w` of 4 runs `2w + 1` iterations of a loop with a shuffle (warp-wide, so the
/// loop's trip count is uniform in each warp) and a branch on the lane; after the loop a
/// barrier, a word per warp through shared memory and a barrier, each thread writes
/// `10·acc + acc of the next warp's lane 0`.
fn per_warp_trip_counts() -> Kernel {
    let mut k = kernel("trips", vec![ptr("out", DType::F32, true)], 128, 1);
    let smem = k.new_shared(16, 4);
    let mut b = Builder::new(&mut k);
    let (tid, lane, warp) = ids(&mut b);
    let acc = b.op(U32, Op::Mov, &[r(lane)]);
    let trips = b.op(U32, Op::Shl, &[r(warp), u(1)]);
    let trips = b.op(U32, Op::IAdd, &[r(trips), u(1)]);
    let it = b.kernel.new_reg(U32);
    b.open();
    let o = b.op(U32, Op::ShflBfly, &[r(acc), u(1)]);
    b.assign(acc, Op::IAdd, &[r(acc), r(o)]);
    b.assign(acc, Op::IAdd, &[r(acc), r(it)]);
    let low = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(lane), r(it)]);
    b.open();
    b.assign(acc, Op::IMulLo, &[r(acc), u(3)]);
    close_if(&mut b, low);
    close_for(&mut b, it, u(0), r(trips), u(1));
    b.push(Stmt::Barrier);
    let base = b.op(U32, Op::SharedAddr(smem), &[]);
    let is0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(lane), u(0)]);
    b.open();
    let off = b.op(U32, Op::Shl, &[r(warp), u(2)]);
    let a = b.op(U32, Op::IAdd, &[r(base), r(off)]);
    store(&mut b, Width::B32, Space::Shared, a, &[r(acc)]);
    close_if(&mut b, is0);
    b.push(Stmt::Barrier);
    let nxt = b.op(U32, Op::IAdd, &[r(warp), u(1)]);
    let nxt = b.op(U32, Op::And, &[r(nxt), u(3)]);
    let off = b.op(U32, Op::Shl, &[r(nxt), u(2)]);
    let a = b.op(U32, Op::IAdd, &[r(base), r(off)]);
    let other = b.kernel.new_reg(U32);
    b.push(Stmt::Load {
        dsts: vec![other],
        space: Space::Shared,
        width: Width::B32,
        addr: a,
        offset: 0,
    });
    let v = b.op(U32, Op::IMulLo, &[r(acc), u(10)]);
    let v = b.op(U32, Op::IAdd, &[r(v), r(other)]);
    let oa = param_gaddr(&mut b, 0, tid, 4);
    store(&mut b, Width::B32, Space::Global, oa, &[r(v)]);
    b.finish();
    k
}

#[test]
fn warps_run_their_own_trip_counts_and_meet_at_the_barrier() {
    let k = per_warp_trip_counts();
    tessel_ir::verify::verify_kernel(&k, true).unwrap();
    let mut acc: Vec<u32> = (0..128u32).map(|t| t % 32).collect();
    for w in 0..4usize {
        for it in 0..(2 * w as u32 + 1) {
            let before: Vec<u32> = acc[32 * w..32 * w + 32].to_vec();
            for l in 0..32usize {
                let mut a = before[l].wrapping_add(before[l ^ 1]).wrapping_add(it);
                if (l as u32) < it {
                    a = a.wrapping_mul(3);
                }
                acc[32 * w + l] = a;
            }
        }
    }
    let want: Vec<u32> = (0..128usize)
        .map(|t| {
            let next = ((t / 32 + 1) % 4) * 32;
            acc[t].wrapping_mul(10).wrapping_add(acc[next])
        })
        .collect();
    assert_eq!(run(&k, 128).unwrap(), want);
}

/// `if warp == 0 { then } else { other }`, in a CTA of `warps` warps.
fn by_warp(name: &str, warps: u32, then_body: Vec<Stmt>, else_body: Vec<Stmt>) -> Kernel {
    let mut k = kernel(name, vec![ptr("out", DType::F32, true)], 32 * warps, 1);
    let mut b = Builder::new(&mut k);
    let (_, _, warp) = ids(&mut b);
    let w0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(0)]);
    b.push(Stmt::If {
        cond: w0,
        then_body,
        else_body,
    });
    b.finish();
    k
}

fn deadlock_msg(e: ExecError) -> String {
    match e {
        ExecError::Deadlock { msg, .. } => msg,
        e => panic!("expected a deadlock, got {e}"),
    }
}

#[test]
fn warps_waiting_at_different_named_barriers_are_a_deadlock() {
    let k = by_warp(
        "crossed",
        2,
        vec![Stmt::BarSync { id: 1, threads: 64 }],
        vec![Stmt::BarSync { id: 2, threads: 64 }],
    );
    tessel_ir::verify::verify_kernel(&k, true).unwrap();
    let e = expect_err(&k);
    assert_eq!(
        e.to_string(),
        "kernel `crossed`, CTA 0: deadlock: warp 0 waiting at body[4].then[0] `bar.sync 1, 64` \
         (barrier 1: 1 of 2 warps arrived); warp 1 waiting at body[4].else[0] `bar.sync 2, 64` \
         (barrier 2: 1 of 2 warps arrived)"
    );
}

#[test]
fn a_barrier_that_some_warps_skip_is_a_deadlock() {
    // Warp 0 waits at the CTA barrier; warp 1 never comes (a GPU hangs or is undefined).
    let k = by_warp("skipped", 2, vec![Stmt::Barrier], vec![]);
    assert_eq!(
        deadlock_msg(expect_err(&k)),
        "warp 0 waiting at body[4].then[0] `barrier` (1 of 2 warps arrived); warp 1 exited"
    );
    // A named barrier counting more threads than ever arrive: warp 2 leaves first.
    let mut k = kernel("short", vec![ptr("out", DType::F32, true)], 96, 1);
    let mut b = Builder::new(&mut k);
    let (_, _, warp) = ids(&mut b);
    let w0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(0)]);
    let w2 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(warp), u(2)]);
    b.push(Stmt::If {
        cond: w2,
        then_body: vec![],
        else_body: vec![Stmt::If {
            cond: w0,
            then_body: vec![Stmt::BarArrive { id: 5, threads: 96 }],
            else_body: vec![Stmt::BarSync { id: 5, threads: 96 }],
        }],
    });
    b.finish();
    assert_eq!(
        deadlock_msg(expect_err(&k)),
        "warp 1 waiting at body[5].else[0].else[0] `bar.sync 5, 96` (barrier 5: 2 of 3 warps \
         arrived); warps 0, 2 exited"
    );
}

#[test]
fn a_barrier_inside_a_loop_of_per_warp_trip_counts_is_a_deadlock() {
    // Warp w loops w + 1 times with a CTA barrier in the body: in its last iterations only
    // the later warps arrive.
    let mut k = kernel("loop_bar", vec![ptr("out", DType::F32, true)], 64, 1);
    let mut b = Builder::new(&mut k);
    let (_, _, warp) = ids(&mut b);
    let trips = b.op(U32, Op::IAdd, &[r(warp), u(1)]);
    let it = b.kernel.new_reg(U32);
    b.open();
    b.push(Stmt::Barrier);
    close_for(&mut b, it, u(0), r(trips), u(1));
    b.finish();
    assert_eq!(
        deadlock_msg(expect_err(&k)),
        "warp 1 waiting at body[4].for[0] `barrier` (1 of 2 warps arrived); warp 0 exited"
    );
}

#[test]
fn barrier_misuse_is_reported_with_its_statements() {
    // `barrier` at two statements (bar.sync 0 is .aligned: one instruction for the CTA).
    let k = by_warp("two_barriers", 2, vec![Stmt::Barrier], vec![Stmt::Barrier]);
    assert_eq!(
        expect_err(&k).to_string(),
        "kernel `two_barriers`, CTA 0: warp 1 reached body[4].else[0] `barrier` while warp 0 \
         wait at body[4].then[0] `barrier`: every warp must reach one `barrier`"
    );
    // One phase of barrier 1 with two counts.
    let k = by_warp(
        "counts",
        3,
        vec![Stmt::BarArrive { id: 1, threads: 64 }],
        vec![Stmt::BarSync { id: 1, threads: 96 }],
    );
    match expect_err(&k) {
        ExecError::BarrierMismatch { msg, .. } => assert_eq!(
            msg,
            "warp 1 arrives at barrier 1 by body[4].else[0] `bar.sync 1, 96` for 96 threads, \
             but its phase counts 64 (first arrival at body[4].then[0] `bar.arrive 1, 64`)"
        ),
        e => panic!("{e}"),
    }
    // Half a warp at a named barrier.
    let mut k = kernel("half", vec![ptr("out", DType::F32, true)], 64, 1);
    let mut b = Builder::new(&mut k);
    let (_, lane, _) = ids(&mut b);
    let low = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(lane), u(16)]);
    b.open();
    b.push(Stmt::BarSync { id: 1, threads: 64 });
    close_if(&mut b, low);
    b.finish();
    assert_eq!(
        expect_err(&k),
        ExecError::WarpDivergent {
            kernel: "half".into(),
            cta: 0,
            warp: 0,
            inactive: 16,
            op: "bar.sync",
        }
    );
}

#[test]
fn named_barriers_are_checked_before_the_run() {
    for (id, threads) in [(0, 64), (16, 64), (1, 48), (1, 0), (1, 96)] {
        let k = by_warp("bad", 2, vec![Stmt::BarSync { id, threads }], vec![]);
        assert!(
            matches!(expect_err(&k), ExecError::Malformed { .. }),
            "bar.sync {id}, {threads}"
        );
    }
}

#[test]
fn the_default_order_is_cta_wide_lockstep_even_for_a_race() {
    // Lane 0 of warp w writes `100w + it` to one shared word in each of its 7 - 2w
    // iterations, and to a second word `1 + w` (warps 0, 1: the then-arm) or `10 + w`
    // (warps 2, 3: the else-arm). A race, which a GPU leaves to its scheduling; the
    // executor's order is lockstep over the CTA: every warp's iteration i before any
    // warp's i + 1 (the last write is warp 0's iteration 6), the then-arm before the
    // else-arm (the last write is warp 3's). Warp after warp would give 300 and 2.
    let mut k = kernel("race", vec![ptr("out", DType::F32, true)], 128, 1);
    let smem = k.new_shared(8, 4);
    let mut b = Builder::new(&mut k);
    let (tid, lane, warp) = ids(&mut b);
    let base = b.op(U32, Op::SharedAddr(smem), &[]);
    let lane0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(lane), u(0)]);
    let trips = b.op(U32, Op::Shl, &[r(warp), u(1)]);
    let trips = b.op(U32, Op::ISub, &[u(7), r(trips)]);
    let it = b.kernel.new_reg(U32);
    b.open();
    b.open();
    let v = b.op(U32, Op::IMulLo, &[r(warp), u(100)]);
    let v = b.op(U32, Op::IAdd, &[r(v), r(it)]);
    store(&mut b, Width::B32, Space::Shared, base, &[r(v)]);
    close_if(&mut b, lane0);
    close_for(&mut b, it, u(0), r(trips), u(1));
    let low = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(warp), u(2)]);
    let arm = |b: &mut Builder, add: u32| {
        b.open();
        b.open();
        let v = b.op(U32, Op::IAdd, &[r(warp), u(add)]);
        tessel_testkit::build::store_at(b, Width::B32, Space::Shared, base, 4, &[r(v)]);
        close_if(b, lane0);
        b.close()
    };
    let then_body = arm(&mut b, 1);
    let else_body = arm(&mut b, 10);
    b.push(Stmt::If {
        cond: low,
        then_body,
        else_body,
    });
    b.push(Stmt::Barrier);
    let t0 = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(tid), u(2)]);
    b.open();
    let off = b.op(U32, Op::Shl, &[r(tid), u(2)]);
    let a = b.op(U32, Op::IAdd, &[r(base), r(off)]);
    let v = b.kernel.new_reg(U32);
    b.push(Stmt::Load {
        dsts: vec![v],
        space: Space::Shared,
        width: Width::B32,
        addr: a,
        offset: 0,
    });
    let oa = param_gaddr(&mut b, 0, tid, 4);
    store(&mut b, Width::B32, Space::Global, oa, &[r(v)]);
    close_if(&mut b, t0);
    b.finish();
    assert_eq!(&run(&k, 2).unwrap()[..], &[6, 13]);
}
