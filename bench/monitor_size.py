"""What the monitor costs per sample, on a local cluster of 2 and of 4 workers, side by side.

    flock /tmp/raychaos-cluster.lock python bench/monitor_size.py [--workers 2,4] [--samples 150]

For each size it starts a cluster of its own (idle: the cost of observing, not of the load;
``bench/monitor_cost.py`` measures the running monitor as a share of a core, on one size), then
times, in this process:

- the GCS sampler's ``sample_once`` (what runs every 200 ms): wall ms and this process's CPU ms
  per sample, and what it asks — the target's ``observe`` (GcsProbe: one question with the
  node table and the raylets' reports, under the sampler's deadline) — next to ``nodes()``
  (the node table with drain marks, what faults and probes read);
- the once-a-second poller's parts: every node's Prometheus ``/metrics`` read and parsed
  (``resource_snapshot``), and the operator's events (``cluster_events``);

and prints per-sample figures for each size with the 4/2 ratio. Figures, not assertions: the
box is shared and CPU-bound (±30%).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raychaos.config.settings import LocalClusterSpec
from raychaos.observe.monitor import Monitor
from raychaos.observe.prometheus import resource_snapshot
from raychaos.results.store import Clock, Timeline
from raychaos.targets.local.target import LocalTarget


def timed(fn: Callable[[], Any], n: int, pause_s: float = 0.0) -> dict[str, float]:
    """Mean and p95 wall ms, mean CPU ms (this process, gRPC threads included) of ``n`` calls."""
    walls, cpus = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - w0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
        if pause_s:
            time.sleep(pause_s)
    walls.sort()
    return {"wall_ms": round(statistics.mean(walls), 2),
            "p95_wall_ms": round(walls[int(0.95 * (len(walls) - 1))], 2),
            "cpu_ms": round(statistics.mean(cpus), 2)}


def measure(workers: int, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        spec = LocalClusterSpec(name="mcost", workers=workers, gpu_workers=1)
        target = LocalTarget(spec, state_root=root)
        t0 = time.monotonic()
        target.up()
        up_s = round(time.monotonic() - t0, 1)
        try:
            clock = Clock()
            timeline = Timeline(Path(root) / "timeline.jsonl", clock)
            monitor = Monitor(target, timeline, clock)
            since = time.time() - 3600
            out = {
                "workers": workers, "nodes": len(target.nodes()), "up_s": up_s,
                "sample_once": timed(monitor.sample_once, samples, 0.05),
                "observe": timed(lambda: target.observe(monitor.deadline_s), samples, 0.05),
                "nodes()": timed(lambda: target.nodes(0.2), samples, 0.05),
                "metrics (poller, 1/s)": timed(
                    lambda: resource_snapshot(target.metrics_texts()), max(10, samples // 10)),
                "cluster_events (poller, 1/s)": timed(lambda: target.cluster_events(since),
                                                      max(10, samples // 10)),
            }
            timeline.close()
            return out
        finally:
            target.down()
            target.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--samples", type=int, default=150)
    args = ap.parse_args()
    results = [measure(int(w), args.samples) for w in args.workers.split(",")]
    keys = [k for k in results[0] if isinstance(results[0][k], dict)]
    head = "".join(f"{r['workers']} workers ({r['nodes']} nodes)".rjust(34) for r in results)
    print(f"{'per call':<30}{head}{'ratio':>8}")
    for key in keys:
        cells = [f"{r[key]['wall_ms']:>8.2f} ms (p95 {r[key]['p95_wall_ms']:>7.2f}), "
                 f"cpu {r[key]['cpu_ms']:>5.2f}" for r in results]
        ratio = (results[-1][key]["wall_ms"] / results[0][key]["wall_ms"]
                 if results[0][key]["wall_ms"] else float("nan"))
        print(f"{key:<30}" + "".join(c.rjust(34) for c in cells) + f"{ratio:>8.2f}")
    per_s = [r["sample_once"]["cpu_ms"] * 5 + r["metrics (poller, 1/s)"]["cpu_ms"]
             + r["cluster_events (poller, 1/s)"]["cpu_ms"] for r in results]
    print("monitor CPU per second of run (5 samples + 1 poll): "
          + ", ".join(f"{r['workers']} workers {c:.1f} ms" for r, c in zip(results, per_s,
                                                                            strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
