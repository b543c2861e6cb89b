//! Rendering diagnostics for the terminal or for machines, and the exit code they imply.

use super::OutputArgs;
use rlc_diagnostics::{Diagnostic, Files, render};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MessageFormat {
    Human,
    Json,
    Sarif,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Width of human output. Fixed (not the terminal's) so that output is reproducible.
const WIDTH: usize = 100;

/// Prints the diagnostics (sorted by file and position) and returns 1 if any is an error.
/// Human output goes to standard error, machine formats to standard output.
pub fn emit(diags: &mut [Diagnostic], files: &Files, args: &OutputArgs) -> ExitCode {
    diags.sort_by_key(Diagnostic::sort_key);
    match args.format {
        MessageFormat::Human => {
            let color = match args.color {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => {
                    std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
                }
            };
            let mut text = render::human(
                diags,
                files,
                &render::HumanOptions {
                    color,
                    width: WIDTH,
                },
            );
            if let Some(summary) = render::summary(diags) {
                text.push_str(&summary);
                text.push('\n');
            }
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
        MessageFormat::Json => print(&render::json(diags, files)),
        MessageFormat::Sarif => print(&render::sarif(diags, files)),
    }
    exit_code(diags)
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    if !text.is_empty() && !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
}

pub fn exit_code(diags: &[Diagnostic]) -> ExitCode {
    if diags.iter().any(Diagnostic::is_error) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
