#!/usr/bin/env bash
# Benchmark of std.recipes on the main job's task (not run in CI): GRPO, RLOO and PPO (with a
# critic), each a job instantiating the recipe with the main job's model and task
# (examples/grpo_digits.rl: `reverse` of 4 digits, `tiny_gpt_abs` 2 × 64, AdamW lr 3e-3, two CPU
# ranks), run one after the other. For each: the steps and the wall time (from the start of
# `rlc run`, its start-up included) until the rolling mean reward of 10 steps first reaches 0.8,
# or "not reached" within 10 minutes (a run is stopped as soon as it gets there). Prints a table,
# with what else the machine was running. Results in runs/recipes-bench/NAME/.
#
#     bash scripts/recipes-bench.sh            # all three
#     bash scripts/recipes-bench.sh rloo ppo   # some of them
#     bash scripts/recipes-bench.sh dr_grpo dapo gspo reinforce_pp remax   # the other RL recipes
#
# Settings the bench passes beyond the recipe defaults (which follow the papers) are in JOBS
# below; docs/benchmarks.md ("Recipes") has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
LIBTORCH="$(bash scripts/build-runtime.sh)"
export LIBTORCH
out=runs/recipes-bench
mkdir -p "$out"
exec python3 - "$out" "$@" <<'PY'
import json, os, subprocess, sys, time
from pathlib import Path

out = Path(sys.argv[1])
wanted = sys.argv[2:] or ["grpo", "rloo", "ppo"]
LIMIT_S, WINDOW, GOAL = 600, 10, 0.8

HEAD = """import std.models { tiny_gpt_abs }
import std.recipes { RECIPE }
import std.task.digits { reverse_task }

dataset reverse = reverse_task(digits: 4)

cluster local = cpu(devices: 2)

model policy: CausalLM {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 7)
  optim = adamw(lr: 3e-3, warmup: 10)
}
model reference: CausalLM = frozen(policy)

place policy.train    on local[0..2] with dp(2)
place policy.generate on local[0..2] with dp(2)
place reference       on local[0..2] with dp(2)
"""
CRITIC = """model critic: ValueModel {
  arch  = tiny_gpt_abs(layers: 2, hidden: 64, heads: 4, vocab: reverse.vocab, max_len: 16)
  init  = random(seed: 8)
  optim = adamw(lr: 3e-3, warmup: 10)
}
place critic          on local[0..2] with dp(2)
"""
EXACT = """
/// The fraction of the answer's tokens the response got right.
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}
"""
# The recipe call of each job: the main job's settings where they apply (4 new tokens, 256
# responses a step in minibatches of 128, the entropy coefficient of examples/grpo_digits.rl and
# its KL coefficient for GRPO). Beyond them, tuned on this task (see docs/benchmarks.md):
# RLOO's entropy bonus is 0.01 (at 0.05 its rolling mean was 0.46 after 500 steps: its
# advantages are not divided by the group's std, so the bonus weighs more), and PPO samples 4
# responses to each of its 64 prompts (one each: 0.29 after 500 steps).
JOBS = {
    "grpo": "grpo(policy, reference, data: reverse, reward: exact, max_new: 4, kl: 0.05, entropy: 0.05)",
    "rloo": "rloo(policy, reference, data: reverse, reward: exact, max_new: 4, group: 16, minibatch: 128, entropy: 0.01)",
    "ppo": "ppo(policy, reference, critic, data: reverse, reward: exact, max_new: 4, group: 4, minibatch: 128, entropy: 0.05)",
    # The other RL recipes, run when named: the main job's entropy bonus, 256 responses a step
    # (REINFORCE++ and ReMax: 4 to each of their 64 prompts), minibatches of 128.
    "dr_grpo": "dr_grpo(policy, data: reverse, reward: exact, max_new: 4, entropy: 0.05)",
    "dapo": "dapo(policy, data: reverse, reward: exact, max_new: 8, entropy: 0.05)",
    "gspo": "gspo(policy, data: reverse, reward: exact, max_new: 4, entropy: 0.05)",
    "reinforce_pp": "reinforce_pp(policy, reference, data: reverse, reward: exact, max_new: 4, group: 4, minibatch: 128, entropy: 0.05)",
    "remax": "remax(policy, reference, data: reverse, reward: exact, max_new: 4, group: 4, minibatch: 128, entropy: 0.05)",
}


def source(name):
    call = JOBS[name]
    text = HEAD.replace("RECIPE", call[:call.index("(")])
    if "critic" in call:
        text += CRITIC
    return text + EXACT + f"\npipeline train {{\n  {call}\n}}\n"


def rewards(path):
    values = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return values
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            break  # a line being written
        values.append(float(row["reward"]))
    return values


def reached(values):
    for i in range(WINDOW, len(values) + 1):
        if sum(values[i - WINDOW:i]) / WINDOW >= GOAL:
            return i
    return None


def others():
    """The processes using at least 10% of a CPU over one second (what else the machine runs)."""
    top = subprocess.run(["top", "-b", "-n", "2", "-d", "1", "-w", "200"],
                         capture_output=True, text=True).stdout
    # The second report: the first measures since each process started.
    last = top[top.rfind("top -"):]
    busy, header = [], None
    for line in last.splitlines():
        cols = line.split()
        if cols[:1] == ["PID"]:
            header = cols
            continue
        if header and len(cols) >= len(header):
            row = dict(zip(header, cols[:len(header) - 1] + [" ".join(cols[len(header) - 1:])]))
            if row["PID"] != str(os.getpid()) and float(row["%CPU"]) >= 10.0:
                busy.append(f"{row['COMMAND']} {float(row['%CPU']):.0f}%")
    return ", ".join(busy) or "nothing"


rlc = Path("target/release/rlc").resolve()
rows = []
start = time.time()
for name in wanted:
    run = out / name
    subprocess.run(["rm", "-rf", str(run)], check=True)
    run.mkdir(parents=True)
    job = run / "job.rl"
    job.write_text(source(name))
    print(f"== {name}: {JOBS[name]}", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    busy = others()
    t0 = time.time()
    proc = subprocess.Popen([str(rlc), "run", str(job), "--out", str(run / "run")],
                            stdout=subprocess.DEVNULL, stderr=open(run / "stderr.txt", "w"))
    metrics = run / "run" / "metrics.jsonl"
    step = wall = None
    while True:
        values = rewards(metrics)
        step = reached(values)
        if step is not None:
            wall = time.time() - t0
            break
        if proc.poll() is not None or time.time() - t0 > LIMIT_S:
            break
        time.sleep(0.5)
    if proc.poll() is None:
        proc.terminate()
        proc.wait()
    elif proc.returncode != 0:
        # The run failed: say why rather than only "not reached".
        print((run / "stderr.txt").read_text()[-2000:], file=sys.stderr, flush=True)
    values = rewards(metrics)
    last = sum(values[-WINDOW:]) / min(len(values), WINDOW) if values else float("nan")
    ran = f"{len(values)} steps in {time.time() - t0:.0f} s"
    rows.append((name, step, wall, last, ran, f"{load:.1f} / {os.getloadavg()[0]:.1f}", busy))
    print(f"   {'reached at step %d, %.0f s' % (step, wall) if step else 'not reached'}"
          f" ({ran}; load {load:.1f} at start)", file=sys.stderr, flush=True)

print()
head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(start))}, tree at {head} "
      f"({'with uncommitted changes' if subprocess.run(['git', 'diff', '--quiet', 'HEAD']).returncode else 'clean'}), "
      f"{os.cpu_count()} CPUs")
print(f"| recipe | steps to a rolling-{WINDOW} mean reward ≥ {GOAL} | wall time | rolling mean at the end | run | load average at start / end | other processes at start |")
print("|---|---|---|---|---|---|---|")
for name, step, wall, last, ran, load, busy in rows:
    time_to = f"{wall:.0f} s" if step else "–"
    print(f"| `{name}` | {step or 'not reached'} | {time_to} | {last:.2f} | {ran} | {load} | {busy} |")
PY
