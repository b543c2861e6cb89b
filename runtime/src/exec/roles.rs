//! The models a rank holds: one per role and layout it serves (instances of a role with one
//! layout on the same ranks share it, so their weight sync is free), built from the plan's init
//! and trained with the role's optimizer (in the instance that runs the role's updates).
//!
//! Under `dp` a rank holds the whole model ([`Model::Whole`]); under `tp(n)` its tensor-parallel
//! shard ([`Model::Tp`]), under `fsdp(n)` its flat shards ([`Model::Fsdp`]), under `pp(n)` its
//! pipeline stage ([`Model::Pp`]), borrowing the rank's communicators. A sharded rank
//! materialises its shard alone (`parallel::materialise`): seeded weights are drawn and Hugging
//! Face weights read for its elements only, bit for bit the shard the whole model would give;
//! an rlc checkpoint is still read whole and cut. Weights and optimizer moments leave and enter a role as full tensors under
//! Hugging Face names, so a checkpoint is the same folder whatever the layout.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rlc_plan::Plan;
use rlc_plan::model::{Init, Layout, Role, RoleKind};
use tch::{Device, Kind, Tensor, nn};

use super::error::{Result, RunError};
use crate::collectives::Communicator;
use crate::generate::Decode;
use crate::model::init::{Parameter, parameters};
use crate::model::{Heads, ModelConfig, Transformer};
use crate::optim::{AdamW, AdamWConfig, Schedule};
use crate::parallel::RankGroups;
use crate::parallel::fsdp::Fsdp;
use crate::parallel::materialise::{Cut, Seeded, WeightSource, coord_of, rank_shards};
use crate::parallel::pp::PipelineModel;
use crate::parallel::shards::{Coord, stage_holds};
use crate::parallel::tp::{Split, TpTransformer, split_of, tp_norm_of};

/// A role's model on one rank, in the layout of its instance.
pub enum Model<'c> {
    /// The whole model (`dp`).
    Whole(Transformer),
    /// This rank's tensor-parallel shard; every rank of its TP group runs each call together.
    Tp(TpTransformer<'c>),
    /// This rank's flat ZeRO-3 shards (`fsdp`, `dp × fsdp`; LM-head models), with their own
    /// AdamW; every rank of its FSDP group runs each call together. Boxed: it is the largest
    /// by far.
    Fsdp(Box<Fsdp<'c>>),
    /// This rank's pipeline stage (`pp`, `dp × pp`; LM-head models) and the stage group: every
    /// stage runs each call together, the last one holds the outputs.
    Pp(PipelineModel<'c>, &'c Communicator),
}

pub struct RoleState<'c> {
    pub vs: nn::VarStore,
    pub model: Model<'c>,
    pub training: Option<Training>,
    /// The rank's communicators in the role's instance (absent for the whole model).
    groups: Option<&'c RankGroups>,
    /// The optimizer's settings (an FSDP model is rebuilt with them when a run resumes).
    adamw: AdamWConfig,
    /// Every parameter's full shape by name (what a weight sync re-shards).
    shapes: BTreeMap<String, Vec<i64>>,
}

/// A trainable role's optimizer, schedule and clipping.
pub struct Training {
    /// The AdamW over the var store (an FSDP model steps its own: see [`RoleState::adam`]).
    pub optimizer: AdamW,
    pub schedule: Schedule,
    pub clip: f64,
}

impl<'c> RoleState<'c> {
    /// Builds role `name` with its initial weights, in the layout of `groups` (the rank's
    /// communicators in the role's instance). `optimizer_steps`: optimizer steps the whole run
    /// takes (the schedule's length). `trains`: this instance runs the role's updates (another
    /// layout of a trained role only serves, and receives its weights by weight syncs).
    pub fn new(
        plan: &Plan,
        name: &str,
        trains: bool,
        optimizer_steps: u64,
        source_dir: &Path,
        device: Device,
        groups: &'c RankGroups,
    ) -> Result<Self> {
        let role = plan
            .role(name)
            .ok_or_else(|| RunError::Plan(format!("no role `{name}`")))?;
        let heads = heads_of(role);
        let layout = groups.layout;
        let sharded = layout.tp > 1 || layout.fsdp > 1 || layout.pp > 1;
        let initial = initial_weights(plan, role, heads, source_dir, device, sharded, 0)?;
        let shapes = initial.shapes();
        let settings = super::settings::role(plan, name, optimizer_steps)?;
        // A frozen role has no optimizer; its config is never stepped.
        let adamw = settings
            .training
            .as_ref()
            .map_or_else(AdamWConfig::default, |t| t.adamw.clone());
        let weights_refused = |message: String| RunError::Weights {
            role: name.to_string(),
            message,
        };
        let (mut vs, model, groups) = if layout.pp > 1 {
            if heads != Heads::POLICY {
                return Err(RunError::Unsupported(format!(
                    "`{name}` ({}) placed with pp({}): the pipeline layout runs models with an \
                     LM head only (policies and references); place it with `dp` or `tp`",
                    role.kind, layout.pp
                )));
            }
            // A stage holds its parameters whole.
            let stages = Layout::new(1, 1, 1, layout.pp);
            let coord = Coord {
                pp: groups.pp_rank as i64,
                dp: 0,
                fsdp: 0,
                tp: 0,
            };
            let weights = initial
                .shards(&stages, coord, device)
                .map_err(weights_refused)?;
            let mut model = PipelineModel::from_owned(weights, initial.config(), &groups.pp)
                .map_err(|e| RunError::Unsupported(format!("`{name}` under pipelining: {e}")))?;
            if let Some(kind) = settings.weights {
                model.set_kind(kind);
            }
            (
                nn::VarStore::new(device),
                Model::Pp(model, &groups.pp),
                Some(groups),
            )
        } else if layout.fsdp > 1 {
            if heads != Heads::POLICY {
                return Err(RunError::Unsupported(format!(
                    "`{name}` ({}) placed with fsdp({}): the sharded layout runs models with an \
                     LM head only (policies and references); place it with `dp` or `tp`",
                    role.kind, layout.fsdp
                )));
            }
            let local = initial
                .shards(&layout, coord_of(groups), device)
                .map_err(weights_refused)?;
            // The shards stay float32 (they are the optimizer's master weights); the model
            // gathers and computes in the role's precision.
            let model = Fsdp::from_shards(local, initial.config(), groups, adamw.clone())
                .map_err(|e| RunError::Unsupported(format!("`{name}` under FSDP: {e}")))?
                .computing_in(settings.weights.unwrap_or(Kind::Float));
            (
                nn::VarStore::new(device),
                Model::Fsdp(Box::new(model)),
                Some(groups),
            )
        } else if layout.tp > 1 {
            let local = initial
                .shards(&layout, coord_of(groups), device)
                .map_err(weights_refused)?;
            let mut vs = nn::VarStore::new(device);
            let model = TpTransformer::from_owned_shards(
                &vs.root(),
                local,
                initial.config(),
                heads,
                &groups.tp,
            )
            .map_err(|e| {
                RunError::Unsupported(format!("`{name}` under tensor parallelism: {e}"))
            })?;
            // The model's layers hold views of the variables, which `set_kind` converts in
            // place.
            if let Some(kind) = settings.weights {
                vs.set_kind(kind);
            }
            (vs, Model::Tp(model), Some(groups))
        } else {
            let (mut whole_vs, whole) = initial.into_whole(role, heads, device)?;
            // Drawn or read in float32, then held (and run) in the role's precision; a trained
            // role's optimizer keeps float32 master weights of it (`AdamW::for_var_store`).
            if let Some(kind) = settings.weights {
                whole_vs.set_kind(kind);
            }
            (whole_vs, Model::Whole(whole), None)
        };
        let training = match settings.training {
            Some(settings) if trains => {
                let trained = match &model {
                    Model::Pp(m, _) => m.var_store(),
                    _ => &vs,
                };
                Some(Training {
                    optimizer: AdamW::for_var_store(trained, settings.adamw),
                    schedule: settings.schedule,
                    clip: settings.clip,
                })
            }
            _ => {
                vs.freeze();
                None
            }
        };
        Ok(RoleState {
            vs,
            model,
            training,
            groups,
            adamw,
            shapes,
        })
    }

    /// Every parameter's full shape by name.
    pub fn shapes(&self) -> &BTreeMap<String, Vec<i64>> {
        &self.shapes
    }

    /// This rank's part of every parameter, flat, in the order `parallel::shards::holding` gives
    /// for its coordinate (the source of a weight sync): views of the parameters.
    pub fn local_shards(&self) -> BTreeMap<String, Tensor> {
        match &self.model {
            Model::Whole(_) => self
                .vs
                .variables()
                .into_iter()
                .map(|(name, t)| (name, t.detach().reshape([-1])))
                .collect(),
            Model::Tp(m) => m
                .params()
                .iter()
                .map(|p| (p.name.clone(), p.tensor.detach().reshape([-1])))
                .collect(),
            Model::Fsdp(m) => m.local_shards(),
            Model::Pp(m, _) => m
                .var_store()
                .variables()
                .into_iter()
                .map(|(name, t)| (name, t.detach().reshape([-1])))
                .collect(),
        }
    }

    /// Overwrites the parameters in place with this rank's flat parts `shards` (what
    /// [`RoleState::local_shards`] gives under this layout: the destination of a weight sync,
    /// which serves and does not train, so has no master weights to set).
    pub fn set_local_shards(
        &mut self,
        shards: &BTreeMap<String, Tensor>,
        what: &str,
    ) -> Result<()> {
        let targets: Vec<(String, Tensor)> = match &self.model {
            Model::Whole(_) => self.vs.variables().into_iter().collect(),
            Model::Tp(m) => m
                .params()
                .iter()
                .map(|p| (p.name.clone(), p.tensor.shallow_clone()))
                .collect(),
            Model::Fsdp(m) => m.local_shards().into_iter().collect(),
            Model::Pp(m, _) => m.var_store().variables().into_iter().collect(),
        };
        if targets.len() != shards.len() {
            return Err(RunError::Plan(format!(
                "{what}: {} tensors arrived for a model of {}",
                shards.len(),
                targets.len()
            )));
        }
        tch::no_grad(|| {
            for (name, mut target) in targets {
                let Some(value) = shards.get(&name) else {
                    return Err(RunError::Plan(format!(
                        "{what}: nothing arrived for `{name}`"
                    )));
                };
                if value.numel() != target.numel() {
                    return Err(RunError::Plan(format!(
                        "{what}: `{name}` arrived with {} elements, the model holds {}",
                        value.numel(),
                        target.numel()
                    )));
                }
                let value = value.to_device(target.device()).to_kind(target.kind());
                target.copy_(&value.reshape(target.size()));
            }
            Ok(())
        })
    }

    /// The role's optimizer (none when it does not train).
    pub fn adam(&self) -> Option<&AdamW> {
        let training = self.training.as_ref()?;
        Some(match &self.model {
            Model::Fsdp(m) => m.optimizer(),
            _ => &training.optimizer,
        })
    }

    pub fn adam_mut(&mut self) -> Option<&mut AdamW> {
        let training = self.training.as_mut()?;
        Some(match &mut self.model {
            Model::Fsdp(m) => m.optimizer_mut(),
            _ => &mut training.optimizer,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        match &self.model {
            Model::Whole(m) => m.config(),
            Model::Tp(m) => m.config(),
            Model::Fsdp(m) => m.config(),
            Model::Pp(m, _) => m.config(),
        }
    }

    /// The model as generation drives it (every rank of a layout samples the same tokens).
    pub fn decode(&self) -> &dyn Decode {
        match &self.model {
            Model::Whole(m) => m,
            Model::Tp(m) => m,
            Model::Fsdp(m) => m.as_ref(),
            Model::Pp(m, _) => m,
        }
    }

    /// Whether the weights are spread over ranks: gathering them is a collective every rank of
    /// the role's instance takes part in.
    pub fn sharded(&self) -> bool {
        !matches!(self.model, Model::Whole(_))
    }

    /// Clips the gradients to a global norm of `max_norm` (over the whole model, whatever the
    /// layout); returns the norm before clipping.
    pub fn clip_grad_norm(&mut self, params: &[Tensor], max_norm: f64) -> Result<f64> {
        Ok(match &mut self.model {
            Model::Whole(_) => crate::optim::clip_grad_norm(params, max_norm),
            Model::Tp(m) => m.clip_grad_norm(max_norm)?,
            Model::Fsdp(m) => m.clip_grad_norm(max_norm)?,
            Model::Pp(m, _) => m.clip_grad_norm(max_norm)?,
        })
    }

    /// The global norm of `grads`, a flat gradient in the optimizer's layout (what
    /// [`AdamW::flat_grads`] gave, reduced over the data ranks), over the whole model whatever
    /// the layout: a tensor-parallel shard's squared norm summed over the TP group, a pipeline
    /// stage's over the stages. Every rank of the instance must call it.
    pub fn flat_grad_norm(&self, grads: &Tensor) -> Result<f64> {
        let adam = self.adam().ok_or_else(|| {
            RunError::Plan("a gradient norm of a role that does not train".into())
        })?;
        Ok(match &self.model {
            Model::Whole(_) => crate::optim::sum_of_squares([grads.shallow_clone()]).sqrt(),
            // Each span's split by its name: the rule the model's shards were cut by.
            Model::Tp(m) => tp_norm_of(
                adam.flat_views(grads)
                    .into_iter()
                    .map(|(name, grad)| (grad, split_of(name))),
                m.tp(),
            )?,
            Model::Pp(m, _) => m.grad_norm_of(adam.flat_views(grads))?,
            Model::Fsdp(_) => {
                return Err(RunError::Plan(
                    "an FSDP model's gradient is its shards' (`Fsdp::clip_grad_norm`)".into(),
                ));
            }
        })
    }

    /// The full parameters by name, in name order (what a checkpoint stores). Under a sharded
    /// layout every rank of the instance must call it.
    pub fn weights(&self) -> Result<Vec<(String, Tensor)>> {
        // Under mixed precision the optimizer's float32 master weights (this rank's part), from
        // which a resumed run continues exactly; otherwise the variables. An FSDP model's
        // shards are float32 whatever it computes in.
        let masters = self.adam().and_then(AdamW::master_weights);
        let mut weights: Vec<(String, Tensor)> = match (&self.model, masters) {
            (Model::Fsdp(m), _) => m.full_weights()?.into_iter().collect(),
            (Model::Whole(_), Some(masters)) => masters,
            (Model::Whole(_), None) => self.vs.variables().into_iter().collect(),
            (Model::Tp(_), Some(masters)) => self.whole_over_tp(masters)?,
            (Model::Tp(m), None) => m.full_weights()?.into_iter().collect(),
            (Model::Pp(m, _), Some(masters)) => m
                .full_weights_of(&masters.into_iter().collect())?
                .into_iter()
                .collect(),
            (Model::Pp(m, _), None) => m.full_weights()?.into_iter().collect(),
        };
        weights.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(weights)
    }

    /// The optimizer's moments as full tensors (`{param}.exp_avg`, `{param}.exp_avg_sq`) and
    /// its step count. Under a sharded layout every rank of the instance must call it.
    pub fn optimizer_state(&self) -> Result<(Vec<(String, Tensor)>, u64)> {
        let Some(adam) = self.adam() else {
            return Ok((Vec::new(), 0));
        };
        let steps = adam.steps();
        let tensors = adam.state_tensors();
        if self.groups.is_none() {
            return Ok((tensors, steps));
        }
        if let Model::Pp(m, pp) = &self.model {
            // Each moment from the first stage that holds its parameter, in name order.
            let mine: BTreeMap<String, Tensor> = tensors.into_iter().collect();
            let stages = pp.world_size() as i64;
            let mut full = Vec::new();
            for name in self.shapes.keys() {
                let root = (0..stages)
                    .find(|&s| stage_holds(name, m.config(), stages, s))
                    .ok_or_else(|| RunError::Plan(format!("no stage holds `{name}`")))?;
                for moment in ["exp_avg", "exp_avg_sq"] {
                    let key = format!("{name}.{moment}");
                    let t = pp.broadcast(mine.get(&key), root as usize)?;
                    full.push((key, t));
                }
            }
            return Ok((full, steps));
        }
        if let Model::Fsdp(m) = &self.model {
            // Padded flat shards, in rank order: the whole flat tensor and then the padding.
            let shapes = m.shapes();
            let mut full = Vec::with_capacity(tensors.len());
            for (name, t) in tensors {
                let shape = shapes.get(moment_of(&name)).ok_or_else(|| {
                    RunError::Plan(format!("the model has no parameter `{}`", moment_of(&name)))
                })?;
                let flat = Tensor::cat(&m.shard_group().all_gather(&t)?, 0);
                let numel: i64 = shape.iter().product();
                full.push((name, flat.narrow(0, 0, numel).view(shape.as_slice())));
            }
            return Ok((full, steps));
        }
        Ok((self.whole_over_tp(tensors)?, steps))
    }

    /// Full tensors from this rank's parts of parameters or of their moments (named
    /// `{param}[.moment]`), gathered over the TP group where the parameter is split: every
    /// rank of the group must call it.
    fn whole_over_tp(&self, parts: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let mut full = Vec::with_capacity(parts.len());
        for (name, t) in parts {
            let whole = match (self.split(moment_of(&name))?, self.groups) {
                (Split::Along(dim), Some(groups)) => Tensor::cat(&groups.tp.all_gather(&t)?, dim),
                _ => t,
            };
            full.push((name, whole));
        }
        Ok(full)
    }

    /// How the parameter `name` is split over the TP group.
    fn split(&self, name: &str) -> Result<Split> {
        match &self.model {
            Model::Whole(_) | Model::Fsdp(_) | Model::Pp(..) => Ok(Split::Replicated),
            Model::Tp(m) => m
                .params()
                .iter()
                .find(|p| p.name == name)
                .map(|p| p.split)
                .ok_or_else(|| RunError::Plan(format!("the model has no parameter `{name}`"))),
        }
    }

    /// This rank's part of the full tensor `full` of parameter `name`.
    fn local_part(&self, name: &str, full: &Tensor, what: &str) -> Result<Tensor> {
        let (Split::Along(dim), Some(groups)) = (self.split(name)?, self.groups) else {
            return Ok(full.shallow_clone());
        };
        let (rank, size) = (groups.tp.rank() as i64, groups.tp.world_size() as i64);
        let extent = full.size().get(dim as usize).copied().unwrap_or(0);
        if extent % size != 0 {
            return Err(RunError::Plan(format!(
                "{what}: `{name}` is {:?}, which does not split over {size} tensor-parallel ranks",
                full.size()
            )));
        }
        Ok(full.narrow(dim, rank * (extent / size), extent / size))
    }

    /// Overwrites the parameters with the full `weights` (names and shapes must match); a
    /// sharded rank keeps its part of each.
    pub fn load_weights(&mut self, weights: &[(String, Tensor)], what: &str) -> Result<()> {
        if let (Model::Fsdp(m), Some(groups)) = (&self.model, self.groups) {
            // Shard the full weights again (with a fresh optimizer: see `load_optimizer`).
            let full: BTreeMap<String, Tensor> = weights
                .iter()
                .map(|(n, t)| (n.clone(), t.shallow_clone()))
                .collect();
            let model = Fsdp::for_rank(&full, m.config(), groups, self.adamw.clone())
                .map_err(|e| RunError::Plan(format!("{what}: {e}")))?
                .computing_in(m.compute_kind());
            self.model = Model::Fsdp(Box::new(model));
            return Ok(());
        }
        let vars = match &self.model {
            Model::Pp(m, _) => m.var_store().variables(),
            _ => self.vs.variables(),
        };
        // A pipeline stage keeps the weights of its own layers.
        let weights: Vec<&(String, Tensor)> = match &self.model {
            Model::Pp(..) => weights
                .iter()
                .filter(|(n, _)| vars.contains_key(n))
                .collect(),
            _ => weights.iter().collect(),
        };
        if vars.len() != weights.len() {
            return Err(RunError::Plan(format!(
                "{what} has {} tensors but the model {}",
                weights.len(),
                vars.len()
            )));
        }
        let mut parts = Vec::with_capacity(weights.len());
        for (name, value) in &weights {
            parts.push((name, self.local_part(name, value, what)?));
        }
        tch::no_grad(|| {
            for (name, value) in &parts {
                let Some(var) = vars.get(*name) else {
                    return Err(RunError::Plan(format!("{what}: the model has no `{name}`")));
                };
                if var.size() != value.size() {
                    return Err(RunError::Plan(format!(
                        "{what}: `{name}` is {:?}, the model's {:?}",
                        value.size(),
                        var.size()
                    )));
                }
                var.shallow_clone().copy_(value);
            }
            Ok(())
        })?;
        // Under mixed precision the optimizer's float32 master weights too, from the
        // full-precision values the variables alone would have rounded.
        if let Some(adam) = self.adam_mut()
            && adam.master_weights().is_some()
        {
            for (name, value) in &parts {
                adam.overwrite(name, value);
            }
        }
        Ok(())
    }

    /// Restores the optimizer from full moments (what [`RoleState::optimizer_state`] gave).
    pub fn load_optimizer(
        &mut self,
        steps: u64,
        tensors: Vec<(String, Tensor)>,
        what: &str,
    ) -> Result<()> {
        let mut local = HashMap::with_capacity(tensors.len());
        let shards: HashMap<String, Tensor> = self
            .adam()
            .map(|a| a.state_tensors().into_iter().collect())
            .unwrap_or_default();
        for (name, t) in tensors {
            if matches!(self.model, Model::Pp(..)) && !shards.contains_key(&name) {
                // Another stage's moment.
                continue;
            }
            let part = match (&self.model, shards.get(&name)) {
                // This rank's padded flat shard of the moment.
                (Model::Fsdp(m), Some(like)) => {
                    let group = m.shard_group();
                    let len = like.numel() as i64;
                    let (rank, world) = (group.rank() as i64, group.world_size() as i64);
                    let flat = t.flatten(0, -1);
                    if flat.numel() as i64 > len * world {
                        return Err(RunError::Plan(format!(
                            "{what}: `{name}` has {} elements, more than the model's",
                            flat.numel()
                        )));
                    }
                    let padded = flat.constant_pad_nd([0, len * world - flat.numel() as i64]);
                    padded.narrow(0, rank * len, len)
                }
                _ => self.local_part(moment_of(&name), &t, what)?,
            };
            local.insert(name, part);
        }
        if let Some(adam) = self.adam_mut() {
            adam.load_state(steps, &local)
                .map_err(|e| RunError::Plan(format!("{what}: {e}")))?;
        }
        Ok(())
    }
}

/// The parameter an optimizer moment belongs to (`{param}.exp_avg` → `{param}`).
fn moment_of(name: &str) -> &str {
    name.strip_suffix(".exp_avg_sq")
        .or_else(|| name.strip_suffix(".exp_avg"))
        .unwrap_or(name)
}

fn heads_of(role: &Role) -> Heads {
    match role.kind {
        RoleKind::CausalLM => Heads::POLICY,
        RoleKind::ValueModel => Heads::CRITIC,
        RoleKind::RewardModel => Heads::REWARD,
    }
}

/// A role's weights before training: a whole model, or (for a sharded layout, when the init
/// can be read a piece at a time) a source each rank reads its own shard from.
enum Initial {
    Whole(nn::VarStore, Transformer),
    Sliced {
        config: ModelConfig,
        params: Vec<Parameter>,
        source: Box<dyn WeightSource>,
    },
}

impl Initial {
    fn config(&self) -> &ModelConfig {
        match self {
            Initial::Whole(_, model) => model.config(),
            Initial::Sliced { config, .. } => config,
        }
    }

    /// Every parameter's full shape by name.
    fn shapes(&self) -> BTreeMap<String, Vec<i64>> {
        match self {
            Initial::Whole(vs, _) => vs
                .variables()
                .into_iter()
                .map(|(name, t)| (name, t.size()))
                .collect(),
            Initial::Sliced { params, .. } => params
                .iter()
                .map(|p| (p.name.clone(), p.shape.clone()))
                .collect(),
        }
    }

    /// The rank at `coord` of `layout`'s shards, flat (`parallel::materialise::rank_shards`);
    /// from a whole model, cut from it.
    fn shards(
        &self,
        layout: &Layout,
        coord: Coord,
        device: Device,
    ) -> std::result::Result<BTreeMap<String, Tensor>, String> {
        let config = self.config();
        let cut;
        let (source, params): (&dyn WeightSource, Vec<Parameter>) = match self {
            Initial::Whole(vs, model) => {
                cut = vs.variables().into_iter().collect::<BTreeMap<_, _>>();
                (&Cut(&cut), parameters(config, model.heads()))
            }
            Initial::Sliced { params, source, .. } => (source.as_ref(), params.clone()),
        };
        rank_shards(source, &params, config, layout, coord, device).map_err(|e| e.to_string())
    }

    /// The whole model (a sliced source is read whole).
    fn into_whole(
        self,
        role: &Role,
        heads: Heads,
        device: Device,
    ) -> Result<(nn::VarStore, Transformer)> {
        match self {
            Initial::Whole(vs, model) => Ok((vs, model)),
            Initial::Sliced { config, .. } => Err(RunError::Plan(format!(
                "`{}`: a {heads:?} model of {config:?} was opened for shards on {device:?}, \
                 then asked for whole",
                role.name
            ))),
        }
    }
}

/// The role's weights before training: seeded random, a copy of another role's initial
/// weights (`frozen(policy)`), a Hugging Face folder, or an rlc checkpoint. Under a `sharded`
/// layout seeded and Hugging Face weights are opened as sources of shards, so that no rank
/// builds the whole model; a checkpoint is read whole, then cut.
fn initial_weights(
    plan: &Plan,
    role: &Role,
    heads: Heads,
    source_dir: &Path,
    device: Device,
    sharded: bool,
    depth: usize,
) -> Result<Initial> {
    match &role.init {
        Init::Random { seed } => {
            let arch = role
                .arch
                .as_ref()
                .ok_or_else(|| RunError::Plan(format!("`{}` has no architecture", role.name)))?;
            let config = super::settings::model_config(arch);
            if sharded {
                config
                    .validate()
                    .map_err(|e| RunError::Plan(format!("`{}`: {e}", role.name)))?;
                return Ok(Initial::Sliced {
                    params: parameters(&config, heads),
                    config,
                    source: Box::new(Seeded { seed: *seed }),
                });
            }
            let vs = nn::VarStore::new(device);
            let model = Transformer::new(&vs.root(), &config, heads, *seed)
                .map_err(|e| RunError::Plan(format!("`{}`: {e}", role.name)))?;
            Ok(Initial::Whole(vs, model))
        }
        Init::CopyOf { role: source } if depth < 8 => {
            let source = plan
                .role(source)
                .ok_or_else(|| RunError::Plan(format!("no role `{source}`")))?;
            initial_weights(plan, source, heads, source_dir, device, sharded, depth + 1)
        }
        Init::HuggingFace { path } => {
            let refused = |message: String| RunError::Weights {
                role: role.name.clone(),
                message,
            };
            let dir = source_dir.join(path);
            let initial = if sharded {
                let (config, params, slices) =
                    crate::hf::open_slices(&dir, heads).map_err(|e| refused(e.to_string()))?;
                Initial::Sliced {
                    config,
                    params,
                    source: Box::new(slices),
                }
            } else {
                let (vs, model) = crate::hf::load_model(&dir, heads, device)
                    .map_err(|e| refused(e.to_string()))?;
                Initial::Whole(vs, model)
            };
            // The model is built from config.json; an `arch` that asks for other positions
            // would be silently ignored.
            if let Some(arch) = &role.arch {
                super::settings::same_positions(arch, initial.config()).map_err(refused)?;
            }
            Ok(initial)
        }
        Init::Checkpoint { path } => {
            let (vs, model) =
                super::ckpt::initial_from_checkpoint(&source_dir.join(path), role, heads, device)?;
            Ok(Initial::Whole(vs, model))
        }
        other => Err(RunError::Unsupported(format!(
            "initialising `{}` from {other:?}",
            role.name
        ))),
    }
}
