"""report.html: story first, readable tables, an interactive timeline — one file, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _runs import DEFAULT_SLOS, make_run

from raychaos.results.report import build_report, load_run
from tests._browser import CHROMIUM, check_in_chromium

pytestmark = pytest.mark.unit


def assert_self_contained(text: str) -> None:
    """Nothing is fetched: no external src/href, no script loaded from anywhere, no <link>."""
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)
    assert "<link" not in text.lower()
    assert "@import" not in text


def story_of(text: str) -> str:
    match = re.search(r'<p class="story [a-z]+" id="story">(.*?)</p>', text, re.S)
    assert match, "no story paragraph"
    return match.group(1)


def test_report_is_one_self_contained_file_story_first(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    out = build_report(run)
    assert out == run / "report.html"
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert 'id="rc-plotly-gz"' in text  # the plotting library travels inside the page
    assert '<img alt="timeline" src="data:image/png;base64,' in text  # the PNG is the fallback
    assert (run / "timeline.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    story = story_of(text)
    assert text.index('id="story"') < text.index("<h2>SLOs</h2>")  # the story comes first
    assert story.startswith("Failed: storm-p99, gcs-recovery.")
    assert "At t = 20.0 s raychaos killed the head (SIGKILL)." in story
    assert "The GCS was down for 6.0 s and answered again 6.0 s after the kill" in story
    assert "task_storm ran at 100/s before and 27.3/s during chaos (-73%)" in story
    assert "Lost: 50 failed operation(s) of task_storm." in story
    for slo in DEFAULT_SLOS:
        assert slo["name"] in text
    assert "15 ms over the bound" not in text and "over by 15 ms (60% of the bound)" in text
    assert "5 s to spare" not in text and "4.0 s to spare (40% of the bound)" in text


def test_report_has_per_load_window_tables_from_the_summary(tmp_path: Path) -> None:
    text = build_report(make_run(tmp_path)).read_text(encoding="utf-8")
    tables = dict(re.findall(r'<h3 class="load">(\w+)</h3><table class="load-table">(.*?)'
                             r"</table>", text, re.S))
    assert set(tables) == {"task_storm", "serve_http"}
    rows = {m[0]: m[1] for m in re.findall(r"<tr><td>(\w+)</td>(.*?)</tr>",
                                            tables["task_storm"])}
    assert list(rows) == ["baseline", "chaos", "recovery", "run"]
    chaos = re.findall(r'<td class="n">(.*?)</td>', rows["chaos"])
    # seconds, completed, failed, per second, errors, p50, p95, p99, dip, time back
    assert chaos == ["11.0 s", "300", "50", "27.27", "14%", "2 ms", "30 ms", "45 ms", "73%", "—"]
    recovery = re.findall(r'<td class="n">(.*?)</td>', rows["recovery"])
    assert recovery[-2:] == ["none", "1.0 s"]
    assert "no per-load statistics" not in text


def test_report_of_a_run_without_per_load_statistics_reads_them_off_the_timeline(
        tmp_path: Path) -> None:
    text = build_report(make_run(tmp_path, loads=None)).read_text(encoding="utf-8")
    assert "no per-load statistics" in text
    assert '<h3 class="load">task_storm</h3>' in text and '<h3 class="load">serve_http</h3>' in text


def test_fault_evidence_is_a_table_and_raw_json_only_behind_a_disclosure(tmp_path: Path) -> None:
    text = build_report(make_run(tmp_path)).read_text(encoding="utf-8")
    faults = text[text.index("<h2>Faults</h2>"):text.index("<h2>Timeline</h2>")]
    assert "<tr><td>head pid before</td><td>4242</td></tr>" in faults
    assert "<tr><td>started</td><td>t = 20.0 s</td></tr>" in faults
    assert "<tr><td>undone</td><td>t = 31.0 s</td></tr>" in faults
    raw = faults.index("<details><summary>raw JSON</summary><pre>")
    assert faults.index("head_pid_before") > raw  # the JSON key only in the disclosure
    recovery = text[text.index("<h2>Recovery</h2>"):text.index("<h2>Faults</h2>")]
    assert "14.0 s" in recovery and "<code>nodes_recovery_s</code>" in recovery


def test_report_leaves_no_pyplot_state_behind(tmp_path: Path) -> None:
    import sys

    build_report(make_run(tmp_path))
    pyplot = sys.modules.get("matplotlib.pyplot")
    assert pyplot is None or not pyplot.get_fignums()


def test_report_escapes_text_from_the_run(tmp_path: Path) -> None:
    run = make_run(tmp_path, title="<script>alert(1)</script> & co",
                   errors=['worker said <b>"boom"</b></script>'], verdict="error")
    text = build_report(run).read_text(encoding="utf-8")
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in text
    assert "&lt;b&gt;&quot;boom&quot;&lt;/b&gt;" in text
    assert text.lower().count("</script>") == text.lower().count("<script")  # none closed early


def test_report_on_crashed_run_without_summary_and_torn_line(tmp_path: Path) -> None:
    run = make_run(tmp_path, "crashed", summary=False, torn=True)
    view = load_run(run)
    assert not view.complete
    assert view.summary["status"] == "incomplete" and view.summary["verdict"] == "error"
    assert view.summary["faults"][0]["fault"] == "kill_head"  # from the ledger
    assert view.summary["windows"]["chaos"] == [20.0, 31.0]  # from phase events
    assert any("1 unreadable timeline line" in n for n in view.notes)
    text = build_report(run).read_text(encoding="utf-8")
    assert "summary.json is missing" in text
    assert story_of(text).startswith("Errored (incomplete)")
    assert "data:image/png;base64," in text


def test_report_on_empty_results_folder(tmp_path: Path) -> None:
    text = build_report(tmp_path).read_text(encoding="utf-8")
    assert "timeline.jsonl is missing" in text
    assert "No fault was injected." in story_of(text)
    assert "data:image/png;base64," in text


def test_report_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a results folder"):
        build_report(tmp_path / "nope")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_report_timeline_answers_the_mouse_in_headless_chromium(tmp_path: Path) -> None:
    seen = check_in_chromium(build_report(make_run(tmp_path)), tmp_path / "shot.png")
    assert seen["story"].startswith("Failed: storm-p99")
    assert seen["loads"] == "serve_http,task_storm"
    # the unified hover reads every panel at the mouse's time: the GCS state and numbers
    assert re.search(r"GCS : (up|DOWN)", seen["hover"]), seen["hover"]
    assert re.search(r"nodes alive : \d", seen["hover"]), seen["hover"]
    assert re.search(r"task_storm throughput : \d+(\.\d+)?/s", seen["hover"]), seen["hover"]
    from PIL import Image  # matplotlib depends on Pillow

    with Image.open(tmp_path / "shot.png") as img:
        rgb = img.convert("RGB").getcolors(maxcolors=1 << 24) or []
    # the GCS lane is drawn: green where up, red where down
    green = sum(n for n, (r, g, b) in rgb if g > r + 40 and g > b + 40)
    red = sum(n for n, (r, g, b) in rgb if r > g + 60 and r > b + 60)
    assert green > 10_000 and red > 1_000, f"no timeline drawn? green {green}, red {red}"


def test_the_timeline_shows_links_health_checks_blackouts_and_false_deaths_together() -> None:
    """The saturated shuffle's story on one time axis: the link rate, the GCS's failed health
    checks, the blackout cycles and a node marked DEAD while its raylet ran (in red)."""
    from raychaos.results.interactive import timeline_figure

    records = [{"t": float(t), "kind": "sample", "gcs_up": True, "nodes_alive": 3,
                "nodes_total": 3} for t in range(20)]
    records += [{"t": float(t), "kind": "signals", "health_check_failures": max(0, t - 8),
                 "links": {"worker-1": {"in_mbit": 2.0, "out_mbit": 0.1}}} for t in range(20)]
    records += [{"t": 5.0, "kind": "event", "event": "blackout_down", "name": "worker-1"},
                {"t": 12.0, "kind": "event", "event": "blackout_up", "name": "worker-1"},
                {"t": 11.0, "kind": "event", "event": "node_dead", "name": "worker-1",
                 "detail": {"raylet_alive": True}}]
    fig = timeline_figure(records)
    axes = {v["title"]["text"] for k, v in fig["layout"].items() if k.startswith("yaxis")}
    assert {"GCS", "link Mbit/s", "checks failed"} <= axes
    names = {t["name"] for t in fig["data"]}
    assert {"worker-1 link", "failed health checks"} <= names
    assert any(s.get("name") == "blackout worker-1" and s["x0"] == 5.0 and s["x1"] == 12.0
               for s in fig["layout"]["shapes"])
    assert any(s["type"] == "line" and s["x0"] == 11.0 and s["line"]["color"] == "#d62728"
               for s in fig["layout"]["shapes"])
    assert any(n.get("text") == "worker-1 DEAD (raylet alive)"
               for n in fig["layout"]["annotations"])


def test_a_relative_check_shows_factors_not_its_metrics_unit():
    from raychaos.results.story import fmt_value, margin, slo_unit

    row = {"name": "serve-p95", "metric": "p95_latency_ms", "relative_to": "baseline",
           "value": 0.3234, "op": "<=", "threshold": 6.0, "verdict": "pass"}
    assert slo_unit(row) == "x"
    assert (fmt_value(row["value"], "x"), fmt_value(row["threshold"], "x")) == ("x0.323", "x6")
    assert margin(row) == "x5.68 to spare (95% of the bound)"
    assert slo_unit({**row, "relative_to": None}) == "ms"
