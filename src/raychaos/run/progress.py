"""What a person (or a CI log) sees while a run goes on, and the verdict table at its end.

Every line says when (seconds since the run started), in which phase (setup, hypothesis,
method, rollbacks, finish) and what happens or is waited for. Three kinds of line: *essential*
(experiment, results folder, errors, verdict), *phase* (hypothesis, method, rollbacks) and
*detail* (each activity, set-up steps); ``quiet`` keeps essential and phase lines.

The state comes from the run's timeline (:meth:`Progress.observe` subscribes to it): the phase,
the activity in progress and since when, a head kill, the GCS, the nodes, each load's last
throughput. On a terminal that state is a live status line at the bottom, redrawn twice a second
(``[  52.3s] method · kill-head 8.1s: waiting for the head to come back · GCS DOWN 3.2s · …``);
in a CI log (stdout not a TTY) the same text is a plain line every 30 s — a 10-minute run should
not add hundreds of near-identical lines to a build log. Every line is redacted: progress ends
up in CI logs.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from raychaos.results.redact import redact_text
from raychaos.results.story import fmt_value, margin, probe_figure, slo_unit

__all__ = ["Progress", "Say", "Ticker", "verdict_table"]

PHASES = {"start": "setup", "experiment": "setup", "hypothesis": "hypothesis",
          "method": "method", "rollbacks": "rollbacks", "finish": "finish"}


class Say(Protocol):
    def __call__(self, message: str, essential: bool = False, phase: bool = False) -> None: ...


class Progress:
    """Timestamped progress lines and a live status line, as chatty as where they are read."""

    ci_every_s = 30.0  # a plain status line this often off a terminal
    redraw_every_s = 0.5  # the live status line on a terminal

    def __init__(self, quiet: bool = False, stream: Any = None, tty: bool | None = None):
        self.quiet = quiet
        self.stream = stream or sys.stdout
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.t0 = time.monotonic()
        self.phase = "setup"
        self.doing: str | None = None  # the last detail line: what is being done or waited for
        self.activity: tuple[str, str, float] | None = None  # (type, name, since)
        self.fault: str | None = None
        self.head_killed = False
        self.gcs_up: bool | None = None
        self.gcs_down_since: float | None = None
        self.nodes: tuple[Any, Any] | None = None
        self.loads: dict[str, float] = {}
        self._load_t: dict[str, float] = {}
        self._lock = threading.RLock()
        self._status_shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def tick_every_s(self) -> float | None:
        """The session's own monitor ticker is not needed: the status line says it all."""
        return None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # --- lines -----------------------------------------------------------------------------
    def __call__(self, message: str, essential: bool = False, phase: bool = False) -> None:
        text = redact_text(message)
        if not (essential or phase):
            self.doing = text.strip()
        if self.quiet and not (essential or phase):
            return
        self._write(f"[{self.elapsed():7.1f}s] {self.phase:<10} {text}")

    def _write(self, line: str) -> None:
        with self._lock:
            if self._status_shown:
                self.stream.write("\r\x1b[2K")
                self._status_shown = False
            self.stream.write(line + "\n")
            self.stream.flush()
            if self.tty and self._thread is not None:
                self._draw()

    # --- what the timeline says ------------------------------------------------------------
    def observe(self, record: dict[str, Any]) -> None:
        """Timeline listener: keep the state the status line shows (cheap; any thread)."""
        kind = record.get("kind")
        now = self.elapsed()
        if kind == "sample":
            up = bool(record.get("gcs_up"))
            was = self.gcs_up
            if up:
                if was is False and self.gcs_down_since is not None:
                    self._note(f"the GCS answers again (down {now - self.gcs_down_since:.1f}s)")
                self.gcs_down_since = None
                self.nodes = (record.get("nodes_alive"), record.get("nodes_total"))
            elif self.gcs_down_since is None:
                self.gcs_down_since = now
                if was:
                    self._note("the GCS stopped answering")
            self.gcs_up = up
        elif kind == "load":
            name, t = str(record.get("load")), float(record.get("t") or 0.0)
            dt = t - self._load_t.get(name, t - 1.0)
            self._load_t[name] = t
            if dt > 0:
                self.loads[name] = float(record.get("count") or 0) / dt
        elif kind == "event":
            self._event(str(record.get("event")), str(record.get("name")), now)

    def _event(self, event: str, name: str, now: float) -> None:
        if event == "phase" and name in PHASES:
            self.phase = PHASES[name]
            self.doing = None
        elif event == "activity_start":
            self.activity = ("", name, now)
            self.head_killed = False
        elif event == "activity_end":
            self.activity, self.fault = None, None
        elif event == "fault_start":
            self.fault = name
        elif event == "head_killed":
            self.head_killed = True
            self._note("head killed; waiting for it to come back")
        elif event in ("fault_applied", "fault_failed"):
            self.fault = None

    def _note(self, text: str) -> None:
        """A line for a moment the timeline shows (a kill, the GCS going and coming back)."""
        if not self.quiet:
            self._write(f"[{self.elapsed():7.1f}s] {self.phase:<10}     {text}")

    def waiting_for(self) -> str | None:
        """What the run is doing or waiting for right now, in words."""
        if self.activity is not None:
            _, name, since = self.activity
            what = name
            if self.fault and self.head_killed:
                what += (": waiting for the head to come back" if not self.gcs_up
                         else ": waiting for the head and its workers to be ready")
            elif self.fault:
                what += f": applying {self.fault}"
            return f"{what} ({self.elapsed() - since:.0f}s)"
        return self.doing

    def status(self) -> str:
        """The status line's text (without the time and phase prefix)."""
        parts = []
        doing = self.waiting_for()
        if doing:
            parts.append(doing)
        if self.gcs_up is not None:
            since = self.gcs_down_since if self.gcs_down_since is not None else self.elapsed()
            parts.append("GCS up" if self.gcs_up else f"GCS DOWN {self.elapsed() - since:.1f}s")
        if self.nodes and self.gcs_up:
            parts.append(f"nodes {self.nodes[0]}/{self.nodes[1]}")
        parts += [f"{name} {rate:.0f}/s" for name, rate in sorted(self.loads.items())]
        return " · ".join(parts) or "…"

    # --- the live line (terminal) or the periodic line (CI) --------------------------------
    def start(self) -> None:
        """Start the status line (terminal) or the periodic status lines (CI)."""
        if self._thread is None and (self.tty or not self.quiet):
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name="raychaos-status")
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2)
        with self._lock:
            if self._status_shown:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._status_shown = False

    def _loop(self) -> None:
        every = self.redraw_every_s if self.tty else self.ci_every_s
        while not self._stop.wait(every):
            with self._lock:
                if self.tty:
                    self._draw()
                else:
                    self._write(f"[{self.elapsed():7.1f}s] {self.phase:<10} "
                                f"{redact_text(self.status())}")

    def _draw(self) -> None:
        width = shutil.get_terminal_size((120, 20)).columns
        text = f"[{self.elapsed():7.1f}s] {self.phase} · {redact_text(self.status())}"
        if len(text) >= width:
            text = text[:max(width - 2, 10)] + "…"
        self.stream.write("\r\x1b[2K\x1b[7m" + text + "\x1b[0m")
        self.stream.flush()
        self._status_shown = True


class Ticker:
    """Every few seconds: a line from ``line`` (a thread until ``stop``)."""

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
    """Every check — the run, each probe (with its key figure), each SLO (value, bound,
    margin) — as a plain table; the verdicts are the checks' (:mod:`raychaos.results.checks`),
    the same JUnit and the pytest plugin show."""
    from raychaos.results.checks import checks_of

    probes = {p["name"]: p for p in summary.get("probes", [])}
    slos = {s["name"]: s for s in summary.get("slos", [])}
    rows = [("check", "window", "value", "bound", "margin", "verdict")]
    for c in checks_of(summary):
        if c["kind"] == "slo" and c["name"] in slos:
            s = slos[c["name"]]
            unit = slo_unit(s)
            rows.append((str(s["name"]), str(s["window"]), fmt_value(s["value"], unit),
                         f"{s['op']} {fmt_value(s['threshold'], unit)}", margin(s),
                         str(c["verdict"])))
        elif c["kind"] == "probe":
            p = probes.get(c["name"])
            rows.append((f"probe {c['name']}", "run", probe_figure(p) if p else "", "", "",
                         str(c["verdict"])))
        else:
            rows.append((str(c["name"]), "run", "", "", "", str(c["verdict"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
