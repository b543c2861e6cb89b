//! The rule-based reward of the digit tasks.

use super::Sample;

/// Rule-based reward of one response against its sample, in [0, 1]: the fraction of the target's
/// positions (EOS included) at which the response has the same token.
///
/// `response` is the generated tokens after the prompt, compared position by position with
/// `sample.target`: position `k` scores when `response[k] == target[k]`. A response shorter than
/// the target misses the positions it lacks; tokens past the target's end are not looked at, so
/// padding after an EOS costs nothing — while stopping late loses the EOS position. Partial credit
/// gives a signal before whole answers come out right. A sample without a reference answer (a
/// JSONL line with no `target`) scores 0.
pub fn score(response: &[i64], sample: &Sample) -> f64 {
    let target = &sample.target;
    if target.is_empty() {
        return 0.0;
    }
    let hits = target
        .iter()
        .zip(response)
        .filter(|(want, got)| want == got)
        .count();
    hits as f64 / target.len() as f64
}
