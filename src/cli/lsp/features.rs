//! Hover, go-to-definition, completion, document symbols and formatting, computed from one
//! [`Analysis`] of the document.

use super::super::signature;
use super::analysis::{Analysis, UriMap};
use super::calls;
use super::resolve::{self, Found, Local, Target};
use super::text::LineIndex;
use lsp_types::{
    CompletionItem, CompletionItemKind, DocumentSymbol, Documentation, Hover, HoverContents,
    Location, MarkupContent, MarkupKind, ParameterInformation, ParameterLabel, SignatureHelp,
    SignatureInformation, SymbolKind, TextEdit,
};
use rlc_check::checks::memory;
use rlc_check::modules::Modules;
use rlc_check::program::{Layout, Op, Phase, Program, RoleKind};
use rlc_diagnostics::{FileId, Span};
use rlc_syntax::ast::{self, Item, ItemKind};
use std::collections::BTreeMap;
use std::fmt::Write;

// ---------------------------------------------------------------------------------------------
// Hover

pub fn hover(a: &Analysis, offset: u32) -> Option<Hover> {
    let root = a.root_file();
    let text = &a.files.get(root).text;
    let walk = resolve::at(&a.checked.modules, 0, offset);
    let mut sections: Vec<String> = Vec::new();
    let mut range = None;
    let param = match &walk.found {
        Some(Found {
            target: Some(Target::Local(local)),
            span,
        }) => own_param(a, &local.ident).filter(|(item, _)| {
            // A pipeline's parameter anywhere (a recipe's body is checked only where a job
            // instantiates it: it has no types of its own); a function's where it is declared
            // (its uses show their checked types).
            matches!(item.kind, ItemKind::Pipeline(_)) || *span == local.ident.span
        }),
        _ => None,
    };
    if let Some((item, p)) = param {
        sections.push(param_hover(text, item, p));
        range = walk.found.as_ref().map(|f| f.span);
    } else if let Some(label) = &walk.label
        && let Some((module, item, p)) = callee_param(&a.checked.modules, label)
    {
        let m = a.checked.modules.get(module);
        sections.push(param_hover(&a.files.get(m.file).text, item, p));
        range = Some(label.span);
    }
    match walk.found.as_ref().filter(|_| sections.is_empty()) {
        Some(Found {
            span,
            target: Some(Target::Item { module, index }),
            ..
        }) => {
            sections.push(item_hover(a, *module, *index));
            range = Some(*span);
        }
        Some(Found {
            span,
            target: Some(Target::Module(m)),
            ..
        }) => {
            let module = a.checked.modules.get(*m);
            let mut s = format!("```rl\nmodule {}\n```", module.name);
            if let Some(doc) = &module.ast.doc {
                s.push_str("\n\n");
                s.push_str(doc.trim());
            }
            sections.push(s);
            range = Some(*span);
        }
        Some(Found {
            span,
            target:
                Some(Target::Local(Local {
                    ident,
                    value: Some(value),
                })),
        }) if span == &ident.span => {
            // A local's declaration: the type of its value.
            if let Some(ty) = a.checked.types.get(&(root, value.start, value.end)) {
                sections.push(format!("```rl\n{}: {ty}\n```", ident.name));
                range = Some(*span);
            }
        }
        _ => {}
    }
    if sections.is_empty() {
        // The innermost expression with a type that contains the cursor.
        let (&(_, start, end), ty) = a
            .checked
            .types
            .iter()
            .filter(|((f, s, e), _)| *f == root && *s <= offset && offset <= *e)
            .min_by_key(|((_, s, e), _)| e - s)?;
        let span = Span { start, end };
        let src = text.get(span.range()).unwrap_or("");
        let shown = if src.len() <= 60 && !src.contains('\n') {
            format!("{src}: {ty}")
        } else {
            ty.to_string()
        };
        sections.push(format!("```rl\n{shown}\n```"));
        range = Some(span);
    }
    Some(Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value: sections.join("\n\n---\n\n"),
        }),
        range: range.map(|s| LineIndex::new(text).range(s)),
    })
}

/// The item's header line, its docs and, for a model, its role facts.
fn item_hover(a: &Analysis, module: usize, index: usize) -> String {
    let m = a.checked.modules.get(module);
    let item = m.item(index);
    let text = &a.files.get(m.file).text;
    let mut s = format!(
        "```rl\n{}\n```",
        signature::header_wrapped(&a.checked.types, m.file, text, item, 80)
    );
    if module != 0 {
        let _ = write!(s, "\n*in `{}`*", m.name);
    }
    if signature::is_recipe(item)
        && let Some(name) = item.name()
    {
        let _ = write!(
            s,
            "\n\n**recipe**: a generic pipeline; a job's pipeline body calls it once, \
             `pipeline train {{ {}(…) }}`",
            name.name
        );
    }
    if let Some(doc) = &item.doc {
        s.push_str("\n\n");
        s.push_str(doc.trim());
    }
    if let ItemKind::Model(md) = &item.kind
        && let Some(role) = role_hover(&a.checked.program, m.file, md.name.span)
    {
        s.push_str("\n\n");
        s.push_str(&role);
    }
    if let ItemKind::Cluster(c) = &item.kind
        && let Some(cluster) = cluster_hover(&a.checked.program, m.file, c.name.span)
    {
        s.push_str("\n\n");
        s.push_str(&cluster);
    }
    s
}

/// The function or pipeline of the root module that declares `ident` as a parameter, and
/// that parameter.
fn own_param<'a>(a: &'a Analysis, ident: &ast::Ident) -> Option<(&'a Item, &'a ast::Param)> {
    a.checked.modules.get(0).ast.items.iter().find_map(|item| {
        let p = signature::params(item)?
            .iter()
            .find(|p| p.name.span == ident.span)?;
        Some((item, p))
    })
}

/// The parameter a named argument names: the callee's parameter of that name, with the
/// callee's module and item.
fn callee_param<'a>(
    modules: &'a Modules,
    label: &resolve::Label,
) -> Option<(usize, &'a Item, &'a ast::Param)> {
    let Some(Target::Item { module, index }) = label.callee else {
        return None;
    };
    let item = modules.get(module).item(index);
    let p = signature::params(item)?
        .iter()
        .find(|p| p.name.name == label.name)?;
    Some((module, item, p))
}

/// A parameter as written, whose it is and, for a recipe's generic parameter, what it takes.
fn param_hover(text: &str, item: &Item, p: &ast::Param) -> String {
    let written = signature::collapse(text.get(p.span.range()).unwrap_or(&p.name.name));
    let owner = item.name().map_or(String::new(), |n| {
        format!("\n*parameter of `{} {}`*", item.keyword(), n.name)
    });
    let mut s = format!("```rl\n{written}\n```{owner}");
    if let Some(kind) = signature::generic_kind(p) {
        let _ = write!(
            s,
            "\n\ngeneric: {}, passed by the job that calls the recipe",
            signature::describe_generic(kind)
        );
    }
    s
}

/// A cluster's devices, and the roles placed on it.
fn cluster_hover(program: &Program, file: FileId, name: Span) -> Option<String> {
    let idx = program
        .clusters
        .iter()
        .position(|c| c.origin.file == file && c.origin.span == name)?;
    let c = &program.clusters[idx];
    let mut s = format!(
        "**cluster** `{}`: {} node(s) × {} device(s) = {} {}, {} each",
        c.name,
        c.nodes.value,
        c.devices_per_node.value,
        c.device_count(),
        c.device.name,
        memory::format_bytes(c.device.memory),
    );
    let placed: Vec<String> = program
        .placements
        .iter()
        .filter(|p| p.cluster == idx)
        .filter_map(|p| {
            let model = program.models.get(p.model)?;
            Some(match p.phase {
                Some(phase) => format!(
                    "`{}.{}` [{}..{}]",
                    model.name,
                    phase.as_str(),
                    p.devices.start,
                    p.devices.end
                ),
                None => format!("`{}` [{}..{}]", model.name, p.devices.start, p.devices.end),
            })
        })
        .collect();
    if !placed.is_empty() {
        let _ = write!(s, "\n\nplaced here: {}", placed.join(", "));
    }
    Some(s)
}

fn layout_text(l: &Layout) -> String {
    let parts: Vec<String> = [
        ("dp", l.dp),
        ("tp", l.tp),
        ("pp", l.pp),
        ("fsdp", l.fsdp),
        ("sp", l.sp),
        ("micro", l.micro),
    ]
    .iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k}({})", v.value)))
    .collect();
    if parts.is_empty() {
        "one device".to_string()
    } else {
        parts.join(", ")
    }
}

/// A role's kind, arch, placements with layouts and the memory estimate per device per phase.
pub fn role_hover(program: &Program, file: FileId, name: Span) -> Option<String> {
    let idx = program
        .models
        .iter()
        .position(|m| m.origin.file == file && m.origin.span == name)?;
    let model = &program.models[idx];
    let mut s = String::new();
    let _ = write!(s, "**role** `{}`: {}", model.name, model.kind.as_str());
    if model.frozen {
        s.push_str(", frozen");
    }
    if let Some(rlc_check::program::Init::CopyOf { model: src }) = &model.init
        && let Some(src) = program.models.get(*src)
    {
        let _ = write!(s, " (copy of `{}`)", src.name);
    }
    let ops: Vec<&str> = [
        Op::Generate,
        Op::Logprobs,
        Op::Values,
        Op::Score,
        Op::Update,
    ]
    .into_iter()
    .filter(|&op| model.kind.supports(op) && (op != Op::Update || !model.frozen))
    .map(Op::as_str)
    .collect();
    let _ = write!(s, "; operations: {}", ops.join(", "));
    if let Some(arch) = &model.arch {
        let _ = write!(
            s,
            "\n\n**arch**{}: {} layers, hidden {}, {} heads ({} KV), ffn {}, vocab {}, max_len {}; {} parameters",
            arch.preset
                .as_ref()
                .map(|p| format!(" `{p}`"))
                .unwrap_or_default(),
            arch.layers,
            arch.hidden,
            arch.heads,
            arch.kv_heads,
            arch.ffn,
            arch.vocab,
            arch.max_len,
            memory::human_count(memory::role_parameters(model.kind, arch)),
        );
    }
    let placements: Vec<(usize, &rlc_check::program::Placement)> = program
        .placements
        .iter()
        .enumerate()
        .filter(|(_, p)| p.model == idx)
        .collect();
    if placements.is_empty() {
        s.push_str("\n\n**placement**: none");
        if program.auto_place.is_some() {
            s.push_str(" (`place auto`: the planner places it)");
        }
        return Some(s);
    }
    s.push_str("\n\n**placements**");
    for (_, p) in &placements {
        let cluster = program
            .clusters
            .get(p.cluster)
            .map_or("?", |c| c.name.as_str());
        let phase = p.phase.map_or("all phases", Phase::as_str);
        let layout = if p.auto {
            "auto".to_string()
        } else {
            layout_text(&p.layout)
        };
        let _ = write!(
            s,
            "\n- {phase} on `{cluster}[{}..{}]` with {layout}",
            p.devices.start, p.devices.end
        );
    }
    // Every device of a placement holds the same estimate: one row per (placement, phase).
    let mut rows: BTreeMap<(usize, Phase), (memory::Breakdown, u64, f64, f64)> = BTreeMap::new();
    for device in memory::estimate(program) {
        for pm in device.phases.iter().filter(|pm| pm.model == idx) {
            let row = rows.entry((pm.placement, pm.phase)).or_insert((
                pm.breakdown.clone(),
                0,
                device.capacity,
                0.0,
            ));
            row.1 += device.devices.end - device.devices.start;
            row.3 = row.3.max(device.peak);
        }
    }
    if !rows.is_empty() {
        // Only the terms some phase has (a frozen role has no gradients).
        let terms: Vec<memory::Term> = memory::Term::ALL
            .into_iter()
            .filter(|&t| rows.values().any(|(b, ..)| b.get(t) > 0.0))
            .collect();
        s.push_str("\n\n**memory per device**\n\n| phase | devices | total |");
        for t in &terms {
            let _ = write!(s, " {} |", t.label());
        }
        s.push_str(" device peak / capacity |\n|---|---|---|");
        s.push_str(&"---|".repeat(terms.len() + 1));
        for ((_, phase), (b, n, capacity, peak)) in &rows {
            let bound = if b.is_lower_bound() { "≥ " } else { "" };
            let _ = write!(
                s,
                "\n| {} | {n} | {bound}{} |",
                phase.as_str(),
                memory::format_bytes(b.total())
            );
            for &t in &terms {
                let _ = write!(s, " {} |", memory::format_bytes(b.get(t)));
            }
            let _ = write!(
                s,
                " {} / {} |",
                memory::format_bytes(*peak),
                memory::format_bytes(*capacity)
            );
        }
        let unknown: Vec<&str> = rows
            .values()
            .flat_map(|(b, ..)| b.unknown.iter().map(|(_, q)| q.as_str()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !unknown.is_empty() {
            let _ = write!(
                s,
                "\n\n≥: a lower bound; the program does not fix the {}",
                unknown.join(", ")
            );
        }
    }
    Some(s)
}

// ---------------------------------------------------------------------------------------------
// Go to definition

/// The declaration the name at `offset` refers to, as a file name (the checker's) and span.
pub fn definition(a: &Analysis, offset: u32) -> Option<(FileId, Span)> {
    let walk = resolve::at(&a.checked.modules, 0, offset);
    let modules = &a.checked.modules;
    if let Some(label) = &walk.label
        && let Some((module, _, p)) = callee_param(modules, label)
    {
        return Some((modules.get(module).file, p.name.span));
    }
    let found = walk.found?;
    match found.target? {
        Target::Local(local) => Some((a.root_file(), local.ident.span)),
        Target::Item { module, index } => {
            let m = modules.get(module);
            let item = m.item(index);
            Some((m.file, item.name().map_or(item.span, |n| n.span)))
        }
        Target::Module(m) => Some((modules.get(m).file, Span::point(0))),
        Target::Field { module, key } => Some((modules.get(module).file, key.span)),
    }
}

pub fn location(a: &Analysis, uris: &UriMap, file: FileId, span: Span) -> Option<Location> {
    let f = a.files.get(file);
    Some(Location::new(
        uris.uri(&f.name)?,
        LineIndex::new(&f.text).range(span),
    ))
}

// ---------------------------------------------------------------------------------------------
// Completion

/// Completions at `offset` of `text` (the document as the editor has it). `a` is the analysis
/// of that text; `good` the latest analysis without syntax errors, which still knows the
/// locals and types of the code being typed.
pub fn completion(
    a: &Analysis,
    good: Option<&Analysis>,
    text: &str,
    offset: usize,
    read_file: &dyn Fn(&str) -> Option<String>,
) -> Vec<CompletionItem> {
    let before = &text[..offset.min(text.len())];
    let word_start = before
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| {
            i + before[i..].chars().next().map_or(1, char::len_utf8)
        });
    let head = &before[..word_start];

    // `import std.x { … }`: the module's pub items.
    if let Some(path) = open_import_braces(head) {
        return import_items(a, &path, read_file);
    }
    let line = head.rsplit('\n').next().unwrap_or("");
    if let Some(rest) = line.trim_start().strip_prefix("import ") {
        // `import std.ta|`, `import recipes.|`: std module paths, and those of the package and
        // its dependencies (docs/packages.md).
        let typed = rest.trim_start();
        if !typed.starts_with('"') {
            let prefix = typed.trim_end_matches(|c: char| c != '.');
            return rlc_check::std_lib::STD_MODULES
                .iter()
                .map(|(m, _, _)| m.to_string())
                .chain(package_module_paths(&a.checked.modules))
                .filter_map(|m| {
                    let tail = m.strip_prefix(prefix)?;
                    Some(item(
                        tail,
                        CompletionItemKind::MODULE,
                        Some(m.clone()),
                        None,
                    ))
                })
                .collect();
        }
        return Vec::new();
    }
    if let Some(base_part) = head.strip_suffix('.') {
        let base_start = base_part
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let base = &base_part[base_start..];
        if base.is_empty() || base.starts_with(|c: char| c.is_ascii_digit()) {
            return Vec::new();
        }
        return members(a, good, base, offset as u32);
    }
    if let Some(items) = argument_completions(a, good, text, word_start) {
        return items;
    }
    names_in_scope(a, good, offset as u32)
}

/// The `fn` or `pipeline` a call's callee names in the root module (`grpo`, `recipes.grpo`),
/// from the current analysis or else the last one without syntax errors: its module and item.
fn callee_item<'a>(
    a: &'a Analysis,
    good: Option<&'a Analysis>,
    callee: &[String],
) -> Option<(&'a Analysis, usize, &'a Item)> {
    for an in std::iter::once(a).chain(good) {
        let modules = &an.checked.modules;
        let Some(mut binding) = modules.get(0).lookup(0, &callee[0]) else {
            continue;
        };
        for seg in &callee[1..] {
            let rlc_check::modules::Binding::Module(m) = binding else {
                return None;
            };
            let index = *modules.get(m).items.get(seg)?;
            binding = rlc_check::modules::Binding::Item { module: m, index };
        }
        let rlc_check::modules::Binding::Item { module, index } = binding else {
            return None;
        };
        let item = modules.get(module).item(index);
        return signature::params(item)
            .is_some()
            .then_some((an, module, item));
    }
    None
}

/// Which parameter the argument at the cursor gives: the one it names, else the next one in
/// order while every argument before it is positional, else the first one not yet given.
fn active_param(call: &calls::CallAt, params: &[ast::Param]) -> Option<usize> {
    if let Some(name) = &call.named {
        return params.iter().position(|p| &p.name.name == name);
    }
    if call.before.iter().all(Option::is_none) {
        return (call.before.len() < params.len()).then_some(call.before.len());
    }
    let positional = call.before.iter().filter(|n| n.is_none()).count();
    params.iter().enumerate().position(|(i, p)| {
        i >= positional && !call.before.iter().flatten().any(|n| n == &p.name.name)
    })
}

/// Inside a call of a `fn` or `pipeline`: at the start of an argument, the parameters not yet
/// given (as `name: `) and what the next positional one takes; after `name:`, what that
/// parameter takes. A recipe's generic parameter takes the items of its kind (the job's
/// `CausalLM` models, its datasets, its functions); any other, the names in scope. `None`
/// elsewhere (in the middle of an argument's expression, outside a call).
fn argument_completions(
    a: &Analysis,
    good: Option<&Analysis>,
    text: &str,
    word_start: usize,
) -> Option<Vec<CompletionItem>> {
    let call = calls::call_at(text, word_start)?;
    let (an, module, callee) = callee_item(a, good, &call.callee)?;
    let params = signature::params(callee)?;
    let source = &an.files.get(an.checked.modules.get(module).file).text;
    let at_start = call.current.trim().is_empty();
    let after_name = call.named.is_some() && call.current.trim_end().ends_with(':');
    if !at_start && !after_name {
        return None;
    }
    let active = active_param(&call, params).map(|i| &params[i]);
    let mut out = match active.and_then(signature::generic_kind) {
        Some(kind) => items_taken(a, good, kind),
        None => names_in_scope(a, good, word_start as u32),
    };
    if at_start {
        let given: Vec<&String> = call.before.iter().flatten().collect();
        let positional = call.before.iter().filter(|n| n.is_none()).count();
        for (i, p) in params.iter().enumerate() {
            if i < positional || given.contains(&&p.name.name) {
                continue;
            }
            let written = signature::collapse(source.get(p.span.range()).unwrap_or(""));
            // The parameter rather than a name in scope that reads the same (`steps`).
            out.retain(|c| c.label != p.name.name);
            out.push(CompletionItem {
                label: p.name.name.clone(),
                kind: Some(CompletionItemKind::FIELD),
                detail: Some(written),
                insert_text: Some(format!("{}: ", p.name.name)),
                // Parameter names first, in their order.
                sort_text: Some(format!("0{i:03}")),
                ..Default::default()
            });
        }
    }
    Some(out)
}

/// The items in scope in the root module (its own and those it imports) that a generic
/// parameter of `kind` takes.
fn items_taken(
    a: &Analysis,
    good: Option<&Analysis>,
    kind: rlc_check::recipes::GenericParam,
) -> Vec<CompletionItem> {
    use rlc_check::recipes::GenericParam as G;
    let takes = |item: &Item| match (kind, &item.kind) {
        (G::Role(k), ItemKind::Model(m)) => RoleKind::from_name(&m.kind.name) == Some(k),
        (G::Dataset, ItemKind::Dataset(_))
        | (G::Verifier, ItemKind::Verifier(_))
        | (G::Environment, ItemKind::Environment(_))
        | (G::Fn, ItemKind::Fn(_)) => true,
        _ => false,
    };
    let mut out: BTreeMap<String, CompletionItem> = BTreeMap::new();
    for an in good.into_iter().chain(std::iter::once(a)) {
        let modules = &an.checked.modules;
        let root = modules.get(0);
        let source = &an.files.get(root.file).text;
        for i in root.ast.items.iter().filter(|i| takes(i)) {
            if let Some(c) = item_completion(i, source) {
                out.insert(c.label.clone(), c);
            }
        }
        for imp in &root.imports {
            if let rlc_check::modules::Binding::Item { module, index } = imp.binding {
                let m = modules.get(module);
                let i = m.item(index);
                if takes(i)
                    && let Some(mut c) = item_completion(i, &an.files.get(m.file).text)
                {
                    c.label = imp.name.clone();
                    out.insert(c.label.clone(), c);
                }
            }
        }
    }
    out.into_values().collect()
}

// ---------------------------------------------------------------------------------------------
// Signature help

/// The signature of the `fn` or `pipeline` whose argument list holds `offset` of `text`, its
/// parameters as ranges of the label, the one being given active.
pub fn signature_help(
    a: &Analysis,
    good: Option<&Analysis>,
    text: &str,
    offset: usize,
) -> Option<SignatureHelp> {
    let call = calls::call_at(text, offset)?;
    let (an, module, item) = callee_item(a, good, &call.callee)?;
    let m = an.checked.modules.get(module);
    let source = &an.files.get(m.file).text;
    let (before, written, after) = signature::parts(source, item)?;
    let params = signature::params(item)?;
    let utf16 = |s: &str| s.encode_utf16().count() as u32;
    let mut label = format!("{before}(");
    let mut infos = Vec::new();
    for (i, (p, w)) in params.iter().zip(&written).enumerate() {
        if i > 0 {
            label.push_str(", ");
        }
        let start = utf16(&label);
        label.push_str(w);
        let doc = signature::generic_kind(p).map(|k| {
            Documentation::MarkupContent(MarkupContent {
                kind: MarkupKind::Markdown,
                value: format!("generic: {}", signature::describe_generic(k)),
            })
        });
        infos.push(ParameterInformation {
            label: ParameterLabel::LabelOffsets([start, utf16(&label)]),
            documentation: doc,
        });
    }
    label.push(')');
    label.push_str(&after);
    let active = active_param(&call, params).map(|i| i as u32);
    Some(SignatureHelp {
        signatures: vec![SignatureInformation {
            label,
            documentation: item.doc.as_ref().map(|d| {
                Documentation::MarkupContent(MarkupContent {
                    kind: MarkupKind::Markdown,
                    value: d.trim().to_string(),
                })
            }),
            parameters: Some(infos),
            active_parameter: active,
        }],
        active_signature: Some(0),
        active_parameter: active,
    })
}

/// The import path when `head` ends inside the braces of `import path { … `.
fn open_import_braces(head: &str) -> Option<String> {
    let at = head.rfind("import")?;
    let rest = &head[at + "import".len()..];
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let brace = rest.find('{')?;
    let path = rest[..brace].trim();
    // Only `import path {` or `import path as name {`: a brace further on is another item's.
    let is_path = |c: char| c.is_alphanumeric() || "_./\"- \t".contains(c);
    if rest[brace..].contains('}') || !path.chars().all(is_path) {
        return None;
    }
    let path = path.split(" as ").next().unwrap_or(path).trim();
    (!path.is_empty()).then(|| path.to_string())
}

fn import_items(
    a: &Analysis,
    path: &str,
    read_file: &dyn Fn(&str) -> Option<String>,
) -> Vec<CompletionItem> {
    let source = if let Some(file) = path.strip_prefix('"') {
        let file = file.trim_end_matches('"');
        let root = &a.checked.modules.get(0).name;
        read_file(&resolve::join_relative(root, file))
    } else if let Some(text) = package_module_text(&a.checked.modules, path, read_file) {
        Some(text)
    } else {
        rlc_check::std_lib::STD_MODULES
            .iter()
            .find(|(m, _, _)| *m == path)
            .map(|(_, _, t)| t.to_string())
    };
    let Some(source) = source else {
        return Vec::new();
    };
    let parsed = rlc_syntax::parse(FileId(0), &source);
    parsed
        .module
        .items
        .iter()
        .filter(|i| i.is_pub)
        .filter_map(|i| item_completion(i, &source))
        .collect()
}

/// The packages the root's module may import from: its own and its dependencies, by name.
fn visible_packages(modules: &Modules) -> Vec<(String, usize)> {
    let Some(own) = modules.modules.first().and_then(|m| m.package) else {
        return Vec::new();
    };
    let here = modules.packages.get(own);
    std::iter::once((here.name.clone(), own))
        .chain(here.deps.iter().map(|(n, &d)| (n.clone(), d)))
        .collect()
}

/// The text of package module `path` (`recipes.grpo`), when it names one.
fn package_module_text(
    modules: &Modules,
    path: &str,
    read_file: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    let segments: Vec<&str> = path.split('.').collect();
    let (_, id) = visible_packages(modules)
        .into_iter()
        .find(|(n, _)| n == segments[0])?;
    if segments.len() < 2 {
        return None;
    }
    let files = modules.packages.get(id).module_files(&segments[1..]);
    files.iter().find_map(|f| read_file(f))
}

/// The dotted paths of the modules of the visible packages (`recipes.grpo.loss`): the `.rl`
/// files under a package's `src/`, or under its folder when it has no `src/` (not in hidden
/// folders, `target/` or `vendor/`); at most a few hundred per package.
fn package_module_paths(modules: &Modules) -> Vec<String> {
    const MAX_PER_PACKAGE: usize = 500;
    let mut out = Vec::new();
    for (name, id) in visible_packages(modules) {
        let root = &modules.packages.get(id).root;
        let root = std::path::Path::new(if root.is_empty() { "." } else { root });
        let src = root.join("src");
        let base = if src.is_dir() {
            src
        } else {
            root.to_path_buf()
        };
        let mut stack = vec![(base.clone(), 0)];
        let mut found = 0;
        while let Some((dir, depth)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let file_name = entry.file_name().to_string_lossy().to_string();
                if path.is_dir() {
                    let skip = file_name.starts_with('.')
                        || file_name == "target"
                        || file_name == "vendor";
                    if !skip && depth < 8 {
                        stack.push((path, depth + 1));
                    }
                } else if let Some(stem) = file_name.strip_suffix(".rl")
                    && found < MAX_PER_PACKAGE
                    && let Ok(rel) = path.parent().unwrap_or(&base).strip_prefix(&base)
                {
                    let mut dotted = vec![name.clone()];
                    dotted.extend(rel.iter().map(|c| c.to_string_lossy().to_string()));
                    dotted.push(stem.to_string());
                    out.push(dotted.join("."));
                    found += 1;
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn item_kind(item: &Item) -> CompletionItemKind {
    match &item.kind {
        ItemKind::Fn(_) | ItemKind::Pipeline(_) => CompletionItemKind::FUNCTION,
        ItemKind::Model(_) => CompletionItemKind::CLASS,
        ItemKind::Struct(_) => CompletionItemKind::STRUCT,
        ItemKind::Const(_) => CompletionItemKind::CONSTANT,
        ItemKind::Cluster(_) | ItemKind::Dataset(_) | ItemKind::Environment(_) => {
            CompletionItemKind::VARIABLE
        }
        ItemKind::Verifier(_) => CompletionItemKind::FUNCTION,
        ItemKind::Import(_) | ItemKind::Place(_) => CompletionItemKind::MODULE,
    }
}

fn item_completion(i: &Item, source: &str) -> Option<CompletionItem> {
    let name = i.name()?;
    let detail = match &i.kind {
        ItemKind::Fn(f) => source
            .get(name.span.start as usize..f.body.span.start as usize)
            .map(|s| format!("fn {}", s.split_whitespace().collect::<Vec<_>>().join(" "))),
        ItemKind::Model(m) => Some(format!("model: {}", m.kind.name)),
        // A pipeline's parameters (a recipe's roles, data and settings).
        ItemKind::Pipeline(_) => signature::parts(source, i).map(|(before, params, _)| {
            let before = before.strip_prefix("pub ").unwrap_or(&before);
            format!("{before}({})", params.join(", "))
        }),
        _ => Some(i.keyword().to_string()),
    };
    Some(item(&name.name, item_kind(i), detail, i.doc.clone()))
}

fn item(
    label: &str,
    kind: CompletionItemKind,
    detail: Option<String>,
    doc: Option<String>,
) -> CompletionItem {
    CompletionItem {
        label: label.to_string(),
        kind: Some(kind),
        detail,
        documentation: doc.map(|d| {
            Documentation::MarkupContent(MarkupContent {
                kind: MarkupKind::Markdown,
                value: d,
            })
        }),
        ..Default::default()
    }
}

/// The local named `name` in scope at `offset`, from the analysis whose AST has it (the current
/// one, else the last one without syntax errors), with that analysis.
fn find_local<'a>(
    a: &'a Analysis,
    good: Option<&'a Analysis>,
    name: &str,
    offset: u32,
) -> Option<(&'a Analysis, Local)> {
    for an in std::iter::once(a).chain(good) {
        let walk = resolve::at(&an.checked.modules, 0, offset);
        if let Some(l) = walk
            .visible
            .iter()
            .flatten()
            .rev()
            .find(|l| l.ident.name == name)
        {
            return Some((an, l.clone()));
        }
    }
    None
}

fn members(a: &Analysis, good: Option<&Analysis>, base: &str, offset: u32) -> Vec<CompletionItem> {
    // A local: the fields of its record type (a `Rollout`, a struct).
    if let Some((an, local)) = find_local(a, good, base, offset) {
        let ty = local.value.and_then(|v| {
            an.checked
                .types
                .get(&(an.root_file(), v.start, v.end))
                .cloned()
        });
        return ty.map(|t| record_fields(&t)).unwrap_or_default();
    }
    for an in std::iter::once(a).chain(good) {
        let modules = &an.checked.modules;
        let Some(binding) = modules.get(0).lookup(0, base) else {
            continue;
        };
        return match Target::from(binding) {
            Target::Module(m) => {
                let module = modules.get(m);
                let source = &an.files.get(module.file).text;
                module
                    .ast
                    .items
                    .iter()
                    .filter(|i| i.is_pub || m == 0)
                    .filter_map(|i| item_completion(i, source))
                    .collect()
            }
            Target::Item { module, index } => item_members(modules, module, index),
            _ => Vec::new(),
        };
    }
    Vec::new()
}

/// After `role.`: the operations the role's kind supports; after a dataset: its members; after
/// an item with a field block: its fields.
fn item_members(modules: &Modules, module: usize, index: usize) -> Vec<CompletionItem> {
    let item_ = modules.get(module).item(index);
    match &item_.kind {
        ItemKind::Model(m) => {
            let kind = RoleKind::from_name(&m.kind.name);
            [
                (Op::Generate, "sample responses: a Rollout"),
                (Op::Logprobs, "per-token log-probabilities of a rollout"),
                (Op::Values, "per-token values of a rollout"),
                (Op::Score, "a score per sequence"),
                (Op::Update, "a training step on a loss"),
            ]
            .into_iter()
            .filter(|(op, _)| kind.is_none_or(|k| k.supports(*op)))
            .map(|(op, what)| {
                item(
                    op.as_str(),
                    CompletionItemKind::METHOD,
                    Some(format!("{}.{}: {what}", m.name.name, op.as_str())),
                    None,
                )
            })
            .collect()
        }
        ItemKind::Dataset(_) => [
            ("sample", "sample(n): n prompts"),
            ("vocab", "the vocabulary size"),
            ("score", "score(rollout): the rule-based reward"),
        ]
        .into_iter()
        .map(|(n, d)| item(n, CompletionItemKind::FIELD, Some(d.to_string()), None))
        .collect(),
        ItemKind::Cluster(c) => fields_of(&c.def),
        _ => Vec::new(),
    }
}

fn fields_of(def: &ast::Definition) -> Vec<CompletionItem> {
    match def {
        ast::Definition::Fields(b) => b
            .fields
            .iter()
            .map(|f| item(&f.key.name, CompletionItemKind::FIELD, None, None))
            .collect(),
        ast::Definition::Expr(_) => Vec::new(),
    }
}

/// The fields of a record type (a `Rollout`, a struct) as completions, each with its type.
pub fn record_fields(ty: &rlc_check::types::Type) -> Vec<CompletionItem> {
    let rlc_check::types::Type::Record(record) = ty else {
        return Vec::new();
    };
    record
        .fields
        .iter()
        .map(|(name, t)| item(name, CompletionItemKind::FIELD, Some(t.to_string()), None))
        .collect()
}

fn names_in_scope(a: &Analysis, good: Option<&Analysis>, offset: u32) -> Vec<CompletionItem> {
    let mut out: BTreeMap<String, CompletionItem> = BTreeMap::new();
    for kw in ast::KEYWORDS.iter().chain(ast::CONTEXTUAL_KEYWORDS) {
        out.insert(
            kw.to_string(),
            item(kw, CompletionItemKind::KEYWORD, None, None),
        );
    }
    // Locals first from the older analysis, so that the current one wins.
    for an in good.into_iter().chain(std::iter::once(a)) {
        let modules = &an.checked.modules;
        let root = modules.get(0);
        let source = &an.files.get(root.file).text;
        for i in &root.ast.items {
            if let Some(c) = item_completion(i, source) {
                out.insert(c.label.clone(), c);
            }
        }
        for imp in &root.imports {
            let c = match imp.binding {
                rlc_check::modules::Binding::Item { module, index } => {
                    let m = modules.get(module);
                    item_completion(m.item(index), &an.files.get(m.file).text).map(|mut c| {
                        c.label = imp.name.clone();
                        c
                    })
                }
                rlc_check::modules::Binding::Module(m) => Some(item(
                    &imp.name,
                    CompletionItemKind::MODULE,
                    Some(format!("module {}", modules.get(m).name)),
                    None,
                )),
            };
            if let Some(c) = c {
                out.insert(c.label.clone(), c);
            }
        }
        let walk = resolve::at(modules, 0, offset);
        for l in walk.visible.iter().flatten() {
            let ty = l.value.and_then(|v| {
                an.checked
                    .types
                    .get(&(an.root_file(), v.start, v.end))
                    .map(ToString::to_string)
            });
            out.insert(
                l.ident.name.clone(),
                item(&l.ident.name, CompletionItemKind::VARIABLE, ty, None),
            );
        }
    }
    out.into_values().collect()
}

// ---------------------------------------------------------------------------------------------
// Document symbols

#[allow(deprecated)] // `DocumentSymbol::deprecated` must be written out.
fn symbol(
    name: String,
    detail: Option<String>,
    kind: SymbolKind,
    range: lsp_types::Range,
    selection: lsp_types::Range,
    children: Vec<DocumentSymbol>,
) -> DocumentSymbol {
    DocumentSymbol {
        name,
        detail,
        kind,
        tags: None,
        deprecated: None,
        range,
        selection_range: selection,
        children: (!children.is_empty()).then_some(children),
    }
}

pub fn document_symbols(module: &ast::Module, text: &str) -> Vec<DocumentSymbol> {
    let index = LineIndex::new(text);
    let mut out = Vec::new();
    for item in &module.items {
        let range = index.range(item.span);
        let (name, kind, detail, sel, children) = match &item.kind {
            ItemKind::Import(i) => {
                let src = text.get(i.span.range()).unwrap_or("import");
                (
                    src.split_whitespace().collect::<Vec<_>>().join(" "),
                    SymbolKind::MODULE,
                    None,
                    i.span,
                    Vec::new(),
                )
            }
            ItemKind::Place(p) => {
                let name = match &p.target {
                    ast::PlaceTarget::AllRoles(_) => "place auto".to_string(),
                    ast::PlaceTarget::Role { role, phase } => match phase {
                        Some(ph) => format!("place {}.{}", role.name, ph.name),
                        None => format!("place {}", role.name),
                    },
                };
                (name, SymbolKind::KEY, None, item.span, Vec::new())
            }
            _ => {
                let Some(n) = item.name() else { continue };
                let (kind, detail, children) = match &item.kind {
                    ItemKind::Model(m) => (SymbolKind::CLASS, Some(m.kind.name.clone()), vec![]),
                    ItemKind::Fn(f) => (
                        SymbolKind::FUNCTION,
                        None,
                        locals(&f.params, &f.body, &index),
                    ),
                    ItemKind::Pipeline(p) => (
                        SymbolKind::FUNCTION,
                        Some("pipeline".into()),
                        locals(&p.params, &p.body, &index),
                    ),
                    ItemKind::Struct(s) => (
                        SymbolKind::STRUCT,
                        None,
                        s.fields
                            .iter()
                            .map(|f| {
                                symbol(
                                    f.name.name.clone(),
                                    None,
                                    SymbolKind::FIELD,
                                    index.range(f.span),
                                    index.range(f.name.span),
                                    Vec::new(),
                                )
                            })
                            .collect(),
                    ),
                    ItemKind::Const(_) => (SymbolKind::CONSTANT, None, vec![]),
                    ItemKind::Cluster(_) => (SymbolKind::NAMESPACE, Some("cluster".into()), vec![]),
                    _ => (SymbolKind::VARIABLE, Some(item.keyword().into()), vec![]),
                };
                (n.name.clone(), kind, detail, n.span, children)
            }
        };
        out.push(symbol(
            name,
            detail,
            kind,
            range,
            index.range(sel),
            children,
        ));
    }
    out
}

/// Parameters and `let`s of a function or pipeline body (loops and blocks flattened).
fn locals(params: &[ast::Param], body: &ast::Block, index: &LineIndex) -> Vec<DocumentSymbol> {
    let mut out: Vec<DocumentSymbol> = params
        .iter()
        .map(|p| {
            symbol(
                p.name.name.clone(),
                Some("parameter".into()),
                SymbolKind::VARIABLE,
                index.range(p.span),
                index.range(p.name.span),
                Vec::new(),
            )
        })
        .collect();
    fn walk(b: &ast::Block, index: &LineIndex, out: &mut Vec<DocumentSymbol>) {
        for s in &b.stmts {
            match &s.kind {
                ast::StmtKind::Let { name, .. } => out.push(symbol(
                    name.name.clone(),
                    None,
                    SymbolKind::VARIABLE,
                    index.range(s.span),
                    index.range(name.span),
                    Vec::new(),
                )),
                ast::StmtKind::Loop { body, .. } | ast::StmtKind::Every { body, .. } => {
                    walk(body, index, out)
                }
                _ => {}
            }
        }
    }
    walk(body, index, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Formatting

/// One edit replacing the whole document with its canonical form; no edit when it is already
/// formatted; `None` when it has syntax errors.
pub fn format(text: &str) -> Option<Vec<TextEdit>> {
    let formatted = rlc_syntax::format::format_source(FileId(0), text).ok()?;
    if formatted == text {
        return Some(Vec::new());
    }
    Some(vec![TextEdit::new(
        LineIndex::new(text).full_range(),
        formatted,
    )])
}
