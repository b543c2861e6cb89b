"""rlc_env: write an rlc multi-turn environment in Python (standard library only).

An environment is a long-lived program that reads requests from stdin and writes one response per
request to stdout, one JSON object per line, as a verifier does (docs/environments.md). After
each turn of an episode rlc sends the episode so far; the environment answers an observation
(appended to the context before the next turn), a reward and whether the episode is done. This
module does the protocol; you write the step:

    import rlc_env

    def step(item):
        # item: {"episode": int, "turn": int, "prompt": str, "prompt_ids": [int],
        #        "history": [{"response", "response_ids", "observation", "observation_ids"}],
        #        "response": str, "response_ids": [int], "fields": {"answer": str, ...}}
        if item["response"].startswith("C"):
            return {"observation": "=" + str(eval_call(item["response"]))}
        right = item["response"].strip() == item["fields"]["answer"]
        return {"reward": 1.0 if right else 0.0, "done": True}

    rlc_env.serve(step)

`step` returns a dict with any of `observation` (text, encoded by rlc with the dataset's
tokenizer or the task alphabet) or `observation_ids` (token ids), `reward` (a finite number,
default 0) and `done` (default False); an observation is required unless `done`. Environments are
stateless: everything an answer depends on is in the item (the whole episode so far), so any
worker may serve any turn. An exception inside `step` fails that item alone (rlc applies the
declaration's `on_error` to the episode). Print debugging output to stderr: stdout carries the
protocol.
"""

import math
import os
import sys

# The JSON Lines transport is the verifiers' (python/rlc_verifier.py, beside this file).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rlc_verifier import answer_items, item_error, serve_requests  # noqa: E402

__all__ = ["serve", "step_request"]


def _result(index, item, step):
    try:
        out = step(item)
        if not isinstance(out, dict):
            raise TypeError(f"step returned {type(out).__name__}, not a dict")
        result = {}
        if "observation" in out and "observation_ids" in out:
            raise ValueError("give `observation` or `observation_ids`, not both")
        if out.get("observation") is not None:
            result["observation"] = str(out["observation"])
        if out.get("observation_ids") is not None:
            ids = out["observation_ids"]
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise TypeError("observation_ids must be a list of integers")
            result["observation_ids"] = list(ids)
        reward = out.get("reward", 0.0)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError(f"the reward is {type(reward).__name__}, not a number")
        if not math.isfinite(float(reward)):
            raise ValueError(f"the reward is {reward}, not a finite number")
        result["reward"] = float(reward)
        result["done"] = bool(out.get("done", False))
        if not result["done"] and "observation" not in result and "observation_ids" not in result:
            raise ValueError("an episode that is not done needs an observation")
        return result
    except Exception as e:  # one item's failure is that item's error
        return item_error(index, e)


def step_request(request, step):
    """The response object to one request object (a dict), answering each item with `step`."""
    return answer_items(request, lambda i, item: _result(i, item, step))


def serve(step, stdin=None, stdout=None):
    """Answers requests from `stdin` (default sys.stdin) on `stdout` until stdin closes."""
    serve_requests(lambda request: step_request(request, step), stdin, stdout)


if __name__ == "__main__":
    sys.exit("rlc_env is a module: import it and call serve(step) (docs/environments.md)")
