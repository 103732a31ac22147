//! The machine a step is compiled for: the one source of machine facts. `schedule` reads
//! the SM count, occupancy limits, shared memory and instruction-set [`Features`] from it;
//! the CLI fills it from the GPU it finds (or a named preset without one); the PTX header
//! ([`PtxHeader`], from [`Target::ptx_header`]) is derived from it once per compiled step;
//! `bench` reads its datasheet peaks.

/// The facts about a GPU that compilation and measurement depend on.
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
    /// Shared memory of one SM, bytes.
    pub max_shared_per_sm: u32,
    /// 32-bit registers of one SM.
    pub registers_per_sm: u32,
    /// Most registers one thread may use (ISA limit).
    pub max_registers_per_thread: u32,
    /// Most warps resident on one SM.
    pub max_warps_per_sm: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u64,
    /// The instructions beyond sm_80's that schedules may choose (wgmma, TMA, ...), and
    /// with them the PTX target ([`Target::ptx_target`]).
    pub features: Features,
    /// Dense peak rates from the part's datasheet, when it is a known part: the compute
    /// floor `bench` reports (never a measured rate).
    pub peaks: Option<Peaks>,
}

/// Instruction-set facts beyond what every supported machine has (sm_80's `mma.sync`,
/// `ldmatrix`, `cp.async`): what a schedule may choose on the target. A schedule that needs
/// one is chosen only where it is `true` (`schedule`'s candidate rows say which they need),
/// and the PTX header follows ([`Target::ptx_target`]: `sm_90a` where [`Features::wgmma`]
/// or [`Features::setmaxnreg`] is on). Sources: the PTX ISA (8.x), each instruction's
/// "Target ISA notes", and its "Target Directives: `.target`" on the `a` targets ("include
/// architecture-accelerated features that are supported on the specified architecture
/// only": their PTX does not run on later GPUs); the CUDA C++ Programming Guide, "Thread
/// Block Clusters" and "Compute Capabilities" (9.0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Features {
    /// Warpgroup MMA: `wgmma.mma_async` with `wgmma.fence`, `commit_group` and
    /// `wait_group`, operands in shared memory through matrix descriptors (PTX ISA §9.7.15,
    /// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"; the 128-byte
    /// swizzle of their shared-memory layout is `lower/ring`'s `Swizzle::Tma128`).
    /// Architecture-specific: needs `.target sm_90a`.
    pub wgmma: bool,
    /// The Tensor Memory Accelerator: `cp.async.bulk.tensor` copies between global and
    /// shared memory through a tensor map (`CUtensorMap`, encoded on the host by the driver's
    /// `cuTensorMapEncodeTiled`, with `CU_TENSOR_MAP_SWIZZLE_32B/64B/128B`), completing on
    /// an `mbarrier` armed with `expect_tx` (PTX ISA "Data Movement and Conversion
    /// Instructions: cp.async.bulk.tensor", "Parallel Synchronization and Communication
    /// Instructions: mbarrier"). `sm_90` or later.
    pub tma: bool,
    /// `setmaxnreg.{inc,dec}`: the warps of a warpgroup raise or lower their register limit
    /// (a producer warpgroup gives registers to its consumers; PTX ISA "Miscellaneous
    /// Instructions: setmaxnreg"). Architecture-specific: needs `.target sm_90a`.
    pub setmaxnreg: bool,
    /// Thread-block clusters: CTAs co-scheduled on one GPC that share distributed shared
    /// memory and barriers, launched with a cluster shape (`.reqnctapercluster`,
    /// `barrier.cluster`) and fed by TMA multicast (CUDA C++ Programming Guide, "Thread
    /// Block Clusters"; PTX ISA "Cluster of Cooperative Thread Arrays"). `sm_90` or later.
    pub clusters: bool,
    /// Programmatic dependent launch: a kernel launched with programmatic stream
    /// serialization begins while the kernel ahead finishes, waiting with
    /// `griddepcontrol.wait` before it touches memory, and lets its own dependents launch
    /// with `griddepcontrol.launch_dependents`; with it the L2 prefetch
    /// `cp.async.bulk.prefetch.L2` (PTX ISA "griddepcontrol", "cp.async.bulk.prefetch"; CUDA
    /// C++ Programming Guide, "Programmatic Dependent Launch and Synchronization"). `sm_90`
    /// or later.
    pub griddepcontrol: bool,
}

impl Features {
    /// None of the features: an sm_80-class machine (mma.sync, ldmatrix, cp.async only).
    pub const NONE: Features = Features {
        wgmma: false,
        tma: false,
        setmaxnreg: false,
        clusters: false,
        griddepcontrol: false,
    };

    /// Every feature: compute capability 9.0 (H100, H200) compiled for `sm_90a`.
    pub const SM_90A: Features = Features {
        wgmma: true,
        tma: true,
        setmaxnreg: true,
        clusters: true,
        griddepcontrol: true,
    };

    /// The features of a machine of compute capability `cc`: all of them at 9.0 (through
    /// `sm_90a`); on later machines TMA, clusters and griddepcontrol only, which their family-portable
    /// target keeps (wgmma is 9.0's alone; setmaxnreg would need that machine's own `a`
    /// target, which tessel does not emit); none before 9.0.
    pub fn of_compute_capability(cc: (u32, u32)) -> Features {
        match cc {
            (9, 0) => Features::SM_90A,
            cc if cc >= (9, 0) => Features {
                tma: true,
                clusters: true,
                griddepcontrol: true,
                ..Features::NONE
            },
            _ => Features::NONE,
        }
    }

    /// Whether every feature `needed` names is here.
    pub fn covers(self, needed: Features) -> bool {
        (!needed.wgmma || self.wgmma)
            && (!needed.tma || self.tma)
            && (!needed.setmaxnreg || self.setmaxnreg)
            && (!needed.clusters || self.clusters)
            && (!needed.griddepcontrol || self.griddepcontrol)
    }

    /// Whether any feature is architecture-specific (wgmma, setmaxnreg): PTX that uses
    /// them must say `.target sm_90a`.
    pub fn arch_specific(self) -> bool {
        self.wgmma || self.setmaxnreg
    }

    /// The features that are on, by name (`wgmma`, `TMA`, `setmaxnreg`, `clusters`,
    /// `griddepcontrol`), for
    /// `explain` and reasons.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.wgmma, "wgmma"),
            (self.tma, "TMA"),
            (self.setmaxnreg, "setmaxnreg"),
            (self.clusters, "clusters"),
            (self.griddepcontrol, "griddepcontrol"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// The header of the PTX module of a compiled step: the ISA version and the target
/// architecture, derived from the [`Target`] by [`Target::ptx_header`] and carried by the
/// compiled step, so that `build`, `explain` (ptxas) and the runtime's module load print
/// and assemble the same (the CLI makes the writer's options from it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PtxHeader {
    /// PTX ISA version `(major, minor)`, printed `.version 8.0`.
    pub version: (u32, u32),
    /// Target architecture, printed `.target sm_90a`; also ptxas's `-arch`.
    pub target: String,
}

/// Datasheet dense peak rates, FLOP/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peaks {
    /// BF16/FP16 tensor cores, dense.
    pub bf16_tensor: f64,
    /// TF32 tensor cores, dense.
    pub tf32_tensor: f64,
    /// FP32 FMA (SIMT).
    pub fp32: f64,
    /// Where the figures come from.
    pub source: &'static str,
}

/// Hopper's per-SM limits (NVIDIA Hopper Tuning Guide, "Occupancy", and the CUDA C
/// Programming Guide, "Technical Specifications per Compute Capability", 9.0): 64 warps,
/// 65536 registers, 255 per thread, 228 KiB shared memory of which 227 KiB to one CTA.
fn hopper(name: &str, sm_count: u32, peaks: Peaks) -> Target {
    Target {
        name: name.into(),
        compute_capability: (9, 0),
        sm_count,
        max_threads_per_cta: 1024,
        max_shared_per_cta: 227 * 1024,
        max_shared_per_sm: 228 * 1024,
        registers_per_sm: 65536,
        max_registers_per_thread: 255,
        max_warps_per_sm: 64,
        l2_bytes: 50 * 1024 * 1024,
        features: Features::SM_90A,
        peaks: Some(peaks),
    }
}

/// H100 and H200 SXM share the compute of one chip: NVIDIA H100 Tensor Core GPU datasheet
/// (2023) and H200 datasheet (2024), dense rates: BF16/FP16 989 TFLOP/s, TF32 494 TFLOP/s,
/// FP32 67 TFLOP/s.
const HOPPER_SXM_PEAKS: Peaks = Peaks {
    bf16_tensor: 989e12,
    tf32_tensor: 494e12,
    fp32: 67e12,
    source: "H100/H200 SXM datasheets, dense",
};

impl Target {
    /// The named presets, for `--target` on a machine without a GPU.
    pub const PRESETS: [&'static str; 2] = ["h200", "h100"];

    /// The H200 SXM: 132 SMs, 50 MB L2, the Hopper limits (see [`hopper`]). The default when
    /// no GPU is present, so a build on a machine without one gives the same kernels.
    pub fn h200() -> Target {
        hopper("NVIDIA H200", 132, HOPPER_SXM_PEAKS)
    }

    /// The H100 SXM5: the same chip as the H200 with less and slower memory (80 GB at
    /// 3.35 TB/s): the same compilation facts.
    pub fn h100() -> Target {
        hopper("NVIDIA H100 80GB HBM3", 132, HOPPER_SXM_PEAKS)
    }

    /// A preset by its name in [`Target::PRESETS`].
    pub fn preset(name: &str) -> Option<Target> {
        match name {
            "h200" => Some(Target::h200()),
            "h100" => Some(Target::h100()),
            _ => None,
        }
    }

    /// The PTX `.target` for kernels compiled for this machine: `sm_XY` from the compute
    /// capability (PTX ISA §11.1.2 "Target Directives"), with the `a` suffix where the
    /// target has an architecture-specific feature ([`Features::arch_specific`]: wgmma,
    /// setmaxnreg) — `sm_90a` for every kernel on the Hopper presets, whether or not it
    /// uses one, so that the header is a function of the target alone.
    pub fn ptx_target(&self) -> String {
        let (major, minor) = self.compute_capability;
        let a = if self.features.arch_specific() {
            "a"
        } else {
            ""
        };
        format!("sm_{major}{minor}{a}")
    }

    /// The PTX ISA version of the header: 8.0 (CUDA 12.0), the oldest that has everything
    /// the writer prints (`min.NaN` and `cvt.rn.bf16x2.f32` need 7.0, `.target sm_90` 7.8)
    /// and the first with `sm_90a`, wgmma, setmaxnreg and `cp.async.bulk.tensor` (PTX ISA
    /// §11.1.2 and the release notes of 8.0).
    pub fn ptx_version(&self) -> (u32, u32) {
        (8, 0)
    }

    /// The PTX module header of kernels compiled for this machine: the one place it is
    /// derived ([`PtxHeader`]).
    pub fn ptx_header(&self) -> PtxHeader {
        PtxHeader {
            version: self.ptx_version(),
            target: self.ptx_target(),
        }
    }

    /// Warps the whole GPU holds resident at once.
    pub fn resident_warps(&self) -> u64 {
        self.max_warps_per_sm as u64 * self.sm_count as u64
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
