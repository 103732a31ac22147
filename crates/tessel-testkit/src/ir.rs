//! A graph, a kernel and a program that between them use every variant of every IR enum,
//! and that verify: what `tessel-ir`'s reader, writer and verifier tests run on. The lists
//! of every variant are written out here, not taken from `tessel-ir`'s own tables, so that
//! a variant missing from one of those is caught.

use tessel_ir::graph::{
    BinaryOp, Fusion, Graph, GroupData, GroupOps, Op, ReduceOp, Schedule, Schedules, TileConfig,
    UnaryOp, UpdateAt,
};
use tessel_ir::kernel::{
    BufferDecl, BufferRole, FCmp, ICmp, Kernel, Launch, LaunchArg, MathFn, Op as KOp, Operand,
    Param, ParamKind, Program, RegType, SigType, Space, Special, Stmt, Width,
};
use tessel_ir::verify::VerifyError;
use tessel_ir::{DType, TensorType, Value};

pub fn t(d: DType, s: &[u64]) -> TensorType {
    TensorType::new(d, s.to_vec())
}

pub const ALL_UNARY: [UnaryOp; 19] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Not,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Silu,
    UnaryOp::Erf,
    UnaryOp::Gelu,
    UnaryOp::GeluTanh,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Trunc,
];

pub const ALL_BINARY: [BinaryOp; 16] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Rem,
    BinaryOp::Min,
    BinaryOp::Max,
    BinaryOp::Pow,
    BinaryOp::Eq,
    BinaryOp::Ne,
    BinaryOp::Lt,
    BinaryOp::Le,
    BinaryOp::Gt,
    BinaryOp::Ge,
    BinaryOp::And,
    BinaryOp::Or,
];

/// Every f32 comparison.
pub const ALL_FCMP: [FCmp; 7] = [
    FCmp::Eq,
    FCmp::Ne,
    FCmp::Lt,
    FCmp::Le,
    FCmp::Gt,
    FCmp::Ge,
    FCmp::Nan,
];

/// Every integer comparison.
pub const ALL_ICMP: [ICmp; 10] = [
    ICmp::Eq,
    ICmp::Ne,
    ICmp::LtU,
    ICmp::LeU,
    ICmp::GtU,
    ICmp::GeU,
    ICmp::LtS,
    ICmp::LeS,
    ICmp::GtS,
    ICmp::GeS,
];

/// An RMSNorm-like graph plus one op of every kind; valid. Returns the graph, its fusion
/// groups and schedules.
pub fn kitchen_sink_graph() -> (Graph, Fusion, Schedules) {
    use DType::*;
    let mut g = Graph::new("kitchen_sink");
    let x = g.push(
        Op::Input {
            index: 0,
            inout: false,
        },
        t(Bf16, &[4, 8]),
    );
    let w = g.push(
        Op::Input {
            index: 1,
            inout: false,
        },
        t(Bf16, &[8]),
    );
    g.inputs.push(("x".into(), x));
    g.inputs.push(("w \"weight\"\n".into(), w));
    let xf = g.push(Op::Cast { arg: x }, t(F32, &[4, 8]));
    let sq = g.push(
        Op::Binary {
            op: BinaryOp::Mul,
            lhs: xf,
            rhs: xf,
        },
        t(F32, &[4, 8]),
    );
    let sum = g.push(
        Op::Reduce {
            op: ReduceOp::Sum,
            arg: sq,
            axis: 1,
        },
        t(F32, &[4, 1]),
    );
    let inv = g.push(Op::Const { value: 0.125 }, t(F32, &[]));
    let inv2 = g.push(Op::Reshape { arg: inv }, t(F32, &[1, 1]));
    let invb = g.push(Op::Broadcast { arg: inv2 }, t(F32, &[4, 1]));
    let var = g.push(
        Op::Binary {
            op: BinaryOp::Mul,
            lhs: sum,
            rhs: invb,
        },
        t(F32, &[4, 1]),
    );
    let r = g.push(
        Op::Unary {
            op: UnaryOp::Rsqrt,
            arg: var,
        },
        t(F32, &[4, 1]),
    );
    let rb = g.push(Op::Broadcast { arg: r }, t(F32, &[4, 8]));
    let y = g.push(
        Op::Binary {
            op: BinaryOp::Mul,
            lhs: xf,
            rhs: rb,
        },
        t(F32, &[4, 8]),
    );
    let yb = g.push(Op::Cast { arg: y }, t(Bf16, &[4, 8]));
    let w2 = g.push(Op::Reshape { arg: w }, t(Bf16, &[1, 8]));
    let wb = g.push(Op::Broadcast { arg: w2 }, t(Bf16, &[4, 8]));
    let out = g.push(
        Op::Binary {
            op: BinaryOp::Mul,
            lhs: wb,
            rhs: yb,
        },
        t(Bf16, &[4, 8]),
    );
    // One of every other op.
    let mut cmp = None;
    for op in ALL_BINARY {
        let is_cmp = matches!(
            op,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        );
        if matches!(op, BinaryOp::And | BinaryOp::Or) {
            let c = cmp.expect("comparisons come first");
            g.push(Op::Binary { op, lhs: c, rhs: c }, t(Bool, &[4, 8]));
        } else {
            let v = g.push(
                Op::Binary {
                    op,
                    lhs: xf,
                    rhs: y,
                },
                t(if is_cmp { Bool } else { F32 }, &[4, 8]),
            );
            if is_cmp {
                cmp = Some(v);
            }
        }
    }
    let cmp = cmp.unwrap();
    for op in ALL_UNARY {
        if op == UnaryOp::Not {
            g.push(Op::Unary { op, arg: cmp }, t(Bool, &[4, 8]));
        } else {
            g.push(Op::Unary { op, arg: y }, t(F32, &[4, 8]));
        }
    }
    g.push(
        Op::Select {
            cond: cmp,
            on_true: xf,
            on_false: y,
        },
        t(F32, &[4, 8]),
    );
    g.push(
        Op::Permute {
            arg: xf,
            perm: vec![1, 0],
        },
        t(F32, &[8, 4]),
    );
    for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean] {
        g.push(
            Op::Reduce {
                op,
                arg: xf,
                axis: 0,
            },
            t(F32, &[1, 8]),
        );
    }
    g.push(
        Op::Slice {
            arg: xf,
            axis: 1,
            start: 2,
        },
        t(F32, &[4, 3]),
    );
    g.push(
        Op::Concat {
            args: vec![xf, y, xf],
            axis: 1,
        },
        t(F32, &[4, 24]),
    );
    g.push(Op::Iota { axis: 1 }, t(I32, &[4, 8]));
    for value in [
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-7f32 as f64,
        3.0e38f32 as f64,
    ] {
        g.push(Op::Const { value }, t(F32, &[]));
    }
    g.push(Op::Const { value: -5.0 }, t(I32, &[2]));
    g.push(Op::Const { value: 1.0 }, t(Bool, &[]));
    g.push(Op::Const { value: 65504.0 }, t(F16, &[]));
    g.push(Op::Const { value: 1.0078125 }, t(Bf16, &[]));
    let sm = g.push(Op::Softmax { arg: y, axis: 1 }, t(F32, &[4, 8]));
    // An `inout` input updated in place: `out` written as row `pos[b]` of `cache[b]`.
    let cache = g.push(
        Op::Input {
            index: 2,
            inout: true,
        },
        t(Bf16, &[4, 6, 8]),
    );
    g.inputs.push(("cache".into(), cache));
    let row = g.push(Op::Reshape { arg: out }, t(Bf16, &[4, 1, 8]));
    let pos = g.push(Op::Const { value: 5.0 }, t(I32, &[4]));
    let upd = g.push(
        Op::Update {
            dst: cache,
            rows: row,
            at: Some(UpdateAt { pos, axis: 1 }),
        },
        t(Bf16, &[4, 6, 8]),
    );
    for op in [ReduceOp::ArgMax, ReduceOp::ArgMin] {
        g.push(
            Op::Reduce {
                op,
                arg: xf,
                axis: 1,
            },
            t(I32, &[4, 1]),
        );
    }
    g.push(
        Op::Reduce {
            op: ReduceOp::LogSumExp,
            arg: xf,
            axis: 1,
        },
        t(F32, &[4, 1]),
    );
    for (largest, indices) in [(true, false), (false, true)] {
        let dt = if indices { I32 } else { F32 };
        g.push(
            Op::TopK {
                arg: xf,
                axis: 1,
                largest,
                indices,
            },
            t(dt, &[4, 3]),
        );
    }
    let cs = g.push(Op::Cumsum { arg: xf, axis: 1 }, t(F32, &[4, 8]));
    // Rows of `y` read at run-time positions (an embedding lookup's form).
    let ids = g.push(Op::Iota { axis: 0 }, t(I32, &[3, 8]));
    g.push(
        Op::Gather {
            arg: y,
            index: ids,
            axis: 0,
        },
        t(F32, &[3, 8]),
    );
    g.outputs.push(("out".into(), out));
    g.outputs.push(("probs".into(), sm));
    g.outputs.push(("out again".into(), out));
    g.outputs.push(("cache".into(), upd));
    g.outputs.push(("running".into(), cs));

    let mut f = Fusion::default();
    let g0 = f.new_group(GroupData {
        ops: GroupOps::RowReduction {
            reductions: vec![sum],
        },
        outputs: vec![out, sm],
    });
    let g1 = f.new_group(GroupData {
        ops: GroupOps::Elementwise,
        outputs: vec![y],
    });
    let g2 = f.new_group(GroupData {
        ops: GroupOps::Update {
            row_reductions: vec![],
        },
        outputs: vec![upd],
    });
    let g3 = f.new_group(GroupData {
        ops: GroupOps::Scan { cumsum: cs },
        outputs: vec![cs],
    });
    let mut s = Schedules::new();
    s[g3] = Some(Schedule {
        tile: TileConfig::Scan {
            threads: 32,
            chunk: 32,
            rows: 1,
        },
        why: "rows of 8: one chunk".into(),
    });
    s[g2] = Some(Schedule {
        tile: TileConfig::Update {
            threads: 32,
            vector: 8,
        },
        why: "the 32 row elements".into(),
    });
    s[g0] = Some(Schedule {
        tile: TileConfig::RowReduction {
            threads_per_row: 32,
            rows_per_cta: 4,
            vector: 8,
        },
        why: "rows of 8: one warp per row".into(),
    });
    s[g1] = Some(Schedule {
        tile: TileConfig::Elementwise {
            threads: 256,
            vector: 4,
        },
        why: String::new(),
    });
    (g, f, s)
}

/// Every kernel op, each attribute value included.
pub fn all_kernel_ops() -> Vec<KOp> {
    let mut ops = {
        use KOp::*;
        vec![
            Mov,
            FAdd,
            FSub,
            FMul,
            FDiv,
            FFma,
            FSqrt,
            FNeg,
            FAbs,
            FMin,
            FMax,
            FRint,
            FFloor,
            FCeil,
            FTrunc,
            IAdd,
            ISub,
            IMulLo,
            UMulHi,
            UDiv,
            URem,
            Shl,
            ShrU,
            ShrS,
            And,
            Or,
            Xor,
            Not,
            PAnd,
            POr,
            PNot,
            Select,
            BitsToF32,
            F32ToBits,
            CvtRniS32F32,
            CvtRziS32F32,
            CvtF32S32,
            CvtF32U32,
            PackBf16x2,
            PackF16x2,
            F16ToF32,
            CvtU64U32,
            AddU64,
            MulWideU32,
            ShflBfly,
            CvtRnaTf32F32,
            Param(0),
            Param(1),
        ]
    };
    ops.extend(ALL_FCMP.map(KOp::FCmp));
    ops.extend(ALL_ICMP.map(KOp::ICmp));
    for s in [
        Special::TidX,
        Special::NtidX,
        Special::CtaidX,
        Special::CtaidY,
        Special::NctaidX,
        Special::LaneId,
    ] {
        ops.push(KOp::Special(s));
    }
    for m in [
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Exp,
        MathFn::ExpF32,
        MathFn::ExpF32Nonpos,
        MathFn::Log,
        MathFn::Rsqrt,
        MathFn::Pow,
        MathFn::Tanh,
        MathFn::Sigmoid,
        MathFn::Silu,
        MathFn::SiluF32,
        MathFn::Erf,
        MathFn::Fmod,
    ] {
        ops.push(KOp::Math(m));
    }
    ops
}

/// A valid kernel with every op (operands from [`KOp::signature`], alternating registers and
/// immediates), every width and space of load and store, loops and branches.
pub fn kitchen_sink_kernel() -> Kernel {
    let mut k = Kernel {
        name: "kitchen_sink_k0".into(),
        block: [64, 1, 1],
        grid: [3, 2, 1],
        schedule: "elementwise { threads: 64, vector: 1 }; sums \"in order\"".into(),
        ..Default::default()
    };
    k.params = vec![
        Param {
            name: "x".into(),
            kind: ParamKind::Ptr {
                dtype: DType::Bf16,
                writes: false,
            },
        },
        Param {
            name: "n".into(),
            kind: ParamKind::U32,
        },
        Param {
            name: "out put".into(),
            kind: ParamKind::Ptr {
                dtype: DType::F32,
                writes: true,
            },
        },
    ];
    let smem = k.new_shared(256, 16);
    k.new_shared(4, 4);
    let p = k.new_reg(RegType::Pred);
    let u = k.new_reg(RegType::U32);
    let d = k.new_reg(RegType::U64);
    let f = k.new_reg(RegType::F32);
    let reg_of = |ty: RegType| match ty {
        RegType::Pred => p,
        RegType::U32 => u,
        RegType::U64 => d,
        RegType::F32 => f,
    };
    let mut body = Vec::new();
    let fimms = [
        1.0f32.to_bits(),
        (-0.0f32).to_bits(),
        f32::NAN.to_bits(),
        0x7fc0_0001,
        f32::INFINITY.to_bits(),
        1,
    ];
    for (i, op) in all_kernel_ops().into_iter().enumerate() {
        let sig = op.signature();
        let dty = match (sig.result, op) {
            (SigType::Is(t), _) => t,
            (SigType::Param, KOp::Param(n)) => k.params[n as usize].kind.reg_type(),
            (SigType::T, KOp::Mov) if i % 2 == 0 => RegType::Pred,
            (SigType::T, _) => RegType::F32,
            _ => RegType::U32,
        };
        let dst = k.new_reg(dty);
        let args = sig
            .args
            .iter()
            .enumerate()
            .map(|(j, st)| {
                let ty = match st {
                    SigType::Is(t) => *t,
                    _ => dty,
                };
                let imm = (i + j) % 3 == 0;
                match ty {
                    _ if !imm => Operand::Reg(reg_of(ty)),
                    RegType::U32 => Operand::U32((i * 7 % 31) as u32 + 1),
                    RegType::U64 => Operand::U64(u64::MAX - i as u64),
                    RegType::F32 => Operand::F32(fimms[i % fimms.len()]),
                    RegType::Pred => Operand::Reg(p),
                }
            })
            .collect();
        body.push(Stmt::Op { dst, op, args });
    }
    for bits in fimms {
        body.push(Stmt::Op {
            dst: f,
            op: KOp::FAdd,
            args: vec![Operand::Reg(f), Operand::F32(bits)],
        });
    }
    body.push(Stmt::Op {
        dst: u,
        op: KOp::SharedAddr(smem),
        args: vec![],
    });
    let v: Vec<_> = (0..4).map(|_| k.new_reg(RegType::U32)).collect();
    let mut inner = Vec::new();
    for (space, addr) in [(Space::Global, d), (Space::Shared, u)] {
        for (width, offset) in [
            (Width::B8, 0),
            (Width::B16, -2),
            (Width::B32, 4),
            (Width::V2, i32::MIN),
            (Width::V4, i32::MAX),
        ] {
            let n = match width {
                Width::V2 => 2,
                Width::V4 => 4,
                _ => 1,
            };
            inner.push(Stmt::Load {
                dsts: v[..n].to_vec(),
                space,
                width,
                addr,
                offset,
            });
            let mut values: Vec<Operand> = v[..n].iter().map(|r| Operand::Reg(*r)).collect();
            if width == Width::B32 {
                values = vec![Operand::F32(0x3f80_0000)];
            }
            if width == Width::V2 {
                values[1] = Operand::U32(7);
            }
            inner.push(Stmt::Store {
                space,
                width,
                addr,
                offset,
                values,
            });
        }
    }
    inner.push(Stmt::If {
        cond: p,
        then_body: vec![Stmt::Barrier],
        else_body: vec![],
    });
    let i = k.new_reg(RegType::U32);
    body.push(Stmt::For {
        var: i,
        start: Operand::U32(0),
        end: Operand::Reg(u),
        step: Operand::U32(64),
        body: vec![Stmt::If {
            cond: p,
            then_body: inner,
            else_body: vec![
                Stmt::Barrier,
                Stmt::BarArrive { id: 1, threads: 64 },
                Stmt::BarSync {
                    id: 15,
                    threads: 32,
                },
                Stmt::For {
                    var: v[3],
                    start: Operand::Reg(u),
                    end: Operand::U32(u32::MAX),
                    step: Operand::Reg(u),
                    body: vec![],
                },
            ],
        }],
    });
    body.push(Stmt::If {
        cond: p,
        then_body: vec![],
        else_body: vec![],
    });
    k.body = body;
    k
}

/// A small valid program: two kernels, a temp buffer between them.
pub fn small_program() -> Program {
    let mut p = Program {
        name: "two_step".into(),
        ..Default::default()
    };
    let x = p.buffers.push(BufferDecl {
        name: "x".into(),
        ty: t(DType::Bf16, &[4, 8]),
        role: BufferRole::Input(0),
    });
    let tmp = p.buffers.push(BufferDecl {
        name: "t0".into(),
        ty: t(DType::F32, &[4, 8]),
        role: BufferRole::Temp,
    });
    let out = p.buffers.push(BufferDecl {
        name: "out".into(),
        ty: t(DType::F32, &[4, 8]),
        role: BufferRole::Output,
    });
    let mut k0 = kitchen_sink_kernel();
    k0.name = "two_step_k0".into();
    let mut k1 = copy_kernel("two_step_k1");
    k1.params[0].kind = ParamKind::Ptr {
        dtype: DType::F32,
        writes: false,
    };
    let k0 = p.kernels.push(k0);
    let k1 = p.kernels.push(k1);
    p.launches.push(Launch {
        kernel: k0,
        args: vec![
            LaunchArg::Buffer(x),
            LaunchArg::U32(32),
            LaunchArg::Buffer(tmp),
        ],
    });
    p.launches.push(Launch {
        kernel: k1,
        args: vec![LaunchArg::Buffer(tmp), LaunchArg::Buffer(out)],
    });
    p.inputs.push(("x".into(), x));
    p.outputs.push(("out".into(), out));
    p.outputs.push(("out2".into(), out));
    p
}

/// `out[tid] = src[tid]` over f32, one CTA of 32 threads.
pub fn copy_kernel(name: &str) -> Kernel {
    let mut k = Kernel {
        name: name.into(),
        block: [32, 1, 1],
        grid: [1, 1, 1],
        ..Default::default()
    };
    k.params = vec![
        Param {
            name: "src".into(),
            kind: ParamKind::Ptr {
                dtype: DType::F32,
                writes: false,
            },
        },
        Param {
            name: "dst".into(),
            kind: ParamKind::Ptr {
                dtype: DType::F32,
                writes: true,
            },
        },
    ];
    let tid = k.new_reg(RegType::U32);
    let src = k.new_reg(RegType::U64);
    let dst = k.new_reg(RegType::U64);
    let off = k.new_reg(RegType::U64);
    let a = k.new_reg(RegType::U64);
    let x = k.new_reg(RegType::F32);
    k.body = vec![
        Stmt::Op {
            dst: tid,
            op: KOp::Special(Special::TidX),
            args: vec![],
        },
        Stmt::Op {
            dst: src,
            op: KOp::Param(0),
            args: vec![],
        },
        Stmt::Op {
            dst,
            op: KOp::Param(1),
            args: vec![],
        },
        Stmt::Op {
            dst: off,
            op: KOp::MulWideU32,
            args: vec![Operand::Reg(tid), Operand::U32(4)],
        },
        Stmt::Op {
            dst: a,
            op: KOp::AddU64,
            args: vec![Operand::Reg(src), Operand::Reg(off)],
        },
        Stmt::Load {
            dsts: vec![x],
            space: Space::Global,
            width: Width::B32,
            addr: a,
            offset: 0,
        },
        Stmt::Op {
            dst: a,
            op: KOp::AddU64,
            args: vec![Operand::Reg(dst), Operand::Reg(off)],
        },
        Stmt::Store {
            space: Space::Global,
            width: Width::B32,
            addr: a,
            offset: 0,
            values: vec![Operand::Reg(x)],
        },
    ];
    k
}

/// The rule names of a verifier result (empty when it passed).
pub fn rules(r: Result<(), Vec<VerifyError>>) -> Vec<&'static str> {
    match r {
        Ok(()) => vec![],
        Err(es) => es.iter().map(|e| e.rule).collect(),
    }
}

pub fn value(i: u32) -> Value {
    Value::from_u32(i)
}
