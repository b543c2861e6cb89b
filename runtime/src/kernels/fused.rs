//! Fused kernels on tch tensors: a plan's kernel (the kernel IR, optionally with its
//! derivative) compiled by the Cranelift JIT, run on CPU tensors without copies when they
//! are already contiguous `f32`/`i32`/`bool`.
//!
//! ```ignore
//! let k = Fused::compile(&plan.kernels[i])?;
//! let out = k.run(&[("loss", (&loss).into()), ("m", (&mask).into())], 2)?;
//! ```

use super::args::{Arg, Bound, axis_sizes, ordered, scope_args};
use rlc_kernel::KernelError;
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel_exec::jit::{Jit, Slice, SliceMut};
use tch::{Device, Kind, Tensor};

/// A compiled fused kernel.
pub struct Fused {
    jit: Jit,
}

#[derive(Debug, thiserror::Error)]
pub enum FusedError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("fused kernel input: {0}")]
    Input(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// The axis sizes `args` give kernel `k`, and its inputs in order as contiguous tensors of
/// their element kinds on `device` (numbers as 0-d tensors); a missing argument or a shape
/// that disagrees is an error.
pub(super) fn kernel_inputs(
    k: &Kernel,
    args: &[(&str, Arg)],
    device: Device,
) -> Result<(Vec<usize>, Vec<Tensor>), FusedError> {
    let mut inputs = ordered(k, args, device).map_err(FusedError::Input)?;
    let sizes = axis_sizes(k, &inputs).map_err(FusedError::Input)?;
    for (t, p) in inputs.iter_mut().zip(&k.inputs) {
        // Converted only where needed: each libtorch call costs as much as a small kernel.
        let kind = kind_of(p.elem);
        if t.device() != device || t.kind() != kind || !t.is_contiguous() {
            *t = t.f_to_device(device)?.f_to_kind(kind)?.f_contiguous()?;
        }
    }
    Ok((sizes.into_iter().map(|s| s as usize).collect(), inputs))
}

pub(super) fn kind_of(elem: Elem) -> Kind {
    match elem {
        Elem::F32 => Kind::Float,
        Elem::I32 => Kind::Int,
        Elem::Bool => Kind::Bool,
    }
}

impl Fused {
    /// Compiles `kernel` (a plan's, or with the derivatives `rlc_kernel::grad` appends) for
    /// this CPU.
    pub fn compile(kernel: &Kernel) -> Result<Fused, FusedError> {
        Ok(Fused {
            jit: Jit::compile(kernel)?,
        })
    }

    /// The loss kernel `kernel` (scalar output `result`) with the derivative of its value with
    /// respect to its input `param` appended (output `d_<param>`), compiled: one pass gives a
    /// loss and the gradient that seeds the model's backward pass. A kernel the IR cannot
    /// differentiate (a group reduction or a scan on the way to `param`) is an error: the
    /// caller runs it eagerly with autograd then.
    pub fn with_gradient(kernel: &Kernel, param: &str) -> Result<Fused, FusedError> {
        Fused::compile(&rlc_kernel::grad::differentiate(
            kernel,
            "result",
            &[param],
        )?)
    }

    /// [`Fused::run`] on a loss closure's scope ([`scope_args`]). Tensors are read detached
    /// (the kernel is not part of autograd's graph).
    pub fn run_scope(
        &self,
        scope: &[(&str, Bound)],
        threads: usize,
    ) -> Result<Vec<Tensor>, FusedError> {
        let args = scope_args(self.jit.kernel(), scope, true);
        let named: Vec<(&str, Arg)> = args
            .iter()
            .map(|(n, a)| (n.as_str(), a.shallow()))
            .collect();
        self.run(&named, threads)
    }

    pub fn jit(&self) -> &Jit {
        &self.jit
    }

    /// Runs the kernel on named arguments; returns its outputs in order (`result`, then the
    /// derivatives), `f32` except for masks and integers.
    pub fn run(&self, args: &[(&str, Arg)], threads: usize) -> Result<Vec<Tensor>, FusedError> {
        let mut outputs = Vec::new();
        self.run_into(args, &mut outputs, threads)?;
        Ok(outputs)
    }

    /// [`Fused::run`] into `outputs`: a tensor there of its output's shape and kind (on the
    /// CPU, contiguous) is overwritten in place, any other is replaced by a new one, so calls
    /// repeated with the same vector allocate no outputs. The caller must not need the old
    /// values (nor those of tensors sharing their storage).
    pub fn run_into(
        &self,
        args: &[(&str, Arg)],
        outputs: &mut Vec<Tensor>,
        threads: usize,
    ) -> Result<(), FusedError> {
        let k = self.jit.kernel();
        let (sizes, inputs) = kernel_inputs(k, args, Device::Cpu)?;
        outputs.truncate(k.outputs.len());
        for (i, o) in k.outputs.iter().enumerate() {
            let shape: Vec<i64> = sizes[..o.level].iter().map(|&s| s as i64).collect();
            let kind = kind_of(k.node(o.node).elem);
            let fits = outputs.get(i).is_some_and(|t| {
                t.defined()
                    && t.device() == Device::Cpu
                    && t.kind() == kind
                    && t.size() == shape
                    && t.is_contiguous()
            });
            if !fits {
                let t = Tensor::f_empty(shape.as_slice(), (kind, Device::Cpu))?;
                match outputs.get_mut(i) {
                    Some(slot) => *slot = t,
                    None => outputs.push(t),
                }
            }
        }
        let slices: Vec<Slice> = inputs
            .iter()
            .zip(&k.inputs)
            .map(|(t, p)| slice(t, p.elem))
            .collect();
        let mut outs: Vec<SliceMut> = outputs
            .iter()
            .zip(&k.outputs)
            .map(|(t, o)| slice_mut(t, k.node(o.node).elem))
            .collect();
        self.jit.run(&sizes, &slices, &mut outs, threads)?;
        Ok(())
    }
}

/// Seeds the backward pass of the model that computed `output` with the gradient of a loss
/// with respect to it (`d_<param>` of a [`Fused::with_gradient`] kernel), times `scale`: the
/// parameters' gradients accumulate as `(scale · loss).backward()` would accumulate them.
pub fn seed_backward(output: &Tensor, grad: &Tensor, scale: f64) -> Result<(), FusedError> {
    let g = grad.f_to_kind(output.kind())?.f_mul_scalar(scale)?;
    output.f_mul(&g)?.f_sum(output.kind())?.f_backward()?;
    Ok(())
}

/// The elements of a contiguous CPU tensor of `elem`'s kind.
fn slice(t: &Tensor, elem: Elem) -> Slice<'_> {
    let n = t.numel();
    let p = t.data_ptr();
    // SAFETY: `t` is contiguous, on the CPU, of `elem`'s kind (converted by the caller), and
    // borrowed for the slice's lifetime. Bool tensors store one byte per element.
    unsafe {
        match elem {
            Elem::F32 => Slice::F32(std::slice::from_raw_parts(p as *const f32, n)),
            Elem::I32 => Slice::I32(std::slice::from_raw_parts(p as *const i32, n)),
            Elem::Bool => Slice::Bool(std::slice::from_raw_parts(p as *const u8, n)),
        }
    }
}

fn slice_mut(t: &Tensor, elem: Elem) -> SliceMut<'_> {
    let n = t.numel();
    let p = t.data_ptr();
    // SAFETY: as `slice`; the output tensors are fresh, or ones the caller of `run_into` gave
    // up (`is_contiguous`, of `elem`'s kind, checked there).
    unsafe {
        match elem {
            Elem::F32 => SliceMut::F32(std::slice::from_raw_parts_mut(p as *mut f32, n)),
            Elem::I32 => SliceMut::I32(std::slice::from_raw_parts_mut(p as *mut i32, n)),
            Elem::Bool => SliceMut::Bool(std::slice::from_raw_parts_mut(p as *mut u8, n)),
        }
    }
}
