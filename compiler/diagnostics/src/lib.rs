//! Diagnostics are plain data: a stable [`Code`], a severity, a message, labelled spans and help.
//!
//! Compiler passes build [`Diagnostic`] values and never format text for a terminal; rendering
//! (miette for people, JSON and SARIF for machines) happens at the edge, in [`render`]. This crate
//! is the only one that knows miette.

mod codes;
mod diagnostic;
mod files;
pub mod render;

pub use codes::{CODES, Code, CodeInfo};
pub use diagnostic::{Diagnostic, Edit, Fix, Label, Severity};
pub use files::{FileId, Files, LineCol, SourceFile, Span};
