//! What a plan means, beyond its shape: every field that, edited by hand, would make the runtime
//! silently do a different job (or none), exhaust memory or overflow. Four codes:
//!
//! - P0007 ([`PlanCode::OutOfRange`]): a count that must be at least 1 is 0 (`epochs`,
//!   `minibatches`, `micro`, `every`, `n`, an `arch` size, …), or a setting outside what it can
//!   mean (`temperature` ≤ 0, `top_p` outside (0, 1], an unknown `precision` or `kind`);
//! - P0008 ([`PlanCode::SizeMismatch`]): sizes that contradict each other (a sample `count`
//!   against the rows of its value, a `batch` against the rows it reads, `minibatches`,
//!   `accumulation` and `optimizer_steps` against what they are derived from, `hidden` against
//!   `heads`, `parameters` against `arch`);
//! - P0009 ([`PlanCode::MissingEdge`]): an op reads a value without the data edge from its
//!   producer (`edges: []`), or an edge that no input matches, or a `logprobs` takes the
//!   sampler's log-probs (`from_sampling`) from an op that is not the same role's `generate`
//!   that produced the rollout it reads;
//! - P0010 ([`PlanCode::TooLarge`]): a size beyond what the plan's cluster can hold: a parameter
//!   count or byte size past 64 bits, or more bytes of weights (and, for `generate`, of KV
//!   cache) per device than a device has.
//!
//! Each check reports the root cause once: a derived size is compared only when every size it
//! derives from is itself valid. All arithmetic is checked: no input overflows or divides by 0.

use super::{PlanCode, PlanError, err};
use crate::model::*;
use std::collections::BTreeSet;

/// Appends the meaning problems of `plan` to `out`. References have been checked (P0002) but
/// may still dangle: every lookup here tolerates a missing id.
pub(super) fn check(plan: &Plan, out: &mut Vec<PlanError>) {
    // `steps: 0` is not refused: a program may say so (`pipeline p(steps = 0)`), and the plan
    // then means what it says.
    if plan.world_size == 0 {
        out.push(zero("/world_size", "world_size", "the plan has no device"));
    }
    for (i, c) in plan.clusters.iter().enumerate() {
        if c.memory == 0 {
            out.push(zero(
                format!("/clusters/{i}/memory"),
                "memory",
                &format!("a device of cluster `{}` holds nothing", c.name),
            ));
        }
    }
    let sizes: Vec<Option<RoleSize>> = plan
        .roles
        .iter()
        .enumerate()
        .map(|(i, r)| role(i, r, out))
        .collect();
    // Weights too large for a device: once per role, with its first instance that cannot hold them.
    let mut too_large = BTreeSet::new();
    for (i, inst) in plan.instances.iter().enumerate() {
        instance(plan, i, inst, &sizes, &mut too_large, out);
    }
    for (i, v) in plan.values.iter().enumerate() {
        value(i, v, out);
    }
    for (i, op) in plan.ops.iter().enumerate() {
        operation(plan, i, op, &sizes, out);
    }
    verifiers(plan, out);
    environments(plan, out);
    for (i, c) in plan.carried.iter().enumerate() {
        if c.every == Some(0) {
            out.push(zero(
                format!("/carried/{i}/every"),
                "every",
                &format!("the assignment of `{}` would never apply", c.name),
            ));
        }
    }
    edges(plan, out);
}

/// The `verifiers`: counts and limits of at least 1 (P0007), and each `verify` op's rollout
/// input and outputs — the reward, then one per metric (P0008).
fn verifiers(plan: &Plan, out: &mut Vec<PlanError>) {
    let mut names = BTreeSet::new();
    for (i, v) in plan.verifiers.iter().enumerate() {
        let path = format!("/verifiers/{i}");
        if !names.insert(v.name.as_str()) {
            out.push(err(
                PlanCode::SizeMismatch,
                format!("{path}/name"),
                format!("verifier `{}` is listed twice", v.name),
            ));
        }
        let what = format!("verifier `{}`", v.name);
        pool(
            &path,
            &what,
            &v.endpoint,
            (v.workers, v.batch, v.timeout_ms),
            &v.limits,
            out,
        );
    }
    for (i, op) in plan.ops.iter().enumerate() {
        let OpKind::Verify { verifier, .. } = &op.kind else {
            continue;
        };
        let Some(v) = plan.verifiers.iter().find(|v| &v.name == verifier) else {
            continue;
        };
        let want = 1 + v.metrics.len();
        if op.outputs.len() != want {
            out.push(err(
                PlanCode::SizeMismatch,
                format!("/ops/{i}/outputs"),
                format!(
                    "`{}` has {} outputs; verifier `{verifier}` gives {want} (the reward and {} metrics)",
                    op.label,
                    op.outputs.len(),
                    v.metrics.len()
                ),
            ));
        }
        if op.inputs.len() != 1 || op.inputs[0].name != "rollout" {
            out.push(err(
                PlanCode::SizeMismatch,
                format!("/ops/{i}/inputs"),
                format!("`{}` reads one input, `rollout`", op.label),
            ));
        }
    }
}

/// The worker pool of a verifier or an environment at `path` (`what` names it): counts and
/// limits of at least 1, a command or a URL (P0007).
fn pool(
    path: &str,
    what: &str,
    endpoint: &VerifierEndpoint,
    (workers, batch, timeout_ms): (u32, u32, u64),
    limits: &WorkerLimits,
    out: &mut Vec<PlanError>,
) {
    let counts = [
        (
            "workers",
            u64::from(workers),
            "it has no worker to serve requests",
        ),
        ("batch", u64::from(batch), "a request would carry nothing"),
        ("timeout_ms", timeout_ms, "every request would time out"),
    ];
    for (field, n, consequence) in counts {
        if n == 0 {
            out.push(zero(
                format!("{path}/{field}"),
                field,
                &format!("{what}: {consequence}"),
            ));
        }
    }
    let limits = [
        ("cpu_seconds", limits.cpu_seconds),
        ("memory_bytes", limits.memory_bytes),
        ("file_bytes", limits.file_bytes),
        ("processes", limits.processes),
    ];
    for (field, n) in limits {
        if n == Some(0) {
            out.push(zero(
                format!("{path}/limits/{field}"),
                field,
                &format!("{what}: a worker limited to 0 can do nothing"),
            ));
        }
    }
    match endpoint {
        VerifierEndpoint::Program { command } if command.first().is_none_or(String::is_empty) => {
            out.push(err(
                PlanCode::OutOfRange,
                format!("{path}/endpoint/command"),
                format!("{what} has no command to run"),
            ));
        }
        VerifierEndpoint::Http { url } if url.is_empty() => out.push(err(
            PlanCode::OutOfRange,
            format!("{path}/endpoint/url"),
            format!("{what} has no URL"),
        )),
        _ => {}
    }
}

/// The `environments`: each listed once, and its worker pool (P0007).
fn environments(plan: &Plan, out: &mut Vec<PlanError>) {
    let mut names = BTreeSet::new();
    for (i, env) in plan.environments.iter().enumerate() {
        let path = format!("/environments/{i}");
        if !names.insert(env.name.as_str()) {
            out.push(err(
                PlanCode::SizeMismatch,
                format!("{path}/name"),
                format!("environment `{}` is listed twice", env.name),
            ));
        }
        let what = format!("environment `{}`", env.name);
        pool(
            &path,
            &what,
            &env.endpoint,
            (env.workers, env.batch, env.timeout_ms),
            &env.limits,
            out,
        );
    }
}

/// P0008: the rollout of a multi-turn `generate` op has the fields the runtime fills (`turns`,
/// `env_reward`, `turn`) and as many response positions as the turns and observations take, so
/// that `max_turns`, `max_new` or `max_obs` edited alone is refused rather than run on a
/// rollout of another shape.
fn env_rollout(
    plan: &Plan,
    kind: &str,
    op: &Op,
    max_new: u64,
    env: &EnvTurns,
    out: &mut Vec<PlanError>,
) {
    let Some(value) = op
        .outputs
        .first()
        .and_then(|&v| plan.values.get(v as usize))
    else {
        return;
    };
    let ValueType::Record { fields, .. } = &value.ty else {
        return;
    };
    let label = &op.label;
    for field in ["turns", "env_reward", "turn"] {
        if !fields.contains_key(field) {
            out.push(err(
                PlanCode::SizeMismatch,
                format!("{kind}/env"),
                format!(
                    "the rollout `{}` of the multi-turn `{label}` has no field `{field}`",
                    value.name
                ),
            ));
        }
    }
    let want = response_positions(max_new, Some(env));
    if let Some(response) = fields.get("response")
        && let Some(Dim::Size(t)) = response.shape.get(1)
        && u128::from(*t) != want
    {
        out.push(err(
            PlanCode::SizeMismatch,
            format!("{kind}/env"),
            format!(
                "the rollout `{}` of `{label}` has {t} response positions, but {} turns of `max_new` {max_new} with observations of `max_obs` {} between them take {want}",
                value.name, env.max_turns, env.max_obs
            ),
        ));
    }
}

/// Response positions of a `generate` op: `max_new`, or with an environment every turn's and
/// an observation between two turns (checked counts: `max_turns` ≥ 1).
fn response_positions(max_new: u64, env: Option<&EnvTurns>) -> u128 {
    match env {
        None => u128::from(max_new),
        Some(e) => {
            u128::from(e.max_turns) * u128::from(max_new)
                + u128::from(e.max_turns.saturating_sub(1)) * u128::from(e.max_obs)
        }
    }
}

/// P0007: `field` is 0.
fn zero(path: impl Into<String>, field: &str, consequence: &str) -> PlanError {
    err(
        PlanCode::OutOfRange,
        path,
        format!("`{field}` is 0: {consequence}"),
    )
}

/// A role's weights, once its `arch` is known to be sound.
struct RoleSize {
    /// Bytes of weights in the role's precision.
    bytes: u64,
    /// The sizes of the arch, for messages.
    arch: String,
}

/// The arch's sizes in the order the plan writes them.
fn arch_sizes(a: &Arch) -> [(&'static str, u64); 7] {
    [
        ("layers", a.layers),
        ("hidden", a.hidden),
        ("heads", a.heads),
        ("kv_heads", a.kv_heads),
        ("ffn", a.ffn),
        ("vocab", a.vocab),
        ("max_len", a.max_len),
    ]
}

/// The parameter count of a decoder of kind `kind` (`ValueModel` and `RewardModel`: tied
/// embeddings and a scalar head), as the compiler counts it (`rlc_check`'s `role_parameters`);
/// `None` when it does not fit in 64 bits. `heads` must not be 0.
fn parameters(kind: RoleKind, a: &Arch) -> Option<u64> {
    let causal = kind == RoleKind::CausalLM;
    let h = a.hidden;
    let head_dim = h / a.heads;
    let kv = a.kv_heads.checked_mul(head_dim)?;
    let attention = h
        .checked_mul(h)?
        .checked_mul(2)?
        .checked_add(h.checked_mul(kv)?.checked_mul(2)?)?;
    let mlp = h.checked_mul(a.ffn)?.checked_mul(3)?;
    let layer = attention.checked_add(mlp)?.checked_add(h.checked_mul(2)?)?;
    let embed = a.vocab.checked_mul(h)?;
    let head = if causal && !a.tie_embeddings {
        embed
    } else {
        0
    };
    let position_table = match a.positions {
        Positions::Rope => 0,
        Positions::Learned => a.max_len.checked_mul(h)?,
    };
    let embed = embed.checked_add(position_table)?;
    let scalar_head = if causal { 0 } else { h };
    embed
        .checked_add(a.layers.checked_mul(layer)?)?
        .checked_add(h)?
        .checked_add(head)?
        .checked_add(scalar_head)
}

/// Checks role `i`; returns its weights' size when its arch is sound.
fn role(i: usize, r: &Role, out: &mut Vec<PlanError>) -> Option<RoleSize> {
    let path = format!("/roles/{i}");
    if let Some(o) = &r.optimizer {
        optimizer(&format!("{path}/optimizer"), o, out);
    }
    let a = r.arch.as_ref()?;
    let sizes = arch_sizes(a);
    let listed = sizes
        .iter()
        .map(|(f, v)| format!("`{f}` {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut sound = true;
    for (field, v) in sizes {
        if v == 0 {
            out.push(zero(
                format!("{path}/arch/{field}"),
                field,
                &format!("`{}` would have no {}", r.name, arch_noun(field)),
            ));
            sound = false;
        } else if v > i64::MAX as u64 {
            // libtorch takes shapes as i64.
            out.push(err(
                PlanCode::TooLarge,
                format!("{path}/arch/{field}"),
                format!(
                    "`{field}` {v} of `{}` is beyond the largest tensor dimension ({})",
                    r.name,
                    i64::MAX
                ),
            ));
            sound = false;
        }
    }
    for (field, v) in [("rope_theta", a.rope_theta), ("norm_eps", a.norm_eps)] {
        if !(v.is_finite() && v > 0.0) {
            out.push(err(
                PlanCode::OutOfRange,
                format!("{path}/arch/{field}"),
                format!("`{field}` {v} of `{}` is not above 0", r.name),
            ));
        }
    }
    if !sound {
        return None;
    }
    if !a.hidden.is_multiple_of(a.heads) {
        out.push(err(
            PlanCode::SizeMismatch,
            format!("{path}/arch/hidden"),
            format!(
                "`hidden` {} of `{}` is not a multiple of `heads` {}",
                a.hidden, r.name, a.heads
            ),
        ));
        sound = false;
    }
    if !a.heads.is_multiple_of(a.kv_heads) {
        out.push(err(
            PlanCode::SizeMismatch,
            format!("{path}/arch/kv_heads"),
            format!(
                "`heads` {} of `{}` is not a multiple of `kv_heads` {}",
                a.heads, r.name, a.kv_heads
            ),
        ));
        sound = false;
    }
    if !sound {
        return None;
    }
    let Some(count) = parameters(r.kind, a) else {
        out.push(err(
            PlanCode::TooLarge,
            format!("{path}/arch"),
            format!(
                "the parameter count of `{}` ({listed}) does not fit in 64 bits",
                r.name
            ),
        ));
        return None;
    };
    if let Some(p) = r.parameters
        && p != count
    {
        out.push(err(
            PlanCode::SizeMismatch,
            format!("{path}/parameters"),
            format!(
                "`parameters` {p} of `{}` is not the count of its `arch` ({count}: {listed})",
                r.name
            ),
        ));
    }
    let bytes_per = r.precision.bytes();
    let Some(bytes) = count.checked_mul(bytes_per) else {
        out.push(err(
            PlanCode::TooLarge,
            format!("{path}/arch"),
            format!(
                "the weights of `{}` ({count} parameters: {listed}) in `{}` take more bytes than 64 bits count",
                r.name, r.precision
            ),
        ));
        return None;
    };
    Some(RoleSize {
        bytes,
        arch: format!("{count} parameters: {listed}, in `{}`", r.precision),
    })
}

fn arch_noun(field: &str) -> &'static str {
    match field {
        "layers" => "layer",
        "hidden" => "hidden width",
        "heads" => "attention head",
        "kv_heads" => "key/value head",
        "ffn" => "MLP width",
        "vocab" => "token",
        _ => "position",
    }
}

fn optimizer(path: &str, o: &Optimizer, out: &mut Vec<PlanError>) {
    if !(o.lr.is_finite() && o.lr > 0.0) {
        out.push(err(
            PlanCode::OutOfRange,
            format!("{path}/lr"),
            format!("`lr` {} of `{}` is not above 0", o.lr, o.name),
        ));
    }
    if !(o.weight_decay.is_finite() && o.weight_decay >= 0.0) {
        out.push(err(
            PlanCode::OutOfRange,
            format!("{path}/weight_decay"),
            format!(
                "`weight_decay` {} of `{}` is negative",
                o.weight_decay, o.name
            ),
        ));
    }
    // Clipping to a norm of 0 would zero every gradient.
    if !(o.clip.is_finite() && o.clip > 0.0) {
        out.push(err(
            PlanCode::OutOfRange,
            format!("{path}/clip"),
            format!("`clip` {} of `{}` is not above 0", o.clip, o.name),
        ));
    }
    // The ranges `adamw(…)` admits: a β of 1 never forgets, an ε of 0 divides by zero.
    let below_one = |v: f64| (0.0..1.0).contains(&v);
    let ranges = [
        ("beta1", o.beta1, below_one(o.beta1), "in [0, 1)"),
        ("beta2", o.beta2, below_one(o.beta2), "in [0, 1)"),
        ("eps", o.eps, o.eps > 0.0, "above 0"),
        (
            "min_lr_ratio",
            o.min_lr_ratio,
            (0.0..=1.0).contains(&o.min_lr_ratio),
            "in [0, 1]",
        ),
    ];
    for (field, v, admitted, range) in ranges {
        if !(v.is_finite() && admitted) {
            out.push(err(
                PlanCode::OutOfRange,
                format!("{path}/{field}"),
                format!("`{field}` {v} of `{}` is not {range}", o.name),
            ));
        }
    }
}

/// Instance `i`: its micro-batch, and whether its role's weights fit its devices.
fn instance<'p>(
    plan: &Plan,
    i: usize,
    inst: &'p Instance,
    sizes: &[Option<RoleSize>],
    too_large: &mut BTreeSet<&'p str>,
    out: &mut Vec<PlanError>,
) {
    let path = format!("/instances/{i}");
    if inst.layout.micro == Some(0) {
        out.push(zero(
            format!("{path}/layout/micro"),
            "micro",
            &format!("`{}` would run micro-batches of no sequence", inst.id),
        ));
    }
    let Some((r, size)) = plan
        .roles
        .iter()
        .position(|r| r.name == inst.role)
        .and_then(|r| Some((r, sizes[r].as_ref()?)))
    else {
        return;
    };
    let Some(cluster) = plan.clusters.iter().find(|c| c.name == inst.cluster) else {
        return;
    };
    let l = inst.layout;
    // Data parallelism replicates the weights; FSDP, tensor and pipeline parallelism cut them.
    let shards = u64::from(l.fsdp) * u64::from(l.tp) * u64::from(l.pp);
    if shards == 0 || cluster.memory == 0 {
        return; // reported elsewhere
    }
    let per_device = size.bytes.div_ceil(shards);
    if per_device > cluster.memory && too_large.insert(&inst.role) {
        out.push(err(
            PlanCode::TooLarge,
            format!("/roles/{r}/arch"),
            format!(
                "the weights of `{}` ({}) are {} bytes, {per_device} per device of `{}` (fsdp {} · tp {} · pp {}): more than the {} bytes of a `{}` device",
                inst.role,
                size.arch,
                size.bytes,
                inst.id,
                l.fsdp,
                l.tp,
                l.pp,
                cluster.memory,
                cluster.name
            ),
        ));
    }
}

/// The rows a value holds, when the plan knows them.
fn rows_of(plan: &Plan, value: u32) -> Option<u64> {
    match plan.values.get(value as usize)?.split {
        Split::Rows { rows, .. } => rows,
        Split::Replicated => None,
    }
}

fn value(i: usize, v: &Value, out: &mut Vec<PlanError>) {
    let Split::Rows { parts, rows } = v.split else {
        return;
    };
    let path = format!("/values/{i}/split");
    if parts == 0 {
        out.push(zero(
            format!("{path}/parts"),
            "parts",
            &format!("`{}` would be cut into no block", v.name),
        ));
    }
    match rows {
        Some(0) => out.push(zero(
            format!("{path}/rows"),
            "rows",
            &format!("`{}` would hold no row", v.name),
        )),
        Some(r) if parts > 0 && !r.is_multiple_of(u64::from(parts)) => out.push(err(
            PlanCode::SizeMismatch,
            format!("{path}/rows"),
            format!(
                "the {r} `rows` of `{}` do not split into {parts} equal `parts`",
                v.name
            ),
        )),
        _ => {}
    }
}

/// The data ranks of the instance an op runs with.
fn data_ranks(plan: &Plan, op: &Op) -> Option<u64> {
    let l = plan.instance(op.instance.as_deref()?)?.layout;
    let n = u64::from(l.dp) * u64::from(l.fsdp);
    (n > 0).then_some(n)
}

/// Op `g` is a `generate` of `role` whose rollout `op` reads (as is, or re-laid by transfers).
fn samples_for(plan: &Plan, op: &Op, role: &str, g: u32) -> bool {
    let Some(input) = op.inputs.first().filter(|i| i.field.is_none()) else {
        return false;
    };
    let mut value = input.value;
    // Each step back goes to an earlier op: at most as many steps as there are ops.
    for _ in 0..=plan.ops.len() {
        let Some(producer) = plan.values.get(value as usize).and_then(|v| v.producer) else {
            return false;
        };
        match plan.ops.get(producer as usize).map(|p| &p.kind) {
            Some(OpKind::Transfer { value: v, .. }) => value = *v,
            Some(OpKind::Generate { role: r, .. }) => return producer == g && r == role,
            _ => return false,
        }
    }
    false
}

/// The rows of the op's first input (the prompts or rollout a role op reads).
fn input_rows(plan: &Plan, op: &Op) -> Option<(u64, String)> {
    let input = op.inputs.first()?;
    let rows = rows_of(plan, input.value)?;
    let name = plan.values.get(input.value as usize)?.name.clone();
    Some((rows, name))
}

fn operation(plan: &Plan, i: usize, op: &Op, sizes: &[Option<RoleSize>], out: &mut Vec<PlanError>) {
    let path = format!("/ops/{i}");
    let label = &op.label;
    if op.every == Some(0) {
        out.push(zero(
            format!("{path}/every"),
            "every",
            &format!("`{label}` would never run"),
        ));
    }
    let kind = format!("{path}/kind");
    // P0007 for each count of `fields` that is Some(0); true when none is.
    let counts = |out: &mut Vec<PlanError>, fields: &[(&str, Option<u64>)]| -> bool {
        let mut ok = true;
        for &(field, v) in fields {
            if v == Some(0) {
                out.push(zero(
                    format!("{kind}/{field}"),
                    field,
                    &format!("`{label}` would {}", zero_consequence(field)),
                ));
                ok = false;
            }
        }
        ok
    };
    // P0008 when `batch` is not the rows the op reads (× `per_row`); true when it agrees or
    // either is unknown.
    let batch_reads = |out: &mut Vec<PlanError>, batch: Option<u64>, per_row: u64| -> bool {
        if let (Some(b), Some((rows, name))) = (batch, input_rows(plan, op))
            && rows.checked_mul(per_row) != Some(b)
        {
            let what = if per_row == 1 {
                format!("the {rows} rows of `{name}` it reads")
            } else {
                format!("the {rows} rows of `{name}` it reads × `n` {per_row}")
            };
            out.push(err(
                PlanCode::SizeMismatch,
                format!("{kind}/batch"),
                format!("`batch` {b} of `{label}` is not {what}"),
            ));
            return false;
        }
        true
    };
    match &op.kind {
        OpKind::Sample { count, form, .. } => {
            let ok = counts(out, &[("count", *count)]);
            let pairs = match form {
                None | Some(SampleForm::Demonstrations) => 1,
                Some(SampleForm::Preferences) => 2,
            };
            let Some(count) = count.filter(|_| ok) else {
                return;
            };
            let rows = count.checked_mul(pairs);
            if let Some(&v) = op.outputs.first()
                && let Some(want) = rows_of(plan, v)
                && rows != Some(want)
            {
                let name = &plan.values[v as usize].name;
                let gives = if pairs == 2 {
                    format!("{count} pairs ({} rows)", 2 * u128::from(count))
                } else {
                    format!("{count} rows")
                };
                out.push(err(
                    PlanCode::SizeMismatch,
                    format!("{kind}/count"),
                    format!(
                        "`count` {count} of `{label}` draws {gives}, but its value `{name}` has {want} (the batch its readers expect)"
                    ),
                ));
            } else if let (Some(rows), Some(parts)) = (rows, data_ranks(plan, op))
                && !rows.is_multiple_of(parts)
            {
                out.push(err(
                    PlanCode::SizeMismatch,
                    format!("{kind}/count"),
                    format!(
                        "`count` {count} of `{label}` does not split over its {parts} data ranks"
                    ),
                ));
            }
        }
        OpKind::Generate {
            role,
            batch,
            n,
            prompt_len,
            max_new,
            temperature,
            top_p,
            top_k,
            env,
            staleness,
            pause_at,
        } => {
            if let Some(p) = pause_at {
                let inside = max_new.is_some_and(|m| (1..m).contains(p));
                if !inside || *staleness == 0 || env.is_some() {
                    out.push(err(
                        PlanCode::OutOfRange,
                        format!("{kind}/pause_at"),
                        format!(
                            "`pause_at` {p} of `{label}` needs a single-turn generation with `staleness` ≥ 1 and a pause inside its `max_new` {}",
                            max_new.map_or("(unknown)".into(), |m| m.to_string())
                        ),
                    ));
                }
            }
            let ok = counts(
                out,
                &[
                    ("batch", *batch),
                    ("n", *n),
                    ("prompt_len", *prompt_len),
                    ("max_new", *max_new),
                    ("top_k", *top_k),
                    ("env/max_turns", env.as_ref().map(|e| e.max_turns)),
                    ("env/max_obs", env.as_ref().map(|e| e.max_obs)),
                ],
            );
            if let Some(t) = temperature
                && !(t.is_finite() && *t > 0.0)
            {
                out.push(err(
                    PlanCode::OutOfRange,
                    format!("{kind}/temperature"),
                    format!("`temperature` {t} of `{label}` is not above 0"),
                ));
            }
            if let Some(p) = top_p
                && !(*p > 0.0 && *p <= 1.0)
            {
                out.push(err(
                    PlanCode::OutOfRange,
                    format!("{kind}/top_p"),
                    format!("`top_p` {p} of `{label}` is outside (0, 1]"),
                ));
            }
            if !ok {
                return;
            }
            let mut sound = batch_reads(out, *batch, n.unwrap_or(1));
            if let Some(max_len) = plan
                .role(role)
                .and_then(|r| r.arch.as_ref())
                .map(|a| a.max_len)
                .filter(|&m| m > 0)
                && let Some(new) = *max_new
            {
                let need =
                    u128::from(prompt_len.unwrap_or(0)) + response_positions(new, env.as_ref());
                if need > u128::from(max_len) {
                    let prompt = prompt_len.map_or(String::new(), |p| {
                        format!(" after prompts of `prompt_len` {p}")
                    });
                    let turns = env.as_ref().map_or(String::new(), |e| {
                        format!(
                            " per turn, over {} turns with observations of {} tokens,",
                            e.max_turns, e.max_obs
                        )
                    });
                    out.push(err(
                        PlanCode::SizeMismatch,
                        format!("{kind}/max_new"),
                        format!(
                            "`max_new` {new}{turns} of `{label}`{prompt} needs {need} positions, more than the `max_len` {max_len} of `{role}`"
                        ),
                    ));
                    sound = false;
                }
            }
            if sound && let (Some(b), Some(new)) = (batch, max_new) {
                let positions =
                    u128::from(prompt_len.unwrap_or(0)) + response_positions(*new, env.as_ref());
                generation_memory(plan, &kind, op, role, *b, positions, sizes, out);
            }
            if let (Some(env), Some(new)) = (env, max_new) {
                env_rollout(plan, &kind, op, *new, env, out);
            }
        }
        OpKind::Logprobs { batch, micro, .. }
        | OpKind::Values { batch, micro, .. }
        | OpKind::Score { batch, micro, .. } => {
            let ok = counts(out, &[("batch", *batch), ("micro", *micro)]);
            if ok {
                batch_reads(out, *batch, 1);
            }
            if let OpKind::Logprobs {
                role,
                from_sampling: Some(g),
                ..
            } = &op.kind
                && !samples_for(plan, op, role, *g)
            {
                out.push(err(
                    PlanCode::MissingEdge,
                    format!("{kind}/from_sampling"),
                    format!(
                        "`{label}` takes the log-probs sampled by op {g} (`from_sampling`), but op {g} is not the `{role}.generate` that produced the rollout it reads"
                    ),
                ));
            }
        }
        OpKind::Update {
            batch,
            epochs,
            minibatch,
            minibatches,
            micro,
            accumulation,
            optimizer_steps,
            optimizer: o,
            ..
        } => {
            if let Some(o) = o {
                optimizer(&format!("{kind}/optimizer"), o, out);
            }
            let ok = counts(
                out,
                &[
                    ("batch", *batch),
                    ("epochs", Some(*epochs)),
                    ("minibatch", *minibatch),
                    ("minibatches", *minibatches),
                    ("micro", *micro),
                    ("accumulation", *accumulation),
                    ("optimizer_steps", *optimizer_steps),
                ],
            );
            // Each size is compared with those it derives from only when they are sound.
            if !ok || !batch_reads(out, *batch, 1) {
                return;
            }
            if let (Some(b), Some(mb), Some(n)) = (batch, minibatch, minibatches)
                && b.div_ceil(*mb) != *n
            {
                out.push(err(
                    PlanCode::SizeMismatch,
                    format!("{kind}/minibatches"),
                    format!(
                        "`minibatches` {n} of `{label}` is not `batch` {b} in minibatches of `minibatch` {mb} ({})",
                        b.div_ceil(*mb)
                    ),
                ));
                return;
            }
            if let (Some(n), Some(steps)) = (minibatches, optimizer_steps)
                && epochs.checked_mul(*n) != Some(*steps)
            {
                out.push(err(
                    PlanCode::SizeMismatch,
                    format!("{kind}/optimizer_steps"),
                    format!(
                        "`optimizer_steps` {steps} of `{label}` is not `epochs` {epochs} × `minibatches` {n}"
                    ),
                ));
            }
            let layout_micro = op
                .instance
                .as_deref()
                .and_then(|id| plan.instance(id))
                .and_then(|inst| inst.layout.micro);
            if let (Some(m), Some(lm)) = (micro, layout_micro)
                && m != &lm
            {
                out.push(err(
                    PlanCode::SizeMismatch,
                    format!("{kind}/micro"),
                    format!(
                        "`micro` {m} of `{label}` is not the `micro` {lm} of its instance's layout"
                    ),
                ));
            } else if let (Some(mb), Some(m), Some(acc), Some(parts)) =
                (minibatch, micro, accumulation, data_ranks(plan, op))
            {
                let want = mb.div_ceil(parts).div_ceil(*m).max(1);
                if *acc != want {
                    out.push(err(
                        PlanCode::SizeMismatch,
                        format!("{kind}/accumulation"),
                        format!(
                            "`accumulation` {acc} of `{label}` is not `minibatch` {mb} over {parts} data ranks in micro-batches of `micro` {m} ({want})"
                        ),
                    ));
                }
            }
        }
        _ => {}
    }
}

/// P0010 when a generation's weights and KV cache need more bytes per device than its devices
/// have. Both terms are lower bounds of the checker's estimate (E0801: inference shards the
/// weights by `tp`·`pp` only; the KV cache is `2·layers·kv_heads·head_dim` values of the
/// precision per position of each of the `⌈batch / replicas⌉` sequences of a replica), so a
/// plan of a checked program always passes, and a hand-edited `batch`, `max_new`, `prompt_len` or
/// `max_len` cannot make the runtime abort on the cache's allocation.
#[allow(clippy::too_many_arguments)]
fn generation_memory(
    plan: &Plan,
    kind: &str,
    op: &Op,
    role: &str,
    batch: u64,
    positions: u128,
    sizes: &[Option<RoleSize>],
    out: &mut Vec<PlanError>,
) {
    let Some(r) = plan.roles.iter().position(|x| x.name == role) else {
        return;
    };
    let (Some(size), Some(arch), Some(bytes)) = (
        sizes[r].as_ref(),
        plan.roles[r].arch.as_ref(),
        Some(plan.roles[r].precision.bytes()),
    ) else {
        return;
    };
    let Some(inst) = op.instance.as_deref().and_then(|id| plan.instance(id)) else {
        return;
    };
    let Some(cluster) = plan.clusters.iter().find(|c| c.name == inst.cluster) else {
        return;
    };
    let l = inst.layout;
    let replicas = u128::from(l.dp) * u128::from(l.fsdp);
    let shards = u128::from(l.tp) * u128::from(l.pp);
    if replicas == 0 || shards == 0 || cluster.memory == 0 {
        return; // reported elsewhere
    }
    // Weights that do not fit on their own are reported with the instance (one root cause).
    let sharded = u128::from(l.fsdp) * shards;
    if u128::from(size.bytes).div_ceil(sharded) > u128::from(cluster.memory) {
        return;
    }
    let sequences = u128::from(batch).div_ceil(replicas);
    let kv = [
        u128::from(arch.layers),
        u128::from(arch.kv_heads),
        u128::from(arch.hidden / arch.heads),
        positions,
        sequences,
        u128::from(bytes),
    ]
    .into_iter()
    .try_fold(2u128, |n, f| n.checked_mul(f));
    let weights = u128::from(size.bytes) / shards;
    let need = kv.map_or(u128::MAX, |kv| weights.saturating_add(kv / shards));
    if need > u128::from(cluster.memory) {
        let need = if need == u128::MAX {
            "more than 2^128".to_string()
        } else {
            need.to_string()
        };
        out.push(err(
            PlanCode::TooLarge,
            kind.to_string(),
            format!(
                "`{}` needs {need} bytes per device of `{}` (tp {} · pp {}) for the weights of `{role}` and the KV cache of {sequences} sequences of {positions} positions (`batch` {batch} over {replicas} replicas; `prompt_len` + `max_new`; `layers` {}, `kv_heads` {}, `hidden` / `heads` {}): more than the {} bytes of a `{}` device",
                op.label,
                inst.id,
                l.tp,
                l.pp,
                arch.layers,
                arch.kv_heads,
                arch.hidden / arch.heads,
                cluster.memory,
                cluster.name
            ),
        ));
    }
}

fn zero_consequence(field: &str) -> &'static str {
    match field {
        "count" => "draw no prompt",
        "batch" => "work on no sequence",
        "n" | "max_new" => "generate nothing",
        "prompt_len" => "read prompts of no token",
        "top_k" => "keep no token to sample",
        "micro" => "run micro-batches of no sequence",
        "epochs" => "not train (no epoch)",
        "minibatch" => "train on minibatches of no sequence",
        "minibatches" | "optimizer_steps" => "take no optimizer step",
        "accumulation" => "accumulate no micro-batch",
        "env/max_turns" => "run episodes of no turn",
        "env/max_obs" => "leave no room for an observation",
        _ => "do nothing",
    }
}

/// P0009: every input an op reads from another op arrives by an edge from its producer, and
/// every edge is an input of its consumer.
fn edges(plan: &Plan, out: &mut Vec<PlanError>) {
    let have: BTreeSet<(u32, Option<&str>, u32)> = plan
        .edges
        .iter()
        .map(|e| (e.value, e.field.as_deref(), e.to))
        .collect();
    let mut reads: BTreeSet<(u32, Option<&str>, u32)> = BTreeSet::new();
    for (i, op) in plan.ops.iter().enumerate() {
        for (k, input) in op.inputs.iter().enumerate() {
            reads.insert((input.value, input.field.as_deref(), op.id));
            let Some(v) = plan.values.get(input.value as usize) else {
                continue;
            };
            // A carried value is there when the step starts: no edge brings it.
            let Some(producer) = v.producer else { continue };
            if !have.contains(&(input.value, input.field.as_deref(), op.id)) {
                let field = input
                    .field
                    .as_deref()
                    .map_or(String::new(), |f| format!(" (field `{f}`)"));
                out.push(err(
                    PlanCode::MissingEdge,
                    format!("/ops/{i}/inputs/{k}"),
                    format!(
                        "`{}` reads `{}`{field} (value {}), but `edges` has no edge to it from op {producer}, its producer",
                        op.label, v.name, input.value
                    ),
                ));
            }
        }
    }
    for (i, e) in plan.edges.iter().enumerate() {
        let Some(v) = plan.values.get(e.value as usize) else {
            continue;
        };
        if let Some(p) = v.producer
            && p != e.from
        {
            out.push(err(
                PlanCode::MissingEdge,
                format!("/edges/{i}/from"),
                format!(
                    "edge {i} brings `{}` (value {}) from op {}, but op {p} produces it",
                    v.name, e.value, e.from
                ),
            ));
        }
        // An edge to an op that does not exist, or that reads a value that does not, is a
        // dangling reference (P0002), reported already.
        let consumer_sound = plan.ops.get(e.to as usize).is_some_and(|o| {
            o.inputs
                .iter()
                .all(|i| (i.value as usize) < plan.values.len())
        });
        if consumer_sound && !reads.contains(&(e.value, e.field.as_deref(), e.to)) {
            out.push(err(
                PlanCode::MissingEdge,
                format!("/edges/{i}/to"),
                format!(
                    "edge {i} brings `{}` (value {}) to op {}, which does not read it",
                    v.name, e.value, e.to
                ),
            ));
        }
    }
}
