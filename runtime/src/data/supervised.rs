//! Supervised data from a task: demonstrations (a prompt and its answer) and preference pairs
//! (the answer, chosen, against a corrupted one, rejected), drawn from a train or a held-out
//! test split of the task's prompts.
//!
//! The split is a property of the prompt: a prompt whose hash is 0 mod 8 is held out. Training
//! draws never see a held-out prompt and test draws see nothing else, so a test accuracy is
//! measured on prompts the model was not trained on.

use super::Sample;
use super::task::{Task, below};
use super::tokens;
use crate::rng::Rng;

/// Which part of a task's prompts a supervised batch draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

impl Split {
    /// `split: "train"` or `split: "test"` (the checker admits only these).
    pub fn parse(name: &str) -> Option<Split> {
        match name {
            "train" => Some(Split::Train),
            "test" => Some(Split::Test),
            _ => None,
        }
    }
}

/// One held-out prompt in this many.
const TEST_SHARE: u64 = 8;
/// Keeps the supervised draws' seeds apart from the prompt sampler's.
const STREAM: u64 = 0x5355_5045_5256_4953;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Whether `prompt` belongs to the held-out split (FNV-1a of its tokens).
pub fn held_out(prompt: &[i64]) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in prompt {
        h ^= t as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(TEST_SHARE)
}

/// Item `index` of the split's stream keyed by `seed`: a pure function of the three, so data
/// ranks draw their share of a batch independently. Prompts of the other split are skipped by
/// drawing again.
pub fn draw(task: &Task, seed: u64, index: u64, split: Split) -> (Sample, Rng) {
    let key = Rng::new(seed ^ STREAM).next_u64() ^ if split == Split::Test { GOLDEN } else { 0 };
    let mut rng = Rng::new(key.wrapping_add(index.wrapping_mul(GOLDEN)));
    loop {
        let mut own = Rng::new(rng.next_u64());
        let sample = task.draw(&mut own);
        if held_out(&sample.prompt) == (split == Split::Test) {
            return (sample, own);
        }
    }
}

/// A wrong answer close to `target`, one of three kinds, equally likely: between one and all
/// of its digits replaced by other tokens (each number of changes equally likely); the answer
/// cut short (its EOS after fewer digits); or an answer that does not stop (its EOS replaced by
/// a digit). The last two teach a reward model what a policy's early and late stops are worth.
pub fn corrupt(target: &[i64], rng: &mut Rng) -> Vec<i64> {
    let mut out = target.to_vec();
    let digits: Vec<usize> = (0..out.len())
        .filter(|&i| (0..10).contains(&out[i]))
        .collect();
    let eos = out.iter().position(|&t| t == tokens::EOS);
    match (below(rng, 3), eos) {
        (1, Some(end)) if end > 0 => {
            let keep = below(rng, end as u64) as usize;
            out.truncate(keep);
            out.push(tokens::EOS);
            return out;
        }
        (2, Some(end)) => {
            out[end] = below(rng, 10) as i64;
            return out;
        }
        _ => {}
    }
    if digits.is_empty() {
        out.retain(|&t| t != tokens::EOS);
        out.push(0);
        return out;
    }
    let changes = 1 + below(rng, digits.len() as u64) as usize;
    let mut positions = digits;
    // A partial Fisher–Yates shuffle picks `changes` distinct positions.
    for i in 0..changes {
        let j = i + below(rng, (positions.len() - i) as u64) as usize;
        positions.swap(i, j);
    }
    // Any other token but EOS: a policy's mistakes are not all digits.
    for &p in &positions[..changes] {
        let wrong: Vec<i64> = (0..tokens::VOCAB)
            .filter(|&t| t != out[p] && t != tokens::EOS)
            .collect();
        out[p] = wrong[below(rng, wrong.len() as u64) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_are_disjoint_and_the_test_split_is_an_eighth() {
        let task = Task::new("reverse_digits", 4).unwrap();
        let mut test = 0;
        for i in 0..400 {
            let (s, _) = draw(&task, 3, i, Split::Train);
            assert!(!held_out(&s.prompt));
            let (t, _) = draw(&task, 3, i, Split::Test);
            assert!(held_out(&t.prompt));
            assert_eq!(
                draw(&task, 3, i, Split::Test).0,
                t,
                "a pure function of its index"
            );
        }
        for i in 0..4000u64 {
            let mut rng = Rng::new(i);
            if held_out(&task.draw(&mut rng).prompt) {
                test += 1;
            }
        }
        assert!((350..650).contains(&test), "{test} of 4000 held out");
    }

    #[test]
    fn a_corrupted_answer_is_wrong_in_one_of_three_ways() {
        let mut rng = Rng::new(9);
        let target = vec![4, 3, 2, 1, tokens::EOS];
        let (mut digits, mut short, mut long) = ([0; 5], 0, 0);
        for _ in 0..3000 {
            let bad = corrupt(&target, &mut rng);
            assert_ne!(bad, target);
            let stop = bad.iter().position(|&t| t == tokens::EOS);
            match stop {
                Some(4) => {
                    assert_eq!(bad.len(), 5);
                    assert!(bad[..4].iter().all(|&t| (0..tokens::VOCAB).contains(&t)));
                    let changed = bad.iter().zip(&target).filter(|(a, b)| a != b).count();
                    digits[changed] += 1;
                }
                Some(n) => {
                    assert!(n < 4 && bad.len() == n + 1 && bad[..n] == target[..n]);
                    short += 1;
                }
                None => {
                    assert!(bad.len() == 5 && bad[..4] == target[..4] && bad[4] < 10);
                    long += 1;
                }
            }
        }
        assert_eq!(digits[0], 0);
        assert!(digits[1..].iter().all(|&c| c > 150), "{digits:?}");
        assert!(short > 800 && long > 800, "{short} short, {long} long");
    }
}
