//! `legalize`: the last pass before the PTX writer. It rewrites what PTX cannot say in one
//! instruction into what it can, so that printing is a one-to-one table from op to
//! instruction (style guide, "Legalize, then print"; tinygrad `renderer/ptx.py`).
//!
//! Needs before: `expand-math` has run, so no [`Op::Math`] is left (one that is left is an
//! error naming it, not a silent pass-through). The kernel is otherwise well typed (the
//! verifier's invariants hold).
//!
//! Rewrites, each exact (the executor gives the same bits before and after):
//!
//! - **Immediates where PTX wants a register.** A store's values (`st [a], b`: the ISA's `st`
//!   stores "the value of operand b"; ptxas 13.0 rejects a vector `st` whose elements mix an
//!   immediate and a register, so every stored immediate gets a register) and the shuffled
//!   value of [`Op::ShflBfly`] (`shfl.sync` exchanges *register* data between lanes; the lane
//!   operand `b` may stay immediate). Each such immediate is moved into a fresh register by an
//!   [`Op::Mov`] placed just before the statement. Everywhere else PTX takes immediates
//!   (`add`, `mul.wide`, `setp`, `selp` values, `cvt` sources, shift amounts; all checked with
//!   ptxas 13.0 for sm_90 in `tessel-ptx`'s tests), so they are left alone.
//! - **[`Op::Select`] with a `Pred` result**, which `selp` cannot produce (its types are
//!   `.b16`–`.f64`): `d = a ? b : c` becomes `t0 = a & b; t1 = !a; t2 = t1 & c; d = t0 | t2`
//!   over fresh predicates, all reads done before `d` is written (so `d` may alias an operand).
//! - **Unsigned division and remainder by an immediate power of two** `2^k`: `a / 2^k`
//!   becomes `a >> k` ([`Op::ShrU`]) and `a % 2^k` becomes `a & (2^k - 1)` ([`Op::And`]). Exact
//!   for every `u32` `a`, and PTX's `div.u32`/`rem.u32` are long multi-instruction sequences.
//!
//! Does not: fold constants, reorder, remove dead code, or touch control flow, loads,
//! parameters or special registers; those print as they are.
//!
//! Guarantees after: no `Op::Math`; no `Select` into a `Pred`; no immediate among a store's
//! values or as the first operand of a `ShflBfly`; no `UDiv`/`URem` by a power-of-two
//! immediate. Running it twice changes nothing the second time.

use tessel_ir::kernel::{Kernel, MathFn, Op, Operand, RegType, Stmt};
use tessel_ir::Reg;

/// Why a kernel cannot be legalized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegalizeError {
    /// A math-library placeholder survived: `expand-math` must run before `legalize`.
    #[error(
        "kernel `{kernel}`: `{dst} = math {func:?}` is still in the body; run expand-math \
         before legalize"
    )]
    UnexpandedMath {
        kernel: String,
        /// The register the call assigns.
        dst: Reg,
        func: MathFn,
    },
}

/// Legalizes `kernel` in place; see the module doc for the rewrites.
///
/// # Errors
/// [`LegalizeError::UnexpandedMath`] for the first [`Op::Math`] found (in body order); the
/// kernel is left partly rewritten in that case and should be dropped.
pub fn run(kernel: &mut Kernel) -> Result<(), LegalizeError> {
    kernel.rewrite(|kernel, stmt, out| {
        match stmt {
            Stmt::Op { dst, op, args } => legalize_op(kernel, out, dst, op, args)?,
            Stmt::Store {
                space,
                width,
                addr,
                offset,
                values,
            } => {
                let values = values
                    .into_iter()
                    .map(|v| in_register(kernel, out, v))
                    .collect();
                out.push(Stmt::Store {
                    space,
                    width,
                    addr,
                    offset,
                    values,
                });
            }
            other => out.push(other),
        }
        Ok(())
    })
}

fn legalize_op(
    kernel: &mut Kernel,
    out: &mut Vec<Stmt>,
    dst: Reg,
    op: Op,
    mut args: Vec<Operand>,
) -> Result<(), LegalizeError> {
    match op {
        Op::Math(func) => {
            return Err(LegalizeError::UnexpandedMath {
                kernel: kernel.name.clone(),
                dst,
                func,
            })
        }
        Op::UDiv | Op::URem => {
            if let Some(&Operand::U32(d)) = args.get(1) {
                if d.is_power_of_two() {
                    let (op, b) = if op == Op::UDiv {
                        (Op::ShrU, d.trailing_zeros())
                    } else {
                        (Op::And, d - 1)
                    };
                    args[1] = Operand::U32(b);
                    out.push(Stmt::Op { dst, op, args });
                    return Ok(());
                }
            }
        }
        Op::Select if kernel.regs.get(dst) == Some(&RegType::Pred) && args.len() == 3 => {
            let (a, b, c) = (args[0], args[1], args[2]);
            let t0 = kernel.new_reg(RegType::Pred);
            let t1 = kernel.new_reg(RegType::Pred);
            let t2 = kernel.new_reg(RegType::Pred);
            let mut emit = |dst, op, args: &[Operand]| {
                out.push(Stmt::Op {
                    dst,
                    op,
                    args: args.to_vec(),
                });
            };
            emit(t0, Op::PAnd, &[a, b]);
            emit(t1, Op::PNot, &[a]);
            emit(t2, Op::PAnd, &[t1.into(), c]);
            emit(dst, Op::POr, &[t0.into(), t2.into()]);
            return Ok(());
        }
        Op::ShflBfly => {
            if let Some(a) = args.first_mut() {
                *a = in_register(kernel, out, *a);
            }
        }
        _ => {}
    }
    out.push(Stmt::Op { dst, op, args });
    Ok(())
}

/// `v` itself if it is a register; otherwise a fresh register assigned `v` by a `Mov`
/// appended to `out`.
fn in_register(kernel: &mut Kernel, out: &mut Vec<Stmt>, v: Operand) -> Operand {
    let ty = match v {
        Operand::Reg(_) => return v,
        Operand::U32(_) => RegType::U32,
        Operand::U64(_) => RegType::U64,
        Operand::F32(_) => RegType::F32,
    };
    let r = kernel.new_reg(ty);
    out.push(Stmt::Op {
        dst: r,
        op: Op::Mov,
        args: vec![v],
    });
    Operand::Reg(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessel_ir::kernel::{Builder, Space, Width};

    fn kernel() -> Kernel {
        Kernel {
            name: "k".into(),
            block: [32, 1, 1],
            grid: [1, 1, 1],
            ..Kernel::default()
        }
    }

    #[test]
    fn math_left_over_is_an_error_naming_it() {
        let mut k = kernel();
        let mut b = Builder::new(&mut k);
        let x = b.op(RegType::F32, Op::Mov, &[Operand::f32(1.0)]);
        b.open();
        b.op(RegType::F32, Op::Math(MathFn::Sin), &[x.into()]);
        let body = b.close();
        let c = b.op(
            RegType::Pred,
            Op::FCmp(tessel_ir::kernel::FCmp::Nan),
            &[x.into(), x.into()],
        );
        b.push(Stmt::If {
            cond: c,
            then_body: body,
            else_body: vec![],
        });
        b.finish();
        let err = run(&mut k).unwrap_err();
        assert!(matches!(
            err,
            LegalizeError::UnexpandedMath {
                func: MathFn::Sin,
                ..
            }
        ));
        let msg = err.to_string();
        assert!(msg.contains("Sin") && msg.contains("expand-math"), "{msg}");
    }

    #[test]
    fn power_of_two_division_becomes_shift_and_mask() {
        let mut k = kernel();
        let mut b = Builder::new(&mut k);
        let x = b.op(
            RegType::U32,
            Op::Special(tessel_ir::kernel::Special::TidX),
            &[],
        );
        let q = b.op(RegType::U32, Op::UDiv, &[x.into(), Operand::U32(64)]);
        let r = b.op(RegType::U32, Op::URem, &[x.into(), Operand::U32(64)]);
        let one = b.op(RegType::U32, Op::UDiv, &[x.into(), Operand::U32(1)]);
        let q3 = b.op(RegType::U32, Op::UDiv, &[x.into(), Operand::U32(3)]);
        b.finish();
        run(&mut k).unwrap();
        let find = |d: Reg| {
            k.body.iter().find_map(|s| match s {
                Stmt::Op { dst, op, args } if *dst == d => Some((*op, args.clone())),
                _ => None,
            })
        };
        assert_eq!(find(q), Some((Op::ShrU, vec![x.into(), Operand::U32(6)])));
        assert_eq!(find(r), Some((Op::And, vec![x.into(), Operand::U32(63)])));
        assert_eq!(find(one), Some((Op::ShrU, vec![x.into(), Operand::U32(0)])));
        assert_eq!(find(q3), Some((Op::UDiv, vec![x.into(), Operand::U32(3)])));
        // Exactness of the rewrite over a sweep of dividends.
        for a in (0..=u32::MAX).step_by(65_537).chain([u32::MAX, 63, 64, 65]) {
            assert_eq!(a / 64, a >> 6);
            assert_eq!(a % 64, a & 63);
        }
    }

    #[test]
    fn store_and_shuffle_immediates_move_to_registers() {
        let mut k = kernel();
        let mut b = Builder::new(&mut k);
        let p = b.op(RegType::U64, Op::Param(0), &[]);
        let v = b.op(RegType::F32, Op::Mov, &[Operand::f32(2.0)]);
        b.push(Stmt::Store {
            space: Space::Global,
            width: Width::V2,
            addr: p,
            offset: 8,
            values: vec![v.into(), Operand::f32(-0.0)],
        });
        let s = b.op(
            RegType::U32,
            Op::ShflBfly,
            &[Operand::U32(7), Operand::U32(16)],
        );
        b.finish();
        run(&mut k).unwrap();
        let Stmt::Op {
            dst: m,
            op: Op::Mov,
            args,
        } = &k.body[2]
        else {
            panic!("{:?}", k.body[2]);
        };
        assert_eq!(args, &[Operand::F32((-0.0f32).to_bits())]);
        assert_eq!(k.regs[*m], RegType::F32);
        let Stmt::Store { values, .. } = &k.body[3] else {
            panic!("{:?}", k.body[3]);
        };
        assert_eq!(values, &[v.into(), Operand::Reg(*m)]);
        let Stmt::Op {
            dst,
            op: Op::ShflBfly,
            args,
        } = &k.body[5]
        else {
            panic!("{:?}", k.body[5]);
        };
        assert_eq!(*dst, s);
        assert!(matches!(args[0], Operand::Reg(_)));
        assert_eq!(
            args[1],
            Operand::U32(16),
            "the lane operand may stay immediate"
        );
    }

    #[test]
    fn pred_select_becomes_logic() {
        let mut k = kernel();
        let mut b = Builder::new(&mut k);
        let x = b.op(
            RegType::U32,
            Op::Special(tessel_ir::kernel::Special::TidX),
            &[],
        );
        let a = b.op(
            RegType::Pred,
            Op::ICmp(tessel_ir::kernel::ICmp::LtU),
            &[x.into(), Operand::U32(3)],
        );
        let c = b.op(
            RegType::Pred,
            Op::ICmp(tessel_ir::kernel::ICmp::Eq),
            &[x.into(), Operand::U32(5)],
        );
        // `a` is overwritten by the select that reads it.
        b.assign(a, Op::Select, &[a.into(), c.into(), a.into()]);
        b.finish();
        run(&mut k).unwrap();
        let ops: Vec<Op> = k
            .body
            .iter()
            .skip(3)
            .map(|s| match s {
                Stmt::Op { op, .. } => *op,
                s => panic!("{s:?}"),
            })
            .collect();
        assert_eq!(ops, [Op::PAnd, Op::PNot, Op::PAnd, Op::POr]);
        let Stmt::Op { dst, .. } = k.body.last().unwrap() else {
            unreachable!()
        };
        assert_eq!(*dst, a);
        // Every truth-table row, evaluated on the rewritten sequence.
        for (av, bv, cv) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
            let t0 = av && bv;
            let t1 = !av;
            let t2 = t1 && cv;
            assert_eq!(t0 || t2, if av { bv } else { cv });
        }
    }

    #[test]
    fn idempotent() {
        let mut k = kernel();
        let mut b = Builder::new(&mut k);
        let p = b.op(RegType::U64, Op::Param(0), &[]);
        b.push(Stmt::Store {
            space: Space::Global,
            width: Width::B32,
            addr: p,
            offset: 0,
            values: vec![Operand::U32(1)],
        });
        b.finish();
        run(&mut k).unwrap();
        let once = k.clone();
        run(&mut k).unwrap();
        assert_eq!(k, once);
    }
}
