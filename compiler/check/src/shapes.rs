//! Shape and element-type rules: broadcasting of element-wise operations, assignment to a
//! declared type, and unification of a signature's dimension symbols with a call's arguments.

use crate::value::{DType, Dim, TensorTy};
use rlc_diagnostics::Code;
use rlc_syntax::ast::BinaryOp;
use std::collections::BTreeMap;

/// Why two types do not fit: a label text, a help line, and whether it is the element type
/// (E0302) rather than the shape (E0301).
#[derive(Debug)]
pub struct Mismatch {
    pub text: String,
    pub help: String,
    pub dtype: bool,
}

impl Mismatch {
    /// The diagnostic code it is reported with: E0302 for the element type, else E0301.
    pub fn code(&self) -> Code {
        if self.dtype {
            Code::DtypeMismatch
        } else {
            Code::ShapeMismatch
        }
    }
}

fn shape_err(text: String, help: &str) -> Mismatch {
    Mismatch {
        text,
        help: help.to_string(),
        dtype: false,
    }
}

fn dtype_err(text: String, help: &str) -> Mismatch {
    Mismatch {
        text,
        help: help.to_string(),
        dtype: true,
    }
}

const BROADCAST_HELP: &str = "element-wise operations need equal shapes; a scalar broadcasts to any shape, and `[B]` along the leading axis of `[B, T]`";

/// The shape of an element-wise combination of `a` and `b`.
pub fn broadcast(a: &TensorTy, b: &TensorTy) -> Result<Vec<Dim>, Mismatch> {
    let (short, long) = if a.dims.len() <= b.dims.len() {
        (a, b)
    } else {
        (b, a)
    };
    let fits = short.dims.is_empty()
        || short.dims == long.dims
        || (short.dims.len() == 1 && long.dims.len() == 2 && short.dims[0] == long.dims[0]);
    if fits {
        Ok(long.dims.clone())
    } else {
        Err(shape_err(
            format!("`{a}` and `{b}` do not broadcast"),
            BROADCAST_HELP,
        ))
    }
}

/// Element type and shape of `l op r`. A literal number takes the other side's element type.
pub fn binary(
    op: BinaryOp,
    l: &TensorTy,
    r: &TensorTy,
    l_literal: bool,
    r_literal: bool,
) -> Result<TensorTy, Mismatch> {
    let dims = broadcast(l, r)?;
    let numeric = |t: &TensorTy| t.dtype != DType::Bool;
    let dtype = match op {
        BinaryOp::And | BinaryOp::Or => {
            if l.dtype != DType::Bool || r.dtype != DType::Bool {
                return Err(dtype_err(
                    format!("`{}` needs booleans, found `{l}` and `{r}`", op.as_str()),
                    "compare first, e.g. `x > 0.0`",
                ));
            }
            DType::Bool
        }
        _ if numeric(l)
            && numeric(r)
            && !l_literal
            && !r_literal
            && l.dtype.is_float() != r.dtype.is_float() =>
        {
            return Err(dtype_err(
                format!(
                    "`{l}` {} `{r}` mixes floating-point and integer values",
                    op.as_str()
                ),
                "convert one side, e.g. `f32(tokens)`",
            ));
        }
        BinaryOp::Eq | BinaryOp::Ne => {
            if numeric(l) != numeric(r) {
                return Err(dtype_err(
                    format!("cannot compare `{l}` with `{r}`"),
                    "compare values of one kind",
                ));
            }
            DType::Bool
        }
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            if !numeric(l) || !numeric(r) {
                return Err(dtype_err(
                    format!("cannot order `{l}` and `{r}`"),
                    "order numbers, not masks",
                ));
            }
            DType::Bool
        }
        _ => {
            if !numeric(l) || !numeric(r) {
                return Err(dtype_err(
                    format!("arithmetic on a mask: `{l}` {} `{r}`", op.as_str()),
                    "convert the mask to numbers with `f32(mask)`, or choose with `where(mask, x, 0.0)`",
                ));
            }
            arithmetic_dtype(l, r, l_literal, r_literal)
        }
    };
    Ok(TensorTy { dtype, dims })
}

fn arithmetic_dtype(l: &TensorTy, r: &TensorTy, l_literal: bool, r_literal: bool) -> DType {
    match (l_literal, r_literal) {
        (true, false) if !(l.dtype.is_float() && r.dtype.is_int()) => r.dtype,
        (false, true) if !(r.dtype.is_float() && l.dtype.is_int()) => l.dtype,
        _ if l.dtype == r.dtype => l.dtype,
        _ if l.dtype.is_float() || r.dtype.is_float() => DType::F32,
        _ => DType::I64,
    }
}

/// Whether a value of type `found` may stand where `want` is declared.
pub fn assignable(want: &TensorTy, found: &TensorTy) -> Result<(), Mismatch> {
    let dtype_ok = want.dtype == found.dtype
        || (want.dtype.is_float() && found.dtype.is_float())
        || (want.dtype.is_int() && found.dtype.is_int());
    if !dtype_ok {
        return Err(dtype_err(
            format!("`{found}` where `{want}` is expected"),
            "convert with a cast: `f32(x)`, `i32(x)`, `bool(x)`",
        ));
    }
    if want.dims != found.dims {
        return Err(shape_err(
            format!("shape `{found}` where `{want}` is expected"),
            BROADCAST_HELP,
        ));
    }
    Ok(())
}

/// Binds the dimension symbols of a signature (`B`, `T`) to the dimensions of a call's
/// arguments, remembering which argument fixed each.
#[derive(Debug, Default)]
pub struct Unifier {
    bound: BTreeMap<String, (Dim, String)>,
}

impl Unifier {
    pub fn unify(
        &mut self,
        param: &str,
        want: &TensorTy,
        found: &TensorTy,
        literal: bool,
    ) -> Result<(), Mismatch> {
        let dtype_ok = want.dtype == found.dtype
            || (want.dtype.is_float() && (found.dtype.is_float() || literal))
            || (want.dtype.is_int() && found.dtype.is_int());
        if !dtype_ok {
            return Err(dtype_err(
                format!("`{found}` where `{want}` is expected"),
                "convert with a cast: `f32(x)`, `i32(x)`, `bool(x)`",
            ));
        }
        if want.dims.len() != found.dims.len() {
            return Err(shape_err(
                format!(
                    "{} dimension{} where {} {} expected",
                    found.dims.len(),
                    if found.dims.len() == 1 { "" } else { "s" },
                    want.dims.len(),
                    if want.dims.len() == 1 { "is" } else { "are" }
                ),
                "pass a tensor of the parameter's shape",
            ));
        }
        for (w, f) in want.dims.iter().zip(&found.dims) {
            match w {
                Dim::Sym(s) => match self.bound.get(s) {
                    Some((d, from)) if d != f => {
                        return Err(shape_err(
                            format!("`{s}` is {f} here but {d} from argument `{from}`"),
                            "arguments that share a dimension name must agree on its size",
                        ));
                    }
                    Some(_) => {}
                    None => {
                        self.bound.insert(s.clone(), (f.clone(), param.to_string()));
                    }
                },
                Dim::Size(n) if *f != Dim::Size(*n) => {
                    return Err(shape_err(
                        format!("dimension {f} where the parameter fixes {n}"),
                        "pass a tensor of the parameter's shape",
                    ));
                }
                Dim::Size(_) => {}
            }
        }
        Ok(())
    }

    /// `t` with the bound symbols replaced.
    pub fn apply(&self, t: &TensorTy) -> TensorTy {
        let dims = t
            .dims
            .iter()
            .map(|d| match d {
                Dim::Sym(s) => self
                    .bound
                    .get(s)
                    .map_or_else(|| d.clone(), |(b, _)| b.clone()),
                other => other.clone(),
            })
            .collect();
        TensorTy {
            dtype: t.dtype,
            dims,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dtype: DType, dims: &[&str]) -> TensorTy {
        TensorTy {
            dtype,
            dims: dims
                .iter()
                .map(|d| {
                    d.parse()
                        .map_or_else(|_| Dim::Sym(d.to_string()), Dim::Size)
                })
                .collect(),
        }
    }

    #[test]
    fn broadcasting_rules() {
        let bt = t(DType::F32, &["B", "T"]);
        assert!(broadcast(&bt, &t(DType::F32, &["B"])).is_ok());
        assert!(broadcast(&bt, &t(DType::F32, &[])).is_ok());
        assert!(broadcast(&bt, &t(DType::F32, &["T"])).is_err());
        assert!(broadcast(&bt, &t(DType::F32, &["T", "B"])).is_err());
    }

    #[test]
    fn arithmetic_on_a_mask_is_a_dtype_error() {
        let err = binary(
            BinaryOp::Mul,
            &t(DType::F32, &["B"]),
            &t(DType::Bool, &["B"]),
            false,
            false,
        )
        .unwrap_err();
        assert!(err.dtype);
    }

    #[test]
    fn unifier_names_the_argument_that_fixed_a_dimension() {
        let mut u = Unifier::default();
        u.unify(
            "resp",
            &t(DType::I32, &["B", "T"]),
            &t(DType::I32, &["128", "8"]),
            false,
        )
        .unwrap();
        let err = u
            .unify(
                "mask",
                &t(DType::Bool, &["B", "T"]),
                &t(DType::Bool, &["128", "4"]),
                false,
            )
            .unwrap_err();
        assert_eq!(err.text, "`T` is 4 here but 8 from argument `resp`");
        assert_eq!(u.apply(&t(DType::F32, &["B"])), t(DType::F32, &["128"]));
    }
}
