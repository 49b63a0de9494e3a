"""The loads of a run: started before the experiment, stopped after the recovery window.

Ray loads are jobs on the cluster (drivers on workers: a driver on the head dies with it); their
stats lines come back through the driver logs, which the monitor reads. Locust loads run as a
separate process group (:mod:`raychaos.loads.locust_runner`) — never imported here — and their
stats file is read by the monitor too. A Serve application a load needs is deployed first, and
removed afterwards only when this run deployed it.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from raychaos.config.experiment import Experiment, resolve_path
from raychaos.context import Run
from raychaos.errors import RaychaosError, TargetUnavailable
from raychaos.observe.monitor import Monitor
from raychaos.probes.jobs import run_job
from raychaos.results.store import read_timeline
from raychaos.run.progress import Say

__all__ = ["LoadSet"]


class LoadSet:
    """Every load of one run."""

    def __init__(self, experiment: Experiment, run: Run, monitor: Monitor, say: Say):
        self.experiment, self.run, self.monitor, self.say = experiment, run, monitor, say
        self.locusts: list[Any] = []

    def start(self) -> None:
        run = self.run
        for load in run.settings.loads:
            script = resolve_path(load.script, self.experiment.path.parent).resolve()
            if load.kind == "ray_job":
                ramp = load.ramp
                ramp_args = ["--ramp", f"{ramp.start:g},{ramp.step:g},{ramp.step_s:g},"
                                       f"{ramp.steps}"] if ramp else []
                entry = " ".join(["python", shlex.quote(script.name),
                                  *map(shlex.quote, [*load.args, *ramp_args]),
                                  "--name", shlex.quote(load.name)])
                job_id = run.target.submit_job(entry, working_dir=str(script.parent),
                                               on_driver_node=load.on_driver_node,
                                               metadata={"raychaos_run": run.run_id})
                run.jobs[load.name] = job_id
                self.say(f"load {load.name}: Ray job {job_id}")
                continue
            from raychaos.loads.locust_runner import LocustProcess

            if load.serve_app and run.target.owner().get("serves_own_apps"):
                self.say(f"load {load.name}: the target serves its own applications; "
                         f"deploying (and removing) nothing")
            elif load.serve_app:
                self._deploy_serve(load.serve_app)
            host = (run.target.serve_url() if load.host == "serve"
                    else load.host or run.target.dashboard_url())
            proc = LocustProcess(locustfile=str(script), host=host, users=load.users,
                                 spawn_rate=load.spawn_rate, duration_s=3600,
                                 workers=load.workers, name=load.name,
                                 stats_path=run.run_dir / f"locust-{load.name}.log")
            proc.start()
            self.locusts.append(proc)
            self.monitor.extra_sources.append(proc.poll_stats)
            self.say(f"load {load.name}: Locust, {load.users} users against {host}")

    def _deploy_serve(self, app: str) -> None:
        self.say(f"deploying Serve application {app}")
        status, lines = run_job(self.run.target,
                                f"python serve_deploy.py --app {shlex.quote(app)}", timeout=300)
        if status != "SUCCEEDED":
            raise TargetUnavailable(f"the Serve application {app} did not become ready "
                                    f"(job {status}): {' | '.join(lines[-3:])}")
        self.run.extras["serve_app"] = app

    def settle(self) -> None:
        """Wait until every load reports, then hold the baseline for ``settle_s``."""
        run = self.run
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

    def stop(self) -> None:
        run = self.run
        for proc in self.locusts:
            try:
                proc.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                run.errors.append(f"stopping Locust: {exc}")
        for job_id in run.jobs.values():
            run.target.stop_job(job_id)
        if run.extras.get("serve_app"):
            try:  # Serve's proxies and replicas would otherwise keep using the cluster's CPUs
                run_job(run.target, "python serve_deploy.py --shutdown", timeout=60)
            except RaychaosError as exc:
                run.errors.append(f"removing the Serve application: {exc}")
