"""The results folder of one run, and its three append-as-you-go files.

``results/<utc>-<slug>/``:

- ``timeline.jsonl`` — one JSON object per line, flushed as written. Every record has ``t``
  (seconds since the run started, monotonic) and ``ts`` (wall clock, epoch seconds) and ``kind``:
  ``sample`` (the monitor: ``gcs_up``, ``nodes_alive``, ``nodes_total``, ``gpus_total``,
  ``gpus_available``, ``alive_ids``, ``latency_ms`` — the round trip of the sample's GCS question —,
  object store and spill figures), ``jobs`` ({job id: status}), ``load`` (one stats line of a
  load, see ``loads/_stats.py``: ``load``, ``count``, ``failures``, ``p50_ms`` …), ``signals``
  (once a second: ``links`` {node: {``in_mbit``, ``out_mbit``}} over the last interval and
  ``health_check_failures``, the GCS's failed health checks so far; once, from the death
  watch, ``marked_dead_baseline`` {node: count}: each worker's lines of Ray's "mistakenly
  marked as dead" when the watch began, what ``false_node_deaths`` compares its own read with)
  or ``event`` (``event``,
  ``name``, ``detail``), where ``event`` is
  one of the :class:`Ev` names below — the harness's own — or what the operator did
  (``node_started``, ``node_exited``, ``node_ready``, ``node_stopped``, ``image_pulled``,
  written with the target's own names; on a RayJob/RayService target also ``rayjob_status``,
  ``rayservice_status`` and ``target_cluster_switched``, see ``targets/kubernetes/owner.py``).
- ``ledger.json`` — every fault, written *before* it acts and rewritten atomically on each
  change: ``{"run_id", "target": {...}, "faults": [{"id", "fault", "args", "state",
  "undo": {...}, "evidence": {...}, "error", times}]}``; ``state`` is pending, applied,
  undone, failed (did not land) or not_recovered (landed; the system did not come back).
- ``summary.json`` — the verdict: status, exit code, windows, probes, SLOs (name, metric,
  window, value, op, threshold, verdict, evidence), per-load per-window statistics
  (``loads``), the checks (``checks``: one per SLO and probe, plus ``run``), faults, the
  reasons of a failure (``failures``) and of an error (``errors``).
- ``journal.json`` — Chaos Toolkit's journal of the run.
- ``report.html``, ``junit.xml``, ``timeline.png``, ``openmetrics.txt`` — built from the above
  (:mod:`raychaos.results.report`, ``junit``, ``openmetrics``); ``harness.log`` — what the
  harness process's fd 2 received during the run (:mod:`raychaos.run.console`).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raychaos.results.redact import redact


class Ev:
    """The harness's timeline event names (``kind: event``, field ``event``).

    - ``phase``: the run entered a phase (``name``: start, experiment, hypothesis, method,
      rollbacks, finish);
    - ``baseline_start``: every load had reported its first completions (and the sentinel
      existed): the baseline window starts here, not at the first load record, whose second
      holds the requests queued while the load's workers started (a task storm's first 73
      tasks at p95 2.4 s against 50 ms after it);
    - ``activity_start`` / ``activity_end``: a Chaos Toolkit activity (``name``; ``detail``:
      type, and at the end status);
    - ``fault_start``: a fault's ledger record exists, before it acts (``detail``: id, args);
    - ``fault_applied``: it landed (``detail.lasting``: its effect lasts until rollback);
    - ``fault_failed``: it did not land (``detail.error``);
    - ``fault_end``: its effect is over — at ``fault_applied`` for a non-lasting fault (a kill),
      at its ``rollback_end`` for a lasting one (a throttle, a drain); windows are cut here;
    - ``head_killed``: the moment a head (or GCS) kill landed (``detail``: mode, the workers
      alive before it) — recovery figures are measured from here;
    - ``not_recovered``: a fault landed and the system did not recover within its bound
      (``detail.reason``); its ledger record's state is ``not_recovered`` — a failure;
    - ``rollback_start`` / ``rollback_end`` / ``rollback_failed``: one record's undo;
    - ``probe``: a probe recorded its verdict (``detail.verdict``);
    - ``abort``: an ``abort_if`` condition held (``name``: the reason);
    - ``monitor_error``: a sampler or poller call failed (``detail.error``); the run goes on;
    - ``lock_taken_over``: a stale run lock was taken over (``detail.holder``);
    - ``loads_stopped``: the harness began stopping the loads — load statistics end here, so
      the seconds after it are not counted as a stall;
    - ``loads_ended``: the loads were stopped and that was read back (``detail``: ``locust_s``,
      and per load job its ID, last status, stop requests sent and seconds until it was no
      longer PENDING/RUNNING — ``None``: left behind, a run error);
    - ``blackout_down`` / ``blackout_up``: one blackout cycle cut / gave back the network of the
      nodes in ``name`` (``detail``: the fault's id, the cycle number);
    - ``node_dead``: the GCS began to list a node DEAD (``name``: the node; ``detail``:
      ``node_id``, ``raylet_alive`` — True when its raylet process was still running, i.e. a
      false death; None when the target cannot tell);
    - ``recovery_window``: the recovery window ended (``name``: ``back at baseline`` or
      ``bound``; ``detail``: waited_s, bound_s, checks, late_checks — checks begun past the
      bound, at most one —, per-load seconds back).
    """

    PHASE = "phase"
    BASELINE_START = "baseline_start"
    ACTIVITY_START = "activity_start"
    ACTIVITY_END = "activity_end"
    FAULT_START = "fault_start"
    FAULT_APPLIED = "fault_applied"
    FAULT_FAILED = "fault_failed"
    FAULT_END = "fault_end"
    HEAD_KILLED = "head_killed"
    ROLLBACK_START = "rollback_start"
    ROLLBACK_END = "rollback_end"
    ROLLBACK_FAILED = "rollback_failed"
    PROBE = "probe"
    ABORT = "abort"
    MONITOR_ERROR = "monitor_error"
    LOCK_TAKEN_OVER = "lock_taken_over"
    BLACKOUT_DOWN = "blackout_down"
    BLACKOUT_UP = "blackout_up"
    NODE_DEAD = "node_dead"
    NOT_RECOVERED = "not_recovered"
    LOADS_STOPPED = "loads_stopped"
    LOADS_ENDED = "loads_ended"
    RECOVERY_WINDOW = "recovery_window"


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


def new_run_dir(root: str | Path, slug: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
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
    """Append-only JSON lines, flushed per record; thread safe. :meth:`wait` lets a reader
    (a probe waiting for recovery) wake up on the next record instead of sleeping blind."""

    def __init__(self, path: Path, clock: Clock):
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call ``listener(record)`` after every record written (progress, exporters); it must
        be quick, and what it raises is ignored: observers never break the timeline."""
        self._listeners.append(listener)

    def write(self, kind: str, t: float | None = None, **fields: Any) -> dict[str, Any]:
        t = self.clock.t() if t is None else t
        record = {"t": round(t, 4), "ts": round(self.clock.wall0 + t, 4), "kind": kind, **fields}
        line = json.dumps(redact(record), default=str)
        with self._lock:
            if not self._fh.closed:
                self._fh.write(line + "\n")
                self._fh.flush()
            self._written.notify_all()
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001, S110 - an observer must not break the run
                pass
        return record

    def wait(self, timeout: float) -> bool:
        """Block until the next record is written (True) or ``timeout`` passes (False)."""
        with self._lock:
            return self._written.wait(timeout)

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
        faults: list[dict[str, Any]] = self.data["faults"]
        return faults

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


# --- reading a results folder back ------------------------------------------------------
@dataclass
class RunView:
    """What a results folder holds, tolerant of missing and half-written files.

    ``summary`` is always a dict with the summary.json keys; when the file is missing or
    unreadable it is reconstructed from the ledger and timeline with ``status`` ``"incomplete"``
    and ``verdict`` ``"error"``, and ``notes`` say why.
    """

    run_dir: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    complete: bool
    notes: list[str] = field(default_factory=list)

    @property
    def events(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == "event"]


def _read_optional(path: Path, notes: list[str]) -> Any:
    if not path.exists():
        return None
    try:
        return read_json(path)
    except (OSError, ValueError) as exc:
        notes.append(f"{path.name} could not be read: {exc}")
        return None


def load_run(run_dir: str | Path) -> RunView:
    """Read a results folder (see :mod:`raychaos.results.store`) into a :class:`RunView`."""
    run = Path(run_dir)
    notes: list[str] = []
    timeline = run / "timeline.jsonl"
    records = read_timeline(timeline)
    if timeline.exists():
        with open(timeline, encoding="utf-8", errors="replace") as fh:
            lines = sum(1 for line in fh if line.strip())
        if lines > len(records):
            notes.append(f"{lines - len(records)} unreadable timeline line(s) skipped "
                         "(the run probably stopped mid-write)")
    else:
        notes.append("timeline.jsonl is missing")
    ledger = _read_optional(run / "ledger.json", notes) or {}
    summary = _read_optional(run / "summary.json", notes)
    complete = isinstance(summary, dict)
    if not complete:
        notes.insert(0, "summary.json is missing: the run did not finish (crashed or was "
                        "killed); what follows is reconstructed from the ledger and the timeline")
        ts = [r["ts"] for r in records if isinstance(r.get("ts"), (int, float))]
        summary = {
            "experiment": run.name, "slug": run.name, "run_id": ledger.get("run_id", run.name),
            "status": "incomplete", "verdict": "error", "exit_code": 2,
            "started_at": min(ts) if ts else None, "ended_at": max(ts) if ts else None,
            "duration_s": (max(ts) - min(ts)) if ts else None,
            "target": ledger.get("target", {}), "windows": phase_windows(records),
            "probes": [], "slos": [],
            "faults": ledger.get("faults", []), "errors": [],
        }
    assert isinstance(summary, dict)
    return RunView(run, summary, records, complete, notes)


def phase_windows(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Phase windows from ``phase`` events: each phase lasts until the next (or the last t)."""
    phases = sorted(((str(r.get("name")), float(r["t"])) for r in records
                     if r.get("kind") == "event" and r.get("event") == Ev.PHASE
                     and isinstance(r.get("t"), (int, float))), key=lambda p: p[1])
    if not phases:
        return {}
    last = max((float(r["t"]) for r in records if isinstance(r.get("t"), (int, float))),
               default=0.0)
    ends = [t for _, t in phases[1:]] + [last]
    return {name: [t, end] for (name, t), end in zip(phases, ends, strict=True)}
