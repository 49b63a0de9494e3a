"""Game days: a plan of experiments run back to back, on demand or on a Kubernetes schedule.

A game day is how a team rehearses failure on purpose: *kill the head, cool down, drain a GPU
node, cool down, saturate the network*, then read one index page. This module owns

- the plan file (``experiments/gamedays/*.yaml``) as frozen dataclasses built by
  :func:`raychaos.schema.build`, so every problem is reported at once as
  ``<file>: <key.path>: <what is wrong>``, and experiment paths are resolved against the plan
  file's directory and checked to exist;
- what runs a plan lives elsewhere: :mod:`raychaos.run.series` (in order, with cooldowns),
  :mod:`raychaos.run.schedule` (a CronJob), :mod:`raychaos.results.gameday_index` (the page).

Plan format::

    name: weekly-head-and-gpu
    target: {kind: kubernetes, kubernetes: {cluster: raycluster-gpu, namespace: ml}}  # optional
    cooldown_s: 120            # between experiments (default 60)
    on_failure: stop           # stop | continue (default stop)
    experiments:
      - path: ../head-kill.yaml
      - {path: ../gpu-drain.yaml, cooldown_s: 300}
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from raychaos.config.schema import Problems, build, describe, load_yaml
from raychaos.config.settings import TargetSpec

__all__ = ["GameDayExperiment", "GameDayPlan", "load_gameday"]


@dataclass(frozen=True)
class GameDayExperiment:
    """One step of a game day. After loading, ``path`` is absolute."""

    path: str = field(metadata={"nonempty": True})
    cooldown_s: float | None = field(default=None, metadata={"min": 0, "max": 86400})


@dataclass(frozen=True)
class GameDayPlan:
    """A game-day plan; ``target``, when set, overrides each experiment's own target."""

    name: str = field(metadata={"nonempty": True})
    experiments: list[GameDayExperiment]
    target: TargetSpec | None = None
    cooldown_s: float = field(default=60.0, metadata={"min": 0, "max": 86400})
    on_failure: Literal["stop", "continue"] = "stop"

    def cooldown_after(self, index: int) -> float:
        """Seconds to wait after experiment ``index`` (its own value, else the plan's)."""
        own = self.experiments[index].cooldown_s
        return self.cooldown_s if own is None else own


def load_gameday(path: str | Path) -> GameDayPlan:
    """Load and validate a game-day plan; raise ConfigError listing every problem.

    Relative experiment paths are resolved against the plan file's directory; missing
    experiment files are reported as ``<plan>: experiments[i].path: no such experiment file
    '<as written>' (looked for <absolute path>)``.
    """
    plan_path = Path(path)
    data = load_yaml(plan_path, "game-day plan")
    problems = Problems(str(plan_path))
    base = plan_path.resolve().parent
    plan = build(GameDayPlan, data, problems)
    resolved: dict[int, str] = {}
    items = data.get("experiments") if isinstance(data, dict) else None
    if isinstance(items, list):
        if not items:
            problems.add("experiments", "must list at least one experiment")
        for i, item in enumerate(items):
            raw = item.get("path") if isinstance(item, dict) else None
            if not isinstance(raw, str) or not raw.strip():
                continue  # the schema reports it
            full = (base / os.path.expanduser(raw)).resolve()
            if not full.is_file():
                problems.add(f"experiments[{i}].path",
                             f"no such experiment file {describe(raw)} (looked for {full})")
            resolved[i] = str(full)
    problems.raise_if_any()
    assert plan is not None
    steps = [dataclasses.replace(e, path=resolved[i]) for i, e in enumerate(plan.experiments)]
    return dataclasses.replace(plan, experiments=steps)
