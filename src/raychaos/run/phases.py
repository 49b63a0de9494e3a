"""Where a run's time went: seconds per phase, in every ``summary.json`` and on the console.

A run is cut into consecutive, non-overlapping segments — the target coming up, the loads, the
Serve deployment, the sentinel, the baseline, each Chaos Toolkit activity (``action kill-head``,
``probe gcs-recovery``), the rollbacks, the recovery window, the verdict, the teardown — so the
seconds add up to the run's wall time and a slow phase is visible in every run instead of
guessed. Time between two activities (a ``pauses`` entry, Chaos Toolkit's own work) goes to
the Chaos Toolkit phase around them (``hypothesis``, ``method``, ``rollbacks``).

:class:`Phases` is the stopwatch; :func:`format_phases` the console line. A name entered twice
(the hypothesis before and after the method, an activity repeated) gets ``#2``, ``#3``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Phases", "format_phases"]


class Phases:
    """One segment open at a time; :meth:`enter` closes it and opens the next."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._done: dict[str, float] = {}
        self._seen: dict[str, int] = {}
        self._current: str | None = None
        self._since = clock()
        self.t0 = self._since

    @property
    def current(self) -> str | None:
        return self._current

    def enter(self, name: str) -> str:
        """Close the open segment and open ``name``; returns the name as recorded."""
        with self._lock:
            now = self._clock()
            self._close(now)
            count = self._seen.get(name, 0) + 1
            self._seen[name] = count
            self._current = name if count == 1 else f"{name} #{count}"
            self._since = now
            return self._current

    def resume(self, name: str) -> None:
        """Go back to an already recorded segment (the CTK phase around an activity): its
        seconds keep adding up under the same name."""
        with self._lock:
            now = self._clock()
            self._close(now)
            self._current, self._since = name, now

    def stop(self) -> None:
        with self._lock:
            self._close(self._clock())
            self._current = None

    def as_dict(self) -> dict[str, float]:
        """Seconds per phase, in the order first entered; the open one up to now."""
        with self._lock:
            out = dict(self._done)
            if self._current is not None:
                out[self._current] = out.get(self._current, 0.0) + self._clock() - self._since
        return {k: round(v, 2) for k, v in out.items()}

    def total(self) -> float:
        return round(self._clock() - self.t0, 2)

    def _close(self, now: float) -> None:
        if self._current is not None:
            self._done[self._current] = self._done.get(self._current, 0.0) + now - self._since


def format_phases(phases: dict[str, float], total: float | None = None, width: int = 100
                  ) -> str:
    """``phases: target_up 11.2s · loads_up 1.3s · ...  (total 64.0s)``, wrapped to ``width``."""
    items = [f"{name} {seconds:.1f}s" for name, seconds in phases.items() if seconds >= 0.05]
    if total is not None:
        items.append(f"total {total:.1f}s")
    lines: list[str] = []
    line = "phases:"
    for i, item in enumerate(items):
        piece = (" · " if i else " ") + item
        if i and len(line) + len(piece) > width:
            lines.append(line + " ·")
            line, piece = "   ", " " + item
        line += piece
    lines.append(line)
    return "\n".join(lines)
