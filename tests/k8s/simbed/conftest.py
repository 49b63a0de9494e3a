"""A test bed with simulated nodes (``raychaos testbed up --sim-nodes``): the real etcd,
kube-apiserver, controller-manager, scheduler and KubeRay operator, and nodes whose kubelet runs
nothing (pods Running and Ready at once, no Ray in them). One for the package, in the light
lane: its parts stay in the lane's CPU group; it needs no root."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from raychaos.testbed import bed as testbed
from tests.k8s._bed import api as admin  # the bed's admin (not audited: not the run's user)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="package")
def bed_state(tmp_path_factory) -> Path:  # noqa: ANN001 - pytest fixture
    """One state root for every bed of the package (``down`` finds a bed by it)."""
    root = tmp_path_factory.mktemp("simbed-state")
    os.environ["RAYCHAOS_TESTBED_STATE"] = str(root)
    return root


@pytest.fixture(scope="package")
def simbed(bed_state: Path) -> Iterator[testbed.Bed]:
    """The bed ``sim`` with the default four nodes simulated and the demo RayCluster ready to
    the operator; ``down`` at the end must stop every part it started."""
    b = testbed.up("sim", "ray", say=print, cluster=True,
                   sim_nodes=[dict(n) for n in testbed.DEFAULT_NODES])
    try:
        yield b
    finally:
        stopped = testbed.down("sim")
        assert set(stopped) >= {"kube-apiserver", "kuberay-operator", "sim-nodes"}, stopped


@pytest.fixture
def make_target(simbed: testbed.Bed):  # noqa: ANN201
    """Build (and connect) a target against the sim bed's demo; keywords go to KubernetesSpec."""
    from raychaos.config.settings import KubernetesSpec
    from raychaos.targets.kubernetes.target import KubernetesTarget

    made: list[KubernetesTarget] = []

    def make(connect: bool = True, **spec_kwargs: object) -> KubernetesTarget:
        kw = {"cluster": "demo", "namespace": "ray", "kubeconfig": str(simbed.kubeconfig)}
        target = KubernetesTarget(KubernetesSpec(**(kw | spec_kwargs)), run_id="run1")
        if connect:
            target.connect()
        made.append(target)
        return target

    yield make
    for t in made:
        t.close()


def get(b: testbed.Bed, path: str) -> dict | None:
    """GET ``path`` on the bed's API server as its admin: the object, or None (404)."""
    code, body = admin(b).call("GET", path)
    if code == 404:
        return None
    assert code == 200, (code, body)
    return body


@pytest.fixture
def target(make_target):  # noqa: ANN001, ANN201
    return make_target()
