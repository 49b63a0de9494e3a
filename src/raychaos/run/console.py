"""Keep the terminal for raychaos: Ray's and other libraries' own log lines go to a file.

The harness process talks to Ray in-process (the GCS client, the Jobs SDK), and Ray writes to
file descriptor 2 from C++ (``rpc_client.h:153: Failed to connect to GCS``, on every sample
during a head outage) and from Python loggers (``dashboard_sdk.py:423 -- Package ... already
exists``). Interleaved with the progress lines they make the console unreadable. For the length
of a run, fd 2 points at ``harness.log`` in the results folder instead — which catches C++ and
Python writers alike, whenever their handlers were made — while raychaos's own lines go to
stdout. Locust runs as its own processes, which already write to ``locust-<load>.log*`` there;
``ray start`` writes to the nodes' logs in the cluster's state folder.

The few raychaos messages that belong on stderr while fd 2 is redirected (a second Ctrl-C
during the rollback) use :func:`terminal_stderr`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Any

from raychaos.results.store import Timeline
from raychaos.run.progress import Progress, Say

__all__ = ["HARNESS_LOG", "RunConsole", "open_console", "terminal_stderr"]

HARNESS_LOG = "harness.log"
_terminal: IO[str] | None = None


def terminal_stderr() -> IO[str]:
    """Where raychaos's own error lines go: the real stderr, even while fd 2 is redirected."""
    return _terminal if _terminal is not None else sys.stderr


class RunConsole:
    """fd 2 redirected into ``<run_dir>/harness.log``, and the progress fed by the timeline."""

    def __init__(self, log_path: Path, progress: Say | None = None):
        self.log_path = log_path
        self.progress = progress if isinstance(progress, Progress) else None
        self._saved: int | None = None

    def start(self) -> RunConsole:
        global _terminal
        if self._saved is not None:
            return self
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 at all (a daemon): nothing to redirect
            return self
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.dup2(fd, 2)
        finally:
            os.close(fd)
        self._saved = saved
        _terminal = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8",
                              errors="replace")
        if self.progress is not None:
            self.progress.start()
        return self

    def watch(self, timeline: Timeline) -> None:
        if self.progress is not None:
            timeline.subscribe(self.progress.observe)

    def close(self) -> None:
        """Stop the status line and give fd 2 back (idempotent)."""
        global _terminal
        if self.progress is not None:
            self.progress.stop()
        if self._saved is None:
            return
        for stream in (sys.stderr, _terminal):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = None
        if _terminal is not None:
            _terminal.close()
            _terminal = None

    def __enter__(self) -> RunConsole:
        return self.start()

    def __exit__(self, *_exc: Any) -> None:
        self.close()


def open_console(run_dir: Path, timeline: Timeline, progress: Say | None) -> RunConsole:
    """Redirect fd 2 into the run's ``harness.log`` and let ``progress`` follow the timeline."""
    console = RunConsole(run_dir / HARNESS_LOG, progress).start()
    console.watch(timeline)
    return console
