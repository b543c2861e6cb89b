//! The type table holds every expression's type as a value (#22): constants, tensors with their
//! dimensions and records with their fields' types, read without parsing any text; their
//! display is the hover's text.

use rlc_check::types::Type;
use rlc_check::value::{DType, Dim};
use rlc_diagnostics::Files;

struct NoFiles;

impl rlc_check::SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

const PROGRAM: &str = "\
pub fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

let steps = 4 * 2
let rate = 0.5
";

/// The type of the expression whose text is `text` (its first occurrence).
fn type_of(text: &str) -> Type {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "main.rl", PROGRAM.to_string());
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    let start = PROGRAM.find(text).expect("the text is in the program") as u32;
    let end = start + text.len() as u32;
    checked
        .types
        .iter()
        .find(|((_, s, e), _)| (*s, *e) == (start, end))
        .map(|(_, ty)| ty.clone())
        .unwrap_or_else(|| panic!("no type for `{text}`"))
}

#[test]
fn constants_are_values() {
    assert_eq!(type_of("4 * 2"), Type::Int(Some(8)));
    assert_eq!(type_of("4 * 2").const_int(), Some(8));
    assert_eq!(type_of("0.5"), Type::Float(Some(0.5)));
    assert_eq!(type_of("0.5").const_text().as_deref(), Some("0.5"));
    assert_eq!(type_of("4 * 2").to_string(), "i64 = 8");
    assert_eq!(type_of("4 * 2").without_value(), "i64");
}

#[test]
fn tensors_carry_their_element_type_and_dimensions() {
    let Type::Tensor(t) = type_of("resp == target") else {
        panic!("a comparison of tensors is a tensor");
    };
    assert_eq!(t.dtype, DType::Bool);
    assert_eq!(t.dims, vec![Dim::Sym("B".into()), Dim::Sym("T".into())]);
    let mean = type_of("mean(f32(resp == target), over: T, mask: mask)");
    assert_eq!(mean.to_string(), "f32[B]");
}
