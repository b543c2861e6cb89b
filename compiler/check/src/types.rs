//! Every expression's type as the checker found it, as a value: the [`TypeTable`] maps an
//! expression's id (its file and span) to its [`Type`]. Passes after the checker (plan
//! lowering) read these values; tools (the LSP's hover, `rlc doc`) display them. Nothing parses
//! a type back from its text.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rlc_diagnostics::FileId;

use crate::value::{Dim, TensorTy};

/// An expression's id: its file and the byte span of its text.
pub type ExprId = (FileId, u32, u32);

/// The type of every checked expression, by id (the last type found for an expression wins).
pub type TypeTable = BTreeMap<ExprId, Type>;

/// What the checker knows of an expression's value: its type and, for scalars, the constant
/// when it is one.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    Int(Option<i64>),
    Float(Option<f64>),
    Bool(Option<bool>),
    Str(Option<String>),
    Tensor(TensorTy),
    Record(Arc<RecordType>),
    /// A value that is not data — a model, a dataset, a cluster, a batch of prompts… — as the
    /// hover describes it.
    Item(Arc<str>),
}

/// A record's name and its fields' types, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordType {
    pub name: String,
    pub fields: Vec<(String, Type)>,
}

impl Type {
    /// The known integer constant (`i64 = 8`).
    pub fn const_int(&self) -> Option<i64> {
        match self {
            Type::Int(Some(n)) => Some(*n),
            _ => None,
        }
    }

    /// The type without the constant a scalar may know (`i64`, not `i64 = 8`); a record by its
    /// fields, like [`fmt::Display`].
    pub fn without_value(&self) -> String {
        match self {
            Type::Int(_) => Type::Int(None).to_string(),
            Type::Float(_) => Type::Float(None).to_string(),
            Type::Bool(_) => Type::Bool(None).to_string(),
            Type::Str(_) => Type::Str(None).to_string(),
            other => other.to_string(),
        }
    }

    /// A known scalar constant's value as text (`8`, `0.5`, `true`, `"a"`).
    pub fn const_text(&self) -> Option<String> {
        match self {
            Type::Int(Some(n)) => Some(n.to_string()),
            Type::Float(Some(x)) => Some(x.to_string()),
            Type::Bool(Some(b)) => Some(b.to_string()),
            Type::Str(Some(s)) => Some(format!("{s:?}")),
            _ => None,
        }
    }
}

impl fmt::Display for Type {
    /// The type as hover text and messages write it: `f32[B, T]`, `i64 = 8`,
    /// `Rollout { mask: bool[16, 8], … }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Int(Some(i)) => write!(f, "i64 = {i}"),
            Type::Int(None) => f.write_str("i64"),
            Type::Float(Some(x)) => write!(f, "f32 = {x}"),
            Type::Float(None) => f.write_str("f32"),
            Type::Bool(Some(b)) => write!(f, "bool = {b}"),
            Type::Bool(None) => f.write_str("bool"),
            Type::Str(Some(s)) => write!(f, "str = {s:?}"),
            Type::Str(None) => f.write_str("str"),
            Type::Tensor(t) => f.write_str(&tensor_text(t)),
            Type::Record(r) => {
                write!(f, "{} {{ ", r.name)?;
                for (i, (name, ty)) in r.fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{name}: {ty}")?;
                }
                f.write_str(" }")
            }
            Type::Item(text) => f.write_str(text),
        }
    }
}

/// `t.to_string()` without the formatting machinery (hover text of every tensor).
pub(crate) fn tensor_text(t: &TensorTy) -> String {
    let mut s = String::with_capacity(8 + 4 * t.dims.len());
    s.push_str(t.dtype.as_str());
    for (i, d) in t.dims.iter().enumerate() {
        s.push_str(if i == 0 { "[" } else { ", " });
        match d {
            Dim::Sym(name) => s.push_str(name),
            Dim::Size(n) => s.push_str(&n.to_string()),
        }
    }
    if !t.dims.is_empty() {
        s.push(']');
    }
    s
}
