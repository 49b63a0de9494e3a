"""The Ray dashboard of a KubeRay cluster: GCS health, Ray's node table and the Jobs API.

Why here and not in the target: everything the harness asks Ray (is the GCS up, which Ray nodes
are ALIVE, submit/status/logs/stop a job) goes over HTTP to the head's dashboard, reached through
raychaos's own port-forward (:mod:`.forward`) unless the user gave a ``dashboard_url``. Requests
reuse one keep-alive connection per thread (the monitor asks five times a second: a new
port-forward per request would cost a WebSocket each), carry the cluster's Ray token when it
uses token auth (KubeRay ``authOptions``, or ``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN`` in
the head container), and every failure to reach the dashboard is ``TargetUnavailable``.

Job drivers are placed on a worker (a driver on the head dies with it, and job survival would
measure driver placement): by the worker's own ``node:<ip>`` resource, which every Ray node has,
so nothing needs to be declared on the user's cluster.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from raychaos.errors import KubeApiError, TargetUnavailable
from raychaos.targets.kubernetes.client import ApiSession

__all__ = ["Dashboard", "auth_token", "parse_usage"]

DRIVER_SHARE = 0.001  # of a worker's node:<ip> resource per driver: any number of drivers fit


def auth_token(api: ApiSession, ns: str, raycluster: dict[str, Any],
               head: dict[str, Any] | None) -> tuple[str | None, str]:
    """The cluster's Ray token and where it came from, or (None, why there is none)."""
    mode = str(((raycluster.get("spec") or {}).get("authOptions") or {}).get("mode") or "")
    env: dict[str, dict[str, Any]] = {}
    for c in ((head or {}).get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            env.setdefault(e["name"], e)
    ray_mode = str((env.get("RAY_AUTH_MODE") or {}).get("value") or "")
    if mode.lower() != "token" and ray_mode.lower() != "token":
        return None, "no token auth (authOptions.mode and RAY_AUTH_MODE are not 'token')"
    entry = env.get("RAY_AUTH_TOKEN") or {}
    if entry.get("value"):
        return str(entry["value"]), "RAY_AUTH_TOKEN in the head container"
    ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
    name = ref.get("name") or raycluster["metadata"]["name"]
    key = ref.get("key") or "auth_token"
    try:
        secret = api.read(api.core.read_namespaced_secret, name, ns)
    except KubeApiError as exc:
        raise TargetUnavailable(f"kubernetes: RayCluster {ns}/{raycluster['metadata']['name']} "
                                f"uses token auth, but Secret {ns}/{name} cannot be read "
                                f"(HTTP {exc.status}: {exc.message})") from exc
    value = (secret.get("data") or {}).get(key)
    if not value:
        raise TargetUnavailable(f"kubernetes: Secret {ns}/{name} has no key {key!r} (the Ray "
                                f"token of RayCluster {raycluster['metadata']['name']})")
    return base64.b64decode(value).decode().strip(), f"Secret {ns}/{name} key {key}"


class Dashboard:
    """HTTP to one Ray dashboard at ``url()`` (a callable: the forward starts lazily)."""

    def __init__(self, url: Callable[[], str], token: str | None = None):
        self._url = url
        self.token = token
        self._local = threading.local()
        self._jobs_client: Any = None

    @property
    def url(self) -> str:
        return self._url().rstrip("/")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    # --- plain HTTP, one keep-alive connection per thread ------------------------------------
    def request(self, method: str, path: str, body: Any = None,
                timeout: float = 10.0) -> tuple[int, bytes]:
        status, _reason, raw = self.exchange(method, path, body, timeout)
        return status, raw

    def exchange(self, method: str, path: str, body: Any = None,
                 timeout: float = 10.0) -> tuple[int, str, bytes]:
        """(status, reason phrase, body) of one request."""
        parts = urlsplit(self.url)
        base = parts.path.rstrip("/")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", **self.headers}
        for attempt in (1, 2):  # a kept-alive connection the far end closed: once more, new
            conn = self._conn(parts.scheme, parts.netloc, timeout)
            try:
                conn.request(method, base + path, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.reason or "", resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                if attempt == 2 or isinstance(exc, TimeoutError):
                    raise TargetUnavailable(f"Ray dashboard at {self.url}{path}: "
                                            f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def json(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        status, raw = self.request(method, path, body, timeout)
        if status == 401 or status == 403:
            raise TargetUnavailable(f"Ray dashboard at {self.url}{path}: HTTP {status} (token "
                                    f"auth: {'a token was sent' if self.token else 'no token'})")
        if status >= 400:
            raise KubeApiError(status, "dashboard", raw.decode(errors="replace")[:300], path)
        return json.loads(raw) if raw.strip() else {}

    def _conn(self, scheme: str, netloc: str, timeout: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conn = cls(netloc, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    # --- what the monitor asks -----------------------------------------------------------------
    def gcs_alive(self, timeout: float) -> bool:
        """The dashboard's own GCS liveness check (``/api/gcs_healthz``, no auth needed)."""
        return self.gcs_health(timeout)[0]

    def gcs_health(self, timeout: float) -> tuple[bool, str | None, bool]:
        """``(up, why not, late)``: late is no answer within ``timeout`` and no refusal either
        (a busy dashboard or GCS) — not the same as a head that is gone (the port-forward
        closes the connection at once, or the dashboard says the GCS is not healthy). The
        dashboard asks the GCS with a 0.1 s deadline and answers 503 "Health check failed: …
        Deadline Exceeded" when a busy GCS misses it: late too, as on the local target
        (DEADLINE_EXCEEDED is late, a refusal is down)."""
        try:
            status, reason, raw = self.exchange("GET", "/api/gcs_healthz", timeout=timeout)
        except TargetUnavailable as exc:
            return False, str(exc), isinstance(exc.__cause__, TimeoutError)
        if status == 200:
            return True, None, False
        said = f"{reason} {raw[:300].decode(errors='replace')}".lower()
        late = status == 503 and any(w in said for w in ("deadline", "timed out", "timeout"))
        return False, f"/api/gcs_healthz: HTTP {status} {reason}".strip(), late

    def ray_nodes(self, timeout: float) -> list[dict[str, Any]]:
        """Ray's node table (the state API, read from the GCS), dead nodes included."""
        reply = self.json("GET", "/api/v0/nodes?limit=10000&timeout=5", timeout=timeout)
        data = (reply.get("data") or {}).get("result") or {}
        rows: list[dict[str, Any]] = data.get("result", []) if isinstance(data, dict) else data
        return rows

    def logical_resources(self, timeout: float) -> dict[str, dict[str, dict[str, float]]]:
        """Per Ray node ID, each logical resource's ``total`` and ``available``, from the load
        report the dashboard's node summary carries (``"0.0/1.0 CPU"``, ``"0B/1.00GiB
        memory"``: in use / in all; byte sizes rounded as Ray prints them)."""
        reply = self.json("GET", "/nodes?view=summary", timeout=timeout)
        data = reply.get("data") or {}
        usage = data.get("nodeLogicalResources") or data.get("node_logical_resources") or {}
        return {str(node): parse_usage(str(text)) for node, text in usage.items()}

    # --- the Jobs API ------------------------------------------------------------------------
    def submit(self, entrypoint: str, working_dir: str | None, metadata: dict[str, str],
               resources: dict[str, float] | None) -> str:
        from ray.job_submission import JobSubmissionClient

        runtime_env = {"working_dir": working_dir} if working_dir else None
        try:  # Ray's client: it uploads a local working_dir through the dashboard's packages API
            if self._jobs_client is None:
                self._jobs_client = JobSubmissionClient(self.url, headers=self.headers)
            return str(self._jobs_client.submit_job(
                entrypoint=entrypoint, runtime_env=runtime_env, metadata=metadata,
                entrypoint_num_cpus=0, entrypoint_resources=resources))
        except Exception as exc:
            self._jobs_client = None
            raise TargetUnavailable(f"Jobs API at {self.url}: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc

    def job(self, job_id: str, timeout: float = 5.0) -> dict[str, Any] | None:
        """The job's info, or None when the cluster does not know it."""
        try:
            info: dict[str, Any] = self.json("GET", f"/api/jobs/{job_id}", timeout=timeout)
            return info
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def job_logs(self, job_id: str) -> str:
        return str(self.json("GET", f"/api/jobs/{job_id}/logs").get("logs", ""))

    def stop_job(self, job_id: str) -> None:
        self.json("POST", f"/api/jobs/{job_id}/stop")


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_USAGE = re.compile(r"^\s*([\d.]+)([KMGT]i)?(B)?/([\d.]+)([KMGT]i)?(B)?\s+(\S+)\s*$")


def parse_usage(text: str) -> dict[str, dict[str, float]]:
    """Ray's per-node usage lines (``USED/TOTAL NAME``) as ``{"total": {...}, "available":
    {...}}``; byte quantities in bytes. Lines of another shape are skipped."""
    total: dict[str, float] = {}
    available: dict[str, float] = {}
    for line in text.splitlines():
        m = _USAGE.match(line)
        if not m:
            continue
        used = float(m[1]) * _UNITS[(m[2] or "") + "B"] if m[3] else float(m[1])
        whole = float(m[4]) * _UNITS[(m[5] or "") + "B"] if m[6] else float(m[4])
        total[m[7]] = whole
        available[m[7]] = max(0.0, whole - used)
    return {"total": total, "available": available}
