//! The programs the syntax tests run over: every example and std file.

use std::path::{Path, PathBuf};

fn rl_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rl_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rl") {
            out.push(path);
        }
    }
}

/// Every `.rl` file under `examples/` and `stdlib/`, sorted.
pub fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rl_files(&root.join("examples"), &mut files);
    rl_files(&root.join("stdlib"), &mut files);
    files.sort();
    assert!(files.len() >= 4, "found only {files:?}");
    files
}
