//! Log-probs the sampler already computed: a `role.logprobs(rollout)` whose rollout comes from
//! `role.generate` in the same step, on weights no update of the role has changed since, takes
//! the log-probs the generator recorded for each sampled token (of the raw, untempered logits)
//! instead of running a forward pass over the rollout again. Marked on `f32` roles only, where
//! the two agree to rounding (the KV-cached decode and the full forward sum in another order).

use std::collections::BTreeSet;

use crate::model::{OpKind, Plan, Precision};

/// Sets `from_sampling` on each `logprobs` op that can take the sampler's log-probs.
pub(super) fn sampling_logprobs(plan: &mut Plan) {
    let marks: Vec<(usize, u32)> = plan
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, _)| Some((i, source(plan, i)?)))
        .filter(|&(i, _)| plan.ops[i].every.is_none())
        .collect();
    for (i, generate) in marks {
        if let OpKind::Logprobs { from_sampling, .. } = &mut plan.ops[i].kind {
            *from_sampling = Some(generate);
        }
    }
}

/// `rlc build/run --forward-logprobs`: every `logprobs` op runs its forward pass, none takes
/// the sampler's log-probs (`from_sampling` cleared), and the ranks' programs are ordered
/// again under the costs that changes. For comparing the two; the plan stays valid.
pub fn forward_logprobs(plan: &mut Plan) {
    let mut changed = false;
    for op in &mut plan.ops {
        if let OpKind::Logprobs { from_sampling, .. } = &mut op.kind {
            changed |= from_sampling.take().is_some();
        }
    }
    if changed {
        super::schedule_ranks(plan);
    }
}

/// The `generate` op whose log-probs op `i` may take, if any.
fn source(plan: &Plan, i: usize) -> Option<u32> {
    let op = &plan.ops[i];
    let OpKind::Logprobs { role, .. } = &op.kind else {
        return None;
    };
    let r = plan.roles.iter().find(|r| &r.name == role)?;
    if r.precision != Precision::F32 {
        return None;
    }
    // The rollout as read (a whole value, not a field), back through the transfers that
    // re-laid it, to its producer.
    let input = op.inputs.first().filter(|input| input.field.is_none())?;
    let mut producer = plan.values.get(input.value as usize)?.producer?;
    // Each step back goes to another op: at most as many as there are.
    for back in 0..=plan.ops.len() {
        if back == plan.ops.len() {
            return None;
        }
        let p = plan.ops.get(producer as usize)?;
        match &p.kind {
            OpKind::Transfer { value, .. } => {
                producer = plan.values.get(*value as usize)?.producer?;
            }
            // A rollout of older weights (`staleness`): its log-probs are the behaviour
            // policy's, not those of the weights the op reads.
            OpKind::Generate {
                role: g, staleness, ..
            } if g == role && p.every.is_none() && *staleness == 0 => break,
            _ => return None,
        }
    }
    let generate = &plan.ops[producer as usize];
    // Every update of the role runs after it, by data dependence: the weights it reads are
    // those the generator sampled with. (An update the op does not precede, even one that
    // merely has no order with it, might change them between the two.)
    let updates_after = plan.ops.iter().all(|u| match &u.kind {
        OpKind::Update { role: r, .. } if r == role => depends_on(plan, u.id, op.id),
        _ => true,
    });
    if !updates_after {
        return None;
    }
    // Generated on another instance: its weights are the trained ones only when a weight sync
    // brings them there every step (or when nothing trains the role).
    if generate.instance != op.instance {
        let trains = plan
            .ops
            .iter()
            .any(|o| matches!(&o.kind, OpKind::Update { role: u, .. } if u == role));
        let synced = plan.ops.iter().any(|o| {
            o.every.is_none()
                && matches!(&o.kind, OpKind::WeightSync { role: s, to, .. }
                    if s == role && Some(to) == generate.instance.as_ref())
        });
        let stale = plan.ops.iter().any(|o| {
            o.every.is_some() && matches!(&o.kind, OpKind::WeightSync { role: s, .. } if s == role)
        });
        if (trains && !synced) || stale {
            return None;
        }
    }
    Some(generate.id)
}

/// Op `later` depends on op `earlier`, directly or through other ops of the step.
fn depends_on(plan: &Plan, later: u32, earlier: u32) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![later];
    while let Some(o) = stack.pop() {
        if !seen.insert(o) {
            continue;
        }
        let Some(op) = plan.ops.get(o as usize) else {
            continue;
        };
        if op.deps.contains(&earlier) {
            return true;
        }
        stack.extend(op.deps.iter().copied());
    }
    false
}
