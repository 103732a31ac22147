//! What the PTX module header says: ISA version, target architecture, address size.

/// Options of the PTX writer (design §7). The header's `.version`, `.target` and
/// `.address_size` come from here and nowhere else.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PtxOptions {
    /// PTX ISA version `(major, minor)`, printed `.version 8.0`. 8.0 (CUDA 12.0) is the
    /// oldest that has everything the writer prints for sm_90 (`min.NaN`, `cvt.rn.bf16x2.f32`
    /// need 7.0; `.target sm_90` needs 7.8).
    pub version: (u32, u32),
    /// Target architecture, printed `.target sm_90`; `sm_90a` where wgmma is used.
    pub target: String,
    /// Address size in bits. Only 64 is supported: global pointers are `.u64` registers.
    pub address_size: u32,
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
