//! Loading modules (the root file, relative imports through the [`SourceLoader`], `std` from the
//! binary, package imports through the root's `rl.toml`: [`crate::packages`]), binding their names, and diagnosing unknown modules, missing or private items,
//! duplicate names and import cycles.

use crate::SourceLoader;
use crate::packages::{self, Packages};
use crate::std_lib::STD_MODULES;
use rlc_diagnostics::{Code, Diagnostic, FileId, Files, Span};
use rlc_syntax::Broken;
use rlc_syntax::ast::{Ident, ImportSource, Item, ItemKind, Module};
use std::collections::{BTreeMap, BTreeSet};

/// What a name in a module's scope stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Item `index` of module `module`.
    Item { module: usize, index: usize },
    /// A whole module (`import std.algo`).
    Module(usize),
}

/// A name brought in by an import, for the unused-import warning.
#[derive(Clone, Debug)]
pub struct ImportedName {
    pub name: String,
    pub span: Span,
    pub binding: Binding,
}

#[derive(Debug)]
pub struct LoadedModule {
    /// `std.algo`, or the file's path for user modules.
    pub name: String,
    pub file: FileId,
    pub is_std: bool,
    pub ast: Module,
    /// Items declared here, by name.
    pub items: BTreeMap<String, usize>,
    /// Names imported into this module.
    pub imports: Vec<ImportedName>,
    /// The items a syntax error cut short (see [`LoadedModule::is_poisoned`]).
    pub broken: Vec<Broken>,
    /// Names imported from a module whose item of that name a syntax error cut short.
    pub poisoned_imports: BTreeSet<String>,
    /// Items that parsed but hold an expression the lowering refused (E01xx, replaced by a
    /// placeholder): their values are unknown, so they are not evaluated.
    pub refused: BTreeSet<usize>,
    /// The package the module belongs to (an index into [`Modules::packages`]): the root's,
    /// inherited through file imports, or the one a package import reached.
    pub package: Option<usize>,
    /// The dotted name a package import gave it (`recipes.grpo`), for tools that resolve
    /// import paths by name.
    pub package_path: Option<String>,
}

impl LoadedModule {
    pub fn lookup(&self, self_id: usize, name: &str) -> Option<Binding> {
        if let Some(&index) = self.items.get(name) {
            return Some(Binding::Item {
                module: self_id,
                index,
            });
        }
        self.imports
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.binding)
    }

    pub fn item(&self, index: usize) -> &Item {
        &self.ast.items[index]
    }

    /// Whether `name`, unknown here, may be one that an item cut short by a syntax error
    /// declares: its uses are then not reported, as the syntax error is the one mistake.
    pub fn is_poisoned(&self, name: &str) -> bool {
        self.poisoned_imports.contains(name)
            || self
                .broken
                .iter()
                .any(|b| b.declares_unknown() || b.name.as_ref().is_some_and(|n| n.name == name))
    }

    /// Whether a syntax error cut short an item of this module.
    pub fn is_incomplete(&self) -> bool {
        !self.broken.is_empty() || !self.refused.is_empty()
    }

    /// The keywords of the items a syntax error cut short or left unknown (`fn`, `model`, …;
    /// `None` for text that starts with no item keyword).
    pub fn incomplete_kinds(&self) -> impl Iterator<Item = Option<&'static str>> + '_ {
        let refused = self
            .refused
            .iter()
            .map(|&i| Some(self.ast.items[i].keyword()));
        self.broken.iter().map(|b| b.keyword).chain(refused)
    }
}

/// Every module of a compilation; module 0 is the root.
#[derive(Debug, Default)]
pub struct Modules {
    pub modules: Vec<LoadedModule>,
    /// Import edges `(from, to, span of the import in from)`, for cycle detection.
    edges: Vec<(usize, usize, Span)>,
    /// The root's package and its dependencies (none without a manifest).
    pub packages: Packages,
}

impl Modules {
    pub fn get(&self, id: usize) -> &LoadedModule {
        &self.modules[id]
    }
}

/// Loads the root module and everything it imports, transitively.
pub fn load(
    loader: &dyn SourceLoader,
    root_path: &str,
    root_text: String,
    files: &mut Files,
    diags: &mut Vec<Diagnostic>,
) -> Modules {
    let mut modules = Modules {
        packages: packages::load(loader, root_path, files, diags),
        ..Modules::default()
    };
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    let root = add_module(
        &mut modules,
        files,
        diags,
        root_path.to_string(),
        root_path.to_string(),
        root_text,
        false,
    );
    by_key.insert(format!("file:{root_path}"), root);
    if !modules.packages.packages.is_empty() {
        modules.modules[root].package = Some(0);
    }

    let mut next = 0;
    while next < modules.modules.len() {
        let id = next;
        next += 1;
        let imports: Vec<(usize, Item)> = modules.modules[id]
            .ast
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| matches!(item.kind, ItemKind::Import(_)))
            .map(|(i, item)| (i, item.clone()))
            .collect();
        for (_, item) in imports {
            let ItemKind::Import(import) = &item.kind else {
                continue;
            };
            let file = modules.modules[id].file;
            let package = modules.modules[id].package;
            let target = match &import.source {
                ImportSource::Path(path) if path[0].name != "std" && package.is_some() => {
                    let package = package.unwrap_or_default();
                    let mut load = Load {
                        loader,
                        modules: &mut modules,
                        by_key: &mut by_key,
                        files,
                        diags,
                    };
                    load.package_import(file, package, path)
                }
                // The root's manifest is unusable (and reported): its packages are unknown.
                ImportSource::Path(path) if path[0].name != "std" && modules.packages.broken => {
                    None
                }
                ImportSource::Path(path) => {
                    resolve_std(&mut modules, &mut by_key, files, diags, file, path)
                }
                ImportSource::File(s) => {
                    let from = modules.modules[id].name.clone();
                    let path = join_relative(&from, &s.value);
                    let key = format!("file:{path}");
                    match by_key.get(&key) {
                        Some(&m) => Some((m, None)),
                        None => match loader.read(&path) {
                            Ok(text) => {
                                let m = add_module(
                                    &mut modules,
                                    files,
                                    diags,
                                    path.clone(),
                                    path,
                                    text,
                                    false,
                                );
                                modules.modules[m].package = package;
                                by_key.insert(key, m);
                                Some((m, None))
                            }
                            Err(why) => {
                                let why = if why.contains("not found") {
                                    "no such file".to_string()
                                } else {
                                    why
                                };
                                diags.push(
                                    Diagnostic::new(
                                        Code::UnknownModule,
                                        format!("cannot import `{}`: {why}", s.value),
                                        file,
                                        s.span,
                                    )
                                    .primary_label("no such file")
                                    .help("the path is relative to the importing file"),
                                );
                                None
                            }
                        },
                    }
                }
            };
            let Some((target, item_name)) = target else {
                continue;
            };
            modules.edges.push((id, target, import.span));
            bind_import(&mut modules, diags, id, target, item_name, import);
        }
    }
    report_cycles(&modules, diags);
    modules
}

#[allow(clippy::too_many_arguments)]
fn add_module(
    modules: &mut Modules,
    files: &mut Files,
    diags: &mut Vec<Diagnostic>,
    name: String,
    file_name: String,
    text: String,
    is_std: bool,
) -> usize {
    let file = files.add(file_name, text);
    let parsed = if is_std {
        parse_std(file, &files.get(file).name, &files.get(file).text)
    } else {
        rlc_syntax::parse(file, &files.get(file).text)
    };
    diags.extend(parsed.diagnostics);
    let mut items = BTreeMap::new();
    for (index, item) in parsed.module.items.iter().enumerate() {
        let Some(ident) = item.name() else { continue };
        if let Some(&first) = items.get(&ident.name) {
            let first: &Item = &parsed.module.items[first];
            diags.push(duplicate(file, ident, first.name().unwrap().span));
        } else {
            items.insert(ident.name.clone(), index);
        }
    }
    modules.modules.push(LoadedModule {
        name,
        file,
        is_std,
        ast: parsed.module,
        items,
        imports: Vec::new(),
        broken: parsed.broken,
        poisoned_imports: BTreeSet::new(),
        refused: parsed.refused.into_iter().collect(),
        package: None,
        package_path: None,
    });
    modules.modules.len() - 1
}

/// The parse of std module `name`, whose text is compiled in and so the same for the whole
/// process: parsed once, cloned after, so that a language server checking on every keystroke
/// does not parse std again each time (about a third of what the check of a 1 000-line program
/// parses; benches/lsp.rs). A parse with diagnostics is not kept.
fn parse_std(file: FileId, name: &str, text: &str) -> rlc_syntax::Parsed {
    static PARSED: std::sync::Mutex<BTreeMap<String, Module>> =
        std::sync::Mutex::new(BTreeMap::new());
    let lock = || PARSED.lock().unwrap_or_else(|e| e.into_inner());
    let cached = lock().get(name).cloned();
    if let Some(module) = cached {
        return rlc_syntax::Parsed {
            module,
            comments: Vec::new(),
            diagnostics: Vec::new(),
            broken: Vec::new(),
            refused: Vec::new(),
        };
    }
    let fresh = rlc_syntax::parse(file, text);
    if fresh.diagnostics.is_empty() && fresh.broken.is_empty() && fresh.refused.is_empty() {
        lock().insert(name.to_string(), fresh.module.clone());
    }
    fresh
}

/// The keyword an item starts with.
fn duplicate(file: FileId, again: &Ident, first: Span) -> Diagnostic {
    Diagnostic::new(
        Code::DuplicateName,
        format!("`{}` is declared twice", again.name),
        file,
        again.span,
    )
    .primary_label("declared again here")
    .label(file, first, "first declared here")
    .help("rename one of them")
}

/// `std.a.b` is module `std.a.b`, or item `b` of module `std.a`.
fn resolve_std(
    modules: &mut Modules,
    by_key: &mut BTreeMap<String, usize>,
    files: &mut Files,
    diags: &mut Vec<Diagnostic>,
    file: FileId,
    path: &[Ident],
) -> Option<(usize, Option<Ident>)> {
    let dotted = |p: &[Ident]| {
        p.iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(".")
    };
    let full = dotted(path);
    let span = path[0].span.to(path[path.len() - 1].span);
    let mut load_std = |name: &str| -> Option<usize> {
        let key = format!("std:{name}");
        if let Some(&m) = by_key.get(&key) {
            return Some(m);
        }
        let (_, file_name, text) = STD_MODULES.iter().find(|(m, _, _)| *m == name)?;
        let m = add_module(
            modules,
            files,
            diags,
            name.to_string(),
            file_name.to_string(),
            text.to_string(),
            true,
        );
        by_key.insert(key, m);
        Some(m)
    };
    if let Some(m) = load_std(&full) {
        return Some((m, None));
    }
    if path.len() > 1
        && let Some(m) = load_std(&dotted(&path[..path.len() - 1]))
    {
        return Some((m, Some(path[path.len() - 1].clone())));
    }
    let known: Vec<&str> = STD_MODULES.iter().map(|(m, _, _)| *m).collect();
    let mut d = Diagnostic::new(
        Code::UnknownModule,
        format!("there is no module `{full}`"),
        file,
        span,
    )
    .primary_label("unknown module");
    d = match rlc_syntax::closest(&full, known.iter().copied(), 3) {
        Some(near) => crate::hints::did_you_mean(d, near),
        None if full.starts_with("std") => d.help(format!("the std modules are {}", known.join(", "))),
        None => d.help("import a file with `import \"./path.rl\" as name`, a std module with `import std.…`, or a package's module with `import pkg.module` (a dependency in `rl.toml`)"),
    };
    diags.push(d);
    None
}

/// What loading a package import needs.
struct Load<'a> {
    loader: &'a dyn SourceLoader,
    modules: &'a mut Modules,
    by_key: &'a mut BTreeMap<String, usize>,
    files: &'a mut Files,
    diags: &'a mut Vec<Diagnostic>,
}

impl Load<'_> {
    /// `pkg.a.b`, imported from a module of package `from`: module `a.b` of package `pkg` (the
    /// package itself or one of its dependencies), or item `b` of its module `a`.
    fn package_import(
        &mut self,
        file: FileId,
        from: usize,
        path: &[Ident],
    ) -> Option<(usize, Option<Ident>)> {
        let here = self.modules.packages.get(from).clone();
        let first = &path[0];
        let span = first.span.to(path[path.len() - 1].span);
        let full: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
        let target = if first.name == here.name {
            from
        } else if let Some(&dep) = here.deps.get(&first.name) {
            dep
        } else if here.declared.contains_key(&first.name) {
            // Declared but not found: its manifest entry is reported.
            return None;
        } else {
            let mut d = Diagnostic::new(
                Code::NotADependency,
                format!(
                    "`{}` is not a dependency of package `{}`",
                    first.name, here.name
                ),
                file,
                first.span,
            )
            .primary_label("not in `[dependencies]`")
            .note(format!(
                "the dependencies are those of `{}`",
                self.files.get(here.manifest).name
            ));
            let known: Vec<&str> = std::iter::once(here.name.as_str())
                .chain(here.deps.keys().map(String::as_str))
                .chain(std::iter::once("std"))
                .collect();
            d = match rlc_syntax::closest(&first.name, known.iter().copied(), 2) {
                Some(near) => crate::hints::did_you_mean(d, near),
                None => d.help(format!(
                    "add it to `[dependencies]` of `{}`: `{} = {{ path = \"../{}\" }}`",
                    self.files.get(here.manifest).name,
                    first.name,
                    first.name
                )),
            };
            self.diags.push(d);
            return None;
        };
        let package = self.modules.packages.get(target).clone();
        if path.len() == 1 {
            self.diags.push(
                Diagnostic::new(
                    Code::NoSuchPackageModule,
                    format!("`{}` is a package, not a module", first.name),
                    file,
                    span,
                )
                .primary_label("a package")
                .help(format!(
                    "import one of its modules: `import {}.<module>`, the file `<module>.rl` of its `src/`",
                    first.name
                )),
            );
            return None;
        }
        if let Some(m) = self.load_module(target, &full) {
            return Some((m, None));
        }
        if path.len() > 2
            && let Some(m) = self.load_module(target, &full[..full.len() - 1])
        {
            return Some((m, Some(path[path.len() - 1].clone())));
        }
        let [in_src, at_root] = package.module_files(&full[1..]);
        self.diags.push(
            Diagnostic::new(
                Code::NoSuchPackageModule,
                format!("package `{}` has no module `{}`", package.name, full[1..].join(".")),
                file,
                span,
            )
            .primary_label("no such module")
            .help(format!(
                "a package's module `a.b` is its file `src/a/b.rl` (or `a/b.rl`): neither `{in_src}` nor `{at_root}` exists"
            )),
        );
        None
    }

    /// Module `path` (`[pkg, a, b]`) of package `package`, loaded once.
    fn load_module(&mut self, package: usize, path: &[&str]) -> Option<usize> {
        let files = self.modules.packages.get(package).module_files(&path[1..]);
        for file in files {
            let key = format!("file:{file}");
            if let Some(&m) = self.by_key.get(&key) {
                return Some(m);
            }
            let Ok(text) = self.loader.read(&file) else {
                continue;
            };
            let m = add_module(
                self.modules,
                self.files,
                self.diags,
                file.clone(),
                file,
                text,
                false,
            );
            self.modules.modules[m].package = Some(package);
            self.modules.modules[m].package_path = Some(path.join("."));
            self.by_key.insert(key, m);
            return Some(m);
        }
        None
    }
}

/// Names an import binds, each with how to bind it under another name (for a clash).
type Bound = Vec<(ImportedName, String)>;

fn bind_import(
    modules: &mut Modules,
    diags: &mut Vec<Diagnostic>,
    from: usize,
    target: usize,
    item_name: Option<Ident>,
    import: &rlc_syntax::ast::Import,
) {
    let file = modules.modules[from].file;
    let source = match &import.source {
        ImportSource::Path(path) => path
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join("."),
        ImportSource::File(s) => format!("\"{}\"", s.raw),
    };
    let target_name = modules.get(target).name.clone();
    // Each name bound, with how to bind it under another name should it clash.
    let mut bound: Bound = Vec::new();
    // Names of items a syntax error cut short in the target: bound as unknown, silently.
    let mut poisoned: Vec<String> = Vec::new();
    let mut bind_item = |modules: &Modules, name: &Ident, alias: &Ident, bound: &mut Bound| {
        let module = modules.get(target);
        match module.items.get(&name.name) {
            Some(&index) => {
                if !module.item(index).is_pub {
                    let decl = module.item(index).name().unwrap().span;
                    diags.push(
                        Diagnostic::new(
                            Code::PrivateItem,
                            format!("`{}` is private to `{}`", name.name, module.name),
                            file,
                            name.span,
                        )
                        .primary_label("private item")
                        .label(module.file, decl, "declared here without `pub`")
                        .help(format!("mark it `pub` in `{}` to export it", module.name)),
                    );
                }
                let renamed = format!("{}_{}", short_name(&module.name), name.name);
                let hint = match (&item_name, &import.names) {
                    (Some(_), _) => format!("`import {source} as {renamed}`"),
                    _ => format!("`import {source} {{ {} as {renamed} }}`", name.name),
                };
                bound.push((
                    ImportedName {
                        name: alias.name.clone(),
                        span: alias.span,
                        binding: Binding::Item {
                            module: target,
                            index,
                        },
                    },
                    hint,
                ));
            }
            None if module.is_poisoned(&name.name) => poisoned.push(alias.name.clone()),
            None => {
                let names: Vec<&str> = module.items.keys().map(String::as_str).collect();
                let mut d = Diagnostic::new(
                    Code::NoSuchItem,
                    format!("`{}` has no item `{}`", module.name, name.name),
                    file,
                    name.span,
                )
                .primary_label("not found");
                if let Some(near) = rlc_syntax::closest(&name.name, names.iter().copied(), 2) {
                    d = crate::hints::did_you_mean(d, near);
                }
                diags.push(d);
            }
        }
    };
    match (&item_name, &import.names) {
        (Some(item), _) => bind_item(
            modules,
            item,
            import.alias.as_ref().unwrap_or(item),
            &mut bound,
        ),
        (None, Some(names)) => {
            for n in names {
                bind_item(modules, &n.name, n.binding(), &mut bound);
            }
            if let Some(alias) = &import.alias {
                bound.push((
                    ImportedName {
                        name: alias.name.clone(),
                        span: alias.span,
                        binding: Binding::Module(target),
                    },
                    module_hint(&source, &alias.name, import.names.as_deref(), &target_name),
                ));
            }
        }
        (None, None) => {
            let name = match (&import.alias, &import.source) {
                (Some(alias), _) => alias.clone(),
                (None, ImportSource::Path(path)) => path[path.len() - 1].clone(),
                (None, ImportSource::File(s)) => {
                    diags.push(
                        Diagnostic::new(
                            Code::UnknownModule,
                            "a file import needs a name",
                            file,
                            s.span,
                        )
                        .primary_label("no name for this module")
                        .help(format!("write `import \"{}\" as name`", s.raw)),
                    );
                    return;
                }
            };
            let hint = module_hint(&source, &name.name, None, &target_name);
            bound.push((
                ImportedName {
                    name: name.name,
                    span: name.span,
                    binding: Binding::Module(target),
                },
                hint,
            ));
        }
    }
    let module = &mut modules.modules[from];
    module.poisoned_imports.extend(poisoned);
    for (b, hint) in bound {
        let again = Ident {
            name: b.name.clone(),
            span: b.span,
        };
        // The grammar binds an import under another name with `as`.
        let hint = format!("import it under another name: {hint}");
        if let Some(&index) = module.items.get(&b.name) {
            let first = module.ast.items[index].name().unwrap().span;
            diags.push(duplicate(file, &again, first).help(hint));
        } else if let Some(prev) = module.imports.iter().find(|i| i.name == b.name) {
            diags.push(
                Diagnostic::new(
                    Code::DuplicateName,
                    format!("`{}` is imported twice", b.name),
                    file,
                    b.span,
                )
                .primary_label("imported again here")
                .label(file, prev.span, "first imported here")
                .help(hint),
            );
        } else {
            module.imports.push(b);
        }
    }
}

/// The last segment of a module's name, as a prefix for a suggested alias: `algo` for
/// `std.algo`, `rewards` for `lib/rewards.rl`.
fn short_name(module: &str) -> String {
    let base = module.rsplit('/').next().unwrap_or(module);
    let base = base.strip_suffix(".rl").unwrap_or(base);
    let last = base.rsplit('.').next().unwrap_or(base);
    let ident: String = last
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if ident.starts_with(|c: char| c.is_ascii_alphabetic()) {
        ident
    } else {
        format!("m_{ident}")
    }
}

/// How to bind the module of `import <source> …` (bound as `name`) under another name: its own
/// short name when that is not the one taken, else `<name>_module`.
fn module_hint(
    source: &str,
    name: &str,
    names: Option<&[rlc_syntax::ast::ImportName]>,
    module: &str,
) -> String {
    let short = short_name(module);
    let renamed = if short == name {
        format!("{name}_module")
    } else {
        short
    };
    let list = names.map_or(String::new(), |names| {
        let names: Vec<String> = names
            .iter()
            .map(|n| match &n.alias {
                Some(a) => format!("{} as {}", n.name.name, a.name),
                None => n.name.name.clone(),
            })
            .collect();
        format!(" {{ {} }}", names.join(", "))
    });
    format!("`import {source} as {renamed}{list}`")
}

/// `./lib/x.rl` imported from `dir/main.rl` is `dir/lib/x.rl`; `..` segments are folded. Tools
/// that resolve imports as the checker does (the language server) call this too.
pub fn join_relative(from: &str, path: &str) -> String {
    if path.starts_with('/') {
        return path.to_string();
    }
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for seg in path.split('/') {
        match seg {
            "." | "" => {}
            ".." if parts.last().is_some_and(|p| *p != "..") && !parts.is_empty() => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

/// Reports each import cycle once, at the import that closes it in the earliest module.
fn report_cycles(modules: &Modules, diags: &mut Vec<Diagnostic>) {
    let n = modules.modules.len();
    let mut reported: BTreeSet<Vec<usize>> = BTreeSet::new();
    for start in 0..n {
        // Depth-first search for a path back to `start` through modules > start only, so each
        // cycle is found once, from its smallest module.
        let mut stack: Vec<(usize, Vec<(usize, Span)>)> = vec![(start, Vec::new())];
        let mut seen = BTreeSet::new();
        while let Some((m, path)) = stack.pop() {
            for &(from, to, span) in &modules.edges {
                if from != m {
                    continue;
                }
                let mut p = path.clone();
                p.push((from, span));
                if to == start {
                    let key: Vec<usize> = p.iter().map(|(m, _)| *m).collect();
                    if reported.insert(key) {
                        diags.push(cycle_diagnostic(modules, &p));
                    }
                } else if to > start && seen.insert(to) {
                    stack.push((to, p));
                }
            }
        }
    }
}

fn cycle_diagnostic(modules: &Modules, path: &[(usize, Span)]) -> Diagnostic {
    let names: Vec<&str> = path
        .iter()
        .map(|(m, _)| modules.get(*m).name.as_str())
        .collect();
    let (first, first_span) = path[0];
    let mut d = Diagnostic::new(
        Code::ImportCycle,
        format!("import cycle: {} → {}", names.join(" → "), names[0]),
        modules.get(first).file,
        first_span,
    )
    .primary_label("this import starts the cycle");
    for &(m, span) in &path[1..] {
        d = d.label(
            modules.get(m).file,
            span,
            "which imports back along the cycle",
        );
    }
    d.help("move what both modules need into a third module that imports neither")
}

#[cfg(test)]
mod tests {
    use super::{STD_MODULES, join_relative, parse_std};
    use rlc_diagnostics::Files;

    #[test]
    fn a_std_module_parsed_again_is_the_module_parsed_first() {
        let mut files = Files::new();
        for (_, name, text) in STD_MODULES {
            let file = files.add(name.to_string(), text.to_string());
            let fresh = rlc_syntax::parse(file, text);
            assert!(fresh.diagnostics.is_empty(), "{name}");
            for _ in 0..2 {
                let parsed = parse_std(file, name, text);
                assert_eq!(parsed.module, fresh.module, "{name}");
                assert!(parsed.diagnostics.is_empty() && parsed.broken.is_empty());
            }
        }
    }

    #[test]
    fn relative_paths_fold_dots() {
        assert_eq!(join_relative("dir/main.rl", "./lib/x.rl"), "dir/lib/x.rl");
        assert_eq!(join_relative("dir/sub/main.rl", "../x.rl"), "dir/x.rl");
        assert_eq!(join_relative("main.rl", "x.rl"), "x.rl");
        assert_eq!(join_relative("main.rl", "../x.rl"), "../x.rl");
    }
}
