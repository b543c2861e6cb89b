//! The runtime's reading of a plan's settings, in one place: each role's model configuration,
//! precision, optimizer, learning-rate schedule and clipping, and each `generate` op's
//! sampling. The role states and the generate op are built from these, and
//! `tests/settings.rs` checks that every parameter a program can state arrives here with the
//! value the program gave it.

use rlc_plan::Plan;
use rlc_plan::model::{Arch, Init, OpKind, OptimizerName, Precision, Role};
use tch::Kind;

use super::error::{Result, RunError};
use crate::generate::SamplingConfig;
use crate::model::{ModelConfig, Positions};
use crate::optim::{AdamWConfig, Schedule};

/// What a role is built with.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleSettings {
    /// The architecture of seeded random weights (a Hugging Face folder's comes from its
    /// `config.json` when it is loaded).
    pub model: Option<ModelConfig>,
    /// How the role trains; `None` when it is frozen or has no optimizer.
    pub training: Option<TrainingSettings>,
    /// The kind its weights are held in when lower than float32 (`precision`; a trained role
    /// keeps float32 master weights in its optimizer); `None`: float32.
    pub weights: Option<Kind>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrainingSettings {
    pub adamw: AdamWConfig,
    pub schedule: Schedule,
    /// The gradients' global norm is clipped to this.
    pub clip: f64,
}

/// What a `generate` op samples.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateSettings {
    /// Responses per prompt.
    pub n: i64,
    /// New tokens at most per response.
    pub max_new: i64,
    pub sampling: SamplingConfig,
    /// How many updates old the rollout's weights may be (the generator runs that far ahead).
    pub staleness: u64,
    /// A partial rollout: the position where each response pauses to take the next weights.
    pub pause_at: Option<i64>,
}

/// Role `name`'s settings, its schedule spanning `optimizer_steps` optimizer steps.
pub fn role(plan: &Plan, name: &str, optimizer_steps: u64) -> Result<RoleSettings> {
    let role = plan
        .role(name)
        .ok_or_else(|| RunError::Plan(format!("no role `{name}`")))?;
    let training = match (&role.optimizer, role.frozen) {
        (Some(opt), false) => {
            // `OptimizerName` has one algorithm: a new one fails to compile here.
            let OptimizerName::Adamw = opt.name;
            Some(TrainingSettings {
                adamw: AdamWConfig::of(opt),
                schedule: Schedule::of(opt, optimizer_steps),
                clip: opt.clip,
            })
        }
        _ => None,
    };
    Ok(RoleSettings {
        model: random_init_config(plan, role, 0)?,
        training,
        weights: match role.precision {
            Precision::F32 => None,
            Precision::Bf16 => Some(Kind::BFloat16),
            Precision::F16 => Some(Kind::Half),
        },
    })
}

/// The architecture of `role`'s seeded random weights, following `frozen(…)` copies.
fn random_init_config(plan: &Plan, role: &Role, depth: usize) -> Result<Option<ModelConfig>> {
    match &role.init {
        Init::Random { .. } => {
            let arch = role
                .arch
                .as_ref()
                .ok_or_else(|| RunError::Plan(format!("`{}` has no architecture", role.name)))?;
            Ok(Some(model_config(arch)))
        }
        Init::CopyOf { role: source } if depth < 8 => {
            let source = plan
                .role(source)
                .ok_or_else(|| RunError::Plan(format!("no role `{source}`")))?;
            random_init_config(plan, source, depth + 1)
        }
        _ => Ok(None),
    }
}

/// The model an `arch(…)` describes. The plan loader has bounded every size (P0007, P0010), so
/// the conversions below cannot wrap.
pub fn model_config(arch: &Arch) -> ModelConfig {
    ModelConfig {
        layers: arch.layers as i64,
        hidden: arch.hidden as i64,
        heads: arch.heads as i64,
        kv_heads: arch.kv_heads as i64,
        ffn: arch.ffn as i64,
        vocab: arch.vocab as i64,
        max_len: arch.max_len as i64,
        rope_theta: arch.rope_theta,
        norm_eps: arch.norm_eps,
        tie_embeddings: arch.tie_embeddings,
        qkv_bias: false,
        positions: match arch.positions {
            rlc_plan::model::Positions::Rope => Positions::Rope,
            rlc_plan::model::Positions::Learned => Positions::Learned,
        },
    }
}

/// Refuses weights whose position encoding is not the one the program's `arch` states (a
/// Llama or Qwen2 folder is rotary; an rlc checkpoint of a learned-position model says so).
pub fn same_positions(arch: &Arch, loaded: &ModelConfig) -> std::result::Result<(), String> {
    let written = model_config(arch).positions;
    if written == loaded.positions {
        return Ok(());
    }
    let name = |p: Positions| match p {
        Positions::Rope => "rope",
        Positions::Learned => "learned",
    };
    Err(format!(
        "the program's arch has positions = \"{}\", the weights' config.json gives \"{}\"",
        name(written),
        name(loaded.positions)
    ))
}

/// The sampling of a `generate` op (`label` names it in errors).
pub fn generate(kind: &OpKind, label: &str) -> Result<GenerateSettings> {
    let OpKind::Generate {
        n,
        max_new,
        temperature,
        top_p,
        top_k,
        staleness,
        pause_at,
        ..
    } = kind
    else {
        return Err(RunError::Plan(format!("`{label}` is not a generate op")));
    };
    Ok(GenerateSettings {
        n: n.unwrap_or(1) as i64,
        max_new: max_new
            .ok_or_else(|| RunError::Unsupported(format!("`{label}` without `max_new`")))?
            as i64,
        sampling: SamplingConfig {
            temperature: temperature.unwrap_or(1.0),
            top_k: top_k.map(|k| k as i64),
            top_p: top_p.filter(|&p| p < 1.0),
        },
        staleness: *staleness,
        pause_at: pause_at.map(|p| p as i64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(positions: rlc_plan::model::Positions) -> Arch {
        Arch {
            preset: None,
            layers: 1,
            hidden: 8,
            heads: 2,
            kv_heads: 2,
            ffn: 16,
            vocab: 10,
            max_len: 8,
            tie_embeddings: false,
            rope_theta: 10_000.0,
            norm_eps: 1e-5,
            positions,
        }
    }

    #[test]
    fn weights_with_other_positions_than_the_arch_are_refused() {
        use rlc_plan::model::Positions as Planned;
        let rotary = model_config(&arch(Planned::Rope));
        let learned = model_config(&arch(Planned::Learned));
        assert_eq!(learned.positions, Positions::Learned);
        assert_eq!(same_positions(&arch(Planned::Rope), &rotary), Ok(()));
        assert_eq!(same_positions(&arch(Planned::Learned), &learned), Ok(()));
        // A Llama folder (rotary) under an arch that asks for learned positions.
        let err = same_positions(&arch(Planned::Learned), &rotary).unwrap_err();
        assert!(
            err.contains("positions = \"learned\"") && err.ends_with("\"rope\""),
            "{err}"
        );
        assert!(same_positions(&arch(Planned::Rope), &learned).is_err());
    }
}
