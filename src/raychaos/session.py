"""One run's lifecycle around Chaos Toolkit: set up before the experiment, judge after it.

``start`` brings the target up (the local cluster is started if none is), opens the results
folder, ledger and timeline, starts the monitor and the loads, creates the sentinel actor and
lets the baseline settle. ``finish`` always runs — after success, failure, Ctrl-C or SIGTERM —
and undoes every outstanding fault first, then stops loads and monitor, judges the SLOs and
writes ``summary.json`` (and the journal, JUnit and HTML report). The raychaos control calls
these for ``chaos run``; ``raychaos run`` calls them itself to own errors and exit codes.
"""

from __future__ import annotations

import shlex
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from raychaos.errors import RaychaosError, TargetUnavailable
from raychaos.experiment import Experiment, resolve_path
from raychaos.faults.rollback import undo_ledger
from raychaos.probes.monitor import Monitor
from raychaos.probes.slo import evaluate
from raychaos.results import (Clock, Ledger, Timeline, new_run_dir, read_timeline,
                              write_json_atomic)
from raychaos.runtime import Run, activate, deactivate, format_exc_short
from raychaos.targets import make_target

__all__ = ["Session"]

EXIT = {"pass": 0, "fail": 1, "error": 2}


class Session:
    def __init__(self, experiment: Experiment, results_root: str | Path | None = None,
                 state_root: str | Path | None = None, keep_cluster: bool = True,
                 progress: Callable[[str], None] | None = None):
        self.experiment = experiment
        self.results_root = Path(results_root or experiment.settings.results_dir)
        self.state_root = state_root
        self.keep_cluster = keep_cluster
        self.say = progress or (lambda _m: None)
        self.run: Run | None = None
        self.monitor: Monitor | None = None
        self.started_cluster = False
        self.started_at = time.time()
        self.locusts: list[Any] = []
        self.run_dir: Path | None = None
        self.reason: str | None = None  # why the run stopped early (signal, abort_if, error)
        self.lock: Any = None

    # --- start -----------------------------------------------------------------------------
    def start(self) -> Run:
        exp, settings = self.experiment, self.experiment.settings
        self.run_dir = new_run_dir(self.results_root, exp.slug)
        clock = Clock()
        timeline = Timeline(self.run_dir / "timeline.jsonl", clock)
        timeline.event("phase", "start", experiment=exp.title)
        target = make_target(settings.target, state_root=self.state_root)
        if settings.target.kind == "local":
            target.progress = self.say  # type: ignore[attr-defined]
            if not target.is_up():  # type: ignore[attr-defined]
                self.say("no local cluster is up: starting one")
                target.up()  # type: ignore[attr-defined]
                self.started_cluster = True
        run_id = f"{self.run_dir.name}-{uuid.uuid4().hex[:6]}"
        if hasattr(target, "run_id"):  # objects a target creates carry the run's id as a label
            target.run_id = run_id
        target.connect()
        make_lock = getattr(target, "run_lock", None)  # one run at a time per target
        if make_lock is not None:
            self.lock = make_lock()
            self.lock.acquire(run_id)
            if self.lock.taken_over:
                timeline.event("lock_taken_over", "stale", holder=self.lock.taken_over)
        self._preflight(target)
        ledger = Ledger(self.run_dir / "ledger.json", run_id, target.describe())
        run = Run(run_id=run_id, run_dir=self.run_dir, settings=settings, target=target,
                  clock=clock, timeline=timeline, ledger=ledger, title=exp.title,
                  slo_profile=exp.slo_profile)
        self.run = run
        activate(run)
        self.monitor = Monitor(target, timeline, clock, settings.monitor.interval_s,
                               jobs=lambda: dict(run.jobs))
        self.monitor.start()
        self._start_loads(run)
        if settings.sentinel:
            from raychaos.probes.actors import create_sentinel

            self.say("creating the sentinel actor")
            run.extras["sentinel"] = create_sentinel(target)
        self._settle(run)
        timeline.event("phase", "experiment")
        return run

    def _preflight(self, target: Any) -> None:
        """Faults whose arguments need the live cluster (selectors) check them before loads."""
        import importlib

        for act in self.experiment.data.get("method") or []:
            prov = (act.get("provider") or {}) if isinstance(act, dict) else {}
            module = prov.get("module") or ""
            if prov.get("type") != "python" or not module.startswith("raychaos.faults"):
                continue
            func = getattr(importlib.import_module(module), prov.get("func", ""), None)
            check = getattr(func, "preflight", None)
            if check is not None:
                check(target, **(prov.get("arguments") or {}))

    def _start_loads(self, run: Run) -> None:
        for load in run.settings.loads:
            script = resolve_path(load.script, self.experiment.path.parent).resolve()
            if load.kind == "ray_job":
                entry = " ".join(["python", shlex.quote(script.name),
                                  *map(shlex.quote, load.args), "--name", shlex.quote(load.name)])
                job_id = run.target.submit_job(entry, working_dir=str(script.parent),
                                               on_driver_node=load.on_driver_node,
                                               metadata={"raychaos_run": run.run_id})
                run.jobs[load.name] = job_id
                self.say(f"load {load.name}: Ray job {job_id}")
            else:
                from raychaos.loads.locust_runner import LocustProcess

                if load.serve_app:
                    self._deploy_serve(run, load.serve_app, script.parent)
                host = (run.target.serve_url() if load.host == "serve"
                        else load.host or run.target.dashboard_url())
                assert self.run_dir is not None
                proc = LocustProcess(locustfile=str(script), host=host, users=load.users,
                                     spawn_rate=load.spawn_rate, duration_s=3600,
                                     workers=load.workers, name=load.name,
                                     stats_path=self.run_dir / f"locust-{load.name}.log")
                proc.start()
                self.locusts.append(proc)
                assert self.monitor is not None
                self.monitor.extra_sources.append(proc.poll_stats)
                self.say(f"load {load.name}: Locust, {load.users} users against {host}")

    def _deploy_serve(self, run: Run, app: str, loads_dir: Path) -> None:
        from raychaos.probes.jobs import run_job

        self.say(f"deploying Serve application {app}")
        status, lines = run_job(run.target, f"python serve_deploy.py --app {shlex.quote(app)}",
                                timeout=300)
        if status != "SUCCEEDED":
            raise TargetUnavailable(f"the Serve application {app} did not become ready "
                                    f"(job {status}): {' | '.join(lines[-3:])}")
        run.extras["serve_app"] = app

    def _settle(self, run: Run) -> None:
        if not run.settings.loads:
            time.sleep(min(run.settings.monitor.settle_s, 2.0))
            return
        deadline = time.monotonic() + 120
        self.say("waiting for the loads to report")
        while time.monotonic() < deadline:
            seen = {r.get("load") for r in read_timeline(run.timeline.path)
                    if r.get("kind") == "load" and r.get("count", 0) > 0}
            if all(load.name in seen for load in run.settings.loads):
                break
            dead = [n for n, j in run.jobs.items()
                    if run.target.job_status(j) in ("FAILED", "STOPPED", "MISSING")]
            if dead:
                raise TargetUnavailable(f"load job(s) {', '.join(dead)} ended before the "
                                        "experiment started; see their logs on the cluster")
            time.sleep(0.5)
        self.say(f"baseline: {run.settings.monitor.settle_s:g}s")
        time.sleep(run.settings.monitor.settle_s)

    # --- finish ----------------------------------------------------------------------------
    def finish(self, journal: dict[str, Any] | None, status: str,
               error: BaseException | None = None) -> dict[str, Any]:
        run = self.run
        errors: list[str] = [format_exc_short(error)] if error else []
        self.reason = str(error) if error is not None and status != "completed" else None
        if run is None:
            self._release()
            return self._early_summary(status, errors)
        try:
            run.timeline.event("phase", "finish", status=status)
            try:
                if run.ledger.outstanding():
                    self.say("rolling back what is still applied")
                undo_ledger(run.ledger, run.target, run.timeline)
            except RaychaosError as exc:
                errors.append(str(exc))
            if status == "completed":  # observe the recovery window before stopping the loads
                time.sleep(run.settings.monitor.recovery_window_s)
            self._stop_loads(run)
            if self.monitor:
                self.monitor.stop()
            summary = self._summarize(run, journal, status, errors)
            write_json_atomic(run.run_dir / "summary.json", summary)
            if journal is not None:
                write_json_atomic(run.run_dir / "journal.json", journal)
            self._extras(run.run_dir)
            return summary
        finally:
            run.timeline.close()
            deactivate()
            self._release()
            if self.started_cluster and not self.keep_cluster:
                self.say("taking the local cluster down")
                run.target.down()  # type: ignore[attr-defined]

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def _stop_loads(self, run: Run) -> None:
        for proc in self.locusts:
            try:
                proc.stop()
            except Exception as exc:  # keep stopping the rest
                run.errors.append(f"stopping Locust: {exc}")
        for job_id in run.jobs.values():
            run.target.stop_job(job_id)
        if run.extras.get("serve_app"):
            from raychaos.probes.jobs import run_job

            try:  # Serve's proxies and replicas would otherwise keep using the cluster's CPUs
                run_job(run.target, "python serve_deploy.py --shutdown", timeout=60)
            except Exception as exc:
                run.errors.append(f"removing the Serve application: {exc}")

    def _summarize(self, run: Run, journal: dict[str, Any] | None, status: str,
                   errors: list[str]) -> dict[str, Any]:
        records = read_timeline(run.timeline.path)
        slos, wins = evaluate(run.slo_profile, records, run.probes)
        faults = run.ledger.faults
        errors = errors + run.errors + [f"fault {f['id']} {f['fault']}: {f['error']}"
                                        for f in faults if f.get("error")]
        # a probe that could not observe (target unreachable) makes no pass: the run errored
        errors += [f"probe {p['name']}: could not observe {p['evidence'].get('unobserved')}"
                   for p in run.probes if p["verdict"] == "unknown"]
        deviated = bool(journal and journal.get("deviated"))
        if journal and journal.get("status") not in (None, "completed") and status == "completed":
            status = "failed"
        if status in ("interrupted", "aborted", "errored") or errors:
            verdict = "error"
        elif deviated or any(s["verdict"] == "fail" for s in slos) or any(
                p["verdict"] == "fail" for p in run.probes):
            verdict = "fail"
        else:
            verdict = "pass"
        return {
            "experiment": run.title, "slug": self.experiment.slug, "run_id": run.run_id,
            "status": status, "reason": self.reason, "verdict": verdict,
            "exit_code": EXIT[verdict], "started_at": run.clock.wall0, "ended_at": time.time(),
            "duration_s": round(run.clock.t(), 3), "target": run.target.describe(),
            "hypothesis": {"deviated": deviated,
                           "journal_status": journal.get("status") if journal else None},
            "windows": wins, "probes": run.probes, "slos": slos, "faults": faults,
            "monitor": {"interval_s": run.settings.monitor.interval_s,
                        "samples": self.monitor.samples if self.monitor else 0,
                        "cpu_seconds": round(self.monitor.cpu_seconds, 3) if self.monitor else 0},
            "slo_profile": str(self.experiment.slo_path) if self.experiment.slo_path else None,
            "errors": errors,
        }

    def _early_summary(self, status: str, errors: list[str]) -> dict[str, Any]:
        summary = {"experiment": self.experiment.title, "slug": self.experiment.slug,
                   "status": status, "reason": self.reason, "verdict": "error", "exit_code": 2,
                   "errors": errors,
                   "probes": [], "slos": [], "faults": []}
        if self.run_dir is not None:
            write_json_atomic(self.run_dir / "summary.json", summary)
        return summary

    def _extras(self, run_dir: Path) -> None:
        """JUnit and the HTML report; their failure must not hide the verdict."""
        for module, func in (("raychaos.junit", "write_junit"), ("raychaos.report", "build_report")):
            try:
                mod = __import__(module, fromlist=[func])
                getattr(mod, func)(run_dir)
            except Exception as exc:  # pragma: no cover - reported, not fatal
                self.say(f"could not write {func.split('_')[-1]}: {exc}")
