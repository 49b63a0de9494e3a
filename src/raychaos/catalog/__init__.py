"""The files raychaos ships besides its code: the load scripts, the experiment catalog and the
SLO profiles — the repository's ``loads/``, ``experiments/`` and ``probes/`` folders, installed
as package data (symbolic links in a source checkout, copies in an installed wheel).

Everything that needs one of them finds it here, through :mod:`importlib.resources`, so a
``pip install raychaos`` (not only a source checkout) runs the catalog from any folder.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType

__all__ = ["catalog_file", "folder", "loads_dir", "stats_format"]

FOLDERS = ("loads", "experiments", "probes")


def folder(name: str) -> Path:
    """The installed ``loads``, ``experiments`` or ``probes`` folder."""
    if name not in FOLDERS:
        raise ValueError(f"no catalog folder {name!r} (have {', '.join(FOLDERS)})")
    return Path(str(resources.files(__name__) / name)).resolve()


def loads_dir() -> Path:
    """The load scripts (Ray job scripts, locustfiles, the stats format)."""
    return folder("loads")


def catalog_file(kind: str, path: Path) -> Path | None:
    """The shipped file ``path`` names (``experiments/head-kill.yaml``, ``head-kill``,
    ``loads/task_storm.py``), or None. ``kind`` is the folder when ``path`` does not say."""
    parts = path.parts
    if len(parts) > 1 and parts[0] in FOLDERS:
        kind, rest = parts[0], Path(*parts[1:])
    else:
        rest = path
    if kind not in FOLDERS:
        return None
    base = folder(kind)
    for candidate in (base / rest, base / f"{rest}.yaml"):
        if candidate.is_file():
            return candidate
    return None


@cache
def stats_format() -> ModuleType:
    """``loads/_stats.py``: the one stats-line format and the one percentile definition, shared
    by the load scripts (which ship it to the cluster: standard library only) and the harness."""
    spec = importlib.util.spec_from_file_location("raychaos_loads_stats",
                                                  loads_dir() / "_stats.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
