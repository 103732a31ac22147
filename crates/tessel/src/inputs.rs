//! Step inputs: read from safetensors by name, filled with `--fill`, or seeded random.

use crate::InputArgs;
use anyhow::{bail, Context, Result};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use tessel_ir::kernel::Program;
use tessel_ir::{DType, TensorType};
use tessel_ref::Tensor;

/// Parses `NAME=iota[:START]` for `--fill`.
pub fn parse_fill(s: &str) -> Result<(String, i64), String> {
    let (name, what) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=iota[:START]"))?;
    let start = match what.split_once(':') {
        None if what == "iota" => 0,
        Some(("iota", n)) => n
            .parse()
            .map_err(|_| format!("`{s}`: START must be an integer"))?,
        _ => {
            return Err(format!(
                "`{s}`: the only fill is iota, e.g. pos=iota:127000"
            ))
        }
    };
    Ok((name.to_string(), start))
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::Bf16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::F32 => Dtype::F32,
        DType::I32 => Dtype::I32,
        DType::Bool => Dtype::BOOL,
    }
}

/// The inputs of `p` in parameter order, each from the file, a fill, or random with a
/// seed derived from `--seed` and the input's position.
pub fn make_inputs(p: &Program, args: &InputArgs) -> Result<Vec<Tensor>> {
    let file = match &args.inputs {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?)
        }
        None => None,
    };
    let st = match &file {
        Some(bytes) => Some(
            SafeTensors::deserialize(bytes)
                .with_context(|| "the --inputs file is not a valid safetensors file")?,
        ),
        None => None,
    };
    let fills: HashMap<&str, i64> = args.fills.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    for name in fills.keys() {
        if !p.inputs.iter().any(|(n, _)| n == name) {
            // Several steps may run with one --fill; say so rather than fail.
            eprintln!(
                "note: --fill {name}: step `{}` has no input `{name}`; ignored",
                p.name
            );
        }
    }
    if let Some(s) = &st {
        for (name, _) in s.tensors() {
            if !p.inputs.iter().any(|(n, _)| *n == name) {
                eprintln!(
                    "note: --inputs has `{name}`, which step `{}` does not take; ignored",
                    p.name
                );
            }
        }
    }
    let mut out = Vec::new();
    for (i, (name, b)) in p.inputs.iter().enumerate() {
        let ty = p.buffers[*b].ty.clone();
        let t = if let Some(&start) = fills.get(name.as_str()) {
            fill_iota(name, &ty, start)?
        } else if let Some(t) = st.as_ref().and_then(|s| s.tensor(name).ok()) {
            let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
            if t.dtype() != st_dtype(ty.dtype) || shape != ty.shape.0 {
                bail!(
                    "input `{name}`: step `{}` expects {ty}, the file has {:?}{:?}",
                    p.name,
                    t.dtype(),
                    shape
                );
            }
            Tensor {
                ty,
                data: t.data().to_vec(),
            }
        } else {
            if st.is_some() {
                eprintln!(
                    "note: --inputs has no `{name}` for step `{}`; using seeded random values",
                    p.name
                );
            }
            Tensor::random(ty, args.seed.wrapping_mul(1000).wrapping_add(i as u64))
        };
        out.push(t);
    }
    Ok(out)
}

fn fill_iota(name: &str, ty: &TensorType, start: i64) -> Result<Tensor> {
    if ty.dtype != DType::I32 {
        bail!("--fill {name}: only i32 inputs can be filled, `{name}` is {ty}");
    }
    let n = ty.shape.numel() as i64;
    if start < i32::MIN as i64 || start + n > i32::MAX as i64 {
        bail!("--fill {name}: {start}.. does not fit in i32");
    }
    let vals: Vec<i32> = (0..n).map(|k| (start + k) as i32).collect();
    Ok(Tensor::from_i32(ty.shape.0.clone(), &vals))
}

/// Writes named tensors to a safetensors file.
pub fn write_outputs(path: &std::path::Path, named: &[(String, &Tensor)]) -> Result<()> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = named
        .iter()
        .map(|(n, t)| {
            let shape: Vec<usize> = t.ty.shape.0.iter().map(|&d| d as usize).collect();
            let v = safetensors::tensor::TensorView::new(st_dtype(t.ty.dtype), shape, &t.data)
                .with_context(|| format!("output `{n}`"))?;
            Ok((n.clone(), v))
        })
        .collect::<Result<_>>()?;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    safetensors::serialize_to_file(views, None, path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
