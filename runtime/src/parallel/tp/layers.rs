//! The decoder layer split over a TP group: column- and row-parallel linear layers, attention by
//! heads, the MLP by its inner width. Each block takes and returns the replicated residual
//! stream: `f` where it enters the column-parallel layers, `g` after the row-parallel one.

use tch::Tensor;

use super::TpError;
use super::shard::ShardLoader;
use crate::collectives::{CollectiveError, Communicator};
use crate::model::{HeadCounts, LayerCache, ModelConfig, RmsNorm, RopeAngles, grouped_attention};
use crate::parallel::tape::{Tape, sum_over_group};

/// `x · Wᵀ (+ b)` with the output features split over the group: each rank computes its slice
/// of the output from the whole (replicated) input.
#[derive(Debug)]
pub struct ColumnParallelLinear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl ColumnParallelLinear {
    /// `{prefix}.weight` (full shape `[outputs, inputs]`) and, with `bias`, `{prefix}.bias`.
    pub fn load(
        loader: &mut ShardLoader,
        prefix: &str,
        inputs: i64,
        outputs: i64,
        bias: bool,
    ) -> Result<Self, TpError> {
        let weight = loader.load(&format!("{prefix}.weight"), &[outputs, inputs])?;
        let bias = match bias {
            true => Some(loader.load(&format!("{prefix}.bias"), &[outputs])?),
            false => None,
        };
        Ok(Self { weight, bias })
    }

    /// `x` must already have passed `f` ([`Tape::copy_to_group`]).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// `x · Wᵀ` with the input features split over the group: each rank multiplies its slice of the
/// input by its columns of `W`, and the partial products are summed over the group (`g`).
#[derive(Debug)]
pub struct RowParallelLinear<'c> {
    weight: Tensor,
    tp: &'c Communicator,
}

impl<'c> RowParallelLinear<'c> {
    /// `{prefix}.weight`, full shape `[outputs, inputs]` (bias-free, as Llama's o and down).
    pub fn load(
        loader: &mut ShardLoader,
        prefix: &str,
        inputs: i64,
        outputs: i64,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let weight = loader.load(&format!("{prefix}.weight"), &[outputs, inputs])?;
        Ok(Self { weight, tp })
    }

    /// The replicated output from this rank's slice `x` of the input.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, CollectiveError> {
        sum_over_group(&x.linear(&self.weight, None::<&Tensor>), self.tp)
    }
}

/// Grouped-query attention over this rank's heads: `heads / tp` query heads and the
/// `kv_heads / tp` key/value heads they read (contiguous runs of both, so GQA's head-to-group
/// map stays within the rank).
#[derive(Debug)]
pub struct TpAttention<'c> {
    q_proj: ColumnParallelLinear,
    k_proj: ColumnParallelLinear,
    v_proj: ColumnParallelLinear,
    o_proj: RowParallelLinear<'c>,
    /// Query and key/value heads on this rank.
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    tp: &'c Communicator,
}

impl<'c> TpAttention<'c> {
    pub fn load(
        loader: &mut ShardLoader,
        prefix: &str,
        config: &ModelConfig,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let (hidden, head_dim, size) = (config.hidden, config.head_dim(), tp.world_size() as i64);
        let (q_width, kv_width) = (config.heads * head_dim, config.kv_heads * head_dim);
        let column = |loader: &mut ShardLoader, name: &str, width: i64| {
            let prefix = format!("{prefix}.{name}");
            ColumnParallelLinear::load(loader, &prefix, hidden, width, config.qkv_bias)
        };
        Ok(Self {
            q_proj: column(loader, "q_proj", q_width)?,
            k_proj: column(loader, "k_proj", kv_width)?,
            v_proj: column(loader, "v_proj", kv_width)?,
            o_proj: RowParallelLinear::load(
                loader,
                &format!("{prefix}.o_proj"),
                q_width,
                hidden,
                tp,
            )?,
            heads: config.heads / size,
            kv_heads: config.kv_heads / size,
            head_dim,
            tp,
        })
    }

    /// As [`crate::model::Transformer`]'s attention, on this rank's heads: `x` (`[B, T, hidden]`,
    /// replicated) in, the replicated output out. `cache` holds this rank's key/value heads.
    pub fn forward(
        &self,
        tape: &Tape<'c>,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor, CollectiveError> {
        let x = tape.copy_to_group(x, self.tp);
        let counts = HeadCounts {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        };
        let out = grouped_attention(
            self.q_proj.forward(&x),
            self.k_proj.forward(&x),
            self.v_proj.forward(&x),
            counts,
            angles,
            bias,
            cache,
            None,
        );
        self.o_proj.forward(&out)
    }
}

/// SwiGLU with the inner width split over the group: gate and up column-parallel, down
/// row-parallel, so the gating needs no communication.
#[derive(Debug)]
pub struct TpMlp<'c> {
    gate_proj: ColumnParallelLinear,
    up_proj: ColumnParallelLinear,
    down_proj: RowParallelLinear<'c>,
    tp: &'c Communicator,
}

impl<'c> TpMlp<'c> {
    pub fn load(
        loader: &mut ShardLoader,
        prefix: &str,
        config: &ModelConfig,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let (hidden, ffn) = (config.hidden, config.ffn);
        Ok(Self {
            gate_proj: ColumnParallelLinear::load(
                loader,
                &format!("{prefix}.gate_proj"),
                hidden,
                ffn,
                false,
            )?,
            up_proj: ColumnParallelLinear::load(
                loader,
                &format!("{prefix}.up_proj"),
                hidden,
                ffn,
                false,
            )?,
            down_proj: RowParallelLinear::load(
                loader,
                &format!("{prefix}.down_proj"),
                ffn,
                hidden,
                tp,
            )?,
            tp,
        })
    }

    pub fn forward(&self, tape: &Tape<'c>, x: &Tensor) -> Result<Tensor, CollectiveError> {
        let x = tape.copy_to_group(x, self.tp);
        let gated = self.gate_proj.forward(&x).silu() * self.up_proj.forward(&x);
        self.down_proj.forward(&gated)
    }
}

/// One decoder layer (pre-norm attention and MLP with residuals) over a TP group.
#[derive(Debug)]
pub struct TpDecoderLayer<'c> {
    input_layernorm: RmsNorm,
    self_attn: TpAttention<'c>,
    post_attention_layernorm: RmsNorm,
    mlp: TpMlp<'c>,
}

impl<'c> TpDecoderLayer<'c> {
    /// Layer `index` (`model.layers.{index}.*`), this rank's shards.
    pub fn load(
        loader: &mut ShardLoader,
        index: i64,
        config: &ModelConfig,
        tp: &'c Communicator,
    ) -> Result<Self, TpError> {
        let prefix = format!("model.layers.{index}");
        let norm = |loader: &mut ShardLoader, name: &str| {
            loader.load_norm(&format!("{prefix}.{name}"), config.hidden, config.norm_eps)
        };
        Ok(Self {
            input_layernorm: norm(loader, "input_layernorm")?,
            self_attn: TpAttention::load(loader, &format!("{prefix}.self_attn"), config, tp)?,
            post_attention_layernorm: norm(loader, "post_attention_layernorm")?,
            mlp: TpMlp::load(loader, &format!("{prefix}.mlp"), config, tp)?,
        })
    }

    /// `x` (`[B, T, hidden]`, replicated) through the layer. The residual stream is cut at the
    /// layer's input and after attention, so that each operation's backward runs in exactly one
    /// of the tape's segments (see [`Tape`]).
    pub fn forward(
        &self,
        tape: &Tape<'c>,
        x: &Tensor,
        angles: &RopeAngles,
        bias: &Tensor,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor, CollectiveError> {
        let x = tape.cut(x);
        let attended =
            self.self_attn
                .forward(tape, &self.input_layernorm.forward(&x), angles, bias, cache)?;
        let x = tape.cut(&(x + attended));
        let mlp_out = self
            .mlp
            .forward(tape, &self.post_attention_layernorm.forward(&x))?;
        Ok(x + mlp_out)
    }
}
