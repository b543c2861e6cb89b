//! AdamW with decoupled weight decay, following `torch.optim.AdamW` step for step.
//!
//! The optimiser steps float32 whatever the model's precision: the variables of a model held in
//! bfloat16 or float16 get float32 master copies ([`AdamW::for_var_store`]), which the steps
//! update and which are then written back into the variables, rounded — mixed precision as
//! Megatron-LM and FSDP's `MixedPrecision` keep it (an update smaller than half a bfloat16 ulp
//! of its weight would otherwise be lost every step).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor, nn};

use super::flat::{FlatLayout, into_one_buffer};

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
    /// The weights stepped: the model's variable, or its float32 master copy (`compute`).
    param: Tensor,
    /// Under mixed precision, the model's variable in its lower precision: the gradients come
    /// from it, and it receives `param`, rounded, after each step.
    compute: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    decay: bool,
}

#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    params: Vec<ParamState>,
    steps: u64,
    /// Set by [`AdamW::flattened`]: the parameters and both moments live in flat buffers (each
    /// `ParamState` tensor is a view of its span).
    flat: Option<Flat>,
}

#[derive(Debug)]
struct Flat {
    layout: FlatLayout,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// Under mixed precision, the buffer the model's lower-precision variables are views of
    /// (the master weights rounded, written by one copy a step).
    compute: Option<Tensor>,
}

/// Elements a flat step on the CPU updates at a time. The step is ten element-wise operations;
/// over the whole model each would stream every buffer through memory, and its two temporaries
/// would be the model's size (fresh pages every step). A chunk's buffers (parameters, gradient,
/// moments, temporaries: 1.5 MiB at 2¹⁶ float32 elements) stay in the core's cache from one
/// operation to the next. The same arithmetic element for element, so the same bits. On a GPU
/// the step runs over the whole buffers: one kernel an operation.
const CPU_CHUNK: i64 = 1 << 16;

impl Flat {
    /// The step on elements `span` (start, length) of the flat buffers.
    fn step_span(&mut self, step: &StepCoefficients, grads: &Tensor, span: (i64, i64)) {
        let (start, len) = span;
        let part = |t: &Tensor| t.narrow(0, start, len);
        if step.decay != 1.0 {
            self.layout.decay(step.decay, span);
        }
        let mut params = part(self.layout.params());
        step.apply(
            &mut params,
            &mut part(&self.exp_avg),
            &mut part(&self.exp_avg_sq),
            &part(grads),
        );
        if let Some(compute) = &self.compute {
            part(compute).copy_(&params);
        }
    }
}

/// One step's numbers, shared by the per-parameter and the flat paths.
struct StepCoefficients {
    /// What a decayed parameter is multiplied by (`1 - lr · weight_decay`).
    decay: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    /// `lr / (1 - beta1^t)`.
    step_size: f64,
    bias_correction2_sqrt: f64,
}

impl StepCoefficients {
    /// The moments' update and the parameter's: `torch.optim.AdamW`'s single-tensor step (after
    /// decay), operation for operation, so the same bits —
    /// `exp_avg.lerp_(grad, 1 − β₁)`, `exp_avg_sq.mul_(β₂).addcmul_(grad, grad, value=1 − β₂)`,
    /// `denom = (exp_avg_sq.sqrt() / sqrt(1 − β₂ᵗ)).add_(ε)`,
    /// `param.addcdiv_(exp_avg, denom, value=−step_size)`. tch's `addcmul_` and `addcdiv_` take
    /// no `value`: libtorch computes `self + value·t1·t2` and `self + value·t1 / t2` with `value`
    /// multiplied in first, so `t1` is given already multiplied by it (in one scratch buffer).
    ///
    /// Two temporaries the size of `param`, every other operation in place: a chunk of the flat
    /// buffers on the CPU ([`CPU_CHUNK`]), the whole model on a GPU (its peak memory).
    fn apply(
        &self,
        param: &mut Tensor,
        exp_avg: &mut Tensor,
        exp_avg_sq: &mut Tensor,
        grad: &Tensor,
    ) {
        let _ = exp_avg
            .f_lerp_(grad, 1.0 - self.beta1)
            .expect("first moment");
        let _ = exp_avg_sq.f_mul_scalar_(self.beta2).expect("second moment");
        let scratch = grad * (1.0 - self.beta2);
        let _ = exp_avg_sq
            .f_addcmul_(&scratch, grad)
            .expect("second moment");
        let mut denom = exp_avg_sq.sqrt();
        let _ = denom
            .f_div_scalar_(self.bias_correction2_sqrt)
            .expect("denominator");
        let _ = denom.f_add_scalar_(self.eps).expect("denominator");
        let _ = exp_avg
            .f_mul_scalar_out(&scratch, -self.step_size)
            .expect("parameter update");
        let _ = param
            .f_addcdiv_(&scratch, &denom)
            .expect("parameter update");
    }
}

impl ParamState {
    /// The model's variable: the tensor whose gradient the step reads.
    fn variable(&self) -> &Tensor {
        self.compute.as_ref().unwrap_or(&self.param)
    }
}

#[cfg(test)]
impl Flat {
    fn layout_params(&self) -> &Tensor {
        self.layout.params()
    }
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
                compute: None,
            })
            .collect();
        Self {
            config,
            params,
            steps: 0,
            flat: None,
        }
    }

    /// Mixed precision: steps float32 master copies of `params`, the model's variables in a
    /// lower precision (bfloat16, float16), reading the gradients of the variables and writing
    /// each step's weights back into them. Flat, as [`AdamW::flattened`] makes it.
    pub fn with_master_weights(params: Vec<(String, Tensor)>, config: AdamWConfig) -> Self {
        let masters = params
            .iter()
            .map(|(name, p)| (name.clone(), p.detach().to_kind(Kind::Float)))
            .collect();
        let mut adam = Self::new(masters, config);
        for (state, (_, variable)) in adam.params.iter_mut().zip(params) {
            state.compute = Some(variable);
        }
        adam.flattened()
    }

    /// Moves the parameters' data and the moments into flat buffers, so that a step is a few
    /// kernels over the whole model (the same arithmetic, element for element). Unchanged when
    /// the parameters differ in kind or device.
    pub fn flattened(mut self) -> Self {
        if self.flat.is_some() || self.steps != 0 {
            return self;
        }
        let params: Vec<(&Tensor, bool)> =
            self.params.iter().map(|s| (&s.param, s.decay)).collect();
        let Some(layout) = FlatLayout::adopt(&params) else {
            return self;
        };
        let (exp_avg, exp_avg_sq) = (layout.zeros(), layout.zeros());
        for (i, state) in self.params.iter_mut().enumerate() {
            state.exp_avg = layout.view(&exp_avg, i);
            state.exp_avg_sq = layout.view(&exp_avg_sq, i);
        }
        let variables: Option<Vec<&Tensor>> =
            self.params.iter().map(|s| s.compute.as_ref()).collect();
        let compute = variables.map(|variables| into_one_buffer(&variables));
        self.flat = Some(Flat {
            layout,
            exp_avg,
            exp_avg_sq,
            compute,
        });
        self
    }

    /// Every gradient in one flat float32 tensor, in the parameters' order (a copy), when the
    /// parameters are flat and all have one: reduce and clip it, then [`AdamW::step_flat`].
    pub fn flat_grads(&self) -> Option<Tensor> {
        let flat = self.flat.as_ref()?;
        let params: Vec<&Tensor> = self.params.iter().map(ParamState::variable).collect();
        flat.layout.gather_grads(&params)
    }

    /// Each parameter's span of a flat tensor laid out as [`AdamW::flat_grads`] gives it, by
    /// name (views, in the parameter's shape): to weigh parameters differently in a norm.
    ///
    /// # Panics
    /// When the parameters are not flat (a caller's bug: `flat_grads` returned `None`).
    pub fn flat_views<'a>(&'a self, flat: &Tensor) -> Vec<(&'a str, Tensor)> {
        let layout = &self
            .flat
            .as_ref()
            .expect("flat_views of flat parameters")
            .layout;
        self.params
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), layout.view(flat, i)))
            .collect()
    }

    /// All trainable variables of `vs`, in name order so the state layout is deterministic;
    /// with float32 master weights when the variables are of a lower precision.
    pub fn for_var_store(vs: &nn::VarStore, config: AdamWConfig) -> Self {
        let mut params: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        if params
            .iter()
            .any(|(_, p)| matches!(p.kind(), Kind::BFloat16 | Kind::Half))
        {
            return Self::with_master_weights(params, config);
        }
        Self::new(params, config).flattened()
    }

    /// The model's tensors that carry the gradients (the variables, not master copies).
    pub fn params(&self) -> Vec<Tensor> {
        self.params
            .iter()
            .map(|p| p.variable().shallow_clone())
            .collect()
    }

    /// The float32 master weights by name (views), under mixed precision: what a checkpoint
    /// stores, so that a resumed run continues from the weights the optimiser holds.
    pub fn master_weights(&self) -> Option<Vec<(String, Tensor)>> {
        self.params
            .iter()
            .map(|s| {
                s.compute
                    .as_ref()
                    .map(|_| (s.name.clone(), s.param.detach()))
            })
            .collect()
    }

    /// Sets parameter `name`'s master weights (under mixed precision) and variable to
    /// `value`; `false` when there is no such parameter.
    pub fn overwrite(&mut self, name: &str, value: &Tensor) -> bool {
        let Some(state) = self.params.iter_mut().find(|s| s.name == name) else {
            return false;
        };
        tch::no_grad(|| {
            state.param.copy_(value);
            if let Some(variable) = &mut state.compute {
                variable.copy_(value);
            }
        });
        true
    }

    /// Optimiser steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn zero_grad(&mut self) {
        for state in &mut self.params {
            match &mut state.compute {
                Some(variable) => variable.zero_grad(),
                None => state.param.zero_grad(),
            }
        }
    }

    /// One update with learning rate `lr`; parameters without a gradient are skipped.
    pub fn step(&mut self, lr: f64) {
        if let Some(grads) = self.flat_grads() {
            return self.step_flat(lr, &grads);
        }
        let step = self.next_step(lr);
        tch::no_grad(|| {
            for state in &mut self.params {
                let grad = state.variable().grad();
                if !grad.defined() {
                    continue;
                }
                let grad = grad.to_kind(state.param.kind());
                if state.decay && step.decay != 1.0 {
                    let _ = state.param.f_mul_scalar_(step.decay).expect("weight decay");
                }
                step.apply(
                    &mut state.param,
                    &mut state.exp_avg,
                    &mut state.exp_avg_sq,
                    &grad,
                );
                if let Some(variable) = &mut state.compute {
                    variable.copy_(&state.param);
                }
            }
        });
    }

    /// One update of flat parameters with `grads`, the flat gradient [`AdamW::flat_grads`]
    /// gave (reduced and clipped as the caller needs): the per-parameter arithmetic of
    /// [`AdamW::step`] on the whole buffer at once.
    ///
    /// # Panics
    /// When the parameters are not flat (a caller's bug: `flat_grads` returned `None`).
    pub fn step_flat(&mut self, lr: f64, grads: &Tensor) {
        let step = self.next_step(lr);
        let flat = self.flat.as_mut().expect("step_flat on flat parameters");
        let total = flat.layout.numel();
        let chunk = match grads.device() {
            Device::Cpu => CPU_CHUNK,
            _ => total.max(1),
        };
        tch::no_grad(|| {
            for start in (0..total).step_by(chunk as usize) {
                flat.step_span(&step, grads, (start, chunk.min(total - start)));
            }
        });
    }

    /// Counts a step and gives its coefficients.
    fn next_step(&mut self, lr: f64) -> StepCoefficients {
        self.steps += 1;
        let AdamWConfig {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.config;
        StepCoefficients {
            decay: 1.0 - lr * weight_decay,
            beta1,
            beta2,
            eps,
            step_size: lr / (1.0 - beta1.powf(self.steps as f64)),
            bias_correction2_sqrt: (1.0 - beta2.powf(self.steps as f64)).sqrt(),
        }
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
        // Copied in, not swapped: flat moments are views of one buffer.
        tch::no_grad(|| {
            for (state, (exp_avg, exp_avg_sq)) in self.params.iter_mut().zip(restored) {
                state.exp_avg.copy_(&exp_avg);
                state.exp_avg_sq.copy_(&exp_avg_sq);
            }
        });
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

    /// A matrix, a vector and a 3-d tensor with fixed values; the matrix and the 3-d tensor
    /// are decayed, the vector is not.
    fn mixed_params() -> Vec<(String, Tensor)> {
        mixed_params_of(&[3, 4], 5, &[2, 3, 4])
    }

    /// [`mixed_params`] in the given shapes.
    fn mixed_params_of(matrix: &[i64], vector: i64, cube: &[i64]) -> Vec<(String, Tensor)> {
        let make = |shape: &[i64], offset: f64| {
            let n: i64 = shape.iter().product();
            (Tensor::arange(n, (Kind::Float, tch::Device::Cpu)) * 0.37 + offset)
                .sin()
                .view(shape)
                .set_requires_grad(true)
        };
        vec![
            ("a.weight".into(), make(matrix, 0.1)),
            ("b.bias".into(), make(&[vector], 0.7)),
            ("c.kernel".into(), make(cube, -0.4)),
        ]
    }

    fn shallow(params: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
        params
            .iter()
            .map(|(n, p)| (n.clone(), p.shallow_clone()))
            .collect()
    }

    /// A loss whose gradient differs per element and changes as the parameters move.
    fn wavy_loss(params: &[(String, Tensor)]) -> Tensor {
        params
            .iter()
            .map(|(_, p)| (p * p * 0.5 + p.sin() * 0.3).sum(Kind::Float))
            .fold(Tensor::from(0.0f32), |a, b| a + b)
    }

    fn train(adam: &mut AdamW, params: &[(String, Tensor)], steps: usize) {
        for step in 0..steps {
            adam.zero_grad();
            wavy_loss(params).backward();
            adam.step(0.05 / (1.0 + step as f64));
        }
    }

    fn decayed() -> AdamWConfig {
        AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        }
    }

    #[test]
    fn flat_steps_equal_the_per_parameter_steps_bit_for_bit() {
        let (plain_params, flat_params) = (mixed_params(), mixed_params());
        let mut plain = AdamW::new(shallow(&plain_params), decayed());
        let mut flat = AdamW::new(shallow(&flat_params), decayed()).flattened();
        assert!(flat.flat.is_some() && plain.flat.is_none());
        train(&mut plain, &plain_params, 6);
        train(&mut flat, &flat_params, 6);
        for ((name, p), (_, q)) in plain_params.iter().zip(&flat_params) {
            assert_eq!(p.size(), q.size(), "{name}");
            assert!(p.equal(q), "{name} differs after flat steps");
        }
        for ((name, m), (_, n)) in plain.state_tensors().iter().zip(flat.state_tensors()) {
            assert!(m.equal(&n), "moment {name} differs");
        }
    }

    /// On the CPU a flat step runs a chunk at a time: over buffers of several chunks, whose
    /// boundaries fall inside parameters and between decayed and undecayed ones, it still
    /// gives the per-parameter steps' bits.
    #[test]
    fn flat_steps_over_many_chunks_equal_the_per_parameter_steps_bit_for_bit() {
        let shapes = (&[301, 257][..], 70_001, &[3, 101, 97][..]);
        let plain_params = mixed_params_of(shapes.0, shapes.1, shapes.2);
        let flat_params = mixed_params_of(shapes.0, shapes.1, shapes.2);
        let total: i64 = flat_params.iter().map(|(_, p)| p.numel() as i64).sum();
        assert!(
            total > 2 * CPU_CHUNK && total % CPU_CHUNK != 0,
            "{total} elements"
        );
        let mut plain = AdamW::new(shallow(&plain_params), decayed());
        let mut flat = AdamW::new(shallow(&flat_params), decayed()).flattened();
        train(&mut plain, &plain_params, 3);
        train(&mut flat, &flat_params, 3);
        for ((name, p), (_, q)) in plain_params.iter().zip(&flat_params) {
            assert!(p.equal(q), "{name} differs after flat steps");
        }
        for ((name, m), (_, n)) in plain.state_tensors().iter().zip(flat.state_tensors()) {
            assert!(m.equal(&n), "moment {name} differs");
        }
    }

    #[test]
    fn flattening_makes_every_parameter_a_view_of_one_buffer() {
        let params = mixed_params();
        let before: Vec<Tensor> = params.iter().map(|(_, p)| p.detach().copy()).collect();
        let adam = AdamW::new(shallow(&params), decayed()).flattened();
        for ((name, p), old) in params.iter().zip(&before) {
            assert!(p.equal(old), "{name}: flattening changed its values");
        }
        // Writing through the buffer is seen by the model's own tensors.
        let _ = adam
            .flat
            .as_ref()
            .unwrap()
            .layout_params()
            .shallow_clone()
            .fill_(0.0);
        for (name, p) in &params {
            assert_eq!(p.abs().sum(Kind::Double).double_value(&[]), 0.0, "{name}");
        }
    }

    #[test]
    fn flat_state_restores_and_continues_identically() {
        let params = mixed_params();
        let mut adam = AdamW::new(shallow(&params), decayed()).flattened();
        train(&mut adam, &params, 3);
        let saved: HashMap<String, Tensor> = adam.state_tensors().into_iter().collect();
        let saved_params: Vec<Tensor> = params.iter().map(|(_, p)| p.detach().copy()).collect();
        train(&mut adam, &params, 2);

        let resumed_params: Vec<(String, Tensor)> = params
            .iter()
            .zip(saved_params)
            .map(|((n, _), p)| (n.clone(), p.set_requires_grad(true)))
            .collect();
        let mut resumed = AdamW::new(shallow(&resumed_params), decayed()).flattened();
        resumed.load_state(3, &saved).unwrap();
        train(&mut resumed, &resumed_params, 2);
        for ((name, p), (_, q)) in params.iter().zip(&resumed_params) {
            assert!(p.equal(q), "{name}: the resumed flat run diverged");
        }
    }

    #[test]
    fn a_parameter_without_a_gradient_is_skipped_as_before() {
        let (plain_params, flat_params) = (mixed_params(), mixed_params());
        let mut plain = AdamW::new(shallow(&plain_params), decayed());
        let mut flat = AdamW::new(shallow(&flat_params), decayed()).flattened();
        // Only the first parameter enters the loss.
        for (adam, params) in [(&mut plain, &plain_params), (&mut flat, &flat_params)] {
            wavy_loss(&params[..1]).backward();
            assert!(adam.flat_grads().is_none());
            adam.step(0.05);
        }
        for ((name, p), (_, q)) in plain_params.iter().zip(&flat_params) {
            assert!(p.equal(q), "{name}");
        }
        assert!(flat_params[1].1.equal(&mixed_params()[1].1), "skipped");
    }

    /// `mixed_params` in bfloat16, as a model held in that precision has them.
    fn bfloat16_params() -> Vec<(String, Tensor)> {
        mixed_params()
            .into_iter()
            .map(|(n, p)| {
                let p = p.detach().to_kind(Kind::BFloat16).set_requires_grad(true);
                (n, p)
            })
            .collect()
    }

    #[test]
    fn master_weights_step_as_float32_adamw_does_and_round_into_the_variables() {
        let variables = bfloat16_params();
        let float: Vec<(String, Tensor)> = variables
            .iter()
            .map(|(n, p)| (n.clone(), p.detach().to_kind(Kind::Float)))
            .collect();
        let mut mixed = AdamW::with_master_weights(shallow(&variables), decayed());
        let mut reference = AdamW::new(shallow(&float), decayed()).flattened();
        for step in 0..4 {
            mixed.zero_grad();
            wavy_loss(&variables).backward();
            let grads = mixed.flat_grads().unwrap();
            assert_eq!(grads.kind(), Kind::Float);
            let lr = 0.05 / (1.0 + step as f64);
            reference.step_flat(lr, &grads);
            mixed.step_flat(lr, &grads);
        }
        let masters = mixed.master_weights().unwrap();
        let mut kept_below_an_ulp = false;
        for (((name, variable), (_, master)), (_, expected)) in
            variables.iter().zip(&masters).zip(&float)
        {
            assert!(
                master.equal(expected),
                "{name}: not float32 AdamW's weights"
            );
            assert_eq!(variable.kind(), Kind::BFloat16, "{name}");
            let rounded = expected.to_kind(Kind::BFloat16);
            assert!(
                variable.detach().equal(&rounded),
                "{name}: not the master rounded"
            );
            kept_below_an_ulp |= !rounded.to_kind(Kind::Float).equal(master);
        }
        // What the rounded variables lose, the master weights keep for the next step.
        assert!(kept_below_an_ulp);
    }

    #[test]
    fn the_per_parameter_path_of_master_weights_equals_the_flat_one() {
        let (flat_vars, plain_vars) = (bfloat16_params(), bfloat16_params());
        let mut flat = AdamW::with_master_weights(shallow(&flat_vars), decayed());
        let mut plain = AdamW::with_master_weights(shallow(&plain_vars), decayed());
        // Only the first parameter enters the loss: no flat gradient, each stepped alone.
        wavy_loss(&flat_vars).backward();
        flat.step(0.05);
        wavy_loss(&plain_vars[..1]).backward();
        assert!(plain.flat_grads().is_none());
        plain.step(0.05);
        assert!(flat_vars[0].1.equal(&plain_vars[0].1));
        assert!(
            flat.master_weights().unwrap()[0]
                .1
                .equal(&plain.master_weights().unwrap()[0].1)
        );
        assert!(plain_vars[1].1.equal(&bfloat16_params()[1].1), "skipped");
    }

    #[test]
    fn a_bfloat16_var_store_gets_master_weights_which_overwrite_sets() {
        let mut vs = nn::VarStore::new(tch::Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[1.0f32, 2.0]));
        vs.bfloat16();
        let mut adam = AdamW::for_var_store(&vs, decayed());
        let masters = adam.master_weights().unwrap();
        assert_eq!(masters[0].1.kind(), Kind::Float);
        // 1 + 2⁻¹⁰ is a float32 but not a bfloat16 (8 bits of mantissa).
        let value = Tensor::from_slice(&[1.0f32 + 1.0 / 1024.0, -3.0]);
        assert!(adam.overwrite("w", &value));
        assert!(adam.master_weights().unwrap()[0].1.equal(&value));
        assert!(
            w.detach()
                .equal(&Tensor::from_slice(&[1.0f32, -3.0]).to_kind(Kind::BFloat16))
        );
        assert!(!adam.overwrite("v", &value));
        // A float32 store keeps its variables as the weights stepped.
        let float = nn::VarStore::new(tch::Device::Cpu);
        let _ = float.root().var_copy("w", &value);
        assert!(
            AdamW::for_var_store(&float, decayed())
                .master_weights()
                .is_none()
        );
    }
}
