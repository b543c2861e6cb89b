//! Time of a role phase on one device of its layout: compute-bound work (FLOPs over peak ×
//! efficiency), memory-bound work (bytes over bandwidth × efficiency), the layout's collectives
//! and fixed per-layer overheads. A roofline per micro-batch: the slower of compute and memory
//! counts.
//!
//! Notation: `P` parameters, `b` bytes per parameter, `L` layers, `h` hidden, `s` tokens per
//! sequence; a forward pass costs `2P + 2·L·s·h` FLOPs per token (matrix products plus causal
//! attention over `s/2` tokens on average), a training micro-batch 3× that (4× with
//! recomputation).
//!
//! Which positions a pass computes follows `rlc run` (see [`ForwardPass`]): generation prefills
//! each distinct prompt once; a whole model's log-prob or value pass computes the last layer at
//! the response's positions only, and runs a group's shared prompt once.

use super::{CostParams, Placed, collective};
use crate::model::{Axis, Role, RoleKind};

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
    /// Its outputs are per response token (a causal LM's log-probs, a critic's values), so a
    /// whole model's pass reads only the response's positions; a reward model's score reads
    /// every position.
    pub reads_tokens: bool,
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
            reads_tokens: role.kind != RoleKind::RewardModel,
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

    /// FLOPs of one token through one layer (its share of [`Self::token_flops`]).
    fn layer_flops(&self, context: f64) -> f64 {
        self.token_flops(context) / self.layers
    }
}

/// The sequences of a role call: `prompt` then `response` tokens each, the rows in runs of
/// `group` consecutive rows that share their prompt (a generation's samples of one prompt, as
/// `generate` lays them out; 1 where nothing is known to be shared).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sequences {
    pub prompt: f64,
    pub response: f64,
    pub group: f64,
}

impl Sequences {
    pub fn len(&self) -> f64 {
        self.prompt + self.response
    }

    /// As read by a minibatch of an update with `minibatches` of them: minibatch `k` holds the
    /// rows `g mod minibatches = k` (`rlc run`'s `exec::update`), so each keeps its share of
    /// every group.
    fn strided(self, minibatches: f64) -> Sequences {
        Sequences {
            group: (self.group / minibatches.max(1.0)).max(1.0),
            ..self
        }
    }

    /// Distinct prompts among `rows` consecutive rows.
    fn distinct(&self, rows: f64) -> f64 {
        (rows / self.group.max(1.0)).ceil().max(1.0)
    }
}

/// One forward pass over a micro-batch as `rlc run` computes it: its FLOPs and how many passes
/// through the layer stack it takes (each pays the layers' fixed costs).
#[derive(Clone, Copy, Debug, PartialEq)]
struct ForwardPass {
    flops: f64,
    passes: f64,
}

impl ForwardPass {
    /// Log-probs or values of `rows` sequences of `seq`. A whole model (no tensor, pipeline or
    /// FSDP shards: `Transformer::logprobs_at`) computes the last layer at the response's
    /// positions only, and where the rows' distinct prompts are at most half of them runs
    /// those prompts once as a prefill that every row's response then reads (two passes). A
    /// sharded model runs every position of every layer.
    fn read(role: &RoleShape, rows: f64, seq: Sequences, whole: bool) -> ForwardPass {
        let (p, r, l) = (seq.prompt, seq.response, role.layers);
        if !whole || !role.reads_tokens || p < 1.0 || r < 1.0 {
            return ForwardPass {
                flops: rows * seq.len() * role.token_flops(seq.len() / 2.0),
                passes: 1.0,
            };
        }
        let distinct = seq.distinct(rows);
        if 2.0 * distinct > rows {
            let token_layers = rows * (seq.len() * (l - 1.0) + r);
            return ForwardPass {
                flops: token_layers * role.layer_flops(seq.len() / 2.0),
                passes: 1.0,
            };
        }
        // The prompts: the last layer at their last position only; the responses' other
        // positions through every layer, over the prompt and the response so far.
        let prefill = distinct * (p * (l - 1.0) + 1.0) * role.layer_flops(p / 2.0);
        let rest = rows * (r - 1.0) * l * role.layer_flops(p + r / 2.0);
        ForwardPass {
            flops: prefill + rest,
            passes: if r > 1.0 { 2.0 } else { 1.0 },
        }
    }

    /// FLOPs of a generation's prefill of `rows` sequences (one pass): each distinct prompt
    /// once, the last layer at its last position only (the next token's logits).
    fn prefill_flops(role: &RoleShape, rows: f64, seq: Sequences) -> f64 {
        let p = seq.prompt;
        seq.distinct(rows) * (p * (role.layers - 1.0) + 1.0) * role.layer_flops(p / 2.0)
    }
}

/// One call of a role phase: how much data it processes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PhaseWork {
    /// `batch` sequences of `seq` (`seq.response`: the tokens sampled).
    Generate { batch: f64, seq: Sequences },
    /// Log-probs, values or scores of `batch` sequences of `seq`.
    Forward { batch: f64, seq: Sequences },
    /// `epochs` passes over `batch` sequences in minibatches of `minibatch`.
    Update {
        batch: f64,
        seq: Sequences,
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
    // `rlc run` runs a model without tensor, pipeline, sequence or FSDP shards whole, reading
    // only the positions it needs (`ForwardPass::read`).
    let whole = l.tp <= 1 && l.pp <= 1 && l.sp <= 1 && l.fsdp <= 1;
    // One micro-batch's forward stage: the pass's FLOPs, or reading the weights, whichever is
    // slower, and the layers' fixed costs once per pass through them.
    let forward_stage = |pass: ForwardPass, tokens: f64| {
        compute(pass.flops / shard, placed, c, role.hidden)
            .max(memory(role.weight_bytes() / shard, placed, c))
            .max(fsdp_gather())
            + pass.passes * stage_layers * c.layer_overhead
            + 2.0 * stage_layers * tp_all_reduce(tokens * role.hidden * role.bytes)
    };
    match *work {
        PhaseWork::Forward { batch, seq } => {
            let (m, k) = micro_batches((batch / data_ranks).ceil());
            let pass = ForwardPass::read(role, m, seq, whole);
            (k + pp - 1.0) * forward_stage(pass, m * seq.len())
        }
        PhaseWork::Generate { batch, seq } => {
            // Each data rank is a replica (sharded by tp and pp only) with its share of the batch.
            let n = (batch / data_ranks).ceil().max(1.0);
            let stage = |flops: f64, bytes: f64, tokens: f64| {
                compute(flops / shard, placed, c, role.hidden).max(memory(bytes / shard, placed, c))
                    + stage_layers * c.layer_overhead
                    + 2.0 * stage_layers * tp_all_reduce(tokens * role.hidden * role.bytes)
            };
            let prompt_len = seq.prompt;
            let prefill = if prompt_len > 0.0 {
                pp * stage(
                    ForwardPass::prefill_flops(role, n, seq),
                    role.weight_bytes(),
                    seq.distinct(n) * prompt_len,
                )
            } else {
                0.0
            };
            // Decode is bandwidth-bound: every token reads the weights and the KV cache.
            let max_new = seq.response;
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
            let minibatches = (batch / minibatch).ceil().max(1.0);
            let steps = epochs.max(1.0) * minibatches;
            let (m, accumulation) = micro_batches((minibatch / data_ranks).ceil());
            let passes = if role.recompute { 4.0 } else { 3.0 };
            let forward = ForwardPass::read(role, m, seq.strided(minibatches), whole);
            let flops = passes * forward.flops / shard;
            let fsdp = f64::from(l.fsdp.max(1));
            let state_shard = role.params / (shard * fsdp);
            let tokens = m * seq.len();
            let mut stage = compute(flops, placed, c, role.hidden)
                .max(memory(3.0 * role.weight_bytes() / shard, placed, c))
                .max(2.0 * fsdp_gather())
                + passes * forward.passes * stage_layers * c.layer_overhead
                + 4.0 * stage_layers * tp_all_reduce(tokens * role.hidden * role.bytes);
            if l.pp > 1 {
                let activation = tokens * role.hidden * role.bytes;
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
            reads_tokens: true,
        }
    }

    fn layout(dp: u32, tp: u32) -> Layout {
        Layout::new(dp, 1, tp, 1)
    }

    /// The main job's policy: 2 layers × 64.
    fn small() -> RoleShape {
        RoleShape {
            params: 1e5,
            layers: 2.0,
            hidden: 64.0,
            heads: 4.0,
            kv_heads: 4.0,
            bytes: 4.0,
            trainable: true,
            recompute: false,
            reads_tokens: true,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
    }

    #[test]
    fn a_whole_models_pass_costs_the_positions_it_computes() {
        let role = small();
        // The main job's log-prob pass on one data rank: 64 rows, 8 prompts of 16 samples
        // each (the rows of a group are adjacent), prompts of 6 and responses of 4 tokens.
        let seq = Sequences {
            prompt: 6.0,
            response: 4.0,
            group: 16.0,
        };
        // Each distinct prompt once (the last layer at its last position only), then the
        // responses' other 3 positions through both layers, over 6 + 2 keys on average.
        let shared = ForwardPass::read(&role, 64.0, seq, true);
        let prompts = 4.0 * (6.0 + 1.0) * role.layer_flops(3.0);
        let responses = 64.0 * 3.0 * 2.0 * role.layer_flops(8.0);
        assert!(close(shared.flops, prompts + responses), "{shared:?}");
        assert_eq!(shared.passes, 2.0);
        // Every row its own prompt: one pass, the last layer at the 4 response positions.
        let alone = ForwardPass::read(&role, 64.0, Sequences { group: 1.0, ..seq }, true);
        assert!(close(
            alone.flops,
            64.0 * (10.0 + 4.0) * role.layer_flops(5.0)
        ));
        assert_eq!(alone.passes, 1.0);
        // Sharded, or a reward model's score: every position of every layer.
        let every = 64.0 * 10.0 * role.token_flops(5.0);
        let reward = RoleShape {
            reads_tokens: false,
            ..role
        };
        for pass in [
            ForwardPass::read(&role, 64.0, seq, false),
            ForwardPass::read(&reward, 64.0, seq, true),
        ] {
            assert!(close(pass.flops, every) && pass.passes == 1.0, "{pass:?}");
        }
        assert!(shared.flops < alone.flops / 2.0 && alone.flops < every);
    }

    #[test]
    fn an_updates_minibatches_keep_a_share_of_every_group() {
        let seq = Sequences {
            prompt: 6.0,
            response: 4.0,
            group: 16.0,
        };
        // Two minibatches of a batch of 16 groups: rows `g mod 2 = k`, 8 of each group.
        assert_eq!(seq.strided(2.0).group, 8.0);
        assert_eq!(seq.strided(2.0).distinct(64.0), 8.0);
        // More minibatches than a group's rows: no row shares its prompt.
        assert_eq!(seq.strided(32.0).group, 1.0);
        // An update's FLOPs are those of its minibatches' passes (the layers' fixed costs off,
        // memory fast enough not to bound it, nothing to all-reduce or step).
        let c = CostParams {
            layer_overhead: 0.0,
            ..CostParams::default()
        };
        let mut hw = h100();
        hw.memory_bandwidth = 1e18;
        let placed = Placed::aligned(hw, layout(1, 1));
        let role = RoleShape {
            trainable: false,
            ..small()
        };
        let update = |seq| {
            let work = PhaseWork::Update {
                batch: 256.0,
                seq,
                minibatch: 128.0,
                epochs: 1.0,
            };
            seconds(&c, &role, &placed, &work)
        };
        let alone = Sequences { group: 1.0, ..seq };
        let passes = |seq| ForwardPass::read(&role, 128.0, seq, true).flops;
        assert!(close(
            update(seq) / update(alone),
            passes(seq.strided(2.0)) / passes(alone)
        ));
    }

    #[test]
    fn generation_prefills_each_distinct_prompt_once() {
        let role = small();
        let seq = Sequences {
            prompt: 6.0,
            response: 4.0,
            group: 16.0,
        };
        let grouped = ForwardPass::prefill_flops(&role, 64.0, seq);
        let alone = ForwardPass::prefill_flops(&role, 64.0, Sequences { group: 1.0, ..seq });
        assert!(close(grouped * 16.0, alone));
        assert!(close(alone, 64.0 * (6.0 + 1.0) * role.layer_flops(3.0)));
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
            seq: Sequences {
                prompt: 0.0,
                response: 1.0,
                group: 1.0,
            },
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
            seq: Sequences {
                prompt: 1024.0,
                response: 1024.0,
                group: 1.0,
            },
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
