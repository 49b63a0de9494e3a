"""One run's whole lifecycle — the one owner, whichever way the run was started.

``raychaos run``, ``chaos run`` and the pytest plugin all go through the raychaos Chaos Toolkit
control (:mod:`raychaos.control`), which drives a :class:`Session`:

- ``start`` (before the experiment): the stop switch (SIGINT/SIGTERM become an orderly stop),
  the results folder, timeline and ledger, the target (a local cluster is started if none is
  up, or the one that is up reused once it is proven clean), the run lock, the live preflight of
  every fault, the monitor, the loads, the sentinel, the baseline, the progress ticker and the
  ``abort_if`` watcher;
- ``phase``/``activity_started``/``activity_ended`` (during it): progress lines and timeline
  events for each phase and activity;
- ``finish`` (after it, always — success, failure, Ctrl-C, SIGTERM, abort, a start that failed):
  undo every outstanding fault, observe the recovery window (until the loads are back,
  :mod:`raychaos.run.recovery_window`), stop loads and monitor, judge
  (:mod:`raychaos.run.verdict`), write ``summary.json``, the journal (marked so ``chaos run``
  exits non-zero on anything but a pass), JUnit and the report, release the lock, and print the
  verdict table and the seconds each phase took (:mod:`raychaos.run.phases`, also in
  ``summary.json``).
"""

from __future__ import annotations

import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from raychaos.config.experiment import Experiment, fault_activities
from raychaos.context import Run, activate, deactivate, format_exc_short
from raychaos.errors import RaychaosError
from raychaos.faults.rollback import undo_ledger
from raychaos.observe.abort import AbortWatch
from raychaos.observe.monitor import Monitor
from raychaos.observe.watch import ResourceWatch
from raychaos.results.redact import redact_text
from raychaos.results.store import Clock, Ev, Ledger, Timeline, new_run_dir, write_json_atomic
from raychaos.run.console import RunConsole, open_console
from raychaos.run.loads import LoadSet
from raychaos.run.phases import Phases, format_phases
from raychaos.run.progress import Progress, Say, Ticker, verdict_table
from raychaos.run.recovery_window import observe_recovery
from raychaos.run.resources import preflight_review, start_watch
from raychaos.run.stopping import StopSwitch
from raychaos.run.verdict import early_summary, mark_journal, summarize
from raychaos.targets import make_target
from raychaos.targets.base import RunLock, Target

__all__ = ["Session", "hand_over", "take_handed_over"]

_handed_over: Session | None = None


def hand_over(session: Session | None) -> None:
    """Have the next experiment Chaos Toolkit runs in this process use ``session``."""
    global _handed_over
    _handed_over = session


def take_handed_over() -> Session | None:
    """The session :func:`hand_over` left, once (the control takes it)."""
    global _handed_over
    session, _handed_over = _handed_over, None
    return session


class Session:
    def __init__(self, experiment: Experiment, results_root: str | Path | None = None,
                 state_root: str | Path | None = None, keep_cluster: bool = True,
                 progress: Say | None = None):
        self.experiment = experiment
        self.results_root = Path(results_root or experiment.settings.results_dir)
        self.state_root = state_root
        self.keep_cluster = keep_cluster
        self.say: Say = progress or Progress()
        self.switch = StopSwitch(self._still_applied)
        self.run: Run | None = None
        self.target: Target | None = None
        self.monitor: Monitor | None = None
        self.watch: ResourceWatch | None = None  # GPU stranding, object-store placement
        self.loads: LoadSet | None = None
        self.lock: RunLock | None = None
        self.started_cluster = False
        self.run_dir: Path | None = None
        self.reason: str | None = None  # why the run stopped early (signal, abort_if, error)
        self.error: BaseException | None = None  # what stopped the start or the run
        self.summary: dict[str, Any] | None = None
        self.console: RunConsole | None = None  # fd 2 -> harness.log, the status line
        self._stop = threading.Event()
        self._ticker: Ticker | None = None
        self._hypotheses = 0
        self.phases = Phases()  # seconds per phase: summary.json and the console's last lines
        self._ctk_phase = "start"  # the Chaos Toolkit phase an activity belongs to

    # --- start -------------------------------------------------------------------------------
    def start(self) -> Run:
        """Everything before the experiment; raises RaychaosError (then ``finish`` still runs)."""
        self.switch.install()
        self.phases.enter("start")
        exp, settings = self.experiment, self.experiment.settings
        self.say(f"experiment: {exp.title}", essential=True)
        self.run_dir = new_run_dir(self.results_root, exp.slug)
        clock = Clock()
        timeline = Timeline(self.run_dir / "timeline.jsonl", clock)
        self.console = open_console(self.run_dir, timeline, self.say)
        timeline.event(Ev.PHASE, "start", experiment=exp.title)
        self.phases.enter("target_up")
        target = make_target(settings.target, state_root=self.state_root)
        self.target = target
        run_id = f"{self.run_dir.name}-{uuid.uuid4().hex[:6]}"
        target.run_id = run_id  # objects a target creates carry the run's id as a label
        self.started_cluster = target.ensure_up(self.say)  # a warm restore takes the run lock
        target.connect()
        self.lock = target.run_lock()  # one run at a time per target (released on every path)
        self.lock.acquire(run_id)
        if self.lock.taken_over:
            timeline.event(Ev.LOCK_TAKEN_OVER, "stale", holder=self.lock.taken_over)
        self.phases.enter("preflight")
        for _where, func, args in fault_activities(exp):  # selectors need the live cluster
            target.preflight(func, args)
        review = preflight_review(target, self.say)  # findings go to the summary
        described = target.describe()
        ledger = Ledger(self.run_dir / "ledger.json", run_id, described)
        run = Run(run_id=run_id, run_dir=self.run_dir, settings=settings, target=target,
                  clock=clock, timeline=timeline, ledger=ledger, title=exp.title,
                  slo_profile=exp.slo_profile, stopping=self.switch.stopped)
        self.run = run
        if review is not None:
            run.extras["review"] = review
        activate(run)
        self.say(f"results: {self.run_dir}", essential=True)
        self.monitor = Monitor(target, timeline, clock, settings.monitor.interval_s,
                               jobs=lambda: dict(run.jobs))
        self.monitor.start()
        self.watch = start_watch(exp, run)
        # what a run leaves for the next one (Serve) stays when the cluster is kept warm, or
        # when it goes down with this run anyway
        cluster = described.get("cluster")  # local: its readiness; Kubernetes: a name
        keep_serve = bool(isinstance(cluster, dict) and cluster.get("kept_warm")) or (
            self.started_cluster and not self.keep_cluster)
        self.loads = LoadSet(exp, run, self.monitor, self.say, self.phases, keep_serve)
        self.loads.start()
        self.loads.settle()
        from raychaos.probes.consistency import snapshot_job_history

        run.extras["job_history_before"] = snapshot_job_history(target)  # before any fault
        self.phases.enter("experiment")
        timeline.event(Ev.PHASE, "experiment")
        self._start_watchers(run)
        return run

    def _start_watchers(self, run: Run) -> None:
        every = getattr(self.say, "tick_every_s", None)
        if every:
            self._ticker = Ticker(self._monitor_line, self.say, every).start()
        if run.settings.abort_if:
            watch = AbortWatch(run.settings.abort_if, run.timeline.path, now=run.clock.t)

            def on_abort(reason: str) -> None:
                run.timeline.event(Ev.ABORT, reason)
                self.switch.abort(reason)

            threading.Thread(target=watch.loop, args=(on_abort, self._stop), daemon=True,
                             name="raychaos-abort-watch").start()

    def _monitor_line(self) -> str | None:
        mon = self.monitor
        if mon is None:
            return None
        last = mon.last
        gcs = "up" if last.get("gcs_up") else "DOWN"
        nodes = f"{last.get('nodes_alive', '?')}/{last.get('nodes_total', '?')}"
        jobs = ",".join(sorted(set(mon.job_states.values()))) or "-"
        return f"  gcs {gcs} · nodes alive {nodes} · jobs {jobs}"

    # --- during the experiment ---------------------------------------------------------------
    def phase(self, name: str) -> None:
        """A Chaos Toolkit phase begins: hypothesis, method or rollbacks."""
        if name == "hypothesis":
            self._hypotheses += 1
            text = ("steady state: checking the hypothesis" if self._hypotheses == 1
                    else "steady state: checking the hypothesis again")
        elif name == "method":
            text = "method: injecting faults"
        else:
            text = "rollbacks"
            self.switch.rolling_back()  # a stop request no longer cuts anything short
        self._ctk_phase = self.phases.enter(name)
        if self.run is not None:  # first: the progress line then shows the new phase
            self.run.timeline.event(Ev.PHASE, name)
        self.say(text, phase=True)

    def activity_started(self, activity: dict[str, Any]) -> None:
        self.say(f"  {activity.get('type')} {activity.get('name')} ...")
        self.phases.enter(f"{activity.get('type')} {activity.get('name')}")
        if self.run is not None:
            self.run.timeline.event(Ev.ACTIVITY_START, str(activity.get("name")),
                                    type=activity.get("type"))

    def activity_ended(self, activity: dict[str, Any], state: dict[str, Any] | None) -> None:
        status = (state or {}).get("status")
        exc = (state or {}).get("exception")
        self.say(f"  {activity.get('name')}: {status}"
                 + (f" ({str(exc[-1]).strip()})" if exc else ""))
        self.phases.resume(self._ctk_phase)
        if self.run is not None:
            self.run.timeline.event(Ev.ACTIVITY_END, str(activity.get("name")),
                                    type=activity.get("type"), status=status)

    def failed_to_start(self, error: BaseException) -> None:
        self.error = error
        self.say(f"error: {error}", essential=True)

    # --- finish ------------------------------------------------------------------------------
    def finish(self, journal: dict[str, Any] | None) -> dict[str, Any]:
        """Roll back, judge and write everything; idempotent (a second call returns the same)."""
        if self.summary is not None:
            return self.summary
        self.switch.rolling_back()  # first: a stop request must not skip the rollback silently
        self.switch.stopped.set()  # a fault still cycling in a background thread ends now
        self._stop.set()
        if self._ticker is not None:
            self._ticker.stop()
        status, error = self._status(journal)
        if self.switch.error is not None:
            self.say(f"{self.switch.error}: rolling back", essential=True)
        errors: list[str] = [format_exc_short(error)] if error else []
        self.reason = str(error) if error is not None and status != "completed" else None
        try:
            self.summary = self._finish(journal, status, errors)
        finally:
            self.switch.restore()
            if self.console is not None:
                self.console.close()
        self.phases.stop()  # the teardown is over too: the summary gets every phase
        self.summary["phases"] = self.phases.as_dict()
        if self.run_dir is not None and (self.run_dir / "summary.json").exists():
            write_json_atomic(self.run_dir / "summary.json", self.summary)
        self._print_verdict(self.summary)
        return self.summary

    def _status(self, journal: dict[str, Any] | None) -> tuple[str, BaseException | None]:
        if self.switch.error is not None:
            return self.switch.status or "interrupted", self.switch.error
        if self.error is not None:
            return "errored", self.error
        if journal is None:
            return "errored", RaychaosError("the experiment did not run")
        if journal.get("status") == "interrupted":
            return "interrupted", RaychaosError("Chaos Toolkit interrupted the experiment")
        return "completed", None

    def _finish(self, journal: dict[str, Any] | None, status: str,
                errors: list[str]) -> dict[str, Any]:
        run = self.run
        if run is None:
            self._release()
            summary = early_summary(self.experiment, status, self.reason, errors)
            if self.run_dir is not None:
                write_json_atomic(self.run_dir / "summary.json", summary)
            self._down()
            return summary
        try:
            run.timeline.event(Ev.PHASE, "finish", status=status)
            self.phases.enter("undo")
            try:
                if run.ledger.outstanding():
                    self.say("rolling back what is still applied")
                undo_ledger(run.ledger, run.target, run.timeline)
            except RaychaosError as exc:
                errors.append(str(exc))
            if status == "completed":  # observe the recovery window before stopping the loads
                self.phases.enter("recovery_window")
                self.say(f"recovery window: watching for the loads back at baseline (at most "
                         f"{run.settings.monitor.recovery_window_s:g}s)")
                window = observe_recovery(run, run.settings.monitor.recovery_window_s)
                self.say(f"recovery window: {window['ended']} after {window['waited_s']:g}s "
                         f"(bound {window['bound_s']:g}s)")
            self.phases.enter("loads_stop")
            if self.loads is not None:
                run.timeline.event(Ev.LOADS_STOPPED)  # load statistics end here
                self.loads.stop()
            self.phases.enter("monitor_stop")
            if self.monitor:
                self.monitor.stop()
            if self.watch is not None:
                self.watch.stop()
            self.phases.enter("verdict")
            summary = summarize(self.experiment, run, journal, status, errors, self.reason,
                                self.monitor)
            summary["phases"] = self.phases.as_dict()
            write_json_atomic(run.run_dir / "summary.json", summary)
            if journal is not None:
                mark_journal(journal, summary, str(run.run_dir))
                write_json_atomic(run.run_dir / "journal.json", journal)
            self.phases.enter("report")
            self._extras(run.run_dir)
            return summary
        finally:
            self.phases.enter("teardown")
            run.timeline.close()
            deactivate()
            self._release()
            self._down()

    def _down(self) -> None:
        if self.started_cluster and not self.keep_cluster and self.target is not None:
            self.say("taking the local cluster down")
            self.target.down()

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()
        if self.target is not None:
            self.target.close()

    def _still_applied(self) -> str:
        run = self.run
        return ", ".join(f"{r['id']} {r['fault']}" for r in run.ledger.outstanding()) \
            if run else ""

    def _extras(self, run_dir: Path) -> None:
        """JUnit and the HTML report; their failure must not hide the verdict."""
        from raychaos.results.junit import write_junit
        from raychaos.results.openmetrics import write_openmetrics
        from raychaos.results.report import build_report

        for write in (write_junit, build_report, write_openmetrics):
            try:
                write(run_dir)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                self.say(f"could not write {write.__name__}: {exc}")

    def _print_verdict(self, summary: dict[str, Any]) -> None:
        print()
        print(verdict_table(summary))
        for fail in summary.get("failures", []):
            print(f"failed: {redact_text(str(fail))}")
        for err in summary.get("errors", []):
            print(f"error: {redact_text(str(err))}", file=sys.stderr)
        for unsure in summary.get("inconclusive") or []:
            print(f"inconclusive: {redact_text(str(unsure))}")
        if summary["verdict"] == "inconclusive":
            print("inconclusive: the data could not support a verdict (too few samples, or "
                  "host noise the reasons name); nothing failed; exit 3")
        if summary.get("phases"):
            print(format_phases(summary["phases"], self.phases.total()))
        print(f"\nverdict: {summary['verdict'].upper()}  (exit {summary['exit_code']})  "
              f"results: {self.run_dir}", flush=True)
