//! Expressions and types: their one-line form, and the broken form of calls, records and scans
//! that do not fit on a line.

use super::printer::Blank;
use super::{Formatter, start};
use crate::ast::*;

impl Formatter<'_> {
    // ---------------------------------------------------------------------------------------
    // One-line forms

    /// The one-line text of `e`, or `None` if it holds a comment or a construct that always
    /// spans lines (a closure, a scan).
    pub(super) fn flat(&self, e: &Expr) -> Option<String> {
        if self.p.has_comment(start(e.span), self.end(e.span)) {
            return None;
        }
        let mut s = String::new();
        flat_into(e, &mut s)?;
        Some(s)
    }

    /// The one-line text of a type, or `None` if it holds a comment.
    pub(super) fn flat_ty(&self, t: &TypeExpr) -> Option<String> {
        if self.p.has_comment(start(t.span), self.end(t.span)) {
            return None;
        }
        let mut s = t.name.name.clone();
        if let Some(dims) = &t.dims {
            s.push('[');
            for (i, d) in dims.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                s.push_str(self.dim_text(d));
            }
            s.push(']');
        }
        Some(s)
    }

    pub(super) fn dim_text<'d>(&'d self, d: &'d Dim) -> &'d str {
        match d {
            Dim::Named(i) => &i.name,
            Dim::Size(_, span) => &self.src[start(*span)..span.end as usize],
        }
    }

    /// `a, n: 8` for a call's arguments, or `None` if one cannot be written on one line.
    fn flat_args(&self, args: &[Arg]) -> Option<String> {
        let mut s = String::new();
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            if let Some(name) = &a.name {
                s.push_str(&name.name);
                s.push_str(": ");
            }
            s.push_str(&self.flat(&a.value)?);
        }
        Some(s)
    }

    // ---------------------------------------------------------------------------------------
    // Writing

    /// Writes `e`, on one line if it fits with `reserve` more characters after it, otherwise
    /// with its outermost calls and records broken.
    pub(super) fn expr(&mut self, e: &Expr, reserve: usize) {
        if let Some(text) = self.flat(e)
            && self.p.fits(text.chars().count() + reserve)
        {
            self.p.tok(&text, start(e.span), self.end(e.span));
            return;
        }
        match &e.kind {
            ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {
                let mut s = String::new();
                let _ = flat_into(e, &mut s);
                self.p.tok(&s, start(e.span), self.end(e.span));
            }
            ExprKind::Member { base, name } => {
                self.expr(base, 0);
                self.p.comments_before(start(name.span));
                self.p.write(".");
                self.ident(name);
            }
            ExprKind::Call {
                callee,
                args,
                closure,
            } => self.call(e, callee, args, closure.as_ref(), reserve),
            ExprKind::Index { base, indices } => {
                self.expr(base, 1);
                self.p.write("[");
                for (i, ix) in indices.iter().enumerate() {
                    if i > 0 {
                        self.p.write(",");
                        self.p.space();
                    }
                    self.expr(ix, 1);
                }
                self.close("]", self.end(e.span));
            }
            ExprKind::Unary {
                op,
                op_span,
                operand,
            } => {
                self.p.tok(op.as_str(), start(*op_span), self.end(*op_span));
                self.expr(operand, reserve);
            }
            ExprKind::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => {
                let op_text = op.as_str();
                if *op == BinaryOp::Range {
                    self.expr(lhs, op_text.len());
                    self.p.tok(op_text, start(*op_span), self.end(*op_span));
                } else {
                    self.expr(lhs, op_text.len() + 1);
                    self.p.space();
                    self.p.tok(op_text, start(*op_span), self.end(*op_span));
                    self.p.space();
                }
                self.expr(rhs, reserve);
            }
            ExprKind::Paren(inner) => {
                self.p.tok("(", start(e.span), start(e.span) + 1);
                self.expr(inner, reserve + 1);
                self.close(")", self.end(e.span));
            }
            ExprKind::Record(r) => self.record(r, reserve),
            ExprKind::Scan(s) => self.scan(e, s),
            ExprKind::List(items) => self.list_literal(e, items, reserve),
        }
        self.p.last_end = self.p.last_end.max(self.end(e.span));
    }

    pub(super) fn ident(&mut self, i: &Ident) {
        self.p.tok(&i.name, start(i.span), self.end(i.span));
    }

    /// Writes the closing bracket of a node that ends at `node_end`, after the comments before it.
    pub(super) fn close(&mut self, bracket: &str, node_end: usize) {
        self.p.comments_before(node_end.saturating_sub(1));
        self.p.write(bracket);
        self.p.last_end = self.p.last_end.max(node_end);
    }

    /// Writes `(text)`: the flat form of a list whose last element (if any) is at `last`.
    fn flat_parens(&mut self, text: &str, last: Option<Span>) {
        self.p.write("(");
        self.p.write(text);
        self.p.write(")");
        if let Some(last) = last {
            self.p.last_end = self.p.last_end.max(self.end(last));
        }
    }

    fn call(
        &mut self,
        e: &Expr,
        callee: &Expr,
        args: &[Arg],
        closure: Option<&Closure>,
        reserve: usize,
    ) {
        self.expr(callee, 1);
        let args_end = closure.map_or(self.end(e.span).saturating_sub(1), |c| start(c.span));
        let after = match closure {
            Some(c) => {
                let params: usize = c.params.iter().map(|p| p.name.len() + ", ".len()).sum();
                " { ".len() + params.saturating_sub(", ".len()) + " ->".len()
            }
            None => reserve,
        };
        let flat = if self.p.has_comment(self.end(callee.span), args_end) {
            None
        } else {
            self.flat_args(args)
        };
        match flat {
            Some(text) if args.is_empty() || self.p.fits(text.chars().count() + 2 + after) => {
                self.flat_parens(&text, args.last().map(|a| a.span));
            }
            _ => self.list(
                "(",
                args,
                ")",
                args_end,
                |a| a.span,
                |f, a| {
                    if let Some(name) = &a.name {
                        f.ident(name);
                        f.p.write(":");
                        f.p.space();
                    }
                    f.expr(&a.value, 1);
                },
            ),
        }
        if closure.is_none() {
            self.p.last_end = self.p.last_end.max(self.end(e.span));
        }
        if let Some(c) = closure {
            self.p.space();
            self.p.write("{");
            self.p.space();
            for (i, param) in c.params.iter().enumerate() {
                if i > 0 {
                    self.p.write(",");
                    self.p.space();
                }
                self.ident(param);
            }
            self.p.space();
            self.p.write("->");
            self.body(&c.body.stmts, self.end(c.span));
        }
    }

    /// Writes a record, on one line if it fits, otherwise one field per line.
    pub(super) fn record(&mut self, r: &Record, reserve: usize) {
        let flat = if self.p.has_comment(start(r.span), self.end(r.span)) {
            None
        } else {
            let mut text = String::new();
            flat_record_into(r, &mut text).map(|()| text)
        };
        if let Some(text) = flat
            && (r.fields.is_empty() || self.p.fits(text.chars().count() + reserve))
        {
            self.p.tok(&text, start(r.span), self.end(r.span));
            return;
        }
        self.p.comments_before(start(r.span));
        // The `{` may start a line (a record argument): a comment after it on its source line
        // is a trailing one.
        self.p.last_end = self.p.last_end.max(start(r.span) + 1);
        self.list(
            "{",
            &r.fields,
            "}",
            self.end(r.span).saturating_sub(1),
            |f| f.span,
            |f, field| {
                f.ident(&field.name);
                f.p.write(":");
                f.p.space();
                f.expr(&field.value, 1);
            },
        );
        self.p.last_end = self.p.last_end.max(self.end(r.span));
    }

    /// Writes a list `[a, b]`, on one line if it fits, otherwise one element per line.
    fn list_literal(&mut self, e: &Expr, items: &[Expr], reserve: usize) {
        let flat = if self.p.has_comment(start(e.span), self.end(e.span)) {
            None
        } else {
            let mut text = String::new();
            flat_into(e, &mut text).map(|()| text)
        };
        if let Some(text) = flat
            && (items.is_empty() || self.p.fits(text.chars().count() + reserve))
        {
            self.p.tok(&text, start(e.span), self.end(e.span));
            return;
        }
        self.p.comments_before(start(e.span));
        self.p.last_end = self.p.last_end.max(start(e.span) + 1);
        self.list(
            "[",
            items,
            "]",
            self.end(e.span).saturating_sub(1),
            |x| x.span,
            |f, x| f.expr(x, 1),
        );
        self.p.last_end = self.p.last_end.max(self.end(e.span));
    }

    fn scan(&mut self, e: &Expr, s: &Scan) {
        self.p.tok("scan", start(e.span), start(e.span) + 4);
        self.p.space();
        self.p.write(match s.direction {
            ScanDirection::Forward => "forward",
            ScanDirection::Reverse => "reverse",
        });
        self.p.space();
        self.p.write("over");
        self.p.space();
        self.ident(&s.axis);
        let after = " { ".len() + s.index.name.len() + " ->".len();
        self.carries(
            &s.carries,
            self.end(s.axis.span),
            start(s.index.span),
            after,
        );
        self.p.space();
        self.p.write("{");
        self.p.space();
        self.ident(&s.index);
        self.p.space();
        self.p.write("->");
        self.body(&s.body.stmts, self.end(e.span));
    }

    /// ` with (a = 0.0, b = 1)` after a scan's axis or a loop's range (`from`), on one line
    /// when it fits with the `after` characters that follow, else one carry a line; `limit` is
    /// where the next part starts (comments before it stay inside the list).
    pub(super) fn carries(&mut self, carries: &[Carry], from: usize, limit: usize, after: usize) {
        if carries.is_empty() {
            return;
        }
        self.p.space();
        self.p.write("with");
        self.p.space();
        let flat = if self.p.has_comment(from, limit) {
            None
        } else {
            self.flat_carries(carries)
        };
        match flat {
            Some(text) if self.p.fits(text.chars().count() + 2 + after) => {
                self.flat_parens(&text, carries.last().map(|a| a.span));
            }
            _ => self.list(
                "(",
                carries,
                ")",
                limit,
                |c| c.span,
                |f, c| {
                    f.ident(&c.name);
                    f.p.space();
                    f.p.write("=");
                    f.p.space();
                    f.expr(&c.init, 1);
                },
            ),
        }
    }

    fn flat_carries(&self, carries: &[Carry]) -> Option<String> {
        let mut s = String::new();
        for (i, c) in carries.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push_str(&c.name.name);
            s.push_str(" = ");
            s.push_str(&self.flat(&c.init)?);
        }
        Some(s)
    }

    /// Writes `open`, each element on its own line followed by a comma, and `close` on a line of
    /// its own; comments before `limit` that belong to no element go before `close`.
    pub(super) fn list<T>(
        &mut self,
        open: &str,
        elems: &[T],
        close: &str,
        limit: usize,
        span_of: impl Fn(&T) -> Span,
        mut each: impl FnMut(&mut Self, &T),
    ) {
        self.p.write(open);
        let base = self.p.current_level();
        let saved = self.p.indent;
        self.p.indent = base + 1;
        self.p
            .flush_trailing(elems.first().map_or(limit, |el| start(span_of(el))));
        self.p.newline();
        for (i, el) in elems.iter().enumerate() {
            self.p.leading(start(span_of(el)), Blank::Never);
            each(self, el);
            self.p.write(",");
            self.p
                .flush_trailing(elems.get(i + 1).map_or(limit, |n| start(span_of(n))));
            self.p.newline();
        }
        self.p.dangling(limit, Blank::Never);
        self.p.newline();
        self.p.indent = base;
        self.p.write(close);
        self.p.indent = saved;
    }

    /// Writes a type: `f32`, `f32[B, T]`.
    pub(super) fn ty(&mut self, t: &TypeExpr) {
        self.ident(&t.name);
        if let Some(dims) = &t.dims {
            self.p.write("[");
            for (i, d) in dims.iter().enumerate() {
                if i > 0 {
                    self.p.write(",");
                    self.p.space();
                }
                let span = d.span();
                let text = self.dim_text(d).to_string();
                self.p.tok(&text, start(span), self.end(span));
            }
            self.close("]", self.end(t.span));
        }
    }
}

/// The one-line text of an expression (comments are the caller's concern).
pub(super) fn flat_into(e: &Expr, s: &mut String) -> Option<()> {
    match &e.kind {
        ExprKind::Number(n) => s.push_str(&n.text),
        ExprKind::Str(l) => {
            s.push('"');
            s.push_str(&l.raw);
            s.push('"');
        }
        ExprKind::Bool(b) => s.push_str(if *b { "true" } else { "false" }),
        ExprKind::Name(i) => s.push_str(&i.name),
        ExprKind::Member { base, name } => {
            flat_into(base, s)?;
            s.push('.');
            s.push_str(&name.name);
        }
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if closure.is_some() {
                return None;
            }
            flat_into(callee, s)?;
            s.push('(');
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                if let Some(name) = &a.name {
                    s.push_str(&name.name);
                    s.push_str(": ");
                }
                flat_into(&a.value, s)?;
            }
            s.push(')');
        }
        ExprKind::Index { base, indices } => {
            flat_into(base, s)?;
            s.push('[');
            for (i, ix) in indices.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                flat_into(ix, s)?;
            }
            s.push(']');
        }
        ExprKind::Unary { op, operand, .. } => {
            s.push_str(op.as_str());
            flat_into(operand, s)?;
        }
        ExprKind::Binary { op, lhs, rhs, .. } => {
            flat_into(lhs, s)?;
            if *op == BinaryOp::Range {
                s.push_str("..");
            } else {
                s.push(' ');
                s.push_str(op.as_str());
                s.push(' ');
            }
            flat_into(rhs, s)?;
        }
        ExprKind::Paren(inner) => {
            s.push('(');
            flat_into(inner, s)?;
            s.push(')');
        }
        ExprKind::Record(r) => flat_record_into(r, s)?,
        ExprKind::Scan(_) => return None,
        ExprKind::List(items) => {
            s.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                flat_into(x, s)?;
            }
            s.push(']');
        }
    }
    Some(())
}

/// The one-line text of a record (comments are the caller's concern).
pub(super) fn flat_record_into(r: &Record, s: &mut String) -> Option<()> {
    if r.fields.is_empty() {
        s.push_str("{}");
        return Some(());
    }
    s.push_str("{ ");
    for (i, field) in r.fields.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&field.name.name);
        s.push_str(": ");
        flat_into(&field.value, s)?;
    }
    s.push_str(" }");
    Some(())
}
