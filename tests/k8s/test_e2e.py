"""Opt-in: the Kubernetes target against a real cluster with KubeRay.

Set ``RAYCHAOS_E2E_KUBECONFIG`` (and optionally ``RAYCHAOS_E2E_NAMESPACE``,
``RAYCHAOS_E2E_CLUSTER``). Only the head-kill is run: it is the one fault KubeRay undoes by
itself. Drains and network faults are left to a cluster owner's experiment files.
"""

from __future__ import annotations

import os

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget

KUBECONFIG = os.environ.get("RAYCHAOS_E2E_KUBECONFIG")

pytestmark = [
    pytest.mark.k8s, pytest.mark.e2e,
    pytest.mark.skipif(not KUBECONFIG, reason="set RAYCHAOS_E2E_KUBECONFIG to run against a "
                                              "real cluster with KubeRay"),
]


@pytest.fixture
def real_target():
    spec = KubernetesSpec(kubeconfig=KUBECONFIG,
                          namespace=os.environ.get("RAYCHAOS_E2E_NAMESPACE", "default"),
                          cluster=os.environ.get("RAYCHAOS_E2E_CLUSTER"))
    target = KubernetesTarget(spec)
    target.connect()
    yield target
    target.cleanup_run()
    target.close()


def test_describe(real_target):
    info = real_target.describe()
    assert info["cluster"] and "enabled" in info["gcs_ft"]


def test_head_pod_kill_comes_back_with_new_identity(real_target):
    record: dict = {}
    kill = real_target.kill_head("pod", record)
    back = real_target.wait_head_back(kill["old"], timeout=300)
    assert back["recovered"], back
    assert back["uid_changed"] or back["restart_count"] > kill["old"]["restart_count"]
    real_target.undo(record)
