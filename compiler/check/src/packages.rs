//! Packages: the `rl.toml` manifest of the root file (the nearest one in its folder or a folder
//! above, found by the [`SourceLoader`]), its dependencies (by path, or by name in the vendored
//! folder) and theirs, transitively; and where a package import (`import recipes.grpo { grpo }`)
//! finds its module. Every file is read through the loader: this module does no IO.
//!
//! ```toml
//! [package]
//! name = "job"          # an identifier; `import job.util` names this package's own modules
//! version = "0.1.0"
//! vendor = "vendor"     # optional: where dependencies without a path are (default `vendor`)
//!
//! [dependencies]
//! recipes = { path = "../recipes" }   # relative to this manifest's folder
//! shaping = "0.2"                     # vendored: `vendor/shaping/`
//! ```
//!
//! Module `recipes.a.b` is the file `src/a/b.rl` in the package's folder, or `a/b.rl` when
//! `src/` has no such file.

use crate::SourceLoader;
use crate::modules::join_relative;
use rlc_diagnostics::{Code, Diagnostic, FileId, Files, Span};
use std::collections::BTreeMap;

/// The manifest's file name.
pub const MANIFEST: &str = "rl.toml";

/// The vendored folder when the manifest names none.
pub const DEFAULT_VENDOR: &str = "vendor";

/// One package: the root's own, or a dependency reached from it.
#[derive(Clone, Debug)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// The folder holding its `rl.toml`, `/`-separated, without a trailing `/` (`""`: the
    /// working directory).
    pub root: String,
    /// The manifest, as a file of the compilation.
    pub manifest: FileId,
    /// Its dependencies that were found: name → package index.
    pub deps: BTreeMap<String, usize>,
    /// Its dependencies by name, found or not (an import of one that was not found is not
    /// reported again: its manifest entry already is).
    pub declared: BTreeMap<String, Span>,
}

impl Package {
    /// The files module `path` (`["a", "b"]` for `pkg.a.b`) may be, in the order tried.
    pub fn module_files(&self, path: &[&str]) -> [String; 2] {
        let rel = format!("{}.rl", path.join("/"));
        [self.file(&format!("src/{rel}")), self.file(&rel)]
    }

    fn file(&self, rel: &str) -> String {
        if self.root.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.root)
        }
    }
}

/// The packages of a compilation; package 0 is the root file's, when it has a manifest.
#[derive(Clone, Debug, Default)]
pub struct Packages {
    pub packages: Vec<Package>,
    /// A manifest was found but is unusable (reported): package imports are then not reported
    /// again as unknown modules.
    pub broken: bool,
}

impl Packages {
    pub fn get(&self, id: usize) -> &Package {
        &self.packages[id]
    }
}

/// The folder of file `path` (`""` for a file in the working directory).
fn folder(path: &str) -> String {
    match path.rfind('/') {
        Some(0) => "/".to_string(),
        Some(i) => path[..i].to_string(),
        None => String::new(),
    }
}

/// The manifest of `source` by the loader's reads: `rl.toml` in its folder, else in each folder
/// above as far as the path goes (loaders that know more, like the CLI's, go further).
pub fn find_manifest_by_reading<L: SourceLoader + ?Sized>(
    loader: &L,
    source: &str,
) -> Option<String> {
    let absolute = source.starts_with('/');
    let mut parts: Vec<&str> = source.split('/').collect();
    parts.pop();
    loop {
        let dir = parts.join("/");
        let candidate = if parts.is_empty() {
            MANIFEST.to_string()
        } else {
            format!("{dir}/{MANIFEST}")
        };
        if loader.read(&candidate).is_ok() {
            return Some(candidate);
        }
        if parts.is_empty() || (absolute && parts.len() == 1) {
            return None;
        }
        parts.pop();
    }
}

/// A manifest as written, before its dependencies are looked for.
struct Manifest {
    name: String,
    name_span: Span,
    version: String,
    vendor: Option<String>,
    /// `(name, its span, path or None for vendored, the entry's span)`.
    deps: Vec<(String, Span, Option<String>, Span)>,
}

/// Loads the manifest of `root_path` and every package it depends on, transitively; reports
/// malformed manifests, missing dependencies, names that do not match and cycles.
pub fn load(
    loader: &dyn SourceLoader,
    root_path: &str,
    files: &mut Files,
    diags: &mut Vec<Diagnostic>,
) -> Packages {
    let mut packages = Packages::default();
    let Some(manifest_path) = loader.find_manifest(root_path) else {
        return packages;
    };
    let text = match loader.read(&manifest_path) {
        Ok(text) => text,
        Err(why) => {
            let file = files.add(manifest_path.clone(), String::new());
            diags.push(
                Diagnostic::new(
                    Code::ManifestInvalid,
                    format!("cannot read the manifest `{manifest_path}`: {why}"),
                    file,
                    Span::new(0, 0),
                )
                .primary_label("unreadable")
                .help("a manifest is UTF-8 TOML text; see docs/packages.md"),
            );
            packages.broken = true;
            return packages;
        }
    };
    let mut by_root: BTreeMap<String, usize> = BTreeMap::new();
    // (package, its manifest as written), in the order loaded.
    let mut queue: Vec<(usize, Manifest)> = Vec::new();
    let file = files.add(manifest_path.clone(), text);
    let Some(manifest) = parse(files, file, diags) else {
        packages.broken = true;
        return packages;
    };
    let root = folder(&manifest_path);
    by_root.insert(root.clone(), 0);
    packages.packages.push(package(&manifest, root, file));
    queue.push((0, manifest));
    // Dependency edges `(from, to, span of the entry in from's manifest)`, for cycles.
    let mut edges: Vec<(usize, usize, Span)> = Vec::new();
    let mut next = 0;
    while next < queue.len() {
        let id = queue[next].0;
        let deps = std::mem::take(&mut queue[next].1.deps);
        let vendor = queue[next].1.vendor.clone();
        next += 1;
        let here = packages.get(id).clone();
        for (name, name_span, path, entry) in deps {
            let rel = match &path {
                Some(p) => p.clone(),
                None => format!("{}/{name}", vendor.as_deref().unwrap_or(DEFAULT_VENDOR)),
            };
            let dir = join_relative(&here.file(MANIFEST), &rel);
            let dir = dir.trim_end_matches('/').to_string();
            let dep = match by_root.get(&dir) {
                Some(&dep) => dep,
                None => {
                    let dep_manifest = if dir.is_empty() {
                        MANIFEST.to_string()
                    } else {
                        format!("{dir}/{MANIFEST}")
                    };
                    let text = match loader.read(&dep_manifest) {
                        Ok(text) => text,
                        Err(why) => {
                            let how = if path.is_some() {
                                "its `path`".to_string()
                            } else {
                                "the vendored folder".to_string()
                            };
                            diags.push(
                            Diagnostic::new(
                                Code::MissingDependency,
                                format!("dependency `{name}`: no package at `{dir}`"),
                                here.manifest,
                                entry,
                            )
                            .primary_label(if why.contains("not found") {
                                format!("`{dep_manifest}` does not exist")
                            } else {
                                format!("cannot read `{dep_manifest}`: {why}")
                            })
                            .help(format!(
                                "{how} is relative to this manifest's folder; the folder must hold the dependency's `{MANIFEST}`"
                            )),
                        );
                            continue;
                        }
                    };
                    let file = files.add(dep_manifest, text);
                    let Some(manifest) = parse(files, file, diags) else {
                        continue;
                    };
                    let dep = packages.packages.len();
                    packages
                        .packages
                        .push(package(&manifest, dir.clone(), file));
                    by_root.insert(dir.clone(), dep);
                    queue.push((dep, manifest));
                    dep
                }
            };
            let found = packages.get(dep);
            if found.name != name {
                let name_span_there = queue
                    .iter()
                    .find(|(p, _)| *p == dep)
                    .map_or(Span::new(0, 0), |(_, m)| m.name_span);
                diags.push(
                    Diagnostic::new(
                        Code::DependencyNameMismatch,
                        format!(
                            "dependency `{name}` is the package `{}`",
                            found.name
                        ),
                        here.manifest,
                        name_span,
                    )
                    .primary_label(format!("imported as `{name}`"))
                    .label(
                        found.manifest,
                        name_span_there,
                        format!("its manifest names it `{}`", found.name),
                    )
                    .help(format!(
                        "name the dependency `{}`, as its manifest does: `{} = {{ path = \"{rel}\" }}`",
                        found.name, found.name
                    )),
                );
                continue;
            }
            edges.push((id, dep, name_span));
            packages.packages[id].deps.insert(name, dep);
        }
    }
    report_cycles(&packages, &edges, diags);
    packages
}

fn package(manifest: &Manifest, root: String, file: FileId) -> Package {
    Package {
        name: manifest.name.clone(),
        version: manifest.version.clone(),
        root,
        manifest: file,
        deps: BTreeMap::new(),
        declared: manifest
            .deps
            .iter()
            .map(|(n, s, _, _)| (n.clone(), *s))
            .collect(),
    }
}

/// A package or dependency name: an identifier (it is the first segment of an import path), and
/// not `std`.
pub fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != "std"
}

fn span(r: std::ops::Range<usize>) -> Span {
    Span::new(r.start, r.end)
}

/// Parses and validates a manifest; `None` (with the diagnostics) when it is unusable.
fn parse(files: &Files, file: FileId, diags: &mut Vec<Diagnostic>) -> Option<Manifest> {
    use toml::de::{DeTable, DeValue};
    let text = &files.get(file).text;
    let bad = |at: Span, message: String, label: &str| {
        Diagnostic::new(Code::ManifestInvalid, message, file, at)
            .primary_label(label.to_string())
            .help(format!(
                "a manifest is `[package]` (`name`, `version`, optional `vendor`) and `[dependencies]` (`name = {{ path = \"../dir\" }}`, or `name = \"version\"` for a vendored one); `rlc explain {}`",
                Code::ManifestInvalid
            ))
    };
    let table = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            let at = e.span().map_or(Span::new(0, 0), span);
            let message = e.message().trim().to_string();
            diags.push(bad(
                at,
                format!("`{}` is not valid TOML: {message}", files.get(file).name),
                "here",
            ));
            return None;
        }
    };
    let whole = span(table.span());
    let mut errors = Vec::new();
    let mut name = None;
    let mut version = None;
    let mut vendor = None;
    let mut deps = Vec::new();
    let mut saw_package = false;
    let string = |v: &toml::Spanned<DeValue>| match v.get_ref() {
        DeValue::String(s) => Some(s.to_string()),
        _ => None,
    };
    for (key, value) in table.get_ref() {
        let key_span = span(key.span());
        match (key.get_ref().as_ref(), value.get_ref()) {
            ("package", DeValue::Table(t)) => {
                saw_package = true;
                for (k, v) in t {
                    let k_span = span(k.span());
                    match k.get_ref().as_ref() {
                        "name" => match string(v) {
                            Some(s) if valid_name(&s) => name = Some((s, span(v.span()))),
                            _ => errors.push(bad(
                                span(v.span()),
                                "the package's `name` must be an identifier (letters, digits, `_`), not `std`".into(),
                                "not a package name",
                            )),
                        },
                        "version" => match string(v) {
                            Some(s) => version = Some(s),
                            None => errors.push(bad(
                                span(v.span()),
                                "`version` must be a string, e.g. \"0.1.0\"".into(),
                                "not a string",
                            )),
                        },
                        "vendor" => match string(v) {
                            Some(s) => vendor = Some(s),
                            None => errors.push(bad(
                                span(v.span()),
                                "`vendor` must be a folder, as a string".into(),
                                "not a string",
                            )),
                        },
                        other => errors.push(bad(
                            k_span,
                            format!("unknown key `{other}` in `[package]`"),
                            "unknown key",
                        )),
                    }
                }
            }
            ("dependencies", DeValue::Table(t)) => {
                for (k, v) in t {
                    let dep = k.get_ref().to_string();
                    let k_span = span(k.span());
                    let entry = Span::new(k_span.start as usize, v.span().end);
                    if !valid_name(&dep) {
                        errors.push(bad(
                            k_span,
                            format!("dependency name `{dep}` is not an identifier (or is `std`)"),
                            "not a package name",
                        ));
                        continue;
                    }
                    match v.get_ref() {
                        DeValue::String(_) => deps.push((dep, k_span, None, entry)),
                        DeValue::Table(fields) => {
                            let mut path = None;
                            let mut ok = true;
                            for (fk, fv) in fields {
                                match (fk.get_ref().as_ref(), string(fv)) {
                                    ("path", Some(p)) => path = Some(p),
                                    ("version", Some(_)) => {}
                                    (f @ ("path" | "version"), None) => {
                                        ok = false;
                                        errors.push(bad(
                                            span(fv.span()),
                                            format!("`{f}` of dependency `{dep}` must be a string"),
                                            "not a string",
                                        ));
                                    }
                                    (other, _) => {
                                        ok = false;
                                        errors.push(bad(
                                            span(fk.span()),
                                            format!("unknown key `{other}` in dependency `{dep}`"),
                                            "unknown key (`path` or `version`)",
                                        ));
                                    }
                                }
                            }
                            if ok {
                                deps.push((dep, k_span, path, entry));
                            }
                        }
                        _ => errors.push(bad(
                            span(v.span()),
                            format!("dependency `{dep}` must be `{{ path = \"…\" }}` or a version string"),
                            "neither a table nor a string",
                        )),
                    }
                }
            }
            (section @ ("package" | "dependencies"), _) => errors.push(bad(
                key_span,
                format!("`{section}` must be a table (`[{section}]`)"),
                "not a table",
            )),
            (other, _) => errors.push(bad(
                key_span,
                format!("unknown section `{other}`"),
                "unknown section (`package` or `dependencies`)",
            )),
        }
    }
    let first_line = Span::new(
        0,
        text.find('\n')
            .unwrap_or(text.len())
            .min(whole.end as usize),
    );
    if !saw_package {
        errors.push(bad(
            first_line,
            "the manifest has no `[package]` section".into(),
            "expected `[package]` with `name` and `version`",
        ));
    } else if name.is_none() && errors.is_empty() {
        errors.push(bad(
            first_line,
            "`[package]` has no `name`".into(),
            "expected `name = \"…\"`",
        ));
    } else if version.is_none() && errors.is_empty() {
        errors.push(bad(
            first_line,
            "`[package]` has no `version`".into(),
            "expected `version = \"…\"`",
        ));
    }
    if !errors.is_empty() {
        diags.extend(errors);
        return None;
    }
    let (name, name_span) = name?;
    Some(Manifest {
        name,
        name_span,
        version: version?,
        vendor,
        deps,
    })
}

/// Reports each dependency cycle once, at the entry that closes it in the earliest package.
fn report_cycles(packages: &Packages, edges: &[(usize, usize, Span)], diags: &mut Vec<Diagnostic>) {
    let n = packages.packages.len();
    let mut reported = std::collections::BTreeSet::new();
    for start in 0..n {
        let mut stack: Vec<(usize, Vec<(usize, Span)>)> = vec![(start, Vec::new())];
        let mut seen = std::collections::BTreeSet::new();
        while let Some((p, path)) = stack.pop() {
            for &(from, to, at) in edges {
                if from != p {
                    continue;
                }
                let mut path = path.clone();
                path.push((from, at));
                if to == start {
                    let key: Vec<usize> = path.iter().map(|(p, _)| *p).collect();
                    if reported.insert(key) {
                        let names: Vec<&str> = path
                            .iter()
                            .map(|(p, _)| packages.get(*p).name.as_str())
                            .collect();
                        let (first, at) = path[0];
                        let mut d = Diagnostic::new(
                            Code::DependencyCycle,
                            format!("dependency cycle: {} → {}", names.join(" → "), names[0]),
                            packages.get(first).manifest,
                            at,
                        )
                        .primary_label("this dependency starts the cycle");
                        for &(p, at) in &path[1..] {
                            d = d.label(
                                packages.get(p).manifest,
                                at,
                                "which depends back along the cycle",
                            );
                        }
                        diags.push(d.help(
                            "move what the packages share into a third package that depends on neither",
                        ));
                    }
                } else if to > start && seen.insert(to) {
                    stack.push((to, path));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::folder;

    #[test]
    fn folders_of_files() {
        assert_eq!(folder("main.rl"), "");
        assert_eq!(folder("a/b/rl.toml"), "a/b");
        assert_eq!(folder("/rl.toml"), "/");
    }
}
