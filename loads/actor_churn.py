"""Actor churn: create and kill actors at a steady rate, timing how long each takes to come up.

Why: actor creation goes through the GCS (scheduling, worker leasing, a new worker process), so
it is the first thing to slow down or fail when the head, the GCS or a raylet is in trouble --
and serving and RL workloads create actors all the time. This script creates ``--rate`` actors
per second, each ready when its first ``ping`` answers; keeps at most ``--max-alive`` of them,
killing the oldest beyond that; and counts an actor that dies or does not answer within
``--timeout`` as a failure.

Stats (see ``_stats.py``): ``count`` is actors that became ready in that second, latency is
create-to-ready, plus ``created``, ``killed`` and ``alive``. Run as a Ray job or by hand::

    python actor_churn.py --duration 30 --rate 5 --max-alive 8
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from _stats import SecondStats  # noqa: E402


@ray.remote(max_restarts=0)
class Churner:
    def ping(self) -> int:
        return os.getpid()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to run (cap)")
    parser.add_argument("--rate", type=float, default=5.0, help="actors created per second")
    parser.add_argument("--max-alive", type=int, default=8, help="kill the oldest beyond this")
    parser.add_argument("--actor-cpus", type=float, default=0.01, help="num_cpus per actor")
    parser.add_argument("--timeout", type=float, default=30.0, help="slower to ready = failure")
    parser.add_argument("--name", default="actor_churn", help="load name in the stats lines")
    args = parser.parse_args(argv)

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    stats = SecondStats(args.name, extra={"alive": 0})
    pending: dict[ray.ObjectRef, tuple[ray.actor.ActorHandle, float]] = {}
    alive: collections.deque = collections.deque()
    start = time.monotonic()
    created = 0

    def kill(handle) -> None:
        ray.kill(handle, no_restart=True)
        stats.add("killed", 1)

    while time.monotonic() - start < args.duration:
        now = time.monotonic()
        if created < (now - start) * args.rate:
            handle = Churner.options(num_cpus=args.actor_cpus).remote()
            pending[handle.ping.remote()] = (handle, time.monotonic())
            created += 1
            stats.add("created", 1)
        if pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.02)
            for ref in ready:
                handle, t0 = pending.pop(ref)
                try:
                    ray.get(ref)
                    stats.ok(time.monotonic() - t0)
                    alive.append(handle)
                except Exception:  # the actor died before it answered
                    stats.fail()
                    kill(handle)
            for ref, (handle, t0) in list(pending.items()):
                if time.monotonic() - t0 > args.timeout:
                    pending.pop(ref)
                    stats.fail()
                    kill(handle)
        else:
            time.sleep(0.01)
        while len(alive) > args.max_alive:
            kill(alive.popleft())
        stats.extra["alive"] = len(alive)
        stats.tick()

    for handle in [*alive, *(h for h, _ in pending.values())]:
        kill(handle)
    stats.extra["alive"] = 0
    time.sleep(max(0.0, math.floor(time.time()) + 1.01 - time.time()))
    stats.tick()
    return 0


if __name__ == "__main__":
    sys.exit(main())
