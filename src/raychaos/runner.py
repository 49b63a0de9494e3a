"""``raychaos run``: validate, set up, run the experiment with Chaos Toolkit, judge, exit.

Owns what a pipeline relies on: one clear sentence for bad input (and nothing started), the
rollback on every exit path (SIGINT and SIGTERM become an orderly stop that still rolls back and
writes the summary), progress lines on stderr-friendly stdout, and the exit code: 0 every SLO and
probe passed, 1 an SLO, probe or the hypothesis failed, 2 the run errored or was interrupted.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from raychaos.config import TargetSpec
from raychaos.errors import ConfigError, RaychaosError
from raychaos.experiment import Experiment, load_experiment
from raychaos.redact import redact_text
from raychaos.stopping import StopRequested, StopSwitch

__all__ = ["Progress", "RunOutcome", "run_experiment", "run_experiment_file",
           "verdict_table"]


class Progress:
    """Timestamped progress lines, as chatty as the place they are read in.

    Three kinds of line: *essential* (experiment, results folder, errors, verdict), *phase*
    (hypothesis, method, rollbacks) and *detail* (each activity, set-up steps). ``quiet``
    keeps essential and phase lines. A CI log (stdout not a TTY) keeps everything but prints
    the periodic monitor line every 30 s instead of every 5 s: a 10-minute run should not add
    120 near-identical lines to a build log.
    """

    def __init__(self, quiet: bool = False, stream: Any = None, tty: bool | None = None):
        self.quiet = quiet
        self.stream = stream or sys.stdout
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.t0 = time.monotonic()

    @property
    def tick_every_s(self) -> float | None:
        """Seconds between monitor lines; None: no monitor lines at all."""
        if self.quiet:
            return None
        return 5.0 if self.tty else 30.0

    def __call__(self, message: str, essential: bool = False, phase: bool = False) -> None:
        if self.quiet and not (essential or phase):
            return
        message = redact_text(message)  # progress lines end up in CI logs
        self.stream.write(f"[{time.monotonic() - self.t0:7.1f}s] {message}\n")
        self.stream.flush()


def _ticker(session: Any, say: Callable[[str], None], stop: threading.Event,
            every: float) -> None:
    """Every few seconds: what the monitor sees right now."""
    while not stop.wait(every):
        mon = session.monitor
        if mon is None:
            continue
        last = mon.last
        gcs = "up" if last.get("gcs_up") else "DOWN"
        nodes = f"{last.get('nodes_alive', '?')}/{last.get('nodes_total', '?')}"
        jobs = ",".join(sorted(set(mon.job_states.values()))) or "-"
        say(f"  gcs {gcs} · nodes alive {nodes} · jobs {jobs}")


class _EventPrinter:
    """A Chaos Toolkit event handler printing each activity as it starts and ends."""

    def __init__(self, say: Callable[[str], None], switch: StopSwitch | None = None,
                 timeline: Any = None):
        from chaoslib.run import RunEventHandler

        printer = self

        class Handler(RunEventHandler):  # type: ignore[misc]
            def started(self, experiment: Any, journal: Any) -> None:
                # chaoslib has just put its own SIGTERM/SIGUSR handlers in (they raise
                # exceptions that activities swallow): ours again
                if switch is not None:
                    switch.install()

            def start_hypothesis_before(self, experiment: Any) -> None:
                printer.say("steady state: checking the hypothesis", phase=True)

            def start_method(self, experiment: Any) -> None:
                printer.say("method: injecting faults", phase=True)

            def start_rollbacks(self, experiment: Any) -> None:
                printer.say("rollbacks", phase=True)

            def start_hypothesis_after(self, experiment: Any) -> None:
                printer.say("steady state: checking the hypothesis again", phase=True)

            def start_activity(self, activity: Any) -> None:
                printer.say(f"  {activity.get('type')} {activity.get('name')} ...")
                if timeline is not None:  # which activity was running when something happened
                    timeline.event("activity_start", str(activity.get("name")),
                                   type=activity.get("type"))

            def activity_completed(self, activity: Any, run: Any) -> None:
                status = (run or {}).get("status")
                printer.say(f"  {activity.get('name')}: {status}"
                            + (f" ({run.get('exception')[-1].strip()})"
                               if run and run.get("exception") else ""))

        self.say = say
        self.handler = Handler()


def verdict_table(summary: dict[str, Any]) -> str:
    rows = [("check", "window", "value", "threshold", "verdict")]
    for p in summary.get("probes", []):
        rows.append((f"probe {p['name']}", "-", "-", "-", p["verdict"]))
    for s in summary.get("slos", []):
        value = "not measured" if s["value"] is None else f"{s['value']:g}"
        rows.append((s["name"], s["window"], value, f"{s['op']} {s['threshold']:g}", s["verdict"]))
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass(frozen=True)
class RunOutcome:
    """What a caller that runs several experiments (game days, trials, pytest) needs back."""

    exit_code: int
    run_dir: Path | None = None  # None: nothing was started (bad input, dry run)
    summary: dict[str, Any] = field(default_factory=dict)


def run_experiment_file(path: str | Path, *, slo: str | None = None,
                        results_root: str | None = None, state_root: str | None = None,
                        keep_cluster: bool = True, quiet: bool = False,
                        dry_run: bool = False,
                        target: TargetSpec | dict[str, Any] | None = None) -> int:
    """``raychaos run``: run one experiment file and return its exit code."""
    return run_experiment(path, slo=slo, results_root=results_root, state_root=state_root,
                          keep_cluster=keep_cluster, quiet=quiet, dry_run=dry_run,
                          target=target).exit_code


def run_experiment(path: str | Path, *, slo: str | None = None,
                   results_root: str | Path | None = None, state_root: str | Path | None = None,
                   keep_cluster: bool = True, quiet: bool = False, dry_run: bool = False,
                   target: TargetSpec | dict[str, Any] | None = None) -> RunOutcome:
    """Run one experiment; ``target`` (a game day's spec, or command-line options as a dict)
    replaces the experiment's own target."""
    say = Progress(quiet)
    try:
        exp = load_experiment(path, slo)
        if isinstance(target, dict):
            exp = with_target(exp, target)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {redact_text(problem)}", file=sys.stderr)
        print("nothing was started.", file=sys.stderr)
        return RunOutcome(2, None, {"verdict": "error", "exit_code": 2, "status": "invalid",
                                    "errors": list(exc.problems)})
    if isinstance(target, TargetSpec):
        exp = replace(exp, settings=replace(exp.settings, target=target))
    if dry_run:
        print(describe_plan(exp))
        if exp.settings.target.kind == "kubernetes":
            from raychaos.dryrun import kubernetes_plan

            try:
                print(kubernetes_plan(exp))
            except RaychaosError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return RunOutcome(2)
        return RunOutcome(0)
    from raychaos.session import Session

    session = Session(exp, results_root=results_root, state_root=state_root,
                      keep_cluster=keep_cluster, progress=say)
    logging.getLogger("chaostoolkit").setLevel(logging.WARNING)
    switch = StopSwitch(lambda: _still_applied(session))
    switch.install()
    journal, status, error = None, "completed", None
    stop = threading.Event()
    try:
        say(f"experiment: {exp.title}", essential=True)
        session.start()
        say(f"results: {session.run_dir}", essential=True)
        if say.tick_every_s is not None:
            threading.Thread(target=_ticker, args=(session, say, stop, say.tick_every_s),
                             daemon=True).start()
        _start_abort_watch(session, switch, stop)
        from chaoslib.experiment import run_experiment as run_chaos

        data = dict(exp.data)
        data.setdefault("runtime", {"rollbacks": {"strategy": "always"}})
        journal = run_chaos(data, settings={},
                            event_handlers=[_EventPrinter(say, switch,
                                                          session.run.timeline).handler])
    except StopRequested:
        pass  # the switch knows why; chaoslib lets it through only outside its own run
    except KeyboardInterrupt as exc:
        status, error = "interrupted", exc
    except RaychaosError as exc:
        status, error = "errored", exc
        say(f"error: {exc}", essential=True)
    finally:
        switch.rolling_back()  # first: a second signal must not skip the rollback silently
        stop.set()
        if switch.error is not None:
            status, error = switch.status or "interrupted", switch.error
            say(f"{switch.error}: rolling back", essential=True)
        try:
            summary = session.finish(journal, status, error)
        finally:
            switch.restore()
    print()
    print(verdict_table(summary))
    for err in summary.get("errors", []):
        print(f"error: {redact_text(str(err))}", file=sys.stderr)
    print(f"\nverdict: {summary['verdict'].upper()}  (exit {summary['exit_code']})  "
          f"results: {session.run_dir}")
    return RunOutcome(int(summary["exit_code"]), session.run_dir, summary)


def _still_applied(session: Any) -> str:
    run = session.run
    return ", ".join(f"{r['id']} {r['fault']}" for r in run.ledger.outstanding()) if run else ""


def _start_abort_watch(session: Any, switch: StopSwitch, stop: threading.Event) -> None:
    """The experiment's ``abort_if`` conditions, checked on the timeline twice a second."""
    conditions = session.experiment.settings.abort_if
    if not conditions or session.run is None:
        return
    from raychaos.probes.abort import AbortWatch

    timeline = session.run.timeline
    watch = AbortWatch(conditions, timeline.path, now=session.run.clock.t)

    def on_abort(reason: str) -> None:
        timeline.event("abort", reason)
        switch.abort(reason)

    threading.Thread(target=watch.loop, args=(on_abort, stop), daemon=True,
                     name="raychaos-abort-watch").start()


def with_target(exp: Experiment, override: dict[str, Any]) -> Experiment:
    """The experiment aimed at another target (``--target kubernetes --cluster ...``)."""
    from dataclasses import replace

    from raychaos.config import KubernetesSpec, TargetSpec
    from raychaos.schema import Problems, build

    problems = Problems("--target")
    kind = override.get("kind", "local")
    fields = {k: v for k, v in override.items() if k != "kind" and v is not None}
    spec = exp.settings.target
    if kind == "kubernetes":
        k8s = build(KubernetesSpec, fields, problems, "kubernetes")
        problems.raise_if_any()
        spec = TargetSpec(kind="kubernetes", local=spec.local, kubernetes=k8s)
    elif fields:
        raise ConfigError(f"--target local takes no kubernetes options (got {sorted(fields)})")
    else:
        spec = replace(spec, kind="local")
    return replace(exp, settings=replace(exp.settings, target=spec))


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
    for act in exp.data.get("method", []):
        prov = act.get("provider", {})
        lines.append(f"  {act.get('type')} {act.get('name')}: {prov.get('module')}."
                     f"{prov.get('func')}({prov.get('arguments') or {}})")
    lines.append(f"SLO profile: {exp.slo_path or 'none'}")
    for slo in (exp.slo_profile.slos if exp.slo_profile else []):
        lines.append(f"  {slo.name}: {slo.metric} [{slo.window}] {slo.op} {slo.threshold:g}")
    lines.append("dry run: nothing was started.")
    return "\n".join(lines)
