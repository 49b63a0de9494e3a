"""Fixtures for the k8s tier: the test bed of real parts for the real-clusters lane, a KubeRay
test world with simulated kubelets per test (no Ray, no root, no lock: the API semantics in
about a second), and a target connected to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from tests.k8s import _bed
from tests.k8s.world import World, default_nodes


@pytest.fixture(scope="module")
def bed(tmp_path_factory) -> Iterator[testbed.Bed]:  # noqa: ANN001 - pytest fixture
    """``raychaos testbed up --nodes`` (the real control plane and KubeRay operator, built from
    their Go modules, and our kubelet running the operator's pods as Ray nodes) with the demo
    RayCluster, for a module; ``down`` at its end must leave no process, network namespace,
    link or CPU group. Per module, not per session: an idle bed (its control plane, the node
    agent, a Ray cluster) takes CPU from the world modules that run after it in the lane.
    ``make test`` builds the parts in the background; ``up`` waits for that build (its lock)
    and builds whatever is still missing."""
    import json
    import os
    import time

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
              + json.dumps({k: round(v, 1) for k, v in _bed.SECONDS.items()}))
        assert set(stopped) >= {"kube-apiserver", "kuberay-operator", "raychaos-kubelet"}
        assert not _bed.bed_netns(), _bed.bed_netns()


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
