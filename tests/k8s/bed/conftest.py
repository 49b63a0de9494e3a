"""The test bed of real parts, one for the package: every module here runs against it, in the
order a cluster can bear — ``test_control_plane.py`` first, on the fresh demo RayCluster (its
last tests replace it with a RayJob's cluster and a cluster without GCS fault tolerance), then
``test_eager.py``, ``test_rayservice.py`` and ``test_resources.py``, each on a cluster of its
own, then ``test_rest_of_catalog.py`` on the demo made again."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from raychaos.testbed import bed as testbed
from tests.k8s import _bed


@pytest.fixture(scope="package")
def bed(tmp_path_factory) -> Iterator[testbed.Bed]:  # noqa: ANN001 - pytest fixture
    """``raychaos testbed up --nodes`` (the real control plane and KubeRay operator, built from
    their Go modules, and our kubelet running the operator's pods as Ray nodes) with the demo
    RayCluster, for this package; ``down`` at its end must leave no process, network namespace,
    link or CPU group. One for the package (a bed comes up in ~65 s), not for the session: an
    idle bed (its control plane, the node agent, a Ray cluster) would take CPU from the world
    modules that run after it in the lane. ``make test`` builds the parts in the background;
    ``up`` waits for that build (its lock) and builds whatever is still missing."""
    os.environ["RAYCHAOS_TESTBED_STATE"] = str(tmp_path_factory.mktemp("testbed-state"))
    t0 = time.monotonic()
    b = testbed.up(_bed.BED, _bed.NS, nodes=True, cluster=True, say=print)
    _bed.SECONDS["up (demo ready)"] = time.monotonic() - t0
    try:
        yield b
    finally:
        t0 = time.monotonic()
        stopped = testbed.down(_bed.BED)  # raises, naming it, if anything is left
        _bed.SECONDS["down"] = time.monotonic() - t0
        print("\nthe test bed, seconds: "
              + json.dumps({k: round(v, 1) for k, v in _bed.SECONDS.items()})
              + "\nthe test bed, figures: "
              + json.dumps({k: round(v, 1) for k, v in _bed.FIGURES.items()}))
        assert set(stopped) >= {"kube-apiserver", "kuberay-operator", "raychaos-kubelet"}
        assert not _bed.bed_netns(), _bed.bed_netns()
