"""SLO judgement over windows of the timeline.

Windows are :mod:`raychaos.observe.windows`' (``baseline``, ``chaos``, ``recovery``, ``run``);
load figures are :mod:`raychaos.observe.loadstats`' (per wall second, zero lines for stalled
seconds); probe figures are the probes' evidence (the metric registry,
:mod:`raychaos.config.metrics`, says which).

Each SLO row gets one of five verdicts:

- ``pass`` / ``fail``: the value met / did not meet the threshold;
- ``fail`` also when the value does not exist because the *system* did not produce it: nothing
  completed in the window (no latency, no failure ratio: the load stalled), the GCS or the
  workers never came back, throughput never returned to 90 % of baseline; and a latency or
  error figure of an open-loop load that answered nothing in the last seconds of the run
  (:func:`~raychaos.observe.backlog.stalled_at_end`: its answered requests came before the
  stall, and the ones that arrived in it were still waiting when the loads stopped);
- ``error`` when the *harness* could not observe it: the producing probe raised, recorded
  nothing or could not observe (``unknown``), the load never reported, the field is not in
  the load's stats, there is no baseline to compare with;
- ``n/a`` when it does not apply to this run: no job to survive, no sentinel, no chaos window;
- ``inconclusive`` when the data cannot support a verdict, never a pass or a fail blamed on
  Ray (the reason is ``evidence["inconclusive"]``):

  - **too few samples**: a load figure whose window holds fewer requests than the check's
    ``min_samples`` (default: the profile's, 100) — a p95 of 40 requests is two requests; a
    throughput ratio whose baseline pace would have completed fewer than that in the window;
    a load that completed *nothing* while its baseline pace says it should have is still a
    ``fail`` (it stalled);
  - **host noise**: a *timing* metric (:attr:`raychaos.config.metrics.Metric.timing`) that
    missed while the host was busy with unrelated work (:mod:`raychaos.observe.hostnoise`):
    for a figure judged against the baseline (a relative bound, a throughput ratio, the time
    back to baseline), when its window saw more noise than the baseline by more than the
    profile's ``host_noise`` bounds; for an absolute bound (GCS back within
    20 s), when its window itself was that noisy;
  - **a relative bound not shown**: the ratio is past the bound but its bootstrap interval
    reaches back inside it (:func:`raychaos.observe.relative.judge`).

A relative SLO (``relative_to: baseline``) is judged by :mod:`raychaos.observe.relative` on the
per-request samples of its window and of the same load's baseline window; its value is the
ratio, its evidence the two percentiles, the interval, the rank test and its effect size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scipy.stats import binomtest

from raychaos.catalog import stats_format
from raychaos.config.metrics import BASELINE_PACE_METRICS, METRICS, probe_of
from raychaos.config.settings import MIN_SAMPLES, HostNoiseSpec, SloProfile, SloSpec
from raychaos.observe.backlog import STALL_EXPECTED, after_outage, stalled_at_end
from raychaos.observe.hostnoise import NoiseBounds, noise_by_window, noise_high, noise_louder
from raychaos.observe.loadstats import (
    aggregate,
    baseline_pace,
    load_end,
    load_names,
    second_latencies,
    series,
    time_back,
)
from raychaos.observe.relative import compare_percentiles, judge
from raychaos.observe.resources import RESOURCE_METRICS, resource_metric
from raychaos.observe.signals import MONITOR_METRICS, monitor_metric
from raychaos.observe.windows import windows
from raychaos.results.checks import rank

__all__ = ["OPS", "evaluate", "metric_value", "noise_bounds", "said", "weighted_percentile",
           "windows"]

OPS = {
    "<=": lambda v, t: v <= t,
    "<": lambda v, t: v < t,
    ">=": lambda v, t: v >= t,
    ">": lambda v, t: v > t,
    "==": lambda v, t: v == t,
}
Wins = dict[str, tuple[float, float]]
Measured = tuple[float | None, str, dict[str, Any]]  # (value, verdict when None, evidence)



def said(unobserved: Any) -> str:
    """A probe's ``unobserved`` (a list of things, or one) as words."""
    if isinstance(unobserved, list):
        return "; ".join(map(str, unobserved))
    return str(unobserved)


def weighted_percentile(pairs: Iterable[tuple[float | None, float]], q: float) -> float | None:
    """Percentile ``q`` of values weighted by counts (the one definition, in loads/_stats.py)."""
    result: float | None = stats_format().weighted_percentile(pairs, q)
    return result


def _from_probe(slo: SloSpec, probes: dict[str, dict[str, Any]]) -> Measured:
    probe = probe_of(slo.metric)
    assert probe is not None
    entry = probes.get(probe)
    if entry is None:
        return None, "error", {"probe": probe,
                               "note": f"not measured: the {probe} probe recorded nothing"}
    verdict = entry.get("verdict")
    evidence = entry.get("evidence") or {}
    key = METRICS[slo.metric].evidence_key or slo.metric
    # a probe that could not observe everything: only what it names as unobserved (all of it
    # when it names nothing) is not measured; what it did see is judged
    blind = evidence.get("unobserved_keys")
    if verdict == "unknown" and (not isinstance(blind, list) or key in blind):
        return None, "error", {"probe": probe, "note": f"not measured: the {probe} probe "
                                                       f"could not observe "
                                                       f"{said(evidence.get('unobserved'))}"}
    if verdict == "n/a":
        return None, "n/a", {"probe": probe, "note": evidence.get("note", "not applicable")}
    value = evidence.get(key)
    if isinstance(value, bool):
        value = float(value)
    if value is None:
        return None, "fail", {"probe": probe, "note": f"{key} did not happen within the run"}
    return float(value), "fail", {"probe": probe}


def _from_loads(slo: SloSpec, records: list[dict[str, Any]], wins: Wins) -> Measured:
    who = f"load {slo.load}" if slo.load else "the loads"
    if slo.load and slo.load not in load_names(records) or not load_names(records):
        return None, "error", {"note": f"not measured: no stats from {who}"}
    if slo.metric == "throughput_recovery_s":
        return _time_back(slo, records, wins, who)
    if slo.window not in wins:
        return None, "n/a", {"note": f"the run has no {slo.window} window (no fault was "
                                     "applied)"}
    stats, rows = aggregate(records, wins, slo.window, slo.load)
    evidence: dict[str, Any] = {k: stats[k] for k in ("seconds", "count", "failures",
                                                     "throughput")}
    if slo.metric == "task_failure_ratio":
        return stats["error_ratio"], "fail", {**evidence, "note": f"nothing completed or "
                                              f"failed in {slo.window}: {who} stalled"}
    if slo.metric == "throughput_ratio":
        base, _ = aggregate(records, wins, "baseline", slo.load)
        evidence["baseline_throughput"] = base["throughput"]
        if not base["throughput"]:
            return None, "error", {**evidence, "note": "not measured: no baseline throughput"}
        return (stats["throughput"] or 0.0) / base["throughput"], "fail", evidence
    if slo.metric in ("p95_latency_ms", "p99_latency_ms"):
        key = slo.metric.split("_")[0] + "_ms"
        return stats[key], "fail", {**evidence, "note": f"no completions in {slo.window}: "
                                                       f"{who} stalled"}
    field = {"checksum_errors": ("checksum_errors",),
             "blocks_lost_or_corrupted": ("checksum_errors", "lost_outputs"),
             "gpu_stranded_frac": ("gpu_stranded_frac",)}.get(slo.metric)
    if field is None:
        return None, "error", {"note": f"unknown metric {slo.metric}"}
    counted = [r for r in rows if all(f in r for f in field)]
    if not counted:
        return None, "error", {**evidence, "note": f"not measured: {who} reports no "
                                                   f"{' / '.join(field)} in {slo.window}"}
    if slo.metric == "gpu_stranded_frac":
        vals = [r["gpu_stranded_frac"] for r in counted if r["gpu_stranded_frac"] is not None]
        return (sum(vals) / len(vals) if vals else None), "error", evidence
    evidence["lines"] = len(counted)
    return float(sum(sum(r[f] or 0 for f in field) for r in counted)), "fail", evidence


def _time_back(slo: SloSpec, records: list[dict[str, Any]], wins: Wins, who: str) -> Measured:
    if "chaos" not in wins:
        return None, "n/a", {"note": "the run has no chaos window (no fault was applied)"}
    end = load_end(records)
    backs, rows_of = {}, {}
    for name in [slo.load] if slo.load else load_names(records):
        rows = rows_of[name] = series(records, name, end)
        pace = baseline_pace(rows, wins["baseline"]) if "baseline" in wins else None
        if not pace:
            return None, "error", {"note": f"not measured: no baseline throughput of {name}"}
        backs[name] = time_back(rows, wins["chaos"][1], pace)
    evidence: dict[str, Any] = {"window": "after chaos", "per_load": backs}
    if any(v is None for v in backs.values()):
        # censored: not back within the seconds observed after chaos. Past the bound that is a
        # miss like a measured one (and, while the load still completes work, judged against
        # the host noise as one); short of it the run did not watch long enough to say
        observed = round(max(0.0, end - wins["chaos"][1]), 3)
        alive = all(any(int(r.get("count") or 0) for r in rows_of[n]
                        if r["t"] - 0.5 >= wins["chaos"][1])
                    for n, v in backs.items() if v is None)
        evidence.update(observed_s=observed, completing=alive)
        note = (f"{who} never came back to 90 % of baseline throughput in the {observed:g} s "
                "observed after chaos")
        if not OPS[slo.op](observed, slo.threshold):
            return None, "fail", {**evidence, "note": note, "censored_s": observed}
        return None, "inconclusive", {**evidence, "note": note, "inconclusive": (
            f"observed only {observed:g} s after chaos, too short to tell the bound "
            f"{slo.threshold:g} s")}
    return float(max(v for v in backs.values() if v is not None)), "fail", evidence


def _from_monitor(slo: SloSpec, records: list[dict[str, Any]], wins: Wins) -> Measured:
    if slo.window not in wins:
        return None, "n/a", {"note": f"the run has no {slo.window} window"}
    if slo.metric in MONITOR_METRICS:  # GCS latency, node deaths, failed health checks
        return monitor_metric(slo.metric, records, wins[slo.window])
    lo, hi = wins[slo.window]
    vals = [r["spilled_mb"] for r in records if r.get("kind") == "sample"
            and lo <= r["t"] < hi and r.get("spilled_mb") is not None]
    if not vals:
        return None, "error", {"samples": 0, "note": "not measured: no spill figures from "
                                                    "the raylets' metrics"}
    return float(max(vals)), "fail", {"samples": len(vals)}


def metric_value(slo: SloSpec, records: list[dict[str, Any]], wins: Wins,
                 probes: dict[str, dict[str, Any]]) -> Measured:
    """The measured value of one SLO's metric, the verdict if it has none, and evidence."""
    producer = METRICS[slo.metric].producer
    if producer.startswith("probe:"):
        return _from_probe(slo, probes)
    if producer == "loads":
        return _from_loads(slo, records, wins)
    if slo.metric in RESOURCE_METRICS:  # spill rates, stranded GPUs, /dev/shm
        return resource_metric(slo.metric, records, wins, slo.window, slo.load)
    return _from_monitor(slo, records, wins)


def _relative(slo: SloSpec, records: list[dict[str, Any]], wins: Wins, need: int
              ) -> tuple[float | None, str, dict[str, Any]]:
    """A relative latency bound: (ratio, verdict, evidence) — see :mod:`.relative`."""
    who = f"load {slo.load}" if slo.load else "the loads"
    if slo.load and slo.load not in load_names(records) or not load_names(records):
        return None, "error", {"note": f"not measured: no stats from {who}"}
    if slo.window not in wins or "baseline" not in wins:
        return None, "n/a", {"note": f"the run has no {slo.window} window (no fault was "
                                     "applied)"}
    q = 95.0 if slo.metric == "p95_latency_ms" else 99.0
    judged = dict(wins)
    drained, draining = after_outage(records, wins, slo.load) if slo.window == "recovery" \
        else (None, None)
    if drained is not None:
        judged["recovery"] = (max(drained, wins["recovery"][0]), wins["recovery"][1])
    base = second_latencies(records, wins, "baseline", slo.load)
    mine = second_latencies(records, judged, slo.window, slo.load)
    n_base = sum(int(c.sum()) for _, c in base or [])
    n_mine = sum(int(c.sum()) for _, c in mine or [])
    evidence: dict[str, Any] = {"relative_to": "baseline", "samples": n_mine,
                                "baseline_samples": n_base, "min_samples": need}
    if drained is not None:
        evidence["backlog_drained_s"] = round(judged["recovery"][0] - wins["recovery"][0], 3)
    elif draining:
        return None, "inconclusive", {**evidence, "inconclusive": draining}
    if base is None or mine is None:
        return None, "error", {**evidence, "note": f"not measured: {who} reports no "
                                                   "per-request latencies"}
    if n_base < need:
        return None, "inconclusive", {**evidence, "inconclusive": (
            f"{n_base} samples in baseline, fewer than the {need} the check needs")}
    if n_mine == 0:
        lo, hi = judged[slo.window]
        live = max(0.0, min(hi, load_end(records)) - lo)  # before the loads were stopped
        short = _too_short_to_stall(records, wins, slo.load, live, slo.window)
        if short:
            return None, "inconclusive", {**evidence, "inconclusive": short}
        return None, "fail", {**evidence, "note": f"no completions in {slo.window}: {who} "
                                                  "stalled"}
    if n_mine < need:
        return None, "inconclusive", {**evidence, "inconclusive": (
            f"{n_mine} samples in {slo.window}, fewer than the {need} the check needs")}
    comparison = compare_percentiles(mine, base, q)
    verdict, why = judge(comparison, slo.op, slo.threshold, OPS)
    evidence.update(comparison.evidence())
    if why:
        evidence["inconclusive"] = why
    return comparison.ratio, verdict, evidence


def _too_short_to_stall(records: list[dict[str, Any]], wins: Wins, load: str | None,
                        seconds: float, window: str) -> str | None:
    """Why a stretch of ``seconds`` in which a load completed nothing does not show it stalled
    (its baseline pace expects fewer than STALL_EXPECTED completions there), or None."""
    if "baseline" not in wins:
        return None
    pace = aggregate(records, wins, "baseline", load)[0]["throughput"] or 0.0
    if pace * seconds >= STALL_EXPECTED:
        return None
    return (f"nothing completed, but the {window} window held only {seconds:.1f} s of the load "
            f"(at its baseline pace {pace:.1f}/s: {pace * seconds:.1f} completions, fewer than "
            f"the {STALL_EXPECTED:.0f} that make none a stall)")


def _shortfall(slo: SloSpec, evidence: dict[str, Any], records: list[dict[str, Any]],
               wins: Wins, need: int) -> str | None:
    """Why a load figure has too few samples to be judged, or None (see the module docstring;
    a load that completed nothing at its baseline pace is a fail, not a shortfall)."""
    if METRICS[slo.metric].producer != "loads" or slo.relative_to:
        return None
    if slo.metric in ("task_failure_ratio", "p95_latency_ms", "p99_latency_ms"):
        n = int(evidence.get("count") or 0) + (int(evidence.get("failures") or 0)
                                               if slo.metric == "task_failure_ratio" else 0)
        evidence.setdefault("samples", n)
        evidence["min_samples"] = need
        if n == 0 and not int(evidence.get("failures") or 0):
            return _too_short_to_stall(records, wins, slo.load,
                                       float(evidence.get("seconds") or 0), slo.window)
        if not 0 < n < need:
            return None
        if slo.metric == "task_failure_ratio":
            # a ratio whose whole 95 % interval lies on one side of the bound is told by its
            # few samples: 74 of 75 requests lost is a fail however many more would have come
            ci = binomtest(int(evidence.get("failures") or 0), n).proportion_ci(method="wilson")
            evidence["interval"] = [round(float(ci.low), 4), round(float(ci.high), 4)]
            if ci.low > slo.threshold or ci.high < slo.threshold:
                return None
        return f"{n} samples in {slo.window}, fewer than the {need} the check needs"
    if slo.metric in BASELINE_PACE_METRICS and "baseline" in wins:
        base, _ = aggregate(records, wins, "baseline", slo.load)
        evidence["baseline_samples"] = base["count"]
        evidence["min_samples"] = need
        seconds = evidence.get("seconds") or base["seconds"] or 0
        expected = (base["throughput"] or 0.0) * seconds
        if base["count"] < need:
            return f"{base['count']} samples in baseline, fewer than the {need} the check needs"
        if expected < need:
            return (f"the {slo.window} window is too short: at the baseline pace it holds "
                    f"{expected:.0f} completions, fewer than the {need} the check needs")
    return None


def _noise_window(slo: SloSpec, wins: Wins) -> str:
    """The window whose host noise a check's figure felt: a recovery figure read over the run
    (a probe's) felt the chaos; the time back to baseline, the recovery."""
    if slo.metric == "throughput_recovery_s":
        return "recovery"
    if slo.window == "run" and METRICS[slo.metric].producer.startswith("probe:") \
            and "chaos" in wins:
        return "chaos"
    return slo.window


def _noise_reason(slo: SloSpec, verdict: str, wins: Wins, noise: dict[str, dict[str, Any]],
                  bounds: NoiseBounds) -> str | None:
    """Why host noise makes a timing check's verdict say nothing about the system, or None."""
    if not METRICS[slo.metric].timing or verdict not in ("pass", "fail"):
        return None
    name = _noise_window(slo, wins)
    judged = noise.get(name) or {}
    if (judged.get("samples") or 0) < bounds.min_samples:
        return None  # no sensor (an older timeline) or a window too short to say: as before
    relative = bool(slo.relative_to) or slo.metric in BASELINE_PACE_METRICS
    if not relative:
        return noise_high(judged, name, bounds) if verdict == "fail" else None
    base = noise.get("baseline") or {}
    if (base.get("samples") or 0) < bounds.min_samples:
        return None
    # Only a miss in a noisier window: the sensor counts CPU that unrelated work *got*, and a
    # restarting head takes it from a steady stressor (stress-ng at 50 %: 0.48 CPUs in baseline,
    # 0.18 in chaos), so "the baseline was noisier" is mostly the system's own recovery.
    return noise_louder(base, judged, name, bounds) if verdict == "fail" else None


#: Figures of a load's answered requests, which say nothing of the requests still waiting
CENSORED_BY_A_STALL = ("task_failure_ratio", "p95_latency_ms", "p99_latency_ms")


def _stalled_at_end(slo: SloSpec, records: list[dict[str, Any]], wins: Wins) -> str | None:
    """Why a load's latency or error figure in a window that ended with the load stalled is a
    fail (:func:`~raychaos.observe.backlog.stalled_at_end`), or None."""
    if slo.metric not in CENSORED_BY_A_STALL:
        return None
    return stalled_at_end(records, wins, slo.load, slo.window)


def noise_bounds(profile: SloProfile | None) -> NoiseBounds:
    """The profile's ``host_noise`` bounds (the defaults without a profile)."""
    spec = profile.host_noise if profile else HostNoiseSpec()
    return NoiseBounds(foreign_cpus=spec.foreign_cpus, timer_lag_ms=spec.timer_lag_ms,
                       min_samples=spec.min_samples)


def evaluate(profile: SloProfile | None, records: list[dict[str, Any]],
             probes: list[dict[str, Any]], wins: Wins | None = None
             ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every SLO of the profile judged on this run: (rows, windows)."""
    wins = windows(records) if wins is None else wins
    by_name: dict[str, dict[str, Any]] = {}
    for p in probes:  # a probe run twice: the worst of its verdicts speaks
        if p["name"] not in by_name or _rank(p["verdict"]) > _rank(by_name[p["name"]]["verdict"]):
            by_name[p["name"]] = p
    bounds = noise_bounds(profile)
    noise = noise_by_window(records, wins)
    rows = []
    for slo in (profile.slos if profile else []):
        need = slo.min_samples or (profile.min_samples if profile else MIN_SAMPLES)
        if slo.relative_to:
            value, verdict, evidence = _relative(slo, records, wins, need)
        else:
            value, otherwise, evidence = metric_value(slo, records, wins, by_name)
            if value is None:
                verdict = otherwise
                evidence = {**evidence, "note": evidence.get("note", "not measured in this run")}
            else:
                verdict = "pass" if OPS[slo.op](value, slo.threshold) else "fail"
                evidence.pop("note", None)
            short = _shortfall(slo, evidence, records, wins, need) \
                if verdict in ("pass", "fail") else None
            if short:
                verdict, evidence["inconclusive"] = "inconclusive", short
        stall = _stalled_at_end(slo, records, wins) if verdict in (
            "pass", "fail", "inconclusive") else None
        if stall:  # what was answered came before the stall: it cannot pass, nor lack data
            verdict, evidence["stalled"] = "fail", stall
            evidence.pop("inconclusive", None)
        # a figure the system never produced (workers never back, a load that completes
        # nothing) is its failure, not noise; a load still completing work but not yet back
        # when the observation ended missed like a measured figure (censored_s)
        produced = value is not None or (evidence.get("censored_s") is not None
                                         and evidence.get("completing"))
        why = _noise_reason(slo, verdict, wins, noise, bounds) if produced else None
        if why:
            verdict, evidence["inconclusive"] = "inconclusive", why
        if METRICS[slo.metric].timing:
            evidence["host_noise"] = {w: noise.get(w) for w in dict.fromkeys(
                ["baseline", _noise_window(slo, wins)]) if w in noise}
        rows.append({"name": slo.name, "metric": slo.metric, "window": slo.window,
                     "load": slo.load, "value": None if value is None else round(value, 4),
                     "op": slo.op, "threshold": slo.threshold, "verdict": verdict,
                     "relative_to": slo.relative_to, "description": slo.description,
                     "evidence": evidence})
    return rows, {k: [round(v[0], 3), round(v[1], 3)] for k, v in wins.items()}


def _rank(verdict: str) -> int:
    return rank(verdict)  # the one order (unknown ranks as error)
