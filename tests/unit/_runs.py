"""Hand-made results folders, so report/junit/compare tests need no cluster.

``make_run`` writes ``timeline.jsonl``, ``ledger.json`` and ``summary.json`` in the formats
documented in :mod:`raychaos.results.store`, for a 60 s head-kill run: baseline 0-20 s, the GCS down
from 20 to 26 s, rollback at 30 s, recovery until 60 s. Arguments let a test plant a slower
recovery, a failing SLO, a crash (no summary, torn last line) or awkward text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

T0 = 1_764_460_800.0  # 2025-11-30T00:00:00Z

DEFAULT_SLOS: list[dict[str, Any]] = [
    {"name": "gcs-recovers-fast", "metric": "gcs_recovery_s", "window": "chaos", "load": None,
     "value": 6.0, "op": "<=", "threshold": 10.0, "verdict": "pass",
     "evidence": {"killed_at": 20.0, "first_healthy_at": 26.0}},
    {"name": "storm-throughput", "metric": "throughput_ratio", "window": "recovery",
     "load": "task_storm", "value": 0.95, "op": ">=", "threshold": 0.8, "verdict": "pass",
     "evidence": {"baseline_per_s": 100.0, "window_per_s": 95.0}},
    {"name": "storm-p99", "metric": "p99_latency_ms", "window": "chaos", "load": "task_storm",
     "value": 40.0, "op": "<=", "threshold": 25.0, "verdict": "fail",
     "evidence": {"samples": 10}},
    {"name": "jobs-survive", "metric": "job_survival_ratio", "window": "recovery", "load": None,
     "value": None, "op": ">=", "threshold": 1.0, "verdict": "n/a",
     "evidence": {"reason": "no jobs submitted"}},
]

DEFAULT_PROBES: list[dict[str, Any]] = [
    {"name": "sentinel-preserved", "verdict": "pass",
     "evidence": {"pid_before": 101, "pid_after": 101, "actor_state_preserved": True}},
    {"name": "gcs-recovery", "verdict": "error", "evidence": {"error": "dashboard timed out"}},
]


def window_stats(seconds: float, count: int, failures: int, p95: float | None,
                 dip: float | None = None, time_back_s: float | None = None) -> dict[str, Any]:
    """One load's statistics over one window, in ``summary["loads"]``'s shape."""
    return {"seconds": seconds, "count": count, "failures": failures,
            "throughput": count / seconds, "error_ratio":
            failures / (count + failures) if count + failures else None,
            "p50_ms": 2.0 if p95 is not None else None, "p95_ms": p95,
            "p99_ms": None if p95 is None else p95 * 1.5, "dip": dip,
            "time_back_s": time_back_s}


DEFAULT_LOADS: dict[str, dict[str, dict[str, Any]]] = {
    "task_storm": {"baseline": window_stats(20.0, 2000, 0, 4.0),
                   "chaos": window_stats(11.0, 300, 50, 30.0, dip=0.73),
                   "recovery": window_stats(29.0, 2900, 0, 4.0, dip=0.0, time_back_s=1.0),
                   "run": window_stats(60.0, 5200, 50, 8.0)},
    "serve_http": {"baseline": window_stats(20.0, 1000, 0, 9.0),
                   "chaos": window_stats(11.0, 50, 0, 9.0, dip=0.91),
                   "recovery": window_stats(29.0, 1450, 0, 9.0, dip=0.0, time_back_s=2.0),
                   "run": window_stats(60.0, 2500, 0, 9.0)},
}


def fault_record(fid: str = "f1", fault: str = "kill_head") -> dict[str, Any]:
    return {
        "id": fid, "fault": fault, "args": {"signal": "SIGKILL"}, "state": "undone",
        "undo": {"restart": True},
        "evidence": {"head_pid_before": 4242, "head_pid_after": 4343, "gcs_down_s": 6.0},
        "error": None, "started_at": T0 + 20.0, "applied_at": T0 + 20.2,
        "undone_at": T0 + 31.0,
    }


def timeline_records(gcs_down: tuple[float, float] = (20.0, 26.0),
                     nodes_back_at: float = 34.0) -> list[dict[str, Any]]:
    """Samples every 0.5 s, one stats line per second, and the fault/rollback events."""
    out: list[dict[str, Any]] = []

    def rec(t: float, kind: str, **fields: Any) -> None:
        out.append({"t": t, "ts": T0 + t, "kind": kind, **fields})

    rec(0.0, "event", event="phase", name="baseline", detail={})
    for i in range(121):
        t = i * 0.5
        up = not (gcs_down[0] <= t < gcs_down[1])
        alive = 3 if (t < 20.0 or t >= nodes_back_at) else 1
        rec(t, "sample", gcs_up=up, nodes_alive=alive if up else 0, nodes_total=3,
            gpus_total=1.0 if alive == 3 else 0.0, gpus_available=0.5 if alive == 3 else 0.0,
            jobs={"raysubmit_1": "RUNNING"})
    for s in range(1, 61):
        hurt = 20 < s <= 30  # a stats line covers the second before its t
        rec(float(s), "load", load="task_storm", count=20 if hurt else 100,
            failures=5 if hurt else 0, p50_ms=2.0, p95_ms=30.0 if hurt else 4.0,
            p99_ms=40.0 if hurt else 8.0)
        rec(float(s), "load", load="serve_http", count=0 if hurt else 50, failures=0,
            p50_ms=None if hurt else 5.0, p95_ms=None if hurt else 9.0,
            p99_ms=None if hurt else 12.0)
    rec(20.0, "event", event="phase", name="chaos", detail={})
    rec(20.0, "event", event="fault_start", name="kill_head", detail={"id": "f1"})
    rec(20.2, "event", event="fault_applied", name="kill_head", detail={"id": "f1"})
    rec(30.0, "event", event="fault_end", name="kill_head", detail={"id": "f1"})
    rec(30.0, "event", event="rollback_start", name="kill_head", detail={"id": "f1"})
    rec(31.0, "event", event="rollback_end", name="kill_head", detail={"id": "f1"})
    rec(31.0, "event", event="phase", name="recovery", detail={})
    out.sort(key=lambda r: r["t"])
    return out


def make_run(root: Path, name: str = "run-a", *, title: str = "Kill the head under load",
             slos: list[dict[str, Any]] | None = None,
             probes: list[dict[str, Any]] | None = None,
             verdict: str = "fail", status: str = "completed",
             errors: list[str] | None = None, summary: bool = True, torn: bool = False,
             gcs_down: tuple[float, float] = (20.0, 26.0),
             nodes_back_at: float = 34.0, started_at: float = T0,
             slug: str = "kill-the-head-under-load",
             loads: dict[str, Any] | None = DEFAULT_LOADS) -> Path:
    """Write one synthetic results folder under ``root`` and return its path."""
    run = root / name
    run.mkdir(parents=True)
    lines = [json.dumps(r) for r in timeline_records(gcs_down, nodes_back_at)]
    text = "\n".join(lines) + "\n"
    if torn:
        text += '{"t": 61.0, "ts": 1764460861.0, "kind": "sam'
    (run / "timeline.jsonl").write_text(text, encoding="utf-8")
    target = {"kind": "local", "name": "raychaos"}
    faults = [fault_record()]
    (run / "ledger.json").write_text(json.dumps(
        {"run_id": name, "target": target, "faults": faults}), encoding="utf-8")
    if summary:
        data = {
            "experiment": title, "slug": slug, "run_id": name,
            "status": status, "verdict": verdict,
            "exit_code": {"pass": 0, "fail": 1, "error": 2}[verdict],
            "started_at": started_at, "ended_at": started_at + 60.0, "duration_s": 60.0,
            "target": target,
            "windows": {"baseline": [0.0, 20.0], "chaos": [20.0, 31.0],
                        "recovery": [31.0, 60.0]},
            "probes": DEFAULT_PROBES if probes is None else probes,
            "slos": DEFAULT_SLOS if slos is None else slos,
            "faults": faults, "errors": list(errors or []),
        }
        if loads is not None:
            data["loads"] = loads
        (run / "summary.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    return run


def slo(name: str, value: float | None, *, op: str = "<=", threshold: float = 10.0,
        verdict: str | None = None, metric: str = "gcs_recovery_s") -> dict[str, Any]:
    """One SLO result; the verdict follows the op unless given."""
    if verdict is None:
        ok = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
              ">": lambda a, b: a > b}[op]
        verdict = "n/a" if value is None else ("pass" if ok(value, threshold) else "fail")
    return {"name": name, "metric": metric, "window": "chaos", "load": None, "value": value,
            "op": op, "threshold": threshold, "verdict": verdict, "evidence": {}}
