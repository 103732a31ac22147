//! What the PTX module header says: ISA version, target architecture, address size.

/// Options of the PTX writer (design §7). The header's `.version`, `.target` and
/// `.address_size` come from here and nowhere else. The default (`.version 8.0`, `.target
/// sm_90`) is for kernels built by hand; a compiled step's options are made from the header
/// it carries ([`PtxOptions::with_header`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PtxOptions {
    /// PTX ISA version `(major, minor)`, printed `.version 8.0`. 8.0 (CUDA 12.0) is the
    /// oldest that has everything the writer prints for sm_90 (`min.NaN`, `cvt.rn.bf16x2.f32`
    /// need 7.0; `.target sm_90` needs 7.8).
    pub version: (u32, u32),
    /// Target architecture, printed `.target sm_90`. A compiled step's comes with it
    /// (`tessel_passes::PtxHeader`, derived from its Target: `sm_90a` on Hopper).
    pub target: String,
    /// Address size in bits. Only 64 is supported: global pointers are `.u64` registers.
    pub address_size: u32,
}

impl PtxOptions {
    /// The options of a module headed `.version major.minor` / `.target target` /
    /// `.address_size 64`: a compiled step's header, as its Target gives it.
    pub fn with_header(version: (u32, u32), target: &str) -> PtxOptions {
        PtxOptions {
            version,
            target: target.to_owned(),
            ..PtxOptions::default()
        }
    }
}

impl Default for PtxOptions {
    fn default() -> Self {
        PtxOptions {
            version: (8, 0),
            target: "sm_90".to_owned(),
            address_size: 64,
        }
    }
}
