"""The Kubernetes API session every ``k8s_*`` helper shares: client, error translation, dry-run.

Why a separate module: the Kubernetes target needs three things in every fault — talk to the API
as plain JSON (fast: no model deserialisation of 500-pod lists), translate ``ApiException`` into
raychaos errors in one place, and route *every* mutating call through one gate so that dry-run
mode can print the exact calls (method, path, body) and make none. Only ``targets/kubernetes.py``
and the ``targets/k8s_*.py`` helpers import :mod:`kubernetes`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from raychaos.errors import TargetUnavailable

__all__ = ["ApiException", "ApiSession", "MutationGate", "is_status", "status_message"]

log = logging.getLogger(__name__)

#: Every request gets a bounded time so an unreachable API is one sentence, not a hang.
REQUEST_TIMEOUT_S = 10.0


def is_status(exc: BaseException, *codes: int) -> bool:
    """True when ``exc`` is an ``ApiException`` with one of ``codes``."""
    return isinstance(exc, ApiException) and exc.status in codes


def status_message(exc: ApiException) -> str:
    """The API server's own ``message`` from a Status body, else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


@dataclass
class MutationGate:
    """Every create/patch/delete/eviction/exec passes here; dry-run records instead of calling.

    ``calls`` lists what was (or, in dry-run, would have been) sent, in order, as
    ``{"method", "path", "body"}`` — the dry-run report and a test's evidence.
    """

    dry_run: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, method: str, path: str, body: Any, send: Callable[[], Any]) -> Any:
        self.calls.append({"method": method, "path": path, "body": body})
        if self.dry_run:
            log.warning("dry-run: would %s %s %s", method, path,
                        json.dumps(body, sort_keys=True) if body is not None else "")
            return None
        return send()


class ApiSession:
    """One connection to one API server: typed API groups plus JSON reads and gated writes."""

    def __init__(self, api_client: client.ApiClient, dry_run: bool = False):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.apiext = client.ApiextensionsV1Api(api_client)
        self.gate = MutationGate(dry_run=dry_run)
        self.host = api_client.configuration.host

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None,
                dry_run: bool = False) -> ApiSession:
        """From ``kubeconfig``/``context``, or in-cluster when no kubeconfig is found."""
        cfg = client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            if kubeconfig or os.path.exists(path.split(os.pathsep)[0]):
                config.load_kube_config(config_file=path, context=context,
                                        client_configuration=cfg, persist_config=False)
            else:
                config.load_incluster_config(client_configuration=cfg)
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise TargetUnavailable(
                f"kubernetes: cannot load a kubeconfig from {path} (context {context or 'current'})"
                f" nor an in-cluster service account: {exc}") from exc
        cfg.retries = 0  # fail fast on an unreachable server; callers retry where it makes sense
        return cls(client.ApiClient(cfg), dry_run=dry_run)

    def close(self) -> None:
        self.api_client.close()

    # --- reads: plain JSON ---------------------------------------------------------------------
    def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call a client read method and return its JSON body as a dict (no model objects)."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        resp = fn(*args, _preload_content=False, **kwargs)
        try:
            return json.loads(resp.data or b"{}")
        finally:
            resp.release_conn()

    def read_or_none(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict | None:
        """Like :meth:`read`, but a 404 is ``None``."""
        try:
            return self.read(fn, *args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # --- writes: through the gate --------------------------------------------------------------
    def write(self, method: str, path: str, fn: Callable[..., Any], *args: Any,
              body: Any = None, **kwargs: Any) -> dict[str, Any] | None:
        """Send one mutating call (or record it in dry-run); returns the reply's JSON.

        ``body`` goes to ``fn`` as ``body=`` and into the record as plain JSON.
        """
        plain = self.api_client.sanitize_for_serialization(body) if body is not None else None
        if body is not None:
            kwargs["body"] = body

        def send() -> dict[str, Any]:
            kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
            resp = fn(*args, _preload_content=False, **kwargs)
            try:
                data = resp.data
                return json.loads(data) if data else {}
            finally:
                resp.release_conn()

        return self.gate(method, path, plain, send)

    def delete_quietly(self, path: str, fn: Callable[..., Any], *args: Any,
                       body: Any = None, **kwargs: Any) -> bool:
        """DELETE that treats 404 as already gone; True when something was deleted."""
        try:
            self.write("DELETE", path, fn, *args, body=body, **kwargs)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
