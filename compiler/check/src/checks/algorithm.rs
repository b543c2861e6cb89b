//! Algorithm sanity: sampling settings that make sense, and sequences that fit the context.
//! (A group estimator fed one sample per prompt is caught where the call is evaluated.)

use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    let Some(pipeline) = &program.pipeline else {
        return;
    };
    for call in &pipeline.calls {
        let model = &program.models[call.model];
        if let Some(s) = &call.sampling {
            if s.temperature.value <= 0.0 {
                diags.push(
                    Diagnostic::new(Code::NonPositiveTemperature, format!("temperature {} cannot sample", s.temperature.value), s.temperature.origin.file, s.temperature.origin.span)
                        .primary_label("must be above 0")
                        .help("sampling divides the logits by the temperature; for greedy decoding use `top_k: 1`"),
                );
            }
            if !(s.top_p.value > 0.0 && s.top_p.value <= 1.0) {
                diags.push(
                    Diagnostic::new(
                        Code::InvalidSampling,
                        format!("top_p {:?} is outside (0, 1]", s.top_p.value),
                        s.top_p.origin.file,
                        s.top_p.origin.span,
                    )
                    .primary_label("not a probability mass"),
                );
            }
            for (what, v) in [("n", s.n), ("max_new", s.max_new)] {
                if v.value < 1 {
                    diags.push(
                        Diagnostic::new(
                            Code::InvalidSampling,
                            format!("`{what}: {}` generates nothing", v.value),
                            v.origin.file,
                            v.origin.span,
                        )
                        .primary_label("must be at least 1"),
                    );
                }
            }
            if let Some(k) = s.top_k
                && k.value < 1
            {
                diags.push(
                    Diagnostic::new(
                        Code::InvalidSampling,
                        format!("`top_k: {}` keeps no token", k.value),
                        k.origin.file,
                        k.origin.span,
                    )
                    .primary_label("must be at least 1")
                    .help(format!(
                        "`top_k: {}` does not turn top-k off here: leave `top_k` out to sample from the whole vocabulary (`top_k: 1` is greedy)",
                        k.value
                    )),
                );
            }
        }
        let env = call
            .sampling
            .as_ref()
            .and_then(|s| Some((s, s.env.as_ref()?)));
        if let Some((sampling, env)) = env {
            // A multi-turn rollout: its own rule, whose labels name the turns.
            env_context(program, call, sampling, env, diags);
            continue;
        }
        if call.op == Op::Generate
            && let (Some(arch), Some(response)) = (&model.arch, call.response_len)
            && call.prompt_len.is_none()
            && response.value as u64 > arch.max_len
        {
            diags.push(
                Diagnostic::new(
                    Code::SequenceTooLong,
                    format!(
                        "{} new tokens alone exceed the context of `{}` ({})",
                        response.value, model.name, arch.max_len
                    ),
                    response.origin.file,
                    response.origin.span,
                )
                .primary_label(format!("{} new tokens", response.value))
                .label(
                    model.arch_origin.file,
                    model.arch_origin.span,
                    format!("max_len {}", arch.max_len),
                )
                .help(format!(
                    "lower `max_new` below {}, leaving room for the prompt",
                    arch.max_len
                )),
            );
        }
        if call.op == Op::Generate
            && let (Some(arch), Some(prompt), Some(response)) =
                (&model.arch, call.prompt_len, call.response_len)
            && (prompt.value + response.value) as u64 > arch.max_len
        {
            diags.push(
                Diagnostic::new(
                    Code::SequenceTooLong,
                    format!(
                        "prompts of up to {} tokens plus {} new tokens need {} positions, but `{}` has a context of {}",
                        prompt.value,
                        response.value,
                        prompt.value + response.value,
                        model.name,
                        arch.max_len
                    ),
                    response.origin.file,
                    response.origin.span,
                )
                .primary_label(format!("{} new tokens", response.value))
                .label(prompt.origin.file, prompt.origin.span, format!("prompts of up to {} tokens", prompt.value))
                .label(model.arch_origin.file, model.arch_origin.span, format!("max_len {}", arch.max_len))
                .help(format!("lower `max_new` to {} or raise `max_len`", arch.max_len.saturating_sub(prompt.value as u64))),
            );
        }
    }
}

/// E1011: the longest episode of a multi-turn `generate` — the prompt, `max_turns` turns of
/// `max_new` tokens and an observation of `max_obs` tokens between two turns — fits the model's
/// context. Without a known prompt length the turns and observations alone are checked.
fn env_context(
    program: &Program,
    call: &RoleCall,
    sampling: &Sampling,
    env: &EnvSampling,
    diags: &mut Vec<Diagnostic>,
) {
    let model = &program.models[call.model];
    let (Some(arch), Some(response)) = (&model.arch, call.response_len) else {
        return;
    };
    let prompt = call.prompt_len.map_or(0, |p| p.value);
    let need = prompt.saturating_add(response.value);
    if need <= 0 || need as u64 <= arch.max_len {
        return;
    }
    let (turns, new, obs) = (
        env.max_turns.value,
        sampling.max_new.value,
        env.max_obs.value,
    );
    let sum = format!(
        "{turns} × {new} + {} × {obs}{}",
        turns - 1,
        call.prompt_len
            .map_or(String::new(), |p| format!(" + a prompt of {}", p.value))
    );
    let mut d = Diagnostic::new(
        Code::EnvContext,
        format!(
            "episodes of up to {turns} turns need {need} positions ({sum}), but `{}` has a context of {}",
            model.name, arch.max_len
        ),
        call.origin.file,
        call.origin.span,
    )
    .primary_label(format!("{need} positions"))
    .label(
        env.max_turns.origin.file,
        env.max_turns.origin.span,
        format!("{turns} turns"),
    )
    .label(
        model.arch_origin.file,
        model.arch_origin.span,
        format!("max_len {}", arch.max_len),
    );
    if let Some(p) = call.prompt_len {
        d = d.label(
            p.origin.file,
            p.origin.span,
            format!("prompts of up to {} tokens", p.value),
        );
    }
    diags.push(d.help(
        "each turn's tokens and each observation stay in the context: lower `max_turns`, `max_new` or `max_obs`, or raise `max_len`",
    ));
}
