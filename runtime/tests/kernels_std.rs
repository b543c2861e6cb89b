//! `std.algo` against the oracle: each std function is run by the reference evaluator (in f64)
//! on seeded random inputs — odd sizes, empty rows, holes in the mask, single-sample groups,
//! NaN in padded positions — and compared with the RL_MATH formulas written independently in
//! `kernels::oracle`. Positions that RL_MATH leaves unspecified (padding after whitening, or
//! where a function's doc says so) are compared only under the mask.

mod common;

use rlc_check::Checked;
use rlc_reference::{Arg, Evaluator};
use rlc_runtime::kernels::oracle::{
    self, MaskRows, Rows, advantage, dapo, kl, loss, masked, off_policy, preference,
};
use rlc_runtime::rng::Rng;
use tch::{Kind, Tensor};

const ROOT: &str = r#"
import std.algo {
  masked_sum, masked_mean, masked_var, masked_whiten, whiten, per_token, seq_score,
  gae, gae_returns, gae_whitened, grpo_seq_advantage, grpo_advantage, drgrpo_seq_advantage,
  drgrpo_advantage, rloo_seq_advantage, rloo_advantage, reinforce_pp_returns,
  reinforce_pp_advantage, reinforce_pp_baseline_advantage, remax_returns, remax_advantage,
  kl_k1, kl_abs, kl_k2, kl_k3, kl_shaped_reward, adaptive_kl_beta, log_ratio, ppo_clip,
  ppo_clip_range, ppo_clip_plain, ppo_clipfrac, ppo_clipfrac_lower, approx_kl, gspo_clip,
  gspo_loss, value_loss, value_clipfrac, entropy, actor_loss, token_mean, seq_mean_token_sum,
  seq_mean_token_mean, seq_mean_token_sum_norm, overlong_penalty, informative_groups,
  bradley_terry, pair_accuracy, pair_margin, tis_weight, ppo_clip_tis, decoupled_weight,
  decoupled_ppo_clip
}

/// The PPO loss as an `update` block computes it, for the gradient test.
fn ppo_token_mean(logp: f32[B, T], old: f32[B, T], adv: f32[B, T], m: Mask[B, T], eps: f32) -> f32 {
  token_mean(ppo_clip(logp, old, adv, eps: eps), m)
}

/// The off-policy corrected losses as an `update` block computes them, for the gradient test.
fn tis_token_mean(logp: f32[B, T], old: f32[B, T], behav: f32[B, T], adv: f32[B, T], m: Mask[B, T], cap: f32) -> f32 {
  token_mean(ppo_clip_tis(logp, old, behav, adv, cap: cap), m)
}

fn decoupled_token_mean(logp: f32[B, T], prox: f32[B, T], behav: f32[B, T], adv: f32[B, T], m: Mask[B, T], cap: f32) -> f32 {
  token_mean(decoupled_ppo_clip(logp, prox, behav, adv, cap: cap), m)
}
"#;

fn program() -> Checked {
    common::checked("kernels_std.rl", ROOT)
}

// ---------------------------------------------------------------------------------------------
// Inputs

/// Row lengths with an empty row, a full row and odd lengths in between.
fn lengths(rng: &mut Rng, b: usize, t: usize) -> Vec<usize> {
    (0..b)
        .map(|i| match i {
            0 => 0,
            1 => t,
            _ => (rng.next_u64() % (t as u64 + 1)) as usize,
        })
        .collect()
}

/// A right-padded response mask.
fn prefix_mask(lens: &[usize], t: usize) -> MaskRows {
    lens.iter()
        .map(|&n| (0..t).map(|j| j < n).collect())
        .collect()
}

/// A mask with holes (padded positions before a row's end), row 0 empty.
fn holey_mask(rng: &mut Rng, b: usize, t: usize) -> MaskRows {
    (0..b)
        .map(|i| (0..t).map(|_| i != 0 && rng.uniform() < 0.7).collect())
        .collect()
}

fn normal_rows(rng: &mut Rng, b: usize, t: usize, scale: f64) -> Rows {
    (0..b)
        .map(|_| (0..t).map(|_| scale * rng.normal()).collect())
        .collect()
}

/// NaN at every padded position: std promises they never contribute.
fn poison(x: &Rows, m: &MaskRows) -> Rows {
    x.iter()
        .zip(m)
        .map(|(x, m)| {
            x.iter()
                .zip(m)
                .map(|(&v, &b)| if b { v } else { f64::NAN })
                .collect()
        })
        .collect()
}

/// Group ids with single-sample groups, a large group and ids out of order.
fn group_ids(b: usize) -> Vec<i64> {
    let pattern = [7, 3, 3, 7, 0, 3, 11, 7, 7, 5, 3];
    (0..b).map(|i| pattern[i % pattern.len()]).collect()
}

fn scores(rng: &mut Rng, b: usize) -> Vec<f64> {
    // Some exact ties, as rule-based rewards have.
    (0..b)
        .map(|_| {
            if rng.uniform() < 0.3 {
                1.0
            } else {
                rng.normal()
            }
        })
        .collect()
}

fn t2(x: &Rows) -> Tensor {
    let t = x.first().map_or(0, Vec::len) as i64;
    let flat: Vec<f64> = x.iter().flatten().copied().collect();
    Tensor::from_slice(&flat).view([x.len() as i64, t])
}

fn m2(m: &MaskRows) -> Tensor {
    let t = m.first().map_or(0, Vec::len) as i64;
    let flat: Vec<bool> = m.iter().flatten().copied().collect();
    Tensor::from_slice(&flat).view([m.len() as i64, t])
}

fn t1(x: &[f64]) -> Tensor {
    Tensor::from_slice(x)
}

fn ids(g: &[i64]) -> Tensor {
    Tensor::from_slice(g).to_kind(Kind::Int)
}

// ---------------------------------------------------------------------------------------------
// Evaluation and comparison

fn run(checked: &Checked, f: &str, args: Vec<(&str, Arg)>) -> Tensor {
    Evaluator::new(&checked.modules)
        .with_float(Kind::Double)
        .call(f, &args)
        .unwrap_or_else(|e| panic!("{f}: {e}"))
}

/// f64 on both sides; 1e-7 leaves room only for the `+ 1e-8` guards RL_MATH writes in one
/// place and not another.
fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-7 * (1.0 + want.abs())
}

fn assert_scalar(what: &str, got: &Tensor, want: f64) {
    assert_eq!(got.size(), Vec::<i64>::new(), "{what}: not a scalar");
    let got = got.double_value(&[]);
    assert!(close(got, want), "{what}: expected {want}, got {got}");
}

fn assert_vec(what: &str, got: &Tensor, want: &[f64]) {
    let got = Vec::<f64>::try_from(got).unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w), "{what}[{i}]: expected {w}, got {g}");
    }
}

/// Compares `[B, T]` results where `under` is true (everywhere when `None`).
fn assert_rows(what: &str, got: &Tensor, want: &Rows, under: Option<&MaskRows>) {
    let got = Vec::<Vec<f64>>::try_from(got).unwrap();
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: row {i} length");
        for t in 0..w.len() {
            if under.is_some_and(|m| !m[i][t]) {
                continue;
            }
            assert!(
                close(g[t], w[t]),
                "{what}[{i}, {t}]: expected {}, got {}",
                w[t],
                g[t]
            );
        }
    }
}

/// `(B, T)` shapes of the random cases, all odd but one.
const SHAPES: [(usize, usize); 4] = [(7, 5), (11, 9), (3, 1), (9, 13)];

fn cases(seed: u64) -> impl Iterator<Item = (Rng, usize, usize)> {
    SHAPES
        .into_iter()
        .enumerate()
        .map(move |(i, (b, t))| (Rng::new(seed * 1000 + i as u64), b, t))
}

// ---------------------------------------------------------------------------------------------
// Masked helpers

#[test]
fn masked_statistics_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(1) {
        for m in [
            prefix_mask(&lengths(&mut rng, b, t), t),
            holey_mask(&mut rng, b, t),
        ] {
            let x = poison(&normal_rows(&mut rng, b, t, 2.0), &m);
            let args = || vec![("x", t2(&x).into()), ("m", m2(&m).into())];
            assert_scalar(
                "masked_sum",
                &run(&p, "masked_sum", args()),
                masked::masked_sum(&x, &m),
            );
            assert_scalar(
                "masked_mean",
                &run(&p, "masked_mean", args()),
                masked::masked_mean(&x, &m),
            );
            let Some(var) = masked::masked_var(&x, &m) else {
                continue;
            };
            assert_scalar("masked_var", &run(&p, "masked_var", args()), var);
            let w = masked::masked_whiten(&x, &m).unwrap();
            assert_rows(
                "masked_whiten",
                &run(&p, "masked_whiten", args()),
                &w,
                Some(&m),
            );
            assert_rows("whiten", &run(&p, "whiten", args()), &w, Some(&m));
        }
    }
}

#[test]
fn masked_mean_of_an_empty_mask_is_zero() {
    let p = program();
    let m = vec![vec![false; 3]; 2];
    let x = vec![vec![f64::NAN; 3]; 2];
    let got = run(
        &p,
        "masked_mean",
        vec![("x", t2(&x).into()), ("m", m2(&m).into())],
    );
    assert_scalar("masked_mean", &got, 0.0);
}

/// RL_MATH: an error when `Σm ≤ 1`; std documents a non-finite result instead.
#[test]
fn masked_var_of_one_token_is_not_finite() {
    let p = program();
    let m = vec![vec![true, false, false], vec![false; 3]];
    let x = vec![vec![1.5, 2.0, 3.0], vec![4.0, 5.0, 6.0]];
    assert!(masked::masked_var(&x, &m).is_none());
    let got = run(
        &p,
        "masked_var",
        vec![("x", t2(&x).into()), ("m", m2(&m).into())],
    );
    assert!(!got.double_value(&[]).is_finite(), "got {got}");
}

#[test]
fn per_token_and_seq_score_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(2) {
        let m = holey_mask(&mut rng, b, t);
        let r = poison(&normal_rows(&mut rng, b, t, 1.0), &m);
        let s = oracle::seq_score(&r, &m);
        let got = run(
            &p,
            "seq_score",
            vec![("r", t2(&r).into()), ("m", m2(&m).into())],
        );
        assert_vec("seq_score", &got, &s);
        let got = run(
            &p,
            "per_token",
            vec![("a", t1(&s).into()), ("m", m2(&m).into())],
        );
        assert_rows("per_token", &got, &oracle::per_token(&s, &m), None);
    }
}

// ---------------------------------------------------------------------------------------------
// Advantage estimators

#[test]
fn gae_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(3) {
        let (gamma, lam) = (0.9 + 0.1 * rng.uniform(), 0.8 + 0.2 * rng.uniform());
        for m in [
            prefix_mask(&lengths(&mut rng, b, t), t),
            holey_mask(&mut rng, b, t),
        ] {
            let r = poison(&normal_rows(&mut rng, b, t, 1.0), &m);
            let v = poison(&normal_rows(&mut rng, b, t, 1.0), &m);
            let args = || {
                vec![
                    ("r", t2(&r).into()),
                    ("v", t2(&v).into()),
                    ("m", m2(&m).into()),
                    ("gamma", gamma.into()),
                    ("lam", lam.into()),
                ]
            };
            let a = advantage::gae(&r, &v, &m, gamma, lam);
            // Padded positions carry the next real token's advantage: specified everywhere.
            assert_rows("gae", &run(&p, "gae", args()), &a, None);
            let ret = advantage::gae_returns(&r, &v, &m, gamma, lam);
            assert_rows(
                "gae_returns",
                &run(&p, "gae_returns", args()),
                &ret,
                Some(&m),
            );
            if let Some(w) = masked::masked_whiten(&a, &m) {
                assert_rows(
                    "gae_whitened",
                    &run(&p, "gae_whitened", args()),
                    &w,
                    Some(&m),
                );
            }
        }
    }
}

#[test]
fn group_advantages_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(4) {
        let m = prefix_mask(&lengths(&mut rng, b, t), t);
        let s = scores(&mut rng, b);
        let g = group_ids(b);
        let seq = || vec![("score", t1(&s).into()), ("group", ids(&g).into())];
        let tok = || {
            vec![
                ("score", t1(&s).into()),
                ("group", ids(&g).into()),
                ("mask", m2(&m).into()),
            ]
        };
        let grpo = advantage::grpo(&s, &g, true);
        assert_vec(
            "grpo_seq_advantage",
            &run(&p, "grpo_seq_advantage", seq()),
            &grpo,
        );
        let want = oracle::per_token(&grpo, &m);
        assert_rows(
            "grpo_advantage",
            &run(&p, "grpo_advantage", tok()),
            &want,
            None,
        );
        let dr = advantage::grpo(&s, &g, false);
        assert_vec(
            "drgrpo_seq_advantage",
            &run(&p, "drgrpo_seq_advantage", seq()),
            &dr,
        );
        let want = oracle::per_token(&dr, &m);
        assert_rows(
            "drgrpo_advantage",
            &run(&p, "drgrpo_advantage", tok()),
            &want,
            None,
        );
        let rloo = advantage::rloo(&s, &g);
        assert_vec(
            "rloo_seq_advantage",
            &run(&p, "rloo_seq_advantage", seq()),
            &rloo,
        );
        let want = oracle::per_token(&rloo, &m);
        assert_rows(
            "rloo_advantage",
            &run(&p, "rloo_advantage", tok()),
            &want,
            None,
        );
        if let Some(want) = advantage::reinforce_pp_baseline(&s, &g, &m) {
            let got = run(&p, "reinforce_pp_baseline_advantage", tok());
            assert_rows("reinforce_pp_baseline_advantage", &got, &want, None);
        }
    }
}

#[test]
fn reinforce_pp_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(5) {
        let gamma = 0.9 + 0.1 * rng.uniform();
        for m in [
            prefix_mask(&lengths(&mut rng, b, t), t),
            holey_mask(&mut rng, b, t),
        ] {
            let r = poison(&normal_rows(&mut rng, b, t, 1.0), &m);
            let args = || {
                vec![
                    ("r", t2(&r).into()),
                    ("m", m2(&m).into()),
                    ("gamma", gamma.into()),
                ]
            };
            let g = advantage::reinforce_pp_returns(&r, &m, gamma);
            let got = run(&p, "reinforce_pp_returns", args());
            assert_rows("reinforce_pp_returns", &got, &g, Some(&m));
            if let Some(a) = advantage::reinforce_pp(&r, &m, gamma) {
                let got = run(&p, "reinforce_pp_advantage", args());
                assert_rows("reinforce_pp_advantage", &got, &a, None);
            }
        }
    }
}

#[test]
fn remax_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(6) {
        for m in [
            prefix_mask(&lengths(&mut rng, b, t), t),
            holey_mask(&mut rng, b, t),
        ] {
            let r = poison(&normal_rows(&mut rng, b, t, 1.0), &m);
            let base: Vec<f64> = (0..b).map(|_| rng.normal()).collect();
            let want = advantage::remax(&r, &base, &m);
            let got = run(
                &p,
                "remax_advantage",
                vec![
                    ("r", t2(&r).into()),
                    ("baseline", t1(&base).into()),
                    ("m", m2(&m).into()),
                ],
            );
            assert_rows("remax_advantage", &got, &want, None);
            let zero = vec![0.0; b];
            let want = advantage::remax(&r, &zero, &m);
            let got = run(
                &p,
                "remax_returns",
                vec![("r", t2(&r).into()), ("m", m2(&m).into())],
            );
            assert_rows("remax_returns", &got, &want, None);
        }
    }
}

#[test]
fn dapo_overlong_penalty_and_filter_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(15) {
        let lens = lengths(&mut rng, b, t);
        let m = prefix_mask(&lens, t);
        let (max_len, buffer, factor) = (t as f64, (t as f64 / 2.0).max(1.0), 1.5);
        let want: Vec<f64> = lens
            .iter()
            .map(|&n| dapo::overlong_penalty(n, max_len, buffer, factor))
            .collect();
        let got = run(
            &p,
            "overlong_penalty",
            vec![
                ("m", m2(&m).into()),
                ("max_len", max_len.into()),
                ("buffer", buffer.into()),
                ("factor", factor.into()),
            ],
        );
        assert_vec("overlong_penalty", &got, &want);
    }
    // Groups 7 and 5 have equal scores (5 at a value with no exact binary form), 3 does not,
    // 0 and 11 are single samples.
    let g = [7, 3, 3, 7, 0, 3, 11, 7, 5, 5, 5];
    let s = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.1, 0.1, 0.1];
    let want = dapo::informative(&s, &g);
    let got = run(
        &p,
        "informative_groups",
        vec![("score", t1(&s).into()), ("group", ids(&g).into())],
    );
    let got = Vec::<bool>::try_from(&got).unwrap();
    assert_eq!(
        got, want,
        "informative_groups of scores {s:?} in groups {g:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// KL

#[test]
fn kl_estimators_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(7) {
        // Wide enough that k3's clamps (±20 on k, 10 on the value) are hit.
        let logp = normal_rows(&mut rng, b, t, 8.0);
        let refp = normal_rows(&mut rng, b, t, 8.0);
        let args = || vec![("logp", t2(&logp).into()), ("ref_logp", t2(&refp).into())];
        let each = |f: fn(f64, f64) -> f64| -> Rows {
            logp.iter()
                .zip(&refp)
                .map(|(a, r)| a.iter().zip(r).map(|(a, r)| f(*a, *r)).collect())
                .collect()
        };
        assert_rows("kl_k1", &run(&p, "kl_k1", args()), &each(kl::k1), None);
        assert_rows("kl_abs", &run(&p, "kl_abs", args()), &each(kl::abs), None);
        assert_rows("kl_k2", &run(&p, "kl_k2", args()), &each(kl::k2), None);
        assert_rows("kl_k3", &run(&p, "kl_k3", args()), &each(kl::k3), None);
    }
}

#[test]
fn kl_shaped_reward_and_adaptive_beta_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(8) {
        let lens = lengths(&mut rng, b, t);
        let m = prefix_mask(&lens, t);
        let last: MaskRows = lens
            .iter()
            .map(|&n| (0..t).map(|j| n > 0 && j + 1 == n).collect())
            .collect();
        let s: Vec<f64> = (0..b).map(|_| rng.normal()).collect();
        let k = poison(&normal_rows(&mut rng, b, t, 0.1), &m);
        let beta = 0.05;
        let want: Rows = (0..b)
            .map(|i| {
                (0..t)
                    .map(|j| kl::shaped_reward(s[i], k[i][j], m[i][j], last[i][j], beta))
                    .collect()
            })
            .collect();
        let got = run(
            &p,
            "kl_shaped_reward",
            vec![
                ("score", t1(&s).into()),
                ("kl", t2(&k).into()),
                ("mask", m2(&m).into()),
                ("last", m2(&last).into()),
                ("beta", beta.into()),
            ],
        );
        assert_rows("kl_shaped_reward", &got, &want, None);
    }
    for (kl_now, target) in [(0.01, 0.1), (0.1, 0.1), (0.5, 0.1), (0.105, 0.1)] {
        let want = kl::adaptive_beta(0.2, kl_now, target, 64.0, 10_000.0);
        let got = run(
            &p,
            "adaptive_kl_beta",
            vec![
                ("beta", 0.2.into()),
                ("kl", kl_now.into()),
                ("target", target.into()),
                ("n_steps", 64.0.into()),
                ("horizon", 10_000.0.into()),
            ],
        );
        assert_scalar("adaptive_kl_beta", &got, want);
    }
}

// ---------------------------------------------------------------------------------------------
// Policy and value losses

struct PolicyInputs {
    logp: Rows,
    old: Rows,
    adv: Rows,
    m: MaskRows,
}

fn policy_inputs(rng: &mut Rng, b: usize, t: usize) -> PolicyInputs {
    let m = prefix_mask(&lengths(rng, b, t), t);
    let old = normal_rows(rng, b, t, 1.0);
    // Log-ratios mostly within the clip range, some outside, a few past ±20.
    let logp: Rows = old
        .iter()
        .map(|row| {
            row.iter()
                .map(|o| {
                    let wide = if rng.uniform() < 0.05 { 30.0 } else { 0.3 };
                    o + wide * rng.normal()
                })
                .collect()
        })
        .collect();
    let adv = normal_rows(rng, b, t, 1.0);
    PolicyInputs { logp, old, adv, m }
}

fn ppo_rows(x: &PolicyInputs, eps_low: f64, eps_high: f64, c: f64) -> Vec<Vec<loss::Ppo>> {
    (0..x.logp.len())
        .map(|i| {
            (0..x.logp[i].len())
                .map(|t| loss::ppo(x.logp[i][t], x.old[i][t], x.adv[i][t], eps_low, eps_high, c))
                .collect()
        })
        .collect()
}

fn field(rows: &[Vec<loss::Ppo>], f: impl Fn(&loss::Ppo) -> f64) -> Rows {
    rows.iter().map(|r| r.iter().map(&f).collect()).collect()
}

#[test]
fn ppo_losses_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(9) {
        let x = policy_inputs(&mut rng, b, t);
        let base = || {
            vec![
                ("logp", t2(&x.logp).into()),
                ("old_logp", t2(&x.old).into()),
                ("adv", t2(&x.adv).into()),
            ]
        };
        let with = |extra: Vec<(&'static str, Arg)>| {
            let mut a = base();
            a.extend(extra);
            a
        };
        let want = ppo_rows(&x, 0.2, 0.2, 3.0);
        assert_rows(
            "ppo_clip",
            &run(&p, "ppo_clip", base()),
            &field(&want, |p| p.loss),
            None,
        );
        let got = run(
            &p,
            "log_ratio",
            vec![
                ("logp", t2(&x.logp).into()),
                ("old_logp", t2(&x.old).into()),
            ],
        );
        assert_rows("log_ratio", &got, &field(&want, |p| p.delta), None);
        let want = ppo_rows(&x, 0.1, 0.28, 2.5);
        let got = run(
            &p,
            "ppo_clip_range",
            with(vec![
                ("eps_low", 0.1.into()),
                ("eps_high", 0.28.into()),
                ("c", 2.5.into()),
            ]),
        );
        assert_rows("ppo_clip_range", &got, &field(&want, |p| p.loss), None);
        let got = run(
            &p,
            "ppo_clip_plain",
            with(vec![("eps_low", 0.1.into()), ("eps_high", 0.28.into())]),
        );
        assert_rows("ppo_clip_plain", &got, &field(&want, |p| p.lc), None);
        let with_mask = |extra: Vec<(&'static str, Arg)>| {
            let mut a = with(extra);
            a.push(("m", m2(&x.m).into()));
            a
        };
        let frac = masked::masked_mean(&field(&want, |p| f64::from(p.l2 > p.l1)), &x.m);
        let got = run(
            &p,
            "ppo_clipfrac",
            with_mask(vec![("eps_low", 0.1.into()), ("eps_high", 0.28.into())]),
        );
        assert_scalar("ppo_clipfrac", &got, frac);
        // The reference trainer's `pg_clipfrac_lower`: `Lc > L3` where `A < 0`.
        let lower = field(&want, |p| f64::from(p.lc > p.l3));
        let lower: Rows = lower
            .iter()
            .zip(&x.adv)
            .map(|(l, a)| {
                l.iter()
                    .zip(a)
                    .map(|(l, a)| if *a < 0.0 { *l } else { 0.0 })
                    .collect()
            })
            .collect();
        let got = run(
            &p,
            "ppo_clipfrac_lower",
            with_mask(vec![
                ("eps_low", 0.1.into()),
                ("eps_high", 0.28.into()),
                ("c", 2.5.into()),
            ]),
        );
        assert_scalar(
            "ppo_clipfrac_lower",
            &got,
            masked::masked_mean(&lower, &x.m),
        );
        let kl = masked::masked_mean(&field(&want, |p| -p.delta), &x.m);
        let got = run(
            &p,
            "approx_kl",
            vec![
                ("logp", t2(&x.logp).into()),
                ("old_logp", t2(&x.old).into()),
                ("m", m2(&x.m).into()),
            ],
        );
        assert_scalar("approx_kl", &got, kl);
    }
}

#[test]
fn gspo_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(10) {
        let mut x = policy_inputs(&mut rng, b, t);
        // GSPO's ranges are tiny: keep sequence ratios near 1 so both sides of the clip occur.
        for (l, o) in x.logp.iter_mut().zip(&x.old) {
            for (l, o) in l.iter_mut().zip(o) {
                *l = o + 1e-3 * (*l - o).clamp(-1.0, 1.0);
            }
        }
        // Row 1 (full): a sequence log-ratio of 12, past the clamp at 10.
        for (l, o) in x.logp[1].iter_mut().zip(&x.old[1]) {
            *l = o + 12.0;
        }
        let args = || {
            vec![
                ("logp", t2(&poison(&x.logp, &x.m)).into()),
                ("old_logp", t2(&poison(&x.old, &x.m)).into()),
                ("adv", t2(&x.adv).into()),
                ("m", m2(&x.m).into()),
            ]
        };
        let want = loss::gspo(&x.logp, &x.old, &x.adv, &x.m, 3e-4, 4e-4);
        assert_rows(
            "gspo_clip",
            &run(&p, "gspo_clip", args()),
            &want,
            Some(&x.m),
        );
        let agg = loss::seq_mean_token_mean(&want, &x.m);
        assert_scalar("gspo_loss", &run(&p, "gspo_loss", args()), agg);
    }
}

#[test]
fn value_loss_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(11) {
        let m = prefix_mask(&lengths(&mut rng, b, t), t);
        let old_v = normal_rows(&mut rng, b, t, 1.0);
        let v: Rows = old_v
            .iter()
            .map(|r| r.iter().map(|o| o + 0.6 * rng.normal()).collect())
            .collect();
        let ret = normal_rows(&mut rng, b, t, 1.0);
        let per: Vec<Vec<(f64, bool)>> = (0..b)
            .map(|i| {
                (0..t)
                    .map(|j| loss::value_loss(v[i][j], old_v[i][j], ret[i][j], 0.5))
                    .collect()
            })
            .collect();
        let want: Rows = per
            .iter()
            .map(|r| r.iter().map(|p| p.0).collect())
            .collect();
        let clipped: Rows = per
            .iter()
            .map(|r| r.iter().map(|p| f64::from(p.1)).collect())
            .collect();
        let args = || {
            vec![
                ("v", t2(&v).into()),
                ("old_v", t2(&old_v).into()),
                ("ret", t2(&ret).into()),
            ]
        };
        assert_rows("value_loss", &run(&p, "value_loss", args()), &want, None);
        let mut a = args();
        a.push(("m", m2(&m).into()));
        let got = run(&p, "value_clipfrac", a);
        assert_scalar("value_clipfrac", &got, masked::masked_mean(&clipped, &m));
    }
}

#[test]
fn entropy_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(12) {
        let v = 17;
        let z: Vec<Vec<Vec<f64>>> = (0..b)
            .map(|_| {
                (0..t)
                    .map(|_| (0..v).map(|_| 3.0 * rng.normal()).collect())
                    .collect()
            })
            .collect();
        let flat: Vec<f64> = z.iter().flatten().flatten().copied().collect();
        let zt = Tensor::from_slice(&flat).view([b as i64, t as i64, v as i64]);
        let want: Rows = z
            .iter()
            .map(|r| r.iter().map(|z| loss::entropy(z)).collect())
            .collect();
        assert_rows(
            "entropy",
            &run(&p, "entropy", vec![("z", zt.into())]),
            &want,
            None,
        );
    }
}

/// An aggregation of the oracle: per-token losses and a mask to a scalar.
type Aggregation = fn(&Rows, &MaskRows) -> f64;

#[test]
fn aggregations_match_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(13) {
        for m in [
            prefix_mask(&lengths(&mut rng, b, t), t),
            holey_mask(&mut rng, b, t),
        ] {
            let l = poison(&normal_rows(&mut rng, b, t, 1.0), &m);
            let args = || vec![("loss", t2(&l).into()), ("m", m2(&m).into())];
            let checks: [(&str, Aggregation); 4] = [
                ("token_mean", loss::token_mean),
                ("seq_mean_token_sum", loss::seq_mean_token_sum),
                ("seq_mean_token_mean", loss::seq_mean_token_mean),
                ("seq_mean_token_sum_norm", loss::seq_mean_token_sum_norm),
            ];
            for (f, oracle) in checks {
                assert_scalar(f, &run(&p, f, args()), oracle(&l, &m));
            }
            let ent = normal_rows(&mut rng, b, t, 1.0);
            let k = normal_rows(&mut rng, b, t, 0.1);
            let want = loss::token_mean(&l, &m) - 0.01 * loss::token_mean(&ent, &m)
                + 0.1 * loss::token_mean(&k, &m);
            let got = run(
                &p,
                "actor_loss",
                vec![
                    ("pg", t2(&l).into()),
                    ("ent", t2(&ent).into()),
                    ("kl", t2(&k).into()),
                    ("m", m2(&m).into()),
                    ("ent_coef", 0.01.into()),
                    ("kl_coef", 0.1.into()),
                ],
            );
            assert_scalar("actor_loss", &got, want);
        }
    }
}

#[test]
fn aggregations_of_an_all_empty_batch() {
    let p = program();
    let m = vec![vec![false; 4]; 3];
    let l = vec![vec![f64::NAN; 4]; 3];
    let args = || vec![("loss", t2(&l).into()), ("m", m2(&m).into())];
    for f in [
        "seq_mean_token_sum",
        "seq_mean_token_mean",
        "seq_mean_token_sum_norm",
    ] {
        assert_scalar(f, &run(&p, f, args()), 0.0);
    }
    // RL_MATH's token-mean `Σ m·L / Σ m` is 0/0 here; std's `+ 1e-8` makes it 0.
    assert_scalar("token_mean", &run(&p, "token_mean", args()), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Gradient

#[test]
fn ppo_token_mean_gradient_matches_the_oracle() {
    let p = program();
    for (mut rng, b, t) in cases(14) {
        let x = policy_inputs(&mut rng, b, t);
        let eps = 0.2;
        let logp = t2(&x.logp).set_requires_grad(true);
        let loss_t = Evaluator::new(&p.modules)
            .with_float(Kind::Double)
            .call(
                "ppo_token_mean",
                &[
                    ("logp", (&logp).into()),
                    ("old", t2(&x.old).into()),
                    ("adv", t2(&x.adv).into()),
                    ("m", m2(&x.m).into()),
                    ("eps", eps.into()),
                ],
            )
            .unwrap();
        let per = ppo_rows(&x, eps, eps, 3.0);
        assert_scalar(
            "ppo_token_mean",
            &loss_t,
            loss::token_mean(&field(&per, |p| p.loss), &x.m),
        );
        loss_t.backward();
        let n: f64 = x.m.iter().flatten().filter(|b| **b).count() as f64;
        let want: Rows = per
            .iter()
            .zip(&x.m)
            .map(|(r, m)| {
                r.iter()
                    .zip(m)
                    .map(|(p, &b)| if b { p.grad / n } else { 0.0 })
                    .collect()
            })
            .collect();
        // Padded positions too: a loss's gradient must be exactly 0 there.
        assert_rows("d loss / d logp", &logp.grad(), &want, None);
    }
}

// ---------------------------------------------------------------------------------------------
// Off-policy corrections

/// Behaviour log-probs near `old` — ratios on both sides of the caps (2 and 5) — and a few far
/// off (ratios of `e^±30`).
fn behaviour(rng: &mut Rng, old: &Rows) -> Rows {
    old.iter()
        .map(|row| {
            row.iter()
                .map(|o| {
                    let wide = if rng.uniform() < 0.05 { 30.0 } else { 1.0 };
                    o + wide * rng.normal()
                })
                .collect()
        })
        .collect()
}

/// The per-token oracle of a correction at every position of `x` (the ratio taken to `x.old`).
type Correction = fn(f64, f64, f64, f64, f64, f64, f64, f64) -> off_policy::Weighted;

fn corrected_rows(
    f: Correction,
    x: &PolicyInputs,
    behav: &Rows,
    (eps_low, eps_high, c, cap): (f64, f64, f64, f64),
) -> Vec<Vec<off_policy::Weighted>> {
    (0..x.logp.len())
        .map(|i| {
            (0..x.logp[i].len())
                .map(|t| {
                    let (l, o, b, a) = (x.logp[i][t], x.old[i][t], behav[i][t], x.adv[i][t]);
                    f(l, o, b, a, eps_low, eps_high, c, cap)
                })
                .collect()
        })
        .collect()
}

fn weighted(rows: &[Vec<off_policy::Weighted>], f: impl Fn(&off_policy::Weighted) -> f64) -> Rows {
    rows.iter().map(|r| r.iter().map(&f).collect()).collect()
}

/// `ppo_clip_tis` and `decoupled_ppo_clip` (with their defaults and with every parameter
/// given), their weights, and their token means with NaN at padded positions.
#[test]
fn off_policy_corrections_match_the_oracle() {
    let p = program();
    // (function, its weight, the name of the log-probs the ratio is taken to, the oracle,
    // the default cap)
    let corrections: [(&str, &str, &str, Correction, f64); 2] = [
        (
            "ppo_clip_tis",
            "tis_weight",
            "old_logp",
            off_policy::ppo_tis,
            2.0,
        ),
        (
            "decoupled_ppo_clip",
            "decoupled_weight",
            "prox_logp",
            off_policy::decoupled_ppo,
            5.0,
        ),
    ];
    for (mut rng, b, t) in cases(17) {
        let x = policy_inputs(&mut rng, b, t);
        let behav = behaviour(&mut rng, &x.old);
        for (f, weight, to, oracle, cap) in corrections {
            let base = |old: &Rows, behav: &Rows, logp: &Rows, adv: &Rows| {
                vec![
                    ("logp", t2(logp).into()),
                    (to, t2(old).into()),
                    ("behav_logp", t2(behav).into()),
                    ("adv", t2(adv).into()),
                ]
            };
            let want = corrected_rows(oracle, &x, &behav, (0.2, 0.2, 3.0, cap));
            let got = run(&p, f, base(&x.old, &behav, &x.logp, &x.adv));
            assert_rows(f, &got, &weighted(&want, |w| w.loss), None);
            let got = run(
                &p,
                weight,
                vec![(to, t2(&x.old).into()), ("behav_logp", t2(&behav).into())],
            );
            assert_rows(weight, &got, &weighted(&want, |w| w.weight), None);
            // Both sides of a cap of 1.5 and 3.
            for cap in [1.5, 3.0] {
                let want = corrected_rows(oracle, &x, &behav, (0.1, 0.28, 2.5, cap));
                let mut args = base(&x.old, &behav, &x.logp, &x.adv);
                args.extend([
                    ("eps_low", 0.1.into()),
                    ("eps_high", 0.28.into()),
                    ("c", 2.5.into()),
                    ("cap", cap.into()),
                ]);
                let what = format!("{f} (cap {cap})");
                assert_rows(&what, &run(&p, f, args), &weighted(&want, |w| w.loss), None);
                let got = run(
                    &p,
                    weight,
                    vec![
                        (to, t2(&x.old).into()),
                        ("behav_logp", t2(&behav).into()),
                        ("cap", cap.into()),
                    ],
                );
                let what = format!("{weight} (cap {cap})");
                assert_rows(&what, &got, &weighted(&want, |w| w.weight), None);
            }
            // NaN at padded positions: the per-token loss is compared under the mask, and its
            // token mean does not see them.
            let poisoned = base(
                &poison(&x.old, &x.m),
                &poison(&behav, &x.m),
                &poison(&x.logp, &x.m),
                &poison(&x.adv, &x.m),
            );
            let per = weighted(&want, |w| w.loss);
            assert_rows(f, &run(&p, f, poisoned), &per, Some(&x.m));
            let (mean_of, to) = match f {
                "ppo_clip_tis" => ("tis_token_mean", "old"),
                _ => ("decoupled_token_mean", "prox"),
            };
            let got = run(
                &p,
                mean_of,
                vec![
                    ("logp", t2(&poison(&x.logp, &x.m)).into()),
                    (to, t2(&poison(&x.old, &x.m)).into()),
                    ("behav", t2(&poison(&behav, &x.m)).into()),
                    ("adv", t2(&poison(&x.adv, &x.m)).into()),
                    ("m", m2(&x.m).into()),
                    ("cap", cap.into()),
                ],
            );
            assert_scalar(mean_of, &got, loss::token_mean(&per, &x.m));
        }
    }
}

/// The weights exactly at the cap (a ratio of exactly 1 and a cap of 1): TIS keeps 1, decoupled
/// PPO keeps the token (`w ≤ cap`); a hair above the cap TIS truncates to the cap and decoupled
/// PPO drops the token; with the behaviour policy equal to the old one TIS is plain PPO.
#[test]
fn off_policy_weights_at_the_cap() {
    let p = program();
    let old = vec![vec![-1.25, -0.5, -2.0, 0.0]];
    let behav = vec![vec![-1.25, -0.5 - 1e-9, -1.5, 0.0]];
    let cap = 1.0;
    let exp_half = (-0.5f64).exp();
    let args = |to: &'static str| {
        vec![
            (to, t2(&old).into()),
            ("behav_logp", t2(&behav).into()),
            ("cap", cap.into()),
        ]
    };
    let want_tis = vec![vec![1.0, 1.0, exp_half, 1.0]];
    let want_decoupled = vec![vec![1.0, 0.0, exp_half, 1.0]];
    for (i, &w) in want_tis[0].iter().enumerate() {
        assert_eq!(off_policy::tis_weight(old[0][i], behav[0][i], cap), w);
    }
    for (i, &w) in want_decoupled[0].iter().enumerate() {
        assert_eq!(off_policy::decoupled_weight(old[0][i], behav[0][i], cap), w);
    }
    // Exact where the ratio is 1 or a hair above it; `e^−0.5` within rounding.
    for (weight, to, want) in [
        ("tis_weight", "old_logp", &want_tis),
        ("decoupled_weight", "prox_logp", &want_decoupled),
    ] {
        let got = run(&p, weight, args(to));
        let rows = Vec::<Vec<f64>>::try_from(&got).unwrap();
        for i in [0, 1, 3] {
            assert_eq!(rows[0][i], want[0][i], "{weight}[0, {i}] at the cap");
        }
        assert_rows(weight, &got, want, None);
    }

    let mut rng = Rng::new(43);
    let x = policy_inputs(&mut rng, 9, 13);
    let plain = run(
        &p,
        "ppo_clip_range",
        vec![
            ("logp", t2(&x.logp).into()),
            ("old_logp", t2(&x.old).into()),
            ("adv", t2(&x.adv).into()),
        ],
    );
    let tis = run(
        &p,
        "ppo_clip_tis",
        vec![
            ("logp", t2(&x.logp).into()),
            ("old_logp", t2(&x.old).into()),
            ("behav_logp", t2(&x.old).into()),
            ("adv", t2(&x.adv).into()),
        ],
    );
    assert!(
        tis.equal(&plain),
        "ppo_clip_tis with behav_logp = old_logp is not ppo_clip_range"
    );
}

/// The gradient of the token-mean corrected losses: the weight times PPO's gradient on real
/// tokens, 0 at padded ones, and none through the weight (`d/d behav_logp = 0`).
#[test]
fn off_policy_token_mean_gradients_match_the_oracle() {
    let p = program();
    let losses: [(&str, &str, Correction); 2] = [
        ("tis_token_mean", "old", off_policy::ppo_tis),
        ("decoupled_token_mean", "prox", off_policy::decoupled_ppo),
    ];
    for (mut rng, b, t) in cases(18) {
        let x = policy_inputs(&mut rng, b, t);
        let behav = behaviour(&mut rng, &x.old);
        for (f, to, oracle) in losses {
            let cap = 2.0;
            let logp = t2(&x.logp).set_requires_grad(true);
            let behav_t = t2(&behav).set_requires_grad(true);
            let loss_t = Evaluator::new(&p.modules)
                .with_float(Kind::Double)
                .call(
                    f,
                    &[
                        ("logp", (&logp).into()),
                        (to, t2(&x.old).into()),
                        ("behav", (&behav_t).into()),
                        ("adv", t2(&x.adv).into()),
                        ("m", m2(&x.m).into()),
                        ("cap", cap.into()),
                    ],
                )
                .unwrap();
            let per = corrected_rows(oracle, &x, &behav, (0.2, 0.2, 3.0, cap));
            let want = loss::token_mean(&weighted(&per, |w| w.loss), &x.m);
            assert_scalar(f, &loss_t, want);
            if !loss_t.requires_grad() {
                // Every real token's weight or PPO gradient is 0 (or there is none).
                assert!(
                    per.iter().flatten().all(|w| w.grad == 0.0),
                    "{f}: no gradient"
                );
                continue;
            }
            loss_t.backward();
            let n: f64 = x.m.iter().flatten().filter(|b| **b).count() as f64;
            let want: Rows = per
                .iter()
                .zip(&x.m)
                .map(|(r, m)| {
                    r.iter()
                        .zip(m)
                        .map(|(w, &b)| if b { w.grad / n } else { 0.0 })
                        .collect()
                })
                .collect();
            assert_rows(&format!("d {f} / d logp"), &logp.grad(), &want, None);
            let g = behav_t.grad();
            if g.defined() {
                let zero = vec![vec![0.0; t]; b];
                assert_rows(&format!("d {f} / d behav"), &g, &zero, None);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Single precision

/// The evaluator's default (f32 inputs, f32 casts): the same numbers within f32's precision.
#[test]
fn f32_evaluation_agrees_with_the_oracle() {
    let p = program();
    let f32_rows = |x: &Rows| t2(x).to_kind(Kind::Float);
    let near = |what: &str, got: f64, want: f64| {
        assert!(
            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
            "{what}: expected {want}, got {got}"
        );
    };
    for (mut rng, b, t) in cases(16) {
        let x = policy_inputs(&mut rng, b, t);
        let got = Evaluator::new(&p.modules)
            .call(
                "ppo_token_mean",
                &[
                    ("logp", f32_rows(&x.logp).into()),
                    ("old", f32_rows(&x.old).into()),
                    ("adv", f32_rows(&x.adv).into()),
                    ("m", m2(&x.m).into()),
                    ("eps", 0.2.into()),
                ],
            )
            .unwrap();
        assert_eq!(got.kind(), Kind::Float);
        let per = ppo_rows(&x, 0.2, 0.2, 3.0);
        let want = loss::token_mean(&field(&per, |p| p.loss), &x.m);
        near("ppo_token_mean", got.double_value(&[]), want);
        let r = normal_rows(&mut rng, b, t, 1.0);
        let v = normal_rows(&mut rng, b, t, 1.0);
        let got = Evaluator::new(&p.modules)
            .call(
                "gae",
                &[
                    ("r", f32_rows(&r).into()),
                    ("v", f32_rows(&v).into()),
                    ("m", m2(&x.m).into()),
                    ("gamma", 0.99.into()),
                    ("lam", 0.95.into()),
                ],
            )
            .unwrap();
        let got = Vec::<Vec<f64>>::try_from(&got.to_kind(Kind::Double)).unwrap();
        let want = advantage::gae(&r, &v, &x.m, 0.99, 0.95);
        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
            near("gae", *g, *w);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reward model on preference pairs

/// `pairs` pairs in shuffled rows, ids out of order and far apart, scores with exact ties and
/// margins large enough to overflow a naive `log(1 + exp(−d))`.
fn preference_case(rng: &mut Rng, pairs: usize) -> (Vec<f64>, Vec<i64>, Vec<bool>) {
    let mut rows: Vec<(f64, i64, bool)> = Vec::new();
    for k in 0..pairs {
        let id = 97 - 7 * k as i64;
        let (a, b) = match k % 4 {
            0 => (1.5, 1.5),
            1 => (800.0 * rng.normal(), 800.0 * rng.normal()),
            _ => (3.0 * rng.normal(), 3.0 * rng.normal()),
        };
        rows.push((a, id, true));
        rows.push((b, id, false));
    }
    for i in (1..rows.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        rows.swap(i, j);
    }
    (
        rows.iter().map(|r| r.0).collect(),
        rows.iter().map(|r| r.1).collect(),
        rows.iter().map(|r| r.2).collect(),
    )
}

#[test]
fn bradley_terry_and_pair_accuracy_match_the_oracle() {
    let p = program();
    let mut rng = Rng::new(41);
    for pairs in [1, 2, 5, 9] {
        let (s, g, c) = preference_case(&mut rng, pairs);
        let args = || {
            vec![
                ("s", t1(&s).into()),
                ("pair", ids(&g).into()),
                ("chosen", Tensor::from_slice(&c).into()),
            ]
        };
        assert_vec(
            "pair_margin",
            &run(&p, "pair_margin", args()),
            &preference::pair_margin(&s, &g, &c),
        );
        assert_scalar(
            "bradley_terry",
            &run(&p, "bradley_terry", args()),
            preference::bradley_terry(&s, &g, &c),
        );
        assert_scalar(
            "pair_accuracy",
            &run(&p, "pair_accuracy", args()),
            preference::pair_accuracy(&s, &g, &c),
        );
    }
}

#[test]
fn bradley_terry_of_a_tie_is_log_two_and_counts_as_wrong() {
    let p = program();
    let args = || {
        vec![
            ("s", t1(&[0.25, 0.25]).into()),
            ("pair", ids(&[3, 3]).into()),
            ("chosen", Tensor::from_slice(&[false, true]).into()),
        ]
    };
    assert_scalar(
        "bradley_terry",
        &run(&p, "bradley_terry", args()),
        std::f64::consts::LN_2,
    );
    assert_scalar("pair_accuracy", &run(&p, "pair_accuracy", args()), 0.0);
}
