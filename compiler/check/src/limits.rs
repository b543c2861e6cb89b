//! The largest sizes the checker takes: beyond them a program is reported (E0313), not checked.
//!
//! Every count a program sets (a cluster's nodes and devices, an architecture's sizes, a parallel
//! degree, a batch) is at most [`MAX_SIZE`], and a cluster has at most [`MAX_DEVICES`] devices.
//! With those bounds the checker's products of two or three sizes fit in 64 bits; larger
//! products (an architecture's parameter count) saturate. No check does work or holds memory per
//! device: devices are described by ranges.

use crate::value::Val;
use rlc_diagnostics::{Code, Diagnostic, FileId, Span};

/// The largest count a program may set: 2³¹ − 1.
pub const MAX_SIZE: i64 = i32::MAX as i64;

/// The most devices a cluster may have (nodes × devices per node), so that every device has a
/// 32-bit rank: 2³¹ − 1.
pub const MAX_DEVICES: u64 = i32::MAX as u64;

/// How `v` is written when it is an integer larger than [`MAX_SIZE`] (a literal too large for
/// an integer is a whole float); `None` otherwise.
pub fn oversized(v: &Val) -> Option<String> {
    match v {
        Val::Int(Some(n)) if *n > MAX_SIZE => Some(n.to_string()),
        Val::Float(Some(f)) if f.fract() == 0.0 && *f > MAX_SIZE as f64 => Some(if *f < 9e15 {
            format!("{f}")
        } else {
            format!("about {f:e}")
        }),
        _ => None,
    }
}

/// E0313 for the count `what`, written `found`, at `span`.
pub fn too_large(what: &str, found: &str, file: FileId, span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::SizeOutOfRange,
        format!("`{what}` is {found}, more than the compiler can check"),
        file,
        span,
    )
    .primary_label(format!("at most {MAX_SIZE}"))
    .help(format!("a count is at most {MAX_SIZE} (2^31 - 1)"))
}

/// E0313 for the number `what` at `span` that overflowed to infinity (or is not a number).
pub fn not_finite(what: &str, file: FileId, span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::SizeOutOfRange,
        format!("`{what}` is not a finite number"),
        file,
        span,
    )
    .primary_label("overflows a 64-bit float")
    .help("a number is at most about 1.8e308")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_past_the_limit_are_oversized() {
        assert_eq!(oversized(&Val::Int(Some(MAX_SIZE))), None);
        assert_eq!(
            oversized(&Val::Int(Some(MAX_SIZE + 1))).as_deref(),
            Some("2147483648")
        );
        assert_eq!(
            oversized(&Val::Float(Some(1e23))).as_deref(),
            Some("about 1e23")
        );
        assert_eq!(oversized(&Val::Float(Some(2.5e9 + 0.5))), None);
        assert_eq!(oversized(&Val::Int(Some(-5))), None);
    }
}
