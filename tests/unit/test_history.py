"""``raychaos history``, and the pages of a trial series and a game day."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _runs import T0, make_run, slo

from raychaos.cli import main
from raychaos.results.gameday_index import build_gameday_report
from raychaos.results.history import build_history_page, format_history, history
from raychaos.results.series_page import build_trials_page
from tests._browser import CHROMIUM, Chromium

pytestmark = pytest.mark.unit
DAY = 86_400.0


def weekly(root: Path, values: list[float]) -> list[Path]:
    """One run a day of the same experiment; GCS recovery takes ``values`` seconds."""
    return [make_run(root, f"{i:02d}-head-kill", started_at=T0 + i * DAY, verdict="pass",
                     slos=[slo("gcs-recovers-fast", v, threshold=10.0),
                           slo("throughput", 0.9, op=">=", threshold=0.8,
                               metric="throughput_ratio")])
            for i, v in enumerate(values)]


def test_history_groups_runs_by_experiment_and_marks_regressions_like_compare(
        tmp_path: Path) -> None:
    weekly(tmp_path, [6.0, 6.5, 9.0])
    (tmp_path / "gd").mkdir()
    make_run(tmp_path / "gd", "other", title="Drain", slug="drain")  # a game day's folder
    result = history(tmp_path)
    [group] = [g for g in result["experiments"].values() if len(g["runs"]) == 3]
    runs = group["runs"]
    assert [r["values"]["gcs-recovers-fast"] for r in runs] == [6.0, 6.5, 9.0]
    assert runs[1]["regressions"] == {}  # +8 %: within the tolerance
    assert "gcs-recovers-fast" in runs[2]["regressions"]
    assert "worse by 38%" in runs[2]["regressions"]["gcs-recovers-fast"]
    names = [c["name"] for c in group["columns"]]
    assert names[:2] == ["gcs-recovers-fast", "throughput"] and "gcs_recovery_s" in names
    text = format_history(result)
    assert re.search(r"2025-12-02 00:00\s+pass\s+!9\.0 s\s+90%", text), text
    assert "REGRESSION: kill-the-head-under-load gcs-recovers-fast: worse by 38%" in text
    assert sorted(result["experiments"]) == ["drain", "kill-the-head-under-load"]


def test_history_cli_prints_the_table_writes_the_page_and_exits_1_on_a_regression(
        tmp_path: Path, capsys) -> None:
    weekly(tmp_path, [6.0, 9.0])
    assert main(["history", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and f"history: {tmp_path / 'history.html'}" in out
    page = (tmp_path / "history.html").read_text()
    assert 'class="n bad" title="worse by 50%' in page and 'id="rc-plotly-gz"' in page
    weekly(tmp_path / "calm", [6.0, 6.1])
    assert main(["history", str(tmp_path / "calm")]) == 0
    assert main(["history", str(tmp_path / "nope")]) == 2


def test_a_trial_series_page_has_distributions_and_the_runs_side_by_side(
        tmp_path: Path) -> None:
    runs = weekly(tmp_path, [6.0, 7.0, 12.0])
    page = build_trials_page(tmp_path, runs).read_text()
    assert "3 trial(s), 3 passed" in page
    side = page[page.index("The runs side by side"):]
    assert side.count('<a href="') == 3 and '<a href="00-head-kill/report.html">' in side
    assert re.search(r"<th>SLO gcs-recovers-fast</th><td>6\.0 s", side)
    assert "<th>recovery gcs_down_s</th>" in side
    [figure] = re.findall(r'<script type="application/json" class="rc-figure" '
                          r'data-target="distributions">(.*?)</script>', page, re.S)
    boxes = {t["name"]: t for t in json.loads(figure)["data"]}
    assert boxes["gcs-recovers-fast"]["x"] == [6.0, 7.0, 12.0]
    assert boxes["gcs-recovers-fast"]["boxpoints"] == "all"


def test_a_game_day_index_puts_its_runs_side_by_side(tmp_path: Path) -> None:
    runs = [make_run(tmp_path, "a", verdict="pass"), make_run(tmp_path, "b", title="Drain")]
    page = build_gameday_report(tmp_path, runs, title="weekly").read_text()
    assert "<h2>The runs side by side</h2>" in page and "<h2>Each SLO across the runs</h2>" in page
    assert '<a href="a/report.html">Kill the head under load</a>' in page
    assert '<a href="b/report.html">Drain</a>' in page


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_history_and_trials_pages_draw_in_headless_chromium(tmp_path: Path) -> None:
    runs = weekly(tmp_path, [6.0, 6.5, 9.0])
    build_history_page(history(tmp_path), tmp_path / "history.html")
    build_trials_page(tmp_path, runs)
    with Chromium(1200, 1200) as browser:
        for page in ("history.html", "trials.html"):
            browser.open(tmp_path / page)
            assert browser.wait_for("document.documentElement.dataset.plots || ''") == "ready"
            assert browser.evaluate("document.querySelectorAll('.rc-plot .main-svg').length")
