//! The models a rank holds: one per role it serves (every instance of a role on this rank
//! shares it, so a colocated weight sync is free), built from the plan's init and trained
//! with the role's optimizer.

use std::path::Path;

use rlc_plan::Plan;
use rlc_plan::model::{Init, Role};
use tch::{Device, Tensor, nn};

use super::error::{Result, RunError};
use crate::model::{Heads, ModelConfig, Transformer};
use crate::optim::{AdamW, AdamWConfig, CosineSchedule};

pub struct RoleState {
    pub vs: nn::VarStore,
    pub model: Transformer,
    pub training: Option<Training>,
}

/// A trainable role's optimizer, schedule and clipping.
pub struct Training {
    pub optimizer: AdamW,
    pub schedule: CosineSchedule,
    pub clip: f64,
}

impl RoleState {
    /// Builds role `name` with its initial weights. `optimizer_steps`: optimizer steps the whole
    /// run takes (the schedule's length).
    pub fn new(
        plan: &Plan,
        name: &str,
        optimizer_steps: u64,
        source_dir: &Path,
        device: Device,
    ) -> Result<Self> {
        let role = plan
            .role(name)
            .ok_or_else(|| RunError::Plan(format!("no role `{name}`")))?;
        let heads = heads_of(role)?;
        let (mut vs, model) = initial_weights(plan, role, heads, source_dir, device, 0)?;
        let training = match (&role.optimizer, role.frozen) {
            (Some(opt), false) => {
                if opt.name != "adamw" {
                    return Err(RunError::Unsupported(format!(
                        "optimizer `{}` of `{name}`",
                        opt.name
                    )));
                }
                let config = AdamWConfig {
                    weight_decay: opt.weight_decay,
                    ..AdamWConfig::default()
                };
                Some(Training {
                    optimizer: AdamW::for_var_store(&vs, config),
                    schedule: CosineSchedule {
                        peak_lr: opt.lr,
                        min_lr: opt.lr * 0.1,
                        warmup_steps: opt.warmup,
                        total_steps: optimizer_steps,
                    },
                    clip: opt.clip,
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
        })
    }

    /// The parameters by name, in name order (what a checkpoint stores).
    pub fn weights(&self) -> Vec<(String, Tensor)> {
        let mut vars: Vec<(String, Tensor)> = self.vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        vars
    }

    /// Overwrites the parameters with `weights` (names and shapes must match).
    pub fn load_weights(&mut self, weights: &[(String, Tensor)], what: &str) -> Result<()> {
        let vars = self.vs.variables();
        if vars.len() != weights.len() {
            return Err(RunError::Plan(format!(
                "{what} has {} tensors but the model {}",
                weights.len(),
                vars.len()
            )));
        }
        tch::no_grad(|| {
            for (name, value) in weights {
                let Some(var) = vars.get(name) else {
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
        })
    }
}

fn heads_of(role: &Role) -> Result<Heads> {
    Ok(match role.kind.as_str() {
        "CausalLM" => Heads::POLICY,
        "ValueModel" => Heads::CRITIC,
        "RewardModel" => Heads::REWARD,
        other => return Err(RunError::Unsupported(format!("model kind `{other}`"))),
    })
}

/// The role's weights before training: seeded random, a copy of another role's initial
/// weights (`frozen(policy)`), or a Hugging Face folder.
fn initial_weights(
    plan: &Plan,
    role: &Role,
    heads: Heads,
    source_dir: &Path,
    device: Device,
    depth: usize,
) -> Result<(nn::VarStore, Transformer)> {
    match &role.init {
        Init::Random { seed } => {
            let arch = role
                .arch
                .as_ref()
                .ok_or_else(|| RunError::Plan(format!("`{}` has no architecture", role.name)))?;
            let config = ModelConfig {
                layers: arch.layers as i64,
                hidden: arch.hidden as i64,
                heads: arch.heads as i64,
                kv_heads: arch.kv_heads as i64,
                ffn: arch.ffn as i64,
                vocab: arch.vocab as i64,
                max_len: arch.max_len as i64,
                rope_theta: 10_000.0,
                norm_eps: 1e-5,
                tie_embeddings: arch.tie_embeddings,
                qkv_bias: false,
            };
            let vs = nn::VarStore::new(device);
            let model = Transformer::new(&vs.root(), &config, heads, *seed)
                .map_err(|e| RunError::Plan(format!("`{}`: {e}", role.name)))?;
            Ok((vs, model))
        }
        Init::CopyOf { role: source } if depth < 8 => {
            let source = plan
                .role(source)
                .ok_or_else(|| RunError::Plan(format!("no role `{source}`")))?;
            initial_weights(plan, source, heads, source_dir, device, depth + 1)
        }
        Init::HuggingFace { path } => crate::hf::load_model(&source_dir.join(path), heads, device)
            .map_err(|e| RunError::Weights {
                role: role.name.clone(),
                message: e.to_string(),
            }),
        other => Err(RunError::Unsupported(format!(
            "initialising `{}` from {other:?}",
            role.name
        ))),
    }
}
