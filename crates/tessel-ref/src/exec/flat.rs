//! The flattened form of a kernel body in slot form ([`Code`]): one linear program with
//! explicit jumps, built once per kernel, that every warp of a CTA runs from its own
//! position (`cta/sched.rs`).
//!
//! Data model: straight-line statements ([`Action`]) keep their slot form; structured
//! control flow becomes jumps and per-warp mask updates at a nesting depth `d` (the body is
//! depth 0, an arm or loop body one deeper than its statement):
//!
//! ```text
//! if c { T } else { E }                 for v = s .. e step t { B }
//!   p      If { c, else_pc, join_pc }     p      ForInit { v, s }
//!          T...         (depth d + 1)     p + 1  ForTest { v, e, exit_pc }
//!   q      Else { join_pc }                      B...        (depth d + 1)
//!          E...         (depth d + 1)     q      ForStep { v, t, test_pc: p + 1 }
//!   join_pc                               exit_pc
//! ```
//!
//! (`Else` only where there is an else arm; an `if` without one jumps to `join_pc` from
//! the end of `T` by falling through.) Program order is the structured body's order —
//! then before else, a loop's body before its exit — which is what makes the
//! lowest-position-first schedule the lockstep order of the tree it came from.
//!
//! Barriers and waits carry a `site`: the statement's path in the kernel body as the verifier
//! writes it (`body[3].for[0].then[1]`) and its text, for the errors that name it.

use super::slots::{Action, SlotStmt};

/// One instruction of [`Code`]. Positions (`*_pc`) index [`Code::insts`].
#[derive(Clone, Debug)]
pub(crate) enum Inst {
    Do(Action),
    /// Splits the warp's lanes at depth `d` by `cond` into the then-mask (depth `d + 1`)
    /// and the else-mask, saved; lanes of neither arm's warp run nothing.
    If {
        cond: u32,
        /// The first instruction of the else arm, or `join_pc` when there is none.
        else_pc: u32,
        join_pc: u32,
    },
    /// The end of a then-arm with an else arm: the warp's else-mask becomes its mask.
    Else {
        join_pc: u32,
    },
    /// `var = start` for the lanes at depth `d`; they all enter the loop (depth `d + 1`).
    ForInit {
        var: u32,
        start: u32,
    },
    /// Narrows the loop's lanes to `var < end` (unsigned, `end` re-read each time); the
    /// warp leaves when none is left.
    ForTest {
        var: u32,
        end: u32,
        exit_pc: u32,
    },
    /// `var += step` for the loop's lanes, then back to the test.
    ForStep {
        var: u32,
        step: u32,
        test_pc: u32,
    },
    /// `barrier`: barrier 0, all warps at this one instruction.
    Barrier {
        site: u32,
    },
    /// Named barrier `id` counting `warps` warps; `sync` waits, else only arrives.
    Bar {
        id: u32,
        warps: u32,
        sync: bool,
        site: u32,
    },
    /// `mbarrier.try_wait.parity` in its loop: the warp waits until, for each active lane,
    /// the phase of parity `parity` of the mbarrier at `addr` has completed
    /// (`cta/mbarrier.rs`).
    MbarWait {
        addr: u32,
        parity: u32,
        site: u32,
    },
    /// Test-only blocking wait: the warp waits until the shared `u32` at each active
    /// lane's `addr` equals its `value` — the shape of an `mbarrier.try_wait` loop, for the
    /// scheduler's tests until such a statement exists.
    #[cfg(test)]
    WaitWord {
        addr: u32,
        value: u32,
        site: u32,
    },
}

/// A kernel body as one linear program.
pub(crate) struct Code {
    pub insts: Vec<Inst>,
    /// The mask depth of a warp that stands at each position (one past the end: 0).
    pub depth: Vec<u16>,
    /// Where each barrier is, in words: `body[3].then[0] `bar.sync 1, 64``.
    pub sites: Vec<String>,
}

impl Code {
    /// Flattens `body` (depth 0).
    pub fn new(body: &[SlotStmt]) -> Code {
        let mut c = Code {
            insts: Vec::new(),
            depth: Vec::new(),
            sites: Vec::new(),
        };
        c.block(body, 0, "body");
        c.depth.push(0);
        c
    }

    fn push(&mut self, i: Inst, d: usize) -> usize {
        self.insts.push(i);
        self.depth.push(d as u16);
        self.insts.len() - 1
    }

    fn pc(&self) -> u32 {
        self.insts.len() as u32
    }

    fn site(&mut self, path: String, text: String) -> u32 {
        self.sites.push(format!("{path} `{text}`"));
        self.sites.len() as u32 - 1
    }

    fn block(&mut self, body: &[SlotStmt], d: usize, path: &str) {
        for (i, s) in body.iter().enumerate() {
            let path = format!("{path}[{i}]");
            match s {
                SlotStmt::Do(a) => {
                    self.push(Inst::Do(a.clone()), d);
                }
                SlotStmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let at = self.push(
                        Inst::If {
                            cond: *cond,
                            else_pc: 0,
                            join_pc: 0,
                        },
                        d,
                    );
                    self.block(then_body, d + 1, &format!("{path}.then"));
                    let else_pc = if else_body.is_empty() {
                        None
                    } else {
                        let e = self.push(Inst::Else { join_pc: 0 }, d + 1);
                        self.block(else_body, d + 1, &format!("{path}.else"));
                        Some(e)
                    };
                    let join = self.pc();
                    if let Some(e) = else_pc {
                        self.insts[e] = Inst::Else { join_pc: join };
                    }
                    self.insts[at] = Inst::If {
                        cond: *cond,
                        else_pc: else_pc.map_or(join, |e| e as u32 + 1),
                        join_pc: join,
                    };
                }
                SlotStmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    self.push(
                        Inst::ForInit {
                            var: *var,
                            start: *start,
                        },
                        d,
                    );
                    let test = self.push(
                        Inst::ForTest {
                            var: *var,
                            end: *end,
                            exit_pc: 0,
                        },
                        d,
                    );
                    self.block(body, d + 1, &format!("{path}.for"));
                    self.push(
                        Inst::ForStep {
                            var: *var,
                            step: *step,
                            test_pc: test as u32,
                        },
                        d + 1,
                    );
                    let exit_pc = self.pc();
                    self.insts[test] = Inst::ForTest {
                        var: *var,
                        end: *end,
                        exit_pc,
                    };
                }
                SlotStmt::Barrier => {
                    let site = self.site(path, "barrier".into());
                    self.push(Inst::Barrier { site }, d);
                }
                &SlotStmt::MbarWait { addr, parity } => {
                    let site = self.site(path, "mbarrier.wait".into());
                    self.push(Inst::MbarWait { addr, parity, site }, d);
                }
                &SlotStmt::BarSync { id, warps } | &SlotStmt::BarArrive { id, warps } => {
                    let sync = matches!(s, SlotStmt::BarSync { .. });
                    let text = format!(
                        "bar.{} {id}, {}",
                        if sync { "sync" } else { "arrive" },
                        warps * 32
                    );
                    let site = self.site(path, text);
                    self.push(
                        Inst::Bar {
                            id,
                            warps,
                            sync,
                            site,
                        },
                        d,
                    );
                }
            }
        }
    }
}
