"""Task storm: a steady stream of tiny Ray tasks, the control-plane load of a busy cluster.

Submits no-op tasks continuously (at ``--rate`` per second, or as fast as it can with
``--rate 0``) with a bounded number in flight, retries each task as Ray would
(``--max-retries``), and prints one ``RAYCHAOS_STATS`` line per second (see ``_stats.py``):
completed tasks, failed tasks, and p50/p95/p99 submit-to-result latency.

The rate is a pace, not a quota: submissions missed while the cluster stalled are **not** made
up afterwards (a burst of catch-up submissions would hide the stall in the throughput). A task
still pending after ``--timeout`` is cancelled and counted as failed — cancelled, not killed: a
forced cancel kills the worker process running the task, a loss the fault did not cause (seen:
all 64 tasks in flight over a head kill cancelled at once 10 s later, then the storm stalling 3-4
s at a time while Ray started workers, each seconds on a busy box). ``--task-ms`` makes each
task sleep, so tasks are in flight on every node (what a node loss needs to hurt); with
``--max-retries 0`` a task on a node that dies fails instead of moving. ``--spread`` places the
tasks round the nodes (Ray's ``SPREAD``): a task is 1 % of a CPU, so by default all of them fit
on the driver's own node and no task crosses a link — a network fault could not touch them.

Run it as a Ray job (``raychaos`` does), or by hand::

    python task_storm.py --duration 30 --rate 200

It stops by itself after ``--duration`` seconds, so a forgotten job cannot run forever.

``--ramp START,STEP,STEP_S,STEPS[,WARMUP_S]`` raises the rate step by step instead (``raychaos
ramp``): START tasks/s for WARMUP_S seconds (stats lines marked ``warmup``: Ray is still starting
the workers the tasks need), then START tasks/s for STEP_S seconds, START+STEP, ... for STEPS
steps, then it holds the last rate; every stats line carries ``offered``, the rate asked for in
that second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from _stats import SecondStats  # noqa: E402


@ray.remote(num_cpus=0.01, retry_exceptions=False)
def noop(i: int, sleep_s: float = 0.0) -> int:
    if sleep_s:
        time.sleep(sleep_s)
    return i


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to run (cap)")
    parser.add_argument("--rate", type=float, default=0.0, help="tasks/s; 0 = as fast as it can")
    parser.add_argument("--in-flight", type=int, default=64, help="max tasks in flight")
    parser.add_argument("--timeout", type=float, default=10.0, help="a task slower is a failure")
    parser.add_argument("--max-retries", type=int, default=5, help="Ray's max_retries per task")
    parser.add_argument("--task-ms", type=float, default=0.0, help="each task sleeps this long")
    parser.add_argument("--spread", action="store_true",
                        help="place tasks round the nodes (SPREAD), so they cross links")
    parser.add_argument("--ramp", default="", metavar="START,STEP,STEP_S,STEPS[,WARMUP_S]",
                        help="raise the rate step by step (overrides --rate)")
    parser.add_argument("--name", default="task_storm", help="load name in the stats lines")
    args = parser.parse_args(argv)
    ramp = [float(x) for x in args.ramp.split(",")] if args.ramp else []

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    stats = SecondStats(args.name)
    task = noop.options(max_retries=args.max_retries,
                        scheduling_strategy="SPREAD" if args.spread else "DEFAULT")
    sleep_s = args.task_ms / 1000.0
    pending: dict[ray.ObjectRef, float] = {}
    start = time.monotonic()
    submitted = 0
    next_at = start  # the pace: one task every 1/rate s, never a catch-up burst
    while time.monotonic() - start < args.duration:
        now = time.monotonic()
        rate = args.rate
        if ramp:
            warmup = ramp[4] if len(ramp) > 4 else 0.0
            step = max(0, min(int((now - start - warmup) // ramp[2]), int(ramp[3]) - 1))
            rate = ramp[0] + step * ramp[1]
            stats.extra["offered"] = rate
            if now - start < warmup:
                stats.extra["warmup"] = True
            else:
                stats.extra.pop("warmup", None)
        if rate > 0:
            next_at = max(next_at, now - 0.1)  # at most 100 ms of missed pace carried over
        due = rate <= 0 or now >= next_at
        if due and len(pending) < args.in_flight:
            pending[task.remote(submitted, sleep_s)] = time.monotonic()
            submitted += 1
            next_at += 1.0 / rate if rate > 0 else 0.0
            if rate <= 0 or time.monotonic() >= next_at:
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
                    ray.cancel(ref)  # not force=True: the worker lives on (see above)
                    stats.fail()
        else:
            time.sleep(0.005)
        stats.tick()
    return 0


if __name__ == "__main__":
    sys.exit(main())
