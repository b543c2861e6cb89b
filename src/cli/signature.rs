//! How an item is shown to a reader: the one-line header (a function's signature, a model's
//! kind, a constant's checked type) that the language server's hover and `rlc doc` both print.

use rlc_check::TypeTable;
use rlc_check::recipes::GenericParam;
use rlc_diagnostics::FileId;
use rlc_syntax::ast::{Item, ItemKind, Param};

/// One line that shows what an item is: a function's signature as written (whitespace
/// collapsed), a model's kind, a constant's checked type, a pipeline's parameters. `text` is
/// the source of `file`, the module that declares `item`; `types` the checker's types.
pub fn header(types: &TypeTable, file: FileId, text: &str, item: &Item) -> String {
    let pub_ = if item.is_pub { "pub " } else { "" };
    match &item.kind {
        ItemKind::Fn(f) => {
            let sig = text
                .get(item.span.start as usize..f.body.span.start as usize)
                .unwrap_or("")
                .trim();
            // Skip the doc comments the item's span may start with.
            let sig = sig
                .find(&format!("fn {}", f.name.name))
                .map_or(sig, |at| &sig[at..]);
            format!("{pub_}{}", collapse(sig))
        }
        ItemKind::Model(md) => format!("{pub_}model {}: {}", md.name.name, md.kind.name),
        ItemKind::Const(c) => match types.get(&(file, c.value.span.start, c.value.span.end)) {
            Some(ty) => format!("{pub_}let {}: {ty}", c.name.name),
            None => format!("{pub_}let {}", c.name.name),
        },
        ItemKind::Pipeline(p) => {
            let params: Vec<String> = p
                .params
                .iter()
                .map(|p| collapse(text.get(p.span.range()).unwrap_or(&p.name.name)))
                .collect();
            format!("{pub_}pipeline {}({})", p.name.name, params.join(", "))
        }
        _ => match item.name() {
            Some(n) => format!("{pub_}{} {}", item.keyword(), n.name),
            None => item.keyword().to_string(),
        },
    }
}

/// `text` with each run of whitespace one space.
pub fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The parameters of a `fn` or a `pipeline`.
pub fn params(item: &Item) -> Option<&[Param]> {
    match &item.kind {
        ItemKind::Fn(f) => Some(&f.params),
        ItemKind::Pipeline(p) => Some(&p.params),
        _ => None,
    }
}

/// Whether `item` is a recipe: a pipeline generic over roles, data or functions, which a job
/// instantiates by calling it as its pipeline's body.
pub fn is_recipe(item: &Item) -> bool {
    matches!(&item.kind, ItemKind::Pipeline(p) if rlc_check::recipes::is_generic(p))
}

/// What a generic parameter of a recipe takes (`a CausalLM model`), or `None` for a
/// parameter that is not generic.
pub fn generic_kind(param: &Param) -> Option<GenericParam> {
    param.ty.as_ref().and_then(GenericParam::from_type)
}

/// How a reader names what a generic parameter takes: `a CausalLM model`, `a dataset`.
pub fn describe_generic(kind: GenericParam) -> String {
    match kind {
        GenericParam::Role(role) => format!("a `{}` model (a role)", role.as_str()),
        GenericParam::Dataset => "a dataset".into(),
        GenericParam::Verifier => "a verifier".into(),
        GenericParam::Environment => "an environment".into(),
        GenericParam::Fn => "a function (`fn`)".into(),
    }
}

/// A `fn`'s or `pipeline`'s signature in parts: what comes before the parentheses (`pub
/// pipeline grpo`), each parameter as written (whitespace collapsed) and what comes after
/// them (` -> f32[B]`, or nothing).
pub fn parts(text: &str, item: &Item) -> Option<(String, Vec<String>, String)> {
    let pub_ = if item.is_pub { "pub " } else { "" };
    let (keyword, name, params, ret) = match &item.kind {
        ItemKind::Fn(f) => ("fn", &f.name, &f.params, f.ret.as_ref()),
        ItemKind::Pipeline(p) => ("pipeline", &p.name, &p.params, None),
        _ => return None,
    };
    let params = params
        .iter()
        .map(|p| collapse(text.get(p.span.range()).unwrap_or(&p.name.name)))
        .collect();
    let after = ret.map_or(String::new(), |t| {
        format!(" -> {}", collapse(text.get(t.span.range()).unwrap_or("")))
    });
    Some((format!("{pub_}{keyword} {}", name.name), params, after))
}

/// The header as [`header`], but a `fn`'s or `pipeline`'s with one parameter a line when one
/// line would be wider than `width` (a recipe's dozen settings).
pub fn header_wrapped(
    types: &TypeTable,
    file: FileId,
    text: &str,
    item: &Item,
    width: usize,
) -> String {
    let one = header(types, file, text, item);
    match parts(text, item) {
        Some((before, params, after)) if one.chars().count() > width && !params.is_empty() => {
            let lines: String = params.iter().map(|p| format!("  {p},\n")).collect();
            format!("{before}(\n{lines}){after}")
        }
        _ => one,
    }
}
