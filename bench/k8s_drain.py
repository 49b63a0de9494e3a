"""Bench: drain 64 GPU nodes carrying 512 Ray pods, then kill the head, against the fake API.

Why: a drain's cost on a real API server is mostly request count (one list, one cordon PATCH per
node, one eviction POST per pod, retries on 429), and a head-kill's detection latency is how
long after the API's own "Ready" event the watch notices. Both are measurable on loopback.

    PYTHONPATH=src:. python bench/k8s_drain.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.fakeapi import FakeKube

__all__ = ["main"]

NODES, PODS_PER_NODE = 64, 8


def main() -> None:
    fake = FakeKube()
    fake.seed_raycluster(gpu_nodes=NODES, workers_per_gpu_node=PODS_PER_NODE)
    fake.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            spec = KubernetesSpec(cluster="demo", namespace="ray", max_nodes_at_once=NODES,
                                  kubeconfig=fake.kubeconfig(str(Path(tmp) / "kc")))
            target = KubernetesTarget(spec, run_id="bench")
            target.connect()
            before = len(fake.requests)
            t0 = time.perf_counter()
            record: dict = {}
            ev = target.drain_nodes(record=record, count=NODES, deadline_s=60)
            wall = time.perf_counter() - t0
            n_req = len(fake.requests) - before
            evicted = len(ev["evicted"])
            print(f"drain: {len(ev['cordoned'])} nodes cordoned, {evicted} Ray pods evicted, "
                  f"{len(ev['skipped'])} DaemonSet pods skipped")
            print(f"drain: {n_req} API requests = {n_req / evicted:.3f} per evicted pod; "
                  f"wall {wall:.2f} s ({evicted / wall:.0f} evictions/s)")
            t1 = time.perf_counter()
            target.undo(record)
            print(f"undo: {len(record['undo']['nodes'])} nodes uncordoned in "
                  f"{time.perf_counter() - t1:.2f} s")
            latencies, recoveries = [], []
            for _ in range(5):
                kill = target.kill_head("pod", {})
                back = target.wait_head_back(kill["old"], timeout=10)
                assert back["recovered"] and back["via"] == "watch", back
                latencies.append(back["detected_at"] - fake.ready_events[back["new_uid"]])
                recoveries.append(back["seconds"])
            latencies.sort()
            median_ms = latencies[len(latencies) // 2] * 1e3
            print(f"head kill: new head UID detected by watch {median_ms:.2f} ms (median of 5; "
                  f"max {latencies[-1] * 1e3:.2f} ms) after the fake made it Ready;"
                  f" kill → detected median {sorted(recoveries)[2]:.3f} s (fake KubeRay "
                  f"replaces after {fake.head_replace_delay}s + Ready after {fake.ready_delay}s)")
            target.close()
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
