//! Multi-turn rollouts: `generate(…, env: calc, max_turns: 3, max_obs: 6)` names an
//! `environment` item (declared like a verifier, see `verifiers.rs`), the two budgets it needs,
//! the fields its requests carry; and an environment called like a function (E1008).

use super::verifiers::Endpoint;
use super::*;

impl Evaluator<'_> {
    /// E1008: `calc(rollout)`. An environment answers turns during generation; it is not a
    /// function of a finished rollout.
    pub(super) fn environment_call(
        &mut self,
        frame: &mut Frame,
        e: &Expr,
        env: Rc<EnvironmentSpec>,
        args: &[ast::Arg],
    ) -> Val {
        self.eval_args(frame, args);
        self.err(
            Diagnostic::new(
                Code::EnvironmentCalled,
                format!(
                    "the environment `{}` is not a function: it answers the policy's turns while `generate` runs",
                    env.name
                ),
                frame.file,
                e.span,
            )
            .primary_label("an environment called")
            .label(env.origin.file, env.origin.span, "declared here")
            .help(format!(
                "name it in the generation: `policy.generate(prompts, max_new: 8, env: {}, max_turns: 3, max_obs: 16)`, and read the sum of its rewards as `rollout.env_reward`",
                env.name
            )),
        )
    }

    /// The multi-turn options of a `generate` call (`env`, `max_turns`, `max_obs`, in that
    /// order): `Ok(None)` for a single-turn call, `Err(())` after a reported error. `prompts`
    /// is the argument that brings the dataset's rows (the fields the environment asks for).
    pub(super) fn generate_env(
        &mut self,
        frame: &mut Frame,
        call: Span,
        dataset: &DatasetSpec,
        prompts: Span,
        [env, turns, obs]: [Option<&ast::Arg>; 3],
    ) -> Result<Option<EnvSampling>, ()> {
        let file = frame.file;
        let Some(env) = env else {
            let mut ok = true;
            for (what, a) in [("max_turns", turns), ("max_obs", obs)] {
                let Some(a) = a else { continue };
                ok = false;
                if self.expr(frame, &a.value).is_error() {
                    continue;
                }
                self.diags.push(
                    Diagnostic::new(
                        Code::EnvTurns,
                        format!("`{what}` applies to a multi-turn rollout, and this `generate` has no `env:`"),
                        file,
                        a.span,
                    )
                    .primary_label("without `env:`")
                    .help(format!(
                        "name the environment that answers each turn (`env: calc, max_turns: 3, max_obs: 16`), or leave `{what}` out"
                    )),
                );
            }
            return if ok { Ok(None) } else { Err(()) };
        };
        let spec = match self.expr(frame, &env.value) {
            Val::Environment(spec) => Some(spec),
            Val::Error => None,
            other => {
                let mut d = Diagnostic::new(
                    Code::NotAnEnvironment,
                    format!(
                        "`env:` names the environment that answers each turn, found {}",
                        other.describe()
                    ),
                    file,
                    env.value.span,
                )
                .primary_label("not an environment");
                d = if let Val::Verifier(v) = &other {
                    d.label(v.origin.file, v.origin.span, "declared a verifier here")
                        .help(format!(
                            "a verifier scores a finished rollout (`{}(rollout)`); to answer turns declare `environment {} = program(…)`",
                            v.name, v.name
                        ))
                } else {
                    d.help("declare one, `environment calc = program(\"python3\", \"calc.py\")`, and write `env: calc`")
                };
                self.diags.push(d);
                None
            }
        };
        // Each budget: `None` when not written, `Some(Err(()))` after a reported error.
        let max_turns = turns.map(|a| self.turn_budget(frame, "max_turns", a));
        let max_obs = obs.map(|a| self.turn_budget(frame, "max_obs", a));
        let missing: Vec<&str> = [
            ("max_turns", max_turns.is_none()),
            ("max_obs", max_obs.is_none()),
        ]
        .into_iter()
        .filter_map(|(what, missing)| missing.then_some(what))
        .collect();
        if !missing.is_empty() {
            let names = missing
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(" and ");
            self.diags.push(
                Diagnostic::new(
                    Code::EnvTurns,
                    format!("a multi-turn `generate` needs {names}"),
                    file,
                    call,
                )
                .primary_label(format!("{names} missing"))
                .label(file, env.span, "multi-turn because of this")
                .help("bound the episode: `max_turns: 3` turns of at most `max_new` tokens, with observations of at most `max_obs: 16` tokens between them"),
            );
            return Err(());
        }
        let (Some(spec), Some(Ok(max_turns)), Some(Ok(max_obs))) = (spec, max_turns, max_obs)
        else {
            return Err(());
        };
        if !self.fields_kept(file, prompts, Endpoint::Environment, &spec, dataset) {
            return Err(());
        }
        self.program
            .environments
            .entry(spec.name.clone())
            .or_insert_with(|| (*spec).clone());
        self.program
            .datasets
            .entry(dataset.name.clone())
            .or_insert_with(|| dataset.clone());
        Ok(Some(EnvSampling {
            environment: spec.name.clone(),
            origin: self.origin(frame, env.span),
            max_turns,
            max_obs,
        }))
    }

    /// `max_turns:` or `max_obs:` (`what`): a whole number of at least 1, known before the job
    /// starts (E1010).
    fn turn_budget(
        &mut self,
        frame: &mut Frame,
        what: &str,
        a: &ast::Arg,
    ) -> Result<Sourced<i64>, ()> {
        let (v, origin) = self
            .const_arg(frame, Some(a), what, Val::Int(None))
            .ok_or(())?;
        let (message, label) = match v.as_int() {
            Some(value) if value >= 1 => return Ok(Sourced { value, origin }),
            Some(n) => (
                format!(
                    "`{what}: {n}` leaves no room for {}",
                    if what == "max_turns" {
                        "a turn"
                    } else {
                        "an observation"
                    }
                ),
                "must be at least 1",
            ),
            None => (
                format!("`{what}` is a whole number, found {}", v.describe()),
                "not a whole number",
            ),
        };
        self.diags.push(
            Diagnostic::new(Code::EnvTurns, message, frame.file, a.value.span).primary_label(label),
        );
        Err(())
    }
}
