"""The sentinel: a detached actor whose survival proves GCS state survived a head kill.

``python sentinel.py create`` starts a detached, named actor on a worker (never the head: a head
kill would take it down for the wrong reason), bumps its counter three times and prints its
state; ``python sentinel.py check`` finds it by name after the fault and prints its state again.
The harness compares PID, node and counter: KubeRay's GCS FT e2e test checks the same things.
Both print one line ``RAYCHAOS_SENTINEL {"pid": ..., "node_id": ..., "count": ...}``.

``python sentinel.py watch`` does both in one long-lived driver: it creates the actor, then every
``--every`` seconds looks it up *by name* again (a question to the GCS, as ``check`` asks it) and
prints its state with ``ts`` (wall clock) and ``check`` (a sequence number), so the harness reads
the answer after a fault from this driver's log instead of submitting a new job. On SIGTERM (the
job stopped) it removes the actor and exits. A driver that did not survive the fault prints
nothing more: the harness then falls back to ``check``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import ray

NAME, NAMESPACE = "raychaos-sentinel", "raychaos"


@ray.remote(max_restarts=0)
class Sentinel:
    def __init__(self) -> None:
        self.count = 0

    def bump(self) -> int:
        self.count += 1
        return self.count

    def state(self) -> dict:
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "count": self.count}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["create", "check", "delete", "watch"])
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=1.0, help="watch: seconds between checks")
    args = parser.parse_args(argv)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), namespace=NAMESPACE,
             log_to_driver=False)
    if args.action in ("create", "watch"):
        actor = _create(args.timeout)
        if args.action == "watch":
            return _watch(actor, args.every, args.timeout)
    else:
        try:
            actor = ray.get_actor(NAME)
        except ValueError:
            print("RAYCHAOS_SENTINEL " + json.dumps({"found": False}), flush=True)
            return 0 if args.action == "delete" else 3
        if args.action == "delete":
            ray.kill(actor)
            return 0
    return 0 if _report(actor, args.timeout)["reachable"] else 4


def _create(timeout: float):
    try:
        ray.kill(ray.get_actor(NAME))
    except ValueError:
        pass
    options = {"name": NAME, "lifetime": "detached", "num_cpus": 0}
    if ray.cluster_resources().get("raychaos_driver"):
        options["resources"] = {"raychaos_driver": 0.001}
    actor = Sentinel.options(**options).remote()
    for _ in range(3):
        ray.get(actor.bump.remote(), timeout=timeout)
    return actor


def _report(actor, timeout: float, **extra) -> dict:
    try:
        state = {"found": True, "reachable": True,
                 **ray.get(actor.state.remote(), timeout=timeout)}
    except Exception as exc:  # the actor is registered but dead or unreachable
        state = {"found": True, "reachable": False, "error": type(exc).__name__}
    print("RAYCHAOS_SENTINEL " + json.dumps({**state, **extra}), flush=True)
    return state


def _watch(actor, every: float, timeout: float) -> int:
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    _report(actor, timeout, ts=time.time(), check=0)
    check = 0
    while not stopping:
        time.sleep(every)
        check += 1
        try:  # by name, through the GCS: what `check` asks, without a new job
            found = ray.get_actor(NAME)
        except Exception as exc:  # ValueError: not found; others: the GCS did not answer
            print("RAYCHAOS_SENTINEL " + json.dumps({"found": False, "error": type(exc).__name__,
                                                     "ts": time.time(), "check": check}),
                  flush=True)
            continue
        _report(found, min(timeout, 10.0), ts=time.time(), check=check)
    try:  # the job was stopped: leave no actor behind on a cluster that is reused
        ray.kill(ray.get_actor(NAME))
    except Exception:  # noqa: BLE001 - already gone
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
