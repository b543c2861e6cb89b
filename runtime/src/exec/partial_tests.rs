//! Partial rollouts: a pause changes nothing when the weights do not change, and after it every
//! token (and its `logp`) is the new weights' given the whole prefix.

use tch::{Device, Kind, Tensor, nn};

use super::*;
use crate::model::{Heads, ModelConfig, Transformer};

fn policy(seed: u64) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, seed).unwrap();
    (vs, model)
}

fn samples() -> Vec<Sample> {
    [vec![5, 9, 2, 7, 11], vec![3, 4], vec![8, 1, 30]]
        .into_iter()
        .map(|prompt| Sample {
            prompt,
            target: vec![1, 2],
            row: None,
        })
        .collect()
}

fn how(temperature: f64, eos: Option<i64>) -> Sampling {
    Sampling {
        n: 2,
        max_new: 8,
        sampling: SamplingConfig::at_temperature(temperature),
        seed: 3,
        specials: Specials { eos, pad: 0 },
    }
}

fn field<'r>(r: &'r Rollout, name: &str) -> &'r Tensor {
    r.field(name).unwrap_or_else(|| panic!("no field {name}"))
}

fn rows(t: &Tensor) -> Vec<Vec<i64>> {
    let t = if t.dim() == 1 {
        t.unsqueeze(1)
    } else {
        t.shallow_clone()
    };
    Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64)).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn a_pause_without_new_weights_gives_the_uninterrupted_rollout() {
    let (_, model) = policy(11);
    let samples = samples();
    // An EOS that the first row's greedy response emits early, so that rows stop before the
    // pause, at it and after it.
    let probe = rollout(&model, &samples, 0, 3, &how(0.0, None), Device::Cpu).unwrap();
    let eos = rows(field(&probe, "response"))[0][1];
    // Greedy, and sampled: each token draws the number of its row and position either way.
    for temperature in [0.0, 1.0] {
        same_with_and_without_a_pause(&model, &samples, &how(temperature, Some(eos)));
    }
}

fn same_with_and_without_a_pause(model: &Transformer, samples: &[Sample], how: &Sampling) {
    let whole = rollout(model, samples, 0, 3, how, Device::Cpu).unwrap();
    for pause_at in [1, 2, 3, 7] {
        let paused = start(model, samples, 0, 3, how, pause_at, Device::Cpu).unwrap();
        let resumed = finish(model, paused, samples, 0, how, Device::Cpu).unwrap();
        for name in ["response", "mask", "last", "group", "target"] {
            assert_eq!(
                rows(field(&resumed, name)),
                rows(field(&whole, name)),
                "{name}, pause at {pause_at}, {:?}",
                how.sampling
            );
        }
        let mask = field(&whole, "mask");
        let logp = |r: &Rollout| field(r, SAMPLED_LOGPROBS) * mask;
        let diff = max_diff(&logp(&resumed), &logp(&whole));
        assert!(diff < 1e-5, "pause at {pause_at}: logp differ by {diff}");
    }
    let masks = rows(field(&whole, "mask"));
    assert!(
        !how.sampling.is_greedy()
            || masks.iter().any(|m| m[1] == 1 && m[2] == 0) && masks.iter().any(|m| m[7] == 1),
        "the probe's EOS should end some rows early and leave others running: {masks:?}"
    );
}

#[test]
fn after_the_pause_tokens_and_logp_are_the_new_weights() {
    let (_, old) = policy(11);
    let (_, new) = policy(12);
    let samples = samples();
    let how = how(1.0, None);
    let pause_at = 3;
    let paused = start(&old, &samples, 0, 3, &how, pause_at, Device::Cpu).unwrap();
    let r = finish(&new, paused, &samples, 0, &how, Device::Cpu).unwrap();
    let sampled = field(&r, SAMPLED_LOGPROBS);
    let forward = |m: &Transformer| {
        tch::no_grad(|| m.logprobs(&r.ids, &r.attention)).narrow(
            1,
            r.prompt_len - 1,
            r.response_len,
        )
    };
    let (before, after) = (forward(&old), forward(&new));
    let head = |t: &Tensor| t.narrow(1, 0, pause_at);
    let tail = |t: &Tensor| t.narrow(1, pause_at, how.max_new - pause_at);
    // The behaviour log-prob of each token is that of the weights that sampled it.
    let d_head = max_diff(&head(sampled), &head(&before));
    let d_tail = max_diff(&tail(sampled), &tail(&after));
    assert!(d_head < 1e-4 && d_tail < 1e-4, "{d_head} {d_tail}");
    // And not the other weights': the two models disagree on these tokens.
    assert!(max_diff(&tail(sampled), &tail(&before)) > 1e-2);
    // The first part is the old weights' rollout as it would have begun.
    let alone = rollout(&old, &samples, 0, 3, &how, Device::Cpu).unwrap();
    assert!(
        head(field(&r, "response")).equal(&head(field(&alone, "response"))),
        "the tokens before the pause"
    );
}

#[test]
fn versions_change_at_the_pause() {
    let v = versions(2, 5, 7, Some((3, 8)), Device::Cpu);
    assert_eq!(rows(&v), [vec![7, 7, 7, 8, 8], vec![7, 7, 7, 8, 8]]);
    assert_eq!(rows(&versions(1, 3, 4, None, Device::Cpu)), [vec![4, 4, 4]]);
}
