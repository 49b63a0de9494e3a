"""Ray jobs on the local target, through the real Jobs API of the head's dashboard.

Job drivers are placed on workers with ``entrypoint_resources`` (a ``raychaos_driver`` resource
only workers declare): a driver on the head dies with it, which would turn every head-kill
experiment into a job-loss experiment. Driver logs are read straight from the worker's log
folder, so load stats keep flowing while the head (and its dashboard) is down; a job's status is
read from the GCS (the record the Jobs API serves), which is back well before the dashboard.
"""

from __future__ import annotations

from typing import Any

from raychaos.errors import TargetUnavailable
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.plan import DRIVER_RESOURCE
from raychaos.targets.retry import with_backoff

__all__ = ["LocalJobs"]


class LocalJobs:
    """The Jobs API of one local cluster, and its driver logs read from the node folders."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self._job_client: Any = None
        self._log_offsets: dict[str, int] = {}

    def dashboard_url(self) -> str:
        return str(self.cluster.require()["dashboard_url"])

    def _jobs(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        if self._job_client is None:
            self._job_client = JobSubmissionClient(self.dashboard_url())
        return self._job_client

    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        runtime_env = {"working_dir": working_dir} if working_dir else None
        return str(self._jobs().submit_job(
            entrypoint=entrypoint, runtime_env=runtime_env, metadata=metadata or {},
            entrypoint_num_cpus=0,
            entrypoint_resources={DRIVER_RESOURCE: 1} if on_driver_node else None))

    def job_status(self, job_id: str) -> str:
        try:  # the GCS first: it is back seconds before the dashboard after a head restart
            status = self.cluster.admin().job_status(job_id)
        except TargetUnavailable:
            status = None
        if status is not None:
            return status
        try:  # a read: safe to repeat while the dashboard blinks
            return with_backoff(lambda: str(self._jobs().get_job_status(job_id).value),
                                attempts=2, first_delay_s=0.2)
        except Exception as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                return "MISSING"
            self._job_client = None
            return "UNKNOWN"

    def job_driver_node(self, job_id: str) -> str | None:
        try:
            node: str | None = self._jobs().get_job_info(job_id).driver_node_id
            return node
        except Exception:
            return None

    def active_jobs(self) -> list[dict[str, str]]:
        """Every job not finished yet (PENDING, RUNNING), whoever submitted it; raise
        TargetUnavailable when the Jobs API does not answer."""
        try:
            found = self._jobs().list_jobs()
        except Exception as exc:
            self._job_client = None
            raise TargetUnavailable(f"local cluster '{self.cluster.name}': the Jobs API does "
                                    f"not answer ({type(exc).__name__})") from exc
        return [{"job_id": str(j.submission_id or j.job_id), "status": str(j.status.value),
                 "entrypoint": str(j.entrypoint)} for j in found
                if str(j.status.value) in ("PENDING", "RUNNING")]

    def stop_job(self, job_id: str) -> None:
        """Ask the Jobs API to stop the job, on a new client: the cached one may hold a
        connection to a dashboard a head kill replaced (job status is read from the GCS, so
        nothing has refreshed it since). Whether it stopped is read from its status
        (``stop_and_confirm``), not from this call."""
        self._job_client = None
        try:
            self._jobs().stop_job(job_id)
        except Exception:  # noqa: BLE001 - the status read says whether it stopped
            self._job_client = None

    def job_log_lines(self, job_id: str) -> list[str]:
        lines: list[str] = []
        pattern = f"nodes/*/session_*/logs/job-driver-{job_id}.log"
        for path in sorted(self.cluster.state_dir.glob(pattern)):
            key = str(path)
            offset = self._log_offsets.get(key, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except OSError:
                continue
            cut = chunk.rfind(b"\n") + 1  # only whole lines; the rest next time
            self._log_offsets[key] = offset + cut
            lines.extend(chunk[:cut].decode(errors="replace").splitlines())
        return lines
