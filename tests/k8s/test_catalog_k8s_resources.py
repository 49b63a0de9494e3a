"""The catalog's resource experiments on Kubernetes, run as a user runs them (``raychaos run …
--target kubernetes``), against a RayCluster of the local resource tier's shape
(``World(shape="resources")``: two GPU workers with two logical GPUs each, labelled worker-1 and
worker-2 as the experiments' selectors name them, a CPU worker for the drivers, 100 MB object
stores), each reaching the verdict it reaches locally (``tests/integration/test_resources.py``):

- ``gpu-fragmentation``: 0.5-GPU tasks pack two to a GPU, 0.6-GPU tasks strand 0.4 of each —
  the sixty-percent SLOs fail, the half ones pass (exit 1);
- ``object-store-spill``: a neighbour pins 72 of worker-1's 100 MB and the working set spills
  and restores — the spill SLOs pass while it fits and fail under pressure (exit 1). The local
  tier slows the spill disk to 20 MB/s (a local-only setting); here it is the pod's own disk;
- ``dev-shm-trap`` is refused before anything starts: the Kubernetes target does not roll pods
  onto another /dev/shm (``raychaos review`` reads the RayCluster's shared-memory size).

One warm world for the module; run under ``flock /tmp/raychaos-cluster.lock``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.k8s._world_catalog import (
    REPO,
    SECONDS,
    leftovers,
    raychaos_run,
    start_world,
    stop_world,
    variant,
)

pytestmark = [pytest.mark.k8s,
              pytest.mark.skipif(os.geteuid() != 0, reason="real pods need root (netns)")]


@pytest.fixture(scope="module")
def world():
    w = start_world("kres", shape="resources")
    try:
        yield w
    finally:
        stop_world(w)
        print("\nresource catalog on kubernetes, seconds: "
              + json.dumps({k: round(v, 1) for k, v in SECONDS.items()}))


def _run(world: Any, name: str, tmp_path: Any, edit: Any = None) -> tuple[int, dict, str]:
    assert leftovers(world) == []

    def windows(data: dict) -> None:  # the local tier's windows
        block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
        block["monitor"] = {**block["monitor"], "settle_s": 3, "recovery_window_s": 2}
        if edit:
            edit(data)

    exp = variant(name, tmp_path / f"{name}.yaml", edit=windows)
    t0 = time.monotonic()
    code, summary, out = raychaos_run(world, exp, tmp_path / "results")
    SECONDS[name] = time.monotonic() - t0
    assert not summary["errors"], summary["errors"]
    for fault in summary["faults"]:
        assert fault["state"] == "undone", fault
    assert leftovers(world) == []
    return code, summary, out


def _rows(summary: dict) -> dict[str, dict]:
    return {s["name"]: s for s in summary["slos"]}


def _show(summary: dict) -> str:
    return json.dumps({s["name"]: [s["value"], s["verdict"]] for s in summary["slos"]})


def test_the_fraction_that_does_not_pack_strands_capacity(world, tmp_path):
    def shorter(data: dict) -> None:
        data["method"][0]["pauses"] = {"before": 14}

    code, summary, out = _run(world, "gpu-fragmentation", tmp_path, shorter)
    rows = _rows(summary)
    assert rows["half-gpu-strands-little"]["verdict"] == "pass", _show(summary)
    assert rows["sixty-gpu-strands-little"]["verdict"] == "fail", _show(summary)
    assert rows["sixty-gpu-demand-not-pending-beside-free-gpus"]["verdict"] == "fail"
    [probe] = [p for p in summary["probes"] if p["name"] == "gpu_stranding"]
    assert probe["evidence"]["worst"] == "gpu-sixty"
    assert code == 1, out[-3000:]


def test_a_working_set_that_stops_fitting_spills_and_restores(world, tmp_path):
    code, summary, out = _run(world, "object-store-spill", tmp_path)
    [fault] = summary["faults"]
    assert fault["evidence"]["held_mb"] == 72, fault["evidence"]
    rows = _rows(summary)
    assert rows["spill-rate-while-it-fits"]["verdict"] == "pass", _show(summary)
    assert rows["spill-rate-under-pressure"]["verdict"] == "fail", _show(summary)
    assert rows["restore-rate-under-pressure"]["verdict"] == "fail", _show(summary)
    assert code == 1, out[-3000:]


def test_the_dev_shm_trap_is_refused_in_one_sentence(world, tmp_path):
    exp = variant("dev-shm-trap", tmp_path / "dev-shm-trap.yaml")
    proc = subprocess.run([sys.executable, "-m", "raychaos.cli", "run", str(exp), "--target",
                           "kubernetes", "--kubeconfig", world.kubeconfig, "--namespace",
                           world.namespace, "--cluster", str(world.cluster), "--results",
                           str(tmp_path / "results")], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(errors) == 1 and "dev-shm-trap.yaml: method[0].provider: kubernetes target" \
        in errors[0] and "/dev/shm" in errors[0], proc.stderr
    assert leftovers(world) == []
