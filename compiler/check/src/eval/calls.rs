//! Calls: argument binding, typed functions (signatures unified with arguments), configuration
//! helpers (inlined), built-ins and dataset methods; group estimators fed groups of one.

use super::roles::rollout_rows;
use super::*;

impl Evaluator<'_> {
    // ----------------------------------------------------------------------------------------
    // Calls

    pub(super) fn call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        callee: &Expr,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Val {
        // Methods: role operations and dataset methods.
        if let ExprKind::Member { base, name } = &callee.kind {
            let b = self.expr(frame, base);
            if (matches!(b, Val::Model(_))
                || matches!(&b, Val::Dataset(_) if DATASET_METHODS.contains(&name.name.as_str())))
                && !frame.in_pipeline
            {
                return self.err(
                    Diagnostic::new(
                        Code::NotConstant,
                        format!(
                            "`{}` runs during training: it belongs in a pipeline",
                            name.name
                        ),
                        frame.file,
                        name.span,
                    )
                    .primary_label("not known before the job starts")
                    .help("move the call into the pipeline's loop"),
                );
            }
            match &b {
                Val::Model(m) => return self.role_call(frame, e, *m, name, args, closure),
                Val::Dataset(d) => return self.dataset_call(frame, e, d.clone(), name, args),
                Val::Error => {
                    self.eval_args(frame, args);
                    // A loss closure still reads names (a recipe on its own has no model yet).
                    if let Some(c) = closure {
                        frame.push_scope();
                        for p in &c.params {
                            frame.bind(&p.name, Val::Error, p.span, false);
                        }
                        self.block(frame, &c.body);
                        self.end_scope(frame);
                    }
                    return Val::Error;
                }
                _ => {
                    let f = self.member(frame, &b, name);
                    return self.apply(frame, e, f, callee.span, args, closure);
                }
            }
        }
        if let ExprKind::Name(ident) = &callee.kind {
            let shadowed = frame.lookup(&ident.name).is_some()
                || self
                    .modules
                    .get(frame.module)
                    .lookup(frame.module, &ident.name)
                    .is_some();
            if !shadowed && let Some(b) = builtins::lookup(&ident.name) {
                self.no_closure(frame, closure);
                return self.builtin(frame, e, b, &ident.name, args);
            }
        }
        let f = self.expr(frame, callee);
        self.apply(frame, e, f, callee.span, args, closure)
    }

    pub(super) fn no_closure(&mut self, frame: &Frame, closure: Option<&ast::Closure>) {
        if let Some(c) = closure {
            self.diags.push(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "only `update` takes a block",
                    frame.file,
                    c.span,
                )
                .primary_label("unexpected block"),
            );
        }
    }

    pub(super) fn eval_args(&mut self, frame: &mut Frame, args: &[ast::Arg]) -> Vec<Val> {
        args.iter().map(|a| self.expr(frame, &a.value)).collect()
    }

    pub(super) fn apply(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        f: Val,
        callee_span: Span,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Val {
        self.no_closure(frame, closure);
        match f {
            Val::Fn(r) => self.call_fn(frame, e, r, args),
            Val::Verifier(v) => self.verifier_call(frame, e, v, args),
            Val::Environment(env) => self.environment_call(frame, e, env, args),
            Val::Pipeline(_) => {
                self.eval_args(frame, args);
                self.err(super::recipes::misplaced_call(
                    super::recipes::ONLY_AS_A_BODY,
                    frame.file,
                    e.span,
                    "a pipeline's call as a value",
                ))
            }
            Val::Error => {
                self.eval_args(frame, args);
                Val::Error
            }
            other => {
                self.eval_args(frame, args);
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("{} cannot be called", other.describe()),
                        frame.file,
                        callee_span,
                    )
                    .primary_label("not a function"),
                )
            }
        }
    }

    /// Matches call arguments to parameter names: positional first, then by name. Reports
    /// unknown, repeated, missing and surplus arguments.
    pub(super) fn bind_args<'a>(
        &mut self,
        frame: &Frame,
        call_span: Span,
        what: &str,
        params: &[(&str, bool)],
        args: &'a [ast::Arg],
    ) -> Option<Vec<Option<&'a ast::Arg>>> {
        let names: Vec<&str> = params.iter().map(|(p, _)| *p).collect();
        let given: Vec<Option<&str>> = args
            .iter()
            .map(|a| a.name.as_ref().map(|n| n.name.as_str()))
            .collect();
        let matched = crate::args::match_args(&names, &given);
        // Where an argument is: its name, or the whole argument when it has none.
        let at = |a: &ast::Arg| a.name.as_ref().map_or(a.span, |n| n.span);
        for issue in &matched.issues {
            let d = match *issue {
                crate::args::Issue::Surplus { arg } => Diagnostic::new(
                    Code::WrongArity,
                    format!(
                        "{what} takes {} argument{}, found more",
                        params.len(),
                        if params.len() == 1 { "" } else { "s" }
                    ),
                    frame.file,
                    args[arg].span,
                )
                .primary_label("surplus argument"),
                crate::args::Issue::Repeated { arg, first, param } => {
                    let d = Diagnostic::new(
                        Code::UnknownArgument,
                        format!("`{}` is given twice", names[param]),
                        frame.file,
                        at(&args[arg]),
                    )
                    .primary_label("repeated argument")
                    .label(frame.file, args[first].span, "first given here");
                    if args[arg].name.is_none() {
                        d.help(format!(
                            "positional arguments fill the parameters in order, so this one is `{}`'s: give it by name",
                            names[param]
                        ))
                    } else {
                        d
                    }
                }
                crate::args::Issue::Unknown { arg } => {
                    let n = args[arg].name.as_ref().expect("a named argument");
                    let d = Diagnostic::new(
                        Code::UnknownArgument,
                        format!("{what} has no parameter `{}`", n.name),
                        frame.file,
                        n.span,
                    )
                    .primary_label("unknown argument");
                    crate::hints::suggest(
                        d,
                        &n.name,
                        names.iter().copied(),
                        2,
                        format!("the parameters are {}", names.join(", ")),
                    )
                }
            };
            self.diags.push(d);
        }
        let mut ok = matched.issues.is_empty();
        let bound: Vec<Option<&ast::Arg>> =
            matched.slots.iter().map(|s| s.map(|i| &args[i])).collect();
        for (i, (p, required)) in params.iter().enumerate() {
            if *required && bound[i].is_none() && ok {
                ok = false;
                self.diags.push(
                    Diagnostic::new(
                        Code::UnknownArgument,
                        format!("{what} needs the argument `{p}`"),
                        frame.file,
                        call_span,
                    )
                    .primary_label(format!("`{p}` is missing")),
                );
            }
        }
        ok.then_some(bound)
    }

    pub(super) fn call_fn(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        r: ItemRef,
        args: &[ast::Arg],
    ) -> Val {
        let module = self.modules.get(r.module);
        let ItemKind::Fn(f) = &module.item(r.index).kind else {
            self.eval_args(frame, args);
            return self.err(
                Diagnostic::new(Code::TypeMismatch, "not a function", frame.file, e.span)
                    .primary_label("not callable"),
            );
        };
        let what = format!("`{}`", f.name.name);
        let params: Vec<(&str, bool)> = f
            .params
            .iter()
            .map(|p| (p.name.name.as_str(), p.default.is_none()))
            .collect();
        let Some(bound) = self.bind_args(frame, e.span, &what, &params, args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let arg_vals: Vec<Option<(Val, Span)>> = bound
            .iter()
            .map(|a| a.map(|a| (self.expr(frame, &a.value), a.value.span)))
            .collect();
        self.group_of_one(frame, r, &f.name, args);
        let inline = f.params.iter().any(|p| p.ty.is_none())
            || f.ret
                .as_ref()
                .is_some_and(|t| DType::from_name(&t.name.name).is_none());
        if inline {
            return self.inline_call(frame, e, r, f, arg_vals);
        }
        // A typed function: check arguments against the signature, unifying dimensions.
        let mut unifier = Unifier::default();
        let mut failed = false;
        for (p, a) in f.params.iter().zip(&arg_vals) {
            let Some((val, span)) = a else { continue };
            if val.is_error() {
                failed = true;
                continue;
            }
            let want = self.type_expr(r.module, p.ty.as_ref().unwrap());
            let (Some(wt), Some(at)) = (want.as_tensor(), val.as_tensor()) else {
                if want.as_tensor().is_some() && self.record_as_reward(frame, val, *span) {
                    failed = true;
                    continue;
                }
                if !want.is_error() && std::mem::discriminant(&want) != std::mem::discriminant(val)
                {
                    failed = true;
                    self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "argument `{}` of {what} expects {}, found {}",
                                p.name.name,
                                want.describe(),
                                val.describe()
                            ),
                            frame.file,
                            *span,
                        )
                        .primary_label("wrong kind of value")
                        .label(
                            module.file,
                            p.span,
                            "parameter declared here",
                        ),
                    );
                }
                continue;
            };
            if let Err(msg) = unifier.unify(
                &p.name.name,
                &wt,
                &at,
                matches!(val, Val::Int(_) | Val::Float(_)),
            ) {
                failed = true;
                let arg_expr = &bound[f.params.iter().position(|q| std::ptr::eq(q, p)).unwrap()]
                    .unwrap()
                    .value;
                if self.sequence_reward_per_token(frame, arg_expr, &wt, &at, (module.file, p.span))
                {
                    continue;
                }
                let code = msg.code();
                self.diags.push(
                    Diagnostic::new(
                        code,
                        format!(
                            "argument `{}` of {what} is `{at}`, but the parameter is `{wt}`",
                            p.name.name
                        ),
                        frame.file,
                        *span,
                    )
                    .primary_label(msg.text)
                    .label(module.file, p.span, "parameter declared here")
                    .help(msg.help),
                );
            }
        }
        if failed {
            return Val::Error;
        }
        match &f.ret {
            Some(ret) => match self.type_expr(r.module, ret) {
                Val::Tensor(t) => Val::Tensor(unifier.apply(&t)),
                other => other,
            },
            None => Val::Unit,
        }
    }

    /// A group-based estimator (one whose body reduces over groups) fed the group ids of a
    /// rollout with one sample per prompt: every advantage is zero and nothing is learned.
    pub(super) fn group_of_one(
        &mut self,
        frame: &mut Frame,
        r: ItemRef,
        name: &ast::Ident,
        args: &[ast::Arg],
    ) {
        if !self.uses_groups(r, &mut BTreeSet::new()) {
            return;
        }
        for a in args {
            let ExprKind::Member { base, name: field } = &a.value.kind else {
                continue;
            };
            let ExprKind::Name(var) = &base.kind else {
                continue;
            };
            if field.name != "group" {
                continue;
            }
            let Some(Val::Rollout(_, info)) = frame.lookup(&var.name).map(|l| l.val.clone()) else {
                continue;
            };
            if info.group_size == Some(1) {
                self.diags.push(
                    Diagnostic::new(Code::GroupOfOne, format!("`{}` compares the samples of each prompt, but `{}` has one sample per prompt", name.name, var.name), frame.file, a.value.span)
                        .primary_label("groups of one")
                        .label(
                            info.group_origin.file,
                            info.group_origin.span,
                            if info.model.is_none() { "each row its own group" } else { "n = 1 here" },
                        )
                        .help("generate several samples per prompt (e.g. `n: 8`): with one, every advantage is 0 and the policy never changes"),
                );
            }
        }
    }

    /// Whether a function's body uses a group reduction, directly or through the functions it calls.
    pub(super) fn uses_groups(&self, r: ItemRef, seen: &mut BTreeSet<ItemRef>) -> bool {
        if !seen.insert(r) {
            return false;
        }
        let module = self.modules.get(r.module);
        let ItemKind::Fn(f) = &module.item(r.index).kind else {
            return false;
        };
        self.grouping_callee(r.module, &f.body.stmts, seen)
            .is_some()
    }

    /// The first function `stmts` (of module `module`) call that reduces over groups — a
    /// `group_*` builtin or a `fn` that calls one — by the name it is called.
    pub(super) fn grouping_callee<'s>(
        &self,
        module: usize,
        stmts: &'s [ast::Stmt],
        seen: &mut BTreeSet<ItemRef>,
    ) -> Option<&'s str> {
        let mut callees = Vec::new();
        for s in stmts {
            collect_callees(s, &mut callees);
        }
        let scope = self.modules.get(module);
        callees.into_iter().find(|c| {
            c.starts_with("group_")
                || matches!(scope.lookup(module, c), Some(Binding::Item { module, index }) if self.uses_groups(ItemRef { module, index }, seen))
        })
    }

    /// A configuration helper: evaluate its body with the arguments bound.
    pub(super) fn inline_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        r: ItemRef,
        f: &ast::FnDef,
        args: Vec<Option<(Val, Span)>>,
    ) -> Val {
        if self.inline_depth >= MAX_INLINE_DEPTH {
            return self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("`{}` calls itself too deeply", f.name.name),
                    frame.file,
                    e.span,
                )
                .primary_label("recursion"),
            );
        }
        let file = self.modules.get(r.module).file;
        let mut inner = Frame::new(r.module, file, false);
        for (p, a) in f.params.iter().zip(args) {
            let v = match a {
                Some((v, _)) => v,
                None => p
                    .default
                    .as_ref()
                    .map_or(Val::Error, |d| self.expr(&mut inner, d)),
            };
            inner.bind(&p.name.name, v, p.name.span, false);
        }
        self.inline_depth += 1;
        let v = self.block(&mut inner, &f.body);
        self.inline_depth -= 1;
        match v {
            Val::Arch(a) if a.preset.is_none() => Val::Arch(Rc::new(program::Arch {
                preset: Some(f.name.name.clone()),
                ..(*a).clone()
            })),
            other => other,
        }
    }

    pub(super) fn builtin(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        b: Builtin,
        name: &str,
        args: &[ast::Arg],
    ) -> Val {
        let what = format!("`{name}`");
        let Some(bound) = self.bind_args(frame, e.span, &what, b.params, args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let mut vals: Vec<Option<(Val, Span)>> = Vec::with_capacity(bound.len());
        let mut axis: Option<ast::Ident> = None;
        for (i, a) in bound.iter().enumerate() {
            match a {
                Some(a) if b.params[i].0 == "over" => {
                    match &a.value.kind {
                        ExprKind::Name(n) => axis = Some(n.clone()),
                        _ => {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::UnknownAxis,
                                    "`over:` takes the name of an axis, e.g. `over: T`",
                                    frame.file,
                                    a.value.span,
                                )
                                .primary_label("not an axis name"),
                            );
                            return Val::Error;
                        }
                    }
                    vals.push(None);
                }
                Some(a) => {
                    let v = self.expr(frame, &a.value);
                    vals.push(Some((v, a.value.span)));
                }
                None => vals.push(None),
            }
        }
        if vals.iter().flatten().any(|(v, _)| v.is_error()) {
            return Val::Error;
        }
        for (v, span) in vals.iter().flatten() {
            if self.record_as_reward(frame, v, *span) {
                return Val::Error;
            }
        }
        let ctx = builtins::Ctx {
            file: frame.file,
            call: e.span,
            name,
            axis: axis.as_ref(),
        };
        match builtins::apply(b, ctx, &vals) {
            Ok(v) => v,
            Err(d) => self.err(*d),
        }
    }

    pub(super) fn dataset_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        d: Rc<DatasetSpec>,
        name: &ast::Ident,
        args: &[ast::Arg],
    ) -> Val {
        self.program.record_dataset_call(frame.file, e.span, &d);
        match name.name.as_str() {
            "sample" => {
                let Some(bound) =
                    self.bind_args(frame, e.span, "`sample`", crate::builtins::SAMPLE, args)
                else {
                    return Val::Error;
                };
                let arg = bound[0].unwrap();
                let v = self.expr(frame, &arg.value);
                if v.is_error() {
                    return Val::Error;
                }
                if let Some(found) = crate::limits::oversized(&v) {
                    self.diags.push(crate::limits::too_large(
                        "sample(n)",
                        &found,
                        frame.file,
                        arg.value.span,
                    ));
                    return Val::Error;
                }
                let count = v.as_int();
                match count {
                    None => self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!("the number of prompts must be known before the job starts, found {}", v.describe()),
                            frame.file,
                            arg.value.span,
                        )
                        .primary_label("not a known integer"),
                    ),
                    Some(n) if n < 1 => self.diags.push(
                        Diagnostic::new(Code::InvalidSampling, "at least one prompt must be sampled", frame.file, arg.value.span)
                            .primary_label("not positive"),
                    ),
                    Some(_) => {}
                }
                Val::Prompts(Rc::new(PromptsVal {
                    dataset: d,
                    count,
                    count_origin: self.origin(frame, arg.value.span),
                }))
            }
            "score" => {
                let Some(bound) =
                    self.bind_args(frame, e.span, "`score`", &[("rollout", true)], args)
                else {
                    return Val::Error;
                };
                match self.expr(frame, &bound[0].unwrap().value) {
                    Val::Rollout(r, _) => rollout_rows(&r).map_or(Val::Error, |rows| {
                        Val::Tensor(TensorTy {
                            dtype: DType::F32,
                            dims: vec![rows],
                        })
                    }),
                    Val::Error => Val::Error,
                    other => self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!("`score` takes a rollout, found {}", other.describe()),
                            frame.file,
                            bound[0].unwrap().span,
                        )
                        .primary_label("not a rollout"),
                    ),
                }
            }
            "demonstrations" | "preferences" => self.supervised(frame, e, d, name, args),
            _ => self.no_field(frame, "a dataset", name, {
                let mut names = DATASET_METHODS.to_vec();
                names.push("vocab");
                names
            }),
        }
    }

    /// `ds.demonstrations(n)` and `ds.preferences(n, split: "test")`: rollouts whose response is
    /// the task's answer (teacher forcing) — `n` rows, or `n` pairs of a chosen (the answer) and a
    /// rejected (a corrupted answer) row in `2·n` rows sharing a `group`.
    fn supervised(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        d: Rc<DatasetSpec>,
        name: &ast::Ident,
        args: &[ast::Arg],
    ) -> Val {
        let pairs = name.name == "preferences";
        let what = format!("`{}`", name.name);
        let Some(bound) = self.bind_args(frame, e.span, &what, crate::builtins::SUPERVISED, args)
        else {
            return Val::Error;
        };
        let arg = bound[0].unwrap();
        let v = self.expr(frame, &arg.value);
        if v.is_error() {
            return Val::Error;
        }
        let count = v.as_int();
        let unit = if pairs { "pairs" } else { "demonstrations" };
        match count {
            None => {
                return self.err(
                    Diagnostic::new(
                        Code::NotConstant,
                        format!(
                            "the number of {unit} must be known before the job starts, found {}",
                            v.describe()
                        ),
                        frame.file,
                        arg.value.span,
                    )
                    .primary_label("not a known integer"),
                );
            }
            Some(n) if n < 1 => {
                return self.err(
                    Diagnostic::new(
                        Code::InvalidSampling,
                        format!("at least one of the {unit} must be drawn"),
                        frame.file,
                        arg.value.span,
                    )
                    .primary_label("not positive"),
                );
            }
            Some(_) => {}
        }
        if let Some(split) = bound[1] {
            let ok = matches!(&split.value.kind, ExprKind::Str(s) if s.value == "train" || s.value == "test");
            if !ok {
                self.expr(frame, &split.value);
                return self.err(
                    Diagnostic::new(
                        Code::UnknownSplit,
                        format!("{what} draws from the split `\"train\"` or `\"test\"`"),
                        frame.file,
                        split.value.span,
                    )
                    .primary_label("not a split")
                    .help(
                        "write `split: \"test\"` for held-out prompts (one in eight of the \
                         task's prompts, never drawn for training), or leave it out",
                    ),
                );
            }
        }
        let answer_len = match (d.kind.as_str(), d.digits) {
            ("reverse_digits" | "sort_digits", Some(digits)) => digits + 1,
            ("add_numbers", Some(digits)) => digits + 2,
            // A pair's answers are sums; a demonstration is the call (`a+b$`), the tool's reply
            // (`=sum`) and the copied answer (`sum$`), as the runtime's `Task::demonstration`.
            ("add_with_tool", Some(digits)) if pairs => digits + 2,
            ("add_with_tool", Some(digits)) => (2 * digits + 2) + 2 * (digits + 2),
            _ => {
                return self.err(
                    Diagnostic::new(
                        Code::NoAnswers,
                        format!("`{}` has no reference answers to build {unit} from", d.name),
                        frame.file,
                        name.span,
                    )
                    .primary_label(format!("{unit} need an answer for every prompt"))
                    .label(d.origin.file, d.origin.span, "prompts without answers")
                    .help(
                        "draw them from a synthetic task (`std.task.digits`), whose answers \
                         are known",
                    ),
                );
            }
        };
        let rows = count.map(|c| if pairs { 2 * c } else { c });
        let origin = self.origin(frame, arg.value.span);
        let info = RolloutInfo {
            rows,
            rows_origin: origin,
            prompt_len: d.prompt_len,
            response_len: Some(answer_len),
            response_origin: self.origin(frame, name.span),
            group_size: Some(if pairs { 2 } else { 1 }),
            group_origin: self.origin(frame, name.span),
            dataset: d,
            model: None,
        };
        let rows_dim = rows.map_or(Dim::Sym("B".into()), |r| Dim::Size(r as u64));
        Val::Rollout(
            Rc::new(supervised_record(
                rows_dim,
                Dim::Size(answer_len as u64),
                pairs,
            )),
            Rc::new(info),
        )
    }
}

/// The methods of a dataset, which run during training.
pub(super) const DATASET_METHODS: [&str; 4] = ["sample", "score", "demonstrations", "preferences"];

/// Names of the functions a statement calls.
pub(super) fn collect_callees<'a>(s: &'a ast::Stmt, out: &mut Vec<&'a str>) {
    pub(super) fn walk<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
        match &e.kind {
            ExprKind::Call { callee, args, .. } => {
                if let ExprKind::Name(n) = &callee.kind {
                    out.push(&n.name);
                }
                walk(callee, out);
                args.iter().for_each(|a| walk(&a.value, out));
            }
            ExprKind::Member { base, .. }
            | ExprKind::Paren(base)
            | ExprKind::Unary { operand: base, .. } => walk(base, out),
            ExprKind::Index { base, indices } => {
                walk(base, out);
                indices.iter().for_each(|i| walk(i, out));
            }
            ExprKind::Binary { lhs, rhs, .. } => {
                walk(lhs, out);
                walk(rhs, out);
            }
            ExprKind::Record(r) => r.fields.iter().for_each(|f| walk(&f.value, out)),
            ExprKind::List(items) => items.iter().for_each(|x| walk(x, out)),
            ExprKind::Scan(scan) => {
                scan.carries.iter().for_each(|c| walk(&c.init, out));
                scan.body.stmts.iter().for_each(|s| collect_callees(s, out));
            }
            ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
        }
    }
    match &s.kind {
        StmtKind::Let { value, .. }
        | StmtKind::Assign { value, .. }
        | StmtKind::Emit { value }
        | StmtKind::Expr(value) => walk(value, out),
        _ => {}
    }
}
