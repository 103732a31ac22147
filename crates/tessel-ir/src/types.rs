//! Element types and shapes shared by both IRs.

use std::fmt;

/// Element type of a tensor (design §5). `bf16` and `f16` are storage types: arithmetic on
/// them is done in f32 and rounded once, to nearest even, to the result type.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum DType {
    Bf16,
    F16,
    F32,
    I32,
    Bool,
}

impl DType {
    /// Bytes one element occupies in device memory (`bool` is stored as one byte, 0 or 1).
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::Bf16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::Bool => 1,
        }
    }

    /// True for `bf16`, `f16` and `f32`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::Bf16 | DType::F16 | DType::F32)
    }

    /// The spelling used in source and in the textual IR.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::Bool => "bool",
        }
    }

    /// Parses the spelling of [`DType::name`].
    pub fn from_name(s: &str) -> Option<DType> {
        Some(match s {
            "bf16" => DType::Bf16,
            "f16" => DType::F16,
            "f32" => DType::F32,
            "i32" => DType::I32,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A concrete, row-major shape. Symbolic dims (`T`) are bound before the graph IR is built,
/// so every dim here is a number. The empty shape is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Shape(pub Vec<u64>);

impl Shape {
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        self.0.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<u64> {
        let mut s = vec![1u64; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * self.0[i + 1];
        }
        s
    }

    /// The last dim, or 1 for a scalar.
    pub fn last(&self) -> u64 {
        self.0.last().copied().unwrap_or(1)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The type of a graph value: dtype and shape, printed `bf16[4096, 5120]`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Vec<u64>) -> Self {
        TensorType {
            dtype,
            shape: Shape(shape),
        }
    }

    /// Bytes the tensor occupies, densely packed.
    pub fn size_bytes(&self) -> u64 {
        self.shape.numel() * self.dtype.size_bytes()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

impl Default for TensorType {
    /// A placeholder (`f32[]`) for side tables; every value's real type is set when it is made.
    fn default() -> Self {
        TensorType::new(DType::F32, vec![])
    }
}
