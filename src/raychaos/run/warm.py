"""A series of runs on one warm cluster: every run keeps it, the series takes it down.

Trials and game days run one experiment after another against the same cluster. Each run reuses
the cluster the previous one left — the target restores it and proves it clean first (locally
:mod:`raychaos.targets.local.warm`) — so only the first run pays for a cluster start. When the
caller wants the cluster gone afterwards (``--down``), no run takes it down half-way through the
series (the next would start it again, cold): :class:`WarmSeries` has every run keep it and
takes it down once, after the last, when a run of the series started it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from raychaos.errors import RaychaosError
from raychaos.run.runner import RunOutcome

__all__ = ["WarmSeries"]


class WarmSeries:
    """Tracks which runs of a series started a cluster, to take it down at the end."""

    def __init__(self, keep_cluster: bool, state_root: str | Path | None = None,
                 say: Callable[[str], None] = print, target: Any = None):
        self.keep_cluster = keep_cluster
        self.state_root = state_root
        self.say = say
        self.target = target  # a game day's target, replacing each experiment's own
        self.started: list[Path] = []  # the experiments whose run started a cluster

    def ran(self, experiment: str | Path, outcome: RunOutcome) -> None:
        if outcome.started_cluster:
            self.started.append(Path(experiment))

    def finish(self) -> None:
        """Take down the clusters the series started, unless they are to be kept."""
        if self.keep_cluster or not self.started:
            return
        from raychaos.config.experiment import load_experiment
        from raychaos.targets import make_target

        for experiment in dict.fromkeys(self.started):
            try:
                spec = load_experiment(experiment, target=self.target).settings.target
                target = make_target(spec, state_root=self.state_root)
                self.say("taking the cluster of the series down")
                target.down()
            except RaychaosError as exc:
                self.say(f"could not take the cluster of {experiment} down: {exc}")
