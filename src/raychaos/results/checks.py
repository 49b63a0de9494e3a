"""The checks of a run as every reader shows them: one per SLO, one per probe, and ``run``.

The verdict (:mod:`raychaos.run.verdict`) writes them into ``summary.json`` (``checks``); JUnit
(one test case each), the pytest plugin (one item each) and the verdict table read them from
there, so the three cannot disagree. Each check is ``{"kind": "run"|"probe"|"slo", "name",
"verdict": "pass"|"fail"|"error"|"n/a", "message"}``; the run's verdict is the worst of them
(error > fail > pass).

:func:`checks_of` also gives checks for a summary written before they existed (or by a runner
that failed before any summary), so old results folders still render.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RANK", "check", "checks_of", "slo_message", "worst"]

RANK = {"n/a": 0, "pass": 1, "fail": 2, "error": 3}


def worst(verdicts: list[str]) -> str:
    """The worst of ``verdicts`` (``pass`` when there are none but n/a)."""
    judged = [v if v in RANK else "error" for v in verdicts]
    top = max(judged, key=lambda v: RANK[v], default="pass")
    return "pass" if top == "n/a" else top


def check(kind: str, name: str, verdict: str, message: str) -> dict[str, Any]:
    return {"kind": kind, "name": name, "verdict": verdict, "message": message}


def slo_message(slo: dict[str, Any]) -> str:
    """One sentence: ``storm-p99: p99_latency_ms over chaos (load task_storm) measured 40,
    required <= 25`` — always the measured value, the op and the threshold (and, when there is
    no value, why)."""
    where = f"over {slo.get('window')}"
    if slo.get("load"):
        where += f" (load {slo.get('load')})"
    value = slo.get("value")
    shown = "not measured" if value is None else f"{value:g}" if isinstance(
        value, (int, float)) else str(value)
    text = (f"{slo.get('name')}: {slo.get('metric')} {where} measured {shown}, "
            f"required {slo.get('op')} {slo.get('threshold')}")
    raw = slo.get("evidence")
    evidence: dict[str, Any] = raw if isinstance(raw, dict) else {}
    note = evidence.get("note") or evidence.get("reason")
    return f"{text} ({note})" if value is None and note else text


def checks_of(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``summary["checks"]``, or checks made from an older summary's probes, SLOs and status."""
    if isinstance(summary.get("checks"), list):
        return list(summary["checks"])
    out = []
    for p in summary.get("probes") or []:
        verdict = {"unknown": "error"}.get(str(p.get("verdict")), str(p.get("verdict")))
        out.append(check("probe", str(p.get("name")), verdict,
                         f"probe {p.get('name')}: {p.get('verdict')}"))
    for s in summary.get("slos") or []:
        out.append(check("slo", str(s.get("name")), str(s.get("verdict")), slo_message(s)))
    status = summary.get("status")
    errors = [str(e) for e in summary.get("errors") or []]
    if status != "completed" or errors:
        why = "; ".join(errors) or "no details"
        out.append(check("run", "run", "error", f"the run {status}: {why}"))
    elif (summary.get("hypothesis") or {}).get("deviated"):
        out.append(check("run", "run", "fail", "the steady-state hypothesis deviated"))
    else:
        out.append(check("run", "run", "pass", "the run completed"))
    return out
