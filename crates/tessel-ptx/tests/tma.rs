//! The PTX rows of the mbarrier, TMA and setmaxnreg statements, on the warp-specialised
//! kernel the executor runs (`tessel_testkit::tma`): printed for sm_90a and assembled by
//! ptxas 13.0 for sm_90a.

mod common;

use common::{assemble_for, assert_exact, legalized, renumbered};
use tessel_ir::kernel::{Kernel, Operand, RegType, Stmt};
use tessel_ptx::{write_kernel, PtxError, PtxOptions};
use tessel_testkit::tma::ring_kernel;

fn sm90a() -> PtxOptions {
    PtxOptions::with_header((8, 0), "sm_90a")
}

fn emit_90a(k: &Kernel) -> String {
    let ptx = write_kernel(&legalized(k), &sm90a()).unwrap_or_else(|e| panic!("{e}"));
    assert_exact(&ptx);
    assemble_for(&ptx, "sm_90a");
    ptx
}

fn lines(ptx: &str) -> Vec<&str> {
    ptx.lines().map(str::trim).collect()
}

#[test]
fn warp_specialised_tma_kernel_assembles_for_sm_90a() {
    for setmaxnreg in [false, true] {
        let ptx = emit_90a(&ring_kernel(false, setmaxnreg));
        let ls = lines(&ptx);
        for row in [
            ".param .align 64 .b8 tma_ring_param_0[128], // x: CUtensorMap",
            "mov.b64 %rd0, tma_ring_param_0;",
            "cvta.param.u64 %rd0, %rd0;",
            "fence.mbarrier_init.release.cluster;",
        ] {
            assert!(ls.contains(&row), "missing {row:?} in\n{ptx}");
        }
        let has = |prefix: &str| ls.iter().any(|l| l.starts_with(prefix));
        assert!(has("mbarrier.init.shared::cta.b64 [%r"), "{ptx}");
        assert!(
            ls.iter().any(
                |l| l.starts_with("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r")
                    && l.ends_with("], 2048;")
            ),
            "{ptx}"
        );
        assert!(
            has("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r"),
            "{ptx}"
        );
        assert!(has("mbarrier.arrive.shared::cta.b64 _, [%r"), "{ptx}");
        // The wait: a labelled try_wait and a branch back while it fails.
        let w = ls
            .iter()
            .position(|l| l.starts_with("mbarrier.try_wait.parity.shared::cta.b64 %p"))
            .unwrap_or_else(|| panic!("no try_wait in\n{ptx}"));
        assert!(
            ls[w - 1].starts_with("$L__mbar") && ls[w - 1].ends_with("_wait:"),
            "{ptx}"
        );
        let label = ls[w - 1].trim_end_matches(':');
        assert!(ls[w + 1].starts_with("@!%p") && ls[w + 1].ends_with(&format!("bra {label};")));
        assert_eq!(
            has("setmaxnreg.dec.sync.aligned.u32 40;"),
            setmaxnreg,
            "{ptx}"
        );
        assert_eq!(has("setmaxnreg.inc.sync.aligned.u32 232;"), setmaxnreg);
    }
}

#[test]
fn the_tensor_operand_takes_immediate_coordinates() {
    let mut k = ring_kernel(false, false);
    // Replace the row coordinate by an immediate.
    fn walk(b: &mut [Stmt]) {
        for s in b {
            match s {
                Stmt::TmaLoad { coords, .. } => coords[1] = Operand::U32(16),
                Stmt::For { body, .. } => walk(body),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    walk(then_body);
                    walk(else_body);
                }
                _ => {}
            }
        }
    }
    walk(&mut k.body);
    let ptx = emit_90a(&k);
    assert!(ptx.contains(", {%r"), "{ptx}");
    assert!(ptx.contains(", 16}], [%r"), "{ptx}");
}

#[test]
fn names_do_not_depend_on_arena_indices() {
    let k = ring_kernel(false, true);
    let a = write_kernel(&legalized(&k), &sm90a()).unwrap();
    let b = write_kernel(&legalized(&renumbered(&k)), &sm90a()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn rows_outside_the_rules_are_errors() {
    // setmaxnreg exists only on sm_90a.
    let e = write_kernel(
        &legalized(&ring_kernel(false, true)),
        &PtxOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, PtxError::Malformed { message, .. } if message.contains("sm_90a")),
        "{e}"
    );
    // A wait's parity must be u32 (here an f32 register).
    let mut k = ring_kernel(false, false);
    let f = k.new_reg(RegType::F32);
    let a = k.new_reg(RegType::U32);
    k.body.push(Stmt::MbarWait {
        addr: a,
        parity: Operand::Reg(f),
    });
    let e = write_kernel(&k, &sm90a()).unwrap_err();
    assert!(matches!(e, PtxError::NoRow { .. }), "{e}");
    // A tensor map's address is u64.
    let mut k = ring_kernel(false, false);
    let a = k.new_reg(RegType::U32);
    k.body.push(Stmt::TmaLoad {
        dst: a,
        tmap: a,
        coords: vec![Operand::U32(0)],
        mbar: a,
    });
    let e = write_kernel(&k, &sm90a()).unwrap_err();
    assert!(matches!(e, PtxError::NoRow { .. }), "{e}");
}

/// `copy_kernel` with the programmatic dependent launch's statements: the trigger and an L2
/// prefetch of the source before the wait, the wait before the first global access.
fn griddep_kernel(bytes: Operand) -> Kernel {
    let mut k = tessel_testkit::ir::copy_kernel("griddep");
    // body[4] computes the source address r4; body[5] is the global load.
    let addr = tessel_ir::Reg::from_u32(4);
    k.body.splice(
        5..5,
        [
            Stmt::PrefetchL2 { addr, bytes },
            Stmt::GridDepLaunch,
            Stmt::GridDepWait,
        ],
    );
    k
}

#[test]
fn griddepcontrol_and_l2_prefetch_rows() {
    let n = tessel_ir::Reg::from_u32(0);
    for (bytes, row) in [
        (Operand::U32(128), "cp.async.bulk.prefetch.L2.global [%rd"),
        (Operand::Reg(n), "cp.async.bulk.prefetch.L2.global [%rd"),
    ] {
        let k = griddep_kernel(bytes);
        tessel_ir::verify::verify_kernel(&k, true).unwrap();
        for target in ["sm_90a", "sm_90"] {
            let ptx = write_kernel(&legalized(&k), &PtxOptions::with_header((8, 0), target))
                .unwrap_or_else(|e| panic!("{e}"));
            assemble_for(&ptx, target);
            let l = lines(&ptx);
            let at = |needle: &str| {
                l.iter()
                    .position(|s| s.starts_with(needle))
                    .unwrap_or_else(|| panic!("no {needle:?} in\n{ptx}"))
            };
            let (prefetch, launch, wait, load) = (
                at(row),
                at("griddepcontrol.launch_dependents;"),
                at("griddepcontrol.wait;"),
                at("ld.global"),
            );
            assert!(prefetch < launch && launch < wait && wait < load, "{ptx}");
            match bytes {
                Operand::U32(b) => assert!(l[prefetch].ends_with(&format!("], {b};")), "{ptx}"),
                _ => assert!(l[prefetch].contains("], %r"), "{ptx}"),
            }
        }
    }
    // Neither exists before sm_90; a prefetch size is a nonzero multiple of 16.
    let sm80 = PtxOptions::with_header((8, 0), "sm_80");
    let e = write_kernel(&griddep_kernel(Operand::U32(128)), &sm80).unwrap_err();
    assert!(
        matches!(&e, PtxError::Malformed { message, .. } if message.contains("sm_90")),
        "{e}"
    );
    let e = write_kernel(&griddep_kernel(Operand::U32(24)), &sm90a()).unwrap_err();
    assert!(matches!(&e, PtxError::Malformed { .. }), "{e}");
}
