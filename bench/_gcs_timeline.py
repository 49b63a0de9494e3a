"""What a sampler's JSON lines say over time (``bench/gcs_probe_accuracy.py``): its samples,
its first answer after a moment, its longest silence in a window, and timestamps from Ray's
logs."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any


def samples(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in recs if "at" in r]


def first_answer(recs: list[dict[str, Any]], after: float) -> float | None:
    """When the sampler first HAD an answer after ``after`` (its completion time)."""
    for r in samples(recs):
        if r["at"] > after and r["up"]:
            return r["done"]
    return None


def max_gap(recs: list[dict[str, Any]], start: float, end: float) -> float:
    """Largest time between consecutive samples (completion times) in [start, end]: how long
    the sampler had nothing new to say."""
    times = [r["done"] for r in samples(recs) if start <= r["done"] <= end]
    # include the span from the window edges to the first/last sample
    marks = [start, *times, end]
    return max(b - a for a, b in zip(marks, marks[1:], strict=False))


def log_times(path: Path, pattern: str) -> list[float]:
    out = []
    rx = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
    for line in path.read_text(errors="replace").splitlines():
        if pattern in line:
            m = rx.match(line)
            if m:  # the raylet logs local time
                out.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return out


def _rel(t: float | None, t0: float) -> float | None:
    return t - t0 if t is not None else None



def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)

