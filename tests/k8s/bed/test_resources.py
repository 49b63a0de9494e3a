"""The catalog's resource experiments against the real control plane, run as a user runs them
(``raychaos run … --target kubernetes``), on a RayCluster of the local resource tier's shape
made for this module: two GPU workers with two logical GPUs each (Ray's ``num-gpus``; each pod
takes its node's one ``nvidia.com/gpu``), one group apiece so each carries the ``raychaos.io/node``
label the experiments' selectors name (worker-1, worker-2), a CPU worker (worker-3) for the
drivers, 100 MiB object stores. Each reaches the verdict it reaches locally
(``tests/integration/test_resources.py``):

- ``gpu-fragmentation``: 0.5-GPU tasks pack two to a GPU, 0.6-GPU tasks strand 0.4 of each —
  the sixty-percent SLOs fail, the half ones pass (exit 1);
- ``object-store-spill``: a neighbour pins 72 of worker-1's 100 MB and the working set spills
  and restores — the spill SLOs pass while it fits and fail under pressure (exit 1). The local
  tier slows the spill disk to 20 MB/s (a local-only setting); here it is the pod's own disk;
- ``dev-shm-trap`` is refused before anything starts: the Kubernetes target does not roll pods
  onto another /dev/shm (``raychaos review`` reads the RayCluster's shared-memory size).

It runs after the eager cluster's module and before the rest of the catalog (which makes the
demo again): the demo is deleted first, so this cluster has both GPU nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from raychaos.testbed import bed as testbed
from tests.k8s._bed import (
    NS,
    REPO,
    api,
    bed_run,
    delete_and_wait,
    demo_spec,
    leftovers,
    raycluster,
    variant,
    wait_cluster,
)

pytestmark = [pytest.mark.k8s,
              pytest.mark.skipif(os.geteuid() != 0, reason="the bed's nodes need root (netns)")]

NAME = "kres"


def resources_spec() -> dict[str, Any]:
    """The demo's spec in the local resource tier's shape (the module's docstring)."""
    spec = demo_spec()
    store = str(100 * 2**20)
    spec["headGroupSpec"]["rayStartParams"]["object-store-memory"] = store
    gpu, cpu = spec["workerGroupSpecs"]
    groups = []
    for i in (1, 2):
        g = json.loads(json.dumps(gpu))
        g.update(groupName=f"gpu{i}", replicas=1, minReplicas=1, maxReplicas=1)
        g["rayStartParams"].update({"num-gpus": "2", "object-store-memory": store})
        # the group's top-level labels: KubeRay v1.5.0 passes them to `ray start --labels`
        # (and the pods); it refuses rayStartParams' own `labels` and makes no pods at all
        g["labels"] = {"raychaos.io/node-group": "gpu", "raychaos.io/node": f"worker-{i}"}
        groups.append(g)
    cpu["rayStartParams"]["object-store-memory"] = store
    cpu["labels"] = {"raychaos.io/node-group": "cpu", "raychaos.io/node": "worker-3"}
    spec["workerGroupSpecs"] = [*groups, cpu]
    return spec


@pytest.fixture(scope="module")
def kres(bed: testbed.Bed) -> Iterator[testbed.Bed]:
    if api(bed).call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/demo")[0] == 200:
        delete_and_wait(bed, "rayclusters", "demo")
    with raycluster(bed, NAME, resources_spec()):
        wait_cluster(bed, NAME, pods=4)
        yield bed


def _run(b: testbed.Bed, name: str, tmp_path: Any, edit: Any = None) -> tuple[int, dict, str]:
    assert leftovers(b) == []

    def windows(data: dict) -> None:  # the local tier's windows
        block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
        block["monitor"] = {**block["monitor"], "settle_s": 3, "recovery_window_s": 2}
        if edit:
            edit(data)

    exp = variant(name, tmp_path / f"{name}.yaml", edit=windows)
    code, summary, out = bed_run(b, exp, tmp_path / "results", "--cluster", NAME)
    assert not summary["errors"], summary["errors"]
    for fault in summary["faults"]:
        assert fault["state"] == "undone", fault
    assert leftovers(b) == []
    return code, summary, out


def _rows(summary: dict) -> dict[str, dict]:
    return {s["name"]: s for s in summary["slos"]}


def _show(summary: dict) -> str:
    return json.dumps({s["name"]: [s["value"], s["verdict"]] for s in summary["slos"]})


def test_the_fraction_that_does_not_pack_strands_capacity(kres, tmp_path):
    def shorter(data: dict) -> None:
        data["method"][0]["pauses"] = {"before": 14}

    code, summary, out = _run(kres, "gpu-fragmentation", tmp_path, shorter)
    rows = _rows(summary)
    assert rows["half-gpu-strands-little"]["verdict"] == "pass", _show(summary)
    assert rows["sixty-gpu-strands-little"]["verdict"] == "fail", _show(summary)
    assert rows["sixty-gpu-demand-not-pending-beside-free-gpus"]["verdict"] == "fail"
    [probe] = [p for p in summary["probes"] if p["name"] == "gpu_stranding"]
    assert probe["evidence"]["worst"] == "gpu-sixty"
    assert code == 1, out[-3000:]


def test_a_working_set_that_stops_fitting_spills_and_restores(kres, tmp_path):
    code, summary, out = _run(kres, "object-store-spill", tmp_path)
    [fault] = summary["faults"]
    assert fault["evidence"]["held_mb"] == 72, fault["evidence"]
    rows = _rows(summary)
    assert rows["spill-rate-while-it-fits"]["verdict"] == "pass", _show(summary)
    assert rows["spill-rate-under-pressure"]["verdict"] == "fail", _show(summary)
    assert rows["restore-rate-under-pressure"]["verdict"] == "fail", _show(summary)
    assert code == 1, out[-3000:]


def test_the_dev_shm_trap_is_refused_in_one_sentence(kres, tmp_path):
    exp = variant("dev-shm-trap", tmp_path / "dev-shm-trap.yaml")
    proc = subprocess.run([sys.executable, "-m", "raychaos.cli", "run", str(exp), "--target",
                           "kubernetes", "--kubeconfig", str(kres.kubeconfig), "--namespace",
                           NS, "--cluster", NAME, "--results", str(tmp_path / "results")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(errors) == 1 and "dev-shm-trap.yaml: method[0].provider: kubernetes target" \
        in errors[0] and "/dev/shm" in errors[0], proc.stderr
    assert leftovers(kres) == []
