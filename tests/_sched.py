"""How late this process's threads were woken: the independent observer a wall-clock bound in a
test needs.

A test that says "ask(0.1) returns within 0.1 s plus a little" judges the code only while the
process gets the CPU. In ``make test`` the unit lane runs at nice 19 beside real Ray clusters: a
thread there can wait seconds for a core (CI: an ask that honoured its 0.1 s deadline was seen
to take 3.1 s). :class:`SchedulerLag` runs a thread that sleeps ``step_s`` at a time and keeps
how late each wake-up was; :meth:`SchedulerLag.late` gives the lateness summed over a span
(about the time the process waited for a CPU then), which a bound adds to its allowance. A code
path that blocks for seconds while the process gets the CPU still fails: the observer wakes on
time, so the allowance stays small.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType


class SchedulerLag:
    """A daemon thread measuring its own wake-up lateness, as (woke_at, late_s) pairs."""

    def __init__(self, step_s: float = 0.005) -> None:
        self.step_s = step_s
        self._wakes: list[tuple[float, float, float]] = []  # (asked_at, woke_at, late_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-sched-lag", daemon=True)

    def __enter__(self) -> SchedulerLag:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            asked = time.monotonic()
            time.sleep(self.step_s)
            woke = time.monotonic()
            self._wakes.append((asked, woke, max(0.0, woke - asked - self.step_s)))

    def late(self, t0: float, t1: float) -> float:
        """The lateness of the observer's sleeps that overlapped [t0, t1], summed (waits for
        its next wake-up, so a sleep still pending at t1 is counted)."""
        deadline = time.monotonic() + 30.0  # wake-ups are appended in order: the last one tells
        while not (self._wakes and self._wakes[-1][1] >= t1) and time.monotonic() < deadline:
            time.sleep(self.step_s)
        return sum(late for asked, woke, late in list(self._wakes) if woke >= t0 and asked <= t1)
