"""The results folder of one run, and its three append-as-you-go files.

``results/<utc>-<slug>/``:

- ``timeline.jsonl`` — one JSON object per line, flushed as written. Every record has ``t``
  (seconds since the run started, monotonic) and ``ts`` (wall clock, epoch seconds) and ``kind``:
  ``sample`` (``gcs_up``, ``nodes_alive``, ``nodes_total``, ``gpus_total``, ``gpus_available``,
  ``jobs`` {id: status}), ``event`` (``event``: phase | fault_start | fault_applied | fault_end |
  rollback_start | rollback_end | probe | abort | activity_start, ``name``, ``detail``) or
  ``load`` (one stats
  line of a load, see ``loads/_stats.py``: ``load``, ``count``, ``failures``, ``p50_ms`` …).
- ``ledger.json`` — every fault, written *before* it acts and rewritten atomically on each
  change: ``{"run_id", "target": {...}, "faults": [{"id", "fault", "args", "state":
  pending|applied|undone|failed, "undo": {...}, "evidence": {...}, "error", times}]}``.
- ``summary.json`` — the verdict: status, exit code, windows, probes, SLOs (name, metric,
  window, value, op, threshold, verdict, evidence), faults, errors.
- ``journal.json`` — Chaos Toolkit's journal of the run.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from raychaos.redact import redact


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so a reader (or a crash) never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # every results file goes through here: credentials never reach the disk
            json.dump(redact(data), fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "experiment"


def new_run_dir(root: str | Path, slug: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(root) / f"{stamp}-{slug}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


class Clock:
    """One clock for the whole run: ``t`` is monotonic seconds since start."""

    def __init__(self) -> None:
        self.mono0 = time.monotonic()
        self.wall0 = time.time()

    def t(self) -> float:
        return time.monotonic() - self.mono0

    def wall(self) -> float:
        return self.wall0 + self.t()

    def t_of_wall(self, ts: float) -> float:
        return ts - self.wall0


class Timeline:
    """Append-only JSON lines, flushed per record; thread safe."""

    def __init__(self, path: Path, clock: Clock):
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, kind: str, t: float | None = None, **fields: Any) -> dict[str, Any]:
        t = self.clock.t() if t is None else t
        record = {"t": round(t, 4), "ts": round(self.clock.wall0 + t, 4), "kind": kind, **fields}
        line = json.dumps(redact(record), default=str)
        with self._lock:
            if not self._fh.closed:
                self._fh.write(line + "\n")
                self._fh.flush()
        return record

    def event(self, event: str, name: str = "", **detail: Any) -> dict[str, Any]:
        return self.write("event", event=event, name=name, detail=detail)

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_timeline(path: Path) -> list[dict[str, Any]]:
    """Every readable record; a torn last line (crash mid-write) is skipped."""
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return out


class LedgerRecord(dict):  # type: ignore[type-arg]
    """One fault's ledger entry that writes the whole ledger whenever a key is set.

    Targets fill ``record["undo"]`` step by step while they act; a SIGKILL between two steps must
    still leave on disk what the earlier steps changed, or ``raychaos rollback`` would undo nothing.
    """

    ledger: Ledger | None = None

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        checkpoint(self)


def checkpoint(record: dict[str, Any]) -> None:
    """Persist ``record`` now (write-ahead) when it belongs to a ledger; a no-op otherwise.

    Targets call it after noting in ``record["undo"]`` what they are about to change and before
    changing it, so the ledger on disk always covers what is applied.
    """
    ledger = getattr(record, "ledger", None)
    if ledger is not None:
        ledger.save()


class Ledger:
    """Faults applied by a run, persisted before each acts, so a crash can be rolled back."""

    def __init__(self, path: Path, run_id: str, target: dict[str, Any]):
        self.path = path
        self._lock = threading.RLock()
        if path.exists():
            self.data = read_json(path)
        else:
            self.data = {"run_id": run_id, "target": target, "faults": []}
            self.save()

    @classmethod
    def open_existing(cls, path: Path) -> Ledger:
        data = read_json(path)
        ledger = cls.__new__(cls)
        ledger.path = path
        ledger._lock = threading.RLock()
        ledger.data = data
        return ledger

    @property
    def faults(self) -> list[dict[str, Any]]:
        return self.data["faults"]

    def save(self) -> None:
        with self._lock:
            write_json_atomic(self.path, self.data)

    def begin(self, fault: str, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            record = LedgerRecord({
                "id": f"f{len(self.faults) + 1}",
                "fault": fault,
                "args": args,
                "state": "pending",
                "undo": {},
                "evidence": {},
                "error": None,
                "started_at": time.time(),
            })
            record.ledger = self
            self.faults.append(record)
            self.save()
            return record

    def update(self, record: dict[str, Any], **changes: Any) -> None:
        with self._lock:
            record.update(changes)
            self.save()

    def outstanding(self) -> list[dict[str, Any]]:
        """Records that may still have an effect on the cluster (newest first)."""
        return [r for r in reversed(self.faults) if r["state"] in ("pending", "applied", "failed")
                and not r.get("undone_at")]
