//! Reader errors carry the line and column of the offending token.

use tessel_ir::text::{read_graph, read_kernel, read_program, ReadError};

fn err_at(r: Result<impl std::fmt::Debug, ReadError>, line: u32, col: u32, needle: &str) {
    let e = r.expect_err("expected a read error");
    assert_eq!((e.line, e.col), (line, col), "{e}");
    assert!(e.message.contains(needle), "{e:?} lacks {needle:?}");
    assert!(e.to_string().starts_with(&format!("{line}:{col}: ")));
}

#[test]
fn graph_errors() {
    err_at(read_graph("grph g {}"), 1, 1, "expected `graph`");
    err_at(
        read_graph("graph g {\n  v0 = frob v1 : f32[]\n}"),
        2,
        8,
        "unknown op `frob`",
    );
    err_at(
        read_graph("graph g {\n  v0 = neg v7 : f32[]\n}"),
        2,
        12,
        "value v7 is not defined",
    );
    err_at(
        read_graph("graph g {\n  v0 = const 1.0 : f33[]\n}"),
        2,
        20,
        "unknown dtype `f33`",
    );
    err_at(
        read_graph("graph g {\n  v0 = const 1.0 : f32[]\n  v0 = const 2.0 : f32[]\n}"),
        3,
        3,
        "defined twice",
    );
    err_at(
        read_graph("graph g {\n  output \"x = v0\n}"),
        2,
        10,
        "unterminated string",
    );
    err_at(
        read_graph("graph g {\n  v0 = const 1.0 f32[]\n}"),
        2,
        18,
        "expected `:`",
    );
    err_at(
        read_graph("graph g {\n  v0 = const abc : f32[]\n}"),
        2,
        14,
        "expected a number",
    );
    err_at(
        read_graph("graph g {\n  v0 = iota axis 99999999999 : i32[1]\n}"),
        2,
        18,
        "does not fit in 32 bits",
    );
    err_at(
        read_graph("graph g {\n}\nextra"),
        3,
        1,
        "the end of the text",
    );
    err_at(
        read_graph("graph g {\n  v0 = const 1.0 : f32[]"),
        2,
        25,
        "found the end of the text",
    );
    err_at(
        read_graph("graph g { # }"),
        1,
        11,
        "unexpected character `#`",
    );
    err_at(read_graph("graph g {\n  g0 = elementwise outputs [v0] reductions [] tile elementwise { threads: 1 } why \"\"\n}"), 2, 52, "needs the field `vector`");
    err_at(
        read_graph("graph g {\n  writer v0 = g3\n}"),
        2,
        10,
        "value v0 is not defined",
    );
    err_at(
        read_graph("graph g {\n  v0 = const 1.0 : f32[]\n  writer v0 = g3\n}"),
        3,
        15,
        "group g3 is not defined",
    );
    err_at(
        read_graph("graph g {\n  output \"\\q\" = v0\n}"),
        2,
        11,
        "unknown escape",
    );
}

#[test]
fn kernel_errors() {
    let head = "kernel k block [32, 1, 1] grid [1, 1, 1] {\n  regs r0: u32, r1: f32\n";
    err_at(
        read_kernel(&format!("{head}  r2 = mov r0\n}}")),
        3,
        3,
        "register r2 is not declared",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = mov r9\n}}")),
        3,
        12,
        "register r9 is not declared",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = frob r0\n}}")),
        3,
        8,
        "unknown op `frob`",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = special tid.z\n}}")),
        3,
        16,
        "unknown special register",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = shared_addr smem1\n}}")),
        3,
        20,
        "smem1 is not declared",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = load.local.b32 [r0]\n}}")),
        3,
        8,
        "expected `global` or `shared`",
    );
    err_at(
        read_kernel(&format!(
            "{head}  r0 = load.global.b32 [r0 + 4294967296]\n}}"
        )),
        3,
        28,
        "does not fit in i32",
    );
    err_at(
        read_kernel(&format!("{head}  r0, r1 = mov r0\n}}")),
        3,
        3,
        "only a load",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = iadd r0, 4294967296u32\n}}")),
        3,
        17,
        "expected a register or an immediate",
    );
    err_at(
        read_kernel(&format!("{head}  r0 = iadd r0, -1\n}}")),
        3,
        17,
        "unsigned",
    );
    err_at(
        read_kernel(&format!("{head}  for r0 = 0 to 4 step 1 {{\n  }}\n}}")),
        3,
        14,
        "expected `..`",
    );
    err_at(
        read_kernel(&format!("{head}  regs r0: i64\n}}")),
        3,
        12,
        "unknown register type",
    );
    err_at(
        read_kernel("kernel k block [32, 1] grid [1, 1, 1] {}"),
        1,
        16,
        "three dimensions",
    );
    err_at(
        read_kernel(&format!("{head}  param p: ptr f32 rw\n}}")),
        3,
        20,
        "`read` or `write`",
    );
    err_at(
        read_kernel(&format!("{head}  if r0 {{\n    barrier\n")),
        5,
        1,
        "expected a statement",
    );
}

#[test]
fn program_errors() {
    err_at(
        read_program("program p {\n  launch k0()\n}"),
        2,
        10,
        "kernel k0 is not defined",
    );
    err_at(
        read_program("program p {\n  input \"x\" = buf0\n}"),
        2,
        15,
        "buffer buf0 is not defined",
    );
    err_at(
        read_program("program p {\n  buf0 = scratch \"x\" : f32[1]\n}"),
        2,
        10,
        "unknown buffer role",
    );
    err_at(
        read_program("program p {\n  buf0 = temp \"x\" : f32[1]\n  launch k0(buf0)\n}"),
        3,
        10,
        "kernel k0 is not defined",
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let mut s = String::from("kernel k block [32, 1, 1] grid [1, 1, 1] {\n  regs r0: pred\n");
    for _ in 0..100_000 {
        s.push_str("if r0 {\n");
    }
    let e = read_kernel(&s).unwrap_err();
    assert!(e.message.contains("nest deeper"), "{e}");
}
