"""Read Ray's own Prometheus metrics: object store use, spilled bytes, GPU capacity.

Every raylet exports them on its metrics port; the spill and object-store figures are what shows
an all-to-all shuffle pressing the store until it spills and thrashes, and the GPU figures show
capacity a drain took away or fractional tasks left stranded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["parse_prometheus", "resource_snapshot"]

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+([-+0-9.eEinfINFNa]+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


#: The only metrics :func:`resource_snapshot` reads (a raylet exports thousands of lines)
SNAPSHOT_METRICS = ("ray_object_store_used_memory", "ray_spill_manager_objects_bytes",
                    "ray_component_cpu_percentage", "ray_component_rss_mb", "ray_resources")
_SAMPLE = re.compile(r"^[a-zA-Z_:]", re.M)


def parse_prometheus(text: str, names: tuple[str, ...] | None = None
                     ) -> Iterable[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a Prometheus text exposition, or only
    those of ``names`` (a line of another metric is skipped before it is parsed)."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if names is not None and not line.startswith(names):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        yield m.group(1), dict(_LABEL.findall(m.group(3) or "")), value


def resource_snapshot(texts: Iterable[str]) -> dict[str, Any]:
    """Cluster totals from every node's metrics text.

    ``spilled_mb``/``spill_total_mb`` and ``restore_total_mb`` are the raylets' cumulative
    spilled and restored bytes (rates come from their differences); ``gcs_cpu_pct`` and
    ``gcs_rss_mb`` are the GCS process's own, as the head's reporter agent measures them.

    Only those metrics' lines are parsed: the monitor's job poller calls this once a second,
    and parsing every line of every node's text held the GIL for a quarter of the run (py-spy,
    a local head kill), starving the GCS sampler of it while a restarting head took the CPU."""
    used = spilled = restored = gpu_avail = gpu_used = 0.0
    gcs: dict[str, float] = {}
    seen = False
    for text in texts:
        seen = seen or _SAMPLE.search(text) is not None
        for name, labels, value in parse_prometheus(text, SNAPSHOT_METRICS):
            if name == "ray_object_store_used_memory":
                used += value
            elif name == "ray_spill_manager_objects_bytes" and labels.get("State") == "Spilled":
                spilled += value
            elif name == "ray_spill_manager_objects_bytes" and labels.get("State") == "Restored":
                restored += value
            elif name in ("ray_component_cpu_percentage", "ray_component_rss_mb") and \
                    labels.get("Component") == "gcs":
                gcs[name] = gcs.get(name, 0.0) + value
            elif name == "ray_resources" and labels.get("Name") == "GPU":
                if labels.get("State") == "AVAILABLE":
                    gpu_avail += value
                elif labels.get("State") == "USED":
                    gpu_used += value
    if not seen:
        return {}
    out: dict[str, Any] = {
        "object_store_used_mb": round(used / 2**20, 2), "spilled_mb": round(spilled / 2**20, 2),
        "spill_total_mb": round(spilled / 2**20, 2), "restore_total_mb": round(
            restored / 2**20, 2), "gpus_available": gpu_avail, "gpus_used": gpu_used}
    if gcs:
        out["gcs_cpu_pct"] = round(gcs.get("ray_component_cpu_percentage", 0.0), 1)
        out["gcs_rss_mb"] = round(gcs.get("ray_component_rss_mb", 0.0), 1)
    return out
