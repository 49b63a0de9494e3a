"""Copies of catalog experiments pointed at a test's own cluster and folders."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def variant(src: str, dest: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load((REPO / src).read_text())
    edit(data)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def raychaos_block(data: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in data["extensions"] if e.get("name") == "raychaos")


def method_args(data: dict[str, Any], func: str) -> dict[str, Any]:
    act = next(a for a in data["method"] if a["provider"]["func"] == func)
    return act["provider"].setdefault("arguments", {})


NOTHING_LEFT = {"processes": [], "namespaces": [], "links": [], "state_dir": []}
WARM = "itwarm"  # the one local cluster the integration modules share (conftest.warm_cluster)


def module_cluster(warm: tuple[Any, Path], keep_serve: bool = False
                   ) -> Iterator[tuple[Any, Path]]:
    """A module's view of the shared warm cluster: restored and proven clean before the module
    (what a run does before it reuses a cluster), and proven clean after it — no fault left,
    every node ALIVE with its totals, no job running — without restoring anything, so a module
    that leaves something behind fails here instead of passing it on. A Serve application an
    earlier module left is removed unless the module wants it (``keep_serve``: it reuses it)."""
    from raychaos.run.serve import retire_serve
    from raychaos.targets.local import warm as warm_cluster

    target, root = warm
    target.ensure_up(lambda _msg: None)
    target.run_lock().release()  # the module's runs take it themselves
    if not keep_serve:
        retire_serve(target)
    yield target, root
    warm_cluster.prove_clean(target.cluster, target.jobs, timeout=120)


def own_cluster(tmp_path_factory: Any, name: str, **spec: Any) -> Iterator[tuple[Any, Path]]:
    """A module's own local cluster, for settings the shared warm one does not have (``spec``:
    more LocalClusterSpec settings); always torn down, and the teardown proves nothing is left
    (processes, namespaces, links, folders)."""
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.target import LocalTarget

    root = tmp_path_factory.mktemp("state")
    target = LocalTarget(LocalClusterSpec(name=name, head_restart_delay_s=1, **spec),
                         state_root=root)
    try:
        target.up()
        yield target, root
    finally:
        target.down()
        assert target.leftovers() == NOTHING_LEFT


def xfail_if_head_crash_looped(run_dir: Path) -> None:
    """A failed head-kill run whose restarted head died again by itself: on this shared 2-core
    box a head restarted under load sometimes crash-loops (its raylet exits ~30 s after the
    restart, the supervisor restarts it, and again), and the run rightly fails "did not recover"
    or "went down again". That judges the box, not the harness, so the test stops there as an
    xfail naming the evidence (the head's own exits on the timeline). Any other failure is
    still a failure."""
    import json

    import pytest

    path = run_dir / "timeline.jsonl"
    if not path.exists():
        return
    events = [r for r in map(json.loads, path.read_text().splitlines())
              if r.get("kind") == "event"]
    kills = [r["t"] for r in events if r.get("event") == "head_killed"]
    if not kills:
        return
    exits = [r for r in events if r.get("event") == "node_exited" and r.get("name") == "head"
             and r["t"] > kills[-1]]
    if len(exits) >= 2:  # the kill's own exit, then the restarted head's
        pytest.xfail(f"the restarted head crash-looped on this box: it exited {len(exits)} "
                     f"times after the kill, at t={[round(r['t'], 1) for r in exits]} "
                     "(the run's fail is right; no recovery to check)")
