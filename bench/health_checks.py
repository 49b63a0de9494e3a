"""The same blackout and the same saturated shuffle at two settings, side by side: what the GCS's
health-check knobs and the link rate change (figures, not assertions; they vary here).

- ``blackout-false-deaths`` on a cluster with Ray's default health checks and on one with eager
  ones (1000 ms period, 2000 ms timeout, 3 misses): false deaths, node deaths, failed checks;
- ``shuffle-saturation-heartbeats`` on the eager cluster with worker-1's link at 2 and at 200
  Mbit/s: failed health checks, node deaths, the link's peak rate, the verdict.

    PYTHONPATH=src python bench/health_checks.py [--only blackout|shuffle] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from raychaos.config.settings import LocalClusterSpec
from raychaos.results.store import read_timeline
from raychaos.run.runner import run_experiment_file
from raychaos.targets.local.target import LocalTarget

REPO = Path(__file__).resolve().parents[1]
EAGER = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
         "health_check_failure_threshold": 3}


def _run(name: str, local: dict[str, Any], root: Path, tmp: Path, args: dict[str, Any]
         ) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "experiments" / f"{name}.yaml").read_text())
    block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
    block["target"] = {"kind": "local", "local": local}
    block["monitor"] = {"interval_s": 0.2, "settle_s": 3, "recovery_window_s": 5}
    data["method"][0]["provider"]["arguments"].update(args)
    exp = tmp / f"{name}.yaml"
    exp.write_text(yaml.safe_dump(data, sort_keys=False))
    results = tmp / f"results-{len(list(tmp.iterdir()))}"
    code = run_experiment_file(exp, results_root=str(results), state_root=str(root), quiet=True)
    [run_dir] = list(results.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    records = read_timeline(run_dir / "timeline.jsonl")
    deaths = [r for r in records if r.get("event") == "node_dead"]
    links = [(r.get("links") or {}).get("worker-1", {}) for r in records
             if r.get("kind") == "signals"]
    checks = [r["health_check_failures"] for r in records
              if isinstance(r.get("health_check_failures"), int)]
    start = min((r["t"] for r in records if r.get("event") == "fault_start"), default=0.0)
    return {"exit": code, "verdict": summary["verdict"],
            "false_deaths": sum(1 for d in deaths if (d.get("detail") or {}).get("raylet_alive")),
            "node_deaths": len(deaths),
            "first_death_after_fault_s": round(deaths[0]["t"] - start, 1) if deaths else None,
            "failed_health_checks": (max(checks) - min(checks)) if checks else None,
            "worker1_peak_mbit": max((lk.get("in_mbit", 0) + lk.get("out_mbit", 0)
                                      for lk in links), default=None),
            "slos": {s["name"]: [s["value"], s["verdict"]] for s in summary["slos"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["blackout", "shuffle"])
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rows: dict[str, Any] = {}
    settings = [("default", {}), ("eager", EAGER)]
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for label, knobs in settings:
            if args.only == "shuffle" and label == "default":
                continue
            local = {"name": f"hcb{label[0]}", **knobs}
            root = tmp / f"state-{label}"
            target = LocalTarget(LocalClusterSpec(**local), state_root=root)
            try:
                target.up()
                if args.only != "shuffle":
                    rows[f"blackout 12 s x2, {label} health checks"] = _run(
                        "blackout-false-deaths", local, root, tmp, {})
                if label == "eager" and args.only != "blackout":
                    for mbit in (2, 200):
                        rows[f"shuffle, link {mbit} Mbit/s, eager"] = _run(
                            "shuffle-saturation-heartbeats", local, root, tmp,
                            {"bandwidth_mbit": mbit})
            finally:
                target.down()
    text = json.dumps(rows, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
