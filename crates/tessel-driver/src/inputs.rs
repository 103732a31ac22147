//! Step inputs: from a checkpoint (`--weights`, see `weights`), read from safetensors by
//! name, filled with `--fill`, or seeded random. The messages name the command-line options
//! that set each [`InputSpec`] field.

use crate::error::weights_result::{bail, weights_error as anyhow, Context, Result};
use crate::weights::StepWeights;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::PathBuf;
use tessel_ir::kernel::Program;
use tessel_ir::{DType, TensorType};
use tessel_ref::Tensor;

/// Where a step's inputs come from, by name: what `tessel run`'s input options say.
#[derive(Clone, Debug, Default)]
pub struct InputSpec {
    /// A safetensors file holding inputs by name (`--inputs`): names, dtypes and shapes must
    /// match the step's parameters; nothing is converted.
    pub inputs: Option<PathBuf>,
    /// The seed of the random inputs made for what nothing else gives (`--seed`).
    pub seed: u64,
    /// i32 inputs filled with `START, START + 1, ...` (`--fill NAME=iota:START`).
    pub fills: Vec<(String, i64)>,
    /// With `inputs`: make an input the file lacks seeded random, with a warning, instead
    /// of failing (`--allow-random`).
    pub allow_random: bool,
    /// A Hugging Face checkpoint (`--weights`): a `.safetensors` file, or a directory with
    /// `model.safetensors` or a sharded `model.safetensors.index.json`; the step parameters
    /// declared `from "NAME"` are read from it.
    pub checkpoint: Option<PathBuf>,
    /// The layer number that `{layer}` stands for in `from` names (`--layer`).
    pub layer: Option<u64>,
}

/// The safetensors dtype of `d`.
pub fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::Bf16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::F32 => Dtype::F32,
        DType::I32 => Dtype::I32,
        DType::Bool => Dtype::BOOL,
    }
}

/// The inputs of `p` in parameter order, each from the checkpoint (`weights`, the step's
/// parameters read from `--weights`, already validated), the `--inputs` file, a fill, or
/// random with a seed derived from `--seed` and the input's position. What the file or a
/// fill gives that `p` does not take is noted by [`note_unused`], once for all steps.
///
/// Errors: an input the `--inputs` file lacks (naming it and the closest name in the file),
/// unless `--allow-random`, which makes it random with a warning; a tensor of the wrong
/// dtype or shape; a fill that does not fit in i32; memory that cannot be reserved for an
/// input (naming it and its size in bytes) instead of aborting the process.
pub fn make_inputs(p: &Program, args: &InputSpec, weights: &StepWeights) -> Result<Vec<Tensor>> {
    let file = match &args.inputs {
        Some(path) => Some(read_file(path)?),
        None => None,
    };
    let st = match (&file, &args.inputs) {
        (Some(bytes), Some(path)) => Some(
            SafeTensors::deserialize(bytes)
                .map_err(|e| anyhow!("--inputs {}", crate::weights::corrupt(path, bytes, e)))?,
        ),
        _ => None,
    };
    let fills: HashMap<&str, i64> = args.fills.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    if let (Some(s), Some(path)) = (&st, &args.inputs) {
        let mut in_file: Vec<String> = s.names().into_iter().map(String::from).collect();
        in_file.sort();
        let missing: Vec<&str> = p
            .inputs
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| {
                !fills.contains_key(n)
                    && weights.get(n).is_none()
                    && !in_file.iter().any(|f| f == n)
            })
            .collect();
        for name in &missing {
            let close = tessel_passes::check::suggest(name, in_file.iter().map(String::as_str))
                .map(|c| format!(" (closest name in the file: `{c}`)"))
                .unwrap_or_default();
            if args.allow_random {
                eprintln!(
                    "warning: --inputs {} has no `{name}` for step `{}`{close}: using SEEDED RANDOM \
                     values for it (--allow-random)",
                    path.display(),
                    p.name
                );
            } else {
                let list = if in_file.is_empty() {
                    "no tensors".to_string()
                } else {
                    in_file.join(", ")
                };
                bail!(
                    "--inputs {} has no tensor `{name}`, an input of step `{}`{close}; the file \
                     holds {list}. Give every input, or pass --allow-random to use seeded random \
                     values for the missing ones",
                    path.display(),
                    p.name
                );
            }
        }
    }
    let mut out = Vec::new();
    for (i, (name, b)) in p.inputs.iter().enumerate() {
        let ty = p.buffers[*b].ty.clone();
        let t = if let Some(w) = weights.get(name) {
            let data = w.bytes();
            if data.len() as u64 != ty.size_bytes() {
                bail!(
                    "internal error: tensor `{}` of {} has {} bytes, input `{name}` ({ty}) {}",
                    w.name,
                    w.file.display(),
                    data.len(),
                    ty.size_bytes()
                );
            }
            let mut bytes = reserve(name, &ty)?;
            // The first touch of the mapped pages: the tensor is read from disk here.
            bytes.extend_from_slice(data);
            Tensor { ty, data: bytes }
        } else if let Some(&start) = fills.get(name.as_str()) {
            fill_iota(name, &ty, start)?
        } else if let Some(t) = st.as_ref().and_then(|s| s.tensor(name).ok()) {
            let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
            if t.dtype() != st_dtype(ty.dtype) || shape != ty.shape.0 {
                let why = match (t.dtype() != st_dtype(ty.dtype), shape != ty.shape.0) {
                    (true, true) => "the dtypes and the shapes differ",
                    (true, false) => "the dtypes differ; nothing is converted",
                    _ => "the shapes differ",
                };
                bail!(
                    "--inputs {}: tensor `{name}` is {:?}{}, but step `{}` takes input \
                     `{name}` as {ty} ({why})",
                    args.inputs
                        .as_deref()
                        .unwrap_or(std::path::Path::new("?"))
                        .display(),
                    t.dtype(),
                    tessel_ir::Shape(shape),
                    p.name,
                );
            }
            let mut data = reserve(name, &ty)?;
            data.extend_from_slice(t.data());
            Tensor { ty, data }
        } else {
            let bytes = ty.size_bytes();
            let what =
                format!("input `{name}` ({ty}, {bytes} bytes): cannot reserve memory for it");
            Tensor::try_random(ty, random_seed(args.seed, i))
                .map_err(|e| anyhow!("{e}"))
                .context(what)?
        };
        out.push(t);
    }
    Ok(out)
}

/// The seed [`make_inputs`] gives `tessel_ref::Tensor::try_random` for the input at
/// parameter position `index` when `--seed` is `seed` and nothing else gives that input.
pub fn random_seed(seed: u64, index: usize) -> u64 {
    seed.wrapping_mul(1000).wrapping_add(index as u64)
}

/// An empty buffer with room for input `name` of type `ty`, or an error naming the input
/// and its size when the memory cannot be reserved.
fn reserve(name: &str, ty: &TensorType) -> Result<Vec<u8>> {
    let bytes = ty.size_bytes();
    let mut v = Vec::new();
    usize::try_from(bytes)
        .map_err(|_| anyhow!("does not fit in this machine's address space"))
        .and_then(|n| v.try_reserve_exact(n).map_err(|e| anyhow!("{e}")))
        .with_context(|| {
            format!("input `{name}` ({ty}, {bytes} bytes): cannot reserve memory for it")
        })?;
    Ok(v)
}

/// The bytes of `path`, reserved before reading so a file too large for memory is an error.
fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let cannot = || format!("cannot read --inputs {}", path.display());
    let mut f = std::fs::File::open(path).with_context(cannot)?;
    let len = f.metadata().with_context(cannot)?.len();
    let mut bytes = Vec::new();
    usize::try_from(len)
        .map_err(|_| anyhow!("does not fit in this machine's address space"))
        .and_then(|n| bytes.try_reserve_exact(n).map_err(|e| anyhow!("{e}")))
        .with_context(|| format!("{}: {len} bytes", cannot()))?;
    f.read_to_end(&mut bytes).with_context(cannot)?;
    Ok(bytes)
}

/// Input `name` of type `ty` filled with `start, start + 1, ...`: every value, up to the
/// last `start + numel - 1`, must be an i32.
fn fill_iota(name: &str, ty: &TensorType, start: i64) -> Result<Tensor> {
    if ty.dtype != DType::I32 {
        bail!("--fill {name}: only i32 inputs can be filled, `{name}` is {ty}");
    }
    let n = ty.shape.numel();
    let last = i128::from(start) + i128::from(n) - 1;
    let fits = |v: i128| (i128::from(i32::MIN)..=i128::from(i32::MAX)).contains(&v);
    if !fits(i128::from(start)) || !fits(last) {
        let hint = if n - 1 <= i32::MAX as u64 {
            format!(
                "; START must be in {} ..= {}",
                i32::MIN,
                i128::from(i32::MAX) - i128::from(n) + 1
            )
        } else {
            String::new()
        };
        bail!(
            "--fill {name}=iota:{start}: input `{name}` ({ty}) has {n} elements, so the values \
             would be {start} ..= {last}, which do not fit in i32 ({} ..= {}){hint}",
            i32::MIN,
            i32::MAX
        );
    }
    let mut data = reserve(name, ty)?;
    // `fits(last)` bounds every value, so the conversions cannot wrap.
    for k in 0..n as i64 {
        data.extend_from_slice(&((start + k) as i32).to_le_bytes());
    }
    Ok(Tensor {
        ty: ty.clone(),
        data,
    })
}

/// Writes named tensors to the safetensors file `path` (each tensor's dtype, shape and
/// bytes as they are; the file replaced if it exists): `tessel run`'s outputs and saved
/// inputs, and the Python package's reproducer inputs.
///
/// # Errors
/// [`crate::WeightsError`] naming the tensor that cannot be viewed, or the file that cannot
/// be written.
pub fn write_safetensors(path: &std::path::Path, named: &[(String, &Tensor)]) -> Result<()> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = named
        .iter()
        .map(|(n, t)| {
            let shape: Vec<usize> = t.ty.shape.0.iter().map(|&d| d as usize).collect();
            let v = safetensors::tensor::TensorView::new(st_dtype(t.ty.dtype), shape, &t.data)
                .with_context(|| format!("tensor `{n}`"))?;
            Ok((n.clone(), v))
        })
        .collect::<Result<_>>()?;
    safetensors::serialize_to_file(views, None, path)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_that_cannot_be_reserved_is_an_error_naming_the_input() {
        // 2^62 bytes: no allocator grants it, and nothing is touched.
        let ty = TensorType::new(DType::F32, vec![1 << 40, 1 << 20]);
        let e = format!("{:#}", reserve("x", &ty).unwrap_err());
        assert!(
            e.starts_with(&format!(
                "input `x` ({ty}, {} bytes): cannot reserve memory",
                1u64 << 62
            )),
            "{e}"
        );
    }
}
