//! Every stage of a step as text: the IR after each registered pass (`tessel_passes::PASSES`)
//! and the file name each is written under. `tessel build --emit` and the reproducer bundle
//! ([`crate::repro`]) both write stages through here, so their files are named and printed
//! alike.

use crate::error::Error;
use crate::source::Source;
use std::collections::BTreeMap;
use tessel_passes::{run_passes, Ir, Level, Options, PassInfo};

/// What follows `STEP.` in the file of pass `p`'s output: `PASS.kir` for kernel IR,
/// `PASS.graph` for graph IR (`tessel build --emit PASS` writes `STEP.PASS.kir`, ...).
pub fn stage_suffix(p: &PassInfo) -> String {
    if p.run.gives() == Level::Kernel {
        format!("{}.kir", p.name)
    } else {
        format!("{}.graph", p.name)
    }
}

/// The output of one pass, as text.
pub struct StageText {
    /// The pass.
    pub pass: &'static PassInfo,
    /// Its output in the textual form (`docs/ir.md`).
    pub text: String,
}

impl Source {
    /// Checks step `name` with `dims` and runs the registered passes on it with `opts`, up
    /// to and including `stop_after` (all when `None`): the text of every pass's output that
    /// `want` asks for, in pipeline order, and the IR the last pass gave.
    ///
    /// # Errors
    /// As [`Source::check_step`]; [`Error::Compile`] when a pass fails.
    pub fn stage_texts(
        &self,
        name: &str,
        dims: &BTreeMap<String, u64>,
        opts: &Options,
        stop_after: Option<&PassInfo>,
        want: &dyn Fn(&'static PassInfo) -> bool,
    ) -> Result<(Vec<StageText>, Ir), Error> {
        let checked = self.check_step(name, dims)?;
        let mut texts = Vec::new();
        let ir = run_passes(
            &checked,
            opts,
            stop_after,
            &mut |p: &'static PassInfo, ir: &Ir| {
                if want(p) {
                    texts.push(StageText {
                        pass: p,
                        text: ir.text(),
                    });
                }
            },
        )
        .map_err(|error| Error::Compile {
            step: name.to_string(),
            file: self.name.clone(),
            rank: None,
            error,
        })?;
        Ok((texts, ir))
    }
}
