//! What a kernel is run on: named tensors and numbers, and a loss closure's scope, where a
//! record's fields are the kernel inputs `name.field`.

use rlc_kernel::ir::Kernel;
use tch::{Device, Kind, Tensor};

/// An argument of a kernel, by its input's name.
#[derive(Debug)]
pub enum Arg {
    Tensor(Tensor),
    Number(f64),
}

impl Arg {
    /// The same argument, sharing the tensor's storage.
    pub fn shallow(&self) -> Arg {
        match self {
            Arg::Tensor(t) => Arg::Tensor(t.shallow_clone()),
            Arg::Number(x) => Arg::Number(*x),
        }
    }
}

impl From<Tensor> for Arg {
    fn from(t: Tensor) -> Self {
        Arg::Tensor(t)
    }
}

impl From<&Tensor> for Arg {
    fn from(t: &Tensor) -> Self {
        Arg::Tensor(t.shallow_clone())
    }
}

impl From<f64> for Arg {
    fn from(x: f64) -> Self {
        Arg::Number(x)
    }
}

/// A name a loss closure's body reads.
#[derive(Debug)]
pub enum Bound {
    Tensor(Tensor),
    Number(f64),
    /// A record whose fields are read as `name.field`.
    Record(Vec<(String, Tensor)>),
}

impl Bound {
    /// The same binding, sharing the tensors' storage.
    pub fn shallow(&self) -> Bound {
        match self {
            Bound::Tensor(t) => Bound::Tensor(t.shallow_clone()),
            Bound::Number(x) => Bound::Number(*x),
            Bound::Record(fields) => Bound::Record(
                fields
                    .iter()
                    .map(|(n, t)| (n.clone(), t.shallow_clone()))
                    .collect(),
            ),
        }
    }
}

/// The arguments `scope` gives kernel `k`: its tensors and numbers by name, and each record
/// field `k` reads as `name.field` (the fields it does not read are left out). `detach`: the
/// tensors without their autograd history.
pub fn scope_args(k: &Kernel, scope: &[(&str, Bound)], detach: bool) -> Vec<(String, Arg)> {
    let tensor = |t: &Tensor| {
        if detach {
            t.detach()
        } else {
            t.shallow_clone()
        }
    };
    let mut out = Vec::new();
    for (name, bound) in scope {
        match bound {
            Bound::Tensor(t) => out.push((name.to_string(), Arg::Tensor(tensor(t)))),
            Bound::Number(x) => out.push((name.to_string(), Arg::Number(*x))),
            Bound::Record(fields) => {
                for (f, t) in fields {
                    let full = format!("{name}.{f}");
                    if k.input_index(&full).is_some() {
                        out.push((full, Arg::Tensor(tensor(t))));
                    }
                }
            }
        }
    }
    out
}

/// The inputs of `k` in its order, from `args` by name (numbers as 0-d `f32` tensors on
/// `device`); `None` names the first input missing.
pub fn ordered(k: &Kernel, args: &[(&str, Arg)], device: Device) -> Result<Vec<Tensor>, String> {
    k.inputs
        .iter()
        .map(|p| match args.iter().find(|(n, _)| *n == p.name) {
            Some((_, Arg::Tensor(t))) => Ok(t.shallow_clone()),
            Some((_, Arg::Number(x))) => {
                Tensor::f_scalar_tensor(*x, (Kind::Float, device)).map_err(|e| e.to_string())
            }
            None => Err(format!("missing `{}`", p.name)),
        })
        .collect()
}

/// The size of each of `k`'s axes that `inputs` (its inputs, in order) give; an input with
/// another number of dimensions than its level, or two sizes of one axis, is an error; an axis
/// no input spans has size 1.
pub fn axis_sizes(k: &Kernel, inputs: &[Tensor]) -> Result<Vec<i64>, String> {
    let mut sizes: Vec<Option<i64>> = vec![None; k.axes.len()];
    for (p, t) in k.inputs.iter().zip(inputs) {
        let shape = t.size();
        if shape.len() != p.level {
            return Err(format!(
                "`{}` has {} dimensions, the kernel needs {}",
                p.name,
                shape.len(),
                p.level
            ));
        }
        for (i, &n) in shape.iter().enumerate() {
            match sizes[i] {
                Some(s) if s != n => {
                    return Err(format!(
                        "`{}` has {n} along `{}`, another input {s}",
                        p.name, k.axes[i]
                    ));
                }
                _ => sizes[i] = Some(n),
            }
        }
    }
    Ok(sizes.into_iter().map(|s| s.unwrap_or(1)).collect())
}
