//! The dataflow pass: the root module's `pipeline` block, statement by statement, into the
//! plan's values, ops and edges: role calls on their instances, kernels and `log` on the driver,
//! `sample` on its first consumer, `every` blocks, carried values, `checkpoint`s.

use super::*;

impl<'a> Lowerer<'a> {
    pub(super) fn block(&mut self, body: &[Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    pub(super) fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Loop { carries, body } => {
                for c in carries {
                    self.carry(c);
                }
                self.block(body);
            }
            Stmt::Assign { name, value } => self.assign(name, value),
            Stmt::Let { name, value } => {
                // (`let m = rollout.mask` binds the whole record: a field alias is not a value.)
                if let Lowered::Value { id, field } = self.expr(value) {
                    if field.is_none() && self.values[id as usize].name.contains('#') {
                        self.values[id as usize].name = name.clone();
                        // A verifier's metrics: `scores.format`.
                        for (metric, v) in
                            self.verify_outputs.get(&id).into_iter().flatten().skip(1)
                        {
                            self.values[*v as usize].name = format!("{name}.{metric}");
                        }
                    }
                    self.env.insert(name.clone(), id);
                }
            }
            Stmt::Eval(e) => {
                self.expr(e);
            }
            Stmt::Log(record) => {
                let mut fields = Vec::new();
                let mut inputs = Vec::new();
                for (name, value) in record {
                    if let Lowered::Value { id, field } = self.expr(value) {
                        if self.values[id as usize].name.contains('#') {
                            self.values[id as usize].name = format!("log.{name}");
                        }
                        fields.push(LogField {
                            name: name.clone(),
                            value: id,
                        });
                        inputs.push(Input {
                            name: name.clone(),
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
            Stmt::Every { interval, body } => {
                let saved = self.every;
                self.every = interval.or(saved);
                self.block(body);
                self.every = saved;
            }
            Stmt::Checkpoint(roles) => {
                for r in roles {
                    let Some(model) = self.program.model_index(r) else {
                        continue;
                    };
                    let Some(inst) = self
                        .instance_for(model, Phase::Train)
                        .or_else(|| self.any_instance(model))
                    else {
                        self.errors.push(lower_err(format!(
                            "`checkpoint {r}`: the role runs nowhere"
                        )));
                        continue;
                    };
                    let ranks = self.instances[inst].ranks.clone();
                    let kind = OpKind::Checkpoint {
                        role: r.clone(),
                        instance: self.instances[inst].id.clone(),
                    };
                    // The state is saved where it is (device or host memory): nothing to onload.
                    self.push_op(
                        format!("checkpoint {r}"),
                        kind,
                        Some(inst),
                        ranks,
                        Vec::new(),
                    );
                }
            }
        }
    }

    /// `beta = 0.1` in a loop's `with (…)`: a value of the step without a producer, held where
    /// kernels run (the checker made it a scalar `f32` or `i64` with a constant initial value).
    pub(super) fn carry(&mut self, c: &Carry) {
        let (dtype, init) = match &c.init {
            Some(Type::Float(Some(x))) => ("f32".to_string(), x.to_string()),
            Some(Type::Int(Some(n))) => ("i64".to_string(), n.to_string()),
            _ => {
                self.errors.push(lower_err(format!(
                    "the initial value of `{}` is not a known `f32` or `i64` constant",
                    c.name
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
            name: c.name.clone(),
            producer: None,
            at: self.instances[at].id.clone(),
            ty: ValueType::Tensor(ty.clone()),
            split: Split::Replicated,
        });
        self.env.insert(c.name.clone(), id);
        self.carried.push(Carried {
            name: c.name.clone(),
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
    pub(super) fn assign(&mut self, name: &str, value: &Node) {
        let lowered = self.expr(value);
        let every = self.every;
        let Some(c) = self.carried.iter_mut().find(|c| c.name == name) else {
            return;
        };
        c.every = every;
        match lowered {
            Lowered::Value { id, field: None } => c.next = Some(id),
            Lowered::Const(text) => c.next_const = Some(text),
            _ => self.errors.push(lower_err(format!(
                "the new value of `{name}` is not a value of the step"
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

    pub(super) fn expr(&mut self, e: &Node) -> Lowered {
        match &e.kind {
            NodeKind::Const(c) => Lowered::Const(c.clone()),
            NodeKind::Local(name) if self.env.contains_key(name) => Lowered::Value {
                id: self.env[name],
                field: None,
            },
            // A name bound to something that is not a value of the step.
            NodeKind::Local(name) => match self.program.model_index(name) {
                Some(_) => Lowered::Model,
                None => Lowered::Name(name.clone()),
            },
            NodeKind::Model(_) => Lowered::Model,
            NodeKind::Name(name) => Lowered::Name(name.clone()),
            NodeKind::Field { base, name } => match self.expr(base) {
                Lowered::Value { id, field: None } => {
                    let (id, field) = self.output_of(id, Some(name.clone()));
                    Lowered::Value { id, field }
                }
                _ => Lowered::Unknown,
            },
            NodeKind::Role {
                model,
                op,
                nth,
                input,
                loss,
            } => self.role_call(e, *model, *op, *nth, input.as_deref(), loss.as_ref()),
            NodeKind::Sample { dataset, count } => {
                let ty = e.ty.as_ref().map_or_else(
                    || ValueType::Opaque {
                        opaque: "prompts".into(),
                    },
                    value_type,
                );
                let kind = OpKind::Sample {
                    dataset: dataset.clone(),
                    count: *count,
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
                let v = self.new_value(format!("{dataset}.sample#"), id, ty, *count);
                self.ops[id as usize].outputs.push(v);
                Lowered::Value { id: v, field: None }
            }
            NodeKind::Supervised {
                dataset,
                preferences,
                count,
                split,
            } => self.supervised(e, dataset, *preferences, *count, split.as_deref()),
            NodeKind::Verify {
                verifier,
                dataset,
                fields,
                metrics,
                rollout,
            } => self.verify(e, verifier, dataset, fields, metrics, rollout.as_deref()),
            NodeKind::Kernel {
                function,
                module,
                args,
                batch_reduction,
                grouped,
            } => {
                let lowered = args
                    .iter()
                    .map(|(name, a)| (name.clone(), self.expr(a)))
                    .collect();
                self.kernel(
                    e,
                    function.clone(),
                    module.clone(),
                    lowered,
                    (*batch_reduction, *grouped),
                )
            }
            NodeKind::Unknown => Lowered::Unknown,
        }
    }

    /// `answer(rollout)`: a `verify` op on the driver's ranks (each data rank scores its own
    /// rows) whose outputs are the reward and then each metric, all `f32[B]`. With metrics the
    /// call's value is the reward, and `output_of` maps `r.reward`, `r.format` to the outputs.
    pub(super) fn verify(
        &mut self,
        e: &Node,
        verifier: &str,
        dataset: &str,
        fields: &[String],
        metrics: &[String],
        rollout: Option<&Node>,
    ) -> Lowered {
        let Some(arg) = rollout else {
            return Lowered::Unknown;
        };
        let Lowered::Value {
            id: rollout,
            field: None,
        } = self.expr(arg)
        else {
            self.errors.push(lower_err(format!(
                "the rollout `{verifier}` scores is not a value of the step"
            )));
            return Lowered::Unknown;
        };
        let ty = e.ty.as_ref().map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            value_type,
        );
        let reward_ty = if metrics.is_empty() {
            ty
        } else {
            field_type(&ty, Some("reward"))
        };
        let rows = rows_of(&reward_ty);
        let kind = OpKind::Verify {
            verifier: verifier.to_string(),
            dataset: dataset.to_string(),
            fields: fields.to_vec(),
        };
        let driver = self.driver;
        let ranks = self.instances[driver].ranks.clone();
        let input = Input {
            name: "rollout".into(),
            value: rollout,
            field: None,
        };
        let id = self.push_op(
            format!("verify {verifier}"),
            kind,
            Some(driver),
            ranks,
            vec![input],
        );
        let reward = self.new_value(format!("{verifier}.reward#"), id, reward_ty.clone(), rows);
        self.ops[id as usize].outputs.push(reward);
        if !metrics.is_empty() {
            let mut outputs = vec![("reward".to_string(), reward)];
            for m in metrics {
                let v = self.new_value(format!("{verifier}.{m}#"), id, reward_ty.clone(), rows);
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
        e: &Node,
        dataset: &str,
        preferences: bool,
        count: Option<u64>,
        split: Option<&str>,
    ) -> Lowered {
        let split = match split {
            Some("test") => Some(DataSplit::Test),
            Some("train") => Some(DataSplit::Train),
            _ => None,
        };
        let ty = e.ty.as_ref().map_or_else(
            || ValueType::Opaque {
                opaque: "rollout".into(),
            },
            value_type,
        );
        let form = if preferences {
            "preferences"
        } else {
            "demonstrations"
        };
        let rows = count.map(|c| if preferences { 2 * c } else { c });
        let kind = OpKind::Sample {
            dataset: dataset.to_string(),
            count,
            form: Some(if preferences {
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

    pub(super) fn kernel(
        &mut self,
        e: &Node,
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
                Lowered::Model | Lowered::Unknown => {}
            }
        }
        let ty = e.ty.as_ref().map_or_else(
            || ValueType::Opaque {
                opaque: "unknown".into(),
            },
            value_type,
        );
        let (batch_reduction, grouped) = facts;
        let batch_reduction = batch_reduction || (is_scalar(&ty) && !inputs.is_empty());
        let kernel = self.call_kernel(e.id, &function, module.as_deref(), &inputs, &attrs);
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

    /// The `nth` call of `op` on `model` (the checker's record of it gives its settings).
    pub(super) fn role_call(
        &mut self,
        e: &Node,
        model: usize,
        op: prog::Op,
        nth: usize,
        input: Option<&Node>,
        closure: Option<&rlc_check::dataflow::Loss>,
    ) -> Lowered {
        let Some(call) = self.program.pipeline.as_ref().and_then(|facts| {
            facts
                .calls
                .iter()
                .filter(|c| c.model == model && c.op == op)
                .nth(nth)
        }) else {
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
        if let Some(first) = input
            && let Lowered::Value { id, field } = self.expr(first)
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
                    staleness: s
                        .and_then(|s| s.staleness)
                        .map_or(0, |v| v.value.max(0) as u64),
                    pause_at: s.and_then(|s| s.pause_at).map(|p| p.value.max(0) as u64),
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
                let param = closure.map_or_else(String::new, |c| c.param.clone());
                let calls = closure.map_or_else(Vec::new, |c| c.calls.clone());
                let mut seen = BTreeSet::new();
                for (name, field) in closure.map_or(&[][..], |c| &c.reads[..]) {
                    if *name == param {
                        continue;
                    }
                    if let Some(&v) = self.env.get(name)
                        && seen.insert((name.clone(), field.clone()))
                    {
                        // `scores.format` of a verifier's result is an output of its own,
                        // captured under the whole name.
                        let (value, mapped) = self.output_of(v, field.clone());
                        let name = match (field, &mapped) {
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
                inputs.extend(captures.iter().cloned());
                let kernel = match closure {
                    Some(c) => {
                        let kind = self.program.models[model].kind;
                        self.loss_kernel(&role, kind, c, &captures)
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
        let ty = e.ty.as_ref().map_or_else(
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
