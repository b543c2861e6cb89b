//! The learning-rate schedule against the run: a warm-up must end before the optimizer steps
//! the pipeline takes do. The count is the runtime's (`rlc run` sizes the schedule the same
//! way): `steps` loop iterations × Σ over the model's `update` calls of epochs × minibatches
//! (⌈batch / minibatch⌉).

use crate::program::*;
use rlc_diagnostics::{Code, Diagnostic};

pub fn check(program: &Program, diags: &mut Vec<Diagnostic>) {
    let Some(pipeline) = &program.pipeline else {
        return;
    };
    let Some(steps) = pipeline.steps.and_then(|s| u64::try_from(s).ok()) else {
        return;
    };
    if steps == 0 {
        return;
    }
    for (index, model) in program.models.iter().enumerate() {
        let Some(optimizer) = model.optimizer.as_ref().filter(|_| !model.frozen) else {
            continue;
        };
        if optimizer.warmup == 0 {
            continue;
        }
        let updates: Vec<&RoleCall> = pipeline
            .calls
            .iter()
            .filter(|c| c.model == index && c.op == Op::Update)
            .collect();
        // Each update's optimizer steps per loop iteration, when the text decides them (an
        // unknown batch, or one the batch check rejects, leaves the count to others).
        let Some(per_update) = updates
            .iter()
            .map(|c| optimizer_steps(c))
            .collect::<Option<Vec<(u64, u64)>>>()
        else {
            continue;
        };
        let Some(per_step) = per_update
            .iter()
            .try_fold(0u64, |sum, (e, m)| sum.checked_add(e.checked_mul(*m)?))
        else {
            continue;
        };
        if per_step == 0 {
            continue;
        }
        let Some(total) = steps.checked_mul(per_step) else {
            continue;
        };
        if optimizer.warmup < total {
            continue;
        }
        let at = program
            .warmup_origins
            .get(&model.name)
            .copied()
            .unwrap_or(model.origin);
        let mut d = Diagnostic::new(
            Code::WarmupOutlastsRun,
            format!(
                "the learning rate of `{}` warms up over {} optimizer steps, but the run takes {total}",
                model.name, optimizer.warmup
            ),
            at.file,
            at.span,
        )
        .primary_label(format!("warm-up of {} steps", optimizer.warmup))
        .label(
            pipeline.origin.file,
            pipeline.origin.span,
            format!("runs {steps} steps"),
        );
        for (call, &(epochs, minibatches)) in updates.iter().zip(&per_update) {
            d = d.label(
                call.origin.file,
                call.origin.span,
                format!(
                    "{epochs} epoch{} × {minibatches} minibatch{} per loop step",
                    plural(epochs),
                    if minibatches == 1 { "" } else { "es" }
                ),
            );
        }
        let fits = total.div_ceil(10).max(1);
        d = d
            .note(format!(
                "{steps} steps × {per_step} optimizer step{} each = {total}: the learning rate would still be rising at the last one and never reach its peak of {}",
                plural(per_step),
                optimizer.lr
            ))
            .help(format!(
                "use a warm-up below {total} (a common choice is a few percent to a tenth of the run: `warmup: {fits}`), or run more steps"
            ));
        diags.push(d);
    }
}

/// `(epochs, minibatches)` of one `update` call per loop iteration (minibatches:
/// ⌈batch / minibatch⌉), each minibatch one optimizer step.
fn optimizer_steps(call: &RoleCall) -> Option<(u64, u64)> {
    let batch = u64::try_from(call.batch?.value).ok()?;
    let epochs = u64::try_from(call.epochs.map_or(1, |e| e.value)).ok()?;
    let minibatch = match call.minibatch {
        Some(m) => u64::try_from(m.value)
            .ok()
            .filter(|m| (1..=batch).contains(m))?,
        None => batch,
    };
    if epochs == 0 || minibatch == 0 {
        return None;
    }
    Some((epochs, batch.div_ceil(minibatch)))
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(batch: Option<i64>, epochs: Option<i64>, minibatch: Option<i64>) -> RoleCall {
        let at = |value| Sourced {
            value,
            origin: Origin::default(),
        };
        RoleCall {
            model: 0,
            op: Op::Update,
            batch: batch.map(at),
            prompt_len: None,
            response_len: None,
            sampling: None,
            epochs: epochs.map(at),
            minibatch: minibatch.map(at),
            reads_behaviour_logp: false,
            origin: Origin::default(),
        }
    }

    #[test]
    fn optimizer_steps_are_epochs_times_minibatches_as_the_runtime_counts_them() {
        assert_eq!(
            optimizer_steps(&update(Some(64), Some(2), Some(16))),
            Some((2, 4))
        );
        // No minibatch: the whole batch is one; no epochs: one.
        assert_eq!(optimizer_steps(&update(Some(64), None, None)), Some((1, 1)));
        // A last, smaller minibatch is a step of its own (⌈100 / 30⌉ = 4).
        assert_eq!(
            optimizer_steps(&update(Some(100), Some(1), Some(30))),
            Some((1, 4))
        );
    }

    #[test]
    fn counts_the_text_does_not_decide_are_left_to_other_checks() {
        assert_eq!(optimizer_steps(&update(None, Some(1), Some(16))), None);
        assert_eq!(optimizer_steps(&update(Some(64), Some(0), Some(16))), None);
        assert_eq!(optimizer_steps(&update(Some(64), Some(1), Some(0))), None);
        assert_eq!(optimizer_steps(&update(Some(64), Some(1), Some(65))), None);
    }
}
