"""The resource watch: GPU stranding and object-store placement, sampled onto the timeline.

The monitor (:mod:`raychaos.observe.monitor`) samples what every run needs; this watch samples,
in a thread of its own and only when an experiment asks for it, what the resource experiments
judge — so SLOs on them are read over windows like every other (a baseline in which the
working set fitted, a chaos window in which it did not):

- ``gpu`` records (:class:`~raychaos.observe.gpu.GpuSampler`, once a second);
- ``storage`` records (:class:`StorageSampler`, every other second): per node where Ray put the
  object store and ``shm_backed_ratio``, the share of observed stores in /dev/shm.

A sampler that fails writes a ``monitor_error`` event and is asked again next time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from raychaos.results.store import Clock, Ev, Timeline
from raychaos.targets.base import Target

__all__ = ["ResourceWatch", "StorageSampler", "resource_watch", "storage_metric"]

Sampler = Callable[[], dict[str, Any]]


class StorageSampler:
    """One ``storage`` record per call, from :meth:`Target.node_storage`."""

    kind = "storage"

    def __init__(self, target: Target):
        self.target = target

    def __call__(self) -> dict[str, Any]:
        facts = [f for f in self.target.node_storage() if f.get("observed")]
        nodes = {str(f["node"]): {k: f.get(k) for k in ("on_shm", "shm_mb", "object_store_mb",
                                                       "plasma_directory")} for f in facts}
        known = [n for n in nodes.values() if n["on_shm"] is not None]
        return {"nodes": nodes, "shm_backed_ratio": round(
            sum(bool(n["on_shm"]) for n in known) / len(known), 4) if known else None}


def storage_metric(records: list[dict[str, Any]], window: tuple[float, float]
                   ) -> tuple[float | None, dict[str, Any]]:
    """The lowest ``shm_backed_ratio`` seen in ``window``, and the nodes that were on disk."""
    lo, hi = window
    rows = [r for r in records if r.get("kind") == "storage" and lo <= r["t"] <= hi
            and r.get("shm_backed_ratio") is not None]
    if not rows:
        return None, {"samples": 0}
    worst = min(rows, key=lambda r: r["shm_backed_ratio"])
    on_disk = sorted(n for n, f in worst["nodes"].items() if f.get("on_shm") is False)
    return worst["shm_backed_ratio"], {"samples": len(rows), "on_disk": on_disk, "at": worst["t"]}


class ResourceWatch:
    """Runs each sampler every ``every_s[kind]`` seconds and writes what it returns."""

    def __init__(self, timeline: Timeline, clock: Clock,
                 samplers: list[tuple[Sampler, str, float]]):
        self.timeline, self.clock = timeline, clock
        self.samplers = samplers
        self.samples: dict[str, int] = {kind: 0 for _s, kind, _e in samplers}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ResourceWatch:
        self._thread = threading.Thread(target=self._loop, name="raychaos-resource-watch",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        due = dict.fromkeys(self.samples, 0.0)
        while not self._stop.is_set():
            now = time.monotonic()
            for sampler, kind, every in self.samplers:
                if now < due[kind]:
                    continue
                due[kind] = now + every
                try:
                    self.timeline.write(kind, **sampler())
                    self.samples[kind] += 1
                except Exception as exc:  # never let the watch die silently
                    self.timeline.event(Ev.MONITOR_ERROR, f"{kind}-watch", error=repr(exc))
            self._stop.wait(0.2)


def resource_watch(target: Target, timeline: Timeline, clock: Clock,
                   jobs: Callable[[], dict[str, str]], gpu: bool, storage: bool
                   ) -> ResourceWatch | None:
    """A started watch with the samplers asked for, or None when none is."""
    from raychaos.observe.gpu import GpuSampler

    samplers: list[tuple[Sampler, str, float]] = []
    if gpu:
        samplers.append((GpuSampler(target, jobs), "gpu", 1.0))
    if storage:
        samplers.append((StorageSampler(target), "storage", 2.0))
    return ResourceWatch(timeline, clock, samplers).start() if samplers else None
