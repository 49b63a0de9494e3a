"""Object-store ballast: hold ``--mb`` of one node's object store so that nothing can spill it.

Why: the ``press_object_store`` fault's mechanism — a noisy neighbour that fills a node's
object store. An actor on the node (``--selector``: Ray node labels) puts 4 MB blocks and keeps
each one mapped (``ray.get`` of a numpy array is a view into the store), which pins it: Ray
can neither evict nor spill an object a worker is using. It prints one line when it holds it
all, then waits until the job is stopped (or ``--duration`` runs out)::

    RAYCHAOS_BALLAST {"held_mb": 64.0, "node_id": "...", "blocks": 16}

Run as a Ray job (the fault does) or by hand: ``python object_store_ballast.py --mb 64``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import ray

BLOCK_MB = 4.0


@ray.remote(num_cpus=0, max_restarts=0)
class Ballast:
    def __init__(self, mb: float) -> None:
        self.held = []
        left = mb
        while left > 0:
            size = min(BLOCK_MB, left)
            ref = ray.put(np.ones(int(size * 2**20 // 8), dtype=np.uint64))
            self.held.append((ref, ray.get(ref)))  # the mapped view pins the object
            left -= size
        self.mb = mb

    def info(self) -> dict:
        return {"held_mb": self.mb, "blocks": len(self.held),
                "node_id": ray.get_runtime_context().get_node_id()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="megabytes to hold")
    parser.add_argument("--selector", default="", help='node labels, JSON: {"k": "v"}')
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds to hold (cap)")
    args = parser.parse_args(argv)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    options = {"label_selector": json.loads(args.selector)} if args.selector else {}
    ballast = Ballast.options(**options).remote(args.mb)
    info = ray.get(ballast.info.remote(), timeout=120)
    print("RAYCHAOS_BALLAST " + json.dumps(info), flush=True)
    end = time.monotonic() + args.duration
    while time.monotonic() < end:
        time.sleep(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
