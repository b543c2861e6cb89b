//! The parser generated from `grammar/rl.pest`.

#[derive(pest_derive::Parser)]
#[grammar = "../../grammar/rl.pest"]
pub(crate) struct RlParser;
