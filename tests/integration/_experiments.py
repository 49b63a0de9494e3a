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


def module_cluster(tmp_path_factory: Any, name: str, **spec: Any) -> Iterator[tuple[Any, Path]]:
    """A module's shared local cluster (``spec``: more LocalClusterSpec settings); always torn
    down, and the teardown proves nothing is left (processes, namespaces, links, folders)."""
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
