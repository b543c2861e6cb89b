//! Find references, document highlights and rename, across modules.
//!
//! A name resolves (with [`resolve`]) to a declaration, which is the same in every check that
//! read its file: the file's name and the span of the declared name ([`Decl`]). References are
//! the names that resolve to it in the user modules of
//!
//! - the check of the document asked about (the document and everything it imports),
//! - the checks of the other open documents (each with what it imports), and
//! - for a `pub` item of a user file, the checks of the files on disk under the workspace
//!   folders (else the document's directory) whose imports name that file: a module that
//!   uses the item is one that imports it.
//!
//! Rename edits each reference spelled as the declared name: a use through an alias
//! (`import "./lib.rl" { twice as t }`) keeps the alias, and renaming the alias renames it
//! and its uses in its module only. Builtins, role operations, std items and modules are
//! refused with a message that says why.

use super::analysis::{Analysis, Documents, UriMap};
use super::resolve::{self, Role, Target};
use super::text::{LineIndex, positions_in_order, uri_to_path};
use lsp_server::ErrorCode;
use lsp_types::{
    DocumentHighlight, DocumentHighlightKind, Location, PrepareRenameResponse, Range, TextEdit,
    Uri, WorkspaceEdit,
};
use rlc_check::SourceLoader;
use rlc_diagnostics::Span;
use rlc_syntax::ast::{ImportSource, ItemKind};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The workspace folders the client named at `initialize` (`workspaceFolders`, else
/// `rootUri`, else `rootPath`), searched for files that import a renamed item.
static ROOTS: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Reads the workspace folders from the `initialize` request's parameters.
pub fn set_roots(params: &serde_json::Value) {
    let mut roots: Vec<PathBuf> = params["workspaceFolders"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| uri_to_path(f["uri"].as_str()?))
        .collect();
    if roots.is_empty() {
        roots.extend(params["rootUri"].as_str().and_then(uri_to_path));
    }
    if roots.is_empty() {
        roots.extend(params["rootPath"].as_str().map(PathBuf::from));
    }
    let _ = ROOTS.set(roots);
}

/// Files under the roots searched at most, and the depth searched: a rename in a home
/// directory opened as the workspace must not read the whole disk.
const MAX_FILES: usize = 10_000;
const MAX_DEPTH: usize = 12;

/// What the server knows: the check of the document asked about and those of the other open
/// documents.
pub struct World<'a> {
    pub current: &'a Analysis,
    pub open: Vec<&'a Analysis>,
    pub sources: &'a Documents,
    pub uris: &'a UriMap,
}

/// A declaration: the checker's name of its file and the span of the declared name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Decl {
    pub file: String,
    pub span: Span,
}

/// One name that refers to a declaration.
#[derive(Clone, Debug)]
pub struct Ref {
    pub file: String,
    pub span: Span,
    pub role: Role,
    /// The name as written there.
    pub text: String,
}

/// The name at `offset` of the current document and what it stands for.
#[derive(Clone)]
struct AtCursor {
    span: Span,
    text: String,
    target: Option<Target>,
}

type Failure = (ErrorCode, String);

fn at_cursor(a: &Analysis, offset: u32) -> Option<AtCursor> {
    let found = resolve::at(&a.checked.modules, 0, offset).found?;
    let text = a.files.get(a.root_file()).text.get(found.span.range())?;
    Some(AtCursor {
        span: found.span,
        text: text.to_string(),
        target: found.target,
    })
}

/// The declaration `target` (met in module `module` of `a`) stands for.
fn decl_of(a: &Analysis, module: usize, target: &Target) -> Decl {
    let modules = &a.checked.modules;
    let (m, span) = match target {
        Target::Local(l) => (module, l.ident.span),
        Target::Item { module, index } => {
            let item = modules.get(*module).item(*index);
            (*module, item.name().map_or(item.span, |n| n.span))
        }
        Target::Module(m) => (*m, Span::point(0)),
        Target::Field { module, key } => (*module, key.span),
    };
    Decl {
        file: modules.get(m).name.clone(),
        span,
    }
}

/// Adds the references to `decl` in the user modules of `a` (for a local, only its module's).
fn refs_in(a: &Analysis, decl: &Decl, local: bool, out: &mut BTreeMap<(String, Span), Ref>) {
    let modules = &a.checked.modules;
    for (i, m) in modules.modules.iter().enumerate() {
        if m.is_std || (local && m.name != decl.file) {
            continue;
        }
        let text = &a.files.get(m.file).text;
        for occ in resolve::occurrences(modules, i) {
            let Some(target) = &occ.target else { continue };
            if decl_of(a, i, target) != *decl {
                continue;
            }
            out.entry((m.name.clone(), occ.span))
                .or_insert_with(|| Ref {
                    file: m.name.clone(),
                    span: occ.span,
                    role: occ.role,
                    text: text.get(occ.span.range()).unwrap_or_default().to_string(),
                });
        }
    }
}

/// Every reference to what the name at `offset` stands for, in order of file and position,
/// with that declaration and whether it may have uses outside its module.
fn all_refs(w: &World, offset: u32) -> Option<(AtCursor, Decl, Vec<Ref>)> {
    let cursor = at_cursor(w.current, offset)?;
    let target = cursor.target.clone()?;
    let decl = decl_of(w.current, 0, &target);
    let local = matches!(target, Target::Local(_));
    let mut out = BTreeMap::new();
    refs_in(w.current, &decl, local, &mut out);
    if !local {
        for a in &w.open {
            refs_in(a, &decl, false, &mut out);
        }
        if exported(w.current, &target) {
            for a in importers_on_disk(w, &decl.file) {
                refs_in(&a, &decl, false, &mut out);
            }
        }
    }
    Some((cursor, decl, out.into_values().collect()))
}

/// Whether other user files may use the target: a `pub` item of a user file, a field of an
/// item or a user module.
fn exported(a: &Analysis, target: &Target) -> bool {
    let modules = &a.checked.modules;
    match target {
        Target::Item { module, index } => {
            let m = modules.get(*module);
            !m.is_std && m.item(*index).is_pub
        }
        Target::Field { module, .. } | Target::Module(module) => !modules.get(*module).is_std,
        Target::Local(_) => false,
    }
}

/// The checks, as roots, of the `.rl` files on disk (or open) that import `file` and that no
/// check at hand has read.
fn importers_on_disk(w: &World, file: &str) -> Vec<Analysis> {
    let seen = |name: &str| {
        std::iter::once(w.current)
            .chain(w.open.iter().copied())
            .any(|a| a.checked.modules.modules.iter().any(|m| m.name == name))
    };
    let mut roots: Vec<PathBuf> = ROOTS.get().cloned().unwrap_or_default();
    if roots.is_empty()
        && let Some(dir) = Path::new(file).parent()
    {
        roots.push(dir.to_path_buf());
    }
    let mut out = Vec::new();
    for path in rl_files(&roots) {
        let name = path.to_string_lossy().replace('\\', "/");
        if name == file || seen(&name) {
            continue;
        }
        let Ok(text) = w.sources.read(&name) else {
            continue;
        };
        if text.len() > super::MAX_CHECKED || !imports_file(&name, &text, file) {
            continue;
        }
        out.push(Analysis::run(w.sources, &name, text));
    }
    out
}

/// Whether the module `name` (with source `text`) imports the file `file`.
fn imports_file(name: &str, text: &str, file: &str) -> bool {
    let parsed = rlc_syntax::parse(rlc_diagnostics::FileId(0), text);
    parsed.module.items.iter().any(|item| {
        matches!(&item.kind, ItemKind::Import(i)
            if matches!(&i.source, ImportSource::File(s) if resolve::join_relative(name, &s.value) == file))
    })
}

/// The `.rl` files under `roots`, sorted, skipping hidden directories and build outputs, at
/// most [`MAX_FILES`] entries looked at and [`MAX_DEPTH`] levels deep.
fn rl_files(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut looked = 0usize;
    let mut stack: Vec<(PathBuf, usize)> = roots.iter().map(|r| (r.clone(), 0)).collect();
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            looked += 1;
            if looked > MAX_FILES {
                return out;
            }
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                if depth < MAX_DEPTH
                    && !name.starts_with('.')
                    && !matches!(name.as_ref(), "target" | "node_modules")
                {
                    stack.push((e.path(), depth + 1));
                }
            } else if kind.is_file() && name.ends_with(".rl") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The locations of references given in order of file and position (as [`all_refs`] gives
/// them), with each reference: each file's text is read and walked once.
fn locations<'r>(w: &World, refs: &[&'r Ref]) -> Vec<(Location, &'r Ref)> {
    let mut out = Vec::new();
    for group in refs.chunk_by(|a, b| a.file == b.file) {
        let file = &group[0].file;
        let (Some(uri), Some(text)) = (w.uris.uri(file), text_of(w, file)) else {
            continue;
        };
        let spans = group.iter().flat_map(|r| [r.span.start, r.span.end]);
        let positions = positions_in_order(&text, spans.map(|o| o as usize));
        for (r, p) in group.iter().zip(positions.chunks(2)) {
            out.push((Location::new(uri.clone(), Range::new(p[0], p[1])), *r));
        }
    }
    out
}

/// The text of a user file as the checks at hand read it.
fn text_of(w: &World, file: &str) -> Option<String> {
    std::iter::once(w.current)
        .chain(w.open.iter().copied())
        .flat_map(|a| a.files.iter().map(|(_, f)| f))
        .find(|f| f.name == file)
        .map(|f| f.text.clone())
        .or_else(|| w.sources.read(file).ok())
}

/// `textDocument/references`.
pub fn references(w: &World, offset: u32, include_declaration: bool) -> Option<Vec<Location>> {
    let (_, decl, refs) = all_refs(w, offset)?;
    let refs: Vec<&Ref> = refs
        .iter()
        .filter(|r| include_declaration || !(r.file == decl.file && r.span == decl.span))
        .collect();
    Some(locations(w, &refs).into_iter().map(|(l, _)| l).collect())
}

/// `textDocument/documentHighlight`: the references in the document itself; declarations and
/// assignments are writes.
pub fn highlights(w: &World, offset: u32) -> Option<Vec<DocumentHighlight>> {
    let cursor = at_cursor(w.current, offset)?;
    let target = cursor.target?;
    let decl = decl_of(w.current, 0, &target);
    let mut out = BTreeMap::new();
    refs_in(
        w.current,
        &decl,
        matches!(target, Target::Local(_)),
        &mut out,
    );
    let root = &w.current.checked.modules.get(0).name;
    let refs: Vec<&Ref> = out.values().filter(|r| r.file == *root).collect();
    Some(
        locations(w, &refs)
            .into_iter()
            .map(|(l, r)| DocumentHighlight {
                range: l.range,
                kind: Some(match r.role {
                    Role::Item | Role::Param | Role::Let | Role::Assign => {
                        DocumentHighlightKind::WRITE
                    }
                    Role::Import => DocumentHighlightKind::TEXT,
                    _ => DocumentHighlightKind::READ,
                }),
            })
            .collect(),
    )
}

/// Why the name at the cursor cannot be renamed, or what it stands for.
fn renamable(w: &World, offset: u32) -> Result<(AtCursor, Target), Failure> {
    let refused = |m: String| Err((ErrorCode::RequestFailed, m));
    let Some(cursor) = at_cursor(w.current, offset) else {
        return refused("there is no name here to rename".into());
    };
    let name = cursor.text.clone();
    let modules = &w.current.checked.modules;
    match &cursor.target {
        None => {
            let role = resolve::occurrences(modules, 0)
                .into_iter()
                .find(|o| o.span == cursor.span)
                .map(|o| o.role);
            let what = match role {
                Some(Role::Member) => "a role operation or a field of a record",
                Some(Role::Label) => "a named argument or a field of a record",
                Some(Role::Item) => "a field of a struct (renaming fields is not supported)",
                Some(Role::Type) => "a type or role kind of the language",
                Some(Role::Dim) => "a named dimension, which has no declaration",
                Some(Role::Phase) => "a phase of a role",
                _ => "a builtin of the language (or a name not found)",
            };
            refused(format!(
                "`{name}` cannot be renamed: it is {what}, not a declaration of this program"
            ))
        }
        // An `as` alias of a module: the alias and its uses, in this module.
        Some(t @ Target::Module(_)) if module_alias(w.current, &name) => {
            Ok((cursor.clone(), t.clone()))
        }
        Some(Target::Module(m)) => refused(format!(
            "`{name}` names the module `{}`: rename its file, or give the import an `as` alias",
            modules.get(*m).name.trim_start_matches("<std>/")
        )),
        Some(Target::Item { module, .. } | Target::Field { module, .. })
            if modules.get(*module).is_std =>
        {
            refused(format!(
                "`{name}` is declared in the standard library (`{}`), which cannot be edited",
                modules.get(*module).name.trim_start_matches("<std>/")
            ))
        }
        Some(t) => Ok((cursor.clone(), t.clone())),
    }
}

/// Whether `name` is the `as` alias of a module import of the document.
fn module_alias(a: &Analysis, name: &str) -> bool {
    a.checked.modules.get(0).ast.items.iter().any(|item| {
        matches!(&item.kind, ItemKind::Import(i)
            if i.alias.as_ref().is_some_and(|alias| alias.name == name))
    })
}

/// `textDocument/prepareRename`: the name's range and text, or why it cannot be renamed.
pub fn prepare_rename(w: &World, offset: u32) -> Result<PrepareRenameResponse, Failure> {
    let (cursor, _) = renamable(w, offset)?;
    let text = &w.current.files.get(w.current.root_file()).text;
    Ok(PrepareRenameResponse::RangeWithPlaceholder {
        range: LineIndex::new(text).range(cursor.span),
        placeholder: cursor.text,
    })
}

/// `textDocument/rename`: one edit per reference spelled as the name at the cursor.
// `WorkspaceEdit::changes` is lsp-types' map keyed by `Uri`, whose cached parts clippy
// counts as interior mutability; the keys are never changed.
#[allow(clippy::mutable_key_type)]
pub fn rename(w: &World, offset: u32, new_name: &str) -> Result<WorkspaceEdit, Failure> {
    let (cursor, _) = renamable(w, offset)?;
    let valid = new_name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && new_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err((
            ErrorCode::InvalidParams,
            format!("`{new_name}` is not a name: a letter or `_`, then letters, digits or `_`"),
        ));
    }
    if rlc_syntax::ast::KEYWORDS.contains(&new_name) {
        return Err((
            ErrorCode::InvalidParams,
            format!("`{new_name}` is a keyword"),
        ));
    }
    let Some((_, decl, refs)) = all_refs(w, offset) else {
        return Err((ErrorCode::RequestFailed, "nothing to rename here".into()));
    };
    // Through an alias: the alias and its uses, in this module only.
    let root = w.current.checked.modules.get(0).name.clone();
    let alias = cursor.text != decl_name(w, &decl);
    let edited = |r: &&Ref| r.text == cursor.text && (!alias || r.file == root);
    if let Some(r) = refs.iter().filter(edited).find(|r| clashes(w, r, new_name)) {
        let line = text_of(w, &r.file).map_or(0, |t| {
            LineIndex::new(&t).position(r.span.start as usize).line + 1
        });
        return Err((
            ErrorCode::RequestFailed,
            format!(
                "`{new_name}` is already in scope at {}:{line}: renaming `{}` would change what \
                 that name refers to",
                r.file, cursor.text
            ),
        ));
    }
    let mut changes: HashMap<Uri, Vec<TextEdit>> = HashMap::new();
    let refs: Vec<&Ref> = refs.iter().filter(edited).collect();
    for (loc, _) in locations(w, &refs) {
        changes
            .entry(loc.uri)
            .or_default()
            .push(TextEdit::new(loc.range, new_name.to_string()));
    }
    Ok(WorkspaceEdit {
        changes: Some(changes),
        ..Default::default()
    })
}

/// Whether `name` already means something where `r` is (a local in scope there, an item or
/// an import of its module), in a module of the current check.
fn clashes(w: &World, r: &Ref, name: &str) -> bool {
    let modules = &w.current.checked.modules;
    let Some(m) = resolve::module_named(modules, &r.file) else {
        return false;
    };
    if modules.get(m).lookup(m, name).is_some() {
        return true;
    }
    let walk = resolve::at(modules, m, r.span.start);
    walk.visible.iter().flatten().any(|l| l.ident.name == name)
}

/// The name a declaration declares, as written.
fn decl_name(w: &World, decl: &Decl) -> String {
    text_of(w, &decl.file)
        .and_then(|t| t.get(decl.span.range()).map(str::to_string))
        .unwrap_or_default()
}
