//! `rlc graph`: a picture of a program's plan (or of a plan file) for people to read.

use super::{OutputArgs, build, sources};
use rlc_plan::Plan;
use std::io::Write;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// Graphviz source.
    Dot,
    /// SVG drawn by Graphviz's `dot` (which must be installed).
    Svg,
    /// A Mermaid flowchart (renders in GitHub Markdown).
    Mermaid,
}

pub fn run(
    path: &Path,
    format: GraphFormat,
    out: Option<&Path>,
    args: &OutputArgs,
) -> Result<ExitCode, String> {
    let plan = if path.extension().is_some_and(|e| e == "json") {
        match load(path)? {
            Ok(plan) => plan,
            Err(code) => return Ok(code),
        }
    } else {
        match build::compile(path, args)? {
            Ok(plan) => plan,
            Err(code) => return Ok(code),
        }
    };
    let text = match format {
        GraphFormat::Dot => rlc_plan::graph::dot(&plan),
        GraphFormat::Mermaid => rlc_plan::graph::mermaid(&plan),
        GraphFormat::Svg => svg(&rlc_plan::graph::dot(&plan))?,
    };
    match out {
        Some(target) if target.as_os_str() != "-" => {
            build::write_atomically(target, text.as_bytes())?
        }
        _ => std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .map_err(|e| format!("cannot write the graph: {e}"))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads and validates a plan file; its problems are printed with their codes (exit 1).
pub(crate) fn load(path: &Path) -> Result<Result<Plan, ExitCode>, String> {
    let text = sources::read(path)?;
    match rlc_plan::load(&text) {
        Ok(plan) => Ok(Ok(plan)),
        Err(errors) => {
            for e in &errors {
                let at = if e.path.is_empty() {
                    String::new()
                } else {
                    format!(" (at `{}`)", e.path)
                };
                eprintln!(
                    "error[{}]: {}: {}{at}",
                    e.code.as_str(),
                    path.display(),
                    e.message
                );
            }
            Ok(Err(ExitCode::from(1)))
        }
    }
}

/// Runs `dot -Tsvg` over the Graphviz source.
fn svg(dot: &str) -> Result<String, String> {
    let program = std::env::var_os("RLC_DOT").unwrap_or_else(|| "dot".into());
    let child = Command::new(&program)
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("`--format svg` needs Graphviz's `dot` program, which is not installed.\n  \
                 install Graphviz (Debian/Ubuntu: `apt-get install graphviz`; macOS: `brew install graphviz`),\n  \
                 or write the source with `--format dot` (or `--format mermaid`) and render it elsewhere"
                .to_string());
        }
        Err(e) => return Err(format!("cannot run Graphviz's `dot`: {e}")),
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = dot.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(|e| format!("cannot run Graphviz's `dot`: {e}"))?;
    let _ = writer.join();
    if !output.status.success() {
        return Err(format!(
            "Graphviz's `dot` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    String::from_utf8(output.stdout)
        .map_err(|_| "Graphviz's `dot` wrote something that is not UTF-8".to_string())
}
