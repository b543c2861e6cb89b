//! Time of a role phase on one device of its layout: compute-bound work (FLOPs over peak ×
//! efficiency), memory-bound work (bytes over bandwidth × efficiency), the layout's collectives
//! and fixed per-layer overheads. A roofline per micro-batch: the slower of compute and memory
//! counts.
//!
//! Notation: `P` parameters, `b` bytes per parameter, `L` layers, `h` hidden, `s` tokens per
//! sequence; a forward pass costs `2P + 2·L·s·h` FLOPs per token (matrix products plus causal
//! attention over `s/2` tokens on average), a training micro-batch 3× that (4× with
//! recomputation).

use super::{CostParams, Placed, collective};
use crate::model::{Axis, Role};

/// What the cost model needs of a role.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoleShape {
    pub params: f64,
    pub layers: f64,
    pub hidden: f64,
    pub heads: f64,
    pub kv_heads: f64,
    /// Bytes per parameter at the role's precision.
    pub bytes: f64,
    pub trainable: bool,
    pub recompute: bool,
}

impl RoleShape {
    /// `None` when the plan does not know the role's architecture.
    pub fn of(role: &Role) -> Option<RoleShape> {
        let arch = role.arch.as_ref()?;
        Some(RoleShape {
            params: role.parameters? as f64,
            layers: arch.layers.max(1) as f64,
            hidden: arch.hidden as f64,
            heads: arch.heads.max(1) as f64,
            kv_heads: arch.kv_heads.max(1) as f64,
            bytes: role.precision.bytes() as f64,
            trainable: !role.frozen && role.optimizer.is_some(),
            recompute: role.recompute,
        })
    }

    pub fn weight_bytes(&self) -> f64 {
        self.params * self.bytes
    }

    /// Parameter tensors of `layers` layers: nine per layer (two norms, four attention and three
    /// MLP projections), plus the embedding, the final norm and the head.
    fn tensors(layers: f64) -> f64 {
        9.0 * layers + 3.0
    }

    /// FLOPs of one token's forward pass with `context` tokens of attention.
    fn token_flops(&self, context: f64) -> f64 {
        2.0 * self.params + 4.0 * self.layers * context * self.hidden
    }
}

/// One call of a role phase: how much data it processes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PhaseWork {
    /// `batch` sequences from prompts of `prompt_len` tokens, `max_new` tokens each.
    Generate {
        batch: f64,
        prompt_len: f64,
        max_new: f64,
    },
    /// Log-probs, values or scores of `batch` sequences of `seq` tokens.
    Forward { batch: f64, seq: f64 },
    /// `epochs` passes over `batch` sequences in minibatches of `minibatch`.
    Update {
        batch: f64,
        seq: f64,
        minibatch: f64,
        epochs: f64,
    },
}

fn compute(flops: f64, p: &Placed, c: &CostParams, hidden: f64) -> f64 {
    let efficiency = c.compute_efficiency * hidden / (hidden + c.matmul_half_width);
    flops / (p.hw.flops * efficiency)
}

fn memory(bytes: f64, p: &Placed, c: &CostParams) -> f64 {
    bytes / (p.hw.memory_bandwidth * c.bandwidth_efficiency)
}

/// Seconds one call of `work` takes on `placed` (every device of the layout works in parallel).
pub fn seconds(c: &CostParams, role: &RoleShape, placed: &Placed, work: &PhaseWork) -> f64 {
    let l = placed.layout;
    let (tp, pp) = (f64::from(l.tp.max(1)), f64::from(l.pp.max(1)));
    let data_ranks = f64::from(l.data_ranks().max(1));
    let shard = tp * pp;
    let stage_layers = (role.layers / pp).ceil();
    let tp_link = placed.link(Axis::Tp, c);
    let tp_all_reduce = |bytes: f64| collective::all_reduce(bytes, l.tp, tp_link);
    let fsdp_gather = || {
        collective::all_gather(
            role.weight_bytes() / (shard * f64::from(l.fsdp.max(1))),
            l.fsdp,
            placed.link(Axis::Fsdp, c),
        )
    };
    let micro_batches = |per_rank: f64| -> (f64, f64) {
        let per_rank = per_rank.max(1.0);
        let m = l
            .micro
            .map_or(per_rank, |m| (m as f64).min(per_rank))
            .max(1.0);
        (m, (per_rank / m).ceil())
    };
    match *work {
        PhaseWork::Forward { batch, seq } => {
            let (m, k) = micro_batches((batch / data_ranks).ceil());
            let flops = m * seq * role.token_flops(seq / 2.0) / shard;
            let stage = compute(flops, placed, c, role.hidden)
                .max(memory(role.weight_bytes() / shard, placed, c))
                .max(fsdp_gather())
                + stage_layers * c.layer_overhead
                + 2.0 * stage_layers * tp_all_reduce(m * seq * role.hidden * role.bytes);
            (k + pp - 1.0) * stage
        }
        PhaseWork::Generate {
            batch,
            prompt_len,
            max_new,
        } => {
            // Each data rank is a replica (sharded by tp and pp only) with its share of the batch.
            let n = (batch / data_ranks).ceil().max(1.0);
            let stage = |flops: f64, bytes: f64, tokens: f64| {
                compute(flops / shard, placed, c, role.hidden).max(memory(bytes / shard, placed, c))
                    + stage_layers * c.layer_overhead
                    + 2.0 * stage_layers * tp_all_reduce(tokens * role.hidden * role.bytes)
            };
            let prefill = if prompt_len > 0.0 {
                pp * stage(
                    n * prompt_len * role.token_flops(prompt_len / 2.0),
                    role.weight_bytes(),
                    n * prompt_len,
                )
            } else {
                0.0
            };
            // Decode is bandwidth-bound: every token reads the weights and the KV cache.
            let context = prompt_len + max_new / 2.0;
            let head_dim = role.hidden / role.heads;
            let kv_bytes = 2.0 * role.layers * role.kv_heads * head_dim * context * n * role.bytes;
            let per_token = pp
                * stage(
                    n * role.token_flops(context),
                    role.weight_bytes() + kv_bytes,
                    n,
                );
            prefill + max_new * per_token
        }
        PhaseWork::Update {
            batch,
            seq,
            minibatch,
            epochs,
        } => {
            let minibatch = minibatch.clamp(1.0, batch.max(1.0));
            let steps = epochs.max(1.0) * (batch / minibatch).ceil().max(1.0);
            let (m, accumulation) = micro_batches((minibatch / data_ranks).ceil());
            let passes = if role.recompute { 4.0 } else { 3.0 };
            let flops = passes * m * seq * role.token_flops(seq / 2.0) / shard;
            let fsdp = f64::from(l.fsdp.max(1));
            let state_shard = role.params / (shard * fsdp);
            let mut stage = compute(flops, placed, c, role.hidden)
                .max(memory(3.0 * role.weight_bytes() / shard, placed, c))
                .max(2.0 * fsdp_gather())
                + passes * stage_layers * c.layer_overhead
                + 4.0 * stage_layers * tp_all_reduce(m * seq * role.hidden * role.bytes);
            if l.pp > 1 {
                let activation = m * seq * role.hidden * role.bytes;
                stage += 2.0 * collective::send(activation, placed.link(Axis::Pp, c));
            }
            let mut per_step = (accumulation + pp - 1.0) * stage;
            // Gradient synchronisation once per optimizer step.
            if l.fsdp > 1 {
                per_step += collective::all_gather(
                    state_shard * role.bytes,
                    l.fsdp,
                    placed.link(Axis::Fsdp, c),
                );
            }
            if l.dp > 1 {
                // `rlc run` all-reduces each parameter tensor's gradient on its own: one message
                // (α) per tensor.
                let tensors = RoleShape::tensors(stage_layers);
                per_step += tensors
                    * collective::all_reduce(
                        state_shard * role.bytes / tensors,
                        l.dp,
                        placed.link(Axis::Dp, c),
                    );
            }
            // Adam reads and writes weights, gradients, moments and master weights, with a
            // layer's fixed cost for each layer's tensors (its kernels run tensor by tensor).
            if role.trainable {
                per_step += memory(state_shard * (2.0 * role.bytes + 28.0), placed, c)
                    + stage_layers * c.layer_overhead;
            }
            steps * per_step
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Hardware;
    use crate::model::Layout;

    fn h100() -> Hardware {
        Hardware {
            flops: 989e12,
            memory_bandwidth: 3.35e12,
            memory: 80.0 * 1024f64.powi(3),
            intra_bandwidth: 450e9,
            inter_bandwidth: 50e9,
            devices_per_node: 8,
        }
    }

    fn llama70b() -> RoleShape {
        RoleShape {
            params: 70e9,
            layers: 80.0,
            hidden: 8192.0,
            heads: 64.0,
            kv_heads: 8.0,
            bytes: 2.0,
            trainable: true,
            recompute: true,
        }
    }

    fn layout(dp: u32, tp: u32) -> Layout {
        Layout::new(dp, 1, tp, 1)
    }

    #[test]
    fn decode_is_bandwidth_bound() {
        // One sequence, one token: reading 140 GB of weights over 8 × 3.35 TB/s at 70 % takes
        // about 7.5 ms; the FLOPs (140 GFLOP) take 0.04 ms. (Latencies off: the 160 small
        // tensor-parallel all-reduces add their α on top.)
        let p = Placed::aligned(h100(), layout(1, 8));
        let c = CostParams {
            layer_overhead: 0.0,
            intra_latency: 0.0,
            ..CostParams::default()
        };
        let work = PhaseWork::Generate {
            batch: 1.0,
            prompt_len: 0.0,
            max_new: 1.0,
        };
        let t = seconds(&c, &llama70b(), &p, &work);
        let weights = 140e9 / (8.0 * 3.35e12 * 0.7);
        assert!(t > weights && t < weights * 1.3, "{t} vs {weights}");
    }

    #[test]
    fn more_devices_train_faster_and_forward_passes_scale() {
        let c = CostParams::default();
        let work = PhaseWork::Update {
            batch: 512.0,
            seq: 2048.0,
            minibatch: 128.0,
            epochs: 1.0,
        };
        let small = seconds(
            &c,
            &llama70b(),
            &Placed::aligned(h100(), layout(2, 8)),
            &work,
        );
        let large = seconds(
            &c,
            &llama70b(),
            &Placed::aligned(h100(), layout(8, 8)),
            &work,
        );
        assert!(large < small / 2.0, "{large} vs {small}");
        // Compute-bound: 4·2·P FLOPs per token over 16 GPUs at half peak, give or take.
        let tokens = 512.0 * 2048.0;
        let ideal = 4.0 * 2.0 * 70e9 * tokens / (16.0 * 989e12 * 0.5);
        assert!(small > ideal && small < ideal * 1.5, "{small} vs {ideal}");
    }
}
