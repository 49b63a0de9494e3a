"""Locust users that submit tiny jobs to the Ray Jobs REST API and time them to completion.

Why: job submission is how work reaches a Ray cluster on Kubernetes (KubeRay RayJob, CI, Airflow),
and it depends on the head's dashboard, the GCS and a worker being able to start a driver -- all
things head and GCS chaos breaks. Each user submits a tiny job (``POST /api/jobs/``), polls it
(``GET /api/jobs/{id}``) until it reaches a terminal state, and fires a custom Locust request
event ``JOB submit_to_finish`` whose response time is submit-to-finish; a job that ends FAILED or
STOPPED, or is still running after ``RAYCHAOS_JOB_TIMEOUT_S``, is a failure. The submit and
poll calls are reported too (``POST /api/jobs/``, ``GET /api/jobs/[id]``).

Settings (environment): ``RAYCHAOS_JOB_ENTRYPOINT`` (default: a one-line Python print),
``RAYCHAOS_JOB_TIMEOUT_S`` (default 120), ``RAYCHAOS_JOB_POLL_S`` (default 0.5). The host is the
dashboard, e.g. ``--host http://127.0.0.1:8265``.
"""

from __future__ import annotations

import os
import time

from locust import HttpUser, between, events, task

ENTRYPOINT = os.environ.get("RAYCHAOS_JOB_ENTRYPOINT", "python -c \"print('raychaos job ok')\"")
TIMEOUT_S = float(os.environ.get("RAYCHAOS_JOB_TIMEOUT_S", "120"))
POLL_S = float(os.environ.get("RAYCHAOS_JOB_POLL_S", "0.5"))
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class JobFailed(Exception):
    """A submitted job did not succeed (its last status is the message)."""


class JobsApiUser(HttpUser):
    wait_time = between(0.5, 1.5)

    def _report(self, started: float, exc: Exception | None) -> None:
        events.request.fire(
            request_type="JOB", name="submit_to_finish",
            response_time=(time.monotonic() - started) * 1000.0, response_length=0,
            exception=exc, context={},
        )

    @task
    def submit_and_wait(self) -> None:
        started = time.monotonic()
        with self.client.post("/api/jobs/", json={"entrypoint": ENTRYPOINT},
                              name="/api/jobs/", catch_response=True) as resp:
            if resp.status_code != 200:
                resp.failure(f"submit answered {resp.status_code}")
                self._report(started, JobFailed(f"submit answered {resp.status_code}"))
                return
            job_id = resp.json().get("submission_id") or resp.json().get("job_id")
        status = "PENDING"
        while time.monotonic() - started < TIMEOUT_S:
            time.sleep(POLL_S)
            with self.client.get(f"/api/jobs/{job_id}", name="/api/jobs/[id]",
                                 catch_response=True) as resp:
                if resp.status_code != 200:
                    resp.failure(f"status answered {resp.status_code}")
                    continue
                status = resp.json().get("status", "UNKNOWN")
            if status in TERMINAL:
                break
        exc = None if status == "SUCCEEDED" else JobFailed(f"job {job_id} ended {status}")
        self._report(started, exc)
