"""Compare two runs, or summarise repeated trials, so regressions show up as numbers.

A single chaos run passing says little; what teams act on is *this Ray upgrade made head
recovery 40 % slower* or *GCS recovery is 6 s at p50 but 19 s at p95 over ten trials*. This
module reads finished results folders (see :mod:`raychaos.results.store`) and:

- :func:`compare_runs` puts SLO values and timeline recovery figures of run A (the reference)
  and run B side by side and flags a regression when B is worse than A by more than
  ``tolerance`` (relative), or an SLO verdict went pass -> fail, or B never recovered where A
  did. "Worse" follows the SLO's op: for ``<=``/``<`` bigger is worse, for ``>=``/``>`` smaller
  is worse, for ``==`` further from the threshold is worse. Recovery figures are seconds, so
  bigger is worse.
- :func:`summarize_trials` gives p50/p95/max per SLO and the pass rate over N runs of the same
  experiment (``--trials N``).

``format_comparison`` and ``format_trials`` render the dicts as plain-text tables for a terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raychaos.catalog import stats_format
from raychaos.observe.recovery import FIGURES, recovery_figures
from raychaos.results.store import load_run

__all__ = ["compare_runs", "format_comparison", "format_trials", "judge_change",
           "recovery_figures", "summarize_trials"]

def _worse_by(op: str, a: float, b: float, threshold: float | None) -> float:
    """How much worse B is than A, relative to A (positive = worse)."""
    if op in (">=", ">"):
        delta = a - b
        scale = abs(a)
    elif op == "==" and threshold is not None:
        delta = abs(b - threshold) - abs(a - threshold)
        scale = abs(a - threshold)
    else:  # "<=", "<" and recovery seconds: bigger is worse
        delta = b - a
        scale = abs(a)
    if scale == 0:  # A was perfect (0 s, or exactly on target): judge against the threshold
        scale = abs(threshold) if threshold else 1.0
    return delta / scale


def _row(name: str, a: Any, b: Any, op: str, threshold: float | None, tolerance: float,
         a_verdict: Any = None, b_verdict: Any = None) -> dict[str, Any]:
    reasons = []
    change = None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        change = _worse_by(op, float(a), float(b), threshold)
        if change > tolerance:
            reasons.append(f"worse by {change:.0%} (tolerance {tolerance:.0%})")
    elif isinstance(a, (int, float)) and b is None and a_verdict is None:
        reasons.append("B never recovered")
    if a_verdict == "pass" and b_verdict == "fail":
        reasons.append("verdict pass -> fail")
    return {"name": name, "a": a, "b": b, "op": op, "threshold": threshold,
            "a_verdict": a_verdict, "b_verdict": b_verdict, "worse_by": change,
            "regression": bool(reasons), "reason": "; ".join(reasons)}


def judge_change(name: str, a: Any, b: Any, op: str, threshold: float | None,
                 tolerance: float, a_verdict: Any = None, b_verdict: Any = None
                 ) -> dict[str, Any]:
    """One figure of run B against reference run A, by the rule of the module docstring
    (``history`` marks regressions with it too)."""
    return _row(name, a, b, op, threshold, tolerance, a_verdict, b_verdict)


def compare_runs(run_a: str | Path, run_b: str | Path, tolerance: float = 0.2) -> dict[str, Any]:
    """Compare run B against reference run A.

    Returns ``{"a": {...}, "b": {...}, "tolerance", "slos": [row], "recovery": [row],
    "regressions": [str], "notes": [str]}``; each row has ``name, a, b, op, threshold,
    a_verdict, b_verdict, worse_by`` (relative, positive = B worse) ``, regression, reason``.
    ``regressions`` is one sentence per regressed row (empty list = no regression).
    """
    va, vb = load_run(run_a), load_run(run_b)
    notes = [f"A: {n}" for n in va.notes] + [f"B: {n}" for n in vb.notes]
    slos_b = {s.get("name"): s for s in vb.summary.get("slos") or []}
    slo_rows = []
    for sa in va.summary.get("slos") or []:
        sb = slos_b.pop(sa.get("name"), None)
        if sb is None:
            notes.append(f"SLO {sa.get('name')!r} is only in A")
            continue
        slo_rows.append(_row(str(sa.get("name")), sa.get("value"), sb.get("value"),
                             str(sa.get("op", "<=")), sa.get("threshold"), tolerance,
                             sa.get("verdict"), sb.get("verdict")))
    notes += [f"SLO {name!r} is only in B" for name in slos_b]
    rec_a, rec_b = recovery_figures(va.records), recovery_figures(vb.records)
    rec_rows = [_row(k, rec_a[k], rec_b.get(k), "<=", None, tolerance) for k in FIGURES
                if not k.startswith("gcs_flaps") or rec_a[k] or rec_b.get(k)]
    regressions = [f"{kind} {r['name']}: {r['reason']} (A {_fmt(r['a'])}, B {_fmt(r['b'])})"
                   for kind, rows in (("SLO", slo_rows), ("recovery", rec_rows))
                   for r in rows if r["regression"]]
    va_verdict, vb_verdict = va.summary.get("verdict"), vb.summary.get("verdict")
    if va_verdict == "pass" and vb_verdict in ("fail", "error"):
        regressions.insert(0, f"run verdict pass -> {vb_verdict}")

    def side(v: Any, path: str | Path) -> dict[str, Any]:
        return {"run_dir": str(path), "run_id": v.summary.get("run_id"),
                "experiment": v.summary.get("experiment"), "verdict": v.summary.get("verdict")}

    return {"a": side(va, run_a), "b": side(vb, run_b), "tolerance": tolerance,
            "slos": slo_rows, "recovery": rec_rows, "regressions": regressions, "notes": notes}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def format_comparison(result: dict[str, Any]) -> str:
    """A plain-text side-by-side table of :func:`compare_runs`' result."""
    headers = ["", "name", "A", "B", "change", "required", "verdict A->B"]
    rows = []
    for kind, items in (("SLO", result["slos"]), ("recovery", result["recovery"])):
        for r in items:
            w = r["worse_by"]
            change = "" if w is None else "same" if w == 0 else \
                f"{w:+.0%} worse" if w > 0 else f"{-w:.0%} better"
            required = "" if r["threshold"] is None else f"{r['op']} {_fmt(r['threshold'])}"
            verdicts = "" if r["a_verdict"] is None else f"{r['a_verdict']}->{r['b_verdict']}"
            rows.append(["!!" if r["regression"] else "", f"{kind} {r['name']}", _fmt(r["a"]),
                         _fmt(r["b"]), change, required, verdicts])
    head = (f"A: {result['a']['run_dir']} ({result['a']['verdict']})\n"
            f"B: {result['b']['run_dir']} ({result['b']['verdict']})\n")
    tail = "\n".join(f"REGRESSION: {r}" for r in result["regressions"]) or \
        f"no regression beyond {result['tolerance']:.0%}"
    notes = "".join(f"\nnote: {n}" for n in result["notes"])
    return f"{head}\n{_table(headers, rows)}\n\n{tail}{notes}\n"


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, q in 0..100 (the one definition, in loads/_stats.py)."""
    result: float | None = stats_format().percentile(sorted(values), q)
    return result


def summarize_trials(run_dirs: list[str | Path]) -> dict[str, Any]:
    """Aggregate N runs of one experiment: pass rate, and p50/p95/max/min per SLO value.

    Returns ``{"trials", "passed", "pass_rate", "verdicts": {verdict: n}, "slos": {name:
    {"metric", "op", "threshold", "n", "p50", "p95", "max", "min", "pass_rate"}}, "recovery":
    {figure: {...same stats...}}, "runs": [{"run_dir", "verdict"}]}``. SLO values that are
    null (n/a) are left out of the statistics; ``pass_rate`` counts pass over pass+fail.
    """
    views = [load_run(d) for d in run_dirs]
    verdicts: dict[str, int] = {}
    for v in views:
        key = str(v.summary.get("verdict"))
        verdicts[key] = verdicts.get(key, 0) + 1
    passed = verdicts.get("pass", 0)

    def stats(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"n": 0, "p50": None, "p95": None, "max": None, "min": None}
        return {"n": len(values), "p50": _percentile(values, 50),
                "p95": _percentile(values, 95), "max": max(values), "min": min(values)}

    slos: dict[str, dict[str, Any]] = {}
    for v in views:
        for s in v.summary.get("slos") or []:
            entry = slos.setdefault(str(s.get("name")), {
                "metric": s.get("metric"), "op": s.get("op"), "threshold": s.get("threshold"),
                "values": [], "verdicts": []})
            if isinstance(s.get("value"), (int, float)):
                entry["values"].append(float(s["value"]))
            entry["verdicts"].append(s.get("verdict"))
    out_slos = {}
    for name, e in slos.items():
        judged = [x for x in e["verdicts"] if x in ("pass", "fail")]
        out_slos[name] = {"metric": e["metric"], "op": e["op"], "threshold": e["threshold"],
                          **stats(e["values"]),
                          "pass_rate": judged.count("pass") / len(judged) if judged else None}
    figures = [recovery_figures(v.records) for v in views]
    recovery = {k: stats([f[k] for f in figures if isinstance(f.get(k), (int, float))])
                for k in (FIGURES if figures else ())}
    return {"trials": len(views), "passed": passed,
            "pass_rate": passed / len(views) if views else None, "verdicts": verdicts,
            "slos": out_slos, "recovery": recovery,
            "runs": [{"run_dir": str(d), "verdict": v.summary.get("verdict")}
                     for d, v in zip(run_dirs, views, strict=True)]}


def format_trials(summary: dict[str, Any]) -> str:
    """A plain-text table of :func:`summarize_trials`' result."""
    rate = summary["pass_rate"]
    head = (f"{summary['trials']} trials, {summary['passed']} passed"
            + (f" ({rate:.0%})" if rate is not None else "") + "\n")
    headers = ["name", "n", "p50", "p95", "max", "required", "pass rate"]
    rows = [[name, str(s["n"]), _fmt(s["p50"]), _fmt(s["p95"]), _fmt(s["max"]),
             f"{s['op']} {_fmt(s['threshold'])}",
             "-" if s["pass_rate"] is None else f"{s['pass_rate']:.0%}"]
            for name, s in summary["slos"].items()]
    rows += [[f"(recovery) {name}", str(s["n"]), _fmt(s["p50"]), _fmt(s["p95"]), _fmt(s["max"]),
              "", ""] for name, s in summary["recovery"].items()]
    return f"{head}\n{_table(headers, rows)}\n"
