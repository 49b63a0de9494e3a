"""The recovery window after the last fault: it ends when the loads are back, within a bound.

Before the loads stop, a run keeps observing so the ``recovery`` window of the timeline holds
the cluster after the fault. Waiting a fixed time measures nothing once the loads are back, and
may be too short when they are not; so the window ends as soon as

- every load with a baseline is back at it — the same definition the ``throughput_recovery_s``
  metric and the loads' ``time_back_s`` use (:func:`raychaos.observe.loadstats.time_back`: a
  3-second mean of at least 90 % of the baseline pace — the median second — after the end of
  chaos), and
- the monitor's last sample sees the GCS answering and as many nodes alive as before the fault,

- every load a check reads in ``recovery`` has the samples the check needs there
  (:mod:`raychaos.run.samples`: a recovery window of two seconds holds too few requests to
  judge a p95 by),

or when ``monitor.recovery_window_s`` (now the bound) has passed since it started waiting. A run
without loads has nothing to wait for beyond the cluster; a run without a fault, nothing at all.
The result (why it ended, how long it waited) goes to the timeline as a ``recovery_window``
event.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.context import Run
from raychaos.observe.loadstats import (
    BACK_SPAN_S,
    baseline_pace,
    load_end,
    load_names,
    series,
    time_back,
)
from raychaos.observe.windows import windows
from raychaos.results.store import Ev, read_timeline
from raychaos.run.samples import short

__all__ = ["back_at_baseline", "observe_recovery"]


def back_at_baseline(records: list[dict[str, Any]]) -> tuple[bool, dict[str, Any]]:
    """Whether the loads and the cluster are back at their baseline; (answer, per-check detail).
    A timeline without a fault is "back" (there is nothing to recover from)."""
    wins = windows(records)
    if "chaos" not in wins:
        return True, {"note": "no fault was applied"}
    detail: dict[str, Any] = {}
    end = load_end(records)
    for name in load_names(records):
        rows = series(records, name, end)
        base = baseline_pace(rows, wins["baseline"])
        if not base:
            detail[name] = "no baseline"
            continue
        seconds = time_back(rows, wins["chaos"][1], base)
        detail[name] = None if seconds is None else round(seconds, 2)
    samples = [r for r in records if r.get("kind") == "sample"]
    start = wins["chaos"][0]
    before = [s for s in samples if s["t"] < start and isinstance(s.get("nodes_alive"), int)]
    last = samples[-1] if samples else {}
    want = before[-1]["nodes_alive"] if before else None
    detail["cluster"] = bool(last.get("gcs_up")) and (
        want is None or int(last.get("nodes_alive") or 0) >= want)
    loads_back = all(v is not None for k, v in detail.items() if k not in ("cluster", "note"))
    return loads_back and bool(detail["cluster"]), detail


def measurable_from(records: list[dict[str, Any]]) -> float:
    """The earliest run time at which the loads may stop for ``throughput_recovery_s`` to be
    measurable: the verdict counts whole seconds after chaos ending before ``loads_stopped``,
    and needs ``BACK_SPAN_S`` of them. Seen on the KubeRay world: loads back 1.4 s after a
    rollback, the window ended, and the SLO found one second after chaos — "never came back"
    for a storm at 100 % of its pace."""
    wins = windows(records)
    if "chaos" not in wins:
        return 0.0
    return float(wins["chaos"][1]) + BACK_SPAN_S + 1.5


def observe_recovery(run: Run, bound_s: float) -> dict[str, Any]:
    """Wait until :func:`back_at_baseline` holds or ``bound_s`` passes; the evidence."""
    t0 = time.monotonic()
    deadline = t0 + bound_s
    checks = late = 0
    while True:
        checks += 1
        late += time.monotonic() >= deadline
        records = read_timeline(run.timeline.path)
        back, detail = back_at_baseline(records)
        if back and run.clock.t() < measurable_from(records):
            back = False  # back, but the verdict could not see it yet: a few seconds more
        missing = short(records, run.slo_profile, "recovery")
        if missing:
            detail["samples_short"] = missing
            back = False  # back, but too few requests yet to judge the window by
        if back or time.monotonic() >= deadline:
            break
        run.timeline.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    waited = round(time.monotonic() - t0, 2)
    ended = "back at baseline" if back else "bound"
    # checks begun at or past the deadline: at most the one that found it passed. How long the
    # window overran its bound is that check's cost, and the box's: on a loaded one the
    # process may not run for a second (1.4 s past a 0.5 s bound seen in CI)
    run.timeline.event(Ev.RECOVERY_WINDOW, ended, waited_s=waited, bound_s=bound_s,
                       checks=checks, late_checks=late, detail=detail)
    return {"ended": ended, "waited_s": waited, "bound_s": bound_s, "checks": checks,
            "late_checks": late, "detail": detail}
