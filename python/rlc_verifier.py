"""rlc_verifier: write an rlc verifier in Python (no dependencies beyond the standard library).

A verifier is a long-lived program that reads requests from stdin and writes one response per
request to stdout, one JSON object per line (docs/verifiers.md). This module does the protocol;
you write the scoring:

    import rlc_verifier

    def score(item):
        # item: {"prompt": str, "response": str, "prompt_ids": [int], "response_ids": [int],
        #        "fields": {"answer": str, ...}}
        return 1.0 if item["response"].strip() == item["fields"]["answer"] else 0.0

    rlc_verifier.serve(score)

`score` returns a number (the reward) or a dict `{"reward": float, "metrics": {name: float}}`.
An exception inside `score` fails that item alone (its result is an error naming the item and
the exception); the other items of the request keep their scores. A reward or metric that is
not a finite number is an error of the item too. Print debugging output to stderr: stdout
carries the protocol (rlc shows the last lines of a worker's stderr in its errors).
"""

import json
import math
import sys
import traceback

__all__ = ["serve", "score_request", "serve_requests", "answer_items", "item_error"]


def _number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is {type(value).__name__}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} is {value}, not a finite number")
    return value


def _result(index, item, score):
    try:
        out = score(item)
        if isinstance(out, dict):
            reward = _number(out.get("reward"), "the reward")
            metrics = {
                str(name): _number(value, f"metric `{name}`")
                for name, value in (out.get("metrics") or {}).items()
            }
            return {"reward": reward, "metrics": metrics}
        return {"reward": _number(out, "the reward"), "metrics": {}}
    except Exception as e:  # one item's failure is that item's error
        return item_error(index, e)


def item_error(index, e):
    """The result of item `index` whose answer raised `e`: an error naming the item, the
    exception and where it was raised."""
    last = traceback.extract_tb(e.__traceback__)[-1:]
    where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
    return {"error": f"item {index}: {type(e).__name__}: {e}{where}"}


def answer_items(request, result):
    """The response object to one request object (a dict): `result(index, item)` of each item."""
    rid = request.get("id")
    items = request.get("items")
    if not isinstance(items, list):
        return {"id": rid, "error": "the request has no `items` list"}
    return {"id": rid, "results": [result(i, item) for i, item in enumerate(items)]}


def score_request(request, score):
    """The response object to one request object (a dict), scoring each item with `score`."""
    return answer_items(request, lambda i, item: _result(i, item, score))


def serve(score, stdin=None, stdout=None):
    """Answers requests from `stdin` (default sys.stdin) on `stdout` until stdin closes."""
    serve_requests(lambda request: score_request(request, score), stdin, stdout)


def serve_requests(respond, stdin=None, stdout=None):
    """Answers each request line of `stdin` with the line of `respond(request)` on `stdout`,
    until stdin closes (the JSON Lines transport verifiers and environments share)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as e:
            # Without an id rlc cannot match it; it reports the mismatch with this message.
            response = {"id": None, "error": f"the request is not JSON: {e}"}
        else:
            response = respond(request)
        stdout.write(json.dumps(response, allow_nan=False) + "\n")
        stdout.flush()


if __name__ == "__main__":
    sys.exit("rlc_verifier is a module: import it and call serve(score) (docs/verifiers.md)")
