"""The KubeRay test world for the catalog module that still needs its shape (the resources
tier: two GPU workers with two logical GPUs each): start and stop it, run an experiment on it
as a user runs it, and what a run may not leave in it. The rest of the catalog runs on the test
bed (``tests/k8s/bed``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.k8s._bed import REPO, RUN_ID_LABEL, SECONDS, netns_shaping, run_experiment, variant
from tests.k8s.world import World

__all__ = ["REPO", "SECONDS", "leftovers", "raychaos_run", "start_world", "stop_world",
           "variant"]


#: On a real cluster neither the API server (a control-plane node) nor raychaos (a laptop, a
#: CI runner) shares CPU with the Ray nodes under load; here both share 2 cores with them. So the
#: world (its threads inherit this thread's priority) and the ``raychaos run`` processes run at
#: the head's priority (the world's kubelet runs Ray workers at nice 5, the head at -5).
CONTROL_PLANE_NICE = -5


def start_world(name: str, shape: str = "default") -> World:
    t0 = time.monotonic()
    SECONDS.setdefault("_nice_before", float(os.getpriority(os.PRIO_PROCESS, 0)))
    os.setpriority(os.PRIO_PROCESS, 0, CONTROL_PLANE_NICE)  # this thread, and all it starts
    w = World(name=name, chaos_mesh=True, shape=shape,
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

