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
