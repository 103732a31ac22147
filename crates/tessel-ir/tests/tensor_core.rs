//! The tensor-core and async-copy statements (`mma`, `ldmatrix`, `cp.async.*`) in the text
//! form and the verifier: a kernel with every variant round-trips and verifies, malformed
//! text is a reader error, and each rule catches its violation.

use tessel_ir::kernel::{
    CpAsyncCache, Kernel, MmaShape, Op, Operand, Param, ParamKind, RegType, Stmt, WgmmaA,
    WgmmaMajor,
};
use tessel_ir::text::{read_kernel, write_kernel};
use tessel_ir::verify::verify_kernel;
use tessel_ir::DType;
use tessel_testkit::ir::rules;

/// A valid kernel with every new statement: each mma shape, ldmatrix x1/x2/x4 with and
/// without `.trans`, both cp.async caches and sizes with and without `src_bytes`, commit and
/// both waits, `cvt.rna.tf32`.
fn tensor_core_kernel() -> Kernel {
    let mut k = Kernel {
        name: "tc".into(),
        params: vec![Param {
            name: "x".into(),
            kind: ParamKind::Ptr {
                dtype: DType::Bf16,
                writes: false,
            },
        }],
        block: [64, 1, 1],
        grid: [1, 1, 1],
        schedule: "tensor cores".into(),
        ..Default::default()
    };
    let sm = k.new_shared(1024, 128);
    let g = k.new_reg(RegType::U64);
    let s = k.new_reg(RegType::U32);
    let n = k.new_reg(RegType::U32);
    let f: Vec<_> = (0..8).map(|_| k.new_reg(RegType::F32)).collect();
    let u: Vec<_> = (0..6).map(|_| k.new_reg(RegType::U32)).collect();
    let mut body = vec![
        Stmt::Op {
            dst: g,
            op: Op::Param(0),
            args: vec![],
        },
        Stmt::Op {
            dst: s,
            op: Op::SharedAddr(sm),
            args: vec![],
        },
        Stmt::Op {
            dst: n,
            op: Op::Mov,
            args: vec![Operand::U32(8)],
        },
        Stmt::CpAsync {
            cache: CpAsyncCache::Cg,
            bytes: 16,
            dst: s,
            dst_offset: 16,
            src: g,
            src_offset: -16,
            src_bytes: Some(Operand::Reg(n)),
        },
        Stmt::CpAsync {
            cache: CpAsyncCache::Ca,
            bytes: 8,
            dst: s,
            dst_offset: 0,
            src: g,
            src_offset: 0,
            src_bytes: None,
        },
        Stmt::CpAsync {
            cache: CpAsyncCache::Ca,
            bytes: 4,
            dst: s,
            dst_offset: 32,
            src: g,
            src_offset: 8,
            src_bytes: Some(Operand::U32(0)),
        },
        Stmt::CpAsyncCommit,
        Stmt::CpAsyncWait(1),
        Stmt::CpAsyncWaitAll,
        Stmt::Barrier,
    ];
    for (count, trans) in [(1, false), (2, true), (4, false), (4, true)] {
        body.push(Stmt::Ldmatrix {
            dsts: u[..count].to_vec(),
            trans,
            addr: s,
            offset: if trans { 512 } else { -16 },
        });
    }
    body.push(Stmt::Op {
        dst: u[4],
        op: Op::CvtRnaTf32F32,
        args: vec![Operand::Reg(f[0])],
    });
    for shape in MmaShape::ALL {
        body.push(Stmt::Mma {
            shape,
            d: [f[0], f[1], f[2], f[3]],
            a: u[..shape.a_regs()].to_vec(),
            b: u[4..4 + shape.b_regs()].to_vec(),
            c: [f[4], f[5], f[6], f[7]],
        });
    }
    k.body = body;
    k
}

#[test]
fn tensor_core_statements_round_trip_and_verify() {
    let k = tensor_core_kernel();
    verify_kernel(&k, true).unwrap();
    let text = write_kernel(&k);
    let k2 = read_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(k2, k, "{text}");
    assert_eq!(write_kernel(&k2), text);
    for needle in [
        "cp.async.cg.16 [r1 + 16], [r0 - 16], r2\n",
        "cp.async.ca.8 [r1], [r0]\n",
        "cp.async.ca.4 [r1 + 32], [r0 + 8], 0u32\n",
        "cp.async.commit\n",
        "cp.async.wait 1\n",
        "cp.async.wait_all\n",
        "r11 = ldmatrix.x1 [r1 - 16]\n",
        "r11, r12 = ldmatrix.x2.trans [r1 + 512]\n",
        "r11, r12, r13, r14 = ldmatrix.x4 [r1 - 16]\n",
        "r11, r12, r13, r14 = ldmatrix.x4.trans [r1 + 512]\n",
        "r15 = cvt.rna.tf32 r3\n",
        "r3, r4, r5, r6 = mma.m16n8k16.bf16 [r11, r12, r13, r14], [r15, r16], [r7, r8, r9, r10]\n",
        "= mma.m16n8k16.f16 [",
        "= mma.m16n8k8.tf32 [",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn malformed_tensor_core_text_is_a_reader_error() {
    let text = write_kernel(&tensor_core_kernel());
    for (from, to, message) in [
        (
            "mma.m16n8k16.bf16",
            "mma.m16n8k32.bf16",
            "unknown mma shape",
        ),
        (
            "r3, r4, r5, r6 = mma",
            "r3, r4, r5 = mma",
            "four f32 registers",
        ),
        ("[r7, r8, r9, r10]", "[r7, r8, r9]", "four f32 registers"),
        ("ldmatrix.x1 ", "ldmatrix.x3 ", "expected `ldmatrix.x1`"),
        (
            "r11 = ldmatrix.x1",
            "r11, r12 = ldmatrix.x1",
            "writes 1 registers",
        ),
        ("cp.async.ca.8", "cp.async.cx.8", "expected `cp.async.ca.N`"),
        (
            "cp.async.ca.8",
            "cp.async.ca.eight",
            "expected `cp.async.ca.N`",
        ),
        ("cp.async.wait 1", "cp.async.wait r1", "group count"),
    ] {
        let bad = text.replacen(from, to, 1);
        assert_ne!(bad, text, "{from}");
        let e = read_kernel(&bad).expect_err(to);
        assert!(e.message.contains(message), "{to}: {e}");
    }
}

/// The kernel with statement `i` (of the body) replaced.
fn with(i: usize, f: impl FnOnce(&mut Kernel, Stmt) -> Stmt) -> Kernel {
    let mut k = tensor_core_kernel();
    let s = k.body[i].clone();
    k.body[i] = f(&mut k, s);
    k
}

fn fails(k: &Kernel, rule: &str) {
    let r = verify_kernel(k, true);
    let msg = format!("{r:?}");
    assert!(rules(r).contains(&rule), "expected {rule}, got {msg}");
}

#[test]
fn verifier_rules_for_tensor_core_statements() {
    let body = tensor_core_kernel().body;
    let mma = body
        .iter()
        .position(|s| matches!(s, Stmt::Mma { .. }))
        .unwrap();
    let ldm = body
        .iter()
        .position(|s| matches!(s, Stmt::Ldmatrix { .. }))
        .unwrap();
    // mma: wrong register counts and types.
    fails(
        &with(mma, |_, mut s| {
            if let Stmt::Mma { a, .. } = &mut s {
                a.pop();
            }
            s
        }),
        "kernel.mma",
    );
    fails(
        &with(mma, |k, mut s| {
            let x = k.new_reg(RegType::U32);
            if let Stmt::Mma { c, .. } = &mut s {
                c[2] = x;
            }
            s
        }),
        "kernel.mma",
    );
    fails(
        &with(mma, |k, mut s| {
            let x = k.new_reg(RegType::F32);
            if let Stmt::Mma { b, .. } = &mut s {
                b[0] = x;
            }
            s
        }),
        "kernel.mma",
    );
    // ldmatrix: 3 matrices; an f32 destination; a u64 address.
    fails(
        &with(ldm, |k, _| Stmt::Ldmatrix {
            dsts: (0..3).map(|_| k.new_reg(RegType::U32)).collect(),
            trans: false,
            addr: tessel_ir::Reg::from_u32(1),
            offset: 0,
        }),
        "kernel.ldmatrix",
    );
    fails(
        &with(ldm, |k, _| Stmt::Ldmatrix {
            dsts: vec![k.new_reg(RegType::F32)],
            trans: false,
            addr: tessel_ir::Reg::from_u32(1),
            offset: 0,
        }),
        "kernel.ldmatrix",
    );
    fails(
        &with(ldm, |k, _| Stmt::Ldmatrix {
            dsts: vec![k.new_reg(RegType::U32)],
            trans: false,
            addr: tessel_ir::Reg::from_u32(0),
            offset: 0,
        }),
        "kernel.ldmatrix",
    );
    // cp.async: sizes, address spaces, src_bytes.
    let cp = |cache, bytes, dst: u32, src: u32, src_bytes| {
        with(3, move |_, _| Stmt::CpAsync {
            cache,
            bytes,
            dst: tessel_ir::Reg::from_u32(dst),
            dst_offset: 0,
            src: tessel_ir::Reg::from_u32(src),
            src_offset: 0,
            src_bytes,
        })
    };
    fails(&cp(CpAsyncCache::Cg, 8, 1, 0, None), "kernel.cp_async");
    fails(&cp(CpAsyncCache::Ca, 2, 1, 0, None), "kernel.cp_async");
    fails(&cp(CpAsyncCache::Ca, 16, 0, 0, None), "kernel.cp_async");
    fails(&cp(CpAsyncCache::Ca, 16, 1, 1, None), "kernel.cp_async");
    fails(
        &cp(CpAsyncCache::Ca, 4, 1, 0, Some(Operand::U32(5))),
        "kernel.cp_async",
    );
    fails(
        &cp(CpAsyncCache::Ca, 4, 1, 0, Some(Operand::U64(4))),
        "kernel.cp_async",
    );
    verify_kernel(&cp(CpAsyncCache::Ca, 4, 1, 0, Some(Operand::U32(4))), true).unwrap();
    // Warp-wide statements need whole warps; cp.async alone does not.
    let mut k = tensor_core_kernel();
    k.block = [48, 1, 1];
    fails(&k, "kernel.geometry");
    k.body.retain(|s| {
        matches!(
            s,
            Stmt::Op { .. }
                | Stmt::CpAsync { .. }
                | Stmt::CpAsyncCommit
                | Stmt::CpAsyncWait(_)
                | Stmt::CpAsyncWaitAll
        )
    });
    verify_kernel(&k, true).unwrap();
    // The signature of cvt.rna.tf32: f32 -> u32.
    let k = with(ldm + 4, |k, _| Stmt::Op {
        dst: k.new_reg(RegType::F32),
        op: Op::CvtRnaTf32F32,
        args: vec![Operand::f32(1.0)],
    });
    fails(&k, "kernel.signature");
}

/// A warpgroup kernel with every wgmma statement: each input type at n = 8 and 256, the
/// fence, commit, wait and the async-proxy fence.
fn wgmma_kernel() -> Kernel {
    use tessel_ir::kernel::{WgmmaInput, WgmmaShape};
    let mut k = Kernel {
        name: "wg".into(),
        block: [256, 1, 1],
        grid: [1, 1, 1],
        ..Default::default()
    };
    let da = k.new_reg(RegType::U64);
    let db = k.new_reg(RegType::U64);
    let f: Vec<_> = (0..128).map(|_| k.new_reg(RegType::F32)).collect();
    let mut body = vec![
        Stmt::Op {
            dst: da,
            op: Op::Mov,
            args: vec![Operand::U64(1 << 62)],
        },
        Stmt::Op {
            dst: db,
            op: Op::Mov,
            args: vec![Operand::U64(1 << 62 | 64)],
        },
        Stmt::FenceProxyAsync,
        Stmt::WgmmaFence,
    ];
    for input in WgmmaInput::ALL {
        for n in [8, 256] {
            let shape = WgmmaShape { n, input };
            body.push(Stmt::Wgmma {
                shape,
                d: f[..shape.d_regs()].to_vec(),
                a: WgmmaA::Desc(da),
                b_desc: db,
                b_major: WgmmaMajor::K,
            });
        }
    }
    // A from registers, B MN-major (P·V in attention).
    let a: Vec<_> = (0..4).map(|_| k.new_reg(RegType::U32)).collect();
    for &r in &a {
        body.push(Stmt::Op {
            dst: r,
            op: Op::Mov,
            args: vec![Operand::U32(0x3f80_3f80)],
        });
    }
    body.push(Stmt::WgmmaFence);
    body.push(Stmt::Wgmma {
        shape: WgmmaShape {
            n: 128,
            input: WgmmaInput::Bf16,
        },
        d: f[..64].to_vec(),
        a: WgmmaA::Regs(a),
        b_desc: db,
        b_major: WgmmaMajor::Mn,
    });
    body.extend([Stmt::WgmmaCommit, Stmt::WgmmaWait(1), Stmt::WgmmaWait(0)]);
    k.body = body;
    k
}

#[test]
fn wgmma_statements_round_trip_and_verify() {
    let k = wgmma_kernel();
    verify_kernel(&k, true).unwrap();
    let text = write_kernel(&k);
    let k2 = read_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(k2, k, "{text}");
    for needle in [
        "r2, r3, r4, r5 = wgmma.m64n8k16.bf16 r0, r1\n",
        "= wgmma.m64n256k8.tf32 r0, r1\n",
        "= wgmma.m64n128k16.bf16 [r130, r131, r132, r133], r1, trans_b\n",
        "wgmma.fence\n",
        "wgmma.commit\n",
        "wgmma.wait 1\n",
        "fence.proxy.async\n",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // Shapes PTX does not have, and a k that is not the input's, do not read.
    for bad in [
        "m64n12k16.bf16",
        "m64n264k16.bf16",
        "m64n8k8.bf16",
        "m64n8k16.tf32",
    ] {
        let t = text.replacen("m64n8k16.bf16", bad, 1);
        assert!(read_kernel(&t).is_err(), "{bad} read");
    }
}

#[test]
fn verifier_rules_for_wgmma() {
    use tessel_ir::kernel::{WgmmaInput, WgmmaShape};
    let first = |k: &mut Kernel| {
        k.body
            .iter_mut()
            .find(|s| matches!(s, Stmt::Wgmma { .. }))
            .unwrap()
            .clone()
    };
    let set = |k: &mut Kernel, s: Stmt| {
        let i = k
            .body
            .iter()
            .position(|s| matches!(s, Stmt::Wgmma { .. }))
            .unwrap();
        k.body[i] = s;
    };
    // Too few accumulators.
    let mut k = wgmma_kernel();
    if let Stmt::Wgmma {
        shape,
        a,
        b_desc,
        d,
        ..
    } = first(&mut k)
    {
        set(
            &mut k,
            Stmt::Wgmma {
                shape,
                a,
                b_desc,
                b_major: WgmmaMajor::K,
                d: d[..3].to_vec(),
            },
        );
    }
    fails(&k, "kernel.wgmma");
    // An n PTX does not have.
    let mut k = wgmma_kernel();
    if let Stmt::Wgmma { a, b_desc, d, .. } = first(&mut k) {
        let shape = WgmmaShape {
            n: 12,
            input: WgmmaInput::Bf16,
        };
        set(
            &mut k,
            Stmt::Wgmma {
                shape,
                a,
                b_desc,
                b_major: WgmmaMajor::K,
                d: d.iter().chain(&d[..2]).copied().collect(),
            },
        );
    }
    fails(&k, "kernel.wgmma");
    // A u32 accumulator and a u32 descriptor.
    let mut k = wgmma_kernel();
    let bad = k.new_reg(RegType::U32);
    if let Stmt::Wgmma {
        shape,
        b_desc,
        mut d,
        ..
    } = first(&mut k)
    {
        d[0] = bad;
        set(
            &mut k,
            Stmt::Wgmma {
                shape,
                a: WgmmaA::Desc(bad),
                b_desc,
                b_major: WgmmaMajor::K,
                d,
            },
        );
    }
    fails(&k, "kernel.wgmma");
    // A in registers: four u32, 16-bit inputs only; an MN-major B: 16-bit inputs only.
    let last = |k: &Kernel| {
        k.body
            .iter()
            .rposition(|s| matches!(s, Stmt::Wgmma { .. }))
            .unwrap()
    };
    let regs_form = |k: &mut Kernel, f: &dyn Fn(Stmt) -> Stmt| {
        let i = last(k);
        k.body[i] = f(k.body[i].clone());
    };
    let k = wgmma_kernel();
    verify_kernel(&k, true).unwrap();
    let mut k3 = k.clone();
    regs_form(&mut k3, &|s| match s {
        Stmt::Wgmma {
            shape,
            d,
            a: WgmmaA::Regs(mut rs),
            b_desc,
            b_major,
        } => {
            rs.pop();
            Stmt::Wgmma {
                shape,
                d,
                a: WgmmaA::Regs(rs),
                b_desc,
                b_major,
            }
        }
        s => s,
    });
    fails(&k3, "kernel.wgmma");
    for with_regs in [true, false] {
        let mut kt = k.clone();
        regs_form(&mut kt, &|s| match s {
            Stmt::Wgmma { d, a, b_desc, .. } => Stmt::Wgmma {
                shape: WgmmaShape {
                    n: 128,
                    input: WgmmaInput::Tf32,
                },
                d,
                a: if with_regs { a } else { WgmmaA::Desc(b_desc) },
                b_desc,
                b_major: if with_regs {
                    WgmmaMajor::K
                } else {
                    WgmmaMajor::Mn
                },
            },
            s => s,
        });
        fails(&kt, "kernel.wgmma");
    }
    // A CTA that is not whole warpgroups.
    let mut k = wgmma_kernel();
    k.block = [96, 1, 1];
    fails(&k, "kernel.wgmma");
}
