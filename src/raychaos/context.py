"""The run in progress: what faults and probes (plain Chaos Toolkit functions) act through.

Chaos Toolkit calls our actions and probes as plain functions with the experiment's arguments;
the session (:mod:`raychaos.run.session`, driven by the control :mod:`raychaos.control`) makes
one :class:`Run` before the experiment and clears it after, so those functions reach the target,
the ledger and the timeline through :func:`current` instead of through arguments an experiment
author would have to pass. Low in the layering: it imports nothing that imports it.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raychaos.config.settings import RaychaosSettings, SloProfile
from raychaos.errors import NotRecovered, RaychaosError
from raychaos.results.store import Clock, Ev, Ledger, Timeline
from raychaos.targets.base import Target

__all__ = ["Run", "current", "activate", "deactivate"]


@dataclass
class Run:
    run_id: str
    run_dir: Path
    settings: RaychaosSettings
    target: Target
    clock: Clock
    timeline: Timeline
    ledger: Ledger
    title: str = ""
    slo_profile: SloProfile | None = None
    jobs: dict[str, str] = field(default_factory=dict)  # load name -> job id
    probes: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @contextlib.contextmanager
    def fault(self, name: str, args: dict[str, Any], lasting: bool = True
              ) -> Iterator[dict[str, Any]]:
        """Ledger entry written before the fault acts; state and evidence kept up to date.

        A :class:`~raychaos.errors.NotRecovered` out of the block means the fault landed and
        the system did not come back within its bound: the record keeps ``not_recovered``
        (the verdict is a failure whatever happens next) and stays outstanding, so the
        rollback still waits for the system (a head that comes back late leaves a healthy
        cluster for the next run); no ``fault_end`` is written until then."""
        record = self.ledger.begin(name, args)
        self.ledger.update(record, lasting=lasting)
        self.timeline.event(Ev.FAULT_START, name, id=record["id"], args=args)
        try:
            yield record
        except NotRecovered as exc:  # it landed; the system did not recover: a failure
            self.ledger.update(record, state="applied", applied_at=time.time(),
                               not_recovered=_one_line(exc))
            self.timeline.event(Ev.FAULT_APPLIED, name, id=record["id"], lasting=lasting)
            self.timeline.event(Ev.NOT_RECOVERED, name, id=record["id"], reason=str(exc))
            raise
        except BaseException as exc:
            self.ledger.update(record, state="failed", error=_one_line(exc))
            self.timeline.event(Ev.FAULT_FAILED, name, id=record["id"], error=_one_line(exc))
            raise
        self.ledger.update(record, state="applied", applied_at=time.time())
        self.timeline.event(Ev.FAULT_APPLIED, name, id=record["id"], lasting=lasting)
        if not lasting:  # a kill: its effect (the outage) is what the probes measure next
            self.timeline.event(Ev.FAULT_END, name, id=record["id"])

    def record_probe(self, name: str, verdict: str, evidence: dict[str, Any]) -> dict[str, Any]:
        entry = {"name": name, "verdict": verdict, "evidence": evidence}
        with self.lock:
            self.probes.append(entry)
        self.timeline.event(Ev.PROBE, name, verdict=verdict)
        return entry


_current: Run | None = None


def activate(run: Run) -> None:
    global _current
    _current = run


def deactivate() -> None:
    global _current
    _current = None


def current() -> Run:
    if _current is None:
        raise RaychaosError("no raychaos run is active: the experiment must declare the "
                            "raychaos control (controls: [{name: raychaos, provider: "
                            "{type: python, module: raychaos.control}}])")
    return _current


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def format_exc_short(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
