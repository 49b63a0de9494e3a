"""From what a run saw to its verdict and ``summary.json`` — the one place a verdict is made.

``pass`` (exit 0): every SLO and probe passed. ``fail`` (exit 1): an SLO, a probe or the
steady-state hypothesis failed. ``error`` (exit 2): the run errored or was interrupted or
aborted, a fault did not land or was not undone, or a probe could not observe — never a pass.
The CLI, the Chaos Toolkit control (which marks the journal so ``chaos run`` exits non-zero),
JUnit and the pytest plugin all read this verdict.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.config.experiment import Experiment
from raychaos.context import Run
from raychaos.observe.monitor import Monitor
from raychaos.observe.slo import evaluate
from raychaos.results.store import read_timeline

__all__ = ["EXIT", "mark_journal", "summarize"]

EXIT = {"pass": 0, "fail": 1, "error": 2}


def summarize(experiment: Experiment, run: Run, journal: dict[str, Any] | None, status: str,
              errors: list[str], reason: str | None, monitor: Monitor | None) -> dict[str, Any]:
    records = read_timeline(run.timeline.path)
    slos, wins = evaluate(run.slo_profile, records, run.probes)
    faults = run.ledger.faults
    errors = errors + run.errors + [f"fault {f['id']} {f['fault']}: {f['error']}"
                                    for f in faults if f.get("error")]
    # a probe that could not observe (target unreachable) makes no pass: the run errored
    errors += [f"probe {p['name']}: could not observe {p['evidence'].get('unobserved')}"
               for p in run.probes if p["verdict"] == "unknown"]
    deviated = bool(journal and journal.get("deviated"))
    if journal and journal.get("status") not in (None, "completed") and status == "completed":
        status = "failed"
    if status in ("interrupted", "aborted", "errored") or errors:
        verdict = "error"
    elif deviated or any(s["verdict"] == "fail" for s in slos) or any(
            p["verdict"] == "fail" for p in run.probes):
        verdict = "fail"
    else:
        verdict = "pass"
    return {
        "experiment": run.title, "slug": experiment.slug, "run_id": run.run_id,
        "status": status, "reason": reason, "verdict": verdict,
        "exit_code": EXIT[verdict], "started_at": run.clock.wall0, "ended_at": time.time(),
        "duration_s": round(run.clock.t(), 3), "target": run.target.describe(),
        "hypothesis": {"deviated": deviated,
                       "journal_status": journal.get("status") if journal else None},
        "windows": wins, "probes": run.probes, "slos": slos, "faults": faults,
        "monitor": {"interval_s": run.settings.monitor.interval_s,
                    "samples": monitor.samples if monitor else 0,
                    "cpu_seconds": round(monitor.cpu_seconds, 3) if monitor else 0},
        "slo_profile": str(experiment.slo_path) if experiment.slo_path else None,
        "review": run.extras.get("review"),  # the preflight resilience review
        "errors": errors,
    }


def early_summary(experiment: Experiment, status: str, reason: str | None,
                  errors: list[str]) -> dict[str, Any]:
    """The summary of a run that stopped before its results folder had a run in it."""
    return {"experiment": experiment.title, "slug": experiment.slug, "status": status,
            "reason": reason, "verdict": "error", "exit_code": 2, "errors": errors,
            "probes": [], "slos": [], "faults": []}


def mark_journal(journal: dict[str, Any], summary: dict[str, Any], run_dir: str) -> None:
    """Make Chaos Toolkit's journal say what the verdict says: ``chaos run`` exits 1 whenever
    the journal's status is not ``completed``, so a run that did not pass is not completed."""
    journal["raychaos"] = {"verdict": summary["verdict"], "exit_code": summary["exit_code"],
                           "status": summary["status"], "results": run_dir}
    if summary["verdict"] != "pass" and journal.get("status") == "completed":
        journal["status"] = "failed"
