"""A run whose start fails with a harness bug (not a RaychaosError) must stop there: Chaos
Toolkit logs a failing control and runs the method anyway — a head kill with no loads and no
sentinel, judged as if it were a run (seen on the KubeRay world after a merge)."""

from __future__ import annotations

from typing import Any

import pytest
from chaoslib.exceptions import InterruptExecution

from raychaos import control

pytestmark = pytest.mark.unit


class _Session:
    def __init__(self, error: BaseException) -> None:
        self.error_to_raise = error
        self.failed: BaseException | None = None

    def start(self) -> None:
        raise self.error_to_raise

    def failed_to_start(self, error: BaseException) -> None:
        self.failed = error


@pytest.mark.parametrize("error", [AttributeError("'str' object has no attribute 'get'"),
                                   KeyError("cluster")])
def test_a_harness_bug_at_start_interrupts_the_run(monkeypatch: Any, error: Exception) -> None:
    session = _Session(error)
    monkeypatch.setattr(control, "take_handed_over", lambda: session)
    with pytest.raises(InterruptExecution, match=type(error).__name__):
        control.before_experiment_control({}, {})
    assert session.failed is error
