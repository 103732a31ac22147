//! Checkpoint weights: the step parameters declared `from "NAME"` read from a Hugging Face
//! safetensors checkpoint (`--weights PATH`, `--layer N`).
//!
//! PATH is one `.safetensors` file, or a directory holding either `model.safetensors` or a
//! sharded checkpoint: `model.safetensors.index.json`, whose `weight_map` maps each tensor
//! name to the shard file beside it that holds it — what `save_pretrained` writes and what a
//! model repository holds. Files are memory-mapped: only their headers are parsed, and only
//! the bytes of the tensors a step names are read (when its inputs are made), so a 28 GB
//! checkpoint costs the layer it feeds. A shard is opened the first time a step needs one of
//! its tensors.
//!
//! [`Weights::bind`] validates a step's parameters after `check` has fixed their types and
//! before anything is compiled or run: every tensor must exist with exactly the parameter's
//! dtype and shape (nothing is converted), a template holding `{layer}` needs `--layer`, and
//! a parameter read from the checkpoint must not be given by `--inputs` or `--fill` too. All
//! of a step's problems are reported together. A truncated or corrupt file (a bad header,
//! offsets past its end, invalid JSON, a shard the index names but the directory lacks) is
//! an error naming the file, never a panic.
//!
//! Without `--weights`, a `from` parameter is an input like any other (`--inputs`, or
//! seeded random): nothing here is used.

use crate::error::weights_result::{bail, weights_error as anyhow, Context, Result};
use crate::InputSpec;
use memmap2::Mmap;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessel_ir::{DType, TensorType};
use tessel_syntax::ast::Func;

/// A single-file checkpoint's name inside a checkpoint directory.
pub const SINGLE_FILE: &str = "model.safetensors";
/// A sharded checkpoint's index inside a checkpoint directory.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// What the command line says about weights, opened once per command: the checkpoint (if
/// `--weights`), the layer, and the names `--inputs` and `--fill` give (a parameter read
/// from the checkpoint must not have a second source).
pub struct Weights {
    checkpoint: Option<Checkpoint>,
    layer: Option<u64>,
    /// Input names given otherwise, each with the option that gives it.
    explicit: Vec<(String, String)>,
    /// Steps already noted as reading nothing (`invariance` binds each step once per size).
    noted: RefCell<HashSet<String>>,
}

impl Weights {
    /// No checkpoint: every parameter is an input like any other.
    pub fn none() -> Weights {
        Weights {
            checkpoint: None,
            layer: None,
            explicit: Vec::new(),
            noted: RefCell::default(),
        }
    }

    /// Opens `--weights` (its index, or its single file's header) and reads the names in
    /// `--inputs` (its header only). Errors: `--layer` without `--weights`; a checkpoint
    /// that is missing, of no known layout, or corrupt; an unreadable `--inputs`.
    pub fn open(args: &InputSpec) -> Result<Weights> {
        let Some(path) = &args.checkpoint else {
            if let Some(n) = args.layer {
                bail!(
                    "--layer {n} fills `{{layer}}` in the tensor names of `from` parameters, \
                     which are read only with --weights: give --weights PATH too"
                );
            }
            return Ok(Weights::none());
        };
        let checkpoint = Checkpoint::open(path)?;
        let mut explicit: Vec<(String, String)> = args
            .fills
            .iter()
            .map(|(n, _)| (n.clone(), "--fill".to_string()))
            .collect();
        if let Some(p) = &args.inputs {
            let file = Mapped::open(p).map_err(|e| anyhow!("--inputs: {e}"))?;
            let mut names: Vec<&String> = file.tensors.keys().collect();
            names.sort();
            for n in names {
                explicit.push((n.clone(), format!("--inputs {}", p.display())));
            }
        }
        Ok(Weights {
            checkpoint: Some(checkpoint),
            layer: args.layer,
            explicit,
            noted: RefCell::default(),
        })
    }

    /// The tensors of step `func`'s `from` parameters, whose checked types are `inputs`
    /// (the graph's inputs: parameter name and type), each found in the checkpoint and
    /// checked against its parameter. Empty without `--weights`. The error lists every
    /// problem of the step.
    pub fn bind(&self, func: &Func, inputs: &[(String, TensorType)]) -> Result<StepWeights> {
        let Some(ckpt) = &self.checkpoint else {
            return Ok(StepWeights::default());
        };
        let step = &func.name.node;
        let mut bound = StepWeights::default();
        let mut problems: Vec<String> = Vec::new();
        let mut declared = 0;
        // Parameters whose names need `{layer}` when there is no --layer, and those missing
        // from the checkpoint: each said once, not once per parameter.
        let mut need_layer: Vec<String> = Vec::new();
        let mut missing: Vec<(String, String)> = Vec::new();
        for p in &func.params {
            let Some(from) = &p.from else { continue };
            declared += 1;
            let param = &p.name.node;
            let Some(ty) = inputs.iter().find(|(n, _)| n == param).map(|(_, t)| t) else {
                continue;
            };
            for (n, option) in &self.explicit {
                if n == param {
                    problems.push(format!(
                        "parameter `{param}` has two sources: it is read from --weights \
                         (`from \"{}\"`) and {option} gives `{param}` too; drop one",
                        from.template
                    ));
                }
            }
            let Some(name) = from.resolve(self.layer) else {
                need_layer.push(format!("`{param}` (\"{}\")", from.template));
                continue;
            };
            match ckpt.find(&name) {
                Err(e) => problems.push(format!("parameter `{param}`: {e}")),
                Ok(None) => missing.push((param.clone(), name)),
                Ok(Some(w)) => {
                    if let Err(why) = matches(&w.info, ty) {
                        problems.push(format!(
                            "parameter `{param}`: tensor `{name}` in {} is {}, the step \
                             declares {ty} ({why})",
                            w.file.display(),
                            describe(&w.info),
                        ));
                    } else {
                        bound.tensors.push((param.clone(), w));
                    }
                }
            }
        }
        if !need_layer.is_empty() {
            let who = if need_layer.len() == 1 {
                format!("parameter {} names its tensor", need_layer[0])
            } else {
                format!(
                    "{} parameters name their tensors ({})",
                    need_layer.len(),
                    need_layer.join(", ")
                )
            };
            problems.push(format!(
                "{who} with `{{layer}}`, and no --layer N says which layer{}",
                ckpt.layers_held()
            ));
        }
        match &missing[..] {
            [] => {}
            [(param, name)] => problems.push(format!(
                "parameter `{param}`: no tensor `{name}` in {}{}{}",
                ckpt.searched(),
                ckpt.layers_held(),
                ckpt.closest(name)
            )),
            [(param, name), rest @ ..] => problems.push(format!(
                "{} tensors are not in {}{}: `{name}` (parameter `{param}`) and {} more ({}){}",
                missing.len(),
                ckpt.searched(),
                ckpt.layers_held(),
                rest.len(),
                rest.iter()
                    .map(|(_, n)| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                ckpt.closest(name).replacen(
                    "; the closest",
                    &format!("; for `{name}`, the closest"),
                    1
                )
            )),
        }
        if declared == 0 && self.noted.borrow_mut().insert(step.clone()) {
            eprintln!(
                "note: --weights: step `{step}` declares no parameter `from` a checkpoint; \
                 nothing is read for it"
            );
        }
        if !problems.is_empty() {
            let mut msg = format!(
                "--weights {}: step `{step}` cannot take its weights ({}):",
                ckpt.path.display(),
                crate::words::plural(problems.len(), "problem")
            );
            for p in &problems {
                let _ = write!(msg, "\n  - {p}");
            }
            bail!("{msg}");
        }
        Ok(bound)
    }
}

/// Why a checkpoint tensor does not fit parameter type `ty`, if it does not.
fn matches(info: &TensorInfo, ty: &TensorType) -> std::result::Result<(), &'static str> {
    let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
    match (
        tessel_dtype(info.dtype) == Some(ty.dtype),
        shape == ty.shape.0,
    ) {
        (true, true) => Ok(()),
        (false, true) => Err("the dtypes differ; nothing is converted"),
        (true, false) => Err("the shapes differ"),
        (false, false) => Err("the dtypes and the shapes differ"),
    }
}

/// A checkpoint tensor's type as a step would write it: `bf16[1024, 5120]`, or the file's
/// dtype name when tessel has no such dtype (`F64[3]`).
fn describe(info: &TensorInfo) -> String {
    let shape = tessel_ir::Shape(info.shape.iter().map(|&d| d as u64).collect());
    match tessel_dtype(info.dtype) {
        Some(d) => TensorType::new(d, shape.0).to_string(),
        None => format!("{:?}{shape} (no tessel dtype)", info.dtype),
    }
}

fn tessel_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BF16 => DType::Bf16,
        Dtype::F16 => DType::F16,
        Dtype::F32 => DType::F32,
        Dtype::I32 => DType::I32,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// The checkpoint tensors of one step, by parameter name, validated against its types.
#[derive(Clone, Default)]
pub struct StepWeights {
    tensors: Vec<(String, WeightRef)>,
}

impl StepWeights {
    /// The tensor bound to parameter `name`, if it is read from the checkpoint.
    pub fn get(&self, name: &str) -> Option<&WeightRef> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, w)| w)
    }

    /// Every bound parameter and its tensor, in parameter order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &WeightRef)> {
        self.tensors.iter().map(|(n, w)| (n.as_str(), w))
    }
}

/// One tensor of a checkpoint file: where its bytes are in the mapped file.
#[derive(Clone)]
pub struct WeightRef {
    /// The tensor's name in the checkpoint.
    pub name: String,
    /// The file that holds it.
    pub file: PathBuf,
    info: TensorInfo,
    mapped: Arc<Mapped>,
    range: Range<usize>,
}

impl WeightRef {
    /// The tensor's bytes, little-endian as safetensors stores them (read from disk on first
    /// touch).
    pub fn bytes(&self) -> &[u8] {
        &self.mapped.mmap[self.range.clone()]
    }
}

/// A `--weights` checkpoint: where each tensor name is, and the files, opened on demand.
struct Checkpoint {
    /// `--weights` as given.
    path: PathBuf,
    /// The file the names come from: the single file, or the index.
    listing: PathBuf,
    /// The shard files (one for a single-file checkpoint), each mapped on first use.
    shards: Vec<Shard>,
    /// Tensor name → shard.
    names: HashMap<String, usize>,
}

struct Shard {
    path: PathBuf,
    mapped: OnceCell<std::result::Result<Arc<Mapped>, String>>,
}

impl Checkpoint {
    /// Opens `path`: a `.safetensors` file, or a directory with `model.safetensors` or
    /// `model.safetensors.index.json` (the single file wins when both are there, as in
    /// `transformers`).
    fn open(path: &Path) -> Result<Checkpoint> {
        let shown = path.display();
        let meta = std::fs::metadata(path).with_context(|| format!("--weights {shown}"))?;
        if meta.is_dir() {
            let single = path.join(SINGLE_FILE);
            let index = path.join(INDEX_FILE);
            if single.is_file() {
                return Checkpoint::single(path, single);
            }
            if index.is_file() {
                return Checkpoint::sharded(path, index);
            }
            bail!(
                "--weights {shown}: the directory holds neither {SINGLE_FILE} nor {INDEX_FILE} \
                 (a Hugging Face checkpoint holds one of them)"
            );
        }
        Checkpoint::single(path, path.to_path_buf())
    }

    fn single(path: &Path, file: PathBuf) -> Result<Checkpoint> {
        let mapped = Arc::new(Mapped::open(&file).map_err(|e| anyhow!("--weights: {e}"))?);
        let names = mapped.tensors.keys().map(|n| (n.clone(), 0)).collect();
        let cell = OnceCell::new();
        let _ = cell.set(Ok(mapped));
        Ok(Checkpoint {
            path: path.to_path_buf(),
            listing: file.clone(),
            shards: vec![Shard {
                path: file,
                mapped: cell,
            }],
            names,
        })
    }

    /// Reads the index: `{"metadata": {...}, "weight_map": {"NAME": "SHARD", ...}}`.
    fn sharded(path: &Path, index: PathBuf) -> Result<Checkpoint> {
        let shown = index.display();
        let text = std::fs::read_to_string(&index)
            .with_context(|| format!("--weights: cannot read {shown}"))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("--weights: {shown} is not valid JSON"))?;
        let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
            bail!(
                "--weights: {shown} has no \"weight_map\" object (a sharded checkpoint's index \
                 maps each tensor name to its shard file there)"
            );
        };
        let mut shards: Vec<Shard> = Vec::new();
        let mut by_file: HashMap<&str, usize> = HashMap::new();
        let mut names = HashMap::new();
        for (name, file) in map {
            let Some(file) = file.as_str() else {
                bail!("--weights: {shown}: the weight_map entry of `{name}` is not a file name");
            };
            let shard = *by_file.entry(file).or_insert_with(|| {
                shards.push(Shard {
                    path: path.join(file),
                    mapped: OnceCell::new(),
                });
                shards.len() - 1
            });
            names.insert(name.clone(), shard);
        }
        Ok(Checkpoint {
            path: path.to_path_buf(),
            listing: index,
            shards,
            names,
        })
    }

    /// Where names were looked for, for messages.
    fn searched(&self) -> String {
        if self.listing.extension().is_some_and(|e| e == "json") {
            format!(
                "the weight_map of {} ({})",
                self.listing.display(),
                crate::words::plural(self.shards.len(), "shard")
            )
        } else {
            self.listing.display().to_string()
        }
    }

    /// " (it holds layers 0, 1)" — the numbers N of its `model.layers.N.` names, or nothing
    /// when it has none.
    fn layers_held(&self) -> String {
        let mut layers: Vec<u64> = self
            .names
            .keys()
            .filter_map(|n| {
                n.strip_prefix("model.layers.")?
                    .split('.')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        layers.sort_unstable();
        layers.dedup();
        match &layers[..] {
            [] => String::new(),
            [l] => format!(" (it holds layer {l})"),
            ls => format!(
                " (it holds layers {})",
                ls.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// "; the closest names there: `a`, `b`, `c`" — the three names nearest `name` by edit
    /// distance (ties by name), or what the checkpoint holds when it is empty.
    fn closest(&self, name: &str) -> String {
        if self.names.is_empty() {
            return "; it holds no tensors".to_string();
        }
        let mut near: Vec<(usize, &str)> = self
            .names
            .keys()
            .map(|n| (tessel_passes::check::edit_distance(name, n), n.as_str()))
            .collect();
        near.sort();
        let shown: Vec<String> = near.iter().take(3).map(|(_, n)| format!("`{n}`")).collect();
        format!(
            "; the closest of its {}: {}",
            crate::words::plural(self.names.len(), "name"),
            shown.join(", ")
        )
    }

    /// Tensor `name`: `None` when the checkpoint does not list it; an error when its shard
    /// cannot be opened or does not hold it.
    fn find(&self, name: &str) -> Result<Option<WeightRef>> {
        let Some(&s) = self.names.get(name) else {
            return Ok(None);
        };
        let shard = &self.shards[s];
        let mapped = shard
            .mapped
            .get_or_init(|| {
                Mapped::open(&shard.path)
                    .map(Arc::new)
                    .map_err(|e| format!("{e} (a shard {} names)", self.listing.display()))
            })
            .as_ref()
            .map_err(|e| anyhow!("{e}"))?;
        let Some(info) = mapped.tensors.get(name) else {
            bail!(
                "{} lists tensor `{name}` in {}, which does not hold it",
                self.listing.display(),
                shard.path.display()
            );
        };
        let (start, end) = info.data_offsets;
        Ok(Some(WeightRef {
            name: name.to_string(),
            file: shard.path.clone(),
            info: info.clone(),
            mapped: Arc::clone(mapped),
            range: mapped.data_start + start..mapped.data_start + end,
        }))
    }
}

/// The names of the tensors in safetensors file `path` (only its header is read), or
/// `None` if it cannot be opened or is not a safetensors file.
pub fn tensor_names(path: &Path) -> Option<Vec<String>> {
    Mapped::open(path)
        .ok()
        .map(|m| m.tensors.into_keys().collect())
}

/// A memory-mapped safetensors file with its header parsed and checked: every tensor's
/// bytes lie inside the file.
struct Mapped {
    mmap: Mmap,
    /// Offset of the data section (after the 8-byte length and the JSON header).
    data_start: usize,
    tensors: HashMap<String, TensorInfo>,
}

impl Mapped {
    /// Maps `path` and parses its header; the error names the file and what is wrong.
    fn open(path: &Path) -> std::result::Result<Mapped, String> {
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read {shown}: {e}"))?
            .len();
        if len < 8 {
            return Err(format!(
                "{shown} is not a safetensors file: {len} bytes, too short for its header length"
            ));
        }
        // SAFETY: the map is read-only and private to this process. A file changed by
        // another process while mapped could show torn data (safetensors files are written
        // once and then read), never memory unsafety beyond what the OS makes of it.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| format!("cannot map {shown}: {e}"))?;
        let (n, metadata): (usize, Metadata) =
            SafeTensors::read_metadata(&mmap).map_err(|e| corrupt(path, &mmap, e))?;
        let tensors = metadata
            .tensors()
            .into_iter()
            .map(|(name, info)| (name, info.clone()))
            .collect();
        Ok(Mapped {
            data_start: 8 + n,
            mmap,
            tensors,
        })
    }
}

/// The message for safetensors file `path`, whose bytes are `bytes`, that safetensors
/// rejects with `e`: the file, and where the header's entries are at fault, the tensor and
/// what is wrong with it (safetensors' own message names neither for a size that does not
/// match the shape: "invalid shape, data type, or offset for tensor").
pub fn corrupt(path: &Path, bytes: &[u8], e: SafeTensorError) -> String {
    let shown = path.display();
    let len = bytes.len();
    if let Some(why) = header_fault(bytes) {
        return format!("{shown} is truncated or corrupt: {why}");
    }
    let why = match e {
        SafeTensorError::MetadataIncompleteBuffer => format!(
            "the header's tensors do not end where the file does ({len} bytes): truncated, or \
             not one safetensors file"
        ),
        SafeTensorError::InvalidHeaderLength => format!(
            "the header length its first 8 bytes give runs past the end of the file ({len} bytes)"
        ),
        other => other.to_string(),
    };
    format!("{shown} is truncated or corrupt: {why}")
}

/// What is wrong with the first faulty tensor entry of a safetensors header, checked as
/// safetensors checks it (`Metadata::validate`: entries in offset order, each one's bytes
/// starting where the previous one's end, shape × dtype size equal to its byte count, the
/// last ending where the file does), or `None` when the header cannot be read far enough to
/// tell, or no entry is at fault.
fn header_fault(bytes: &[u8]) -> Option<String> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let end = usize::try_from(n).ok()?.checked_add(8)?;
    let header: serde_json::Value = serde_json::from_slice(bytes.get(8..end)?).ok()?;
    let data = (bytes.len() - end) as u64;
    // (name, dtype, shape, offsets), in offset order.
    type Entry<'h> = (&'h str, &'h str, Vec<u64>, (u64, u64));
    let mut entries: Vec<Entry> = Vec::new();
    for (name, info) in header.as_object()? {
        if name == "__metadata__" {
            continue;
        }
        let dtype = info.get("dtype").and_then(|d| d.as_str());
        let shape: Option<Vec<u64>> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let offsets: Option<Vec<u64>> = info
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let (Some(dtype), Some(shape), Some(offsets)) = (dtype, shape, offsets) else {
            return Some(format!(
                "tensor `{name}`: its header entry needs a \"dtype\" string, a \"shape\" of \
                 sizes and two \"data_offsets\", and has {info}"
            ));
        };
        let [s, e] = offsets[..] else {
            return Some(format!(
                "tensor `{name}`: \"data_offsets\" must be [start, end], the header has {offsets:?}"
            ));
        };
        entries.push((name, dtype, shape, (s, e)));
    }
    entries.sort_by_key(|(name, _, _, (s, e))| (*s, *e, *name));
    let mut at = 0u64;
    let mut previous: Option<&str> = None;
    for (name, dtype, shape, (s, e)) in &entries {
        let Some(bits) = dtype_bits(dtype) else {
            return Some(format!(
                "tensor `{name}`: unknown dtype \"{dtype}\" (safetensors dtypes are spelled \
                 F32, BF16, F16, I32, BOOL, ...)"
            ));
        };
        if s != &at {
            let after = match previous {
                Some(p) => format!("where the previous tensor `{p}` ends, byte {at}"),
                None => "at byte 0 of the data".to_string(),
            };
            return Some(format!(
                "tensor `{name}`: its data_offsets [{s}, {e}] start at byte {s}, not {after} \
                 (tensors are stored back to back)"
            ));
        }
        if e < s {
            return Some(format!(
                "tensor `{name}`: its data_offsets [{s}, {e}] end before they start"
            ));
        }
        let size = shape
            .iter()
            .try_fold(bits, |acc, &d| acc.checked_mul(d))
            .map(|b| b.div_ceil(8));
        let shown = tessel_ir::Shape(shape.clone());
        match size {
            None => {
                return Some(format!(
                    "tensor `{name}`: shape {shown} of {dtype} overflows 64 bits of bytes"
                ))
            }
            Some(size) if size != e - s => {
                return Some(format!(
                    "tensor `{name}`: {dtype}{shown} is {size} bytes, but its data_offsets \
                     [{s}, {e}] hold {}",
                    e - s
                ))
            }
            Some(_) => {}
        }
        if *e > data {
            return Some(format!(
                "tensor `{name}`: its data_offsets [{s}, {e}] run past the end of the data \
                 ({data} bytes after the header): the file is truncated"
            ));
        }
        at = *e;
        previous = Some(name);
    }
    None
}

/// Bits per element of a safetensors dtype name, as the safetensors crate reads it.
fn dtype_bits(name: &str) -> Option<u64> {
    serde_json::from_value::<Dtype>(serde_json::Value::from(name))
        .ok()
        .map(|d| d.bitsize() as u64)
}
