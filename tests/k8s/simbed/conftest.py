"""A test bed with simulated nodes (``raychaos testbed up --sim-nodes``): the real etcd,
kube-apiserver, controller-manager, scheduler and KubeRay operator, and nodes whose kubelet runs
nothing (pods Running and Ready at once, no Ray in them). One for the package, in the light
lane: its parts stay in the lane's CPU group; it needs no root."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from raychaos.testbed import bed as testbed


@pytest.fixture(scope="package")
def simbed(tmp_path_factory) -> Iterator[testbed.Bed]:  # noqa: ANN001 - pytest fixture
    """The bed ``sim`` with the default four nodes simulated and the demo RayCluster ready to
    the operator; ``down`` at the end must stop every part it started."""
    os.environ["RAYCHAOS_TESTBED_STATE"] = str(tmp_path_factory.mktemp("simbed-state"))
    b = testbed.up("sim", "ray", say=print, cluster=True,
                   sim_nodes=[dict(n) for n in testbed.DEFAULT_NODES])
    try:
        yield b
    finally:
        stopped = testbed.down("sim")
        assert set(stopped) >= {"kube-apiserver", "kuberay-operator", "sim-nodes"}, stopped
