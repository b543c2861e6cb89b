//! `rlc fmt`: rewrite files in the canonical style, or with `--check` list those that differ.
//! A file with syntax errors is never rewritten.

use super::{OutputArgs, output, sources};
use rlc_diagnostics::{FileId, Files};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(paths: &[PathBuf], check: bool, args: &OutputArgs) -> Result<ExitCode, String> {
    if paths.len() == 1 && paths[0] == Path::new("-") {
        return stdin_to_stdout(args);
    }
    let mut files = Files::new();
    let mut diagnostics = Vec::new();
    let mut unformatted = Vec::new();
    for path in sources::collect(paths)? {
        let text = sources::read(&path)?;
        let id = files.add(sources::display_name(&path), text);
        match rlc_syntax::format::format_source(id, &files.get(id).text) {
            Err(diags) => diagnostics.extend(diags),
            Ok(formatted) if formatted == files.get(id).text => {}
            Ok(_) if check => unformatted.push(sources::display_name(&path)),
            Ok(formatted) => write_atomically(&path, &formatted)?,
        }
    }
    let code = output::emit(&mut diagnostics, &files, args);
    if !unformatted.is_empty() {
        for name in &unformatted {
            println!("{name}: not formatted");
        }
        eprintln!(
            "{} file(s) would be reformatted; run `rlc fmt` on them",
            unformatted.len()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(code)
}

fn stdin_to_stdout(args: &OutputArgs) -> Result<ExitCode, String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read standard input: {e}"))?;
    match rlc_syntax::format::format_source(FileId(0), &text) {
        Ok(formatted) => {
            std::io::stdout()
                .write_all(formatted.as_bytes())
                .map_err(|e| format!("cannot write: {e}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(mut diags) => {
            let mut files = Files::new();
            files.add("<stdin>", text);
            Ok(output::emit(&mut diags, &files, args))
        }
    }
}

/// Writes through a temporary file in the same directory and renames it over the original, so
/// an interrupted run never leaves a half-written source file.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.rlcfmt.tmp"));
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write `{}`: {e}", tmp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot replace `{}`: {e}", path.display()))
}
