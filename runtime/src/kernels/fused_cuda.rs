//! Fused kernels on CUDA tensors: the kernel IR of [`super::fused`], written as CUDA C,
//! compiled by NVRTC for the tensors' device and run on libtorch's memory. Nothing crosses to
//! the host: the passes run a block per row where they loop over tokens, and the barriers
//! between them (sums over rows, group statistics) are finished by kernels on the device.
//!
//! Ordering with libtorch: both queue work on the device's legacy default stream, so a
//! kernel runs after the tensor operations that produced its inputs; every pass and finishing
//! kernel is queued at once, and `run` returns when they are done (one wait).

use super::args::Arg;
use super::fused::{FusedError, kernel_inputs, kind_of};
use rlc_kernel::ir::Kernel;
use rlc_kernel_exec::cuda::{Gpu, GpuKernel};
use tch::{Device, Tensor};

/// A fused kernel compiled for one CUDA device.
pub struct FusedCuda {
    kernel: GpuKernel,
    ordinal: usize,
}

impl FusedCuda {
    /// As [`super::fused::Fused::compile`], for CUDA device `ordinal`. Fails (the caller runs
    /// the kernel eagerly) where CUDA or NVRTC is missing.
    pub fn compile(kernel: &Kernel, ordinal: usize) -> Result<FusedCuda, FusedError> {
        let gpu = Gpu::on(ordinal)?;
        Ok(FusedCuda {
            kernel: gpu.compile(kernel)?,
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
