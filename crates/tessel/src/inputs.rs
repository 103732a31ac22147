//! Step inputs on the command line: `--fill`'s syntax, notes on what a step does not take,
//! and the outputs written as safetensors; the inputs themselves are made by
//! `tessel_driver::make_inputs`.

use crate::InputArgs;
use anyhow::Result;
use tessel_driver::words::and_list;
use tessel_driver::StepWeights;
use tessel_ir::kernel::Program;
use tessel_ref::Tensor;

/// Parses `NAME=iota[:START]` for `--fill`. Whether the values fit in i32 depends on the
/// input's element count, so `tessel_driver::make_inputs` checks that.
pub fn parse_fill(s: &str) -> Result<(String, i64), String> {
    let (name, what) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=iota[:START]"))?;
    let start = match what.split_once(':') {
        None if what == "iota" => 0,
        Some(("iota", n)) => n.trim().parse::<i64>().map_err(|e| {
            if matches!(
                e.kind(),
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
            ) {
                format!("`{s}`: START must fit in i32 (-2147483648 ..= 2147483647)")
            } else {
                format!("`{s}`: START must be an integer")
            }
        })?,
        _ => {
            return Err(format!(
                "`{s}`: the only fill is iota, e.g. pos=iota:127000"
            ))
        }
    };
    Ok((name.to_string(), start))
}

/// Notes on what `--fill` names and the `--inputs` file holds that a step does not take:
/// several steps may run with one command line, so these are notes, not errors. Printed once
/// for the steps of one file, before any of them runs (a note per step repeated the same
/// tensor for every step): each name once, with every step it concerns. `steps` are the
/// steps' names, each with its input names. An `--inputs` file that cannot be read gets no
/// note here; [`make_inputs`] reports it.
pub fn note_unused(args: &InputArgs, steps: &[(&str, Vec<&str>)]) {
    // "step `a` does not take", "steps `a` and `b` do not take"
    let not_taking = |name: &str, one: &str, many: &str| -> Option<String> {
        let steps: Vec<String> = steps
            .iter()
            .filter(|(_, ins)| !ins.contains(&name))
            .map(|(s, _)| format!("`{s}`"))
            .collect();
        match steps.len() {
            0 => None,
            1 => Some(format!("step {} {one}", and_list(&steps))),
            _ => Some(format!("steps {} {many}", and_list(&steps))),
        }
    };
    let mut fills: Vec<&str> = args.fills.iter().map(|(n, _)| n.as_str()).collect();
    fills.sort_unstable();
    fills.dedup();
    for name in fills {
        if let Some(who) = not_taking(name, "has", "have") {
            eprintln!("note: --fill {name}: {who} no input `{name}`; ignored");
        }
    }
    if let Some(path) = &args.inputs {
        let mut in_file = tessel_driver::weights::tensor_names(path).unwrap_or_default();
        in_file.sort();
        for name in &in_file {
            if let Some(who) = not_taking(name, "does not take", "do not take") {
                eprintln!(
                    "note: --inputs {} has `{name}`, which {who}; ignored",
                    path.display()
                );
            }
        }
    }
}

/// The inputs of `p` in parameter order, made as `args` says (`tessel_driver::make_inputs`):
/// from the checkpoint (`weights`, already validated), the `--inputs` file, a fill, or
/// seeded random.
pub fn make_inputs(p: &Program, args: &InputArgs, weights: &StepWeights) -> Result<Vec<Tensor>> {
    Ok(tessel_driver::make_inputs(p, &args.spec(), weights)?)
}

/// Writes named tensors to a safetensors file (tessel-driver `write_safetensors`), its
/// directory made if missing.
pub fn write_outputs(path: &std::path::Path, named: &[(String, &Tensor)]) -> Result<()> {
    crate::paths::create_parent(path)?;
    Ok(tessel_driver::write_safetensors(path, named)?)
}
