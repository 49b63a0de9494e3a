"""The Kubernetes API session every helper of this package shares: client, errors, dry-run gate.

Why a separate module: the Kubernetes target needs three things in every fault — talk to the API
as plain JSON (fast: no model deserialisation of 500-pod lists), translate ``ApiException`` and
transport errors into raychaos errors in ONE place (:func:`translated`: an API error becomes
:class:`~raychaos.errors.KubeApiError` with its HTTP status, an unreachable server
:class:`~raychaos.errors.TargetUnavailable`), and route *every* mutating call through one gate
so that dry-run mode can print the exact calls (method, path, body) and make none. Only this
package imports :mod:`kubernetes`; only this module sees its exceptions.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError as Urllib3Error

from raychaos.errors import KubeApiError, TargetUnavailable

__all__ = ["ApiSession", "MutationGate", "status_message", "translated"]

log = logging.getLogger(__name__)

#: Every request gets a bounded time so an unreachable API is one sentence, not a hang.
REQUEST_TIMEOUT_S = 10.0


def status_message(exc: ApiException) -> str:
    """The API server's own ``message`` from a Status body, else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason or exc.body or "")


@contextmanager
def translated(host: str, what: str = "") -> Iterator[None]:
    """The one place ``kubernetes``/urllib3 errors become raychaos errors."""
    try:
        yield
    except ApiException as exc:
        status, reason, message = int(exc.status or 0), str(exc.reason or ""), status_message(exc)
        if status == 0:  # a WebSocket (exec, portforward): refused upgrade, or no connection
            status, reason, message = _handshake(reason)
            if status == 0:
                raise TargetUnavailable(f"kubernetes API at {host}"
                                        f"{' (' + what + ')' if what else ''}: the WebSocket "
                                        f"did not open: {message}") from exc
        raise KubeApiError(status, reason, message, what) from exc
    except (Urllib3Error, OSError) as exc:
        raise TargetUnavailable(f"kubernetes API at {host} is unreachable"
                                f"{' (' + what + ')' if what else ''}: "
                                f"{type(exc).__name__}") from exc


#: what a 403 with no reason on a WebSocket upgrade means: since Kubernetes 1.35 the API
#: server also checks ``create`` on exec/attach/portforward (AuthorizePodWebsocketUpgrade-
#: CreatePermission), after RBAC allowed the request as the ``get`` it is, and says no more
WS_CREATE_HINT = ("a WebSocket exec or port-forward needs create as well as get on pods/exec or "
                  "pods/portforward (Kubernetes 1.35 and later)")


def _handshake(text: str) -> tuple[int, str, str]:
    """(status, reason, message) from websocket-client's "Handshake status 403 Forbidden -+-+-
    {headers} -+-+- {Status}" text (the body as ``b'...'`` in older versions); status 0 when it
    is not one (a dropped connection)."""
    m = re.search(r"Handshake status (\d+) ?([^-]*)", text)
    if not m:
        return 0, "WebSocket", text
    status, reason = int(m[1]), m[2].strip()
    body = text.rsplit("-+-+-", 1)[-1].strip() if "-+-+-" in text else ""
    if body[:2] in ("b'", 'b"'):
        body = body[2:-1]
    message = reason or f"HTTP {status}"
    try:
        message = str(json.loads(body).get("message") or message)
    except (ValueError, AttributeError):
        pass
    if status == 403 and message.rstrip().endswith("forbidden:"):
        message = f"{message.rstrip()} {WS_CREATE_HINT}"
    return status, reason, message


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
        self.coordination = client.CoordinationV1Api(api_client)
        self.gate = MutationGate(dry_run=dry_run)
        self.host = str(api_client.configuration.host)

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None,
                dry_run: bool = False) -> ApiSession:
        """From ``kubeconfig``/``context``, or in-cluster when no kubeconfig is found."""
        return cls(client.ApiClient(load_configuration(kubeconfig, context)), dry_run=dry_run)

    def close(self) -> None:
        self.api_client.close()

    def stream_core(self) -> client.CoreV1Api:
        """A CoreV1Api on an ApiClient of its own, for one exec or port-forward.

        ``kubernetes.stream`` swaps ``call_api`` on the ApiClient it is given while it opens
        the WebSocket (kubernetes-client/python#928): on the shared client a concurrent read by
        the monitor or the Lease renewal would go out as a WebSocket. The caller closes it
        (``.api_client.close()``)."""
        return client.CoreV1Api(client.ApiClient(self.api_client.configuration))

    # --- reads: plain JSON -------------------------------------------------------------------
    def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call a client read method and return its JSON body as a dict (no model objects)."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        with translated(self.host, _name(fn)):
            resp = fn(*args, _preload_content=False, **kwargs)
            try:
                data: dict[str, Any] = json.loads(resp.data or b"{}")
                return data
            finally:
                resp.release_conn()

    def read_text(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
        """Like :meth:`read` for a text reply (``read_namespaced_pod_log``)."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        with translated(self.host, _name(fn)):
            resp = fn(*args, _preload_content=False, **kwargs)
            try:
                return bytes(resp.data or b"").decode(errors="replace")
            finally:
                resp.release_conn()

    def read_or_none(self, fn: Callable[..., Any], *args: Any, **kwargs: Any
                     ) -> dict[str, Any] | None:
        """Like :meth:`read`, but a 404 is ``None``."""
        try:
            return self.read(fn, *args, **kwargs)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def watch(self, fn: Callable[..., Any], *args: Any, timeout_s: int,
              opened: Callable[[Any], None] | None = None,
              **kwargs: Any) -> Iterator[dict[str, Any]]:
        """The events of one watch request (``watch=True``), each as a dict; errors translated.

        The server ends the stream after ``timeout_s``; a caller re-lists and watches again.
        ``opened`` is given the streaming response first, so another thread can end the wait
        (:meth:`Informer.stop`)."""
        with translated(self.host, f"watch {_name(fn)}"):
            resp = fn(*args, watch=True, timeout_seconds=timeout_s, _preload_content=False,
                      _request_timeout=timeout_s + 5, **kwargs)
            if opened is not None:
                opened(resp)
            try:
                for line in iter_resp_lines(resp):
                    yield json.loads(line)
            finally:
                resp.close()
                resp.release_conn()

    # --- writes: through the gate ------------------------------------------------------------
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
            with translated(self.host, f"{method} {path}"):
                resp = fn(*args, _preload_content=False, **kwargs)
                try:
                    data = resp.data
                    out: dict[str, Any] = json.loads(data) if data else {}
                    return out
                finally:
                    resp.release_conn()

        result: dict[str, Any] | None = self.gate(method, path, plain, send)
        return result

    def delete_quietly(self, path: str, fn: Callable[..., Any], *args: Any,
                       body: Any = None, **kwargs: Any) -> bool:
        """DELETE that treats 404 as already gone; True when something was deleted."""
        try:
            self.write("DELETE", path, fn, *args, body=body, **kwargs)
            return True
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise


def load_configuration(kubeconfig: str | None, context: str | None) -> client.Configuration:
    """A client Configuration from a kubeconfig (or in-cluster); one sentence when neither."""
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
    if not cfg.verify_ssl:  # the kubeconfig says insecure-skip-tls-verify: its owner chose so
        import urllib3

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    return cfg


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", "call"))
