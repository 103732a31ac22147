//! The ptxas runner: locating it, parsing its diagnostics and resource reports.

use super::*;

/// Adds 1.0 to `n` floats in place; one thread per element.
const ADD_ONE: &str = r#".version 8.0
.target sm_90
.address_size 64

.visible .entry add_one(
.param .u64 p_buf,
.param .u32 p_n
)
{
.reg .pred %p<2>;
.reg .b32 %r<6>;
.reg .f32 %f<3>;
.reg .b64 %rd<5>;

ld.param.u64 %rd1, [p_buf];
ld.param.u32 %r1, [p_n];
mov.u32 %r2, %ctaid.x;
mov.u32 %r3, %ntid.x;
mov.u32 %r4, %tid.x;
mad.lo.s32 %r5, %r2, %r3, %r4;
setp.ge.u32 %p1, %r5, %r1;
@%p1 bra DONE;
cvta.to.global.u64 %rd2, %rd1;
mul.wide.u32 %rd3, %r5, 4;
add.s64 %rd4, %rd2, %rd3;
ld.global.f32 %f1, [%rd4];
add.rn.f32 %f2, %f1, 0f3F800000;
st.global.f32 [%rd4], %f2;
DONE:
ret;
}

.visible .entry stage_in_shared(.param .u64 p_out)
{
.shared .align 4 .b8 tile[1024];
.reg .b32 %r<4>;
.reg .b64 %rd<3>;

mov.u32 %r1, %tid.x;
shl.b32 %r2, %r1, 2;
mov.u32 %r3, tile;
add.u32 %r3, %r3, %r2;
st.shared.u32 [%r3], %r1;
bar.sync 0;
ld.shared.u32 %r1, [%r3];
ld.param.u64 %rd1, [p_out];
cvta.to.global.u64 %rd2, %rd1;
st.global.u32 [%rd2], %r1;
ret;
}
"#;

/// Fails the test unless ptxas is present or `TESSEL_SKIP_PTXAS=1` says to skip.
fn ptxas_or_skip() -> Option<Ptxas> {
    match Ptxas::locate_unless_skipped() {
        Ok(Some(ptxas)) => Some(ptxas),
        Ok(None) => {
            eprintln!("skipping: ptxas not found and {SKIP_ENV}=1");
            None
        }
        Err(e) => panic!("{e}\n(set {SKIP_ENV}=1 to skip ptxas tests on purpose)"),
    }
}

#[test]
fn pinned_version() {
    let Some(ptxas) = ptxas_or_skip() else { return };
    let version = ptxas.version().expect("ptxas --version");
    assert!(
        version.contains("release 13.0"),
        "{} reports {version:?}; expected CUDA 13.0 (scripts/install-ptxas.sh)",
        ptxas.path().display()
    );
}

#[test]
fn valid_kernel_reports_registers_and_no_spills() {
    let Some(ptxas) = ptxas_or_skip() else { return };
    let report = ptxas
        .assemble(ADD_ONE, "sm_90")
        .expect("valid PTX assembles");

    let add_one = report.function("add_one").expect("add_one reported");
    assert!(add_one.is_entry);
    assert!(add_one.registers > 0, "{add_one:?}\n{}", report.log);
    assert!(!add_one.spills(), "{add_one:?}");
    assert_eq!(add_one.shared_bytes, 0);
    assert_eq!(add_one.stack_frame_bytes, 0);

    let staged = report.function("stage_in_shared").expect("reported");
    assert_eq!(staged.shared_bytes, 1024, "{}", report.log);
    assert_eq!(staged.barriers, 1);
    assert_eq!(report.kernels().count(), 2);
    assert!(!report.cubin.is_empty());
    assert!(
        !report.log.contains("tessel-ptxas-"),
        "temporary path leaked into the log"
    );
}

#[test]
fn invalid_kernel_error_names_the_line() {
    let Some(ptxas) = ptxas_or_skip() else { return };
    // Line 27 of ADD_ONE is the add.rn.f32; make it read an undeclared register.
    let broken = ADD_ONE.replace(
        "add.rn.f32 %f2, %f1, 0f3F800000;",
        "add.rn.f32 %f2, %f9, 0f3F800000;",
    );
    let Err(PtxasError::Assembly {
        diagnostics,
        stderr,
        ..
    }) = ptxas.assemble(&broken, "sm_90")
    else {
        panic!("assembling undeclared %f9 did not fail with PtxasError::Assembly");
    };
    assert!(stderr.contains("line 27"), "{stderr}");
    assert!(stderr.contains("input.ptx"), "{stderr}");
    let first = diagnostics
        .iter()
        .find(|d| d.severity == Severity::Error && d.line.is_some())
        .unwrap_or_else(|| panic!("no line-numbered error in {diagnostics:?}"));
    assert_eq!(first.line, Some(27), "{diagnostics:?}");
    assert!(
        diagnostics.iter().any(|d| d.message.contains("%f9")),
        "{diagnostics:?}"
    );
}

#[test]
fn unknown_arch_is_an_assembly_error() {
    let Some(ptxas) = ptxas_or_skip() else { return };
    let err = ptxas
        .assemble(ADD_ONE, "sm_1")
        .expect_err("sm_1 is not a target");
    assert!(matches!(err, PtxasError::Assembly { .. }), "{err}");
}

#[test]
fn missing_binary_is_an_io_error_not_a_panic() {
    let ptxas = Ptxas::at("/nonexistent/tessel/ptxas");
    let err = ptxas
        .assemble(ADD_ONE, "sm_90")
        .expect_err("no such binary");
    assert!(matches!(err, PtxasError::Io { .. }), "{err}");
}

#[test]
fn not_found_message_says_how_to_install() {
    let err = PtxasError::NotFound {
        searched: "nowhere".to_owned(),
    };
    assert!(err.to_string().contains("scripts/install-ptxas.sh"));
}

#[test]
fn parses_spills_and_callee_functions() {
    // Shape of ptxas 13.0 -v output for a kernel that spills and calls a .func.
    let log = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
264 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 16 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0], 264 bytes cumulative stack size
ptxas info    : Compile time = 2.252 ms
ptxas info    : Function properties for helper
256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas input.ptx, line 12; warning : Registers are spilled to local memory in function 'k', 8 bytes spill stores, 12 bytes spill loads
";
    let functions = parse_functions(log);
    assert_eq!(functions.len(), 2);
    let k = &functions[0];
    assert_eq!(
        *k,
        FunctionReport {
            name: "k".to_owned(),
            is_entry: true,
            registers: 16,
            barriers: 1,
            shared_bytes: 2048,
            stack_frame_bytes: 264,
            spill_store_bytes: 8,
            spill_load_bytes: 12,
            const_bytes: 360,
            cumulative_stack_bytes: 264,
        }
    );
    assert!(k.spills());
    assert_eq!(functions[1].name, "helper");
    assert!(!functions[1].is_entry);
    assert_eq!(functions[1].stack_frame_bytes, 256);

    let diagnostics = parse_diagnostics(log);
    assert_eq!(diagnostics.len(), 1);
    assert_eq!(diagnostics[0].severity, Severity::Warning);
    assert_eq!(diagnostics[0].line, Some(12));
}

#[test]
fn parses_fatal_without_line() {
    let d = parse_diagnostic("ptxas fatal   : Ptx assembly aborted due to errors")
        .expect("a diagnostic");
    assert_eq!(d.severity, Severity::Error);
    assert_eq!(d.line, None);
    assert_eq!(d.message, "Ptx assembly aborted due to errors");
}
