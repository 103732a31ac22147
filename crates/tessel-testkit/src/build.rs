//! Small helpers for writing kernel IR by hand with [`Builder`]: short operand
//! constructors, parameters, a kernel header, address arithmetic, loads and stores.
//!
//! Each helper emits exactly the ops it documents, in that order, so a kernel written with
//! them prints the same PTX (and the same register numbers) as one written out in full.

use tessel_ir::kernel::{
    Builder, Kernel, Op, Operand, Param, ParamKind, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{DType, Reg};

use RegType::{U32, U64};

/// An f32 immediate.
pub fn f(x: f32) -> Operand {
    Operand::f32(x)
}

/// A u32 immediate.
pub fn u(x: u32) -> Operand {
    Operand::U32(x)
}

/// A register operand.
pub fn r(x: Reg) -> Operand {
    Operand::Reg(x)
}

/// A pointer parameter to `dtype` elements, written by the kernel when `writes`.
pub fn ptr(name: &str, dtype: DType, writes: bool) -> Param {
    Param {
        name: name.to_owned(),
        kind: ParamKind::Ptr { dtype, writes },
    }
}

/// A u32 scalar parameter.
pub fn scalar(name: &str) -> Param {
    Param {
        name: name.to_owned(),
        kind: ParamKind::U32,
    }
}

/// An empty kernel of one-dimensional `block` threads and `grid` CTAs, with no schedule
/// text (set `schedule` by struct update where the PTX comment should say one).
pub fn kernel(name: &str, params: Vec<Param>, block: u32, grid: u32) -> Kernel {
    Kernel {
        name: name.to_owned(),
        params,
        block: [block, 1, 1],
        grid: [grid, 1, 1],
        ..Kernel::default()
    }
}

/// `base + i·elem_bytes` as a u64 global address: `mul.wide.u32`, then `add.u64`.
pub fn gaddr(b: &mut Builder, base: Reg, i: Reg, elem_bytes: u32) -> Reg {
    let off = b.op(U64, Op::MulWideU32, &[r(i), u(elem_bytes)]);
    b.op(U64, Op::AddU64, &[r(base), r(off)])
}

/// [`gaddr`] from pointer parameter number `param`, read first.
pub fn param_gaddr(b: &mut Builder, param: u32, i: Reg, elem_bytes: u32) -> Reg {
    let base = b.op(U64, Op::Param(param), &[]);
    gaddr(b, base, i, elem_bytes)
}

/// `ctaid.x · ntid.x + tid.x`.
pub fn global_index(b: &mut Builder) -> Reg {
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let ntid = b.op(U32, Op::Special(Special::NtidX), &[]);
    let cta = b.op(U32, Op::Special(Special::CtaidX), &[]);
    let base = b.op(U32, Op::IMulLo, &[r(cta), r(ntid)]);
    b.op(U32, Op::IAdd, &[r(base), r(tid)])
}

/// A load of `width` at `addr` into fresh registers of type `ty` (as many as the width
/// holds), which it returns.
pub fn load(b: &mut Builder, ty: RegType, width: Width, space: Space, addr: Reg) -> Vec<Reg> {
    load_at(b, ty, width, space, addr, 0)
}

/// [`load`] at `addr + offset` bytes.
pub fn load_at(
    b: &mut Builder,
    ty: RegType,
    width: Width,
    space: Space,
    addr: Reg,
    offset: i32,
) -> Vec<Reg> {
    let dsts: Vec<Reg> = (0..width.regs()).map(|_| b.kernel.new_reg(ty)).collect();
    b.push(Stmt::Load {
        dsts: dsts.clone(),
        space,
        width,
        addr,
        offset,
    });
    dsts
}

/// A store of `values` (registers or immediates) of `width` at `addr`.
pub fn store<V: Into<Operand> + Copy>(
    b: &mut Builder,
    width: Width,
    space: Space,
    addr: Reg,
    values: &[V],
) {
    store_at(b, width, space, addr, 0, values)
}

/// [`store`] at `addr + offset` bytes.
pub fn store_at<V: Into<Operand> + Copy>(
    b: &mut Builder,
    width: Width,
    space: Space,
    addr: Reg,
    offset: i32,
    values: &[V],
) {
    b.push(Stmt::Store {
        space,
        width,
        addr,
        offset,
        values: values.iter().map(|&v| v.into()).collect(),
    });
}

/// Closes the block [`Builder::open`] began and appends `if cond { block }` (no else).
pub fn close_if(b: &mut Builder, cond: Reg) {
    let then_body = b.close();
    b.push(Stmt::If {
        cond,
        then_body,
        else_body: Vec::new(),
    });
}

/// Closes the block [`Builder::open`] began and appends it as the body of
/// `for var in (start..end).step_by(step)`.
pub fn close_for(b: &mut Builder, var: Reg, start: Operand, end: Operand, step: Operand) {
    let body = b.close();
    b.push(Stmt::For {
        var,
        start,
        end,
        step,
        body,
    });
}
