"""The windows of a run's timeline that every SLO, figure and plot is read over — one definition.

Windows come from the fault events on the run's one clock (:class:`~raychaos.results.store.Ev`):

- ``baseline``: from the first load record (or the run start) to the first ``fault_start``;
- ``chaos``: from the first ``fault_start`` to the last ``fault_end`` — for a fault whose effect
  is over once applied (a kill the head recovers from) that is its ``fault_applied``, for a
  lasting one (a throttle, a drain) its ``rollback_end`` (or ``rollback_failed``);
- ``recovery``: from the end of chaos to the end of the timeline;
- ``run``: the whole timeline.

A run that never got as far as a fault has only ``baseline`` and ``run``; a timeline written
before ``fault_end`` existed is cut by the same rule from ``fault_applied``/``rollback_end``.
"""

from __future__ import annotations

from typing import Any

from raychaos.results.store import Ev

__all__ = ["WINDOWS", "windows"]

WINDOWS = ("baseline", "chaos", "recovery", "run")
Window = tuple[float, float]


def windows(records: list[dict[str, Any]]) -> dict[str, Window]:
    """The baseline, chaos, recovery and run windows (seconds on the run clock)."""
    end = max((r["t"] for r in records), default=0.0)
    events = [r for r in records if r.get("kind") == "event"]
    starts = [e["t"] for e in events if e["event"] == Ev.FAULT_START]
    loads = [r["t"] for r in records if r.get("kind") == "load"]
    first = min(loads) if loads else min((r["t"] for r in records), default=0.0)
    if not starts:
        return {"baseline": (first, end), "run": (first, end)}
    chaos_start = min(starts)
    ends = [e["t"] for e in events if e["event"] == Ev.FAULT_END
            or (e["event"] == Ev.ROLLBACK_FAILED and _detail(e).get("lasting", True))]
    if not any(e["event"] == Ev.FAULT_END for e in events):  # timelines written before 0.2
        ends = [e["t"] for e in events
                if (e["event"] == Ev.FAULT_APPLIED and not _detail(e).get("lasting", False))
                or (e["event"] in (Ev.ROLLBACK_END, Ev.ROLLBACK_FAILED)
                    and _detail(e).get("lasting", True))]
    ends = [t for t in ends if t >= chaos_start]
    chaos_end = max(ends, default=end)
    return {"baseline": (min(first, chaos_start), chaos_start), "chaos": (chaos_start, chaos_end),
            "recovery": (chaos_end, end), "run": (first, end)}


def _detail(event: dict[str, Any]) -> dict[str, Any]:
    detail = event.get("detail")
    return detail if isinstance(detail, dict) else {}
