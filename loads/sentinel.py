"""The sentinel: a detached actor whose survival proves GCS state survived a head kill.

``python sentinel.py create`` starts a detached, named actor on a worker (never the head: a head
kill would take it down for the wrong reason), bumps its counter three times and prints its
state; ``python sentinel.py check`` finds it by name after the fault and prints its state again.
The harness compares PID, node and counter: KubeRay's GCS FT e2e test checks the same things.
Both print one line ``RAYCHAOS_SENTINEL {"pid": ..., "node_id": ..., "count": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

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
    parser.add_argument("action", choices=["create", "check", "delete"])
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), namespace=NAMESPACE,
             log_to_driver=False)
    if args.action == "create":
        try:
            ray.kill(ray.get_actor(NAME))
        except ValueError:
            pass
        options = {"name": NAME, "lifetime": "detached", "num_cpus": 0}
        if ray.cluster_resources().get("raychaos_driver"):
            options["resources"] = {"raychaos_driver": 0.001}
        actor = Sentinel.options(**options).remote()
        for _ in range(3):
            ray.get(actor.bump.remote(), timeout=args.timeout)
    else:
        try:
            actor = ray.get_actor(NAME)
        except ValueError:
            print("RAYCHAOS_SENTINEL " + json.dumps({"found": False}), flush=True)
            return 0 if args.action == "delete" else 3
        if args.action == "delete":
            ray.kill(actor)
            return 0
    try:
        state = ray.get(actor.state.remote(), timeout=args.timeout)
    except Exception as exc:  # the actor is registered but dead or unreachable
        print("RAYCHAOS_SENTINEL " + json.dumps({"found": True, "reachable": False,
                                                 "error": type(exc).__name__}), flush=True)
        return 4
    print("RAYCHAOS_SENTINEL " + json.dumps({"found": True, "reachable": True, **state}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
