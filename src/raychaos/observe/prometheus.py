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


def parse_prometheus(text: str) -> Iterable[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a Prometheus text exposition."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
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
    ``gcs_rss_mb`` are the GCS process's own, as the head's reporter agent measures them."""
    used = spilled = restored = gpu_avail = gpu_used = 0.0
    gcs: dict[str, float] = {}
    seen = False
    for text in texts:
        for name, labels, value in parse_prometheus(text):
            seen = True
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
