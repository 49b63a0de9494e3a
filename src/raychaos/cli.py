"""The ``raychaos`` command line.

    raychaos run EXPERIMENT [--slo FILE] [--trials N] [--dry-run] [--down] [--quiet]
    raychaos calibrate EXPERIMENT --trials N [--margin F] [--slo FILE] [--results DIR]
    raychaos gameday PLAN [--results DIR] [--down] [--quiet]
    raychaos schedule PLAN --cron "0 3 * * 1" [--namespace N] [--image I] [-o FILE]
    raychaos validate EXPERIMENT...
    raychaos local up|down|status [--name NAME] [--workers N] [--gpu-workers N]
    raychaos testbed build|up|down|status [--name NAME] [--namespace NS]
    raychaos rollback RESULTS_DIR | --all [RESULTS_ROOT]
    raychaos report RESULTS_DIR
    raychaos compare RUN_A RUN_B [--tolerance F]
    raychaos history RESULTS_ROOT [--tolerance F] [-o FILE]
    raychaos ramp EXPERIMENT [--trials N]
    raychaos review MANIFEST... | --live KIND[/NAME] [--namespace N] [--head-restart-s S]
    raychaos list

Exit codes: 0 every check passed; 1 an SLO, probe or the hypothesis failed, or the system did
not recover within its bound; 2 the harness errored or could not observe, or was interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from raychaos import __version__
from raychaos.errors import ConfigError, RaychaosError

if TYPE_CHECKING:
    from raychaos.results.publish import Publish

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="raychaos",
        description="Chaos and load testing for Ray clusters: inject head/GCS kills, drains, "
                    "slow registries and saturated networks under load, and judge the run "
                    "against SLOs.",
        epilog="exit codes: 0 every check passed · 1 an SLO, probe or the hypothesis failed, "
               "or the system did not recover · 2 the harness errored or could not observe, "
               "or the run was interrupted")
    p.add_argument("--version", action="version", version=f"raychaos {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run one experiment and judge it")
    r.add_argument("experiment", help="experiment file (Chaos Toolkit YAML)")
    r.add_argument("--slo", help="SLO profile overriding the experiment's")
    r.add_argument("--results", help="results root folder (default: results/)")
    r.add_argument("--dry-run", action="store_true", help="validate and print the plan only")
    r.add_argument("--down", action="store_true",
                   help="take the local cluster down afterwards if this run started it")
    r.add_argument("--trials", type=_positive_int, default=1, metavar="N",
                   help="run it N times and print the distribution of every SLO (p50/p95/max, "
                        "pass rate); runs and trials.json go to one folder; exit code is the "
                        "worst of the runs")
    r.add_argument("--quiet", action="store_true",
                   help="phase lines, errors and the verdict only (CI); when stdout is not a "
                        "terminal the monitor line is printed every 30 s instead of every 5 s")
    r.add_argument("--state-root", help=argparse.SUPPRESS)
    _publish_options(r)
    k = r.add_argument_group("target (overrides the experiment's)")
    k.add_argument("--target", choices=["local", "kubernetes"])
    k.add_argument("--context", help="kubeconfig context")
    k.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    k.add_argument("--namespace", help="namespace of the RayCluster")
    k.add_argument("--cluster", help="RayCluster name")
    k.add_argument("--rayjob", metavar="NAME", help="a RayJob: its RayCluster is followed")
    k.add_argument("--rayservice", metavar="NAME", help="a RayService: its active RayCluster")
    k.add_argument("--dashboard-url", help="Ray dashboard URL (e.g. a port-forward)")

    cal = sub.add_parser("calibrate", help="run an experiment N times on a known-good cluster "
                                           "and propose SLO thresholds from what it measured",
                         description="Run EXPERIMENT --trials times (into one folder, as run "
                                     "--trials) and propose a threshold for every SLO of its "
                                     "profile from the observed values: max x (1 + margin) + "
                                     "one unit step where lower is better, min x (1 - margin) "
                                     "where higher is; invariants keep their exact bound. "
                                     "Writes calibration.json and slo-proposed.yaml.")
    cal.add_argument("experiment", help="experiment file (Chaos Toolkit YAML)")
    cal.add_argument("--trials", type=_positive_int, required=True, metavar="N")
    cal.add_argument("--margin", type=float, default=0.5,
                     help="relative margin over the observed extreme (default: 0.5)")
    cal.add_argument("--slo", help="SLO profile to calibrate (default: the experiment's)")
    cal.add_argument("--results", default="results", help="results root (default: results/)")
    cal.add_argument("--state-root", help=argparse.SUPPRESS)

    g = sub.add_parser("gameday", help="run a game-day plan: its experiments in order, with "
                                       "cooldowns, and one index.html",
                       description="Run the experiments of a game-day plan "
                                   "(experiments/gamedays/*.yaml) one after another with the "
                                   "plan's cooldowns; on_failure: stop ends the game day at the "
                                   "first run that does not pass. Every run's folder and "
                                   "index.html go into results/<utc>-gameday-<name>/. The exit "
                                   "code is the worst of the runs.")
    g.add_argument("plan", help="game-day plan file (YAML)")
    g.add_argument("--results", default="results", help="results root folder (default: results/)")
    g.add_argument("--quiet", action="store_true", help="phase lines, errors and verdicts only")
    g.add_argument("--down", action="store_true",
                   help="take the local cluster down after the last run if the game day "
                        "started it")
    g.add_argument("--state-root", help=argparse.SUPPRESS)
    _publish_options(g)

    sch = sub.add_parser("schedule", help="print Kubernetes manifests (CronJob + RBAC) that run "
                                          "a game day on a schedule",
                         description="Validate a game-day plan and print a ServiceAccount, Role, "
                                     "RoleBinding and CronJob that run `raychaos gameday PLAN` "
                                     "on the cron schedule, results on a PVC; pipe into "
                                     "`kubectl apply -f -`.")
    sch.add_argument("plan", help="game-day plan file (YAML), as its path inside the image")
    sch.add_argument("--cron", required=True, help='five-field schedule, e.g. "0 3 * * 1"')
    sch.add_argument("--namespace", default="raychaos", help="namespace (default: raychaos)")
    sch.add_argument("--image", default=f"raychaos:{__version__}",
                     help="an image you built with raychaos installed and this repository at "
                          "/app (default: %(default)s)")
    sch.add_argument("--pvc", default="raychaos-results",
                     help="existing PersistentVolumeClaim for results (default: raychaos-results)")
    sch.add_argument("--time-zone", help="CronJob time zone, e.g. Etc/UTC")
    sch.add_argument("--target-namespace", help="the RayCluster's namespace (default: --namespace)")
    sch.add_argument("--network", action="store_true",
                     help="also the opt-in Role for network/registry faults (privileged pods)")
    sch.add_argument("--deadline", type=int, default=4 * 3600,
                     help="the Job's activeDeadlineSeconds (default: %(default)s)")
    sch.add_argument("-o", "--output", help="write the manifests to FILE instead of stdout")

    v = sub.add_parser("validate", help="check experiment files without running anything")
    v.add_argument("experiments", nargs="+")

    rb = sub.add_parser("rollback", help="undo what a crashed or interrupted run left applied")
    rb.add_argument("results_dir", nargs="?",
                    help="a results folder; with --all the results root (default: results/)")
    rb.add_argument("--all", action="store_true",
                    help="every results folder under the root with something still applied")

    rep = sub.add_parser("report", help="rebuild report.html and junit.xml of a run")
    rep.add_argument("results_dir")

    cmp_ = sub.add_parser("compare", help="compare two runs; exit 1 on a regression")
    cmp_.add_argument("run_a")
    cmp_.add_argument("run_b")
    cmp_.add_argument("--tolerance", type=float, default=0.2)

    h = sub.add_parser("history", help="every SLO and recovery figure across the runs of each "
                                       "experiment under a results folder; exit 1 when the "
                                       "latest run regressed")
    h.add_argument("results_root", nargs="?", default="results")
    h.add_argument("--tolerance", type=float, default=0.2,
                   help="relative worsening against the run before that counts as a regression")
    h.add_argument("-o", "--output", help="the HTML page (default: RESULTS_ROOT/history.html)")

    from raychaos.run.clusters import add_cluster_parsers
    from raychaos.run.ramp import add_ramp_parser
    from raychaos.run.review import add_review_parser

    add_cluster_parsers(sub)
    add_ramp_parser(sub, _positive_int)
    add_review_parser(sub)

    sub.add_parser("list", help="list the experiments in experiments/")
    return p


def _publish_options(parser: argparse.ArgumentParser) -> None:
    pub = parser.add_argument_group("dashboards (each finished run is published there too)")
    pub.add_argument("--push-gateway", metavar="URL",
                     help="Prometheus Pushgateway to push each run's figures to")
    pub.add_argument("--grafana-url", metavar="URL",
                     help="Grafana to add one region annotation per fault to (token from "
                          "$RAYCHAOS_GRAFANA_TOKEN or $GRAFANA_TOKEN)")
    pub.add_argument("--grafana-dashboard", metavar="UID",
                     help="attach the annotations to this dashboard (default: organisation-wide)")


def _publishing(args: argparse.Namespace) -> Publish | None:
    from raychaos.results.publish import Publish

    return Publish.from_options(args.push_gateway, args.grafana_url, args.grafana_dashboard)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _run(args: argparse.Namespace) -> int:
    publish = _publishing(args)
    if args.trials > 1 and not args.dry_run:
        from raychaos.run.series import run_trials

        code, _folder = run_trials(args.experiment, args.trials, slo=args.slo,
                                   results_root=args.results or "results",
                                   state_root=args.state_root, keep_cluster=not args.down,
                                   quiet=args.quiet, publish=publish)
        return code
    from raychaos.run.runner import run_experiment_file

    target = None
    if args.target:
        target = {"kind": args.target, "context": args.context, "kubeconfig": args.kubeconfig,
                  "namespace": args.namespace, "cluster": args.cluster,
                  "dashboard_url": args.dashboard_url}
        for kind in ("rayjob", "rayservice"):
            if getattr(args, kind):
                target |= {"object_kind": kind, "name": getattr(args, kind)}
    return run_experiment_file(args.experiment, slo=args.slo, results_root=args.results,
                               state_root=args.state_root, keep_cluster=not args.down,
                               quiet=args.quiet, dry_run=args.dry_run, target=target,
                               publish=publish)


def _calibrate(args: argparse.Namespace) -> int:
    from raychaos.run.calibrate import calibrate

    code, _folder = calibrate(args.experiment, args.trials, margin=args.margin, slo=args.slo,
                              results_root=args.results, state_root=args.state_root)
    return code


def _gameday(args: argparse.Namespace) -> int:
    from raychaos.run.series import run_gameday

    code, _folder = run_gameday(args.plan, results_root=args.results,
                                state_root=args.state_root, quiet=args.quiet,
                                publish=_publishing(args), keep_cluster=not args.down)
    return code


def _schedule(args: argparse.Namespace) -> int:
    from raychaos.run.schedule import render_yaml, schedule_manifests

    text = render_yaml(schedule_manifests(args.plan, args.cron, args.namespace, args.image,
                                          pvc_name=args.pvc, time_zone=args.time_zone,
                                          target_namespace=args.target_namespace,
                                          network=args.network, deadline_s=args.deadline))
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from raychaos.run.crash import rollback_all, rollback_results_dir

    if args.all:
        result = rollback_all(Path(args.results_dir or "results"))
        for name, undone in result["undone"].items():
            print(f"rollback {name}: undone {undone}")
        for name, error in result["failed"].items():
            print(f"error: rollback {name}: {error}", file=sys.stderr)
        if not result["undone"] and not result["failed"]:
            print("rollback: nothing was left applied in any results folder")
        return 2 if result["failed"] else 0
    if not args.results_dir:
        print("error: rollback: name a results folder, or pass --all", file=sys.stderr)
        return 2
    result = rollback_results_dir(Path(args.results_dir))
    print(f"rollback: undone {result['undone'] or 'nothing (nothing was left applied)'}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from raychaos.results.compare import compare_runs, format_comparison

    result = compare_runs(args.run_a, args.run_b, tolerance=args.tolerance)
    print(format_comparison(result))
    return 1 if result["regressions"] else 0


def _history(args: argparse.Namespace) -> int:
    from raychaos.results.history import (
        build_history_page,
        format_history,
        history,
        latest_regressions,
    )

    root = Path(args.results_root)
    if not root.is_dir():
        print(f"error: history: {root} is not a folder", file=sys.stderr)
        return 2
    result = history(root, tolerance=args.tolerance)
    print(format_history(result), end="")
    page = build_history_page(result, args.output or root / "history.html")
    print(f"history: {page}")
    return 1 if latest_regressions(result) else 0


def _validate(args: argparse.Namespace) -> int:
    from raychaos.errors import ConfigError
    from raychaos.run.plan import load as load_experiment

    bad = 0
    for path in args.experiments:
        try:
            load_experiment(path)
            print(f"ok: {path}")
        except ConfigError as exc:
            bad += 1
            for problem in exc.problems:
                print(f"error: {problem}", file=sys.stderr)
    return 2 if bad else 0


def _list() -> int:
    import yaml

    for path in sorted(Path("experiments").glob("*.yaml")):
        try:
            title = (yaml.safe_load(path.read_text()) or {}).get("title", "")
        except yaml.YAMLError:
            title = "(not valid YAML)"
        print(f"{str(path):45s} {title}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "gameday":
            return _gameday(args)
        if args.command == "schedule":
            return _schedule(args)
        if args.command == "validate":
            return _validate(args)
        if args.command == "rollback":
            return _rollback(args)
        if args.command == "report":
            from raychaos.results.junit import write_junit
            from raychaos.results.openmetrics import write_openmetrics
            from raychaos.results.report import build_report

            print(build_report(args.results_dir))
            print(write_junit(args.results_dir))
            print(write_openmetrics(args.results_dir))
            return 0
        if args.command == "compare":
            return _compare(args)
        if args.command == "history":
            return _history(args)
        if args.command == "list":
            return _list()
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is not None:  # the commands that register their own (clusters, ramp, review)
            return handler(args)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        print("nothing was started.", file=sys.stderr)
        return 2
    except RaychaosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 2
    return 2


def entry() -> None:
    """The ``raychaos`` command: :func:`main`, then the exit handlers, then the process ends
    without the interpreter's finalization. A run leaves native threads behind (gRPC's, the
    Kubernetes client's, Ray's): finalizing the interpreter under them can abort the process
    (SIGABRT: a daemon thread returning from C++ into a finalizing interpreter, or gRPC's
    shutdown racing exit), which a pipeline reads as exit 134 after a verdict already printed.
    Nothing of a run depends on finalization: faults are undone, the lock released and the
    results written before ``main`` returns; ``atexit`` handlers (logging, a Locust runner's
    safety stop) still run."""
    try:
        code = main()
    except SystemExit as exc:  # argparse: --help, a usage error
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    exit_now(code)


def exit_now(code: int) -> None:
    """Run the ``atexit`` handlers, flush stdout and stderr, and end the process with ``code``
    without the interpreter's finalization (see :func:`entry`; the test process ends so too)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
