//! What `rlc doc` documents, gathered from checked programs: the modules, their documented
//! items with headers (the hover's, [`signature::header`]), parameters, fields, definitions
//! and `///` text, and the cross-links, each resolved by the checker's own name binding
//! ([`LoadedModule::lookup`]). The renderers ([`super::markdown`], [`super::html`]) read only
//! this model.

use super::super::signature;
use rlc_check::Checked;
use rlc_check::modules::{Binding, LoadedModule};
use rlc_diagnostics::{Files, Span};
use rlc_syntax::ast::{Item, ItemKind, KEYWORDS, Param};
use std::collections::{BTreeMap, BTreeSet};

/// Every documented module, sorted by name.
#[derive(Debug)]
pub struct Docs {
    pub modules: Vec<ModuleDoc>,
}

#[derive(Debug)]
pub struct ModuleDoc {
    /// `std.algo`, or the path of a user module as it was named or imported.
    pub name: String,
    /// The page's file name without its extension (`std.algo`, `lib.rewards`).
    pub page: String,
    /// The `//!` text.
    pub doc: Option<String>,
    /// In source order.
    pub items: Vec<ItemDoc>,
}

#[derive(Debug)]
pub struct ItemDoc {
    /// `fn`, `struct`, `model`, `let`, `pipeline`, …
    pub keyword: &'static str,
    pub name: String,
    /// The id of the item on its page: `fn-masked_sum` (lower case, as GitHub makes the
    /// anchor of the heading `fn masked_sum`).
    pub anchor: String,
    /// The hover's header, with links.
    pub header: Text,
    /// A `fn`'s or `pipeline`'s parameters.
    pub params: Vec<ParamDoc>,
    /// A `struct`'s fields: name and type.
    pub fields: Vec<(String, Text)>,
    /// The source of a `let`, `model`, `dataset`, `cluster` or `verifier` (doc comments left
    /// out), with links.
    pub definition: Option<Text>,
    /// The `///` text.
    pub doc: Option<String>,
    /// Whether the item is a recipe: a pipeline generic over roles, data or functions, which a
    /// job instantiates as its pipeline's body.
    pub recipe: bool,
}

#[derive(Debug)]
pub struct ParamDoc {
    pub name: String,
    /// The annotation as written, or else the checked type of the default.
    pub ty: Option<Text>,
    /// Whether `ty` is the checked type of the default rather than an annotation.
    pub inferred: bool,
    pub default: Option<Text>,
    /// For a recipe's generic parameter, what it takes: `a role`, `a dataset`, …
    pub generic: Option<&'static str>,
}

/// Source text in pieces: plain text and names that link to another documented item.
pub type Text = Vec<Piece>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Plain(String),
    Link { text: String, to: Target },
}

/// Where a documented item is: its module's page and its anchor there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub page: String,
    pub anchor: String,
    /// The module that declares the item, and the item's name.
    pub module: String,
    pub name: String,
}

impl Target {
    /// How a reader names the item: `std.task.digits.reverse`, or `name` in
    /// `lib/weights.rl` for a module that is a file.
    pub fn path(&self) -> String {
        if self.module.ends_with(".rl") {
            format!("{} in {}", self.name, self.module)
        } else {
            format!("{}.{}", self.module, self.name)
        }
    }
}

/// Which items are documented: `pub` ones and pipelines (a job's entry point); with
/// `private`, every named item.
pub fn is_documented(item: &Item, private: bool) -> bool {
    item.name().is_some() && (private || item.is_pub || matches!(item.kind, ItemKind::Pipeline(_)))
}

/// The module `module` of check `check`: one to document.
pub struct Source<'a> {
    pub checked: &'a Checked,
    pub module: usize,
}

/// Builds the model of `sources` (each module once: a module reached from several roots is
/// taken from the first), whose files are in `files`.
pub fn build(sources: &[Source], files: &Files, private: bool) -> Docs {
    let mut chosen: BTreeMap<String, &Source> = BTreeMap::new();
    for s in sources {
        let m = s.checked.modules.get(s.module);
        chosen.entry(m.name.clone()).or_insert(s);
    }
    // Pages, then every documented item's target.
    let mut pages: BTreeMap<String, String> = BTreeMap::new();
    let mut taken: BTreeSet<String> = ["index", "README", "search-index"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for name in chosen.keys() {
        let base = page_name(name);
        let mut page = base.clone();
        let mut n = 2;
        while !taken.insert(page.clone()) {
            page = format!("{base}-{n}");
            n += 1;
        }
        pages.insert(name.clone(), page);
    }
    let mut targets: BTreeMap<(String, String), Target> = BTreeMap::new();
    for (name, s) in &chosen {
        let m = s.checked.modules.get(s.module);
        for item in m.ast.items.iter().filter(|i| is_documented(i, private)) {
            let item_name = item.name().map(|n| n.name.clone()).unwrap_or_default();
            targets.insert(
                (name.clone(), item_name.clone()),
                Target {
                    page: pages[name].clone(),
                    anchor: anchor(item.keyword(), &item_name),
                    module: name.clone(),
                    name: item_name.clone(),
                },
            );
        }
    }
    let modules = chosen
        .iter()
        .map(|(name, s)| {
            let m = s.checked.modules.get(s.module);
            let scope = Scope {
                checked: s.checked,
                module: s.module,
                targets: &targets,
            };
            let text = &files.get(m.file).text;
            ModuleDoc {
                name: name.clone(),
                page: pages[name].clone(),
                doc: m.ast.doc.clone(),
                items: m
                    .ast
                    .items
                    .iter()
                    .filter(|i| is_documented(i, private))
                    .map(|i| item_doc(&scope, m, text, i))
                    .collect(),
            }
        })
        .collect();
    Docs { modules }
}

/// The page of a module: `std.algo` as it is; a user module's path without `.rl`, `./` and
/// `../`, its `/` as `.` and anything but letters, digits, `_`, `-` and `.` as `_`.
fn page_name(module: &str) -> String {
    let path = module.strip_suffix(".rl").unwrap_or(module);
    let parts: Vec<String> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
        .map(|p| {
            p.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        })
        .collect();
    let page = parts.join(".");
    if page.is_empty() || page.starts_with('.') {
        format!("module{page}")
    } else {
        page
    }
}

impl ItemDoc {
    /// Whether the header is worth showing: an item shown by its source shows the header
    /// only when it adds a checked type (a `let`).
    pub fn shows_header(&self) -> bool {
        self.definition.is_none() || self.keyword == "let"
    }

    /// The items this one links to, each once, in order of first mention (never itself: its
    /// own name is not linked).
    pub fn targets(&self) -> Vec<&Target> {
        let texts = std::iter::once(&self.header)
            .chain(
                self.params
                    .iter()
                    .flat_map(|p| p.ty.iter().chain(p.default.iter())),
            )
            .chain(self.fields.iter().map(|(_, t)| t))
            .chain(self.definition.iter());
        let mut out: Vec<&Target> = Vec::new();
        for piece in texts.flatten() {
            if let Piece::Link { to, .. } = piece
                && !out.contains(&to)
            {
                out.push(to);
            }
        }
        out
    }
}

/// The heading of the index: `std` when only std is documented.
pub fn title(docs: &Docs) -> &'static str {
    if !docs.modules.is_empty() && docs.modules.iter().all(|m| m.name.starts_with("std.")) {
        "The standard library"
    } else {
        "Modules"
    }
}

/// The first paragraph of a module's `//!` text, on one line.
pub fn summary(doc: Option<&str>) -> String {
    let doc = doc.unwrap_or("").trim();
    let first = doc.split("\n\n").next().unwrap_or("");
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn anchor(keyword: &str, name: &str) -> String {
    format!("{keyword}-{name}").to_lowercase()
}

/// Where names in a module's text are resolved.
struct Scope<'a> {
    checked: &'a Checked,
    module: usize,
    targets: &'a BTreeMap<(String, String), Target>,
}

impl Scope<'_> {
    /// The documented item that the dotted name `path` names in this module.
    fn resolve(&self, path: &[&str]) -> Option<Target> {
        let modules = &self.checked.modules;
        let mut binding = modules.get(self.module).lookup(self.module, path[0])?;
        for seg in &path[1..] {
            let Binding::Module(m) = binding else {
                break;
            };
            let index = *modules.get(m).items.get(*seg)?;
            binding = Binding::Item { module: m, index };
        }
        let Binding::Item { module, index } = binding else {
            return None;
        };
        let m = modules.get(module);
        let name = m.item(index).name()?.name.clone();
        self.targets.get(&(m.name.clone(), name)).cloned()
    }

    /// `text` in pieces, each dotted name that resolves to a documented item (other than
    /// those in `skip`: the item's own name and its parameters) a link. Names followed by `:`
    /// or `=` (parameter, argument and field names) and names inside strings are left as text.
    fn link(&self, text: &str, skip: &BTreeSet<&str>) -> Text {
        let mut out: Text = Vec::new();
        let mut plain = String::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'"' {
                let end = string_end(bytes, i);
                plain.push_str(&text[i..end]);
                i = end;
            } else if c.is_ascii_digit() {
                let end = word_end(bytes, i);
                plain.push_str(&text[i..end]);
                i = end;
            } else if c.is_ascii_alphabetic() || c == b'_' {
                // A dotted name: `a`, `algo.grpo`.
                let mut end = word_end(bytes, i);
                while end + 1 < bytes.len()
                    && bytes[end] == b'.'
                    && (bytes[end + 1].is_ascii_alphabetic() || bytes[end + 1] == b'_')
                {
                    end = word_end(bytes, end + 1);
                }
                let word = &text[i..end];
                let after = text[end..].trim_start();
                let named =
                    after.starts_with(':') || (after.starts_with('=') && !after.starts_with("=="));
                let after_dot = i > 0 && bytes[i - 1] == b'.';
                let path: Vec<&str> = word.split('.').collect();
                let target = (!named
                    && !after_dot
                    && !skip.contains(path[0])
                    && !KEYWORDS.contains(&path[0]))
                .then(|| self.resolve(&path))
                .flatten();
                match target {
                    Some(to) => {
                        if !plain.is_empty() {
                            out.push(Piece::Plain(std::mem::take(&mut plain)));
                        }
                        out.push(Piece::Link {
                            text: word.to_string(),
                            to,
                        });
                    }
                    None => plain.push_str(word),
                }
                i = end;
            } else {
                let len = text[i..].chars().next().map_or(1, char::len_utf8);
                plain.push_str(&text[i..i + len]);
                i += len;
            }
        }
        if !plain.is_empty() {
            out.push(Piece::Plain(plain));
        }
        out
    }
}

fn word_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
        i += 1;
    }
    i
}

/// The end of the string literal that starts at `start` (after its closing quote).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

fn item_doc(scope: &Scope, m: &LoadedModule, text: &str, item: &Item) -> ItemDoc {
    let name = item.name().map(|n| n.name.clone()).unwrap_or_default();
    let source = |span: Span| text.get(span.range()).unwrap_or("");
    let params: &[Param] = match &item.kind {
        ItemKind::Fn(f) => &f.params,
        ItemKind::Pipeline(p) => &p.params,
        _ => &[],
    };
    // The item's own name is never a link. Parameter names are not links where they are
    // declared: followed by `:` or `=` (which `Scope::link` leaves alone) or, for a bare
    // parameter, anywhere in the header. Defaults are resolved in the module's scope.
    let own = BTreeSet::from([name.as_str()]);
    let mut bare = own.clone();
    bare.extend(
        params
            .iter()
            .filter(|p| p.ty.is_none() && p.default.is_none())
            .map(|p| p.name.name.as_str()),
    );
    // A pipeline's parameters one a line when they do not fit on one (a recipe's settings).
    let header = match item.kind {
        ItemKind::Pipeline(_) => {
            signature::header_wrapped(&scope.checked.types, m.file, text, item, 80)
        }
        _ => signature::header(&scope.checked.types, m.file, text, item),
    };
    let header = scope.link(&header, &bare);
    let params = params
        .iter()
        .map(|p| {
            let checked = || {
                let d = p.default.as_ref()?;
                let key = (m.file, d.span.start, d.span.end);
                // The type alone: a constant's type reads `i64 = 2`, and the default has
                // its own column.
                let ty = scope.checked.types.get(&key)?.without_value();
                Some(scope.link(&ty, &own))
            };
            let (ty, inferred) = match &p.ty {
                Some(t) => (Some(scope.link(source(t.span), &own)), false),
                None => (checked(), true),
            };
            ParamDoc {
                name: p.name.name.clone(),
                inferred: inferred && ty.is_some(),
                ty,
                default: p
                    .default
                    .as_ref()
                    .map(|d| scope.link(&signature::collapse(source(d.span)), &own)),
                generic: signature::generic_kind(p).map(generic_kind),
            }
        })
        .collect();
    let fields = match &item.kind {
        ItemKind::Struct(s) => s
            .fields
            .iter()
            .map(|f| (f.name.name.clone(), scope.link(source(f.ty.span), &own)))
            .collect(),
        _ => Vec::new(),
    };
    // Every item shown by its source but functions, structs and pipelines (whose header,
    // parameters and fields say it all; a function's body is not its interface), and
    // constants whose header already shows the value as written (`let width: i64 = 6`).
    let shows_value = match &item.kind {
        ItemKind::Const(c) => {
            let header = plain(&header);
            header.ends_with(&format!(" = {}", signature::collapse(source(c.value.span))))
        }
        _ => false,
    };
    let defined = !shows_value
        && !matches!(
            item.kind,
            ItemKind::Fn(_)
                | ItemKind::Struct(_)
                | ItemKind::Pipeline(_)
                | ItemKind::Import(_)
                | ItemKind::Place(_)
        );
    let definition = defined.then(|| scope.link(&item_source(source(item.span)), &own));
    ItemDoc {
        keyword: item.keyword(),
        anchor: anchor(item.keyword(), &name),
        name,
        header,
        params,
        fields,
        definition,
        doc: item.doc.as_ref().map(|d| d.trim().to_string()),
        recipe: signature::is_recipe(item),
    }
}

/// What a recipe's generic parameter takes, as the parameter table says it.
fn generic_kind(kind: rlc_check::recipes::GenericParam) -> &'static str {
    use rlc_check::recipes::GenericParam as G;
    match kind {
        G::Role(_) => "a role",
        G::Dataset => "a dataset",
        G::Verifier => "a verifier",
        G::Environment => "an environment",
        G::Fn => "a function",
    }
}

/// The sentence under a recipe's header: what a recipe is and how a job uses it.
pub fn recipe_note(name: &str) -> String {
    format!(
        "A recipe: a generic pipeline that a job instantiates with its own roles, data and \
         settings, as its pipeline's whole body: `pipeline train {{ {name}(…) }}`."
    )
}

/// The text of `text`, links as their names.
pub fn plain(text: &Text) -> String {
    text.iter()
        .map(|p| match p {
            Piece::Plain(s) => s.as_str(),
            Piece::Link { text, .. } => text.as_str(),
        })
        .collect()
}

/// An item's source without the comment lines its span starts with and without trailing
/// whitespace on each line.
fn item_source(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim_start().starts_with("//") || l.trim().is_empty())
        .map(str::trim_end)
        .collect();
    lines.join("\n").trim_end().to_string()
}
