"""Loading an experiment for a run: validated, aimed at its target, and checked against what
that target can do — before anything starts. Every entrance (``raychaos run``/``validate``,
``chaos run`` through the control, the pytest plugin, game days) loads experiments here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raychaos.config.experiment import Experiment, load_experiment
from raychaos.config.settings import TargetSpec
from raychaos.targets import check_target

__all__ = ["load"]


def load(path: str | Path, slo: str | Path | None = None,
         target: TargetSpec | dict[str, Any] | None = None) -> Experiment:
    """The experiment at ``path`` (ConfigError naming every problem, nothing started)."""
    exp = load_experiment(path, slo, target)
    check_target(exp)
    return exp
