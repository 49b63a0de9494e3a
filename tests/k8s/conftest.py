"""Fixtures for the k8s tier: a fresh fake API server per test and a target connected to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.fakeapi import FakeKube


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    kube = FakeKube()
    kube.seed_raycluster()
    kube.start()
    yield kube
    kube.stop()


@pytest.fixture
def make_target(fake: FakeKube, tmp_path):  # noqa: ANN001 - pytest fixture
    """Build (and connect) a target against ``fake``; extra keywords go to KubernetesSpec."""
    made: list[KubernetesTarget] = []

    def make(connect: bool = True, **spec_kwargs) -> KubernetesTarget:  # noqa: ANN003
        kw = {"cluster": "demo", "namespace": "ray",
              "kubeconfig": fake.kubeconfig(str(tmp_path / "kubeconfig"))} | spec_kwargs
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

