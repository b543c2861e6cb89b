//! `rlc check` speed: each example, and generated programs of 1 000, 5 000 and 10 000 lines
//! (to show that the time grows linearly). Goals: < 10 ms per example, < 200 ms for 10 000 lines.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rlc_diagnostics::Files;
use std::path::Path;

struct NoFiles;

impl rlc_check::SourceLoader for NoFiles {
    fn read(&self, _: &str) -> Result<String, String> {
        Err("not found".into())
    }
}

fn check(name: &str, src: &str) -> usize {
    let mut files = Files::new();
    let checked = rlc_check::check(&NoFiles, &mut files, name, src.to_string());
    assert!(!checked.has_errors(), "{name} does not check cleanly");
    checked.diagnostics.len()
}

/// A program of about `lines` lines: typed functions and a pipeline that calls them all.
fn generated(lines: usize) -> String {
    let mut src = String::from(
        "import std.algo { grpo_advantage, ppo_clip, token_mean }\nimport std.models { tiny_gpt }\nimport std.task.digits { reverse }\n\n\
         cluster local = cpu(devices: 2)\n\nmodel policy: CausalLM {\n  arch  = tiny_gpt(vocab: reverse.vocab, max_len: 32)\n  init  = random(seed: 1)\n  optim = adamw(lr: 1e-3)\n}\n\n\
         place policy on local[0..2] with dp(2)\n\n",
    );
    let fns = lines.saturating_sub(40) / 7;
    for i in 0..fns {
        src.push_str(&format!(
            "fn f{i}(x: f32[B, T], m: Mask[B, T]) -> f32[B] {{\n  let y = where(m, x * 2.0 + {i}.0, 0.0)\n  let z = exp(y) - log(abs(y) + 1.0)\n  mean(z, over: T)\n}}\n\n"
        ));
    }
    src.push_str("pipeline train(steps = 10) {\n  loop step in 0..steps {\n    let rollout = policy.generate(reverse.sample(8), n: 4, max_new: 8)\n    let logp = policy.logprobs(rollout)\n");
    for i in 0..fns {
        src.push_str(&format!("    let r{i} = f{i}(logp, rollout.mask)\n"));
    }
    src.push_str("    let adv = grpo_advantage(r0, rollout.group, rollout.mask)\n    policy.update(rollout) { lp ->\n      token_mean(ppo_clip(lp, logp, adv, eps: 0.2), rollout.mask)\n    }\n    log { r: mean(r0");
    for i in 1..fns {
        src.push_str(&format!(" + r{i}"));
        if i % 200 == 0 {
            src.push_str(") }\n    log { r: mean(r0");
        }
    }
    src.push_str(") }\n  }\n}\n");
    src
}

fn examples(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut group = c.benchmark_group("check/example");
    let mut paths: Vec<_> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    paths.sort();
    for path in paths {
        let src = std::fs::read_to_string(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        group.bench_function(&name, |b| b.iter(|| check(&name, &src)));
    }
    group.finish();
}

fn scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("check/lines");
    group.sample_size(10);
    for lines in [1_000, 5_000, 10_000] {
        let src = generated(lines);
        let actual = src.lines().count();
        group.throughput(Throughput::Elements(actual as u64));
        group.bench_with_input(BenchmarkId::from_parameter(actual), &src, |b, src| {
            b.iter(|| check("generated.rl", src))
        });
    }
    group.finish();
    // The parser alone, to see which part of `check` grows with the program.
    let mut group = c.benchmark_group("parse/lines");
    group.sample_size(10);
    for lines in [1_000, 10_000] {
        let src = generated(lines);
        let actual = src.lines().count();
        group.throughput(Throughput::Elements(actual as u64));
        group.bench_with_input(BenchmarkId::from_parameter(actual), &src, |b, src| {
            b.iter(|| {
                rlc_syntax::parse(rlc_diagnostics::FileId(0), src)
                    .module
                    .items
                    .len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, examples, scaling);
criterion_main!(benches);
