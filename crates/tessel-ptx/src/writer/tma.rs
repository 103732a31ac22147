//! The Hopper (sm_90) statements: `mbarrier` operations, the wait on a phase as a
//! `try_wait` loop, the TMA tiled load `cp.async.bulk.tensor`, `setmaxnreg`, and the
//! programmatic dependent launch's `griddepcontrol` with its L2 prefetch
//! `cp.async.bulk.prefetch`. Each checks
//! its operands against the kernel IR's rules (`kernel.mbarrier`, `kernel.tma`,
//! `kernel.setmaxnreg`); outside them it is a [`PtxError::NoRow`] naming the statement and
//! its types. Immediates are printed where PTX takes them (counts, byte counts, the
//! parity, coordinates), so `legalize` has nothing to do here.
//!
//! ```text
//! mbarrier.init.shared::cta.b64 [%r1], 1;
//! mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 8192;
//! cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r1];
//! $L__mbar0_wait:
//!     mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r5;
//!     @!%p1 bra $L__mbar0_wait;
//! ```

use std::fmt;

use tessel_ir::kernel::{Kernel, Operand, RegType, MBAR_MAX_COUNT};
use tessel_ir::Reg;

use super::{malformed, no_row, operand_type, reg_type, Indent, OperandType, Writer};
use crate::error::PtxError;
use crate::instr::{Arg, Instr, RegClass, RegName};

/// The mbarrier statements the writer prints, for [`Writer::write_mbarrier`].
#[derive(Copy, Clone, Debug)]
pub(super) enum MbarOp {
    Init(Operand),
    ArriveExpectTx(Operand),
    Arrive,
    Wait(Operand),
}

impl<W: fmt::Write> Writer<W> {
    /// A `u32` shared address register, or `NoRow` naming `what`.
    fn shared_addr(&mut self, k: &Kernel, r: Reg, what: &str) -> Result<RegName, PtxError> {
        let t = reg_type(k, r)?;
        if t != RegType::U32 {
            return Err(no_row(k, what.to_owned(), &[OperandType::Reg(t)], None));
        }
        Ok(self.names.reg(r, RegClass::B32))
    }

    /// A `u32` register or immediate (an immediate within `max`), or `NoRow`.
    fn u32_arg(&mut self, k: &Kernel, o: Operand, max: u32, what: &str) -> Result<Arg, PtxError> {
        let t = operand_type(k, o)?;
        let in_range = !matches!(o, Operand::U32(x) if x > max);
        if t.ty() != RegType::U32 || !in_range {
            return Err(no_row(k, what.to_owned(), &[t], None));
        }
        self.operand(k, o)
    }

    /// `mbarrier.init`, `.arrive.expect_tx`, `.arrive` and the wait loop on the mbarrier
    /// at `addr` (PTX ISA §9.7.13.15).
    pub(super) fn write_mbarrier(
        &mut self,
        k: &Kernel,
        level: Indent,
        addr: Reg,
        op: MbarOp,
    ) -> Result<(), PtxError> {
        let a = self.shared_addr(k, addr, &format!("mbarrier {op:?} address"))?;
        let at = Arg::Addr(Box::new(a.into()), 0);
        let mbar = |verb: &'static [&'static str]| {
            let mut m = vec!["shared::cta", "b64"];
            m.splice(0..0, verb.iter().copied());
            Instr::new("mbarrier").m(&m)
        };
        match op {
            MbarOp::Init(count) => {
                if matches!(count, Operand::U32(0)) {
                    return Err(malformed(k, "mbarrier.init counts 0 arrivals"));
                }
                let c = self.u32_arg(k, count, MBAR_MAX_COUNT, "MbarInit count")?;
                self.write_instr(level, &mbar(&["init"]).arg(at).arg(c))
            }
            MbarOp::ArriveExpectTx(bytes) => {
                let b = self.u32_arg(k, bytes, MBAR_MAX_COUNT, "MbarArriveExpectTx bytes")?;
                let i = mbar(&["arrive", "expect_tx"])
                    .arg(Arg::Symbol("_".to_owned()))
                    .arg(at)
                    .arg(b);
                self.write_instr(level, &i)
            }
            MbarOp::Arrive => {
                let i = mbar(&["arrive"]).arg(Arg::Symbol("_".to_owned())).arg(at);
                self.write_instr(level, &i)
            }
            MbarOp::Wait(parity) => {
                let p = self.u32_arg(k, parity, 1, "MbarWait parity")?;
                // try_wait may return false after a time limit: loop until the phase is
                // complete (PTX ISA §9.7.13.15.16).
                let wait = self.names.structure("mbar").label("wait");
                let done = self.names.fresh(RegClass::Pred);
                self.write_label(wait)?;
                let i = mbar(&["try_wait", "parity"]).arg(done).arg(at).arg(p);
                self.write_instr(level, &i)?;
                self.write_instr(level, &Instr::new("bra").arg(wait).guard(done, true))
            }
        }
    }

    /// `cp.async.bulk.tensor.{N}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
    /// [dst], [tmap, {coords}], [mbar]` (PTX ISA §9.7.9.25.5.1).
    pub(super) fn write_tma_load(
        &mut self,
        k: &Kernel,
        level: Indent,
        dst: Reg,
        tmap: Reg,
        coords: &[Operand],
        mbar: Reg,
    ) -> Result<(), PtxError> {
        let dims = match coords.len() {
            1 => "1d",
            2 => "2d",
            3 => "3d",
            4 => "4d",
            5 => "5d",
            n => return Err(malformed(k, &format!("a TMA load of {n} coordinates"))),
        };
        let d = self.shared_addr(k, dst, "TmaLoad destination")?;
        let m = self.shared_addr(k, mbar, "TmaLoad mbarrier")?;
        let tt = reg_type(k, tmap)?;
        if tt != RegType::U64 {
            return Err(no_row(
                k,
                "TmaLoad tensor map".to_owned(),
                &[OperandType::Reg(tt)],
                None,
            ));
        }
        let t = self.names.reg(tmap, RegClass::B64);
        let mut cs = Vec::with_capacity(coords.len());
        for &c in coords {
            cs.push(self.u32_arg(k, c, u32::MAX, "TmaLoad coordinate")?);
        }
        let i = Instr::new("cp")
            .m(&[
                "async",
                "bulk",
                "tensor",
                dims,
                "shared::cluster",
                "global",
                "tile",
                "mbarrier::complete_tx::bytes",
            ])
            .arg(Arg::Addr(Box::new(d.into()), 0))
            .arg(Arg::TensorRef(Box::new(t.into()), cs))
            .arg(Arg::Addr(Box::new(m.into()), 0));
        self.write_instr(level, &i)
    }

    /// `setmaxnreg.{inc,dec}.sync.aligned.u32 regs` (PTX ISA §9.7.19.5, sm_90a only).
    pub(super) fn write_setmaxnreg(
        &mut self,
        k: &Kernel,
        level: Indent,
        inc: bool,
        regs: u32,
    ) -> Result<(), PtxError> {
        if !(24..=256).contains(&regs) || regs % 8 != 0 {
            return Err(malformed(
                k,
                &format!("setmaxnreg to {regs} registers (a multiple of 8 in 24..=256)"),
            ));
        }
        if !self.options.target.ends_with('a') {
            return Err(malformed(
                k,
                &format!(
                    "setmaxnreg needs an architecture-specific target (sm_90a), not {}",
                    self.options.target
                ),
            ));
        }
        let dir = if inc { "inc" } else { "dec" };
        let i = Instr::new("setmaxnreg")
            .m(&[dir, "sync", "aligned", "u32"])
            .arg(Arg::Uint(u64::from(regs)));
        self.write_instr(level, &i)
    }

    /// Malformed unless the target is sm_90 or later, where `what` exists.
    fn need_sm90(&self, k: &Kernel, what: &str) -> Result<(), PtxError> {
        let sm: Option<u32> = self
            .options
            .target
            .strip_prefix("sm_")
            .map(|t| t.trim_end_matches('a'))
            .and_then(|t| t.parse().ok());
        if sm.is_some_and(|sm| sm >= 90) {
            Ok(())
        } else {
            Err(malformed(
                k,
                &format!("{what} needs sm_90 or later, not {}", self.options.target),
            ))
        }
    }

    /// `griddepcontrol.{wait,launch_dependents}` (PTX ISA "griddepcontrol"; sm_90, PTX 7.8).
    pub(super) fn write_griddep(
        &mut self,
        k: &Kernel,
        level: Indent,
        action: &'static str,
    ) -> Result<(), PtxError> {
        self.need_sm90(k, "griddepcontrol")?;
        self.write_instr(level, &Instr::new("griddepcontrol").m(&[action]))
    }

    /// `cp.async.bulk.prefetch.L2.global [addr], bytes` (PTX ISA "cp.async.bulk.prefetch";
    /// sm_90, PTX 8.0): a `u64` address and a `u32` size, an immediate a multiple of 16.
    pub(super) fn write_prefetch_l2(
        &mut self,
        k: &Kernel,
        level: Indent,
        addr: Reg,
        bytes: Operand,
    ) -> Result<(), PtxError> {
        self.need_sm90(k, "cp.async.bulk.prefetch")?;
        let t = reg_type(k, addr)?;
        if t != RegType::U64 {
            return Err(no_row(
                k,
                "prefetch.l2's address".to_owned(),
                &[OperandType::Reg(t)],
                None,
            ));
        }
        if matches!(bytes, Operand::U32(n) if n % 16 != 0 || n == 0) {
            return Err(malformed(
                k,
                "prefetch.l2 of a size that is not a nonzero multiple of 16",
            ));
        }
        let a = self.names.reg(addr, RegClass::B64);
        let n = self.u32_arg(k, bytes, u32::MAX, "prefetch.l2's size")?;
        let i = Instr::new("cp")
            .m(&["async", "bulk", "prefetch", "L2", "global"])
            .arg(Arg::Addr(Box::new(a.into()), 0))
            .arg(n);
        self.write_instr(level, &i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_operand_spelling() {
        let rd = RegName {
            class: RegClass::B64,
            n: 1,
        };
        let r = |n| {
            Arg::Reg(RegName {
                class: RegClass::B32,
                n,
            })
        };
        let a = Arg::TensorRef(Box::new(rd.into()), vec![r(3), Arg::Uint(0)]);
        assert_eq!(a.to_string(), "[%rd1, {%r3, 0}]");
        let _ = OperandType::Imm(RegType::U32);
    }
}
