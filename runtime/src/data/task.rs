//! The synthetic digit tasks of `std.task.digits`.

use super::tokens::{BOS, EOS, EQUALS, PLUS};
use super::{DataError, Sample};
use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Target: the digits in reverse order.
    Reverse,
    /// Target: the sum of two numbers, in decimal without leading zeros.
    Add,
    /// Target: the digits in increasing order.
    Sort,
    /// Addition with a calculator tool: the prompt and answer of `Add`; a demonstration calls
    /// the tool (`a+b$`), reads its answer (`=sum` in `digits + 1` digits, as
    /// `examples/envs/calc.py` writes it; not trained on) and copies it (`sum$`).
    AddWithTool,
}

impl TaskKind {
    /// The name `task(kind: ...)` uses.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Reverse => "reverse_digits",
            TaskKind::Add => "add_numbers",
            TaskKind::Sort => "sort_digits",
            TaskKind::AddWithTool => "add_with_tool",
        }
    }
}

/// `task(kind, digits)`: an endless supply of freshly drawn prompts with known answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    kind: TaskKind,
    digits: i64,
}

impl Task {
    pub fn new(kind: &str, digits: i64) -> Result<Task, DataError> {
        let kind = [
            TaskKind::Reverse,
            TaskKind::Add,
            TaskKind::Sort,
            TaskKind::AddWithTool,
        ]
        .into_iter()
        .find(|k| k.name() == kind)
        .ok_or_else(|| DataError::UnknownTask {
            kind: kind.to_string(),
        })?;
        if digits < 1 {
            return Err(DataError::Digits { digits });
        }
        Ok(Task { kind, digits })
    }

    pub fn kind(&self) -> TaskKind {
        self.kind
    }

    pub fn digits(&self) -> i64 {
        self.digits
    }

    /// BOS, the operand(s), `=` — the length the type checker computes.
    pub fn prompt_len(&self) -> i64 {
        match self.kind {
            TaskKind::Reverse | TaskKind::Sort => self.digits + 2,
            TaskKind::Add | TaskKind::AddWithTool => 2 * self.digits + 3,
        }
    }

    /// The longest answer, EOS included — the response length the type checker computes for
    /// `demonstrations` and `preferences`.
    pub fn answer_len(&self) -> i64 {
        match self.kind {
            TaskKind::Reverse | TaskKind::Sort => self.digits + 1,
            TaskKind::Add | TaskKind::AddWithTool => self.digits + 2,
        }
    }

    /// The longest demonstration, EOS included: the answer, or for `AddWithTool` the call
    /// (`a+b$`), the tool's answer (`=sum`) and the copied answer (`sum$`), the sum in
    /// `digits + 1` digits.
    pub fn demonstration_len(&self) -> i64 {
        match self.kind {
            TaskKind::AddWithTool => (2 * self.digits + 2) + 2 * (self.digits + 2),
            _ => self.answer_len(),
        }
    }

    /// The response a demonstration of `sample` teaches, and which of its tokens are trained
    /// on (the policy's own; a tool's answer is read, not written).
    pub fn demonstration(&self, sample: &Sample) -> (Vec<i64>, Vec<bool>) {
        match self.kind {
            TaskKind::AddWithTool => {
                // The prompt is BOS, a, `+`, b, `=`: the call is what lies between.
                let call = &sample.prompt[1..sample.prompt.len() - 1];
                // The sum in `digits + 1` digits: the calculator's column layout.
                let digits = &sample.target[..sample.target.len() - 1];
                let mut sum = vec![0; (self.digits as usize + 1).saturating_sub(digits.len())];
                sum.extend_from_slice(digits);
                let mut tokens = call.to_vec();
                tokens.push(EOS);
                let mut trained = vec![true; tokens.len()];
                tokens.push(EQUALS);
                tokens.extend_from_slice(&sum);
                trained.resize(tokens.len(), false);
                tokens.extend_from_slice(&sum);
                tokens.push(EOS);
                trained.resize(tokens.len(), true);
                (tokens, trained)
            }
            _ => (sample.target.clone(), vec![true; sample.target.len()]),
        }
    }

    /// Number of operand digits a sample draws: one string, or two numbers for addition.
    fn operand_digits(&self) -> usize {
        match self.kind {
            TaskKind::Reverse | TaskKind::Sort => self.digits as usize,
            TaskKind::Add | TaskKind::AddWithTool => 2 * self.digits as usize,
        }
    }

    /// A sample with uniformly random operands. Each digit is uniform and independent, which for
    /// addition is the same as drawing each number uniformly in [0, 10^digits) — and works for
    /// any `digits`, where an integer draw would overflow.
    pub fn draw(&self, rng: &mut Rng) -> Sample {
        let operands: Vec<i64> = (0..self.operand_digits())
            .map(|_| below(rng, 10) as i64)
            .collect();
        self.sample_for(&operands)
    }

    /// The sample for given operand digits (for addition `a` then `b`, most significant first).
    pub(super) fn sample_for(&self, operands: &[i64]) -> Sample {
        debug_assert_eq!(operands.len(), self.operand_digits());
        let mut prompt = Vec::with_capacity(self.prompt_len() as usize);
        prompt.push(BOS);
        let mut target = match self.kind {
            TaskKind::Reverse => {
                prompt.extend_from_slice(operands);
                operands.iter().rev().copied().collect()
            }
            TaskKind::Sort => {
                prompt.extend_from_slice(operands);
                let mut sorted = operands.to_vec();
                sorted.sort_unstable();
                sorted
            }
            TaskKind::Add | TaskKind::AddWithTool => {
                let (a, b) = operands.split_at(self.digits as usize);
                prompt.extend_from_slice(a);
                prompt.push(PLUS);
                prompt.extend_from_slice(b);
                add(a, b)
            }
        };
        prompt.push(EQUALS);
        target.push(EOS);
        Sample {
            prompt,
            target,
            row: None,
        }
    }
}

/// `a + b` for equal-length digit strings (most significant first), without leading zeros.
fn add(a: &[i64], b: &[i64]) -> Vec<i64> {
    let mut sum = Vec::with_capacity(a.len() + 1);
    let mut carry = 0;
    for (x, y) in a.iter().rev().zip(b.iter().rev()) {
        let s = x + y + carry;
        sum.push(s % 10);
        carry = s / 10;
    }
    sum.push(carry);
    // Keep at least one digit so 0 + 0 is "0".
    while sum.len() > 1 && sum.last() == Some(&0) {
        sum.pop();
    }
    sum.reverse();
    sum
}

/// Uniform in [0, n) by multiply-and-shift: no modulo bias worth the name (at most n / 2^64).
pub(super) fn below(rng: &mut Rng, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}
