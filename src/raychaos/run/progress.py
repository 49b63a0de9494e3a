"""What a person (or a CI log) sees while a run goes on, and the verdict table at its end.

Three kinds of line: *essential* (experiment, results folder, errors, verdict), *phase*
(hypothesis, method, rollbacks) and *detail* (each activity, set-up steps). ``quiet`` keeps
essential and phase lines. A CI log (stdout not a TTY) keeps everything but prints the periodic
monitor line every 30 s instead of every 5 s: a 10-minute run should not add 120 near-identical
lines to a build log. Every line is redacted: progress ends up in CI logs.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from raychaos.results.redact import redact_text

__all__ = ["Progress", "Say", "Ticker", "verdict_table"]


class Say(Protocol):
    def __call__(self, message: str, essential: bool = False, phase: bool = False) -> None: ...


class Progress:
    """Timestamped progress lines, as chatty as the place they are read in."""

    def __init__(self, quiet: bool = False, stream: Any = None, tty: bool | None = None):
        self.quiet = quiet
        self.stream = stream or sys.stdout
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.t0 = time.monotonic()

    @property
    def tick_every_s(self) -> float | None:
        """Seconds between monitor lines; None: no monitor lines at all."""
        if self.quiet:
            return None
        return 5.0 if self.tty else 30.0

    def __call__(self, message: str, essential: bool = False, phase: bool = False) -> None:
        if self.quiet and not (essential or phase):
            return
        self.stream.write(f"[{time.monotonic() - self.t0:7.1f}s] {redact_text(message)}\n")
        self.stream.flush()


class Ticker:
    """Every few seconds: what the monitor sees right now (a thread until ``stop``)."""

    def __init__(self, line: Callable[[], str | None], say: Say, every_s: float):
        self.line, self.say, self.every_s = line, say, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="raychaos-ticker")

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            text = self.line()
            if text:
                self.say(text)


def verdict_table(summary: dict[str, Any]) -> str:
    """The checks (:mod:`raychaos.results.checks`) as a table: the run, each probe, each SLO."""
    from raychaos.results.checks import checks_of

    slos = {s["name"]: s for s in summary.get("slos", [])}
    rows = [("check", "window", "value", "threshold", "verdict")]
    for c in checks_of(summary):
        if c["kind"] == "slo" and c["name"] in slos:
            s = slos[c["name"]]
            value = "not measured" if s["value"] is None else f"{s['value']:g}"
            rows.append((s["name"], s["window"], value, f"{s['op']} {s['threshold']:g}",
                         c["verdict"]))
        else:
            label = "run" if c["kind"] == "run" else f"{c['kind']} {c['name']}"
            rows.append((label, "-", "-", "-", c["verdict"]))
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
