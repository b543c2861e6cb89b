//! Loading a plan file: the version first, then the schema, then the references and rank bounds.
//! Every problem is a [`PlanError`] with a stable code.

use crate::model::*;
use std::collections::BTreeSet;
use std::fmt;

mod meaning;

/// Stable codes of plan errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlanCode {
    /// P0001: the file's `version` is missing or not the one this build reads.
    Version,
    /// P0002: an op, value, instance, role or cluster named that does not exist.
    DanglingReference,
    /// P0003: a rank at or beyond the world size, or outside the instance it belongs to.
    RankOutOfBounds,
    /// P0004: not a plan: not JSON, or a field missing or of the wrong type.
    Malformed,
    /// P0005: a layout whose factors do not multiply to its ranks, overlapping clusters, ids out
    /// of order.
    Inconsistent,
    /// P0006: an op depends on an op that does not come before it, or a rank program runs an op
    /// before one it depends on.
    Order,
    /// P0007: a count that must be at least 1 is 0 (`epochs`, `minibatches`, `micro`, `every`,
    /// an `arch` size, …), or a setting outside what it can mean (`temperature` ≤ 0, `top_p`
    /// outside (0, 1], an unknown `precision`).
    OutOfRange,
    /// P0008: sizes that contradict each other: a sample `count` and the batch that reads it,
    /// `minibatches`, `accumulation` or `optimizer_steps` and what they derive from, `hidden`
    /// and `heads`, `parameters` and `arch`.
    SizeMismatch,
    /// P0009: an op reads a value without the data edge from its producer, or an edge matches
    /// no input.
    MissingEdge,
    /// P0010: a size beyond what the plan's cluster can hold: a parameter count past 64 bits, or
    /// more bytes of weights (and a generation's KV cache) per device than a device has.
    TooLarge,
}

impl PlanCode {
    pub const ALL: [PlanCode; 10] = [
        PlanCode::Version,
        PlanCode::DanglingReference,
        PlanCode::RankOutOfBounds,
        PlanCode::Malformed,
        PlanCode::Inconsistent,
        PlanCode::Order,
        PlanCode::OutOfRange,
        PlanCode::SizeMismatch,
        PlanCode::MissingEdge,
        PlanCode::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PlanCode::Version => "P0001",
            PlanCode::DanglingReference => "P0002",
            PlanCode::RankOutOfBounds => "P0003",
            PlanCode::Malformed => "P0004",
            PlanCode::Inconsistent => "P0005",
            PlanCode::Order => "P0006",
            PlanCode::OutOfRange => "P0007",
            PlanCode::SizeMismatch => "P0008",
            PlanCode::MissingEdge => "P0009",
            PlanCode::TooLarge => "P0010",
        }
    }

    /// What the error means and what to do, for `rlc explain`.
    pub fn explanation(self) -> &'static str {
        match self {
            PlanCode::Version => {
                "The plan file was written by a different version of rlc than the one reading it (or has no `version`). Plans are the contract between compiler and runtime; a reader refuses versions it does not know rather than guess. Rebuild the plan with this rlc: `rlc build pipeline.rl -o plan.json`."
            }
            PlanCode::DanglingReference => {
                "An operation, value, instance, role or cluster refers to an id the plan does not define: the file was edited by hand or truncated. Rebuild it with `rlc build`."
            }
            PlanCode::RankOutOfBounds => {
                "A rank is at or beyond the plan's world size, or outside the devices of the instance it belongs to; the runtime would address a device that does not exist. Rebuild the plan, or fix the rank sets by hand."
            }
            PlanCode::Malformed => {
                "The file is not a plan: not JSON, or a field is missing or of the wrong type. Plans come from `rlc build`."
            }
            PlanCode::Inconsistent => {
                "The plan contradicts itself: a layout whose factors do not multiply to its ranks, overlapping clusters, or ids out of order. Rebuild it with `rlc build`."
            }
            PlanCode::Order => {
                "An operation depends on one that does not come before it, or a rank program runs an operation before one it depends on; executed as written, a rank would wait forever. Rebuild the plan with `rlc build`."
            }
            PlanCode::OutOfRange => {
                "A count that must be at least 1 is 0 — `epochs`, `minibatch`, `minibatches`, `micro`, `accumulation`, `optimizer_steps`, an op's `every`, a sample's `count`, `n`, `max_new`, `top_k`, a size of a role's `arch` — or a setting is outside what it can mean: `temperature`, `lr` or `clip` not above 0, `top_p` outside (0, 1], a negative `weight_decay`, an unknown `precision`, `kind`, `form` or `split`. The runtime would not refuse such a plan: it would silently train less (or not at all), skip an operation on every step, or sample something else. The message names the field; set it in the program and rebuild the plan with `rlc build` rather than edit the file."
            }
            PlanCode::SizeMismatch => {
                "Two sizes of the plan contradict each other: a sample's `count` and the rows of the value it draws (the batch every reader expects), an op's `batch` and the rows it reads (× `n` for `generate`), `minibatches` and `batch` / `minibatch`, `optimizer_steps` and `epochs` × `minibatches`, `accumulation` and `minibatch` over the data ranks in micro-batches of `micro`, rows that do not split over their data ranks, `hidden` not a multiple of `heads` (or an odd head dimension), `heads` not a multiple of `kv_heads`, `parameters` other than the count of `arch`, or prompts plus `max_new` longer than `max_len`. Each size is derived from the others when the plan is built, so one was edited alone: the job would run with some of them and report or schedule with the others. Rebuild the plan with `rlc build`."
            }
            PlanCode::MissingEdge => {
                "An operation reads a value (or a field of one) that another operation produces, but `edges` has no edge bringing it from its producer — or an edge comes from an operation that does not produce the value, or goes to one that does not read it. Edges are how the plan says what moves between operations (and through which transfer); with one missing, the data flow the plan describes is not the one it runs. Rebuild the plan with `rlc build`."
            }
            PlanCode::TooLarge => {
                "A size is beyond what the plan's cluster can hold: a role's parameter count (or its bytes) does not fit in 64 bits, a size of its `arch` is beyond libtorch's largest dimension, or its weights — parameters × the bytes of its `precision`, cut by the instance's `fsdp`, `tp` and `pp` — need more bytes per device than a device of the instance's cluster has (`memory`), or a generation's weights and KV cache do (`batch` sequences over the replicas, of `prompt_len` + `max_new` positions each). Loading the plan refuses it instead of letting the runtime abort on the allocation. Shrink the `arch`, shard it over more devices, or rebuild the plan with `rlc build`, whose memory check says what fits."
            }
        }
    }

    pub fn parse(id: &str) -> Option<PlanCode> {
        PlanCode::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(id))
    }

    pub fn title(self) -> &'static str {
        match self {
            PlanCode::Version => "unsupported plan version",
            PlanCode::DanglingReference => "dangling reference in a plan",
            PlanCode::RankOutOfBounds => "rank out of bounds in a plan",
            PlanCode::Malformed => "malformed plan file",
            PlanCode::Inconsistent => "inconsistent plan",
            PlanCode::Order => "plan operations out of dependency order",
            PlanCode::OutOfRange => "plan setting out of range",
            PlanCode::SizeMismatch => "plan sizes that disagree",
            PlanCode::MissingEdge => "missing data edge in a plan",
            PlanCode::TooLarge => "plan too large for its cluster",
        }
    }
}

/// One problem with a plan: a code, where (a JSON-pointer-like path) and what.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PlanError {
    pub code: PlanCode,
    pub path: String,
    pub message: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)?;
        if !self.path.is_empty() {
            write!(f, " (at `{}`)", self.path)?;
        }
        Ok(())
    }
}

fn err(code: PlanCode, path: impl Into<String>, message: impl Into<String>) -> PlanError {
    PlanError {
        code,
        path: path.into(),
        message: message.into(),
    }
}

/// Reads a plan file: checks the version before anything else (a newer file is a version error,
/// not a schema error), then the schema, then [`validate`].
pub fn load(text: &str) -> Result<Plan, Vec<PlanError>> {
    let raw: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| vec![err(PlanCode::Malformed, "", format!("not JSON: {e}"))])?;
    match raw.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(PLAN_VERSION) => {}
        Some(v) => {
            return Err(vec![err(
                PlanCode::Version,
                "/version",
                format!(
                    "the plan is version {v}; this rlc reads version {PLAN_VERSION} (rebuild it with `rlc build`)"
                ),
            )]);
        }
        None => {
            return Err(vec![err(
                PlanCode::Version,
                "/version",
                format!("the plan has no `version` (this rlc reads version {PLAN_VERSION})"),
            )]);
        }
    }
    let plan: Plan = match serde_json::from_value(raw.clone()) {
        Ok(plan) => plan,
        Err(e) => {
            let (path, message) =
                schema_error_at(&raw).unwrap_or_else(|| (String::new(), e.to_string()));
            return Err(vec![err(
                PlanCode::Malformed,
                path,
                format!("not a plan: {message}"),
            )]);
        }
    };
    let errors = validate(&plan);
    if errors.is_empty() {
        Ok(plan)
    } else {
        Err(errors)
    }
}

/// Where a plan that does not deserialise goes wrong: the first element of a list that does not
/// deserialise as its type, narrowed to the field holding the offending string when serde names
/// one (an unknown variant such as `"precision": "f8"`, a string where a number belongs).
fn schema_error_at(raw: &serde_json::Value) -> Option<(String, String)> {
    fn first_bad<T: serde::de::DeserializeOwned>(
        raw: &serde_json::Value,
        key: &str,
    ) -> Option<(String, serde_json::Value, String)> {
        raw.get(key)?
            .as_array()?
            .iter()
            .enumerate()
            .find_map(|(i, v)| {
                serde_json::from_value::<T>(v.clone())
                    .err()
                    .map(|e| (format!("/{key}/{i}"), v.clone(), e.to_string()))
            })
    }
    use crate::model::*;
    let (path, element, message) = first_bad::<Cluster>(raw, "clusters")
        .or_else(|| first_bad::<Role>(raw, "roles"))
        .or_else(|| first_bad::<Dataset>(raw, "datasets"))
        .or_else(|| first_bad::<Instance>(raw, "instances"))
        .or_else(|| first_bad::<Value>(raw, "values"))
        .or_else(|| first_bad::<Op>(raw, "ops"))
        .or_else(|| first_bad::<Edge>(raw, "edges"))
        .or_else(|| first_bad::<RankProgram>(raw, "programs"))
        .or_else(|| first_bad::<Carried>(raw, "carried"))?;
    let quoted = ["unknown variant `", "invalid type: string \""]
        .iter()
        .find_map(|start| {
            let rest = &message[message.find(start)? + start.len()..];
            Some(rest[..rest.find(['`', '"'])?].to_string())
        });
    let inner = quoted.and_then(|text| string_at(&element, &text, String::new()));
    Some((format!("{path}{}", inner.unwrap_or_default()), message))
}

/// The path of the first string equal to `text` inside `v`.
fn string_at(v: &serde_json::Value, text: &str, at: String) -> Option<String> {
    match v {
        serde_json::Value::String(s) if s == text => Some(at),
        serde_json::Value::Object(map) => map
            .iter()
            .find_map(|(k, x)| string_at(x, text, format!("{at}/{k}"))),
        serde_json::Value::Array(list) => list
            .iter()
            .enumerate()
            .find_map(|(i, x)| string_at(x, text, format!("{at}/{i}"))),
        _ => None,
    }
}

/// Every problem of a deserialised plan, sorted (empty: the plan is valid).
pub fn validate(plan: &Plan) -> Vec<PlanError> {
    let mut out = Vec::new();
    let world = plan.world_size;
    if plan.version != PLAN_VERSION {
        out.push(err(
            PlanCode::Version,
            "/version",
            format!(
                "the plan is version {}; this rlc reads version {PLAN_VERSION}",
                plan.version
            ),
        ));
    }
    let ranks_ok = |out: &mut Vec<PlanError>, path: String, set: &RankSet| {
        if set.end() > world {
            out.push(err(
                PlanCode::RankOutOfBounds,
                path,
                format!("rank {} is not below the world size {world}", set.end() - 1),
            ));
        }
    };

    // Clusters tile the world.
    let mut covered = RankSet::default();
    for (i, c) in plan.clusters.iter().enumerate() {
        ranks_ok(&mut out, format!("/clusters/{i}/ranks"), &c.ranks);
        if covered.intersects(&c.ranks) {
            out.push(err(
                PlanCode::Inconsistent,
                format!("/clusters/{i}/ranks"),
                format!("cluster `{}` overlaps another cluster's ranks", c.name),
            ));
        }
        if c.nodes.checked_mul(c.devices_per_node) != Some(u64::from(c.ranks.len())) {
            out.push(err(
                PlanCode::Inconsistent,
                format!("/clusters/{i}/ranks"),
                format!(
                    "cluster `{}` has {} ranks for {} × {} devices",
                    c.name,
                    c.ranks.len(),
                    c.nodes,
                    c.devices_per_node
                ),
            ));
        }
        covered = covered.union(&c.ranks);
    }
    if covered != RankSet::range(0, world) && world > 0 {
        out.push(err(
            PlanCode::Inconsistent,
            "/clusters",
            format!("the clusters' ranks `{covered}` are not `0..{world}`"),
        ));
    }

    let roles: BTreeSet<&str> = plan.roles.iter().map(|r| r.name.as_str()).collect();
    let instances: BTreeSet<&str> = plan.instances.iter().map(|i| i.id.as_str()).collect();
    let clusters: BTreeSet<&str> = plan.clusters.iter().map(|c| c.name.as_str()).collect();
    let role_ref = |out: &mut Vec<PlanError>, path: String, name: &str| {
        if !roles.contains(name) {
            out.push(err(
                PlanCode::DanglingReference,
                path,
                format!("no role `{name}`"),
            ));
        }
    };
    let instance_ref = |out: &mut Vec<PlanError>, path: String, id: &str| {
        if !instances.contains(id) {
            out.push(err(
                PlanCode::DanglingReference,
                path,
                format!("no instance `{id}`"),
            ));
        }
    };

    for (i, inst) in plan.instances.iter().enumerate() {
        let path = format!("/instances/{i}");
        role_ref(&mut out, format!("{path}/role"), &inst.role);
        if !clusters.contains(inst.cluster.as_str()) {
            out.push(err(
                PlanCode::DanglingReference,
                format!("{path}/cluster"),
                format!("no cluster `{}`", inst.cluster),
            ));
        } else if let Some(c) = plan.clusters.iter().find(|c| c.name == inst.cluster)
            && let Some(r) = inst.ranks.iter().find(|r| !c.ranks.contains(*r))
        {
            out.push(err(
                PlanCode::RankOutOfBounds,
                format!("{path}/ranks"),
                format!(
                    "rank {r} of `{}` is not a rank of cluster `{}` ({})",
                    inst.id, c.name, c.ranks
                ),
            ));
        }
        ranks_ok(&mut out, format!("{path}/ranks"), &inst.ranks);
        let l = inst.layout;
        if [l.dp, l.fsdp, l.tp, l.pp, l.sp].contains(&0) {
            out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/layout"),
                format!("a factor of `{}`'s layout is 0", inst.id),
            ));
        } else {
            // In 64 bits: hand-edited factors may overflow `Layout::devices`.
            let devices = [l.fsdp, l.tp, l.pp]
                .into_iter()
                .fold(u64::from(l.dp), |n, f| n.saturating_mul(u64::from(f)));
            if devices != u64::from(inst.ranks.len()) {
                out.push(err(
                    PlanCode::Inconsistent,
                    format!("{path}/layout"),
                    format!(
                        "`{}` has {} ranks but its layout needs {devices}",
                        inst.id,
                        inst.ranks.len(),
                    ),
                ));
            }
        }
    }

    let n_ops = plan.ops.len() as u64;
    let n_values = plan.values.len() as u64;
    let op_ref = |out: &mut Vec<PlanError>, path: String, id: u32| {
        if u64::from(id) >= n_ops {
            out.push(err(
                PlanCode::DanglingReference,
                path,
                format!("no op {id} (the plan has {n_ops})"),
            ));
        }
    };
    let value_ref = |out: &mut Vec<PlanError>, path: String, id: u32| {
        if u64::from(id) >= n_values {
            out.push(err(
                PlanCode::DanglingReference,
                path,
                format!("no value {id} (the plan has {n_values})"),
            ));
        }
    };

    for (i, v) in plan.values.iter().enumerate() {
        let path = format!("/values/{i}");
        if v.id as usize != i {
            out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/id"),
                format!("value {i} has id {}", v.id),
            ));
        }
        match v.producer {
            Some(p) => op_ref(&mut out, format!("{path}/producer"), p),
            None if !plan.carried.iter().any(|c| c.value == v.id) => out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/producer"),
                format!("value `{}` has no producer and is not carried", v.name),
            )),
            None => {}
        }
        instance_ref(&mut out, format!("{path}/at"), &v.at);
    }

    for (i, c) in plan.carried.iter().enumerate() {
        let path = format!("/carried/{i}");
        value_ref(&mut out, format!("{path}/value"), c.value);
        if let Some(next) = c.next {
            value_ref(&mut out, format!("{path}/next"), next);
        }
        if let Some(v) = plan.values.get(c.value as usize)
            && v.producer.is_some()
        {
            out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/value"),
                format!(
                    "carried `{}` reads value {}, which an op produces",
                    c.name, c.value
                ),
            ));
        }
        if !c.ty.shape.is_empty() || !matches!(c.ty.dtype.as_str(), "f32" | "i64") {
            out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/type"),
                format!(
                    "carried `{}` is `{}`, not an `f32` or `i64` scalar",
                    c.name, c.ty
                ),
            ));
        }
        ranks_ok(&mut out, format!("{path}/ranks"), &c.ranks);
    }

    for (i, op) in plan.ops.iter().enumerate() {
        let path = format!("/ops/{i}");
        if op.id as usize != i {
            out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/id"),
                format!("op {i} has id {}", op.id),
            ));
        }
        ranks_ok(&mut out, format!("{path}/ranks"), &op.ranks);
        if let Some(inst) = &op.instance {
            instance_ref(&mut out, format!("{path}/instance"), inst);
        }
        for (k, u) in op.uses.iter().enumerate() {
            instance_ref(&mut out, format!("{path}/uses/{k}"), u);
        }
        for (k, input) in op.inputs.iter().enumerate() {
            value_ref(&mut out, format!("{path}/inputs/{k}/value"), input.value);
        }
        for (k, &v) in op.outputs.iter().enumerate() {
            value_ref(&mut out, format!("{path}/outputs/{k}"), v);
        }
        for (k, &d) in op.deps.iter().enumerate() {
            op_ref(&mut out, format!("{path}/deps/{k}"), d);
            if d as usize >= i && u64::from(d) < n_ops {
                out.push(err(
                    PlanCode::Order,
                    format!("{path}/deps/{k}"),
                    format!("op {i} depends on op {d}, which does not come before it"),
                ));
            } else if let Some(dep) = plan.ops.get(d as usize)
                && dep.level >= op.level
            {
                out.push(err(
                    PlanCode::Order,
                    format!("{path}/level"),
                    format!(
                        "op {i} (level {}) depends on op {d} of level {}",
                        op.level, dep.level
                    ),
                ));
            }
        }
        if let Some(role) = op.kind.role() {
            role_ref(&mut out, format!("{path}/kind/role"), role);
        }
        if let OpKind::Sample { dataset, .. } = &op.kind
            && plan.dataset(dataset).is_none()
        {
            out.push(err(
                PlanCode::DanglingReference,
                format!("{path}/kind/dataset"),
                format!("no dataset `{dataset}` in `datasets`"),
            ));
        }
        if let OpKind::Generate { env: Some(env), .. } = &op.kind
            && !plan.environments.iter().any(|e| e.name == env.environment)
        {
            out.push(err(
                PlanCode::DanglingReference,
                format!("{path}/kind/env/environment"),
                format!("no environment `{}` in `environments`", env.environment),
            ));
        }
        // Each kernel op's and loss's entry in the kernel table; only a dataset's `score` (which
        // the runtime implements) has none.
        let kernel = match &op.kind {
            OpKind::Kernel {
                kernel: None,
                function,
                ..
            } if !function
                .rsplit_once('.')
                .is_some_and(|(d, f)| f == "score" && plan.dataset(d).is_some()) =>
            {
                out.push(err(
                    PlanCode::DanglingReference,
                    format!("{path}/kind/kernel"),
                    format!("the kernel op `{function}` carries no kernel"),
                ));
                None
            }
            OpKind::Kernel { kernel, .. } => kernel.map(|k| (k, format!("{path}/kind/kernel"))),
            OpKind::Update { loss, .. } => Some((loss.kernel, format!("{path}/kind/loss/kernel"))),
            _ => None,
        };
        if let Some((k, at)) = kernel
            && k as usize >= plan.kernels.len()
        {
            out.push(err(
                PlanCode::DanglingReference,
                at,
                format!(
                    "no kernel {k} in `kernels` ({} of them)",
                    plan.kernels.len()
                ),
            ));
        }
        if let OpKind::Verify {
            verifier, dataset, ..
        } = &op.kind
        {
            if !plan.verifiers.iter().any(|v| &v.name == verifier) {
                out.push(err(
                    PlanCode::DanglingReference,
                    format!("{path}/kind/verifier"),
                    format!("no verifier `{verifier}` in `verifiers`"),
                ));
            }
            if plan.dataset(dataset).is_none() {
                out.push(err(
                    PlanCode::DanglingReference,
                    format!("{path}/kind/dataset"),
                    format!("no dataset `{dataset}` in `datasets`"),
                ));
            }
        }
        match &op.kind {
            OpKind::Transfer {
                value,
                from,
                to,
                sends,
                ..
            } => {
                value_ref(&mut out, format!("{path}/kind/value"), *value);
                instance_ref(&mut out, format!("{path}/kind/from"), from);
                instance_ref(&mut out, format!("{path}/kind/to"), to);
                for (k, s) in sends.iter().enumerate() {
                    if s.from >= world {
                        out.push(err(
                            PlanCode::RankOutOfBounds,
                            format!("{path}/kind/sends/{k}/from"),
                            format!("rank {} is not below the world size {world}", s.from),
                        ));
                    }
                    ranks_ok(&mut out, format!("{path}/kind/sends/{k}/to"), &s.to);
                }
            }
            OpKind::WeightSync {
                from, to, moves, ..
            } => {
                instance_ref(&mut out, format!("{path}/kind/from"), from);
                instance_ref(&mut out, format!("{path}/kind/to"), to);
                for (k, m) in moves.iter().enumerate() {
                    if m.from >= world {
                        out.push(err(
                            PlanCode::RankOutOfBounds,
                            format!("{path}/kind/moves/{k}/from"),
                            format!("rank {} is not below the world size {world}", m.from),
                        ));
                    }
                    ranks_ok(&mut out, format!("{path}/kind/moves/{k}/to"), &m.to);
                }
            }
            OpKind::Checkpoint { instance, .. } => {
                instance_ref(&mut out, format!("{path}/kind/instance"), instance)
            }
            OpKind::Log { fields } => {
                for (k, f) in fields.iter().enumerate() {
                    value_ref(&mut out, format!("{path}/kind/fields/{k}/value"), f.value);
                }
            }
            OpKind::Update { loss, .. } => {
                for (k, c) in loss.captures.iter().enumerate() {
                    value_ref(
                        &mut out,
                        format!("{path}/kind/loss/captures/{k}/value"),
                        c.value,
                    );
                }
            }
            _ => {}
        }
    }

    for (i, e) in plan.edges.iter().enumerate() {
        let path = format!("/edges/{i}");
        value_ref(&mut out, format!("{path}/value"), e.value);
        op_ref(&mut out, format!("{path}/from"), e.from);
        op_ref(&mut out, format!("{path}/to"), e.to);
        if let Some(v) = e.via {
            op_ref(&mut out, format!("{path}/via"), v);
        }
    }

    let mut programmed = RankSet::default();
    for (i, p) in plan.programs.iter().enumerate() {
        let path = format!("/programs/{i}");
        ranks_ok(&mut out, format!("{path}/ranks"), &p.ranks);
        if programmed.intersects(&p.ranks) {
            out.push(err(
                PlanCode::Inconsistent,
                format!("{path}/ranks"),
                "ranks with two programs",
            ));
        }
        programmed = programmed.union(&p.ranks);
        for r in p.resident.keys() {
            instance_ref(&mut out, format!("{path}/resident/{r}"), r);
        }
        let mut done: BTreeSet<u32> = BTreeSet::new();
        for (k, step) in p.steps.iter().enumerate() {
            match step {
                Step::Run { op, .. } => {
                    op_ref(&mut out, format!("{path}/steps/{k}/op"), *op);
                    if let Some(o) = plan.ops.get(*op as usize) {
                        if let Some(r) = p.ranks.iter().find(|r| !o.ranks.contains(*r)) {
                            out.push(err(
                                PlanCode::RankOutOfBounds,
                                format!("{path}/steps/{k}/op"),
                                format!("rank {r} runs op {op}, which does not list it"),
                            ));
                        }
                        // A dependency on an op this rank also runs must have run already.
                        for d in &o.deps {
                            if let Some(dep) = plan.ops.get(*d as usize)
                                && p.ranks.iter().any(|r| dep.ranks.contains(r))
                                && !done.contains(d)
                            {
                                out.push(err(
                                    PlanCode::Order,
                                    format!("{path}/steps/{k}"),
                                    format!("op {op} runs before op {d}, which it depends on"),
                                ));
                            }
                        }
                    }
                    done.insert(*op);
                }
                Step::Offload { instance, .. } | Step::Onload { instance, .. } => {
                    instance_ref(&mut out, format!("{path}/steps/{k}/instance"), instance);
                }
            }
        }
    }
    meaning::check(plan, &mut out);
    out.sort();
    out.dedup();
    out
}
