"""GCS recovery after head kills on the embedded cluster: N trials per mode.

    python bench/gcs_recovery.py [--trials 5] [--modes gcs,head]

Prints, per mode, seconds from the SIGKILL to the first healthy GCS answer and to every worker
ALIVE again with its old node ID (p50/p95/max), and the polling resolution. Figures, not
assertions: the box is CPU-bound and figures vary by ±30%.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from raychaos.config.settings import LocalClusterSpec
from raychaos.targets.local.target import LocalTarget

POLL_S = 0.05


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def trial(target: LocalTarget, mode: str) -> tuple[float, float]:
    workers = {n.node_id for n in target.nodes() if n.state == "ALIVE" and not n.is_head}
    evidence = target.kill_head(mode, {})
    t0 = evidence["killed_at"]
    gcs_s = nodes_s = None
    while time.time() - t0 < 180:
        if target.gcs_alive(timeout=0.5):
            gcs_s = gcs_s or time.time() - t0
            alive = {n.node_id for n in target.nodes() if n.state == "ALIVE"}
            if workers <= alive:
                nodes_s = time.time() - t0
                break
        time.sleep(POLL_S)
    target.wait_head_back(evidence["old"], timeout=120)
    time.sleep(3)  # let the dashboard settle before the next kill
    return gcs_s or float("nan"), nodes_s or float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--modes", default="gcs,head")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        target = LocalTarget(LocalClusterSpec(name="bench", head_restart_delay_s=1),
                             state_root=root)
        t = time.time()
        target.up()
        print(f"cluster up in {time.time() - t:.1f}s ({target.mode} mode, head restart delay 1 s)")
        try:
            for mode in args.modes.split(","):
                gcs, nodes = [], []
                for i in range(args.trials):
                    g, n = trial(target, mode)
                    gcs.append(g)
                    nodes.append(n)
                    print(f"  {mode} trial {i + 1}: GCS {g:.2f}s, all workers {n:.2f}s")
                for label, vals in (("GCS answers", gcs), ("workers ALIVE", nodes)):
                    print(f"{mode:5s} {label:14s} p50 {statistics.median(vals):6.2f}s  "
                          f"p95 {pct(vals, 95):6.2f}s  max {max(vals):6.2f}s  (n={len(vals)})")
            print(f"resolution: polled every {POLL_S * 1000:.0f} ms (the harness monitor samples "
                  f"every 200 ms)")
        finally:
            target.down()


if __name__ == "__main__":
    main()
