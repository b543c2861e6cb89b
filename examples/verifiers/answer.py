"""Example verifier: reward 1.0 when the response's digits equal the row's `answer`.

Declared in a program as

    verifier answer = program("python3", "verifiers/answer.py",
                              fields: ["answer"], metrics: ["format"])

(paths relative to the program's root file; this file sits next to the examples). The metric
`format` is 1.0 when the response is digits only (no stray characters), else 0.0.
"""

import os
import sys

# The helper ships in the repository's python/ folder; installed elsewhere, put it on
# PYTHONPATH instead.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import rlc_verifier  # noqa: E402


def score(item):
    response = item["response"].strip()
    digits = "".join(ch for ch in response if ch.isdigit())
    answer = item["fields"]["answer"].strip()
    return {
        "reward": 1.0 if digits and digits == answer else 0.0,
        "metrics": {"format": 1.0 if response and response.isdigit() else 0.0},
    }


if __name__ == "__main__":
    rlc_verifier.serve(score)
