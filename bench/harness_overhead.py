"""What the harness costs the load it measures: the same load with and without it, side by side.

    flock /tmp/raychaos-cluster.lock python bench/harness_overhead.py [--rounds 2] [--seconds 30]

On one embedded cluster, alternating (bare, harness, bare, harness, ...) so drift hits both:

- **task storm**: ``task_storm.py --rate 0`` (flat out, 64 in flight) submitted as a bare Ray
  job (driver on a worker, nothing else running), vs the same job as the load of a full
  ``raychaos run`` (session, run lock, 200 ms monitor, 1 s job poller reading its driver log,
  the Jobs API) whose method only waits. Throughput is counted the same way for both: the
  job's own per-second stats lines, the first 5 and the last 2 left out;
- **Locust**: the Serve app (``serve_app:app``) deployed once; standalone Locust
  (``LocustProcess``, 4 users) against a worker's Serve proxy, vs the same Locust as the load of
  a ``raychaos run``. Requests per second from Locust's own stats lines, the same window rule.

Ratio = harness / bare, per load (goal ≥ 0.95). Figures, not assertions: 2 shared cores, ±30 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

NAME = "benchov"
USERS = 4


def _steady(counts: list[int]) -> float:
    """Mean of the per-second counts, the first 5 and the last 2 seconds left out."""
    middle = counts[5:-2]
    return statistics.mean(middle) if middle else float("nan")


def _parse(lines: list[str]) -> list[dict[str, Any]]:
    from raychaos.catalog import stats_format

    return [d for d in map(stats_format().parse_line, lines) if d is not None]


def storm_bare(target: Any, seconds: float) -> float:
    from raychaos.catalog import loads_dir

    job = target.submit_job(f"python task_storm.py --rate 0 --in-flight 64 --duration "
                            f"{seconds} --name bare", working_dir=str(loads_dir()))
    lines: list[str] = []
    deadline = time.monotonic() + seconds + 120
    while time.monotonic() < deadline:
        lines += target.job_log_lines(job)
        if target.job_status(job) in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        time.sleep(1)
    time.sleep(1)
    lines += target.job_log_lines(job)
    return _steady([d["count"] for d in _parse(lines)])


def _experiment(tmp: Path, seconds: float, load: dict[str, Any]) -> Path:
    data = {
        "title": "harness overhead", "description": "a load under the whole harness",
        "controls": [{"name": "raychaos",
                      "provider": {"type": "python", "module": "raychaos.control"}}],
        "extensions": [{"name": "raychaos", "target": {"kind": "local", "local": {"name": NAME}},
                        "sentinel": False, "loads": [load],
                        "monitor": {"interval_s": 0.2, "settle_s": 0, "recovery_window_s": 0}}],
        "method": [{"type": "probe", "name": "wait", "pauses": {"after": seconds},
                    "provider": {"type": "python", "module": "raychaos.probes.gcs",
                                 "func": "gcs_healthy", "arguments": {"timeout_s": 5}}}]}
    path = tmp / "overhead.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _under_harness(tmp: Path, root: str, seconds: float, load: dict[str, Any]) -> list[int]:
    from raychaos.results.store import read_timeline
    from raychaos.run.runner import run_experiment

    results = tmp / f"results-{time.monotonic_ns()}"
    outcome = run_experiment(_experiment(tmp, seconds, load), results_root=results,
                             state_root=root, quiet=True)
    assert outcome.run_dir is not None, outcome.summary
    records = read_timeline(outcome.run_dir / "timeline.jsonl")
    phases = {r["name"]: r["t"] for r in records if r.get("event") == "phase"}
    lo, hi = phases.get("method", 0.0), phases.get("rollbacks", phases.get("finish", 1e9))
    return [r["count"] for r in records if r.get("kind") == "load" and lo <= r["t"] <= hi]


def storm_harness(tmp: Path, root: str, seconds: float) -> float:
    counts = _under_harness(tmp, root, seconds, {
        "name": "task_storm", "kind": "ray_job", "script": "loads/task_storm.py",
        "args": ["--rate", "0", "--in-flight", "64", "--duration", str(seconds + 120)]})
    return _steady(counts)


def locust_bare(target: Any, tmp: Path, seconds: float) -> float:
    from raychaos.catalog import loads_dir
    from raychaos.loads.locust_runner import LocustProcess

    proc = LocustProcess(locustfile=str(loads_dir() / "serve_users.py"),
                         host=target.serve_url(), users=USERS, spawn_rate=USERS,
                         duration_s=int(seconds) + 5, name="serve_users",
                         stats_path=tmp / f"locust-{time.monotonic_ns()}.log")
    proc.start()
    stats: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(1)
            stats += proc.poll_stats()
    finally:
        proc.stop()
    stats += proc.poll_stats()
    return _steady([s["count"] for s in stats])


def locust_harness(tmp: Path, root: str, seconds: float) -> float:
    counts = _under_harness(tmp, root, seconds, {
        "name": "serve_users", "kind": "locust", "script": "loads/serve_users.py",
        "host": "serve", "users": USERS, "spawn_rate": USERS})
    return _steady(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.probes.jobs import run_job
    from raychaos.targets.local.target import LocalTarget

    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        target = LocalTarget(LocalClusterSpec(name=NAME), state_root=root)
        target.up()
        try:
            figures: dict[str, list[float]] = {k: [] for k in
                                               ("storm_bare", "storm_harness", "locust_bare",
                                                "locust_harness")}
            for _ in range(args.rounds):
                figures["storm_bare"].append(storm_bare(target, args.seconds))
                figures["storm_harness"].append(storm_harness(tmp, root, args.seconds))
            status, lines = run_job(target, "python serve_deploy.py --app serve_app:app", 300)
            assert status == "SUCCEEDED", lines[-5:]
            for _ in range(args.rounds):
                figures["locust_bare"].append(locust_bare(target, tmp, args.seconds))
                figures["locust_harness"].append(locust_harness(tmp, root, args.seconds))
            for key, values in figures.items():
                print(f"{key:15s} " + "  ".join(f"{v:7.1f}/s" for v in values))
            for load in ("storm", "locust"):
                bare = statistics.mean(figures[f"{load}_bare"])
                harness = statistics.mean(figures[f"{load}_harness"])
                print(f"{load}: harness/bare = {harness / bare:.3f} "
                      f"({harness:.1f}/s vs {bare:.1f}/s)")
        finally:
            target.down()


if __name__ == "__main__":
    main()
