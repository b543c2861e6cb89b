//! Fused kernels on tch tensors: a `fn` lowered to the kernel IR (optionally with its
//! derivative), compiled by the Cranelift JIT, run on CPU tensors without copies when they
//! are already contiguous `f32`/`i32`/`bool`.
//!
//! ```ignore
//! let k = Fused::new(&checked.modules, "token_mean", &["loss", "m"], &[])?;
//! let out = k.run(&[("loss", (&loss).into()), ("m", (&mask).into())], 2)?;
//! ```

use super::reference::{Arg, Bound};
use rlc_check::modules::Modules;
use rlc_kernel::KernelError;
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel::lower::Scoped;
use rlc_kernel_exec::jit::{Jit, Slice, SliceMut};
use rlc_syntax::ast::Block;
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
        // Converted only where needed: each libtorch call costs as much as a small kernel.
        let kind = kind_of(p.elem);
        let ready = t.device() == device && t.kind() == kind && t.is_contiguous();
        let t = if ready {
            t
        } else {
            t.f_to_device(device)?.f_to_kind(kind)?.f_contiguous()?
        };
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

/// The kernel of `function` with the parameters in `given` as inputs, and with `wrt` non-empty
/// the derivatives of its scalar result as outputs `d_<name>` (what both back ends compile).
pub(super) fn fn_kernel(
    modules: &Modules,
    function: &str,
    given: &[&str],
    wrt: &[&str],
) -> Result<Kernel, FusedError> {
    let kernel = rlc_kernel::lower::lower_fn(modules, function, given)?;
    if wrt.is_empty() {
        return Ok(kernel);
    }
    Ok(rlc_kernel::grad::differentiate(&kernel, "result", wrt)?)
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
        Ok(Fused {
            jit: Jit::compile(&fn_kernel(modules, function, given, wrt)?)?,
        })
    }

    /// A loss closure's body (`update(…) { logp -> body }`) with its parameter `param` and the
    /// values it captures bound as `scope` says (the reference evaluator's pipeline scope: a
    /// record's fields read as `name.field`), and the derivative of its scalar value with
    /// respect to `param`: outputs `result` and `d_<param>`. Every tensor of `scope` must be on
    /// the CPU. A body the fused back end cannot lower or differentiate (a group reduction or a
    /// scan on the way to `param`, a 3-D tensor) is an error: the caller uses the reference
    /// evaluator with autograd then.
    pub fn closure(
        modules: &Modules,
        body: &Block,
        param: &str,
        scope: &[(&str, Bound)],
    ) -> Result<Fused, FusedError> {
        let mut scoped = Vec::with_capacity(scope.len());
        for (name, bound) in scope {
            let s = match bound {
                Bound::Tensor(t) => {
                    let (elem, level) = elem_level(name, t)?;
                    Scoped::Tensor { elem, level }
                }
                Bound::Number(_) => Scoped::Tensor {
                    elem: Elem::F32,
                    level: 0,
                },
                Bound::Record(fields) => Scoped::Record(
                    fields
                        .iter()
                        .map(|(f, t)| {
                            elem_level(f, t).map(|(elem, level)| (f.clone(), elem, level))
                        })
                        .collect::<Result<_, _>>()?,
                ),
            };
            scoped.push((*name, s));
        }
        let kernel = rlc_kernel::lower::lower_block(modules, "loss", body, &scoped)?;
        let kernel = rlc_kernel::grad::differentiate(&kernel, "result", &[param])?;
        Ok(Fused {
            jit: Jit::compile(&kernel)?,
        })
    }

    /// [`Fused::run`] on a scope of [`Fused::closure`]: a record's fields are the inputs
    /// `name.field`. Tensors are read detached (the kernel is not part of autograd's graph).
    pub fn run_scope(
        &self,
        scope: &[(&str, Bound)],
        threads: usize,
    ) -> Result<Vec<Tensor>, FusedError> {
        let mut names: Vec<String> = Vec::new();
        let mut values: Vec<Arg> = Vec::new();
        for (name, bound) in scope {
            match bound {
                Bound::Tensor(t) => {
                    names.push(name.to_string());
                    values.push(Arg::Tensor(t.detach()));
                }
                Bound::Number(x) => {
                    names.push(name.to_string());
                    values.push(Arg::Number(*x));
                }
                Bound::Record(fields) => {
                    for (f, t) in fields {
                        let full = format!("{name}.{f}");
                        // Only the fields the body reads are inputs.
                        if self.jit.kernel().input_index(&full).is_some() {
                            names.push(full);
                            values.push(Arg::Tensor(t.detach()));
                        }
                    }
                }
            }
        }
        let args: Vec<(&str, Arg)> = names.iter().map(String::as_str).zip(values).collect();
        self.run(&args, threads)
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

/// The kernel element type and level of a bound tensor; an error off the CPU or for a kind the
/// kernels do not read.
fn elem_level(name: &str, t: &Tensor) -> Result<(Elem, usize), FusedError> {
    if t.device() != Device::Cpu {
        return Err(FusedError::Input(format!("`{name}` is not on the CPU")));
    }
    let elem = match t.kind() {
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16 => Elem::F32,
        Kind::Int | Kind::Int64 | Kind::Int16 | Kind::Int8 | Kind::Uint8 => Elem::I32,
        Kind::Bool => Elem::Bool,
        k => return Err(FusedError::Input(format!("`{name}` is a {k:?} tensor"))),
    };
    Ok((elem, t.dim()))
}

/// A key for the kernel [`Fused::closure`] compiles for `scope`: each value's kind, number of
/// dimensions and device (a kernel compiled for one scope runs on any other with this key).
pub fn scope_key(scope: &[(&str, Bound)]) -> String {
    let tensor = |t: &Tensor| format!("{:?}{}{:?}", t.kind(), t.dim(), t.device());
    let parts: Vec<String> = scope
        .iter()
        .map(|(name, bound)| match bound {
            Bound::Tensor(t) => format!("{name}:{}", tensor(t)),
            Bound::Number(_) => format!("{name}:number"),
            Bound::Record(fields) => {
                let fs: Vec<String> = fields
                    .iter()
                    .map(|(f, t)| format!("{f}:{}", tensor(t)))
                    .collect();
                format!("{name}{{{}}}", fs.join(","))
            }
        })
        .collect();
    parts.join(";")
}

/// Seeds the backward pass of the model that computed `output` with the gradient of a loss
/// with respect to it (`d_<param>` of a [`Fused::closure`] kernel), times `scale`: the
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
