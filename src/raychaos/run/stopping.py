"""How a run stops early (SIGINT, SIGTERM, an ``abort_if`` condition) without losing the rollback.

Why not simply raise an exception from the signal handler: Chaos Toolkit wraps every
``Exception`` raised inside an activity into ``ActivityFailed`` and goes on with the next
activity, so an ``Interrupted`` raised while a fault was applying was recorded as a failed
activity and the method kept running (and chaoslib's own SIGTERM handler raises
``InterruptExecution``, wrapped the same way). :class:`StopRequested` is a ``KeyboardInterrupt``:
chaoslib lets it through activities, marks the journal ``interrupted`` and still plays the
rollbacks; the runner then maps the recorded reason to ``interrupted`` or ``aborted``.

The first signal arms a second handler at once: a second Ctrl-C never interrupts the rollback,
it prints what is still applied and how to undo it if the user insists (SIGKILL).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from raychaos.errors import Aborted, Interrupted, RaychaosError
from raychaos.run.console import terminal_stderr

__all__ = ["StopRequested", "StopSwitch"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
ABORT_SIGNAL = signal.SIGUSR1  # the abort watcher sends it to the main thread: wakes any sleep


class StopRequested(KeyboardInterrupt):
    """Raised in the main thread by the first stop request; passes through Chaos Toolkit."""


class StopSwitch:
    """Owns SIGINT/SIGTERM/SIGUSR1 for one run and remembers why it stopped."""

    def __init__(self, still_applied: Callable[[], str]):
        self.still_applied = still_applied
        self.error: RaychaosError | None = None
        self._old: dict[int, Any] = {}
        self._lock = threading.Lock()

    @property
    def status(self) -> str | None:
        if isinstance(self.error, Aborted):
            return "aborted"
        return "interrupted" if self.error else None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only; its owner stops the run
        for sig in (*SIGNALS, ABORT_SIGNAL):
            self._old.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, self._handle if self.error is None else self._again)

    def restore(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def rolling_back(self) -> None:
        """From here on signals only report: nothing may cut the rollback short."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (*SIGNALS, ABORT_SIGNAL):
            signal.signal(sig, self._again)

    def abort(self, reason: str) -> None:
        """Called from a watcher thread: record why, then wake the main thread with a signal."""
        with self._lock:
            if self.error is not None:
                return
            self.error = Aborted(reason)
        # to the main thread itself: only there does a signal cut a sleep or a wait short
        signal.pthread_kill(threading.main_thread().ident or 0, ABORT_SIGNAL)

    def _handle(self, signum: int, _frame: Any) -> None:
        with self._lock:
            if self.error is None and signum != ABORT_SIGNAL:
                self.error = Interrupted(signal.Signals(signum).name)
        self.rolling_back()
        raise StopRequested(str(self.error))

    def _again(self, signum: int, _frame: Any) -> None:
        if signum == ABORT_SIGNAL:
            return
        with self._lock:
            first = self.error is None
            if first:  # the first stop request, while rollbacks run: remember it, go on
                self.error = Interrupted(signal.Signals(signum).name)
        print(f"\n{signal.Signals(signum).name}{'' if first else ' again'}: still rolling back "
              f"({self.still_applied() or 'nothing left applied'}); if you stop now "
              "(SIGKILL), run `raychaos rollback` on the results folder", file=terminal_stderr(),
              flush=True)
