//! `verifier` items (external rewards) and their calls: the declaration's options evaluated into
//! a [`VerifierSpec`], `name(rollout)` typed as `f32[B]` (or a record of the reward and the
//! declared metrics), and the misuse the E10xx codes name. `environment` items (the other side of
//! a multi-turn `generate`) are declared with the same `program(…)` / `http(…)` and options but
//! `metrics`, evaluated by the same code into an [`EnvironmentSpec`](crate::value::EnvironmentSpec).

use super::roles::rollout_rows;
use super::*;
use rlc_syntax::ast::Unit;

use crate::value::{
    ENVIRONMENT_OPTIONS, VERIFIER_OPTIONS, VERIFIER_PROCESS_OPTIONS as PROCESS_OPTIONS,
};

/// Which item a `program(…)` / `http(…)` declaration is.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Endpoint {
    Verifier,
    Environment,
}

impl Endpoint {
    /// The item's keyword, with its article: "a verifier", "an environment".
    fn a(self) -> &'static str {
        match self {
            Endpoint::Verifier => "a verifier",
            Endpoint::Environment => "an environment",
        }
    }

    fn keyword(self) -> &'static str {
        match self {
            Endpoint::Verifier => "verifier",
            Endpoint::Environment => "environment",
        }
    }

    fn options(self) -> &'static [&'static str] {
        match self {
            Endpoint::Verifier => &VERIFIER_OPTIONS,
            Endpoint::Environment => &ENVIRONMENT_OPTIONS,
        }
    }

    fn example(self) -> &'static str {
        match self {
            Endpoint::Verifier => {
                "write `verifier answer = program(\"python3\", \"answer.py\")` or `verifier rm = http(\"http://127.0.0.1:8000/score\")`"
            }
            Endpoint::Environment => {
                "write `environment calc = program(\"python3\", \"calc.py\")` or `environment web = http(\"http://127.0.0.1:8000/step\")`"
            }
        }
    }
}

/// What kind of quantity an option holds.
#[derive(Clone, Copy, PartialEq)]
enum Quantity {
    Count,
    Duration,
    Bytes,
}

impl Evaluator<'_> {
    /// `verifier name = program(…)` or `http(…)`.
    pub(super) fn verifier(&mut self, r: ItemRef, v: &ast::VerifierDef) -> Val {
        self.endpoint(r, Endpoint::Verifier, &v.name, &v.def)
            .map_or(Val::Error, |spec| Val::Verifier(Rc::new(spec)))
    }

    /// `environment name = program(…)` or `http(…)`: a verifier's options but `metrics`.
    pub(super) fn environment(&mut self, r: ItemRef, env: &ast::EnvironmentDef) -> Val {
        self.endpoint(r, Endpoint::Environment, &env.name, &env.def)
            .map_or(Val::Error, |spec| Val::Environment(Rc::new(spec)))
    }

    /// The declaration of a verifier or an environment, its options evaluated; `None` after a
    /// reported error.
    fn endpoint(
        &mut self,
        r: ItemRef,
        kind: Endpoint,
        item_name: &ast::Ident,
        def: &ast::Definition,
    ) -> Option<VerifierSpec> {
        let m = self.modules.get(r.module);
        let mut frame = Frame::new(r.module, m.file, false);
        let file = frame.file;
        let help = kind.example();
        let e = match def {
            ast::Definition::Expr(e) => e,
            ast::Definition::Fields(block) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!("{} is defined with `=`", kind.a()),
                        file,
                        block.span,
                    )
                    .primary_label(format!("not {}", kind.a()))
                    .help(help),
                );
                return None;
            }
        };
        let call = match &e.kind {
            ExprKind::Call {
                callee,
                args,
                closure: None,
            } => match &callee.kind {
                ExprKind::Name(n) if n.name == "program" || n.name == "http" => {
                    Some((n.name == "http", args))
                }
                _ => None,
            },
            _ => None,
        };
        let Some((http, args)) = call else {
            self.diags.push(
                Diagnostic::new(
                    Code::TypeMismatch,
                    format!(
                        "{} is `program(…)` (a command) or `http(…)` (a server's URL)",
                        kind.a()
                    ),
                    file,
                    e.span,
                )
                .primary_label(format!("not {}", kind.a()))
                .help(help),
            );
            return None;
        };
        let mut spec = VerifierSpec {
            name: item_name.name.clone(),
            endpoint: VerifierEndpoint::Http(String::new()),
            workers: 1,
            batch: 64,
            timeout_ms: 60_000,
            cpu_seconds: 0,
            memory_bytes: 1 << 30,
            file_bytes: 64 << 20,
            processes: 16,
            network: false,
            on_error_zero: false,
            fields: Vec::new(),
            metrics: Vec::new(),
            origin: self.origin(&frame, item_name.span),
        };
        let mut ok = true;
        // Positional: the command and its arguments, or the URL.
        let mut words = Vec::new();
        for a in args.iter().filter(|a| a.name.is_none()) {
            match self.expr(&mut frame, &a.value) {
                Val::Str(Some(s)) => words.push(s),
                Val::Error => ok = false,
                other => {
                    ok = false;
                    self.diags.push(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            format!(
                                "{} is a string, found {}",
                                if http {
                                    "the URL"
                                } else {
                                    "each word of the command"
                                },
                                other.describe()
                            ),
                            file,
                            a.value.span,
                        )
                        .primary_label("not a string"),
                    );
                }
            }
        }
        if http {
            match words.as_slice() {
                [url] if url.starts_with("http://") || url.starts_with("https://") => {
                    spec.endpoint = VerifierEndpoint::Http(url.clone());
                }
                [url] => {
                    ok = false;
                    self.setting(
                        file,
                        args.iter().find(|a| a.name.is_none()).unwrap().value.span,
                        format!("{url:?} is not an HTTP URL"),
                        "not `http://…` or `https://…`",
                    );
                }
                _ if ok => {
                    ok = false;
                    self.diags.push(
                        Diagnostic::new(Code::WrongArity, "`http` takes one URL", file, e.span)
                            .primary_label(format!("{} URLs", words.len()))
                            .help("write `http(\"http://127.0.0.1:8000/score\")`"),
                    );
                }
                _ => {}
            }
        } else if words.is_empty() && ok {
            ok = false;
            self.diags.push(
                Diagnostic::new(
                    Code::WrongArity,
                    "`program` takes the command to run",
                    file,
                    e.span,
                )
                .primary_label("no command")
                .help("write `program(\"python3\", \"answer.py\")`"),
            );
        } else if words.first().is_some_and(String::is_empty) {
            ok = false;
            self.setting(
                file,
                args.iter().find(|a| a.name.is_none()).unwrap().value.span,
                "the command is empty".into(),
                "no program",
            );
        } else {
            spec.endpoint = VerifierEndpoint::Program(words);
        }
        // Named options.
        let mut seen: Vec<&ast::Ident> = Vec::new();
        let mut cpu_written = false;
        for a in args {
            let Some(name) = &a.name else { continue };
            if let Some(prev) = seen.iter().find(|p| p.name == name.name) {
                ok = false;
                self.diags.push(
                    Diagnostic::new(
                        Code::DuplicateName,
                        format!("`{}` is set twice", name.name),
                        file,
                        name.span,
                    )
                    .primary_label("set again here")
                    .label(file, prev.span, "first set here"),
                );
                continue;
            }
            seen.push(name);
            let known = kind.options().contains(&name.name.as_str());
            if !known || (http && PROCESS_OPTIONS.contains(&name.name.as_str())) {
                ok = false;
                let mut d = Diagnostic::new(
                    Code::UnknownVerifierOption,
                    match kind {
                        Endpoint::Verifier => format!(
                            "`{}` is not an option of `{}`",
                            name.name,
                            if http { "http" } else { "program" }
                        ),
                        Endpoint::Environment => format!(
                            "`{}` is not an option of an environment's `{}`",
                            name.name,
                            if http { "http" } else { "program" }
                        ),
                    },
                    file,
                    name.span,
                )
                .primary_label("unknown option");
                d = if known {
                    d.help("the limits of a worker process (`cpu`, `memory`, `files`, `processes`, `network`) do not apply to an HTTP server")
                } else if kind == Endpoint::Environment && name.name == "metrics" {
                    d.help("an environment has no metrics: the rewards it gives each turn are summed into the rollout's `env_reward`")
                } else {
                    let names = kind
                        .options()
                        .iter()
                        .copied()
                        .filter(|o| !http || !PROCESS_OPTIONS.contains(o));
                    match rlc_syntax::closest(&name.name, names, 2) {
                        Some(near) => crate::hints::did_you_mean(d, near),
                        None => d.help(match (kind, http) {
                            (Endpoint::Verifier, true) => {
                                "the options are workers, batch, timeout, on_error, fields and metrics"
                            }
                            (Endpoint::Verifier, false) => {
                                "the options are workers, batch, timeout, on_error, fields, metrics, cpu, memory, files, processes and network"
                            }
                            (Endpoint::Environment, true) => {
                                "the options are workers, batch, timeout, on_error and fields"
                            }
                            (Endpoint::Environment, false) => {
                                "the options are workers, batch, timeout, on_error, fields, cpu, memory, files, processes and network"
                            }
                        }),
                    }
                };
                self.diags.push(d);
                continue;
            }
            let value = &a.value;
            match name.name.as_str() {
                "workers" | "batch" | "processes" => {
                    let Some(n) =
                        self.quantity(&mut frame, kind, &name.name, value, Quantity::Count)
                    else {
                        ok = false;
                        continue;
                    };
                    let cap = if name.name == "processes" {
                        u64::MAX
                    } else {
                        u64::from(u32::MAX)
                    };
                    if n > cap as f64 {
                        ok = false;
                        self.setting(
                            file,
                            value.span,
                            format!("`{}` is too large", name.name),
                            "out of range",
                        );
                        continue;
                    }
                    match name.name.as_str() {
                        "workers" => spec.workers = n as u32,
                        "batch" => spec.batch = n as u32,
                        _ => spec.processes = n as u64,
                    }
                }
                "timeout" | "cpu" => {
                    let Some(secs) =
                        self.quantity(&mut frame, kind, &name.name, value, Quantity::Duration)
                    else {
                        ok = false;
                        continue;
                    };
                    if name.name == "timeout" {
                        spec.timeout_ms = (secs * 1000.0).ceil() as u64;
                    } else {
                        cpu_written = true;
                        spec.cpu_seconds = secs.ceil() as u64;
                    }
                }
                "memory" | "files" => {
                    let Some(bytes) =
                        self.quantity(&mut frame, kind, &name.name, value, Quantity::Bytes)
                    else {
                        ok = false;
                        continue;
                    };
                    if name.name == "memory" {
                        spec.memory_bytes = bytes as u64;
                    } else {
                        spec.file_bytes = bytes as u64;
                    }
                }
                "network" => match self.expr(&mut frame, value) {
                    Val::Bool(Some(b)) => spec.network = b,
                    Val::Error => ok = false,
                    other => {
                        ok = false;
                        self.setting(
                            file,
                            value.span,
                            format!("`network` is `true` or `false`, found {}", other.describe()),
                            "not a boolean",
                        );
                    }
                },
                "on_error" => {
                    let word = match &value.kind {
                        ExprKind::Name(n) => Some(n.name.as_str()),
                        ExprKind::Str(s) => Some(s.value.as_str()),
                        _ => None,
                    };
                    match word {
                        Some("fail") => spec.on_error_zero = false,
                        Some("zero") => spec.on_error_zero = true,
                        _ => {
                            ok = false;
                            self.setting(
                                file,
                                value.span,
                                "`on_error` is `fail` (stop the run) or `zero` (score the sample 0 and count it)".into(),
                                "not a policy",
                            );
                        }
                    }
                }
                "fields" | "metrics" => {
                    let v = self.expr(&mut frame, value);
                    if v.is_error() {
                        ok = false;
                        continue;
                    }
                    let ctx = builtins::Ctx {
                        file,
                        call: e.span,
                        name: &name.name,
                        axis: None,
                    };
                    match builtins::string_list(&ctx, &v, value.span, &name.name) {
                        Ok(list) if name.name == "fields" => {
                            let spans = match &value.kind {
                                ExprKind::List(items) => items.iter().map(|x| x.span).collect(),
                                _ => vec![value.span; list.len()],
                            };
                            spec.fields = list.into_iter().zip(spans).collect();
                        }
                        Ok(list) => {
                            if list.iter().any(|m| m == "reward") {
                                ok = false;
                                self.setting(
                                    file,
                                    value.span,
                                    "`reward` is always part of the result; a metric needs another name".into(),
                                    "reserved name",
                                );
                                continue;
                            }
                            spec.metrics = list;
                        }
                        Err(d) => {
                            ok = false;
                            self.diags.push(*d);
                        }
                    }
                }
                _ => unreachable!("an option of OPTIONS"),
            }
        }
        if !ok {
            return None;
        }
        if !cpu_written {
            spec.cpu_seconds = spec.timeout_ms.div_ceil(1000);
        }
        Some(spec)
    }

    /// An option's number, checked positive: a count (an integer), a duration in seconds (a
    /// number with `ms`, `s` or `min`) or a size in bytes (an integer, or a number with a byte
    /// unit). `None` after a reported error.
    fn quantity(
        &mut self,
        frame: &mut Frame,
        kind: Endpoint,
        what: &str,
        e: &Expr,
        q: Quantity,
    ) -> Option<f64> {
        let file = frame.file;
        let v = self.expr(frame, e);
        if v.is_error() {
            return None;
        }
        let unit = literal_unit(e);
        let expected = match q {
            Quantity::Count => "a whole number",
            Quantity::Duration => "a duration such as `10s` or `500ms`",
            Quantity::Bytes => "a size such as `512MiB`",
        };
        let fits = match (q, unit) {
            (Quantity::Count, None) => matches!(v, Val::Int(Some(_))),
            (Quantity::Duration, Some(u)) => u.is_time(),
            (Quantity::Bytes, None) => matches!(v, Val::Int(Some(_))),
            (Quantity::Bytes, Some(u)) => u.is_bytes(),
            _ => false,
        };
        let Some(x) = v.as_float().filter(|_| fits) else {
            let mut d = Diagnostic::new(
                Code::VerifierSetting,
                format!("`{what}` is {expected}, found {}", v.describe()),
                file,
                e.span,
            )
            .primary_label(format!("not {expected}"));
            if q == Quantity::Duration && unit.is_none() && v.as_float().is_some() {
                d = d.help(format!(
                    "give it a unit: `{what}: {}s`",
                    v.as_float().unwrap()
                ));
            }
            self.diags.push(d);
            return None;
        };
        if x <= 0.0 || !x.is_finite() {
            let zero_means = match what {
                "workers" => format!("{} needs at least one worker", kind.a()),
                "batch" => "a request carries at least one sample".into(),
                "timeout" => "a request that may take no time always times out".into(),
                _ => "a limit of zero lets a worker do nothing".into(),
            };
            self.diags.push(
                Diagnostic::new(
                    Code::VerifierSetting,
                    format!("`{what}` must be positive, found {x}"),
                    file,
                    e.span,
                )
                .primary_label("not positive")
                .help(zero_means),
            );
            return None;
        }
        if q == Quantity::Bytes && x.fract() != 0.0 {
            self.setting(
                file,
                e.span,
                format!("`{what}` is a whole number of bytes"),
                "not whole bytes",
            );
            return None;
        }
        if x >= 9e15 {
            self.setting(
                file,
                e.span,
                format!("`{what}` is too large"),
                "out of range",
            );
            return None;
        }
        Some(x)
    }

    fn setting(&mut self, file: FileId, span: Span, message: String, label: &str) {
        self.diags
            .push(Diagnostic::new(Code::VerifierSetting, message, file, span).primary_label(label));
    }

    /// `answer(rollout)` in a pipeline: the reward `f32[B]`, or a record of the reward and the
    /// declared metrics.
    pub(super) fn verifier_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        v: Rc<VerifierSpec>,
        args: &[ast::Arg],
    ) -> Val {
        let file = frame.file;
        if !frame.in_pipeline {
            self.eval_args(frame, args);
            return self.err(
                Diagnostic::new(
                    Code::VerifierOutsidePipeline,
                    format!(
                        "the verifier `{}` runs during training: it is called in the pipeline",
                        v.name
                    ),
                    file,
                    e.span,
                )
                .primary_label("called outside the pipeline")
                .label(v.origin.file, v.origin.span, "declared here")
                .help("a `fn` is a tensor kernel; call the verifier in the pipeline and pass its reward to the `fn`"),
            );
        }
        let what = format!("`{}`", v.name);
        let Some(bound) = self.bind_args(frame, e.span, &what, &[("rollout", true)], args) else {
            self.eval_args(frame, args);
            return Val::Error;
        };
        let arg = bound[0].unwrap();
        let (record, info) = match self.expr(frame, &arg.value) {
            Val::Rollout(r, info) => (r, info),
            Val::Error => return Val::Error,
            other => {
                return self.err(
                    Diagnostic::new(
                        Code::VerifierNotRollout,
                        format!(
                            "the verifier `{}` scores a rollout, found {}",
                            v.name,
                            other.describe()
                        ),
                        file,
                        arg.value.span,
                    )
                    .primary_label("not a rollout")
                    .label(v.origin.file, v.origin.span, "declared here")
                    .help("pass what `generate(…)` returned: `let r = policy.generate(prompts, n: 8, max_new: 8)` then `answer(r)`"),
                );
            }
        };
        let dataset = info.dataset.clone();
        let ok = self.fields_kept(file, arg.value.span, Endpoint::Verifier, &v, &dataset);
        let Some(rows) = rollout_rows(&record) else {
            return Val::Error;
        };
        if !ok {
            return Val::Error;
        }
        self.program
            .record_verifier_call(file, e.span, &v, &dataset);
        self.verifier_exprs.insert((file, e.span));
        let reward = Val::Tensor(TensorTy {
            dtype: DType::F32,
            dims: vec![rows],
        });
        if v.metrics.is_empty() {
            return reward;
        }
        let mut fields = vec![("reward".to_string(), reward.clone())];
        fields.extend(v.metrics.iter().map(|m| (m.clone(), reward.clone())));
        Val::Record(Rc::new(RecordVal {
            name: VERIFIER_RESULT.into(),
            fields,
        }))
    }

    /// E1003: every field the verifier or environment `v` asks for is one the rows of
    /// `dataset` keep; `at` is the argument that brings the rows (the rollout, the prompts).
    pub(super) fn fields_kept(
        &mut self,
        file: FileId,
        at: Span,
        kind: Endpoint,
        v: &VerifierSpec,
        dataset: &crate::value::DatasetSpec,
    ) -> bool {
        let mut ok = true;
        for (field, span) in &v.fields {
            if dataset.keep.contains(field) {
                continue;
            }
            ok = false;
            let have = if dataset.keep.is_empty() {
                "no fields besides the prompt".to_string()
            } else {
                format!(
                    "the fields {}",
                    dataset
                        .keep
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let mut d = Diagnostic::new(
                Code::VerifierField,
                format!(
                    "the {} `{}` asks for the field `{field}`, which rows of `{}` do not have",
                    kind.keyword(),
                    v.name,
                    dataset.name
                ),
                file,
                at,
            )
            .primary_label(format!("rows of `{}` carry {have}", dataset.name))
            .label(v.origin.file, *span, "asked for here")
            .label(
                dataset.origin.file,
                dataset.origin.span,
                "the dataset is declared here",
            );
            d = if dataset.kind == "jsonl" {
                d.help(format!(
                    "keep the field from the file's lines: `jsonl(…, keep: [\"{field}\"])`"
                ))
            } else {
                d.help("the digit tasks' rows have the field `answer` (the target text)")
            };
            self.diags.push(d);
        }
        ok
    }

    /// Whether `e` is a verifier's reward or result: its call, a pipeline name bound to one, or
    /// a field of such a name.
    pub(super) fn is_verifier_result(&self, frame: &Frame, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Paren(inner) => self.is_verifier_result(frame, inner),
            ExprKind::Call { .. } => self.verifier_exprs.contains(&(frame.file, e.span)),
            ExprKind::Name(n) => frame.in_pipeline && self.verifier_names.contains(&n.name),
            ExprKind::Member { base, .. } => self.is_verifier_result(frame, base),
            _ => false,
        }
    }

    /// A pipeline `let`: remembers whether the name holds a verifier's result.
    pub(crate) fn note_verifier_binding(&mut self, frame: &Frame, name: &str, value: &Expr) {
        if self.is_verifier_result(frame, value) {
            self.verifier_names.insert(name.to_string());
        } else {
            self.verifier_names.remove(name);
        }
    }

    /// E1006: a verifier's result record where a tensor is needed.
    pub(crate) fn record_as_reward(&mut self, frame: &Frame, v: &Val, span: Span) -> bool {
        let Val::Record(r) = v else { return false };
        if r.name != VERIFIER_RESULT {
            return false;
        }
        let metrics: Vec<&str> = r.fields[1..].iter().map(|(n, _)| n.as_str()).collect();
        self.diags.push(
            Diagnostic::new(
                Code::VerifierRecordAsReward,
                "a verifier with metrics returns a record, not its reward",
                frame.file,
                span,
            )
            .primary_label(format!(
                "a record of `reward` and {}",
                metrics
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .help("read the reward as `.reward` (and each metric by its name)"),
        );
        true
    }

    /// E1005: a verifier's `f32[B]` reward passed where a `f32[B, T]` is wanted.
    pub(super) fn sequence_reward_per_token(
        &mut self,
        frame: &Frame,
        arg: &Expr,
        want: &TensorTy,
        found: &TensorTy,
        param: (FileId, Span),
    ) -> bool {
        if want.dims.len() != 2 || found.dims.len() != 1 || !self.is_verifier_result(frame, arg) {
            return false;
        }
        self.diags.push(
            Diagnostic::new(
                Code::SequenceRewardPerToken,
                format!("a verifier gives one reward per sequence (`{found}`); this parameter takes one per token (`{want}`)"),
                frame.file,
                arg.span,
            )
            .primary_label("a reward per sequence")
            .label(param.0, param.1, "per-token parameter declared here")
            .help("broadcast it: onto the last token with `where(rollout.last, reward, 0.0)`, or onto every token with `per_token(reward, rollout.mask)` (std.algo); or use a sequence-level estimator such as `grpo_advantage(reward, …)`"),
        );
        true
    }
}

/// The unit of a number literal, through parentheses and a sign.
fn literal_unit(e: &Expr) -> Option<Unit> {
    match &e.kind {
        ExprKind::Number(n) => n.unit,
        ExprKind::Paren(inner) => literal_unit(inner),
        ExprKind::Unary { operand, .. } => literal_unit(operand),
        _ => None,
    }
}
