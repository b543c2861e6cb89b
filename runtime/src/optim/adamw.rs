//! AdamW with decoupled weight decay, following `torch.optim.AdamW` step for step.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tch::{Tensor, nn};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Applied to matrices (≥ 2 dimensions) only; norm weights and biases are not decayed.
    pub weight_decay: f64,
}

impl AdamWConfig {
    /// The settings of a plan's optimizer.
    pub fn of(optimizer: &rlc_plan::model::Optimizer) -> Self {
        Self {
            beta1: optimizer.beta1,
            beta2: optimizer.beta2,
            eps: optimizer.eps,
            weight_decay: optimizer.weight_decay,
        }
    }
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptimError {
    #[error("optimiser state has no tensor `{0}`")]
    MissingState(String),
    #[error("optimiser state tensor `{name}` has shape {found:?}, the parameter has {expected:?}")]
    StateShape {
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
}

#[derive(Debug)]
struct ParamState {
    name: String,
    param: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    decay: bool,
}

#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    params: Vec<ParamState>,
    steps: u64,
}

impl AdamW {
    /// Optimises `params` (tensors sharing storage with the model's variables), each with a
    /// stable name used in checkpoints.
    pub fn new(params: Vec<(String, Tensor)>, config: AdamWConfig) -> Self {
        let params = params
            .into_iter()
            .map(|(name, param)| {
                let decay = param.dim() >= 2;
                (name, param, decay)
            })
            .collect();
        Self::with_decay(params, config)
    }

    /// Like [`AdamW::new`], with whether each parameter is decayed given explicitly: a flat shard
    /// of a matrix (FSDP) is one-dimensional but must be decayed as the matrix is.
    pub fn with_decay(params: Vec<(String, Tensor, bool)>, config: AdamWConfig) -> Self {
        let params = params
            .into_iter()
            .map(|(name, param, decay)| ParamState {
                exp_avg: param.zeros_like().detach(),
                exp_avg_sq: param.zeros_like().detach(),
                decay,
                name,
                param,
            })
            .collect();
        Self {
            config,
            params,
            steps: 0,
        }
    }

    /// All trainable variables of `vs`, in name order so the state layout is deterministic.
    pub fn for_var_store(vs: &nn::VarStore, config: AdamWConfig) -> Self {
        let mut params: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        Self::new(params, config)
    }

    pub fn params(&self) -> Vec<Tensor> {
        self.params
            .iter()
            .map(|p| p.param.shallow_clone())
            .collect()
    }

    /// Optimiser steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn zero_grad(&mut self) {
        for state in &mut self.params {
            state.param.zero_grad();
        }
    }

    /// One update with learning rate `lr`; parameters without a gradient are skipped.
    pub fn step(&mut self, lr: f64) {
        self.steps += 1;
        let AdamWConfig {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.config;
        let bias_correction1 = 1.0 - beta1.powf(self.steps as f64);
        let bias_correction2_sqrt = (1.0 - beta2.powf(self.steps as f64)).sqrt();
        tch::no_grad(|| {
            for state in &mut self.params {
                let grad = state.param.grad();
                if !grad.defined() {
                    continue;
                }
                if state.decay && weight_decay != 0.0 {
                    let _ = state
                        .param
                        .f_mul_scalar_(1.0 - lr * weight_decay)
                        .expect("weight decay");
                }
                let _ = state
                    .exp_avg
                    .f_lerp_(&grad, 1.0 - beta1)
                    .expect("first moment");
                let _ = state
                    .exp_avg_sq
                    .f_mul_scalar_(beta2)
                    .expect("second moment");
                let _ = state
                    .exp_avg_sq
                    .f_add_(&(&grad * &grad * (1.0 - beta2)))
                    .expect("second moment");
                let denom = state.exp_avg_sq.sqrt() / bias_correction2_sqrt + eps;
                let update = &state.exp_avg / denom * (lr / bias_correction1);
                let _ = state.param.f_sub_(&update).expect("parameter update");
            }
        });
    }

    /// Moments named `{param}.exp_avg` / `{param}.exp_avg_sq`, for checkpoints; the step count
    /// comes from [`AdamW::steps`].
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        self.params
            .iter()
            .flat_map(|s| {
                [
                    (format!("{}.exp_avg", s.name), s.exp_avg.copy()),
                    (format!("{}.exp_avg_sq", s.name), s.exp_avg_sq.copy()),
                ]
            })
            .collect()
    }

    /// Restores what [`AdamW::state_tensors`] and [`AdamW::steps`] returned.
    pub fn load_state(
        &mut self,
        steps: u64,
        tensors: &HashMap<String, Tensor>,
    ) -> Result<(), OptimError> {
        let find = |name: String, like: &Tensor| -> Result<Tensor, OptimError> {
            let found = tensors
                .get(&name)
                .ok_or_else(|| OptimError::MissingState(name.clone()))?;
            if found.size() != like.size() {
                return Err(OptimError::StateShape {
                    name,
                    expected: like.size(),
                    found: found.size(),
                });
            }
            Ok(found
                .to_kind(like.kind())
                .to_device(like.device())
                .detach()
                .copy())
        };
        // Check everything before changing anything.
        let restored = self
            .params
            .iter()
            .map(|s| {
                Ok((
                    find(format!("{}.exp_avg", s.name), &s.param)?,
                    find(format!("{}.exp_avg_sq", s.name), &s.param)?,
                ))
            })
            .collect::<Result<Vec<_>, OptimError>>()?;
        for (state, (exp_avg, exp_avg_sq)) in self.params.iter_mut().zip(restored) {
            state.exp_avg = exp_avg;
            state.exp_avg_sq = exp_avg_sq;
        }
        self.steps = steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn quadratic_loss(p: &Tensor, target: &Tensor) -> Tensor {
        (p - target).pow_tensor_scalar(2).sum(Kind::Float)
    }

    fn matrix(values: &[f32]) -> Tensor {
        Tensor::from_slice(values)
            .view([2, 2])
            .set_requires_grad(true)
    }

    #[test]
    fn first_step_moves_each_weight_by_lr_against_its_gradient_sign() {
        let p = matrix(&[1.0, -2.0, 0.5, 3.0]);
        let target = Tensor::from_slice(&[0.0f32, 0.0, 1.0, 0.0]).view([2, 2]);
        let config = AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        };
        let mut adam = AdamW::new(vec![("w".into(), p.shallow_clone())], config);
        quadratic_loss(&p, &target).backward();
        adam.step(0.01);
        // m̂ = g and v̂ = g² after one step, so the update is lr · g / (|g| + eps) after decay.
        let expected = [
            1.0 * 0.999 - 0.01,
            -2.0 * 0.999 + 0.01,
            0.5 * 0.999 + 0.01,
            3.0 * 0.999 - 0.01,
        ];
        let got = Vec::<f32>::try_from(p.detach().view([-1])).unwrap();
        for (g, e) in got.iter().zip(expected) {
            assert!((f64::from(*g) - e).abs() < 1e-6, "{got:?} vs {expected:?}");
        }
        assert_eq!(adam.state_tensors()[0].1.size(), [2, 2]);
    }

    #[test]
    fn a_few_steps_reduce_a_quadratic_loss() {
        let p = matrix(&[1.0, -2.0, 0.5, 3.0]);
        let target = Tensor::from_slice(&[0.3f32, 0.1, -0.4, 0.2]).view([2, 2]);
        let mut adam = AdamW::new(
            vec![("w".into(), p.shallow_clone())],
            AdamWConfig::default(),
        );
        let initial = quadratic_loss(&p, &target).double_value(&[]);
        let mut losses = Vec::new();
        for _ in 0..30 {
            adam.zero_grad();
            let loss = quadratic_loss(&p, &target);
            loss.backward();
            losses.push(loss.double_value(&[]));
            adam.step(0.1);
        }
        let last = quadratic_loss(&p, &target).double_value(&[]);
        assert!(
            last < 0.05 * initial,
            "loss went from {initial} to {last}: {losses:?}"
        );
        assert_eq!(adam.steps(), 30);
    }

    #[test]
    fn restored_state_continues_identically() {
        let target = Tensor::from_slice(&[0.3f32, 0.1, -0.4, 0.2]).view([2, 2]);
        let run = |adam: &mut AdamW, p: &Tensor, steps: usize| {
            for _ in 0..steps {
                adam.zero_grad();
                quadratic_loss(p, &target).backward();
                adam.step(0.05);
            }
        };
        let p = matrix(&[1.0, -2.0, 0.5, 3.0]);
        let mut adam = AdamW::new(
            vec![("w".into(), p.shallow_clone())],
            AdamWConfig::default(),
        );
        run(&mut adam, &p, 3);
        let saved_params = p.detach().copy();
        let saved_state: HashMap<String, Tensor> = adam.state_tensors().into_iter().collect();
        run(&mut adam, &p, 4);

        let q = saved_params.set_requires_grad(true);
        let mut resumed = AdamW::new(
            vec![("w".into(), q.shallow_clone())],
            AdamWConfig::default(),
        );
        resumed.load_state(3, &saved_state).unwrap();
        run(&mut resumed, &q, 4);
        assert!(p.equal(&q), "resumed run diverged");

        let mut fresh = AdamW::new(
            vec![("v".into(), q.shallow_clone())],
            AdamWConfig::default(),
        );
        assert_eq!(
            fresh.load_state(3, &saved_state),
            Err(OptimError::MissingState("v.exp_avg".into()))
        );
    }

    #[test]
    fn explicit_decay_flags_override_the_dimension_rule() {
        // A flat shard of a matrix is decayed, a matrix marked as not decayed is not.
        let shard = Tensor::from_slice(&[1.0f32, 1.0]).set_requires_grad(true);
        let matrix = Tensor::from_slice(&[1.0f32, 1.0])
            .view([1, 2])
            .set_requires_grad(true);
        let config = AdamWConfig {
            weight_decay: 0.5,
            ..AdamWConfig::default()
        };
        let mut adam = AdamW::with_decay(
            vec![
                ("shard".into(), shard.shallow_clone(), true),
                ("matrix".into(), matrix.shallow_clone(), false),
            ],
            config,
        );
        let signs = Tensor::from_slice(&[1.0f32, -1.0]);
        ((&shard * &signs).sum(Kind::Float) + (&matrix.view([-1]) * &signs).sum(Kind::Float))
            .backward();
        adam.step(0.1);
        let decayed = Vec::<f32>::try_from(shard.detach()).unwrap();
        let plain = Vec::<f32>::try_from(matrix.detach().view([-1])).unwrap();
        // Decay multiplies by 1 - 0.1·0.5 = 0.95 before the ±0.1 step.
        assert!(
            (decayed[0] - 0.85).abs() < 1e-6 && (decayed[1] - 1.05).abs() < 1e-6,
            "{decayed:?}"
        );
        assert!(
            (plain[0] - 0.9).abs() < 1e-6 && (plain[1] - 1.1).abs() < 1e-6,
            "{plain:?}"
        );
    }

    #[test]
    fn vectors_are_not_decayed() {
        let bias = Tensor::from_slice(&[1.0f32, 1.0]).set_requires_grad(true);
        let config = AdamWConfig {
            weight_decay: 0.5,
            ..AdamWConfig::default()
        };
        let mut adam = AdamW::new(vec![("b".into(), bias.shallow_clone())], config);
        (&bias * Tensor::from_slice(&[1.0f32, -1.0]))
            .sum(Kind::Float)
            .backward();
        adam.step(0.1);
        let got = Vec::<f32>::try_from(bias.detach()).unwrap();
        assert!(
            (got[0] - 0.9).abs() < 1e-6 && (got[1] - 1.1).abs() < 1e-6,
            "{got:?}"
        );
    }
}
