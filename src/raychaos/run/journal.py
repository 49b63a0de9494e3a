"""What Chaos Toolkit's journal says about a run, for the verdict.

Chaos Toolkit turns an exception out of an activity into ``status: failed`` on that activity and
goes on with the method; a steady-state hypothesis not met *before* the method ends the
experiment early with ``status: completed`` (or ``failed`` when one of its probes raised) and
``deviated: false``. Neither shows in the raychaos evidence, so the verdict reads them here:

- every activity that raised — in the hypothesis (before/after), the method or the rollbacks —
  with its type, name, provider function and the one-line exception;
- whether the hypothesis was met before the method (and which probe missed its tolerance);
- whether it deviated after the method (and which probe).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["JournalFindings", "Raised", "read_journal"]

_WRAPPER = "chaoslib.exceptions.ActivityFailed: "


@dataclass(frozen=True)
class Raised:
    section: str  # hypothesis-before | method | hypothesis-after | rollbacks
    kind: str  # probe | action
    name: str  # the activity's name in the experiment
    func: str  # the provider's function ("" for process/http providers)
    module: str
    error: str  # one line

    @property
    def raychaos(self) -> bool:
        return self.module.startswith("raychaos.")

    def sentence(self) -> str:
        where = {"hypothesis-before": "steady-state probe (before the method)",
                 "hypothesis-after": "steady-state probe (after the method)",
                 "rollbacks": f"rollback {self.kind}"}.get(self.section, self.kind)
        func = f" ({self.func})" if self.func and self.func != self.name else ""
        return f"{where} {self.name}{func} raised: {self.error}"


@dataclass(frozen=True)
class JournalFindings:
    raised: list[Raised] = field(default_factory=list)
    hypothesis_before_met: bool | None = None
    missed_before: str | None = None  # the probe that was not within its tolerance
    deviated: bool = False
    missed_after: str | None = None
    status: str | None = None


def _one_line(run: dict[str, Any]) -> str:
    exc = run.get("exception")
    text = "".join(exc) if isinstance(exc, list) else str(exc or "")
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    line = lines[-1] if lines else "an exception (no details in the journal)"
    return line[len(_WRAPPER):] if line.startswith(_WRAPPER) else line


def _raised(section: str, run: dict[str, Any]) -> Raised:
    act = run.get("activity") or {}
    prov = act.get("provider") or {}
    return Raised(section=section, kind=str(act.get("type", "activity")),
                  name=str(act.get("name", "?")), func=str(prov.get("func") or ""),
                  module=str(prov.get("module") or ""), error=_one_line(run))


def _missed(state: dict[str, Any]) -> str | None:
    for probe in state.get("probes") or []:
        if probe.get("status") == "succeeded" and probe.get("tolerance_met") is False:
            return str((probe.get("activity") or {}).get("name", "?"))
    return None


def read_journal(journal: dict[str, Any] | None) -> JournalFindings:
    """The findings of the module docstring; an absent journal has none."""
    if not journal:
        return JournalFindings()
    raised: list[Raised] = []
    steady = journal.get("steady_states") or {}
    before, after = steady.get("before"), steady.get("after")
    for section, state in (("hypothesis-before", before), ("hypothesis-after", after)):
        for probe in (state or {}).get("probes") or []:
            if probe.get("status") == "failed":
                raised.append(_raised(section, probe))
    for section, key in (("method", "run"), ("rollbacks", "rollbacks")):
        for run in journal.get(key) or []:
            if isinstance(run, dict) and run.get("status") == "failed":
                raised.append(_raised(section, run))
    met = None if not isinstance(before, dict) else bool(before.get("steady_state_met"))
    return JournalFindings(
        raised=raised, hypothesis_before_met=met,
        missed_before=_missed(before) if isinstance(before, dict) and not met else None,
        deviated=bool(journal.get("deviated")),
        missed_after=_missed(after) if isinstance(after, dict) else None,
        status=journal.get("status"))
