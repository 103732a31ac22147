//! Verifier tests: a valid IR passes; for each invariant a minimal IR that breaks it is
//! reported under the invariant's rule.

use tessel_ir::graph::{
    BinaryOp, Fusion, Graph, GroupData, GroupOps, Op, ReduceOp, Schedule, Schedules, TileConfig,
    UnaryOp, UpdateAt,
};
use tessel_ir::kernel::{
    BufferRole, Kernel, LaunchArg, MathFn, Op as KOp, Operand, Param, ParamKind, RegType, Space,
    Stmt, Width,
};
use tessel_ir::verify::{verify_graph, verify_kernel, verify_program};
use tessel_ir::{DType, Group, Reg, SharedBuf};
use tessel_testkit::ir::*;

use DType::*;

/// Asserts that `g` fails with `rule` (and only rules in `rule`'s family).
fn graph_fails(g: &Graph, rule: &str) {
    let r = verify_graph(g, None, None);
    let msg = format!("{r:?}");
    let got = rules(r);
    assert!(got.contains(&rule), "expected {rule}, got {msg}");
}

/// One op over inputs of the given types, with result type `rt`.
fn one_op(
    ins: &[(DType, &[u64])],
    op: impl FnOnce(&[tessel_ir::Value]) -> Op,
    rt: (DType, &[u64]),
) -> Graph {
    let mut g = Graph::new("t");
    let mut vs = Vec::new();
    for (i, (d, s)) in ins.iter().enumerate() {
        let v = g.push(
            Op::Input {
                index: i as u32,
                inout: false,
            },
            t(*d, s),
        );
        g.inputs.push((format!("i{i}"), v));
        vs.push(v);
    }
    let o = op(&vs);
    let r = g.push(o, t(rt.0, rt.1));
    g.outputs.push(("o".into(), r));
    g
}

fn ok(g: &Graph) {
    verify_graph(g, None, None).unwrap();
}

#[test]
fn graph_order_and_io() {
    let mut g = Graph::new("t");
    g.push(
        Op::Unary {
            op: UnaryOp::Neg,
            arg: value(1),
        },
        t(F32, &[]),
    );
    g.push(Op::Const { value: 1.0 }, t(F32, &[]));
    graph_fails(&g, "graph.order");
    let mut g = Graph::new("t");
    g.push(Op::Cast { arg: value(9) }, t(F32, &[]));
    graph_fails(&g, "graph.order");

    // Input index out of range; duplicate index; inputs entry not an input op.
    let mut g = Graph::new("t");
    g.push(
        Op::Input {
            index: 0,
            inout: false,
        },
        t(F32, &[]),
    );
    graph_fails(&g, "graph.input");
    let mut g = Graph::new("t");
    let a = g.push(
        Op::Input {
            index: 0,
            inout: false,
        },
        t(F32, &[]),
    );
    let b = g.push(
        Op::Input {
            index: 0,
            inout: false,
        },
        t(F32, &[]),
    );
    g.inputs = vec![("a".into(), a), ("b".into(), b)];
    graph_fails(&g, "graph.input");
    let mut g = Graph::new("t");
    let c = g.push(Op::Const { value: 0.0 }, t(F32, &[]));
    g.inputs = vec![("c".into(), c)];
    graph_fails(&g, "graph.input");

    let mut g = one_op(&[(F32, &[2])], |v| Op::Cast { arg: v[0] }, (F32, &[2]));
    ok(&g);
    g.outputs.push(("bad".into(), value(7)));
    graph_fails(&g, "graph.output");
}

#[test]
fn graph_consts() {
    let c = |value: f64, d: DType| {
        let mut g = Graph::new("t");
        g.push(Op::Const { value }, t(d, &[]));
        verify_graph(&g, None, None)
    };
    for (v, d) in [
        (0.1, F32),
        (1.0 + 2f64.powi(-8), Bf16),
        (65520.0, F16),
        (2f64.powi(-25), F16),
        (1e39, F32),
        (1.5, I32),
        (2147483648.0, I32),
        (f64::INFINITY, I32),
        (f64::NAN, I32),
        (2.0, Bool),
        (f64::NAN, Bool),
    ] {
        assert_eq!(rules(c(v, d)), vec!["graph.const"], "{v:?} as {d}");
    }
    for (v, d) in [
        (0.1f32 as f64, F32),
        (1.0 + 2f64.powi(-7), Bf16),
        (65504.0, F16),
        (2f64.powi(-24), F16),
        (f32::from_bits(1) as f64, F32),
        (f64::NAN, F32),
        (f64::NEG_INFINITY, Bf16),
        (-0.0, F16),
        (-2147483648.0, I32),
        (1.0, Bool),
    ] {
        assert_eq!(rules(c(v, d)), Vec::<&str>::new(), "{v:?} as {d}");
    }
}

#[test]
fn graph_elementwise_rules() {
    let un = |op, a: (DType, &[u64]), r: (DType, &[u64])| {
        one_op(&[a], |v| Op::Unary { op, arg: v[0] }, r)
    };
    ok(&un(UnaryOp::Sin, (F32, &[2]), (F32, &[2])));
    graph_fails(&un(UnaryOp::Sin, (I32, &[2]), (I32, &[2])), "graph.unary");
    graph_fails(&un(UnaryOp::Not, (F32, &[2]), (F32, &[2])), "graph.unary");
    graph_fails(&un(UnaryOp::Neg, (Bool, &[2]), (Bool, &[2])), "graph.unary");
    graph_fails(&un(UnaryOp::Exp, (F32, &[2]), (F32, &[3])), "graph.unary");

    let bin = |op, a: (DType, &[u64]), b: (DType, &[u64]), r: (DType, &[u64])| {
        one_op(
            &[a, b],
            |v| Op::Binary {
                op,
                lhs: v[0],
                rhs: v[1],
            },
            r,
        )
    };
    ok(&bin(BinaryOp::Add, (F32, &[2]), (F32, &[2]), (F32, &[2])));
    ok(&bin(BinaryOp::Lt, (I32, &[2]), (I32, &[2]), (Bool, &[2])));
    graph_fails(
        &bin(BinaryOp::Add, (F32, &[2]), (F32, &[3]), (F32, &[2])),
        "graph.binary",
    );
    graph_fails(
        &bin(BinaryOp::Add, (F32, &[2]), (Bf16, &[2]), (F32, &[2])),
        "graph.binary",
    );
    graph_fails(
        &bin(BinaryOp::Lt, (F32, &[2]), (F32, &[2]), (F32, &[2])),
        "graph.binary",
    );
    graph_fails(
        &bin(BinaryOp::Add, (F32, &[2]), (F32, &[2]), (Bool, &[2])),
        "graph.binary",
    );
    graph_fails(
        &bin(BinaryOp::And, (F32, &[2]), (F32, &[2]), (F32, &[2])),
        "graph.binary",
    );
    graph_fails(
        &bin(BinaryOp::Pow, (I32, &[2]), (I32, &[2]), (I32, &[2])),
        "graph.binary",
    );
    graph_fails(
        &bin(BinaryOp::Mul, (Bool, &[2]), (Bool, &[2]), (Bool, &[2])),
        "graph.binary",
    );

    let sel = |c: DType| {
        one_op(
            &[(c, &[2]), (F32, &[2]), (F32, &[2])],
            |v| Op::Select {
                cond: v[0],
                on_true: v[1],
                on_false: v[2],
            },
            (F32, &[2]),
        )
    };
    ok(&sel(Bool));
    graph_fails(&sel(F32), "graph.select");

    ok(&one_op(
        &[(F32, &[2])],
        |v| Op::Cast { arg: v[0] },
        (Bool, &[2]),
    ));
    graph_fails(
        &one_op(&[(F32, &[2])], |v| Op::Cast { arg: v[0] }, (F32, &[1, 2])),
        "graph.cast",
    );
    ok(&one_op(&[], |_| Op::Iota { axis: 1 }, (I32, &[2, 3])));
    graph_fails(
        &one_op(&[], |_| Op::Iota { axis: 2 }, (I32, &[2, 3])),
        "graph.iota",
    );
    ok(&one_op(
        &[(F32, &[2, 3])],
        |v| Op::Softmax { arg: v[0], axis: 1 },
        (F32, &[2, 3]),
    ));
    graph_fails(
        &one_op(
            &[(I32, &[2, 3])],
            |v| Op::Softmax { arg: v[0], axis: 1 },
            (I32, &[2, 3]),
        ),
        "graph.softmax",
    );
    graph_fails(
        &one_op(
            &[(F32, &[2, 3])],
            |v| Op::Softmax { arg: v[0], axis: 2 },
            (F32, &[2, 3]),
        ),
        "graph.softmax",
    );
}

#[test]
fn graph_shape_rules() {
    let bc = |a: &[u64], r: &[u64]| one_op(&[(F32, a)], |v| Op::Broadcast { arg: v[0] }, (F32, r));
    ok(&bc(&[1, 3], &[4, 3]));
    graph_fails(&bc(&[3], &[4, 3]), "graph.broadcast");
    graph_fails(&bc(&[2, 3], &[4, 3]), "graph.broadcast");

    let rs = |a: &[u64], r: &[u64]| one_op(&[(F32, a)], |v| Op::Reshape { arg: v[0] }, (F32, r));
    ok(&rs(&[2, 6], &[3, 4]));
    graph_fails(&rs(&[2, 6], &[3, 5]), "graph.reshape");

    let pm = |perm: Vec<u32>, r: &[u64]| {
        one_op(
            &[(F32, &[2, 3, 4])],
            move |v| Op::Permute { arg: v[0], perm },
            (F32, r),
        )
    };
    ok(&pm(vec![2, 0, 1], &[4, 2, 3]));
    graph_fails(&pm(vec![2, 0, 0], &[4, 2, 2]), "graph.permute");
    graph_fails(&pm(vec![2, 0], &[4, 2]), "graph.permute");
    graph_fails(&pm(vec![2, 0, 1], &[2, 3, 4]), "graph.permute");

    let rd = |axis, r: &[u64]| {
        one_op(
            &[(F32, &[2, 3])],
            |v| Op::Reduce {
                op: ReduceOp::Sum,
                arg: v[0],
                axis,
            },
            (F32, r),
        )
    };
    ok(&rd(1, &[2, 1]));
    graph_fails(&rd(2, &[2, 1]), "graph.reduce");
    graph_fails(&rd(1, &[2]), "graph.reduce");
    graph_fails(&rd(0, &[2, 1]), "graph.reduce");

    let sl = |axis, start, r: &[u64]| {
        one_op(
            &[(F32, &[2, 8])],
            |v| Op::Slice {
                arg: v[0],
                axis,
                start,
            },
            (F32, r),
        )
    };
    ok(&sl(1, 5, &[2, 3]));
    graph_fails(&sl(1, 6, &[2, 3]), "graph.slice");
    graph_fails(&sl(1, u64::MAX, &[2, 3]), "graph.slice");
    graph_fails(&sl(2, 0, &[2, 3]), "graph.slice");
    graph_fails(&sl(1, 0, &[1, 3]), "graph.slice");

    let cc = |b: &[u64], axis, r: &[u64]| {
        one_op(
            &[(F32, &[2, 3]), (F32, b)],
            |v| Op::Concat {
                args: v.to_vec(),
                axis,
            },
            (F32, r),
        )
    };
    ok(&cc(&[2, 5], 1, &[2, 8]));
    graph_fails(&cc(&[2, 5], 1, &[2, 9]), "graph.concat");
    graph_fails(&cc(&[3, 5], 1, &[2, 8]), "graph.concat");
    graph_fails(&cc(&[2, 5], 2, &[2, 8]), "graph.concat");
    graph_fails(
        &one_op(
            &[],
            |_| Op::Concat {
                args: vec![],
                axis: 0,
            },
            (F32, &[0]),
        ),
        "graph.concat",
    );
}

/// The kitchen-sink graph with its side tables changed by `f`: fails with `rule`.
fn fusion_fails(rule: &str, f: impl FnOnce(&mut Graph, &mut Fusion, &mut Schedules)) {
    let (mut g, mut fu, mut s) = kitchen_sink_graph();
    verify_graph(&g, Some(&fu), Some(&s)).unwrap();
    f(&mut g, &mut fu, &mut s);
    let r = verify_graph(&g, Some(&fu), Some(&s));
    let msg = format!("{r:?}");
    assert!(rules(r).contains(&rule), "expected {rule}, got {msg}");
}

#[test]
fn fusion_rules() {
    let g0 = Group::from_u32(0);
    let g1 = Group::from_u32(1);
    // v15 out, v61 softmax (g0, with reduction v4); v11 (g1).
    fusion_fails("fusion.writer", |_, f, _| f.writer[value(15)] = g1.into());
    fusion_fails("fusion.writer", |_, f, _| f.writer[value(3)] = g1.into());
    fusion_fails("fusion.outputs", |_, f, _| f.groups[g1].outputs = vec![]);
    fusion_fails("fusion.outputs", |_, f, _| {
        f.groups[g1].outputs.push(value(4));
        f.writer[value(4)] = g1.into();
    });
    fusion_fails("fusion.outputs", |_, f, _| {
        f.groups[g1].outputs.push(value(999))
    });
    fusion_fails("fusion.reductions", |_, f, _| {
        f.groups[g0].ops = GroupOps::RowReduction { reductions: vec![] }
    });
    fusion_fails("fusion.reductions", |_, f, _| {
        f.groups[g0].ops = GroupOps::RowReduction {
            reductions: vec![value(3)],
        }
    });
    // Reduce over axis 0, not the last one.
    fusion_fails("fusion.reductions", |_, f, _| {
        f.groups[g0].ops = GroupOps::RowReduction {
            reductions: vec![value(46)],
        }
    });
    // (An elementwise group with reductions cannot be written: `GroupOps::Elementwise`.)
    // Row length differs: reduce a [4, 1] value's last axis.
    fusion_fails("fusion.reductions", |g, f, _| {
        let r = g.push(
            Op::Reduce {
                op: ReduceOp::Max,
                arg: value(4),
                axis: 1,
            },
            t(F32, &[4, 1]),
        );
        if let GroupOps::RowReduction { reductions } = &mut f.groups[g0].ops {
            reductions.push(r);
        }
    });
    fusion_fails("fusion.materialized", |g, _, _| {
        g.outputs.push(("raw".into(), value(3)))
    });
}

/// `fusion.alias`: an alias and its base are reshapes of one value, in either order or as
/// siblings (the decode layer's `attn` output and o_proj's `[B·T, H·d]` view of it), never
/// anything else, and an alias is never a step output.
#[test]
fn alias_rules() {
    let text = |alias: &str, extra_output: &str| {
        format!(
            "graph a {{
  v0 = input 0 \"x\" : f32[2, 3, 4]
  v1 = exp v0 : f32[2, 3, 4]
  v2 = reshape v1 : f32[6, 4]
  v3 = reshape v1 : f32[3, 8]
  v4 = permute v1, perm [1, 0, 2] : f32[3, 2, 4]
  v5 = reshape v4 : f32[6, 4]
  v6 = neg v3 : f32[3, 8]
  output \"y\" = v2
  output \"w\" = v5
  output \"z\" = v6{extra_output}
  g0 = elementwise outputs [v2] reductions []
  g1 = elementwise outputs [v5] reductions []
  g2 = elementwise outputs [v6] reductions []
  {alias}
}}"
        )
    };
    let verdict = |alias: &str, extra: &str| {
        let (g, f, _) = tessel_ir::text::read_graph(&text(alias, extra)).unwrap();
        rules(verify_graph(&g, Some(&f), None))
    };
    assert_eq!(verdict("alias v3 = v2", ""), Vec::<&str>::new());
    // A step output has a buffer of its own.
    assert!(verdict("alias v3 = v2", "\n  output \"v\" = v3").contains(&"fusion.alias"));
    // The GEMM-like reader of v3 runs before the group that writes v2, v3's base (fuzz
    // seed 580147: the base, a step output, was written after its reader).
    let late = text("alias v3 = v2", "")
        .replace(
            "  g0 = elementwise outputs [v2] reductions []\n",
            "",
        )
        .replace(
            "  g2 = elementwise outputs [v6] reductions []\n",
            "  g2 = elementwise outputs [v6] reductions []\n  g3 = elementwise outputs [v2] reductions []\n",
        );
    let (g, f, _) = tessel_ir::text::read_graph(&late).unwrap();
    assert!(rules(verify_graph(&g, Some(&f), None)).contains(&"fusion.alias"));
    // An input has its buffer: it is no alias (fuzz seed 1061: an input read by a GEMM was
    // aliased to an output reshaped from it).
    let (g, f, _) = tessel_ir::text::read_graph(&text("alias v0 = v2", "")).unwrap();
    assert!(rules(verify_graph(&g, Some(&f), None)).contains(&"fusion.alias"));
    // v5 is a reshape of the permute of v1: other bytes than v3's.
    assert!(verdict("alias v3 = v5", "").contains(&"fusion.alias"));
    assert!(verdict("alias v4 = v2", "").contains(&"fusion.alias"));
}

#[test]
fn schedule_rules() {
    let g0 = Group::from_u32(0);
    let g1 = Group::from_u32(1);
    fusion_fails("schedule.missing", |_, _, s| s[g1] = None);
    fusion_fails("schedule.orphan", |_, _, s| {
        s[Group::from_u32(5)] = s[g1].clone();
    });
    fusion_fails("schedule.kind", |_, _, s| s[g0] = s[g1].clone());
    let tile = |tile| {
        Some(Schedule {
            tile,
            why: String::new(),
        })
    };
    for bad in [
        TileConfig::Elementwise {
            threads: 2048,
            vector: 1,
        },
        TileConfig::Elementwise {
            threads: 0,
            vector: 1,
        },
        TileConfig::Elementwise {
            threads: 256,
            vector: 3,
        },
    ] {
        fusion_fails("schedule.tile", |_, _, s| s[g1] = tile(bad));
    }
    for bad in [
        TileConfig::RowReduction {
            threads_per_row: 48,
            rows_per_cta: 1,
            vector: 4,
        },
        TileConfig::RowReduction {
            threads_per_row: 0,
            rows_per_cta: 1,
            vector: 4,
        },
        TileConfig::RowReduction {
            threads_per_row: 1024,
            rows_per_cta: 2,
            vector: 4,
        },
        TileConfig::RowReduction {
            threads_per_row: u32::MAX,
            rows_per_cta: u32::MAX,
            vector: 16,
        },
        TileConfig::RowReduction {
            threads_per_row: 32,
            rows_per_cta: 0,
            vector: 1,
        },
    ] {
        fusion_fails("schedule.tile", |_, _, s| s[g0] = tile(bad));
    }
}

// ---- kernels ----

fn kernel_fails(rule: &str, f: impl FnOnce(&mut Kernel)) {
    let mut k = copy_kernel("k");
    verify_kernel(&k, true).unwrap();
    f(&mut k);
    let r = verify_kernel(&k, true);
    let msg = format!("{r:?}");
    assert!(rules(r).contains(&rule), "expected {rule}, got {msg}");
}

fn op(dst: Reg, op: KOp, args: &[Operand]) -> Stmt {
    Stmt::Op {
        dst,
        op,
        args: args.to_vec(),
    }
}

#[test]
fn kernel_header_rules() {
    for name in ["1k", "", "a-b", "_", "k.0"] {
        kernel_fails("kernel.name", |k| k.name = name.into());
    }
    let mut k = copy_kernel("$ok_name");
    k.name = "%x1".into();
    verify_kernel(&k, true).unwrap();
    kernel_fails("kernel.geometry", |k| k.block = [0, 1, 1]);
    kernel_fails("kernel.geometry", |k| k.block = [2048, 1, 1]);
    kernel_fails("kernel.geometry", |k| k.block = [64, 64, 1]);
    kernel_fails("kernel.geometry", |k| k.grid = [1, 70000, 1]);
    kernel_fails("kernel.geometry", |k| {
        k.block = [48, 1, 1];
        k.body.push(Stmt::Barrier);
    });
    kernel_fails("kernel.geometry", |k| {
        k.block = [16, 1, 1];
        let r = Reg::from_u32(0);
        k.body
            .push(op(r, KOp::ShflBfly, &[Operand::Reg(r), Operand::U32(1)]));
    });
    kernel_fails("kernel.shared", |k| {
        k.new_shared(16, 3);
    });
    kernel_fails("kernel.shared", |k| {
        k.new_shared(0, 4);
    });
    kernel_fails("kernel.shared", |k| {
        k.new_shared(40 * 1024, 4);
        k.new_shared(9 * 1024, 4);
    });
}

#[test]
fn kernel_statement_rules() {
    let (u, d, f) = (Reg::from_u32(0), Reg::from_u32(1), Reg::from_u32(5));
    let undeclared = Reg::from_u32(99);
    kernel_fails("kernel.reg", |k| {
        k.body.push(op(undeclared, KOp::Mov, &[Operand::Reg(u)]))
    });
    kernel_fails("kernel.reg", |k| {
        k.body.push(op(u, KOp::Mov, &[Operand::Reg(undeclared)]))
    });
    kernel_fails("kernel.reg", |k| {
        k.body.push(Stmt::If {
            cond: undeclared,
            then_body: vec![],
            else_body: vec![],
        })
    });
    kernel_fails("kernel.signature", |k| {
        k.body.push(op(f, KOp::FAdd, &[Operand::Reg(f)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(f, KOp::FAdd, &[Operand::Reg(f), Operand::Reg(u)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(f, KOp::FAdd, &[Operand::Reg(f), Operand::U32(1)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(u, KOp::FAdd, &[Operand::Reg(f), Operand::Reg(f)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(u, KOp::IAdd, &[Operand::Reg(u), Operand::U64(1)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body.push(op(u, KOp::Mov, &[Operand::Reg(d)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(d, KOp::ShflBfly, &[Operand::Reg(d), Operand::U32(1)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(u, KOp::Shl, &[Operand::Reg(u), Operand::U32(32)]))
    });
    kernel_fails("kernel.signature", |k| {
        k.body
            .push(op(u, KOp::UDiv, &[Operand::Reg(u), Operand::U32(0)]))
    });
    kernel_fails("kernel.param", |k| k.body.push(op(d, KOp::Param(2), &[])));
    kernel_fails("kernel.param", |k| k.body.push(op(u, KOp::Param(0), &[])));
    kernel_fails("kernel.param", |k| {
        k.params.push(Param {
            name: "n".into(),
            kind: ParamKind::U32,
        });
        k.body.push(op(d, KOp::Param(2), &[]));
    });
    kernel_fails("kernel.shared_addr", |k| {
        k.body
            .push(op(u, KOp::SharedAddr(SharedBuf::from_u32(0)), &[]))
    });
    kernel_fails("kernel.math", |k| {
        k.body
            .push(op(f, KOp::Math(MathFn::Sin), &[Operand::Reg(f)]))
    });
    let mut k = copy_kernel("k");
    let f = Reg::from_u32(5);
    k.body.push(op(
        f,
        KOp::Math(MathFn::Pow),
        &[Operand::Reg(f), Operand::Reg(f)],
    ));
    verify_kernel(&k, false).unwrap();
    assert_eq!(rules(verify_kernel(&k, true)), vec!["kernel.math"]);
}

#[test]
fn kernel_memory_and_control_rules() {
    let (u, d, f) = (Reg::from_u32(0), Reg::from_u32(1), Reg::from_u32(5));
    let load = |dsts: Vec<Reg>, space, width, addr| Stmt::Load {
        dsts,
        space,
        width,
        addr,
        offset: 0,
    };
    kernel_fails("kernel.memory", |k| {
        k.body.push(load(vec![f], Space::Global, Width::V2, d))
    });
    kernel_fails("kernel.memory", |k| {
        k.body.push(load(vec![f], Space::Global, Width::B16, d))
    });
    kernel_fails("kernel.memory", |k| {
        k.body.push(load(vec![d], Space::Global, Width::B32, d))
    });
    kernel_fails("kernel.memory", |k| {
        k.body.push(load(vec![u], Space::Global, Width::B32, u))
    });
    kernel_fails("kernel.memory", |k| {
        k.body.push(load(vec![u], Space::Shared, Width::B32, d))
    });
    kernel_fails("kernel.memory", |k| {
        k.body.push(Stmt::Store {
            space: Space::Global,
            width: Width::V4,
            addr: d,
            offset: 0,
            values: vec![Operand::Reg(u); 3],
        })
    });
    kernel_fails("kernel.memory", |k| {
        k.body.push(Stmt::Store {
            space: Space::Global,
            width: Width::B8,
            addr: d,
            offset: 0,
            values: vec![Operand::F32(0)],
        })
    });
    let for_ = |var, step, body| Stmt::For {
        var,
        start: Operand::U32(0),
        end: Operand::U32(8),
        step,
        body,
    };
    kernel_fails("kernel.for", |k| {
        k.body.push(for_(f, Operand::U32(1), vec![]))
    });
    kernel_fails("kernel.for", |k| {
        k.body.push(for_(u, Operand::U32(0), vec![]))
    });
    kernel_fails("kernel.for", |k| {
        k.body.push(for_(u, Operand::Reg(f), vec![]))
    });
    kernel_fails("kernel.for", |k| {
        k.body.push(for_(
            u,
            Operand::U32(1),
            vec![Stmt::If {
                cond: Reg::from_u32(0),
                then_body: vec![],
                else_body: vec![op(u, KOp::Mov, &[Operand::U32(3)])],
            }],
        ))
    });
    kernel_fails("kernel.for", |k| {
        k.body.push(for_(
            u,
            Operand::U32(1),
            vec![for_(u, Operand::U32(1), vec![])],
        ))
    });
    kernel_fails("kernel.if", |k| {
        k.body.push(Stmt::If {
            cond: u,
            then_body: vec![],
            else_body: vec![],
        })
    });
    // Errors name the statement path and print the statement.
    let mut k = copy_kernel("k");
    let p = k.new_reg(RegType::Pred);
    k.body.push(Stmt::If {
        cond: p,
        then_body: vec![],
        else_body: vec![for_(
            u,
            Operand::U32(1),
            vec![op(f, KOp::FNeg, &[Operand::Reg(u)])],
        )],
    });
    let e = verify_kernel(&k, true).unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(
        e[0].location,
        "kernel k, body[8].else[0].for[0] `r5 = fneg r0`"
    );
    assert_eq!(
        e[0].to_string(),
        "kernel k, body[8].else[0].for[0] `r5 = fneg r0`: operand 0 must be f32, but r0 is u32 [kernel.signature]"
    );
}

// ---- programs ----

fn program_fails(rule: &str, f: impl FnOnce(&mut tessel_ir::kernel::Program)) {
    let mut p = small_program();
    verify_program(&p, false).unwrap();
    f(&mut p);
    let r = verify_program(&p, false);
    let msg = format!("{r:?}");
    assert!(rules(r).contains(&rule), "expected {rule}, got {msg}");
}

#[test]
fn program_rules() {
    use tessel_ir::{BufferId, KernelId};
    let (x, tmp, out) = (
        BufferId::from_u32(0),
        BufferId::from_u32(1),
        BufferId::from_u32(2),
    );
    let (k0, k1) = (KernelId::from_u32(0), KernelId::from_u32(1));
    // Kernel errors surface with the kernel's id.
    program_fails("kernel.signature", |p| {
        p.kernels[k1]
            .body
            .push(op(Reg::from_u32(5), KOp::Mov, &[Operand::U64(0)]));
    });
    let e = verify_program(&small_program(), true).unwrap_err();
    assert!(e.iter().all(
        |e| e.rule == "kernel.math" && e.location.starts_with("k0 (kernel two_step_k0), body[")
    ));
    program_fails("program.kernel", |p| {
        p.kernels[k1].name = p.kernels[k0].name.clone()
    });
    program_fails("program.launch", |p| {
        p.launches[1].kernel = KernelId::from_u32(7)
    });
    program_fails("program.launch", |p| {
        p.launches[1].args.pop().map(|_| ()).unwrap_or(())
    });
    program_fails("program.launch", |p| {
        p.launches[0].args[0] = LaunchArg::Buffer(tmp)
    });
    program_fails("program.launch", |p| {
        p.launches[0].args[1] = LaunchArg::Buffer(x)
    });
    program_fails("program.launch", |p| {
        p.launches[0].args[0] = LaunchArg::U32(1)
    });
    program_fails("program.launch", |p| {
        p.launches[0].args[0] = LaunchArg::Buffer(BufferId::from_u32(42))
    });
    program_fails("program.io", |p| p.inputs[0].1 = tmp);
    program_fails("program.io", |p| p.inputs.clear());
    program_fails("program.io", |p| p.outputs[0].1 = tmp);
    program_fails("program.io", |p| p.buffers[x].role = BufferRole::Input(1));
    program_fails("program.dataflow", |p| p.launches.swap(0, 1));
    program_fails("program.dataflow", |p| {
        p.launches.pop();
    });
    program_fails("program.dataflow", |p| {
        // The second kernel now only reads `out`: nothing writes it.
        if let ParamKind::Ptr { writes, .. } = &mut p.kernels[k1].params[1].kind {
            *writes = false;
        }
        let _ = out;
    });
}

// ---- in-place updates ----

/// `c: inout f32[2, 4, 3]`, `r: f32[2, 1, 3]`, `p: i32[2]`, then `edit` adds ops to the
/// graph given (c, r, p) and returns the value returned as output "c".
fn update_graph(
    edit: impl FnOnce(
        &mut Graph,
        tessel_ir::Value,
        tessel_ir::Value,
        tessel_ir::Value,
    ) -> tessel_ir::Value,
) -> Graph {
    let mut g = Graph::new("t");
    let c = g.push(
        Op::Input {
            index: 0,
            inout: true,
        },
        t(F32, &[2, 4, 3]),
    );
    let r = g.push(
        Op::Input {
            index: 1,
            inout: false,
        },
        t(F32, &[2, 1, 3]),
    );
    let p = g.push(
        Op::Input {
            index: 2,
            inout: false,
        },
        t(I32, &[2]),
    );
    g.inputs = vec![("c".into(), c), ("r".into(), r), ("p".into(), p)];
    let end = edit(&mut g, c, r, p);
    g.outputs.push(("c".into(), end));
    g
}

fn upd(
    g: &mut Graph,
    dst: tessel_ir::Value,
    rows: tessel_ir::Value,
    pos: tessel_ir::Value,
) -> tessel_ir::Value {
    g.push(
        Op::Update {
            dst,
            rows,
            at: Some(UpdateAt { pos, axis: 1 }),
        },
        t(F32, &[2, 4, 3]),
    )
}

/// A whole update of `dst` with `value` (AdamW's form).
fn upd_whole(g: &mut Graph, dst: tessel_ir::Value, value: tessel_ir::Value) -> tessel_ir::Value {
    g.push(
        Op::Update {
            dst,
            rows: value,
            at: None,
        },
        t(F32, &[2, 4, 3]),
    )
}

#[test]
fn update_rules() {
    // Valid: one update, two chained, none (the input returned as it is).
    ok(&update_graph(upd));
    ok(&update_graph(|g, c, r, p| {
        let u = upd(g, c, r, p);
        upd(g, u, r, p)
    }));
    ok(&update_graph(|_, c, _, _| c));
    // Reading the old value before the update is fine.
    ok(&update_graph(|g, c, r, p| {
        let s = g.push(
            Op::Reduce {
                op: ReduceOp::Sum,
                arg: c,
                axis: 2,
            },
            t(F32, &[2, 4, 1]),
        );
        g.outputs.push(("s".into(), s));
        upd(g, c, r, p)
    }));

    // Types: axis 0, rows of another dtype, rows longer than the axis, positions not [B].
    let typed = |axis: u32, rows: (DType, &[u64]), pos: (DType, &[u64])| {
        let mut g = Graph::new("t");
        let c = g.push(
            Op::Input {
                index: 0,
                inout: true,
            },
            t(F32, &[2, 4, 3]),
        );
        let r = g.push(
            Op::Input {
                index: 1,
                inout: false,
            },
            t(rows.0, rows.1),
        );
        let p = g.push(
            Op::Input {
                index: 2,
                inout: false,
            },
            t(pos.0, pos.1),
        );
        g.inputs = vec![("c".into(), c), ("r".into(), r), ("p".into(), p)];
        let u = g.push(
            Op::Update {
                dst: c,
                rows: r,
                at: Some(UpdateAt { pos: p, axis }),
            },
            t(F32, &[2, 4, 3]),
        );
        g.outputs.push(("c".into(), u));
        g
    };
    ok(&typed(1, (F32, &[2, 4, 3]), (I32, &[2])));
    ok(&typed(2, (F32, &[2, 4, 1]), (I32, &[2])));
    graph_fails(&typed(0, (F32, &[1, 4, 3]), (I32, &[2])), "graph.update");
    graph_fails(&typed(1, (Bf16, &[2, 1, 3]), (I32, &[2])), "graph.update");
    graph_fails(&typed(1, (F32, &[2, 5, 3]), (I32, &[2])), "graph.update");
    graph_fails(&typed(1, (F32, &[2, 1, 2]), (I32, &[2])), "graph.update");
    graph_fails(&typed(1, (F32, &[2, 1, 3]), (I32, &[1])), "graph.update");
    graph_fails(&typed(1, (F32, &[2, 1, 3]), (F32, &[2])), "graph.update");

    // In place: dst not an inout input.
    let mut g = update_graph(upd);
    g.ops[value(0)] = Op::Input {
        index: 0,
        inout: false,
    };
    graph_fails(&g, "graph.update");
    // The same value updated twice.
    graph_fails(
        &update_graph(|g, c, r, p| {
            let u = upd(g, c, r, p);
            let _ = upd(g, c, r, p);
            u
        }),
        "graph.update",
    );
    // A read of the old value after the update, directly or through a value computed
    // before it; rows computed from the value they overwrite.
    graph_fails(
        &update_graph(|g, c, r, p| {
            let u = upd(g, c, r, p);
            let stale = g.push(Op::Cast { arg: c }, t(F32, &[2, 4, 3]));
            g.outputs.push(("stale".into(), stale));
            u
        }),
        "graph.update",
    );
    graph_fails(
        &update_graph(|g, c, r, p| {
            let early = g.push(
                Op::Unary {
                    op: UnaryOp::Neg,
                    arg: c,
                },
                t(F32, &[2, 4, 3]),
            );
            let u = upd(g, c, r, p);
            let late = g.push(
                Op::Unary {
                    op: UnaryOp::Abs,
                    arg: early,
                },
                t(F32, &[2, 4, 3]),
            );
            g.outputs.push(("late".into(), late));
            u
        }),
        "graph.update",
    );
    graph_fails(
        &update_graph(|g, c, _, p| {
            let rows = g.push(
                Op::Slice {
                    arg: c,
                    axis: 1,
                    start: 0,
                },
                t(F32, &[2, 1, 3]),
            );
            upd(g, c, rows, p)
        }),
        "graph.update",
    );
    // A whole update may compute its value from the tensor it overwrites (its kernel
    // reads each element where it writes it); reading the old value after it may not.
    ok(&update_graph(|g, c, _, _| {
        let half = g.push(
            Op::Unary {
                op: UnaryOp::Neg,
                arg: c,
            },
            t(F32, &[2, 4, 3]),
        );
        let u = upd_whole(g, c, half);
        upd_whole(g, u, u)
    }));
    graph_fails(
        &update_graph(|g, c, _, _| {
            let neg = g.push(
                Op::Unary {
                    op: UnaryOp::Neg,
                    arg: c,
                },
                t(F32, &[2, 4, 3]),
            );
            let u = upd_whole(g, c, neg);
            let stale = g.push(Op::Cast { arg: neg }, t(F32, &[2, 4, 3]));
            g.outputs.push(("stale".into(), stale));
            u
        }),
        "graph.update",
    );
    // graph.inout: the output is not the end of the chain, or is missing.
    let mut g = update_graph(|g, c, r, p| {
        let u = upd(g, c, r, p);
        upd(g, u, r, p)
    });
    g.outputs[0].1 = value(3);
    graph_fails(&g, "graph.inout");
    let mut g = update_graph(|_, c, _, _| c);
    g.outputs.clear();
    graph_fails(&g, "graph.inout");
}

#[test]
fn update_fusion_rules() {
    // In the kitchen sink: g2 writes the update `u` of the inout input "cache" (`cache`), its
    // rows `row`.
    let g2 = Group::from_u32(2);
    let (g, _, _) = kitchen_sink_graph();
    let (u, cache, row) = g
        .ops
        .iter()
        .find_map(|(v, op)| match op {
            Op::Update { dst, rows, .. } => Some((v, *dst, *rows)),
            _ => None,
        })
        .expect("the kitchen sink has an update");
    fusion_fails("fusion.update", |_, f, _| {
        f.groups[g2].ops = GroupOps::Elementwise
    });
    fusion_fails("fusion.update", |_, f, _| {
        f.groups[g2].ops = GroupOps::Update {
            row_reductions: vec![value(4)],
        }
    });
    // A group after the update reading the value it overwrote (also a graph error).
    fusion_fails("fusion.update", |g, f, s| {
        let late = g.push(Op::Cast { arg: cache }, t(Bf16, &[4, 6, 8]));
        g.outputs.push(("late".into(), late));
        let g3 = f.new_group(GroupData {
            ops: GroupOps::Elementwise,
            outputs: vec![late],
        });
        s[g3] = s[Group::from_u32(1)].clone();
    });
    // The update's writer is not an update group.
    fusion_fails("fusion.update", |_, f, _| {
        f.writer[u] = Group::from_u32(1).into();
        f.groups[Group::from_u32(1)].outputs.push(u);
        f.groups[g2].outputs.clear();
    });
    let tile = |vector| {
        Some(Schedule {
            tile: TileConfig::Update {
                threads: 32,
                vector,
            },
            why: String::new(),
        })
    };
    fusion_fails("schedule.update", |_, _, s| s[g2] = tile(3));
    fusion_fails("schedule.kind", |_, _, s| {
        s[g2] = s[Group::from_u32(1)].clone()
    });
    // Along the last axis a vector is not allowed.
    fusion_fails("schedule.update", |g, _, _| {
        if let Op::Update { at: Some(at), .. } = &mut g.ops[u] {
            at.axis = 2;
        }
        g.types[row] = t(Bf16, &[4, 6, 1]);
    });
}

#[test]
fn inout_buffers() {
    use tessel_ir::BufferId;
    let x = BufferId::from_u32(0);
    // An inout buffer must be returned under its input's name.
    program_fails("program.io", |p| p.buffers[x].role = BufferRole::InOut(0));
    let mut p = small_program();
    p.buffers[x].role = BufferRole::InOut(0);
    p.outputs.push(("x".into(), x));
    verify_program(&p, false).unwrap();
    // Under another name it is not.
    p.outputs.last_mut().unwrap().0 = "y".into();
    assert!(rules(verify_program(&p, false)).contains(&"program.io"));
}

/// `f32(x) @ f32(w)^T` (x [3, 16] and w [5, 16] of `dt`) as one matmul group with `tile`.
fn widened_matmul(dt: DType, shape: tessel_ir::kernel::MmaShape) -> (Graph, Fusion, Schedules) {
    let mut g = Graph::new("widened");
    let x = g.push(
        Op::Input {
            index: 0,
            inout: false,
        },
        t(dt, &[3, 16]),
    );
    let w = g.push(
        Op::Input {
            index: 1,
            inout: false,
        },
        t(dt, &[5, 16]),
    );
    g.inputs = vec![("x".into(), x), ("w".into(), w)];
    let xf = g.push(Op::Cast { arg: x }, t(F32, &[3, 16]));
    let wf = g.push(Op::Cast { arg: w }, t(F32, &[5, 16]));
    let wt = g.push(
        Op::Permute {
            arg: wf,
            perm: vec![1, 0],
        },
        t(F32, &[16, 5]),
    );
    let mm = g.push(Op::MatMul { lhs: xf, rhs: wt }, t(F32, &[3, 5]));
    g.outputs.push(("out".into(), mm));
    let mut f = Fusion::default();
    let grp = f.new_group(GroupData {
        ops: GroupOps::Matmul {
            matmul: mm,
            row_epilogue: vec![],
        },
        outputs: vec![mm],
    });
    let mut s = Schedules::new();
    s[grp] = Some(Schedule {
        tile: TileConfig::Mma {
            bm: 64,
            bn: 16,
            bk: 16,
            warps_m: 4,
            warps_n: 1,
            stages: 2,
            split_k: 1,
            shape,
            epilogue: tessel_ir::graph::MmaEpilogue::Single,
            min_ctas_per_sm: 0,
            engine: tessel_ir::graph::MmaEngine::Sync,
        },
        why: String::new(),
    });
    (g, f, s)
}

/// A tensor-core tile's instruction is that of the dtype its operands are read in: 16-bit
/// under widening casts of 16-bit tensors, TF32 for an f32 matmul of f32 tensors.
#[test]
fn schedule_mma_shape_of_widened_operands() {
    use tessel_ir::kernel::MmaShape;
    let check = |dt, shape| {
        let (g, f, s) = widened_matmul(dt, shape);
        rules(verify_graph(&g, Some(&f), Some(&s)))
    };
    assert_eq!(check(Bf16, MmaShape::M16N8K16Bf16), Vec::<&str>::new());
    assert_eq!(check(F16, MmaShape::M16N8K16F16), Vec::<&str>::new());
    assert_eq!(check(Bf16, MmaShape::M16N8K8Tf32), vec!["schedule.mma"]);
    assert_eq!(check(Bf16, MmaShape::M16N8K16F16), vec!["schedule.mma"]);
    // f32 tensors under the casts are no widening: TF32.
    assert_eq!(check(F32, MmaShape::M16N8K8Tf32), Vec::<&str>::new());
    assert_eq!(check(F32, MmaShape::M16N8K16Bf16), vec!["schedule.mma"]);
}

#[test]
fn named_barrier_rules() {
    // copy_kernel has 32 threads.
    for s in [
        Stmt::BarSync { id: 1, threads: 32 },
        Stmt::BarArrive {
            id: 15,
            threads: 32,
        },
    ] {
        let mut k = copy_kernel("k");
        k.body.push(s);
        verify_kernel(&k, true).unwrap();
    }
    for (id, threads) in [(0, 32), (16, 32), (1, 0), (1, 16), (1, 64)] {
        kernel_fails("kernel.bar", |k| k.body.push(Stmt::BarSync { id, threads }));
        kernel_fails("kernel.bar", |k| {
            k.body.push(Stmt::BarArrive { id, threads })
        });
    }
    // Barriers count whole warps.
    kernel_fails("kernel.geometry", |k| {
        k.block = [48, 1, 1];
        k.body.push(Stmt::BarArrive { id: 1, threads: 32 });
    });
}

#[test]
fn mbarrier_tma_and_setmaxnreg_rules() {
    // copy_kernel: r0 u32 (tid), r1, r2, r3, r4 u64, r5 f32.
    let (u32r, u64r, f32r) = (Reg::from_u32(0), Reg::from_u32(1), Reg::from_u32(5));
    let good = [
        Stmt::MbarInit {
            addr: u32r,
            count: Operand::U32(1),
        },
        Stmt::MbarInit {
            addr: u32r,
            count: Operand::Reg(u32r),
        },
        Stmt::FenceMbarrierInit,
        Stmt::MbarArriveExpectTx {
            addr: u32r,
            bytes: Operand::U32(0xF_FFFF),
        },
        Stmt::MbarArrive { addr: u32r },
        Stmt::MbarWait {
            addr: u32r,
            parity: Operand::U32(1),
        },
        Stmt::TmaLoad {
            dst: u32r,
            tmap: u64r,
            coords: vec![Operand::Reg(u32r), Operand::U32(0)],
            mbar: u32r,
        },
        Stmt::SetMaxNReg {
            inc: true,
            regs: 240,
        },
        Stmt::SetMaxNReg {
            inc: false,
            regs: 24,
        },
    ];
    for s in good {
        let mut k = copy_kernel("k");
        k.body.push(s.clone());
        verify_kernel(&k, true).unwrap_or_else(|e| panic!("{s:?}: {e:?}"));
    }
    let mb = "kernel.mbarrier";
    let push = |s: Stmt| move |k: &mut Kernel| k.body.push(s);
    // Addresses are u32 (shared).
    kernel_fails(mb, push(Stmt::MbarArrive { addr: u64r }));
    kernel_fails(
        mb,
        push(Stmt::MbarInit {
            addr: u32r,
            count: Operand::U32(0),
        }),
    );
    kernel_fails(
        mb,
        push(Stmt::MbarInit {
            addr: u32r,
            count: Operand::U32(1 << 20),
        }),
    );
    kernel_fails(
        mb,
        push(Stmt::MbarInit {
            addr: u32r,
            count: Operand::Reg(f32r),
        }),
    );
    kernel_fails(
        mb,
        push(Stmt::MbarArriveExpectTx {
            addr: u32r,
            bytes: Operand::U32(1 << 20),
        }),
    );
    kernel_fails(
        mb,
        push(Stmt::MbarWait {
            addr: u32r,
            parity: Operand::U32(2),
        }),
    );
    kernel_fails(
        mb,
        push(Stmt::MbarWait {
            addr: u64r,
            parity: Operand::U32(0),
        }),
    );
    let tma = |dst, tmap, coords: Vec<Operand>, mbar| Stmt::TmaLoad {
        dst,
        tmap,
        coords,
        mbar,
    };
    let c2 = vec![Operand::U32(0), Operand::U32(0)];
    kernel_fails("kernel.tma", push(tma(u64r, u64r, c2.clone(), u32r)));
    kernel_fails("kernel.tma", push(tma(u32r, u32r, c2.clone(), u32r)));
    kernel_fails("kernel.tma", push(tma(u32r, u64r, c2, u64r)));
    kernel_fails("kernel.tma", push(tma(u32r, u64r, vec![], u32r)));
    kernel_fails(
        "kernel.tma",
        push(tma(u32r, u64r, vec![Operand::U32(0); 6], u32r)),
    );
    kernel_fails(
        "kernel.tma",
        push(tma(u32r, u64r, vec![Operand::Reg(f32r)], u32r)),
    );
    for regs in [16, 20, 252, 264, 0] {
        kernel_fails(
            "kernel.setmaxnreg",
            push(Stmt::SetMaxNReg { inc: true, regs }),
        );
    }
    // setmaxnreg is warp-wide.
    kernel_fails("kernel.geometry", |k| {
        k.block = [48, 1, 1];
        k.body.push(Stmt::SetMaxNReg {
            inc: false,
            regs: 40,
        });
    });
}

#[test]
fn griddep_rules() {
    // copy_kernel: body[0..5] ops (r4 the source address), body[5] the global load,
    // body[6] an op, body[7] the global store.
    let (u32r, addr) = (Reg::from_u32(0), Reg::from_u32(4));
    let prefetch = |bytes| Stmt::PrefetchL2 {
        addr,
        bytes: Operand::U32(bytes),
    };
    let with = |edit: &dyn Fn(&mut Kernel)| {
        let mut k = copy_kernel("k");
        edit(&mut k);
        k
    };
    // The wait before the first global access; a prefetch and the trigger may come first.
    let good = [
        with(&|k| k.body.insert(5, Stmt::GridDepWait)),
        with(&|k| {
            k.body.insert(5, Stmt::GridDepWait);
            k.body.insert(5, prefetch(128));
            k.body.insert(0, Stmt::GridDepLaunch);
        }),
        // Both arms of a branch wait.
        with(&|k| {
            let p = k.new_reg(RegType::Pred);
            k.body.insert(
                5,
                Stmt::If {
                    cond: p,
                    then_body: vec![Stmt::GridDepWait],
                    else_body: vec![Stmt::GridDepWait],
                },
            );
        }),
        // No wait at all: nothing to check.
        copy_kernel("k"),
    ];
    for k in good {
        verify_kernel(&k, true).unwrap_or_else(|e| panic!("{:?}: {e:?}", k.body));
    }
    let gd = "kernel.griddep";
    // The wait after the load.
    kernel_fails(gd, |k| k.body.insert(6, Stmt::GridDepWait));
    // Only one arm of a branch waits.
    kernel_fails(gd, |k| {
        let p = k.new_reg(RegType::Pred);
        k.body.insert(
            5,
            Stmt::If {
                cond: p,
                then_body: vec![Stmt::GridDepWait],
                else_body: vec![],
            },
        );
    });
    // A loop's body may run zero times.
    kernel_fails(gd, |k| {
        let i = k.new_reg(RegType::U32);
        k.body.insert(
            5,
            Stmt::For {
                var: i,
                start: Operand::U32(0),
                end: Operand::Reg(u32r),
                step: Operand::U32(1),
                body: vec![Stmt::GridDepWait],
            },
        );
    });
    // A prefetch is a u64 address and a multiple of 16 bytes.
    kernel_fails(gd, |k| k.body.insert(5, prefetch(24)));
    kernel_fails(gd, |k| k.body.insert(5, prefetch(0)));
    kernel_fails(gd, |k| {
        k.body.insert(
            5,
            Stmt::PrefetchL2 {
                addr: u32r,
                bytes: Operand::U32(16),
            },
        )
    });
}

#[test]
fn tensor_map_launch_rules() {
    use tessel_ir::kernel::{TensorMapDesc, TensorMapSwizzle};
    use tessel_ir::{BufferId, KernelId};
    let x = BufferId::from_u32(0); // bf16 [4, 8], step input 0
    let tmp = BufferId::from_u32(1); // f32 [4, 8], written by launch 0
    let k1 = KernelId::from_u32(1);
    // Kernel 1 takes a tensor map over x in place of its source pointer.
    let with_map = |t: TensorMapDesc| {
        move |p: &mut tessel_ir::kernel::Program| {
            p.kernels[k1].params[0].kind = ParamKind::TensorMap;
            p.launches[1].args[0] = LaunchArg::TensorMap(t);
        }
    };
    let map = |b, d, dims: &[u64], strides: &[u64], bx: &[u32], sw| {
        TensorMapDesc::new(b, d, dims, strides, bx, sw)
    };
    let ok = map(x, Bf16, &[8, 4], &[16], &[8, 4], TensorMapSwizzle::None);
    let mut p = small_program();
    with_map(ok)(&mut p);
    verify_program(&p, false).unwrap();
    // The f32 temp, as f32: written by launch 0 first.
    let mut p = small_program();
    with_map(map(
        tmp,
        F32,
        &[8, 4],
        &[32],
        &[4, 4],
        TensorMapSwizzle::B32,
    ))(&mut p);
    verify_program(&p, false).unwrap();
    let bad = [
        // dtype not the buffer's
        map(x, F32, &[8, 4], &[32], &[8, 4], TensorMapSwizzle::None),
        // past the buffer's end
        map(x, Bf16, &[8, 5], &[16], &[8, 4], TensorMapSwizzle::None),
        // stride not a multiple of 16
        map(x, Bf16, &[4, 8], &[8], &[8, 4], TensorMapSwizzle::None),
        // inner box of 8 bytes
        map(x, Bf16, &[8, 4], &[16], &[4, 4], TensorMapSwizzle::None),
        // inner box wider than the swizzle (64 bf16 = 128 bytes > 32)
        map(x, Bf16, &[64], &[], &[64], TensorMapSwizzle::B32),
        // box dimension above 256
        map(x, Bf16, &[8, 4], &[16], &[8, 257], TensorMapSwizzle::None),
        // no such buffer
        map(
            BufferId::from_u32(9),
            Bf16,
            &[8, 4],
            &[16],
            &[8, 4],
            TensorMapSwizzle::None,
        ),
    ];
    for t in bad {
        program_fails("program.launch", with_map(t));
    }
    // A map for a pointer and a pointer for a map.
    program_fails("program.launch", |p| {
        p.launches[1].args[0] = LaunchArg::TensorMap(ok)
    });
    program_fails("program.launch", |p| {
        p.kernels[k1].params[0].kind = ParamKind::TensorMap
    });
    // Read through a map before any launch writes it.
    program_fails("program.dataflow", |p| {
        with_map(map(
            tmp,
            F32,
            &[8, 4],
            &[32],
            &[4, 4],
            TensorMapSwizzle::None,
        ))(p);
        p.launches.swap(0, 1);
    });
}

/// `copy_kernel` whose load goes through an address of its read-only source alone (the
/// store through a register of its own), with the wait after the load, before the store.
fn early_load_copy(name: &str) -> Kernel {
    let mut k = copy_kernel(name);
    // body[6] `r4 = add.u64 r2, r3` made a fresh register, and the store's address with it.
    let dst_addr = k.new_reg(RegType::U64);
    if let Stmt::Op { dst, .. } = &mut k.body[6] {
        *dst = dst_addr;
    }
    if let Stmt::Store { addr, .. } = &mut k.body[7] {
        *addr = dst_addr;
    }
    k.body.insert(7, Stmt::GridDepWait);
    k
}

#[test]
fn loads_of_read_only_parameters_may_come_before_the_wait() {
    use tessel_ir::kernel::griddep::{before_wait, read_only_addresses};
    use tessel_ir::kernel::{BufferDecl, BufferRole, LaunchArg, ParamKind};
    let k = early_load_copy("k");
    // r1 (param 0, read) and r4 (r1 + offset) are addresses into the source.
    let ro = read_only_addresses(&k);
    assert_eq!(
        (ro.get(&Reg::from_u32(1)), ro.get(&Reg::from_u32(4))),
        (Some(&0), Some(&0))
    );
    assert!(!ro.contains_key(&Reg::from_u32(2)), "param 1 is written");
    let b = before_wait(&k);
    assert_eq!(
        (b.params.into_iter().collect::<Vec<_>>(), b.unordered.len()),
        (vec![0], 0)
    );
    verify_kernel(&k, true).unwrap();
    // The same load through a parameter the kernel writes needs the wait.
    let mut w = k.clone();
    w.params[0].kind = ParamKind::Ptr {
        dtype: DType::F32,
        writes: true,
    };
    assert!(rules(verify_kernel(&w, true)).contains(&"kernel.griddep"));
    // A register assigned from two parameters is no read-only address.
    let mut two = k.clone();
    two.body.insert(
        5,
        op(
            Reg::from_u32(4),
            KOp::AddU64,
            &[Operand::Reg(Reg::from_u32(2)), Operand::U64(0)],
        ),
    );
    assert!(rules(verify_kernel(&two, true)).contains(&"kernel.griddep"));

    // In a program: small_program's second kernel reads t0, which the first writes, so its
    // early load is refused; bound to a step input no launch writes, it is accepted.
    let k1 = tessel_ir::KernelId::from_u32(1);
    let mut p = small_program();
    p.kernels[k1] = early_load_copy("two_step_k1");
    let r = verify_program(&p, false);
    assert!(rules(r).contains(&"program.griddep"));
    let y = p.buffers.push(BufferDecl {
        name: "y".into(),
        ty: t(DType::F32, &[4, 8]),
        role: BufferRole::Input(1),
    });
    p.inputs.push(("y".into(), y));
    p.launches[1].args[0] = LaunchArg::Buffer(y);
    verify_program(&p, false).unwrap_or_else(|e| panic!("{e:?}"));
    // An inout input is written by its own kernel: refused.
    p.buffers[y].role = BufferRole::InOut(1);
    p.outputs.push(("y".into(), y));
    let r = verify_program(&p, false);
    assert!(rules(r).contains(&"program.griddep"), "inout");
}

/// Regressions from the review of stop 34's programmatic dependent launch.
#[test]
fn read_only_addresses_end_and_stay_sound_on_odd_registers() {
    use tessel_ir::kernel::griddep::read_only_addresses;
    use tessel_ir::text::read_program;
    // `r2 = add.u64 r0, r2`: r2 depends on itself alone. The analysis used to flip it
    // between two states forever; now it ends, and r2 is no read-only address.
    let hang = read_program(
        "program hang {
  buf0 = input 0 \"x\" : f32[256]
  buf1 = output \"out\" : f32[256]
  k0 = kernel hang_0 block [32, 1, 1] grid [1, 1, 1] {
    schedule \"elementwise\"
    param in0: ptr f32 read
    param out1: ptr f32 write
    regs r0: u64, r1: u64, r2: u64, r3: f32
    r0 = param 0
    r1 = param 1
    r2 = add.u64 r0, r2
    r3 = load.global.b32 [r0]
    store.global.b32 [r1], r3
  }
  launch k0(buf0, buf1)
  input \"x\" = buf0
  output \"out\" = buf1
}",
    )
    .unwrap();
    let k = hang.kernels.values().next().unwrap();
    let ro = read_only_addresses(k);
    assert_eq!(ro.get(&Reg::from_u32(0)), Some(&0));
    assert!(!ro.contains_key(&Reg::from_u32(2)), "{ro:?}");
    // r10 is x's address on most threads, but on thread 0 the written parameter's address
    // plus an unassigned register: no read-only address, so its load must wait.
    let k = read_program(
        "program uk {
  buf0 = input 0 \"x\" : f32[256]
  buf1 = output \"out\" : f32[256]
  k0 = kernel uk_1 block [256, 1, 1] grid [1, 1, 1] {
    schedule \"elementwise\"
    param in0: ptr f32 read
    param out1: ptr f32 write
    regs r0: u64, r1: u64, r2: u32, r3: u64, r4: u64, r5: f32, r6: u64, r7: pred, r8: u64, r9: u64, r10: u64
    r0 = param 0
    r1 = param 1
    r2 = special tid.x
    r3 = mul.wide.u32 r2, 4u32
    r7 = icmp.lt.u r2, 1u32
    r10 = mov r0
    if r7 {
      r9 = add.u64 r1, r9
      r10 = mov r9
    }
    r4 = add.u64 r10, r3
    r5 = load.global.b32 [r4]
    r6 = add.u64 r1, r3
    store.global.b32 [r6], r5
  }
  launch k0(buf0, buf1)
  input \"x\" = buf0
  output \"out\" = buf1
}",
    )
    .unwrap()
    .kernels
    .values()
    .next()
    .unwrap()
    .clone();
    let ro = read_only_addresses(&k);
    assert!(
        !ro.contains_key(&Reg::from_u32(10)) && !ro.contains_key(&Reg::from_u32(4)),
        "{ro:?}"
    );
    // An address plus an offset stays one; two addresses summed are none.
    assert!(ro.contains_key(&Reg::from_u32(0)));
    assert!(
        !ro.contains_key(&Reg::from_u32(6)),
        "the written parameter's address"
    );
}

#[test]
fn a_kernel_that_waits_waits_on_every_path() {
    // copy_kernel whose only wait is in one arm of a branch: the threads that take the
    // other never wait, so the kernel could complete before the one ahead.
    let mut k = copy_kernel("k");
    let p = k.new_reg(RegType::Pred);
    k.body.insert(
        0,
        Stmt::If {
            cond: p,
            then_body: vec![Stmt::GridDepWait],
            else_body: vec![],
        },
    );
    let r = verify_kernel(&k, true);
    assert!(
        format!("{r:?}").contains("never runs `griddepcontrol.wait`"),
        "{r:?}"
    );
}
