//! cuBLAS GEMM baselines, for the side-by-side benchmarks of design §10.
//!
//! Both entry points compute, in row-major storage,
//! `C[M, N] = A[M, K] · B[N, K]^T` (the `x @ W^T` of a linear layer, `W` stored `[out, in]`),
//! with f32 accumulation. cuBLAS is column-major: a row-major `[R, C]` matrix is a
//! column-major `[C, R]` one with leading dimension `C`. So the call computes
//! `C^T[N, M] = B[N, K] · A^T[K, M]` column-major: first operand `B` (stored column-major as
//! `[K, N]`, ld `K`, transposed), second `A` (column-major `[K, M]`, ld `K`, not
//! transposed), result ld `N`.

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
        let types = Types {
            data: sys::cudaDataType_t::CUDA_R_16BF,
            bytes: 2,
            compute: sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        self.gemm("gemm_bf16", types, [m, n, k], a, b, c)
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
        let compute = if tf32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let types = Types {
            data: sys::cudaDataType_t::CUDA_R_32F,
            bytes: 4,
            compute,
        };
        self.gemm("gemm_f32", types, [m, n, k], a, b, c)
    }

    fn gemm(
        &self,
        name: &str,
        types: Types,
        [m, n, k]: [usize; 3],
        a: &Buffer,
        b: &Buffer,
        c: &mut Buffer,
    ) -> Result<(), Error> {
        let op = format!("{name} M={m} N={n} K={k}");
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
        unsafe {
            result::gemm_ex(
                *self.blas.handle(),
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                mi,
                ki,
                (&alpha as *const f32).cast::<c_void>(),
                b.device_ptr() as *const c_void,
                types.data,
                ki,
                a.device_ptr() as *const c_void,
                types.data,
                ki,
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
