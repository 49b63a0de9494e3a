"""Host noise: how much of this machine unrelated work took, once a second, so a slow host is
told apart from a slow cluster.

A chaos verdict must depend on the system under test, not on what else the box is doing: the
head-kill experiment passed on a quiet box and failed beside ``stress-ng`` on a healthy cluster,
because nothing measured the host. :class:`HostNoise` writes one ``host`` record per second:

- ``timer_lag_ms_p95`` / ``timer_lag_ms_max``: how late the sensor's 10 ms sleeps woke up (the
  harness's own ability to keep time);
- ``busy_cpus`` (everything in ``/proc/stat`` but idle and iowait, in cores), ``steal_pct``,
  ``run_queue`` (``procs_running``), ``psi_cpu_some_avg10``, ``ncpu``;
- ``own_cpus``: the harness process and its descendants, **except** descendants in a
  ``raychaos-`` cpu cgroup — the local target's pods are children of the harness, and their CPU
  is the system under test's, counted once in ``sut_cpus``;
- ``sut_cpus``: from the target's ``sut_cpu_seconds`` (None: unknown);
- ``nice_cpus``: work at a lower priority than the harness (nice above its own; ``/proc/stat``'s
  nice column): the scheduler gives it only what the system leaves idle (CFS weight 15 at nice
  19 against 1024), so it is reported and not counted as noise. A harness that itself runs
  niced counts it (its pods run niced too, and their time is in that column). A known limit:
  nice orders processes only inside one CPU group, and with ``sched_autogroup_enabled`` on a
  niced job in a session of its own sits in its autogroup, which competes at full weight with
  the SUT's groups (measured: a nice-19 loop beside two loops in a 1024 group took 99 % of a
  core). Such a job is counted here as yielding when it does not; work meant to yield must run
  in a low-weight CPU group as well (the test suite's light lane does: ``tests/_lanes.py``);
- ``foreign_cpus`` = max(0, busy − nice − own − sut), the noise that matters; with the SUT
  unknown it is without the − sut and ``sut_known`` is False.

A descendant that exits within a second loses its last second from ``own_cpus`` (it shows as
foreign): a short over-estimate of noise, never an under-estimate of the SUT.
:func:`window_noise` sums the records of a window up; :func:`noise_differs` and
:func:`noise_high` say in one sentence when a window's host noise makes a latency or
throughput judgement inconclusive.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from raychaos.results.store import Timeline
from raychaos.targets.local.cpu import in_cpu_group

__all__ = ["HostNoise", "NoiseBounds", "ProcStat", "noise_by_window", "noise_differs",
           "noise_high", "noise_louder", "parse_proc_stat", "window_noise"]


SUT_GROUP_PREFIX = "raychaos-"


@dataclass(frozen=True)
class ProcStat:
    """The figures of one read of ``/proc/stat`` (jiffies, cumulative)."""

    busy: int
    total: int
    steal: int
    ncpu: int
    procs_running: int | None
    nice: int = 0


def parse_proc_stat(text: str) -> ProcStat:
    """Busy (everything but idle and iowait), total and steal jiffies of the ``cpu`` line, the
    number of ``cpuN`` lines and ``procs_running``."""
    busy = total = steal = ncpu = nice = 0
    running: int | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            vals = [int(v) for v in parts[1:9]]  # user..steal; guest is inside user already
            vals += [0] * (8 - len(vals))
            total = sum(vals)
            busy = total - vals[3] - vals[4]
            steal, nice = vals[7], vals[1]
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            ncpu += 1
        elif parts[0] == "procs_running":
            running = int(parts[1])
    return ProcStat(busy, total, steal, max(ncpu, 1), running, nice)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _psi_some_avg10(text: str | None) -> float | None:
    for line in (text or "").splitlines():
        if line.startswith("some "):
            for item in line.split()[1:]:
                key, _, value = item.partition("=")
                if key == "avg10":
                    return float(value)
    return None


def _in_sut_group(pid: int) -> bool:
    """Is the process in a ``raychaos-`` cpu cgroup (v1 ``cpu`` line, or the v2 line)?"""
    return in_cpu_group(pid, SUT_GROUP_PREFIX)


class _OwnCpu:
    """Cumulative CPU seconds of the harness and its descendants outside the SUT's cgroups,
    counted per process so a process that goes never makes the sum go backwards."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.last: dict[tuple[int, float], float] = {}
        self.sut: set[tuple[int, float]] = set()  # once in a pod's group, always (cached)
        self.total = 0.0

    def _seconds(self, proc: psutil.Process) -> tuple[tuple[int, float], float] | None:
        try:
            key = (proc.pid, proc.create_time())
            if key in self.sut:
                return None
            if proc.pid != self.me.pid and _in_sut_group(proc.pid):
                self.sut.add(key)
                return None
            times = proc.cpu_times()
            return key, float(times.user + times.system)
        except psutil.Error:
            return None

    def read(self) -> float:
        try:
            procs = [self.me, *self.me.children(recursive=True)]
        except psutil.Error:
            procs = [self.me]
        now: dict[tuple[int, float], float] = {}
        for proc in procs:
            got = self._seconds(proc)
            if got is not None:
                now[got[0]] = got[1]
        for key, seconds in now.items():
            self.total += max(0.0, seconds - self.last.get(key, 0.0))
        self.last = now
        pids = {p.pid for p in procs}
        self.sut = {k for k in self.sut if k[0] in pids}  # forget the ones that are gone
        return self.total


class HostNoise:
    """The sensor: a daemon thread that writes one ``host`` record per ``interval_s``."""

    def __init__(self, timeline: Timeline,
                 sut_cpu_seconds: Callable[[], float | None] | None = None,
                 interval_s: float = 1.0, step_s: float = 0.01) -> None:
        self.timeline = timeline
        self.sut_cpu_seconds = sut_cpu_seconds or (lambda: None)
        self.interval_s = interval_s
        self.step_s = step_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own = _OwnCpu()
        self._nice = _own_nice()  # read once: the sensor thread raises its own priority
        self.cpu_seconds = 0.0  # what the sensor's thread itself spent
        self.records = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="raychaos-host-noise",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _sut(self) -> float | None:
        try:
            return self.sut_cpu_seconds()
        except Exception:  # noqa: BLE001 - an unreadable counter is an unknown SUT
            return None

    def _snapshot(self) -> tuple[float, ProcStat | None, float, float | None]:
        text = _read("/proc/stat")
        return (time.monotonic(), parse_proc_stat(text) if text else None, self._own.read(),
                self._sut())

    def _loop(self) -> None:
        from raychaos.observe.monitor import _raise_priority

        _raise_priority()
        prev = self._snapshot()
        while not self._stop.is_set():
            lags = self._sleep_interval()
            if self._stop.is_set():
                return
            cpu0 = time.thread_time()
            now = self._snapshot()
            try:
                self.timeline.write("host", **host_fields(prev, now, lags, self._nice))
                self.records += 1
            except Exception:  # noqa: BLE001, S110 - a closed timeline: the run is over
                pass
            prev = now
            self.cpu_seconds += time.thread_time() - cpu0

    def _sleep_interval(self) -> list[float]:
        """Sleep ``interval_s`` in ``step_s`` steps; how late each wake-up was, in ms."""
        lags: list[float] = []
        end = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            t0 = time.monotonic()
            if t0 >= end:
                break
            step = min(self.step_s, end - t0)
            self._stop.wait(step)
            lags.append(max(0.0, (time.monotonic() - t0 - step) * 1e3))
        return lags


def host_fields(prev: tuple[float, ProcStat | None, float, float | None],
                now: tuple[float, ProcStat | None, float, float | None],
                lags: list[float], harness_nice: int = 0) -> dict[str, Any]:
    """One ``host`` record from two snapshots (monotonic, /proc/stat, own s, SUT s);
    ``harness_nice``: the harness's own nice value (niced, the nice column is partly its own)."""
    dt = max(now[0] - prev[0], 1e-6)
    ps0, ps1 = prev[1], now[1]
    busy = steal = nice = None
    ncpu = ps1.ncpu if ps1 else os.cpu_count()
    if ps0 and ps1 and ps1.total > ps0.total:
        jiffies = ps1.total - ps0.total
        busy = ps1.ncpu * (ps1.busy - ps0.busy) / jiffies
        steal = 100.0 * (ps1.steal - ps0.steal) / jiffies
        nice = ps1.ncpu * max(0, ps1.nice - ps0.nice) / jiffies
    own = max(0.0, now[2] - prev[2]) / dt
    sut = (max(0.0, now[3] - prev[3]) / dt) if now[3] is not None and prev[3] is not None \
        else None
    yielding = (nice or 0.0) if harness_nice <= 0 else 0.0  # see the module docstring
    foreign = None if busy is None else max(0.0, busy - yielding - own - (sut or 0.0))
    arr = np.asarray(lags or [0.0])
    return {"timer_lag_ms_p95": round(float(np.percentile(arr, 95, method="higher")), 2),
            "timer_lag_ms_max": round(float(arr.max()), 2),
            "busy_cpus": _r(busy), "nice_cpus": _r(nice), "steal_pct": _r(steal),
            "own_cpus": _r(own),
            "sut_cpus": _r(sut), "foreign_cpus": _r(foreign), "sut_known": sut is not None,
            "run_queue": ps1.procs_running if ps1 else None,
            "psi_cpu_some_avg10": _psi_some_avg10(_read("/proc/pressure/cpu")), "ncpu": ncpu}


def _own_nice() -> int:
    """The harness process's nice value (its main thread's)."""
    try:
        return int(psutil.Process().nice())
    except psutil.Error:
        return 0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# --- windows ----------------------------------------------------------------------------------
def _values(recs: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in recs if isinstance(r.get(key), (int, float))
            and not isinstance(r.get(key), bool)]


def _mean(vs: list[float]) -> float | None:
    return round(float(np.mean(vs)), 3) if vs else None


def _p95(vs: list[float]) -> float | None:
    """95th percentile, method "higher": a value that was really seen, never interpolated."""
    return round(float(np.percentile(vs, 95, method="higher")), 3) if vs else None


def window_noise(records: list[dict[str, Any]], window: tuple[float, float]) -> dict[str, Any]:
    """The host noise of the ``host`` records with ``lo <= t < hi``."""
    lo, hi = window
    recs = [r for r in records if r.get("kind") == "host"
            and isinstance(r.get("t"), (int, float)) and lo <= float(r["t"]) < hi]
    if not recs:
        return {"samples": 0}
    maxima = _values(recs, "timer_lag_ms_max")
    return {"samples": len(recs),
            "foreign_cpus_mean": _mean(_values(recs, "foreign_cpus")),
            "foreign_cpus_p95": _p95(_values(recs, "foreign_cpus")),
            "busy_cpus_mean": _mean(_values(recs, "busy_cpus")),
            "nice_cpus_mean": _mean(_values(recs, "nice_cpus")),
            "timer_lag_ms_p95": _p95(_values(recs, "timer_lag_ms_p95")),
            "timer_lag_ms_max": round(max(maxima), 3) if maxima else None,
            "run_queue_mean": _mean(_values(recs, "run_queue")),
            "steal_pct_mean": _mean(_values(recs, "steal_pct")),
            "psi_cpu_some_mean": _mean(_values(recs, "psi_cpu_some_avg10")),
            "sut_known": all(r.get("sut_known") is True for r in recs)}


def noise_by_window(records: list[dict[str, Any]],
                    wins: dict[str, tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """:func:`window_noise` of each named window (summary.json ``host_noise``)."""
    return {name: window_noise(records, (float(w[0]), float(w[1]))) for name, w in wins.items()}


@dataclass(frozen=True)
class NoiseBounds:
    """How much host noise a window may see before a judgement of it is inconclusive."""

    foreign_cpus: float = 0.3  # cores of unrelated work
    timer_lag_ms: float = 250.0  # p95 of the sensor's wake-up lag (see HostNoiseSpec)
    min_samples: int = 3


def _unmeasured(noise: dict[str, Any], name: str, bounds: NoiseBounds) -> str | None:
    samples = int(noise.get("samples") or 0)
    if samples < bounds.min_samples:
        return f"host noise not measured in {name} ({samples} samples)"
    return None


def _louder(a: dict[str, Any], a_name: str, b: dict[str, Any], b_name: str,
            bounds: NoiseBounds, lead: str) -> str | None:
    """Why window ``a`` saw more noise than ``b`` by more than a bound, or None.

    More CPU taken by unrelated work counts only when ``a`` was at least as contended as ``b``
    (:func:`_contention`): a steady stressor takes whatever the system leaves idle, so when the
    system under test waits (a saturated link stalls its tasks) the stressor's share rises with
    nothing taken from the system. Seen beside ``stress-ng --cpu-load 50``: 0.81 CPUs to it in
    chaos vs 0.36 in baseline while the run queue fell from 23 to 6, CPU pressure from 82 % to
    72 % and the timer lag from 136 to 47 ms — a 21x slower storm called "host busy"."""
    fa, fb = a.get("foreign_cpus_mean"), b.get("foreign_cpus_mean")
    if fa is not None and fb is not None and fa - fb > bounds.foreign_cpus:
        ca, cb = _contention(a, b)
        if ca is None or cb is None or ca >= cb:
            return (f"{lead}: unrelated work took {fa:.2f} CPUs in {a_name} vs {fb:.2f} in "
                    f"{b_name}")
    la, lb = a.get("timer_lag_ms_p95"), b.get("timer_lag_ms_p95")
    if la is not None and lb is not None and la - lb > bounds.timer_lag_ms:
        return f"{lead}: timer lag p95 {la:.0f} ms in {a_name} vs {lb:.0f} ms in {b_name}"
    return None


def _contention(a: dict[str, Any], b: dict[str, Any]) -> tuple[float | None, float | None]:
    """How contended the CPU was in each window, by the same measure for both: the share of
    time some task waited for a CPU (``/proc/pressure/cpu``) where both have it, else the
    harness's timer lag."""
    if a.get("psi_cpu_some_mean") is not None and b.get("psi_cpu_some_mean") is not None:
        return a["psi_cpu_some_mean"], b["psi_cpu_some_mean"]
    return a.get("timer_lag_ms_p95"), b.get("timer_lag_ms_p95")


def noise_louder(base: dict[str, Any], judged: dict[str, Any], judged_name: str,
                 bounds: NoiseBounds = NoiseBounds()) -> str | None:
    """Why ``judged`` saw more host noise than the baseline by more than a bound, or None —
    one direction only: what makes a relative *miss* say nothing about the system."""
    return _louder(judged, judged_name, base, "baseline", bounds, "host busy")


def noise_differs(base: dict[str, Any], judged: dict[str, Any], judged_name: str,
                  bounds: NoiseBounds = NoiseBounds()) -> str | None:
    """Why a relative judgement of ``judged`` against the baseline is inconclusive: either
    window saw more host noise than the other by more than a bound, or too few samples."""
    return (_unmeasured(judged, judged_name, bounds) or _unmeasured(base, "baseline", bounds)
            or _louder(judged, judged_name, base, "baseline", bounds, "host busy")
            or _louder(base, "baseline", judged, judged_name, bounds, "host busy in baseline"))


def noise_high(judged: dict[str, Any], judged_name: str,
               bounds: NoiseBounds = NoiseBounds()) -> str | None:
    """Why an absolute judgement of ``judged`` is inconclusive: the window itself was noisy."""
    missing = _unmeasured(judged, judged_name, bounds)
    if missing:
        return missing
    foreign, lag = judged.get("foreign_cpus_mean"), judged.get("timer_lag_ms_p95")
    if foreign is not None and foreign > bounds.foreign_cpus:
        return (f"host busy: unrelated work took {foreign:.2f} CPUs in {judged_name} "
                f"(bound {bounds.foreign_cpus:.2f})")
    if lag is not None and lag > bounds.timer_lag_ms:
        return (f"host busy: timer lag p95 {lag:.0f} ms in {judged_name} "
                f"(bound {bounds.timer_lag_ms:.0f} ms)")
    return None
