"""The death watch (raychaos.observe.signals.DeathWatch) tells a false death from a real one
even when the raylet exited before it was asked: a raylet that logged, since the watch began,
that the GCS marked it dead was alive when the GCS declared it so (seen in CI: a saturated
link's false death read "raylet not alive" because the raylet had already obeyed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raychaos.config.rayflags import MARKED_DEAD_LINE
from raychaos.observe.signals import DeathWatch
from raychaos.results.store import Clock, Timeline
from raychaos.targets.base import NodeInfo

pytestmark = pytest.mark.unit


class Stub:
    def __init__(self) -> None:
        self.lines = {"worker-1": 2, "worker-2": 0}  # earlier deaths of the shared cluster
        self.alive: dict[str, bool | None] = {}

    def raylet_alive(self, ids: list[str]) -> dict[str, bool | None]:
        return {i: self.alive.get(i) for i in ids}

    def ray_log_counts(self, nodes: list[str], needles: list[str]) -> dict[str, dict[str, int]]:
        return {n: {MARKED_DEAD_LINE: self.lines[n]} for n in nodes if n in self.lines}


def node(name: str, state: str) -> NodeInfo:
    return NodeInfo(node_id=f"id-{name}", name=name, state=state, is_head=name == "head",
                    address="10.0.0.1", cpus=1.0, gpus=0.0, resources={}, labels={})


def test_a_raylet_gone_before_it_was_asked_is_false_only_if_it_logged_the_marking(tmp_path):
    target = Stub()
    line = Timeline(tmp_path / "t.jsonl", Clock())
    watch = DeathWatch(target, line)  # type: ignore[arg-type]
    watch.observe([node("head", "ALIVE"), node("worker-1", "ALIVE"), node("worker-2", "ALIVE")])
    assert watch._baseline is not None
    watch._baseline.join(timeout=5)
    assert watch.logged == {"worker-1": 2, "worker-2": 0}
    # worker-1 told it was marked dead, and exited; worker-2 just died
    target.lines["worker-1"] = 3
    target.alive = {"id-worker-1": False, "id-worker-2": False}
    deaths = watch.report([node("worker-1", "DEAD"), node("worker-2", "DEAD")], seen_at=5.0)
    told = {d["name"]: d["told_marked_dead"] for d in deaths}
    assert told == {"worker-1": True, "worker-2": False}
    # a raylet still running is judged by that alone
    target.alive = {"id-worker-2": True}
    [d] = watch.report([node("worker-2", "DEAD")], seen_at=6.0)
    assert d["raylet_alive"] is True and "told_marked_dead" not in d
    line.close()
    events = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [e["detail"].get("told_marked_dead") for e in events
            if e.get("event") == "node_dead"] == [True, False, None]


def test_without_a_readable_log_a_gone_raylet_stays_unknown_not_false(tmp_path):
    target: Any = Stub()
    target.ray_log_counts = lambda nodes, needles: {}
    watch = DeathWatch(target, Timeline(tmp_path / "t.jsonl", Clock()))
    watch.observe([node("worker-1", "ALIVE")])
    target.alive = {"id-worker-1": False}
    [d] = watch.report([node("worker-1", "DEAD")], seen_at=1.0)
    assert d["raylet_alive"] is False and d["told_marked_dead"] is None
