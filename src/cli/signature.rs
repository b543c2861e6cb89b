//! How an item is shown to a reader: the one-line header (a function's signature, a model's
//! kind, a constant's checked type) that the language server's hover and `rlc doc` both print.

use rlc_check::TypeTable;
use rlc_diagnostics::FileId;
use rlc_syntax::ast::{Item, ItemKind};

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
            format!("pipeline {}({})", p.name.name, params.join(", "))
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
