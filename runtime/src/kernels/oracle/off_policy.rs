//! Off-policy corrections of the policy loss at one token: truncated importance sampling
//! (veRL's `tis_imp_ratio_cap`) and the decoupled PPO objective (AReaL's
//! `use_decoupled_loss` with `behav_imp_weight_cap`).

use super::loss::{Ppo, ppo};

/// A PPO loss at one token times an importance weight that is data (no gradient through it).
#[derive(Clone, Copy, Debug)]
pub struct Weighted {
    /// The importance weight.
    pub weight: f64,
    /// The unweighted PPO loss at the token, against the policy the ratio is taken to.
    pub ppo: Ppo,
    /// `weight · ppo.loss`
    pub loss: f64,
    /// `dL/dlogp = weight · dppo/dlogp`
    pub grad: f64,
}

/// The truncated importance-sampling weight `min(exp(old − behav), cap)`: the trainer's
/// probability of the sampled token over the sampler's, its top truncated at `cap`.
pub fn tis_weight(old: f64, behav: f64, cap: f64) -> f64 {
    let w = (old - behav).exp();
    if w > cap { cap } else { w }
}

/// AReaL's behaviour weight `exp(prox − behav)`, or 0 when it is above `cap` (the token is
/// filtered out, not truncated).
pub fn decoupled_weight(prox: f64, behav: f64, cap: f64) -> f64 {
    let w = (prox - behav).exp();
    if w <= cap { w } else { 0.0 }
}

fn weighted(ppo: Ppo, weight: f64) -> Weighted {
    Weighted {
        weight,
        ppo,
        loss: weight * ppo.loss,
        grad: weight * ppo.grad,
    }
}

/// PPO with dual clip against `old`, weighted by `tis_weight(old, behav, cap)`.
#[allow(clippy::too_many_arguments)]
pub fn ppo_tis(
    logp: f64,
    old: f64,
    behav: f64,
    adv: f64,
    eps_low: f64,
    eps_high: f64,
    c: f64,
    cap: f64,
) -> Weighted {
    weighted(
        ppo(logp, old, adv, eps_low, eps_high, c),
        tis_weight(old, behav, cap),
    )
}

/// Decoupled PPO: PPO with dual clip against the proximal policy `prox`, weighted by
/// `decoupled_weight(prox, behav, cap)`.
#[allow(clippy::too_many_arguments)]
pub fn decoupled_ppo(
    logp: f64,
    prox: f64,
    behav: f64,
    adv: f64,
    eps_low: f64,
    eps_high: f64,
    c: f64,
    cap: f64,
) -> Weighted {
    weighted(
        ppo(logp, prox, adv, eps_low, eps_high, c),
        decoupled_weight(prox, behav, cap),
    )
}
