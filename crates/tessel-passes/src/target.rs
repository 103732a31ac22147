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
    /// the SIMT tile's k-slice order — so the decode GEMV (whose lane-strided order differs)
    /// is not used; no split-K.
    Invariant,
    /// Whatever is fastest; checked by tolerance. Today the same choices as `Exact`.
    Fast,
}

impl Profile {
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
