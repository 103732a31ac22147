//! PTX modules loaded through the driver's JIT, and kernel launches.

use std::collections::HashMap;
use std::ffi::{c_uint, c_void, CString};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{sys, CudaFunction, CudaModule, DriverError};
use cudarc::nvrtc::Ptx;

use crate::{Buffer, Error, Gpu};

/// Dynamic shared memory a kernel may use without opting in, bytes (CUDA C Programming Guide,
/// "Shared Memory": allocations above 48 KiB must be explicit).
const DEFAULT_MAX_DYNAMIC_SHARED: u32 = 48 * 1024;

/// Size of the JIT log buffers read back when a module fails to load, bytes.
const JIT_LOG_BYTES: usize = 64 * 1024;

/// Launch geometry of one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Grid size in CTAs, `[x, y, z]`; every entry at least 1.
    pub grid: [u32; 3],
    /// CTA size in threads, `[x, y, z]`; every entry at least 1, product at most 1024.
    pub block: [u32; 3],
    /// Dynamic shared memory per CTA, bytes. Above 48 KiB the kernel's opt-in attribute is
    /// raised automatically, up to the device's [`crate::Properties`] limit.
    pub shared_bytes: u32,
    /// Launch with programmatic stream serialization
    /// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`; CUDA Programming Guide,
    /// "Programmatic Dependent Launch"; sm_90): the kernel may begin once every CTA of the
    /// kernel ahead of it in the stream has run `griddepcontrol.launch_dependents` or
    /// exited, before that kernel completes. Only for a kernel whose every thread runs
    /// `griddepcontrol.wait` before it touches memory the kernel ahead writes or reads —
    /// otherwise a race. Captured into a CUDA graph as a programmatic edge.
    pub programmatic: bool,
}

impl Launch {
    /// A one-dimensional launch: `grid` CTAs of `block` threads, no dynamic shared memory,
    /// stream-ordered.
    pub fn linear(grid: u32, block: u32) -> Launch {
        Launch {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared_bytes: 0,
            programmatic: false,
        }
    }
}

/// One kernel parameter, in the order of the kernel's `.param` list.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A `.param .u64` holding the buffer's device address.
    Buffer(&'a Buffer),
    /// A `.param .u32`.
    U32(u32),
    /// A `.param .s32`.
    I32(i32),
    /// A `.param .f32`.
    F32(f32),
    /// A `.param .u64`.
    U64(u64),
    /// A `.param .align 64 .b8 p[128]`: a tensor map by value.
    TensorMap(crate::TensorMap),
    /// A `.param .u64` holding the address of memory tessel does not own (see
    /// [`crate::external`]'s safety contract).
    External(crate::ExternalBuffer),
}

struct Function {
    function: CudaFunction,
    /// The current `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, bytes.
    max_dynamic_shared: u32,
}

/// A PTX module loaded on one [`Gpu`] by the driver's JIT.
pub struct Module {
    gpu: Gpu,
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<String, Function>>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module").finish_non_exhaustive()
    }
}

impl Module {
    /// JIT-compiles `ptx` for `gpu`'s device and loads it.
    ///
    /// # Errors
    /// [`Error::Jit`] with the JIT's error log when the driver rejects the PTX;
    /// [`Error::InvalidArgument`] if `ptx` contains a NUL byte.
    pub fn load(gpu: &Gpu, ptx: &str) -> Result<Module, Error> {
        if ptx.contains('\0') {
            return Err(Error::InvalidArgument(
                "PTX text contains a NUL byte".to_owned(),
            ));
        }
        let module = match gpu.context().load_module(Ptx::from_src(ptx)) {
            Ok(module) => module,
            Err(source) => {
                return Err(Error::Jit {
                    log: jit_error_log(gpu, ptx),
                    source,
                })
            }
        };
        Ok(Module {
            gpu: gpu.clone(),
            module,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// The GPU this module is loaded on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Registers per thread of `kernel` as compiled by the JIT (`CU_FUNC_ATTRIBUTE_NUM_REGS`).
    ///
    /// # Errors
    /// [`Error::KernelNotFound`] if there is no such kernel.
    pub fn registers(&self, kernel: &str) -> Result<u32, Error> {
        let function = self.function(kernel)?.0;
        let regs = function
            .num_regs()
            .map_err(Error::driver(format!("querying registers of `{kernel}`")))?;
        Ok(u32::try_from(regs).unwrap_or(0))
    }

    /// Launches `kernel` with `launch` geometry and `args` on the GPU's stream. In checked
    /// mode (see [`Gpu::set_checked`]) it then waits for the kernel and reports its faults.
    ///
    /// The arguments are not checked against the kernel's signature (PTX carries no types
    /// the driver can check); a wrong list is undefined behaviour on the device, typically an
    /// illegal-address fault.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for empty geometry, more than 1024 threads, shared memory
    /// above the device limit, or a buffer from another [`Gpu`]; [`Error::KernelNotFound`];
    /// [`Error::Launch`] if the driver refuses the launch; [`Error::Kernel`] if it faults.
    pub fn launch(&self, kernel: &str, launch: Launch, args: &[Arg<'_>]) -> Result<(), Error> {
        self.enqueue(kernel, launch, args)?;
        self.gpu.check_after(kernel)
    }

    /// Checks a launch and returns its function, with the dynamic shared memory limit raised
    /// as the launch needs: what both launch paths do before enqueueing.
    pub(crate) fn prepare(
        &self,
        kernel: &str,
        launch: Launch,
        args: &[Arg<'_>],
    ) -> Result<CudaFunction, Error> {
        self.validate(kernel, launch, args)?;
        let (function, max_dynamic_shared) = self.function(kernel)?;
        if launch.shared_bytes > DEFAULT_MAX_DYNAMIC_SHARED
            && launch.shared_bytes > max_dynamic_shared
        {
            self.raise_shared_limit(kernel, &function, launch.shared_bytes)?;
        }
        Ok(function)
    }

    fn enqueue(&self, kernel: &str, launch: Launch, args: &[Arg<'_>]) -> Result<(), Error> {
        let function = self.prepare(kernel, launch, args)?;
        // SAFETY: the GPU's own stream is live while `self.gpu` is; the arguments matching
        // the kernel's signature is the caller's contract, documented on `launch`.
        unsafe {
            enqueue_raw(
                kernel,
                &function,
                launch,
                self.gpu.stream().cu_stream(),
                args,
            )
        }
    }

    fn validate(&self, kernel: &str, launch: Launch, args: &[Arg<'_>]) -> Result<(), Error> {
        let threads: u64 = launch.block.iter().map(|&d| u64::from(d)).product();
        if launch.grid.contains(&0) || launch.block.contains(&0) {
            return Err(Error::InvalidArgument(format!(
                "`{kernel}`: empty launch grid {:?} block {:?}",
                launch.grid, launch.block
            )));
        }
        if threads > 1024 {
            return Err(Error::InvalidArgument(format!(
                "`{kernel}`: {threads} threads per CTA, more than 1024"
            )));
        }
        let limit = self.gpu.properties().max_shared_bytes_per_block_optin;
        if launch.shared_bytes > limit {
            return Err(Error::InvalidArgument(format!(
                "`{kernel}`: {} bytes of dynamic shared memory, device allows {limit}",
                launch.shared_bytes
            )));
        }
        for (i, arg) in args.iter().enumerate() {
            if let Arg::Buffer(buffer) = arg {
                if !buffer.gpu().same(&self.gpu) {
                    return Err(Error::InvalidArgument(format!(
                        "`{kernel}`: argument {i} is a buffer of another Gpu"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The cached function handle for `kernel` and its current dynamic shared memory limit.
    fn function(&self, kernel: &str) -> Result<(CudaFunction, u32), Error> {
        let mut functions = self
            .functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = functions.get(kernel) {
            return Ok((f.function.clone(), f.max_dynamic_shared));
        }
        let function =
            self.module
                .load_function(kernel)
                .map_err(|source| Error::KernelNotFound {
                    name: kernel.to_owned(),
                    source,
                })?;
        functions.insert(
            kernel.to_owned(),
            Function {
                function: function.clone(),
                max_dynamic_shared: DEFAULT_MAX_DYNAMIC_SHARED,
            },
        );
        Ok((function, DEFAULT_MAX_DYNAMIC_SHARED))
    }

    fn raise_shared_limit(
        &self,
        kernel: &str,
        function: &CudaFunction,
        bytes: u32,
    ) -> Result<(), Error> {
        let value = i32::try_from(bytes).map_err(|_| {
            Error::InvalidArgument(format!("`{kernel}`: {bytes} bytes of shared memory"))
        })?;
        function
            .set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
            .map_err(Error::driver(format!(
                "allowing `{kernel}` {bytes} bytes of dynamic shared memory"
            )))?;
        let mut functions = self
            .functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = functions.get_mut(kernel) {
            f.max_dynamic_shared = bytes;
        }
        Ok(())
    }
}

/// Loads `ptx` again with `cuModuleLoadDataEx` and log buffers to read the JIT's complaint;
/// cudarc's `load_module` uses `cuModuleLoadData`, which returns only an error code.
fn jit_error_log(gpu: &Gpu, ptx: &str) -> String {
    let Ok(source) = CString::new(ptx) else {
        return String::new();
    };
    if gpu.context().bind_to_thread().is_err() {
        return String::new();
    }
    let mut error_log = vec![0u8; JIT_LOG_BYTES];
    let mut info_log = vec![0u8; JIT_LOG_BYTES];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // Sizes are passed by value in the pointer slot (CUDA driver API, CUjit_option).
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr().cast(),
        JIT_LOG_BYTES as *mut c_void,
        info_log.as_mut_ptr().cast(),
        JIT_LOG_BYTES as *mut c_void,
    ];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `source` is NUL-terminated; the option arrays have matching lengths; the log
    // buffers outlive the call and are as large as declared.
    let status = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            source.as_ptr().cast(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if status == sys::CUresult::CUDA_SUCCESS && !module.is_null() {
        // Loaded the second time (a transient failure): unload, keep the first error.
        // SAFETY: `module` was just loaded and is not shared.
        let _ = unsafe { sys::cuModuleUnload(module) };
    }
    let text = |buf: &[u8]| {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim().to_owned()
    };
    let (error, info) = (text(&error_log), text(&info_log));
    match (error.is_empty(), info.is_empty()) {
        (false, false) => format!("{error}\n{info}"),
        (false, true) => error,
        (true, false) => info,
        (true, true) => format!(
            "(the JIT gave no log; status of the retry: {:?})",
            DriverError(status)
        ),
    }
}

/// Enqueues `function` with `launch` geometry on the raw stream `stream` (`cuLaunchKernelEx`,
/// with programmatic stream serialization when [`Launch::programmatic`]): the one launch
/// path of [`Module::launch`] and [`Module::launch_on`].
///
/// # Safety
/// `stream` is a live stream of the function's context, which must be current or made
/// current here (it is bound first); `args` matches the kernel's `.param` list, and every
/// memory it points to outlives the kernel.
pub(crate) unsafe fn enqueue_raw(
    kernel: &str,
    function: &CudaFunction,
    launch: Launch,
    stream: sys::CUstream,
    args: &[Arg<'_>],
) -> Result<(), Error> {
    // One value per parameter, each in storage that outlives the call (the driver copies
    // parameter values at launch).
    let values: Vec<ParamValue> = args.iter().map(ParamValue::of).collect();
    let mut params: Vec<*mut c_void> = values.iter().map(ParamValue::pointer).collect();
    // SAFETY: a zeroed attribute is a valid `CU_LAUNCH_ATTRIBUTE_IGNORE` plain-data value.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: launch.grid[0],
        gridDimY: launch.grid[1],
        gridDimZ: launch.grid[2],
        blockDimX: launch.block[0],
        blockDimY: launch.block[1],
        blockDimZ: launch.block[2],
        sharedMemBytes: launch.shared_bytes,
        hStream: stream,
        attrs: std::ptr::from_mut(&mut attr),
        numAttrs: c_uint::from(launch.programmatic),
    };
    // SAFETY: `config` and `attr` live through the call; `params` holds one pointer per
    // kernel parameter into `values`, which outlives it; the rest is the caller's promise.
    let status = unsafe {
        sys::cuLaunchKernelEx(
            &config,
            function.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::Launch {
            kernel: kernel.to_owned(),
            source: DriverError(status),
        });
    }
    Ok(())
}

/// A kernel parameter's value as the driver reads it through a pointer.
enum ParamValue {
    U64(u64),
    U32(u32),
    I32(i32),
    F32(f32),
    TensorMap(Box<crate::TensorMap>),
}

impl ParamValue {
    fn of(arg: &Arg<'_>) -> ParamValue {
        match arg {
            Arg::Buffer(b) => ParamValue::U64(b.device_ptr()),
            Arg::External(b) => ParamValue::U64(b.address),
            Arg::U32(v) => ParamValue::U32(*v),
            Arg::I32(v) => ParamValue::I32(*v),
            Arg::F32(v) => ParamValue::F32(*v),
            Arg::U64(v) => ParamValue::U64(*v),
            Arg::TensorMap(t) => ParamValue::TensorMap(Box::new(*t)),
        }
    }

    fn pointer(&self) -> *mut c_void {
        match self {
            ParamValue::U64(v) => std::ptr::from_ref(v).cast_mut().cast(),
            ParamValue::U32(v) => std::ptr::from_ref(v).cast_mut().cast(),
            ParamValue::I32(v) => std::ptr::from_ref(v).cast_mut().cast(),
            ParamValue::F32(v) => std::ptr::from_ref(v).cast_mut().cast(),
            ParamValue::TensorMap(t) => std::ptr::from_ref(t.as_ref()).cast_mut().cast(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExternalBuffer;

    #[test]
    fn each_parameter_value_is_read_through_its_own_pointer() {
        // SAFETY: never launched on; only read back as a parameter value.
        let b = unsafe { ExternalBuffer::from_raw(0xdead_0000, 8) }.expect("valid");
        let values: Vec<ParamValue> = [Arg::External(b), Arg::U32(7), Arg::F32(1.5)]
            .iter()
            .map(ParamValue::of)
            .collect();
        // SAFETY: each pointer points at the value of its variant, alive in `values`.
        unsafe {
            assert_eq!(*values[0].pointer().cast::<u64>(), 0xdead_0000);
            assert_eq!(*values[1].pointer().cast::<u32>(), 7);
            assert_eq!(*values[2].pointer().cast::<f32>(), 1.5);
        }
    }
}
