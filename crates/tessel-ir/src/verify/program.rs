//! Program checks (the `program.*` rules): every kernel as in `kernel.rs`, then the
//! launches, the step's inputs and outputs, and the order in which buffers are written.

use super::kernel::kernel_checks;
use super::{Errors, VerifyError};
use crate::entities::BufferId;
use crate::kernel::{BufferRole, LaunchArg, ParamKind, Program};
use std::collections::HashSet;

/// Checks a program: every kernel (as [`verify_kernel`](super::verify_kernel)), the
/// launches, the step's inputs and outputs, and that every buffer is written before it is
/// read.
pub fn verify_program(p: &Program, after_expand_math: bool) -> Result<(), Vec<VerifyError>> {
    let mut e = Errors::default();
    let mut names = HashSet::new();
    for (kid, k) in p.kernels.iter() {
        kernel_checks(
            k,
            after_expand_math,
            &format!("{kid} (kernel {})", k.name),
            &mut e,
        );
        if !names.insert(k.name.as_str()) {
            e.push(
                "program.kernel",
                kid.to_string(),
                format!("kernel name {:?} is used twice", k.name),
            );
        }
    }
    // Rule `program.io`.
    for (i, (n, b)) in p.inputs.iter().enumerate() {
        let role = p.buffers.get(*b).map(|d| d.role);
        if role.and_then(BufferRole::input_index) != Some(i as u32) {
            e.push(
                "program.io",
                format!("input {i} (\"{n}\")"),
                format!(
                    "{b} is {}, not an `input {i}` or `inout {i}` buffer",
                    role_words(role)
                ),
            );
        }
    }
    for (b, d) in p.buffers.iter() {
        if let Some(i) = d.role.input_index() {
            if p.inputs.get(i as usize).map(|x| x.1) != Some(b) {
                e.push(
                    "program.io",
                    b.to_string(),
                    format!(
                        "{} buffer that is not step input {i}",
                        role_words(Some(d.role))
                    ),
                );
            }
        }
        if let BufferRole::InOut(i) = d.role {
            let name = p.inputs.get(i as usize).map(|x| &x.0);
            if !p.outputs.iter().any(|(n, x)| *x == b && Some(n) == name) {
                e.push(
                    "program.io",
                    b.to_string(),
                    format!(
                        "an `inout {i}` buffer that is not the step output of its input's name"
                    ),
                );
            }
        }
    }
    for (n, b) in &p.outputs {
        let role = p.buffers.get(*b).map(|d| d.role);
        if !matches!(role, Some(BufferRole::Output | BufferRole::InOut(_))) {
            e.push(
                "program.io",
                format!("output \"{n}\""),
                format!(
                    "{b} is {}, not an `output` or `inout` buffer",
                    role_words(role)
                ),
            );
        }
    }
    // Rules `program.launch` and `program.dataflow`.
    let mut written: HashSet<BufferId> = HashSet::new();
    for (li, l) in p.launches.iter().enumerate() {
        let loc = format!("launch {li} ({})", l.kernel);
        let Some(k) = p.kernels.get(l.kernel) else {
            e.push(
                "program.launch",
                loc,
                format!("kernel {} does not exist", l.kernel),
            );
            continue;
        };
        if l.args.len() != k.params.len() {
            e.push(
                "program.launch",
                loc.clone(),
                format!(
                    "{} arguments for {} parameters",
                    l.args.len(),
                    k.params.len()
                ),
            );
        }
        let mut writes = Vec::new();
        for (i, (a, prm)) in l.args.iter().zip(&k.params).enumerate() {
            match (a, prm.kind) {
                (LaunchArg::U32(_), ParamKind::U32) => {}
                (LaunchArg::Buffer(b), ParamKind::Ptr { dtype, writes: w }) => {
                    let Some(d) = p.buffers.get(*b) else {
                        e.push(
                            "program.launch",
                            loc.clone(),
                            format!("argument {i}: buffer {b} does not exist"),
                        );
                        continue;
                    };
                    if d.ty.dtype != dtype {
                        e.push(
                            "program.launch",
                            loc.clone(),
                            format!(
                                "argument {i}: {b} holds {}, parameter {} points to {dtype}",
                                d.ty.dtype, prm.name
                            ),
                        );
                    }
                    if w {
                        writes.push(*b);
                    } else if d.role.input_index().is_none() && !written.contains(b) {
                        e.push(
                            "program.dataflow",
                            loc.clone(),
                            format!("reads {b} (\"{}\") before any launch writes it", d.name),
                        );
                    }
                }
                (LaunchArg::TensorMap(t), ParamKind::TensorMap) => {
                    let b = t.buffer;
                    let Some(d) = p.buffers.get(b) else {
                        e.push(
                            "program.launch",
                            loc.clone(),
                            format!("argument {i}: buffer {b} does not exist"),
                        );
                        continue;
                    };
                    if d.ty.dtype != t.dtype {
                        e.push(
                            "program.launch",
                            loc.clone(),
                            format!(
                                "argument {i}: {b} holds {}, the tensor map {} reads {}",
                                d.ty.dtype, prm.name, t.dtype
                            ),
                        );
                    }
                    if let Err(m) = t.check(d.ty.size_bytes()) {
                        e.push(
                            "program.launch",
                            loc.clone(),
                            format!("argument {i}: tensor map {} over {b}: {m}", prm.name),
                        );
                    }
                    // TMA loads read through the map.
                    if d.role.input_index().is_none() && !written.contains(&b) {
                        e.push(
                            "program.dataflow",
                            loc.clone(),
                            format!("reads {b} (\"{}\") before any launch writes it", d.name),
                        );
                    }
                }
                (a, kind) => e.push(
                    "program.launch",
                    loc.clone(),
                    format!(
                        "argument {i} is {}, parameter {} is {}",
                        match a {
                            LaunchArg::Buffer(b) => format!("buffer {b}"),
                            LaunchArg::U32(x) => format!("the u32 {x}"),
                            LaunchArg::TensorMap(t) => format!("a tensor map over {}", t.buffer),
                        },
                        prm.name,
                        match kind {
                            ParamKind::Ptr { dtype, .. } => format!("a pointer to {dtype}"),
                            ParamKind::U32 => "a u32".to_string(),
                            ParamKind::TensorMap => "a tensor map".to_string(),
                        }
                    ),
                ),
            }
        }
        written.extend(writes);
    }
    // Rule `program.griddep`.
    let constant = crate::kernel::griddep::unwritten_inputs(p);
    for (li, l) in p.launches.iter().enumerate() {
        let Some(k) = p.kernels.get(l.kernel) else {
            continue;
        };
        if !k.waits_on_prior_grid() {
            continue;
        }
        for n in crate::kernel::griddep::before_wait(k).params {
            let ok = matches!(l.args.get(n as usize), Some(LaunchArg::Buffer(b)) if constant.contains(b));
            if !ok {
                e.push(
                    "program.griddep",
                    format!("launch {li}"),
                    format!(
                        "kernel {} loads parameter {n} before `griddepcontrol.wait`, but the launch binds it to what is not a step input that no launch writes: the kernel ahead may be writing it",
                        k.name
                    ),
                );
            }
        }
    }
    for (b, d) in p.buffers.iter() {
        if d.role == BufferRole::Output && !written.contains(&b) {
            e.push(
                "program.dataflow",
                b.to_string(),
                format!("output buffer \"{}\" is never written", d.name),
            );
        }
    }
    e.finish()
}

fn role_words(role: Option<BufferRole>) -> String {
    match role {
        None => "not a buffer".to_string(),
        Some(BufferRole::Input(i)) => format!("an `input {i}` buffer"),
        Some(BufferRole::InOut(i)) => format!("an `inout {i}` buffer"),
        Some(BufferRole::Output) => "an `output` buffer".to_string(),
        Some(BufferRole::Temp) => "a `temp` buffer".to_string(),
    }
}
