//! Every example and std file parses without diagnostics.

use rlc_diagnostics::FileId;
use std::path::Path;

fn rl_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rl_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rl") {
            out.push(path);
        }
    }
}

#[test]
fn examples_and_std_parse_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rl_files(&root.join("examples"), &mut files);
    rl_files(&root.join("stdlib"), &mut files);
    files.sort();
    assert!(files.len() >= 4, "found only {files:?}");
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
