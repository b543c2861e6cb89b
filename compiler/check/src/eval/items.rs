//! Configuration items (clusters, models, datasets, structs) and declared types.

use super::*;

impl Evaluator<'_> {
    // ----------------------------------------------------------------------------------------
    // Items

    /// The value of a module-level item, evaluated once.
    pub(super) fn item_value(&mut self, r: ItemRef) -> Val {
        if let Some(v) = self.memo.get(&r) {
            return v.clone();
        }
        let m = self.modules.get(r.module);
        // An expression of it was refused by the parser (E01xx): its value is unknown.
        if m.refused.contains(&r.index) {
            return Val::Error;
        }
        let item = m.item(r.index);
        if !self.in_progress.insert(r) {
            let name = item.name().unwrap();
            return self.err(
                Diagnostic::new(
                    Code::UndefinedName,
                    format!("`{}` is defined in terms of itself", name.name),
                    m.file,
                    name.span,
                )
                .primary_label("refers to itself"),
            );
        }
        let val = match &item.kind {
            ItemKind::Const(c) => {
                let mut frame = Frame::new(r.module, m.file, false);
                let v = match self.expr(&mut frame, &c.value) {
                    Val::Device(d) => Val::Device(Rc::new(DeviceSpec {
                        name: c.name.name.clone(),
                        ..(*d).clone()
                    })),
                    Val::Arch(a) if a.preset.is_none() => Val::Arch(Rc::new(program::Arch {
                        preset: Some(c.name.name.clone()),
                        ..(*a).clone()
                    })),
                    other => other,
                };
                match &c.ty {
                    Some(ty) => {
                        let want = self.type_expr(r.module, ty);
                        self.expect_assignable(&frame, &want, &v, c.value.span);
                        v
                    }
                    None => v,
                }
            }
            ItemKind::Cluster(c) => self.cluster(r, c),
            ItemKind::Model(md) => self.model(r, md),
            ItemKind::Dataset(d) => self.dataset(r, d),
            ItemKind::Verifier(v) => self.verifier(r, v),
            ItemKind::Environment(env) => self.environment(r, env),
            ItemKind::Fn(_) => Val::Fn(r),
            ItemKind::Pipeline(_) => Val::Pipeline(r),
            _ => Val::Unit,
        };
        self.in_progress.remove(&r);
        self.memo.insert(r, val.clone());
        val
    }

    pub(super) fn definition_fields<'a>(
        &mut self,
        frame: &mut Frame,
        def: &'a ast::Definition,
    ) -> Option<Vec<(&'a ast::Field, Val)>> {
        match def {
            ast::Definition::Fields(block) => {
                let mut out: Vec<(&ast::Field, Val)> = Vec::new();
                for f in &block.fields {
                    if let Some((prev, _)) = out.iter().find(|(p, _)| p.key.name == f.key.name) {
                        self.diags.push(
                            Diagnostic::new(
                                Code::DuplicateName,
                                format!("`{}` is set twice", f.key.name),
                                frame.file,
                                f.key.span,
                            )
                            .primary_label("set again here")
                            .label(
                                frame.file,
                                prev.key.span,
                                "first set here",
                            ),
                        );
                        continue;
                    }
                    let v = if f.key.name == "precision" {
                        self.precision_value(frame, &f.value)
                    } else {
                        self.expr(frame, &f.value)
                    };
                    out.push((f, v));
                }
                Some(out)
            }
            ast::Definition::Expr(_) => None,
        }
    }

    pub(super) fn precision_value(&mut self, frame: &Frame, e: &Expr) -> Val {
        match &e.kind {
            ExprKind::Name(n) if matches!(n.name.as_str(), "f32" | "bf16" | "f16") => {
                Val::Str(Some(n.name.clone()))
            }
            _ => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "precision is `f32`, `bf16` or `f16`",
                    frame.file,
                    e.span,
                )
                .primary_label("not a precision"),
            ),
        }
    }

    pub(super) fn cluster(&mut self, r: ItemRef, c: &ast::Cluster) -> Val {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        let origin = self.origin(&frame, c.name.span);
        let cluster = match &c.def {
            ast::Definition::Expr(e) => match self.expr(&mut frame, e) {
                Val::ClusterSpec(spec) => Some(Cluster {
                    name: c.name.name.clone(),
                    origin,
                    ..(*spec).clone()
                }),
                Val::Cluster(id) => Some(Cluster {
                    name: c.name.name.clone(),
                    origin,
                    ..self.program.clusters[id].clone()
                }),
                Val::Error => None,
                other => {
                    self.diags.push(
                        Diagnostic::new(Code::TypeMismatch, format!("a cluster is defined by `cpu(…)` or a block, not {}", other.describe()), frame.file, e.span)
                            .primary_label("not a cluster")
                            .help("write `cluster name { nodes = 1  devices_per_node = 8  device = h100_80g }`"),
                    );
                    None
                }
            },
            ast::Definition::Fields(_) => {
                let fields = self
                    .definition_fields(&mut frame, &c.def)
                    .unwrap_or_default();
                self.cluster_from_fields(&frame, &c.name, &fields, origin)
            }
        };
        match cluster {
            Some(cluster) => {
                self.program.clusters.push(cluster);
                let id = self.program.clusters.len() - 1;
                self.cluster_ids.insert(r, id);
                Val::Cluster(id)
            }
            None => Val::Error,
        }
    }

    pub(super) fn cluster_from_fields(
        &mut self,
        frame: &Frame,
        name: &ast::Ident,
        fields: &[(&ast::Field, Val)],
        origin: Origin,
    ) -> Option<Cluster> {
        let mut nodes = None;
        let mut per_node = None;
        let mut device = None;
        let mut intra = 300e9;
        let mut inter = 25e9;
        let mut ok = true;
        for (f, v) in fields {
            let src = Origin {
                file: frame.file,
                span: f.value.span,
            };
            match (f.key.name.as_str(), v) {
                (_, Val::Error) => ok = false,
                ("nodes", v) => {
                    nodes = self
                        .positive(frame, v, f.value.span, "nodes")
                        .map(|n| Sourced {
                            value: n,
                            origin: src,
                        });
                    // Reported: not also "does not set" below.
                    ok &= nodes.is_some();
                }
                ("devices_per_node", v) => {
                    per_node = self
                        .positive(frame, v, f.value.span, "devices_per_node")
                        .map(|n| Sourced {
                            value: n,
                            origin: src,
                        });
                    // Reported: not also "does not set" below.
                    ok &= per_node.is_some();
                }
                ("device", Val::Device(d)) => device = Some((**d).clone()),
                ("intra_bandwidth", v) if v.as_float().is_some() => intra = v.as_float().unwrap(),
                ("inter_bandwidth", v) if v.as_float().is_some() => inter = v.as_float().unwrap(),
                (key @ ("device" | "intra_bandwidth" | "inter_bandwidth"), v) => {
                    ok = false;
                    self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "`{key}` expects {}, found {}",
                                if key == "device" {
                                    "a device"
                                } else {
                                    "a bandwidth"
                                },
                                v.describe()
                            ),
                            frame.file,
                            f.value.span,
                        )
                        .primary_label("wrong kind of value"),
                    );
                }
                (key, _) => {
                    ok = false;
                    self.unknown_setting(
                        frame,
                        key,
                        f.key.span,
                        &[
                            "nodes",
                            "devices_per_node",
                            "device",
                            "intra_bandwidth",
                            "inter_bandwidth",
                        ],
                        "cluster",
                    );
                }
            }
        }
        for (missing, present) in [
            ("nodes", nodes.is_some()),
            ("devices_per_node", per_node.is_some()),
            ("device", device.is_some()),
        ] {
            if !present && ok {
                ok = false;
                self.diags.push(
                    Diagnostic::new(
                        Code::MissingSetting,
                        format!("cluster `{}` does not set `{missing}`", name.name),
                        frame.file,
                        name.span,
                    )
                    .primary_label(format!("`{missing}` is missing"))
                    .help("a cluster block sets `nodes`, `devices_per_node` and `device`"),
                );
            }
        }
        if let (Some(n), Some(d)) = (&nodes, &per_node)
            && n.value * d.value > crate::limits::MAX_DEVICES
        {
            // Each is at most `MAX_SIZE`: the product fits.
            ok = false;
            self.diags.push(
                Diagnostic::new(
                    Code::SizeOutOfRange,
                    format!(
                        "cluster `{}` has {} × {} = {} devices, more than the compiler can check",
                        name.name,
                        n.value,
                        d.value,
                        n.value * d.value
                    ),
                    n.origin.file,
                    n.origin.span,
                )
                .primary_label(format!("{} nodes", n.value))
                .label(
                    d.origin.file,
                    d.origin.span,
                    format!("{} devices per node", d.value),
                )
                .help(format!(
                    "a cluster has at most {} devices",
                    crate::limits::MAX_DEVICES
                )),
            );
        }
        ok.then(|| Cluster {
            name: name.name.clone(),
            nodes: nodes.unwrap(),
            devices_per_node: per_node.unwrap(),
            device: device.unwrap(),
            intra_bandwidth: intra,
            inter_bandwidth: inter,
            is_cpu: false,
            origin,
        })
    }

    pub(super) fn unknown_setting(
        &mut self,
        frame: &Frame,
        key: &str,
        span: Span,
        known: &[&str],
        what: &str,
    ) {
        let mut d = Diagnostic::new(
            Code::UnknownField,
            format!("a {what} has no setting `{key}`"),
            frame.file,
            span,
        )
        .primary_label("unknown setting");
        d = crate::hints::suggest(
            d,
            key,
            known.iter().copied(),
            2,
            format!("the settings are {}", known.join(", ")),
        );
        self.diags.push(d);
    }

    /// A positive integer constant, or a diagnostic.
    pub(super) fn positive(
        &mut self,
        frame: &Frame,
        v: &Val,
        span: Span,
        what: &str,
    ) -> Option<u64> {
        if let Some(found) = crate::limits::oversized(v) {
            self.diags
                .push(crate::limits::too_large(what, &found, frame.file, span));
            return None;
        }
        match v.as_int() {
            Some(n) if n > 0 => Some(n as u64),
            Some(n) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("`{what}` must be at least 1, found {n}"),
                        frame.file,
                        span,
                    )
                    .primary_label("not positive"),
                );
                None
            }
            None => {
                if !v.is_error() {
                    self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!(
                                "`{what}` must be an integer known before the job starts, found {}",
                                v.describe()
                            ),
                            frame.file,
                            span,
                        )
                        .primary_label("not a known integer"),
                    );
                }
                None
            }
        }
    }

    pub(super) fn model(&mut self, r: ItemRef, md: &ast::Model) -> Val {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        let origin = self.origin(&frame, md.name.span);
        let Some(kind) = RoleKind::from_name(&md.kind.name) else {
            let mut d = Diagnostic::new(
                Code::UnknownRoleKind,
                format!("`{}` is not a model kind", md.kind.name),
                frame.file,
                md.kind.span,
            )
            .primary_label("unknown kind");
            d = match rlc_syntax::closest(&md.kind.name, ["CausalLM", "ValueModel", "RewardModel"], 3) {
                Some(near) => crate::hints::rename(d, near).help(format!("did you mean `{near}`? The kinds are CausalLM, ValueModel and RewardModel")),
                None => d.help("the kinds are CausalLM (generates, log-probs), ValueModel (per-token values) and RewardModel (a score per sequence)"),
            };
            return self.err(d);
        };
        let mut model = Model {
            name: md.name.name.clone(),
            kind,
            arch: None,
            arch_origin: origin,
            init: None,
            optimizer: None,
            frozen: false,
            precision: Precision::F32,
            recompute: false,
            origin,
        };
        match &md.def {
            ast::Definition::Expr(e) => match self.expr(&mut frame, e) {
                Val::Init(init) if matches!(*init, InitVal::Frozen(_)) => {
                    let InitVal::Frozen(src) = *init else {
                        unreachable!()
                    };
                    let base = self.program.models[src].clone();
                    model.arch = base.arch;
                    model.arch_origin = base.arch_origin;
                    model.precision = base.precision;
                    model.frozen = true;
                    model.init = Some(Init::CopyOf { model: src });
                    if base.kind != kind {
                        self.diags.push(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                format!(
                                    "`{}` is a {} but `{}` is a {}",
                                    md.name.name,
                                    kind.as_str(),
                                    base.name,
                                    base.kind.as_str()
                                ),
                                frame.file,
                                md.kind.span,
                            )
                            .primary_label("kind of the copy")
                            .label(
                                base.origin.file,
                                base.origin.span,
                                "kind of the original",
                            ),
                        );
                    }
                }
                Val::Error => return Val::Error,
                other => {
                    return self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "a model is defined by a block or `frozen(model)`, not {}",
                                other.describe()
                            ),
                            frame.file,
                            e.span,
                        )
                        .primary_label("not a model definition"),
                    );
                }
            },
            ast::Definition::Fields(_) => {
                let fields = self
                    .definition_fields(&mut frame, &md.def)
                    .unwrap_or_default();
                let mut optim_span = None;
                let mut init_span = None;
                for (f, v) in &fields {
                    match (f.key.name.as_str(), v) {
                        (_, Val::Error) => {}
                        ("arch", Val::Arch(a)) => {
                            model.arch = Some((**a).clone());
                            model.arch_origin = self.origin(&frame, f.span);
                        }
                        ("init", Val::Init(i)) => {
                            init_span = Some(f.span);
                            model.init = Some(match &**i {
                                InitVal::Random(seed) => Init::Random { seed: *seed as u64 },
                                InitVal::Hf(p) => Init::HuggingFace { path: p.clone() },
                                InitVal::Load(p) => Init::Checkpoint { path: p.clone() },
                                InitVal::Frozen(src) => Init::CopyOf { model: *src },
                            })
                        }
                        ("optim", Val::Optim(o)) => {
                            model.optimizer = Some((**o).clone());
                            optim_span = Some(f.key.span);
                            let at = self.origin(&frame, warmup_span(&f.value).unwrap_or(f.span));
                            self.program.warmup_origins.insert(md.name.name.clone(), at);
                        }
                        ("frozen", Val::Bool(Some(b))) => model.frozen = *b,
                        ("recompute", Val::Bool(Some(b))) => model.recompute = *b,
                        ("precision", Val::Str(Some(p))) => {
                            model.precision = match p.as_str() {
                                "bf16" => Precision::Bf16,
                                "f16" => Precision::F16,
                                _ => Precision::F32,
                            }
                        }
                        (key @ ("arch" | "init" | "optim" | "frozen" | "recompute"), v) => {
                            let want = match key {
                                "arch" => "an architecture (`tiny_gpt(…)`, a preset, or `arch(…)`)",
                                "init" => "`random(seed: …)`, `hf(\"path\")` or `load(\"path\")`",
                                "optim" => "an optimiser (`adamw(lr: …)`)",
                                _ => "`true` or `false`",
                            };
                            self.diags.push(
                                Diagnostic::new(
                                    Code::TypeMismatch,
                                    format!("`{key}` expects {want}, found {}", v.describe()),
                                    frame.file,
                                    f.value.span,
                                )
                                .primary_label("wrong kind of value"),
                            );
                        }
                        (key, _) => self.unknown_setting(
                            &frame,
                            key,
                            f.key.span,
                            &["arch", "init", "optim", "frozen", "precision", "recompute"],
                            "model",
                        ),
                    }
                }
                if model.frozen
                    && let Some(span) = optim_span
                {
                    self.diags.push(
                        Diagnostic::new(
                            Code::UpdateFrozen,
                            format!("`{}` is frozen but has an optimiser", md.name.name),
                            frame.file,
                            span,
                        )
                        .primary_label("optimiser of a frozen model")
                        .help("remove `optim`, or `frozen = true`"),
                    );
                    model.optimizer = None;
                }
                if model.arch.is_none()
                    && let (Some(Init::HuggingFace { path }), Some(span)) = (&model.init, init_span)
                    && !fields.iter().any(|(f, _)| f.key.name == "arch")
                {
                    // The folder's config.json says what the architecture is.
                    match self.hf_arch(&frame, path) {
                        Ok(arch) => {
                            model.arch = Some(arch);
                            model.arch_origin = self.origin(&frame, span);
                        }
                        Err(problem) => self.diags.push(
                            Diagnostic::new(
                                Code::HfConfig,
                                format!(
                                    "model `{}` has no `arch`, and `{path}/config.json` cannot give it: {}",
                                    md.name.name,
                                    problem.message()
                                ),
                                frame.file,
                                span,
                            )
                            .primary_label("the architecture would come from here")
                            .help(
                                "point `hf(…)` at a folder with a Llama or Qwen2 config.json, \
                                 or set `arch`",
                            ),
                        ),
                    }
                } else if let (Some(arch), Some(Init::HuggingFace { path }), Some(span)) =
                    (&model.arch, &model.init, init_span)
                {
                    // An `arch` beside `hf(…)`: the runtime builds the model from the folder's
                    // config.json, so when the folder is here to read, the checks must be about
                    // that model. A folder that is not (it may be on the cluster) is no error.
                    let arch_origin = model.arch_origin;
                    match self.hf_arch(&frame, path) {
                        Ok(config) => {
                            let differences = crate::hf_config::differences(arch, &config);
                            if !differences.is_empty() {
                                let listed = differences
                                    .iter()
                                    .map(|(what, written, read)| {
                                        format!("{what} {written} vs {read}")
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", ");
                                self.diags.push(
                                    Diagnostic::new(
                                        Code::HfArchMismatch,
                                        format!(
                                            "the `arch` of `{}` disagrees with `{path}/config.json`: {listed}",
                                            md.name.name
                                        ),
                                        arch_origin.file,
                                        arch_origin.span,
                                    )
                                    .primary_label("the architecture the checks would assume")
                                    .label(
                                        frame.file,
                                        span,
                                        format!(
                                            "config.json: {} layers, hidden {}, {} heads, {} key/value heads, ffn {}, vocab {}",
                                            config.layers,
                                            config.hidden,
                                            config.heads,
                                            config.kv_heads,
                                            config.ffn,
                                            config.vocab
                                        ),
                                    )
                                    .help(
                                        "remove `arch` to take the architecture from config.json, \
                                         or point `hf(…)` at the model `arch` describes",
                                    ),
                                );
                            }
                        }
                        Err(HfProblem::Unreadable(_)) => {}
                        Err(HfProblem::Unusable(problem)) => self.diags.push(
                            Diagnostic::new(
                                Code::HfConfig,
                                format!(
                                    "the runtime cannot load `{path}` for model `{}`: `{path}/config.json`: {problem}",
                                    md.name.name
                                ),
                                frame.file,
                                span,
                            )
                            .primary_label("the weights come from here")
                            .help("point `hf(…)` at a folder with a Llama or Qwen2 config.json"),
                        ),
                    }
                } else if model.arch.is_none()
                    && !fields
                        .iter()
                        .any(|(f, v)| f.key.name == "arch" || v.is_error())
                {
                    self.diags.push(
                        Diagnostic::new(
                            Code::MissingSetting,
                            format!("model `{}` has no `arch`", md.name.name),
                            frame.file,
                            md.name.span,
                        )
                        .primary_label("`arch` is missing")
                        .help("set `arch = tiny_gpt(…)` or a preset from `std.models`"),
                    );
                }
                if !model.frozen
                    && model.optimizer.is_none()
                    && !fields.iter().any(|(_, v)| v.is_error())
                {
                    model.frozen = true;
                }
            }
        }
        self.program.models.push(model);
        let id = self.program.models.len() - 1;
        self.model_ids.insert(r, id);
        Val::Model(id)
    }

    pub(super) fn dataset(&mut self, r: ItemRef, d: &ast::Dataset) -> Val {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        match &d.def {
            ast::Definition::Expr(e) => match self.expr(&mut frame, e) {
                Val::Dataset(spec) => {
                    let mut spec = (*spec).clone();
                    spec.name = d.name.name.clone();
                    if let Some(dir) = spec.tokenizer.clone() {
                        match self.tokenizer_vocab(&frame, &d.name.name, &dir, e.span) {
                            Ok(vocab) => spec.vocab = vocab,
                            Err(()) => spec.tokenizer_unusable = true,
                        }
                    }
                    Val::Dataset(Rc::new(spec))
                }
                Val::Error => Val::Error,
                other => self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "a dataset is `jsonl(…)` or `task(…)`, not {}",
                            other.describe()
                        ),
                        frame.file,
                        e.span,
                    )
                    .primary_label("not a dataset"),
                ),
            },
            ast::Definition::Fields(block) => self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    "a dataset is defined with `=`",
                    frame.file,
                    block.span,
                )
                .primary_label("not a dataset")
                .help("write `dataset prompts = jsonl(\"prompts.jsonl\", field: \"prompt\")`"),
            ),
        }
    }

    /// The vocabulary of `dir/tokenizer.json` (`dir` relative to the module's file). A folder
    /// the checker cannot read is no error — it may exist only where the job runs — but a file
    /// that is there and unusable is (E0408).
    /// `Ok(None)`: unreadable; `Err(())`: reported.
    fn tokenizer_vocab(
        &mut self,
        frame: &Frame,
        dataset: &str,
        dir: &str,
        span: Span,
    ) -> Result<Option<i64>, ()> {
        let module = &self.modules.get(frame.module).name;
        let path = crate::modules::join_relative(module, &format!("{dir}/tokenizer.json"));
        let Ok(text) = self.loader.read(&path) else {
            return Ok(None);
        };
        match crate::hf_config::tokenizer_vocab(&text) {
            Ok(vocab) => Ok(Some(vocab as i64)),
            Err(problem) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TokenizerFile,
                        format!("dataset `{dataset}` cannot be encoded: `{dir}/tokenizer.json`: {problem}"),
                        frame.file,
                        span,
                    )
                    .primary_label("the text is encoded with this tokenizer")
                    .help("point `tokenizer:` at a Hugging Face model folder with its tokenizer.json"),
                );
                Err(())
            }
        }
    }

    pub(super) fn check_struct(&mut self, module: usize, s: &ast::StructDef) {
        let file = self.modules.get(module).file;
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for f in &s.fields {
            if let Some(first) = seen.insert(&f.name.name, f.name.span) {
                self.diags.push(duplicate_field(file, &f.name, first));
            }
            self.type_expr(module, &f.ty);
        }
    }

    // ----------------------------------------------------------------------------------------
    // Types

    /// The value a declared type stands for.
    pub(super) fn type_expr(&mut self, module: usize, ty: &ast::TypeExpr) -> Val {
        let file = self.modules.get(module).file;
        let name = ty.name.name.as_str();
        if let Some(dtype) = DType::from_name(name) {
            let dims = ty
                .dims
                .iter()
                .flatten()
                .map(|d| match d {
                    ast::Dim::Named(i) => Dim::Sym(i.name.clone()),
                    ast::Dim::Size(n, _) => Dim::Size(*n),
                })
                .collect();
            return Val::Tensor(TensorTy { dtype, dims });
        }
        if ty.dims.is_some() {
            let mut d = Diagnostic::new(
                Code::UnknownType,
                format!("`{name}` is not an element type: it cannot have dimensions"),
                file,
                ty.span,
            )
            .primary_label("not a tensor type");
            let elements = ["f32", "bf16", "f16", "i32", "i64", "bool", "Tokens", "Mask"];
            if let Some(near) = rlc_syntax::closest(name, elements, 2) {
                let edit = rlc_diagnostics::Edit {
                    file,
                    span: ty.name.span,
                    text: near.to_string(),
                };
                d = d
                    .help(format!("did you mean `{near}`?"))
                    .fix(format!("rename to `{near}`"), vec![edit]);
            }
            return self.err(d);
        }
        match name {
            "Rollout" => Val::Record(Rc::new(rollout_record(
                Dim::Sym("B".into()),
                Dim::Sym("T".into()),
            ))),
            "Arch" | "Device" | "Cluster" | "Dataset" | "Init" | "Optim" | "int" => Val::Error,
            _ => {
                if let Some(Binding::Item { module: m, index }) =
                    self.modules.get(module).lookup(module, name)
                {
                    self.used_imports.insert((module, name.to_string()));
                    if let ItemKind::Struct(s) = &self.modules.get(m).item(index).kind {
                        let fields = s
                            .fields
                            .iter()
                            .map(|f| (f.name.name.clone(), self.type_expr(m, &f.ty)))
                            .collect();
                        return Val::Record(Rc::new(RecordVal {
                            name: name.to_string(),
                            fields,
                        }));
                    }
                }
                if self.modules.get(module).is_poisoned(name) {
                    return Val::Error;
                }
                let known = [
                    "f32", "bf16", "f16", "i32", "i64", "bool", "Tokens", "Mask", "Rollout",
                ];
                let mut d = Diagnostic::new(
                    Code::UnknownType,
                    format!("unknown type `{name}`"),
                    file,
                    ty.name.span,
                )
                .primary_label("not a type");
                if let Some(near) = rlc_syntax::closest(name, known, 2) {
                    d = crate::hints::did_you_mean(d, near);
                }
                self.err(d)
            }
        }
    }

    /// Checks that `found` may stand where `want` is declared (returns, typed `let`s).
    pub(super) fn expect_assignable(&mut self, frame: &Frame, want: &Val, found: &Val, span: Span) {
        if want.is_error() || found.is_error() {
            return;
        }
        if let (Some(w), Some(f)) = (want.as_tensor(), found.as_tensor())
            && let Val::Tensor(_) = want
        {
            if let Err(msg) = shapes::assignable(&w, &f) {
                let code = msg.code();
                self.diags.push(
                    Diagnostic::new(
                        code,
                        format!("expected `{w}`, found `{f}`"),
                        frame.file,
                        span,
                    )
                    .primary_label(msg.text),
                );
            }
            return;
        }
        if std::mem::discriminant(want) != std::mem::discriminant(found)
            && !matches!(want, Val::Record(_))
        {
            self.diags.push(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!("expected {}, found {}", want.describe(), found.describe()),
                    frame.file,
                    span,
                )
                .primary_label("wrong kind of value"),
            );
        }
    }
}

/// The `warmup:` argument of an optimiser written in place (`adamw(lr: 1e-6, warmup: 20)`,
/// named or second), for the schedule check's label.
fn warmup_span(e: &ast::Expr) -> Option<Span> {
    let ast::ExprKind::Call { args, .. } = &e.kind else {
        return None;
    };
    args.iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == "warmup"))
        .or_else(|| args.get(1).filter(|a| a.name.is_none()))
        .map(|a| a.span)
}
