"""``abort_if``: the experiment's own stop conditions, judged on the monitor's timeline.

The watcher reads the same ``timeline.jsonl`` the SLOs are judged from (one source of truth, and
no hook into the monitor's threads), twice a second. When a condition has held for its ``for_s``
it writes an ``abort`` event and calls ``on_abort(reason)``; the runner's stop switch then
interrupts the method, rolls back and writes the summary with status ``aborted``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raychaos.config.settings import AbortSpec
from raychaos.results.store import read_timeline

__all__ = ["AbortWatch", "current_value"]


def current_value(metric: str, records: list[dict[str, Any]], now: float,
                  window_s: float) -> float | None:
    """The metric's value at ``now`` from timeline records; None when not measured yet."""
    if metric == "gcs_down_s":
        samples = [r for r in records if r.get("kind") == "sample" and "gcs_up" in r]
        if not samples or samples[-1]["gcs_up"]:
            return 0.0 if samples else None
        last_up = max((r["t"] for r in samples if r["gcs_up"]), default=samples[0]["t"])
        return max(0.0, now - float(last_up))
    if metric == "nodes_dead":
        samples = [r for r in records if r.get("kind") == "sample" and "nodes_total" in r]
        if not samples:
            return None
        return float(samples[-1]["nodes_total"] - samples[-1]["nodes_alive"])
    if metric == "error_ratio":
        since = now - max(window_s, 1.0)
        loads = [r for r in records if r.get("kind") == "load" and r.get("t", 0) >= since]
        count = sum(r.get("count", 0) for r in loads)
        failures = sum(r.get("failures", 0) for r in loads)
        return failures / (count + failures) if count + failures else None
    raise ValueError(f"unknown abort metric {metric!r}")


class AbortWatch:
    """Checks each condition; ``for_s`` is how long it must hold before the run is stopped."""

    def __init__(self, conditions: list[AbortSpec], timeline_path: Path, every_s: float = 0.5,
                 now: Callable[[], float] | None = None):
        self.conditions = conditions
        # the run's clock, not the last record: a sampler stuck on a dead GCS writes nothing,
        # and "down for how long" must keep growing while it is stuck
        self.now = now
        self.timeline_path = timeline_path
        self.every_s = every_s
        self._since: dict[int, float] = {}

    def check(self, records: list[dict[str, Any]], now: float) -> str | None:
        """The reason to abort at ``now``, or None."""
        for i, cond in enumerate(self.conditions):
            value = current_value(cond.metric, records, now, cond.for_s)
            if value is None or value <= cond.above:
                self._since.pop(i, None)
                continue
            # error_ratio is already averaged over for_s; the others must hold that long
            held_from = self._since.setdefault(i, now)
            if cond.metric == "error_ratio" or now - held_from >= cond.for_s:
                return (f"abort_if[{i}]: {cond.metric} = {value:.3g} above {cond.above:g}"
                        + (f" for {cond.for_s:g} s" if cond.for_s else ""))
        return None

    def loop(self, on_abort: Callable[[str], None], stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            records = read_timeline(self.timeline_path)
            now = self.now() if self.now else max((r.get("t", 0.0) for r in records),
                                                  default=0.0)
            reason = self.check(records, now)
            if reason:
                on_abort(reason)
                return
