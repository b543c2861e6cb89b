//! Nothing a program states is dropped. For every parameter of every configuration constructor
//! and of the role and dataset methods the checker accepts (`rlc_check::builtins`), a program
//! that sets it to a value other than the one the base program has (its default, when the base
//! leaves it out) is lowered, and the runtime's reading of the plan (`exec::settings`, what the
//! role states and generate ops are built from; for the others, the plan fields the runtime
//! reads as they are) must show that value. A parameter added to the language without a case
//! here fails `every_parameter_has_a_case`.

mod common;

use rlc_plan::Plan;
use rlc_plan::model::{DatasetSource, Init, OpKind};
use rlc_runtime::exec::settings::{self, GenerateSettings, RoleSettings};

const BASE: &str = r#"
import std.algo { token_mean }

dataset reverse = task(kind: "reverse_digits", digits: 3)
dataset lines = jsonl("prompts.jsonl", field: "question")
cluster local = cpu(devices: 2)
verifier v = program("python3", "v.py", metrics: ["m"])
environment e = program("python3", "e.py")

model policy: CausalLM {
  arch  = arch(layers: 1, hidden: 32, heads: 2, vocab: 16, max_len: 16)
  init  = random(seed: 3)
  optim = adamw(lr: 1e-2)
}
model reference: CausalLM = frozen(policy)

place policy    on local[0..2] with dp(2)
place reference on local[0..2] with dp(2)

fn length(mask: Mask[B, T]) -> f32[B] {
  mean(f32(mask), over: T)
}

pipeline train(steps = 4, prompts = 4, group = 4) {
  loop step in 0..steps {
    let rollout  = policy.generate(reverse.sample(prompts), n: group, max_new: 4)
    let ref_logp = reference.logprobs(rollout)
    let reward   = length(rollout.mask)
    let score    = v(rollout)
    let multi    = policy.generate(reverse.sample(prompts), n: group, max_new: 3,
                                   env: e, max_turns: 2, max_obs: 2)
    policy.update(rollout) { logp -> token_mean(ref_logp - logp, rollout.mask) }
    log { reward: mean(reward) }
  }
}
"#;

/// What the runtime resolves from a plan.
struct Resolved {
    plan: Plan,
    policy: RoleSettings,
    generate: GenerateSettings,
}

fn resolve(source: &str) -> Resolved {
    let checked = common::checked("job.rl", source);
    let plan = rlc_plan::lower::lower(&checked).expect("the program lowers");
    let policy = settings::role(&plan, "policy", 10).expect("the policy's settings");
    let generate = plan
        .ops
        .iter()
        .find(|op| matches!(op.kind, OpKind::Generate { .. }))
        .map(|op| settings::generate(&op.kind, &op.label).expect("the sampling"))
        .expect("a generate op");
    Resolved {
        plan,
        policy,
        generate,
    }
}

type Observe = fn(&Resolved) -> String;

/// One parameter: an edit of the base program (`from` → `to`, after the case's own base edit,
/// if any) and where the runtime shows the value.
struct Case {
    call: &'static str,
    param: &'static str,
    base: Option<(&'static str, &'static str)>,
    from: &'static str,
    to: &'static str,
    observe: Observe,
    expected: &'static str,
}

const fn case(
    call: &'static str,
    param: &'static str,
    from: &'static str,
    to: &'static str,
    observe: Observe,
    expected: &'static str,
) -> Case {
    Case {
        call,
        param,
        base: None,
        from,
        to,
        observe,
        expected,
    }
}

fn model(r: &Resolved) -> &rlc_runtime::model::ModelConfig {
    r.policy.model.as_ref().expect("a random init's model")
}

fn training(r: &Resolved) -> &settings::TrainingSettings {
    r.policy.training.as_ref().expect("the policy trains")
}

fn policy_init(r: &Resolved) -> String {
    format!("{:?}", r.plan.role("policy").unwrap().init)
}

fn dataset(r: &Resolved) -> String {
    let sampled = r
        .plan
        .ops
        .iter()
        .find_map(|op| match &op.kind {
            OpKind::Sample { dataset, .. } => Some(dataset.clone()),
            _ => None,
        })
        .unwrap();
    format!("{:?}", r.plan.dataset(&sampled).unwrap().source)
}

fn op_field(r: &Resolved, pick: fn(&OpKind) -> Option<String>) -> String {
    r.plan.ops.iter().find_map(|op| pick(&op.kind)).unwrap()
}

fn update(r: &Resolved) -> String {
    op_field(r, |k| match k {
        OpKind::Update {
            batch,
            epochs,
            minibatch,
            ..
        } => Some(format!("{batch:?} {epochs} {minibatch:?}")),
        _ => None,
    })
}

fn sample(r: &Resolved) -> String {
    op_field(r, |k| match k {
        OpKind::Sample {
            count, form, split, ..
        } => Some(format!("{count:?} {form:?} {split:?}")),
        _ => None,
    })
}

/// The count of the supervised (demonstrations or preferences) sample op.
fn supervised_count(r: &Resolved) -> String {
    op_field(r, |k| match k {
        OpKind::Sample {
            form: Some(_),
            count,
            ..
        } => Some(format!("{count:?}")),
        _ => None,
    })
}

/// The split of the supervised sample op.
fn supervised_split(r: &Resolved) -> String {
    op_field(r, |k| match k {
        OpKind::Sample {
            form: Some(_),
            split,
            ..
        } => Some(format!("{split:?}")),
        _ => None,
    })
}

fn cluster(r: &Resolved) -> String {
    let c = &r.plan.clusters[0];
    format!(
        "{} {} {} {}",
        r.plan.world_size, c.memory, c.flops, c.memory_bandwidth
    )
}

/// The verifier as an HTTP server.
const HTTP: (&str, &str) = (
    "program(\"python3\", \"v.py\", metrics: [\"m\"])",
    "http(\"http://127.0.0.1:9/a\", metrics: [\"m\"])",
);

/// The environment as an HTTP server.
const ENV_HTTP: (&str, &str) = (
    "environment e = program(\"python3\", \"e.py\")",
    "environment e = http(\"http://127.0.0.1:9/e\")",
);

fn environment(r: &Resolved) -> &rlc_plan::model::Environment {
    r.plan.environments.first().expect("the plan's environment")
}

/// The multi-turn settings of the plan's second `generate` op (the base's first is single-turn).
fn generate_env(r: &Resolved) -> String {
    let env = r
        .plan
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Generate { env, .. } => Some(env),
            _ => None,
        })
        .nth(1)
        .expect("a second generate op");
    format!("{env:?}")
}

/// The environment cases: `program(…)`'s options and `http(…)`'s (those that are not a worker
/// process's limits), and `generate`'s `env`, `max_turns` and `max_obs`.
fn environment_cases() -> Vec<Case> {
    // `written` after the endpoint: `"e.py", workers: 3)`, or `…9/e", workers: 3)` for `http`.
    let option = |call: &'static str, param, written: &str, observe, expected| {
        let (base, from) = if call == "environment http" {
            (Some(ENV_HTTP), "9/e\")")
        } else {
            (None, "\"e.py\")")
        };
        let to = format!("{}, {written})", from.trim_end_matches(')'));
        Case {
            call,
            param,
            base,
            from,
            to: Box::leak(to.into_boxed_str()),
            observe,
            expected,
        }
    };
    let mut cases = vec![
        case(
            "environment program",
            "command",
            "\"e.py\"",
            "\"f.py\"",
            |r| format!("{:?}", environment(r).endpoint),
            "Program { command: [\"python3\", \"f.py\"] }",
        ),
        Case {
            base: Some(ENV_HTTP),
            ..case(
                "environment http",
                "url",
                "9/e\"",
                "9/f\"",
                |r| format!("{:?}", environment(r).endpoint),
                "Http { url: \"http://127.0.0.1:9/f\" }",
            )
        },
        // `generate`'s, on the base's second generate op.
        Case {
            base: Some((
                "environment e = ",
                "environment f = program(\"python3\", \"f.py\")\nenvironment e = ",
            )),
            ..case(
                "generate",
                "env",
                "env: e,",
                "env: f,",
                generate_env,
                "Some(EnvTurns { environment: \"f\", max_turns: 2, max_obs: 2 })",
            )
        },
        case(
            "generate",
            "max_turns",
            "max_turns: 2",
            "max_turns: 1",
            generate_env,
            "Some(EnvTurns { environment: \"e\", max_turns: 1, max_obs: 2 })",
        ),
        case(
            "generate",
            "max_obs",
            "max_obs: 2",
            "max_obs: 3",
            generate_env,
            "Some(EnvTurns { environment: \"e\", max_turns: 2, max_obs: 3 })",
        ),
    ];
    for call in ["environment program", "environment http"] {
        cases.extend([
            option(
                call,
                "workers",
                "workers: 3",
                |r| environment(r).workers.to_string(),
                "3",
            ),
            option(
                call,
                "batch",
                "batch: 7",
                |r| environment(r).batch.to_string(),
                "7",
            ),
            option(
                call,
                "timeout",
                "timeout: 5s",
                |r| environment(r).timeout_ms.to_string(),
                "5000",
            ),
            option(
                call,
                "on_error",
                "on_error: zero",
                |r| format!("{:?}", environment(r).on_error),
                "Zero",
            ),
            option(
                call,
                "fields",
                "fields: [\"answer\"]",
                |r| format!("{:?}", environment(r).fields),
                "[\"answer\"]",
            ),
        ]);
    }
    let program = "environment program";
    cases.extend([
        option(
            program,
            "cpu",
            "cpu: 7s",
            |r| format!("{:?}", environment(r).limits.cpu_seconds),
            "Some(7)",
        ),
        option(
            program,
            "memory",
            "memory: 256MiB",
            |r| format!("{:?}", environment(r).limits.memory_bytes),
            "Some(268435456)",
        ),
        option(
            program,
            "files",
            "files: 1MiB",
            |r| format!("{:?}", environment(r).limits.file_bytes),
            "Some(1048576)",
        ),
        option(
            program,
            "processes",
            "processes: 4",
            |r| format!("{:?}", environment(r).limits.processes),
            "Some(4)",
        ),
        option(
            program,
            "network",
            "network: true",
            |r| environment(r).limits.no_network.to_string(),
            "false",
        ),
    ]);
    cases
}

fn verifier(r: &Resolved) -> &rlc_plan::model::Verifier {
    r.plan.verifiers.first().expect("the plan's verifier")
}

fn verify_fields(r: &Resolved) -> String {
    op_field(r, |k| match k {
        OpKind::Verify { fields, .. } => Some(format!("{fields:?}")),
        _ => None,
    })
}

/// The verifier cases: `program(…)`'s options and `http(…)`'s (those that are not a worker
/// process's limits).
fn verifier_cases() -> Vec<Case> {
    let option = |call, param, to, observe, expected| {
        let c = case(call, param, "metrics: [\"m\"]", to, observe, expected);
        if call == "http" {
            Case {
                base: Some(HTTP),
                ..c
            }
        } else {
            c
        }
    };
    let mut cases = vec![
        case(
            "program",
            "command",
            "\"v.py\"",
            "\"w.py\"",
            |r| format!("{:?}", verifier(r).endpoint),
            "Program { command: [\"python3\", \"w.py\"] }",
        ),
        Case {
            base: Some(HTTP),
            ..case(
                "http",
                "url",
                "9/a\"",
                "9/b\"",
                |r| format!("{:?}", verifier(r).endpoint),
                "Http { url: \"http://127.0.0.1:9/b\" }",
            )
        },
    ];
    for call in ["program", "http"] {
        cases.extend([
            option(
                call,
                "workers",
                "metrics: [\"m\"], workers: 3",
                |r| verifier(r).workers.to_string(),
                "3",
            ),
            option(
                call,
                "batch",
                "metrics: [\"m\"], batch: 7",
                |r| verifier(r).batch.to_string(),
                "7",
            ),
            option(
                call,
                "timeout",
                "metrics: [\"m\"], timeout: 5s",
                |r| verifier(r).timeout_ms.to_string(),
                "5000",
            ),
            option(
                call,
                "on_error",
                "metrics: [\"m\"], on_error: zero",
                |r| format!("{:?}", verifier(r).on_error),
                "Zero",
            ),
            option(
                call,
                "fields",
                "metrics: [\"m\"], fields: [\"answer\"]",
                verify_fields,
                "[\"answer\"]",
            ),
            option(
                call,
                "metrics",
                "metrics: [\"m\", \"n\"]",
                |r| format!("{:?}", verifier(r).metrics),
                "[\"m\", \"n\"]",
            ),
        ]);
    }
    cases.extend([
        option(
            "program",
            "cpu",
            "metrics: [\"m\"], cpu: 7s",
            |r| format!("{:?}", verifier(r).limits.cpu_seconds),
            "Some(7)",
        ),
        option(
            "program",
            "memory",
            "metrics: [\"m\"], memory: 256MiB",
            |r| format!("{:?}", verifier(r).limits.memory_bytes),
            "Some(268435456)",
        ),
        option(
            "program",
            "files",
            "metrics: [\"m\"], files: 1MiB",
            |r| format!("{:?}", verifier(r).limits.file_bytes),
            "Some(1048576)",
        ),
        option(
            "program",
            "processes",
            "metrics: [\"m\"], processes: 4",
            |r| format!("{:?}", verifier(r).limits.processes),
            "Some(4)",
        ),
        option(
            "program",
            "network",
            "metrics: [\"m\"], network: true",
            |r| verifier(r).limits.no_network.to_string(),
            "false",
        ),
    ]);
    cases
}

const JSONL: (&str, &str) = ("reverse.sample(prompts)", "lines.sample(prompts)");
const DEVICE: (&str, &str) = (
    "cluster local = cpu(devices: 2)",
    "cluster local {\n  nodes = 1\n  devices_per_node = 2\n  \
     device = device(memory: 16GiB, flops: 50GFLOPS, bandwidth: 20GBps)\n}",
);
const SUPERVISED: (&str, &str) = (
    "    log { reward: mean(reward) }",
    "    let demos = reverse.demonstrations(8)\n    \
     policy.update(demos) { logp -> token_mean(-logp, demos.mask) }\n    \
     log { reward: mean(reward) }",
);
const PAIRS: (&str, &str) = (
    "    log { reward: mean(reward) }",
    "    let pairs = reverse.preferences(8)\n    \
     policy.update(pairs) { logp -> token_mean(-logp, pairs.mask) }\n    \
     log { reward: mean(reward) }",
);
const OTHER_MODEL: &str = "model reference: CausalLM = frozen(policy)";
/// The policy generating on devices of its own (asynchronous generation needs them).
const SPLIT: (&str, &str) = (
    "place policy    on local[0..2] with dp(2)",
    "place policy.generate on local[0..1] with dp(1)\nplace policy.train on local[1..2] with dp(1)",
);

fn cases() -> Vec<Case> {
    let mut cases = setting_cases();
    cases.extend(verifier_cases());
    cases.extend(environment_cases());
    cases
}

/// The configuration constructors' and the role and dataset methods' cases.
fn setting_cases() -> Vec<Case> {
    let arch =
        |param, to, observe, expected| case("arch", param, "max_len: 16)", to, observe, expected);
    let adamw = |param, to, observe, expected| {
        case("adamw", param, "adamw(lr: 1e-2)", to, observe, expected)
    };
    let generate = |param, to, observe, expected| {
        case("generate", param, "max_new: 4)", to, observe, expected)
    };
    let with_base = |base, c: Case| Case {
        base: Some(base),
        ..c
    };
    vec![
        // A model's precision: the kind its weights are held in.
        case(
            "model",
            "precision",
            "init  = random(seed: 3)",
            "init  = random(seed: 3)\n  precision = bf16",
            |r| format!("{:?}", r.policy.weights),
            "Some(BFloat16)",
        ),
        // A model's architecture: the random init's model configuration.
        case(
            "arch",
            "layers",
            "layers: 1",
            "layers: 3",
            |r| model(r).layers.to_string(),
            "3",
        ),
        case(
            "arch",
            "hidden",
            "hidden: 32",
            "hidden: 48",
            |r| model(r).hidden.to_string(),
            "48",
        ),
        case(
            "arch",
            "heads",
            "heads: 2",
            "heads: 4",
            |r| model(r).heads.to_string(),
            "4",
        ),
        arch(
            "kv_heads",
            "max_len: 16, kv_heads: 1)",
            |r| model(r).kv_heads.to_string(),
            "1",
        ),
        arch(
            "ffn",
            "max_len: 16, ffn: 40)",
            |r| model(r).ffn.to_string(),
            "40",
        ),
        case(
            "arch",
            "vocab",
            "vocab: 16",
            "vocab: 20",
            |r| model(r).vocab.to_string(),
            "20",
        ),
        case(
            "arch",
            "max_len",
            "max_len: 16",
            "max_len: 24",
            |r| model(r).max_len.to_string(),
            "24",
        ),
        arch(
            "rope_theta",
            "max_len: 16, rope_theta: 500000.0)",
            |r| model(r).rope_theta.to_string(),
            "500000",
        ),
        arch(
            "tie_embeddings",
            "max_len: 16, tie_embeddings: true)",
            |r| model(r).tie_embeddings.to_string(),
            "true",
        ),
        arch(
            "norm_eps",
            "max_len: 16, norm_eps: 1e-6)",
            |r| model(r).norm_eps.to_string(),
            "0.000001",
        ),
        arch(
            "positions",
            "max_len: 16, positions: \"learned\")",
            |r| format!("{:?}", model(r).positions),
            "Learned",
        ),
        // The optimizer, its schedule and clipping.
        case(
            "adamw",
            "lr",
            "lr: 1e-2",
            "lr: 2e-2",
            |r| training(r).schedule.peak_lr.to_string(),
            "0.02",
        ),
        adamw(
            "warmup",
            "adamw(lr: 1e-2, warmup: 3)",
            |r| training(r).schedule.warmup_steps.to_string(),
            "3",
        ),
        adamw(
            "weight_decay",
            "adamw(lr: 1e-2, weight_decay: 0.05)",
            |r| training(r).adamw.weight_decay.to_string(),
            "0.05",
        ),
        adamw(
            "clip",
            "adamw(lr: 1e-2, clip: 0.5)",
            |r| training(r).clip.to_string(),
            "0.5",
        ),
        adamw(
            "beta1",
            "adamw(lr: 1e-2, beta1: 0.8)",
            |r| training(r).adamw.beta1.to_string(),
            "0.8",
        ),
        adamw(
            "beta2",
            "adamw(lr: 1e-2, beta2: 0.95)",
            |r| training(r).adamw.beta2.to_string(),
            "0.95",
        ),
        adamw(
            "eps",
            "adamw(lr: 1e-2, eps: 1e-6)",
            |r| training(r).adamw.eps.to_string(),
            "0.000001",
        ),
        adamw(
            "schedule",
            "adamw(lr: 1e-2, schedule: \"linear\")",
            |r| format!("{:?}", training(r).schedule.shape),
            "Linear",
        ),
        adamw(
            "min_lr_ratio",
            "adamw(lr: 1e-2, min_lr_ratio: 0.25)",
            |r| training(r).schedule.min_lr.to_string(),
            "0.0025",
        ),
        // Initial weights: the plan's `init`, which the runtime's `initial_weights` matches on.
        case(
            "random",
            "seed",
            "random(seed: 3)",
            "random(seed: 5)",
            policy_init,
            "Random { seed: 5 }",
        ),
        case(
            "hf",
            "path",
            "random(seed: 3)",
            "hf(\"models/base\")",
            policy_init,
            "HuggingFace { path: \"models/base\" }",
        ),
        case(
            "load",
            "path",
            "random(seed: 3)",
            "load(\"runs/a/policy\")",
            policy_init,
            "Checkpoint { path: \"runs/a/policy\" }",
        ),
        case(
            "frozen",
            "model",
            OTHER_MODEL,
            "model base: CausalLM {\n  arch = arch(layers: 1, hidden: 32, heads: 2, vocab: 16, max_len: 16)\n  \
             init = random(seed: 9)\n}\nmodel reference: CausalLM = frozen(base)",
            |r| format!("{:?}", r.plan.role("reference").unwrap().init),
            "CopyOf { role: \"base\" }",
        ),
        // Datasets: the plan's `datasets`, which the runtime's sources are made from.
        case(
            "task",
            "kind",
            "\"reverse_digits\"",
            "\"sort_digits\"",
            dataset,
            "Task { task: SortDigits, digits: 3 }",
        ),
        case(
            "task",
            "digits",
            "digits: 3",
            "digits: 5",
            dataset,
            "Task { task: ReverseDigits, digits: 5 }",
        ),
        with_base(
            JSONL,
            case(
                "jsonl",
                "path",
                "\"prompts.jsonl\"",
                "\"data/other.jsonl\"",
                dataset,
                "Jsonl { path: \"data/other.jsonl\", field: \"question\", tokenizer: None, keep: [] }",
            ),
        ),
        with_base(
            JSONL,
            case(
                "jsonl",
                "field",
                "field: \"question\"",
                "field: \"prompt\"",
                dataset,
                "Jsonl { path: \"prompts.jsonl\", field: \"prompt\", tokenizer: None, keep: [] }",
            ),
        ),
        with_base(
            JSONL,
            case(
                "jsonl",
                "tokenizer",
                "field: \"question\"",
                "field: \"question\", tokenizer: \"tok\"",
                dataset,
                "Jsonl { path: \"prompts.jsonl\", field: \"question\", tokenizer: Some(\"tok\"), keep: [] }",
            ),
        ),
        with_base(
            JSONL,
            case(
                "jsonl",
                "keep",
                "field: \"question\"",
                "field: \"question\", keep: [\"answer\", \"source\"]",
                dataset,
                "Jsonl { path: \"prompts.jsonl\", field: \"question\", tokenizer: None, keep: [\"answer\", \"source\"] }",
            ),
        ),
        // Devices: the plan's cluster, which fixes the ranks and the planner's costs.
        case(
            "cpu",
            "devices",
            "cpu(devices: 2)",
            "cpu(devices: 4)",
            |r| r.plan.world_size.to_string(),
            "4",
        ),
        with_base(
            DEVICE,
            case(
                "device",
                "memory",
                "memory: 16GiB",
                "memory: 8GiB",
                cluster,
                "2 8589934592 50000000000 20000000000",
            ),
        ),
        with_base(
            DEVICE,
            case(
                "device",
                "flops",
                "flops: 50GFLOPS",
                "flops: 70GFLOPS",
                cluster,
                "2 17179869184 70000000000 20000000000",
            ),
        ),
        with_base(
            DEVICE,
            case(
                "device",
                "bandwidth",
                "bandwidth: 20GBps",
                "bandwidth: 30GBps",
                cluster,
                "2 17179869184 50000000000 30000000000",
            ),
        ),
        // Generation: the sampling the generate op runs with.
        case(
            "generate",
            "prompts",
            "reverse.sample(prompts)",
            "reverse.sample(3)",
            |r| {
                op_field(r, |k| match k {
                    OpKind::Generate { batch, .. } => Some(format!("{batch:?}")),
                    _ => None,
                })
            },
            "Some(12)",
        ),
        case(
            "generate",
            "n",
            "n: group",
            "n: 2",
            |r| r.generate.n.to_string(),
            "2",
        ),
        case(
            "generate",
            "max_new",
            "max_new: 4",
            "max_new: 6",
            |r| r.generate.max_new.to_string(),
            "6",
        ),
        generate(
            "temperature",
            "max_new: 4, temperature: 0.7)",
            |r| r.generate.sampling.temperature.to_string(),
            "0.7",
        ),
        generate(
            "top_p",
            "max_new: 4, top_p: 0.9)",
            |r| format!("{:?}", r.generate.sampling.top_p),
            "Some(0.9)",
        ),
        generate(
            "top_k",
            "max_new: 4, top_k: 5)",
            |r| format!("{:?}", r.generate.sampling.top_k),
            "Some(5)",
        ),
        // The generator's lead, and the weight sync that keeps it: `lag` steps behind.
        with_base(
            SPLIT,
            generate(
                "staleness",
                "max_new: 4, staleness: 2)",
                |r| {
                    let lag = op_field(r, |k| match k {
                        OpKind::WeightSync { lag, .. } => Some(lag.to_string()),
                        _ => None,
                    });
                    format!("{} {lag}", r.generate.staleness)
                },
                "2 2",
            ),
        ),
        with_base(
            SPLIT,
            generate(
                "pause_at",
                "max_new: 4, staleness: 1, pause_at: 2)",
                |r| format!("{:?}", r.generate.pause_at),
                "Some(2)",
            ),
        ),
        // Training: the update op's fields, which `exec::update` reads.
        case(
            "update",
            "rollout",
            "policy.update(rollout) { logp -> token_mean(ref_logp - logp, rollout.mask) }",
            "let other = policy.generate(reverse.sample(2), n: group, max_new: 4)\n    \
             policy.update(other) { logp -> token_mean(-logp, other.mask) }",
            |r| {
                op_field(r, |k| match k {
                    OpKind::Update { batch, .. } => Some(format!("{batch:?}")),
                    _ => None,
                })
            },
            "Some(8)",
        ),
        case(
            "update",
            "epochs",
            "policy.update(rollout)",
            "policy.update(rollout, epochs: 2)",
            update,
            "Some(16) 2 Some(16)",
        ),
        case(
            "update",
            "minibatch",
            "policy.update(rollout)",
            "policy.update(rollout, minibatch: 8)",
            update,
            "Some(16) 1 Some(8)",
        ),
        // Sampling prompts and supervised data: the sample op's fields, which the runtime's
        // sources are drawn with.
        case(
            "sample",
            "n",
            "reverse.sample(prompts)",
            "reverse.sample(2)",
            sample,
            "Some(2) None None",
        ),
        with_base(
            SUPERVISED,
            case(
                "demonstrations",
                "n",
                "demonstrations(8)",
                "demonstrations(6)",
                supervised_count,
                "Some(6)",
            ),
        ),
        with_base(
            SUPERVISED,
            case(
                "demonstrations",
                "split",
                "demonstrations(8)",
                "demonstrations(8, split: \"test\")",
                supervised_split,
                "Some(Test)",
            ),
        ),
        with_base(
            PAIRS,
            case(
                "preferences",
                "n",
                "preferences(8)",
                "preferences(5)",
                supervised_count,
                "Some(5)",
            ),
        ),
        with_base(
            PAIRS,
            case(
                "preferences",
                "split",
                "preferences(8)",
                "preferences(8, split: \"test\")",
                supervised_split,
                "Some(Test)",
            ),
        ),
    ]
}

#[test]
fn every_parameter_has_a_case() {
    let cases = cases();
    let methods = [
        "generate",
        "update",
        "sample",
        "demonstrations",
        "preferences",
    ];
    let mut missing = Vec::new();
    for call in rlc_check::builtins::CONFIGURATION.iter().chain(&methods) {
        let params = rlc_check::builtins::parameters(call).expect("a known call");
        for (param, _) in params {
            if !cases.iter().any(|c| c.call == *call && c.param == *param) {
                missing.push(format!("{call}({param}:)"));
            }
        }
    }
    // A verifier's options, and its command or URL.
    use rlc_check::value::{VERIFIER_OPTIONS, VERIFIER_PROCESS_OPTIONS};
    let http = VERIFIER_OPTIONS
        .iter()
        .filter(|o| !VERIFIER_PROCESS_OPTIONS.contains(o));
    let verifier_params = VERIFIER_OPTIONS
        .iter()
        .chain(&["command"])
        .map(|p| ("program", *p))
        .chain(http.chain(&["url"]).map(|p| ("http", *p)));
    for (call, param) in verifier_params {
        if !cases.iter().any(|c| c.call == call && c.param == param) {
            missing.push(format!("{call}({param}:)"));
        }
    }
    // An environment's options (a verifier's but `metrics`), and its command or URL.
    use rlc_check::value::ENVIRONMENT_OPTIONS;
    let http = ENVIRONMENT_OPTIONS
        .iter()
        .filter(|o| !VERIFIER_PROCESS_OPTIONS.contains(o));
    let environment_params = ENVIRONMENT_OPTIONS
        .iter()
        .chain(&["command"])
        .map(|p| ("environment program", *p))
        .chain(http.chain(&["url"]).map(|p| ("environment http", *p)));
    for (call, param) in environment_params {
        if !cases.iter().any(|c| c.call == call && c.param == param) {
            missing.push(format!("{call}({param}:)"));
        }
    }
    assert!(
        missing.is_empty(),
        "no case shows where these reach the runtime: {missing:?}"
    );
}

#[test]
fn every_setting_reaches_the_runtime() {
    for c in cases() {
        let what = format!("{}({}:)", c.call, c.param);
        let mut base = BASE.to_string();
        if let Some((from, to)) = c.base {
            assert!(base.contains(from), "{what}: the base has no `{from}`");
            base = base.replacen(from, to, 1);
        }
        assert!(
            base.contains(c.from),
            "{what}: the base has no `{}`",
            c.from
        );
        let variant = base.replacen(c.from, c.to, 1);
        let before = (c.observe)(&resolve(&base));
        let after = (c.observe)(&resolve(&variant));
        assert_ne!(
            before, c.expected,
            "{what}: the base already shows the value"
        );
        assert_eq!(
            after, c.expected,
            "{what}: the runtime does not see the program's value"
        );
    }
}

#[test]
fn the_datasets_come_from_the_plan() {
    // The plan alone says what to sample: an imported dataset is listed under its item's name.
    let r = resolve(BASE);
    assert_eq!(r.plan.datasets.len(), 1, "only sampled datasets are listed");
    assert!(matches!(
        r.plan.dataset("reverse").unwrap().source,
        DatasetSource::Task { digits: 3, .. }
    ));
    assert!(matches!(
        r.plan.role("policy").unwrap().init,
        Init::Random { seed: 3 }
    ));
}
