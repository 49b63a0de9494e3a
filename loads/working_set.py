"""Working set: blocks kept in one node's object store and read over and over by GPU tasks.

Why: the object store spills to disk when what a job keeps live does not fit, and a working set
that never fits thrashes — every read restores a block from disk and pushes another one out.
``--working-set-mb`` of ``--block-mb`` blocks are made on the node(s) ``--selector`` picks and
kept referenced by the driver; ``--in-flight`` consumer tasks each take one random block (passed
inside a list, so the task — holding its ``--gpu-fraction`` of a GPU — fetches it itself, the
way a model task fetches its batch), check it and work ``--work-ms`` on it. A restored block
shows as GPU time spent waiting.

Stats (see ``_stats.py``): ``count`` is blocks processed in that second, latency is submit to
result, plus ``bytes`` (read), ``checksum_errors``, ``gpu_wait_ms``/``gpu_busy_ms`` (the
finished tasks' time waiting for their block vs working, while holding the GPU) and
``gpu_stranded_frac`` (wait / (wait + busy): the share of held GPU time spent idle). Run as a
Ray job or by hand::

    python working_set.py --duration 30 --working-set-mb 200 --block-mb 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import ray  # noqa: E402
from _stats import SecondStats  # noqa: E402  (the one stats format)


@ray.remote(num_cpus=0, max_retries=3)
def make_block(index: int, block_mb: float) -> np.ndarray:
    return np.full(int(block_mb * 2**20 // 8), index, dtype=np.uint64)


@ray.remote(max_retries=3)
def consume(box: list, index: int, work_s: float) -> tuple[float, float, int, bool]:
    t0 = time.perf_counter()
    block = ray.get(box[0])  # holding the GPU while the block arrives (or is restored)
    waited = time.perf_counter() - t0
    ok = int(block[0]) == index and int(block[-1]) == index
    time.sleep(work_s)  # the kernel: a logical GPU needs no real one
    return waited, work_s, int(block.nbytes), ok


class WorkingSetStats(SecondStats):
    def _emit(self, ts: float) -> None:  # called under the lock by _roll
        wait, busy = self._fields.get("gpu_wait_ms", 0.0), self._fields.get("gpu_busy_ms", 0.0)
        self._fields["gpu_stranded_frac"] = round(wait / (wait + busy), 4) if wait + busy \
            else None
        super()._emit(ts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to run (cap)")
    parser.add_argument("--working-set-mb", type=float, default=64.0, help="MB kept live")
    parser.add_argument("--block-mb", type=float, default=4.0, help="MB per block")
    parser.add_argument("--in-flight", type=int, default=4, help="consumer tasks in flight")
    parser.add_argument("--gpu-fraction", type=float, default=0.25, help="num_gpus per task")
    parser.add_argument("--work-ms", type=float, default=20.0, help="work per block")
    parser.add_argument("--selector", default="", help='node labels, JSON: {"k": "v"}')
    parser.add_argument("--timeout", type=float, default=60.0, help="a slower task is a failure")
    parser.add_argument("--name", default="working_set", help="load name in the stats lines")
    args = parser.parse_args(argv)

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    place = {"label_selector": json.loads(args.selector)} if args.selector else {}
    n = max(1, int(args.working_set_mb // args.block_mb))
    blocks = [make_block.options(**place).remote(i, args.block_mb) for i in range(n)]
    ray.wait(blocks, num_returns=n, fetch_local=False, timeout=300)
    task = consume.options(num_gpus=args.gpu_fraction, num_cpus=0 if args.gpu_fraction else 0.1,
                           **place)
    stats = WorkingSetStats(args.name, extra={"checksum_errors": 0})
    pending: dict[ray.ObjectRef, float] = {}
    start = time.monotonic()
    while time.monotonic() - start < args.duration:
        while len(pending) < args.in_flight:
            i = random.randrange(n)
            pending[task.remote([blocks[i]], i, args.work_ms / 1e3)] = time.monotonic()
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.1)
        for ref in ready:
            t0 = pending.pop(ref)
            try:
                waited, busy, nbytes, ok = ray.get(ref)
            except Exception:  # lost after its retries
                stats.fail()
                continue
            if not ok:
                stats.add("checksum_errors", 1)
                stats.fail()
                continue
            stats.ok(time.monotonic() - t0)
            stats.add("bytes", nbytes)
            stats.add("gpu_wait_ms", round(waited * 1e3, 3))
            stats.add("gpu_busy_ms", round(busy * 1e3, 3))
        for ref, t0 in list(pending.items()):
            if time.monotonic() - t0 > args.timeout:
                pending.pop(ref)
                ray.cancel(ref, force=True)
                stats.fail()
        stats.tick()
    time.sleep(max(0.0, math.floor(time.time()) + 1.01 - time.time()))
    stats.tick()
    return 0


if __name__ == "__main__":
    sys.exit(main())
