"""GPU capacity that is reserved but idle, or free but unusable — sampled onto the timeline.

Ray schedules GPUs as logical numbers; nothing reads the kernel. Two ways capacity strands:

- **reserved but idle**: a task or actor holds its GPUs while it waits — a task blocked on its
  inputs (restoring them from spill, say) keeps its GPU; only its CPU is released. Ray's task
  table can say so (``RUNNING_IN_RAY_GET``/``RUNNING_IN_RAY_WAIT``, though Ray 2.60 reports a
  blocked task as plain ``RUNNING``), a GPU actor with no method running is idle, and the
  loads' own tasks report it (``gpu_stranded_frac`` in their stats lines);
- **free but unusable**: GPU demand is pending (``PENDING_NODE_ASSIGNMENT``) while capacity is
  free on the nodes it may use and the free pieces are too small for the request (``num_gpus=0.6``
  tasks on 1-GPU cards leave 0.4 of every card that nothing of theirs fits into). Free pieces
  big enough for the pending request are the scheduler's lag, not stranding (``_too_small``).

:class:`GpuSampler` reads the task and actor tables (the state API, through the dashboard every
target has, nodes included: one consistent snapshot) once a second and writes ``kind: "gpu"``
records: cluster totals and, per load (its Ray job), GPUs ``held``, ``idle_held``, ``pending``
demand, the ``capacity`` of the nodes it may use and how much of that is ``stranded``.
:func:`gpu_metrics` turns a window of them into the SLO figures.
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from raychaos.targets.base import Target

__all__ = ["GpuSampler", "gpu_metrics", "stranding"]

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


def _too_small(free: float, total: float, allocated: float, request: float | None) -> float:
    """Of a node's ``free`` GPUs, the part a pending ``request`` cannot use: its pieces are
    too small. A fractional request must fit on one card (``num_gpus=0.6``: one per card, 0.4
    of each left over); the node's cards are taken to hold ``allocated`` in pieces of the
    request's size (exact when one load's tasks share a node, as they do). Free capacity big
    enough for the request while it pends is the scheduler's lag (a task finished, the next
    not yet placed, a worker still starting), not stranded capacity."""
    if not request or free <= 1e-6:
        return 0.0
    if request >= 1:
        slots = math.floor(free / request + 1e-6)  # whole cards, any of the free ones
    else:
        per_card = math.floor(1 / request + 1e-6)
        held = round(allocated / request)
        slots = min(math.floor(free / request + 1e-6),
                    max(0, int(total) * per_card - held))
    return max(0.0, free - slots * request)


def stranding(nodes: list[dict[str, Any]], tasks: list[dict[str, Any]],
              actors: list[dict[str, Any]], job_loads: dict[str, str],
              free_gpus: dict[str, float] | None = None) -> dict[str, Any]:
    """One ``gpu`` record from the state API's node, task and actor tables (pure).

    Free capacity is ``free_gpus`` (node id -> GPUs the raylet has not allocated, when the
    target reports it: it knows a lease granted to a worker still starting) or else each
    node's GPUs minus what its running tasks and actors hold in the same snapshot."""
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
    free = {nid: max(0.0, (free_gpus or {}).get(nid, total[nid] - used[nid])) for nid in total}
    out_loads = {}
    for name, e in loads.items():
        nodes_of = e.pop("nodes")
        free_there = sum(free[n] for n in nodes_of)
        unusable = (sum(_too_small(free[n], total[n], total[n] - free[n], e["min_request"])
                        for n in nodes_of) if e["pending"] else 0.0)
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


def _self_reported(records: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """(load, second) -> the share of held GPU time its tasks reported waiting
    (``gpu_stranded_frac`` in a load's stats line covers the second ending at its ``t``)."""
    return {(str(r.get("load")), math.ceil(r["t"])): float(r["gpu_stranded_frac"])
            for r in records if r.get("kind") == "load"
            and r.get("gpu_stranded_frac") is not None}


def gpu_metrics(records: list[dict[str, Any]], window: tuple[float, float],
                load: str | None = None) -> dict[str, Any]:
    """Over ``window``: the fraction of GPU-seconds stranded, of held GPU-seconds spent
    waiting, and the seconds demand was pending while capacity sat free (per load, or all),
    from the load's first stats line to its last.

    Waiting is what Ray reports (``RUNNING_IN_RAY_GET``; Ray 2.60 rarely does) or, when
    larger, what the load's own tasks reported for that second (``gpu_stranded_frac``)."""
    lo, hi = window
    # a load is judged while it reports: not while its workers start, nor once it is stopped
    spans = [r["t"] for r in records if r.get("kind") == "load" and r.get("count", 0) > 0
             and (load is None or r.get("load") == load)]
    if spans:
        lo, hi = max(lo, min(spans)), min(hi, max(spans))
    rows = [r for r in records if r.get("kind") == "gpu" and lo <= r["t"] < hi]
    reported = _self_reported(records)
    stranded = capacity = idle = held = 0.0
    pending_s = 0.0
    previous: float | None = None
    for r in rows:
        dt = min(2.0, r["t"] - previous) if previous is not None else 1.0
        previous = r["t"]
        loads = r.get("loads", {})
        names = [load] if load else list(loads)
        if load is None:
            capacity += dt * float(r.get("gpus_total") or 0.0)
        fragmented = False
        for name in names:
            p = loads.get(name)
            if p is None:
                continue
            frac = reported.get((name, math.ceil(r["t"])), 0.0)
            waiting = max(p["idle_held"], p["held"] * frac)
            stranded += dt * (p["stranded"] - p["idle_held"] + waiting)
            idle += dt * waiting
            held += dt * p["held"]
            fragmented = fragmented or bool(p.get("fragmented"))
            if load is not None:
                capacity += dt * p["capacity"]
        if fragmented:
            pending_s += dt
    return {"samples": len(rows),
            "gpu_stranded_capacity_frac": round(stranded / capacity, 4) if capacity else None,
            "gpu_task_idle_frac": round(idle / held, 4) if held else None,
            "gpu_pending_demand_s": round(pending_s, 2) if rows else None,
            "gpu_seconds": round(capacity, 2)}


class GpuSampler:
    """One ``gpu`` record per call, from the state API of ``target``'s dashboard."""

    kind = "gpu"

    def __init__(self, target: Target, jobs: Callable[[], dict[str, str]]):
        self.target, self.jobs = target, jobs
        self._job_ids: dict[str, str] = {}  # submission id -> Ray job id (hex)

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

    def __call__(self) -> dict[str, Any]:
        job_loads = self._job_loads()
        tasks = self._state("tasks", ["RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT",
                                      "PENDING_NODE_ASSIGNMENT"])
        actors = self._state("actors", ["ALIVE"])
        nodes = self._state("nodes", ["ALIVE"])
        free = {n.node_id: float(n.available.get("GPU", 0.0))
                for n in self.target.nodes(timeout=1.0) if n.available is not None}
        return stranding(nodes, tasks, actors, job_loads, free or None)
