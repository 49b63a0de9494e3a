"""From what a run saw to its verdict and ``summary.json`` — the one place a verdict is made.

Every source is read, never assumed: the ledger (a fault that did not land; one that landed and
whose system did not recover), Chaos Toolkit's journal (an activity that raised; a hypothesis
not met before the method, or deviated after it — :mod:`raychaos.run.journal`), the probes'
recorded verdicts, the SLO rows (:mod:`raychaos.observe.slo`) and the whole timeline (a GCS that
went down again after it had recovered). They become checks (:mod:`raychaos.results.checks`):
one per SLO, one per probe the method runs, and ``run``; the verdict is the worst of them.

- ``error`` (exit 2): the harness could not do its job or could not see — the run was
  interrupted, aborted or did not start, a fault did not land or was not undone, a probe raised,
  recorded nothing or could not observe, an SLO could not be measured. Never a pass.
- ``fail`` (exit 1): the system under test fell short — an SLO or probe failed, the
  steady-state hypothesis was not met (before the method: then the method never ran) or
  deviated, the GCS flapped after recovering, or **the system did not recover within its
  bound** (a fault ``not_recovered``). What could not be observed *because* the system did not
  recover, or because the method never ran, is part of that failure (a fail, with its reason),
  not an error that would hide it.
- ``inconclusive`` (exit 3): no check failed or errored, but at least one could not be judged
  on its data (:data:`raychaos.results.checks.INCONCLUSIVE_MEANING`): too few samples in a
  window, host noise that differed between the windows it compares, an interval that reaches
  back inside its bound. Never a pass; never a failure blamed on Ray.
- ``pass`` (exit 0): every check passed.

The CLI, the Chaos Toolkit control (which marks the journal so ``chaos run`` exits non-zero),
JUnit and the pytest plugin all read these checks.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.config.experiment import Experiment, judged_probes
from raychaos.context import Run
from raychaos.observe.hostnoise import NoiseBounds, noise_by_window, noise_high, window_noise
from raychaos.observe.loadstats import load_report
from raychaos.observe.monitor import Monitor, sample_gaps
from raychaos.observe.recovery import recovery_figures
from raychaos.observe.slo import evaluate, noise_bounds, said
from raychaos.observe.windows import fault_spans, windows
from raychaos.results.checks import (
    EXIT,
    INCONCLUSIVE_MEANING,
    check,
    probe_message,
    slo_message,
    worst,
)
from raychaos.results.store import Ev, read_timeline
from raychaos.run.journal import JournalFindings, read_journal

__all__ = ["EXIT", "early_summary", "mark_journal", "summarize"]



class _Reasons:
    """Run-level reasons, by what they do to the verdict."""

    def __init__(self) -> None:
        self.harness: list[str] = []  # error, always
        self.unobserved: list[str] = []  # error, unless the system failed first
        self.failed: list[str] = []  # fail
        self.stopped: list[str] = []  # fail, and what went unobserved after it is part of it
        self.inconclusive: list[str] = []  # inconclusive, unless anything above

    def add(self, bucket: list[str], text: str) -> None:
        if text not in bucket:
            bucket.append(text)


def _ledger(reasons: _Reasons, faults: list[dict[str, Any]]) -> None:
    for f in faults:
        if f.get("not_recovered"):
            reasons.add(reasons.stopped, f"fault {f['id']} {f['fault']}: the system did not "
                                         f"recover: {f.get('not_recovered')}")
        elif f.get("error"):
            reasons.add(reasons.harness, f"fault {f['id']} {f['fault']} did not land: "
                                         f"{f['error']}")


def _journal(reasons: _Reasons, found: JournalFindings, faults: list[dict[str, Any]],
             judged: list[str]) -> dict[str, list[str]]:
    """Run-level reasons from the journal; returns what each judged probe raised."""
    by_probe: dict[str, list[str]] = {}
    failed_faults = {str(f.get("fault")) for f in faults
                     if f.get("error") or f.get("not_recovered")}
    for r in found.raised:
        if r.section == "method" and r.kind == "probe" and r.raychaos and r.func in judged:
            by_probe.setdefault(r.func, []).append(r.sentence())
        elif r.kind == "probe":
            reasons.add(reasons.unobserved, r.sentence())
        elif r.section == "method" and r.raychaos and r.func in failed_faults:
            continue  # the ledger says it (did not land / did not recover)
        else:
            reasons.add(reasons.harness, r.sentence())
    if found.hypothesis_before_met is False and not any(
            r.section == "hypothesis-before" for r in found.raised):
        reasons.add(reasons.stopped, "the steady-state hypothesis was not met before the "
                                     f"method (probe {found.missed_before}): the method "
                                     "did not run")
    elif found.hypothesis_before_met is False:
        reasons.add(reasons.unobserved, "the steady-state hypothesis could not be checked "
                                        "before the method: the method did not run")
    if found.deviated:
        reasons.add(reasons.failed, "the steady-state hypothesis deviated after the method"
                    + (f" (probe {found.missed_after})" if found.missed_after else ""))
    if found.status == "aborted":
        reasons.add(reasons.harness, "Chaos Toolkit aborted the experiment (an unexpected "
                                     "exception in its method)")
    return by_probe


def _flaps(reasons: _Reasons, records: list[dict[str, Any]], bounds: NoiseBounds
           ) -> dict[str, Any] | None:
    """A GCS down again after it had recovered fails the run — unless every such stretch was
    only missed deadlines (nothing refused it) while the host was busy: a harness starved of
    CPU misses a healthy GCS's answers (stress-ng at 100 %: 5.6 s without an answer, timer lag
    1.2 s), and that says nothing about the GCS."""
    if not any(r.get("kind") == "event" and r.get("event") == Ev.HEAD_KILLED for r in records):
        return None
    figures = recovery_figures(records)
    if not figures["gcs_flaps_after_recovery"]:
        return figures
    said_ = (f"the GCS went down {figures['gcs_flaps_after_recovery']} time(s) again after it "
             f"had recovered ({figures['gcs_recovery_s']} s after the kill)")
    spans = figures.get("gcs_flap_spans") or []
    noise = [window_noise(records, (s["from"], s["to"])) for s in spans]
    busy = [None if s["refused"] or (n.get("samples") or 0) < bounds.min_samples  # unmeasured
            else noise_high(n, f"{s['to'] - s['from']:.1f} s without an answer", bounds)
            for s, n in zip(spans, noise, strict=True)]
    if spans and all(busy):
        reasons.add(reasons.inconclusive, f"{said_}, only by missed deadlines, nothing refused "
                                          f"it: {busy[0]}")
    else:
        reasons.add(reasons.failed, said_)
    return figures


def _probe_reason(name: str, verdict: str, ev: dict[str, Any]) -> str:
    if verdict == "unknown":
        return f"could not observe {said(ev.get('unobserved'))}"
    if verdict != "fail":
        return ""
    if name == "job_survival":
        return f"lost {ev.get('lost')} of {ev.get('total')} load job(s)"
    if name == "job_status_consistent":
        return "; ".join(w for e in (ev.get("jobs") or {}).values() for w in e.get("why") or [])
    if name == "sentinel_preserved":
        bad = [k for k in ("found", "reachable", "same_pid", "state_preserved") if not ev.get(k)]
        return f"the sentinel actor was not preserved ({', '.join(bad)} false)"
    if name == "gcs_recovery" and ev.get("workers_lost"):
        gone = sorted({str(g.get("how")) for g in (ev.get("workers_gone") or {}).values()})
        return (f"workers lost: {', '.join(map(str, ev['workers_lost']))} (alive before the "
                f"kill, not ALIVE at the end"
                + (f"; gone for good: {', '.join(gone)}" if gone else "")
                + f"; gcs_recovery_s {ev.get('gcs_recovery_s')})")
    if name == "gcs_recovery":
        return (f"not recovered within the probe's timeout: gcs_recovery_s "
                f"{ev.get('gcs_recovery_s')}, nodes_recovery_s {ev.get('nodes_recovery_s')}, "
                f"workers lost {ev.get('workers_lost')}, not re-registered "
                f"{ev.get('workers_not_reregistered')}")
    return ""


def _checks(run: Run, experiment: Experiment, slos: list[dict[str, Any]],
            raised: dict[str, list[str]], stopped: bool) -> list[dict[str, Any]]:
    """One check per probe the method runs (and per probe recorded) and per SLO row; when the
    system failed first (``stopped``), what it left unobserved is a fail, not an error."""
    def demote(verdict: str, message: str) -> tuple[str, str]:
        if stopped and verdict == "error":
            return "fail", f"{message} (after the system failed: see run)"
        return verdict, message

    out = []
    names = list(dict.fromkeys(judged_probes(experiment.data) + [p["name"] for p in run.probes]))
    for name in names:
        entries = [p for p in run.probes if p["name"] == name]
        if raised.get(name):
            verdict, message = "error", "; ".join(raised[name])
        elif not entries:
            verdict, message = "error", f"probe {name} recorded no verdict (it did not run)"
        else:
            got = [{"unknown": "error"}.get(p["verdict"], p["verdict"]) for p in entries]
            verdict = worst(got) if any(v != "n/a" for v in got) else "n/a"
            entry = next(p for p, v in zip(entries, got, strict=True) if v == verdict)
            why = _probe_reason(name, entry["verdict"], entry.get("evidence") or {})
            message = probe_message(entry, why)
        out.append({"kind": "probe", "name": name, **dict(zip(
            ("verdict", "message"), demote(verdict, message), strict=True))})
    for row in slos:
        verdict, message = demote(row["verdict"], slo_message(row))
        out.append(check("slo", row["name"], verdict, message))
    return out


def _run_check(status: str, reason: str | None, reasons: _Reasons) -> dict[str, Any]:
    errors = list(reasons.harness)
    if status != "completed":
        errors.insert(0, f"the run {status}" + (f": {reason}" if reason else ""))
    if not reasons.stopped:
        errors += reasons.unobserved
    if errors:
        return check("run", "run", "error", "; ".join(errors))
    fails = reasons.stopped + reasons.failed
    if fails:
        return check("run", "run", "fail", "; ".join(fails))
    if reasons.inconclusive:
        return check("run", "run", "inconclusive", "; ".join(reasons.inconclusive))
    return check("run", "run", "pass", "the run completed; the hypothesis held")


def summarize(experiment: Experiment, run: Run, journal: dict[str, Any] | None, status: str,
              errors: list[str], reason: str | None, monitor: Monitor | None) -> dict[str, Any]:
    records = read_timeline(run.timeline.path)
    wins = windows(records)
    slos, wins_json = evaluate(run.slo_profile, records, run.probes, wins)
    faults = run.ledger.faults
    found = read_journal(journal)
    reasons = _Reasons()
    for e in errors + run.errors:
        reasons.add(reasons.harness, e)
    _ledger(reasons, faults)
    judged = judged_probes(experiment.data)
    raised = _journal(reasons, found, faults, judged)
    figures = _flaps(reasons, records, noise_bounds(run.slo_profile))
    checks = [_run_check(status, reason, reasons)]
    checks += _checks(run, experiment, slos, raised, bool(reasons.stopped))
    verdict = worst([c["verdict"] for c in checks])
    notes = reasons.unobserved if reasons.stopped else []
    return {
        "experiment": run.title, "slug": experiment.slug, "run_id": run.run_id,
        "status": status, "reason": reason, "verdict": verdict,
        "exit_code": EXIT[verdict], "started_at": run.clock.wall0, "ended_at": time.time(),
        "duration_s": round(run.clock.t(), 3), "target": run.target.describe(),
        "hypothesis": {"deviated": found.deviated, "met_before": found.hypothesis_before_met,
                       "journal_status": found.status},
        "windows": wins_json, "probes": run.probes, "slos": slos,
        "host_noise": noise_by_window(records, wins),
        "loads": load_report(records, wins), "checks": checks, "faults": faults,
        "recovery": figures, "fault_spans": fault_spans(records),
        "monitor": {"interval_s": run.settings.monitor.interval_s,
                    "samples": monitor.samples if monitor else 0,
                    "unanswered": monitor.unanswered if monitor else 0,
                    "cpu_seconds": round(monitor.cpu_seconds, 3) if monitor else 0,
                    **sample_gaps(records),
                    **{k: (figures or {}).get(k) for k in ("outage_max_gap_s",
                                                           "outage_samples_per_s")}},
        "slo_profile": str(experiment.slo_path) if experiment.slo_path else None,
        "review": run.extras.get("review"),  # the preflight resilience review
        "failures": [c["message"] for c in checks if c["verdict"] == "fail"],
        "errors": [c["message"] for c in checks if c["verdict"] == "error"],
        "inconclusive": [c["message"] for c in checks if c["verdict"] == "inconclusive"],
        "meaning": INCONCLUSIVE_MEANING if verdict == "inconclusive" else None,
        "notes": notes,
    }


def early_summary(experiment: Experiment, status: str, reason: str | None,
                  errors: list[str]) -> dict[str, Any]:
    """The summary of a run that stopped before its results folder had a run in it."""
    why = "; ".join([f"the run {status}" + (f": {reason}" if reason else ""), *errors])
    return {"experiment": experiment.title, "slug": experiment.slug, "status": status,
            "reason": reason, "verdict": "error", "exit_code": 2, "errors": errors or [why],
            "failures": [], "probes": [], "slos": [], "faults": [], "loads": {},
            "checks": [check("run", "run", "error", why)]}


def mark_journal(journal: dict[str, Any], summary: dict[str, Any], run_dir: str) -> None:
    """Make Chaos Toolkit's journal say what the verdict says: ``chaos run`` exits 1 whenever
    the journal's status is not ``completed``, so a run that did not pass is not completed."""
    journal["raychaos"] = {"verdict": summary["verdict"], "exit_code": summary["exit_code"],
                           "status": summary["status"], "results": run_dir}
    if summary["verdict"] != "pass" and journal.get("status") == "completed":
        journal["status"] = "failed"
