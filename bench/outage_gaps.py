"""How densely the monitor sampled each head outage of finished runs — no cluster needed.

    python bench/outage_gaps.py RESULTS_DIR [RESULTS_DIR ...]

For every ``timeline.jsonl`` under the folders with a ``head_killed`` event: the outage (kill to
the first answer after the first unanswered sample), the largest gap between two samples from
the kill to that answer and from the first down sample to it (``outage_max_gap_s`` of the
summary), the samples per second written in it, and the ratio of the largest gap to the
sampling interval (the issue's bound: at most 2). Figures, not assertions: run it on the
results of ``raychaos run``/``calibrate`` of a head-kill experiment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def outage(path: Path) -> dict[str, Any] | None:
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    kills = [r["t"] for r in recs if r.get("event") == "head_killed"]
    if not kills:
        return None
    kill = max(kills)
    samples = sorted((r for r in recs if r.get("kind") == "sample"), key=lambda r: r["t"])
    after = [s for s in samples if s["t"] >= kill]
    first_down = next((i for i, s in enumerate(after) if not s["gcs_up"]), None)
    if first_down is None:
        return None
    answer = next((s["t"] for s in after[first_down:] if s["gcs_up"]), None)
    if answer is None:
        return {"run": path.parent.name, "note": "the GCS never answered again"}
    inside = [kill] + [s["t"] for s in after if s["t"] <= answer]
    down = [s["t"] for s in after[first_down:] if s["t"] <= answer]
    summary = path.parent / "summary.json"
    interval = (json.loads(summary.read_text()).get("monitor") or {}).get("interval_s", 0.2) \
        if summary.exists() else 0.2
    gap = max(b - a for a, b in zip(inside, inside[1:], strict=False))
    return {"run": path.parent.name, "outage_s": round(answer - kill, 3),
            "max_gap_from_kill_s": round(gap, 3),
            "max_gap_from_first_down_s": round(max(b - a for a, b in zip(
                down, down[1:], strict=False)), 3) if len(down) > 1 else None,
            "samples_per_s": round((len(inside) - 1) / (answer - kill), 2),
            "interval_s": interval, "gap_over_interval": round(gap / interval, 2)}


def main(argv: list[str]) -> int:
    rows = [r for root in argv for p in sorted(Path(root).rglob("timeline.jsonl"))
            if (r := outage(p)) is not None]
    for r in rows:
        print(json.dumps(r))
    worst = max((r["gap_over_interval"] for r in rows if "gap_over_interval" in r), default=None)
    print(json.dumps({"runs": len(rows), "worst_gap_over_interval": worst}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
