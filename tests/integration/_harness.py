"""Drive ``raychaos run`` as a real subprocess and watch its results folder, as a user's CI would.

The moment to interrupt or crash the harness is picked from its own timeline (``phase``,
``fault_start``, ``fault_applied``, ``rollback_start`` events) and its write-ahead ledger — no
test hook inside the harness. Signals go to the subprocess by PID, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from raychaos.results.store import read_timeline
from tests._cli import run_gracefully

REPO = Path(__file__).resolve().parents[2]
SRC = str(REPO / "src")


def experiment(name: str, method: list[dict[str, Any]], *, loads: bool = False,
               extra: dict[str, Any] | None = None, top: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    block: dict[str, Any] = {
        "name": "raychaos", "target": {"kind": "local", "local": {"name": name}},
        "sentinel": False, "monitor": {"settle_s": 0, "recovery_window_s": 0}}
    if loads:
        block["loads"] = [{"name": "task_storm", "kind": "ray_job", "script": "loads/task_storm.py",
                           "args": ["--duration", "120", "--rate", "50"]}]
    block.update(extra or {})
    return {"title": "hd harness under faults",
            "description": "The harness itself under faults: signals, crashes, bad input.",
            **(top or {}),
            "controls": [{"name": "raychaos",
                          "provider": {"type": "python", "module": "raychaos.control"}}],
            "extensions": [block],
            "steady-state-hypothesis": {"title": "GCS answers", "probes": [
                {"type": "probe", "name": "gcs-healthy", "tolerance": True,
                 "provider": {"type": "python", "module": "raychaos.probes.gcs",
                              "func": "gcs_healthy"}}]},
            "method": method,
            "rollbacks": [{"type": "action", "name": "undo-all",
                           "provider": {"type": "python", "module": "raychaos.faults.rollback",
                                        "func": "undo_all"}}]}


def action(module: str, func: str, pause_after: float = 0, **arguments: Any) -> dict[str, Any]:
    act: dict[str, Any] = {"type": "action", "name": func,
                           "provider": {"type": "python", "module": f"raychaos.faults.{module}",
                                        "func": func, "arguments": arguments}}
    if pause_after:
        act["pauses"] = {"after": pause_after}
    return act


class HarnessRun:
    """One ``raychaos run`` subprocess and its results folder."""

    def __init__(self, tmp: Path, data: dict[str, Any], state_root: Path):
        self.exp = tmp / "exp.yaml"
        self.exp.write_text(yaml.safe_dump(data, sort_keys=False))
        self.results = tmp / "results"
        env = {**os.environ, "PYTHONPATH": SRC, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raychaos.cli", "run", str(self.exp), "--state-root",
             str(state_root), "--results", str(self.results), "--quiet"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = self.err = ""

    @property
    def run_dir(self) -> Path:
        dirs = [d for d in self.results.iterdir() if d.is_dir()] if self.results.exists() else []
        assert len(dirs) == 1, dirs
        return dirs[0]

    def timeline(self) -> list[dict[str, Any]]:
        try:
            return read_timeline(self.run_dir / "timeline.jsonl")
        except AssertionError:
            return []

    def ledger(self) -> dict[str, Any]:
        try:
            return json.loads((self.run_dir / "ledger.json").read_text())
        except (AssertionError, FileNotFoundError, ValueError):
            return {"faults": []}

    def wait_for(self, pred: Callable[[], Any], what: str, timeout: float = 240) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = pred()
            if value:
                return value
            if self.proc.poll() is not None:
                self.finish()
                raise AssertionError(f"harness exited ({self.proc.returncode}) before {what}:"
                                     f"\n{self.out[-2000:]}\n{self.err[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def wait_event(self, event: str, name: str = "", timeout: float = 240) -> dict[str, Any]:
        def seen() -> dict[str, Any] | None:
            return next((r for r in self.timeline() if r.get("kind") == "event"
                         and r.get("event") == event and (not name or r.get("name") == name)),
                        None)
        return self.wait_for(seen, f"event {event} {name}", timeout)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def finish(self, timeout: float = 400) -> int:
        out, err = self.proc.communicate(timeout=timeout)
        self.out += out or ""
        self.err += err or ""
        return self.proc.returncode

    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "summary.json").read_text())


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return run_gracefully([sys.executable, "-m", "raychaos.cli", *args], timeout=timeout,
                          cwd=REPO, env=env)


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
