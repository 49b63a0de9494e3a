"""GPU capacity that is reserved but idle, or free but unusable — sampled onto the timeline.

Ray schedules GPUs as logical numbers; nothing reads the kernel. Two ways capacity strands:

- **reserved but idle**: a task or actor holds its GPUs while it waits — Ray's own report of
  the task says so: ``RUNNING_IN_RAY_GET`` / ``RUNNING_IN_RAY_WAIT`` (a task blocked on its
  inputs, e.g. restoring them from spill, keeps its GPU; only its CPU is released), or a GPU
  actor with no method running;
- **free but unusable**: GPU demand is pending (``PENDING_NODE_ASSIGNMENT``) while capacity is
  free on the nodes it may use — the free pieces are too small for the request (``num_gpus=0.6``
  tasks on 1-GPU cards leave 0.4 of every card that nothing of theirs fits into).

:class:`GpuWatch` reads the task and actor tables (the state API, through the dashboard every
target has, nodes included: one consistent snapshot) once a second and writes ``kind: "gpu"``
records: cluster totals and, per load (its Ray job), GPUs ``held``, ``idle_held``, ``pending``
demand, the ``capacity`` of the nodes it may use and how much of that is ``stranded``.
:func:`gpu_metrics` turns a window of them into the SLO figures.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from raychaos.results.store import Clock, Ev, Timeline
from raychaos.targets.base import Target

__all__ = ["GpuWatch", "gpu_metrics", "stranding"]

RUNNING = {"RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT", "SUBMITTED_TO_WORKER"}
WAITING = {"RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT"}
PENDING = {"PENDING_NODE_ASSIGNMENT"}


def _gpu(resources: dict[str, Any] | None) -> float:
    return float((resources or {}).get("GPU") or 0.0)


def _eligible(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a task's label selector admits a node (plain values, ``!value``, ``in(a,b)``)."""
    for key, want in (selector or {}).items():
        have, want = labels.get(str(key)), str(want)
        if want.startswith("!"):
            if have == want[1:]:
                return False
        elif want.startswith("in(") and want.endswith(")"):
            if have not in [w.strip() for w in want[3:-1].split(",")]:
                return False
        elif have != want:
            return False
    return True


def stranding(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]],
              actors: list[dict[str, Any]], job_loads: dict[str, str]) -> dict[str, Any]:
    """One ``gpu`` record from the state API's node, task and actor tables (pure).

    Free capacity is each node's GPUs minus what its running tasks and actors hold, from the
    same snapshot, so a task that just finished is not counted free and busy at once."""
    alive = {str(n["node_id"]): n for n in nodes if n.get("state") == "ALIVE"
             and _gpu(n.get("resources_total"))}
    total = {nid: _gpu(n.get("resources_total")) for nid, n in alive.items()}
    used = dict.fromkeys(total, 0.0)
    loads: dict[str, dict[str, Any]] = {}

    def entry(job: str) -> dict[str, Any] | None:
        name = job_loads.get(job)
        if name is None:
            return None
        return loads.setdefault(name, {"held": 0.0, "idle_held": 0.0, "pending": 0.0,
                                       "pending_tasks": 0, "min_request": None,
                                       "nodes": set()})

    busy_actors = {t.get("actor_id") for t in tasks
                   if t.get("actor_id") and t.get("state") == "RUNNING"}
    holders = [(t, t.get("state") in WAITING) for t in tasks if t.get("state") in RUNNING]
    holders += [(a, a.get("actor_id") not in busy_actors) for a in actors
                if a.get("state") == "ALIVE"]
    for obj, waiting in holders:
        gpu, node = _gpu(obj.get("required_resources")), str(obj.get("node_id") or "")
        if not gpu:
            continue
        if node in used:
            used[node] += gpu
        e = entry(str(obj.get("job_id")))
        if e is not None:
            e["held"] += gpu
            e["idle_held"] += gpu if waiting else 0.0
            if node in total:
                e["nodes"].add(node)
    for t in tasks:
        gpu, e = _gpu(t.get("required_resources")), entry(str(t.get("job_id")))
        if gpu and e is not None and t.get("state") in PENDING:
            e["pending"] += gpu
            e["pending_tasks"] += 1
            e["min_request"] = min(gpu, e["min_request"] or gpu)
            e["nodes"] |= {nid for nid, n in alive.items()
                           if _eligible(t.get("label_selector"), n.get("labels") or {})}
    free = {nid: max(0.0, total[nid] - used[nid]) for nid in total}
    out_loads = {}
    for name, e in loads.items():
        nodes_of = e.pop("nodes")
        free_there = sum(free[n] for n in nodes_of)
        unusable = free_there if e["pending"] else 0.0
        out_loads[name] = {**{k: round(v, 4) if isinstance(v, float) else v
                              for k, v in e.items()},
                           "capacity": round(sum(total[n] for n in nodes_of), 4),
                           "free": round(free_there, 4),
                           "stranded": round(e["idle_held"] + unusable, 4),
                           "fragmented": bool(unusable > 1e-6)}
    return {"gpus_total": round(sum(total.values()), 4),
            "gpus_free": round(sum(free.values()), 4),
            "idle_held": round(sum(v["idle_held"] for v in out_loads.values()), 4),
            "stranded": round(sum(v["stranded"] for v in out_loads.values()), 4),
            "loads": out_loads}


def gpu_metrics(records: list[dict[str, Any]], window: tuple[float, float],
                load: str | None = None) -> dict[str, Any]:
    """Over ``window``: the fraction of GPU-seconds stranded, of held GPU-seconds spent
    waiting, and the seconds demand was pending while capacity sat free (per load, or all)."""
    lo, hi = window
    rows = [r for r in records if r.get("kind") == "gpu" and lo <= r["t"] < hi]
    stranded = capacity = idle = held = 0.0
    pending_s = 0.0
    previous: float | None = None
    for r in rows:
        dt = min(2.0, r["t"] - previous) if previous is not None else 1.0
        previous = r["t"]
        parts = [r["loads"][load]] if load and load in r.get("loads", {}) else (
            [] if load else list(r.get("loads", {}).values()))
        if load is None:
            capacity += dt * float(r.get("gpus_total") or 0.0)
        for p in parts:
            stranded += dt * p["stranded"]
            idle += dt * p["idle_held"]
            held += dt * p["held"]
            if load is not None:
                capacity += dt * p["capacity"]
        if any(p.get("fragmented") for p in parts):
            pending_s += dt
    return {"samples": len(rows),
            "gpu_stranded_capacity_frac": round(stranded / capacity, 4) if capacity else None,
            "gpu_task_idle_frac": round(idle / held, 4) if held else None,
            "gpu_pending_demand_s": round(pending_s, 2) if rows else None,
            "gpu_seconds": round(capacity, 2)}


class GpuWatch:
    """Samples GPU stranding once a second into ``kind: gpu`` timeline records."""

    def __init__(self, target: Target, timeline: Timeline, clock: Clock,
                 jobs: Callable[[], dict[str, str]], interval_s: float = 1.0):
        self.target, self.timeline, self.clock = target, timeline, clock
        self.jobs, self.interval_s = jobs, interval_s
        self._job_ids: dict[str, str] = {}  # submission id -> Ray job id (hex)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0

    def start(self) -> GpuWatch:
        self._thread = threading.Thread(target=self._loop, name="raychaos-gpu-watch",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _get(self, path: str, timeout: float = 3.0) -> Any:
        url = self.target.dashboard_url() + path
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - our dashboard
            return json.loads(resp.read())

    def _state(self, kind: str, states: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for state in states:
            query = urllib.parse.urlencode({"detail": 1, "limit": 10000, "filter_keys": "state",
                                            "filter_predicates": "=", "filter_values": state})
            data = self._get(f"/api/v0/{kind}?{query}")
            out += (data.get("data") or {}).get("result", {}).get("result", [])
        return out

    def _job_loads(self) -> dict[str, str]:
        out = {}
        for name, submission in self.jobs().items():
            if submission not in self._job_ids:
                job_id = self._get(f"/api/jobs/{urllib.parse.quote(submission)}").get("job_id")
                if job_id:
                    self._job_ids[submission] = str(job_id)
            if submission in self._job_ids:
                out[self._job_ids[submission]] = name
        return out

    def sample_once(self) -> dict[str, Any]:
        job_loads = self._job_loads()
        tasks = self._state("tasks", ["RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT",
                                      "PENDING_NODE_ASSIGNMENT"])
        actors = self._state("actors", ["ALIVE"])
        nodes = self._state("nodes", ["ALIVE"])
        record = stranding(nodes, tasks, actors, job_loads)
        return self.timeline.write("gpu", **record)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
                self.samples += 1
            except Exception as exc:  # the watch must not die silently, nor stop the run
                self.timeline.event(Ev.MONITOR_ERROR, "gpu-watch", error=repr(exc))
            self._stop.wait(self.interval_s)
