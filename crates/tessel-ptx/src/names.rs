//! The name table of one kernel: canonical PTX names for its registers, shared buffers and
//! labels, handed out in the order the writer first meets them. No arena index reaches the
//! output, so renumbering a kernel's entities (or printing it twice) gives the same text,
//! and a snapshot diff shows only real changes.

use std::collections::HashMap;

use tessel_ir::{Reg, SharedBuf};

use crate::instr::{Label, RegClass, RegName};

/// Names for one kernel; make a fresh one per entry.
#[derive(Default)]
pub(crate) struct Namer {
    regs: HashMap<Reg, RegName>,
    /// Next number per [`RegClass`] (indexed by [`RegClass::index`]).
    next: [u32; RegClass::ALL.len()],
    shared: HashMap<SharedBuf, u32>,
    /// Shared buffers in first-use order.
    shared_order: Vec<SharedBuf>,
    structures: u32,
}

impl Namer {
    /// The name of IR register `r`, of class `class`; numbered on first sight.
    pub(crate) fn reg(&mut self, r: Reg, class: RegClass) -> RegName {
        if let Some(&name) = self.regs.get(&r) {
            return name;
        }
        let name = self.fresh(class);
        self.regs.insert(r, name);
        name
    }

    /// A register that exists only in the PTX (a loop condition, an f16 half).
    pub(crate) fn fresh(&mut self, class: RegClass) -> RegName {
        let n = &mut self.next[class.index()];
        let name = RegName { class, n: *n };
        *n += 1;
        name
    }

    /// How many registers of `class` were named (the `N` of `.reg .f32 %f<N>;`).
    pub(crate) fn count(&self, class: RegClass) -> u32 {
        self.next[class.index()]
    }

    /// The number in `smem<n>` of shared buffer `b`; numbered on first use.
    pub(crate) fn shared(&mut self, b: SharedBuf) -> u32 {
        if let Some(&n) = self.shared.get(&b) {
            return n;
        }
        let n = u32::try_from(self.shared_order.len()).unwrap_or(u32::MAX);
        self.shared.insert(b, n);
        self.shared_order.push(b);
        n
    }

    /// The labels of the next structure (`for`, `if`), numbered in emission order.
    pub(crate) fn structure(&mut self, structure: &'static str) -> StructureLabels {
        let n = self.structures;
        self.structures += 1;
        StructureLabels { structure, n }
    }
}

/// The labels of one `For` or `If`.
#[derive(Copy, Clone)]
pub(crate) struct StructureLabels {
    structure: &'static str,
    n: u32,
}

impl StructureLabels {
    pub(crate) fn label(self, part: &'static str) -> Label {
        Label {
            structure: self.structure,
            n: self.n,
            part,
        }
    }
}

/// The `.param` name of a kernel's parameter `n`: `<kernel>_param_<n>`.
pub(crate) fn param_name(kernel: &str, n: u32) -> String {
    format!("{kernel}_param_{n}")
}

/// The variable name of the `n`-th shared buffer (first-use order): `smem<n>`, scoped to its
/// entry.
pub(crate) fn shared_name(n: u32) -> String {
    format!("smem{n}")
}
