//! Fully sharded data parallelism (ZeRO-3): every rank of the `fsdp` group owns a flat 1/N shard
//! of each parameter, of its gradient and of its AdamW moments; full parameters exist only for
//! the one unit (the embedding, a decoder layer, the final norm with the LM head) being run.
//!
//! Forward, without autograd: all-gather a unit's parameters, run it, free them, keep only the
//! unit's input. Backward, in reverse: re-gather the unit, recompute it with autograd from its
//! saved input, backpropagate the incoming gradient, reduce-scatter (sum) the parameter gradients
//! into the local gradient shards, free. So a rank holds its shards plus one unit's full
//! parameters and gradients, and one layer's activations besides the saved inputs. Under HSDP
//! (`dp > 1` as well) the gradient shards are then summed over the `dp` replicas.
//!
//! Gradients are *summed* over data ranks: each rank's loss must be its share of the global loss
//! (e.g. a token mean whose denominator counts the whole batch). AdamW is elementwise, so stepping
//! the shards is the full update; weight decay follows each original parameter's rank.
//!
//! The blocks are the model's own (`model::DecoderLayer`, …) inside a skeleton `Transformer`
//! whose variables point at the gathered tensors while a unit runs and at empty tensors
//! otherwise, so FSDP computes exactly what one rank computes.

mod decode;
mod flat;
mod memory;

pub use memory::MemoryReport;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use tch::{Kind, Tensor, nn};

use crate::collectives::{CollectiveError, Communicator, ReduceOp};
use crate::model::{
    ConfigError, Heads, ModelConfig, RopeAngles, Transformer, add_positions, attention_bias, init,
    token_logprobs, token_positions,
};
use crate::optim::{AdamW, AdamWConfig, clip_to, sum_of_squares};
use crate::parallel::RankGroups;
use flat::ParamSpec;
use memory::{Account, Held, Ledger, bytes_of};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FsdpError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("FSDP runs layouts of fsdp and dp ranks only, got tp {tp} and pp {pp}")]
    Layout { tp: u32, pp: u32 },
    #[error("weight `{0}` of the model is missing")]
    MissingWeight(String),
    #[error("weight `{0}` is not a weight of a policy model (LM head only)")]
    UnexpectedWeight(String),
    #[error("weight `{name}` has shape {found:?}, the config gives {expected:?}")]
    WeightShape {
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    #[error("ids {ids:?} and mask {mask:?} must have one [B, T] shape with T ≥ 2")]
    BatchShape { ids: Vec<i64>, mask: Vec<i64> },
    #[error("the loss does not depend on the pass (was the forward pass run under no_grad?)")]
    NoGradient,
    #[error("a training pass is in flight: call `backward` (or drop the pass) first")]
    PassInFlight,
    #[error("FSDP collective: {0}")]
    Collective(#[from] CollectiveError),
    #[error("libtorch: {0}")]
    Torch(String),
}

impl From<tch::TchError> for FsdpError {
    fn from(e: tch::TchError) -> Self {
        FsdpError::Torch(e.to_string())
    }
}

/// One parameter: its layout, this rank's shard (a leaf whose `grad` is the gradient shard) and
/// the skeleton's variable that shows the full tensor while its unit is gathered.
struct Param {
    spec: ParamSpec,
    shard: Tensor,
    var: Tensor,
}

/// The parameters gathered together (indices into `Fsdp::params`).
struct Unit {
    params: Vec<usize>,
}

/// Loss and gradient norm of one [`Fsdp::train_step`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// This rank's loss summed over every data rank (the global loss when each rank's loss is
    /// its share of it).
    pub loss: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
}

/// A model sharded ZeRO-3 style over one rank's `fsdp` group (see the module docs).
pub struct Fsdp<'c> {
    config: ModelConfig,
    shards: &'c Communicator,
    replicas: &'c Communicator,
    skeleton: Transformer,
    params: Vec<Param>,
    /// The embedding, the decoder layers in order, then the head.
    units: Vec<Unit>,
    adam: AdamW,
    ledger: Rc<Ledger>,
    /// Set while a [`Pass`] lives: its graph reads the head's gathered parameters, which any
    /// other gather of the head would replace.
    in_flight: Rc<Cell<bool>>,
    /// The kind parameters are gathered and computed in (float32, or bfloat16 under
    /// `precision = bf16`); the shards, their gradients and the optimizer stay float32.
    compute: Kind,
}

/// Clears `Fsdp::in_flight` when the pass ends.
struct InFlight(Rc<Cell<bool>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// A unit whose full parameters are in the skeleton; dropping it empties them again.
struct Gathered {
    vars: Vec<Tensor>,
    _held: Held,
}

impl Gathered {
    fn vars(&self) -> &[Tensor] {
        &self.vars
    }
}

impl Drop for Gathered {
    fn drop(&mut self) {
        for var in &mut self.vars {
            let empty = Tensor::empty([0], (var.kind(), var.device()));
            var.set_data(&empty);
        }
    }
}

/// Rotary angles, attention bias and token positions of one batch (no parameters).
struct Context {
    angles: RopeAngles,
    bias: Tensor,
    positions: Tensor,
}

/// What the forward pass of a training step keeps for its backward pass.
pub struct Pass {
    logprobs: Tensor,
    ids: Tensor,
    context: Context,
    /// Each decoder layer's input, with its count in the ledger.
    inputs: Vec<(Tensor, Held)>,
    /// The final hidden state as a leaf of the head's graph.
    last: Tensor,
    head: Gathered,
    kept: Held,
    in_flight: InFlight,
}

impl Pass {
    /// Log-probabilities `[B, T-1]` of each realised next token; differentiable.
    pub fn logprobs(&self) -> &Tensor {
        &self.logprobs
    }
}

impl<'c> Fsdp<'c> {
    /// Shards the full model `weights` (Hugging Face names, as `Transformer` registers them, LM
    /// head only) over `shards` (this rank's FSDP group); gradient shards are also summed over
    /// `replicas` (the DP group: HSDP; a group of one otherwise).
    pub fn new(
        weights: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        shards: &'c Communicator,
        replicas: &'c Communicator,
        adamw: AdamWConfig,
    ) -> Result<Self, FsdpError> {
        let (rank, world) = (shards.rank(), shards.world_size());
        let weights = weights
            .iter()
            .map(|(name, t)| (name.clone(), t.shallow_clone()))
            .collect();
        Self::build(
            weights,
            config,
            shards,
            replicas,
            adamw,
            |full, spec, kind| {
                if full.size() != spec.shape {
                    return Err(FsdpError::WeightShape {
                        name: spec.name.clone(),
                        expected: spec.shape.clone(),
                        found: full.size(),
                    });
                }
                Ok(flat::take_shard(&full.to_kind(kind), spec, rank, world))
            },
        )
    }

    /// As [`Fsdp::new`] from this rank's shards alone: `local` holds, under each parameter's
    /// name, the flat elements `parallel::shards::holding` gives this rank's FSDP coordinate
    /// (its unpadded chunk of the flattened parameter), as `parallel::materialise::rank_shards`
    /// makes them. No rank ever holds a full weight, and each piece is let go once its padded
    /// shard is made.
    pub fn from_shards(
        local: BTreeMap<String, Tensor>,
        config: &ModelConfig,
        groups: &'c RankGroups,
        adamw: AdamWConfig,
    ) -> Result<Self, FsdpError> {
        fsdp_alone(groups)?;
        let (shards, replicas) = (&groups.fsdp, &groups.dp);
        let (rank, world) = (shards.rank() as i64, shards.world_size() as i64);
        Self::build(
            local,
            config,
            shards,
            replicas,
            adamw,
            |piece, spec, kind| {
                let chunk = crate::parallel::shards::fsdp_chunk(spec.numel, world, rank);
                let len = chunk.end - chunk.start;
                if piece.numel() as i64 != len {
                    return Err(FsdpError::WeightShape {
                        name: spec.name.clone(),
                        expected: vec![len],
                        found: piece.size(),
                    });
                }
                // Zero padding, as `take_shard` pads.
                Ok(piece
                    .reshape([-1])
                    .to_kind(kind)
                    .constant_pad_nd([0, spec.shard - len]))
            },
        )
    }

    /// The model over `shards` whose every parameter's shard `shard_of` makes from what
    /// `weights` holds under its name (given the parameter's layout and kind), each taken out of
    /// `weights` as it is used; the skeleton's blocks hold no matrix meanwhile.
    fn build(
        mut weights: BTreeMap<String, Tensor>,
        config: &ModelConfig,
        shards: &'c Communicator,
        replicas: &'c Communicator,
        adamw: AdamWConfig,
        shard_of: impl Fn(&Tensor, &ParamSpec, Kind) -> Result<Tensor, FsdpError>,
    ) -> Result<Self, FsdpError> {
        let device = weights
            .values()
            .next()
            .map_or(tch::Device::Cpu, Tensor::device);
        let vs = nn::VarStore::new(device);
        // The skeleton's matrices have no elements; its blocks read gathered ones.
        let skeleton = Transformer::skeleton(&vs.root(), config, Heads::POLICY)?;
        let shapes: BTreeMap<String, Vec<i64>> = init::parameters(config, Heads::POLICY)
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect();
        let variables: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
        if let Some(name) = weights.keys().find(|n| !variables.contains_key(*n)) {
            return Err(FsdpError::UnexpectedWeight(name.clone()));
        }
        let world = shards.world_size();
        let mut params = Vec::with_capacity(variables.len());
        for (name, mut var) in variables {
            let given = weights
                .remove(&name)
                .ok_or_else(|| FsdpError::MissingWeight(name.clone()))?;
            let shape = shapes
                .get(&name)
                .ok_or_else(|| FsdpError::UnexpectedWeight(name.clone()))?;
            let spec = ParamSpec::new(name, shape.clone(), world);
            let shard = tch::no_grad(|| shard_of(&given, &spec, var.kind()))?
                .to_device(device)
                .set_requires_grad(true);
            // A defined zero gradient from the start, accumulated into in place.
            shard.sum(Kind::Float).f_mul_scalar(0.0)?.f_backward()?;
            var.set_data(&Tensor::empty([0], (var.kind(), device)));
            params.push(Param { spec, shard, var });
        }
        let units = units(&params, config);
        let adam = AdamW::with_decay(
            params
                .iter()
                .map(|p| {
                    (
                        p.spec.name.clone(),
                        p.shard.shallow_clone(),
                        p.spec.shape.len() >= 2,
                    )
                })
                .collect(),
            adamw,
        );
        Ok(Self {
            config: config.clone(),
            shards,
            replicas,
            skeleton,
            params,
            units,
            adam,
            ledger: Rc::default(),
            in_flight: Rc::default(),
            compute: Kind::Float,
        })
    }

    /// Mixed precision, as PyTorch FSDP's `MixedPrecision(param_dtype=kind,
    /// reduce_dtype=float32)`: every all-gather sends the shards in `kind` (half the bytes for
    /// bfloat16), the layers compute in it, and the gradients are reduce-scattered in float32
    /// into the float32 shards, which are the master weights the optimizer steps.
    pub fn computing_in(mut self, kind: Kind) -> Self {
        self.compute = kind;
        self
    }

    /// The kind parameters are gathered and computed in.
    pub fn compute_kind(&self) -> Kind {
        self.compute
    }

    /// [`Fsdp::new`] over a rank's `fsdp` group, with its `dp` group as replicas.
    pub fn for_rank(
        weights: &BTreeMap<String, Tensor>,
        config: &ModelConfig,
        groups: &'c RankGroups,
        adamw: AdamWConfig,
    ) -> Result<Self, FsdpError> {
        fsdp_alone(groups)?;
        Self::new(weights, config, &groups.fsdp, &groups.dp, adamw)
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Logits `[B, T, vocab]` of this rank's rows, without autograd.
    pub fn logits(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor, FsdpError> {
        check_batch(ids, mask, 1)?;
        self.check_idle()?;
        tch::no_grad(|| {
            let context = self.context(mask, 0, ids.size()[1]);
            let mut x = self.embed(ids, &context)?;
            for layer in 0..self.layers() {
                x = self.run_layer(layer, &x, &context, None)?;
            }
            let _head = self.gather(self.head_unit())?;
            Ok(self
                .skeleton
                .lm_head(&self.skeleton.final_norm().forward(&x)))
        })
    }

    /// The forward pass of a training step on this rank's rows; compute the loss from
    /// [`Pass::logprobs`] and give both to [`Fsdp::backward`].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Pass, FsdpError> {
        check_batch(ids, mask, 2)?;
        self.check_idle()?;
        let in_flight = InFlight(Rc::clone(&self.in_flight));
        self.in_flight.set(true);
        let context = self.context(mask, 0, ids.size()[1]);
        let mut inputs = Vec::with_capacity(self.layers());
        let mut x = tch::no_grad(|| self.embed(ids, &context))?;
        for layer in 0..self.layers() {
            let next = tch::no_grad(|| self.run_layer(layer, &x, &context, None))?;
            let held = self.ledger.hold(Account::Activations, bytes_of([&x]));
            inputs.push((x, held));
            x = next;
        }
        let last = x.detach().set_requires_grad(true);
        let head = self.gather(self.head_unit())?;
        let logits = self
            .skeleton
            .lm_head(&self.skeleton.final_norm().forward(&last));
        let kept = self
            .ledger
            .hold(Account::Activations, bytes_of([&last, &logits]));
        let logprobs = token_logprobs(&logits, ids);
        Ok(Pass {
            logprobs,
            ids: ids.shallow_clone(),
            context,
            inputs,
            last,
            head,
            kept,
            in_flight,
        })
    }

    /// Backpropagates `loss` (a scalar computed from `pass`) unit by unit, adding the gradients,
    /// summed over the data ranks, into the gradient shards.
    pub fn backward(&mut self, pass: Pass, loss: &Tensor) -> Result<(), FsdpError> {
        if !loss.requires_grad() {
            return Err(FsdpError::NoGradient);
        }
        let Pass {
            ids,
            context,
            mut inputs,
            last,
            head,
            kept,
            in_flight,
            ..
        } = pass;
        let head_unit = self.head_unit();
        let mut wrt = vec![last];
        wrt.extend(head.vars().iter().map(Tensor::shallow_clone));
        let mut grads = Tensor::f_run_backward(&[loss], &wrt, false, false)?;
        let mut upstream = grads.remove(0);
        drop(wrt);
        self.scatter_gradients(head_unit, grads)?;
        drop((head, kept));
        if !upstream.defined() {
            return Err(FsdpError::NoGradient);
        }
        for layer in (0..self.layers()).rev() {
            let (input, held) = inputs.pop().expect("one saved input per layer");
            let gathered = self.gather(1 + layer)?;
            let x = input.detach().set_requires_grad(true);
            let out = self.skeleton.decoder_layers()[layer].forward(
                &x,
                &context.angles,
                &context.bias,
                None,
                None,
            );
            let seed = (out * &upstream).sum(Kind::Float);
            let mut wrt = vec![x];
            wrt.extend(gathered.vars().iter().map(Tensor::shallow_clone));
            let mut grads = Tensor::f_run_backward(&[seed], &wrt, false, false)?;
            upstream = grads.remove(0);
            drop(wrt);
            self.scatter_gradients(1 + layer, grads)?;
            drop((gathered, input, held));
        }
        let gathered = self.gather(0)?;
        let vars = gathered.vars();
        // The token table, then the position table when the model has one (`units`' order).
        let out = add_positions(
            Tensor::embedding(&vars[0], &ids, -1, false, false),
            vars.get(1),
            &context.positions,
        );
        let seed = (out * &upstream).sum(Kind::Float);
        let grads = Tensor::f_run_backward(&[seed], vars, false, false)?;
        drop(in_flight);
        self.scatter_gradients(0, grads)
    }

    /// Scales the gradient shards so that the global gradient norm is at most `max_norm`, as
    /// `clip_grad_norm` does on one rank, and returns the norm before clipping. Shards are
    /// disjoint over the FSDP group and equal over replicas, so squared norms are summed over the
    /// FSDP group only; padding is zero and adds nothing.
    pub fn clip_grad_norm(&mut self, max_norm: f64) -> Result<f64, FsdpError> {
        let local = Tensor::from(sum_of_squares(self.params.iter().map(|p| p.shard.grad())));
        let norm = self
            .shards
            .all_reduce(&local, ReduceOp::Sum)?
            .double_value(&[])
            .sqrt();
        clip_to(&self.adam.params(), norm, max_norm);
        Ok(norm)
    }

    /// One AdamW step of the shards with learning rate `lr`.
    pub fn step(&mut self, lr: f64) {
        self.adam.step(lr);
    }

    pub fn zero_grad(&mut self) {
        self.adam.zero_grad();
    }

    /// The AdamW over this rank's padded flat shards (its step count and moments, for
    /// checkpoints).
    pub fn optimizer(&self) -> &AdamW {
        &self.adam
    }

    pub fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.adam
    }

    /// This rank's FSDP group.
    pub fn shard_group(&self) -> &'c Communicator {
        self.shards
    }

    /// Zero gradients, forward, `loss` of the log-probabilities, backward, clipping to
    /// `max_norm` (when given) and one AdamW step.
    pub fn train_step(
        &mut self,
        ids: &Tensor,
        mask: &Tensor,
        loss: impl FnOnce(&Tensor) -> Tensor,
        max_norm: Option<f64>,
        lr: f64,
    ) -> Result<StepStats, FsdpError> {
        self.zero_grad();
        let pass = self.forward(ids, mask)?;
        let value = loss(pass.logprobs());
        let local = value
            .detach()
            .to_kind(Kind::Double)
            .to_device(tch::Device::Cpu);
        self.backward(pass, &value)?;
        let over_shards = self.shards.all_reduce(&local, ReduceOp::Sum)?;
        let total = self.replicas.all_reduce(&over_shards, ReduceOp::Sum)?;
        let grad_norm = match max_norm {
            Some(max_norm) => self.clip_grad_norm(max_norm)?,
            None => self.clip_grad_norm(f64::INFINITY)?,
        };
        self.step(lr);
        Ok(StepStats {
            loss: total.double_value(&[]),
            grad_norm,
        })
    }

    /// Every full weight by its Hugging Face name (private copies); every rank of the FSDP group
    /// must call it.
    pub fn full_weights(&self) -> Result<BTreeMap<String, Tensor>, FsdpError> {
        let mut out = BTreeMap::new();
        for param in &self.params {
            let parts = self.shards.all_gather(&param.shard.detach())?;
            let full = flat::unflatten(&parts, &[&param.spec]).remove(0).copy();
            out.insert(param.spec.name.clone(), full);
        }
        Ok(out)
    }

    /// This rank's shard of every parameter without its padding: flat views of the shards
    /// (copy them to keep them past the next step), in the order and with the boundaries of
    /// `parallel::shards::holding` for this rank — the source shards of a re-shard.
    pub fn local_shards(&self) -> BTreeMap<String, Tensor> {
        let (rank, world) = (self.shards.rank() as i64, self.shards.world_size() as i64);
        self.params
            .iter()
            .map(|p| {
                // The padded shard `rank` starts at `rank · shard`, as `fsdp_chunk`'s does.
                let held = crate::parallel::shards::fsdp_chunk(p.spec.numel, world, rank);
                let shard = p.shard.detach().narrow(0, 0, held.end - held.start);
                (p.spec.name.clone(), shard)
            })
            .collect()
    }

    /// Every parameter's full shape by name (what a re-shard needs besides the shards).
    pub fn shapes(&self) -> BTreeMap<String, Vec<i64>> {
        self.params
            .iter()
            .map(|p| (p.spec.name.clone(), p.spec.shape.clone()))
            .collect()
    }

    /// This rank's memory since construction or the last [`Fsdp::reset_peak`].
    pub fn memory(&self) -> MemoryReport {
        let shards = bytes_of(self.params.iter().map(|p| &p.shard));
        let (peak_unsharded, peak_activations, peak_transient) = self.ledger.peaks();
        let report = MemoryReport {
            parameter_shards: shards,
            gradient_shards: shards,
            // AdamW keeps two moments shaped like each shard.
            optimizer_state: 2 * shards,
            peak_unsharded,
            peak_activations,
            peak: 0,
        };
        MemoryReport {
            peak: report.state() + peak_transient,
            ..report
        }
    }

    /// Starts measuring peaks again (e.g. after evaluation, before training).
    pub fn reset_peak(&self) {
        self.ledger.reset_peaks();
    }

    /// Bytes of the largest unit's full parameters, padding included, in the kind they are
    /// gathered in: one all-gather's worth.
    pub fn largest_unit_bytes(&self) -> u64 {
        let world = self.shards.world_size() as u64;
        let gathered = self.compute.elt_size_in_bytes() as u64;
        self.units
            .iter()
            .map(|u| {
                let elements: i64 = u.params.iter().map(|&p| self.params[p].spec.shard).sum();
                world * elements as u64 * gathered
            })
            .max()
            .unwrap_or(0)
    }

    fn check_idle(&self) -> Result<(), FsdpError> {
        if self.in_flight.get() {
            return Err(FsdpError::PassInFlight);
        }
        Ok(())
    }

    fn layers(&self) -> usize {
        self.config.layers as usize
    }

    fn head_unit(&self) -> usize {
        self.units.len() - 1
    }

    fn specs(&self, unit: usize) -> Vec<&ParamSpec> {
        self.units[unit]
            .params
            .iter()
            .map(|&p| &self.params[p].spec)
            .collect()
    }

    /// All-gathers `unit`'s parameters into the skeleton until the result is dropped.
    fn gather(&self, unit: usize) -> Result<Gathered, CollectiveError> {
        let params = &self.units[unit].params;
        let local: Vec<Tensor> = params
            .iter()
            .map(|&p| self.params[p].shard.detach())
            .collect();
        let parts = self
            .shards
            .all_gather(&Tensor::cat(&local, 0).to_kind(self.compute))?;
        let received = self.ledger.hold(Account::Unsharded, bytes_of(&parts));
        let fulls = flat::unflatten(&parts, &self.specs(unit));
        let held = self.ledger.hold(Account::Unsharded, bytes_of(&fulls));
        drop((parts, received));
        let vars = params
            .iter()
            .zip(&fulls)
            .map(|(&p, full)| {
                let mut var = self.params[p].var.shallow_clone();
                var.set_data(full);
                var
            })
            .collect();
        Ok(Gathered { vars, _held: held })
    }

    /// Sums a unit's full gradients over the data ranks into this rank's gradient shards.
    fn scatter_gradients(&self, unit: usize, grads: Vec<Tensor>) -> Result<(), FsdpError> {
        let specs = self.specs(unit);
        let params = &self.units[unit].params;
        let grads: Vec<Tensor> = grads
            .into_iter()
            .zip(params)
            .map(|(g, &p)| {
                let param = &self.params[p];
                if g.defined() {
                    // Summed in the shards' float32, whatever the layers computed in.
                    g.to_kind(param.shard.kind())
                } else {
                    // A parameter the loss does not reach.
                    let like = &param.shard;
                    Tensor::zeros(param.spec.shape.as_slice(), (like.kind(), like.device()))
                }
            })
            .collect();
        let full = self.ledger.hold(Account::Unsharded, bytes_of(&grads));
        let buffer = flat::interleave(&grads, &specs, self.shards.world_size());
        let buffered = self.ledger.hold(Account::Unsharded, bytes_of([&buffer]));
        drop((grads, full));
        let mine = self.shards.reduce_scatter(&buffer, ReduceOp::Sum)?;
        drop((buffer, buffered));
        let mine = if self.replicas.world_size() > 1 {
            self.replicas.all_reduce(&mine, ReduceOp::Sum)?
        } else {
            mine
        };
        tch::no_grad(|| {
            for (&p, piece) in self.units[unit]
                .params
                .iter()
                .zip(flat::split(&mine, &specs))
            {
                let mut grad = self.params[p].shard.grad();
                let _ = grad.f_add_(&piece)?;
            }
            Ok(())
        })
    }

    fn context(&self, mask: &Tensor, past: i64, steps: i64) -> Context {
        let mask = mask.ne(0);
        let positions = token_positions(&mask, past, steps);
        Context {
            angles: self.skeleton.rope().angles(&positions),
            bias: attention_bias(&mask, past, steps, self.compute),
            positions,
        }
    }

    /// Token embeddings of `ids`, plus learned positions when the model has them (no autograd).
    fn embed(&self, ids: &Tensor, context: &Context) -> Result<Tensor, FsdpError> {
        let _table = self.gather(0)?;
        Ok(add_positions(
            Tensor::embedding(self.skeleton.embedding(), ids, -1, false, false),
            self.skeleton.position_table(),
            &context.positions,
        ))
    }

    fn run_layer(
        &self,
        layer: usize,
        x: &Tensor,
        context: &Context,
        cache: Option<&mut crate::model::LayerCache>,
    ) -> Result<Tensor, FsdpError> {
        let _weights = self.gather(1 + layer)?;
        Ok(self.skeleton.decoder_layers()[layer].forward(
            x,
            &context.angles,
            &context.bias,
            cache,
            None,
        ))
    }
}

/// The units of a policy model: embedding (with the learned position table, if any), each layer, then the final norm with the LM head (the
/// embedding again when tied).
fn units(params: &[Param], config: &ModelConfig) -> Vec<Unit> {
    let index = |name: &str| params.iter().position(|p| p.spec.name == name);
    let with_prefix = |prefix: &str| -> Vec<usize> {
        (0..params.len())
            .filter(|&i| params[i].spec.name.starts_with(prefix))
            .collect()
    };
    let embedding = index("model.embed_tokens.weight").expect("the skeleton has an embedding");
    let mut units = vec![Unit {
        params: std::iter::once(embedding)
            .chain(index("model.embed_positions.weight"))
            .collect(),
    }];
    units.extend((0..config.layers).map(|layer| Unit {
        params: with_prefix(&format!("model.layers.{layer}.")),
    }));
    let head = index("lm_head.weight").unwrap_or(embedding);
    units.push(Unit {
        params: vec![
            index("model.norm.weight").expect("the skeleton has a final norm"),
            head,
        ],
    });
    units
}

/// `ids` and `mask` are `[B, T]` with at least `min_steps` positions.
fn check_batch(ids: &Tensor, mask: &Tensor, min_steps: i64) -> Result<(), FsdpError> {
    if ids.dim() != 2 || ids.size() != mask.size() || ids.size()[1] < min_steps {
        return Err(FsdpError::BatchShape {
            ids: ids.size(),
            mask: mask.size(),
        });
    }
    Ok(())
}

/// FSDP here shards over its own axis alone: refuses a layout with tp or pp.
fn fsdp_alone(groups: &RankGroups) -> Result<(), FsdpError> {
    let layout = groups.layout;
    if layout.tp != 1 || layout.pp != 1 {
        return Err(FsdpError::Layout {
            tp: layout.tp,
            pp: layout.pp,
        });
    }
    Ok(())
}
