//! Caught panics as text: a rank thread's or a foreign library's panic becomes an error message.
//! At the bottom of the runtime's layers, so that `collectives` and `exec` both use it.

/// A caught panic's payload as text.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use super::panic_message;

    #[test]
    fn payloads_of_panics_read_as_text() {
        let literal = std::panic::catch_unwind(|| panic!("a literal")).unwrap_err();
        assert_eq!(panic_message(&literal), "a literal");
        let formatted = std::panic::catch_unwind(|| panic!("rank {}", 3)).unwrap_err();
        assert_eq!(panic_message(&formatted), "rank 3");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(&other), "a panic");
    }
}
