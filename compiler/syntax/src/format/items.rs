//! Items, blocks and statements, and the alignment of runs of similar lines.

use super::expr::flat_into;
use super::printer::Blank;
use super::{Formatter, start};
use crate::ast::*;
use std::mem::discriminant;

impl Formatter<'_> {
    pub(super) fn module(&mut self, m: &Module) {
        let aligned = self.item_alignment(&m.items);
        for (i, item) in m.items.iter().enumerate() {
            let blank = match i.checked_sub(1).map(|j| &m.items[j]) {
                None => Blank::Preserve,
                Some(prev) if grouped(prev, item) => Blank::Preserve,
                Some(_) => Blank::Force,
            };
            self.p.leading(start(item.span), blank);
            self.item(item, &aligned[i]);
            self.p.last_end = self.p.last_end.max(self.end(item.span));
            let next = m.items.get(i + 1).map_or(self.src.len(), |n| start(n.span));
            self.p.flush_trailing(next);
            self.p.newline();
        }
        self.p.dangling(self.src.len(), Blank::Preserve);
    }

    fn item(&mut self, item: &Item, align: &Align) {
        let at = start(item.span);
        if item.is_pub {
            self.p.tok("pub", at, at + 3);
            self.p.space();
            self.p.write(item.keyword());
        } else {
            self.p.tok(item.keyword(), at, at + item.keyword().len());
        }
        self.p.space();
        match &item.kind {
            ItemKind::Import(import) => self.import(import, self.end(item.span)),
            ItemKind::Cluster(c) => {
                self.ident(&c.name);
                self.definition(&c.def);
            }
            ItemKind::Model(m) => {
                self.ident(&m.name);
                self.p.write(":");
                self.p.space();
                self.ident(&m.kind);
                self.definition(&m.def);
            }
            ItemKind::Dataset(d) => {
                self.ident(&d.name);
                self.definition(&d.def);
            }
            ItemKind::Verifier(v) => {
                self.ident(&v.name);
                self.definition(&v.def);
            }
            ItemKind::Environment(e) => {
                self.ident(&e.name);
                self.definition(&e.def);
            }
            ItemKind::Struct(s) => self.struct_def(s, self.end(item.span)),
            ItemKind::Fn(f) => {
                self.ident(&f.name);
                self.params(&f.params);
                if let Some(ret) = &f.ret {
                    self.p.space();
                    self.p.write("->");
                    self.p.space();
                    self.ty(ret);
                }
                self.block(&f.body, false);
            }
            ItemKind::Const(c) => {
                self.ident(&c.name);
                if let Some(ty) = &c.ty {
                    self.p.write(":");
                    self.p.space();
                    self.ty(ty);
                }
                self.equals(align.pad);
                self.expr(&c.value, 0);
            }
            ItemKind::Place(place) => self.place(place, align),
            ItemKind::Pipeline(p) => {
                self.ident(&p.name);
                if !p.params.is_empty() {
                    self.pipeline_params(&p.params, start(p.body.span));
                }
                self.block(&p.body, false);
            }
        }
    }

    /// ` = ` after `pad` extra spaces (alignment).
    fn equals(&mut self, pad: usize) {
        self.p.space();
        self.p.write(&format!("{}=", " ".repeat(pad)));
        self.p.space();
    }

    fn import(&mut self, import: &Import, item_end: usize) {
        let mut after_source = match &import.source {
            ImportSource::Path(path) => {
                for (i, seg) in path.iter().enumerate() {
                    if i > 0 {
                        self.p.comments_before(start(seg.span));
                        self.p.write(".");
                    }
                    self.ident(seg);
                }
                path.last().map_or(0, |s| self.end(s.span))
            }
            ImportSource::File(s) => {
                self.p
                    .tok(&format!("\"{}\"", s.raw), start(s.span), self.end(s.span));
                self.end(s.span)
            }
        };
        if let Some(alias) = &import.alias {
            self.p.space();
            self.p.write("as");
            self.p.space();
            self.ident(alias);
            after_source = self.end(alias.span);
        }
        let Some(names) = &import.names else { return };
        self.p.space();
        let limit = item_end.saturating_sub(1);
        let flat = (!self.p.has_comment(after_source, item_end)).then(|| {
            let list: Vec<String> = names.iter().map(import_name_text).collect();
            format!("{{ {} }}", list.join(", "))
        });
        match flat {
            Some(text) if self.p.fits(text.chars().count()) => {
                self.p.write(&text);
                self.p.last_end = self.p.last_end.max(item_end);
            }
            _ => {
                self.list(
                    "{",
                    names,
                    "}",
                    limit,
                    |n| n.span,
                    |f, n| {
                        f.ident(&n.name);
                        if let Some(alias) = &n.alias {
                            f.p.space();
                            f.p.write("as");
                            f.p.space();
                            f.ident(alias);
                        }
                    },
                );
                self.p.last_end = self.p.last_end.max(item_end);
            }
        }
    }

    fn definition(&mut self, def: &Definition) {
        match def {
            Definition::Expr(e) => {
                self.equals(0);
                self.expr(e, 0);
            }
            Definition::Fields(block) => {
                self.p.space();
                let block_end = self.end(block.span);
                if block.fields.is_empty() && !self.p.pending_before(block_end) {
                    self.p.write("{}");
                    self.p.last_end = self.p.last_end.max(block_end);
                    return;
                }
                let pads = self.runs(&block.fields, |f| f.span, |f| Some((0, f.key.name.len())));
                self.p.write("{");
                self.lines(
                    &block.fields,
                    block_end,
                    |f| f.span,
                    |fm, i, field| {
                        fm.ident(&field.key);
                        fm.equals(pads[i]);
                        fm.expr(&field.value, 0);
                    },
                );
            }
        }
    }

    fn struct_def(&mut self, s: &StructDef, item_end: usize) {
        self.ident(&s.name);
        self.p.space();
        let flat = if self.p.has_comment(self.end(s.name.span), item_end) {
            None
        } else {
            s.fields
                .iter()
                .map(|f| self.flat_ty(&f.ty).map(|t| format!("{}: {t}", f.name.name)))
                .collect::<Option<Vec<_>>>()
                .map(|fields| {
                    if fields.is_empty() {
                        "{}".to_string()
                    } else {
                        format!("{{ {} }}", fields.join(", "))
                    }
                })
        };
        match flat {
            Some(text) if s.fields.is_empty() || self.p.fits(text.chars().count()) => {
                self.p.write(&text);
            }
            _ => self.list(
                "{",
                &s.fields,
                "}",
                item_end.saturating_sub(1),
                |f| f.span,
                |f, field| {
                    f.ident(&field.name);
                    f.p.write(":");
                    f.p.space();
                    f.ty(&field.ty);
                },
            ),
        }
        self.p.last_end = self.p.last_end.max(item_end);
    }

    /// `(a: T, b = 1)`, always on one line.
    fn params(&mut self, params: &[Param]) {
        self.p.write("(");
        for (i, param) in params.iter().enumerate() {
            if i > 0 {
                self.p.write(",");
                self.p.space();
            }
            self.param(param);
        }
        self.p.write(")");
    }

    fn param(&mut self, param: &Param) {
        self.ident(&param.name);
        if let Some(ty) = &param.ty {
            self.p.write(":");
            self.p.space();
            self.ty(ty);
        }
        if let Some(default) = &param.default {
            self.equals(0);
            self.expr(default, 1);
        }
    }

    /// A pipeline's parameters: on its line when they fit before ` {` (`body` starts at the
    /// brace), else one a line with a trailing comma, as a recipe's many settings are written.
    fn pipeline_params(&mut self, params: &[Param], body: usize) {
        let first = params.first().map_or(body, |q| start(q.span));
        let flat = (!self.p.has_comment(first, body))
            .then(|| {
                let list = params
                    .iter()
                    .map(|q| self.param_text(q))
                    .collect::<Option<Vec<String>>>()?;
                Some(format!("({})", list.join(", ")))
            })
            .flatten();
        match flat {
            Some(text) if !self.p.fits(text.chars().count() + " {".len()) => {
                let limit = params.last().map_or(body, |q| self.end(q.span));
                self.list("(", params, ")", limit, |q| q.span, |f, q| f.param(q));
            }
            _ => self.params(params),
        }
    }

    /// The one-line text of a parameter, `name: Type = default`; `None` when its default has
    /// no one-line form.
    fn param_text(&self, q: &Param) -> Option<String> {
        let mut text = q.name.name.clone();
        if let Some(ty) = &q.ty {
            text.push_str(": ");
            text.push_str(&ty.name.name);
            if let Some(dims) = &ty.dims {
                let dims: Vec<&str> = dims.iter().map(|d| self.dim_text(d)).collect();
                text.push_str(&format!("[{}]", dims.join(", ")));
            }
        }
        if let Some(default) = &q.default {
            text.push_str(" = ");
            flat_into(default, &mut text)?;
        }
        Some(text)
    }

    fn place(&mut self, place: &Place, align: &Align) {
        match &place.target {
            PlaceTarget::AllRoles(span) => self.p.tok("auto", start(*span), self.end(*span)),
            PlaceTarget::Role { role, phase } => {
                self.ident(role);
                if let Some(phase) = phase {
                    self.p.comments_before(start(phase.span));
                    self.p.write(".");
                    self.ident(phase);
                }
            }
        }
        // `place auto` has no layout of its own (the tree repeats the `auto`).
        let has_layout = !matches!(place.target, PlaceTarget::AllRoles(_));
        let follows = place.devices.is_some() || has_layout;
        if follows {
            self.pad(align.pad);
        }
        if let Some(devices) = &place.devices {
            self.p.space();
            self.p.write("on");
            self.p.space();
            self.expr(devices, 0);
        }
        if !has_layout {
            return;
        }
        self.pad(align.pad2);
        self.p.space();
        match &place.layout {
            Layout::Auto(span) => self.p.tok("auto", start(*span), self.end(*span)),
            Layout::Explicit(items) => {
                self.p.write("with");
                for (i, li) in items.iter().enumerate() {
                    if i > 0 {
                        self.p.write(",");
                    }
                    self.p.space();
                    self.p.tok(
                        li.kind.as_str(),
                        start(li.kind_span),
                        self.end(li.kind_span),
                    );
                    self.p.write("(");
                    self.expr(&li.value, 1);
                    self.close(")", self.end(li.span));
                }
            }
        }
    }

    fn pad(&mut self, n: usize) {
        if n > 0 {
            self.p.write(&" ".repeat(n));
        }
    }

    /// The padding of each item in a run of `place` items or of module-level `let`s.
    fn item_alignment(&self, items: &[Item]) -> Vec<Align> {
        let mut out = vec![Align::default(); items.len()];
        // Module-level `let`s align their `=`.
        let consts = self.runs(
            items,
            |i| i.span,
            |item| match &item.kind {
                ItemKind::Const(c) => {
                    let ty = match &c.ty {
                        Some(t) => 2 + self.flat_ty(t)?.chars().count(),
                        None => 0,
                    };
                    Some((0, usize::from(item.is_pub) * 4 + c.name.name.len() + ty))
                }
                _ => None,
            },
        );
        // `place` items align `on` (after the target) and `with` (after the devices).
        let targets = self.runs(
            items,
            |i| i.span,
            |item| self.place_columns(item).map(|(t, _)| (1, t)),
        );
        let devices = self.runs(
            items,
            |i| i.span,
            |item| self.place_columns(item).map(|(_, d)| (1, d)),
        );
        for (i, item) in items.iter().enumerate() {
            out[i] = match &item.kind {
                ItemKind::Const(_) => Align {
                    pad: consts[i],
                    pad2: 0,
                },
                ItemKind::Place(_) => Align {
                    pad: targets[i],
                    pad2: devices[i],
                },
                _ => Align::default(),
            };
        }
        out
    }

    /// The widths of a `place` item's target (`pub place x`) and of its ` on devices` part, or
    /// `None` when it holds a comment (it is then not aligned).
    fn place_columns(&self, item: &Item) -> Option<(usize, usize)> {
        let ItemKind::Place(place) = &item.kind else {
            return None;
        };
        if self.p.has_comment(start(item.span), self.end(item.span)) {
            return None;
        }
        let target = match &place.target {
            PlaceTarget::AllRoles(_) => "auto".len(),
            PlaceTarget::Role { role, phase } => {
                role.name.len() + phase.as_ref().map_or(0, |p| p.name.len() + 1)
            }
        };
        let devices = match &place.devices {
            Some(d) => " on ".len() + self.flat(d)?.chars().count(),
            None => 0,
        };
        Some((usize::from(item.is_pub) * 4 + target, devices))
    }

    /// Alignment padding for runs of consecutive elements: `width` gives an element's run kind
    /// and the width of the text before its aligned column (`None`: not aligned, ends the run).
    /// A run also ends where the source has a blank line or an own-line comment between two
    /// elements.
    fn runs<T>(
        &self,
        elems: &[T],
        span_of: impl Fn(&T) -> Span,
        width: impl Fn(&T) -> Option<(u8, usize)>,
    ) -> Vec<usize> {
        let widths: Vec<Option<(u8, usize)>> = elems.iter().map(&width).collect();
        let mut pads = vec![0; elems.len()];
        let mut i = 0;
        while i < elems.len() {
            let Some((kind, _)) = widths[i] else {
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < elems.len()
                && widths[j].is_some_and(|(k, _)| k == kind)
                && !separated(
                    self.src,
                    self.end(span_of(&elems[j - 1])),
                    start(span_of(&elems[j])),
                )
            {
                j += 1;
            }
            let max = widths[i..j]
                .iter()
                .map(|w| w.map_or(0, |(_, w)| w))
                .max()
                .unwrap_or(0);
            for (pad, w) in pads[i..j].iter_mut().zip(&widths[i..j]) {
                *pad = max - w.map_or(0, |(_, w)| w);
            }
            i = j;
        }
        pads
    }

    // ---------------------------------------------------------------------------------------
    // Blocks and statements

    /// Writes ` { … }`: on one line when `inline` allows it and the block holds one short
    /// statement, otherwise one statement per line.
    fn block(&mut self, b: &Block, inline: bool) {
        let block_end = self.end(b.span);
        self.p.space();
        if b.stmts.is_empty() && !self.p.pending_before(block_end) {
            self.p.write("{}");
            self.p.last_end = self.p.last_end.max(block_end);
            return;
        }
        if inline
            && let [only] = b.stmts.as_slice()
            && !self.p.pending_before(block_end)
            && let Some(text) = self.flat_stmt(only)
            && self.p.fits(text.chars().count() + 4)
        {
            self.p.write("{");
            self.p.space();
            self.p.write(&text);
            self.p.space();
            self.p.write("}");
            self.p.last_end = self.p.last_end.max(block_end);
            return;
        }
        self.p.write("{");
        // A comment on the `{`'s line trails it, whatever stood between the previous token and
        // the `{` (a carried list broken over lines ends on an earlier line than its `)`).
        self.p.last_end = self.p.last_end.max(start(b.span) + 1);
        self.body(&b.stmts, block_end);
    }

    /// The statements of a block (after its `{` is written) and its `}`, which ends at `node_end`.
    pub(super) fn body(&mut self, stmts: &[Stmt], node_end: usize) {
        let pads = self.runs(stmts, |s| s.span, |s| self.stmt_width(s));
        self.lines(stmts, node_end, |s| s.span, |f, i, s| f.stmt(s, pads[i]));
    }

    /// One element per line between an already written `{` and the `}` that ends at `node_end`,
    /// with the user's blank lines (one at most) kept between them.
    fn lines<T>(
        &mut self,
        elems: &[T],
        node_end: usize,
        span_of: impl Fn(&T) -> Span,
        mut each: impl FnMut(&mut Self, usize, &T),
    ) {
        let limit = node_end.saturating_sub(1);
        // Blocks indent from their statement, even when a comment pushed their `{` onto a
        // continuation line.
        let base = self.p.indent;
        let saved = self.p.indent;
        self.p.indent = base + 1;
        self.p
            .flush_trailing(elems.first().map_or(limit, |el| start(span_of(el))));
        self.p.newline();
        self.p.open_block();
        for (i, el) in elems.iter().enumerate() {
            self.p.leading(start(span_of(el)), Blank::Preserve);
            each(self, i, el);
            self.p.last_end = self.p.last_end.max(self.end(span_of(el)));
            self.p
                .flush_trailing(elems.get(i + 1).map_or(limit, |n| start(span_of(n))));
            self.p.newline();
        }
        self.p.dangling(limit, Blank::Preserve);
        self.p.newline();
        self.p.indent = base;
        self.p.write("}");
        self.p.last_end = self.p.last_end.max(node_end);
        self.p.indent = saved;
    }

    /// The width that aligns a statement's `=`, and the kind of run it belongs to.
    fn stmt_width(&self, s: &Stmt) -> Option<(u8, usize)> {
        match &s.kind {
            StmtKind::Let { name, ty, .. } => {
                let ty = match ty {
                    Some(t) => 2 + self.flat_ty(t)?.chars().count(),
                    None => 0,
                };
                Some((0, name.name.len() + ty))
            }
            StmtKind::Assign { name, .. } => Some((1, name.name.len())),
            _ => None,
        }
    }

    fn stmt(&mut self, s: &Stmt, pad: usize) {
        let at = start(s.span);
        match &s.kind {
            StmtKind::Let { name, ty, value } => {
                self.p.tok("let", at, at + 3);
                self.p.space();
                self.ident(name);
                if let Some(ty) = ty {
                    self.p.write(":");
                    self.p.space();
                    self.ty(ty);
                }
                self.equals(pad);
                self.expr(value, 0);
            }
            StmtKind::Assign { name, value } => {
                self.ident(name);
                self.equals(pad);
                self.expr(value, 0);
            }
            StmtKind::Loop {
                var,
                range,
                carries,
                body,
            } => {
                self.p.tok("loop", at, at + 4);
                self.p.space();
                self.ident(var);
                self.p.space();
                self.p.write("in");
                self.p.space();
                self.expr(range, 2);
                self.carries(carries, self.end(range.span), start(body.span), " {".len());
                self.block(body, false);
            }
            StmtKind::Log { record } => {
                self.p.tok("log", at, at + 3);
                self.p.space();
                self.record(record, 0);
            }
            StmtKind::Every { interval, body } => {
                self.p.tok("every", at, at + 5);
                self.p.space();
                self.expr(interval, 0);
                self.p.space();
                let word = self.steps_word(self.end(interval.span));
                self.p.write(word);
                self.block(body, true);
            }
            StmtKind::Checkpoint { roles } => {
                self.p.tok("checkpoint", at, at + 10);
                for (i, role) in roles.iter().enumerate() {
                    if i > 0 {
                        self.p.write(",");
                    }
                    self.p.space();
                    self.ident(role);
                }
            }
            StmtKind::Emit { value } => {
                self.p.tok("emit", at, at + 4);
                self.p.space();
                self.expr(value, 0);
            }
            StmtKind::Expr(e) => self.expr(e, 0),
        }
    }

    /// `steps` or `step`, as written after an `every` interval (the tree does not keep it).
    fn steps_word(&self, from: usize) -> &'static str {
        let at = crate::trivia::skip(self.src, from);
        let rest = &self.src[at..];
        if rest.starts_with("steps") {
            "steps"
        } else {
            "step"
        }
    }

    /// A statement on one line, for a block that fits on one line; `None` for statements that
    /// hold blocks or comments.
    fn flat_stmt(&self, s: &Stmt) -> Option<String> {
        if self.p.has_comment(start(s.span), self.end(s.span)) {
            return None;
        }
        Some(match &s.kind {
            StmtKind::Let { name, ty, value } => {
                let ty = match ty {
                    Some(t) => format!(": {}", self.flat_ty(t)?),
                    None => String::new(),
                };
                format!("let {}{ty} = {}", name.name, self.flat(value)?)
            }
            StmtKind::Assign { name, value } => format!("{} = {}", name.name, self.flat(value)?),
            StmtKind::Log { record } => {
                let mut text = String::from("log ");
                super::expr::flat_record_into(record, &mut text)?;
                text
            }
            StmtKind::Checkpoint { roles } => {
                let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
                format!("checkpoint {}", names.join(", "))
            }
            StmtKind::Emit { value } => format!("emit {}", self.flat(value)?),
            StmtKind::Expr(e) => self.flat(e)?,
            StmtKind::Loop { .. } | StmtKind::Every { .. } => return None,
        })
    }
}

/// Alignment padding of an item: before ` =` (a `let`) or before ` on` and ` with` (a `place`).
#[derive(Clone, Copy, Debug, Default)]
struct Align {
    pad: usize,
    pad2: usize,
}

/// Whether two consecutive items of these kinds may stand without a blank line between them.
fn grouped(prev: &Item, next: &Item) -> bool {
    discriminant(&prev.kind) == discriminant(&next.kind)
        && matches!(
            next.kind,
            ItemKind::Import(_)
                | ItemKind::Place(_)
                | ItemKind::Const(_)
                | ItemKind::Model(_)
                | ItemKind::Cluster(_)
                | ItemKind::Dataset(_)
                | ItemKind::Verifier(_)
                | ItemKind::Environment(_)
        )
}

fn import_name_text(n: &ImportName) -> String {
    match &n.alias {
        Some(alias) => format!("{} as {}", n.name.name, alias.name),
        None => n.name.name.clone(),
    }
}

/// Whether a blank line or an own-line comment stands between two nodes: their gap spans more
/// than one line break.
fn separated(src: &str, from: usize, to: usize) -> bool {
    src[from.min(to)..to]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        >= 2
}
