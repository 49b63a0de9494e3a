"""``raychaos ramp EXPERIMENT``: the knee of a ramped load, its spread over trials, and how far
a fault moves it.

The experiment has a load with a ``ramp:`` block and the ``ramp_knee`` probe in its method.
Each trial is one ordinary run (its own results folder, summary and verdict). When the method
also applies faults, every trial runs twice — as written, and with the faults taken out of the
method — so the shift of the knee is measured on the same box in the same minutes, side by
side. Everything goes to ``<results>/<utc>-ramp-<slug>/``: the runs, ``ramp.json`` (per variant
the knees, their p50/min/max, per trial the step table) and ``ramp.png`` (throughput and p95
against offered load, one line per run). Exit code: the worst of the runs.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from raychaos.errors import ConfigError
from raychaos.results.store import new_run_dir, read_json, write_json_atomic

if TYPE_CHECKING:  # the command line builds its parser from here: keep the import light
    from raychaos.run.series import RunOne

__all__ = ["add_ramp_parser", "format_ramp", "run_ramp", "without_faults"]


def _is_fault(activity: Any) -> bool:
    provider = activity.get("provider") if isinstance(activity, dict) else None
    return isinstance(provider, dict) and str(provider.get("module", "")).startswith(
        "raychaos.faults") and provider.get("func") != "undo_all"


def without_faults(data: dict[str, Any]) -> dict[str, Any] | None:
    """The experiment with its fault actions taken out of the method (None: it had none)."""
    method = data.get("method") or []
    kept = [a for a in method if not _is_fault(a)]
    if len(kept) == len(method):
        return None
    return {**data, "method": kept, "title": f"{data.get('title', '')} (without faults)"}


def _check(data: dict[str, Any], path: Path) -> None:
    block = next((e for e in data.get("extensions") or []
                  if isinstance(e, dict) and e.get("name") == "raychaos"), {})
    if not any(isinstance(load, dict) and load.get("ramp") for load in block.get("loads") or []):
        raise ConfigError(f"{path}: extensions.raychaos.loads: no load has a ramp: block "
                          "(raychaos ramp needs one)")
    if not any((a.get("provider") or {}).get("func") == "ramp_knee"
               for a in data.get("method") or [] if isinstance(a, dict)):
        raise ConfigError(f"{path}: method: no raychaos.probes.ramp.ramp_knee probe "
                          "(it waits for the knee and reports it)")


def _trial(run_dir: Path | None) -> dict[str, Any]:
    if run_dir is None or not (run_dir / "summary.json").exists():
        return {"run_dir": str(run_dir) if run_dir else None, "knee": None}
    summary = read_json(run_dir / "summary.json")
    ev: dict[str, Any] = next((p["evidence"] for p in summary.get("probes", [])
                               if p["name"] == "ramp_knee"), {})
    return {"run_dir": str(run_dir), "verdict": summary.get("verdict"), "knee": ev.get("knee"),
            "broke_at": ev.get("broke_at"), "reason": ev.get("reason"),
            "steps": ev.get("table", [])}


def _spread(knees: list[float]) -> dict[str, Any]:
    if not knees:
        return {"n": 0}
    return {"n": len(knees), "p50": statistics.median(knees), "min": min(knees),
            "max": max(knees), "values": knees}


def run_ramp(experiment: str | Path, trials: int = 3, *, results_root: str | Path = "results",
             state_root: str | Path | None = None, keep_cluster: bool = True,
             quiet: bool = False, run: RunOne | None = None,
             say: Callable[[str], None] = print) -> tuple[int, Path]:
    """Run the ramp ``trials`` times (twice each when its method applies faults)."""
    from raychaos.config.experiment import find_experiment, slugify
    from raychaos.run.series import worst_exit

    path = find_experiment(experiment)
    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    _check(data, path)
    if run is None:
        from raychaos.run.runner import run_experiment

        run = run_experiment
    folder = new_run_dir(results_root, f"ramp-{slugify(path.stem)}")
    variants: dict[str, Path] = {"as written": path}
    clean = without_faults(data)
    if clean is not None:
        clean_path = folder / f"{path.stem}-without-faults.yaml"
        clean_path.write_text(yaml.safe_dump(clean, sort_keys=False), encoding="utf-8")
        variants = {"with faults": path, "without faults": clean_path}
    codes: list[int] = []
    result: dict[str, Any] = {"experiment": str(path), "trials": trials, "variants": {}}
    try:
        for i in range(trials):
            for name, file in variants.items():
                say(f"ramp trial {i + 1}/{trials} ({name}): {path.name}")
                sub = folder / slugify(name)
                sub.mkdir(exist_ok=True)
                outcome = run(file, results_root=sub, state_root=state_root,
                              keep_cluster=keep_cluster, quiet=quiet)
                codes.append(outcome.exit_code)
                result["variants"].setdefault(name, {"trials": []})["trials"].append(
                    _trial(outcome.run_dir))
                if outcome.run_dir is None:
                    raise ConfigError(f"{file}: the experiment did not start")
    except KeyboardInterrupt:
        codes.append(2)
    for entry in result["variants"].values():
        entry["knee"] = _spread([t["knee"] for t in entry["trials"] if t["knee"] is not None])
    names = list(result["variants"])
    if len(names) == 2:
        a, b = (result["variants"][n]["knee"].get("p50") for n in names)
        result["knee_shift"] = (a - b) if a is not None and b is not None else None  # with-w/o
    write_json_atomic(folder / "ramp.json", result)
    try:
        from raychaos.results.resource_plots import plot_ramp

        plot_ramp(result, folder / "ramp.png")
    except Exception as exc:  # noqa: BLE001 - the figures stand without the picture
        say(f"could not draw ramp.png: {exc}")
    say(format_ramp(result))
    say(f"ramp: {folder / 'ramp.json'}")
    return worst_exit(codes), folder


def format_ramp(result: dict[str, Any]) -> str:
    lines = []
    for name, entry in result["variants"].items():
        k = entry["knee"]
        knees = ", ".join(f"{v:g}" for v in k.get("values", [])) or "none measured"
        lines.append(f"{name:15s} knee p50 {k.get('p50', '-')} tasks/s (min {k.get('min', '-')},"
                     f" max {k.get('max', '-')}; trials: {knees})")
    if result.get("knee_shift") is not None:
        lines.append(f"the fault moves the knee by {result['knee_shift']:+g} tasks/s (p50)")
    return "\n".join(lines)


def add_ramp_parser(sub: Any, positive_int: Callable[[str], int]) -> None:
    """``raychaos ramp`` on the command line's subparsers."""
    rp = sub.add_parser("ramp", help="raise a ramped load step by step until an SLO breaks; "
                                     "the knee over N trials, with and without the faults")
    rp.add_argument("experiment", help="experiment with a ramp: load and the ramp_knee probe")
    rp.add_argument("--trials", type=positive_int, default=3, metavar="N")
    rp.add_argument("--results", default="results", help="results root folder")
    rp.add_argument("--down", action="store_true", help="take a local cluster it started down")
    rp.add_argument("--quiet", action="store_true", help="phase lines, errors, verdicts only")
    rp.add_argument("--state-root", help=argparse.SUPPRESS)
    rp.set_defaults(handler=lambda args: run_ramp(
        args.experiment, args.trials, results_root=args.results, state_root=args.state_root,
        keep_cluster=not args.down, quiet=args.quiet)[0])
