"""The windows of a run's timeline that every SLO, figure and plot is read over — one definition.

Windows come from the fault events on the run's one clock (:class:`~raychaos.results.store.Ev`):

- ``baseline``: from ``baseline_start`` (every load reported its first completions: their
  start-up is not the system's steady state) — in a timeline without it, the first load record
  (or the run start) — to the first ``fault_start``;
- ``chaos``: from the first ``fault_start`` to the last ``fault_end`` — for a fault whose effect
  is over once applied (a kill the head recovers from) that is its ``fault_applied``, for a
  lasting one (a throttle, a drain) its ``rollback_end`` (or ``rollback_failed``);
- ``recovery``: from the end of chaos to the end of the timeline;
- ``run``: the whole timeline;
- ``overlap``: when faults ran concurrently (Chaos Toolkit background activities), from the first
  moment two of them were in effect together to the last — only in runs where that happened.

Each fault's own span (its ``fault_start`` to its ``fault_end``) and the faults it overlapped
are :func:`fault_spans`; the summary lists them, so a verdict says what ran together.

A run that never got as far as a fault has only ``baseline`` and ``run``; a timeline written
before ``fault_end`` existed is cut by the same rule from ``fault_applied``/``rollback_end``.
"""

from __future__ import annotations

from typing import Any

from raychaos.results.store import Ev

__all__ = ["WINDOWS", "fault_spans", "windows"]

WINDOWS = ("baseline", "chaos", "recovery", "run", "overlap")
Window = tuple[float, float]


def windows(records: list[dict[str, Any]]) -> dict[str, Window]:
    """The baseline, chaos, recovery and run windows (seconds on the run clock)."""
    end = max((r["t"] for r in records), default=0.0)
    events = [r for r in records if r.get("kind") == "event"]
    starts = [e["t"] for e in events if e["event"] == Ev.FAULT_START]
    loads = [r["t"] for r in records if r.get("kind") == "load"]
    first = min(loads) if loads else min((r["t"] for r in records), default=0.0)
    settled = [e["t"] for e in events if e["event"] == Ev.BASELINE_START]
    base = max(first, min(settled)) if settled else first
    if not starts:
        return {"baseline": (base, end), "run": (first, end)}
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
    out = {"baseline": (min(base, chaos_start), chaos_start), "chaos": (chaos_start, chaos_end),
           "recovery": (chaos_end, end), "run": (first, end)}
    together = [o for span in fault_spans(records) for o in span["overlap_spans"]]
    if together:
        out["overlap"] = (min(lo for lo, _ in together), max(hi for _, hi in together))
    return out


def fault_spans(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fault's span ``[fault_start, fault_end]`` (an unended one: to the end of the
    timeline), with the ids of the faults in effect at the same time and those stretches."""
    end = max((r["t"] for r in records), default=0.0)
    spans: dict[str, dict[str, Any]] = {}
    for e in sorted((r for r in records if r.get("kind") == "event"), key=lambda r: r["t"]):
        fid = _detail(e).get("id")
        if not fid:
            continue
        if e["event"] == Ev.FAULT_START:
            spans[fid] = {"id": fid, "fault": e.get("name"), "start": e["t"], "end": None}
        elif fid in spans and spans[fid]["end"] is None and (
                e["event"] == Ev.FAULT_END or (e["event"] == Ev.FAULT_FAILED)
                or (e["event"] == Ev.ROLLBACK_FAILED and _detail(e).get("lasting", True))):
            spans[fid]["end"] = e["t"]
    out = []
    for span in spans.values():
        lo, hi = span["start"], end if span["end"] is None else span["end"]
        others = [(o["id"], max(lo, o["start"]), min(hi, end if o["end"] is None else o["end"]))
                  for o in spans.values() if o["id"] != span["id"]]
        hits = [(oid, a, b) for oid, a, b in others if a < b]
        out.append({**span, "end": round(hi, 4), "overlapped": [oid for oid, _, _ in hits],
                    "overlap_spans": [(round(a, 4), round(b, 4)) for _, a, b in hits]})
    return out


def _detail(event: dict[str, Any]) -> dict[str, Any]:
    detail = event.get("detail")
    return detail if isinstance(detail, dict) else {}
