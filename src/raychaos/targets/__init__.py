"""Targets: where the Ray cluster under test lives.

Faults and probes talk only to the :class:`~raychaos.targets.base.Target` protocol; each target
package (:mod:`.local`, :mod:`.kubernetes`) owns its heavy imports and is imported only when
chosen. ``RAYCHAOS_TARGET_FACTORY=module:function`` replaces the factory (called with the
TargetSpec and the state root) — the seam the test suite uses to run whole experiments, through
``chaos run`` as well, against an in-process fake cluster.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from raychaos.config.experiment import Experiment, fault_activities
from raychaos.config.schema import Problems, describe, join
from raychaos.config.settings import TargetSpec
from raychaos.targets.base import Target

__all__ = ["check_target", "make_target"]

FACTORY_ENV = "RAYCHAOS_TARGET_FACTORY"


def make_target(spec: TargetSpec, state_root: str | Path | None = None) -> Target:
    """The target named by ``spec.kind``; imports its package only when chosen."""
    factory = os.environ.get(FACTORY_ENV)
    if factory:
        module, _, func = factory.partition(":")
        made: Target = getattr(importlib.import_module(module), func)(spec, state_root)
        return made
    if spec.kind == "kubernetes":
        from raychaos.targets.kubernetes.target import KubernetesTarget

        return KubernetesTarget(spec.kubernetes)
    from raychaos.targets.local.target import LocalTarget

    return LocalTarget(spec.local, state_root=state_root)


def check_target(exp: Experiment) -> None:
    """Refuse, before anything starts, faults (or arguments) the chosen target cannot honour."""
    target = make_target(exp.settings.target)
    problems = Problems(str(exp.path))
    for where, func, args in fault_activities(exp):
        for arg, why in target.refusals(func, args):
            key = join(where, arg) if arg else where.rsplit(".", 1)[0]
            value = f" ({describe(args[arg])})" if arg in args else ""
            problems.add(key, f"{exp.settings.target.kind} target: {why}{value}")
    problems.raise_if_any()
