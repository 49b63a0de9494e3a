"""The Ray pods' metrics are read at most ``rate`` times a second whatever the cluster's size
(``raychaos.targets.kubernetes.scrape``): a small cluster is read whole on every call, a big
one in turn (least recently read first) with the others' last texts kept; a pod gone or not
answering is left out."""

from __future__ import annotations

import pytest

from raychaos.targets.kubernetes.scrape import PodScraper

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_small_cluster_is_read_whole_on_every_call():
    clock, asked = Clock(), []
    s = PodScraper(10, clock)
    for _ in range(3):
        got = s.scrape(["a", "b", "c"], lambda n: asked.append(n) or f"m-{n}")
        clock.t += 1.0
        assert got == ["m-a", "m-b", "m-c"]
    assert len(asked) == 9


def test_a_big_cluster_is_read_in_turn_within_the_rate():
    clock, asked = Clock(), []
    pods = [f"p{i:02}" for i in range(25)]
    s = PodScraper(10, clock)
    sizes = []
    for _ in range(6):
        clock.t += 1.0
        asked.clear()
        got = s.scrape(pods, lambda n: asked.append(n) or f"m-{n}")
        sizes.append(len(got))
        assert len(asked) == 10  # the budget, not the cluster, sets the requests
    assert sizes == [10, 20, 25, 25, 25, 25]
    assert s.requests == 60  # 25 pods at 10/s: each read every 2.5 s
    # called faster than the rate: only what the bucket refilled
    clock.t += 0.2
    asked.clear()
    s.scrape(pods, lambda n: asked.append(n) or "x")
    assert len(asked) == 2


def test_a_pod_gone_or_silent_is_left_out():
    clock = Clock()
    s = PodScraper(10, clock)
    assert s.scrape(["a", "b"], lambda n: f"m-{n}") == ["m-a", "m-b"]
    clock.t += 1.0
    assert s.scrape(["a", "b"], lambda n: None if n == "b" else f"m-{n}") == ["m-a"]
    clock.t += 1.0
    assert s.scrape(["b"], lambda n: "m-b2") == ["m-b2"]
    assert set(s.texts) == {"b"} and set(s.read_at) == {"b"}
