"""``raychaos run``: validate, set up, run the experiment with Chaos Toolkit, judge, exit.

Owns what a pipeline relies on: one clear sentence for bad input (and nothing started), the
rollback on every exit path (SIGINT and SIGTERM become an orderly stop that still rolls back and
writes the summary), progress lines on stderr-friendly stdout, and the exit code: 0 every SLO and
probe passed, 1 an SLO, probe or the hypothesis failed, 2 the run errored or was interrupted.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raychaos.config.experiment import Experiment, with_target
from raychaos.config.settings import TargetSpec
from raychaos.errors import ConfigError, RaychaosError
from raychaos.results.publish import Publish
from raychaos.results.redact import redact_text
from raychaos.run.plan import load as load_experiment
from raychaos.run.progress import Progress, verdict_table

__all__ = ["Progress", "RunOutcome", "describe_plan", "dry_run_plan", "run_experiment",
           "run_experiment_file", "verdict_table", "with_target"]


@dataclass(frozen=True)
class RunOutcome:
    """What a caller that runs several experiments (game days, trials, pytest) needs back."""

    exit_code: int
    run_dir: Path | None = None  # None: nothing was started (bad input, dry run)
    summary: dict[str, Any] = field(default_factory=dict)
    started_cluster: bool = False  # this run started the (local) cluster it ran on


def run_experiment_file(path: str | Path, *, slo: str | None = None,
                        results_root: str | None = None, state_root: str | None = None,
                        keep_cluster: bool = True, quiet: bool = False,
                        dry_run: bool = False,
                        target: TargetSpec | dict[str, Any] | None = None,
                        publish: Publish | None = None) -> int:
    """``raychaos run``: run one experiment file and return its exit code."""
    return run_experiment(path, slo=slo, results_root=results_root, state_root=state_root,
                          keep_cluster=keep_cluster, quiet=quiet, dry_run=dry_run,
                          target=target, publish=publish).exit_code


def run_experiment(path: str | Path, *, slo: str | None = None,
                   results_root: str | Path | None = None, state_root: str | Path | None = None,
                   keep_cluster: bool = True, quiet: bool = False, dry_run: bool = False,
                   target: TargetSpec | dict[str, Any] | None = None,
                   publish: Publish | None = None) -> RunOutcome:
    """Run one experiment; ``target`` (a game day's spec, or command-line options as a dict)
    replaces the experiment's own target; ``publish`` sends the finished run to a Pushgateway
    and Grafana (a refusal there is printed, and does not change the verdict)."""
    say = Progress(quiet)
    try:
        exp = load_experiment(path, slo, target)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {redact_text(problem)}", file=sys.stderr)
        print("nothing was started.", file=sys.stderr)
        return RunOutcome(2, None, {"verdict": "error", "exit_code": 2, "status": "invalid",
                                    "errors": list(exc.problems)})
    if dry_run:
        return RunOutcome(dry_run_plan(exp))
    from chaoslib.experiment import run_experiment as run_chaos

    from raychaos.run.session import Session, hand_over

    session = Session(exp, results_root=results_root, state_root=state_root,
                      keep_cluster=keep_cluster, progress=say)
    logging.getLogger("chaostoolkit").setLevel(logging.WARNING)
    data = dict(exp.data)
    data.setdefault("runtime", {"rollbacks": {"strategy": "always"}})
    hand_over(session)
    journal = None
    try:
        journal = run_chaos(data, settings={})
    except BaseException as exc:  # whatever escaped Chaos Toolkit: still roll back and judge
        if session.summary is None:
            session.error = session.error or exc
            session.finish(journal)
        if not isinstance(exc, (KeyboardInterrupt, RaychaosError)):
            raise
    finally:
        hand_over(None)
    summary = session.summary or session.finish(journal)
    if publish is not None and session.run_dir is not None:
        _publish(publish, session.run_dir)
    return RunOutcome(int(summary["exit_code"]), session.run_dir, summary,
                      started_cluster=session.started_cluster)


def _publish(publish: Publish, run_dir: Path) -> None:
    try:
        for line in publish.run(run_dir):
            print(line, flush=True)
    except RaychaosError as exc:
        print(f"error: {redact_text(str(exc))}", file=sys.stderr, flush=True)


def dry_run_plan(exp: Experiment) -> int:
    """Print what a run would do (and, on Kubernetes, the exact mutating calls); exit code."""
    print(describe_plan(exp))
    if exp.settings.target.kind == "kubernetes":
        from raychaos.run.dryrun import kubernetes_plan

        try:
            print(kubernetes_plan(exp))
        except RaychaosError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


def describe_plan(exp: Experiment) -> str:
    """What a run would do, without doing it (``--dry-run``)."""
    s = exp.settings
    lines = [f"experiment: {exp.title}  ({exp.path})",
             f"target: {s.target.kind}" + (f" '{s.target.local.name}', {s.target.local.workers} "
                                           f"workers ({s.target.local.gpu_workers} with GPUs), "
                                           f"GCS storage {s.target.local.gcs_storage}"
                                           if s.target.kind == "local" else
                                           f" RayCluster '{s.target.kubernetes.cluster}' in "
                                           f"namespace {s.target.kubernetes.namespace}"),
             f"loads: {', '.join(f'{x.name} ({x.kind}: {x.script})' for x in s.loads) or 'none'}",
             f"sentinel actor: {'yes' if s.sentinel else 'no'}",
             "method:"]
    from raychaos.faults.rpc import RESTARTS

    for act in exp.data.get("method", []):
        prov = act.get("provider", {})
        lines.append(f"  {act.get('type')} {act.get('name')}"
                     f"{' [background: overlaps what follows]' if act.get('background') else ''}"
                     f": {prov.get('module')}.{prov.get('func')}({prov.get('arguments') or {}})")
        if prov.get("func") in RESTARTS:
            lines.append(f"    note: {RESTARTS[prov['func']]}")
    lines += _target_support(exp)
    lines.append(f"SLO profile: {exp.slo_path or 'none'}")
    for slo in (exp.slo_profile.slos if exp.slo_profile else []):
        lines.append(f"  {slo.name}: {slo.metric} [{slo.window}] {slo.op} {slo.threshold:g}")
    lines.append("dry run: nothing was started.")
    return "\n".join(lines)


def _target_support(exp: Experiment) -> list[str]:
    """Which faults (with these arguments) the other kind of target would refuse."""
    from raychaos.config.experiment import fault_activities
    from raychaos.targets import make_target

    out = []
    for _where, func, args in fault_activities(exp):
        for kind in ("local", "kubernetes"):
            refused = make_target(TargetSpec(kind=kind)).refusals(func, args)
            if refused:
                why = "; ".join(f"{a + ': ' if a else ''}{m}" for a, m in refused)
                out.append(f"  note: {func} as written does not run on the {kind} target "
                           f"({why})")
    return out
