"""Pods kept up to date by one list and a watch — the monitor's and the faults' view of a cluster.

Why: the monitor samples every 200 ms; a list per sample costs the API server a full list of
the namespace's pods each time (and grows with the cluster), and a poll misses what happened
between two lists. An informer lists once, then watches from that list's ``resourceVersion``
(a watch without one can fail with ``504 Too large resource version``), keeps the objects in
memory, follows BOOKMARKs, re-watches from where it was when the server ends a watch, and
re-lists only on ``410 Gone`` or an error. Readers get the current objects without a request;
waiters (:meth:`PodInformer.wait_for`) wake on each change. :func:`watch_until` is the same
loop, bounded, for a fault that waits for one outcome (pods gone, a replacement Ready).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar

from raychaos.errors import KubeApiError, TargetUnavailable
from raychaos.targets.kubernetes.client import ApiSession

__all__ = ["Informer", "PodInformer", "watch_until"]

T = TypeVar("T")
WATCH_S = 30  # one watch request at most this long; then a new watch from the last version


class Informer:
    """The objects ``list_fn(namespace, **selectors)`` returns, kept by name, from one list and
    a watch; started by :meth:`start` (or the first read)."""

    def __init__(self, api: ApiSession, list_fn: Callable[..., Any], namespace: str,
                 **selectors: str):
        self.api, self.list_fn, self.ns, self.selectors = api, list_fn, namespace, selectors
        self.selector = ",".join(selectors.values())
        self._pods: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: Any = None  # the watch being read, so stop() can end it
        self.error: str | None = None
        self.stats = {"lists": 0, "watches": 0, "events": 0}

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"raychaos-informer-{self.ns}")
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop at once: the watch being read is shut (else its thread would sit in it until
        the server ends it, up to ``WATCH_S``)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            stream = self._stream
        _shut(stream)

    def _opened(self, stream: Any) -> None:
        with self._cond:
            self._stream = stream
        if self._stop.is_set():  # stop() came between the request and now
            _shut(stream)

    def items(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The current objects (shared: do not change them); waits for the first list."""
        self.start()
        if not self._synced.wait(timeout):
            raise TargetUnavailable(f"kubernetes: could not list {self.selector!r} in "
                                    f"namespace {self.ns} within {timeout:g} s: {self.error}")
        with self._cond:
            return list(self._pods.values())

    def wait_for(self, check: Callable[[list[dict[str, Any]]], T | None],
                 timeout: float) -> T | None:
        """The first non-empty ``check(pods)`` within ``timeout``, re-checked on every change."""
        deadline = time.monotonic() + timeout
        self.items(timeout=max(0.1, timeout))
        with self._cond:
            while True:
                got = check(list(self._pods.values()))
                left = deadline - time.monotonic()
                if got or left <= 0 or self._stop.is_set():
                    return got
                self._cond.wait(min(left, 1.0))

    # --- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        rv: str | None = None
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv = self._watch(rv)
                backoff = 0.2
            except (KubeApiError, TargetUnavailable) as exc:
                self.error = str(exc)
                rv = None  # list again: our resourceVersion may be gone (410) or stale
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:  # noqa: BLE001 - the informer must outlive a bad reply
                self.error = repr(exc)
                rv = None
                self._stop.wait(backoff)

    def _list(self) -> str:
        listing = self.api.read(self.list_fn, self.ns, **self.selectors)
        self.stats["lists"] += 1
        with self._cond:
            self._pods = {p["metadata"]["name"]: p for p in listing.get("items") or []}
            self._cond.notify_all()
        self._synced.set()
        return str(listing["metadata"]["resourceVersion"])

    def _watch(self, rv: str) -> str | None:
        try:
            return self._follow(rv)
        finally:  # that stream is closed now (its connection maybe reused): not stop()'s to shut
            with self._cond:
                self._stream = None

    def _follow(self, rv: str) -> str | None:
        self.stats["watches"] += 1
        for event in self.api.watch(self.list_fn, self.ns, resource_version=rv,
                                    allow_watch_bookmarks=True, timeout_s=WATCH_S,
                                    opened=self._opened, **self.selectors):
            if self._stop.is_set():
                return rv
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                return None  # 410 Expired, 504: list again
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if kind == "BOOKMARK":
                continue
            self.stats["events"] += 1
            name = obj["metadata"]["name"]
            with self._cond:
                if kind == "DELETED":
                    self._pods.pop(name, None)
                else:
                    self._pods[name] = obj
                self._cond.notify_all()
        return rv


def _shut(stream: Any) -> None:
    """Wake a thread blocked reading ``stream`` (urllib3's ``shutdown`` shuts the socket for
    reading; a close alone does not wake a blocked read)."""
    if stream is None:
        return
    try:
        shutdown = getattr(stream, "shutdown", None)
        if shutdown is not None:
            shutdown()
        else:
            stream.close()
    except Exception:  # noqa: BLE001 - already closed, or closing: the reader ends either way
        pass


class PodInformer(Informer):
    """The pods of ``namespace`` matching the label ``selector``."""

    def __init__(self, api: ApiSession, namespace: str, selector: str):
        super().__init__(api, api.core.list_namespaced_pod, namespace, label_selector=selector)

    def pods(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        return self.items(timeout)


def watch_until(api: ApiSession, list_fn: Callable[..., Any], *args: Any,
                check: Callable[[dict[str, dict[str, Any]]], T | None], timeout: float,
                stats: dict[str, int] | None = None, **kwargs: Any) -> T | None:
    """List once, then watch, until ``check(objects by name)`` is non-empty or ``timeout``.

    ``list_fn`` is a client list method (``api.core.list_namespaced_pod``) with its ``args`` and
    selectors in ``kwargs``; ``stats`` counts the requests ("lists", "watches", "events")."""
    stats = stats if stats is not None else {}
    for key in ("lists", "watches", "events"):
        stats.setdefault(key, 0)
    deadline = time.monotonic() + timeout
    objs: dict[str, dict[str, Any]] = {}
    rv: str | None = None
    while True:
        if rv is None:
            listing = api.read(list_fn, *args, **kwargs)
            stats["lists"] += 1
            objs = {o["metadata"]["name"]: o for o in listing.get("items") or []}
            rv = str(listing["metadata"]["resourceVersion"])
        got = check(copy.copy(objs))
        left = deadline - time.monotonic()
        if got or left <= 0:
            return got
        stats["watches"] += 1
        try:
            for event in api.watch(list_fn, *args, resource_version=rv,
                                   allow_watch_bookmarks=True,
                                   timeout_s=max(1, min(WATCH_S, int(left + 0.999))), **kwargs):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    rv = None
                    break
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                stats["events"] += 1
                if kind == "DELETED":
                    objs.pop(obj["metadata"]["name"], None)
                else:
                    objs[obj["metadata"]["name"]] = obj
                got = check(copy.copy(objs))
                if got or time.monotonic() >= deadline:
                    return got
        except KubeApiError as exc:
            if exc.status != 410:
                raise
            rv = None
