"""What the monitor costs, and what it writes while the head is gone.

    flock /tmp/raychaos-cluster.lock python bench/monitor_cost.py [--seconds 20]

Starts an embedded cluster, then for each sampling interval (200 ms, 100 ms) runs the monitor
alone in a process of its own against it (no loads, no jobs) and reports that process's CPU as a
share of one core (``getrusage``: the asker, scheduler and poller threads and the GCS client's
own threads), next to an idle process that only connected the same way; then kills the head
(``mode: head``) under each interval and reports the samples per second actually written during
the outage and the largest gap between two samples. Figures, not assertions: the box is 2 shared
cores and figures vary by ±30 %.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(interval: float, seconds: float, root: str, out: str, idle: bool) -> None:
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.observe.monitor import Monitor, sample_gaps
    from raychaos.results.store import Clock, Timeline, read_timeline
    from raychaos.targets.local.target import LocalTarget

    target = LocalTarget(LocalClusterSpec(name="benchmon"), state_root=root)
    target.connect()  # the same client set-up either way
    clock = Clock()
    path = Path(out).with_suffix(".jsonl")
    timeline = Timeline(path, clock)
    monitor = Monitor(target, timeline, clock, interval_s=interval)
    cpu0, t0 = _cpu(), time.monotonic()
    if not idle:
        monitor.start()
    time.sleep(seconds)
    if not idle:
        monitor.stop()
    cpu, wall = _cpu() - cpu0, time.monotonic() - t0
    timeline.close()
    records = read_timeline(path)
    samples = [r for r in records if r.get("kind") == "sample"]
    down = next((r["t"] for r in samples if not r["gcs_up"] and not r.get("gcs_late")), None)
    back = next((r["t"] for r in samples if down is not None and r["t"] > down
                 and r["gcs_up"]), None)
    outage = sample_gaps(records, down, back) if down is not None and back else {}
    Path(out).write_text(json.dumps({
        "interval_s": interval, "idle": idle, "wall_s": round(wall, 2), "cpu_s": round(cpu, 3),
        "core_share": round(cpu / wall, 4), "monitor_thread_cpu_s": round(monitor.cpu_seconds, 3),
        "samples": sum(1 for r in records if r.get("kind") == "sample"),
        "unanswered": monitor.unanswered, **sample_gaps(records),
        "outage_s": round(back - down, 2) if down is not None and back else None,
        "outage_max_gap_s": outage.get("max_gap_s"),
        "outage_samples_per_s": outage.get("samples_per_s")}))


def _run_child(interval: float, seconds: float, root: str, idle: bool = False,
               kill_after: float | None = None, target=None) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    cmd = [sys.executable, __file__, "--child", str(interval), str(seconds), root, out]
    if idle:
        cmd.append("--idle")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    proc = subprocess.Popen(cmd, env=env)
    if kill_after is not None:
        time.sleep(kill_after)
        old = target.head_identity()
        target.kill_head("head", {})
        target.wait_head_back(old, timeout=120)
    proc.wait(timeout=seconds + 120)
    return json.loads(Path(out).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--child", nargs=4, metavar=("INTERVAL", "SECONDS", "ROOT", "OUT"))
    ap.add_argument("--idle", action="store_true")
    args = ap.parse_args()
    if args.child:
        interval, seconds, root, out = args.child
        child(float(interval), float(seconds), root, out, args.idle)
        return
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.target import LocalTarget

    with tempfile.TemporaryDirectory() as root:
        target = LocalTarget(LocalClusterSpec(name="benchmon", head_restart_delay_s=2),
                             state_root=root)
        target.up()
        try:
            idle = _run_child(0.2, args.seconds, root, idle=True)
            print(f"idle process (connected, no monitor): {idle['core_share']:.2%} of a core")
            for interval in (0.2, 0.1):
                r = _run_child(interval, args.seconds, root)
                print(f"monitor every {interval * 1000:.0f} ms: {r['core_share']:.2%} of a core "
                      f"(process; idle {idle['core_share']:.2%}), monitor threads "
                      f"{r['monitor_thread_cpu_s'] / r['wall_s']:.2%}, {r['samples']} samples "
                      f"in {r['wall_s']:.0f} s, largest gap {r['max_gap_s']} s")
            for interval in (0.2, 0.1):
                r = _run_child(interval, 40.0, root, kill_after=5.0, target=target)
                print(f"head outage ({r['outage_s']} s), monitor every {interval * 1000:.0f} ms: "
                      f"{r['outage_samples_per_s']} samples/s written during the outage "
                      f"(expected {1 / interval:.0f}), largest gap {r['outage_max_gap_s']} s, "
                      f"{r['unanswered']} unanswered")
        finally:
            target.down()


if __name__ == "__main__":
    main()
