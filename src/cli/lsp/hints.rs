//! Inlay hints, all read from the checker's own results (nothing is estimated twice):
//!
//! - at the end of each `place` line: the memory one device of the placement holds (the
//!   largest of its phases, which time-share the device: [`memory::estimate`], the numbers of
//!   the role's hover and of E0801) and its number of ranks (one per device it occupies);
//! - after the name of a `let` without a written type: the type the checker gave its value;
//! - at the end of a model's `arch = …`: the role's parameter count.

use super::analysis::Analysis;
use super::text::{LineIndex, positions_in_order};
use lsp_types::{
    InlayHint, InlayHintKind, InlayHintLabel, InlayHintTooltip, MarkupContent, MarkupKind, Range,
};
use rlc_check::checks::memory;
use rlc_diagnostics::Span;
use rlc_syntax::ast::{Block, Definition, Expr, ExprKind, ItemKind, StmtKind};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The hints of the document `a` checked whose position lies in `range`, in document order.
pub fn inlay_hints(a: &Analysis, range: Range) -> Vec<InlayHint> {
    let root = a.root_file();
    let text = &a.files.get(root).text;
    let index = LineIndex::new(text);
    let (from, to) = (index.offset(range.start), index.offset(range.end));
    // Positions are filled in at the end, all in one pass.
    let mut hints: Vec<(usize, InlayHint)> = Vec::new();
    let mut push =
        |at: usize, label: String, kind: Option<InlayHintKind>, tooltip: Option<String>| {
            if at < from || at > to {
                return;
            }
            hints.push((
                at,
                InlayHint {
                    position: Default::default(),
                    label: InlayHintLabel::String(label),
                    kind,
                    text_edits: None,
                    tooltip: tooltip.map(|t| {
                        InlayHintTooltip::MarkupContent(MarkupContent {
                            kind: MarkupKind::Markdown,
                            value: t,
                        })
                    }),
                    padding_left: Some(kind != Some(InlayHintKind::TYPE)),
                    padding_right: None,
                    data: None,
                },
            ));
        };

    let program = &a.checked.program;
    let per_placement = placement_memory(program);
    let module = &a.checked.modules.get(0).ast;
    for item in &module.items {
        match &item.kind {
            ItemKind::Place(_) => {
                let Some((i, p)) = program
                    .placements
                    .iter()
                    .enumerate()
                    .find(|(_, p)| p.origin.file == root && p.origin.span == item.span)
                else {
                    continue;
                };
                let ranks = p.devices.end.saturating_sub(p.devices.start);
                let ranks = format!("{ranks} rank{}", if ranks == 1 { "" } else { "s" });
                let (label, tooltip) = match per_placement.get(&i) {
                    Some(phases) => {
                        let (_, peak) = phases
                            .iter()
                            .max_by(|x, y| x.1.total().total_cmp(&y.1.total()))
                            .expect("a placement in the map has a phase");
                        let bound = if peak.is_lower_bound() { "≥ " } else { "" };
                        let mut tip = String::from("memory per device, by phase:");
                        for (phase, b) in phases {
                            let bound = if b.is_lower_bound() { "≥ " } else { "" };
                            let _ = write!(
                                tip,
                                "\n- {}: {bound}{}",
                                phase.as_str(),
                                memory::format_bytes(b.total())
                            );
                        }
                        (
                            format!(
                                "{bound}{}/device · {ranks}",
                                memory::format_bytes(peak.total())
                            ),
                            Some(tip),
                        )
                    }
                    None => (ranks, None),
                };
                push(line_end(text, item.span.end as usize), label, None, tooltip);
            }
            ItemKind::Model(md) => {
                let Definition::Fields(block) = &md.def else {
                    continue;
                };
                let Some(field) = block.fields.iter().find(|f| f.key.name == "arch") else {
                    continue;
                };
                let Some(model) = program
                    .models
                    .iter()
                    .find(|m| m.origin.file == root && m.origin.span == md.name.span)
                else {
                    continue;
                };
                if let Some(arch) = &model.arch {
                    let n = memory::role_parameters(model.kind, arch);
                    push(
                        field.value.span.end as usize,
                        format!("{} parameters", memory::human_count(n)),
                        None,
                        Some(format!("{n} parameters ({})", model.kind.as_str())),
                    );
                }
            }
            ItemKind::Const(c) if c.ty.is_none() => {
                if let Some(label) = type_label(a, c.value.span) {
                    push(
                        c.name.span.end as usize,
                        label,
                        Some(InlayHintKind::TYPE),
                        None,
                    );
                }
            }
            ItemKind::Fn(f) => lets(&f.body, &mut |name, value| {
                if let Some(label) = type_label(a, value) {
                    push(name.end as usize, label, Some(InlayHintKind::TYPE), None);
                }
            }),
            ItemKind::Pipeline(p) => lets(&p.body, &mut |name, value| {
                if let Some(label) = type_label(a, value) {
                    push(name.end as usize, label, Some(InlayHintKind::TYPE), None);
                }
            }),
            _ => {}
        }
    }
    hints.sort_by_key(|(at, _)| *at);
    let positions = positions_in_order(text, hints.iter().map(|(at, _)| *at));
    hints
        .into_iter()
        .zip(positions)
        .map(|((_, h), position)| InlayHint { position, ..h })
        .collect()
}

/// Per placement (index into `program.placements`), the breakdown of each of its phases on one
/// of its devices (every device of a placement holds the same).
fn placement_memory(
    program: &rlc_check::Program,
) -> BTreeMap<usize, Vec<(rlc_check::program::Phase, memory::Breakdown)>> {
    let mut out: BTreeMap<usize, Vec<_>> = BTreeMap::new();
    for device in memory::estimate(program) {
        for pm in device.phases {
            let phases = out.entry(pm.placement).or_default();
            if !phases.iter().any(|(ph, _)| *ph == pm.phase) {
                phases.push((pm.phase, pm.breakdown));
            }
        }
    }
    for phases in out.values_mut() {
        phases.sort_by_key(|(ph, _)| *ph);
    }
    out
}

/// `: T` for the value at `span`, a record type shown by its name alone.
fn type_label(a: &Analysis, span: Span) -> Option<String> {
    let ty = a
        .checked
        .types
        .get(&(a.root_file(), span.start, span.end))?;
    let ty = match ty {
        rlc_check::types::Type::Record(r) => r.name.clone(),
        other => other.to_string(),
    };
    (!ty.is_empty()).then(|| format!(": {ty}"))
}

/// The end of the line `at` is on (before its new line).
fn line_end(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    text[at..].find('\n').map_or(text.len(), |n| {
        let end = at + n;
        if text[..end].ends_with('\r') {
            end - 1
        } else {
            end
        }
    })
}

/// Calls `f(name, value)` for each `let` without a written type in `block`, nested blocks
/// included, in source order.
fn lets(block: &Block, f: &mut dyn FnMut(Span, Span)) {
    for s in &block.stmts {
        match &s.kind {
            StmtKind::Let { name, ty, value } => {
                exprs(value, f);
                if ty.is_none() {
                    f(name.span, value.span);
                }
            }
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => lets(body, f),
            StmtKind::Assign { value, .. } | StmtKind::Emit { value } | StmtKind::Expr(value) => {
                exprs(value, f)
            }
            StmtKind::Log { .. } | StmtKind::Checkpoint { .. } => {}
        }
    }
}

/// The `let`s of the closures and scans inside an expression.
fn exprs(e: &Expr, f: &mut dyn FnMut(Span, Span)) {
    match &e.kind {
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            exprs(callee, f);
            for a in args {
                exprs(&a.value, f);
            }
            if let Some(c) = closure {
                lets(&c.body, f);
            }
        }
        ExprKind::Scan(scan) => lets(&scan.body, f),
        ExprKind::Member { base, .. } => exprs(base, f),
        ExprKind::Index { base, indices } => {
            exprs(base, f);
            for i in indices {
                exprs(i, f);
            }
        }
        ExprKind::Unary { operand, .. } => exprs(operand, f),
        ExprKind::Binary { lhs, rhs, .. } => {
            exprs(lhs, f);
            exprs(rhs, f);
        }
        ExprKind::Paren(inner) => exprs(inner, f),
        ExprKind::List(items) => {
            for x in items {
                exprs(x, f);
            }
        }
        ExprKind::Record(r) => {
            for field in &r.fields {
                exprs(&field.value, f);
            }
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
    }
}
