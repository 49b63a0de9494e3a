"""GPU inference: batch-inference tasks on fractional GPUs, reporting queueing and stranded GPUs.

Why: GPU nodes are the expensive, scarce part of a Ray cluster; when one is drained or lost, work
queues behind the survivors, and fractional ``num_gpus`` packing can leave capacity allocated but
idle. Each task asks ``--gpu-fraction`` of a GPU (logical: no real GPU is needed), spends
``--io-ms`` holding it idle (fetching a batch, like a real loader) and ``--work-ms`` busy
(a CPU spin standing in for the kernel, or ``--busy sleep``). ``--in-flight`` tasks are kept
submitted, on the nodes ``--selector`` (Ray node labels, JSON) admits.

Stats (see ``_stats.py``): ``count`` is tasks finished in that second, latency is submit to
result, plus ``queue_p50_ms``/``queue_p95_ms``/``queue_max_ms`` (submit to task start: time spent
waiting for a GPU slot), ``gpu_allocated_frac`` (share of the cluster's GPUs held by tasks,
sampled), and ``gpu_stranded_frac`` (of the GPU-seconds the finished tasks held, the share they
sat idle). Run as a Ray job or by hand::

    python gpu_inference.py --duration 30 --gpu-fraction 0.25 --in-flight 8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from _stats import SecondStats, percentile  # noqa: E402


@ray.remote(max_retries=3)
def infer(submitted_at: float, io_s: float, work_s: float, spin: bool = True
          ) -> tuple[float, float, float]:
    started = time.time()
    time.sleep(io_s)
    if spin:
        spin_until = time.perf_counter() + work_s
        while time.perf_counter() < spin_until:
            pass
    else:  # the kernel runs on the (logical) GPU: the CPU is free meanwhile
        time.sleep(work_s)
    return started - submitted_at, time.time() - started, work_s


class GpuSecondStats(SecondStats):
    """SecondStats plus per-second queueing percentiles and GPU utilisation fractions."""

    def __init__(self, load: str, out=None):
        super().__init__(load, out, extra={"gpu_allocated_frac": None})
        self._queue_ms: list[float] = []
        self._held = 0.0  # GPU-seconds held by tasks finished this second
        self._idle = 0.0  # ... of which idle

    def finished(self, queue_s: float, held_s: float, busy_s: float, fraction: float) -> None:
        self._roll()
        with self._lock:
            self._queue_ms.append(queue_s * 1000.0)
            self._held += fraction * held_s
            self._idle += fraction * max(0.0, held_s - busy_s)

    def _emit(self, ts: float) -> None:  # called under the lock by _roll
        q = sorted(self._queue_ms)
        self._fields.update(
            queue_p50_ms=percentile(q, 50),
            queue_p95_ms=percentile(q, 95),
            queue_max_ms=q[-1] if q else None,
            gpu_stranded_frac=round(self._idle / self._held, 4) if self._held else None,
        )
        self._queue_ms, self._held, self._idle = [], 0.0, 0.0
        super()._emit(ts)


def allocated_gpu_fraction() -> float | None:
    total = ray.cluster_resources().get("GPU", 0.0)
    if not total:
        return None
    return round(1.0 - ray.available_resources().get("GPU", 0.0) / total, 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to run (cap)")
    parser.add_argument("--gpu-fraction", type=float, default=0.25, help="num_gpus per task")
    parser.add_argument("--in-flight", type=int, default=8, help="tasks kept submitted")
    parser.add_argument("--io-ms", type=float, default=20.0, help="idle time holding the GPU")
    parser.add_argument("--work-ms", type=float, default=30.0, help="busy time on the GPU")
    parser.add_argument("--timeout", type=float, default=60.0, help="a slower task is a failure")
    parser.add_argument("--busy", choices=["spin", "sleep"], default="spin",
                        help="work as a CPU spin, or asleep (GPU work leaves the CPU free)")
    parser.add_argument("--selector", default="", help='node labels, JSON: {"k": "v"}')
    parser.add_argument("--name", default="gpu_inference", help="load name in the stats lines")
    parser.add_argument("--warm-up-s", type=float, default=0.5,
                        help="first, one unmeasured wave of --in-flight tasks this long each, so "
                             "Ray starts every worker that fits before the first stats line "
                             "(0: none; worker start-up is not fragmentation)")
    args = parser.parse_args(argv)

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    stats = GpuSecondStats(args.name)
    place = {"label_selector": json.loads(args.selector)} if args.selector else {}
    task = infer.options(num_gpus=args.gpu_fraction, num_cpus=0, **place)
    if args.warm_up_s > 0:  # start the workers: a wave that needs all that fit at once
        warm = [task.remote(time.time(), 0.0, args.warm_up_s, False)
                for _ in range(args.in_flight)]
        ray.wait(warm, num_returns=len(warm), timeout=min(120.0, args.duration))
    pending: dict[ray.ObjectRef, float] = {}
    start = time.monotonic()
    next_sample = 0.0
    while time.monotonic() - start < args.duration:
        while len(pending) < args.in_flight:
            pending[task.remote(time.time(), args.io_ms / 1e3, args.work_ms / 1e3,
                                args.busy == "spin")] = time.monotonic()
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.05)
        for ref in ready:
            t0 = pending.pop(ref)
            try:
                queue_s, held_s, busy_s = ray.get(ref)
            except Exception:  # failed after retries (node lost, GPU gone)
                stats.fail()
                continue
            stats.ok(time.monotonic() - t0)
            stats.finished(queue_s, held_s, busy_s, args.gpu_fraction)
        for ref, t0 in list(pending.items()):
            if time.monotonic() - t0 > args.timeout:
                pending.pop(ref)
                ray.cancel(ref, force=True)
                stats.fail()
        if time.monotonic() >= next_sample:
            stats.extra["gpu_allocated_frac"] = allocated_gpu_fraction()
            next_sample = time.monotonic() + 1.0
        stats.tick()
    for ref in pending:
        ray.cancel(ref, force=True)
    time.sleep(max(0.0, math.floor(time.time()) + 1.01 - time.time()))
    stats.tick()
    return 0


if __name__ == "__main__":
    sys.exit(main())
