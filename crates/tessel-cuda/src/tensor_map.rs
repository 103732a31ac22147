//! TMA tensor maps: the 128-byte `CUtensorMap` a kernel's `.param .align 64 .b8 p[128]`
//! receives by value, encoded on the host by the driver's `cuTensorMapEncodeTiled` (CUDA
//! Driver API, "Tensor Map Object Management") through cudarc's raw bindings.
//!
//! [`TiledMap`] describes a tiled map of a [`Buffer`]'s elements: up to 5 dimensions,
//! dimension 0 contiguous, byte strides for the others, the box one
//! `cp.async.bulk.tensor` copies, and the shared-memory swizzle. [`TiledMap::validate`]
//! checks the driver's rules on the host first (no GPU needed), so a bad map is a typed
//! [`TensorMapError`] naming the rule instead of the driver's bare
//! `CUDA_ERROR_INVALID_VALUE`. Elements strides are 1, no interleave, out-of-bounds
//! elements read as zero (`CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`), L2 promotion of 128 bytes.

use std::ffi::c_void;

use cudarc::driver::{sys, DeviceRepr};

use crate::{Buffer, Error};

/// The element type of a tensor map (`CUtensorMapDataType`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TensorMapDtype {
    U8,
    U16,
    I32,
    F16,
    Bf16,
    F32,
}

impl TensorMapDtype {
    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            TensorMapDtype::U8 => 1,
            TensorMapDtype::U16 | TensorMapDtype::F16 | TensorMapDtype::Bf16 => 2,
            TensorMapDtype::I32 | TensorMapDtype::F32 => 4,
        }
    }

    fn raw(self) -> sys::CUtensorMapDataType {
        use sys::CUtensorMapDataType as T;
        match self {
            TensorMapDtype::U8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            TensorMapDtype::U16 => T::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            TensorMapDtype::I32 => T::CU_TENSOR_MAP_DATA_TYPE_INT32,
            TensorMapDtype::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            TensorMapDtype::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            TensorMapDtype::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        }
    }
}

/// The shared-memory swizzle of a box (`CU_TENSOR_MAP_SWIZZLE_NONE/32B/64B/128B`): bits
/// `[4, 4 + b)` of the shared address XORed with bits `[7, 7 + b)`, `b` = 1, 2, 3.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TensorMapSwizzle {
    None,
    B32,
    B64,
    B128,
}

impl TensorMapSwizzle {
    /// The swizzle's span in bytes (0 for none).
    pub fn bytes(self) -> u64 {
        match self {
            TensorMapSwizzle::None => 0,
            TensorMapSwizzle::B32 => 32,
            TensorMapSwizzle::B64 => 64,
            TensorMapSwizzle::B128 => 128,
        }
    }

    fn raw(self) -> sys::CUtensorMapSwizzle {
        use sys::CUtensorMapSwizzle as S;
        match self {
            TensorMapSwizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
            TensorMapSwizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
            TensorMapSwizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
            TensorMapSwizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        }
    }
}

/// A tiled tensor map over a buffer's bytes from `offset` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TiledMap {
    pub dtype: TensorMapDtype,
    /// Elements per dimension, innermost first; 1 to 5 dimensions, each 1..=2^32.
    pub dims: Vec<u64>,
    /// Bytes between consecutive indices of dimensions 1.. (one fewer than `dims`), each a
    /// multiple of 16 below 2^40.
    pub strides: Vec<u64>,
    /// The box, elements per dimension (as many as `dims`), each 1..=256; the inner one's
    /// bytes a multiple of 16 and at most the swizzle's span when swizzled.
    pub box_dims: Vec<u32>,
    pub swizzle: TensorMapSwizzle,
    /// Bytes from the buffer's start to the map's first element, a multiple of 16.
    pub offset: u64,
}

/// A rule of `cuTensorMapEncodeTiled` that a [`TiledMap`] breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorMapError {
    #[error("a tensor map has 1 to 5 dimensions, not {0}")]
    Rank(usize),
    #[error("{dims} dimensions take {} strides and {dims} box dimensions, not {strides} and {boxes}", dims - 1)]
    Shape {
        dims: usize,
        strides: usize,
        boxes: usize,
    },
    #[error("dimension {dim} has {size} elements (1 to 2^32)")]
    Dim { dim: usize, size: u64 },
    #[error(
        "dimension {dim}'s stride is {stride} bytes: a nonzero multiple of 16 below 2^40 is needed"
    )]
    Stride { dim: usize, stride: u64 },
    #[error("box dimension {dim} is {size} elements (1 to 256)")]
    BoxDim { dim: usize, size: u32 },
    #[error("the box's inner dimension is {bytes} bytes, not a multiple of 16")]
    InnerBox { bytes: u64 },
    #[error("the box's inner dimension is {bytes} bytes, more than the swizzle's {span}")]
    SwizzleSpan { bytes: u64, span: u64 },
    #[error("the map's global address {address:#x} is not 16-byte aligned")]
    Misaligned { address: u64 },
    #[error("the map reaches byte {end} of a {size}-byte buffer")]
    OutOfBuffer { end: u64, size: u64 },
}

impl TiledMap {
    /// Checks the map against `cuTensorMapEncodeTiled`'s rules and a buffer of
    /// `buffer_bytes` bytes at device address `address` (every element the map can address
    /// lies inside it).
    ///
    /// # Errors
    /// The first rule broken, as a [`TensorMapError`].
    pub fn validate(&self, address: u64, buffer_bytes: u64) -> Result<(), TensorMapError> {
        let rank = self.dims.len();
        if !(1..=5).contains(&rank) {
            return Err(TensorMapError::Rank(rank));
        }
        if self.strides.len() + 1 != rank || self.box_dims.len() != rank {
            return Err(TensorMapError::Shape {
                dims: rank,
                strides: self.strides.len(),
                boxes: self.box_dims.len(),
            });
        }
        for (dim, &size) in self.dims.iter().enumerate() {
            if size == 0 || size > 1 << 32 {
                return Err(TensorMapError::Dim { dim, size });
            }
        }
        for (i, &stride) in self.strides.iter().enumerate() {
            if stride == 0 || stride % 16 != 0 || stride >= 1 << 40 {
                return Err(TensorMapError::Stride { dim: i + 1, stride });
            }
        }
        for (dim, &size) in self.box_dims.iter().enumerate() {
            if !(1..=256).contains(&size) {
                return Err(TensorMapError::BoxDim { dim, size });
            }
        }
        let esz = self.dtype.size_bytes();
        let inner = u64::from(self.box_dims[0]) * esz;
        if inner % 16 != 0 {
            return Err(TensorMapError::InnerBox { bytes: inner });
        }
        let span = self.swizzle.bytes();
        if span > 0 && inner > span {
            return Err(TensorMapError::SwizzleSpan { bytes: inner, span });
        }
        let start = address.wrapping_add(self.offset);
        if start % 16 != 0 {
            return Err(TensorMapError::Misaligned { address: start });
        }
        let mut end = self.offset + (self.dims[0] - 1) * esz + esz;
        for (d, s) in self.dims[1..].iter().zip(&self.strides) {
            end += (d - 1) * s;
        }
        if end > buffer_bytes {
            return Err(TensorMapError::OutOfBuffer {
                end,
                size: buffer_bytes,
            });
        }
        Ok(())
    }
}

/// An encoded tensor map: the 128 opaque bytes of a `CUtensorMap`, 64-byte aligned, passed
/// to a kernel by value ([`crate::Arg::TensorMap`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMap {
    words: [u64; 16],
}

// SAFETY: plain bytes with the size and alignment of the kernel's `.param .align 64 .b8
// p[128]`; the driver copies them as the parameter's value.
unsafe impl DeviceRepr for TensorMap {}

impl TensorMap {
    /// Encodes `map` over `buffer` with `cuTensorMapEncodeTiled`, after
    /// [`TiledMap::validate`].
    ///
    /// # Errors
    /// [`Error::TensorMap`] for a map the rules reject; [`Error::Driver`] if the driver
    /// still refuses it.
    pub fn encode_tiled(buffer: &Buffer, map: &TiledMap) -> Result<TensorMap, Error> {
        Self::encode_at(buffer.gpu(), buffer.device_ptr(), buffer.len() as u64, map)
    }

    /// Encodes `map` over `buffer`, memory tessel does not own, in `gpu`'s context, after
    /// [`TiledMap::validate`] (which checks the address's alignment and that the map stays
    /// inside the buffer).
    ///
    /// # Errors
    /// As [`TensorMap::encode_tiled`].
    pub fn encode_tiled_external(
        gpu: &crate::Gpu,
        buffer: &crate::ExternalBuffer,
        map: &TiledMap,
    ) -> Result<TensorMap, Error> {
        Self::encode_at(gpu, buffer.address(), buffer.len(), map)
    }

    fn encode_at(
        gpu: &crate::Gpu,
        address: u64,
        len: u64,
        map: &TiledMap,
    ) -> Result<TensorMap, Error> {
        map.validate(address, len)?;
        let rank = map.dims.len();
        let esz = map.dtype.size_bytes();
        let strides: Vec<u64> = map.strides.clone();
        let elem_strides = [1u32; 5];
        let mut raw = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
        gpu.context()
            .bind_to_thread()
            .map_err(Error::driver("binding the context to encode a tensor map"))?;
        // SAFETY: the arrays hold `rank` (dims, box, element strides) and `rank - 1`
        // (strides) entries as the driver reads them, and outlive the call; `raw` is
        // written by the driver before it is read.
        let status = unsafe {
            sys::cuTensorMapEncodeTiled(
                raw.as_mut_ptr(),
                map.dtype.raw(),
                rank as u32,
                (address + map.offset) as *mut c_void,
                map.dims.as_ptr(),
                strides.as_ptr(),
                map.box_dims.as_ptr(),
                elem_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                map.swizzle.raw(),
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Driver {
                op: format!(
                    "cuTensorMapEncodeTiled of {rank} dims {:?}, box {:?}, {esz}-byte elements",
                    map.dims, map.box_dims
                ),
                source: cudarc::driver::DriverError(status),
            });
        }
        // SAFETY: the call succeeded and wrote the map.
        let raw = unsafe { raw.assume_init() };
        let mut words = [0u64; 16];
        words.copy_from_slice(&raw.opaque[..16]);
        Ok(TensorMap { words })
    }

    /// The 128 bytes, as the kernel parameter receives them.
    pub fn bytes(&self) -> [u8; 128] {
        let mut out = [0u8; 128];
        for (o, w) in out.chunks_exact_mut(8).zip(&self.words) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> TiledMap {
        // A bf16 [128, 64] row-major matrix in 64 × 64 boxes, 128-byte swizzle.
        TiledMap {
            dtype: TensorMapDtype::Bf16,
            dims: vec![64, 128],
            strides: vec![128],
            box_dims: vec![64, 64],
            swizzle: TensorMapSwizzle::B128,
            offset: 0,
        }
    }

    #[test]
    fn a_valid_map_passes() {
        map().validate(1 << 40, 128 * 128).unwrap();
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
    }

    #[test]
    fn each_rule_has_its_error() {
        let at = |f: fn(&mut TiledMap), addr: u64, size: u64| {
            let mut m = map();
            f(&mut m);
            m.validate(addr, size).unwrap_err()
        };
        let big = 1 << 20;
        assert_eq!(at(|m| m.dims = vec![1; 6], 0, big), TensorMapError::Rank(6));
        assert!(matches!(
            at(|m| m.strides.clear(), 0, big),
            TensorMapError::Shape { .. }
        ));
        assert_eq!(
            at(|m| m.dims[1] = 0, 0, big),
            TensorMapError::Dim { dim: 1, size: 0 }
        );
        assert_eq!(
            at(|m| m.strides[0] = 120, 0, big),
            TensorMapError::Stride {
                dim: 1,
                stride: 120
            }
        );
        assert_eq!(
            at(|m| m.box_dims[1] = 257, 0, big),
            TensorMapError::BoxDim { dim: 1, size: 257 }
        );
        assert_eq!(
            at(|m| m.box_dims[0] = 4, 0, big),
            TensorMapError::InnerBox { bytes: 8 }
        );
        assert_eq!(
            at(|m| m.swizzle = TensorMapSwizzle::B64, 0, big),
            TensorMapError::SwizzleSpan {
                bytes: 128,
                span: 64
            }
        );
        assert_eq!(
            at(|_| {}, 8, big),
            TensorMapError::Misaligned { address: 8 }
        );
        assert_eq!(
            at(|_| {}, 0, 128 * 128 - 2),
            TensorMapError::OutOfBuffer {
                end: 128 * 128,
                size: 128 * 128 - 2
            }
        );
        assert!(at(|m| m.offset = 16, 0, 128 * 128)
            .to_string()
            .contains("reaches byte 16400"));
    }
}
