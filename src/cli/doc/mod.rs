//! `rlc doc`: the documentation of a program's modules (and of `std`) from their `//!` and
//! `///` comments, signatures and checked types, as static HTML (a page per module, an index,
//! cross-links, a search box over a generated index; no external assets) or Markdown (a file
//! per module and an index).
//!
//! Each file named is checked as the root of its program, as `rlc check` does, with the same
//! diagnostics: a program with errors is not documented (exit 1). The modules documented are
//! the roots and the user modules they import; `--std` adds the standard library. The output
//! is a function of the sources alone (no dates, no absolute paths but those named): the same
//! input gives the same bytes, so that docs/std/ can be checked for drift.

mod html;
mod markdown;
mod model;

use super::{ColorChoice, MessageFormat, OutputArgs, output, sources};
use rlc_check::Checked;
use rlc_diagnostics::{Diagnostic, Files};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DocFormat {
    /// Static pages with cross-links and a search box (index.html).
    Html,
    /// A Markdown file per module and an index (README.md).
    Markdown,
}

#[derive(Debug, Clone, clap::Args)]
pub struct DocArgs {
    /// Files or directories whose modules (and the user modules they import) to document.
    #[arg(value_name = "FILE|DIR", required_unless_present = "std")]
    pub paths: Vec<PathBuf>,
    /// Document the standard library (alone, or with the modules of the files named).
    #[arg(long)]
    pub std: bool,
    /// The folder to write the pages into (created if missing; files of the same names are
    /// replaced, others left alone).
    #[arg(short = 'o', long, value_name = "DIR", default_value = "target/rldoc")]
    pub out: PathBuf,
    /// `html` (pages with search) or `markdown`.
    #[arg(long, value_enum, default_value_t = DocFormat::Html)]
    pub format: DocFormat,
    /// Document every named item, not only `pub` items and pipelines.
    #[arg(long)]
    pub private: bool,
    /// How diagnostics are printed: `human`, `json` or `sarif`.
    #[arg(long, value_enum, default_value_t = MessageFormat::Human)]
    pub message_format: MessageFormat,
    /// Colour in human output; `auto` uses colour on a terminal unless NO_COLOR is set.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// The root that imports every std module, for `--std`: checked like a program, its own
/// diagnostics (unused imports) dropped.
const STD_ROOT: &str = "<std docs>";

pub fn run(args: &DocArgs) -> Result<ExitCode, String> {
    let mut files = Files::new();
    let mut diagnostics: Vec<Diagnostic> = Vec::new();
    let mut checks: Vec<Checked> = Vec::new();
    let paths = if args.paths.is_empty() {
        Vec::new()
    } else {
        let found = sources::collect(&args.paths)?;
        if found.is_empty() {
            return Err(format!(
                "no `.rl` files in {}",
                args.paths
                    .iter()
                    .map(|p| format!("`{}`", p.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        found
    };
    for path in &paths {
        let text = sources::read(path)?;
        let checked = rlc_check::check(
            &sources::FileLoader,
            &mut files,
            &sources::display_name(path),
            text,
        );
        diagnostics.extend(checked.diagnostics.iter().cloned());
        checks.push(checked);
    }
    if args.std {
        let root: String = rlc_check::std_lib::STD_MODULES
            .iter()
            .enumerate()
            .map(|(i, (module, _, _))| format!("import {module} as std_module_{i}\n"))
            .collect();
        let checked = rlc_check::check(&sources::FileLoader, &mut files, STD_ROOT, root);
        let std_root = checked.modules.get(0).file;
        diagnostics.extend(
            checked
                .diagnostics
                .iter()
                .filter(|d| d.primary().file != std_root)
                .cloned(),
        );
        checks.push(checked);
    }
    let output_args = OutputArgs {
        format: args.message_format,
        color: args.color,
    };
    if !diagnostics.is_empty() {
        let code = output::emit(&mut diagnostics, &files, &output_args);
        if diagnostics.iter().any(Diagnostic::is_error) {
            eprintln!("not documented: the program has errors");
            return Ok(code);
        }
    }
    let mut chosen = Vec::new();
    for (i, checked) in checks.iter().enumerate() {
        let is_std_check = args.std && i == checks.len() - 1;
        for (id, m) in checked.modules.modules.iter().enumerate() {
            let wanted = if is_std_check {
                m.is_std
            } else {
                !m.is_std || args.std
            };
            if wanted {
                chosen.push(model::Source {
                    checked,
                    module: id,
                });
            }
        }
    }
    let docs = model::build(&chosen, &files, args.private);
    let pages = match args.format {
        DocFormat::Html => html::render(&docs),
        DocFormat::Markdown => markdown::render(&docs),
    };
    write(&args.out, &pages)?;
    let items: usize = docs.modules.iter().map(|m| m.items.len()).sum();
    let index = match args.format {
        DocFormat::Html => "index.html",
        DocFormat::Markdown => "README.md",
    };
    eprintln!(
        "documented {} module(s), {items} item(s): {}",
        docs.modules.len(),
        args.out.join(index).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes `(file name, content)` pairs into `dir`, creating it.
fn write(dir: &Path, pages: &[(String, String)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    for (name, text) in pages {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    Ok(())
}
