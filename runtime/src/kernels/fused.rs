//! Fused kernels on tch tensors: a `fn` lowered to the kernel IR (optionally with its
//! derivative), compiled by the Cranelift JIT, run on CPU tensors without copies when they
//! are already contiguous `f32`/`i32`/`bool`.
//!
//! ```ignore
//! let k = Fused::new(&checked.modules, "token_mean", &["loss", "m"], &[])?;
//! let out = k.run(&[("loss", (&loss).into()), ("m", (&mask).into())], 2)?;
//! ```

use super::reference::Arg;
use rlc_check::modules::Modules;
use rlc_kernel::KernelError;
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel::jit::{Jit, Slice, SliceMut};
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
    let mut sizes: Vec<Option<i64>> = vec![None; k.axes.len()];
    let mut inputs: Vec<Tensor> = Vec::with_capacity(k.inputs.len());
    for p in &k.inputs {
        let arg = args
            .iter()
            .find(|(n, _)| *n == p.name)
            .map(|(_, a)| a)
            .ok_or_else(|| FusedError::Input(format!("missing `{}`", p.name)))?;
        let t = match arg {
            Arg::Tensor(t) => t.shallow_clone(),
            Arg::Number(x) => Tensor::f_scalar_tensor(*x, (Kind::Float, device))?,
        };
        let shape = t.size();
        if shape.len() != p.level {
            return Err(FusedError::Input(format!(
                "`{}` has {} dimensions, the kernel needs {}",
                p.name,
                shape.len(),
                p.level
            )));
        }
        for (i, &n) in shape.iter().enumerate() {
            match sizes[i] {
                Some(s) if s != n => {
                    return Err(FusedError::Input(format!(
                        "`{}` has {n} along `{}`, another input {s}",
                        p.name, k.axes[i]
                    )));
                }
                _ => sizes[i] = Some(n),
            }
        }
        let t = t
            .f_to_device(device)?
            .f_to_kind(kind_of(p.elem))?
            .f_contiguous()?;
        inputs.push(t);
    }
    let sizes = sizes.into_iter().map(|s| s.unwrap_or(1) as usize).collect();
    Ok((sizes, inputs))
}

pub(super) fn kind_of(elem: Elem) -> Kind {
    match elem {
        Elem::F32 => Kind::Float,
        Elem::I32 => Kind::Int,
        Elem::Bool => Kind::Bool,
    }
}

impl Fused {
    /// `function` with the parameters in `given` as inputs (the others take their defaults);
    /// with `wrt` non-empty, also the derivative of its (scalar) result with respect to each
    /// of those inputs, as outputs `d_<name>`.
    pub fn new(
        modules: &Modules,
        function: &str,
        given: &[&str],
        wrt: &[&str],
    ) -> Result<Fused, FusedError> {
        let mut kernel = rlc_kernel::lower::lower_fn(modules, function, given)?;
        if !wrt.is_empty() {
            kernel = rlc_kernel::grad::differentiate(&kernel, "result", wrt)?;
        }
        Ok(Fused {
            jit: Jit::compile(&kernel)?,
        })
    }

    pub fn jit(&self) -> &Jit {
        &self.jit
    }

    /// Runs the kernel on named arguments; returns its outputs in order (`result`, then the
    /// derivatives), `f32` except for masks and integers.
    pub fn run(&self, args: &[(&str, Arg)], threads: usize) -> Result<Vec<Tensor>, FusedError> {
        let k = self.jit.kernel();
        let (sizes, inputs) = kernel_inputs(k, args, Device::Cpu)?;
        let outputs: Vec<Tensor> = k
            .outputs
            .iter()
            .map(|o| {
                let shape: Vec<i64> = sizes[..o.level].iter().map(|&s| s as i64).collect();
                Tensor::f_empty(
                    shape.as_slice(),
                    (kind_of(k.node(o.node).elem), Device::Cpu),
                )
            })
            .collect::<Result<_, _>>()?;
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
        Ok(outputs)
    }
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
    // SAFETY: as `slice`; the output tensors are freshly allocated and not shared.
    unsafe {
        match elem {
            Elem::F32 => SliceMut::F32(std::slice::from_raw_parts_mut(p as *mut f32, n)),
            Elem::I32 => SliceMut::I32(std::slice::from_raw_parts_mut(p as *mut i32, n)),
            Elem::Bool => SliceMut::Bool(std::slice::from_raw_parts_mut(p as *mut u8, n)),
        }
    }
}
