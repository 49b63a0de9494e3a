"""Exec and port-forward: the two WebSocket subresources of a pod, each on an ApiClient of its own.

Why a module: both have traps the rest of the package must not meet one by one.

- ``kubernetes.stream`` swaps ``call_api`` on the ApiClient it is given (kubernetes-client/python
  #928), so each stream gets a fresh ApiClient (:meth:`ApiSession.stream_core`), never the one
  the monitor and the Lease renewal share.
- The exit status of an exec is the ``Status`` the API server sends on channel 3 — and a failure
  to reach the container (no kubelet, a container that is gone) is *also* a Status there, after
  a ``101 Switching Protocols`` (``../shared/k8s-golden/exec-websocket-no-kubelet.json``):
  ``stream()`` returns the (empty) output and raises nothing. :func:`exec_in` reads channel 3 and
  says which it was: an exit code, or the API server's reason it never ran.
- ``WSClient.readline_channel`` returns ``""`` as soon as the socket is closed, even when the
  frame with the line came in the same read as the close (a short command's last output and its
  exit): :class:`LineReader` also takes what was buffered.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes.stream import portforward, stream

from raychaos.targets.kubernetes.client import ApiSession, translated

__all__ = ["ExecResult", "LineReader", "exec_in", "open_exec", "open_portforward"]

ERROR_CHANNEL = 3


@dataclass
class ExecResult:
    """What one exec did. ``code`` is the command's exit status, or None when it never ran (or
    did not finish): then ``error`` says why, in the API server's words."""

    code: int | None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    status: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"exit_code": self.code, "stdout": self.stdout[-2000:],
                "stderr": self.stderr[-2000:], "error": self.error,
                "seconds": round(self.seconds, 3)}


def exit_status(status: dict[str, Any]) -> tuple[int | None, str | None]:
    """(exit code, None) from a channel-3 Status, or (None, the reason) when it is not one."""
    if status.get("status") == "Success":
        return 0, None
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message", "")), None
                except ValueError:
                    break
    if not status:
        return None, "the exec stream closed without an exit status"
    return None, str(status.get("message") or status.get("reason") or status)


def open_exec(api: ApiSession, ns: str, pod: str, container: str, command: list[str],
              timeout: float = 30.0) -> tuple[Any, Any]:
    """Start ``command`` in a container and return (the open WSClient, its CoreV1Api); the
    caller reads it and closes both (``ws.close()``, ``core.api_client.close()``)."""
    core = api.stream_core()
    try:
        with translated(api.host, f"exec in {ns}/{pod}"):
            ws = stream(core.connect_get_namespaced_pod_exec, pod, ns, container=container,
                        command=command, stderr=True, stdout=True, stdin=False, tty=False,
                        _preload_content=False, _request_timeout=timeout)
    except BaseException:
        core.api_client.close()
        raise
    return ws, core


def exec_in(api: ApiSession, ns: str, pod: str, container: str, command: list[str],
            timeout: float = 30.0) -> ExecResult:
    """Run ``command`` in ``ns/pod``'s ``container`` and wait (``timeout``) for its exit status.

    Raises KubeApiError/TargetUnavailable when the WebSocket cannot be opened at all (403, 404,
    an unreachable server); a command that ran returns its code, one that could not run returns
    ``code=None`` and the server's reason."""
    t0 = time.monotonic()
    ws, core = open_exec(api, ns, pod, container, command, timeout)
    try:
        ws.run_forever(timeout=timeout)
        finished = not ws.is_open()
        out, err = str(ws.read_channel(1)), str(ws.read_channel(2))
        raw = str(ws.read_channel(ERROR_CHANNEL) or "")
    finally:
        ws.close()
        core.api_client.close()
    try:
        status = json.loads(raw) if raw.strip() else {}
    except ValueError:
        status = {"message": raw}
    code, error = exit_status(status)
    if not finished:
        code, error = None, f"no exit status within {timeout:g} s"
    return ExecResult(code, out, err, error, status, time.monotonic() - t0)


class LineReader:
    """Lines of one channel of an open exec stream, including those that arrived with its close
    (the library's ``readline_channel`` gives up on a closed socket before it looks at what it
    buffered). Only public WSClient calls: ``read_channel`` pops what came, ``is_open``."""

    def __init__(self, ws: Any, channel: int = 1) -> None:
        self.ws, self.channel, self.buf = ws, channel, ""

    def readline(self, timeout: float) -> str:
        """The next line without its newline; ``""`` when none came within ``timeout`` s, or
        the unterminated rest once the stream has closed."""
        deadline = time.monotonic() + timeout
        while "\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return ""
            was_open = self.ws.is_open()
            chunk = str(self.ws.read_channel(self.channel, timeout=min(left, 1.0)) or "")
            self.buf += chunk
            if not chunk and not was_open:  # closed before this read, and nothing was left
                line, self.buf = self.buf, ""
                return line
        line, _, self.buf = self.buf.partition("\n")
        return line


def open_portforward(api: ApiSession, ns: str, pod: str, port: int) -> tuple[Any, Any, Any]:
    """A socket to ``port`` of ``ns/pod`` through the API server (pods/portforward), with the
    PortForward and its CoreV1Api; the caller closes all three."""
    core = api.stream_core()
    try:
        with translated(api.host, f"port-forward to {ns}/{pod}:{port}"):
            pf = portforward(core.connect_get_namespaced_pod_portforward, pod, ns,
                             ports=str(port))
    except BaseException:
        core.api_client.close()
        raise
    return pf.socket(port), pf, core
