"""Task storm: a steady stream of tiny Ray tasks, the control-plane load of a busy cluster.

Submits no-op tasks continuously (at ``--rate`` per second, or as fast as it can with
``--rate 0``) with a bounded number in flight, retries each task as Ray would
(``max_retries``), and prints one ``RAYCHAOS_STATS`` line per second (see ``_stats.py``):
completed tasks, failed tasks, and p50/p95/p99 submit-to-result latency.

Run it as a Ray job (``raychaos`` does), or by hand::

    python task_storm.py --duration 30 --rate 200

It stops by itself after ``--duration`` seconds, so a forgotten job cannot run forever.

``--ramp START,STEP,STEP_S,STEPS`` raises the rate step by step instead (``raychaos ramp``):
START tasks/s for STEP_S seconds, then START+STEP, ... for STEPS steps, then it holds the last
rate; every stats line carries ``offered``, the rate asked for in that second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from _stats import SecondStats  # noqa: E402


@ray.remote(num_cpus=0.01, max_retries=5, retry_exceptions=False)
def noop(i: int) -> int:
    return i


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to run (cap)")
    parser.add_argument("--rate", type=float, default=0.0, help="tasks/s; 0 = as fast as it can")
    parser.add_argument("--in-flight", type=int, default=64, help="max tasks in flight")
    parser.add_argument("--timeout", type=float, default=30.0, help="a task slower is a failure")
    parser.add_argument("--ramp", default="", metavar="START,STEP,STEP_S,STEPS",
                        help="raise the rate step by step (overrides --rate)")
    parser.add_argument("--name", default="task_storm", help="load name in the stats lines")
    args = parser.parse_args(argv)
    ramp = [float(x) for x in args.ramp.split(",")] if args.ramp else []

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    stats = SecondStats(args.name)
    pending: dict[ray.ObjectRef, float] = {}
    start = time.monotonic()
    submitted = 0
    owed = 0.0  # tasks due so far (the integral of the rate)
    last = start
    while time.monotonic() - start < args.duration:
        now = time.monotonic()
        rate = args.rate
        if ramp:
            step = min(int((now - start) // ramp[2]), int(ramp[3]) - 1)
            rate = ramp[0] + step * ramp[1]
            stats.extra["offered"] = rate
        owed += (now - last) * rate
        last = now
        due = rate <= 0 or submitted < owed
        if due and len(pending) < args.in_flight:
            pending[noop.remote(submitted)] = time.monotonic()
            submitted += 1
            if rate <= 0 or submitted < owed:
                continue
        if pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.05)
            for ref in ready:
                t0 = pending.pop(ref)
                try:
                    ray.get(ref)
                    stats.ok(time.monotonic() - t0)
                except Exception:  # a task that failed after its retries
                    stats.fail()
            for ref, t0 in list(pending.items()):
                if time.monotonic() - t0 > args.timeout:
                    pending.pop(ref)
                    ray.cancel(ref, force=True)
                    stats.fail()
        else:
            time.sleep(0.005)
        stats.tick()
    return 0


if __name__ == "__main__":
    sys.exit(main())
