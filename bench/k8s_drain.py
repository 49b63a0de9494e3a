"""Bench: a drain and a head kill on Kubernetes — API requests per drained pod,
drain-to-replacement-Ready seconds, and kill → dashboard (and Jobs API) answering again.

Side by side:

- ``sim``: the test bed with simulated nodes (``up --sim-nodes``: the real API server,
  scheduler, controllers and KubeRay operator; kubelets that run nothing), 12 GPU nodes
  carrying 32 Ray GPU workers, 4 nodes drained at once: the request cost of cordon + evictions
  + the watches that prove the pods are gone and follow the replacements;
- ``real`` (root, nothing else heavy running): the test bed — the real kube-apiserver,
  controller-manager, scheduler and KubeRay operator, its pods real Ray nodes — one GPU node
  drained (the real operator makes the replacement, a real ``ray start``), then the head killed
  in each mode and the dashboard polled through raychaos's own port-forward until it answers
  again. Requests are counted by the API server itself, in both (the bed's audit log of the
  kubeconfig user: this process's target and nothing else).

    PYTHONPATH=src:. python bench/k8s_drain.py [--sim-only] [--kills 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import yaml

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from raychaos.testbed.demo import DEMO
from tests.k8s._bed import wait_cluster

__all__ = ["main"]


def _drain(t: KubernetesTarget, count: int, selector: dict | None,
           requests: Callable[[], list[str]]) -> dict:
    """``requests()``: the verbs of every API request so far, in order."""
    before = len(requests())
    t0 = time.perf_counter()
    record: dict = {}
    ev = t.drain_nodes(count=count, selector=selector, deadline_s=120, reason="preemption",
                       replace=True, replace_delay_s=0, record=record)
    wall = time.perf_counter() - t0
    sent = requests()[before:]
    t.undo(record)
    evicted = len(ev["evicted"])
    kinds: dict[str, int] = {}
    for verb in sent:
        kinds[verb] = kinds.get(verb, 0) + 1
    return {"nodes": len(ev["nodes"]), "evicted": evicted, "requests": len(sent),
            "per_pod": len(sent) / max(1, evicted), "by_verb": kinds, "wall_s": wall,
            "to_replacement_ready_s": ev.get("drain_to_replacement_ready_s"),
            "all_gone_s": ev.get("all_gone_s")}


def sim_drain(root: str) -> dict:
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    nodes = [{"name": "head-0", "cpu": "8", "labels": {"raychaos.io/node-pool": "head"}},
             {"name": "cpu-0", "cpu": "2", "labels": {"raychaos.io/node-pool": "cpu"}}]
    nodes += [{"name": f"gpu-{i}", "cpu": "16", "memory": "64Gi", "gpus": 8, "taints": taint,
               "labels": {"raychaos.io/node-pool": "gpu"}} for i in range(12)]
    os.environ["RAYCHAOS_TESTBED_STATE"] = root
    b = testbed.up("bench-sim", "ray", say=lambda line: None, cluster=False, sim_nodes=nodes)
    try:
        docs = [d for d in yaml.safe_load_all(DEMO.read_text()) if d]
        [rc] = [d for d in docs if d["kind"] == "RayCluster"]
        rc["spec"].pop("gcsFaultToleranceOptions", None)  # no Redis: nothing runs here
        rc["spec"]["workerGroupSpecs"][0].update(replicas=32, maxReplicas=32)
        client = b.admin()
        code, body = client.call("POST", "/apis/ray.io/v1/namespaces/ray/rayclusters", rc)
        assert code == 201, body
        wait_cluster(b, "demo", 300, pods=34)
        t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                            kubeconfig=str(b.kubeconfig), max_nodes_at_once=4),
                             run_id="bench")
        t.connect()
        since = time.time()
        out = _drain(t, 4, {"raychaos.io/node-pool": "gpu"},
                     lambda: [r["verb"] for r in b.requests(since)])
        t.close()
        return out
    finally:
        testbed.down("bench-sim")


def real(root: str, kills: int) -> dict:
    os.environ["RAYCHAOS_TESTBED_STATE"] = root
    b = testbed.up("bench", "ray", nodes=True, cluster=True, say=lambda line: None)
    try:
        t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                            kubeconfig=str(b.kubeconfig)), run_id="bench")
        t.connect()
        since = time.time()
        out: dict = {"drain": _drain(t, 1, None,
                                     lambda: [r["verb"] for r in b.requests(since)])}
        wait_cluster(b, "demo", 300)
        t.gcs_alive(5.0)  # the forward is up
        for mode in ("gcs", "head", "pod"):
            rows = []
            for _ in range(kills):
                while not t.gcs_alive(2.0):
                    time.sleep(0.5)
                ev = t.kill_head(mode, {})
                t0 = ev["killed_at"]
                while t.gcs_alive(1.0):  # the outage must be seen before the return
                    if time.time() - t0 > 30:
                        break
                    time.sleep(0.05)
                while not t.gcs_alive(1.0):
                    time.sleep(0.1)
                gcs = time.time() - t0
                while t.job_status("raysubmit_none") == "UNKNOWN":  # Jobs API answers
                    time.sleep(0.1)
                rows.append({"dashboard_s": gcs, "jobs_api_s": time.time() - t0})
                wait_cluster(b, "demo", 300)
            out[mode] = rows
        fwd = t.handle.forwards["dashboard"].stats
        out["forward"] = dict(fwd)
        t.close()
        return out
    finally:
        testbed.down("bench")


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--kills", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = sim_drain(os.path.join(tmp, "sim"))
        print(f"sim drain: {s['nodes']} nodes, {s['evicted']} Ray pods evicted: "
              f"{s['requests']} API requests = {s['per_pod']:.2f} per drained pod "
              f"({s['by_verb']}); gone after {s['all_gone_s']} s, replacements Ready after "
              f"{s['to_replacement_ready_s']} s (simulated kubelets, the real operator); "
              f"wall {s['wall_s']:.2f} s")
        if args.sim_only or os.geteuid() != 0:
            return
        r = real(os.path.join(tmp, "real"), args.kills)
        d = r["drain"]
        print(f"real drain: {d['evicted']} pod(s) evicted: {d['requests']} API requests = "
              f"{d['per_pod']:.1f} per drained pod ({d['by_verb']}); gone after "
              f"{d['all_gone_s']} s; drain → replacement Ready {d['to_replacement_ready_s']} s"
              f" (a real ray start, the real operator); wall {d['wall_s']:.1f} s")
        for mode in ("gcs", "head", "pod"):
            rows = r[mode]
            print(f"kill mode={mode}: → dashboard answering again p50 "
                  f"{_p50([x['dashboard_s'] for x in rows]):.1f} s, → Jobs API p50 "
                  f"{_p50([x['jobs_api_s'] for x in rows]):.1f} s "
                  f"(each: {[round(x['dashboard_s'], 1) for x in rows]})")
        print(f"port-forward: {r['forward']}")


if __name__ == "__main__":
    main()
