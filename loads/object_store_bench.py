"""Object-store bench: how fast each named node puts and gets objects, side by side.

Why: an object store that Ray moved from /dev/shm to disk (a /dev/shm too small for it) is
slower, and only a measurement says by how much. For each node in ``--nodes`` (the
``raychaos.io/node`` label; ``--label`` for another key) one task on that node puts and gets
``--object-mb`` arrays for ``--seconds`` and reports MB/s, one line per node::

    RAYCHAOS_BENCH {"node": "worker-1", "mb_per_s": 812.4, "objects": 203, "plasma": "..."}

Run as a Ray job (the ``dev_shm_check`` probe does) or by hand:
``python object_store_bench.py --nodes worker-1,worker-2``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import ray


@ray.remote(num_cpus=0, max_retries=0)
def bench(seconds: float, object_mb: float) -> dict:
    data = np.ones(int(object_mb * 2**20 // 8), dtype=np.uint64)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ref = ray.put(data)
        out = ray.get(ref)
        assert out[0] == 1
        del ref, out
        n += 1
    elapsed = time.perf_counter() - t0
    return {"mb_per_s": round(n * object_mb / elapsed, 1), "objects": n,
            "node_id": ray.get_runtime_context().get_node_id()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", required=True, help="comma-separated node names")
    parser.add_argument("--label", default="raychaos.io/node", help="the node-name label")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per node")
    parser.add_argument("--object-mb", type=float, default=8.0, help="MB per object")
    args = parser.parse_args(argv)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    for node in [n for n in args.nodes.split(",") if n]:  # one at a time: no contention
        task = bench.options(label_selector={args.label: node})
        try:
            result = ray.get(task.remote(args.seconds, args.object_mb), timeout=120)
        except Exception as exc:  # noqa: BLE001 - reported per node
            result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        print("RAYCHAOS_BENCH " + json.dumps({"node": node, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
