//! Printer and reader round trips: print → read → print is identical, and the IR read back
//! equals the IR printed.

use tessel_ir::graph::{Fusion, Graph, GroupData, GroupOps, Op, Schedules};
use tessel_ir::kernel::{Kernel, Operand, RegType, Stmt};
use tessel_ir::text::{
    read_graph, read_kernel, read_program, write_graph, write_kernel, write_program,
};
use tessel_ir::verify::{verify_graph, verify_kernel, verify_program};
use tessel_ir::{DType, Group};
use tessel_testkit::ir::*;

fn graph_round_trip(g: &Graph, f: Option<&Fusion>, s: Option<&Schedules>) -> String {
    let text = write_graph(g, f, s);
    let (g2, f2, s2) = read_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&g2, g, "{text}");
    assert_eq!(f2, f.cloned().unwrap_or_default(), "{text}");
    if f.is_some() {
        assert_eq!(s2, s.cloned().unwrap_or_default(), "{text}");
    }
    assert_eq!(write_graph(&g2, f.map(|_| &f2), s.map(|_| &s2)), text);
    text
}

#[test]
fn kitchen_sink_graph_round_trips_and_verifies() {
    let (g, f, s) = kitchen_sink_graph();
    verify_graph(&g, Some(&f), Some(&s)).unwrap();
    let text = graph_round_trip(&g, Some(&f), Some(&s));
    // Spot checks of the syntax.
    assert!(text.starts_with("graph kitchen_sink {\n  v0 = input 0 \"x\" : bf16[4, 8]\n"));
    assert!(text.contains("= input 1 \"w \\\"weight\\\"\\n\" : bf16[8]"));
    assert!(text.contains("v4 = reduce.sum v3, axis 1 : f32[4, 1]"));
    assert!(text.contains("= const -0.0 : f32[]"));
    assert!(text.contains("= const inf : f32[]"));
    assert!(text.contains("= const -inf : f32[]"));
    assert!(text.contains("= permute v2, perm [1, 0] : f32[8, 4]"));
    assert!(text.contains("= concat [v2, v11, v2], axis 1 : f32[4, 24]"));
    assert!(text.contains("output \"out again\" = v15"));
    assert!(text.contains("= input 2 \"cache\" inout : bf16[4, 6, 8]"));
    assert!(
        text.contains("= update v69, v70, at v71, axis 1 : bf16[4, 6, 8]"),
        "{text}"
    );
    assert!(text.contains(
        "g2 = update outputs [v72] reductions [] tile update { threads: 32, vector: 8 }"
    ));
    assert!(text.contains("= reduce.argmax v2, axis 1 : i32[4, 1]"));
    assert!(text.contains("= reduce.logsumexp v2, axis 1 : f32[4, 1]"));
    assert!(text.contains("= topk.values v2, axis 1 : f32[4, 3]"));
    assert!(text.contains("= topk.indices v2, axis 1, smallest : i32[4, 3]"));
    assert!(text.contains("= cumsum v2, axis 1 : f32[4, 8]"));
    assert!(text.contains("tile scan { threads: 32, chunk: 32, rows: 1 }"));
    assert!(text.contains("g0 = row_reduction outputs [v15, "));
    assert!(text.contains(
        "tile row_reduction { threads_per_row: 32, rows_per_cta: 4, vector: 8 } why \"rows of 8: one warp per row\""
    ));
    assert!(!text.contains("writer"));
    // Without side tables.
    let bare = graph_round_trip(&g, None, None);
    assert!(!bare.contains("g0"));
    let (_, f2, s2) = read_graph(&bare).unwrap();
    assert!(f2.groups.is_empty() && s2.iter().all(|(_, x)| x.is_none()));
}

#[test]
fn fusion_without_schedules_round_trips() {
    let (g, f, _) = kitchen_sink_graph();
    let text = graph_round_trip(&g, Some(&f), None);
    assert!(!text.contains("tile"));
}

#[test]
fn constants_round_trip_bit_exactly() {
    let values = [
        0.0,
        -0.0,
        1.0,
        0.1,
        -1e-300,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        1e16,
        123456789.125,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
        f64::from_bits(0xfff8_dead_beef_0000),
        std::f64::consts::PI,
    ];
    let mut g = Graph::new("consts");
    for v in values {
        g.push(Op::Const { value: v }, t(DType::F32, &[]));
    }
    let text = write_graph(&g, None, None);
    let (g2, _, _) = read_graph(&text).unwrap();
    assert_eq!(write_graph(&g2, None, None), text);
    for ((_, a), (_, b)) in g.ops.iter().zip(g2.ops.iter()) {
        match (a, b) {
            (Op::Const { value: x }, Op::Const { value: y }) => {
                assert_eq!(x.to_bits(), y.to_bits(), "{x:?} read back as {y:?}")
            }
            _ => unreachable!(),
        }
    }
    assert!(text.contains("const nan :"));
    assert!(text.contains("const 0xfff8000000000000 :"));
}

#[test]
fn non_canonical_tables_are_spelled_out() {
    // Inputs listed out of index order, a writer entry that the groups do not imply, a
    // missing writer: all invalid, and all printed faithfully.
    let mut g = Graph::new("odd name!");
    let a = g.push(
        Op::Input {
            index: 1,
            inout: false,
        },
        t(DType::F32, &[2]),
    );
    let b = g.push(
        Op::Input {
            index: 0,
            inout: false,
        },
        t(DType::F32, &[2]),
    );
    let c = g.push(
        Op::Binary {
            op: tessel_ir::graph::BinaryOp::Add,
            lhs: a,
            rhs: b,
        },
        t(DType::F32, &[2]),
    );
    g.inputs = vec![("a".into(), a), ("b".into(), b)];
    g.outputs.push(("c".into(), c));
    let mut f = Fusion::default();
    let g0 = f.new_group(GroupData {
        ops: GroupOps::Elementwise,
        outputs: vec![c],
    });
    f.writer[a] = g0.into();
    f.writer[c] = None.into();
    let text = graph_round_trip(&g, Some(&f), None);
    assert!(text.starts_with("graph \"odd name!\" {"));
    assert!(text.contains("  input \"a\" = v0\n  input \"b\" = v1\n"));
    assert!(text.contains("  writer v0 = g0\n  writer v2 = none\n"));
}

#[test]
fn reader_renumbers_in_definition_order_and_accepts_forward_references() {
    let text = "// a comment\ngraph g {\n  v10 = neg v3 : f32[2] // forward\n  v3 = input 0 \"x\" : f32[2]\n  output \"y\" = v10\n  g7 = elementwise outputs [v10] reductions []\n}\n";
    let (g, f, _) = read_graph(text).unwrap();
    assert_eq!(g.ops.len(), 2);
    assert_eq!(g.outputs, vec![("y".to_string(), value(0))]);
    assert_eq!(g.inputs, vec![("x".to_string(), value(1))]);
    assert_eq!(f.writer[value(0)].expand(), Some(Group::from_u32(0)));
    // Not in topological order: the verifier says so.
    let errs = verify_graph(&g, None, None).unwrap_err();
    assert!(errs.iter().any(|e| e.rule == "graph.order"));
}

#[test]
fn kitchen_sink_kernel_round_trips_and_verifies() {
    let k = kitchen_sink_kernel();
    verify_kernel(&k, false).unwrap();
    let text = write_kernel(&k);
    let k2 = read_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(k2, k, "{text}");
    assert_eq!(write_kernel(&k2), text);
    for needle in [
        "kernel kitchen_sink_k0 block [64, 1, 1] grid [3, 2, 1] {",
        "  schedule \"elementwise { threads: 64, vector: 1 }; sums \\\"in order\\\"\"",
        "  param x: ptr bf16 read",
        "  param n: u32",
        "  param \"out put\": ptr f32 write",
        "  smem0: 256 bytes align 16",
        "  regs r0: pred, r1: u32, r2: u64, r3: f32,",
        "= special tid.x",
        "= param 0",
        "= shared_addr smem0",
        "= fcmp.nan ",
        "= icmp.ge.s ",
        "= math.pow ",
        "= load.global.v4 [r2 + 2147483647]",
        "store.shared.v2 [r1 - 2147483648], ",
        "= load.global.b16 [r2 - 2]",
        "= load.shared.b8 [r1]",
        "store.global.b32 [r2 + 4], 0f3F800000",
        "for r",
        " = 0u32 .. r1 step 64u32 {",
        "} else {",
        "barrier",
        "u64",
        "0f80000000",
        "0f7FC00001",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn program_round_trips_and_verifies() {
    let p = small_program();
    verify_program(&p, false).unwrap();
    let text = write_program(&p);
    let p2 = read_program(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(p2, p, "{text}");
    assert_eq!(write_program(&p2), text);
    for needle in [
        "program two_step {",
        "  buf0 = input 0 \"x\" : bf16[4, 8]",
        "  buf1 = temp \"t0\" : f32[4, 8]",
        "  buf2 = output \"out\" : f32[4, 8]",
        "  k0 = kernel two_step_k0 block [64, 1, 1] grid [3, 2, 1] {",
        "    regs r0: pred",
        "  k1 = kernel two_step_k1 block",
        "  launch k0(buf0, 32u32, buf1)",
        "  launch k1(buf1, buf2)",
        "  input \"x\" = buf0",
        "  output \"out2\" = buf2",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn inout_buffer_round_trips() {
    let mut p = small_program();
    let x = tessel_ir::BufferId::from_u32(0);
    p.buffers[x].role = tessel_ir::kernel::BufferRole::InOut(0);
    p.outputs.push(("x".into(), x));
    verify_program(&p, false).unwrap();
    let text = write_program(&p);
    assert!(
        text.contains("  buf0 = inout 0 \"x\" : bf16[4, 8]"),
        "{text}"
    );
    assert!(text.contains("  output \"x\" = buf0"), "{text}");
    assert_eq!(read_program(&text).unwrap(), p);
}

#[test]
fn empty_and_degenerate_forms_round_trip() {
    // Empty kernel, empty graph, empty program; ops with the wrong operand count and loads
    // and stores with none, which the verifier rejects but the text must still carry.
    let mut k = Kernel::default();
    let r = k.new_reg(RegType::U32);
    let a = k.new_reg(RegType::U64);
    k.body = vec![
        Stmt::Op {
            dst: r,
            op: tessel_ir::kernel::Op::FNeg,
            args: vec![],
        },
        Stmt::Op {
            dst: r,
            op: tessel_ir::kernel::Op::Param(3),
            args: vec![Operand::U32(1), Operand::Reg(r)],
        },
        Stmt::Load {
            dsts: vec![],
            space: tessel_ir::kernel::Space::Global,
            width: tessel_ir::kernel::Width::V4,
            addr: a,
            offset: -1,
        },
        Stmt::Store {
            space: tessel_ir::kernel::Space::Shared,
            width: tessel_ir::kernel::Width::B8,
            addr: r,
            offset: 0,
            values: vec![],
        },
        Stmt::Op {
            dst: r,
            op: tessel_ir::kernel::Op::Mov,
            args: vec![Operand::U64(5), Operand::F32(0)],
        },
    ];
    let text = write_kernel(&k);
    assert!(text.starts_with("kernel \"\" block [0, 0, 0] grid [0, 0, 0] {"));
    assert_eq!(read_kernel(&text).unwrap(), k, "{text}");
    let g = Graph::default();
    assert_eq!(read_graph(&write_graph(&g, None, None)).unwrap().0, g);
    let p = tessel_ir::kernel::Program::default();
    assert_eq!(read_program(&write_program(&p)).unwrap(), p);
}

#[test]
fn reader_accepts_alternative_immediates() {
    let text = "kernel k block [32, 1, 1] grid [1, 1, 1] {\n  regs r0: f32, r1: u32\n  r0 = fadd r0, 1.5f32\n  r0 = fmul r0, -2f32\n  r1 = iadd r1, 7\n  r1 = iadd r1, 0x10u32\n}\n";
    let k = read_kernel(text).unwrap();
    let args: Vec<_> = k
        .body
        .iter()
        .map(|s| match s {
            Stmt::Op { args, .. } => args[1],
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        args,
        vec![
            Operand::f32(1.5),
            Operand::f32(-2.0),
            Operand::U32(7),
            Operand::U32(16)
        ]
    );
}

#[test]
fn examples_in_docs_read_and_verify() {
    let doc = include_str!("../../../docs/ir.md");
    let mut seen = 0;
    for block in doc.split("```").skip(1).step_by(2) {
        let block = block.trim_start_matches('\n');
        if block.starts_with("graph ") && !block.contains(":=") {
            let (g, f, s) = read_graph(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
            verify_graph(&g, Some(&f), Some(&s)).unwrap();
            seen += 1;
        } else if block.starts_with("kernel ") && !block.contains(":=") {
            let k = read_kernel(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
            verify_kernel(&k, true).unwrap();
            seen += 1;
        }
    }
    assert_eq!(seen, 3);
}

/// A kernel with every mbarrier, TMA, setmaxnreg and griddepcontrol statement, immediates and
/// registers.
fn async_kernel() -> Kernel {
    use tessel_ir::kernel::{Param, ParamKind};
    let mut k = Kernel {
        name: "tma_k".into(),
        block: [64, 1, 1],
        grid: [1, 1, 1],
        ..Default::default()
    };
    k.params = vec![Param {
        name: "a".into(),
        kind: ParamKind::TensorMap,
    }];
    let tile = k.new_shared(4096, 1024);
    let bar = k.new_shared(8, 8);
    let t = k.new_reg(RegType::U64);
    let d = k.new_reg(RegType::U32);
    let m = k.new_reg(RegType::U32);
    let c = k.new_reg(RegType::U32);
    k.body = vec![
        Stmt::SetMaxNReg {
            inc: false,
            regs: 40,
        },
        Stmt::Op {
            dst: t,
            op: tessel_ir::kernel::Op::Param(0),
            args: vec![],
        },
        Stmt::Op {
            dst: d,
            op: tessel_ir::kernel::Op::SharedAddr(tile),
            args: vec![],
        },
        Stmt::Op {
            dst: m,
            op: tessel_ir::kernel::Op::SharedAddr(bar),
            args: vec![],
        },
        Stmt::Op {
            dst: c,
            op: tessel_ir::kernel::Op::Mov,
            args: vec![Operand::U32(0)],
        },
        Stmt::MbarInit {
            addr: m,
            count: Operand::U32(1),
        },
        Stmt::FenceMbarrierInit,
        Stmt::MbarArriveExpectTx {
            addr: m,
            bytes: Operand::U32(4096),
        },
        Stmt::TmaLoad {
            dst: d,
            tmap: t,
            coords: vec![Operand::Reg(c), Operand::U32(16)],
            mbar: m,
        },
        Stmt::MbarArrive { addr: m },
        Stmt::MbarWait {
            addr: m,
            parity: Operand::Reg(c),
        },
        Stmt::SetMaxNReg {
            inc: true,
            regs: 232,
        },
    ];
    // The programmatic dependent launch's statements, before the TMA load they order.
    k.body.splice(
        5..5,
        [
            Stmt::GridDepLaunch,
            Stmt::PrefetchL2 {
                addr: t,
                bytes: Operand::U32(4096),
            },
            Stmt::PrefetchL2 {
                addr: t,
                bytes: Operand::Reg(c),
            },
            Stmt::GridDepWait,
        ],
    );
    k
}

#[test]
fn mbarrier_tma_and_setmaxnreg_round_trip() {
    let k = async_kernel();
    verify_kernel(&k, true).unwrap();
    let text = write_kernel(&k);
    let k2 = read_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(k2, k, "{text}");
    assert_eq!(write_kernel(&k2), text);
    for needle in [
        "  param a: tensormap",
        "  setmaxnreg.dec 40",
        "  mbarrier.init [r2], 1u32",
        "  fence.mbarrier_init",
        "  mbarrier.arrive.expect_tx [r2], 4096u32",
        "  tma.load [r1], r0, [r3, 16u32], [r2]",
        "  mbarrier.arrive [r2]",
        "  mbarrier.wait [r2], r3",
        "  setmaxnreg.inc 232",
        "  griddepcontrol.launch_dependents",
        "  prefetch.l2 [r0], 4096u32",
        "  prefetch.l2 [r0], r3",
        "  griddepcontrol.wait",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn tensor_map_launch_arguments_round_trip() {
    use tessel_ir::kernel::{
        BufferDecl, BufferRole, Launch, LaunchArg, Program, TensorMapDesc, TensorMapSwizzle,
    };
    let mut p = Program {
        name: "tma".into(),
        ..Default::default()
    };
    let a = p.buffers.push(BufferDecl {
        name: "a".into(),
        ty: t(DType::Bf16, &[128, 64]),
        role: BufferRole::Input(0),
    });
    p.inputs.push(("a".into(), a));
    let kid = p.kernels.push(async_kernel());
    let map = |rank: usize, swizzle| {
        TensorMapDesc::new(
            a,
            DType::Bf16,
            &[64, 128, 2][..rank],
            &[128, 128 * 128][..rank - 1],
            &[64, 32, 1][..rank],
            swizzle,
        )
    };
    for (rank, sw) in [
        (2, TensorMapSwizzle::B128),
        (1, TensorMapSwizzle::None),
        (3, TensorMapSwizzle::B64),
    ] {
        p.launches.push(Launch {
            kernel: kid,
            args: vec![LaunchArg::TensorMap(map(rank, sw))],
        });
    }
    let text = write_program(&p);
    let p2 = read_program(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(p2, p, "{text}");
    assert_eq!(write_program(&p2), text);
    assert!(
        text.contains(
            "  launch k0(tmap(buf0, bf16, dims [64, 128], strides [128], box [64, 32], swizzle 128))"
        ),
        "{text}"
    );
    assert!(text.contains("tmap(buf0, bf16, dims [64], strides [], box [64], swizzle 0)"));
    for (bad, what) in [
        ("swizzle 128)", "swizzle 16)"),
        ("strides [128]", "strides [128, 16]"),
        ("box [64, 32]", "box [64]"),
    ] {
        let broken = text.replacen(bad, what, 1);
        assert!(read_program(&broken).is_err(), "{broken}");
    }
}

/// The warpgroup attention tile prints `wgmma: 1` after its other fields and reads back;
/// the mma.sync tile prints no `wgmma` field. The verifier asks whole warpgroups of it.
#[test]
fn the_wgmma_attention_tile_round_trips() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../ir/schedule/attention_gqa.tir"
    );
    let text = std::fs::read_to_string(file).expect("the filetest");
    let expected = text
        .split("; expected:\n")
        .nth(1)
        .expect("an expected section");
    let plain = "tile attention { warps: 2, block_n: 64, stages: 2, pack: 4, split: 0 }";
    assert!(expected.contains(plain));
    let wg = expected.replace(
        plain,
        "tile attention { warps: 8, block_n: 64, stages: 2, pack: 4, split: 0, wgmma: 1 }",
    );
    let (g, f, s) = read_graph(&wg).unwrap_or_else(|e| panic!("{e}"));
    verify_graph(&g, Some(&f), Some(&s)).unwrap();
    let printed = graph_round_trip(&g, Some(&f), Some(&s));
    assert!(printed.contains("split: 0, wgmma: 1 }"), "{printed}");
    let (g, f, s) = read_graph(&wg.replace("warps: 8", "warps: 6")).unwrap();
    let errs = verify_graph(&g, Some(&f), Some(&s)).unwrap_err();
    assert!(errs.iter().any(|e| e.rule == "schedule.tile"), "{errs:?}");
    // The mma.sync tile prints no `wgmma` field (its reason may still name the tile).
    let (_, _, s) = read_graph(expected).unwrap();
    let printed = write_graph(&g, Some(&f), Some(&s));
    assert!(
        printed.contains(plain) && !printed.contains("wgmma: "),
        "{printed}"
    );
}
