"""Bench: the monitor's per-sample cost on Kubernetes, with the cluster small and with the API
server holding 100 more nodes and 1,000 more pods in the RayCluster's namespace — and the old
way (a pod list per sample) next to it.

A sample is what the monitor's sampler does five times a second (``Monitor.sample_once``): is the
GCS up, and Ray's node table with each node named by its pod. Pod state comes from the target's
informer (one list, then a watch), so a sample makes no Kubernetes API request at all — only
two HTTP requests to the dashboard over one kept-alive port-forward connection. The old way
listed the RayCluster's pods per sample; its cost grows with what the namespace holds.

On the test bed (``raychaos testbed up --nodes``: the real kube-apiserver, controllers,
scheduler and KubeRay operator; the demo RayCluster's pods are real Ray nodes). The extra nodes
and pods are API objects only (no kubelet: the pods are bound to those nodes and stay Pending).
API requests are counted by the API server itself (the bed's audit log of the kubeconfig user:
this process's target and nothing else). Needs root and nothing else heavy running:

    PYTHONPATH=src:. python bench/k8s_monitor.py [--samples 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from raychaos.config.settings import KubernetesSpec
from raychaos.observe.monitor import Monitor
from raychaos.results.store import Clock, Timeline
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed

__all__ = ["main"]


def measure(b: testbed.Bed, t: KubernetesTarget, fn: Callable[[], object], n: int) -> dict:
    fn()  # warm: connections, the informer's first list
    since = time.time()
    fwd = _forward_connections(t)
    walls, cpus = [], []
    for _ in range(n):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    time.sleep(0.5)  # the audit log is written as each request completes
    return {"wall_ms": statistics.median(walls) * 1e3, "p95_wall_ms": sorted(walls)[
        int(0.95 * (n - 1))] * 1e3, "cpu_ms": statistics.mean(cpus) * 1e3,
        "api_requests": len(b.requests(since)) / n,
        "new_forward_connections": _forward_connections(t) - fwd}


def _forward_connections(t: KubernetesTarget) -> int:
    forward = t.handle.forwards.get("dashboard")
    return int(forward.stats["connections"]) if forward else 0


def seed(b: testbed.Bed, nodes: int, pods: int) -> None:
    """``nodes`` Nodes and ``pods`` pods bound to them in ``ray`` (API objects: no kubelet)."""
    api = b.admin()
    for i in range(nodes):
        code, body = api.call("POST", "/api/v1/nodes", {"metadata": {
            "name": f"seed-{i}", "labels": {"raychaos.io/node-pool": "seed"}}})
        assert code == 201, body
    for i in range(pods):
        code, body = api.call("POST", "/api/v1/namespaces/ray/pods", {
            "metadata": {"name": f"seed-{i}", "labels": {"app": "seed"}},
            "spec": {"nodeName": f"seed-{i % nodes}",
                     "containers": [{"name": "c", "image": "busybox"}]}})
        assert code == 201, body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RAYCHAOS_TESTBED_STATE"] = tmp
        b = testbed.up("bench-mon", "ray", nodes=True, cluster=True, say=lambda line: None)
        try:
            t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                                kubeconfig=str(b.kubeconfig)), run_id="bench")
            t.connect()
            deadline = time.monotonic() + 300
            while not t.gcs_alive(5.0):  # the demo's GCS answers through the forward
                assert time.monotonic() < deadline, "the demo's GCS never answered"
                time.sleep(1.0)
            clock = Clock()
            mon = Monitor(t, Timeline(Path(tmp) / "timeline.jsonl", clock), clock, 0.2)
            api = t._api()

            def old_way() -> None:  # what nodes() did before: a list per sample
                api.read(api.core.list_namespaced_pod, "ray",
                         label_selector="ray.io/cluster=demo")

            rows = {}
            rows["small: sample"] = measure(b, t, mon.sample_once, args.samples)
            rows["small: pod list (old)"] = measure(b, t, old_way, args.samples)
            t0 = time.perf_counter()
            seed(b, 100, 1000)
            seeded = time.perf_counter() - t0
            time.sleep(1.0)
            rows["+100 nodes, +1,000 pods: sample"] = measure(b, t, mon.sample_once,
                                                              args.samples)
            rows["+100 nodes, +1,000 pods: pod list (old)"] = measure(b, t, old_way,
                                                                      args.samples)
            informer = t.handle.informer.stats
            last = mon.last
            t.close()
        finally:
            testbed.down("bench-mon")
    print(f"seeded 100 nodes and 1,000 pods in {seeded:.1f} s; informer over the whole run: "
          f"{informer}; last sample: gcs_up={last.get('gcs_up')} "
          f"nodes_alive={last.get('nodes_alive')}")
    print(f"{'per sample':42} {'wall p50':>9} {'wall p95':>9} {'CPU':>8} {'API req':>8} "
          f"{'new fwd conn':>12}")
    for name, r in rows.items():
        print(f"{name:42} {r['wall_ms']:8.1f}ms {r['p95_wall_ms']:8.1f}ms "
              f"{r['cpu_ms']:7.2f}ms {r['api_requests']:8.2f} {r['new_forward_connections']:12d}")
    small, big = rows["small: sample"], rows["+100 nodes, +1,000 pods: sample"]
    old_small, old_big = rows["small: pod list (old)"], rows[
        "+100 nodes, +1,000 pods: pod list (old)"]
    print(f"sample at scale / small: wall {big['wall_ms'] / small['wall_ms']:.2f}x, CPU "
          f"{big['cpu_ms'] / max(small['cpu_ms'], 1e-6):.2f}x; the old pod list at scale / "
          f"small: wall {old_big['wall_ms'] / old_small['wall_ms']:.2f}x, CPU "
          f"{old_big['cpu_ms'] / max(old_small['cpu_ms'], 1e-6):.2f}x (CPU: this process's; "
          f"the API server is its own process)")


if __name__ == "__main__":
    main()
