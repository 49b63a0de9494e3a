"""How many samples a run's windows need before its load checks can judge them — and waiting
for them, within a bound.

A load check with fewer samples in a window than its ``min_samples`` is ``inconclusive``
(:mod:`raychaos.observe.slo`). A run should not walk into that by itself: the baseline is held
until every load a check judges in it, or compares with it, has its minimum there (beyond
``settle_s``, at most :data:`EXTRA_HOLD_S` more), and the recovery window, which ends as soon
as the loads are back at baseline, also waits for the minimum of the checks that read it
(within ``monitor.recovery_window_s``, its bound). A relative check (``relative_to:
baseline``) also needs :data:`~raychaos.observe.relative.MIN_SECONDS` seconds with samples in
each window it reads, whatever the samples: its interval is drawn over seconds, and a 3-second
baseline (a ``settle_s`` of 3) could never show a fail. What the run could not gather within
those bounds stays visible: the check is inconclusive and says how many samples it had.
"""

from __future__ import annotations

from typing import Any

from raychaos.config.metrics import BASELINE_PACE_METRICS, METRICS
from raychaos.config.settings import SloProfile, SloSpec
from raychaos.observe.backlog import backlog_drained
from raychaos.observe.loadstats import aggregate, load_names, seconds_with_samples
from raychaos.observe.relative import MIN_SECONDS
from raychaos.observe.windows import windows

__all__ = ["EXTRA_HOLD_S", "needs", "seconds_needed", "short"]

#: how much longer than ``settle_s`` a baseline is held for its samples
EXTRA_HOLD_S = 30.0
#: samples past the minimum a window is held for: its last second ends where the loads are
#: stopped, and the verdict counts it from the histograms (59 of 60 seen once without it)
MARGIN = 5


def _reads(slo: SloSpec, window: str) -> bool:
    """Whether a load check needs samples in ``window``: its own window, and the baseline when
    it is compared with it (relative, throughput). A failure ratio over the run needs nothing
    of the baseline: holding the baseline for it kept a run whose storm was failing every task
    (retries off) waiting 30 s for completions that never came, and the swamped cluster then
    failed the run's own sentinel."""
    if slo.window == window:
        return True
    return window == "baseline" and (bool(slo.relative_to) or slo.metric in BASELINE_PACE_METRICS)


def needs(profile: SloProfile | None, window: str) -> dict[str | None, tuple[int, bool]]:
    """``{load (None: all loads): (samples, failures count)}`` the profile's load checks need in
    ``window``. A failed request is a sample of a failure ratio (the judge counts it so) but
    not of a latency or a pace: failures count only when every check wanting the load's
    samples there is a failure ratio."""
    out: dict[str | None, tuple[int, bool]] = {}
    for slo in profile.slos if profile else []:
        if METRICS[slo.metric].producer != "loads" or not _reads(slo, window):
            continue
        need = slo.min_samples or profile.min_samples  # type: ignore[union-attr]
        old_need, old_failures = out.get(slo.load, (0, True))
        out[slo.load] = (max(old_need, need),
                         old_failures and slo.metric == "task_failure_ratio")
    return out


def seconds_needed(profile: SloProfile | None, window: str) -> dict[str | None, int]:
    """``{load: seconds}`` with samples the profile's relative checks need in ``window``."""
    return {slo.load: MIN_SECONDS for slo in (profile.slos if profile else [])
            if slo.relative_to and _reads(slo, window)}


def short(records: list[dict[str, Any]], profile: SloProfile | None, window: str
          ) -> dict[str, str]:
    """``{load: "n/need"}`` for each load whose ``window`` so far holds fewer samples than its
    checks need, ``"n/need s"`` for one with fewer seconds with samples than its relative checks
    need (empty: enough, or nothing to wait for)."""
    wanted = needs(profile, window)
    wanted_s = seconds_needed(profile, window)
    if not wanted:
        return {}
    wins = windows(records)
    if window not in wins:
        return {}
    present = load_names(records)
    out = {}
    for load, (need, failures_count) in wanted.items():
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
        stats, rows = aggregate(records, span, window, load)
        n = int(stats["count"]) + (int(stats["failures"]) if failures_count else 0)
        need_s = wanted_s.get(load, 0)
        counted = seconds_with_samples(rows, load) if need_s else None
        seconds = need_s if counted is None else counted  # None: nothing to wait for
        if n < need + MARGIN:
            out[load or "all loads"] = f"{n}/{need}"
        if seconds < need_s:
            said = out.get(load or "all loads")
            out[load or "all loads"] = (f"{said}, " if said else "") + f"{seconds}/{need_s} s"
    return out


def _open_loop(records: list[dict[str, Any]], load: str) -> bool:
    return any(r.get("kind") == "load" and r.get("load") == load and "offered" in r
               for r in records)
