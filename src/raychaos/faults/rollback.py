"""Undo every fault a run applied, newest first; the rollback action of every experiment.

A failed undo is reported, never swallowed: the others still run, and the error names what is
still applied. An undo that finds the system did not recover (a head kill whose head never came
back within the undo's own bound: there is nothing to undo, only to wait for) marks its record
``not_recovered`` — a failure of the system the verdict reports, not a rollback error. The same
function serves ``raychaos rollback RESULTS_DIR`` after a crash.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.context import current
from raychaos.errors import NotRecovered, RollbackFailed
from raychaos.results.store import Ev, Ledger, Timeline
from raychaos.targets.base import Target

__all__ = ["undo_all", "undo_ledger"]


def undo_ledger(ledger: Ledger, target: Target, timeline: Timeline | None = None) -> dict[str, Any]:
    """Undo each outstanding record of ``ledger`` on ``target``; idempotent."""
    undone, failed, unrecovered = [], [], []
    for record in ledger.outstanding():
        if timeline:
            timeline.event(Ev.ROLLBACK_START, record["fault"], id=record["id"],
                           lasting=record.get("lasting", True))
        try:
            result = target.undo(record)
        except NotRecovered as exc:
            unrecovered.append(record["id"])
            ledger.update(record, state="not_recovered", not_recovered=str(exc))
            if timeline:
                timeline.event(Ev.NOT_RECOVERED, record["fault"], id=record["id"],
                               reason=str(exc))
            continue
        except Exception as exc:
            failed.append(f"{record['id']} {record['fault']}: {exc}")
            ledger.update(record, undo_error=str(exc))
            if timeline:
                timeline.event(Ev.ROLLBACK_FAILED, record["fault"], id=record["id"],
                               error=str(exc))
            continue
        ledger.update(record, state="undone", undone_at=time.time(), undo_result=result)
        undone.append(record["id"])
        if timeline:
            timeline.event(Ev.ROLLBACK_END, record["fault"], id=record["id"],
                           lasting=record.get("lasting", True))
            if record.get("lasting", True):
                timeline.event(Ev.FAULT_END, record["fault"], id=record["id"])
    if failed:
        raise RollbackFailed("rollback incomplete, still applied: " + "; ".join(failed))
    return {"undone": undone, "not_recovered": unrecovered}


def undo_all() -> dict[str, Any]:
    """Undo every fault this run applied (newest first)."""
    run = current()
    return undo_ledger(run.ledger, run.target, run.timeline)
