//! Finding and reading the `.rl` files named on the command line.

use std::path::{Path, PathBuf};

/// Expands files and directories to the `.rl` files they name, sorted and without duplicates.
/// A named file is taken whatever its extension; directories contribute their `.rl` files,
/// recursively, skipping hidden directories and `target/`.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        if meta.is_dir() {
            walk(path, &mut out)?;
        } else {
            out.push(path.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read directory `{}`: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read directory `{}`: {e}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                walk(&path, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "rl") {
            out.push(path);
        }
    }
    Ok(())
}

/// Reads a source file as UTF-8.
pub fn read(path: &Path) -> Result<String, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "`{}` is not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// The name a file is shown under in diagnostics: the path as the user gave it, with `/`.
pub fn display_name(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}

/// Serves imported modules from the file system (paths relative to the working directory).
pub struct FileLoader;

impl rlc_check::SourceLoader for FileLoader {
    fn read(&self, path: &str) -> Result<String, String> {
        let bytes = std::fs::read(path).map_err(|e| e.kind().to_string())?;
        String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
    }

    fn find_manifest(&self, path: &str) -> Option<String> {
        find_manifest(path)
    }
}

/// The `rl.toml` nearest to source `path`: in its folder or any folder above, up to the file
/// system's root (like `Cargo.toml`), named relative to `path`'s folder as the checker joins
/// paths (`../rl.toml` for `main.rl` under the package's `src/`).
pub fn find_manifest(path: &str) -> Option<String> {
    let manifest = rlc_check::packages::MANIFEST;
    let dir = Path::new(path).parent().unwrap_or(Path::new(""));
    let start = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let absolute = std::fs::canonicalize(start).ok()?;
    for (ups, folder) in absolute.ancestors().enumerate() {
        if folder.join(manifest).is_file() {
            let rel = format!("{}{manifest}", "../".repeat(ups));
            return Some(rlc_check::modules::join_relative(path, &rel));
        }
    }
    None
}
