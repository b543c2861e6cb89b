//! Role operations (`generate`, `logprobs`, `values`, `score`, `update`) and the facts they give
//! the program model; the loss of an update and what it depends on.

use super::*;

impl Evaluator<'_> {
    // ----------------------------------------------------------------------------------------
    // Role operations

    pub(super) fn role_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        m: usize,
        name: &ast::Ident,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Val {
        let op = match Op::from_name(&name.name) {
            Some(op) => op,
            None => {
                let other = name.name.as_str();
                self.eval_args(frame, args);
                let mut d = Diagnostic::new(
                    Code::UnsupportedOperation,
                    format!("a model has no operation `{other}`"),
                    frame.file,
                    name.span,
                )
                .primary_label("unknown operation");
                d = match rlc_syntax::closest(
                    other,
                    ["generate", "logprobs", "values", "score", "update"],
                    2,
                ) {
                    Some(near) => crate::hints::did_you_mean(d, near),
                    None => {
                        d.help("the operations are generate, logprobs, values, score and update")
                    }
                };
                return self.err(d);
            }
        };
        let model = self.program.models[m].clone();
        if !model.kind.supports(op) {
            self.eval_args(frame, args);
            let can: Vec<&str> = [Op::Generate, Op::Logprobs, Op::Values, Op::Score]
                .into_iter()
                .filter(|o| model.kind.supports(*o))
                .map(Op::as_str)
                .collect();
            return self.err(
                Diagnostic::new(
                    Code::UnsupportedOperation,
                    format!(
                        "`{}` is a {}: it cannot `{}`",
                        model.name,
                        model.kind.as_str(),
                        op.as_str()
                    ),
                    frame.file,
                    name.span,
                )
                .primary_label(format!("not an operation of a {}", model.kind.as_str()))
                .label(
                    model.origin.file,
                    model.origin.span,
                    format!("declared a {} here", model.kind.as_str()),
                )
                .help(format!(
                    "a {} can {} and update",
                    model.kind.as_str(),
                    can.join(", ")
                )),
            );
        }
        if op != Op::Update {
            self.no_closure(frame, closure);
        }
        // The operation's name, not the whole call: labels on its arguments stay readable.
        let origin = self.origin(frame, name.span);
        match op {
            Op::Generate => self.generate(frame, e, m, args, origin),
            Op::Logprobs | Op::Values | Op::Score => {
                let Some(bound) = self.bind_args(
                    frame,
                    e.span,
                    &format!("`{}`", op.as_str()),
                    &[("rollout", true)],
                    args,
                ) else {
                    return Val::Error;
                };
                let a = bound[0].unwrap();
                let (rec, info) = match self.expr(frame, &a.value) {
                    Val::Rollout(r, i) => (r, i),
                    Val::Error => return Val::Error,
                    other => {
                        return self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!(
                                    "`{}` takes a rollout, found {}",
                                    op.as_str(),
                                    other.describe()
                                ),
                                frame.file,
                                a.value.span,
                            )
                            .primary_label("not a rollout"),
                        );
                    }
                };
                self.vocab_agrees(frame, m, &info, name.span);
                self.record_call(m, op, &info, origin, None, None);
                let rows = rollout_rows(&rec).unwrap_or(Dim::Sym("B".into()));
                let resp = rollout_resp(&rec).unwrap_or(Dim::Sym("T".into()));
                let dims = if op == Op::Score {
                    vec![rows]
                } else {
                    vec![rows, resp]
                };
                Val::Tensor(TensorTy {
                    dtype: DType::F32,
                    dims,
                })
            }
            Op::Update => self.update(frame, e, m, name, args, closure, origin),
        }
    }

    /// Policy and reference (and the task) must share a vocabulary: log-probs of one model's
    /// tokens under another tokenizer are meaningless.
    pub(super) fn vocab_agrees(&mut self, frame: &Frame, m: usize, info: &RolloutInfo, at: Span) {
        let Some(generator) = info.model else {
            self.task_vocab_fits(frame, m, &info.dataset, at, "reads a task it cannot spell");
            return;
        };
        let (Some(a), Some(b)) = (
            &self.program.models[m].arch,
            &self.program.models[generator].arch,
        ) else {
            return;
        };
        if a.vocab != b.vocab {
            let (me, generator) = (&self.program.models[m], &self.program.models[generator]);
            self.diags.push(
                Diagnostic::new(
                    Code::VocabMismatch,
                    format!(
                        "`{}` has a vocabulary of {} but the rollout was generated by `{}` with {}",
                        me.name, a.vocab, generator.name, b.vocab
                    ),
                    frame.file,
                    at,
                )
                .primary_label("reads tokens of another vocabulary")
                .label(
                    me.arch_origin.file,
                    me.arch_origin.span,
                    format!("vocab {}", a.vocab),
                )
                .label(
                    generator.arch_origin.file,
                    generator.arch_origin.span,
                    format!("vocab {}", b.vocab),
                )
                .help("models that score each other's tokens must share a tokenizer"),
            );
        }
    }

    /// A model that reads or writes a task's tokens needs a vocabulary that spells them.
    pub(super) fn task_vocab_fits(
        &mut self,
        frame: &Frame,
        m: usize,
        d: &DatasetSpec,
        at: Span,
        label: &str,
    ) {
        let (Some(tv), Some(arch)) = (d.vocab, &self.program.models[m].arch) else {
            return;
        };
        if arch.vocab < tv as u64 {
            let model = &self.program.models[m];
            self.diags.push(
                Diagnostic::new(
                    Code::VocabMismatch,
                    format!(
                        "{} `{}` uses {tv} tokens but `{}` has a vocabulary of {}",
                        if d.tokenizer.is_some() {
                            "dataset"
                        } else {
                            "task"
                        },
                        d.name,
                        model.name,
                        arch.vocab
                    ),
                    frame.file,
                    at,
                )
                .primary_label(label)
                .label(
                    model.arch_origin.file,
                    model.arch_origin.span,
                    format!("vocab {}", arch.vocab),
                )
                .help(match &model.init {
                    // The weights fix the vocabulary: a file's text must be in that model's
                    // tokens (a task's alphabet is fixed).
                    Some(Init::HuggingFace { path }) if d.kind == "jsonl" => format!(
                        "encode `{}` with the model's own tokenizer: `tokenizer: \"{path}\"`",
                        d.name
                    ),
                    _ => format!("set `vocab: {}.vocab` in the model's arch", d.name),
                }),
            );
        }
    }

    pub(super) fn record_call(
        &mut self,
        m: usize,
        op: Op,
        info: &RolloutInfo,
        origin: Origin,
        epochs: Option<Sourced<i64>>,
        minibatch: Option<Sourced<i64>>,
    ) {
        self.calls.push(RoleCall {
            model: m,
            op,
            batch: info.rows.map(|v| Sourced {
                value: v,
                origin: info.rows_origin,
            }),
            prompt_len: info.prompt_len.map(|v| Sourced {
                value: v,
                origin: info.dataset.origin,
            }),
            response_len: info.response_len.map(|v| Sourced {
                value: v,
                origin: info.response_origin,
            }),
            sampling: None,
            epochs,
            minibatch,
            reads_behaviour_logp: false,
            origin,
        });
    }

    pub(super) fn const_arg(
        &mut self,
        frame: &mut Frame,
        a: Option<&ast::Arg>,
        what: &str,
        default: Val,
    ) -> Option<(Val, Origin)> {
        match a {
            None => Some((default, Origin::default())),
            Some(a) => {
                let v = self.expr(frame, &a.value);
                if v.is_error() {
                    return None;
                }
                if v.as_float().is_none() {
                    self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!(
                                "`{what}` must be a number known before the job starts, found {}",
                                v.describe()
                            ),
                            frame.file,
                            a.value.span,
                        )
                        .primary_label("not a known number"),
                    );
                    return None;
                }
                // Counts past the checker's bound, and infinite numbers (`1e308 * 10`), are
                // reported rather than multiplied.
                let counts = [
                    "n",
                    "max_new",
                    "top_k",
                    "epochs",
                    "minibatch",
                    "max_turns",
                    "max_obs",
                    "staleness",
                    "pause_at",
                ];
                let diag = match v.as_float() {
                    Some(f) if !f.is_finite() => {
                        Some(crate::limits::not_finite(what, frame.file, a.value.span))
                    }
                    _ if counts.contains(&what) => crate::limits::oversized(&v).map(|found| {
                        crate::limits::too_large(what, &found, frame.file, a.value.span)
                    }),
                    _ => None,
                };
                if let Some(diag) = diag {
                    self.diags.push(diag);
                    return None;
                }
                Some((v, self.origin(frame, a.value.span)))
            }
        }
    }

    pub(super) fn generate(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        m: usize,
        args: &[ast::Arg],
        origin: Origin,
    ) -> Val {
        let Some(bound) =
            self.bind_args(frame, e.span, "`generate`", crate::builtins::GENERATE, args)
        else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let prompts = match self.expr(frame, &bound[0].unwrap().value) {
            Val::Prompts(p) => p,
            Val::Error => return Val::Error,
            other => {
                return self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "`generate` takes prompts (`dataset.sample(n)`), found {}",
                            other.describe()
                        ),
                        frame.file,
                        bound[0].unwrap().span,
                    )
                    .primary_label("not prompts"),
                );
            }
        };
        let n = self.const_arg(frame, bound[1], "n", Val::Int(Some(1)));
        let max_new = self.const_arg(frame, bound[2], "max_new", Val::Int(None));
        let temperature = self.const_arg(frame, bound[3], "temperature", Val::Float(Some(1.0)));
        let top_p = self.const_arg(frame, bound[4], "top_p", Val::Float(Some(1.0)));
        let top_k = bound[5].and_then(|a| self.const_arg(frame, Some(a), "top_k", Val::Int(None)));
        let staleness =
            bound[9].and_then(|a| self.const_arg(frame, Some(a), "staleness", Val::Int(None)));
        let pause_at =
            bound[10].and_then(|a| self.const_arg(frame, Some(a), "pause_at", Val::Int(None)));
        let env = self.generate_env(
            frame,
            e.span,
            &prompts.dataset,
            bound[0].unwrap().span,
            [bound[6], bound[7], bound[8]],
        );
        let (Some(n), Some(max_new), Some(temperature), Some(top_p), Ok(env)) =
            (n, max_new, temperature, top_p, env)
        else {
            return Val::Error;
        };
        let n_val = n.0.as_int();
        let rows = match prompts.count.zip(n_val) {
            Some((c, k)) => match c.checked_mul(k).filter(|&r| r <= crate::limits::MAX_SIZE) {
                Some(r) => Some(r),
                None => {
                    let at = if n.1 == Origin::default() {
                        prompts.count_origin
                    } else {
                        n.1
                    };
                    self.diags.push(crate::limits::too_large(
                        "prompts × n",
                        &format!("{c} × {k}"),
                        at.file,
                        at.span,
                    ));
                    None
                }
            },
            None => None,
        };
        let max_new_val = max_new.0.as_int();
        // A multi-turn rollout's response holds every turn and the observations between them.
        let response_len = match &env {
            None => max_new_val,
            Some(env) => match max_new_val.map(|t| env.response_len(t)) {
                Some(Some(t)) if t <= crate::limits::MAX_SIZE => Some(t),
                Some(_) => {
                    self.diags.push(crate::limits::too_large(
                        "max_turns × max_new + (max_turns − 1) × max_obs",
                        &format!(
                            "{} × {} + {} × {}",
                            env.max_turns.value,
                            max_new_val.unwrap_or(0),
                            env.max_turns.value - 1,
                            env.max_obs.value
                        ),
                        frame.file,
                        e.span,
                    ));
                    return Val::Error;
                }
                None => None,
            },
        };
        let default_origin = |o: Origin| if o == Origin::default() { origin } else { o };
        let info = RolloutInfo {
            rows,
            rows_origin: if n.1 == Origin::default() {
                prompts.count_origin
            } else {
                n.1
            },
            prompt_len: prompts.dataset.prompt_len,
            response_len,
            response_origin: if env.is_some() { origin } else { max_new.1 },
            group_size: n_val,
            group_origin: default_origin(n.1),
            dataset: prompts.dataset.clone(),
            model: Some(m),
        };
        self.task_vocab_fits(
            frame,
            m,
            &prompts.dataset,
            e.span,
            "generates for a task it cannot spell",
        );
        self.record_call(m, Op::Generate, &info, origin, None, None);
        let sourced_i = |(v, o): &(Val, Origin)| Sourced {
            value: v.as_int().unwrap_or(0),
            origin: default_origin(*o),
        };
        let sourced_f = |(v, o): &(Val, Origin)| Sourced {
            value: v.as_float().unwrap_or(0.0),
            origin: default_origin(*o),
        };
        self.calls.last_mut().unwrap().sampling = Some(Sampling {
            n: sourced_i(&n),
            max_new: sourced_i(&max_new),
            temperature: sourced_f(&temperature),
            top_p: sourced_f(&top_p),
            top_k: top_k.as_ref().map(sourced_i),
            env: env.clone(),
            staleness: staleness.as_ref().map(sourced_i),
            pause_at: pause_at.as_ref().map(sourced_i),
        });
        let rows_dim = rows.map_or(Dim::Sym("B".into()), |r| Dim::Size(r.max(0) as u64));
        let resp_dim = response_len.map_or(Dim::Sym("T".into()), |t| Dim::Size(t.max(0) as u64));
        let record = if env.is_some() {
            env_rollout_record(rows_dim, resp_dim)
        } else {
            sampled_rollout_record(rows_dim, resp_dim)
        };
        Val::Rollout(Rc::new(record), Rc::new(info))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn update(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        m: usize,
        name: &ast::Ident,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
        origin: Origin,
    ) -> Val {
        let model = self.program.models[m].clone();
        if model.frozen {
            self.eval_args(frame, args);
            return self.err(
                Diagnostic::new(
                    Code::UpdateFrozen,
                    format!("`{}` is frozen: it cannot be updated", model.name),
                    frame.file,
                    name.span,
                )
                .primary_label("update of a frozen model")
                .label(
                    model.origin.file,
                    model.origin.span,
                    "declared frozen (or without an optimiser) here",
                )
                .help("give the model an optimiser (`optim = adamw(lr: …)`) to train it"),
            );
        }
        let Some(bound) = self.bind_args(frame, e.span, "`update`", crate::builtins::UPDATE, args)
        else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let (rec, info) = match self.expr(frame, &bound[0].unwrap().value) {
            Val::Rollout(r, i) => (r, i),
            Val::Error => return Val::Error,
            other => {
                return self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("`update` takes a rollout, found {}", other.describe()),
                        frame.file,
                        bound[0].unwrap().span,
                    )
                    .primary_label("not a rollout"),
                );
            }
        };
        let epochs = self.const_arg(frame, bound[1], "epochs", Val::Int(Some(1)));
        let minibatch = self.const_arg(frame, bound[2], "minibatch", Val::Int(info.rows));
        let sourced = |x: Option<(Val, Origin)>| {
            x.and_then(|(v, o)| {
                v.as_int().map(|value| Sourced {
                    value,
                    origin: if o == Origin::default() { origin } else { o },
                })
            })
        };
        self.record_call(
            m,
            Op::Update,
            &info,
            origin,
            sourced(epochs),
            sourced(minibatch.clone()),
        );
        if let (Some(c), Some(call)) = (closure, self.calls.last_mut()) {
            let mut reads = false;
            c.body.visit_exprs(&mut |x| {
                reads |= matches!(&x.kind, ExprKind::Member { name, .. } if name.name == "logp");
            });
            call.reads_behaviour_logp = reads;
        }
        let Some(closure) = closure else {
            return self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "`update` needs a block that computes the loss",
                    frame.file,
                    e.span,
                )
                .primary_label("no loss block")
                .help(format!(
                    "write `{}.update(rollout) {{ logp -> loss }}`",
                    model.name
                )),
            );
        };
        let rows = rollout_rows(&rec).unwrap_or(Dim::Sym("B".into()));
        let resp = rollout_resp(&rec).unwrap_or(Dim::Sym("T".into()));
        let fresh = match model.kind {
            RoleKind::RewardModel => TensorTy {
                dtype: DType::F32,
                dims: vec![rows],
            },
            _ => TensorTy {
                dtype: DType::F32,
                dims: vec![rows, resp],
            },
        };
        if closure.params.len() != 1 {
            let what = match model.kind {
                RoleKind::CausalLM => "the fresh log-probs",
                RoleKind::ValueModel => "the fresh values",
                RoleKind::RewardModel => "the fresh scores",
            };
            return self.err(
                Diagnostic::new(
                    Code::WrongArity,
                    format!(
                        "the block of `update` receives one value ({what}), found {}",
                        closure.params.len()
                    ),
                    frame.file,
                    closure.span,
                )
                .primary_label("wrong number of block parameters"),
            );
        }
        frame.push_scope();
        frame.bind(
            &closure.params[0].name,
            Val::Tensor(fresh),
            closure.params[0].span,
            false,
        );
        let loss = self.block(frame, &closure.body);
        frame.pop_scope();
        if let (Some((mb, mb_origin)), Some(rows)) = (&minibatch, info.rows)
            && let Some(size) = mb.as_int()
            && size > 0
            && size < rows
            && let Some(callee) =
                self.grouping_callee(frame.module, &closure.body.stmts, &mut BTreeSet::new())
        {
            let at = if *mb_origin == Origin::default() {
                origin
            } else {
                *mb_origin
            };
            self.diags.push(
                Diagnostic::new(
                    Code::SplitGroups,
                    format!(
                        "the loss of `{}.update` reduces over groups of rows (through `{callee}`), but `minibatch: {size}` splits every group",
                        model.name
                    ),
                    frame.file,
                    closure.span,
                )
                .primary_label("reduces over groups")
                .label(at.file, at.span, format!("{} minibatches of {size} rows", rows / size))
                .help("minibatch `k` takes the rows `g` with `g mod M = k`, so the rows of a group (a preference pair, a prompt's samples) land in different minibatches: drop `minibatch` to train on whole groups, or compute the group statistics before `update` and pass them in"),
            );
        }
        let tail_span = closure.body.tail().map_or(closure.span, |t| t.span);
        match loss.as_tensor() {
            Some(t) if t.is_scalar() && t.dtype.is_float() => {}
            _ if loss.is_error() => {}
            Some(t) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::LossNotScalar,
                        format!("the loss must be a scalar `f32`, found `{t}`"),
                        frame.file,
                        tail_span,
                    )
                    .primary_label(format!("`{t}`"))
                    .help("reduce it, e.g. `token_mean(loss, rollout.mask)` or `mean(loss)`"),
                );
            }
            None => {
                self.diags.push(
                    Diagnostic::new(
                        Code::LossNotScalar,
                        format!("the loss must be a scalar `f32`, found {}", loss.describe()),
                        frame.file,
                        tail_span,
                    )
                    .primary_label("not a loss"),
                );
            }
        }
        if !depends_on(&closure.body, &closure.params[0].name) {
            self.diags.push(
                Diagnostic::new(
                    Code::LossIgnoresModel,
                    format!(
                        "the loss does not use `{}`: the update would train nothing",
                        closure.params[0].name
                    ),
                    frame.file,
                    tail_span,
                )
                .primary_label("does not depend on the model's output")
                .label(
                    frame.file,
                    closure.params[0].span,
                    "the model's fresh output",
                )
                .help(format!(
                    "compute the loss from `{}`",
                    closure.params[0].name
                )),
            );
        }
        Val::Unit
    }
}

/// Whether the block's value refers to `name`, directly or through `let` bindings.
pub(super) fn depends_on(block: &ast::Block, name: &str) -> bool {
    let mut tainted: BTreeSet<String> = BTreeSet::from([name.to_string()]);
    for s in &block.stmts {
        match &s.kind {
            StmtKind::Let { name, value, .. } if mentions(value, &tainted) => {
                tainted.insert(name.name.clone());
            }
            StmtKind::Expr(e) => return mentions(e, &tainted),
            _ => {}
        }
    }
    false
}

pub(super) fn mentions(e: &Expr, names: &BTreeSet<String>) -> bool {
    match &e.kind {
        ExprKind::Name(n) => names.contains(&n.name),
        ExprKind::Member { base, .. } => mentions(base, names),
        // Through `stop_grad` no gradient flows: a loss that sees the model's output only there
        // trains nothing.
        ExprKind::Call { callee, .. } if matches!(&callee.kind, ExprKind::Name(n) if n.name == "stop_grad") => {
            false
        }
        ExprKind::Call { callee, args, .. } => {
            mentions(callee, names) || args.iter().any(|a| mentions(&a.value, names))
        }
        ExprKind::Index { base, indices } => {
            mentions(base, names) || indices.iter().any(|i| mentions(i, names))
        }
        ExprKind::Unary { operand, .. } => mentions(operand, names),
        ExprKind::Binary { lhs, rhs, .. } => mentions(lhs, names) || mentions(rhs, names),
        ExprKind::Paren(inner) => mentions(inner, names),
        ExprKind::Record(r) => r.fields.iter().any(|f| mentions(&f.value, names)),
        ExprKind::List(items) => items.iter().any(|x| mentions(x, names)),
        ExprKind::Scan(s) => {
            s.carries.iter().any(|c| mentions(&c.init, names))
                || s.body.stmts.iter().any(|st| stmt_mentions(st, names))
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => false,
    }
}

pub(super) fn stmt_mentions(s: &ast::Stmt, names: &BTreeSet<String>) -> bool {
    match &s.kind {
        StmtKind::Let { value, .. }
        | StmtKind::Assign { value, .. }
        | StmtKind::Emit { value }
        | StmtKind::Expr(value) => mentions(value, names),
        _ => false,
    }
}

pub(super) fn rollout_rows(r: &RecordVal) -> Option<Dim> {
    r.fields
        .iter()
        .find(|(n, _)| n == "group")
        .and_then(|(_, v)| v.as_tensor())
        .and_then(|t| t.dims.first().cloned())
}

pub(super) fn rollout_resp(r: &RecordVal) -> Option<Dim> {
    r.fields
        .iter()
        .find(|(n, _)| n == "mask")
        .and_then(|(_, v)| v.as_tensor())
        .and_then(|t| t.dims.get(1).cloned())
}
