//! Name resolution, types and the static RLHF checks: a job that `rlc check` accepts must not
//! fail at launch for any reason its text already decides.
//!
//! The crate does no IO: user modules come in through a [`SourceLoader`], `std` is embedded.
//! [`check`] never panics; it returns every diagnostic it found and the [`Program`] model.

pub mod args;
pub mod body;
pub mod builtins;
pub mod checks;
pub mod dataflow;
mod eval;
mod hf_config;
mod hints;
mod imports;
mod limits;
pub mod modules;
pub mod packages;
mod pipeline;
mod place;
pub mod program;
mod shapes;
pub mod types;
pub mod value;

pub use eval::TypeTable;
pub use eval::recipes;
pub use program::Program;

use modules::Modules;
use rlc_diagnostics::{Diagnostic, FileId, Files};

/// The embedded standard library.
pub mod std_lib {
    include!(concat!(env!("OUT_DIR"), "/std_modules.rs"));
}

/// Reads the modules a program imports by relative path (the CLI reads files; the LSP and the
/// tests serve text from memory).
pub trait SourceLoader {
    fn read(&self, path: &str) -> Result<String, String>;

    /// The package manifest (`rl.toml`) that governs source `path`: the nearest one in its
    /// folder or a folder above. By default, the first the loader can read going up the
    /// folders `path` names; a loader over a file system goes on above them (the CLI's does).
    fn find_manifest(&self, path: &str) -> Option<String> {
        packages::find_manifest_by_reading(self, path)
    }
}

/// Everything the checker learned about a program.
pub struct Checked {
    pub diagnostics: Vec<Diagnostic>,
    pub modules: modules::Modules,
    pub program: Program,
    /// The type of every expression, for hover.
    pub types: TypeTable,
    /// The root pipeline as data, for plan lowering (`None` without a pipeline, or when loading
    /// the modules failed).
    pub dataflow: Option<dataflow::Dataflow>,
    /// Every `fn`'s and `const`'s body as data, for kernel lowering.
    pub bodies: body::Bodies,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Checks the module at `root_path` (whose text is `root_text`) and everything it imports. The
/// files read are added to `files`, which may already hold those of other roots.
pub fn check(
    loader: &dyn SourceLoader,
    files: &mut Files,
    root_path: &str,
    root_text: String,
) -> Checked {
    let mut diagnostics = Vec::new();
    let modules = modules::load(loader, root_path, root_text, files, &mut diagnostics);
    // A syntax error cuts short the item it is in (or, inside an item that parsed, makes the
    // lowering refuse an expression): the items that parsed are still checked, and the names
    // the broken ones declare are unknown without a diagnostic (`LoadedModule::is_poisoned`).
    // An error in loading modules (an unknown module, a duplicate or missing name) stops here:
    // the names it concerns would be reported again at every use.
    let syntax = |d: &Diagnostic| d.code.as_str().starts_with("E01");
    if diagnostics.iter().any(|d| d.is_error() && !syntax(d)) {
        diagnostics.sort_by_key(Diagnostic::sort_key);
        return Checked {
            diagnostics,
            modules,
            program: Program::default(),
            types: TypeTable::new(),
            dataflow: None,
            bodies: body::Bodies::default(),
        };
    }
    let missing = modules
        .modules
        .iter()
        .flat_map(|m| m.incomplete_kinds())
        .map(|kind| match kind {
            Some("fn" | "struct") => checks::Missing::Code,
            _ => checks::Missing::Configuration,
        })
        .max()
        .unwrap_or(checks::Missing::Nothing);
    let mut evaluator = eval::Evaluator::new(&modules, loader);
    evaluator.run();
    let (program, types) = (
        std::mem::take(&mut evaluator.program),
        evaluator.take_types(),
    );
    let evaluated_cleanly = !evaluator.diags.iter().any(Diagnostic::is_error);
    diagnostics.append(&mut evaluator.diags);
    // The static checks judge only a program whose configuration evaluated cleanly, so that one
    // mistake is not reported again as its consequences; what they judge of a program that a
    // syntax error left incomplete is `checks::Missing`'s.
    if evaluated_cleanly {
        checks::run_with(&program, missing, &mut diagnostics);
    }
    if let Some(instance) = program.pipeline.as_ref().and_then(|p| p.instance.as_ref()) {
        recipes::at_the_call(&mut diagnostics, instance);
    }
    number_fixes_on_literals(&mut diagnostics, files, &modules);
    diagnostics.sort_by_key(Diagnostic::sort_key);
    diagnostics.dedup();
    let diagnostics = one_per_unknown_name(diagnostics);
    let dataflow = dataflow::resolve(&modules, &program, &types);
    let bodies = body::Bodies::of(&modules, &types);
    Checked {
        diagnostics,
        modules,
        program,
        types,
        dataflow,
        bodies,
    }
}

/// The checks see values, not text: a fix that writes a number where a value came from (a
/// batch's `n`, a `minibatch`) applies where that value is written as a number literal, or
/// where it is the name of a parameter of the root's pipeline whose default is one (`n: group`
/// with `pipeline train(group = 8)`: the default is rewritten), not a name bound otherwise or
/// an expression that computes it: such fixes are dropped. Other fixes are left as they are.
fn number_fixes_on_literals(diagnostics: &mut [Diagnostic], files: &Files, modules: &Modules) {
    let text_at = |file: FileId, span: rlc_diagnostics::Span| {
        files
            .get(file)
            .text
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
    };
    let is_literal = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let root = modules.get(0);
    let pipeline = root.ast.items.iter().find_map(|i| match &i.kind {
        rlc_syntax::ast::ItemKind::Pipeline(p) => Some(p),
        _ => None,
    });
    // Where the default of pipeline parameter `name` is written, for a use of it at `span`
    // inside the pipeline that no `let` of the pipeline shadows.
    let default_of = |span: rlc_diagnostics::Span, name: &str| {
        let p = pipeline?;
        let body = p.body.span;
        if span.start < body.start || span.end > body.end {
            return None;
        }
        let shadowed = text_at(root.file, body).split("let ").skip(1).any(|rest| {
            rest.trim_start()
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                == Some(name)
        });
        if shadowed {
            return None;
        }
        let param = p.params.iter().find(|q| q.name.name == name)?;
        let default = param.default.as_ref()?.span;
        is_literal(text_at(root.file, default)).then_some(default)
    };
    for d in diagnostics {
        d.fixes.retain_mut(|f| {
            f.edits.iter_mut().all(|e| {
                if e.text.parse::<i64>().is_err() {
                    return true;
                }
                let written = text_at(e.file, e.span);
                if is_literal(written) {
                    return true;
                }
                match (e.file == root.file)
                    .then(|| default_of(e.span, written))
                    .flatten()
                {
                    Some(default) => {
                        e.span = default;
                        true
                    }
                    None => false,
                }
            })
        });
    }
}

/// A name that cannot be found is one mistake however often it is used (an import left out, a
/// misspelling repeated): the uses of one unknown name in one file with the same fixes are one
/// E0201 at the first, the others labels, and each fix covers every use (a rename edits each;
/// an import is added once). `diagnostics` is in source order.
fn one_per_unknown_name(diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    use std::collections::{BTreeSet, HashMap};
    // (message, file, fix messages) → index in `out`; a map, as a file may have thousands.
    let mut first: HashMap<(String, FileId, Vec<String>), usize> = HashMap::new();
    let mut merged: BTreeSet<usize> = BTreeSet::new();
    let mut out: Vec<Diagnostic> = Vec::with_capacity(diagnostics.len());
    for d in diagnostics {
        if d.code != rlc_diagnostics::Code::UndefinedName {
            out.push(d);
            continue;
        }
        let key = (
            d.message.clone(),
            d.primary().file,
            d.fixes.iter().map(|f| f.message.clone()).collect(),
        );
        match first.get(&key) {
            Some(&at) => {
                let p = d.primary();
                let f = &mut out[at];
                f.labels.push(rlc_diagnostics::Label {
                    file: p.file,
                    span: p.span,
                    message: "used again here".into(),
                    primary: false,
                });
                for (fix, more) in f.fixes.iter_mut().zip(d.fixes) {
                    fix.edits.extend(more.edits);
                }
                merged.insert(at);
            }
            None => {
                first.insert(key, out.len());
                out.push(d);
            }
        }
    }
    // Each fix's edits in source order, an edit that several uses share (the import) once.
    for at in merged {
        for fix in &mut out[at].fixes {
            fix.edits.sort_by(|a, b| {
                (a.file, a.span.start, a.span.end, &a.text).cmp(&(
                    b.file,
                    b.span.start,
                    b.span.end,
                    &b.text,
                ))
            });
            fix.edits.dedup();
        }
    }
    out
}
