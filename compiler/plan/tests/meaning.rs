//! The loader validates what a plan means, not only its shape: a hand edit of any field that
//! would silently change or void the job (a count of 0, sizes that disagree, a missing edge, an
//! arch the cluster cannot hold, sampled log-probs taken from an op that did not sample them) is
//! a coded error (P0007–P0010) whose message names the field.
//! Each test builds a real plan from an example, edits one field of its JSON and loads it.

use rlc_diagnostics::Files;
use rlc_plan::{Plan, PlanError, lower};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

struct Disk;

impl rlc_check::SourceLoader for Disk {
    fn read(&self, path: &str) -> Result<String, String> {
        std::fs::read_to_string(root().join(path)).map_err(|e| e.to_string())
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn plan_of(path: &str) -> Plan {
    let text = std::fs::read_to_string(root().join(path)).expect("example readable");
    plan_of_text(path, text)
}

fn plan_of_text(path: &str, text: String) -> Plan {
    let mut files = Files::new();
    let checked = rlc_check::check(&Disk, &mut files, path, text);
    let errors: Vec<String> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.message.clone())
        .collect();
    assert!(errors.is_empty(), "{path}: {errors:#?}");
    lower::lower(&checked).unwrap_or_else(|e| panic!("{path} does not lower: {e:?}"))
}

fn examples() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rl"))
        .map(|p| format!("examples/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    out.sort();
    out
}

/// The example's plan as JSON, edited by `edit`, loaded: its errors (the edit must break it).
fn edited(example: &str, edit: impl FnOnce(&mut Value)) -> Vec<PlanError> {
    let mut json: Value = serde_json::from_str(&plan_of(example).to_json()).unwrap();
    edit(&mut json);
    rlc_plan::load(&serde_json::to_string_pretty(&json).unwrap())
        .expect_err("the edited plan is refused")
}

/// The index of the first op whose `kind.op` is `kind` (and, for role ops, whose role is `role`).
fn op(json: &Value, kind: &str, role: Option<&str>) -> usize {
    json["ops"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o["kind"]["op"] == kind && role.is_none_or(|r| o["kind"]["role"] == r))
        .unwrap_or_else(|| panic!("no {kind} op"))
}

/// Asserts that exactly one error is `code`, at `path`, and that its message names `field`
/// (in backticks) — and that nothing else is reported, so the root cause is reported once.
#[track_caller]
fn only(errors: &[PlanError], code: &str, path: &str, field: &str) {
    assert_eq!(errors.len(), 1, "one error expected: {errors:#?}");
    let e = &errors[0];
    assert_eq!(e.code.as_str(), code, "{e}");
    assert_eq!(e.path, path, "{e}");
    assert!(
        e.message.contains(&format!("`{field}`")),
        "the message names `{field}`: {e}"
    );
}

/// The main job with its loop written out (the tests edit the loop).
const GRPO: &str = "examples/grpo_digits_by_hand.rl";

#[test]
fn every_example_still_validates() {
    for path in examples() {
        let plan = plan_of(&path);
        assert_eq!(rlc_plan::validate(&plan), Vec::new(), "{path}");
        rlc_plan::load(&plan.to_json()).unwrap_or_else(|e| panic!("{path}: {e:#?}"));
    }
}

/// What a program may say is not a plan error: a plan built from a checked program always
/// validates (else `rlc build` would stop with an internal error).
#[test]
fn a_loop_of_no_steps_is_what_the_program_says() {
    let written = std::fs::read_to_string(root().join(GRPO)).unwrap();
    let text = written.replace("steps = 500", "steps = 0");
    assert_ne!(text, written);
    let plan = plan_of_text(GRPO, text);
    assert_eq!(plan.steps, Some(0));
    assert_eq!(rlc_plan::validate(&plan), Vec::new());
}

#[test]
fn update_counts_of_zero() {
    // grpo_digits: ops[6] is `policy.update` (batch 256, minibatch 128, minibatches 2, micro
    // 64, accumulation 1, optimizer_steps 2).
    for field in [
        "epochs",
        "minibatches",
        "micro",
        "minibatch",
        "accumulation",
        "optimizer_steps",
        "batch",
    ] {
        let mut at = 0;
        let errors = edited(GRPO, |j| {
            at = op(j, "update", Some("policy"));
            j["ops"][at]["kind"][field] = json!(0);
        });
        only(&errors, "P0007", &format!("/ops/{at}/kind/{field}"), field);
    }
}

#[test]
fn every_of_zero_never_runs() {
    // The checkpoint op runs `every 100 steps`; 0 would never run it.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        at = op(j, "checkpoint", None);
        assert_eq!(j["ops"][at]["every"], json!(100));
        j["ops"][at]["every"] = json!(0);
    });
    only(&errors, "P0007", &format!("/ops/{at}/every"), "every");
    // A carried value's assignment under `every`.
    let errors = edited("examples/rlhf_ppo.rl", |j| {
        j["carried"][0]["every"] = json!(0)
    });
    only(&errors, "P0007", "/carried/0/every", "every");
}

#[test]
fn other_counts_of_zero() {
    let errors = edited(GRPO, |j| j["instances"][0]["layout"]["micro"] = json!(0));
    // The update's `micro` (64) now also disagrees with its layout's: only the 0 is the cause,
    // but the update's own field is a second, independent contradiction.
    assert!(
        errors
            .iter()
            .any(|e| e.code.as_str() == "P0007" && e.path == "/instances/0/layout/micro"),
        "{errors:#?}"
    );
    for (field, value) in [("n", 0), ("max_new", 0), ("top_k", 0), ("prompt_len", 0)] {
        let mut at = 0;
        let errors = edited(GRPO, |j| {
            at = op(j, "generate", None);
            j["ops"][at]["kind"][field] = json!(value);
        });
        only(&errors, "P0007", &format!("/ops/{at}/kind/{field}"), field);
    }
    let errors = edited(GRPO, |j| {
        let at = op(j, "logprobs", None);
        j["ops"][at]["kind"]["micro"] = json!(0);
    });
    assert_eq!(errors[0].code.as_str(), "P0007", "{errors:#?}");
}

#[test]
fn sampling_settings_out_of_range() {
    for (field, value) in [
        ("temperature", json!(0.0)),
        ("temperature", json!(-1.0)),
        ("top_p", json!(0.0)),
        ("top_p", json!(1.5)),
    ] {
        let mut at = 0;
        let errors = edited(GRPO, |j| {
            at = op(j, "generate", None);
            j["ops"][at]["kind"][field] = value;
        });
        only(&errors, "P0007", &format!("/ops/{at}/kind/{field}"), field);
    }
    // Closed sets are enums: a value outside one fails when the plan is read, at its field.
    for (field, value, expected) in [
        ("precision", "f8", "`f32`, `bf16`, `f16`"),
        ("kind", "Decoder", "`CausalLM`, `ValueModel`, `RewardModel`"),
    ] {
        let errors = edited(GRPO, |j| j["roles"][0][field] = json!(value));
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(errors[0].code.as_str(), "P0004", "{}", errors[0]);
        assert_eq!(errors[0].path, format!("/roles/0/{field}"), "{}", errors[0]);
        assert!(errors[0].message.contains(expected), "{}", errors[0]);
    }
    // The optimizer's algorithm and an instance's phases are closed sets too.
    let errors = edited(GRPO, |j| j["roles"][0]["optimizer"]["name"] = json!("sgd"));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code.as_str(), "P0004", "{}", errors[0]);
    assert_eq!(errors[0].path, "/roles/0/optimizer/name", "{}", errors[0]);
    assert!(errors[0].message.contains("`adamw`"), "{}", errors[0]);
    let errors = edited(GRPO, |j| j["instances"][0]["phases"][0] = json!("training"));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code.as_str(), "P0004", "{}", errors[0]);
    assert_eq!(errors[0].path, "/instances/0/phases/0", "{}", errors[0]);
    assert!(errors[0].message.contains("`train`"), "{}", errors[0]);
    let errors = edited(GRPO, |j| j["roles"][0]["optimizer"]["lr"] = json!(-0.001));
    only(&errors, "P0007", "/roles/0/optimizer/lr", "lr");
    for (field, value) in [
        ("beta1", json!(1.0)),
        ("beta2", json!(-0.1)),
        ("eps", json!(0.0)),
        ("min_lr_ratio", json!(1.5)),
    ] {
        let errors = edited(GRPO, |j| j["roles"][0]["optimizer"][field] = value);
        only(
            &errors,
            "P0007",
            &format!("/roles/0/optimizer/{field}"),
            field,
        );
    }
    for field in ["rope_theta", "norm_eps"] {
        let errors = edited(GRPO, |j| j["roles"][0]["arch"][field] = json!(0.0));
        only(&errors, "P0007", &format!("/roles/0/arch/{field}"), field);
    }
    // Clipping to a norm of 0 zeroes every gradient; the update's own copy is checked too.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        at = op(j, "update", Some("policy"));
        j["ops"][at]["kind"]["optimizer"]["clip"] = json!(0.0);
    });
    only(
        &errors,
        "P0007",
        &format!("/ops/{at}/kind/optimizer/clip"),
        "clip",
    );
}

#[test]
fn a_sample_count_that_disagrees_with_the_batch() {
    // 16 prompts × n 16 = the generate's batch of 256; 8 prompts would silently halve it.
    let errors = edited(GRPO, |j| j["ops"][0]["kind"]["count"] = json!(8));
    only(&errors, "P0008", "/ops/0/kind/count", "count");
    assert!(errors[0].message.contains("16"), "{}", errors[0]);
    let errors = edited(GRPO, |j| j["ops"][0]["kind"]["count"] = json!(0));
    only(&errors, "P0007", "/ops/0/kind/count", "count");
    // The count and its value edited together: the generate's batch no longer matches.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        j["ops"][0]["kind"]["count"] = json!(8);
        j["values"][0]["split"]["rows"] = json!(8);
        at = op(j, "generate", None);
    });
    only(&errors, "P0008", &format!("/ops/{at}/kind/batch"), "batch");
    // Rows that do not split over the data ranks (dp 2).
    let errors = edited(GRPO, |j| {
        j["ops"][0]["kind"]["count"] = json!(15);
        j["values"][0]["split"]["rows"] = json!(15);
    });
    assert!(
        errors
            .iter()
            .any(|e| e.code.as_str() == "P0008" && e.message.contains("`rows`")),
        "{errors:#?}"
    );
    // Preference pairs: `count` pairs are 2 × count rows.
    let errors = edited("examples/rlhf_reward.rl", |j| {
        j["ops"][0]["kind"]["count"] = json!(128)
    });
    only(&errors, "P0008", "/ops/0/kind/count", "count");
}

#[test]
fn update_sizes_that_disagree() {
    let cases: [(&str, Value, &str); 5] = [
        ("minibatches", json!(4), "minibatches"),
        ("optimizer_steps", json!(7), "optimizer_steps"),
        ("accumulation", json!(3), "accumulation"),
        ("batch", json!(128), "batch"),
        // A micro-batch of 32 rows per data rank means 2 micro-batches, not 1.
        ("micro", json!(32), "accumulation"),
    ];
    for (field, value, named) in cases {
        let mut at = 0;
        let errors = edited(GRPO, |j| {
            at = op(j, "update", Some("policy"));
            j["ops"][at]["kind"][field] = value;
        });
        only(&errors, "P0008", &format!("/ops/{at}/kind/{named}"), named);
    }
    // More epochs without more optimizer steps: the schedule would end halfway.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        at = op(j, "update", Some("policy"));
        j["ops"][at]["kind"]["epochs"] = json!(2);
    });
    only(
        &errors,
        "P0008",
        &format!("/ops/{at}/kind/optimizer_steps"),
        "epochs",
    );
    // A role op's batch against the rows it reads.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        at = op(j, "logprobs", Some("reference"));
        j["ops"][at]["kind"]["batch"] = json!(512);
    });
    only(&errors, "P0008", &format!("/ops/{at}/kind/batch"), "batch");
}

#[test]
fn arch_sizes_that_disagree() {
    let errors = edited(GRPO, |j| j["roles"][0]["arch"]["heads"] = json!(3));
    assert_eq!(errors[0].code.as_str(), "P0008", "{errors:#?}");
    assert!(errors.iter().any(|e| e.path == "/roles/0/arch/hidden"
        && e.message.contains("`hidden`")
        && e.message.contains("`heads`")));
    let errors = edited(GRPO, |j| j["roles"][0]["arch"]["kv_heads"] = json!(3));
    assert!(
        errors.iter().any(|e| e.code.as_str() == "P0008"
            && e.path == "/roles/0/arch/kv_heads"
            && e.message.contains("`kv_heads`")),
        "{errors:#?}"
    );
    for field in [
        "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "max_len",
    ] {
        let errors = edited(GRPO, |j| j["roles"][0]["arch"][field] = json!(0));
        only(&errors, "P0007", &format!("/roles/0/arch/{field}"), field);
    }
    // `parameters` edited alone.
    let errors = edited(GRPO, |j| j["roles"][0]["parameters"] = json!(1));
    only(&errors, "P0008", "/roles/0/parameters", "parameters");
    // Prompts plus new tokens past the context.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        at = op(j, "generate", None);
        j["ops"][at]["kind"]["max_new"] = json!(11);
    });
    only(
        &errors,
        "P0008",
        &format!("/ops/{at}/kind/max_new"),
        "max_len",
    );
}

#[test]
fn missing_edges() {
    // `edges: []`: every op input read from another op has lost its edge.
    let plan = plan_of(GRPO);
    let errors = edited(GRPO, |j| j["edges"] = json!([]));
    assert_eq!(errors.len(), plan.edges.len(), "{errors:#?}");
    assert!(errors.iter().all(|e| e.code.as_str() == "P0009"
        && e.path.starts_with("/ops/")
        && e.message.contains("`edges`")));
    // One edge removed: exactly its input is reported.
    let errors = edited(GRPO, |j| {
        j["edges"].as_array_mut().unwrap().remove(0);
    });
    only(&errors, "P0009", "/ops/1/inputs/0", "edges");
    // An edge from an op that does not produce the value.
    let errors = edited(GRPO, |j| j["edges"][1]["from"] = json!(0));
    assert!(
        errors
            .iter()
            .any(|e| e.code.as_str() == "P0009" && e.path == "/edges/1/from"),
        "{errors:#?}"
    );
}

#[test]
fn sizes_beyond_the_cluster() {
    // 10^9 layers of tiny_gpt: ~2 · 10^14 bytes of f32 weights on 16 GiB devices (the runtime
    // would abort on the allocation).
    let errors = edited(GRPO, |j| {
        for r in 0..2 {
            j["roles"][r]["arch"]["layers"] = json!(1_000_000_000u64);
        }
    });
    let too_large: Vec<&PlanError> = errors
        .iter()
        .filter(|e| e.code.as_str() == "P0010")
        .collect();
    // Once per role (each has two or one instances), not once per instance.
    let paths: Vec<&str> = too_large.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["/roles/0/arch", "/roles/1/arch"], "{errors:#?}");
    assert!(
        too_large.iter().all(|e| e.path.starts_with("/roles/")
            && e.message.contains("`layers` 1000000000")
            && e.message.contains("`local`")),
        "{too_large:#?}"
    );
    // hidden = 2^62: the parameter count overflows (libtorch would panic).
    let errors = edited(GRPO, |j| {
        j["roles"][0]["arch"]["hidden"] = json!(1u64 << 62);
    });
    assert!(
        errors.iter().any(|e| e.code.as_str() == "P0010"
            && e.path == "/roles/0/arch"
            && e.message.contains("`hidden` 4611686018427387904")),
        "{errors:#?}"
    );
    // A context and a generation long enough for a KV cache of ~10^17 bytes per device.
    let mut at = 0;
    let errors = edited(GRPO, |j| {
        at = op(j, "generate", None);
        j["ops"][at]["kind"]["max_new"] = json!(100_000_000_000u64);
        for r in 0..2 {
            // Rotary, so `max_len` sizes the cache alone (learned positions are a table of
            // `max_len × hidden` weights: the count and the weights would be too large too).
            let role = &mut j["roles"][r];
            if role["arch"]["positions"] == "learned" {
                let table = role["arch"]["max_len"].as_u64().unwrap()
                    * role["arch"]["hidden"].as_u64().unwrap();
                role["parameters"] = json!(role["parameters"].as_u64().unwrap() - table);
                role["arch"]["positions"] = json!("rope");
            }
            role["arch"]["max_len"] = json!(1_000_000_000_000u64);
        }
    });
    only(&errors, "P0010", &format!("/ops/{at}/kind"), "max_new");
    assert!(errors[0].message.contains("KV cache"), "{}", errors[0]);
    // So is a batch of 10^12 prompts.
    let errors = edited(GRPO, |j| {
        at = op(j, "generate", None);
        j["ops"][0]["kind"]["count"] = json!(1_000_000_000_000u64);
        j["values"][0]["split"]["rows"] = json!(1_000_000_000_000u64);
        j["ops"][at]["kind"]["batch"] = json!(16_000_000_000_000u64);
    });
    only(&errors, "P0010", &format!("/ops/{at}/kind"), "batch");
    // Beyond libtorch's i64 dimensions.
    let errors = edited(GRPO, |j| j["roles"][0]["arch"]["vocab"] = json!(u64::MAX));
    only(&errors, "P0010", "/roles/0/arch/vocab", "vocab");
}

#[test]
fn huge_layout_factors_do_not_overflow() {
    // dp · tp overflowed `u32` in the rank-count check (a panic in debug builds).
    let errors = edited(GRPO, |j| {
        j["instances"][0]["layout"]["dp"] = json!(65_536);
        j["instances"][0]["layout"]["tp"] = json!(65_536);
    });
    assert!(
        errors.iter().any(|e| e.code.as_str() == "P0005"),
        "{errors:#?}"
    );
    let errors = edited(GRPO, |j| {
        j["clusters"][0]["nodes"] = json!(u64::MAX);
        j["clusters"][0]["devices_per_node"] = json!(u64::MAX);
    });
    assert!(
        errors.iter().any(|e| e.code.as_str() == "P0005"),
        "{errors:#?}"
    );
}

#[test]
fn a_dangling_reference_is_not_also_a_missing_edge() {
    // The input's value does not exist (P0002): its edge now matches no input, but that is the
    // same mistake, reported once.
    let errors = edited(GRPO, |j| j["ops"][1]["inputs"][0]["value"] = json!(4242));
    let codes: Vec<&str> = errors.iter().map(|e| e.code.as_str()).collect();
    assert_eq!(codes, ["P0002"], "{errors:#?}");
    // An edge to an op that does not read the value is reported.
    let errors = edited(GRPO, |j| j["edges"][0]["to"] = json!(2));
    assert!(
        errors
            .iter()
            .any(|e| e.code.as_str() == "P0009" && e.path == "/edges/0/to"),
        "{errors:#?}"
    );
}

#[test]
fn the_largest_rank_is_refused_without_a_panic() {
    // `"4294967295"` is rank u32::MAX: one past it does not exist (`r + 1` overflowed).
    let errors = edited(GRPO, |j| j["instances"][0]["ranks"] = json!("4294967295"));
    let codes: Vec<&str> = errors.iter().map(|e| e.code.as_str()).collect();
    assert_eq!(codes, ["P0004"], "{errors:#?}");
    assert!(errors[0].message.contains("4294967295"), "{}", errors[0]);
}

#[test]
fn sampled_log_probs_from_an_op_that_did_not_sample_them() {
    // The main example's `policy.logprobs` takes the log-probs `policy.generate` sampled.
    let json: Value = serde_json::from_str(&plan_of(GRPO).to_json()).unwrap();
    let policy = op(&json, "logprobs", Some("policy"));
    let generate = op(&json, "generate", Some("policy"));
    assert_eq!(
        json["ops"][policy]["kind"]["from_sampling"],
        json!(generate)
    );
    let path = format!("/ops/{policy}/kind/from_sampling");
    // An op that is not a generate, one that does not exist.
    for bad in [json!(0), json!(policy), json!(9999)] {
        let errors = edited(GRPO, |j| j["ops"][policy]["kind"]["from_sampling"] = bad);
        only(&errors, "P0009", &path, "from_sampling");
    }
    // The reference's log-probs are another model's: not those `policy.generate` sampled.
    let reference = op(&json, "logprobs", Some("reference"));
    let errors = edited(GRPO, |j| {
        j["ops"][reference]["kind"]["from_sampling"] = json!(generate)
    });
    only(
        &errors,
        "P0009",
        &format!("/ops/{reference}/kind/from_sampling"),
        "from_sampling",
    );
}

const VERIFIER: &str = "tests/programs/verifier_digits.rl";

/// External rewards (#24): a verifier's counts and limits of 0 (P0007), a `verify` op whose
/// outputs are not the reward plus one per metric (P0008), and a `verify` op that names no
/// plan verifier (P0002), each reported once at its field.
#[test]
fn verifier_settings_and_verify_ops() {
    assert_eq!(rlc_plan::validate(&plan_of(VERIFIER)), Vec::new());
    for field in ["workers", "batch", "timeout_ms"] {
        let errors = edited(VERIFIER, |j| j["verifiers"][0][field] = json!(0));
        only(&errors, "P0007", &format!("/verifiers/0/{field}"), field);
    }
    for field in ["cpu_seconds", "memory_bytes", "file_bytes", "processes"] {
        let errors = edited(VERIFIER, |j| j["verifiers"][0]["limits"][field] = json!(0));
        only(
            &errors,
            "P0007",
            &format!("/verifiers/0/limits/{field}"),
            field,
        );
    }
    let errors = edited(VERIFIER, |j| {
        j["verifiers"][0]["endpoint"]["command"] = json!([]);
    });
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code.as_str(), "P0007");
    assert_eq!(errors[0].path, "/verifiers/0/endpoint/command");

    // One metric declared: the op's outputs are the reward and that metric.
    let errors = edited(VERIFIER, |j| {
        j["verifiers"][0]["metrics"] = json!(["format", "steps"]);
    });
    let at = op(
        &serde_json::from_str(&plan_of(VERIFIER).to_json()).unwrap(),
        "verify",
        None,
    );
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].code.as_str(), "P0008");
    assert_eq!(errors[0].path, format!("/ops/{at}/outputs"));
    assert!(errors[0].message.contains("gives 3"), "{}", errors[0]);

    let errors = edited(VERIFIER, |j| {
        let at = op(j, "verify", None);
        j["ops"][at]["kind"]["verifier"] = json!("judge");
    });
    assert!(
        errors
            .iter()
            .any(|e| e.code.as_str() == "P0002" && e.path.ends_with("/kind/verifier")),
        "{errors:#?}"
    );
}

/// #24 item 6: a rank hands a `verify` op to the verifier's workers and runs on, so the schedule
/// puts it first among the ops the rollout makes ready and lets the forward passes that do not
/// read the reward (the policy's and the reference's log-probs, the KL kernel) run before the
/// advantage that waits for it.
#[test]
fn a_verify_op_starts_before_the_forward_passes_that_do_not_read_the_reward() {
    let text = std::fs::read_to_string(root().join(VERIFIER))
        .unwrap()
        .replace(
            "place policy on local[0..2] with dp(2)",
            "model reference: CausalLM = frozen(policy)\n\
             place policy on local[0..2] with dp(2)\n\
             place reference on local[0..2] with dp(2)",
        )
        .replace(
            "let scores   = answer(rollout)",
            "let ref_logp = reference.logprobs(rollout)\n    \
             let kl = token_mean(kl_k3(old_logp, ref_logp), rollout.mask)\n    \
             let scores   = answer(rollout)",
        )
        .replace(
            "grpo_advantage, ppo_clip",
            "grpo_advantage, kl_k3, ppo_clip",
        )
        .replace("log { reward:", "log { kl: kl, reward:");
    let plan = plan_of_text(VERIFIER, text);
    for program in &plan.programs {
        let order: Vec<&str> = program
            .steps
            .iter()
            .filter_map(|s| match s {
                rlc_plan::model::Step::Run { op, .. } => {
                    Some(plan.ops[*op as usize].label.as_str())
                }
                _ => None,
            })
            .collect();
        let at = |label: &str| {
            order
                .iter()
                .position(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("no `{label}` in {order:?}"))
        };
        let verify = at("verify answer");
        for independent in ["policy.logprobs", "reference.logprobs", "kernel kl_k3"] {
            assert!(verify < at(independent), "{order:?}");
            assert!(at(independent) < at("kernel grpo_advantage"), "{order:?}");
        }
        assert_eq!(verify, at("policy.generate") + 1, "{order:?}");
    }
    // The simulated step: the forward passes run while the verifier scores, and the advantage
    // starts when its reward is ready.
    let params = rlc_plan::cost::CostParams::default();
    let costs = rlc_plan::cost::PlanCosts::new(&plan, &params).unwrap();
    let step = rlc_plan::simulate::simulate_step(&plan, &costs, &|_| false).unwrap();
    let id = |label: &str| {
        plan.ops
            .iter()
            .position(|o| o.label.starts_with(label))
            .unwrap()
    };
    let bar = |label: &str| {
        step.lanes[0]
            .bars
            .iter()
            .find(|b| b.label.starts_with(label))
            .unwrap_or_else(|| panic!("no bar `{label}`"))
            .clone()
    };
    let generated = bar("policy.generate").end;
    assert!(costs.op_seconds[id("verify answer")] > 0.0);
    let scored = generated + costs.op_seconds[id("verify answer")];
    for independent in ["policy.logprobs", "reference.logprobs", "kernel kl_k3"] {
        assert!(bar(independent).start >= generated && bar(independent).start < scored);
    }
    assert!(bar("kernel grpo_advantage").start >= scored);
    assert!(
        step.lanes[0]
            .bars
            .iter()
            .all(|b| !b.label.starts_with("verify"))
    );
}

const ENVIRONMENT: &str = "tests/programs/env_digits.rl";

/// Multi-turn environments (#24 item 4): an environment's counts and limits of 0 (P0007, the
/// verifier's rules), turn budgets of 0 (P0007), a `generate` op that names no plan environment
/// (P0002), episodes longer than the context: `max_len` against the prompt, every turn and
/// every observation, and a rollout whose fields or response length are not those of the turns
/// (P0008).
#[test]
fn environment_settings_and_generate_env() {
    assert_eq!(rlc_plan::validate(&plan_of(ENVIRONMENT)), Vec::new());
    for field in ["workers", "batch", "timeout_ms"] {
        let errors = edited(ENVIRONMENT, |j| j["environments"][0][field] = json!(0));
        only(&errors, "P0007", &format!("/environments/0/{field}"), field);
    }
    let errors = edited(ENVIRONMENT, |j| {
        j["environments"][0]["limits"]["memory_bytes"] = json!(0);
    });
    only(
        &errors,
        "P0007",
        "/environments/0/limits/memory_bytes",
        "memory_bytes",
    );
    let json: Value = serde_json::from_str(&plan_of(ENVIRONMENT).to_json()).unwrap();
    let at = op(&json, "generate", None);
    for field in ["max_turns", "max_obs"] {
        let errors = edited(ENVIRONMENT, |j| {
            j["ops"][at]["kind"]["env"][field] = json!(0)
        });
        only(
            &errors,
            "P0007",
            &format!("/ops/{at}/kind/env/{field}"),
            &format!("env/{field}"),
        );
    }
    let errors = edited(ENVIRONMENT, |j| {
        j["ops"][at]["kind"]["env"]["environment"] = json!("judge");
    });
    assert!(
        errors
            .iter()
            .any(|e| e.code.as_str() == "P0002" && e.path.ends_with("/kind/env/environment")),
        "{errors:#?}"
    );
    // prompt 7 + 3 × 5 + 2 × 4 = 30 positions fit a context of 32; prompts of 10 need 33.
    let errors = edited(ENVIRONMENT, |j| {
        j["ops"][at]["kind"]["prompt_len"] = json!(10)
    });
    only(
        &errors,
        "P0008",
        &format!("/ops/{at}/kind/max_new"),
        "max_new",
    );
    assert!(errors[0].message.contains("33 positions"), "{}", errors[0]);
    // Two turns take 2 × 5 + 4 = 14 response positions: the rollout's 23 do not match.
    let errors = edited(ENVIRONMENT, |j| {
        j["ops"][at]["kind"]["env"]["max_turns"] = json!(2);
    });
    only(&errors, "P0008", &format!("/ops/{at}/kind/env"), "max_new");
    assert!(
        errors[0].message.contains("23 response positions"),
        "{}",
        errors[0]
    );
    // The rollout without the field that says which turn each token belongs to.
    let errors = edited(ENVIRONMENT, |j| {
        let rollout = j["ops"][at]["outputs"][0].as_u64().unwrap() as usize;
        j["values"][rollout]["type"]["fields"]
            .as_object_mut()
            .unwrap()
            .remove("turn");
    });
    only(&errors, "P0008", &format!("/ops/{at}/kind/env"), "turn");
}
