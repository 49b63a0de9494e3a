"""Closing raychaos's port-forward ends its accepting thread: a ``close`` alone left it blocked
in ``accept`` for the life of the process (the "threads still running" line of every test run
that made a target: raychaos-forward-dashboard x11)."""

from __future__ import annotations

import threading

import pytest

from raychaos.targets.kubernetes.forward import LocalForward, quieting

pytestmark = pytest.mark.unit


def test_close_ends_the_accepting_thread():
    fwd = LocalForward(None, "ray", lambda: ("demo-head", 8265), "closetest")  # type: ignore[arg-type]
    assert fwd.url.startswith("http://127.0.0.1:")
    mine = [t for t in threading.enumerate() if t.name == "raychaos-forward-closetest"]
    assert len(mine) == 1 and mine[0].is_alive()
    fwd.close()
    assert not mine[0].is_alive()
    fwd.close()  # twice is fine



def test_a_dying_stream_of_the_clients_proxy_thread_prints_no_traceback():
    """The kubernetes client's thread per port-forward raises ``ConnectionResetError`` when a
    head pod dies mid-stream: the hook a forward installs keeps that from the previous hook
    (which prints it), not another thread's exception nor a non-network one in that thread."""
    seen: list[str] = []
    hook = quieting(lambda args: seen.append(f"{args.thread.name}: {args.exc_value!r}"))

    def raised(name: str, exc: BaseException) -> None:
        t = threading.Thread(name=name)
        hook(threading.ExceptHookArgs([type(exc), exc, None, t]))

    raised("Kubernetes port forward proxy: 6379", ConnectionResetError(104, "reset"))
    raised("Kubernetes port forward proxy: 6379", BrokenPipeError(32, "broken"))
    raised("Kubernetes port forward proxy: 8265", ValueError("a bug"))
    raised("someone-else", ConnectionResetError(104, "reset"))
    assert seen == ["Kubernetes port forward proxy: 8265: ValueError('a bug')",
                    "someone-else: ConnectionResetError(104, 'reset')"]
    fwd = LocalForward(None, "ray", lambda: ("demo-head", 8265), "hooktest")  # type: ignore[arg-type]
    before = threading.excepthook
    try:
        fwd.start()  # installs it once, around whatever hook was there
        assert getattr(threading.excepthook, "raychaos_quiet", False)
        installed = threading.excepthook
        fwd.start()
        LocalForward(None, "ray", lambda: ("x", 1), "hooktest2").start().close()  # type: ignore[arg-type]
        assert threading.excepthook is installed
    finally:
        fwd.close()
        threading.excepthook = before
