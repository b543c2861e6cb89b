//! The dataflow pass: the root module's `pipeline` block, statement by statement, into the
//! plan's values, ops and edges: role calls on their instances, kernels and `log` on the driver,
//! `sample` on its first consumer, `every` blocks, carried values, `checkpoint`s.

use super::*;

impl<'a> Lowerer<'a> {
    pub(super) fn block(&mut self, b: &ast::Block) {
        for s in &b.stmts {
            self.stmt(s);
        }
    }

    pub(super) fn stmt(&mut self, s: &ast::Stmt) {
        match &s.kind {
            StmtKind::Loop { carries, body, .. } => {
                for c in carries {
                    self.carry(c);
                }
                self.block(body);
            }
            StmtKind::Assign { name, value } => self.assign(name, value),
            StmtKind::Let { name, value, .. } => {
                // (`let m = rollout.mask` binds the whole record: a field alias is not a value.)
                if let Lowered::Value { id, field } = self.expr(value) {
                    if field.is_none() && self.values[id as usize].name.contains('#') {
                        self.values[id as usize].name = name.name.clone();
                        // A verifier's metrics: `scores.format`.
                        for (metric, v) in
                            self.verify_outputs.get(&id).into_iter().flatten().skip(1)
                        {
                            self.values[*v as usize].name = format!("{}.{metric}", name.name);
                        }
                    }
                    self.env.insert(name.name.clone(), id);
                }
            }
            StmtKind::Expr(e) => {
                self.expr(e);
            }
            StmtKind::Log { record } => {
                let mut fields = Vec::new();
                let mut inputs = Vec::new();
                for f in &record.fields {
                    if let Lowered::Value { id, field } = self.expr(&f.value) {
                        if self.values[id as usize].name.contains('#') {
                            self.values[id as usize].name = format!("log.{}", f.name.name);
                        }
                        fields.push(LogField {
                            name: f.name.name.clone(),
                            value: id,
                        });
                        inputs.push(Input {
                            name: f.name.name.clone(),
                            value: id,
                            field,
                        });
                    }
                }
                let driver = self.driver;
                let first = self.instances[driver].ranks.nth(0).unwrap_or(0);
                let label = "log".to_string();
                self.push_op(
                    label,
                    OpKind::Log { fields },
                    Some(driver),
                    RankSet::range(first, first + 1),
                    inputs,
                );
            }
            StmtKind::Every { interval, body } => {
                let n = self.const_int(interval);
                let saved = self.every;
                self.every = n.or(saved);
                self.block(body);
                self.every = saved;
            }
            StmtKind::Checkpoint { roles } => {
                for r in roles {
                    let Some(model) = self.program.model_index(&r.name) else {
                        continue;
                    };
                    let Some(inst) = self
                        .instance_for(model, Phase::Train)
                        .or_else(|| self.any_instance(model))
                    else {
                        self.errors.push(lower_err(format!(
                            "`checkpoint {}`: the role runs nowhere",
                            r.name
                        )));
                        continue;
                    };
                    let ranks = self.instances[inst].ranks.clone();
                    let kind = OpKind::Checkpoint {
                        role: r.name.clone(),
                        instance: self.instances[inst].id.clone(),
                    };
                    // The state is saved where it is (device or host memory): nothing to onload.
                    self.push_op(
                        format!("checkpoint {}", r.name),
                        kind,
                        Some(inst),
                        ranks,
                        Vec::new(),
                    );
                }
            }
            StmtKind::Emit { .. } => {}
        }
    }

    /// `beta = 0.1` in a loop's `with (…)`: a value of the step without a producer, held where
    /// kernels run (the checker made it a scalar `f32` or `i64` with a constant initial value).
    pub(super) fn carry(&mut self, c: &ast::Carry) {
        let (dtype, init) = match self.type_at(c.init.span) {
            Some(Type::Float(Some(x))) => ("f32".to_string(), x.to_string()),
            Some(Type::Int(Some(n))) => ("i64".to_string(), n.to_string()),
            _ => {
                self.errors.push(lower_err(format!(
                    "the initial value of `{}` is not a known `f32` or `i64` constant",
                    c.name.name
                )));
                return;
            }
        };
        let ty = TensorType {
            dtype,
            shape: Vec::new(),
        };
        let id = self.values.len() as u32;
        let at = self.driver;
        self.values.push(Value {
            id,
            name: c.name.name.clone(),
            producer: None,
            at: self.instances[at].id.clone(),
            ty: ValueType::Tensor(ty.clone()),
            split: Split::Replicated,
        });
        self.env.insert(c.name.name.clone(), id);
        self.carried.push(Carried {
            name: c.name.name.clone(),
            ty,
            init,
            value: id,
            next: None,
            next_const: None,
            every: None,
            ranks: self.instances[at].ranks.clone(),
        });
    }

    /// `beta = …` in the loop body: what the next step starts with.
    pub(super) fn assign(&mut self, name: &ast::Ident, value: &ast::Expr) {
        let lowered = self.expr(value);
        let every = self.every;
        let Some(c) = self.carried.iter_mut().find(|c| c.name == name.name) else {
            return;
        };
        c.every = every;
        match lowered {
            Lowered::Value { id, field: None } => c.next = Some(id),
            Lowered::Const(text) => c.next_const = Some(text),
            _ => self.errors.push(lower_err(format!(
                "the new value of `{}` is not a value of the step",
                name.name
            ))),
        }
    }

    /// A carried value is read where it is held, and the op that computes its next value runs
    /// on every rank that holds it (carried values are not moved between ranks).
    pub(super) fn carried_ranks(&mut self) {
        for c in &self.carried {
            let covers = |ranks: &RankSet| c.ranks.iter().all(|r| ranks.contains(r));
            for op in &self.ops {
                if op.inputs.iter().any(|i| i.value == c.value)
                    && op.ranks.iter().any(|r| !c.ranks.contains(r))
                {
                    self.errors.push(lower_err(format!(
                        "`{}` runs on ranks {} but reads `{}`, which the loop carries on ranks {} \
                         (where kernels run); carried values are not moved between ranks",
                        op.label, op.ranks, c.name, c.ranks
                    )));
                }
            }
            if let Some(next) = c.next
                && let Some(p) = self.values[next as usize].producer
                && !covers(&self.ops[p as usize].ranks)
            {
                let op = &self.ops[p as usize];
                self.errors.push(lower_err(format!(
                    "the new value of `{}` is computed by `{}` on ranks {}, but the loop carries \
                     it on ranks {}",
                    c.name, op.label, op.ranks, c.ranks
                )));
            }
        }
    }

    /// The name of the dataset a `ds.method(…)` call `e` reads: its item's name, which the
    /// plan's `datasets` are listed under (the pipeline may use an imported alias, `written`).
    pub(super) fn dataset_name(&self, e: &ast::Expr, written: String) -> String {
        self.program
            .dataset_at(self.root_file, e.span)
            .map_or(written, |d| d.name.clone())
    }

    /// The checker's type of the root module's expression at `span`.
    pub(super) fn type_at(&self, span: ast::Span) -> Option<&'a Type> {
        self.types.get(&(self.root_file, span.start, span.end))
    }

    pub(super) fn const_int(&self, e: &ast::Expr) -> Option<u64> {
        self.type_at(e.span)?.const_int().map(|v| v.max(0) as u64)
    }

    /// A constant the checker knows (`f32 = 0.5`, `i64 = 8`), as text.
    pub(super) fn const_text(&self, e: &ast::Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Number(n) => return Some(n.text.clone()),
            ExprKind::Bool(b) => return Some(b.to_string()),
            ExprKind::Str(s) => return Some(format!("{:?}", s.value)),
            _ => {}
        }
        self.type_at(e.span)?.const_text()
    }

    pub(super) fn expr(&mut self, e: &ast::Expr) -> Lowered {
        if let Some(c) = self.const_text(e) {
            return Lowered::Const(c);
        }
        match &e.kind {
            ExprKind::Paren(inner) => self.expr(inner),
            ExprKind::Name(id) => {
                if let Some(&v) = self.env.get(&id.name) {
                    Lowered::Value { id: v, field: None }
                } else if let Some(m) = self.program.model_index(&id.name) {
                    Lowered::Model(m)
                } else {
                    Lowered::Name(id.name.clone())
                }
            }
            ExprKind::Member { base, name } => match self.expr(base) {
                Lowered::Value { id, field: None } => {
                    let (id, field) = self.output_of(id, Some(name.name.clone()));
                    Lowered::Value { id, field }
                }
                _ => Lowered::Unknown,
            },
            ExprKind::Call {
                callee,
                args,
                closure,
            } => self.call(e, callee, args, closure.as_ref()),
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let name = binary_name(op.as_str());
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                self.kernel(
                    e,
                    name.to_string(),
                    None,
                    vec![("lhs".into(), l), ("rhs".into(), r)],
                    (false, false),
                )
            }
            ExprKind::Unary { op, operand, .. } => {
                let name = if op.as_str() == "!" { "not" } else { "neg" };
                let x = self.expr(operand);
                self.kernel(
                    e,
                    name.to_string(),
                    None,
                    vec![("x".into(), x)],
                    (false, false),
                )
            }
            ExprKind::Index { base, indices } => {
                let mut args = vec![("x".to_string(), self.expr(base))];
                for (i, ix) in indices.iter().enumerate() {
                    args.push((format!("index{i}"), self.expr(ix)));
                }
                self.kernel(e, "index".into(), None, args, (false, false))
            }
            _ => Lowered::Unknown,
        }
    }

    pub(super) fn call(
        &mut self,
        e: &ast::Expr,
        callee: &ast::Expr,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Lowered {
        if let Some((verifier, dataset)) = self.program.verifier_at(self.root_file, e.span) {
            return self.verify(e, verifier, dataset, args);
        }
        match &callee.kind {
            ExprKind::Member { base, name } => {
                let base_l = self.expr(base);
                match base_l {
                    Lowered::Model(m) => self.role_call(e, m, &name.name, args, closure),
                    Lowered::Name(written) if name.name == "sample" => {
                        let dataset = self.dataset_name(e, written);
                        let count = args.first().and_then(|a| self.const_int(&a.value));
                        let ty = self.type_at(e.span).map_or_else(
                            || ValueType::Opaque {
                                opaque: "prompts".into(),
                            },
                            value_type,
                        );
                        let kind = OpKind::Sample {
                            dataset: dataset.clone(),
                            count,
                            form: None,
                            split: None,
                        };
                        let id = self.push_op(
                            format!("sample {dataset}"),
                            kind,
                            None,
                            RankSet::default(),
                            Vec::new(),
                        );
                        self.floating.insert(id);
                        let v = self.new_value(format!("{dataset}.sample#"), id, ty, count);
                        self.ops[id as usize].outputs.push(v);
                        Lowered::Value { id: v, field: None }
                    }
                    Lowered::Name(dataset)
                        if name.name == "demonstrations" || name.name == "preferences" =>
                    {
                        self.supervised(e, &dataset, &name.name, args)
                    }
                    Lowered::Name(dataset) if name.name == "score" => {
                        let lowered: Vec<(String, Lowered)> = args
                            .iter()
                            .enumerate()
                            .map(|(i, a)| (arg_name(a, i, &["rollout"]), self.expr(&a.value)))
                            .collect();
                        self.kernel(e, format!("{dataset}.score"), None, lowered, (false, false))
                    }
                    _ => Lowered::Unknown,
                }
            }
            ExprKind::Name(f) => {
                let (module, params, facts) = match self.modules.get(0).lookup(0, &f.name) {
                    Some(Binding::Item { module, index }) => {
                        match &self.modules.get(module).item(index).kind {
                            ItemKind::Fn(def) => {
                                let params: Vec<String> =
                                    def.params.iter().map(|p| p.name.name.clone()).collect();
                                let facts = self.facts(module, &f.name);
                                let m = self.modules.get(module);
                                (
                                    if module == 0 {
                                        None
                                    } else {
                                        Some(m.name.clone())
                                    },
                                    params,
                                    facts,
                                )
                            }
                            _ => (None, Vec::new(), (false, false)),
                        }
                    }
                    _ => (None, Vec::new(), builtin_facts(&f.name, args)),
                };
                let refs: Vec<&str> = params.iter().map(String::as_str).collect();
                let lowered: Vec<(String, Lowered)> = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (arg_name(a, i, &refs), self.expr(&a.value)))
                    .collect();
                self.kernel(e, f.name.clone(), module, lowered, facts)
            }
            _ => Lowered::Unknown,
        }
    }

    /// `answer(rollout)`: a `verify` op on the driver's ranks (each data rank scores its own
    /// rows) whose outputs are the reward and then each metric, all `f32[B]`. With metrics the
    /// call's value is the reward, and `output_of` maps `r.reward`, `r.format` to the outputs.
    pub(super) fn verify(
        &mut self,
        e: &ast::Expr,
        verifier: &rlc_check::value::VerifierSpec,
        dataset: &rlc_check::value::DatasetSpec,
        args: &[ast::Arg],
    ) -> Lowered {
        let Some(arg) = args.first() else {
            return Lowered::Unknown;
        };
        let Lowered::Value {
            id: rollout,
            field: None,
        } = self.expr(&arg.value)
        else {
            self.errors.push(lower_err(format!(
                "the rollout `{}` scores is not a value of the step",
                verifier.name
            )));
            return Lowered::Unknown;
        };
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            value_type,
        );
        let reward_ty = if verifier.metrics.is_empty() {
            ty
        } else {
            field_type(&ty, Some("reward"))
        };
        let rows = rows_of(&reward_ty);
        let kind = OpKind::Verify {
            verifier: verifier.name.clone(),
            dataset: dataset.name.clone(),
            fields: verifier.fields.iter().map(|(f, _)| f.clone()).collect(),
        };
        let driver = self.driver;
        let ranks = self.instances[driver].ranks.clone();
        let input = Input {
            name: "rollout".into(),
            value: rollout,
            field: None,
        };
        let id = self.push_op(
            format!("verify {}", verifier.name),
            kind,
            Some(driver),
            ranks,
            vec![input],
        );
        let reward = self.new_value(
            format!("{}.reward#", verifier.name),
            id,
            reward_ty.clone(),
            rows,
        );
        self.ops[id as usize].outputs.push(reward);
        if !verifier.metrics.is_empty() {
            let mut outputs = vec![("reward".to_string(), reward)];
            for m in &verifier.metrics {
                let v = self.new_value(
                    format!("{}.{m}#", verifier.name),
                    id,
                    reward_ty.clone(),
                    rows,
                );
                self.ops[id as usize].outputs.push(v);
                outputs.push((m.clone(), v));
            }
            self.verify_outputs.insert(reward, outputs);
        }
        Lowered::Value {
            id: reward,
            field: None,
        }
    }

    /// `value.field`: the output of a `verify` op the field names when `value` stands for a
    /// verifier's result, else the field of the value.
    pub(super) fn output_of(&self, value: u32, field: Option<String>) -> (u32, Option<String>) {
        match (self.verify_outputs.get(&value), &field) {
            (Some(outputs), Some(f)) => outputs
                .iter()
                .find(|(name, _)| name == f)
                .map_or((value, field.clone()), |&(_, v)| (v, None)),
            _ => (value, field),
        }
    }

    /// `ds.demonstrations(n)` / `ds.preferences(n, split: "test")`: a floating sample op whose
    /// value is a rollout of `n` rows (demonstrations) or `2·n` rows (pairs).
    pub(super) fn supervised(
        &mut self,
        e: &ast::Expr,
        dataset: &str,
        form: &str,
        args: &[ast::Arg],
    ) -> Lowered {
        let count = args
            .iter()
            .find(|a| a.name.as_ref().is_none_or(|n| n.name == "n"))
            .and_then(|a| self.const_int(&a.value));
        let split = args
            .iter()
            .find(|a| a.name.as_ref().is_some_and(|n| n.name == "split"))
            .and_then(|a| match &a.value.kind {
                ExprKind::Str(s) if s.value == "test" => Some(DataSplit::Test),
                ExprKind::Str(s) if s.value == "train" => Some(DataSplit::Train),
                _ => None,
            });
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "rollout".into(),
            },
            value_type,
        );
        let rows = count.map(|c| if form == "preferences" { 2 * c } else { c });
        let dataset = self.dataset_name(e, dataset.to_string());
        let kind = OpKind::Sample {
            dataset: dataset.clone(),
            count,
            form: Some(if form == "preferences" {
                SampleForm::Preferences
            } else {
                SampleForm::Demonstrations
            }),
            split,
        };
        let id = self.push_op(
            format!("{form} {dataset}"),
            kind,
            None,
            RankSet::default(),
            Vec::new(),
        );
        self.floating.insert(id);
        let v = self.new_value(format!("{dataset}.{form}#"), id, ty, rows);
        self.ops[id as usize].outputs.push(v);
        Lowered::Value { id: v, field: None }
    }

    /// Whether function `name` of `module` reduces over the batch (directly or through what it
    /// calls) and whether it works on groups of rows.
    pub(super) fn facts(&mut self, module: usize, name: &str) -> (bool, bool) {
        if let Some(&f) = self.fn_facts.get(&(module, name.to_string())) {
            return f;
        }
        self.fn_facts
            .insert((module, name.to_string()), (false, false));
        let m = self.modules.get(module);
        let Some(Binding::Item { module: dm, index }) = m.lookup(module, name) else {
            return (false, false);
        };
        let ItemKind::Fn(def) = &self.modules.get(dm).item(index).kind else {
            return (false, false);
        };
        let mut calls = Vec::new();
        collect_calls_block(&def.body, &mut calls);
        let mut out = (false, false);
        for (callee, args) in calls {
            let f = match self.modules.get(dm).lookup(dm, &callee) {
                Some(Binding::Item {
                    module: cm,
                    index: ci,
                }) if matches!(self.modules.get(cm).item(ci).kind, ItemKind::Fn(_)) => {
                    self.facts(cm, &callee)
                }
                _ => builtin_facts(&callee, &args),
            };
            out = (out.0 || f.0, out.1 || f.1);
        }
        self.fn_facts.insert((dm, name.to_string()), out);
        self.fn_facts.insert((module, name.to_string()), out);
        out
    }

    pub(super) fn kernel(
        &mut self,
        e: &ast::Expr,
        function: String,
        module: Option<String>,
        args: Vec<(String, Lowered)>,
        facts: (bool, bool),
    ) -> Lowered {
        let mut attrs = BTreeMap::new();
        let mut inputs = Vec::new();
        for (name, l) in args {
            match l {
                Lowered::Const(c) => {
                    attrs.insert(name, c);
                }
                Lowered::Value { id, field } => inputs.push(Input {
                    name,
                    value: id,
                    field,
                }),
                Lowered::Name(n) => {
                    attrs.insert(name, n);
                }
                Lowered::Model(_) | Lowered::Unknown => {}
            }
        }
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            value_type,
        );
        let (batch_reduction, grouped) = facts;
        let batch_reduction = batch_reduction || (is_scalar(&ty) && !inputs.is_empty());
        let kernel = self.call_kernel(e.span, &function, module.as_deref(), &inputs, &attrs);
        let kind = OpKind::Kernel {
            function: function.clone(),
            module,
            attrs,
            batch_reduction,
            grouped,
            kernel,
        };
        let driver = self.driver;
        let ranks = self.instances[driver].ranks.clone();
        let id = self.push_op(
            format!("kernel {function}"),
            kind,
            Some(driver),
            ranks,
            inputs,
        );
        let rows = rows_of(&ty);
        let v = self.new_value(format!("{function}#"), id, ty, rows);
        self.ops[id as usize].outputs.push(v);
        Lowered::Value { id: v, field: None }
    }

    pub(super) fn instance_for(&self, model: usize, phase: Phase) -> Option<usize> {
        let index = self.program.placement_index_for(model, phase)?;
        self.by_placement.get(&index).copied()
    }

    pub(super) fn any_instance(&self, model: usize) -> Option<usize> {
        let name = &self.program.models[model].name;
        self.instances.iter().position(|i| &i.role == name)
    }

    pub(super) fn role_call(
        &mut self,
        e: &ast::Expr,
        model: usize,
        method: &str,
        args: &[ast::Arg],
        closure: Option<&ast::Closure>,
    ) -> Lowered {
        let op = match method {
            "generate" => prog::Op::Generate,
            "logprobs" => prog::Op::Logprobs,
            "values" => prog::Op::Values,
            "score" => prog::Op::Score,
            "update" => prog::Op::Update,
            _ => return Lowered::Unknown,
        };
        let k = self.seen_calls.entry((model, op)).or_insert(0);
        let nth = *k;
        *k += 1;
        let facts = self.program.pipeline.as_ref().expect("a pipeline");
        let Some(call) = facts
            .calls
            .iter()
            .filter(|c| c.model == model && c.op == op)
            .nth(nth)
        else {
            return Lowered::Unknown;
        };
        let call = call.clone();
        let Some(inst) = self.instance_for(model, op.phase()) else {
            return Lowered::Unknown;
        };
        let role = self.program.models[model].name.clone();
        let input_name = if op == prog::Op::Generate {
            "prompts"
        } else {
            "rollout"
        };
        let mut inputs = Vec::new();
        if let Some(first) = args.iter().find(|a| a.name.is_none())
            && let Lowered::Value { id, field } = self.expr(&first.value)
        {
            inputs.push(Input {
                name: input_name.into(),
                value: id,
                field,
            });
        }
        let layout = self.instances[inst].layout;
        let batch = count(call.batch);
        let kind = match op {
            prog::Op::Generate => {
                let s = call.sampling.as_ref();
                OpKind::Generate {
                    role: role.clone(),
                    batch,
                    n: s.map(|s| s.n.value.max(0) as u64),
                    prompt_len: count(call.prompt_len),
                    max_new: s.map(|s| s.max_new.value.max(0) as u64),
                    temperature: s.map(|s| s.temperature.value),
                    top_p: s.map(|s| s.top_p.value),
                    top_k: s.and_then(|s| s.top_k).map(|k| k.value.max(0) as u64),
                    env: s.and_then(|s| s.env.as_ref()).map(|e| EnvTurns {
                        environment: e.environment.clone(),
                        max_turns: e.max_turns.value.max(0) as u64,
                        max_obs: e.max_obs.value.max(0) as u64,
                    }),
                }
            }
            prog::Op::Logprobs => OpKind::Logprobs {
                role: role.clone(),
                batch,
                micro: layout.micro,
                from_sampling: None,
            },
            prog::Op::Values => OpKind::Values {
                role: role.clone(),
                batch,
                micro: layout.micro,
            },
            prog::Op::Score => OpKind::Score {
                role: role.clone(),
                batch,
                micro: layout.micro,
            },
            prog::Op::Update => {
                let mut captures = Vec::new();
                let mut calls = Vec::new();
                let param = closure
                    .and_then(|c| c.params.first())
                    .map_or_else(String::new, |p| p.name.clone());
                if let Some(c) = closure {
                    let mut names = Vec::new();
                    collect_reads_block(&c.body, &mut names);
                    let mut seen = BTreeSet::new();
                    for (name, field) in names {
                        if name == param {
                            continue;
                        }
                        if let Some(&v) = self.env.get(&name)
                            && seen.insert((name.clone(), field.clone()))
                        {
                            // `scores.format` of a verifier's result is an output of its own,
                            // captured under the whole name.
                            let (value, mapped) = self.output_of(v, field.clone());
                            let name = match (&field, &mapped) {
                                (Some(f), None) => format!("{name}.{f}"),
                                _ => name.clone(),
                            };
                            captures.push(Input {
                                name,
                                value,
                                field: mapped,
                            });
                        }
                    }
                    let mut fcalls = Vec::new();
                    collect_calls_block(&c.body, &mut fcalls);
                    for (f, _) in fcalls {
                        if !calls.contains(&f) {
                            calls.push(f);
                        }
                    }
                }
                inputs.extend(captures.iter().cloned());
                let kernel = match closure {
                    Some(c) => {
                        let kind = self.program.models[model].kind;
                        self.loss_kernel(&role, kind, &c.body, &param, &captures)
                    }
                    None => {
                        self.errors.push(lower_err(format!(
                            "`{role}.update` has no loss closure (`{{ logp -> loss }}`)"
                        )));
                        0
                    }
                };
                self.update_kind(
                    model,
                    &role,
                    inst,
                    &call,
                    Loss {
                        param,
                        calls,
                        captures,
                        kernel,
                    },
                )
            }
        };
        let label = format!("{role}.{}", op.as_str());
        let ranks = self.instances[inst].ranks.clone();
        let id = self.push_op(label, kind, Some(inst), ranks, inputs);
        self.ops[id as usize].uses = vec![self.instances[inst].id.clone()];
        if op == prog::Op::Update {
            // Whatever read the weights this step reads them before they change.
            let me = self.instances[inst].id.clone();
            let readers: Vec<u32> = self.ops[..id as usize]
                .iter()
                .filter(|o| o.uses.contains(&me))
                .map(|o| o.id)
                .collect();
            let deps = &mut self.ops[id as usize].deps;
            deps.extend(readers);
            deps.sort();
            deps.dedup();
            self.updates.insert(model, id);
            return Lowered::Unknown;
        }
        let ty = self.type_at(e.span).map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            value_type,
        );
        let rows = rows_of(&ty).or(batch);
        let v = self.new_value(format!("{role}.{}#", op.as_str()), id, ty, rows);
        self.ops[id as usize].outputs.push(v);
        Lowered::Value { id: v, field: None }
    }

    pub(super) fn update_kind(
        &self,
        model: usize,
        role: &str,
        inst: usize,
        call: &prog::RoleCall,
        loss: Loss,
    ) -> OpKind {
        let m = &self.program.models[model];
        let l = self.instances[inst].layout;
        let batch = count(call.batch);
        let epochs = count(call.epochs).unwrap_or(1);
        let minibatch = count(call.minibatch).or(batch);
        let minibatches = match (batch, minibatch) {
            (Some(b), Some(mb)) if mb > 0 => Some(b.div_ceil(mb)),
            _ => None,
        };
        let per_rank = minibatch.map(|mb| mb.div_ceil(u64::from(l.data_ranks())));
        let micro = l.micro.or(per_rank);
        let accumulation = match (per_rank, micro) {
            (Some(p), Some(mi)) if mi > 0 => Some(p.div_ceil(mi).max(1)),
            _ => None,
        };
        let params = m
            .arch
            .as_ref()
            .map_or(0, |a| memory::role_parameters(m.kind, a));
        let b = m.precision.bytes();
        let shard = params * b / u64::from(l.tp * l.pp);
        let mut collectives = Vec::new();
        if l.fsdp > 1 {
            for when in ["before_forward", "before_backward"] {
                collectives.push(GradCollective {
                    when: when.into(),
                    collective: Collective::AllGather,
                    tensor: "parameters".into(),
                    axis: Axis::Fsdp,
                    bytes: shard / u64::from(l.fsdp),
                });
            }
            collectives.push(GradCollective {
                when: "after_backward".into(),
                collective: Collective::ReduceScatter,
                tensor: "gradients".into(),
                axis: Axis::Fsdp,
                bytes: shard,
            });
        }
        if l.dp > 1 {
            collectives.push(GradCollective {
                when: "after_accumulation".into(),
                collective: Collective::AllReduce,
                tensor: "gradients".into(),
                axis: Axis::Dp,
                bytes: shard / u64::from(l.fsdp),
            });
        }
        OpKind::Update {
            role: role.to_string(),
            batch,
            epochs,
            minibatch,
            minibatches,
            micro,
            accumulation,
            optimizer_steps: minibatches.map(|n| n * epochs),
            optimizer: m.optimizer.as_ref().filter(|_| !m.frozen).map(optimizer),
            loss,
            collectives,
        }
    }

    pub(super) fn new_value(
        &mut self,
        name: String,
        producer: u32,
        ty: ValueType,
        rows: Option<u64>,
    ) -> u32 {
        let id = self.values.len() as u32;
        let name = if name.ends_with('#') {
            format!("{name}{id}")
        } else {
            name
        };
        let at = self.ops[producer as usize]
            .instance
            .as_deref()
            .map_or(self.driver, |id| self.instance_index(id));
        let split = if is_scalar(&ty) {
            Split::Replicated
        } else {
            Split::Rows {
                parts: self.instances[at].layout.data_ranks(),
                rows,
            }
        };
        self.values.push(Value {
            id,
            name,
            producer: Some(producer),
            at: self.instances[at].id.clone(),
            ty,
            split,
        });
        id
    }

    /// Adds an op; its inputs get edges, transfers where the layouts differ, and dependencies.
    pub(super) fn push_op(
        &mut self,
        label: String,
        kind: OpKind,
        instance: Option<usize>,
        ranks: RankSet,
        inputs: Vec<Input>,
    ) -> u32 {
        let mut deps = BTreeSet::new();
        let mut edges = Vec::new();
        for input in &inputs {
            let v = input.value;
            // A carried value is there when the step starts: no edge, no transfer (its readers
            // run where it is held, `carried_ranks` checks).
            let Some(producer) = self.values[v as usize].producer else {
                continue;
            };
            if let Some(inst) = instance {
                self.settle(producer, inst);
            }
            let (via, split) = match instance {
                Some(inst) => {
                    let needs_whole = matches!(kind, OpKind::Log { .. });
                    self.bring(v, inst, needs_whole, &ranks)
                }
                None => (None, self.values[v as usize].split.clone()),
            };
            deps.insert(via.unwrap_or(producer));
            let ty = field_type(&self.values[v as usize].ty, input.field.as_deref());
            edges.push((v, input.field.clone(), producer, ty, split, via));
        }
        let id = self.ops.len() as u32;
        for (value, field, from, ty, split, via) in edges {
            self.edges.push(Edge {
                value,
                field,
                from,
                to: id,
                ty,
                split,
                via,
            });
        }
        self.ops.push(Op {
            id,
            label,
            kind,
            instance: instance.map(|i| self.instances[i].id.clone()),
            ranks,
            uses: Vec::new(),
            inputs,
            outputs: Vec::new(),
            deps: deps.into_iter().collect(),
            level: 0,
            every: self.every,
        });
        id
    }
}

fn binary_name(op: &str) -> &'static str {
    match op {
        "+" => "add",
        "-" => "sub",
        "*" => "mul",
        "/" => "div",
        "%" => "rem",
        "==" => "eq",
        "!=" => "ne",
        "<" => "lt",
        "<=" => "le",
        ">" => "gt",
        ">=" => "ge",
        "&&" => "and",
        "||" => "or",
        _ => "binary",
    }
}

fn arg_name(a: &ast::Arg, i: usize, params: &[&str]) -> String {
    match &a.name {
        Some(n) => n.name.clone(),
        None => params.get(i).map_or_else(
            || {
                if i == 0 {
                    "x".into()
                } else {
                    format!("arg{i}")
                }
            },
            |p| p.to_string(),
        ),
    }
}

/// (batch reduction, grouped) of a builtin call: a `sum`/`mean`/`count`/`min`/`max` over every
/// axis (no `over:`) or over `B` reduces over the batch; `group_*` works on groups.
fn builtin_facts(name: &str, args: &[ast::Arg]) -> (bool, bool) {
    let over = args
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == "over"));
    let reduces = match name {
        "sum" | "mean" | "count" => true,
        "min" | "max" => args.iter().filter(|a| a.name.is_none()).count() == 1,
        _ => false,
    };
    let over_batch = match over {
        None => true,
        Some(a) => matches!(&a.value.kind, ExprKind::Name(n) if n.name == "B"),
    };
    (reduces && over_batch, name.starts_with("group_"))
}

fn collect_calls_block(b: &ast::Block, out: &mut Vec<(String, Vec<ast::Arg>)>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. }
            | StmtKind::Assign { value, .. }
            | StmtKind::Emit { value }
            | StmtKind::Expr(value) => collect_calls(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => {
                collect_calls_block(body, out)
            }
            StmtKind::Log { record } => record
                .fields
                .iter()
                .for_each(|f| collect_calls(&f.value, out)),
            StmtKind::Checkpoint { .. } => {}
        }
    }
}

fn collect_calls(e: &ast::Expr, out: &mut Vec<(String, Vec<ast::Arg>)>) {
    match &e.kind {
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if let ExprKind::Name(n) = &callee.kind {
                out.push((n.name.clone(), args.clone()));
            } else {
                collect_calls(callee, out);
            }
            args.iter().for_each(|a| collect_calls(&a.value, out));
            if let Some(c) = closure {
                collect_calls_block(&c.body, out);
            }
        }
        ExprKind::Member { base, .. } => collect_calls(base, out),
        ExprKind::Index { base, indices } => {
            collect_calls(base, out);
            indices.iter().for_each(|i| collect_calls(i, out));
        }
        ExprKind::Unary { operand, .. } => collect_calls(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_calls(lhs, out);
            collect_calls(rhs, out);
        }
        ExprKind::Paren(inner) => collect_calls(inner, out),
        ExprKind::Record(r) => r.fields.iter().for_each(|f| collect_calls(&f.value, out)),
        ExprKind::List(items) => items.iter().for_each(|x| collect_calls(x, out)),
        ExprKind::Scan(s) => {
            s.carries.iter().for_each(|c| collect_calls(&c.init, out));
            collect_calls_block(&s.body, out);
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
    }
}

/// Names read by a block (with the field when read as `name.field`), in order.
fn collect_reads_block(b: &ast::Block, out: &mut Vec<(String, Option<String>)>) {
    for s in &b.stmts {
        match &s.kind {
            StmtKind::Let { value, .. }
            | StmtKind::Assign { value, .. }
            | StmtKind::Emit { value }
            | StmtKind::Expr(value) => collect_reads(value, out),
            StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => {
                collect_reads_block(body, out)
            }
            StmtKind::Log { record } => record
                .fields
                .iter()
                .for_each(|f| collect_reads(&f.value, out)),
            StmtKind::Checkpoint { .. } => {}
        }
    }
}

fn collect_reads(e: &ast::Expr, out: &mut Vec<(String, Option<String>)>) {
    match &e.kind {
        ExprKind::Name(n) => out.push((n.name.clone(), None)),
        ExprKind::Member { base, name } => match &base.kind {
            ExprKind::Name(n) => out.push((n.name.clone(), Some(name.name.clone()))),
            _ => collect_reads(base, out),
        },
        ExprKind::Call {
            callee,
            args,
            closure,
        } => {
            if !matches!(callee.kind, ExprKind::Name(_)) {
                collect_reads(callee, out);
            }
            args.iter().for_each(|a| collect_reads(&a.value, out));
            if let Some(c) = closure {
                collect_reads_block(&c.body, out);
            }
        }
        ExprKind::Index { base, indices } => {
            collect_reads(base, out);
            indices.iter().for_each(|i| collect_reads(i, out));
        }
        ExprKind::Unary { operand, .. } => collect_reads(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_reads(lhs, out);
            collect_reads(rhs, out);
        }
        ExprKind::Paren(inner) => collect_reads(inner, out),
        ExprKind::Record(r) => r.fields.iter().for_each(|f| collect_reads(&f.value, out)),
        ExprKind::List(items) => items.iter().for_each(|x| collect_reads(x, out)),
        ExprKind::Scan(s) => {
            s.carries.iter().for_each(|c| collect_reads(&c.init, out));
            collect_reads_block(&s.body, out);
        }
        ExprKind::Number(_) | ExprKind::Str(_) | ExprKind::Bool(_) => {}
    }
}
