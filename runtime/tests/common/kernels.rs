//! Kernels as a plan carries them, for the tests: a checked `fn` lowered to the kernel IR (with
//! derivatives where asked) and compiled, as `rlc build` and the runtime do between them.

use rlc_check::body::Bodies;
use rlc_kernel::ir::Kernel;
use rlc_runtime::kernels::fused::{Fused, FusedError};
use rlc_runtime::kernels::fused_cuda::FusedCuda;

/// `function` with the parameters in `given` as inputs (the others at their defaults) and, with
/// `wrt` non-empty, the derivatives of its scalar result as outputs `d_<name>`.
pub fn kernel(
    bodies: &Bodies,
    function: &str,
    given: &[&str],
    wrt: &[&str],
) -> Result<Kernel, FusedError> {
    let k = rlc_kernel::lower::lower_fn(bodies, function, given)?;
    if wrt.is_empty() {
        return Ok(k);
    }
    Ok(rlc_kernel::grad::differentiate(&k, "result", wrt)?)
}

/// [`kernel`] compiled by the JIT.
pub fn fused(
    bodies: &Bodies,
    function: &str,
    given: &[&str],
    wrt: &[&str],
) -> Result<Fused, FusedError> {
    Fused::compile(&kernel(bodies, function, given, wrt)?)
}

/// [`kernel`] compiled for CUDA device `ordinal`.
#[allow(dead_code)]
pub fn fused_cuda(
    bodies: &Bodies,
    function: &str,
    given: &[&str],
    wrt: &[&str],
    ordinal: usize,
) -> Result<FusedCuda, FusedError> {
    FusedCuda::compile(&kernel(bodies, function, given, wrt)?, ordinal)
}

/// The kernel plan lowering makes of a loss closure's `body` (of `checked`'s root module) for a
/// scope of these values (each tensor's element type and number of dimensions; a record's
/// fields as `name.field`).
pub fn closure_kernel(
    checked: &rlc_check::Checked,
    body: &rlc_syntax::ast::Block,
    scope: &[(&str, rlc_runtime::kernels::args::Bound)],
) -> Result<Kernel, FusedError> {
    use rlc_kernel::lower::Scoped;
    use rlc_runtime::kernels::args::Bound;
    let elem_level = |t: &tch::Tensor| {
        let elem = match t.kind() {
            tch::Kind::Bool => rlc_kernel::ir::Elem::Bool,
            tch::Kind::Float | tch::Kind::Double | tch::Kind::Half | tch::Kind::BFloat16 => {
                rlc_kernel::ir::Elem::F32
            }
            _ => rlc_kernel::ir::Elem::I32,
        };
        (elem, t.dim())
    };
    let scoped: Vec<(&str, Scoped)> = scope
        .iter()
        .map(|(name, bound)| {
            let s = match bound {
                Bound::Tensor(t) => {
                    let (elem, level) = elem_level(t);
                    Scoped::Tensor { elem, level }
                }
                Bound::Number(_) => Scoped::Tensor {
                    elem: rlc_kernel::ir::Elem::F32,
                    level: 0,
                },
                Bound::Record(fields) => Scoped::Record(
                    fields
                        .iter()
                        .map(|(f, t)| {
                            let (elem, level) = elem_level(t);
                            (f.clone(), elem, level)
                        })
                        .collect(),
                ),
            };
            (*name, s)
        })
        .collect();
    let names: Vec<&str> = scope.iter().map(|(name, _)| *name).collect();
    let body = rlc_check::body::block_in(&checked.modules, &checked.types, 0, &names, body);
    Ok(rlc_kernel::lower::lower_block(
        &checked.bodies,
        0,
        "loss",
        &body,
        &scoped,
        &[],
    )?)
}
