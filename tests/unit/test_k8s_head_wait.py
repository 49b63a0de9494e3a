"""``wait_head_back`` when the API server is away: a moment is waited out, the whole wait is
the harness unable to see, and says so by raising — however the retries' sleeps fall.

Seen on the sim bed in a make test: the API server away from the start of a 2 s wait, the one
retry's 1 s sleep overran the deadline on a busy box, the loop ended by its condition and
the wait returned "not back" — a head that failed to come back, where nothing was seen."""

from __future__ import annotations

import time
from typing import Any

import pytest

from raychaos.errors import TargetUnavailable
from raychaos.targets.kubernetes import head

pytestmark = pytest.mark.unit


class AwayApi:
    """An ApiSession whose every read finds the API server unreachable."""

    def __init__(self) -> None:
        self.core = type("Core", (), {"list_namespaced_pod": staticmethod(lambda *a, **k: None)})
        self.reads = 0

    def read(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        raise TargetUnavailable("kubernetes API at test is unreachable (list): refused")


def test_an_api_server_away_past_the_deadline_raises_even_when_a_sleep_overruns(monkeypatch):
    real_sleep = time.sleep
    monkeypatch.setattr(head.time, "sleep", lambda s: real_sleep(s + 0.6))  # a busy box
    api = AwayApi()
    with pytest.raises(TargetUnavailable, match="unreachable"):
        head.wait_head_back(api, "ray", "demo", {"uid": "gone"}, timeout=1.5)  # type: ignore[arg-type]
    assert api.reads == 1, "one read, one retry's sleep past the deadline"


def test_an_api_server_away_for_the_whole_wait_raises(monkeypatch):
    api = AwayApi()
    with pytest.raises(TargetUnavailable):
        head.wait_head_back(api, "ray", "demo", {"uid": "gone"}, timeout=2.5)  # type: ignore[arg-type]
    assert api.reads >= 2
