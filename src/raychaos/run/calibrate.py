"""``raychaos calibrate EXPERIMENT --trials N``: thresholds from measurement, not from hope.

Runs the experiment N times on a cluster known to be good (as ``raychaos run --trials``, into one
folder), collects every SLO's measured value from each run, and proposes a threshold per SLO
from the observed distribution with a stated margin:

- a bound on a figure where lower is better (seconds, milliseconds, failure ratios, megabytes):
  ``max × (1 + margin) + slack``, rounded up to two significant digits — ``slack`` is one
  resolution step of the unit (1 s, 10 ms, 0.005 of a ratio, 10 MB, 0 of a count) so that a
  figure that was 0 in every known-good run does not become a bound nothing can meet;
- a bound on a figure where higher is better (throughput ratios): ``min × (1 − margin)``,
  rounded down;
- a **relative** bound (``relative_to: baseline``: the window's percentile as a factor of the
  baseline's) where lower is better: ``max × (1 + margin)``, rounded up (a ratio needs no slack:
  1.0 is "as at baseline");
- an **invariant** (the sentinel kept its state, every job survived, no block lost or
  corrupted, no GCS flap after recovery) keeps its exact threshold; calibration reports
  whether the known-good runs held it, and flags it when they did not (then the cluster or the
  experiment is not good, and no margin would make the SLO mean something).

It also proposes each load check's **minimum sample count** (``min_samples``) from the trials'
own per-request samples: the smallest count n (of 50, 100, 150, 200, 300, 500, 1000, 2000)
for which two healthy windows of n requests drawn from the known-good baselines (pooled) put
the percentile's ratio past the proposed bound in fewer than 1 % of 1000 draws — below it a
healthy cluster would fail on sampling luck alone — and never below the profile's default
(100). The windows' observed counts are reported; a check whose known-good windows held fewer
samples than that minimum is flagged (raise the load's ``rate`` or lengthen the window: those
runs would be inconclusive).

It writes ``calibration.json`` (per SLO: the values, min/p50/p95/max, the rule, the proposed
threshold; the runs' verdicts) and ``slo-proposed.yaml`` (the profile with the proposed
thresholds, each description stating the distribution it came from) into the trials folder,
and prints the table. Exit code 0 when every trial ran (pass or fail: a known-good run failing
an SLO says the threshold was wrong, which is what calibration is for), 2 when one errored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from raychaos.config.metrics import METRICS
from raychaos.config.settings import MIN_SAMPLES
from raychaos.observe.loadstats import window_latencies
from raychaos.observe.windows import windows
from raychaos.results.store import load_run, write_json_atomic
from raychaos.run.plan import load as load_experiment
from raychaos.run.series import RunOne, run_trials

__all__ = ["INVARIANTS", "SLACK", "calibrate", "min_samples_for", "propose"]

SLACK = {"s": 1.0, "ms": 10.0, "ratio": 0.005, "MB": 10.0, "count": 0.0, "bool": 0.0,
         "tasks/s": 0.0}
#: metric -> (op, threshold) that calibration keeps exactly
INVARIANTS = {"sentinel_preserved": ("==", 1.0), "job_survival_ratio": (">=", 1.0),
              "checksum_errors": ("==", 0.0), "blocks_lost_or_corrupted": ("==", 0.0),
              "gcs_flaps": ("<=", 0.0)}


def _sig2(value: float, up: bool) -> float:
    """``value`` rounded to two significant digits, up or down."""
    if value == 0:
        return 0.0
    exp = math.floor(math.log10(abs(value))) - 1
    step = 10.0 ** exp
    scaled = value / step
    return round((math.ceil(scaled - 1e-9) if up else math.floor(scaled + 1e-9)) * step, 10)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


CANDIDATE_SAMPLES = (50, 100, 150, 200, 300, 500, 1000, 2000)
DRAWS = 1000
FALSE_ALARMS = 0.01


def min_samples_for(pooled: np.ndarray, q: float, factor: float, floor: int = MIN_SAMPLES
                    ) -> int | None:
    """The smallest window size at which healthy windows (drawn from ``pooled`` known-good
    per-request latencies) put the ``q``-th percentile's ratio past ``factor`` in fewer than
    :data:`FALSE_ALARMS` of :data:`DRAWS` draws; None when no candidate does."""
    rng = np.random.default_rng(20261204)
    for n in CANDIDATE_SAMPLES:
        if n < floor or pooled.size < n:
            continue
        a = rng.choice(pooled, size=(DRAWS, n))
        b = rng.choice(pooled, size=(DRAWS, n))
        ratio = np.percentile(a, q, axis=1, method="higher") / np.maximum(
            np.percentile(b, q, axis=1, method="higher"), 1e-9)
        if float(np.mean(ratio > factor)) < FALSE_ALARMS:
            return n
    return None


def _samples(summaries_dirs: list[Path], spec: Any) -> tuple[list[int], np.ndarray]:
    """Per trial, the samples the check's window held; and the baselines' per-request
    latencies of its load, pooled."""
    counts: list[int] = []
    pooled: list[np.ndarray] = []
    for d in summaries_dirs:
        records = load_run(d).records
        wins = windows(records)
        if spec.window in wins:
            got = window_latencies(records, wins, spec.window, spec.load)
            counts.append(int(got[1].sum()) if got is not None else 0)
        if "baseline" in wins:
            base = window_latencies(records, wins, "baseline", spec.load)
            if base is not None:
                pooled.append(np.repeat(base[0], base[1].astype(int)))
    return counts, (np.concatenate(pooled) if pooled else np.array([]))


def _with_min_samples(row: dict[str, Any], spec: Any, runs: list[Path], floor: int) -> None:
    """Add the proposed ``min_samples`` and the observed window counts to a load check."""
    if METRICS[spec.metric].producer != "loads":
        return
    counts, pooled = _samples(runs, spec)
    row["window_samples"] = counts
    need = floor
    if spec.relative_to and row.get("threshold") and pooled.size:
        q = 95.0 if spec.metric == "p95_latency_ms" else 99.0
        found = min_samples_for(pooled, q, float(row["threshold"]), floor)
        if found is None:
            row["flag"] = (f"no window size up to {CANDIDATE_SAMPLES[-1]} keeps healthy "
                           f"windows within {row['threshold']:g} x baseline: widen the bound")
        need = found or need
    row["min_samples"] = need
    if counts and min(counts) < need and not row.get("flag"):
        row["flag"] = (f"the known-good {spec.window} windows held {min(counts)} samples, "
                       f"fewer than {need}: raise the load's rate or lengthen the window")


def propose(metric: str, op: str, values: list[float], margin: float,
            relative: bool = False) -> dict[str, Any]:
    """The proposed threshold for one SLO from its known-good values (see the module)."""
    dist = ({"n": len(values), "min": min(values), "p50": _pct(values, 50),
             "p95": _pct(values, 95), "max": max(values)} if values else {"n": 0})
    if relative and values:
        return {**dist, "rule": f"max ratio x {1 + margin:g}", "op": "<=",
                "threshold": _sig2(max(values) * (1 + margin), up=True), "flag": None}
    if metric in INVARIANTS:
        inv_op, threshold = INVARIANTS[metric]
        held = [v for v in values if _holds(inv_op, v, threshold)]
        return {**dist, "rule": "invariant", "op": inv_op, "threshold": threshold,
                "held": f"{len(held)}/{len(values)}", "flag": None if len(held) == len(values)
                and values else "the known-good runs did not all hold this invariant"}
    if not values:
        return {**dist, "rule": "none", "op": op, "threshold": None,
                "flag": "no known-good run measured it"}
    m = METRICS[metric]
    if m.better == "lower":
        threshold = _sig2(max(values) * (1 + margin) + SLACK.get(m.unit, 0.0), up=True)
        rule = f"max x {1 + margin:g} + {SLACK.get(m.unit, 0.0):g} {m.unit}"
        new_op = "<="
    else:
        threshold = max(0.0, _sig2(min(values) * (1 - margin), up=False))
        rule = f"min x {1 - margin:g}"
        new_op = ">="
    if m.unit == "ratio" and m.better == "lower":
        threshold = min(threshold, 1.0)
    return {**dist, "rule": rule, "op": new_op, "threshold": threshold, "flag": None}


def _holds(op: str, value: float, threshold: float) -> bool:
    return {"==": value == threshold, ">=": value >= threshold, "<=": value <= threshold}[op]


def calibrate(experiment: str | Path, trials: int, *, margin: float = 0.5,
              slo: str | None = None, results_root: str | Path = "results",
              state_root: str | Path | None = None, quiet: bool = True,
              run: RunOne | None = None, say: Callable[[str], None] = print
              ) -> tuple[int, Path | None]:
    """Run ``experiment`` ``trials`` times and propose thresholds; (exit code, folder)."""
    exp = load_experiment(experiment, slo)
    if exp.slo_profile is None:
        say(f"error: {experiment}: no SLO profile to calibrate (extensions.raychaos."
            "slo_profile or --slo)")
        return 2, None
    code, folder = run_trials(experiment, trials, slo=slo, results_root=results_root,
                              state_root=state_root, quiet=quiet, run=run, say=say)
    if folder is None:
        return code, None
    runs = sorted(p.parent for p in folder.glob("*/summary.json"))
    summaries = [load_run(d).summary for d in runs]
    rows = {}
    for spec in exp.slo_profile.slos:
        values = [float(r["value"]) for s in summaries for r in s.get("slos") or []
                  if r.get("name") == spec.name and isinstance(r.get("value"), (int, float))
                  and s.get("verdict") != "error"]
        rows[spec.name] = {"metric": spec.metric, "window": spec.window, "load": spec.load,
                           "shipped": {"op": spec.op, "threshold": spec.threshold},
                           "relative_to": spec.relative_to, "values": values,
                           **propose(spec.metric, spec.op, values, margin,
                                     relative=bool(spec.relative_to))}
        _with_min_samples(rows[spec.name], spec, runs, exp.slo_profile.min_samples)
    verdicts = [str(s.get("verdict")) for s in summaries]
    result = {"experiment": str(experiment), "profile": exp.slo_profile.name,
              "trials": len(summaries), "margin": margin, "verdicts": verdicts,
              "runs": [str(d) for d in runs], "slos": rows}
    write_json_atomic(folder / "calibration.json", result)
    (folder / "slo-proposed.yaml").write_text(_profile_yaml(exp.slo_profile, rows, margin,
                                                            len(summaries)), encoding="utf-8")
    say(format_calibration(result))
    say(f"calibration: {folder / 'calibration.json'}; proposed profile: "
        f"{folder / 'slo-proposed.yaml'}")
    return (2 if "error" in verdicts or code == 2 else 0), folder


def _profile_yaml(profile: Any, rows: dict[str, dict[str, Any]], margin: float,
                  n: int) -> str:
    slos = []
    for spec in profile.slos:
        row = rows[spec.name]
        entry: dict[str, Any] = {"name": spec.name, "metric": spec.metric}
        if spec.window != "run":
            entry["window"] = spec.window
        if spec.load:
            entry["load"] = spec.load
        if spec.relative_to:
            entry["relative_to"] = spec.relative_to
        entry["op"] = row["op"]
        entry["threshold"] = row["threshold"] if row["threshold"] is not None \
            else spec.threshold
        dist = (f"known-good {row['min']:g}..{row['max']:g} (p50 {row['p50']:g}) over "
                f"{row['n']} runs" if row.get("n") else "not measured in calibration")
        if row.get("min_samples") and row["min_samples"] != profile.min_samples:
            entry["min_samples"] = row["min_samples"]
        seen = (f", windows held {min(row['window_samples'])}..{max(row['window_samples'])} "
                f"samples" if row.get("window_samples") else "")
        entry["description"] = f"{_own(spec.description)}" \
                               f"calibrated: {dist}, rule {row['rule']}{seen}"
        slos.append(entry)
    header = (f"# proposed by `raychaos calibrate` from {n} runs, margin {margin:g}\n")
    return header + yaml.safe_dump({"name": profile.name, "description": profile.description,
                                    "min_samples": profile.min_samples, "slos": slos},
                                   sort_keys=False, width=100)


def _own(description: str) -> str:
    """A description without an earlier calibration's sentence (a re-run replaces it)."""
    text = description.split("calibrated:")[0].strip().rstrip(";").strip()
    return f"{text}; " if text else ""


def format_calibration(result: dict[str, Any]) -> str:
    lines = [f"{result['trials']} runs of {result['experiment']} (verdicts: "
             f"{', '.join(result['verdicts'])}), margin {result['margin']:g}", ""]
    head = ("slo", "n", "min", "p50", "max", "shipped", "proposed", "min samples", "rule")
    rows = [head]
    for name, r in result["slos"].items():
        def f(key: str, r: dict[str, Any] = r) -> str:
            return "-" if r.get(key) is None else f"{r[key]:g}"

        proposed = "-" if r["threshold"] is None else f"{r['op']} {r['threshold']:g}"
        rule = r["rule"] + (f" ({r['held']} held)" if r.get("held") else "") + \
            (f" !! {r['flag']}" if r.get("flag") else "")
        seen = r.get("window_samples") or []
        need = (f"{r['min_samples']} (saw {min(seen)}..{max(seen)})" if seen else
                str(r["min_samples"])) if r.get("min_samples") else "-"
        rows.append((name, str(r.get("n", 0)), f("min"), f("p50"), f("max"),
                     f"{r['shipped']['op']} {r['shipped']['threshold']:g}", proposed, need,
                     rule))
    widths = [max(len(str(x[i])) for x in rows) for i in range(len(head))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(x, widths, strict=True)) for x in rows]
    return "\n".join(lines) + "\n"
