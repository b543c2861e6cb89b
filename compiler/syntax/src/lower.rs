//! Turns pest's parse tree into the [`ast`](crate::ast). This and `grammar.rs` are the only
//! modules that see pest types.

use crate::ast::*;
use crate::grammar::Rule;
use pest::iterators::Pair;
use rlc_diagnostics::{Code, Diagnostic, FileId};

/// Builds AST nodes from pairs of one item parsed from `src[offset..]`.
pub(crate) struct Lowerer<'a> {
    pub file: FileId,
    /// The whole file (spans are trimmed of trailing white space and comments against it).
    pub src: &'a str,
    /// The source with its comments blanked, where that gives the same token ends as
    /// `trivia::previous_token_end` (see `Blanked::exact` in lib.rs).
    pub blanked: Option<&'a str>,
    pub offset: usize,
    pub diagnostics: &'a mut Vec<Diagnostic>,
    pub depth: Depth,
}

/// What [`Lowerer::expr`] keeps of the expressions around the one it lowers (see [`MAX_DEPTH`]).
#[derive(Default)]
pub(crate) struct Depth {
    /// The greatest depth of the expressions lowered so far inside the current one.
    below: usize,
    /// How many expressions are being lowered, one inside the other.
    open: usize,
    /// An E0120 was reported inside the outermost expression being lowered: the expressions
    /// around a refused one are not reported again.
    reported: bool,
}

type P<'i> = Pair<'i, Rule>;

/// The longest run of operators (binary, prefix, or postfix) one expression may hold.
pub const MAX_CHAIN: usize = 256;

/// How deep expressions may nest: an expression's depth is one more than the deepest expression
/// written inside it (in brackets, arguments, closures) plus the operators, calls, fields and
/// indices of its own chain, the levels its tree can have above that one. The passes after
/// parsing (checker, formatter, lowering to a plan, the language server) recurse over the tree,
/// so this bounds their stack; `rlc check` on the deepest accepted expression runs in a 1 MiB
/// stack (test `deepest_accepted_expression_checks_in_a_small_stack` in fuzz/).
pub const MAX_DEPTH: usize = 256;

impl Lowerer<'_> {
    /// The pair's span in the file. pest includes the white space and comments it skipped
    /// while trying an optional part at the end of a rule; they are not part of the node.
    fn span(&self, pair: &P) -> Span {
        let s = pair.as_span();
        let start = s.start() + self.offset;
        let end = s.end() + self.offset;
        // Most pairs end with their last token: only one that ends in white space, or at the end
        // of the file (which a comment may reach), needs the look back.
        let ends_with_token = end > start
            && end < self.src.len()
            && self.src[..end]
                .chars()
                .next_back()
                .is_some_and(|c| !c.is_whitespace());
        let end = match self.blanked {
            _ if ends_with_token => end,
            // Comments are blanks there: white space alone separates the last token.
            Some(text) => start + text[start..end].trim_end().len(),
            None => crate::trivia::previous_token_end(self.src, start, end),
        };
        Span::new(start, end)
    }

    /// A name. Keywords are read as names by the grammar and rejected here, so that the
    /// error is precise and the rest of the item still parses.
    fn ident(&mut self, pair: P) -> Ident {
        debug_assert_eq!(pair.as_rule(), Rule::ident);
        let ident = Ident {
            name: pair.as_str().to_string(),
            span: self.span(&pair),
        };
        if KEYWORDS.contains(&ident.name.as_str()) {
            self.diagnostics.push(
                Diagnostic::new(
                    Code::KeywordAsName,
                    format!("`{}` is a keyword and cannot be used as a name", ident.name),
                    self.file,
                    ident.span,
                )
                .primary_label("keyword")
                .help(format!("choose another name, e.g. `{}_`", ident.name)),
            );
        }
        ident
    }

    pub fn item(&mut self, pair: P) -> Item {
        let span = self.span(&pair);
        let mut inner = pair.into_inner().peekable();
        let is_pub = inner.peek().is_some_and(|p| p.as_rule() == Rule::pub_kw);
        if is_pub {
            inner.next();
        }
        let body = inner.next().expect("grammar: item has a body");
        let kind = match body.as_rule() {
            Rule::import_item => ItemKind::Import(self.import(body)),
            Rule::cluster_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                ItemKind::Cluster(Cluster {
                    name,
                    def: self.definition(it.next().unwrap()),
                })
            }
            Rule::model_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                let kind = self.ident(it.next().unwrap());
                ItemKind::Model(Model {
                    name,
                    kind,
                    def: self.definition(it.next().unwrap()),
                })
            }
            Rule::dataset_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                ItemKind::Dataset(Dataset {
                    name,
                    def: self.definition(it.next().unwrap()),
                })
            }
            Rule::verifier_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                ItemKind::Verifier(VerifierDef {
                    name,
                    def: self.definition(it.next().unwrap()),
                })
            }
            Rule::environment_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                ItemKind::Environment(EnvironmentDef {
                    name,
                    def: self.definition(it.next().unwrap()),
                })
            }
            Rule::struct_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                let fields = it
                    .map(|f| {
                        let span = self.span(&f);
                        let mut fi = f.into_inner();
                        let name = self.ident(fi.next().unwrap());
                        StructField {
                            name,
                            ty: self.type_expr(fi.next().unwrap()),
                            span,
                        }
                    })
                    .collect();
                ItemKind::Struct(StructDef { name, fields })
            }
            Rule::fn_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                let params = self.params(it.next().unwrap());
                let mut next = it.next().unwrap();
                let ret = if next.as_rule() == Rule::type_expr {
                    let ty = self.type_expr(next);
                    next = it.next().unwrap();
                    Some(ty)
                } else {
                    None
                };
                ItemKind::Fn(FnDef {
                    name,
                    params,
                    ret,
                    body: self.block(next),
                })
            }
            Rule::const_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                let (ty, value) = self.typed_value(it);
                ItemKind::Const(ConstDef { name, ty, value })
            }
            Rule::place_item => ItemKind::Place(self.place(body.into_inner().next().unwrap())),
            Rule::pipeline_item => {
                let mut it = body.into_inner();
                let name = self.ident(it.next().unwrap());
                let mut next = it.next().unwrap();
                let params = if next.as_rule() == Rule::params {
                    let p = self.params(next);
                    next = it.next().unwrap();
                    p
                } else {
                    Vec::new()
                };
                ItemKind::Pipeline(Pipeline {
                    name,
                    params,
                    body: self.block(next),
                })
            }
            r => unreachable!("grammar: unexpected item rule {r:?}"),
        };
        Item {
            doc: None,
            is_pub,
            kind,
            span,
        }
    }

    /// `(: T)? = value` as in `let` statements and constants.
    fn typed_value<'i>(&mut self, mut it: impl Iterator<Item = P<'i>>) -> (Option<TypeExpr>, Expr) {
        let next = it.next().unwrap();
        if next.as_rule() == Rule::type_expr {
            let ty = self.type_expr(next);
            (Some(ty), self.expr(it.next().unwrap()))
        } else {
            (None, self.expr(next))
        }
    }

    fn import(&mut self, pair: P) -> Import {
        let span = self.span(&pair);
        let mut source = None;
        let mut alias = None;
        let mut names = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::import_source => {
                    let s = p.into_inner().next().unwrap();
                    source = Some(match s.as_rule() {
                        Rule::string => ImportSource::File(self.string(s)),
                        _ => ImportSource::Path(s.into_inner().map(|i| self.ident(i)).collect()),
                    });
                }
                Rule::ident => alias = Some(self.ident(p)),
                Rule::import_names => {
                    names = Some(
                        p.into_inner()
                            .map(|n| {
                                let span = self.span(&n);
                                let mut ni = n.into_inner();
                                let name = self.ident(ni.next().unwrap());
                                ImportName {
                                    name,
                                    alias: ni.next().map(|a| self.ident(a)),
                                    span,
                                }
                            })
                            .collect(),
                    )
                }
                r => unreachable!("grammar: unexpected import part {r:?}"),
            }
        }
        Import {
            source: source.expect("grammar: import has a source"),
            alias,
            names,
            span,
        }
    }

    fn definition(&mut self, pair: P) -> Definition {
        if pair.as_rule() == Rule::field_block {
            let span = self.span(&pair);
            let fields = pair
                .into_inner()
                .map(|f| {
                    let span = self.span(&f);
                    let mut fi = f.into_inner();
                    let key = self.ident(fi.next().unwrap());
                    Field {
                        key,
                        value: self.expr(fi.next().unwrap()),
                        span,
                    }
                })
                .collect();
            Definition::Fields(FieldBlock { fields, span })
        } else {
            Definition::Expr(self.expr(pair))
        }
    }

    fn params(&mut self, pair: P) -> Vec<Param> {
        pair.into_inner()
            .map(|p| {
                let span = self.span(&p);
                let mut it = p.into_inner();
                let name = self.ident(it.next().unwrap());
                let mut ty = None;
                let mut default = None;
                for part in it {
                    if part.as_rule() == Rule::type_expr {
                        ty = Some(self.type_expr(part));
                    } else {
                        default = Some(self.expr(part));
                    }
                }
                Param {
                    name,
                    ty,
                    default,
                    span,
                }
            })
            .collect()
    }

    fn place(&mut self, pair: P) -> Place {
        match pair.as_rule() {
            Rule::place_all => {
                let span = self.span(&pair);
                let auto_span = Span::new(span.start as usize, span.start as usize + "auto".len());
                let devices = pair.into_inner().next().map(|e| self.expr(e));
                Place {
                    target: PlaceTarget::AllRoles(auto_span),
                    devices,
                    layout: Layout::Auto(auto_span),
                }
            }
            _ => {
                let mut role = None;
                let mut devices = None;
                let mut layout = None;
                for p in pair.into_inner() {
                    match p.as_rule() {
                        Rule::role_ref => {
                            let mut it = p.into_inner();
                            let r = self.ident(it.next().unwrap());
                            role = Some(PlaceTarget::Role {
                                role: r,
                                phase: it.next().map(|i| self.ident(i)),
                            });
                        }
                        Rule::expr => devices = Some(self.expr(p)),
                        Rule::place_layout => layout = Some(self.layout(p)),
                        r => unreachable!("grammar: unexpected place part {r:?}"),
                    }
                }
                Place {
                    target: role.expect("grammar: place has a role"),
                    devices,
                    layout: layout.expect("grammar: place has a layout"),
                }
            }
        }
    }

    fn layout(&mut self, pair: P) -> Layout {
        let span = self.span(&pair);
        let items: Vec<_> = pair.into_inner().collect();
        if items.first().is_some_and(|p| p.as_rule() == Rule::auto_kw) {
            return Layout::Auto(span);
        }
        Layout::Explicit(
            items
                .into_iter()
                .map(|item| {
                    let span = self.span(&item);
                    let mut it = item.into_inner();
                    let kind_pair = it.next().unwrap();
                    let kind =
                        LayoutKind::from_name(kind_pair.as_str()).expect("grammar: layout kinds");
                    let kind_span = self.span(&kind_pair);
                    LayoutItem {
                        kind,
                        kind_span,
                        value: self.expr(it.next().unwrap()),
                        span,
                    }
                })
                .collect(),
        )
    }

    fn type_expr(&mut self, pair: P) -> TypeExpr {
        let span = self.span(&pair);
        // The source's text, not the parsed one (whose comments are blanked): the pair may end
        // with a comment, and a `[` in it has always counted.
        let s = pair.as_span();
        let text = &self.src[s.start() + self.offset..s.end() + self.offset];
        let mut it = pair.into_inner();
        let name = self.ident(it.next().unwrap());
        let dims = text.contains('[').then(|| {
            it.map(|d| {
                let inner = d.into_inner().next().unwrap();
                match inner.as_rule() {
                    Rule::ident => Dim::Named(self.ident(inner)),
                    _ => {
                        let span = self.span(&inner);
                        match inner.as_str().parse::<u64>() {
                            Ok(n) => Dim::Size(n, span),
                            Err(_) => {
                                self.diagnostics.push(
                                    Diagnostic::new(
                                        Code::InvalidNumber,
                                        "dimension size is too large",
                                        self.file,
                                        span,
                                    )
                                    .primary_label("does not fit in 64 bits"),
                                );
                                Dim::Size(u64::MAX, span)
                            }
                        }
                    }
                }
            })
            .collect()
        });
        TypeExpr { name, dims, span }
    }

    pub fn block(&mut self, pair: P) -> Block {
        let span = self.span(&pair);
        Block {
            stmts: pair.into_inner().map(|s| self.stmt(s)).collect(),
            span,
        }
    }

    fn stmt(&mut self, pair: P) -> Stmt {
        let span = self.span(&pair);
        let rule = pair.as_rule();
        let mut it = pair.into_inner();
        let kind = match rule {
            Rule::let_stmt => {
                let name = self.ident(it.next().unwrap());
                let (ty, value) = self.typed_value(it);
                StmtKind::Let { name, ty, value }
            }
            Rule::assign_stmt => {
                let name = self.ident(it.next().unwrap());
                StmtKind::Assign {
                    name,
                    value: self.expr(it.next().unwrap()),
                }
            }
            Rule::loop_stmt => {
                let var = self.ident(it.next().unwrap());
                let range = self.expr(it.next().unwrap());
                let mut carries = Vec::new();
                let mut body = None;
                for p in it {
                    match p.as_rule() {
                        Rule::carry => carries.push(self.carry(p)),
                        _ => body = Some(self.block(p)),
                    }
                }
                StmtKind::Loop {
                    var,
                    range,
                    carries,
                    body: body.expect("grammar: a loop has a body"),
                }
            }
            Rule::log_stmt => StmtKind::Log {
                record: self.record(it.next().unwrap()),
            },
            Rule::every_stmt => {
                let interval = self.expr(it.next().unwrap());
                let _steps_kw = it.next();
                StmtKind::Every {
                    interval,
                    body: self.block(it.next().unwrap()),
                }
            }
            Rule::checkpoint_stmt => StmtKind::Checkpoint {
                roles: it.map(|i| self.ident(i)).collect(),
            },
            Rule::emit_stmt => StmtKind::Emit {
                value: self.expr(it.next().unwrap()),
            },
            Rule::expr_stmt => {
                let e = self.expr(it.next().unwrap());
                if let ExprKind::Name(name) = &e.kind
                    && let Some(help) = crate::syntax_error::foreign_word_help(&name.name)
                {
                    self.diagnostics.push(
                        Diagnostic::new(
                            Code::ForeignSyntax,
                            format!("`{}` is not rl syntax", name.name),
                            self.file,
                            name.span,
                        )
                        .primary_label("read as a name on its own")
                        .help(help),
                    );
                }
                StmtKind::Expr(e)
            }
            r => unreachable!("grammar: unexpected statement rule {r:?}"),
        };
        Stmt { kind, span }
    }

    fn record(&mut self, pair: P) -> Record {
        let span = self.span(&pair);
        let fields = pair
            .into_inner()
            .map(|f| {
                let span = self.span(&f);
                let mut it = f.into_inner();
                let name = self.ident(it.next().unwrap());
                RecordField {
                    name,
                    value: self.expr(it.next().unwrap()),
                    span,
                }
            })
            .collect();
        Record { fields, span }
    }

    /// `expr = prefix* postfix_expr (infix prefix* postfix_expr)*`, folded by operator
    /// precedence with explicit stacks (no recursion on the length of the chain). An expression
    /// too long or too deep is reported (once per outermost expression) and replaced by a
    /// literal, so the tree the later passes see stays shallow.
    pub fn expr(&mut self, pair: P) -> Expr {
        self.depth.open += 1;
        let e = self.expr_within_limits(pair);
        self.depth.open -= 1;
        if self.depth.open == 0 {
            self.depth.reported = false;
        }
        e
    }

    fn expr_within_limits(&mut self, pair: P) -> Expr {
        debug_assert_eq!(pair.as_rule(), Rule::expr);
        let span = self.span(&pair);
        let (mut binary, mut prefix, mut postfix) = (0, 0, 0);
        // Each operator takes at least one character: only a longer text can hold a chain
        // longer than MAX_CHAIN, so only then are they counted.
        let text = pair.as_span();
        if text.end() - text.start() > MAX_CHAIN {
            for p in pair.clone().into_inner() {
                match p.as_rule() {
                    Rule::neg_op | Rule::not_op => prefix += 1,
                    Rule::postfix_expr => postfix = postfix.max(p.into_inner().len()),
                    _ => binary += 1,
                }
            }
        }
        if self.too_long(span, "operators", binary)
            || self.too_long(span, "prefix operators", prefix)
            || self.too_long(span, "calls, fields and indices", postfix)
        {
            return refused(span);
        }
        // The depth of the expressions inside this one, lowered below; see MAX_DEPTH.
        let outer = std::mem::take(&mut self.depth.below);
        let (mut own, mut posts) = (0, 0);
        let mut operands: Vec<Expr> = Vec::new();
        let mut operators: Vec<(BinaryOp, Span)> = Vec::new();
        let mut prefixes: Vec<(UnaryOp, Span)> = Vec::new();
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::neg_op => {
                    own += 1;
                    prefixes.push((UnaryOp::Neg, self.span(&p)));
                }
                Rule::not_op => {
                    own += 1;
                    prefixes.push((UnaryOp::Not, self.span(&p)));
                }
                Rule::postfix_expr => {
                    posts = posts.max(p.clone().into_inner().len());
                    let mut e = self.postfix_expr(p);
                    while let Some((op, op_span)) = prefixes.pop() {
                        let span = op_span.to(e.span);
                        e = Expr {
                            kind: ExprKind::Unary {
                                op,
                                op_span,
                                operand: Box::new(e),
                            },
                            span,
                        };
                    }
                    operands.push(e);
                }
                rule => {
                    own += 1;
                    let op = binary_op(rule);
                    let op_span = self.span(&p);
                    // Left associative: reduce while the stacked operator binds at least as tightly.
                    while operators
                        .last()
                        .is_some_and(|(top, _)| top.precedence() >= op.precedence())
                    {
                        self.reduce(&mut operands, &mut operators);
                    }
                    operators.push((op, op_span));
                }
            }
        }
        while !operators.is_empty() {
            self.reduce(&mut operands, &mut operators);
        }
        let depth = self.depth.below + own + posts;
        if depth > MAX_DEPTH {
            // Reported at the innermost expression past the limit; the ones around it see a
            // shallow literal in its place.
            self.depth.below = outer;
            self.refuse(
                span,
                format!("expression nested too deep: {depth} levels (at most {MAX_DEPTH})"),
                "too deep",
            );
            return refused(span);
        }
        self.depth.below = outer.max(depth);
        operands.pop().expect("grammar: expression has an operand")
    }

    /// Refuses an expression so long that later passes, which recurse over expressions, could
    /// exhaust the stack; no real program comes near the limit.
    fn too_long(&mut self, span: Span, what: &str, n: usize) -> bool {
        if n <= MAX_CHAIN {
            return false;
        }
        self.refuse(
            span,
            format!("expression too long: {n} {what} in a row (at most {MAX_CHAIN})"),
            "too long",
        );
        true
    }

    /// Reports E0120 unless it was reported inside the same outermost expression.
    fn refuse(&mut self, span: Span, message: String, label: &str) {
        if std::mem::replace(&mut self.depth.reported, true) {
            return;
        }
        self.diagnostics.push(
            Diagnostic::new(Code::NestedTooDeep, message, self.file, span)
                .primary_label(label)
                .help("split it with `let` bindings"),
        );
    }

    fn reduce(&mut self, operands: &mut Vec<Expr>, operators: &mut Vec<(BinaryOp, Span)>) {
        let (op, op_span) = operators.pop().unwrap();
        let rhs = operands.pop().unwrap();
        let lhs = operands.pop().unwrap();
        if op.is_comparison()
            && let ExprKind::Binary {
                op: inner,
                op_span: inner_span,
                ..
            } = &lhs.kind
            && inner.is_comparison()
        {
            self.diagnostics.push(
                Diagnostic::new(
                    Code::ChainedComparison,
                    format!(
                        "comparisons cannot be chained: `{}` after `{}`",
                        op.as_str(),
                        inner.as_str()
                    ),
                    self.file,
                    op_span,
                )
                .primary_label("second comparison")
                .label(self.file, *inner_span, "first comparison")
                .help("compare twice and join with `&&`: `a < b && b < c`"),
            );
        }
        let span = lhs.span.to(rhs.span);
        operands.push(Expr {
            kind: ExprKind::Binary {
                op,
                op_span,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            },
            span,
        });
    }

    fn postfix_expr(&mut self, pair: P) -> Expr {
        let mut it = pair.into_inner();
        let mut e = self.primary(it.next().unwrap());
        for post in it {
            let span = e.span.to(self.span(&post));
            let kind = match post.as_rule() {
                Rule::member => ExprKind::Member {
                    base: Box::new(e),
                    name: self.ident(post.into_inner().next().unwrap()),
                },
                Rule::index => ExprKind::Index {
                    base: Box::new(e),
                    indices: post.into_inner().map(|i| self.expr(i)).collect(),
                },
                Rule::call => {
                    let mut args = Vec::new();
                    let mut closure = None;
                    for part in post.into_inner() {
                        match part.as_rule() {
                            Rule::arg => args.push(self.arg(part)),
                            Rule::closure => closure = Some(self.closure(part)),
                            r => unreachable!("grammar: unexpected call part {r:?}"),
                        }
                    }
                    ExprKind::Call {
                        callee: Box::new(e),
                        args,
                        closure,
                    }
                }
                r => unreachable!("grammar: unexpected postfix {r:?}"),
            };
            e = Expr { kind, span };
        }
        e
    }

    fn arg(&mut self, pair: P) -> Arg {
        let span = self.span(&pair);
        let mut parts = pair.into_inner();
        if parts.len() == 2 {
            let name = self.ident(parts.next().unwrap());
            Arg {
                name: Some(name),
                value: self.expr(parts.next().unwrap()),
                span,
            }
        } else {
            Arg {
                name: None,
                value: self.expr(parts.next().unwrap()),
                span,
            }
        }
    }

    fn closure(&mut self, pair: P) -> Closure {
        let span = self.span(&pair);
        let mut params = Vec::new();
        let mut body = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::ident => params.push(self.ident(p)),
                _ => body = Some(self.block_body(p)),
            }
        }
        Closure {
            params,
            body: body.expect("grammar: closure has a body"),
            span,
        }
    }

    /// The statements of a closure or scan, which share the braces with their parameter list.
    fn block_body(&mut self, pair: P) -> Block {
        let span = self.span(&pair);
        Block {
            stmts: pair.into_inner().map(|s| self.stmt(s)).collect(),
            span,
        }
    }

    fn primary(&mut self, pair: P) -> Expr {
        let span = self.span(&pair);
        let kind = match pair.as_rule() {
            Rule::ident => ExprKind::Name(self.ident(pair)),
            Rule::log_fn => ExprKind::Name(Ident {
                name: "log".into(),
                span,
            }),
            Rule::number => ExprKind::Number(self.number(pair)),
            Rule::string => ExprKind::Str(self.string(pair)),
            Rule::bool_lit => ExprKind::Bool(pair.as_str() == "true"),
            Rule::paren => ExprKind::Paren(Box::new(self.expr(pair.into_inner().next().unwrap()))),
            Rule::record => ExprKind::Record(self.record(pair)),
            Rule::scan_expr => ExprKind::Scan(Box::new(self.scan(pair))),
            Rule::list => ExprKind::List(pair.into_inner().map(|e| self.expr(e)).collect()),
            r => unreachable!("grammar: unexpected primary {r:?}"),
        };
        Expr { kind, span }
    }

    fn scan(&mut self, pair: P) -> Scan {
        let mut it = pair.into_inner();
        let direction = match it.next().unwrap().as_str() {
            "forward" => ScanDirection::Forward,
            _ => ScanDirection::Reverse,
        };
        let _over = it.next();
        let axis = self.ident(it.next().unwrap());
        let mut carries = Vec::new();
        let mut index = None;
        let mut body = None;
        for p in it {
            match p.as_rule() {
                Rule::carry => carries.push(self.carry(p)),
                Rule::ident => index = Some(self.ident(p)),
                _ => body = Some(self.block_body(p)),
            }
        }
        Scan {
            direction,
            axis,
            carries,
            index: index.expect("grammar: scan names its index"),
            body: body.expect("grammar: scan has a body"),
        }
    }

    fn carry(&mut self, pair: P) -> Carry {
        let span = self.span(&pair);
        let mut it = pair.into_inner();
        let name = self.ident(it.next().unwrap());
        Carry {
            name,
            init: self.expr(it.next().unwrap()),
            span,
        }
    }

    fn number(&mut self, pair: P) -> NumberLit {
        let span = self.span(&pair);
        let text = pair.as_str().to_string();
        let mut it = pair.into_inner();
        let body = it.next().unwrap();
        let digits = body.as_str().replace('_', "");
        let is_integer = !digits.contains(['.', 'e', 'E']);
        let value = digits.parse::<f64>().unwrap_or(f64::INFINITY);
        if !value.is_finite() {
            self.diagnostics.push(
                Diagnostic::new(
                    Code::InvalidNumber,
                    format!("`{text}` is too large"),
                    self.file,
                    span,
                )
                .primary_label("out of range of a 64-bit float"),
            );
        }
        let unit = it.next().and_then(|u| {
            let name = u.as_str();
            let unit = Unit::from_name(name);
            if unit.is_none() {
                let u_span = self.span(&u);
                let known: Vec<_> = Unit::ALL.iter().map(|u| u.as_str()).collect();
                let mut d = Diagnostic::new(
                    Code::UnknownUnit,
                    format!("unknown unit `{name}` after a number"),
                    self.file,
                    u_span,
                )
                .primary_label("not a unit");
                let radix_prefix = digits == "0" && name.starts_with(['x', 'o', 'b']);
                d = if radix_prefix {
                    d.help("only decimal numbers are supported (no `0x`, `0o` or `0b`)")
                } else {
                    d.help(format!(
                        "units: {}; or put a space between the number and the word",
                        known.join(", ")
                    ))
                };
                self.diagnostics.push(d);
            }
            unit
        });
        NumberLit {
            text,
            value,
            is_integer,
            unit,
        }
    }

    fn string(&mut self, pair: P) -> StrLit {
        let span = self.span(&pair);
        let body = pair.into_inner().next().unwrap();
        let raw = body.as_str().to_string();
        let body_start = self.span(&body).start as usize;
        let mut value = String::with_capacity(raw.len());
        let mut chars = raw.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '\\' {
                value.push(c);
                continue;
            }
            match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, '\\')) => value.push('\\'),
                Some((_, '"')) => value.push('"'),
                Some((j, other)) => {
                    let at = body_start + i;
                    self.diagnostics.push(
                        Diagnostic::new(
                            Code::InvalidEscape,
                            format!("unknown escape `\\{other}` in a string"),
                            self.file,
                            Span::new(at, body_start + j + other.len_utf8()),
                        )
                        .primary_label("not an escape")
                        .help("the escapes are `\\n`, `\\t`, `\\\\` and `\\\"`"),
                    );
                    value.push(other);
                }
                None => {}
            }
        }
        StrLit { value, raw, span }
    }
}

fn binary_op(rule: Rule) -> BinaryOp {
    match rule {
        Rule::range_op => BinaryOp::Range,
        Rule::or_op => BinaryOp::Or,
        Rule::and_op => BinaryOp::And,
        Rule::eq_op => BinaryOp::Eq,
        Rule::ne_op => BinaryOp::Ne,
        Rule::lt_op => BinaryOp::Lt,
        Rule::le_op => BinaryOp::Le,
        Rule::gt_op => BinaryOp::Gt,
        Rule::ge_op => BinaryOp::Ge,
        Rule::add_op => BinaryOp::Add,
        Rule::sub_op => BinaryOp::Sub,
        Rule::mul_op => BinaryOp::Mul,
        Rule::div_op => BinaryOp::Div,
        Rule::rem_op => BinaryOp::Rem,
        r => unreachable!("grammar: {r:?} is not a binary operator"),
    }
}

/// What stands for an expression refused as too long or too deep: a literal, so the passes
/// after parsing see a shallow tree (the file has an error and is not checked further).
fn refused(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Number(NumberLit {
            text: "0".into(),
            value: 0.0,
            is_integer: true,
            unit: None,
        }),
        span,
    }
}
