"""The local target's operator: keeps the desired nodes running, as KubeRay and Kubernetes do.

Run as its own process (``python -m raychaos.targets.local.supervisor STATE_DIR``) so a cluster
started with ``raychaos local up`` outlives the command. It reconciles ``cluster.json`` (desired
nodes) against reality every 0.2 s:

- a node process that exited is started again after its delay — the head after
  ``head_restart_delay_s`` (a pod restart), a worker after its ``replace_delay_s`` (a replacement
  pod, as an autoscaler would) — unless the node is marked ``desired: false`` (drained away);
- before a node starts, its image is "pulled" when ``image`` is configured (see the registry fault);
- a node starts with its entry's ``extra_env`` on top of its plan's (Ray's fault flags, see
  :mod:`.nodeenv`);
- workers start one at a time, after the head answers (parallel starts time out on 2 cores);
- once a second it drops spilled objects from the page cache of spill disks marked
  ``cold_cache`` (:mod:`.storage`), so restores read the (slow) disk as a pod under a memory
  limit would.

It writes ``status.json`` (PIDs, incarnations, exits) after every change. On SIGTERM it kills
every node it started and exits; ``LocalTarget.down`` then sweeps for anything left.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from raychaos.results.store import write_json_atomic
from raychaos.targets.local.nodes import NodePlan, kill_tree, start_node, wait_gone
from raychaos.targets.local.storage import sweep_page_cache

TICK_S = 0.2


class Supervisor:
    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.status: dict[str, Any] = {"supervisor_pid": _pid(), "nodes": {}, "events": []}
        self.stopping = False
        self._next_sweep = 0.0

    # --- state files -----------------------------------------------------------------------
    def desired(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / "cluster.json").read_text())
        return data

    def save(self) -> None:
        write_json_atomic(self.state_dir / "status.json", self.status)

    def note(self, event: str, node: str, **detail: Any) -> None:
        entry = {"ts": time.time(), "event": event, "node": node, **detail}
        self.status["events"] = (self.status["events"] + [entry])[-200:]
        print(json.dumps(entry), flush=True)

    # --- reconcile -------------------------------------------------------------------------
    def tick(self) -> None:
        cluster = self.desired()
        gcs = cluster["gcs_address"]
        plans = [_plan(n) for n in cluster["nodes"]]
        wanted = {n["plan"]["name"]: n for n in cluster["nodes"]}
        changed = False
        for plan in plans:
            entry = self.status["nodes"].setdefault(
                plan.name, {"pid": None, "incarnation": 0, "state": "pending"})
            proc = self.procs.get(plan.name)
            if proc is not None and proc.poll() is not None:
                kill_tree(proc.pid)  # host mode: reap what the node left behind
                quick = entry.get("state") != "running"  # died before it was ever up
                entry.update(state="exited", exit_code=proc.returncode, exited_at=time.time(),
                             pid=None, crashes=entry.get("crashes", 0) + 1 if quick else 0)
                self.note("node_exited", plan.name, exit_code=proc.returncode)
                self.procs.pop(plan.name)
                changed = True
            desired = wanted[plan.name].get("desired", True)
            if not desired:
                if plan.name in self.procs:
                    self._stop(plan.name)
                    entry.update(state="stopped", pid=None, stopped_at=time.time())
                    self.note("node_stopped", plan.name)
                    changed = True
                continue
            if plan.name in self.procs:
                continue
            delay = (cluster.get("head_restart_delay_s", 2.0) if plan.role == "head"
                     else wanted[plan.name].get("replace_delay_s", 2.0))
            delay = min(60.0, delay * 2 ** entry.get("crashes", 0))  # crash-loop back-off
            exited_at = entry.get("exited_at") or entry.get("stopped_at")
            if exited_at and time.time() - exited_at < delay:
                continue
            if plan.role != "head" and not self._head_answers(gcs):
                continue
            if plan.role != "head" and self._starting_other(plan.name):
                continue
            self._pull_image(cluster, plan)
            incarnation = entry["incarnation"] + 1
            log = self.state_dir / "nodes" / f"{plan.name}.{incarnation}.out"
            proc = start_node(plan, cluster["name"], gcs, log)
            self.procs[plan.name] = proc
            entry.update(pid=proc.pid, incarnation=incarnation, state="starting", log=str(log),
                         started_at=time.time(), exited_at=None, stopped_at=None)
            self.note("node_started", plan.name, pid=proc.pid, incarnation=entry["incarnation"])
            changed = True
        for name, entry in self.status["nodes"].items():
            if entry.get("state") == "starting" and name in self.procs:
                if _log_says_up(Path(entry["log"])):
                    entry["state"] = "running"
                    entry["ready_at"] = time.time()
                    self.note("node_ready", name)
                    changed = True
        if changed:
            self.save()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + 1.0
            for disk in cluster.get("disks") or []:
                if disk.get("cold_cache") and disk.get("mounted"):
                    sweep_page_cache(str(disk["mount"]))

    def _starting_other(self, name: str) -> bool:
        return any(e.get("state") == "starting" and n != name and n != "head"
                   for n, e in self.status["nodes"].items())

    def _head_answers(self, gcs: str) -> bool:
        head = self.status["nodes"].get("head", {})
        if head.get("state") != "running":
            return False
        host, port = gcs.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return True
        except OSError:
            return False

    def _pull_image(self, cluster: dict[str, Any], plan: NodePlan) -> None:
        image = cluster.get("image")
        if not image:
            return
        from raychaos.targets.local.registry.server import pull_image

        # in the node's own namespace: the pull takes the pod network path a throttle shapes
        result = pull_image(image, self.state_dir / "images" / plan.name, netns=plan.netns)
        self.note("image_pulled", plan.name, **result)

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        hit = kill_tree(proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        wait_gone(hit, timeout=5)

    def shutdown(self) -> None:
        for name in list(self.procs):
            self._stop(name)
            self.status["nodes"].setdefault(name, {})["state"] = "stopped"
            self.note("node_stopped", name)
        self.status["supervisor_pid"] = None
        self.save()

    def run(self) -> int:
        def on_term(signum: int, _frame: Any) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        self.save()
        try:
            while not self.stopping:
                try:
                    self.tick()
                except Exception as exc:  # keep supervising; say what went wrong
                    self.note("supervisor_error", "-", error=repr(exc))
                time.sleep(TICK_S)
        finally:
            self.shutdown()
        return 0


def _plan(entry: dict[str, Any]) -> NodePlan:
    """A node's plan with the ``extra_env`` a fault gave it (Ray's fault flags): the node runs
    with it from its next start on, as a pod does from a patched template."""
    plan = dict(entry["plan"])
    plan["env"] = {**plan.get("env", {}), **(entry.get("extra_env") or {})}
    return NodePlan(**plan)


def _log_says_up(path: Path) -> bool:
    """``ray start --block`` prints its blocking banner once the node is up."""
    try:
        return b"will now block forever" in path.read_bytes()
    except OSError:
        return False


def _pid() -> int:
    import os

    return os.getpid()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return Supervisor(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main())
