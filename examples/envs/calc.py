"""Example environment: a calculator tool.

Declared in a program as

    environment calc = program("python3", "envs/calc.py", fields: ["answer"])

and used through `policy.generate(prompts, …, env: calc, max_turns: 2, max_obs: 6)`. After each
turn it reads the turn's text:

- a **call** — `C12*34;` (any text around it; `+`, `-` or `*` between two whole numbers) — is
  answered with the observation `=<result>` (`=408`), reward 0, and the episode goes on; in the
  task alphabet (digits, `+`, `=`), where `C` and `;` cannot be written, a turn that is exactly
  `<digits>+<digits>` is a call too, answered with the sum in one digit more than the longer
  operand (`12+34` → `=046`, as a column adder writes it: the answer's digits stand at the same
  places whatever the carry);
- anything else is the **final answer**: its digits, read as a number, are compared with the
  row's `answer` (reward 1.0 when equal, else 0.0) and the episode is done.

A call on the last turn gets no observation (none follows the last turn) and reward 0.
"""

import os
import re
import sys

# The helper ships in the repository's python/ folder; installed elsewhere, put it on
# PYTHONPATH instead.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import rlc_env  # noqa: E402

CALL = re.compile(r"C\s*(\d+)\s*([-+*])\s*(\d+)\s*;")
BARE = re.compile(r"^(\d+)\+(\d+)$")
# Numbers this large are not arithmetic a tool call should do (and their text would not fit).
LIMIT = 10**18


def evaluate(a, op, b):
    a, b = int(a), int(b)
    if a > LIMIT or b > LIMIT:
        raise ValueError("operands too large")
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def step(item):
    text = item["response"].strip()
    call = CALL.search(text)
    if call:
        return {"observation": f"={evaluate(*call.groups())}", "reward": 0.0}
    bare = BARE.match(text)
    if bare:
        a, b = bare.groups()
        width = max(len(a), len(b)) + 1
        return {"observation": f"={evaluate(a, '+', b):0{width}d}", "reward": 0.0}
    digits = "".join(ch for ch in text if ch.isdigit())
    answer = item["fields"]["answer"].strip()
    # As numbers: a task's answer has a fixed width (`0912`), the tool writes `=912`.
    right = digits.isdigit() and answer.isdigit() and int(digits) == int(answer)
    return {"reward": 1.0 if right else 0.0, "done": True}


if __name__ == "__main__":
    rlc_env.serve(step)
