"""The KubeRay test world for the catalog modules that still need its shapes (an eager GCS,
the resources tier): start and stop it, run an experiment on it as a user runs it, and what a
run may not leave in it. The rest of the catalog runs on the test bed (``tests/k8s/_bed.py``)."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

from tests.k8s._bed import REPO, RUN_ID_LABEL, SECONDS, netns_shaping, run_experiment, variant
from tests.k8s.world import World
from tests.k8s.world.controllers import pod_ready

__all__ = ["REPO", "SECONDS", "assert_clean", "leftovers", "raychaos_run", "start_world",
           "stop_world", "variant"]


#: On a real cluster neither the API server (a control-plane node) nor raychaos (a laptop, a
#: CI runner) shares CPU with the Ray nodes under load; here both share 2 cores with them. So the
#: world (its threads inherit this thread's priority) and the ``raychaos run`` processes run at
#: the head's priority (the world's kubelet runs Ray workers at nice 5, the head at -5).
CONTROL_PLANE_NICE = -5


def start_world(name: str, gcs_ft: bool = True, head_env: dict[str, str] | None = None,
                shape: str = "default") -> World:
    t0 = time.monotonic()
    SECONDS.setdefault("_nice_before", float(os.getpriority(os.PRIO_PROCESS, 0)))
    os.setpriority(os.PRIO_PROCESS, 0, CONTROL_PLANE_NICE)  # this thread, and all it starts
    w = World(name=name, gcs_ft=gcs_ft, chaos_mesh=True, head_env=head_env, shape=shape,
              state_root="/tmp/raychaos-world-tests").start()
    try:
        w.wait_ready(timeout=600)
    except BaseException:
        w.stop()
        raise
    SECONDS[f"world {name} up"] = time.monotonic() - t0
    return w


def stop_world(w: World) -> None:
    t0 = time.monotonic()
    left = w.stop()
    SECONDS[f"world {w.name} down"] = time.monotonic() - t0
    os.setpriority(os.PRIO_PROCESS, 0, int(SECONDS.pop("_nice_before", 0)))
    assert left == [], left


def raychaos_run(w: World, exp: Path, results: Path) -> tuple[int, dict, str]:
    """:func:`~tests.k8s._bed.run_experiment` on the world's RayCluster."""
    return run_experiment(w.kubeconfig, w.namespace, exp, results, "--cluster", str(w.cluster))


def alive_ray_nodes(w: World) -> list[dict]:
    url = w.proxy_url() + "/api/v0/nodes?limit=100"
    with urllib.request.urlopen(url, timeout=10) as resp:
        data = json.loads(resp.read())["data"]["result"]
    rows = data["result"] if isinstance(data, dict) else data
    return [n for n in rows if n["state"] == "ALIVE"]


def leftovers(w: World) -> list[str]:
    """What a finished run left in the world (nothing, or a bug)."""
    left = []
    with w.store.lock:
        for res, objs in w.store.objects.items():
            for (ns, name), obj in objs.items():
                if RUN_ID_LABEL in (obj["metadata"].get("labels") or {}):
                    left.append(f"{res} {ns}/{name}")
    for node in w.store.list("nodes"):
        if node.get("spec", {}).get("unschedulable"):
            left.append(f"node {node['metadata']['name']} cordoned")
    for netns in w.net.all_netns():
        left += netns_shaping(netns)
    return left


def wait_shape_restored(w: World, timeout: float = 180) -> float:
    """Head and workers Ready, 3 ALIVE Ray nodes with the one GPU; the seconds it took."""
    t0 = time.monotonic()
    last = ""
    while time.monotonic() - t0 < timeout:
        try:
            pods = w.ray_pods()
            alive = alive_ray_nodes(w)
            gpus = sum(float(n.get("resources_total", {}).get("GPU", 0)) for n in alive)
            if len(pods) == 3 and all(pod_ready(p) for p in pods) and len(alive) == 3 \
                    and gpus == 1:
                return time.monotonic() - t0
            last = f"{len(pods)} pods, {len(alive)} ALIVE Ray nodes, {gpus} GPUs"
        except (OSError, ValueError, KeyError) as exc:
            last = repr(exc)
        time.sleep(1)
    raise AssertionError(f"the world's shape was not restored in {timeout:.0f}s: {last}")


def assert_clean(w: World) -> None:
    assert leftovers(w) == []
    wait_shape_restored(w)


