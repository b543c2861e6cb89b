#!/usr/bin/env bash
# Asynchronous against synchronous generation (not run in CI; issue #25): examples/grpo_async.rl
# (generation and the reference on one CPU, training on the other, `staleness: 1`), the same
# job with `staleness: 0`, with `staleness: 2`, and with `staleness: 2, pause_at: 3` (partial
# rollouts: tokens from the fourth on sampled by the next weights, one update old instead of
# two), on the same placement, alternately, ROUNDS times each, STEPS steps a run. Prints, per run and as medians: the median step, samples per second (responses of a step
# over the median step), the share of the synchronous step the rollout side takes (generation
# and the reference's forward pass, on their own device), the steps and seconds until the
# rolling mean reward of 10 steps first reaches 0.8, and the ratio of throughputs. Results in
# runs/async-bench/.
#
#     bash scripts/async-bench.sh [STEPS [ROUNDS]]      # defaults: 200 steps, 2 rounds
set -euo pipefail
cd "$(dirname "$0")/.."
LIBTORCH="$(bash scripts/build-runtime.sh)"
export LIBTORCH
out=runs/async-bench
mkdir -p "$out"
exec python3 - "$out" "${1:-200}" "${2:-2}" <<'PY'
import json, os, statistics, subprocess, sys, time
from pathlib import Path

out, steps, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
source = Path("examples/grpo_async.rl").read_text()
assert ", staleness: 1)" in source, "examples/grpo_async.rl no longer says `staleness: 1`"
jobs = {
    "staleness 1": source,
    "staleness 0": source.replace(", staleness: 1)", ")"),
    "staleness 2": source.replace(", staleness: 1)", ", staleness: 2)"),
    "staleness 2, pause_at 3": source.replace(", staleness: 1)", ", staleness: 2, pause_at: 3)"),
}
names = ["staleness 0", "staleness 1", "staleness 2", "staleness 2, pause_at 3"]
def file_of(name):
    return name.replace(",", "").replace(" ", "_")

for name, text in jobs.items():
    (out / f"{file_of(name)}.rl").write_text(text)

def load():
    return os.getloadavg()[0]

def run(name, k):
    folder = out / f"{file_of(name)}-{k}"
    cmd = ["target/release/rlc", "run", str(out / f"{file_of(name)}.rl"),
           "--out", str(folder), "--seed", "0", "--stop-after", str(steps)]
    before, start = load(), time.monotonic()
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    rows = [json.loads(l) for l in open(folder / "metrics.jsonl")]
    body = rows[1:]  # step 0 warms up
    step = statistics.median(r["seconds"] for r in body)
    rollout = statistics.median(r.get("time/generate", 0) + r.get("time/forward", 0) for r in body)
    rewards = [r["reward"] for r in rows]
    hit = next((i + 1 for i in range(9, len(rewards))
                if sum(rewards[i - 9:i + 1]) / 10 >= 0.8), None)
    secs = sum(r["seconds"] for r in rows[:hit]) if hit else None
    samples = 16 * 16
    return dict(name=name, step=step, rate=samples / step, rollout=rollout, hit=hit, secs=secs,
                wall=wall, load=(before + load()) / 2,
                versions=[r["version"] for r in rows[:4]],
                version_lag=statistics.mean(r["step"] - r["version"] for r in body))

results = []
for k in range(rounds):
    for name in names:
        r = run(name, k)
        results.append(r)
        hit = f"step {r['hit']} ({r['secs']:.1f} s)" if r["hit"] else f"not within {steps}"
        print(f"{name}, round {k + 1}: median step {r['step'] * 1e3:.1f} ms, "
              f"{r['rate']:.0f} samples/s, rollout side {r['rollout'] * 1e3:.1f} ms, "
              f"0.8 at {hit}, wall {r['wall']:.1f} s, load {r['load']:.1f}, "
              f"versions of steps 0-3 {r['versions']}", flush=True)

def med(name, key):
    values = [r[key] for r in results if r["name"] == name and r[key] is not None]
    return statistics.median(values) if values else None

sync_step, async_step = med("staleness 0", "step"), med("staleness 1", "step")
print()
print("| | median step | samples/s | rollout side (share of the synchronous step) | mean step − version | rolling-10 ≥ 0.8 |")
print("|---|---|---|---|---|---|")
for name in names:
    hit, secs = med(name, "hit"), med(name, "secs")
    reach = f"step {hit:.0f} ({secs:.1f} s)" if hit else f"not within {steps}"
    share = med(name, "rollout") / sync_step * 100
    print(f"| {name} | {med(name, 'step') * 1e3:.1f} ms | {med(name, 'rate'):.0f} | "
          f"{med(name, 'rollout') * 1e3:.1f} ms ({share:.0f} %) | {med(name, 'version_lag'):.2f} | {reach} |")
print(f"\nthroughput, staleness 1 / staleness 0: {sync_step / async_step:.2f}x")
for name in names[2:]:
    print(f"throughput, {name} / staleness 0: {sync_step / med(name, 'step'):.2f}x")
PY
