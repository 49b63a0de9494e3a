"""A head restarted in place under a task storm, with and without CPU groups per pod.

    python bench/head_restart_under_load.py [--trials 4] [--rate 150] [--groups off,on]

For each setting (``RAYCHAOS_CPU_GROUPS=off``: ungrouped, workers at nice 5 — how raychaos ran
before pods had CPU requests; ``on``: a cgroup per pod, :mod:`raychaos.targets.local.cpu`) a
fresh local cluster runs a task storm (``loads/task_storm.py --rate R --task-ms 5 --spread``)
and the head's ``gcs_server`` is killed ``--trials`` times (what KubeRay's GCS FT e2e test does;
the head container restarts). Per kill: seconds to the first GCS answer, to every worker ALIVE
with its old node ID, and how many times the head exited in the 60 s after the kill (1 is the
kill itself; more is a crash loop: Ray's raylet waits a fixed 15 s for its dashboard agent's
port files and aborts when a starved agent misses them). Figures, not assertions; run under
``flock /tmp/raychaos-cluster.lock``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from raychaos.config.settings import LocalClusterSpec
from raychaos.targets.local.target import LocalTarget

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.1


def settle(target: LocalTarget, timeout: float = 300) -> None:
    """Until the GCS answers and every node is ALIVE (a crash loop may still be running)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if sum(n.state == "ALIVE" for n in target.nodes()) == 3:
                return
        except Exception:  # noqa: BLE001 - not answering yet
            pass
        time.sleep(1)
    raise SystemExit("the cluster did not settle after a kill")


def kill_once(target: LocalTarget) -> dict[str, float]:
    workers = {n.node_id for n in target.nodes() if n.state == "ALIVE" and not n.is_head}
    evidence = target.kill_head("gcs", {})
    t0 = evidence["killed_at"]
    gcs_s = nodes_s = float("nan")
    while time.time() - t0 < 180:
        if target.gcs_alive(timeout=0.5):
            if gcs_s != gcs_s:
                gcs_s = time.time() - t0
            alive = {n.node_id for n in target.nodes() if n.state == "ALIVE"}
            if workers <= alive:
                nodes_s = time.time() - t0
                break
        time.sleep(POLL_S)
    time.sleep(max(0.0, 60 - (time.time() - t0)))  # a crash loop shows within a minute
    exits = [e for e in target.cluster_events(t0 - 1)
             if e.get("event") == "node_exited" and e.get("node") == "head"]
    settle(target)
    return {"gcs_s": gcs_s, "nodes_s": nodes_s, "head_exits": float(len(exits))}


def run_setting(groups: str, trials: int, rate: int) -> list[dict[str, float]]:
    os.environ["RAYCHAOS_CPU_GROUPS"] = groups
    rows = []
    with tempfile.TemporaryDirectory() as root:
        target = LocalTarget(LocalClusterSpec(name="hrl", head_restart_delay_s=1),
                             state_root=root)
        target.up()
        try:
            target.connect()
            job = target.submit_job(
                f"python task_storm.py --rate {rate} --task-ms 5 --spread --duration 900",
                working_dir=str(REPO / "loads"))
            deadline = time.time() + 120
            while target.job_status(job) != "RUNNING" and time.time() < deadline:
                time.sleep(1)
            time.sleep(10)  # the storm at its pace
            for i in range(trials):
                row = kill_once(target)
                rows.append(row)
                print(f"  groups {groups} kill {i + 1}: GCS {row['gcs_s']:.2f}s, workers "
                      f"{row['nodes_s']:.2f}s, head exits in 60 s: {row['head_exits']:.0f}",
                      flush=True)
            target.stop_job(job)
        finally:
            target.down()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--rate", type=int, default=150)
    ap.add_argument("--groups", default="off,on")
    args = ap.parse_args()
    results = {g: run_setting(g, args.trials, args.rate) for g in args.groups.split(",")}
    print(f"\n{'groups':7s} {'GCS p50':>8s} {'GCS max':>8s} {'workers p50':>12s} "
          f"{'workers max':>12s} {'crash loops':>12s}")
    for g, rows in results.items():
        gcs = [r["gcs_s"] for r in rows]
        nodes = [r["nodes_s"] for r in rows]
        loops = sum(1 for r in rows if r["head_exits"] > 1)
        print(f"{g:7s} {statistics.median(gcs):8.2f} {max(gcs):8.2f} "
              f"{statistics.median(nodes):12.2f} {max(nodes):12.2f} {loops:>8d}/{len(rows)}")


if __name__ == "__main__":
    main()
