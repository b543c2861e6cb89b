//! Every example and std file parses without diagnostics.

mod common;

use rlc_diagnostics::FileId;

#[test]
fn examples_and_std_parse_cleanly() {
    let files = common::corpus();
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        let parsed = rlc_syntax::parse(FileId(0), &src);
        assert!(
            parsed.diagnostics.is_empty(),
            "{}: {:#?}",
            path.display(),
            parsed.diagnostics
        );
        assert!(
            !parsed.module.items.is_empty(),
            "{} has no items",
            path.display()
        );
    }
}
