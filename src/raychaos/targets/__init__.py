"""Targets: where the Ray cluster under test lives. Faults and probes talk only to the
:class:`~raychaos.targets.base.Target` protocol; each target module owns its heavy imports."""

from __future__ import annotations

from raychaos.config import TargetSpec
from raychaos.targets.base import Target


def make_target(spec: TargetSpec, state_root: str | None = None) -> Target:
    """The target named by ``spec.kind``; imports its module only when chosen."""
    if spec.kind == "kubernetes":
        from raychaos.targets.kubernetes import KubernetesTarget

        return KubernetesTarget(spec.kubernetes)
    from raychaos.targets.local import LocalTarget

    return LocalTarget(spec.local, state_root=state_root)
