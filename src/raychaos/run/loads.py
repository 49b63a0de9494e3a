"""The loads of a run: started before the experiment, stopped after the recovery window.

Ray loads are jobs on the cluster (drivers on workers: a driver on the head dies with it); their
stats lines come back through the driver logs, which the monitor reads. Locust loads run as a
separate process group (:mod:`raychaos.loads.locust_runner`) — never imported here — and their
stats file is read by the monitor too. The sentinel's watcher job (:mod:`raychaos.probes.actors`)
starts with them, so its driver comes up while the loads do instead of after them.

A Serve application a load needs is deployed once per cluster (:mod:`raychaos.run.serve`): on a
cluster kept warm between runs it stays for the next run, which reuses it when it is the same
application; elsewhere it is removed afterwards when this run deployed it.
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
from raychaos.results.store import Ev, read_timeline
from raychaos.run.phases import Phases
from raychaos.run.progress import Say
from raychaos.run.serve import ensure_serve, retire_serve

__all__ = ["LoadSet", "locust_env"]

REPORT_TIMEOUT_S = 120.0
STOP_GRACE_S = 3.0
#: How long a stopped load job may stay PENDING/RUNNING before the run says it was left behind.
#: Ray's job supervisor sends SIGTERM, then SIGKILL after a few seconds: a job the Jobs API
#: really stopped is STOPPED well inside this.
STOP_CONFIRM_S = 30.0
#: A stop request sent while the dashboard blinked is lost: it is sent again this often.
STOP_RESEND_S = 5.0
ACTIVE = ("PENDING", "RUNNING")


def stop_and_confirm(target: Any, jobs: dict[str, str], within_s: float | None = None,
                     resend_s: float = STOP_RESEND_S) -> dict[str, dict[str, Any]]:
    """Stop every job (name → job ID) and wait until none is PENDING or RUNNING, sending the
    stop again every ``resend_s`` (one sent while the dashboard was being replaced is lost).
    Returns, per name: job ID, last status read, stop requests sent (and the seconds spent in
    them), and the seconds until it was no longer active (``None``: still active after
    ``within_s``). A job whose status cannot be read (``UNKNOWN``: the cluster does not
    answer) is not waited for: nothing can confirm it."""
    t0 = time.monotonic()
    out: dict[str, dict[str, Any]] = {
        n: {"job_id": j, "status": None, "stop_requests": 0, "request_s": 0.0, "s": None}
        for n, j in jobs.items()}

    def send(names: list[str]) -> None:
        for n in names:
            sent = time.monotonic()
            target.stop_job(out[n]["job_id"])
            out[n]["stop_requests"] += 1
            out[n]["request_s"] = round(out[n]["request_s"] + time.monotonic() - sent, 2)

    send(list(out))
    deadline = t0 + (STOP_CONFIRM_S if within_s is None else within_s)
    resend = t0 + resend_s
    while True:
        active = []
        for n, rec in out.items():
            if rec["s"] is not None:
                continue
            rec["status"] = target.job_status(rec["job_id"])
            if rec["status"] in ACTIVE:
                active.append(n)
            else:
                rec["s"] = round(time.monotonic() - t0, 2)
        if not active or time.monotonic() >= deadline:
            return out
        if time.monotonic() >= resend:
            resend = time.monotonic() + resend_s
            send(active)
        time.sleep(min(0.5, resend_s))


def locust_env(rate: float | None) -> dict[str, str]:
    """The environment a Locust load's rate reaches its locustfile through (``RAYCHAOS_RATE``:
    requests per second for the whole load; absent: closed loop)."""
    return {} if rate is None else {"RAYCHAOS_RATE": f"{rate:g}"}


class LoadSet:
    """Every load of one run (and the sentinel's watcher)."""

    def __init__(self, experiment: Experiment, run: Run, monitor: Monitor, say: Say,
                 phases: Phases | None = None, keep_serve: bool = False):
        self.experiment, self.run, self.monitor, self.say = experiment, run, monitor, say
        self.phases = phases or Phases()
        self.keep_serve = keep_serve  # the cluster stays warm: leave Serve for the next run
        self.locusts: list[Any] = []

    def start(self) -> None:
        run = self.run
        self.phases.enter("loads_up")
        for load in run.settings.loads:
            if load.kind != "ray_job":
                continue
            script = resolve_path(load.script, self.experiment.path.parent).resolve()
            ramp = load.ramp
            ramp_args = ["--ramp", f"{ramp.start:g},{ramp.step:g},{ramp.step_s:g},"
                                   f"{ramp.steps},{ramp.warmup_s:g}"] if ramp else []
            entry = " ".join(["python", shlex.quote(script.name),
                              *map(shlex.quote, [*load.args, *ramp_args]),
                              "--name", shlex.quote(load.name)])
            job_id = run.target.submit_job(entry, working_dir=str(script.parent),
                                           on_driver_node=load.on_driver_node,
                                           metadata={"raychaos_run": run.run_id})
            run.jobs[load.name] = job_id
            self.say(f"load {load.name}: Ray job {job_id}")
        if run.settings.sentinel:
            from raychaos.probes.actors import start_sentinel

            self.say("creating the sentinel actor (its watcher job starts with the loads)")
            run.extras["sentinel_watch"] = start_sentinel(run.target)
        apps = {load.serve_app for load in run.settings.loads if load.serve_app}
        if run.target.owner().get("serves_own_apps"):  # a RayService: its apps are the user's
            if apps:
                self.say("the target serves its own applications; deploying (and removing) "
                         "nothing")
        elif apps:
            for app in sorted(apps):
                self._serve(app)
        elif self._retire_serve():
            self.say("removed the Serve application an earlier run left (this run needs none)")
        self.phases.enter("loads_up")
        for load in run.settings.loads:
            if load.kind == "ray_job":
                continue
            from raychaos.loads.locust_runner import LocustProcess

            script = resolve_path(load.script, self.experiment.path.parent).resolve()
            host = (run.target.serve_url() if load.host == "serve"
                    else load.host or run.target.dashboard_url())
            proc = LocustProcess(locustfile=str(script), host=host, users=load.users,
                                 spawn_rate=load.spawn_rate, duration_s=3600,
                                 workers=load.workers, name=load.name,
                                 stats_path=run.run_dir / f"locust-{load.name}.log",
                                 env=locust_env(load.rate))
            proc.start()
            self.locusts.append(proc)
            self.monitor.extra_sources.append(proc.poll_stats)
            pace = f", open loop at {load.rate:g}/s" if load.rate is not None else ""
            self.say(f"load {load.name}: Locust, {load.users} users{pace} against {host}")

    def _retire_serve(self) -> bool:
        """Remove a Serve application a previous run left, when this run needs none; a failure
        is said, not fatal (this run's loads do not depend on it)."""
        self.phases.enter("serve_remove")
        try:
            return retire_serve(self.run.target)
        except RaychaosError as exc:
            self.say(f"could not remove an earlier run's Serve application: {exc}")
            return False

    def _serve(self, app: str) -> None:
        self.phases.enter("serve_deploy")
        result = ensure_serve(self.run.target, app)
        if result["reused"]:
            self.say(f"Serve application {app} is already deployed ({result['name']}): "
                     "reusing it")
        else:
            took = result.get("took") or {}
            self.say(f"deployed Serve application {app} ({result['name']}; "
                     + ", ".join(f"{k.removesuffix('_s')} {v:g}s" for k, v in took.items())
                     + ")")
            self.run.extras["serve_app"] = app
        self.run.extras["serve"] = result

    def settle(self) -> None:
        """Wait until every load reports and the sentinel exists, then hold the baseline for
        ``settle_s`` (the baseline window: a documented wait, not a guess)."""
        run = self.run
        self.phases.enter("loads_report")
        if run.settings.loads:
            self.say("waiting for the loads to report")
            self._await_reports()
        watch = run.extras.get("sentinel_watch")
        if watch is not None:
            from raychaos.probes.actors import await_sentinel

            self.phases.enter("sentinel")
            run.extras["sentinel"] = await_sentinel(run.target, watch)
        self.phases.enter("baseline")
        run.timeline.event(Ev.BASELINE_START)
        hold = run.settings.monitor.settle_s if run.settings.loads else \
            min(run.settings.monitor.settle_s, 2.0)
        self.say(f"baseline: {hold:g}s")
        time.sleep(hold)
        self._hold_for_samples()

    def _hold_for_samples(self) -> None:
        """Hold the baseline until every load a check reads has the samples its checks need
        (at most :data:`raychaos.run.samples.EXTRA_HOLD_S` more): a baseline too small to
        compare with makes every relative check inconclusive."""
        from raychaos.run.samples import EXTRA_HOLD_S, short

        run = self.run
        deadline = time.monotonic() + EXTRA_HOLD_S
        said = False
        while True:
            missing = short(read_timeline(run.timeline.path), run.slo_profile, "baseline")
            if not missing or time.monotonic() >= deadline:
                break
            if not said:
                self.say("baseline: holding for samples ("
                         + ", ".join(f"{k} {v}" for k, v in missing.items()) + ")")
                said = True
            run.timeline.wait(1.0)
        if missing:
            self.say("baseline: still short of samples after "
                     f"{EXTRA_HOLD_S:g} s more (" + ", ".join(
                         f"{k} {v}" for k, v in missing.items())
                     + "): checks that need them will be inconclusive")

    def _await_reports(self) -> None:
        run = self.run
        deadline = time.monotonic() + REPORT_TIMEOUT_S
        next_status = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen = {r.get("load") for r in read_timeline(run.timeline.path)
                    if r.get("kind") == "load" and r.get("count", 0) > 0}
            if all(load.name in seen for load in run.settings.loads):
                return
            if time.monotonic() >= next_status:  # the Jobs API, once a second
                next_status = time.monotonic() + 1.0
                dead = [n for n, j in run.jobs.items()
                        if run.target.job_status(j) in ("FAILED", "STOPPED", "MISSING")]
                if dead:
                    raise TargetUnavailable(f"load job(s) {', '.join(dead)} ended before the "
                                            "experiment started; see their logs on the cluster")
            run.timeline.wait(0.5)  # the next record (the monitor's) wakes this up

    def stop(self) -> None:
        run = self.run
        t0 = time.monotonic()
        for proc in self.locusts:
            try:  # Locust flushes its last second within a second of SIGTERM; one that does
                # not (a request stuck on a slow Serve replica) must not hold the verdict up
                proc.stop(grace_s=STOP_GRACE_S)
            except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                run.errors.append(f"stopping Locust: {exc}")
        ids = dict(run.jobs)
        watch = run.extras.get("sentinel_watch")
        if watch is not None:  # it removes the sentinel actor as it stops
            ids["sentinel watcher"] = watch["job_id"]
        locust_s = round(time.monotonic() - t0, 2)
        ended = stop_and_confirm(run.target, ids)
        run.timeline.event(Ev.LOADS_ENDED, locust_s=locust_s, jobs=ended)
        left = {n: rec["job_id"] for n, rec in ended.items() if rec["s"] is None}
        if left:
            run.errors.append(
                f"load job(s) {', '.join(f'{n} ({j})' for n, j in left.items())} still "
                f"PENDING/RUNNING {STOP_CONFIRM_S:g} s after they were stopped: stop them "
                "with the cluster's Jobs API (`ray job stop ID`)")
        if run.extras.get("serve_app") and not self.keep_serve:
            try:  # Serve's proxies and replicas would otherwise keep using the cluster's CPUs
                run_job(run.target, "python serve_deploy.py --shutdown", timeout=60)
            except RaychaosError as exc:
                run.errors.append(f"removing the Serve application: {exc}")

