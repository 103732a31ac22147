//! Per-warp contexts and their scheduler: every warp of the CTA runs the flattened body
//! ([`Code`]) from its own position, blocks at barriers and waits, and the CTA's warps
//! take turns by one deterministic rule.
//!
//! Data model: a warp's context is its position (`Cta::pc`), its state ([`WarpState`]),
//! and its 32 lanes of the CTA-wide, slot-major register files and mask rows (`masks[d]`,
//! the lanes active at depth `d`; `wact[d * warps + w]`, how many). Divergence inside a
//! warp is masks, as in SIMT lockstep; divergence between warps is different positions.
//!
//! The schedule: the ready warps at the lowest position run next, together, as one group
//! — each statement is one loop over the group's lanes, so a CTA whose warps agree runs
//! exactly as the lockstep interpreter did. The group goes on while it stays together and
//! no other ready warp stands lower; warps that reach its position join it. Because the
//! flattened program keeps the structured body's order (then before else, a loop's body
//! before its exit), this lowest-first rule replays CTA-wide lockstep: warps that split at
//! an `if` or leave a loop at different iterations meet again at the join before either
//! goes on, and every statement runs for the same lanes in the same order as before.
//!
//! Blocking: a warp at a barrier waits (`WarpState::Barrier`) until the barrier's phase
//! completes — barrier 0 (`barrier`) when every warp of the CTA stands at that one
//! statement, a named barrier when its count of warps has arrived by `bar.sync` or
//! `bar.arrive` — and the other warps run meanwhile. A warp whose wait condition fails
//! (`WarpState::Polling`: an `mbarrier.try_wait` loop, `mbarrier.wait` in the kernel IR,
//! whose condition is `Cta::mbar_poll`'s) yields; polling warps
//! are tried again, in warp order, when no warp is ready. When none is ready and no
//! poll succeeds, the CTA is deadlocked: an [`ExecError::Deadlock`] names each waiting
//! warp and where it waits. Misuse a GPU would hang on or leave undefined is an error
//! too: a barrier reached with some lanes of a warp inactive, barrier 0 reached at two
//! statements, or a named barrier's phase given two counts ([`ExecError::BarrierMismatch`]).

use super::{Cta, Span};
use crate::exec::flat::{Code, Inst};
use crate::exec::slots::SlotKernel;
use crate::exec::ExecError;

/// Where a warp is in its run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WarpState {
    /// Can run from its position.
    Ready,
    /// Waits at the barrier instruction at its position for the phase to complete.
    Barrier,
    /// Waits at the instruction at its position for its condition to hold.
    Polling,
    /// Ran past the end of the body.
    Exited,
}

/// One hardware barrier's current phase.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Bar {
    /// Warps the phase counts (0: no phase open).
    expected: u32,
    /// Arrivals so far.
    arrived: u32,
    /// The warps waiting (bit `w`: warp `w`).
    waiting: u32,
    /// Position and site of the first arrival.
    pc: u32,
    site: u32,
}

/// The warps that run together at one position, as thread ranges, and their lanes active
/// at its depth.
struct Group {
    warps: u32,
    runs: Vec<(usize, usize)>,
    d: usize,
    act: u32,
    full: bool,
}

fn warp_list(warps: u32) -> String {
    let ws: Vec<String> = (0..32)
        .filter(|w| warps >> w & 1 != 0)
        .map(|w| w.to_string())
        .collect();
    format!(
        "warp{} {}",
        if ws.len() == 1 { "" } else { "s" },
        ws.join(", ")
    )
}

impl<'a> Cta<'a> {
    /// Runs the CTA's warps from position 0 to the end of the body.
    pub(super) fn run_warps(&mut self) -> Result<(), ExecError> {
        let nw = self.nw;
        self.pc.fill(0);
        self.state.fill(WarpState::Ready);
        self.bars = [Bar::default(); 16];
        for w in 0..nw {
            self.wact[w] = self.lanes(w);
        }
        loop {
            if let Some((pc, g)) = self.pick() {
                self.run_group(pc, g)?;
                continue;
            }
            if self.state.iter().all(|&s| s == WarpState::Exited) {
                // A named barrier's phase some warps arrived at and none completed: a
                // `bar.arrive` no wait matched (a ping-pong's turn handed over once too
                // often), which a later CTA on the SM could find counted.
                if let Some((id, bar)) = self.bars.iter().enumerate().find(|(_, b)| b.expected != 0)
                {
                    let sites = &self.k.code.sites;
                    return Err(self.mismatch(format!(
                        "the CTA exits with barrier {id}'s phase open: {} of {} threads arrived (first arrival at {})",
                        bar.arrived * 32,
                        bar.expected * 32,
                        sites[bar.site as usize]
                    )));
                }
                return Ok(());
            }
            if !self.repoll()? {
                return Err(self.deadlock());
            }
        }
    }

    /// Lanes of warp `w` (32 but in a partial last warp).
    fn lanes(&self, w: usize) -> u32 {
        (self.n - 32 * w).min(32) as u32
    }

    fn warp_range(&self, w: usize) -> (usize, usize) {
        (32 * w, (32 * w + 32).min(self.n))
    }

    /// The lowest position of a ready warp and the ready warps there.
    fn pick(&self) -> Option<(u32, u32)> {
        let (mut best, mut g) = (u32::MAX, 0u32);
        for w in 0..self.nw {
            if self.state[w] != WarpState::Ready {
                continue;
            }
            let p = self.pc[w];
            if p < best {
                (best, g) = (p, 1 << w);
            } else if p == best {
                g |= 1 << w;
            }
        }
        (g != 0).then_some((best, g))
    }

    /// The lowest position of a ready warp outside `g` (`u32::MAX` if none).
    fn limit(&self, g: u32) -> u32 {
        (0..self.nw)
            .filter(|&w| g >> w & 1 == 0 && self.state[w] == WarpState::Ready)
            .map(|w| self.pc[w])
            .min()
            .unwrap_or(u32::MAX)
    }

    fn group(&self, warps: u32, d: usize) -> Group {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let (mut act, mut lanes) = (0u32, 0u32);
        for w in (0..self.nw).filter(|w| warps >> w & 1 != 0) {
            let (lo, hi) = self.warp_range(w);
            match runs.last_mut() {
                Some(r) if r.1 == lo => r.1 = hi,
                _ => runs.push((lo, hi)),
            }
            act += self.wact[d * self.nw + w];
            lanes += self.lanes(w);
        }
        Group {
            warps,
            runs,
            d,
            act,
            full: act == lanes,
        }
    }

    /// `g` at depth `d` after a statement that changed masks but kept the group whole.
    fn regroup(&self, g: &mut Group, d: usize) {
        let mut act = 0;
        let mut lanes = 0;
        for w in (0..self.nw).filter(|w| g.warps >> w & 1 != 0) {
            act += self.wact[d * self.nw + w];
            lanes += self.lanes(w);
        }
        g.d = d;
        g.act = act;
        g.full = act == lanes;
    }

    fn set_pc(&mut self, warps: u32, pc: u32, state: WarpState) {
        for w in (0..self.nw).filter(|w| warps >> w & 1 != 0) {
            self.pc[w] = pc;
            self.state[w] = state;
        }
    }

    /// Runs the ready warps `warps`, all at `pc`, until they part, block, exit or another
    /// ready warp stands lower.
    fn run_group(&mut self, mut pc: u32, warps: u32) -> Result<(), ExecError> {
        let k: &'a SlotKernel = self.k;
        let code: &'a Code = &k.code;
        let end = code.insts.len() as u32;
        let nw = self.nw;
        let mut g = self.group(warps, code.depth[pc as usize] as usize);
        let mut limit = self.limit(warps);
        loop {
            if pc >= limit {
                if pc > limit {
                    self.set_pc(g.warps, pc, WarpState::Ready);
                    return Ok(());
                }
                // Warps waiting here join the group.
                let joined = (0..nw)
                    .filter(|&w| self.state[w] == WarpState::Ready && self.pc[w] == pc)
                    .fold(g.warps, |m, w| m | 1 << w);
                g = self.group(joined, code.depth[pc as usize] as usize);
                limit = self.limit(g.warps);
            }
            if pc == end {
                self.set_pc(g.warps, pc, WarpState::Exited);
                return Ok(());
            }
            match &code.insts[pc as usize] {
                Inst::Do(a) => {
                    if a.counts() {
                        self.lane_instructions += g.act as u64;
                    }
                    for i in 0..g.runs.len() {
                        let (lo, hi) = g.runs[i];
                        let sp = Span {
                            lo,
                            hi,
                            d: g.d,
                            full: g.full,
                        };
                        self.action(a, sp)?;
                    }
                    pc += 1;
                    // Falling off the end of an arm into its join leaves the depth.
                    if code.depth[pc as usize] as usize == g.d {
                        continue;
                    }
                }
                Inst::If {
                    cond,
                    else_pc,
                    join_pc,
                } => {
                    let d = g.d;
                    let next = self.each_warp(g.warps, |cta, w| {
                        let (nt, ne) = cta.split_if(w, *cond as usize, d);
                        if nt > 0 {
                            pc + 1
                        } else if ne > 0 && else_pc != join_pc {
                            cta.enter_else(w, d + 1);
                            *else_pc
                        } else {
                            *join_pc
                        }
                    });
                    match next {
                        Some(p) => pc = p,
                        None => return Ok(()),
                    }
                }
                Inst::Else { join_pc } => {
                    let d = g.d;
                    let next = self.each_warp(g.warps, |cta, w| {
                        if cta.welse[d * nw + w] > 0 {
                            cta.enter_else(w, d);
                            pc + 1
                        } else {
                            *join_pc
                        }
                    });
                    match next {
                        Some(p) => pc = p,
                        None => return Ok(()),
                    }
                }
                Inst::ForInit { var, start } => {
                    for i in 0..g.runs.len() {
                        let (lo, hi) = g.runs[i];
                        self.for_init(*var as usize, *start as usize, lo, hi, g.d, g.full);
                    }
                    for w in (0..nw).filter(|w| g.warps >> w & 1 != 0) {
                        self.wact[(g.d + 1) * nw + w] = self.wact[g.d * nw + w];
                    }
                    pc += 1;
                }
                Inst::ForTest { var, end, exit_pc } => {
                    let d = g.d;
                    let next = self.each_warp(g.warps, |cta, w| {
                        if cta.for_test(w, *var as usize, *end as usize, d) > 0 {
                            pc + 1
                        } else {
                            *exit_pc
                        }
                    });
                    match next {
                        Some(p) => pc = p,
                        None => return Ok(()),
                    }
                }
                Inst::ForStep { var, step, test_pc } => {
                    for i in 0..g.runs.len() {
                        let (lo, hi) = g.runs[i];
                        self.for_step(*var as usize, *step as usize, lo, hi, g.d, g.full);
                    }
                    pc = *test_pc;
                }
                Inst::Barrier { site } => return self.barrier0(&g, pc, *site),
                Inst::Bar {
                    id,
                    warps,
                    sync,
                    site,
                } => return self.named_bar(&g, pc, *id as usize, *warps, *sync, *site),
                Inst::MbarWait { .. } => return self.wait(g.warps, pc),
                #[cfg(test)]
                Inst::WaitWord { .. } => return self.wait(g.warps, pc),
            }
            self.regroup(&mut g, code.depth[pc as usize] as usize);
        }
    }

    /// The warps `warps` reach the wait at `pc`: each goes on if its condition holds, or
    /// polls (yields to the other warps) until it does.
    fn wait(&mut self, warps: u32, pc: u32) -> Result<(), ExecError> {
        for w in (0..self.nw).filter(|w| warps >> w & 1 != 0) {
            self.pc[w] = pc;
            self.state[w] = if self.poll(w)? {
                self.pc[w] = pc + 1;
                WarpState::Ready
            } else {
                WarpState::Polling
            };
        }
        Ok(())
    }

    /// Calls `f(w)` for each warp of `warps`, which gives the warp's next position; the
    /// common position if they agree, or `None` after recording each warp's own.
    fn each_warp(&mut self, warps: u32, mut f: impl FnMut(&mut Self, usize) -> u32) -> Option<u32> {
        // At most 32 warps (1024 threads); no allocation on this path, loops take it
        // every iteration.
        let mut next = [u32::MAX; 32];
        let mut common = None;
        let mut agree = true;
        for w in (0..self.nw).filter(|w| warps >> w & 1 != 0) {
            let p = f(self, w);
            next[w] = p;
            agree &= *common.get_or_insert(p) == p;
        }
        if agree {
            return common;
        }
        for w in (0..self.nw).filter(|w| warps >> w & 1 != 0) {
            self.pc[w] = next[w];
            self.state[w] = WarpState::Ready;
        }
        None
    }

    /// Splits warp `w`'s lanes at depth `d` by `cond` into the then-mask at depth `d + 1`
    /// and the saved else-mask; their counts.
    fn split_if(&mut self, w: usize, cond: usize, d: usize) -> (u32, u32) {
        let (lo, hi) = self.warp_range(w);
        let n = self.n;
        let c = &self.r32[cond * n + lo..cond * n + hi];
        let (outer, inner) = self.masks.split_at_mut(d + 1);
        let m = &outer[d][lo..hi];
        let tm = &mut inner[0][lo..hi];
        let em = &mut self.else_masks[d + 1][lo..hi];
        let (mut nt, mut ne) = (0u32, 0u32);
        for i in 0..hi - lo {
            let ci = 0u32.wrapping_sub((c[i] != 0) as u32);
            tm[i] = m[i] & ci;
            em[i] = m[i] & !ci;
            nt += tm[i] & 1;
            ne += em[i] & 1;
        }
        let nw = self.nw;
        self.wact[(d + 1) * nw + w] = nt;
        self.welse[(d + 1) * nw + w] = ne;
        (nt, ne)
    }

    /// Warp `w`'s saved else-mask becomes its mask at depth `d`.
    fn enter_else(&mut self, w: usize, d: usize) {
        let (lo, hi) = self.warp_range(w);
        self.masks[d][lo..hi].swap_with_slice(&mut self.else_masks[d][lo..hi]);
        let nw = self.nw;
        self.wact[d * nw + w] = self.welse[d * nw + w];
    }

    /// Narrows warp `w`'s loop lanes (depth `d + 1`) to `var < end`; how many are left.
    fn for_test(&mut self, w: usize, var: usize, end: usize, d: usize) -> u32 {
        let (lo, hi) = self.warp_range(w);
        let n = self.n;
        let v = &self.r32[var * n + lo..var * n + hi];
        let e = &self.r32[end * n + lo..end * n + hi];
        let m = &mut self.masks[d + 1][lo..hi];
        let mut cnt = 0u32;
        for i in 0..hi - lo {
            m[i] &= 0u32.wrapping_sub((v[i] < e[i]) as u32);
            cnt += m[i] & 1;
        }
        self.wact[(d + 1) * self.nw + w] = cnt;
        cnt
    }

    /// The first inactive lane of a warp of `g` at its depth, as a thread number.
    fn first_inactive(&self, g: &Group) -> Option<(usize, usize)> {
        (0..self.nw)
            .filter(|&w| g.warps >> w & 1 != 0 && self.wact[g.d * self.nw + w] != self.lanes(w))
            .find_map(|w| {
                let (lo, hi) = self.warp_range(w);
                (lo..hi).find(|&i| self.masks[g.d][i] == 0).map(|i| (w, i))
            })
    }

    fn mismatch(&self, msg: String) -> ExecError {
        ExecError::BarrierMismatch {
            kernel: self.k.name.clone(),
            cta: self.cta,
            msg,
        }
    }

    /// `barrier`: the group arrives at barrier 0; the phase completes when every warp of
    /// the CTA stands at this statement.
    fn barrier0(&mut self, g: &Group, pc: u32, site: u32) -> Result<(), ExecError> {
        let bar = self.bars[0];
        if self.first_inactive(g).is_some() {
            return Err(ExecError::DivergentBarrier {
                kernel: self.k.name.clone(),
                cta: self.cta,
                active: bar.arrived * 32 + g.act,
                threads: self.n as u32,
            });
        }
        let sites = &self.k.code.sites;
        if bar.arrived > 0 && bar.pc != pc {
            return Err(self.mismatch(format!(
                "{} reached {} while {} wait at {}: every warp must reach one `barrier`",
                warp_list(g.warps),
                sites[site as usize],
                warp_list(bar.waiting),
                sites[bar.site as usize]
            )));
        }
        let arrived = bar.arrived + g.warps.count_ones();
        if arrived as usize == self.nw {
            self.bars[0] = Bar::default();
            self.set_pc(bar.waiting | g.warps, pc + 1, WarpState::Ready);
        } else {
            self.bars[0] = Bar {
                expected: self.nw as u32,
                arrived,
                waiting: bar.waiting | g.warps,
                pc,
                site,
            };
            self.set_pc(g.warps, pc, WarpState::Barrier);
        }
        Ok(())
    }

    /// `bar.sync` / `bar.arrive` on barrier `id` counting `count` warps, by each warp of
    /// the group in turn.
    fn named_bar(
        &mut self,
        g: &Group,
        pc: u32,
        id: usize,
        count: u32,
        sync: bool,
        site: u32,
    ) -> Result<(), ExecError> {
        if let Some((w, i)) = self.first_inactive(g) {
            return Err(ExecError::WarpDivergent {
                kernel: self.k.name.clone(),
                cta: self.cta,
                warp: w as u32,
                inactive: i as u32,
                op: if sync { "bar.sync" } else { "bar.arrive" },
            });
        }
        for w in (0..self.nw).filter(|w| g.warps >> w & 1 != 0) {
            let mut bar = self.bars[id];
            if bar.expected == 0 {
                bar = Bar {
                    expected: count,
                    arrived: 0,
                    waiting: 0,
                    pc,
                    site,
                };
            } else if bar.expected != count {
                let sites = &self.k.code.sites;
                return Err(self.mismatch(format!(
                    "warp {w} arrives at barrier {id} by {} for {} threads, but its phase counts {} (first arrival at {})",
                    sites[site as usize],
                    count * 32,
                    bar.expected * 32,
                    sites[bar.site as usize]
                )));
            }
            bar.arrived += 1;
            self.pc[w] = pc;
            if sync {
                bar.waiting |= 1 << w;
                self.state[w] = WarpState::Barrier;
            } else {
                self.pc[w] = pc + 1;
                self.state[w] = WarpState::Ready;
            }
            if bar.arrived == bar.expected {
                for v in (0..self.nw).filter(|v| bar.waiting >> v & 1 != 0) {
                    self.pc[v] += 1;
                    self.state[v] = WarpState::Ready;
                }
                bar = Bar::default();
            }
            self.bars[id] = bar;
        }
        Ok(())
    }

    /// Tries again, in warp order, the waits of polling warps; whether one succeeded.
    fn repoll(&mut self) -> Result<bool, ExecError> {
        let mut any = false;
        for w in 0..self.nw {
            if self.state[w] == WarpState::Polling && self.poll(w)? {
                self.pc[w] += 1;
                self.state[w] = WarpState::Ready;
                any = true;
            }
        }
        Ok(any)
    }

    /// Whether the wait at warp `w`'s position holds for every active lane.
    fn poll(&mut self, w: usize) -> Result<bool, ExecError> {
        let pc = self.pc[w] as usize;
        match &self.k.code.insts[pc] {
            Inst::MbarWait { addr, parity, .. } => {
                let (lo, hi) = self.warp_range(w);
                let (n, d) = (self.n, self.k.code.depth[pc] as usize);
                for i in lo..hi {
                    if self.masks[d][i] == 0 {
                        continue;
                    }
                    let a = self.r32[*addr as usize * n + i];
                    let p = self.r32[*parity as usize * n + i];
                    if !self.mbar_poll(i, a, p)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            #[cfg(test)]
            Inst::WaitWord { addr, value, .. } => {
                let (lo, hi) = self.warp_range(w);
                let (n, d) = (self.n, self.k.code.depth[pc] as usize);
                for i in lo..hi {
                    if self.masks[d][i] == 0 {
                        continue;
                    }
                    let a = self.r32[*addr as usize * n + i];
                    if a % 4 != 0 || !self.shared_range(a, 4) {
                        return Err(self.shared_fault(i, a, 4, false));
                    }
                    let sh = &self.shared[a as usize..][..4];
                    let word = u32::from_le_bytes([sh[0], sh[1], sh[2], sh[3]]);
                    if word != self.r32[*value as usize * n + i] {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            other => Err(ExecError::Malformed {
                kernel: self.k.name.clone(),
                msg: format!("{other:?} is not a wait"),
            }),
        }
    }

    /// No warp can run: what each waits for.
    fn deadlock(&self) -> ExecError {
        let code = &self.k.code;
        let mut parts = Vec::new();
        let mut seen = 0u32;
        for w in 0..self.nw {
            if seen >> w & 1 != 0 || matches!(self.state[w], WarpState::Exited) {
                continue;
            }
            let same: u32 = (w..self.nw)
                .filter(|&v| self.state[v] == self.state[w] && self.pc[v] == self.pc[w])
                .fold(0, |m, v| m | 1 << v);
            seen |= same;
            let inst = &code.insts[self.pc[w] as usize];
            let what = match *inst {
                Inst::Barrier { site } => format!(
                    "{} ({} of {} warps arrived)",
                    code.sites[site as usize], self.bars[0].arrived, self.nw
                ),
                Inst::Bar { id, site, .. } => format!(
                    "{} (barrier {id}: {} of {} warps arrived)",
                    code.sites[site as usize],
                    self.bars[id as usize].arrived,
                    self.bars[id as usize].expected
                ),
                Inst::MbarWait { addr, site, .. } => {
                    // The first active lane's barrier: the one a kernel's warp waits on.
                    let (lo, hi) = self.warp_range(w);
                    let d = code.depth[self.pc[w] as usize] as usize;
                    let state = (lo..hi)
                        .find(|&i| self.masks[d][i] != 0)
                        .map(|i| self.mbar_state(self.r32[addr as usize * self.n + i]))
                        .unwrap_or_default();
                    format!("{} ({state})", code.sites[site as usize])
                }
                #[cfg(test)]
                Inst::WaitWord { site, .. } => {
                    format!(
                        "{} (its condition does not hold)",
                        code.sites[site as usize]
                    )
                }
                _ => format!("position {}", self.pc[w]),
            };
            parts.push(format!("{} waiting at {what}", warp_list(same)));
        }
        let exited = (0..self.nw)
            .filter(|&w| self.state[w] == WarpState::Exited)
            .fold(0u32, |m, w| m | 1 << w);
        if exited != 0 {
            parts.push(format!("{} exited", warp_list(exited)));
        }
        ExecError::Deadlock {
            kernel: self.k.name.clone(),
            cta: self.cta,
            msg: parts.join("; "),
        }
    }
}
