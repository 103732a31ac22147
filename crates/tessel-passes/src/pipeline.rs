//! The pass registry's types and the driver that walks it.
//!
//! A pass is registered in [`crate::PASSES`] as a [`PassInfo`]: a kebab-case name (what
//! `tessel build --emit NAME` and `--stop-after NAME` take, and the folder `ir/NAME/` of its
//! filetests), a one-line description, and a [`Run`] — the function that runs it, typed by the
//! IR level it takes and gives:
//!
//! ```text
//! Level::Source ──check──▶ Graph ──decompose──▶ Graph ──fuse──▶ Fused ──schedule──▶ Scheduled
//!     ──lower──▶ Kernel ──expand-math──▶ Kernel ──legalize──▶ Kernel
//!     ──merge-launches──▶ Kernel
//! ```
//!
//! A pass that takes the level the previous one gives slots in by adding one entry: the
//! driver ([`run_passes`]) and the filetests read nothing else. A pass at a new level (a
//! graph rewrite after fusion, say) needs a new [`Run`] variant, and the compiler then
//! points at every `match` over it: the driver here and the filetest harness.

use std::collections::BTreeMap;

use tessel_ir::graph::{Fusion, Graph, Schedules};
use tessel_ir::kernel::Kernel;
use tessel_ir::text;
use tessel_ir::verify;
use tessel_syntax::{ast::Module, Diagnostic};

use crate::compiled::Compiled;
use crate::lower::Lowered;
use crate::{CompileError, Options, PASSES};

/// A registered pass.
pub struct PassInfo {
    /// Kebab-case, unique: `--emit NAME`, `--stop-after NAME`, `ir/NAME/*.tir`.
    pub name: &'static str,
    /// What it does, in one line (`tessel build --help` lists it).
    pub what: &'static str,
    /// How it runs.
    pub run: Run,
}

/// The IR levels a pass takes and gives, in pipeline order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Level {
    /// The parsed source (`tessel_syntax::ast::Module`), before `check`.
    Source,
    /// Graph IR.
    Graph,
    /// Graph IR with its fusion groups.
    Fused,
    /// Graph IR with its fusion groups and a schedule for each.
    Scheduled,
    /// Kernel IR: a program of kernels and launches.
    Kernel,
}

/// `check`'s signature: a module, the step's name and its dims' values → the step's graph,
/// or every diagnostic found.
pub type CheckFn = fn(&Module, &str, &BTreeMap<String, u64>) -> Result<Graph, Vec<Diagnostic>>;

/// How a pass runs, by the IR it takes. The functions are plain `fn`s so the registry is a
/// `const` table; those that need the target or the profile read them from [`Options`].
pub enum Run {
    /// Source → graph IR: one step of a module, its symbolic dims bound. It reports
    /// [`Diagnostic`]s, so the front end runs it (`tessel_passes::check::run`) and hands its
    /// graph to [`crate::compile`], which verifies it and starts after it.
    Check(CheckFn),
    /// Graph IR → graph IR (the options say which profile and target the step is for).
    Graph(fn(&Graph, &Options) -> Result<Graph, CompileError>),
    /// Graph IR → its fusion groups (rule 8 asks the schedule of the target and profile).
    Fuse(fn(&Graph, &Options) -> Fusion),
    /// Graph IR and fusion groups → a schedule per group.
    Schedule(fn(&Graph, &Fusion, &Options) -> Schedules),
    /// Graph IR, groups and schedules → kernel IR, with the buffer of every materialised
    /// value and the group of every kernel. Every decision is in the schedules: no options.
    Lower(fn(&Graph, &Fusion, &Schedules) -> Result<Lowered, CompileError>),
    /// Kernel IR → kernel IR, each kernel in place. `expands_math`: no `math.*` placeholder
    /// is left after it, and the verifier holds every later kernel to that.
    Kernel {
        run: fn(&mut Kernel) -> Result<(), CompileError>,
        expands_math: bool,
    },
    /// Kernel IR → kernel IR, the program as a whole (kernels merged into one launch):
    /// returns, for each kernel of the new program, the old kernels it runs, in order, from
    /// which the driver carries each kernel's fusion groups over.
    Program(fn(&mut tessel_ir::kernel::Program, &Options) -> Vec<Vec<usize>>),
}

impl Run {
    /// The IR level the pass takes.
    pub fn takes(&self) -> Level {
        match self {
            Run::Check(_) => Level::Source,
            Run::Graph(_) | Run::Fuse(_) => Level::Graph,
            Run::Schedule(_) => Level::Fused,
            Run::Lower(_) => Level::Scheduled,
            Run::Kernel { .. } | Run::Program(_) => Level::Kernel,
        }
    }

    /// The IR level the pass gives.
    pub fn gives(&self) -> Level {
        match self {
            Run::Check(_) | Run::Graph(_) => Level::Graph,
            Run::Fuse(_) => Level::Fused,
            Run::Schedule(_) => Level::Scheduled,
            Run::Lower(_) | Run::Kernel { .. } | Run::Program(_) => Level::Kernel,
        }
    }
}

/// The registered pass named `name`, if any.
pub fn pass(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|p| p.name == name)
}

/// Whether a pass before `pass` in the registry expands math: then a `math.*` op in its input
/// is an error (the verifier's `after_expand_math`).
pub fn math_expanded_before(pass: &PassInfo) -> bool {
    PASSES.iter().take_while(|p| p.name != pass.name).any(|p| {
        matches!(
            p.run,
            Run::Kernel {
                expands_math: true,
                ..
            }
        )
    })
}

/// The IR between two passes, as the driver holds it.
#[derive(Clone, Debug)]
pub enum Ir {
    /// After `check` and `decompose`.
    Graph(Graph),
    /// After `fuse`.
    Fused(Graph, Fusion),
    /// After `schedule`.
    Scheduled(Graph, Fusion, Schedules),
    /// After `lower` and every kernel pass: [`Compiled::program`] is the program as the last
    /// pass left it, the other fields as `lower` made them.
    Kernel(Box<Compiled>),
}

impl Ir {
    /// The level this IR is at.
    pub fn level(&self) -> Level {
        match self {
            Ir::Graph(_) => Level::Graph,
            Ir::Fused(..) => Level::Fused,
            Ir::Scheduled(..) => Level::Scheduled,
            Ir::Kernel(_) => Level::Kernel,
        }
    }

    /// The textual form (`docs/ir.md`): the per-pass dump of `tessel build --emit NAME`.
    pub fn text(&self) -> String {
        match self {
            Ir::Graph(g) => text::write_graph(g, None, None),
            Ir::Fused(g, f) => text::write_graph(g, Some(f), None),
            Ir::Scheduled(g, f, s) => text::write_graph(g, Some(f), Some(s)),
            Ir::Kernel(c) => text::write_program(&c.program),
        }
    }

    /// Runs the verifier on this IR, as the output of `pass`.
    fn verify(&self, pass: &'static str, math_expanded: bool) -> Result<(), CompileError> {
        let r = match self {
            Ir::Graph(g) => verify::verify_graph(g, None, None),
            Ir::Fused(g, f) => verify::verify_graph(g, Some(f), None),
            Ir::Scheduled(g, f, s) => verify::verify_graph(g, Some(f), Some(s)),
            Ir::Kernel(c) => verify::verify_program(&c.program, math_expanded),
        };
        r.map_err(|es| CompileError::Verify {
            pass,
            errors: es.iter().map(|e| format!("  {e}\n")).collect(),
        })
    }
}

/// Runs the registered passes in order on `checked`, the output of `check` (which the front
/// end ran), up to and including `stop_after` (every pass when `None`), and returns the IR
/// the last one gave. With [`Options::verify`], the IR verifier checks the output of every
/// pass, `check`'s included. `dump` sees each pass's output, `check`'s included, before the
/// next pass runs.
///
/// # Errors
/// A pass's own error ([`CompileError::Lower`], [`CompileError::Legalize`]), or
/// [`CompileError::Verify`] naming the pass whose output the verifier rejected.
pub fn run_passes(
    checked: &Graph,
    opts: &Options,
    stop_after: Option<&PassInfo>,
    dump: &mut dyn FnMut(&'static PassInfo, &Ir),
) -> Result<Ir, CompileError> {
    let mut ir: Option<Ir> = None;
    let mut math_expanded = false;
    for pass in PASSES {
        let next = match (&pass.run, ir.take()) {
            (Run::Check(_), None) => Ir::Graph(checked.clone()),
            (Run::Graph(run), Some(Ir::Graph(g))) => Ir::Graph(run(&g, opts)?),
            (Run::Fuse(run), Some(Ir::Graph(g))) => {
                let f = run(&g, opts);
                Ir::Fused(g, f)
            }
            (Run::Schedule(run), Some(Ir::Fused(g, f))) => {
                let s = run(&g, &f, opts);
                Ir::Scheduled(g, f, s)
            }
            (Run::Lower(run), Some(Ir::Scheduled(graph, fusion, schedules))) => {
                let l = run(&graph, &fusion, &schedules)?;
                Ir::Kernel(Box::new(Compiled {
                    graph,
                    fusion,
                    schedules,
                    lowered: l.program.clone(),
                    program: l.program,
                    buffer_of: l.buffer_of,
                    groups_of_kernel: l.group_of_kernel.into_iter().map(|g| vec![g]).collect(),
                    ptx: opts.target.ptx_header(),
                }))
            }
            (Run::Kernel { run, expands_math }, Some(Ir::Kernel(mut c))) => {
                for (_, k) in c.program.kernels.iter_mut() {
                    run(k)?;
                }
                math_expanded |= expands_math;
                Ir::Kernel(c)
            }
            (Run::Program(run), Some(Ir::Kernel(mut c))) => {
                let runs = run(&mut c.program, opts);
                c.groups_of_kernel = runs
                    .iter()
                    .map(|ks| {
                        ks.iter()
                            .flat_map(|&k| c.groups_of_kernel[k].clone())
                            .collect()
                    })
                    .collect();
                Ir::Kernel(c)
            }
            (run, found) => {
                return Err(CompileError::Registry {
                    pass: pass.name,
                    takes: run.takes(),
                    found: found.map(|i| i.level()),
                })
            }
        };
        if opts.verify {
            next.verify(pass.name, math_expanded)?;
        }
        dump(pass, &next);
        if stop_after.is_some_and(|s| s.name == pass.name) {
            return Ok(next);
        }
        ir = Some(next);
    }
    ir.ok_or(CompileError::Registry {
        pass: "(none)",
        takes: Level::Source,
        found: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_chains_from_source_to_kernel_ir() {
        assert_eq!(PASSES[0].run.takes(), Level::Source, "`check` comes first");
        for w in PASSES.windows(2) {
            assert_eq!(
                w[0].run.gives(),
                w[1].run.takes(),
                "`{}` gives what `{}` does not take",
                w[0].name,
                w[1].name
            );
        }
        let last = PASSES.last().expect("passes");
        assert_eq!(
            last.run.gives(),
            Level::Kernel,
            "`compile` ends at kernel IR"
        );
        assert!(
            PASSES.iter().any(|p| matches!(
                p.run,
                Run::Kernel {
                    expands_math: true,
                    ..
                }
            )),
            "the PTX writer needs the math expanded"
        );
    }

    #[test]
    fn names_are_unique_kebab_case_and_described() {
        for (i, p) in PASSES.iter().enumerate() {
            assert!(
                !p.name.is_empty()
                    && p.name
                        .split('-')
                        .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase())),
                "`{}` is not kebab-case",
                p.name
            );
            assert!(!p.what.is_empty() && !p.what.contains('\n'), "{}", p.name);
            assert!(
                PASSES[..i].iter().all(|q| q.name != p.name),
                "`{}` is registered twice",
                p.name
            );
            assert!(std::ptr::eq(pass(p.name).expect("found"), p));
        }
    }
}
