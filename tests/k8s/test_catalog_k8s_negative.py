"""The negative control on Kubernetes: the same head-kill experiment, run as a user runs it
(``raychaos run … --target kubernetes``), against a RayCluster *without* GCS fault tolerance
(``python -m tests.k8s.world up --no-gcs-ft``, its pods real Ray nodes) must fail — exit 1 —
and name what was lost: the detached sentinel actor, the load job, the workers' node IDs (a new
head is a new cluster: KubeRay's workers rejoin as new Ray nodes). A harness that passes this
is worthless. Run under ``flock /tmp/raychaos-cluster.lock``; one world for the module.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.k8s.test_catalog_k8s import (
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
    w = start_world("kneg", gcs_ft=False)
    try:
        yield w
    finally:
        stop_world(w)
        print(f"\nnegative control on kubernetes, seconds: "
              f"{ {k: round(v, 1) for k, v in SECONDS.items()} }")


def test_head_kill_without_gcs_ft_fails_and_names_what_was_lost(world, tmp_path):
    def shorter(data):  # noqa: ANN001 - the same windows as the local negative control
        # gcs_recovery waits its whole timeout for workers that never re-register (they come
        # back as new nodes): 30 s, the local control's 25 s plus a new head pod's start (the
        # GCS of a new head pod answered 4.3 s after the delete here)
        block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
        block["monitor"]["recovery_window_s"] = 1
        for act in data["method"]:
            if act["provider"]["func"] == "gcs_recovery":
                act["provider"]["arguments"]["timeout_s"] = 30

    exp = variant("head-kill", tmp_path / "head-kill.yaml", "pod", edit=shorter)
    t0 = time.monotonic()
    code, summary, out = raychaos_run(world, exp, tmp_path / "results")
    SECONDS["negative control (head-kill, no GCS FT)"] = time.monotonic() - t0
    assert code == 1, out[-4000:]
    assert summary["verdict"] == "fail" and summary["target"]["gcs_fault_tolerance"] is False
    probes = {p["name"]: p for p in summary["probes"]}
    assert probes["sentinel_preserved"]["verdict"] == "fail"
    assert probes["job_survival"]["evidence"]["lost"] == ["task_storm"]
    assert probes["gcs_recovery"]["evidence"]["workers_lost"], "workers did not keep their IDs"
    failed = {s["name"] for s in summary["slos"] if s["verdict"] == "fail"}
    assert {"sentinel-actor-preserved", "load-jobs-survive", "workers-reregister"} <= failed
    for what in ("sentinel-actor-preserved", "load-jobs-survive", "workers-reregister"):
        assert what in out, f"the console names {what}"
    assert leftovers(world) == []
