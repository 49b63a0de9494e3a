"""Several runs in a row: a game day's experiments, or N trials of one experiment.

One chaos run is an anecdote. A game day rehearses several failures back to back with
cooldowns between them and gives one index page; trials repeat one experiment so its SLO values
become a distribution (p50/p95/max, pass rate) instead of a single lucky or unlucky number.
Both put their runs' folders inside one folder of their own, so a pipeline archives one thing,
and both exit with their runs' verdicts combined: any fail 1, else any error 2, all pass
0, else inconclusive 3.

The function that runs one experiment is a parameter (``run``, default
:func:`raychaos.runner.run_experiment`) and so is ``sleep``, so the orchestration is tested
without a cluster or real cooldowns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raychaos.config.experiment import slugify
from raychaos.results.publish import Publish
from raychaos.results.store import new_run_dir, write_json_atomic
from raychaos.run.runner import RunOutcome

__all__ = ["run_gameday", "run_trials", "worst_exit"]

RunOne = Callable[..., RunOutcome]


def worst_exit(codes: list[int]) -> int:
    """The exit code of several runs: their verdicts combined
    (:func:`raychaos.results.checks.combine_trials`: any fail, else any error, all pass, else
    inconclusive)."""
    from raychaos.results.checks import EXIT, combine_trials, verdict_of_exit

    return EXIT[combine_trials(verdict_of_exit(c) for c in codes)[0]]


def _default_run() -> RunOne:
    from raychaos.run.runner import run_experiment

    return run_experiment


def _publishing(publish: Publish | None) -> dict[str, Any]:
    return {} if publish is None else {"publish": publish}


def _interrupted(outcome: RunOutcome) -> bool:
    return outcome.summary.get("status") == "interrupted"


def run_gameday(plan_path: str | Path, *, results_root: str | Path = "results",
                state_root: str | Path | None = None, quiet: bool = False,
                run: RunOne | None = None, sleep: Callable[[float], None] | None = None,
                say: Callable[[str], None] = print, publish: Publish | None = None,
                keep_cluster: bool = True) -> tuple[int, Path]:
    """Run a game-day plan; return ``(exit code, game-day folder)``.

    The folder is ``<results_root>/<utc>-gameday-<plan name>/`` with one folder per run,
    ``gameday.json`` (what ran, what was skipped) and ``index.html``. With ``on_failure: stop``
    the first run that does not pass ends the game day; an interrupted run always does. The
    plan's ``target``, when set, replaces each experiment's own. A plan that does not load
    raises ConfigError before anything starts. Every experiment runs on the cluster the first
    one found or started, restored and proven clean in between (:class:`~raychaos.run.warm.
    WarmSeries`); with ``keep_cluster=False`` it is taken down after the last run.
    """
    from raychaos.config.gameday import load_gameday
    from raychaos.results.gameday_index import build_gameday_report
    from raychaos.run.warm import WarmSeries

    plan = load_gameday(plan_path)
    run = run or _default_run()
    sleep = sleep or time.sleep
    folder = new_run_dir(results_root, f"gameday-{slugify(plan.name)}")
    steps: list[dict[str, Any]] = []
    codes: list[int] = []
    run_dirs: list[str | Path] = []
    stopped: str | None = None
    series = WarmSeries(keep_cluster, state_root, say, target=plan.target)
    try:
        for i, step in enumerate(plan.experiments):
            say(f"game day {plan.name}: [{i + 1}/{len(plan.experiments)}] {step.path}")
            outcome = run(step.path, results_root=folder, state_root=state_root, quiet=quiet,
                          target=plan.target, keep_cluster=True, **_publishing(publish))
            series.ran(step.path, outcome)
            codes.append(outcome.exit_code)
            if outcome.run_dir is not None:
                run_dirs.append(outcome.run_dir)
            steps.append({"path": step.path, "exit_code": outcome.exit_code,
                          "verdict": outcome.summary.get("verdict"),
                          "run_dir": str(outcome.run_dir) if outcome.run_dir else None})
            if _interrupted(outcome):
                stopped = "interrupted"
                break
            if outcome.exit_code != 0 and plan.on_failure == "stop":
                stopped = f"stopped after {Path(step.path).name} (on_failure: stop)"
                break
            if i + 1 < len(plan.experiments):
                pause = plan.cooldown_after(i)
                say(f"game day {plan.name}: cooling down for {pause:g}s")
                sleep(pause)
    except KeyboardInterrupt:
        stopped, codes = "interrupted", codes + [2]
    finally:
        series.finish()
    skipped = [s.path for s in plan.experiments[len(steps):]]
    if stopped:
        say(f"game day {plan.name}: {stopped}; skipped {len(skipped)} experiment(s)")
    code = worst_exit(codes)
    write_json_atomic(folder / "gameday.json", {
        "plan": str(Path(plan_path).resolve()), "name": plan.name, "exit_code": code,
        "on_failure": plan.on_failure, "stopped": stopped, "runs": steps, "skipped": skipped})
    index = build_gameday_report(folder, run_dirs, title=plan.name)
    say(f"game day {plan.name}: exit {code}; index: {index}")
    return code, folder


def run_trials(experiment: str | Path, trials: int, *, slo: str | None = None,
               results_root: str | Path = "results", state_root: str | Path | None = None,
               keep_cluster: bool = True, quiet: bool = False, run: RunOne | None = None,
               say: Callable[[str], None] = print,
               publish: Publish | None = None) -> tuple[int, Path | None]:
    """Run one experiment ``trials`` times; return ``(exit code, trials folder)``.

    Runs go to ``<results_root>/<utc>-<slug>-trials/``, next to ``trials.json``
    (:func:`raychaos.compare.summarize_trials`); the distribution table is printed. Every trial
    runs even when one fails — the pass rate is the point — but an interrupted or invalid run
    ends the series. The folder is None when the experiment did not load. Every trial runs on
    the cluster the first one found or started (:class:`raychaos.run.warm.WarmSeries`); with
    ``keep_cluster=False`` it is taken down after the last trial, not after each.
    """
    from raychaos.results.compare import format_trials, summarize_trials
    from raychaos.run.warm import WarmSeries

    run = run or _default_run()
    folder = new_run_dir(results_root, f"{slugify(Path(experiment).stem)}-trials")
    codes: list[int] = []
    run_dirs: list[str | Path] = []
    series = WarmSeries(keep_cluster, state_root, say)  # one cluster for every trial
    try:
        for i in range(trials):
            say(f"trial {i + 1}/{trials}: {experiment}")
            outcome = run(experiment, slo=slo, results_root=folder, state_root=state_root,
                          keep_cluster=True, quiet=quiet, **_publishing(publish))
            series.ran(experiment, outcome)
            codes.append(outcome.exit_code)
            if outcome.run_dir is None:  # bad input: nothing ran, nothing will
                if not any(folder.iterdir()):
                    folder.rmdir()
                return outcome.exit_code, None
            run_dirs.append(outcome.run_dir)
            if _interrupted(outcome):
                say(f"trial {i + 1}/{trials} was interrupted; not starting the rest")
                break
    except KeyboardInterrupt:
        codes.append(2)
    finally:
        series.finish()
    if run_dirs:
        summary = summarize_trials(run_dirs)
        (folder / "trials.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
        from raychaos.results.series_page import build_trials_page

        build_trials_page(folder, run_dirs, summary)
        say(format_trials(summary))
        say(f"trials: {folder / 'trials.json'}, {folder / 'trials.html'}")
    return worst_exit(codes), folder
