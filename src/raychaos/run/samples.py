"""How many samples a run's windows need before its load checks can judge them — and waiting
for them, within a bound.

A load check with fewer samples in a window than its ``min_samples`` is ``inconclusive``
(:mod:`raychaos.observe.slo`). A run should not walk into that by itself: the baseline is held
until every load a check reads has its minimum in it (beyond ``settle_s``, at most
:data:`EXTRA_HOLD_S` more), and the recovery window, which ends as soon as the loads are back at
baseline, also waits for the minimum of the checks that read it (within
``monitor.recovery_window_s``, its bound). What the run could not gather within those bounds
stays visible: the check is inconclusive and says how many samples it had.
"""

from __future__ import annotations

from typing import Any

from raychaos.config.metrics import METRICS
from raychaos.config.settings import SloProfile
from raychaos.observe.loadstats import aggregate, load_names
from raychaos.observe.slo import backlog_drained
from raychaos.observe.windows import windows

__all__ = ["EXTRA_HOLD_S", "needs", "short"]

#: how much longer than ``settle_s`` a baseline is held for its samples
EXTRA_HOLD_S = 30.0
#: samples past the minimum a window is held for: its last second ends where the loads are
#: stopped, and the verdict counts it from the histograms (59 of 60 seen once without it)
MARGIN = 5


def needs(profile: SloProfile | None, window: str) -> dict[str | None, int]:
    """``{load (None: all loads): samples}`` the profile's load checks need in ``window`` (the
    baseline: every load check, as each is compared with it or needs its pace)."""
    out: dict[str | None, int] = {}
    for slo in profile.slos if profile else []:
        if METRICS[slo.metric].producer != "loads":
            continue
        if window != "baseline" and slo.window != window:
            continue
        need = slo.min_samples or profile.min_samples  # type: ignore[union-attr]
        out[slo.load] = max(out.get(slo.load, 0), need)
    return out


def short(records: list[dict[str, Any]], profile: SloProfile | None, window: str
          ) -> dict[str, str]:
    """``{load: "n/need"}`` for each load whose ``window`` so far holds fewer completions than
    the checks need (empty: enough, or nothing to wait for)."""
    wanted = needs(profile, window)
    if not wanted:
        return {}
    wins = windows(records)
    if window not in wins:
        return {}
    present = load_names(records)
    out = {}
    for load, need in wanted.items():
        if load is not None and load not in present:
            continue  # a load that never reported: its check says so, waiting would not help
        span = dict(wins)
        if window == "recovery" and load is not None and _open_loop(records, load):
            # an open-loop load's recovery latencies are read once its backlog drained
            drained = backlog_drained(records, wins, load)
            if drained is None:
                out[load] = f"0/{need} (backlog still draining)"
                continue
            span["recovery"] = (max(drained, wins["recovery"][0]), wins["recovery"][1])
        stats, _ = aggregate(records, span, window, load)
        if int(stats["count"]) < need + MARGIN:
            out[load or "all loads"] = f"{stats['count']}/{need}"
    return out


def _open_loop(records: list[dict[str, Any]], load: str) -> bool:
    return any(r.get("kind") == "load" and r.get("load") == load and "offered" in r
               for r in records)
