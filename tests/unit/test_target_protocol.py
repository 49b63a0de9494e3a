"""Every target satisfies the whole Target protocol — the same methods, the same keyword-only
fault arguments — so faults, probes, monitor and session never need to ask what a target has."""

from __future__ import annotations

import inspect

import pytest

from raychaos.targets.base import Target
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.targets.local.target import LocalTarget
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit

MEMBERS = [n for n, v in vars(Target).items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize("cls", [LocalTarget, KubernetesTarget, FakeTarget])
def test_every_protocol_method_is_implemented_with_its_signature(cls):
    assert MEMBERS and "refusals" in MEMBERS and "serve_url" in MEMBERS
    for name in MEMBERS:
        impl = getattr(cls, name, None)
        assert callable(impl), f"{cls.__name__} lacks {name}"
        want = inspect.signature(getattr(Target, name)).parameters
        have = inspect.signature(impl).parameters
        for pname, param in want.items():
            assert pname in have, f"{cls.__name__}.{name} lacks argument {pname}"
            assert have[pname].kind == param.kind, f"{cls.__name__}.{name}({pname})"
        extra = [p for p in have.values() if p.name not in want
                 and p.default is inspect.Parameter.empty
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        assert not extra, f"{cls.__name__}.{name} needs more than the protocol gives: {extra}"


def test_refusals_name_what_the_kubernetes_target_cannot_do():
    from raychaos.config.settings import KubernetesSpec

    k8s = KubernetesTarget(KubernetesSpec(cluster="rc"))
    assert k8s.refusals("saturate_network", {"partition": True})[0][0] == "partition"
    assert k8s.refusals("saturate_network", {"partition": False, "loss_pct": 0}) == []
    assert k8s.refusals("kill_head", {"mode": "gcs"}) == []
