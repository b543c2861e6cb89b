//! `rlc check`: check files (each one the root of its program) and print every diagnostic.

use super::{OutputArgs, output, sources};
use rlc_diagnostics::Files;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(paths: &[PathBuf], args: &OutputArgs) -> Result<ExitCode, String> {
    let mut files = Files::new();
    let mut diagnostics = Vec::new();
    for path in sources::collect(paths)? {
        let text = sources::read(&path)?;
        let checked = rlc_check::check(
            &sources::FileLoader,
            &mut files,
            &sources::display_name(&path),
            text,
        );
        diagnostics.extend(checked.diagnostics);
    }
    // A file that several roots share (a package manifest, an imported module) is added once per
    // root: one of its diagnostics is reported once.
    let mut seen = std::collections::BTreeSet::new();
    diagnostics.retain(|d| {
        let p = d.primary();
        let name = files.get(p.file).name.clone();
        seen.insert((name, p.span.start, p.span.end, d.code, d.message.clone()))
    });
    Ok(output::emit(&mut diagnostics, &files, args))
}
