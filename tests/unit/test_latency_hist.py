"""Per-request latency samples in the stats lines: the 2 % histogram helpers (loads/_stats.py),
window percentiles from the merged histogram (hand-computed p95) with the per-second fallback
for old lines, window_latencies, and the Locust load's rate: key."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from raychaos.catalog import stats_format
from raychaos.config.settings import LoadSpec
from raychaos.observe.loadstats import load_report, window_latencies
from raychaos.observe.windows import windows
from raychaos.run.loads import locust_env

pytestmark = pytest.mark.unit
S = stats_format()


def test_buckets_are_2_percent_wide_and_their_value_is_the_middle():
    assert S.bucket_of(0.0) == 0 == S.bucket_of(0.01) == S.bucket_of(-1.0)
    assert S.bucket_of(100.0) == math.floor(math.log(100.0 / 0.01) / math.log(1.02))
    for i in (0, 1, 50, 465, 900):
        assert S.bucket_of(S.bucket_value(i)) == i
        assert S.bucket_value(i + 1) / S.bucket_value(i) == pytest.approx(1.02)
    for ms in (0.5, 3.0, 47.0, 1234.0, 60_000.0):
        assert abs(S.bucket_value(S.bucket_of(ms)) / ms - 1) <= 0.0101


def test_merge_and_nearest_rank_percentile():
    merged = S.merge_hists([{"10": 2, "20": 1}, None, {10: 1, "30": 0}, {"5": 6}])
    assert merged == {5: 6, 10: 3, 20: 1}
    assert S.hist_percentile(merged, 50) == S.bucket_value(5)  # rank 5 of 10
    assert S.hist_percentile(merged, 90) == S.bucket_value(10)  # rank 9
    assert S.hist_percentile(merged, 95) == S.bucket_value(20)  # rank 10
    assert S.hist_percentile({}, 95) is None and S.hist_percentile({"3": 0}, 50) is None


def test_second_stats_lines_carry_the_hist_of_their_successes(monkeypatch):
    now = [1000.2]
    monkeypatch.setattr(S.time, "time", lambda: now[0])
    out = io.StringIO()
    stats = S.SecondStats("x", out=out)
    for ms in (1.0, 1.0, 50.0):
        stats.ok(ms / 1000)
    stats.fail()
    now[0] = 1001.1
    stats.tick()
    line = S.parse_line(out.getvalue())
    assert line["count"] == 3 and line["p95_ms"] == 50.0, "the old fields stay"
    assert line["hist"] == {str(S.bucket_of(1.0)): 2, str(S.bucket_of(50.0)): 1}


def _timeline(with_hist: bool) -> list[dict]:
    """Baseline seconds 1..20: 100 requests/s, 90 at 10 ms and 10 at 100 ms, except second 10
    (one stall: 100 at 1000 ms)."""
    recs: list[dict] = []
    for s in range(1, 21):
        lat = [1000.0] * 100 if s == 10 else [10.0] * 90 + [100.0] * 10
        line = {"t": float(s), "kind": "load", "load": "web", "count": len(lat),
                "failures": 0, "p50_ms": S.percentile(lat, 50), "p95_ms": S.percentile(lat, 95),
                "p99_ms": S.percentile(lat, 99)}
        if with_hist:
            line["hist"] = S.histogram(lat)
        recs.append(line)
    recs.append({"t": 21.0, "kind": "sample", "gcs_up": True})
    return recs


def test_window_percentiles_come_from_the_merged_hist():
    recs = _timeline(with_hist=True)
    run = load_report(recs, windows(recs))["web"]["run"]
    # seconds 2..20 (the first is partial): 19 x 100 = 1900 samples; 18 x 90 at 10 ms, 18 x 10
    # at 100 ms, 100 at 1000 ms. p95 = rank ceil(0.95 x 1900) = 1805 > 1620 + 180 = 1800: the
    # stall's 1000 ms bucket; p50 (rank 950) is 10 ms's bucket
    assert run["samples"] == run["count"] == 1900
    assert run["percentiles_from"] == "hist"
    assert run["p95_ms"] == S.bucket_value(S.bucket_of(1000.0))
    assert run["p50_ms"] == S.bucket_value(S.bucket_of(10.0))
    assert run["p95_ms"] == pytest.approx(1000.0, rel=0.0101)


def test_old_lines_without_hist_fall_back_to_per_second_percentiles():
    recs = _timeline(with_hist=False)
    run = load_report(recs, windows(recs))["web"]["run"]
    assert run["percentiles_from"] == "seconds"
    # weighted over per-second p95s: 18 seconds of 100 ms, one of 1000 ms (5.3 % of the weight)
    assert run["p95_ms"] == 1000.0 and run["p50_ms"] == 10.0
    assert window_latencies(recs, windows(recs), "run", "web") is None


def test_window_latencies_are_bucket_values_and_counts():
    recs = _timeline(with_hist=True)
    wins = windows(recs)
    got = window_latencies(recs, wins, "run", None)
    assert got is not None
    values, counts = got
    assert counts.sum() == 1900 and list(counts) == [1620, 180, 100]
    assert np.allclose(values, [S.bucket_value(S.bucket_of(v)) for v in (10.0, 100.0, 1000.0)])
    assert np.repeat(values, counts).size == 1900
    assert window_latencies(recs, wins, "chaos", "web") is None, "no such window"


def test_a_locust_load_takes_a_rate_and_passes_it_on():
    load = LoadSpec(name="web", kind="locust", script="x.py", rate=30)
    assert locust_env(load.rate) == {"RAYCHAOS_RATE": "30"}
    assert locust_env(None) == {}
    with pytest.raises(ValueError, match="only a locust load takes a rate"):
        LoadSpec(name="storm", script="x.py", rate=30)
