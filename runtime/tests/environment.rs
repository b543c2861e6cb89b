//! Multi-turn environments through the worker pool (`rlc_runtime::verify::environment`): the
//! shipped calculator `examples/envs/calc.py` written with `python/rlc_env.py`, and the faults an
//! environment's answer can have. The decoder and the rollout layout are tested in
//! `generate::turns_tests` and `exec::environment`.

use std::path::Path;

use rlc_plan::model::{Environment, OnError, VerifierEndpoint, WorkerLimits};
use rlc_runtime::verify::Pool;
use rlc_runtime::verify::environment::{Observation, StepItem, StepResult};

fn calculator() -> Environment {
    Environment {
        name: "calc".into(),
        endpoint: VerifierEndpoint::Program {
            command: vec!["python3".into(), "examples/envs/calc.py".into()],
        },
        workers: 2,
        batch: 2,
        timeout_ms: 10_000,
        limits: WorkerLimits::default(),
        on_error: OnError::Fail,
        fields: vec!["answer".into()],
    }
}

fn item(turn: u64, response: &str, answer: Option<&str>) -> StepItem {
    let mut item = StepItem {
        episode: 3,
        turn,
        prompt: "12*34=".into(),
        response: response.into(),
        ..StepItem::default()
    };
    if let Some(a) = answer {
        item.fields.insert("answer".into(), a.into());
    }
    item
}

fn read(r: Result<StepResult, String>) -> Result<(f32, Observation, bool), String> {
    r.and_then(StepResult::read)
}

#[test]
fn the_calculator_answers_calls_and_scores_final_answers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pool = Pool::start_environment(&calculator(), &root).unwrap();
    let items = [
        item(0, "C12*34;", Some("408")),
        item(0, "12+34", Some("46")),
        item(1, "408", Some("408")),
        item(1, "0046", Some("46")),
        item(1, "407", Some("408")),
        item(1, "408", None),
    ];
    let out: Vec<_> = pool
        .call::<StepItem, StepResult>(&items)
        .into_iter()
        .map(read)
        .collect();
    assert_eq!(out[0], Ok((0.0, Observation::Text("=408".into()), false)));
    assert_eq!(out[1], Ok((0.0, Observation::Text("=046".into()), false)));
    assert_eq!(out[2], Ok((1.0, Observation::None, true)));
    assert_eq!(
        out[3],
        Ok((1.0, Observation::None, true)),
        "compared as numbers"
    );
    assert_eq!(out[4], Ok((0.0, Observation::None, true)));
    // An exception in `step` fails that item alone, naming it (the sixth: item 1 of the third
    // request of two items).
    let e = out[5].clone().unwrap_err();
    assert!(e.contains("item 1: KeyError: 'answer'"), "{e}");
}

/// A result that is neither an observation nor done, or has both kinds of observation, is a
/// failure of that item; so is an environment that answers the wrong number of results.
#[test]
fn malformed_answers_are_failures_of_their_items() {
    let dir = std::env::temp_dir().join(format!("rlc-env-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.py"),
        r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    results = []
    for it in req["items"]:
        r = it["response"]
        if r == "none":
            results.append({"reward": 1})
        elif r == "both":
            results.append({"observation": "1", "observation_ids": [1]})
        elif r == "short":
            results = []
            break
        else:
            results.append({"observation": "7"})
    print(json.dumps({"id": req["id"], "results": results}), flush=True)
"#,
    )
    .unwrap();
    let env = Environment {
        endpoint: VerifierEndpoint::Program {
            command: vec!["python3".into(), "bad.py".into()],
        },
        workers: 1,
        batch: 8,
        ..calculator()
    };
    let pool = Pool::start_environment(&env, &dir).unwrap();
    let out: Vec<_> = pool
        .call::<StepItem, StepResult>(&[
            item(0, "none", None),
            item(0, "both", None),
            item(0, "fine", None),
        ])
        .into_iter()
        .map(read)
        .collect();
    assert!(out[0].clone().unwrap_err().contains("no `observation`"));
    assert!(out[1].clone().unwrap_err().contains("both"));
    assert_eq!(out[2], Ok((0.0, Observation::Text("7".into()), false)));
    let out = pool.call::<StepItem, StepResult>(&[item(0, "short", None), item(0, "x", None)]);
    let e = out[0].as_ref().unwrap_err();
    assert!(e.contains("returned 0 results for 2 items"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
