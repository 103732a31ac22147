//! The scan schedule ([`TileConfig::Scan`]): a cumsum along the last axis, one CTA per row
//! (a thread per row for rows of one chunk), in the order [`crate::schedule::scan_order`] prints — a function of the row length only
//! (chunks of `chunk` elements, never the thread count), so `exact` and `invariant` give
//! the same bits at any launch configuration.

use super::{class, Gen, Ix, LowerError};
use tessel_ir::graph::Op as GOp;
use tessel_ir::kernel::{ICmp, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{Reg, Shape, Value};

impl Gen<'_> {
    /// The cumsum `c` (over the last axis of an f32 or i32 operand), written as `out` (`c`
    /// or its cast) by `threads` threads per row. Three phases, two barriers: each chunk's
    /// total into shared memory (thread t takes chunks t, t + threads, ...); thread 0
    /// replaces the totals by their exclusive prefix; each chunk again from its prefix,
    /// storing every running sum. Returns the grid size (one CTA per row).
    pub(super) fn scan(
        &mut self,
        out: Value,
        c: Value,
        threads: u32,
        chunk: u32,
    ) -> Result<u32, LowerError> {
        let ScanRows {
            arg,
            lead,
            n,
            nrows,
            cls,
            add,
            identity,
            tid,
            cta,
        } = self.scan_rows_of(c)?;
        let chunks = n.div_ceil(chunk as u64);
        let lead = self.unflatten(Ix::R(cta), &lead);
        let smem = self.b.kernel.new_shared(4 * chunks as u32, 4);
        let base = self.b.op(RegType::U32, Op::SharedAddr(smem), &[]);

        // Phase 1: chunk totals.
        let j = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let tot = self.b.kernel.new_reg(cls);
        self.b.assign(tot, Op::Mov, &[identity]);
        self.chunk_loop(arg, &lead, (j, chunk, n), None, |s, x| {
            s.b.assign(tot, add, &[tot.into(), x]);
        })?;
        let slot = self.slot(base, j);
        self.store_shared(slot, tot);
        self.close_for(j, tid.into(), Self::imm_u(chunks), Operand::U32(threads));
        self.b.push(Stmt::Barrier);

        // Phase 2: the exclusive prefix of the totals, sequentially by thread 0.
        let first = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::Eq),
            &[tid.into(), Operand::U32(0)],
        );
        self.open();
        let run = self.b.kernel.new_reg(cls);
        self.b.assign(run, Op::Mov, &[identity]);
        let k = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let slot = self.slot(base, k);
        let t = self.b.kernel.new_reg(cls);
        self.b.push(Stmt::Load {
            dsts: vec![t],
            space: Space::Shared,
            width: Width::B32,
            addr: slot,
            offset: 0,
        });
        self.store_shared(slot, run);
        self.b.assign(run, add, &[run.into(), t.into()]);
        self.close_for(k, Operand::U32(0), Self::imm_u(chunks), Operand::U32(1));
        self.close_if(first);
        self.b.push(Stmt::Barrier);

        // Phase 3: each chunk from its prefix, every running sum stored.
        let j = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let acc = self.b.kernel.new_reg(cls);
        let slot = self.slot(base, j);
        self.b.push(Stmt::Load {
            dsts: vec![acc],
            space: Space::Shared,
            width: Width::B32,
            addr: slot,
            offset: 0,
        });
        self.row_value.insert(c, acc.into());
        self.chunk_loop(arg, &lead, (j, chunk, n), Some(out), |s, x| {
            s.b.assign(acc, add, &[acc.into(), x]);
        })?;
        self.close_for(j, tid.into(), Self::imm_u(chunks), Operand::U32(threads));
        Ok(nrows.max(1) as u32)
    }

    /// The cumsum `c` over rows of one chunk, written as `out`, a thread per row and
    /// `rows` rows a CTA: thread t of CTA b runs row `b · rows + t` (when there is one),
    /// adding its elements to -0 (0 for i32) left to right and storing each running sum —
    /// the additions of [`Gen::scan`] for a row of one chunk, whose prefix is -0. Returns
    /// the grid size.
    pub(super) fn scan_rows(&mut self, out: Value, c: Value, rows: u32) -> Result<u32, LowerError> {
        let ScanRows {
            arg,
            lead,
            n,
            nrows,
            cls,
            add,
            identity,
            tid,
            cta,
        } = self.scan_rows_of(c)?;
        let first = self
            .b
            .op(RegType::U32, Op::IMulLo, &[cta.into(), Operand::U32(rows)]);
        let row = self
            .b
            .op(RegType::U32, Op::IAdd, &[first.into(), tid.into()]);
        let inside = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[row.into(), Self::imm_u(nrows)],
        );
        self.open();
        let lead = self.unflatten(Ix::R(row), &lead);
        let acc = self.b.kernel.new_reg(cls);
        self.b.assign(acc, Op::Mov, &[identity]);
        self.row_value.insert(c, acc.into());
        let j = self.b.op(RegType::U32, Op::Mov, &[Operand::U32(0)]);
        self.chunk_loop(arg, &lead, (j, n as u32, n), Some(out), |s, x| {
            s.b.assign(acc, add, &[acc.into(), x]);
        })?;
        self.close_if(inside);
        Ok(nrows.div_ceil(rows as u64).max(1) as u32)
    }

    /// What both scan kernels start from: the cumsum `c`'s operand, the shape of its rows'
    /// index (every dim but the last), the row length and count, the register class with
    /// its addition and the sum's start (-0 for f32: `-0 + x` is `x` for every x, 0 for
    /// i32), and the thread's and CTA's indices.
    fn scan_rows_of(&mut self, c: Value) -> Result<ScanRows, LowerError> {
        let GOp::Cumsum { arg, .. } = self.g.ops[c] else {
            return Err(LowerError::Unsupported {
                what: "a scan group whose listed op is not a cumsum".into(),
                value: c,
            });
        };
        let shape = self.g.ty(c).shape.clone();
        let n = shape.last();
        let cls = class(self.g.ty(c).dtype);
        let (add, identity) = match cls {
            RegType::F32 => (Op::FAdd, Operand::f32(-0.0)),
            _ => (Op::IAdd, Operand::U32(0)),
        };
        Ok(ScanRows {
            arg,
            lead: Shape(shape.0[..shape.rank() - 1].to_vec()),
            n,
            nrows: shape.numel() / n.max(1),
            cls,
            add,
            identity,
            tid: self.b.op(RegType::U32, Op::Special(Special::TidX), &[]),
            cta: self.b.op(RegType::U32, Op::Special(Special::CtaidX), &[]),
        })
    }

    /// `base + 4 · i`: the shared slot of chunk `i`.
    fn slot(&mut self, base: Reg, i: Reg) -> Reg {
        let off = self
            .b
            .op(RegType::U32, Op::IMulLo, &[i.into(), Operand::U32(4)]);
        self.b
            .op(RegType::U32, Op::IAdd, &[base.into(), off.into()])
    }

    fn store_shared(&mut self, addr: Reg, x: Reg) {
        self.b.push(Stmt::Store {
            space: Space::Shared,
            width: Width::B32,
            addr,
            offset: 0,
            values: vec![x.into()],
        });
    }

    /// For each element i of chunk `j` of the row at `lead` (i from `j · chunk` to
    /// `min((j + 1) · chunk, n)`, in order): `step` with the operand's element, then, with
    /// `store`, that output's element at i (computed from the cumsum's running value in
    /// `row_value`) stored.
    fn chunk_loop(
        &mut self,
        arg: Value,
        lead: &[Ix],
        (j, chunk, n): (Reg, u32, u64),
        store: Option<Value>,
        mut step: impl FnMut(&mut Self, Operand),
    ) -> Result<(), LowerError> {
        let start = self
            .b
            .op(RegType::U32, Op::IMulLo, &[j.into(), Operand::U32(chunk)]);
        let end0 = self
            .b
            .op(RegType::U32, Op::IAdd, &[start.into(), Operand::U32(chunk)]);
        let short = self.b.op(
            RegType::Pred,
            Op::ICmp(ICmp::LtU),
            &[end0.into(), Self::imm_u(n)],
        );
        let end = self.b.op(
            RegType::U32,
            Op::Select,
            &[short.into(), end0.into(), Self::imm_u(n)],
        );
        let i = self.b.kernel.new_reg(RegType::U32);
        self.open();
        let mut idx = lead.to_vec();
        idx.push(Ix::R(i));
        let x = self.value(arg, &idx, 1)?[0];
        step(self, x);
        if let Some(out) = store {
            let vals = self.value(out, &idx, 1)?;
            self.store(out, &idx, &vals)?;
        }
        self.close_for(i, start.into(), end.into(), Operand::U32(1));
        Ok(())
    }
}

/// A cumsum's rows as both scan kernels see them ([`Gen::scan_rows_of`]).
struct ScanRows {
    arg: Value,
    lead: Shape,
    n: u64,
    nrows: u64,
    cls: RegType,
    add: Op,
    identity: Operand,
    tid: Reg,
    cta: Reg,
}
