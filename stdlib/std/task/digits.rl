//! `std.task.digits`: synthetic digit tasks with rule-based rewards, small enough to train
//! on a CPU. Each is a `Dataset`: `reverse.sample(n)` draws `n` prompts, `reverse.vocab` is
//! the vocabulary size a policy needs, `reverse.score(rollout)` the rule-based reward, and
//! a rollout's `target` field holds the expected answer.

/// Reverse a string of 6 digits: `123456` → `654321`.
pub dataset reverse = task(kind: "reverse_digits", digits: 6)

/// Add two numbers of 6 digits each; the answer has up to 7 digits.
pub dataset add = task(kind: "add_numbers", digits: 6)

/// Sort a string of 6 digits in increasing order: `315264` → `123456`.
pub dataset sort = task(kind: "sort_digits", digits: 6)

/// The reversal task with strings of `digits` digits.
pub fn reverse_task(digits = 6) -> Dataset {
  task(kind: "reverse_digits", digits: digits)
}

/// The addition task with operands of `digits` digits.
pub fn add_task(digits = 6) -> Dataset {
  task(kind: "add_numbers", digits: digits)
}

/// The sorting task with strings of `digits` digits.
pub fn sort_task(digits = 6) -> Dataset {
  task(kind: "sort_digits", digits: digits)
}

/// Addition with a calculator tool: the addition task's prompts and answers (`1234+5678=` →
/// `6912`), for a policy that calls a tool through an `environment` (`examples/envs/calc.py`
/// answers the turn `1234+5678` with `=6912`). Its `demonstrations(n)` show the whole episode
/// as one sequence: the call and its end (`1234+5678$`), the tool's reply (`=6912`, masked out of
/// the loss: it is read, not written) and the answer copied from it (`6912$`) — the tokens a
/// multi-turn rollout holds, in the order the policy sees them.
pub fn add_with_tool_task(digits = 4) -> Dataset {
  task(kind: "add_with_tool", digits: digits)
}
