//! Choosing the next token from logits: greedy, or temperature / top-k / top-p sampling by the
//! inverse CDF of one uniform number per row, drawn from the counter-based stream of
//! [`super::philox`].

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::philox;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingConfig {
    /// 0 means greedy (arg-max); otherwise logits are divided by it before the softmax.
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (ties with the k-th are kept too).
    pub top_k: Option<i64>,
    /// Keep the most likely tokens whose total probability first reaches `p` (nucleus sampling).
    pub top_p: Option<f64>,
}

impl SamplingConfig {
    /// Sampling from the whole softmax at `temperature` (no top-k or top-p cut).
    pub const fn at_temperature(temperature: f64) -> Self {
        Self {
            temperature,
            top_k: None,
            top_p: None,
        }
    }

    pub const GREEDY: SamplingConfig = SamplingConfig::at_temperature(0.0);

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// One token per row of `logits` (`[B, V]`), as int64 `[B]`: the rows are rows
/// `first_row..first_row + B` of stream `seed`'s batch, choosing their token at response position
/// `position` ([`philox::uniforms`], computed where the logits are).
pub fn next_tokens(
    logits: &Tensor,
    sampling: &SamplingConfig,
    seed: u64,
    first_row: i64,
    position: i64,
) -> Tensor {
    if sampling.is_greedy() {
        return logits.argmax(-1, false);
    }
    let rows = first_row..first_row + logits.size()[0];
    let uniforms = philox::uniforms(seed, rows, position..position + 1, logits.device());
    next_tokens_from(logits, sampling, &uniforms.squeeze_dim(1))
}

/// [`next_tokens`] with the rows' uniform numbers in [0, 1) given (`[B]` float64, best on the
/// logits' device): the token is the first whose cumulative probability exceeds `u`.
pub fn next_tokens_from(logits: &Tensor, sampling: &SamplingConfig, uniforms: &Tensor) -> Tensor {
    if sampling.is_greedy() {
        return logits.argmax(-1, false);
    }
    let mut scaled = logits.to_kind(Kind::Double) / sampling.temperature;
    if let Some(k) = sampling.top_k {
        let k = k.min(scaled.size()[1]);
        let kth = scaled.topk(k, -1, true, true).0.narrow(1, k - 1, 1);
        scaled = scaled.masked_fill(&scaled.lt_tensor(&kth), f64::NEG_INFINITY);
    }
    if let Some(p) = sampling.top_p {
        let (sorted, order) = scaled.sort(-1, true);
        let probs = sorted.softmax(-1, Kind::Double);
        // Drop a token when the more likely ones already reach `p`; the first is always kept.
        let mass_before = probs.cumsum(-1, Kind::Double) - &probs;
        let drop_sorted = mass_before.ge(p);
        let drop = drop_sorted.zeros_like().scatter(1, &order, &drop_sorted);
        scaled = scaled.masked_fill(&drop, f64::NEG_INFINITY);
    }
    let cdf = scaled.softmax(-1, Kind::Double).cumsum(-1, Kind::Double);
    let rows = cdf.size()[0];
    let vocab = cdf.size()[1];
    // Inverse-CDF sampling: the first token whose cumulative probability exceeds u.
    debug_assert_eq!(uniforms.size(), [rows]);
    let u = uniforms.to_device(cdf.device()).unsqueeze(1) * cdf.narrow(1, vocab - 1, 1);
    cdf.le_tensor(&u)
        .sum_dim_intlist(-1, false, Kind::Int64)
        .clamp_max(vocab - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empirical frequency of each token over `rows` draws from the same logits.
    fn frequencies(probs: &[f64], sampling: &SamplingConfig, rows: i64, seed: u64) -> Vec<f64> {
        let logits = Tensor::from_slice(probs)
            .log()
            .to_kind(Kind::Float)
            .unsqueeze(0)
            .repeat([rows, 1]);
        let tokens = next_tokens(&logits, sampling, seed, 0, 0);
        let counts = tokens.bincount(None::<Tensor>, probs.len() as i64);
        Vec::<f64>::try_from(counts.to_kind(Kind::Double) / rows as f64).unwrap()
    }

    fn assert_close(got: &[f64], expected: &[f64], tolerance: f64) {
        for (i, (g, e)) in got.iter().zip(expected).enumerate() {
            assert!(
                (g - e).abs() <= tolerance,
                "token {i}: {g} vs {e} (all: {got:?})"
            );
        }
    }

    #[test]
    fn samples_follow_the_softmax() {
        let sampling = SamplingConfig::at_temperature(1.0);
        let probs = [0.1, 0.4, 0.2, 0.3];
        assert_close(&frequencies(&probs, &sampling, 20_000, 1), &probs, 0.015);
    }

    #[test]
    fn temperature_sharpens() {
        let sampling = SamplingConfig::at_temperature(0.5);
        // p^(1/0.5) renormalised.
        let expected = [1.0 / 30.0, 16.0 / 30.0, 4.0 / 30.0, 9.0 / 30.0];
        assert_close(
            &frequencies(&[0.1, 0.4, 0.2, 0.3], &sampling, 20_000, 2),
            &expected,
            0.015,
        );
    }

    #[test]
    fn top_k_and_top_p_renormalise_over_the_kept_tokens() {
        let probs = [0.1, 0.4, 0.2, 0.3];
        let top_2 = SamplingConfig {
            temperature: 1.0,
            top_k: Some(2),
            top_p: None,
        };
        assert_close(
            &frequencies(&probs, &top_2, 20_000, 3),
            &[0.0, 4.0 / 7.0, 0.0, 3.0 / 7.0],
            0.015,
        );
        // 0.4 + 0.3 reaches 0.65, so the nucleus is {1, 3}; at 0.75 it takes token 2 as well.
        let nucleus = SamplingConfig {
            temperature: 1.0,
            top_k: None,
            top_p: Some(0.65),
        };
        assert_close(
            &frequencies(&probs, &nucleus, 20_000, 4),
            &[0.0, 4.0 / 7.0, 0.0, 3.0 / 7.0],
            0.015,
        );
        let wider = SamplingConfig {
            temperature: 1.0,
            top_k: None,
            top_p: Some(0.75),
        };
        assert_close(
            &frequencies(&probs, &wider, 20_000, 5),
            &[0.0, 4.0 / 9.0, 2.0 / 9.0, 3.0 / 9.0],
            0.015,
        );
    }

    #[test]
    fn the_token_is_the_first_whose_cumulative_probability_exceeds_u() {
        let sampling = SamplingConfig::at_temperature(1.0);
        // Cumulative probabilities 0.1, 0.5, 0.7, 1.0.
        let logits = Tensor::from_slice(&[0.1f64, 0.4, 0.2, 0.3])
            .log()
            .unsqueeze(0)
            .repeat([6, 1]);
        let u = Tensor::from_slice(&[0.0, 0.09, 0.11, 0.49, 0.69, 0.999]);
        let tokens = next_tokens_from(&logits, &sampling, &u);
        assert_eq!(Vec::<i64>::try_from(&tokens).unwrap(), [0, 0, 1, 1, 2, 3]);
    }

    #[test]
    fn a_slice_of_rows_samples_what_the_whole_batch_does() {
        let sampling = SamplingConfig::at_temperature(1.0);
        let logits = Tensor::from_slice(&[0.1f64, 0.4, 0.2, 0.3])
            .log()
            .unsqueeze(0)
            .repeat([40, 1]);
        let whole = next_tokens(&logits, &sampling, 9, 0, 3);
        let part = next_tokens(&logits.narrow(0, 10, 20), &sampling, 9, 10, 3);
        assert!(part.equal(&whole.narrow(0, 10, 20)));
        // Another position of the same rows draws other numbers.
        assert!(!next_tokens(&logits, &sampling, 9, 0, 4).equal(&whole));
    }

    #[test]
    fn greedy_and_top_1_pick_the_arg_max() {
        let logits = Tensor::from_slice(&[0.3f32, 2.0, -1.0, 1.9, 5.0, 0.0]).view([2, 3]);
        let greedy = next_tokens(&logits, &SamplingConfig::GREEDY, 0, 0, 0);
        let top_1 = SamplingConfig {
            temperature: 0.7,
            top_k: Some(1),
            top_p: None,
        };
        let sampled = next_tokens(&logits, &top_1, 0, 0, 0);
        assert_eq!(Vec::<i64>::try_from(&greedy).unwrap(), [1, 1]);
        assert!(sampled.equal(&greedy));
    }
}
