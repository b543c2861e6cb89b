"""Reads a run folder's event files with TensorBoard's own reader and checks that they hold
exactly the run's metrics.jsonl.

    PYTHONPATH=$(scripts/setup-tensorboard.sh) python3 runtime/tests/tensorboard_read.py RUN_DIR

For each line of metrics.jsonl, every key but `step` must be a scalar of that tag at that step,
equal to the value as a 32-bit float (TensorBoard's scalar type; NaN for `null`), with the
run's elapsed seconds (the sum of `seconds` so far) as its wall time; no other tags, steps or
values; the first event declares `brain.Event:2`. Prints one `ok` line, or fails with the
first difference and exit 1 (the runtime's tests/tensorboard.rs runs it).
"""

import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator


def f32(value):
    """`value` (a JSON number or None) as the nearest 32-bit float; NaN for None."""
    if value is None:
        return math.nan
    return struct.unpack("<f", struct.pack("<f", value))[0]


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def main(run):
    # The folder, not the file: TensorBoard must find the event file by its name.
    accumulator = event_accumulator.EventAccumulator(
        run, size_guidance={event_accumulator.SCALARS: 0}
    )
    accumulator.Reload()
    if accumulator.file_version != 2.0:
        sys.exit(f"file_version {accumulator.file_version!r}, not brain.Event:2")

    expected = {}  # tag -> [(step, wall time, value)]
    elapsed = 0.0
    lines = 0
    with open(os.path.join(run, "metrics.jsonl"), encoding="utf-8") as metrics:
        for line in metrics:
            row = json.loads(line)
            step = row.pop("step")
            seconds = row.get("seconds")
            if seconds is not None:
                elapsed += seconds
            for tag, value in row.items():
                expected.setdefault(tag, []).append((step, elapsed, f32(value)))
            lines += 1

    tags = accumulator.Tags()["scalars"]
    if sorted(tags) != sorted(expected):
        sys.exit(f"tags {sorted(tags)} != metrics.jsonl's {sorted(expected)}")
    for tag, want in expected.items():
        got = [(e.step, e.wall_time, e.value) for e in accumulator.Scalars(tag)]
        if len(got) != len(want):
            sys.exit(f"{tag}: {len(got)} events, metrics.jsonl has {len(want)} steps")
        for (step, wall, value), (want_step, want_wall, want_value) in zip(got, want):
            if step != want_step or not same(value, want_value):
                sys.exit(f"{tag}: step {step} = {value}, metrics.jsonl: step {want_step} = {want_value}")
            if abs(wall - want_wall) > 1e-9 * max(1.0, want_wall):
                sys.exit(f"{tag} at step {step}: wall time {wall}, elapsed {want_wall}")
    print(f"ok: {lines} steps, {len(tags)} tags read back by TensorBoard")


if __name__ == "__main__":
    main(sys.argv[1])
