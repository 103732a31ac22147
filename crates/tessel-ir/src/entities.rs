//! Entity references: small `u32` indices into the IR's `PrimaryMap`s (the Cranelift
//! `ir/entities.rs` pattern). The `Display` prefix given to `entity_impl!` is the printed
//! syntax of each entity in the textual IR.

use cranelift_entity::entity_impl;

/// A tensor value of the graph IR, defined by exactly one [`crate::graph::Op`].
/// Made by [`crate::graph::Graph::push`]; printed `v0`, `v1`, ...
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "v");

/// A fusion group: a set of graph values that becomes one kernel. Made by the `fuse` pass
/// through [`crate::graph::Fusion::new_group`]; printed `g0`, `g1`, ...
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Group(u32);
entity_impl!(Group, "g");

/// A virtual register of the kernel IR. Registers are mutable (an accumulator is assigned
/// in a loop), typed by [`crate::kernel::RegType`]. Made by
/// [`crate::kernel::Kernel::new_reg`]; printed `r0`, `r1`, ...
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(u32);
entity_impl!(Reg, "r");

/// A shared-memory buffer of one kernel. Made by [`crate::kernel::Kernel::new_shared`];
/// printed `smem0`, ...
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedBuf(u32);
entity_impl!(SharedBuf, "smem");

/// A buffer of a [`crate::kernel::Program`]: a step input, output or an intermediate tensor
/// materialised between kernels. Printed `buf0`, ...
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(u32);
entity_impl!(BufferId, "buf");

/// A kernel of a [`crate::kernel::Program`]. Printed `k0`, ...
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId(u32);
entity_impl!(KernelId, "k");
