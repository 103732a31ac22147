//! The PTX rows of the tensor-core and async-copy statements, on the kernels shared with the
//! executor and GPU tests (`tessel_testkit::mma`); every kernel is assembled by
//! ptxas 13.0 for sm_90 (`common::emit`).

mod common;

use common::{emit, renumbered};
use tessel_ir::kernel::{CpAsyncCache, MmaShape, Operand, RegType, Stmt};
use tessel_ptx::{write_kernel, PtxError, PtxOptions};
use tessel_testkit::mma as mk;

fn lines(ptx: &str) -> Vec<&str> {
    ptx.lines().map(str::trim).collect()
}

/// The one line that starts with `prefix`.
fn line_with<'a>(ptx: &'a str, prefix: &str) -> &'a str {
    let found: Vec<&str> = lines(ptx)
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .collect();
    assert!(!found.is_empty(), "no `{prefix}` in:\n{ptx}");
    found[0]
}

#[test]
fn mma_rows() {
    for (shape, head) in [
        (
            MmaShape::M16N8K16Bf16,
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f",
        ),
        (
            MmaShape::M16N8K16F16,
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f",
        ),
        (
            MmaShape::M16N8K8Tf32,
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f",
        ),
    ] {
        let (ptx, _) = emit(&mk::mma_single(shape));
        let l = line_with(&ptx, "mma.");
        assert!(l.starts_with(head), "{l}");
        // {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}
        let groups: Vec<usize> = l
            .split('{')
            .skip(1)
            .map(|g| g.split('}').next().unwrap_or("").split(", ").count())
            .collect();
        assert_eq!(groups, [4, 4, 2, 4], "{l}");
        if shape == MmaShape::M16N8K8Tf32 {
            assert!(
                lines(&ptx)
                    .iter()
                    .any(|l| l.starts_with("cvt.rna.tf32.f32 %r")),
                "{ptx}"
            );
        }
    }
}

#[test]
fn ldmatrix_rows() {
    let (ptx, _) = emit(&mk::ldmatrix_all());
    for head in [
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r",
        "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r",
        "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r",
    ] {
        line_with(&ptx, head);
    }
    assert!(
        line_with(&ptx, "ldmatrix.sync.aligned.m8n8.x2.").ends_with("+16];"),
        "{ptx}"
    );
}

#[test]
fn cp_async_rows() {
    let (ptx, _) = emit(&mk::cp_async_tail());
    let ls = lines(&ptx);
    for (prefix, size) in [
        ("cp.async.cg.shared.global [%r", "], 16, %r"),
        ("cp.async.ca.shared.global [%r", "], 8, %r"),
        ("cp.async.ca.shared.global [%r", "], 4, %r"),
    ] {
        assert!(
            ls.iter()
                .any(|l| l.starts_with(prefix) && l.contains(size) && l.contains(", [%rd")),
            "no {prefix}..{size} in:\n{ptx}"
        );
    }
    for row in [
        "cp.async.commit_group;",
        "cp.async.wait_group 1;",
        "cp.async.wait_all;",
    ] {
        assert!(ls.contains(&row), "missing {row}:\n{ptx}");
    }
}

#[test]
fn cp_async_immediate_src_size_and_offsets_assemble() {
    let mut k = mk::cp_async_tail();
    let mut n = 0;
    fn walk(body: &mut [Stmt], n: &mut usize) {
        for s in body {
            if let Stmt::CpAsync {
                src_bytes,
                src_offset,
                bytes,
                ..
            } = s
            {
                // Full copies without the operand, partial ones with an immediate.
                *src_bytes = if *n % 2 == 0 {
                    None
                } else {
                    Some(Operand::U32(*bytes / 2))
                };
                *src_offset = 0;
                *n += 1;
            }
        }
    }
    walk(&mut k.body, &mut n);
    assert_eq!(n, 4);
    let (ptx, _) = emit(&k);
    assert!(ptx.contains("], 16;"), "{ptx}");
    assert!(ptx.contains("], 4, 2;"), "{ptx}");
}

#[test]
fn gemm_assembles_without_spills() {
    let (ptx, report) = emit(&mk::gemm_bf16());
    for op in [
        "cp.async.cg.shared.global",
        "cp.async.commit_group;",
        "cp.async.wait_group 1;",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "bar.sync 0;",
    ] {
        assert!(ptx.contains(op), "missing {op}:\n{ptx}");
    }
    if let Some(report) = report {
        let f = report
            .function("gemm_bf16")
            .expect("gemm_bf16 in the report");
        eprintln!("gemm_bf16: {} registers", f.registers);
    }
}

#[test]
fn every_kernel_assembles_and_names_are_stable() {
    for k in mk::all() {
        let (ptx, _) = emit(&k);
        let again =
            write_kernel(&common::legalized(&renumbered(&k)), &PtxOptions::default()).unwrap();
        assert_eq!(ptx, again, "{}", k.name);
    }
}

#[test]
fn ill_typed_statements_have_no_row() {
    // An mma whose D is u32.
    let mut k = mk::mma_single(MmaShape::M16N8K16Bf16);
    let bad = k.regs.push(RegType::U32);
    for s in &mut k.body {
        if let Stmt::Mma { d, .. } = s {
            d[0] = bad;
        }
    }
    match write_kernel(&k, &PtxOptions::default()) {
        Err(PtxError::NoRow { op, types, .. }) => {
            assert!(op.starts_with("Mma(M16N8K16Bf16) D"), "{op}");
            assert!(types.contains("u32"), "{types}");
        }
        other => panic!("{other:?}"),
    }
    // A cp.async.cg of 8 bytes does not exist.
    let mut k = mk::cp_async_tail();
    for s in &mut k.body {
        if let Stmt::CpAsync { cache, bytes, .. } = s {
            if *cache == CpAsyncCache::Ca {
                *cache = CpAsyncCache::Cg;
                assert!(*bytes < 16);
            }
        }
    }
    assert!(matches!(
        write_kernel(&k, &PtxOptions::default()),
        Err(PtxError::NoRow { .. })
    ));
}

/// The warpgroup kernels (`tessel_testkit::wgmma`), headed `.target sm_90a` (wgmma exists
/// only there), assembled for sm_90a with no spill.
#[test]
fn wgmma_kernels_assemble_for_sm_90a() {
    use tessel_ir::kernel::WgmmaInput;
    use tessel_testkit::wgmma as wk;
    let opts = PtxOptions::with_header((8, 0), "sm_90a");
    for k in wk::all() {
        let ptx = write_kernel(&common::legalized(&k), &opts).unwrap_or_else(|e| panic!("{e}"));
        for op in [
            "fence.proxy.async.shared::cta;",
            "wgmma.fence.sync.aligned;",
            "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 0;",
        ] {
            assert!(ptx.contains(op), "{}: missing {op}:\n{ptx}", k.name);
        }
        let l = line_with(&ptx, "wgmma.mma_async");
        // A in registers takes no imm-trans-a; an MN-major B has imm-trans-b 1.
        let tail = if k.name.contains("tf32") {
            "1, 1, 1;"
        } else if k.name.contains("rs_mn") {
            "1, 1, 1, 1;"
        } else {
            "1, 1, 1, 0, 0;"
        };
        assert!(l.ends_with(tail), "{l}");
        common::assemble_for(&ptx, "sm_90a");
    }
    // The row of the n = 256 bf16 shape: 128 accumulators, two u64 descriptors.
    let k = wk::wgmma_gemm(WgmmaInput::Bf16, 256, 2);
    let ptx = write_kernel(&common::legalized(&k), &opts).unwrap();
    let l = line_with(&ptx, "wgmma.mma_async");
    assert!(
        l.starts_with("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%f"),
        "{l}"
    );
    let d = l
        .split('{')
        .nth(1)
        .and_then(|g| g.split('}').next())
        .unwrap();
    assert_eq!(d.split(", ").count(), 128, "{l}");
    assert!(l.contains("}, %rd"), "{l}");
    // A from registers: a vector of four 32-bit registers, then B's descriptor.
    let k = wk::wgmma_rs_mn(WgmmaInput::Bf16, 128, 1);
    let ptx = write_kernel(&common::legalized(&k), &opts).unwrap();
    let l = line_with(&ptx, "wgmma.mma_async");
    let a = l
        .split('{')
        .nth(2)
        .and_then(|g| g.split('}').next())
        .unwrap();
    assert_eq!(a.split(", ").count(), 4, "{l}");
    assert!(a.starts_with("%r"), "{l}");
    assert!(l.contains("}, %rd"), "{l}");
}
