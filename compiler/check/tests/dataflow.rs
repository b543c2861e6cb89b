//! The checker reads the pipeline into data once (#22): names resolved to values of the step,
//! roles or other items, role calls numbered per role and operation, dataset methods under the
//! dataset item's name, `fn` calls with their module, argument names and batch facts, operators
//! as named kernels, `update` closures with what they read.

use rlc_check::dataflow::{NodeKind, Stmt};
use rlc_check::program::Op;
use rlc_diagnostics::Files;

struct NoFiles;

impl rlc_check::SourceLoader for NoFiles {
    fn read(&self, path: &str) -> Result<String, String> {
        Err(format!("{path}: not found"))
    }
}

const PROGRAM: &str = r#"
import std.algo { grpo_advantage, ppo_clip, token_mean }
import std.models { tiny_gpt }
import std.task.digits { reverse_task }

dataset digits = reverse_task(digits: 3)

cluster local = cpu(devices: 1)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 1, hidden: 32, heads: 2, vocab: digits.vocab, max_len: 12)
  init  = random(seed: 1)
  optim = adamw(lr: 1e-3)
}

place policy on local[0..1] with dp(1)

pipeline train(steps = 4) {
  loop step in 0..steps {
    let prompts = digits.sample(4)
    let rollout = policy.generate(prompts, n: 4, max_new: 4)
    let old     = policy.logprobs(rollout)
    let again   = policy.logprobs(rollout)
    let score   = digits.score(rollout)
    let adv     = grpo_advantage(score, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 16) { logp ->
      token_mean(ppo_clip(logp, old, adv), rollout.mask)
    }
    log { reward: mean(score), gap: mean(score) - 1.0 }
  }
}
"#;

fn body() -> Vec<Stmt> {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, "main.rl", PROGRAM.to_string());
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    let dataflow = checked.dataflow.expect("the program has a pipeline");
    match dataflow.body.as_slice() {
        [Stmt::Loop { body, carries }] if carries.is_empty() => body.clone(),
        other => panic!("one loop: {other:#?}"),
    }
}

fn let_value(body: &[Stmt], name: &str) -> NodeKind {
    body.iter()
        .find_map(|s| match s {
            Stmt::Let { name: n, value } if n == name => Some(value.kind.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no `let {name}`"))
}

#[test]
fn role_calls_are_numbered_per_role_and_operation() {
    let body = body();
    match let_value(&body, "rollout") {
        NodeKind::Role {
            model: 0,
            op: Op::Generate,
            nth: 0,
            input: Some(input),
            loss: None,
        } => assert_eq!(input.kind, NodeKind::Local("prompts".into())),
        other => panic!("{other:?}"),
    }
    for (name, nth) in [("old", 0), ("again", 1)] {
        assert!(
            matches!(let_value(&body, name), NodeKind::Role { op: Op::Logprobs, nth: n, .. } if n == nth),
            "{name}"
        );
    }
    let update = body
        .iter()
        .find_map(|s| match s {
            Stmt::Eval(n) => Some(n.kind.clone()),
            _ => None,
        })
        .expect("the update");
    let NodeKind::Role {
        op: Op::Update,
        loss: Some(loss),
        ..
    } = update
    else {
        panic!("{update:?}");
    };
    assert_eq!(loss.param, "logp");
    assert_eq!(loss.calls, ["token_mean", "ppo_clip"]);
    assert!(
        loss.reads
            .contains(&("rollout".into(), Some("mask".into())))
    );
    assert!(loss.reads.contains(&("old".into(), None)));
}

#[test]
fn calls_are_resolved_with_their_module_arguments_and_facts() {
    let body = body();
    assert_eq!(
        let_value(&body, "prompts"),
        NodeKind::Sample {
            dataset: "digits".into(),
            count: Some(4)
        }
    );
    match let_value(&body, "adv") {
        NodeKind::Kernel {
            function,
            module,
            args,
            batch_reduction: false,
            grouped: true,
        } => {
            assert_eq!(function, "grpo_advantage");
            assert_eq!(module.as_deref(), Some("std.algo"));
            let names: Vec<&str> = args.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["score", "group", "mask"]);
            assert!(matches!(&args[1].1.kind, NodeKind::Field { name, .. } if name == "group"));
        }
        other => panic!("{other:?}"),
    }
    let Some(Stmt::Log(fields)) = body.last() else {
        panic!("the log is last");
    };
    assert!(matches!(
        &fields[0].1.kind,
        NodeKind::Kernel { function, module: None, batch_reduction: true, .. } if function == "mean"
    ));
    match &fields[1].1.kind {
        NodeKind::Kernel { function, args, .. } => {
            assert_eq!(function, "sub");
            assert_eq!(args[1].1.kind, NodeKind::Const("1.0".into()));
        }
        other => panic!("{other:?}"),
    }
}
