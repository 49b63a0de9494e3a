"""What keeping idle Ray workers costs and buys on the embedded cluster, side by side.

    python bench/idle_workers.py [--runs 3] [--limits default,8]

For each ``num_workers_soft_limit`` (``default``: Ray's own, one idle worker per CPU), runs
``experiments/shuffle-under-head-kill.yaml`` ``--runs`` times on a cluster of its own (taken
down afterwards) and, from outside the harness, samples every 0.5 s the processes in that
cluster's CPU groups: how many distinct Ray worker processes ran (``ray::`` titles; each new
PID is a worker Ray started), and their memory (RSS summed over the cluster's processes).
Prints per limit: worker processes started per minute, mean and peak cluster RSS, the SUT's
CPU in the baseline (the run's own host sensor), the storm's recovery after the head kill
(``storm-throughput-back``) and the verdicts; then the ratios of the last limit to the first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from raychaos.observe.windows import windows  # noqa: E402
from raychaos.results.store import read_timeline  # noqa: E402
from raychaos.targets.local.cpu import in_cpu_group  # noqa: E402


def _variant(limit: str, tmp: Path) -> tuple[Path, str]:
    data = yaml.safe_load((REPO / "experiments/shuffle-under-head-kill.yaml").read_text())
    block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
    name = f"benchiw{limit}"
    block["target"]["local"].update(
        name=name, num_workers_soft_limit=None if limit == "default" else int(limit))
    block["slo_profile"] = str(REPO / block["slo_profile"])
    for load in block.get("loads") or []:
        load["script"] = str(REPO / load["script"])
    path = tmp / f"shuffle-{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, name


class _Sampler(threading.Thread):
    """Every 0.5 s: the Ray worker PIDs and the summed RSS of cluster ``name``'s processes."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True)
        self.prefix = f"raychaos-{name}--"  # raychaos-<cluster>--<node>
        self.workers: set[int] = set()
        self.rss: list[float] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.seconds = 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for proc in psutil.process_iter(["pid", "cmdline", "memory_info"]):
                pid = proc.info["pid"]
                if not in_cpu_group(pid, self.prefix):
                    continue
                mem = proc.info.get("memory_info")
                total += mem.rss if mem else 0
                cmd = proc.info.get("cmdline") or []
                if cmd and cmd[0].startswith("ray::"):
                    self.workers.add(pid)
            if total:
                self.rss.append(total / 2**20)
            self.stop.wait(0.5)
        self.seconds = time.monotonic() - self.t0


def _summaries(results: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*/*/summary.json"))]


def _baseline_sut(run_dir: Path) -> float | None:
    recs = read_timeline(run_dir / "timeline.jsonl")
    base = windows(recs).get("baseline")
    if base is None:
        return None
    vals = [r["sut_cpus"] for r in recs if r.get("kind") == "host"
            and base[0] <= r["t"] <= base[1] and r.get("sut_cpus") is not None]
    return statistics.fmean(vals) if vals else None


def _one(limit: str, runs: int, tmp: Path) -> dict[str, Any]:
    exp, name = _variant(limit, tmp)
    results = tmp / f"results-{limit}"
    sampler = _Sampler(name)
    sampler.start()
    proc = subprocess.run([sys.executable, "-m", "raychaos.cli", "run", str(exp), "--trials",
                           str(runs), "--results", str(results), "--quiet", "--down"],
                          cwd=REPO, capture_output=True, text=True, check=False)
    sampler.stop.set()
    sampler.join()
    back, sut, verdicts = [], [], []
    for s in _summaries(results):
        verdicts.append(s.get("verdict"))
        for slo in s.get("slos") or []:
            if slo["name"] == "storm-throughput-back":
                back.append(slo["value"])
    for d in sorted(results.glob("*/*/")):
        if (d / "timeline.jsonl").exists():
            v = _baseline_sut(d)
            if v is not None:
                sut.append(v)
    return {"limit": limit, "exit": proc.returncode, "verdicts": verdicts, "storm_back_s": back,
            "workers_started_per_min": round(len(sampler.workers) / sampler.seconds * 60, 1)
            if sampler.seconds else None,
            "rss_mean_mib": round(statistics.fmean(sampler.rss)) if sampler.rss else None,
            "rss_peak_mib": round(max(sampler.rss)) if sampler.rss else None,
            "baseline_sut_cpus": round(statistics.fmean(sut), 2) if sut else None,
            "seconds": round(sampler.seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limits", default="default,8")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for limit in args.limits.split(","):
            print(f"num_workers_soft_limit={limit}: {args.runs} runs ...", flush=True)
            row = _one(limit, args.runs, Path(tmp))
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\n{'limit':>8} {'workers/min':>11} {'RSS mean':>9} {'RSS peak':>9} {'SUT CPUs':>8} "
          f"storm back after the kill (s)")
    for r in rows:
        print(f"{r['limit']:>8} {r['workers_started_per_min']!s:>11} {r['rss_mean_mib']!s:>9} "
              f"{r['rss_peak_mib']!s:>9} {r['baseline_sut_cpus']!s:>8} "
              f"{[v if v is None else round(v, 2) for v in r['storm_back_s']]}")
    if len(rows) >= 2 and all(rows[0][k] and rows[-1][k] for k in
                              ("workers_started_per_min", "rss_mean_mib")):
        a, b = rows[0], rows[-1]
        print(f"\n{b['limit']} vs {a['limit']}: worker starts x"
              f"{b['workers_started_per_min'] / a['workers_started_per_min']:.2f}, RSS mean x"
              f"{b['rss_mean_mib'] / a['rss_mean_mib']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
