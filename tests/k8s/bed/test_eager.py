"""The catalog's health-check experiments on Kubernetes, against a RayCluster whose GCS checks its
raylets eagerly — the head container's ``RAY_health_check_period_ms=1000``,
``RAY_health_check_timeout_ms=2000``, ``RAY_health_check_failure_threshold=3``, as a user sets
them on KubeRay and as the local tier's ``test_ray_faults`` cluster has them — run as a user runs
them (``raychaos run … --target kubernetes``) on the test bed (the real control plane and
KubeRay operator), each reaching the verdict it reaches locally:

- ``shuffle-saturation-heartbeats`` as shipped (its file asks for those settings): worker-1's
  link shaped to 2 Mbit and flooded under a shuffle, the GCS misses its health checks and
  declares the node dead while its raylet runs — exit 1, the false death named;
- ``blackout-false-deaths`` with one 12 s cycle, the negative control of ``false_node_deaths``
  (its shipped file keeps Ray's default checks, which ride a 12 s blackout out: it passes in
  ``test_rest_of_catalog.py``): the eager GCS declares the dark worker dead — exit 1.

Each run proves its fault landed and was undone, and the bed is proven clean after it (as in
``test_rest_of_catalog.py``). The cluster is ``eager``: the demo's spec with those three
settings on the head container, made after the demo RayCluster is deleted (one Ray cluster at a
time on 2 cores) and deleted at the end of the module.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from tests.k8s._bed import (
    SECONDS,
    assert_clean,
    assert_faults_landed_and_undone,
    bed_run,
    delete_and_wait,
    demo_spec,
    raycluster,
    variant,
    wait_cluster,
)

pytestmark = [pytest.mark.k8s,
              pytest.mark.skipif(os.geteuid() != 0, reason="the bed's nodes need root (netns)")]

EAGER = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
         "RAY_health_check_failure_threshold": "3"}
CLUSTER = "eager"


@pytest.fixture(scope="module")
def eager(bed):  # noqa: ANN001, ANN201
    """The RayCluster ``eager`` on the bed, Ready with its Ray nodes ALIVE."""
    delete_and_wait(bed, "rayclusters", "demo")
    spec = demo_spec()
    [head] = spec["headGroupSpec"]["template"]["spec"]["containers"]
    head["env"] = [*(head.get("env") or []), *({"name": k, "value": v} for k, v in EAGER.items())]
    t0 = time.monotonic()
    with raycluster(bed, CLUSTER, spec):
        wait_cluster(bed, CLUSTER)
        SECONDS["eager cluster ready"] = time.monotonic() - t0
        yield bed


def _method_args(data: dict[str, Any], func: str) -> dict[str, Any]:
    act = next(a for a in data["method"] if a["provider"]["func"] == func)
    args: dict[str, Any] = act["provider"].setdefault("arguments", {})
    return args


def _run(b: Any, name: str, tmp_path: Any, edit: Any) -> tuple[int, dict, str]:
    assert_clean(b, CLUSTER)
    exp = variant(name, tmp_path / f"{name}.yaml", edit=edit)
    t0 = time.monotonic()
    code, summary, out = bed_run(b, exp, tmp_path / "results", "--cluster", CLUSTER)
    SECONDS[name] = time.monotonic() - t0
    assert_faults_landed_and_undone(summary)
    return code, summary, out


def _false_deaths(summary: dict) -> dict:
    return next(p for p in summary["probes"] if p["name"] == "false_node_deaths")


def test_a_saturated_link_under_a_shuffle_times_out_the_health_checks(eager, tmp_path):
    def shorter(data: dict) -> None:  # the eager GCS gives up within ~10 s of missed checks
        _method_args(data, "saturate_network").update(flood_s=40)
        next(a for a in data["method"] if a["name"].startswith("shape"))["pauses"] = \
            {"after": 20}

    code, summary, out = _run(eager, "shuffle-saturation-heartbeats", tmp_path, shorter)
    [fault] = summary["faults"]
    shaped = set(fault["evidence"]["victims"])
    deaths = _false_deaths(summary)
    assert deaths["verdict"] == "fail", json.dumps(deaths)[:3000]
    assert {d["node"] for d in deaths["evidence"]["false"]} == shaped, (
        deaths, fault["evidence"])
    rows = {s["name"]: s for s in summary["slos"]}
    assert rows["no-failed-health-checks"]["verdict"] == "fail", rows["no-failed-health-checks"]
    assert rows["no-failed-health-checks"]["value"] > 0
    assert code == 1, out[-3000:]
    assert_clean(eager, CLUSTER)


def test_a_blackout_the_eager_gcs_does_not_ride_out_is_a_false_death(eager, tmp_path):
    code, summary, out = _run(eager, "blackout-false-deaths", tmp_path,
                              lambda d: _method_args(d, "blackout").update(count=1))
    deaths = _false_deaths(summary)
    assert deaths["verdict"] == "fail" and deaths["evidence"]["false_deaths"] >= 1, deaths
    # its raylet ran when the death was seen; or, the exec that asks got no answer in time on
    # a loaded node (or the raylet had already obeyed), it logged being marked dead itself
    assert all(d["raylet_alive"] is True or d.get("told_marked_dead")
               for d in deaths["evidence"]["false"]), deaths
    rows = {s["name"]: s for s in summary["slos"]}
    assert rows["no-false-node-deaths"]["verdict"] == "fail" and code == 1, out[-3000:]
    assert_clean(eager, CLUSTER)
