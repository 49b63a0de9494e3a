"""The local faults' effect in numbers, side by side on one cluster (figures vary ±30% here).

- cross-node transfer rate before / during saturation vs the configured limit;
- pull time vs image size and rate (and the ideal size / rate);
- drain-to-replacement seconds of a GPU node.

    PYTHONPATH=src python bench/faults.py
"""

from __future__ import annotations

import json

from raychaos.config.settings import LocalClusterSpec
from raychaos.targets.local.target import LocalTarget


def main() -> int:
    t = LocalTarget(LocalClusterSpec(name="flt-bench"))
    rows: dict[str, list] = {"network": [], "registry": [], "drain": []}
    try:
        t.up()
        for limit, flood in ((50e6, False), (50e6, True), (10e6, True)):
            rec: dict = {}
            try:
                ev = t.saturate_network(nodes=["worker-1"], bandwidth_bps=limit, loss_pct=0.0,
                                        latency_ms=0.0, flood=flood, partition=False,
                                        flood_s=20, record=rec)
                rows["network"].append({"limit_mbit": limit / 1e6, "flood": flood,
                                        "before_mbit": ev["before"]["mbit_s"],
                                        "during_mbit": ev["during"]["mbit_s"]})
            finally:
                t.undo(rec)
        for mb, rate in ((16, 40e6), (32, 40e6), (16, 20e6)):
            rec = {}
            try:
                ev = t.throttle_registry_pulls(rate_bps=rate, latency_ms=0.0, error_rate=0.0,
                                               image_mb=mb, restart_workers=None, record=rec)
                rows["registry"].append({
                    "image_mb": mb, "rate_mbit": rate / 1e6,
                    "unthrottled_s": ev["pull_before"]["seconds"],
                    "throttled_s": ev["pull_during"]["seconds"],
                    "ideal_s": round(mb * 8 * 1024 * 1024 / rate, 2),
                    "measured_mbit": round(ev["pull_during"]["rate_bps"] / 1e6, 1)})
            finally:
                t.undo(rec)
        rec = {}
        try:
            ev = t.drain_nodes(count=1, selector=None, deadline_s=5, reason="preemption",
                               replace=True, replace_delay_s=2, record=rec)
            rows["drain"].append({k: ev[k] for k in (
                "states", "deadline_s", "dead_after_stop_s", "stop_to_replacement_s",
                "drain_to_replacement_s")})
        finally:
            t.undo(rec)
    finally:
        t.down()
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
