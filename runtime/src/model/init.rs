//! A model's parameters as data (name, shape, initial value) and the seeded random init drawn a
//! slice at a time.
//!
//! [`Transformer::new`](super::Transformer::new) draws every N(0, σ²) weight, in registration
//! order, from one SplitMix64 stream: element `k` of the stream (counting the elements of all
//! weights drawn before) is the `k`-th [`Rng::normal`], i.e. draws `2k` and `2k + 1`. The
//! generator's state after `n` draws is a function of `n` alone, so [`seeded`] produces any
//! element ranges of a weight — a rank's shard — bit for bit as the whole model holds them,
//! without drawing the rest.

use std::ops::Range;

use tch::Tensor;

use super::config::{ModelConfig, Positions};
use super::layers::INIT_STD;
use super::transformer::Heads;
use crate::rng::Rng;

/// A parameter's initial value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// N(0, INIT_STD²) from the model's stream, starting at element `first` of it.
    Normal { first: u64 },
    /// All ones (norm weights).
    Ones,
    /// All zeros (biases).
    Zeros,
}

/// One parameter of a model: its Hugging Face name, full shape and initial value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    pub name: String,
    pub shape: Vec<i64>,
    pub start: Start,
}

impl Parameter {
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
}

/// Every parameter of the model of `config` with `heads`, in the order `Transformer::new`
/// registers (and draws) them. A tied LM head is the embedding and is not listed.
pub fn parameters(config: &ModelConfig, heads: Heads) -> Vec<Parameter> {
    let mut list = Params::default();
    let (hidden, head_dim) = (config.hidden, config.head_dim());
    list.normal("model.embed_tokens.weight", &[config.vocab, hidden]);
    if config.positions == Positions::Learned {
        list.normal("model.embed_positions.weight", &[config.max_len, hidden]);
    }
    for i in 0..config.layers {
        let layer = format!("model.layers.{i}");
        list.fixed(
            &format!("{layer}.input_layernorm.weight"),
            hidden,
            Start::Ones,
        );
        let projections = [
            ("q_proj", config.heads * head_dim, hidden, config.qkv_bias),
            (
                "k_proj",
                config.kv_heads * head_dim,
                hidden,
                config.qkv_bias,
            ),
            (
                "v_proj",
                config.kv_heads * head_dim,
                hidden,
                config.qkv_bias,
            ),
            ("o_proj", hidden, config.heads * head_dim, false),
        ];
        for (name, outputs, inputs, bias) in projections {
            list.linear(&format!("{layer}.self_attn.{name}"), outputs, inputs, bias);
        }
        let norm = format!("{layer}.post_attention_layernorm.weight");
        list.fixed(&norm, hidden, Start::Ones);
        for (name, outputs, inputs) in [
            ("gate_proj", config.ffn, hidden),
            ("up_proj", config.ffn, hidden),
            ("down_proj", hidden, config.ffn),
        ] {
            list.linear(&format!("{layer}.mlp.{name}"), outputs, inputs, false);
        }
    }
    list.fixed("model.norm.weight", hidden, Start::Ones);
    if heads.lm && !config.tie_embeddings {
        list.normal("lm_head.weight", &[config.vocab, hidden]);
    }
    if heads.value {
        list.normal("value_head.weight", &[1, hidden]);
    }
    if heads.score {
        list.normal("score.weight", &[1, hidden]);
    }
    list.params
}

/// Builds the list, counting the stream's elements drawn so far.
#[derive(Default)]
struct Params {
    params: Vec<Parameter>,
    drawn: u64,
}

impl Params {
    fn normal(&mut self, name: &str, shape: &[i64]) {
        let start = Start::Normal { first: self.drawn };
        self.drawn += shape.iter().product::<i64>() as u64;
        self.push(name, shape, start);
    }

    fn fixed(&mut self, name: &str, size: i64, start: Start) {
        self.push(name, &[size], start);
    }

    fn linear(&mut self, prefix: &str, outputs: i64, inputs: i64, bias: bool) {
        self.normal(&format!("{prefix}.weight"), &[outputs, inputs]);
        if bias {
            self.fixed(&format!("{prefix}.bias"), outputs, Start::Zeros);
        }
    }

    fn push(&mut self, name: &str, shape: &[i64], start: Start) {
        self.params.push(Parameter {
            name: name.to_string(),
            shape: shape.to_vec(),
            start,
        });
    }
}

/// Elements `ranges` (row-major flat indices of the full tensor, in this order) of `param`'s
/// initial value under the seed `seed`, as a flat float32 CPU tensor: bit for bit the elements
/// `Transformer::new(…, seed)` gives it. Only the elements asked for are drawn.
pub fn seeded(seed: u64, param: &Parameter, ranges: &[Range<i64>]) -> Tensor {
    let count: i64 = ranges.iter().map(|r| r.end - r.start).sum();
    let values: Vec<f32> = match param.start {
        Start::Ones => vec![1.0; count as usize],
        Start::Zeros => vec![0.0; count as usize],
        Start::Normal { first } => {
            let mut values = Vec::with_capacity(count as usize);
            for range in ranges {
                let mut rng = Rng::new(seed);
                // Two draws per normal.
                rng.skip(2 * (first + range.start as u64));
                values.extend((range.start..range.end).map(|_| (rng.normal() * INIT_STD) as f32));
            }
            values
        }
    };
    Tensor::from_slice(&values)
}

#[cfg(test)]
// A whole tensor is one range in a list, as holdings are.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use std::collections::BTreeMap;

    use tch::{Device, nn};

    use super::*;
    use crate::model::Transformer;

    fn configs() -> Vec<(ModelConfig, Heads)> {
        let plain = ModelConfig::tiny();
        let mut every = ModelConfig::tiny();
        every.qkv_bias = true;
        every.tie_embeddings = true;
        every.positions = Positions::Learned;
        vec![
            (plain.clone(), Heads::POLICY),
            (plain.clone(), Heads::CRITIC),
            (plain, Heads::REWARD),
            (every.clone(), Heads::POLICY),
            (every, Heads::CRITIC),
        ]
    }

    /// The list is the model `Transformer::new` builds, and its values are the model's bits.
    #[test]
    fn the_list_and_its_seeded_values_are_the_built_model() {
        for (config, heads) in configs() {
            let vs = nn::VarStore::new(Device::Cpu);
            Transformer::new(&vs.root(), &config, heads, 1234).unwrap();
            let built: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
            let listed = parameters(&config, heads);
            assert_eq!(listed.len(), built.len(), "{config:?} {heads:?}");
            for param in &listed {
                let full = &built[&param.name];
                assert_eq!(full.size(), param.shape, "{}", param.name);
                let values = seeded(1234, param, &[0..param.numel()]);
                assert!(
                    values.equal(&full.reshape([-1])),
                    "{} differs ({config:?}, {heads:?})",
                    param.name
                );
            }
        }
    }

    #[test]
    fn a_slice_is_drawn_on_its_own() {
        let config = ModelConfig::tiny();
        let param = parameters(&config, Heads::POLICY)
            .into_iter()
            .find(|p| p.name == "model.layers.1.mlp.down_proj.weight")
            .unwrap();
        let whole = seeded(7, &param, &[0..param.numel()]);
        // Columns 16..32 of rows 3 and 5, out of order.
        let width = param.shape[1];
        let ranges = [
            5 * width + 16..5 * width + 32,
            3 * width + 16..3 * width + 32,
        ];
        let expected = Tensor::cat(
            &ranges
                .iter()
                .map(|r| whole.narrow(0, r.start, r.end - r.start))
                .collect::<Vec<_>>(),
            0,
        );
        assert!(seeded(7, &param, &ranges).equal(&expected));
    }
}
