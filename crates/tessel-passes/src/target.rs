//! The properties of the GPU a step is compiled for, read by `schedule`.

/// Device properties that tile selection depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Most threads in one CTA.
    pub max_threads_per_cta: u32,
    /// Most shared memory one CTA may use, bytes (with the opt-in attribute).
    pub max_shared_per_cta: u32,
}

impl Target {
    /// The H200 SXM (compute capability 9.0, 132 SMs, 227 KiB shared memory per CTA;
    /// NVIDIA Hopper tuning guide and the H200 datasheet). The default when no GPU is
    /// present, so that a build on a machine without one gives the same kernels.
    pub fn h200() -> Target {
        Target {
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_threads_per_cta: 1024,
            max_shared_per_cta: 227 * 1024,
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::h200()
    }
}

/// The numerics profile a step is compiled for (design §5). It only changes which
/// schedules the `schedule` pass may choose.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Every kernel's output is bit-identical to the kernel-IR executor on the CPU: SIMT
    /// FMA arithmetic in a fixed order, no tensor cores. Any schedule whose order the
    /// executor follows is allowed (GEMV for decode shapes, the SIMT tile otherwise).
    #[default]
    Exact,
    /// Batch-invariant: a row's result never depends on how many rows are in the batch or
    /// where it sits. Every matmul uses one reduction order for a given K whatever M is —
    /// the tensor-core tile's k-step order for bf16/f16 operands, the SIMT tile's k-slice
    /// order for f32 ones (which keep f32 accuracy) — so neither decode GEMV (whose orders
    /// differ) is used, and there is no split-K.
    Invariant,
    /// Whatever is fastest; checked by tolerance against the f64 oracle: tensor cores for
    /// bf16/f16 and for f32 (rounded to TF32, so f32 matmuls meet a 2^-10 rel-RMS bound
    /// instead of 1e-6), the tensor-core GEMV for decode, split-K.
    Fast,
}

impl Profile {
    /// Every profile, in the order of the docs.
    pub const ALL: [Profile; 3] = [Profile::Exact, Profile::Invariant, Profile::Fast];

    /// Parses `exact`, `invariant` or `fast`.
    pub fn from_name(s: &str) -> Option<Profile> {
        Some(match s {
            "exact" => Profile::Exact,
            "invariant" => Profile::Invariant,
            "fast" => Profile::Fast,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::Exact => "exact",
            Profile::Invariant => "invariant",
            Profile::Fast => "fast",
        }
    }
}
