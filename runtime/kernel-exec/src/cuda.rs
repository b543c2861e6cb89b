//! The GPU back end: the passes of a [`Schedule`] as CUDA C ([`emit`], from `rlc-kernel`), compiled by NVRTC and
//! run through the CUDA driver ([`Gpu`]). The libraries are loaded at run time, so this
//! builds (and [`Gpu::new`] reports a clear error) on machines without CUDA.
//!
//! ```ignore
//! let gpu = Gpu::new()?;
//! let k = gpu.compile(&kernel)?;
//! k.run(&[b, t], &[Slice::F32(&loss), Slice::Bool(&mask)], &mut [SliceMut::F32(&mut out)])?;
//! ```
//!
//! A pass that loops over the last axis runs a block per row (its positions strided over the
//! block's threads, row reductions as a fixed tree in shared memory); one without loops, a
//! thread per row. After a pass with barriers, a finishing kernel computes them on the device
//! from the level-1 values the pass stored. Every kernel is queued on one stream with no host
//! step between them (the stream orders them); the run synchronises once, at the end.

use crate::jit::{Slice, SliceMut};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use rlc_kernel::cuda::{BLOCK_MAX, emit, finish_name, is_wide, pass_name, row_threads};
use rlc_kernel::error::{KernelError, Result};
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel::schedule::{Role, Schedule, schedule};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Threads per block of a pass with a thread per row and of a finishing kernel; the row loops
/// are grid-stride, so fewer blocks than rows is fine.
const BLOCK: u32 = 128;
const MAX_BLOCKS: u32 = 4096;
/// Scan scratch is `scans · T` floats per block of a wide pass: at most this many bytes in
/// all (unless one block needs more).
const SCRATCH_BYTES: usize = 256 << 20;

/// The launch of each kernel of a schedule for `rows` rows of `cols` positions: a wide pass's
/// grid has a block per row (up to [`MAX_BLOCKS`] and the scratch budget; blocks then take
/// several rows), its block [`row_threads`]; the others a thread per row; the finishing
/// kernels a block of [`BLOCK`] threads per row (up to [`MAX_BLOCKS`]: each block's threads
/// stride over every row for a group statistic; block 0 also reduces to scalars). The number of
/// blocks of the wide passes sizes the scratch.
pub struct Launches {
    /// Each pass's (blocks, threads per block).
    pub passes: Vec<(u32, u32)>,
    /// The finishing kernels' (blocks, threads per block).
    pub finish: (u32, u32),
    pub wide_blocks: usize,
}

pub fn launches(s: &Schedule, rows: usize, cols: usize) -> Launches {
    let per_block = (s.scans.len() * cols * 4).max(1);
    let wide_blocks = rows
        .min(SCRATCH_BYTES / per_block)
        .clamp(1, MAX_BLOCKS as usize);
    let narrow = (
        rows.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS as usize) as u32,
        BLOCK,
    );
    let wide = (wide_blocks as u32, row_threads(cols) as u32);
    debug_assert!(row_threads(cols) <= BLOCK_MAX);
    Launches {
        passes: s
            .passes
            .iter()
            .map(|p| if is_wide(p) { wide } else { narrow })
            .collect(),
        finish: (rows.clamp(1, MAX_BLOCKS as usize) as u32, BLOCK),
        wide_blocks,
    }
}

fn unavailable(why: impl std::fmt::Display) -> KernelError {
    KernelError::Cuda(format!("CUDA is not available: {why}"))
}

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> KernelError + '_ {
    move |e| KernelError::Cuda(format!("{what}: {e}"))
}

/// cudarc panics when a library or one of its symbols is missing; this turns that into an
/// error (the libraries are probed first, so this is the exception).
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic in the CUDA bindings".into());
        Err(KernelError::Cuda(format!("{what}: {why}")))
    })
}

/// The first CUDA device, with NVRTC to compile for it.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// `compute_XY` of the device, NVRTC's target.
    arch: String,
}

impl Gpu {
    /// Opens device 0. An error (never a panic) when the driver library, NVRTC or a device
    /// is missing: "CUDA is not available: …".
    pub fn new() -> Result<Gpu> {
        Gpu::on(0)
    }

    /// Opens device `ordinal` (its primary context: the one libtorch's CUDA tensors live in,
    /// so their device pointers are valid here). Kernels run on the context's legacy default
    /// stream, which is also libtorch's default stream: they are ordered after the tensor
    /// work queued before them.
    pub fn on(ordinal: usize) -> Result<Gpu> {
        // SAFETY: these only try to open the shared libraries by their usual names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(unavailable(
                "the driver library (libcuda.so) could not be loaded",
            ));
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(unavailable(
                "NVRTC (libnvrtc.so) could not be loaded; add its folder to LD_LIBRARY_PATH",
            ));
        }
        guard("CUDA is not available", || {
            let ctx = CudaContext::new(ordinal).map_err(unavailable)?;
            let (major, minor) = ctx.compute_capability().map_err(unavailable)?;
            let stream = ctx.default_stream();
            Ok(Gpu {
                ctx,
                stream,
                arch: format!("compute_{major}{minor}"),
            })
        })
    }

    /// The stream every kernel of this device runs on (for device memory of one's own: the
    /// GPU tests time kernels on it against a device-to-device copy).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device's name and compute capability, for logs.
    pub fn describe(&self) -> String {
        let name = self.ctx.name().unwrap_or_else(|_| "?".into());
        format!("{name} ({})", self.arch)
    }

    /// Schedules `kernel`, writes its passes as CUDA C and compiles them with NVRTC.
    pub fn compile(&self, kernel: &Kernel) -> Result<GpuKernel> {
        let schedule = schedule(kernel)?;
        let source = emit(kernel, &schedule);
        let ptx = nvrtc(&kernel.name, &source, &self.arch)?;
        guard("loading a module", || {
            let module = self
                .ctx
                .load_module(ptx)
                .map_err(cuda_err("loading the compiled passes"))?;
            let passes = (0..schedule.passes.len())
                .map(|p| {
                    let pass = module
                        .load_function(&pass_name(kernel, p))
                        .map_err(cuda_err("a pass function"))?;
                    let finish = if schedule.passes[p].host.is_empty() {
                        None
                    } else {
                        Some(
                            module
                                .load_function(&finish_name(kernel, p))
                                .map_err(cuda_err("a finishing function"))?,
                        )
                    };
                    Ok((pass, finish))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(GpuKernel {
                kernel: kernel.clone(),
                schedule: schedule.clone(),
                source: source.clone(),
                passes,
                stream: self.stream.clone(),
            })
        })
    }
}

/// NVRTC's PTX for `kernel` and the target `arch` (`compute_90`…): no device needed, only
/// NVRTC, so the emitted source can be checked on machines without a GPU.
pub fn ptx(kernel: &Kernel, arch: &str) -> Result<String> {
    let schedule = schedule(kernel)?;
    let source = emit(kernel, &schedule);
    Ok(nvrtc(&kernel.name, &source, arch)?.to_src())
}

fn nvrtc(name: &str, source: &str, arch: &str) -> Result<cudarc::nvrtc::Ptx> {
    // SAFETY: only tries to open the shared library by its usual names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(unavailable(
            "NVRTC (libnvrtc.so) could not be loaded; add its folder to LD_LIBRARY_PATH",
        ));
    }
    guard("NVRTC", || {
        let opts = cudarc::nvrtc::CompileOptions {
            // No contraction to fused multiply-adds: the same roundings as the CPU code.
            fmad: Some(false),
            options: vec![format!("--gpu-architecture={arch}")],
            ..Default::default()
        };
        cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| {
            let detail = match e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => format!("{other:?}"),
            };
            KernelError::Cuda(format!("NVRTC could not compile `{name}`: {detail}"))
        })
    })
}

/// A kernel compiled for the GPU.
pub struct GpuKernel {
    kernel: Kernel,
    schedule: Schedule,
    source: String,
    /// Each pass and the kernel finishing its barriers, if it has any.
    passes: Vec<(CudaFunction, Option<CudaFunction>)>,
    stream: Arc<CudaStream>,
}

/// A buffer of a run: the kernel's own device memory, or the caller's.
enum Buf {
    Owned(CudaSlice<u8>),
    Caller(u64),
}

impl Buf {
    fn ptr(&self, st: &Arc<CudaStream>) -> u64 {
        match self {
            Buf::Owned(b) => b.device_ptr(st).0,
            Buf::Caller(p) => *p,
        }
    }

    /// The buffers of [`GpuKernel::run`] are all the kernel's own.
    fn owned(&mut self) -> Result<&mut CudaSlice<u8>> {
        match self {
            Buf::Owned(b) => Ok(b),
            Buf::Caller(_) => Err(KernelError::Codegen(
                "an output buffer is the caller's memory".into(),
            )),
        }
    }
}

/// Host data as bytes in the element's memory layout (one byte per mask element).
fn input_bytes(s: &Slice) -> Vec<u8> {
    match s {
        Slice::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        Slice::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        Slice::Bool(v) => v.to_vec(),
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl GpuKernel {
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The CUDA C that was compiled.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Runs the kernel as [`crate::jit::Jit::run`] does: `sizes` are the axes' sizes, inputs
    /// and outputs in the kernel's order, row-major. Copies the inputs to the device, runs
    /// the passes and their finishing kernels on the device, copies the outputs back.
    pub fn run(&self, sizes: &[usize], inputs: &[Slice], outputs: &mut [SliceMut]) -> Result<()> {
        let k = &self.kernel;
        if sizes.len() != k.axes.len() {
            return Err(KernelError::Inputs(format!(
                "{} axis sizes given, the kernel has axes [{}]",
                sizes.len(),
                k.axes.join(", ")
            )));
        }
        if inputs.len() != k.inputs.len() || outputs.len() != k.outputs.len() {
            return Err(KernelError::Inputs(format!(
                "{} inputs and {} outputs given, the kernel takes {} and gives {}",
                inputs.len(),
                outputs.len(),
                k.inputs.len(),
                k.outputs.len()
            )));
        }
        let count = |level: usize| sizes[..level].iter().product::<usize>();
        for (i, buf) in self.schedule.buffers.iter().enumerate() {
            let n = count(buf.level);
            let (elem, len, name) = match buf.role {
                Role::Input(j) => {
                    let (e, l) = match inputs[j] {
                        Slice::F32(s) => (Elem::F32, s.len()),
                        Slice::I32(s) => (Elem::I32, s.len()),
                        Slice::Bool(s) => (Elem::Bool, s.len()),
                    };
                    (e, l, k.inputs[j].name.as_str())
                }
                Role::Output(j) => {
                    let (e, l) = match &outputs[j] {
                        SliceMut::F32(s) => (Elem::F32, s.len()),
                        SliceMut::I32(s) => (Elem::I32, s.len()),
                        SliceMut::Bool(s) => (Elem::Bool, s.len()),
                    };
                    (e, l, k.outputs[j].name.as_str())
                }
                _ => continue,
            };
            if elem != buf.elem || len != n {
                return Err(KernelError::Inputs(format!(
                    "buffer {i} (`{name}`) needs {n} {} values, got {len} {}",
                    buf.elem.name(),
                    elem.name()
                )));
            }
        }
        guard("running a CUDA kernel", || {
            self.run_checked(sizes, inputs, outputs)
        })
    }

    /// Runs the kernel on device memory the caller owns, on this kernel's device: `inputs` and
    /// `outputs` are device pointers in the kernel's order, each to a row-major buffer of its
    /// element type and `count(level)` elements; the outputs must be zeroed. Returns when the
    /// passes are done. The kernel's own buffers (stored values, barriers) are allocated here.
    ///
    /// # Safety
    /// Every pointer must be valid device memory of this kernel's context, of the size above,
    /// not written by anything else until this returns.
    pub unsafe fn run_on_device(
        &self,
        sizes: &[usize],
        inputs: &[u64],
        outputs: &[u64],
    ) -> Result<()> {
        let k = &self.kernel;
        if sizes.len() != k.axes.len()
            || inputs.len() != k.inputs.len()
            || outputs.len() != k.outputs.len()
        {
            return Err(KernelError::Inputs(format!(
                "{} axis sizes, {} inputs and {} outputs given, the kernel has {}, {} and {}",
                sizes.len(),
                inputs.len(),
                outputs.len(),
                k.axes.len(),
                k.inputs.len(),
                k.outputs.len()
            )));
        }
        guard("running a CUDA kernel", || {
            let count = |level: usize| sizes[..level].iter().product::<usize>();
            let mut bufs = Vec::with_capacity(self.schedule.buffers.len());
            for buf in &self.schedule.buffers {
                bufs.push(match buf.role {
                    Role::Input(i) => Buf::Caller(inputs[i]),
                    Role::Output(i) => Buf::Caller(outputs[i]),
                    _ => Buf::Owned(
                        self.stream
                            .alloc_zeros::<u8>((count(buf.level) * buf.elem.bytes()).max(4))
                            .map_err(cuda_err("allocating on the device"))?,
                    ),
                });
            }
            self.launch(sizes, &mut bufs)
        })
    }

    fn run_checked(
        &self,
        sizes: &[usize],
        inputs: &[Slice],
        outputs: &mut [SliceMut],
    ) -> Result<()> {
        let s = &self.schedule;
        let st = &self.stream;
        let count = |level: usize| sizes[..level].iter().product::<usize>();
        // Every buffer on the device (at least 4 bytes: no empty allocations).
        let mut bufs: Vec<Buf> = Vec::with_capacity(s.buffers.len());
        for buf in &s.buffers {
            let bytes = count(buf.level) * buf.elem.bytes();
            let dev = match buf.role {
                Role::Input(i) => {
                    let mut data = input_bytes(&inputs[i]);
                    data.resize(bytes.max(4), 0);
                    st.clone_htod(&data)
                }
                _ => st.alloc_zeros::<u8>(bytes.max(4)),
            }
            .map_err(cuda_err("copying to the device"))?;
            bufs.push(Buf::Owned(dev));
        }
        self.launch(sizes, &mut bufs)?;
        for (i, out) in outputs.iter_mut().enumerate() {
            let Some(b) = s.buffer_of(Role::Output(i)) else {
                continue;
            };
            let bytes = st
                .clone_dtoh(bufs[b].owned()?)
                .map_err(cuda_err("copying outputs back"))?;
            match out {
                SliceMut::F32(o) => {
                    let n = o.len();
                    o.copy_from_slice(&f32s(&bytes)[..n]);
                }
                SliceMut::I32(o) => {
                    let n = o.len();
                    o.copy_from_slice(&i32s(&bytes)[..n]);
                }
                SliceMut::Bool(o) => {
                    let n = o.len();
                    o.copy_from_slice(&bytes[..n]);
                }
            }
        }
        Ok(())
    }

    /// Queues every pass, and after each pass with barriers its finishing kernel, on the
    /// kernel's stream, with no host step between them; returns when they are done.
    fn launch(&self, sizes: &[usize], bufs: &mut [Buf]) -> Result<()> {
        let s = &self.schedule;
        let st = &self.stream;
        let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr(st)).collect();
        let ptrs_dev = st.clone_htod(&ptrs).map_err(cuda_err("buffer table"))?;
        let sizes_i64: Vec<i64> = sizes.iter().map(|&x| x as i64).collect();
        let sizes_dev = st
            .clone_htod(&if sizes_i64.is_empty() {
                vec![0]
            } else {
                sizes_i64.clone()
            })
            .map_err(cuda_err("sizes"))?;
        let rows = sizes.first().copied().unwrap_or(1);
        let cols = sizes.get(1).copied().unwrap_or(1);
        let plan = launches(s, rows, cols);
        let mut scratch = st
            .alloc_zeros::<f32>((plan.wide_blocks * s.scans.len() * cols).max(1))
            .map_err(cuda_err("scratch"))?;
        let config = |(blocks, threads): (u32, u32)| LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let rows_arg = rows as i64;
        for (p, (pass, finish)) in self.passes.iter().enumerate() {
            for (f, cfg) in std::iter::once((pass, plan.passes[p]))
                .chain(finish.as_ref().map(|f| (f, plan.finish)))
            {
                let mut launch = st.launch_builder(f);
                launch.arg(&ptrs_dev);
                launch.arg(&sizes_dev);
                launch.arg(&rows_arg);
                launch.arg(&mut scratch);
                // SAFETY: every kernel's parameters are (void**, const long long*, long long,
                // float*) as written by `emit`; every buffer holds `count(level)` elements of
                // its type and scratch `scans · cols` floats per block of a wide pass (a
                // narrow pass has no scans); block sizes are powers of two ≤ BLOCK_MAX.
                unsafe { launch.launch(config(cfg)) }.map_err(cuda_err("launching a pass"))?;
            }
        }
        // Before the buffer table, sizes and scratch are dropped.
        st.synchronize().map_err(cuda_err("running the passes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_the_bindings_is_an_error() {
        let r: Result<()> = guard("loading", || panic!("no symbol cuFoo"));
        assert_eq!(r, Err(KernelError::Cuda("loading: no symbol cuFoo".into())));
        let r: Result<()> = guard("loading", || panic!("{} missing", "libcuda"));
        assert_eq!(r, Err(KernelError::Cuda("loading: libcuda missing".into())));
    }
}
