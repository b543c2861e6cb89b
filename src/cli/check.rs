//! `rlc check`: parse and check files, print every diagnostic.

use super::{OutputArgs, output, sources};
use rlc_diagnostics::Files;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(paths: &[PathBuf], args: &OutputArgs) -> Result<ExitCode, String> {
    let mut files = Files::new();
    let mut diagnostics = Vec::new();
    for path in sources::collect(paths)? {
        let text = sources::read(&path)?;
        let id = files.add(sources::display_name(&path), text);
        let parsed = rlc_syntax::parse(id, &files.get(id).text);
        diagnostics.extend(parsed.diagnostics);
    }
    Ok(output::emit(&mut diagnostics, &files, args))
}
