//! Values of the reference evaluator: tensors labelled with the dimension names of the scope
//! they live in, weak number literals, and the handles names can stand for (a fn, a module, a
//! scan position). Also the one broadcasting rule of the language.

use super::error::{EvalError, Result};
use tch::{Device, Kind, Tensor};

/// A tensor whose axes carry dimension names (`["B", "T"]`), in the naming of the `fn` that
/// holds it. A 0-d tensor has no names.
#[derive(Debug)]
pub struct Named {
    pub tensor: Tensor,
    pub dims: Vec<String>,
}

impl Clone for Named {
    fn clone(&self) -> Self {
        Named {
            tensor: self.tensor.shallow_clone(),
            dims: self.dims.clone(),
        }
    }
}

impl Named {
    pub fn new(tensor: Tensor, dims: Vec<String>) -> Self {
        Named { tensor, dims }
    }

    pub fn scalar(tensor: Tensor) -> Self {
        Named {
            tensor,
            dims: Vec::new(),
        }
    }

    pub fn kind(&self) -> Result<Kind> {
        Ok(self.tensor.f_kind()?)
    }

    /// The position of axis `axis`.
    pub fn axis(&self, axis: &str, function: &str) -> Result<usize> {
        self.dims
            .iter()
            .position(|d| d == axis)
            .ok_or_else(|| EvalError::UnknownAxis {
                function: function.to_string(),
                axis: axis.to_string(),
                dims: self.dims.join(", "),
            })
    }
}

/// What an expression evaluates to.
#[derive(Debug, Clone)]
pub enum Value {
    /// A number literal, or arithmetic on literals and scalar parameters: it takes the element
    /// type of the tensor it meets.
    Number(f64),
    Tensor(Named),
    /// The position `t` of a scan over `axis` (only indexing uses it).
    Index {
        axis: String,
        pos: i64,
    },
    /// A module bound by `import std.algo`.
    Module(usize),
    /// Item `index` (a `fn`) of module `module`.
    Fn {
        module: usize,
        index: usize,
    },
    /// A record bound by the caller of [`super::Evaluator::eval`] (a rollout): `r.field` reads
    /// a field.
    Record(std::rc::Rc<Vec<(String, Named)>>),
}

pub fn is_float(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Half | Kind::Float | Kind::Double | Kind::BFloat16
    )
}

pub fn is_int(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Uint8 | Kind::Int8 | Kind::Int16 | Kind::Int | Kind::Int64
    )
}

/// Where new tensors go and which float type literals and casts take.
#[derive(Debug, Clone, Copy)]
pub struct Numeric {
    pub float: Kind,
    pub device: Device,
}

impl Numeric {
    /// A number as a 0-d tensor that fits next to a tensor of kind `like`: the same float type,
    /// the same integer type for an integral number, else the evaluator's float type.
    pub fn literal(&self, x: f64, like: Option<(Kind, Device)>) -> Result<Named> {
        let (kind, device) = match like {
            Some((k, d)) if is_float(k) => (k, d),
            Some((k, d)) if is_int(k) && x.fract() == 0.0 => (k, d),
            Some((_, d)) => (self.float, d),
            None => (self.float, self.device),
        };
        Ok(Named::scalar(Tensor::f_scalar_tensor(x, (kind, device))?))
    }

    pub fn boolean(&self, b: bool) -> Result<Named> {
        Ok(Named::scalar(Tensor::f_scalar_tensor(
            i64::from(b),
            (Kind::Bool, self.device),
        )?))
    }
}

/// Brings tensors to one shape by the language's rule: equal dimensions, a 0-d tensor against
/// anything, and a tensor whose dimensions are a prefix of the others' (`[B]` against
/// `[B, T]`), which gets trailing unit axes so that it repeats along the missing ones.
pub fn align(parts: &[&Named], function: &str) -> Result<(Vec<Tensor>, Vec<String>)> {
    let target = parts
        .iter()
        .map(|p| &p.dims)
        .max_by_key(|d| d.len())
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        if p.dims.is_empty() || p.dims == target {
            out.push(p.tensor.shallow_clone());
        } else if target.starts_with(&p.dims) {
            let mut t = p.tensor.shallow_clone();
            for _ in p.dims.len()..target.len() {
                t = t.f_unsqueeze(-1)?;
            }
            out.push(t);
        } else {
            let shapes: Vec<String> = parts
                .iter()
                .map(|p| format!("[{}]", p.dims.join(", ")))
                .collect();
            return Err(EvalError::ShapeMismatch {
                function: function.to_string(),
                detail: format!(
                    "{} do not broadcast (only a scalar, or `[B]` along the leading axis of `[B, T]`)",
                    shapes.join(" and ")
                ),
            });
        }
    }
    Ok((out, target))
}
