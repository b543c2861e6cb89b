//! The fix for a name used without its import: a `pub` item of that name in a std module or in
//! another module of the program becomes one more name of an import list that is already
//! there (`import std.algo { ppo_clip, kl_k3 }`), or a new `import` line after the last one.

use crate::modules::{Modules, join_relative};
use crate::std_lib::STD_MODULES;
use rlc_diagnostics::{Edit, FileId, Files, Span};
use rlc_syntax::ast::{ImportSource, ItemKind, Module};
use std::sync::OnceLock;

/// An import that would bring `name` into a module: the help line, the fix's message and edits.
pub(crate) struct ImportFix {
    pub help: String,
    pub message: String,
    pub edits: Vec<Edit>,
}

/// The `pub` item names of every std module, parsed once.
fn std_exports() -> &'static [(&'static str, Vec<String>)] {
    static EXPORTS: OnceLock<Vec<(&'static str, Vec<String>)>> = OnceLock::new();
    EXPORTS.get_or_init(|| {
        let mut files = Files::new();
        STD_MODULES
            .iter()
            .map(|(module, file_name, text)| {
                let file = files.add(*file_name, text.to_string());
                let parsed = rlc_syntax::parse(file, text);
                (*module, pub_names(&parsed.module))
            })
            .collect()
    })
}

fn pub_names(module: &Module) -> Vec<String> {
    module
        .items
        .iter()
        .filter(|i| i.is_pub && !matches!(i.kind, ItemKind::Import(_)))
        .filter_map(|i| i.name().map(|n| n.name.clone()))
        .collect()
}

/// Where `name` could be imported from into module `from`, and the edit that imports it.
pub(crate) fn import_fix(modules: &Modules, from: usize, name: &str) -> Option<ImportFix> {
    let here = modules.get(from);
    // Another user module of the program first (its author's own), then std.
    let user = modules.modules.iter().enumerate().find(|(i, m)| {
        *i != from && !m.is_std && m.items.get(name).is_some_and(|&index| m.item(index).is_pub)
    });
    let (source, target_key) = match user {
        // A module of this package or of one of its dependencies: by its package path.
        Some((_, m)) if visible_package_path(modules, here.package, m).is_some() => {
            let dotted = visible_package_path(modules, here.package, m).unwrap_or_default();
            (dotted.clone(), Target::Std(dotted))
        }
        Some((_, m)) => {
            let path = relative_path(&here.name, &m.name);
            (format!("\"{path}\""), Target::File(m.name.clone()))
        }
        None => {
            let (module, _) = std_exports()
                .iter()
                .find(|(_, names)| names.iter().any(|n| n == name))?;
            (module.to_string(), Target::Std(module.to_string()))
        }
    };
    let help = format!("`{name}` is in {source}: import it");
    let message = format!("import `{name}` from {source}");
    // An import list of that module already there: one more name at its end.
    for item in &here.ast.items {
        let ItemKind::Import(import) = &item.kind else {
            continue;
        };
        let Some(last) = import.names.as_ref().and_then(|n| n.last()) else {
            continue;
        };
        let same = match (&import.source, &target_key) {
            (ImportSource::Path(path), Target::Std(module)) => {
                let dotted: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
                dotted.join(".") == *module
            }
            (ImportSource::File(s), Target::File(path)) => {
                join_relative(&here.name, &s.value) == *path
            }
            _ => false,
        };
        if same {
            let at = last.span.end as usize;
            return Some(ImportFix {
                help,
                message,
                edits: vec![insert(here.file, at, format!(", {name}"))],
            });
        }
    }
    // A new line after the last import, or before the first item.
    let line = format!("import {source} {{ {name} }}");
    let last_import = here
        .ast
        .items
        .iter()
        .filter(|i| matches!(i.kind, ItemKind::Import(_)))
        .map(|i| i.span.end)
        .max();
    let edit = match (last_import, here.ast.items.first()) {
        (Some(end), _) => insert(here.file, end as usize, format!("\n{line}")),
        (None, Some(first)) => insert(here.file, first.span.start as usize, format!("{line}\n\n")),
        (None, None) => insert(here.file, 0, format!("{line}\n")),
    };
    Some(ImportFix {
        help,
        message,
        edits: vec![edit],
    })
}

/// A module imported by a dotted path (`std.algo`, `recipes.grpo`), or a file.
enum Target {
    Std(String),
    File(String),
}

/// `m`'s package path (`recipes.grpo`) when a module of package `from` can import it by that
/// path: `m` is a module of `from` itself or of one of its dependencies.
fn visible_package_path(
    modules: &Modules,
    from: Option<usize>,
    m: &crate::modules::LoadedModule,
) -> Option<String> {
    let dotted = m.package_path.clone()?;
    let from = modules.packages.get(from?);
    let first = dotted.split('.').next()?;
    (first == from.name || from.deps.contains_key(first)).then_some(dotted)
}

fn insert(file: FileId, at: usize, text: String) -> Edit {
    Edit {
        file,
        span: Span::new(at, at),
        text,
    }
}

/// The path of module file `to` relative to the folder of module file `from`
/// (`a/b/main.rl`, `a/lib/x.rl` → `../lib/x.rl`; `./x.rl` in the same folder).
fn relative_path(from: &str, to: &str) -> String {
    if to.starts_with('/') && !from.starts_with('/') {
        return to.to_string();
    }
    let from_dir: Vec<&str> = {
        let mut parts: Vec<&str> = from.split('/').collect();
        parts.pop();
        parts
    };
    let to_parts: Vec<&str> = to.split('/').collect();
    let common = from_dir
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count()
        .min(to_parts.len() - 1);
    let ups = from_dir.len() - common;
    let rest = to_parts[common..].join("/");
    if ups == 0 {
        format!("./{rest}")
    } else {
        format!("{}{rest}", "../".repeat(ups))
    }
}

#[cfg(test)]
mod tests {
    use super::relative_path;

    #[test]
    fn relative_paths_climb_to_the_common_folder() {
        assert_eq!(relative_path("main.rl", "lib/x.rl"), "./lib/x.rl");
        assert_eq!(relative_path("a/main.rl", "a/x.rl"), "./x.rl");
        assert_eq!(relative_path("a/b/main.rl", "a/lib/x.rl"), "../lib/x.rl");
        assert_eq!(relative_path("a/main.rl", "b/x.rl"), "../b/x.rl");
    }
}
