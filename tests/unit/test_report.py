"""report.html: one self-contained file that survives crashed runs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _runs import DEFAULT_SLOS, make_run

from raychaos.results.report import build_report, load_run

pytestmark = pytest.mark.unit

CHROMIUM = Path("/usr/bin/chromium")


def assert_self_contained(text: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "<script" not in text.lower()
    assert "<link" not in text.lower()


def test_report_is_one_self_contained_file_with_slos_and_plot(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    out = build_report(run)
    assert out == run / "report.html"
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert '<img alt="timeline" src="data:image/png;base64,' in text
    for slo in DEFAULT_SLOS:
        assert slo["name"] in text
    assert "Kill the head under load" in text
    assert "head_pid_before" in text  # fault evidence
    assert (run / "timeline.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "<tr><td>nodes_recovery_s</td><td>14</td></tr>" in text  # recovery figures


def test_report_leaves_no_pyplot_state_behind(tmp_path: Path) -> None:
    import sys

    build_report(make_run(tmp_path))
    pyplot = sys.modules.get("matplotlib.pyplot")
    assert pyplot is None or not pyplot.get_fignums()


def test_report_escapes_text_from_the_run(tmp_path: Path) -> None:
    run = make_run(tmp_path, title="<script>alert(1)</script> & co",
                   errors=['worker said <b>"boom"</b>'])
    text = build_report(run).read_text(encoding="utf-8")
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in text
    assert "&lt;b&gt;&quot;boom&quot;&lt;/b&gt;" in text


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
    assert "data:image/png;base64," in text


def test_report_on_empty_results_folder(tmp_path: Path) -> None:
    text = build_report(tmp_path).read_text(encoding="utf-8")
    assert "timeline.jsonl is missing" in text
    assert "data:image/png;base64," in text


def test_report_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a results folder"):
        build_report(tmp_path / "nope")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    from PIL import Image  # matplotlib depends on Pillow

    report = build_report(make_run(tmp_path))
    profile = tmp_path / "profile"
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--no-first-run",
         "--disable-sync",
         f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,2000",
         report.resolve().as_uri()],
        capture_output=True, timeout=60, check=False)
    assert shot.exists(), proc.stderr.decode(errors="replace")[-2000:]
    with Image.open(shot) as img:
        colours = img.convert("L").getcolors(maxcolors=1 << 16) or []
        rgb = img.convert("RGB").getcolors(maxcolors=1 << 24) or []
    # The timeline plot is drawn: its GCS lane is a wide green bar with a red gap (tens of
    # thousands of pixels; the pass/fail badges alone are a few thousand).
    green = sum(n for n, (r, g, b) in rgb if g > r + 60 and g > b + 60)
    red = sum(n for n, (r, g, b) in rgb if r > g + 80 and r > b + 80)
    assert green > 30_000 and red > 8_000, f"no timeline plot? green {green}, red {red}"
    total = sum(n for n, _ in colours)
    commonest = max((n for n, _ in colours), default=total)
    # A blank or failed render is one flat colour; text, tables and badges are not.
    assert total and commonest / total < 0.99, "screenshot is (nearly) one flat colour"
    assert len(colours) >= 8, f"only {len(colours)} grey levels in the screenshot"
    shutil.rmtree(profile, ignore_errors=True)
