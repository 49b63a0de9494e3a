"""Time to verdict on this box: a cold and a warm head-kill run and the catalog as one game day,
phase by phase, for two source trees side by side (before/after a change).

    python bench/time_to_verdict.py --before /tmp/raychaos-base [--after .] \
        [--scenarios cold,warm,gameday] [--out bench-ttv.json]
    python bench/time_to_verdict.py --report bench-ttv.json   # the table again, from the file

Each scenario runs ``raychaos`` as a subprocess of the tree under test (``PYTHONPATH=TREE/src``,
``cwd=TREE``) on a cluster of its own (name ``ttv``, a fresh state root), with copies of the
tree's own catalog experiments:

- ``cold``: ``raychaos run head-kill.yaml --down`` with no cluster up (the run starts one and
  takes it down: what ``make demo`` does);
- ``warm``: ``raychaos local up`` first (not timed), then the same head kill ``--warm-runs``
  times (2) on the kept cluster — the first may deploy what the others reuse; the warm figure is
  the median of the others (each is listed in ``warm_walls_s``);
- ``gameday``: the six catalog experiments as one game day, cooldown 0, ``on_failure:
  continue``, starting with no cluster up; the cluster is taken down afterwards.

Phases come from the run's ``summary.json`` (``phases``) when the tree writes them, otherwise
from its progress lines, each stamped when it arrives (the segment from one known line to the
next). Figures, not assertions: the box is shared and CPU-bound, figures vary by ±30%, and the
two trees run back to back so they meet the same box. Run the whole script under
``flock /tmp/raychaos-cluster.lock`` (it starts Ray clusters).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

NAME = "ttv"
WARM_RUNS = [2]  # --warm-runs
CATALOG = ["head-kill", "gpu-node-drain", "registry-throttle", "network-saturation",
           "head-kill-slow-registry", "shuffle-under-head-kill"]
# progress line -> the phase it starts (for trees whose summary.json has no "phases")
MARKERS = [
    (r"no local cluster is up|starting local cluster", "target_up"),
    (r"^results: ", "loads_up"),
    (r"deploying Serve application", "serve_deploy"),
    (r"^load \S+: Locust", "loads_up"),
    (r"creating the sentinel actor", "sentinel"),
    (r"waiting for the loads to report", "loads_report"),
    (r"^baseline: ", "baseline"),
    (r"^steady state: checking the hypothesis", "hypothesis"),
    (r"^method: injecting faults", "method"),
    (r"^\s+(action|probe) (\S+) \.\.\.$", "activity"),
    (r"^rollbacks$", "rollbacks"),
    (r"^\s+\S+: (succeeded|failed)", "after_activity"),
    (r"recovery window", "recovery_window"),
    (r"taking the local cluster down", "teardown"),
    (r"^verdict: ", "end"),
]
STAMP = re.compile(r"^\[\s*[\d.]+s\] ")


def variant(tree: Path, name: str, dest: Path) -> Path:
    data = yaml.safe_load((tree / "experiments" / f"{name}.yaml").read_text())
    block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
    target = block.setdefault("target", {"kind": "local"})
    target.setdefault("local", {})["name"] = NAME
    for load in block.get("loads", []):
        load["script"] = str(tree / load["script"])
    if block.get("slo_profile"):
        block["slo_profile"] = str(tree / block["slo_profile"])
    out = dest / f"{name}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def raychaos(tree: Path, *args: str, timeout: float = 1800) -> dict[str, Any]:
    """Run ``raychaos ARGS`` of ``tree``; every stdout line with its arrival time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=str(tree / "src"), PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "raychaos.cli", *args], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((round(time.monotonic() - t0, 2), line.rstrip("\n")))
        if time.monotonic() - t0 > timeout:
            proc.kill()
    code = proc.wait()
    return {"code": code, "wall_s": round(time.monotonic() - t0, 2), "lines": lines}


def line_phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds per phase from progress lines: each known line starts a segment."""
    out: dict[str, float] = {}
    current, since = "start", 0.0
    for t, raw in lines:
        text = STAMP.sub("", raw)
        for pattern, phase in MARKERS:
            m = re.search(pattern, text)
            if not m:
                continue
            if phase == "activity":
                phase = f"{m.group(1)} {m.group(2)}"
            elif phase == "after_activity":  # the last one: the finish (recovery window...)
                phase = f"after {current}"
            if phase != current:
                out[current] = round(out.get(current, 0.0) + t - since, 2)
                current, since = phase, t
            break
    return {k: v for k, v in out.items() if v > 0}


def verdict_at(lines: list[tuple[float, str]]) -> float | None:
    return next((t for t, text in lines if text.startswith("verdict: ")), None)


def summaries(results: Path) -> list[dict[str, Any]]:
    found = sorted(results.rglob("summary.json"), key=lambda p: p.stat().st_mtime)
    return [json.loads(p.read_text()) for p in found]


def head_kill_detail(results: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """How the head came back: the fault's and the probe's figures, the operator's events."""
    kill = next((f for f in summary.get("faults", []) if f.get("fault") == "kill_head"), None)
    if kill is None:
        return {}
    ev = kill.get("evidence") or {}
    gcs = next((p["evidence"] for p in summary.get("probes", [])
                if p.get("name") == "gcs_recovery"), {})
    at = ev.get("killed_at") or 0
    events = []
    for path in results.rglob("timeline.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "event" and rec.get("name") == "head" and at:
                events.append(f"{rec['event']} +{rec['ts'] - at:.1f}s")
    return {"head_back_s": ev.get("head_back_s"),
            **{k: gcs.get(k) for k in ("gcs_first_answer_s", "gcs_recovery_s",
                                       "nodes_recovery_s")}, "head_events": events}


def one_run(tree: Path, exp: Path, work: Path, results: Path, *extra: str) -> dict[str, Any]:
    out = raychaos(tree, "run", str(exp), "--state-root", str(work / "state"), "--results",
                   str(results), *extra)
    [summary] = summaries(results)[-1:] or [{}]
    return {"code": out["code"], "wall_s": out["wall_s"], "verdict_s": verdict_at(out["lines"]),
            "verdict": summary.get("verdict"), "head_kill": head_kill_detail(results, summary),
            "phases": summary.get("phases") or line_phases(out["lines"]),
            "phases_from": "summary" if summary.get("phases") else "progress lines",
            "tail": [text for _, text in out["lines"][-12:]], "lines": out["lines"]}


def scenario(tree: Path, which: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"ttv-{which}-"))
    state = ["--state-root", str(work / "state")]
    try:
        if which == "cold":
            exp = variant(tree, "head-kill", work)
            return one_run(tree, exp, work, work / "results-cold", "--down")
        if which == "warm":
            exp = variant(tree, "head-kill", work)
            up = raychaos(tree, "local", "up", "--name", NAME, *state)
            runs = [one_run(tree, exp, work, work / f"results-{i + 1}")
                    for i in range(max(2, WARM_RUNS[0]))]
            first, warm = runs[0], runs[1:]
            walls = sorted(r["wall_s"] for r in warm)
            median = warm[[r["wall_s"] for r in warm].index(walls[len(walls) // 2])]
            brief = ("code", "wall_s", "verdict_s", "verdict", "phases")
            return {**median, "cluster_up_s": up["wall_s"], "up_code": up["code"],
                    "warm_walls_s": [r["wall_s"] for r in warm],
                    "warm_verdicts": [r["verdict"] for r in warm],
                    "first": {k: first[k] for k in brief}}
        paths = [variant(tree, name, work) for name in CATALOG]
        plan = work / "catalog.yaml"
        plan.write_text(yaml.safe_dump({
            "name": "catalog", "cooldown_s": 0, "on_failure": "continue",
            "experiments": [{"path": str(p)} for p in paths]}, sort_keys=False))
        out = raychaos(tree, "gameday", str(plan), "--results", str(work / "results"), *state,
                       timeout=3600)
        runs = summaries(work / "results")
        return {"code": out["code"], "wall_s": out["wall_s"],
                "runs": [{"experiment": s.get("slug"), "verdict": s.get("verdict"),
                          "duration_s": s.get("duration_s"), "phases": s.get("phases"),
                          "errors": s.get("errors")} for s in runs],
                "tail": [text for _, text in out["lines"][-8:]]}
    finally:
        raychaos(tree, "local", "down", "--name", NAME, *state)
        shutil.rmtree(work, ignore_errors=True)


def report(figures: dict[str, dict[str, Any]]) -> str:
    trees = list(figures)
    rows = [("scenario", *[f"{t} wall s" for t in trees], *[f"{t} verdict" for t in trees],
             "after/before")]
    for which in ("cold", "warm", "gameday"):
        got = [figures[t].get(which) for t in trees]
        if not all(got):
            continue
        walls = [g["wall_s"] for g in got if g]
        ratio = f"{walls[-1] / walls[0]:.2f}" if len(walls) > 1 and walls[0] else "-"
        verdicts = [f"{g.get('verdict_s') or '-'} {g.get('verdict') or g.get('code')}"
                    for g in got if g]
        rows.append((which, *map(str, walls), *verdicts, ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    for which in ("cold", "warm"):
        names: list[str] = []
        for t in trees:
            for k in (figures[t].get(which) or {}).get("phases", {}):
                if k not in names:
                    names.append(k)
        if not names:
            continue
        lines.append(f"\n{which}: phases (s)  " + "  ".join(f"{t:>10}" for t in trees))
        for k in names:
            vals = [(figures[t].get(which) or {}).get("phases", {}).get(k) for t in trees]
            lines.append(f"  {k:<32}" + "  ".join(f"{v if v is not None else '-':>10}"
                                                   for v in vals))
    for t in trees:
        for run in (figures[t].get("gameday") or {}).get("runs", []):
            lines.append(f"{t} gameday {run['experiment']}: {run['verdict']} "
                         f"{run['duration_s']} s")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="the tree before the change")
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--scenarios", default="cold,warm,gameday")
    ap.add_argument("--warm-runs", type=int, default=2, help="head kills on the warm cluster "
                    "(the first deploys; the median of the rest is the warm figure)")
    ap.add_argument("--out", type=Path, default=Path("bench-ttv.json"))
    ap.add_argument("--only", choices=["before", "after"], help="run one tree (figures of the "
                    "other kept from --out)")
    ap.add_argument("--report", type=Path, help="print the table of an earlier --out file")
    args = ap.parse_args()
    WARM_RUNS[0] = args.warm_runs
    if args.report:
        print(report(json.loads(args.report.read_text())))
        return 0
    trees = {"before": args.before, "after": args.after} if args.before else \
        {"after": args.after}
    if args.only:
        trees = {args.only: trees[args.only]}
    figures: dict[str, dict[str, Any]] = json.loads(args.out.read_text()) \
        if args.out.exists() else {}
    for which in args.scenarios.split(","):
        for label, tree in trees.items():  # side by side: the same box, minutes apart
            print(f"--- {label} {which} ({tree})", flush=True)
            figures.setdefault(label, {})[which] = scenario(tree.resolve(), which)
            args.out.write_text(json.dumps(figures, indent=1))
            print(json.dumps({k: v for k, v in figures[label][which].items()
                              if k not in ("tail", "lines")}, indent=1), flush=True)
    print(report(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
