"""The death watch (raychaos.observe.signals.DeathWatch) tells a false death from a real one
even when the raylet exited before it was asked: a raylet that logged, since the watch began,
that the GCS marked it dead was alive when the GCS declared it so (seen in CI: a saturated
link's false death read "raylet not alive" because the raylet had already obeyed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raychaos.config.rayflags import MARKED_DEAD_LINE
from raychaos.config.settings import RaychaosSettings
from raychaos.context import Run, activate, deactivate
from raychaos.observe.signals import DeathWatch
from raychaos.probes.nodes import false_node_deaths
from raychaos.results.store import Clock, Ev, Ledger, Timeline
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


def _probe_with(tmp_path: Any, target: Any, record: Any) -> dict[str, Any]:
    tmp_path.mkdir()
    clock = Clock()
    line = Timeline(tmp_path / "timeline.jsonl", clock)
    run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
              clock=clock, timeline=line, ledger=Ledger(tmp_path / "ledger.json", "r1", {}))
    activate(run)
    try:
        record(line)
        false_node_deaths(settle_s=0)
        return run.probes[-1]
    finally:
        deactivate()
        line.close()


def test_the_probe_asks_again_for_a_gone_raylet_the_watch_could_not_yet_read(tmp_path):
    """Seen on the bed: the watch read the worker's count while its container restarted (the
    old container's log not yet readable) and wrote told_marked_dead False; the probe, later,
    read 2 lines since the watch began — a false death the verdict had passed."""
    target = Stub()
    target.lines = {"worker-1": 2, "head": 0}
    watch = DeathWatch(target, None)  # type: ignore[arg-type]

    def record(line: Timeline) -> None:
        watch.timeline = line
        watch._read_baseline(["worker-1"])  # count 2 before the run's fault: earlier deaths
        target.lines["worker-1"] = 4
        line.write("event", t=5.0, event=Ev.NODE_DEAD, name="worker-1",
                   detail={"node_id": "id-worker-1", "raylet_alive": False,
                           "told_marked_dead": False})

    probe = _probe_with(tmp_path / "a", target, record)
    assert probe["verdict"] == "fail", probe
    [d] = probe["evidence"]["false"]
    assert d["told_marked_dead"] is True and "4 such lines now, 2 when" in d["told_seen"]

    # the negative control: a raylet that died without the line (killed) stays a real death
    target.lines = {"worker-1": 2, "head": 0}

    def killed(line: Timeline) -> None:
        watch.timeline = line
        watch._read_baseline(["worker-1"])
        line.write("event", t=5.0, event=Ev.NODE_DEAD, name="worker-1",
                   detail={"node_id": "id-worker-1", "raylet_alive": False,
                           "told_marked_dead": False})

    probe = _probe_with(tmp_path / "b", target, killed)
    assert probe["verdict"] == "pass", probe
    assert probe["evidence"]["raylet_not_alive"][0]["node"] == "worker-1"


def test_a_raylet_the_check_got_no_answer_about_is_judged_by_its_log(tmp_path):
    """Seen in CI on the bed (a saturated link under a shuffle): the exec that asks for the
    raylet got no answer (None), the raylet had logged twice that the GCS marked it dead, and
    the verdict read "unknown" for what its own evidence showed was a false death."""
    target = Stub()
    watch = DeathWatch(target, Timeline(tmp_path / "t.jsonl", Clock()))  # type: ignore[arg-type]
    watch.observe([node("worker-1", "ALIVE"), node("worker-2", "ALIVE")])
    assert watch._baseline is not None
    watch._baseline.join(timeout=5)
    target.lines["worker-1"] = 4  # two lines since the watch began; worker-2 none
    deaths = watch.report([node("worker-1", "DEAD"), node("worker-2", "DEAD")], seen_at=5.0)
    assert {d["name"]: (d["raylet_alive"], d["told_marked_dead"]) for d in deaths} == {
        "worker-1": (None, True), "worker-2": (None, False)}

    # the probe, from the timeline alone: the watch's read said nothing yet, its own says two
    target = Stub()
    target.lines = {"worker-1": 0, "worker-2": 0, "head": 0}
    watch = DeathWatch(target, None)  # type: ignore[arg-type]

    def record(line: Timeline) -> None:
        watch.timeline = line
        watch._read_baseline(["worker-1", "worker-2"])
        target.lines["worker-1"] = 2
        for name in ("worker-1", "worker-2"):
            line.write("event", t=5.0, event=Ev.NODE_DEAD, name=name,
                       detail={"node_id": f"id-{name}", "raylet_alive": None})

    probe = _probe_with(tmp_path / "p", target, record)
    assert probe["verdict"] == "fail", probe
    [d] = probe["evidence"]["false"]
    assert d["node"] == "worker-1" and "2 such lines now, 0 when" in d["told_seen"]
    # worker-2 logged nothing and was not asked in time: still not known, and said so
    assert probe["evidence"]["unobserved"] == ["worker-2 (id-worker-2)"]

    # without a false one, that unanswered death leaves the verdict unknown, not pass
    target.lines = {"worker-1": 0, "worker-2": 0, "head": 0}

    def unanswered(line: Timeline) -> None:
        watch.timeline = line
        watch._read_baseline(["worker-2"])
        line.write("event", t=5.0, event=Ev.NODE_DEAD, name="worker-2",
                   detail={"node_id": "id-worker-2", "raylet_alive": None})

    probe = _probe_with(tmp_path / "q", target, unanswered)
    assert probe["verdict"] == "unknown", probe
