"""Per-load, per-window statistics of a run — one definition for ``summary.json``, the SLOs, the
report and JUnit, for every load whether or not an SLO reads it.

A load prints one stats line per second (``loads/_stats.py``): ``t`` on the run clock is the end
of its second, ``count``/``failures`` what completed in it. Per load, those seconds are a grid:

- the grid starts at the load's *second* line (its first covers a partial second, from the
  moment the load started) and ends where the harness began stopping the loads
  (:attr:`~raychaos.results.store.Ev.LOADS_STOPPED`, else the end of the timeline);
- a second of the grid with no line is a **zero line**: a load that stalled, or whose driver
  died, completed nothing in it. So throughput is completions per *wall* second
  (``count / seconds``, seconds counted on the grid), never per record;
- a second belongs to the window that holds its middle (windows: :mod:`.windows`).

Per window (``baseline``, ``chaos``, ``recovery``, ``run``): ``seconds``, ``count``,
``failures``, ``samples`` (per-request latency samples: the successes), ``throughput`` (count /
seconds), ``error_ratio`` (failures / (count + failures), null when nothing completed or
failed), ``p50_ms``/``p95_ms``/``p99_ms`` — nearest rank over the merged ``hist`` of the
window's seconds (2 % buckets, ``_stats.hist_percentile``) when every second that completed
something carries one, else (old lines) count-weighted percentiles of the per-second
percentiles, exact only when latency is steady within each second; ``percentiles_from`` says
which (``"hist"`` | ``"seconds"``) —,
``dip`` (1 − throughput / baseline throughput; null for the baseline itself and when there is no
baseline throughput) and ``time_back_s`` (seconds after chaos ended until a 3-second mean of
throughput is back at ≥ 90 % of baseline; null when it never was, and outside ``recovery`` and
``run``).

:func:`window_latencies` gives a window's per-request samples as (bucket values, counts) for a
rank test against the baseline (expand with ``np.repeat``); :func:`second_latencies` the same
second by second, for a bootstrap that resamples seconds (:mod:`raychaos.observe.relative`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from raychaos.catalog import stats_format
from raychaos.results.store import Ev

__all__ = ["BACK_FRACTION", "BACK_SPAN_S", "STATS", "aggregate", "load_end", "load_names",
           "load_report", "second_latencies", "seconds_with_samples", "series", "time_back",
           "window_latencies", "window_rows", "window_stats"]

STATS = ("seconds", "count", "failures", "samples", "throughput", "error_ratio", "p50_ms",
         "p95_ms", "p99_ms", "percentiles_from", "dip", "time_back_s")
BACK_FRACTION = 0.9
BACK_SPAN_S = 3
Window = tuple[float, float]


def load_names(records: list[dict[str, Any]]) -> list[str]:
    return sorted({str(r.get("load")) for r in records if r.get("kind") == "load"})


def load_end(records: list[dict[str, Any]]) -> float:
    """Where load statistics end: the harness began stopping the loads, else the last record."""
    stopped = [r["t"] for r in records if r.get("kind") == "event"
               and r.get("event") == Ev.LOADS_STOPPED]
    if stopped:
        return float(min(stopped))
    return float(max((r["t"] for r in records), default=0.0))


def series(records: list[dict[str, Any]], load: str, end: float) -> list[dict[str, Any]]:
    """The load's seconds on its grid (see the module docstring), zero lines filled in."""
    rows = sorted((r for r in records if r.get("kind") == "load" and r.get("load") == load
                   and isinstance(r.get("t"), (int, float))), key=lambda r: r["t"])
    if len(rows) < 2:
        return []
    t0 = float(rows[1]["t"])  # the first line covers a partial second: the grid starts after
    by_index: dict[int, dict[str, Any]] = {}
    for r in rows[1:]:
        k = round(float(r["t"]) - t0)
        if t0 + k > end + 1e-6:
            continue
        if k in by_index:  # two lines for one second (a late report): add them up
            a = by_index[k]
            keep = r if r.get("count", 0) > a.get("count", 0) else a
            by_index[k] = {**keep, "count": a.get("count", 0) + r.get("count", 0),
                           "failures": a.get("failures", 0) + r.get("failures", 0)}
        else:
            by_index[k] = r
    last = int(math.floor(end - t0 + 1e-6))
    out = []
    for k in range(0, max(last, max(by_index, default=-1)) + 1):
        row = by_index.get(k)
        out.append({**row, "t": t0 + k} if row is not None else
                   {"t": t0 + k, "load": load, "count": 0, "failures": 0, "p50_ms": None,
                    "p95_ms": None, "p99_ms": None, "zero_line": True})
    return out


def window_rows(rows: list[dict[str, Any]], window: Window) -> list[dict[str, Any]]:
    """The seconds whose middle lies in ``window``."""
    lo, hi = window
    return [r for r in rows if lo <= r["t"] - 0.5 < hi]


def _pct(rows: list[dict[str, Any]], key: str, q: float) -> float | None:
    value: float | None = stats_format().weighted_percentile(
        ((r.get(key), r.get("count", 0)) for r in rows), q)
    return value


def _has_hist(rows: list[dict[str, Any]]) -> bool:
    """Every second that completed something carries a histogram (zero lines need none)."""
    return all(isinstance(r.get("hist"), dict) for r in rows if int(r.get("count", 0)) > 0)


def _percentiles(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """p50/p95/p99 of the seconds ``rows``: from their merged histogram when they all have one
    (the window's own percentiles), else weighted over the per-second ones (old lines)."""
    fmt = stats_format()
    if _has_hist(rows):
        merged = fmt.merge_hists(r.get("hist") for r in rows)
        return {"p50_ms": fmt.hist_percentile(merged, 50),
                "p95_ms": fmt.hist_percentile(merged, 95),
                "p99_ms": fmt.hist_percentile(merged, 99), "percentiles_from": "hist"}
    return {"p50_ms": _pct(rows, "p50_ms", 50), "p95_ms": _pct(rows, "p95_ms", 95),
            "p99_ms": _pct(rows, "p99_ms", 99), "percentiles_from": "seconds"}


def window_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``seconds``, ``count``, ``failures``, ``samples``, ``throughput``, ``error_ratio`` and
    percentiles of the seconds ``rows`` (``dip``/``time_back_s``: :func:`load_report`)."""
    count = sum(int(r.get("count", 0)) for r in rows)
    failures = sum(int(r.get("failures", 0)) for r in rows)
    seconds = len(rows)
    pct = _percentiles(rows)
    return {"seconds": seconds, "count": count, "failures": failures, "samples": count,
            "throughput": round(count / seconds, 4) if seconds else None,
            "error_ratio": round(failures / (count + failures), 6) if count + failures else None,
            "p50_ms": pct["p50_ms"], "p95_ms": pct["p95_ms"], "p99_ms": pct["p99_ms"],
            "percentiles_from": pct["percentiles_from"], "dip": None, "time_back_s": None}


def window_latencies(records: list[dict[str, Any]], wins: dict[str, Window], window: str,
                     load: str | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The per-request latency samples of one load (all loads when ``load`` is None) in
    ``window``, as (bucket values in ms, counts), ascending — what a rank test against the
    baseline needs (``np.repeat(values, counts)``). None when some second that completed
    something has no ``hist`` (old lines: no per-request samples) or the window is unknown."""
    rows = _hist_rows(records, wins, window, load)
    return None if rows is None else _samples([r.get("hist") for r in rows])


def second_latencies(records: list[dict[str, Any]], wins: dict[str, Window], window: str,
                     load: str | None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """:func:`window_latencies` second by second: one (bucket values, counts) per second of the
    window that completed something, in time order — a load's own seconds, or with ``load``
    None the seconds of all loads that end in the same clock second merged. None as
    :func:`window_latencies`."""
    rows = _hist_rows(records, wins, window, load)
    return None if rows is None else [_samples(h) for h in _hists_by_second(rows, load)]


def seconds_with_samples(rows: list[dict[str, Any]], load: str | None) -> int | None:
    """How many seconds of a window's ``rows`` (as :func:`aggregate` gives them) completed
    something, counted as :func:`second_latencies` counts them; None as it."""
    return len(_hists_by_second(rows, load)) if _has_hist(rows) else None


def _hists_by_second(rows: list[dict[str, Any]], load: str | None) -> list[list[Any]]:
    """The histograms of the seconds that completed something, grouped by second, in order
    (with ``load`` None, the loads' lines that end in the same clock second together)."""
    by_second: dict[float, list[Any]] = {}
    for r in rows:
        if int(r.get("count", 0)) > 0 and r.get("hist"):
            key = float(r["t"]) if load else float(math.floor(float(r["t"])))
            by_second.setdefault(key, []).append(r["hist"])
    return [hists for _, hists in sorted(by_second.items())]


def _hist_rows(records: list[dict[str, Any]], wins: dict[str, Window], window: str,
               load: str | None) -> list[dict[str, Any]] | None:
    """The window's seconds when each that completed something has a histogram, else None."""
    if window not in wins:
        return None
    _, rows = aggregate(records, wins, window, load)
    return rows if _has_hist(rows) else None


def _samples(hists: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Histograms merged, as (bucket values in ms, counts)."""
    fmt = stats_format()
    merged = fmt.merge_hists(hists)
    return (np.array([fmt.bucket_value(b) for b in merged], dtype=float),
            np.array(list(merged.values()), dtype=np.int64))


def time_back(rows: list[dict[str, Any]], chaos_end: float, baseline: float | None,
              fraction: float = BACK_FRACTION, span: int = BACK_SPAN_S) -> float | None:
    """Seconds after ``chaos_end`` until a ``span``-second mean of throughput is back at
    ``fraction`` × ``baseline``; None when it never was (or there is no baseline)."""
    if not baseline:
        return None
    after = [r for r in rows if r["t"] - 0.5 >= chaos_end]
    for i in range(len(after) - span + 1):
        mean = sum(int(r.get("count", 0)) for r in after[i:i + span]) / span
        if mean >= fraction * baseline:
            return round(max(0.0, float(after[i]["t"]) - 1.0 - chaos_end), 3)
    return None


def baseline_pace(rows: list[dict[str, Any]], window: Window) -> float | None:
    """The load's normal pace: the median of its per-second counts over ``window`` (the
    baseline), zero lines included. What "back at baseline" compares against — a mean let one
    burst second (the tasks queued while the workers started, completing together: 160 in a
    100/s storm) set a pace the load never held, and a storm that never dipped was judged
    "never came back"."""
    counts = sorted(int(r.get("count", 0)) for r in window_rows(rows, window))
    if not counts:
        return None
    mid = len(counts) // 2
    median = float(counts[mid]) if len(counts) % 2 else (counts[mid - 1] + counts[mid]) / 2
    if not median and any(counts):
        # a load still starting when the baseline ended completes in bursts (0, 96, 0: seen
        # on the KubeRay world): it has a pace, the median of its seconds does not show it
        return sum(counts) / len(counts)
    return median


def _dip(stats: dict[str, Any], baseline: float | None) -> float | None:
    tp = stats["throughput"]
    if not baseline or tp is None:
        return None
    return round(1.0 - float(tp) / baseline, 4)


def load_report(records: list[dict[str, Any]], wins: dict[str, Window]
                ) -> dict[str, dict[str, dict[str, Any]]]:
    """``{load: {window: stats}}`` for every load of the run and every window it has."""
    end = load_end(records)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in load_names(records):
        rows = series(records, name, end)
        per = {w: window_stats(window_rows(rows, span)) for w, span in wins.items()}
        base = per.get("baseline", {}).get("throughput")
        for w, stats in per.items():
            if w != "baseline" and "chaos" in wins:
                stats["dip"] = _dip(stats, base)
            if w in ("recovery", "run") and "chaos" in wins and "baseline" in wins:
                stats["time_back_s"] = time_back(rows, wins["chaos"][1],
                                                 baseline_pace(rows, wins["baseline"]))
        out[name] = per
    return out


def aggregate(records: list[dict[str, Any]], wins: dict[str, Window], window: str,
              load: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One load's (or, with ``load`` None, all loads') stats over ``window`` and its seconds:
    throughputs of several loads add up, counts and failures too; percentiles are weighted
    over every load's seconds."""
    end = load_end(records)
    names = [load] if load else load_names(records)
    rows: list[dict[str, Any]] = []
    tp = 0.0
    seconds = 0
    for name in names:
        mine = window_rows(series(records, name, end), wins[window])
        rows += mine
        stats = window_stats(mine)
        tp += stats["throughput"] or 0.0
        seconds = max(seconds, stats["seconds"])
    stats = window_stats(rows)
    stats["seconds"] = seconds
    stats["throughput"] = round(tp, 4) if seconds else None
    return stats, rows
