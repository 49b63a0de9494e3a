"""A training-like driver for RayJob experiments: N steps of small Ray tasks, each step's
completion reported by the driver itself.

Why: a RayJob's fate can be read three ways — the RayJob's status, the Jobs API, and the
driver's own progress — and they disagree after head failovers in the field (kuberay#3903,
ray#65025). This driver is the third reading: after every step it prints
``RAYCHAOS_PROGRESS {"step": i, "of": N, "ts": ...}`` and, when the last step is done,
``RAYCHAOS_PROGRESS {"step": N, "of": N, "done": true}`` just before it exits 0. It also prints
one ``RAYCHAOS_STATS`` line per second (``_stats.py``), so it is an ordinary load as well.

    python train_steps.py --steps 60 --step-s 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from _stats import SecondStats  # noqa: E402

PROGRESS = "RAYCHAOS_PROGRESS "


@ray.remote(num_cpus=0.01, max_retries=10)
def shard(step: int, i: int) -> int:
    return step * 1000 + i


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--step-s", type=float, default=1.0, help="pace: seconds per step")
    ap.add_argument("--shards", type=int, default=4, help="tasks per step")
    ap.add_argument("--name", default="train_steps")
    args = ap.parse_args(argv)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    stats = SecondStats(args.name)
    for step in range(1, args.steps + 1):
        t0 = time.monotonic()
        ray.get([shard.remote(step, i) for i in range(args.shards)])
        stats.ok(time.monotonic() - t0)
        print(PROGRESS + json.dumps({"step": step, "of": args.steps, "ts": time.time(),
                                     **({"done": True} if step == args.steps else {})}),
              flush=True)
        time.sleep(max(0.0, args.step_s - (time.monotonic() - t0)))
        stats.tick()
    return 0


if __name__ == "__main__":
    sys.exit(main())
