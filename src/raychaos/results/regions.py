"""Where each fault and each rollback sits on the run's clock — the bands every view draws.

The report's timeline shades them, the Prometheus export turns them into a 1/0 series and Grafana
gets one region annotation per fault: one definition, read from the timeline's events. A fault's
band runs from its ``fault_start`` to its ``fault_end`` (the end of its effect: the moment it
landed for a kill, its rollback for a lasting fault) — or ``fault_failed`` — and a rollback's
from ``rollback_start`` to ``rollback_end``/``rollback_failed``; one still open when the
timeline ends (a crash) runs to its last record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Region", "regions"]


@dataclass(frozen=True)
class Region:
    kind: str  # "fault" or "rollback"
    name: str  # the fault's name (kill_head, ...)
    id: str  # the ledger record's id (f1, ...), or the name when an event carried none
    t0: float  # run clock, seconds
    t1: float
    ts0: float  # wall clock, epoch seconds
    ts1: float

    @property
    def label(self) -> str:
        return f"{self.name} {self.id}" if self.id != self.name else self.name


def _t(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def regions(records: list[dict[str, Any]]) -> list[Region]:
    """Every fault and rollback band of the timeline, in order of start."""
    timed = [r for r in records if _t(r, "t") is not None]
    events = sorted((r for r in timed if r.get("kind") == "event"), key=lambda r: r["t"])
    last = max(timed, key=lambda r: r["t"], default=None)
    opened: dict[tuple[str, str], dict[str, Any]] = {}
    out: list[Region] = []
    ends = {"fault_end": "fault", "fault_failed": "fault", "rollback_end": "rollback",
            "rollback_failed": "rollback"}
    for ev in events:
        raw = ev.get("detail")
        detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
        name = str(ev.get("name"))
        key_id = str(detail.get("id") or name)
        kind = ev.get("event")
        if kind in ("fault_start", "rollback_start"):
            opened.setdefault((str(kind).split("_")[0], key_id), {**ev, "_id": key_id})
        elif kind in ends and (ends[str(kind)], key_id) in opened:
            out.append(_region(ends[str(kind)], opened.pop((ends[str(kind)], key_id)), ev))
    if last is not None:
        out += [_region(kind, start, last) for (kind, _), start in opened.items()]
    return sorted(out, key=lambda r: r.t0)


def _region(kind: str, start: dict[str, Any], end: dict[str, Any]) -> Region:
    t0, t1 = float(start["t"]), max(float(end["t"]), float(start["t"]))
    ts0 = _t(start, "ts")
    ts1 = _t(end, "ts")
    wall0 = ts0 - t0 if ts0 is not None else (ts1 - t1 if ts1 is not None else 0.0)
    return Region(kind, str(start.get("name")), str(start["_id"]), t0, t1, wall0 + t0, wall0 + t1)
