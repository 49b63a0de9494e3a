"""Run a Locust load as a separate, time-capped process group and read its stats lines.

Why a subprocess: Locust monkey-patches the standard library with gevent at import time, which
breaks a process that imports Ray (or just ``ssl``) first -- a ``RecursionError`` or a hang. So
this module never imports ``locust``; it builds a ``locust --headless ...`` command line, starts
it (plus ``--worker`` processes when ``workers > 0``) in a process group of its own, and reads
the ``RAYCHAOS_STATS`` lines that the ``loads/_locust_stats.py`` plugin prints to the master's
stdout, which goes to ``stats_path``. ``stop()`` always ends the whole group (SIGTERM, then
SIGKILL), and the ``-t`` cap ends the run by itself even if nobody calls it.

    with LocustProcess("loads/serve_users.py", "http://127.0.0.1:8000", users=10,
                       spawn_rate=5, duration_s=30) as load:
        time.sleep(5)
        print(load.poll_stats())
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from raychaos.catalog import loads_dir, stats_format

__all__ = ["LOADS_DIR", "LocustProcess", "locust_command", "stats_format"]

#: The shipped ``loads/`` folder (locustfiles, the plugin, ``_stats.py``).
LOADS_DIR = loads_dir()
PLUGIN = LOADS_DIR / "_locust_stats.py"
START_GRACE_S = 30.0  # process start + worker connection, on top of the -t cap
# The load generator must not starve the cluster it measures when both share one machine.
NICE = ["nice", "-n", "10"] if shutil.which("nice") else []


def locust_command() -> list[str]:
    """The ``locust`` CLI next to this interpreter, else ``python -m locust``."""
    beside = Path(sys.executable).parent / "locust"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("locust")
    return [found] if found else [sys.executable, "-m", "locust"]


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocustProcess:
    """One headless Locust run (standalone, or a master with ``workers`` worker processes)."""

    def __init__(
        self,
        locustfile: str | os.PathLike[str],
        host: str,
        users: int,
        spawn_rate: float,
        duration_s: float,
        workers: int = 0,
        stats_path: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        bind_host: str = "127.0.0.1",
        plugin: str | os.PathLike[str] | None = PLUGIN,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ):
        """
        :param locustfile: path of the locustfile (User classes).
        :param host: base URL the users hit (``--host``).
        :param users: peak number of users (``-u``); spawn_rate: users started per second (``-r``).
        :param duration_s: run-time cap (``-t``); Locust stops by itself after it.
        :param workers: 0 for one standalone process, else a master plus this many workers.
        :param stats_path: file the master's stdout (the stats lines) goes to; a temp file if None.
        :param name: load name in the stats lines; default ``locust:<locustfile stem>``.
        :param bind_host: where the master listens for its workers.
        :param plugin: the stats plugin passed with ``-f``; None runs the locustfile bare.
        :param extra_args: more CLI arguments for every process.
        :param env: extra environment variables for every process.
        """
        self.locustfile = Path(locustfile).resolve()
        self.host = host
        self.users = int(users)
        self.spawn_rate = spawn_rate
        self.duration_s = float(duration_s)
        self.workers = int(workers)
        if stats_path is None:
            fd, stats_path = tempfile.mkstemp(prefix="raychaos-locust-", suffix=".stats")
            os.close(fd)
        self.stats_path = Path(stats_path)
        self.name = name or f"locust:{self.locustfile.stem}"
        self.bind_host = bind_host
        self.plugin = Path(plugin).resolve() if plugin else None
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self._procs: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[bytes]] = []
        self._offset = 0
        self._partial = b""
        self._parse = stats_format().parse_line
        self._started_at: float | None = None

    # -- command lines ----------------------------------------------------------------------
    def _files_arg(self) -> str:
        files = [str(self.plugin)] if self.plugin else []
        return ",".join([*files, str(self.locustfile)])

    def master_args(self, master_port: int | None = None) -> list[str]:
        """The command line of the standalone/master process."""
        args = [
            *locust_command(), "--headless", "-f", self._files_arg(), "--host", self.host,
            "-u", str(self.users), "-r", str(self.spawn_rate),
            "-t", f"{max(1, math.ceil(self.duration_s))}s", "--only-summary",
        ]
        if self.workers > 0:
            args += [
                "--master", "--master-bind-host", self.bind_host,
                "--master-bind-port", str(master_port), "--expect-workers", str(self.workers),
                "--expect-workers-max-wait", str(int(START_GRACE_S)),
            ]
        return [*args, *self.extra_args]

    def worker_args(self, master_port: int) -> list[str]:
        """The command line of one worker process."""
        return [
            *locust_command(), "--worker", "-f", self._files_arg(),
            "--master-host", self.bind_host, "--master-port", str(master_port),
            *self.extra_args,
        ]

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> LocustProcess:
        """Start the master (or standalone) process, then the workers, in one process group."""
        if self._procs:
            raise RuntimeError(f"{self.name}: already started")
        env = {**os.environ, **self.env, "RAYCHAOS_LOAD_NAME": self.name, "PYTHONUNBUFFERED": "1"}
        port = _free_port(self.bind_host) if self.workers > 0 else None
        out = open(self.stats_path, "ab")  # noqa: SIM115 - closed in stop()
        err = open(self.log_path, "ab")  # noqa: SIM115
        self._files += [out, err]
        self._offset = self.stats_path.stat().st_size
        master = subprocess.Popen(
            [*NICE, *self.master_args(port)], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
            env=env, cwd=self.locustfile.parent, process_group=0,
        )
        self._procs.append(master)
        atexit.register(self.stop)
        self._started_at = time.monotonic()
        try:
            for i in range(self.workers):
                log = open(f"{self.stats_path}.worker{i}.log", "ab")  # noqa: SIM115
                self._files.append(log)
                self._procs.append(subprocess.Popen(
                    [*NICE, *self.worker_args(port or 0)], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=env, cwd=self.locustfile.parent,
                    process_group=master.pid,
                ))
        except Exception:
            self.stop()
            raise
        return self

    @property
    def log_path(self) -> Path:
        """The master's stderr (Locust's own log and summary): read it when no stats arrive."""
        return Path(f"{self.stats_path}.log")

    @property
    def pids(self) -> list[int]:
        """PIDs of every process started (master first)."""
        return [p.pid for p in self._procs]

    @property
    def returncode(self) -> int | None:
        """The master's exit code (Locust exits 1 when any request failed), None while running."""
        return self._procs[0].poll() if self._procs else None

    def running(self) -> bool:
        return any(p.poll() is None for p in self._procs)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the run to end by itself (default: the -t cap plus a grace), then stop()."""
        if not self._procs:
            return None
        if timeout is None:
            timeout = self.duration_s + START_GRACE_S
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.stop()
        return self.returncode

    def stop(self, grace_s: float = 10.0) -> None:
        """End the whole process group: SIGTERM (Locust flushes its last stats), then SIGKILL."""
        atexit.unregister(self.stop)
        if self._procs:
            pgid = self._procs[0].pid
            self._signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._signal_group(pgid, signal.SIGKILL)
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        for f in self._files:
            f.close()
        self._files = []

    def _signal_group(self, pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            for proc in self._procs:  # the group may be gone while a straggler is not
                if proc.poll() is None:
                    proc.send_signal(sig)

    # -- stats ------------------------------------------------------------------------------
    def poll_stats(self) -> list[dict[str, Any]]:
        """Stats dicts printed since the last call (complete lines only)."""
        try:
            with open(self.stats_path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        raw_lines = data.split(b"\n")
        self._partial = raw_lines.pop()
        lines = [raw.decode("utf-8", errors="replace") for raw in raw_lines]
        return [d for d in map(self._parse, lines) if d is not None]

    def __enter__(self) -> LocustProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
