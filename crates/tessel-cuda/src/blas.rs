//! cuBLAS GEMM baselines, for the side-by-side benchmarks of design §10.
//!
//! Every entry point computes, in row-major storage, `C[M, N] = A · B` with f32
//! accumulation, `A` stored `[M, K]` or (transposed) `[K, M]`, `B` stored `[N, K]` (the
//! `x @ W^T` of a linear layer, `W` stored `[out, in]`) or `[K, N]`. cuBLAS is column-major:
//! a row-major `[R, C]` matrix is a column-major `[C, R]` one with leading dimension `C`. So
//! the call computes `C^T[N, M] = B^T · A^T` column-major: first operand `B` (`[N, K]`
//! row-major is column-major `[K, N]` with ld `K`, used transposed; `[K, N]` is column-major
//! `[N, K]` with ld `N`, used as is), second `A` (`[M, K]` is column-major `[K, M]`, ld `K`,
//! as is; `[K, M]` is column-major `[M, K]`, ld `M`, transposed), result ld `N`.

use std::ffi::{c_int, c_void};

use cudarc::cublas::{result, sys, CudaBlas};

use crate::{Buffer, Error, Gpu};

/// A cuBLAS handle bound to one [`Gpu`]'s stream.
pub struct Blas {
    gpu: Gpu,
    blas: CudaBlas,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas").finish_non_exhaustive()
    }
}

/// Element types of one GEMM call.
#[derive(Clone, Copy)]
struct Types {
    data: sys::cudaDataType_t,
    bytes: usize,
    compute: sys::cublasComputeType_t,
}

/// The data and compute type of a [`Blas::gemm`]: f32 accumulation always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmType {
    /// bf16 A, B, C (`CUDA_R_16BF`, `CUBLAS_COMPUTE_32F`).
    Bf16,
    /// f16 A, B, C (`CUDA_R_16F`, `CUBLAS_COMPUTE_32F`).
    F16,
    /// f32 A, B, C, IEEE f32 products (`CUBLAS_COMPUTE_32F`).
    F32,
    /// f32 A, B, C with inputs rounded to TF32 for tensor cores
    /// (`CUBLAS_COMPUTE_32F_FAST_TF32`, as PyTorch's `allow_tf32`).
    Tf32,
}

impl GemmType {
    fn types(self) -> Types {
        use sys::cublasComputeType_t::{CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
        use sys::cudaDataType_t::{CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
        let (data, bytes, compute) = match self {
            GemmType::Bf16 => (CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F),
            GemmType::F16 => (CUDA_R_16F, 2, CUBLAS_COMPUTE_32F),
            GemmType::F32 => (CUDA_R_32F, 4, CUBLAS_COMPUTE_32F),
            GemmType::Tf32 => (CUDA_R_32F, 4, CUBLAS_COMPUTE_32F_FAST_TF32),
        };
        Types {
            data,
            bytes,
            compute,
        }
    }
}

/// How a GEMM operand is stored (row-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// K is the last (contiguous) dim: `A[M, K]`, `B[N, K]`.
    KContiguous,
    /// K is the first dim: `A[K, M]`, `B[K, N]`.
    KStrided,
}

impl Blas {
    /// Creates a cuBLAS handle on `gpu`'s stream.
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] if `libcublas.so` cannot be loaded; [`Error::Cublas`] if the
    /// handle cannot be created.
    pub fn new(gpu: &Gpu) -> Result<Blas, Error> {
        // cudarc panics when the library is missing; ask first.
        // SAFETY: only tries to dlopen libcublas by its usual names.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::LibraryMissing { library: "cublas" });
        }
        let blas = CudaBlas::new(gpu.stream().clone()).map_err(|source| Error::Cublas {
            op: "creating a handle".to_owned(),
            source,
        })?;
        Ok(Blas {
            gpu: gpu.clone(),
            blas,
        })
    }

    /// Row-major `C[M, N] = A[M, K] · B[N, K]^T` on bf16 data: `a`, `b`, `c` hold bf16, the
    /// products accumulate in f32 (`CUBLAS_COMPUTE_32F`), `c` is rounded to bf16 once.
    /// cuBLAS may use tensor cores; its accumulation order is unspecified.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if a dimension is 0 or beyond `i32`, or a buffer is smaller
    /// than its matrix or on another [`Gpu`]; [`Error::Cublas`]; [`Error::Kernel`] if the
    /// checked-mode synchronize finds a fault.
    pub fn gemm_bf16(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &Buffer,
        b: &Buffer,
        c: &mut Buffer,
    ) -> Result<(), Error> {
        let ab = (Layout::KContiguous, Layout::KContiguous);
        self.gemm(GemmType::Bf16, [m, n, k], (a, b), ab, c)
    }

    /// Row-major `C[M, N] = A[M, K] · B[N, K]^T` on f32 data with f32 accumulation. With
    /// `tf32 = false` it is an IEEE f32 GEMM (`CUBLAS_COMPUTE_32F`); with `tf32 = true` inputs
    /// are rounded to TF32 for tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`), as PyTorch's
    /// `allow_tf32` does.
    ///
    /// # Errors
    /// As [`Blas::gemm_bf16`].
    #[allow(clippy::too_many_arguments)] // the BLAS shape: three dims, three matrices, a mode
    pub fn gemm_f32(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &Buffer,
        b: &Buffer,
        c: &mut Buffer,
        tf32: bool,
    ) -> Result<(), Error> {
        let ty = if tf32 { GemmType::Tf32 } else { GemmType::F32 };
        let ab = (Layout::KContiguous, Layout::KContiguous);
        self.gemm(ty, [m, n, k], (a, b), ab, c)
    }

    /// Row-major `C[M, N] = A · B` with `A` and `B` stored as `layouts` say (`A[M, K]` or
    /// `[K, M]`, `B[N, K]` or `[K, N]`), of type `ty`.
    ///
    /// # Errors
    /// As [`Blas::gemm_bf16`].
    pub fn gemm(
        &self,
        ty: GemmType,
        [m, n, k]: [usize; 3],
        (a, b): (&Buffer, &Buffer),
        (la, lb): (Layout, Layout),
        c: &mut Buffer,
    ) -> Result<(), Error> {
        let types = ty.types();
        let op = format!("gemm {ty:?} M={m} N={n} K={k} A {la:?} B {lb:?}");
        let dim = |d: usize| -> Result<c_int, Error> {
            c_int::try_from(d)
                .ok()
                .filter(|&d| d > 0)
                .ok_or_else(|| Error::InvalidArgument(format!("{op}: dimension {d}")))
        };
        let (mi, ni, ki) = (dim(m)?, dim(n)?, dim(k)?);
        for (label, buffer, rows, cols) in [("A", a, m, k), ("B", b, n, k), ("C", &*c, m, n)] {
            let need = rows
                .checked_mul(cols)
                .and_then(|e| e.checked_mul(types.bytes));
            if need.is_none_or(|need| buffer.len() < need) {
                return Err(Error::InvalidArgument(format!(
                    "{op}: {label} [{rows}, {cols}] needs {} bytes, buffer has {}",
                    need.map_or_else(|| "too many".to_owned(), |n| n.to_string()),
                    buffer.len()
                )));
            }
            if !buffer.gpu().same(&self.gpu) {
                return Err(Error::InvalidArgument(format!(
                    "{op}: {label} is a buffer of another Gpu"
                )));
            }
        }

        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        // SAFETY: the three buffers are live device allocations of this Gpu, at least as
        // large as the matrices (checked above); alpha/beta are host f32 values as the
        // default host pointer mode and a 32F compute type require.
        use sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let (op_b, ld_b) = match lb {
            Layout::KContiguous => (CUBLAS_OP_T, ki),
            Layout::KStrided => (CUBLAS_OP_N, ni),
        };
        let (op_a, ld_a) = match la {
            Layout::KContiguous => (CUBLAS_OP_N, ki),
            Layout::KStrided => (CUBLAS_OP_T, mi),
        };
        unsafe {
            result::gemm_ex(
                *self.blas.handle(),
                op_b,
                op_a,
                ni,
                mi,
                ki,
                (&alpha as *const f32).cast::<c_void>(),
                b.device_ptr() as *const c_void,
                types.data,
                ld_b,
                a.device_ptr() as *const c_void,
                types.data,
                ld_a,
                (&beta as *const f32).cast::<c_void>(),
                c.device_ptr() as *mut c_void,
                types.data,
                ni,
                types.compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|source| Error::Cublas {
            op: op.clone(),
            source,
        })?;
        self.gpu.check_after(&op)
    }
}
