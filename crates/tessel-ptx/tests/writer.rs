//! The PTX writer on hand-built kernels: the instruction rows each op prints, naming
//! stability, errors, snapshots; every kernel printed here is also assembled by ptxas for
//! sm_90 (see `common::emit`).

mod common;

use common::{assemble, assert_exact, emit, legalized, renumbered};
use tessel_ir::kernel::{Builder, Kernel, MathFn, Op, Operand, RegType, Space, Stmt, Width};
use tessel_ptx::{write_kernel, write_module, PtxError, PtxOptions};
use tessel_testkit::build::{f, r, u};
use tessel_testkit::kernels::{self, all};

/// Asserts that each row appears as a whole line of `ptx` (after indentation).
fn assert_rows(ptx: &str, rows: &[&str]) {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    for row in rows {
        assert!(lines.contains(row), "missing row `{row}` in:\n{ptx}");
    }
}

/// Asserts that an instruction with this opcode-and-modifiers prefix appears.
fn assert_opcodes(ptx: &str, opcodes: &[&str]) {
    for op in opcodes {
        let with_space = format!("{op} ");
        assert!(
            ptx.lines()
                .map(str::trim)
                .any(|l| l.starts_with(&with_space) || l.contains(&format!(" {with_space}"))),
            "missing `{op}` in:\n{ptx}"
        );
    }
}

#[test]
fn float_rows() {
    let (ptx, _) = emit(&kernels::float_ops());
    assert_opcodes(
        &ptx,
        &[
            "add.rn.f32",
            "sub.rn.f32",
            "mul.rn.f32",
            "div.rn.f32",
            "fma.rn.f32",
            "sqrt.rn.f32",
            "neg.f32",
            "abs.f32",
            "min.NaN.f32",
            "max.NaN.f32",
            "cvt.rni.f32.f32",
            "setp.eq.f32",
            "setp.neu.f32",
            "setp.lt.f32",
            "setp.le.f32",
            "setp.gt.f32",
            "setp.ge.f32",
            "setp.nan.f32",
            "selp.f32",
            "mov.f32",
            "ld.global.v4.b32",
            "st.global.v4.b32",
        ],
    );
    // Exact immediates: -0.0, a NaN payload, the smallest denormal.
    assert!(ptx.contains(", 0f80000000;"), "{ptx}");
    assert!(ptx.contains(", 0f7FC00001;"), "{ptx}");
    assert!(ptx.contains(", 0f00000001;"), "{ptx}");
    // The IR `a ? b : c` is `selp d, b, c, a`.
    assert!(
        ptx.lines().filter(|l| l.contains("selp.f32")).all(|l| l
            .trim_end_matches(';')
            .rsplit(", ")
            .next()
            .is_some_and(|p| p.starts_with("%p"))),
        "{ptx}"
    );
}

#[test]
fn integer_predicate_and_conversion_rows() {
    let (ptx, _) = emit(&kernels::int_ops());
    assert_opcodes(
        &ptx,
        &[
            "add.u32",
            "sub.u32",
            "mul.lo.u32",
            "mul.hi.u32",
            "div.u32",
            "rem.u32",
            "shl.b32",
            "shr.u32",
            "shr.s32",
            "and.b32",
            "or.b32",
            "xor.b32",
            "not.b32",
            "setp.eq.u32",
            "setp.ne.u32",
            "setp.lo.u32",
            "setp.ls.u32",
            "setp.hi.u32",
            "setp.hs.u32",
            "setp.lt.s32",
            "setp.le.s32",
            "setp.gt.s32",
            "setp.ge.s32",
            "and.pred",
            "or.pred",
            "not.pred",
            "selp.b32",
            "selp.b64",
            "mov.b32",
            "cvt.rni.s32.f32",
            "cvt.rzi.s32.f32",
            "cvt.rn.f32.s32",
            "cvt.rn.f32.u32",
            "cvt.rn.bf16x2.f32",
            "cvt.rn.f16x2.f32",
            "cvt.u16.u32",
            "cvt.f32.f16",
            "cvt.u64.u32",
            "add.u64",
            "mul.wide.u32",
            "ld.param.u64",
            "cvta.to.global.u64",
            "ld.param.u32",
        ],
    );
    for sr in [
        "%tid.x",
        "%ntid.x",
        "%ctaid.x",
        "%ctaid.y",
        "%nctaid.x",
        "%laneid",
    ] {
        let row = format!(", {sr};");
        assert!(
            ptx.lines()
                .any(|l| l.trim().starts_with("mov.u32 %r") && l.ends_with(&row)),
            "{sr}: {ptx}"
        );
    }
    // Signed comparisons print u32 immediates as their signed value.
    assert!(
        ptx.contains("setp.lt.s32") && ptx.contains(", -1;"),
        "{ptx}"
    );
    assert!(ptx.contains(", -16;"), "{ptx}");
    assert!(
        ptx.contains("shr.s32 %r") && ptx.contains(", -2147483648, %r"),
        "{ptx}"
    );
    // Power-of-two division and remainder are shifts and masks after legalize.
    assert!(
        ptx.contains(", 7;")
            && ptx
                .lines()
                .any(|l| l.contains("div.u32") && l.ends_with(", 7;"))
    );
    assert!(
        !ptx.lines()
            .any(|l| l.contains("div.u32") && l.ends_with(", 8;")),
        "{ptx}"
    );
    assert!(
        !ptx.lines()
            .any(|l| l.contains("rem.u32") && l.ends_with(", 8;")),
        "{ptx}"
    );
    assert!(
        ptx.lines()
            .any(|l| l.contains("shr.u32") && l.ends_with(", 3;")),
        "{ptx}"
    );
    assert!(
        ptx.lines()
            .any(|l| l.contains("and.b32") && l.ends_with(", 7;")),
        "{ptx}"
    );
    // The predicate select became logic: no selp.pred.
    assert!(!ptx.contains("selp.pred"), "{ptx}");
    // The f16 half goes through a .b16 scratch register.
    assert!(ptx.contains(".reg .b16 %h<"), "{ptx}");
}

#[test]
fn memory_rows_every_width_and_space() {
    let (ptx, report) = emit(&kernels::memory());
    for space in ["global", "shared"] {
        for width in ["u8", "u16", "b32", "v2.b32", "v4.b32"] {
            assert_opcodes(
                &ptx,
                &[
                    &format!("ld.{space}.{width}"),
                    &format!("st.{space}.{width}"),
                ],
            );
        }
    }
    assert_rows(&ptx, &["bar.sync 0;", "mov.u32 %r1, smem0;"]);
    // Negative offsets, PTX-style.
    assert!(ptx.contains("+-32]"), "{ptx}");
    // Both buffers declared, the used one first; the unused one still takes its bytes.
    let used = ptx.find(".shared .align 16 .b8 smem0[2048];").expect(&ptx);
    let unused = ptx.find(".shared .align 4 .b8 smem1[128];").expect(&ptx);
    assert!(used < unused);
    // Stored immediates went into registers first (legalize).
    assert!(
        !ptx.lines()
            .any(|l| l.trim().starts_with("st.") && l.contains("0f")),
        "{ptx}"
    );
    if let Some(report) = report {
        let k = report.function("memory").expect("reported");
        assert_eq!(k.shared_bytes, 2048 + 128, "{}", report.log);
        assert_eq!(k.barriers, 1);
    }
}

#[test]
fn loops_and_nested_ifs() {
    let (ptx, _) = emit(&kernels::control());
    let expected_labels = [
        "$L__for0_head:",
        "$L__if1_else:",
        "$L__for2_head:",
        "$L__for2_end:",
        "$L__if1_end:",
        "$L__if3_end:",
        "$L__if5_end:",
        "$L__if4_end:",
        "$L__for0_end:",
    ];
    let positions: Vec<usize> = expected_labels
        .iter()
        .map(|l| {
            ptx.lines()
                .position(|line| line == *l)
                .unwrap_or_else(|| panic!("label {l} missing:\n{ptx}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "label order: {ptx}"
    );
    assert_rows(
        &ptx,
        &[
            "bra $L__for0_head;",
            "bra $L__for2_head;",
            "bra $L__if1_end;",
        ],
    );
    // Loop test and exit.
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let head = lines
        .iter()
        .position(|l| *l == "$L__for0_head:")
        .expect("head");
    assert!(
        lines[head + 1].starts_with("setp.lo.u32 %p"),
        "{}",
        lines[head + 1]
    );
    assert!(lines[head + 2].starts_with("@!%p") && lines[head + 2].ends_with("bra $L__for0_end;"));
    // The else-only if branches on the true predicate.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("@%p") && l.ends_with("bra $L__if4_end;")),
        "{ptx}"
    );
    assert!(!ptx.contains("bra.uni"), "no branch is claimed uniform");
}

#[test]
fn shuffles_and_shared_reduction() {
    let (ptx, report) = emit(&kernels::row_sum());
    for off in [16, 8, 4, 2, 1] {
        assert!(
            ptx.lines()
                .any(|l| l.trim().starts_with("shfl.sync.bfly.b32 %f")
                    && l.ends_with(&format!(", {off}, 0x1f, 0xffffffff;"))),
            "shuffle by {off} missing:\n{ptx}"
        );
    }
    assert_rows(&ptx, &["bar.sync 0;"]);
    if let Some(report) = report {
        let k = report.function("row_sum").expect("reported");
        assert_eq!(k.shared_bytes, 32);
    }
}

#[test]
fn immediates_where_ptx_allows_them() {
    let (ptx, _) = emit(&kernels::immediates());
    assert_rows(
        &ptx,
        &[
            "add.u32 %r0, 1, 1;",
            "setp.le.f32 %p1, 0f3FC00000, 0f40200000;",
            "cvt.rzi.s32.f32 %r2, 0fC0700000;",
            "cvt.rn.f32.s32 %f1, -1;",
            "cvt.rn.bf16x2.f32 %r3, 0f3F800000, 0fC0000000;",
            "cvt.u16.u32 %h0, 15360;",
            "mul.wide.u32 %rd1, 3, %r1;",
            "cvt.u64.u32 %rd2, 7;",
            "mov.b32 %f8, 1065353216;",
            "mov.b64 %rd5, 18446744073709551615;",
        ],
    );
    // The shuffled value and stored values were moved into registers by legalize.
    assert!(
        ptx.lines()
            .filter(|l| l.contains("shfl.sync"))
            .all(|l| l.split(", ").nth(1).is_some_and(|a| a.starts_with('%'))),
        "{ptx}"
    );
}

#[test]
fn header_and_entry_from_options() {
    let k = legalized(&kernels::row_sum());
    let ptx = write_kernel(&k, &PtxOptions::default()).unwrap();
    assert!(
        ptx.contains("\n.version 8.0\n.target sm_90\n.address_size 64\n"),
        "{ptx}"
    );
    assert!(ptx.contains(".visible .entry row_sum(\n    .param .u64 row_sum_param_0, // x: f32*\n"));
    assert!(ptx.contains("    .param .u32 row_sum_param_2 // n: u32\n)\n.reqntid 256, 1, 1\n{"));
    let opts = PtxOptions {
        version: (8, 4),
        target: "sm_90a".to_owned(),
        ..PtxOptions::default()
    };
    let ptx = write_kernel(&k, &opts).unwrap();
    assert!(ptx.contains("\n.version 8.4\n.target sm_90a\n"), "{ptx}");
    common::assemble_for(&ptx, "sm_90a");
    let bad = PtxOptions {
        address_size: 32,
        ..PtxOptions::default()
    };
    assert!(matches!(write_kernel(&k, &bad), Err(PtxError::Options(_))));
}

#[test]
fn module_of_several_kernels() {
    let kernels: Vec<Kernel> = all().iter().map(legalized).collect();
    let refs: Vec<&Kernel> = kernels.iter().collect();
    let ptx = write_module(&refs, &PtxOptions::default()).unwrap();
    assert_eq!(ptx.matches(".version").count(), 1);
    assert_eq!(ptx.matches(".visible .entry").count(), kernels.len());
    assert_exact(&ptx);
    if let Some(report) = assemble(&ptx) {
        assert_eq!(report.kernels().count(), kernels.len(), "{}", report.log);
    }
    let dup = write_module(&[&kernels[0], &kernels[0]], &PtxOptions::default());
    assert!(matches!(dup, Err(PtxError::Malformed { .. })));
}

#[test]
fn no_output_is_approximate_or_flushing() {
    for k in all() {
        let (ptx, _) = emit(&k);
        assert_exact(&ptx);
        for bad in common::FORBIDDEN {
            assert!(!ptx.contains(bad), "{}: {bad}", k.name);
        }
    }
}

#[test]
fn names_are_stable() {
    for k in all() {
        let k = legalized(&k);
        let opts = PtxOptions::default();
        let once = write_kernel(&k, &opts).unwrap();
        let twice = write_kernel(&k, &opts).unwrap();
        assert_eq!(once, twice, "{}", k.name);
        let moved = renumbered(&k);
        assert_ne!(
            moved.regs.len(),
            k.regs.len(),
            "renumbering really moved entities"
        );
        let again = write_kernel(&moved, &opts).unwrap();
        assert_eq!(once, again, "{}: names depend on arena indices", k.name);
    }
}

#[test]
fn registers_numbered_by_first_use_and_declared() {
    let (ptx, _) = emit(&kernels::float_ops());
    assert_rows(
        &ptx,
        &[
            "ld.param.u64 %rd0, [float_ops_param_0];",
            "cvta.to.global.u64 %rd0, %rd0;",
            "ld.param.u64 %rd1, [float_ops_param_1];",
            "mov.u32 %r0, %tid.x;",
        ],
    );
    let decls: Vec<&str> = ptx
        .lines()
        .filter(|l| l.trim().starts_with(".reg"))
        .collect();
    assert_eq!(
        decls,
        [
            "    .reg .pred %p<7>;",
            "    .reg .b32 %r<5>;",
            "    .reg .b64 %rd<6>;",
            "    .reg .f32 %f<18>;",
        ],
        "{ptx}"
    );
}

fn tiny() -> (Kernel, tessel_ir::Reg) {
    let mut k = Kernel {
        name: "tiny".to_owned(),
        block: [32, 1, 1],
        grid: [1, 1, 1],
        ..Kernel::default()
    };
    let x = k.new_reg(RegType::F32);
    (k, x)
}

#[test]
fn op_without_a_row_is_an_error_naming_it() {
    let (mut k, x) = tiny();
    let mut b = Builder::new(&mut k);
    b.assign(x, Op::Mov, &[f(1.0)]);
    b.op(RegType::F32, Op::Math(MathFn::Sin), &[r(x)]);
    b.finish();
    let err = write_kernel(&k, &PtxOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("Math(Sin)") && msg.contains("(f32) -> f32"),
        "{msg}"
    );

    let (mut k, x) = tiny();
    let mut b = Builder::new(&mut k);
    b.op(RegType::U32, Op::FAdd, &[r(x), u(1)]);
    b.finish();
    let msg = write_kernel(&k, &PtxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("FAdd") && msg.contains("(f32, imm u32) -> u32"),
        "{msg}"
    );

    // Not legalized: a predicate select, a stored immediate, a shuffled immediate.
    let (mut k, _) = tiny();
    let mut b = Builder::new(&mut k);
    let p = b.op(
        RegType::Pred,
        Op::FCmp(tessel_ir::kernel::FCmp::Nan),
        &[f(0.0), f(0.0)],
    );
    b.op(RegType::Pred, Op::Select, &[r(p), r(p), r(p)]);
    b.finish();
    let msg = write_kernel(&k, &PtxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("Select") && msg.contains("(pred, pred, pred) -> pred"),
        "{msg}"
    );

    let (mut k, _) = tiny();
    let mut b = Builder::new(&mut k);
    let a = b.op(RegType::U32, Op::Mov, &[u(0)]);
    b.push(Stmt::Store {
        space: Space::Shared,
        width: Width::B32,
        addr: a,
        offset: 0,
        values: vec![u(1)],
    });
    b.finish();
    let msg = write_kernel(&k, &PtxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("st.shared B32") && msg.contains("imm u32"),
        "{msg}"
    );

    let (mut k, _) = tiny();
    let mut b = Builder::new(&mut k);
    b.op(RegType::U32, Op::ShflBfly, &[u(1), u(1)]);
    b.finish();
    assert!(matches!(
        write_kernel(&k, &PtxOptions::default()),
        Err(PtxError::NoRow { .. })
    ));
}

#[test]
fn malformed_kernels_are_errors() {
    let (mut k, _) = tiny();
    let mut b = Builder::new(&mut k);
    b.op(RegType::U32, Op::Param(3), &[]);
    b.finish();
    assert!(matches!(
        write_kernel(&k, &PtxOptions::default()),
        Err(PtxError::Malformed { .. })
    ));

    let (mut k, _) = tiny();
    k.name = "1bad".to_owned();
    assert!(matches!(
        write_kernel(&k, &PtxOptions::default()),
        Err(PtxError::Malformed { .. })
    ));

    let (mut k, x) = tiny();
    k.body.push(Stmt::Op {
        dst: x,
        op: Op::FAdd,
        args: vec![Operand::Reg(tessel_ir::Reg::from_u32(99)), f(1.0)],
    });
    let msg = write_kernel(&k, &PtxOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("r99"), "{msg}");
}

#[test]
fn snapshot_row_sum() {
    let (ptx, _) = emit(&kernels::row_sum());
    insta::with_settings!({description => "row_sum: strided loop, warp shuffles, shared memory, barrier (tessel-testkit/src/kernels.rs)"}, {
        insta::assert_snapshot!("row_sum", ptx);
    });
}

#[test]
fn snapshot_square_bf16() {
    let (ptx, _) = emit(&kernels::elementwise_bf16());
    insta::with_settings!({description => "square_bf16: bf16/f16 storage, bounds check, legalized select and division (tessel-testkit/src/kernels.rs)"}, {
        insta::assert_snapshot!("square_bf16", ptx);
    });
}

#[test]
fn snapshot_control() {
    let (ptx, _) = emit(&kernels::control());
    insta::with_settings!({description => "control: nested loops and every shape of If (tessel-testkit/src/kernels.rs)"}, {
        insta::assert_snapshot!("control", ptx);
    });
}

#[test]
fn named_barrier_rows() {
    // Warp 0 arrives at barrier 1 where warp 1 waits (a producer and its consumer).
    let mut k = tessel_testkit::build::kernel("named_bar", vec![], 64, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(
        RegType::U32,
        Op::Special(tessel_ir::kernel::Special::TidX),
        &[],
    );
    let w0 = b.op(
        RegType::Pred,
        Op::ICmp(tessel_ir::kernel::ICmp::LtU),
        &[r(tid), u(32)],
    );
    b.push(Stmt::If {
        cond: w0,
        then_body: vec![Stmt::BarArrive { id: 1, threads: 64 }],
        else_body: vec![Stmt::BarSync { id: 1, threads: 64 }],
    });
    b.finish();
    let (ptx, _) = emit(&k);
    assert_rows(&ptx, &["bar.arrive 1, 64;", "bar.sync 1, 64;"]);
}
