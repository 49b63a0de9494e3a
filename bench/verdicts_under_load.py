"""The flagship head kill's verdicts at each level of unrelated host load, N runs each.

    python bench/verdicts_under_load.py [--runs 5] [--levels 0,50,100] [--ft-off-at 50]

For each level, ``stress-ng --cpu <cores> --cpu-load <level>`` (Debian's stress-ng) runs for the
whole of each ``raychaos run experiments/head-kill.yaml`` (level 0: nothing); then, with
``--ft-off-at``, the same experiment with GCS fault tolerance off on its own cluster, which must
fail. Prints one line per run (exit code, verdict, the checks that did not pass and why) and a
table of verdict counts per level: what issue 27 asks to hold — never a fail of a healthy
cluster, whatever the host does; always a fail of a broken one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
VERDICT = {0: "pass", 1: "fail", 2: "error", 3: "inconclusive"}


def _stress(level: int) -> subprocess.Popen[bytes] | None:
    if level <= 0:
        return None
    if shutil.which("stress-ng") is None:
        sys.exit("needs stress-ng (Debian: apt-get install stress-ng)")
    return subprocess.Popen(["stress-ng", "--cpu", str(os.cpu_count() or 2), "--cpu-load",
                             str(level), "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _variant(ft_off: bool, tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "experiments/head-kill.yaml").read_text())
    if not ft_off:
        return REPO / "experiments/head-kill.yaml"
    block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
    block["target"].setdefault("local", {}).update(name="benchneg", gcs_storage="none")
    block["slo_profile"] = str(REPO / block["slo_profile"])
    for load in block.get("loads") or []:
        load["script"] = str(REPO / load["script"])
    path = tmp / "head-kill-ft-off.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cluster_up() -> bool:
    out = subprocess.run([sys.executable, "-m", "raychaos.cli", "local", "status"], cwd=REPO,
                         capture_output=True, text=True, check=False).stdout
    try:
        return bool(json.loads(out).get("up"))
    except ValueError:
        return False


def _one(exp: Path, results: Path, level: int, down: bool) -> dict:
    stress = _stress(level)
    try:
        cmd = [sys.executable, "-m", "raychaos.cli", "run", str(exp), "--results", str(results),
               "--quiet", *(["--down"] if down else [])]
        code = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                              check=False).returncode
    finally:
        if stress is not None:
            stress.terminate()
            stress.wait(timeout=10)
    run_dir = max(results.iterdir(), key=lambda p: p.stat().st_mtime)
    summary = json.loads((run_dir / "summary.json").read_text())
    open_checks = [f"{c['name']}: {c['verdict']} ({c.get('message', '')[:140]})"
                   for c in summary.get("checks") or [] if c.get("verdict") not in ("pass",
                                                                                   "n/a")]
    return {"level": level, "code": code, "verdict": VERDICT.get(code, str(code)),
            "open": open_checks, "run_dir": str(run_dir)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--levels", default="0,50,100")
    p.add_argument("--ft-off-at", type=int, default=50, help="-1: no negative control")
    p.add_argument("--ft-off-runs", type=int, default=1)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="raychaos-verdicts-"))
    results = tmp / "results"
    results.mkdir()
    rows = []
    levels = [int(x) for x in args.levels.split(",")]
    was_up = _cluster_up()
    for level in levels:
        for i in range(args.runs):  # one cluster for them all (the first run starts it)
            row = _one(_variant(False, tmp), results, level, down=False)
            rows.append(row)
            print(f"load {level:3d}% run {i + 1}: exit {row['code']} {row['verdict']}"
                  + "".join(f"\n    {c}" for c in row["open"]), flush=True)
    if not was_up:  # the bench started the shipped cluster: it takes it down
        subprocess.run([sys.executable, "-m", "raychaos.cli", "local", "down"], cwd=REPO,
                       capture_output=True, check=False)
    if args.ft_off_at >= 0:
        for i in range(args.ft_off_runs):
            row = _one(_variant(True, tmp), results, args.ft_off_at, down=True)
            row["level"] = f"{args.ft_off_at} FT off"
            rows.append(row)
            print(f"GCS FT off, load {args.ft_off_at}% run {i + 1}: exit {row['code']} "
                  f"{row['verdict']}" + "".join(f"\n    {c}" for c in row["open"]), flush=True)
    print("\nload        pass  inconclusive  fail  error")
    for level in dict.fromkeys(r["level"] for r in rows):
        n = Counter(r["verdict"] for r in rows if r["level"] == level)
        print(f"{str(level):10s}  {n['pass']:4d}  {n['inconclusive']:12d}  {n['fail']:4d}  "
              f"{n['error']:5d}")
    print(f"\nruns under {results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
