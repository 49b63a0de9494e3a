"""One run at a time per target: two experiments on one cluster would judge each other's faults.

Locally the lock is a file in the cluster's state folder holding who took it (PID, host, run
id, since when). It is created with ``O_EXCL``, so two runs starting at once cannot both win. A
lock whose PID is dead on this host is stale — a crashed or SIGKILLed run — and is taken over;
anything else refuses the second run with :class:`TargetBusy` naming the holder.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from raychaos.errors import TargetBusy

__all__ = ["FileLock", "dead_here", "holder_text", "pid_alive"]


def holder_text(holder: dict[str, Any]) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(holder.get("since", 0)))
    return (f"run {holder.get('run_id')!r} (PID {holder.get('pid')} on {holder.get('host')}, "
            f"since {since})")


def dead_here(holder: dict[str, Any]) -> bool:
    """The holder (``host``, ``pid``) ran on this host and its process is gone; a holder of
    another host cannot be told from here (the user decides, or an expiry does)."""
    pid = holder.get("pid")
    return holder.get("host") == socket.gethostname() and isinstance(pid, int) \
        and not pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; another user's process does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:  # a zombie is dead for our purposes
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class FileLock:
    """``acquire`` or raise TargetBusy; ``release`` only removes a lock this process holds."""

    def __init__(self, path: Path, what: str):
        self.path = Path(path)
        self.what = what
        self.held = False
        self.taken_over: dict[str, Any] | None = None

    def read(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
            return data
        except FileNotFoundError:
            return None
        except ValueError:  # torn by a crash mid-write: nobody can hold a lock they cannot name
            return {"pid": None}

    def acquire(self, run_id: str) -> None:
        if self.held:  # taken already (the local target takes it to restore a warm cluster)
            return
        me = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id,
              "since": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _attempt in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError as exc:
                holder = self.read() or {}
                if self._stale(holder):
                    self.taken_over = holder
                    try:
                        self.path.unlink()
                    except FileNotFoundError:
                        pass
                    continue
                raise TargetBusy(f"{self.what} is in use by {holder_text(holder)}; wait for it "
                                 f"to finish (or, if that process is gone, remove {self.path})"
                                 ) from exc
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(me, fh)
            self.held = True
            return
        raise TargetBusy(f"{self.what}: could not take the lock {self.path}")

    def _stale(self, holder: dict[str, Any]) -> bool:
        return not isinstance(holder.get("pid"), int) or dead_here(holder)

    def clear_stale(self, run_id: str) -> bool:
        """Remove the lock a crashed run ``run_id`` left (its PID dead); True when removed."""
        holder = self.read()
        if holder and holder.get("run_id") == run_id and self._stale(holder):
            self.path.unlink(missing_ok=True)
            return True
        return False

    def release(self) -> None:
        if not self.held:
            return
        holder = self.read() or {}
        if holder.get("pid") == os.getpid():
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        self.held = False
