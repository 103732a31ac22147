//! A step of a source, checked and compiled: the sequence check → bind weights → compile
//! (→ `grad` for the references → tensor-parallel plan and ranks) that every user of the
//! compiler runs.

use crate::error::{Error, RequestError, SourceDiagnostics, UnboundDims, WeightsError};
use crate::source::Source;
use crate::weights::{StepWeights, Weights};
use crate::words::plural;
use std::collections::BTreeMap;
use tessel_ir::graph::Graph;
use tessel_ir::kernel::Program;
use tessel_ir::ranks::Rank;
use tessel_passes::{check, compile, Compiled, Options};
use tessel_ref::Tensor;
use tessel_syntax::ast::FuncKind;

/// How to compile a step.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The symbolic dims bound, e.g. `T = 4096` (elements).
    pub dims: BTreeMap<String, u64>,
    /// Target, profile, verifier and the schedule choices, given to every pass.
    pub options: Options,
    /// Tensor parallelism over this many ranks (1, 2, 4 or 8), or none.
    pub tp: Option<u32>,
}

/// One step, checked and compiled.
pub struct Step {
    /// The step's name in the source.
    pub name: String,
    /// The step as `check` built it, with every `grad(...)` differentiated (the `grad`
    /// pass run on it alone): what the references evaluate and tensor parallelism splits.
    /// `compiled` is compiled from `check`'s graph itself, so that `grad` runs after
    /// `attention`.
    pub checked: Graph,
    /// Every stage of the compiled step: the program (kernels, buffers, inputs and outputs
    /// in parameter order) and the PTX header it was compiled under.
    pub compiled: Compiled,
    /// Its parameters read from the checkpoint, validated against their types.
    pub weights: StepWeights,
    /// With tensor parallelism over N ranks: what each rank runs, its phases compiled
    /// (tessel-passes `tp::ranks`); `compiled` is still the step as written (its inputs and
    /// outputs are the ranks' whole ones).
    pub ranks: Option<Vec<Rank<Compiled>>>,
    /// With tensor parallelism: the plan the ranks were made from.
    pub plan: Option<tessel_passes::tp::TpPlan>,
}

impl Step {
    /// The step's inputs in parameter order, taken by name from `named`: each must be a
    /// parameter of the step and have its dtype and shape exactly (nothing is converted),
    /// and every parameter must be given once.
    ///
    /// # Errors
    /// [`Error::Weights`] listing every name that is missing, unknown, given twice or of
    /// the wrong type.
    pub fn inputs_by_name(&self, named: Vec<(String, Tensor)>) -> Result<Vec<Tensor>, Error> {
        let p = &self.compiled.program;
        let mut slots: Vec<Option<Tensor>> = vec![None; p.inputs.len()];
        let mut problems = Vec::new();
        for (name, t) in named {
            let Some(i) = p.inputs.iter().position(|(n, _)| *n == name) else {
                problems.push(format!("step `{}` has no input `{name}`", self.name));
                continue;
            };
            let ty = &p.buffers[p.inputs[i].1].ty;
            if t.ty != *ty {
                problems.push(format!(
                    "input `{name}` of step `{}` is {ty}, given {}",
                    self.name, t.ty
                ));
            } else if slots[i].replace(t).is_some() {
                problems.push(format!("input `{name}` is given twice"));
            }
        }
        for ((name, _), slot) in p.inputs.iter().zip(&slots) {
            if slot.is_none() && !problems.iter().any(|m| m.contains(&format!("`{name}`"))) {
                problems.push(format!(
                    "input `{name}` of step `{}` is not given",
                    self.name
                ));
            }
        }
        if !problems.is_empty() {
            return Err(WeightsError::new(problems.join("\n")).into());
        }
        Ok(slots.into_iter().flatten().collect())
    }

    /// Runs the step once on the GPU: its module loaded, `inputs` (parameter order, as
    /// [`Step::inputs_by_name`] gives them) uploaded, every kernel launched in order and
    /// checked, the outputs (in `compiled.program.outputs` order) read back.
    ///
    /// # Errors
    /// [`Error::LoadModule`], [`Error::Kernel`], [`Error::Device`] from the runtime;
    /// [`Error::Ptx`] for a kernel the writer cannot print.
    pub fn run_gpu(&self, gpu: &tessel_cuda::Gpu, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        crate::device::run_once(gpu, &self.compiled.program, &self.compiled.ptx, inputs)
    }

    /// Runs the step once on the CPU kernel-IR executor, which follows every kernel's
    /// reduction order: in `exact`, the GPU's bits.
    ///
    /// # Errors
    /// [`Error::Executor`].
    pub fn run_executor(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        crate::execute(
            &self.compiled.program,
            inputs,
            &tessel_ref::ExecOptions::default(),
        )
    }

    /// With tensor parallelism: the ranks' programs, to run.
    pub fn rank_programs(&self) -> Option<Vec<Rank<Program>>> {
        self.ranks
            .as_ref()
            .map(|rs| rs.iter().map(|r| r.map(|c| c.program.clone())).collect())
    }
}

impl Source {
    /// The steps of the source that `step` selects (that one, else all of them).
    ///
    /// # Errors
    /// [`RequestError::NoSuchStep`] for a name the source has no step of;
    /// [`RequestError::NoSteps`] when it has none.
    pub fn step_names(&self, step: Option<&str>) -> Result<Vec<String>, Error> {
        let all = check::steps(&self.module);
        let names: Vec<String> = match step {
            Some(s) if all.iter().any(|a| a == s) => vec![s.to_string()],
            Some(s) => {
                return Err(RequestError::NoSuchStep {
                    file: self.name.clone(),
                    step: s.to_string(),
                    steps: all,
                }
                .into())
            }
            None => all,
        };
        if names.is_empty() {
            return Err(RequestError::NoSteps {
                file: self.name.clone(),
            }
            .into());
        }
        Ok(names)
    }

    /// Steps `names`, each with its parameters' names: the inputs its compiled program
    /// takes, known before it is compiled.
    pub fn step_params<'a>(&'a self, names: &'a [String]) -> Vec<(&'a str, Vec<&'a str>)> {
        names
            .iter()
            .map(|name| {
                let params = self
                    .module
                    .funcs()
                    .find(|f| f.name.node == *name)
                    .map(|f| f.params.iter().map(|p| p.name.node.as_str()).collect())
                    .unwrap_or_default();
                (name.as_str(), params)
            })
            .collect()
    }

    /// Runs `check` on step `name` with `dims` bound: its graph IR.
    ///
    /// # Errors
    /// [`Error::UnboundDims`] when the only errors are dims without a value, else
    /// [`Error::Source`]; either report ends `N errors in step `NAME``.
    pub fn check_step(&self, name: &str, dims: &BTreeMap<String, u64>) -> Result<Graph, Error> {
        let name = name.to_string();
        check::run(&self.module, &name, dims).map_err(|d| {
            let rendered = format!(
                "{}\n{} in step `{name}`",
                self.render(&d),
                plural(d.len(), "error")
            );
            let unbound = d.iter().all(|x| x.code == "E0214");
            let dims = d
                .iter()
                .filter_map(|x| x.message.split('`').nth(1).map(str::to_string))
                .collect();
            let report = SourceDiagnostics {
                diagnostics: d,
                rendered,
            };
            if unbound {
                UnboundDims {
                    step: name.clone(),
                    dims,
                    source_report: report,
                }
                .into()
            } else {
                report.into()
            }
        })
    }

    /// Checks and compiles the steps `step` selects (see [`Source::step_names`]). Every
    /// step is checked and its checkpoint tensors validated (the problems of all steps
    /// reported together, one per line, in one [`Error::Weights`]) before any is compiled.
    ///
    /// # Errors
    /// As [`Source::step_names`], [`Source::check_step`] and [`Source::compile_step`].
    pub fn compile_steps(
        &self,
        step: Option<&str>,
        config: &Config,
        weights: &Weights,
    ) -> Result<Vec<Step>, Error> {
        let checked: Vec<(String, Graph)> = self
            .step_names(step)?
            .into_iter()
            .map(|name| self.check_step(&name, &config.dims).map(|g| (name, g)))
            .collect::<Result<_, _>>()?;
        let mut bound = Vec::new();
        let mut problems = Vec::new();
        for (name, graph) in &checked {
            match self.bind_weights(name, graph, weights) {
                Ok(w) => bound.push(w),
                Err(e) => problems.push(crate::error::chain(&e)),
            }
        }
        if !problems.is_empty() {
            return Err(crate::WeightsError::new(problems.join("\n")).into());
        }
        checked
            .into_iter()
            .zip(bound)
            .map(|((name, graph), w)| self.compile_checked(&name, graph, w, config))
            .collect()
    }

    /// Checks step `name`, validates its checkpoint tensors and compiles it.
    ///
    /// # Errors
    /// [`Error::UnboundDims`] or [`Error::Source`] from `check`; [`Error::Weights`] for a
    /// checkpoint tensor that does not fit its parameter; [`Error::Compile`] when a pass
    /// fails; [`Error::Transform`] when `grad` or the tensor-parallel split fails.
    pub fn compile_step(
        &self,
        name: &str,
        config: &Config,
        weights: &Weights,
    ) -> Result<Step, Error> {
        let checked = self.check_step(name, &config.dims)?;
        let bound = self.bind_weights(name, &checked, weights)?;
        self.compile_checked(name, checked, bound, config)
    }

    /// The checkpoint tensors of step `name`, whose graph is `graph`, validated against
    /// the types `check` gave its parameters.
    fn bind_weights(
        &self,
        name: &str,
        graph: &Graph,
        weights: &Weights,
    ) -> Result<StepWeights, Error> {
        let Some(func) = self
            .module
            .funcs()
            .find(|f| f.kind == FuncKind::Step && f.name.node == name)
        else {
            return Err(crate::WeightsError::new(format!(
                "internal error: step `{name}` was checked but is not in the module"
            ))
            .into());
        };
        let inputs: Vec<(String, tessel_ir::TensorType)> = graph
            .inputs
            .iter()
            .map(|(n, v)| (n.clone(), graph.ty(*v).clone()))
            .collect();
        Ok(weights.bind(func, &inputs)?)
    }

    /// Compiles step `name`, checked as `checked` ([`Source::check_step`]'s graph, which a
    /// caller that needs it keeps a copy of), with `weights` bound; with tensor
    /// parallelism, also its plan and the ranks' programs (tessel-passes `tp::ranks`, each
    /// phase compiled, split-K off).
    ///
    /// # Errors
    /// [`Error::Compile`] when a pass fails; [`Error::Transform`] when `grad` or the
    /// tensor-parallel split fails.
    pub fn compile_checked(
        &self,
        name: &str,
        checked: Graph,
        weights: StepWeights,
        config: &Config,
    ) -> Result<Step, Error> {
        let opts = &config.options;
        let compile_error = |rank, error| Error::Compile {
            step: name.to_string(),
            file: self.name.clone(),
            rank,
            error,
        };
        let transform_error = |message: String| Error::Transform {
            step: name.to_string(),
            file: self.name.clone(),
            message,
        };
        let compiled = compile(&checked, opts).map_err(|e| compile_error(None, e))?;
        // The program as the references judge it and tensor parallelism splits it: every
        // `grad(...)` differentiated (before `attention`, so the backward is the program's
        // own math, op for op).
        let checked =
            tessel_passes::grad::run(&checked).map_err(|e| transform_error(e.to_string()))?;
        let (ranks, plan) = match config.tp {
            None => (None, None),
            Some(n) => {
                let plan = tessel_passes::tp::plan(&checked, n)
                    .map_err(|e| transform_error(e.to_string()))?;
                // No split-K in a rank: a GEMM's split would follow its shard's tile count.
                let rank_opts = Options {
                    tensor_parallel: true,
                    ..opts.clone()
                };
                let ranks = tessel_passes::tp::ranks(&checked, &plan)
                    .map_err(|e| transform_error(e.to_string()))?
                    .into_iter()
                    .map(|r| {
                        let rank = r.rank;
                        r.try_map(|p| compile(&p, &rank_opts))
                            .map_err(|e| compile_error(Some(rank), e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                (Some(ranks), Some(plan))
            }
        };
        Ok(Step {
            name: name.to_string(),
            checked,
            compiled,
            weights,
            ranks,
            plan,
        })
    }
}
