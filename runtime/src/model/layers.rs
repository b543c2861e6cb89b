//! The building blocks of one decoder layer. Parameters are registered under the Hugging Face
//! Llama names relative to the `nn::Path` each block is given.

use tch::{Device, Kind, Tensor, nn};

use super::cache::LayerCache;
use super::config::ModelConfig;
use super::rope::RopeAngles;
use super::short_attention;
use crate::rng::Rng;

/// Standard deviation of the random init (the `initializer_range` of Llama/Qwen2 configs).
pub const INIT_STD: f64 = 0.02;

/// How a model being built fills its N(0, INIT_STD²) weights.
pub(crate) enum Draw {
    /// Drawn in registration order from the model's own generator (seeded random init; the
    /// order `model::init::parameters` lists).
    Seeded(Rng),
    /// Left without elements: a skeleton whose weights are set later, one unit at a time
    /// (FSDP), so that building it never holds the whole model.
    Skeleton,
}

/// A weight of `shape` drawn from N(0, INIT_STD²) with the model's own generator (a zero-element
/// variable in a skeleton).
pub(crate) fn normal_var(path: &nn::Path, name: &str, shape: &[i64], rng: &mut Draw) -> Tensor {
    match rng {
        Draw::Seeded(rng) => path.var_copy(name, &rng.normal_tensor(shape, INIT_STD)),
        Draw::Skeleton => path.var_copy(name, &Tensor::zeros([0], (Kind::Float, Device::Cpu))),
    }
}

#[derive(Debug)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(path: &nn::Path, size: i64, eps: f64) -> Self {
        Self {
            weight: path.ones("weight", &[size]),
            eps,
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        // libtorch's `rms_norm`: one kernel on a GPU (forward and backward) where the written-out
        // form is five; on the CPU the same operations in the same order. Statistics in float32
        // whatever the activation dtype, as transformers does.
        let size = self.weight.size();
        if x.kind() == Kind::Float {
            return x.rms_norm(size, Some(&self.weight), self.eps);
        }
        let normed = x
            .to_kind(Kind::Float)
            .rms_norm(size, None::<&Tensor>, self.eps)
            .to_kind(x.kind());
        &self.weight * normed
    }
}

/// `x · Wᵀ (+ b)`, stored as `weight` `[out, in]` and, when present, `bias` `[out]`.
#[derive(Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn new(path: &nn::Path, inputs: i64, outputs: i64, bias: bool, rng: &mut Draw) -> Self {
        let weight = normal_var(path, "weight", &[outputs, inputs], rng);
        let bias = bias.then(|| path.zeros("bias", &[outputs]));
        Self { weight, bias }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// SwiGLU: `down(silu(gate(x)) * up(x))`.
#[derive(Debug)]
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    pub fn new(path: &nn::Path, config: &ModelConfig, rng: &mut Draw) -> Self {
        Self {
            gate_proj: Linear::new(&(path / "gate_proj"), config.hidden, config.ffn, false, rng),
            up_proj: Linear::new(&(path / "up_proj"), config.hidden, config.ffn, false, rng),
            down_proj: Linear::new(&(path / "down_proj"), config.ffn, config.hidden, false, rng),
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let gated = self.gate_proj.forward(x).silu() * self.up_proj.forward(x);
        self.down_proj.forward(&gated)
    }
}

/// Grouped-query self-attention with rotary positions.
#[derive(Debug)]
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    pub fn new(path: &nn::Path, config: &ModelConfig, rng: &mut Draw) -> Self {
        let (hidden, head_dim) = (config.hidden, config.head_dim());
        let kv_width = config.kv_heads * head_dim;
        let bias = config.qkv_bias;
        Self {
            q_proj: Linear::new(
                &(path / "q_proj"),
                hidden,
                config.heads * head_dim,
                bias,
                rng,
            ),
            k_proj: Linear::new(&(path / "k_proj"), hidden, kv_width, bias, rng),
            v_proj: Linear::new(&(path / "v_proj"), hidden, kv_width, bias, rng),
            o_proj: Linear::new(
                &(path / "o_proj"),
                config.heads * head_dim,
                hidden,
                false,
                rng,
            ),
            heads: config.heads,
            kv_heads: config.kv_heads,
            head_dim,
        }
    }

    /// `x`: `[B, T, hidden]`; `bias`: additive attention bias `[B, 1, T, S]` where `S` counts the
    /// cached positions plus the `T` new ones. Appends this step's keys and values to `cache`.
    /// With `queries`, only those of the `T` positions attend (every position is still a key):
    /// `[B, queries.len, hidden]`.
    pub fn forward(
        &self,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
        queries: Option<Rows>,
    ) -> Tensor {
        let heads = HeadCounts {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        };
        let q_input = queries.map_or_else(|| x.shallow_clone(), |rows| rows.of(x));
        let out = grouped_attention(
            self.q_proj.forward(&q_input),
            self.k_proj.forward(x),
            self.v_proj.forward(x),
            heads,
            angles,
            bias,
            cache,
            queries,
        );
        self.o_proj.forward(&out)
    }
}

/// A run of consecutive positions among a forward pass's new ones (dimension 1 of `[B, T, …]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub first: i64,
    pub len: i64,
}

impl Rows {
    /// `x[:, first..first + len]`.
    pub fn of(self, x: &Tensor) -> Tensor {
        x.narrow(1, self.first, self.len)
    }
}

/// The heads one attention computes: query heads, key/value heads, and their width.
#[derive(Debug, Clone, Copy)]
pub struct HeadCounts {
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
}

/// Rotary grouped-query attention of projected queries, keys and values (`[B, T, heads·d]`,
/// `[B, T, kv_heads·d]`), before the output projection: `[B, T, heads·d]`. Each key/value head
/// serves `heads / kv_heads` consecutive query heads — also for a tensor-parallel rank's
/// contiguous share of both. Appends this step's keys and values to `cache`. With `queries`,
/// `q` holds only those of the new positions (`k` and `v` all of them); `angles` and `bias` are
/// the whole pass's.
#[allow(clippy::too_many_arguments)]
pub fn grouped_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    counts: HeadCounts,
    angles: &RopeAngles,
    bias: &Tensor,
    cache: Option<&mut LayerCache>,
    queries: Option<Rows>,
) -> Tensor {
    let HeadCounts {
        heads,
        kv_heads,
        head_dim,
    } = counts;
    let split_heads = |t: Tensor, n: i64| {
        let (batch, steps) = (t.size()[0], t.size()[1]);
        t.view([batch, steps, n, head_dim]).transpose(1, 2)
    };
    let (batch, steps) = (q.size()[0], q.size()[1]);
    let q = match queries {
        Some(rows) => angles.narrow(rows).apply(&split_heads(q, heads)),
        None => angles.apply(&split_heads(q, heads)),
    };
    let bias = match queries {
        Some(rows) => bias.narrow(2, rows.first, rows.len),
        None => bias.shallow_clone(),
    };
    let bias = &bias;
    let mut k = angles.apply(&split_heads(k, kv_heads));
    let mut v = split_heads(v, kv_heads);
    if let Some(cache) = cache {
        (k, v) = cache.append(k, v);
    }
    let scale = 1.0 / (head_dim as f64).sqrt();
    // Nothing to differentiate (the sampler's, a reference's or the old policy's pass): where the
    // sequences are short, plain loops beat libtorch's per-call costs. A differentiated pass keeps
    // libtorch's kernel and its backward (see `short_attention`).
    let differentiated = [&q, &k, &v].iter().any(|t| t.requires_grad());
    if !differentiated && short_attention::applies(&q, &k, bias) {
        return short_attention::forward(&q, &k, &v, bias, scale).0;
    }
    let group = heads / kv_heads;
    // A decode step's one query per row reads each key/value head once for its group of query
    // heads: repeating them first would copy the whole KV cache `group` times at every token.
    if !differentiated && group > 1 && q.size()[2] == 1 {
        return one_query_grouped_attention(&q, &k, &v, bias, scale)
            .transpose(1, 2)
            .reshape([batch, steps, heads * head_dim]);
    }
    let (k, v) = if group > 1 {
        (
            k.repeat_interleave_self_int(group, 1, None),
            v.repeat_interleave_self_int(group, 1, None),
        )
    } else {
        (k, v)
    };
    // One libtorch op for softmax(q·kᵀ / √d + bias)·v (on the CPU its flash kernel, forward and
    // backward): at the main job's size (rows of ten keys) a separate softmax alone cost more
    // than it. Every model builds `bias` in its activations' kind (`additive_bias`).
    let out =
        Tensor::scaled_dot_product_attention(&q, &k, &v, Some(bias), 0.0, false, scale, false);
    out.transpose(1, 2)
        .reshape([batch, steps, heads * head_dim])
}

/// `softmax(q·kᵀ·scale + bias)·v` for one query per row and head (`q` `[B, H, 1, d]`) over keys
/// and values `[B, Hk, S, d]`, each serving `H / Hk` consecutive query heads, and an additive
/// `bias` broadcastable to `[B, 1, 1, S]`: the query heads of a key/value head are one matrix
/// multiplied against its keys, read once. `[B, H, 1, d]`.
fn one_query_grouped_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &Tensor,
    scale: f64,
) -> Tensor {
    let (qs, kv_heads) = (q.size(), k.size()[1]);
    let (batch, heads, head_dim) = (qs[0], qs[1], qs[3]);
    let grouped = q.reshape([batch, kv_heads, heads / kv_heads, head_dim]);
    let scores = grouped.matmul(&k.transpose(-2, -1)) * scale + bias;
    let probs = scores.softmax(-1, Kind::Float).to_kind(q.kind());
    probs.matmul(v).reshape([batch, heads, 1, head_dim])
}

#[derive(Debug)]
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    pub fn new(path: &nn::Path, config: &ModelConfig, rng: &mut Draw) -> Self {
        Self {
            input_layernorm: RmsNorm::new(
                &(path / "input_layernorm"),
                config.hidden,
                config.norm_eps,
            ),
            self_attn: Attention::new(&(path / "self_attn"), config, rng),
            post_attention_layernorm: RmsNorm::new(
                &(path / "post_attention_layernorm"),
                config.hidden,
                config.norm_eps,
            ),
            mlp: Mlp::new(&(path / "mlp"), config, rng),
        }
    }

    /// The layer's output at every new position of `x`, or at `queries` only (the other
    /// positions still serve as keys and values, and enter `cache`).
    pub fn forward(
        &self,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
        queries: Option<Rows>,
    ) -> Tensor {
        let attended = self.self_attn.forward(
            &self.input_layernorm.forward(x),
            angles,
            bias,
            cache,
            queries,
        );
        let x = match queries {
            Some(rows) => rows.of(x) + attended,
            None => x + attended,
        };
        let mlp_out = self.mlp.forward(&self.post_attention_layernorm.forward(&x));
        x + mlp_out
    }
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;

    /// Without repeating keys and values: the same attention as libtorch's over repeated ones,
    /// with masked keys, for groups of 1, 2 and 7 query heads.
    #[test]
    fn one_query_over_grouped_heads_is_libtorchs_attention_over_repeated_ones() {
        tch::manual_seed(5);
        let options = (Kind::Float, Device::Cpu);
        for (heads, kv_heads) in [(4, 4), (4, 2), (14, 2)] {
            let (batch, keys, d) = (3, 11, 8);
            let q = Tensor::randn([batch, heads, 1, d], options);
            let k = Tensor::randn([batch, kv_heads, keys, d], options);
            let v = Tensor::randn([batch, kv_heads, keys, d], options);
            let allowed = Tensor::rand([batch, 1, 1, keys], options).gt(0.3);
            let _ = allowed.narrow(3, 0, 1).fill_(1);
            let bias = crate::model::additive_bias(&allowed, Kind::Float);
            let scale = 1.0 / (d as f64).sqrt();
            let group = heads / kv_heads;
            let repeated = |t: &Tensor| t.repeat_interleave_self_int(group, 1, None);
            let expected = Tensor::scaled_dot_product_attention(
                &q,
                &repeated(&k),
                &repeated(&v),
                Some(&bias),
                0.0,
                false,
                scale,
                false,
            );
            let got = one_query_grouped_attention(&q, &k, &v, &bias, scale);
            let err = (&got - &expected).abs().max().double_value(&[]);
            assert!(err < 1e-5, "{heads} heads over {kv_heads}: {err}");
        }
    }
}
