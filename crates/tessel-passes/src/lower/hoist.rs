//! Global loads moved to the front of a straight-line region, with the address arithmetic
//! they need.
//!
//! The lowering emits a value's loads where the value is first needed: a row epilogue
//! (QK-norm + RoPE after the k projection) reads the norm weight after the row's sum of
//! squares, its butterfly and the reciprocal square root, and the cos and sin tables after
//! that. ptxas issues a load no earlier than the basic block it is written in, and the
//! correctly rounded square root and division each end one (their slow paths are calls),
//! so the loads of one pass went out one after another, each after the math before it:
//! the latencies added up (about 1 µs a pass of the k projection's epilogue, which runs
//! after the whole main loop with nothing to hide it). Written first, they are all in
//! flight together while the math runs.
//!
//! Only a flat region is reordered — every statement a [`Stmt::Op`] or a [`Stmt::Load`]:
//! no store, barrier, branch or loop — so no load can move across a write it might see,
//! and each thread's results are the same in any order of the region's statements that
//! keeps each register's definition before its uses. A load moves with its *slice*, the
//! statements defining the registers its address is computed from, when every register
//! the slice defines is defined once in the region and read nowhere before that
//! definition; the shuffles ([`Op::ShflBfly`]) stay in place, and so does anything that
//! depends on one.

use std::collections::HashMap;
use tessel_ir::kernel::{Op, Operand, Space, Stmt};
use tessel_ir::Reg;

/// The registers `s` reads.
fn reads(s: &Stmt) -> Vec<Reg> {
    match s {
        Stmt::Op { args, .. } => args
            .iter()
            .filter_map(|a| match a {
                Operand::Reg(r) => Some(*r),
                _ => None,
            })
            .collect(),
        Stmt::Load { addr, .. } => vec![*addr],
        _ => unreachable!("only flat regions are reordered"),
    }
}

/// The registers `s` writes.
fn writes(s: &Stmt) -> Vec<Reg> {
    match s {
        Stmt::Op { dst, .. } => vec![*dst],
        Stmt::Load { dsts, .. } => dsts.clone(),
        _ => unreachable!("only flat regions are reordered"),
    }
}

/// `region` with its global loads and their slices first (each group in its original
/// order), then the rest in order; unchanged if it is not flat (see the module doc).
pub(super) fn hoist_global_loads(region: Vec<Stmt>) -> Vec<Stmt> {
    let flat = region
        .iter()
        .all(|s| matches!(s, Stmt::Op { .. } | Stmt::Load { .. }));
    if !flat {
        return region;
    }
    // Each register's definitions in the region, and the first statement that reads it.
    let mut def: HashMap<Reg, usize> = HashMap::new();
    let mut defs: HashMap<Reg, u32> = HashMap::new();
    let mut first_read: HashMap<Reg, usize> = HashMap::new();
    for (i, s) in region.iter().enumerate() {
        for r in reads(s) {
            first_read.entry(r).or_insert(i);
        }
        for r in writes(s) {
            def.insert(r, i);
            *defs.entry(r).or_default() += 1;
        }
    }
    // A statement may move if it is pure (not a shuffle: every lane of the warp must
    // reach it in its place) and each register it defines is defined only here, and not
    // read before (a read there saw the value from before the region).
    let movable = |i: usize| {
        let pure = match &region[i] {
            Stmt::Op { op, .. } => *op != Op::ShflBfly,
            Stmt::Load { space, .. } => *space == Space::Global,
            _ => false,
        };
        pure && writes(&region[i])
            .iter()
            .all(|r| defs[r] == 1 && first_read.get(r).is_none_or(|&f| f > i))
    };
    let mut hoisted = vec![false; region.len()];
    for (i, s) in region.iter().enumerate() {
        if !matches!(
            s,
            Stmt::Load {
                space: Space::Global,
                ..
            }
        ) || hoisted[i]
        {
            continue;
        }
        // The load's slice: every statement of the region its address depends on.
        let mut slice = vec![i];
        let mut stack = vec![i];
        let mut ok = movable(i);
        while let (true, Some(j)) = (ok, stack.pop()) {
            for r in reads(&region[j]) {
                let Some(&d) = def.get(&r) else {
                    continue; // defined before the region
                };
                if !slice.contains(&d) && !hoisted[d] {
                    ok &= d < j && movable(d);
                    slice.push(d);
                    stack.push(d);
                }
            }
        }
        if ok {
            for j in slice {
                hoisted[j] = true;
            }
        }
    }
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for (s, h) in region.into_iter().zip(hoisted) {
        if h {
            first.push(s);
        } else {
            rest.push(s);
        }
    }
    first.extend(rest);
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessel_ir::kernel::{Kernel, RegType, Width};

    fn op(dst: Reg, op: Op, args: &[Operand]) -> Stmt {
        Stmt::Op {
            dst,
            op,
            args: args.to_vec(),
        }
    }

    fn load(dst: Reg, space: Space, addr: Reg) -> Stmt {
        Stmt::Load {
            dsts: vec![dst],
            space,
            width: Width::B32,
            addr,
            offset: 0,
        }
    }

    /// A load and its address arithmetic move ahead of a shuffle and the math; a load
    /// whose address depends on a shuffle, a shared-memory load, and everything else keep
    /// their order.
    #[test]
    fn loads_move_ahead_with_their_addresses() {
        let mut k = Kernel::default();
        let r: Vec<Reg> = (0..10).map(|_| k.new_reg(RegType::U32)).collect();
        let region = vec![
            op(r[1], Op::FMul, &[r[0].into(), r[0].into()]), // 0 math
            op(r[2], Op::ShflBfly, &[r[1].into(), Operand::U32(1)]), // 1 shuffle
            op(r[3], Op::IAdd, &[r[0].into(), Operand::U32(16)]), // 2 address
            load(r[4], Space::Global, r[3]),                 // 3 global load
            load(r[5], Space::Shared, r[3]),                 // 4 shared load
            op(r[6], Op::IAdd, &[r[2].into(), Operand::U32(4)]), // 5 from the shuffle
            load(r[7], Space::Global, r[6]),                 // 6 stays
            op(r[8], Op::FMul, &[r[4].into(), r[7].into()]), // 7
        ];
        let out = hoist_global_loads(region.clone());
        let order: Vec<usize> = out
            .iter()
            .map(|s| region.iter().position(|t| t == s).unwrap())
            .collect();
        assert_eq!(order, [2, 3, 0, 1, 4, 5, 6, 7]);
    }

    /// A register defined twice, or read before its definition, pins its definitions; a
    /// region with a store in it is left as it is.
    #[test]
    fn redefined_registers_and_stores_pin_the_order() {
        let mut k = Kernel::default();
        let r: Vec<Reg> = (0..6).map(|_| k.new_reg(RegType::U32)).collect();
        let twice = vec![
            op(r[1], Op::Mov, &[Operand::U32(0)]),
            op(r[2], Op::FMul, &[r[1].into(), r[1].into()]),
            op(r[1], Op::IAdd, &[r[0].into(), Operand::U32(8)]),
            load(r[3], Space::Global, r[1]),
        ];
        assert_eq!(hoist_global_loads(twice.clone()), twice);
        let read_before = vec![
            op(r[2], Op::FMul, &[r[1].into(), r[1].into()]),
            op(r[1], Op::IAdd, &[r[0].into(), Operand::U32(8)]),
            load(r[3], Space::Global, r[1]),
        ];
        assert_eq!(hoist_global_loads(read_before.clone()), read_before);
        let with_store = vec![
            op(r[2], Op::FMul, &[r[0].into(), r[0].into()]),
            Stmt::Store {
                space: Space::Global,
                width: Width::B32,
                addr: r[0],
                offset: 0,
                values: vec![r[2].into()],
            },
            load(r[3], Space::Global, r[0]),
        ];
        assert_eq!(hoist_global_loads(with_store.clone()), with_store);
    }
}
