"""Fixtures for the k8s tier: a KubeRay test world with simulated kubelets per test (no Ray, no
root, no lock: the API semantics in about a second), and a target connected to it. The test bed
of real parts is ``tests/k8s/bed``'s (its ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.world import World, default_nodes


@pytest.fixture
def sim(tmp_path) -> Iterator[World]:  # noqa: ANN001 - pytest fixture
    """The default world's topology, simulated: head-0, cpu-0, gpu-a, gpu-b; RayCluster
    ray/demo with GCS FT (head, a GPU worker, a CPU worker), all Ready."""
    w = World(name="sim", nodes=default_nodes("sim"), state_root=tmp_path / "world").start()
    try:
        w.wait_ready(timeout=30)
    except BaseException:
        w.stop()
        raise
    yield w
    assert w.stop() == []


@pytest.fixture
def make_target(sim: World):  # noqa: ANN001 - pytest fixture
    """Build (and connect) a target against ``sim``; extra keywords go to KubernetesSpec."""
    made: list[KubernetesTarget] = []

    def make(connect: bool = True, **spec_kwargs) -> KubernetesTarget:  # noqa: ANN003
        kw = {"cluster": "demo", "namespace": "ray", "kubeconfig": sim.kubeconfig} | spec_kwargs
        target = KubernetesTarget(KubernetesSpec(**kw), run_id="run1")
        if connect:
            target.connect()
        made.append(target)
        return target

    yield make
    for t in made:
        t.close()


@pytest.fixture
def target(make_target) -> KubernetesTarget:  # noqa: ANN001
    return make_target()


def mutations(w: World, since: int = 0) -> list[tuple[str, str]]:
    """(method, path without query) of every mutating request the world served."""
    return [(m, p.split("?")[0]) for m, p, _v in w.server.requests[since:]
            if m in ("POST", "PUT", "PATCH", "DELETE")]
