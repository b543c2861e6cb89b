//! Fused kernels on CUDA tensors: the kernel IR of [`super::fused`], written as CUDA C,
//! compiled by NVRTC for the tensors' device and run on libtorch's memory. Only the
//! barriers' per-row values cross to the host; inputs and outputs stay on the device.
//!
//! Ordering with libtorch: both queue work on the device's legacy default stream, so a
//! kernel runs after the tensor operations that produced its inputs; it returns when done.

use super::fused::{FusedError, fn_kernel, kernel_inputs, kind_of};
use super::reference::Arg;
use rlc_check::modules::Modules;
use rlc_kernel_exec::cuda::{Gpu, GpuKernel};
use tch::{Device, Tensor};

/// A fused kernel compiled for one CUDA device.
pub struct FusedCuda {
    kernel: GpuKernel,
    ordinal: usize,
}

impl FusedCuda {
    /// As [`super::fused::Fused::new`], for CUDA device `ordinal`. Fails (the caller falls back
    /// to the reference evaluator) where the kernel cannot be lowered or CUDA/NVRTC is missing.
    pub fn new(
        modules: &Modules,
        function: &str,
        given: &[&str],
        wrt: &[&str],
        ordinal: usize,
    ) -> Result<FusedCuda, FusedError> {
        let kernel = fn_kernel(modules, function, given, wrt)?;
        let gpu = Gpu::on(ordinal)?;
        Ok(FusedCuda {
            kernel: gpu.compile(&kernel)?,
            ordinal,
        })
    }

    /// Runs the kernel on named arguments (moved to the kernel's device where they are not);
    /// returns its outputs in order, on the device.
    pub fn run(&self, args: &[(&str, Arg)]) -> Result<Vec<Tensor>, FusedError> {
        let k = self.kernel.kernel();
        let device = Device::Cuda(self.ordinal);
        let (sizes, inputs) = kernel_inputs(k, args, device)?;
        let outputs: Vec<Tensor> = k
            .outputs
            .iter()
            .map(|o| {
                let shape: Vec<i64> = sizes[..o.level].iter().map(|&s| s as i64).collect();
                Tensor::f_zeros(shape.as_slice(), (kind_of(k.node(o.node).elem), device))
            })
            .collect::<Result<_, _>>()?;
        let ptrs = |ts: &[Tensor]| -> Vec<u64> { ts.iter().map(|t| t.data_ptr() as u64).collect() };
        // SAFETY: every input and output is a contiguous tensor on this kernel's device, of its
        // element kind and the size its level and `sizes` give (checked and converted by
        // `kernel_inputs`, allocated above); the outputs are zeroed; all stay alive and
        // untouched until `run_on_device` returns.
        unsafe {
            self.kernel
                .run_on_device(&sizes, &ptrs(&inputs), &ptrs(&outputs))?;
        }
        Ok(outputs)
    }
}
