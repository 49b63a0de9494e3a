"""Every SLO the shipped profiles hold, with its shipped threshold, window and load, fails on a
timeline where its property is broken — so no shipped threshold is one nothing can fail (a
failure ratio bound of 0.5 would pass a run in which every third task failed; a latency bound of
a minute would pass a load that stalled for seconds at a time).

The broken timelines are plain and blunt, the same for every profile: after the fault (t = 10)
a third of the operations fail, completions take 5 s, throughput halves and never comes back,
one shuffle block is lost and one corrupted; the chaos window has no completion at all (the
load stalled); the GCS crash-loops or its workers never report to it; the sentinel and a job
are lost. The arithmetic per metric is ``test_negative_controls.py``'s; this module checks the
numbers the profiles ship.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from raychaos.catalog import folder
from raychaos.config.metrics import METRICS
from raychaos.config.settings import SloProfile, SloSpec
from raychaos.observe.recovery import recovery_figures
from raychaos.observe.slo import evaluate

pytestmark = pytest.mark.unit

Records = list[dict[str, Any]]
CRASH_LOOP = [True] * 4 + ([False] * 4 + [True] * 3) * 8  # answers 0.6 s at a time


def _shipped() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(folder("probes").glob("slo-*.yaml")):
        for slo in yaml.safe_load(path.read_text())["slos"]:
            out.append((f"{path.stem}:{slo['name']}", slo))
    return out


def _load_lines(name: str) -> Records:
    """90 s of one load; healthy before the fault at 10, broken after it (see the module): a
    minute and more after chaos, so the longest shipped time-back bound (60 s) is watched past
    (a load not back when the observation ended, short of its bound, is inconclusive)."""
    recs: Records = [{"t": 10.0, "kind": "event", "event": "fault_start", "name": "f"},
                     {"t": 20.0, "kind": "event", "event": "fault_end", "name": "f"}]
    for s in range(1, 91):
        if 10 < s <= 20:
            continue  # the chaos window: the load stalled, it wrote nothing
        line = {"t": float(s), "kind": "load", "load": name, "count": 100, "failures": 0,
                "p50_ms": 2.0, "p95_ms": 4.0, "p99_ms": 8.0, "checksum_errors": 0,
                "lost_outputs": 0, "gpu_stranded_frac": 0.0}
        if s > 20:
            line.update(count=34, failures=17, p50_ms=5000.0, p95_ms=5000.0, p99_ms=5000.0,
                        checksum_errors=int(s == 25), lost_outputs=int(s == 26),
                        gpu_stranded_frac=0.9)
        recs.append(line)
    return recs


def _gcs_samples(ups: list[bool], reported: bool) -> Records:
    recs: Records = [{"t": 1.0, "kind": "event", "event": "head_killed", "name": "head",
                      "detail": {"workers_before": ["w1"]}}]
    recs += [{"t": round(i * 0.2, 3), "kind": "sample", "gcs_up": up, "gcs_incarnation": 2,
              **({"alive_ids": ["w1"], "reported_ids": ["w1"] if reported else []}
                 if up else {})} for i, up in enumerate(ups)]
    return recs


def _probes(metric: str) -> list[dict[str, Any]]:
    if metric in ("gcs_recovery_s", "gcs_flaps"):
        ups = CRASH_LOOP if metric == "gcs_recovery_s" else (
            [True] * 4 + [False] * 6 + [True] * 30 + [False] * 2 + [True] * 10)
        figures = recovery_figures(_gcs_samples(ups, reported=True))
    elif metric == "nodes_recovery_s":  # ALIVE in the restored table, never reporting
        figures = recovery_figures(_gcs_samples([True] * 4 + [False] * 5 + [True] * 40,
                                                reported=False))
    else:
        figures = {}
    figures["gcs_flaps_after_first_answer"] = figures.get("gcs_flaps")
    return [{"name": "gcs_recovery", "verdict": "pass", "evidence": figures},
            {"name": "job_survival", "verdict": "fail", "evidence": {"ratio": 0.5}},
            {"name": "sentinel_preserved", "verdict": "fail", "evidence": {"preserved": False}}]


@pytest.mark.parametrize(("where", "slo"), _shipped(), ids=[w for w, _ in _shipped()])
def test_every_shipped_slo_fails_when_its_property_is_broken(where, slo, monkeypatch):
    spec = SloSpec(name=slo["name"], metric=slo["metric"], op=slo.get("op", "<="),
                   threshold=float(slo["threshold"]), window=slo.get("window", "run"),
                   load=slo.get("load"))
    producer = METRICS[spec.metric].producer
    records = _load_lines(spec.load or "storm") if producer != "monitor" else [
        {"t": 10.0, "kind": "event", "event": "fault_start", "name": "f"},
        {"t": 15.0, "kind": "sample", "gcs_up": True, "spilled_mb": 4096.0},
        {"t": 20.0, "kind": "event", "event": "fault_end", "name": "f"}]
    [row], _ = evaluate(SloProfile(name="shipped", slos=[spec]), records, _probes(spec.metric))
    if row["verdict"] != "fail":  # a metric the blunt timeline does not break: its own control
        row = _with_control(spec, monkeypatch)
    assert row["verdict"] == "fail", (where, row)


def _with_control(spec: SloSpec, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The metric's broken timeline from ``test_negative_controls.py`` (fault spans, counters,
    GPU and storage records, probe evidence), judged with the *shipped* operator and threshold:
    in the shipped window when that window exists there, else in the control's own."""
    from tests.unit import test_negative_controls as nc

    seen: dict[str, Any] = {}
    real = nc._judge

    def capture(metric: str, op: str, threshold: float, records: Records,
                probes: list[dict[str, Any]] | None = None, window: str = "chaos",
                load: str | None = "storm") -> dict[str, Any]:
        seen.update(records=records, probes=probes or [], window=window, load=load)
        return real(metric, op, threshold, records, probes, window, load)

    monkeypatch.setattr(nc, "_judge", capture)
    nc.CONTROLS[spec.metric][1]()
    producer = METRICS[spec.metric].producer
    load = seen["load"] if producer == "loads" else None
    row: dict[str, Any] = {}
    for window in dict.fromkeys([spec.window, seen["window"]]):
        judged = SloSpec(name=spec.name, metric=spec.metric, op=spec.op,
                         threshold=spec.threshold, window=window, load=load)
        [row], _ = evaluate(SloProfile(name="shipped", slos=[judged]), seen["records"],
                            seen["probes"])
        if row["verdict"] == "fail":
            break
    return row


def test_every_shipped_profile_is_covered():
    names = {w.split(":")[0] for w, _ in _shipped()}
    assert {"slo-local", "slo-local-serve", "slo-faults-local", "slo-shuffle-local",
            "slo-production.example"} <= names
