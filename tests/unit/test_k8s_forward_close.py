"""Closing raychaos's port-forward ends its accepting thread: a ``close`` alone left it blocked
in ``accept`` for the life of the process (the "threads still running" line of every test run
that made a target: raychaos-forward-dashboard x11)."""

from __future__ import annotations

import threading

import pytest

from raychaos.targets.kubernetes.forward import LocalForward

pytestmark = pytest.mark.unit


def test_close_ends_the_accepting_thread():
    fwd = LocalForward(None, "ray", lambda: ("demo-head", 8265), "closetest")  # type: ignore[arg-type]
    assert fwd.url.startswith("http://127.0.0.1:")
    mine = [t for t in threading.enumerate() if t.name == "raychaos-forward-closetest"]
    assert len(mine) == 1 and mine[0].is_alive()
    fwd.close()
    assert not mine[0].is_alive()
    fwd.close()  # twice is fine
