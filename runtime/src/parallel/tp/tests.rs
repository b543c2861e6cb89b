use std::collections::BTreeMap;
use std::thread;

use tch::{Device, Kind, Tensor, nn};

use super::*;
use crate::collectives::Group;
use crate::rng::Rng;

#[test]
fn weights_split_by_their_role_in_the_layer() {
    for (name, split) in [
        ("model.embed_tokens.weight", Split::Along(0)),
        ("lm_head.weight", Split::Along(0)),
        ("model.layers.3.self_attn.q_proj.weight", Split::Along(0)),
        ("model.layers.3.self_attn.k_proj.bias", Split::Along(0)),
        ("model.layers.3.self_attn.o_proj.weight", Split::Along(1)),
        ("model.layers.3.mlp.up_proj.weight", Split::Along(0)),
        ("model.layers.3.mlp.down_proj.weight", Split::Along(1)),
        ("model.layers.3.input_layernorm.weight", Split::Replicated),
        ("model.norm.weight", Split::Replicated),
        ("value_head.weight", Split::Replicated),
    ] {
        assert_eq!(split_of(name), split, "{name}");
    }
}

#[test]
fn a_group_that_does_not_divide_the_model_is_refused() {
    let config = crate::model::ModelConfig::tiny();
    assert_eq!(check_divisible(&config, 2), Ok(()));
    assert_eq!(
        check_divisible(&config, 3),
        Err(TpError::NotDivisible {
            what: "query heads",
            count: 4,
            tp: 3
        })
    );
    assert!(matches!(
        check_divisible(&config, 4),
        Err(TpError::NotDivisible {
            what: "key/value heads",
            ..
        })
    ));
}

#[test]
fn the_loader_reports_missing_and_misshapen_weights_and_taken_names() {
    let comm = Group::new(1).pop().expect("one rank");
    let vs = nn::VarStore::new(Device::Cpu);
    let root = vs.root();
    let weights = BTreeMap::from([(
        "a.b.weight".to_string(),
        Tensor::zeros([4, 2], tch::kind::FLOAT_CPU),
    )]);
    let mut loader = ShardLoader::new(&root, &weights, &comm);
    assert_eq!(
        loader.load("a.c.weight", &[4, 2]).unwrap_err(),
        TpError::MissingWeight("a.c.weight".into())
    );
    assert!(matches!(
        loader.load("a.b.weight", &[2, 4]),
        Err(TpError::WeightShape { .. })
    ));
    let odd = BTreeMap::from([(
        "m.o_proj.weight".to_string(),
        Tensor::zeros([2, 3], tch::kind::FLOAT_CPU),
    )]);
    let two = Group::new(2);
    assert_eq!(
        ShardLoader::new(&root, &odd, &two[0])
            .load("m.o_proj.weight", &[2, 3])
            .unwrap_err(),
        TpError::UnevenShard {
            name: "m.o_proj.weight".into(),
            dim: 1,
            tp: 2
        }
    );
    let loaded = loader.load("a.b.weight", &[4, 2]).unwrap();
    assert!(loaded.requires_grad());
    assert_eq!(
        loader.load("a.b.weight", &[4, 2]).unwrap_err(),
        TpError::AlreadyRegistered("a.b.weight".into())
    );
    assert_eq!(vs.variables().keys().collect::<Vec<_>>(), ["a.b.weight"]);
}

/// Logits `[3, 5, 8]`, large enough that an unstabilised softmax would overflow.
fn logits() -> Tensor {
    Rng::new(3).normal_tensor(&[3, 5, 8], 1.0) * 40.0
}

fn targets() -> Tensor {
    Tensor::from_slice(&[0i64, 7, 3, 4, 1, 6, 2, 5, 0, 3, 7, 7, 4, 1, 2]).view([3, 5])
}

#[test]
fn vocabulary_parallel_logprobs_match_log_softmax_in_value_and_gradient() {
    let full = logits().set_requires_grad(true);
    let expected = full
        .log_softmax(-1, Kind::Float)
        .gather(-1, &targets().unsqueeze(-1), false)
        .squeeze_dim(-1);
    let weights = Rng::new(4).normal_tensor(&[3, 5], 1.0);
    (&expected * &weights).sum(Kind::Float).backward();
    let expected_grad = full.grad();
    let results: Vec<(Tensor, Tensor)> = thread::scope(|scope| {
        let handles: Vec<_> = Group::new(2)
            .into_iter()
            .map(|comm| {
                scope.spawn(move || {
                    let start = comm.rank() as i64 * 4;
                    let local = logits().narrow(-1, start, 4).set_requires_grad(true);
                    let logprobs =
                        vocab_parallel_logprobs(&local, &targets(), start, &comm).unwrap();
                    let weights = Rng::new(4).normal_tensor(&[3, 5], 1.0);
                    (&logprobs * weights).sum(Kind::Float).backward();
                    (logprobs.detach(), local.grad())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, (logprobs, grad)) in results.iter().enumerate() {
        let diff = (logprobs - &expected).abs().max().double_value(&[]);
        assert!(diff < 1e-4, "rank {rank}: log-probs differ by {diff}");
        let want = expected_grad.narrow(-1, rank as i64 * 4, 4);
        let diff = (grad - want).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "rank {rank}: gradient differs by {diff}");
    }
}
