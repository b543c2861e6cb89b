"""Partial credit for std's digit tasks: the fraction of the answer's positions the response
got right (what `exact` in examples/grpo_digits.rl computes on token ids, here on the decoded
text), and the metric `solved` (1.0 when every position is right).

Declared in examples/grpo_verifier.rl as

    verifier digits = program("python3", "verifiers/digits.py", fields: ["answer"],
                              metrics: ["solved"])
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import rlc_verifier  # noqa: E402


def score(item):
    answer = item["fields"]["answer"].strip()
    response = item["response"].strip()
    right = sum(1 for a, r in zip(answer, response) if a == r)
    return {
        "reward": right / len(answer) if answer else 0.0,
        "metrics": {"solved": 1.0 if response == answer else 0.0},
    }


if __name__ == "__main__":
    rlc_verifier.serve(score)
