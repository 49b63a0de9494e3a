"""The checks of a run as every reader shows them: one per SLO, one per probe, and ``run``.

The verdict (:mod:`raychaos.run.verdict`) writes them into ``summary.json`` (``checks``); JUnit
(one test case each), the pytest plugin (one item each) and the verdict table read them from
there, so the three cannot disagree. Each check is ``{"kind": "run"|"probe"|"slo", "name",
"verdict": "pass"|"inconclusive"|"fail"|"error"|"n/a", "message"}``; the run's verdict is the
worst of them, in the one order every reader ranks by (:data:`VERDICTS`, :func:`rank`):
n/a < pass < inconclusive < fail < error.

``inconclusive`` (exit 3) means the data could not support a verdict: a check had fewer samples
than its minimum, or its windows saw different host noise (the reason, one sentence, is in the
SLO row's or probe's ``evidence["inconclusive"]``). It is never a pass, and it is not a failure
of the system under test: a real failure (1) or an error of the harness (2) outranks it.

Several runs (trials, a game day, a ramp) combine by :func:`combine_trials`, which is not the
worst-of: any fail is a fail, else any error an error, all pass a pass, else inconclusive.

:func:`checks_of` also gives checks for a summary written before they existed (or by a runner
that failed before any summary), so old results folders still render.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["EXIT", "INCONCLUSIVE_MEANING", "RANK", "VERDICTS", "check", "checks_of",
           "combine_trials", "counts_text", "inconclusive_reason", "probe_message", "rank",
           "slo_message",
           "verdict_of_exit", "worst"]

VERDICTS = ("n/a", "pass", "inconclusive", "fail", "error")  # best to worst: the one order
RANK = {v: i for i, v in enumerate(VERDICTS)}
EXIT = {"pass": 0, "fail": 1, "error": 2, "inconclusive": 3}  # n/a is never a run's verdict
INCONCLUSIVE_MEANING = "the data could not support a verdict"


def rank(verdict: Any) -> int:
    """Where ``verdict`` stands in :data:`VERDICTS`; anything unknown (``unknown``, None, a
    typo) ranks as ``error``, because a verdict nobody can read is not a pass."""
    return RANK.get(str(verdict), RANK["error"])


def worst(verdicts: Iterable[Any]) -> str:
    """The worst of ``verdicts`` (``pass`` when there are none but n/a; unknown ones are
    ``error``)."""
    judged = [str(v) if str(v) in RANK else "error" for v in verdicts]
    top = max(judged, key=rank, default="pass")
    return "pass" if top == "n/a" else top


def verdict_of_exit(code: int) -> str:
    """The verdict an exit code stands for (an unknown code is an ``error``)."""
    return next((v for v, c in EXIT.items() if c == code), "error")


def combine_trials(verdicts: Iterable[Any]) -> tuple[str, dict[str, int]]:
    """The verdict of several runs, and how many runs had each verdict.

    Unlike :func:`worst`, a real failure in any run is the answer (the system fell short at
    least once, whatever the others could not see): any ``fail`` -> fail; else any ``error``
    -> error; all ``pass`` (n/a ignored; none at all counts as pass) -> pass; else
    ``inconclusive``. Unknown verdicts count as ``error``."""
    counts: dict[str, int] = {}
    for v in verdicts:
        key = str(v) if str(v) in RANK else "error"
        counts[key] = counts.get(key, 0) + 1
    for verdict in ("fail", "error", "inconclusive"):
        if counts.get(verdict):
            return verdict, counts
    return "pass", counts


def counts_text(counts: dict[str, int], noun: str = "trials") -> str:
    """``3 pass, 2 inconclusive of 5 trials``: each verdict that occurred, best first."""
    parts = [f"{counts[v]} {v}" for v in VERDICTS if counts.get(v)]
    return f"{', '.join(parts) or 'none'} of {sum(counts.values())} {noun}"


def inconclusive_reason(evidence: Any) -> str:
    """Why an SLO row or a probe was inconclusive: ``evidence["inconclusive"]`` (one sentence),
    or a plain sentence when the evaluator gave none."""
    reason = evidence.get("inconclusive") if isinstance(evidence, dict) else None
    return str(reason) if reason else "no reason recorded"


def check(kind: str, name: str, verdict: str, message: str) -> dict[str, Any]:
    return {"kind": kind, "name": name, "verdict": verdict, "message": message}


def slo_message(slo: dict[str, Any]) -> str:
    """One sentence: ``storm-p99: p99_latency_ms over chaos (load task_storm) measured 40,
    required <= 25`` — always the measured value, the op and the threshold (and, when there is
    no value, why); an inconclusive row ends with ``(inconclusive: <reason>)``."""
    where = f"over {slo.get('window')}"
    if slo.get("load"):
        where += f" (load {slo.get('load')})"
    value = slo.get("value")
    shown = "not measured" if value is None else "measured " + (
        f"{value:g}" if isinstance(value, (int, float)) else str(value))
    raw = slo.get("evidence")
    evidence: dict[str, Any] = raw if isinstance(raw, dict) else {}
    text = (f"{slo.get('name')}: {slo.get('metric')} {where} {shown}, "
            f"required {slo.get('op')} {slo.get('threshold')}")
    if slo.get("relative_to") and value is not None and "baseline_value" in evidence:
        # the value is a factor: say of what, and how sure ("42.2" alone read as 42 ms)
        ci = evidence.get("ci") or [value, value]
        text = (f"{slo.get('name')}: {slo.get('metric')} {where} {shown} x its "
                f"{slo.get('relative_to')} ({evidence.get('window_value'):.4g} against "
                f"{evidence.get('baseline_value'):.4g}; 95 % interval {ci[0]:.3g}..{ci[1]:.3g}, "
                f"{evidence.get('samples')} vs {evidence.get('baseline_samples')} samples), "
                f"required {slo.get('op')} {slo.get('threshold')}")
    note = evidence.get("note") or evidence.get("reason")
    if value is None and note:
        text += f" ({note})"
    if slo.get("verdict") == "fail" and evidence.get("stalled"):
        text += f" (failed: {evidence['stalled']})"
    if slo.get("verdict") == "inconclusive":
        text += f" (inconclusive: {inconclusive_reason(evidence)})"
    return text


def probe_message(probe: dict[str, Any], why: str = "") -> str:
    """``probe gcs_recovery: fail: <why>``; an inconclusive probe says its reason instead."""
    verdict = probe.get("verdict")
    if verdict == "inconclusive":
        why = inconclusive_reason(probe.get("evidence"))
    return f"probe {probe.get('name')}: {verdict}" + (f": {why}" if why else "")


def checks_of(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``summary["checks"]``, or checks made from an older summary's probes, SLOs and status."""
    if isinstance(summary.get("checks"), list):
        return list(summary["checks"])
    out = []
    for p in summary.get("probes") or []:
        verdict = {"unknown": "error"}.get(str(p.get("verdict")), str(p.get("verdict")))
        out.append(check("probe", str(p.get("name")), verdict, probe_message(p)))
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
