"""JUnit XML for a run, so CI systems show each probe and SLO as a test case.

Jenkins, GitLab and GitHub test reporters all read JUnit XML; mapping a chaos run onto it lets a
pipeline show *which* SLO broke and by how much without anyone opening the results folder.
The test cases are the run's checks (:mod:`raychaos.results.checks`, the same the pytest plugin
and the verdict table show), one ``<testsuite>`` per run inside ``<testsuites>``:

- each probe and each SLO is a ``<testcase>`` (classname ``raychaos.<slug>.probe`` / ``.slo``),
  and ``run`` (classname ``raychaos.<slug>``) says whether the run itself completed, the
  hypothesis held and the system recovered;
- verdict ``fail`` -> ``<failure>`` whose message names the measured value, op and threshold
  (or why the run failed); ``error`` -> ``<error>``; ``n/a`` -> ``<skipped>``;
- a run that left no summary.json (crashed, killed) gets ``run`` as an ``<error>`` — otherwise
  a crashed run would show up green;
- the suite's properties: run id, status, verdict, exit code, and every per-load per-window
  figure of ``summary.json`` as ``load.<load>.<window>.<figure>``.

Text goes through ElementTree (which escapes ``<``, ``&`` and quotes) after characters that XML
1.0 cannot carry at all (ANSI escapes, NULs from a crashed process's output) are replaced.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raychaos.results.checks import checks_of, slo_message
from raychaos.results.store import load_run

__all__ = ["junit_tree", "slo_message", "write_junit"]

# Characters XML 1.0 forbids even when escaped.
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def clean(value: Any) -> str:
    """Text safe for an XML 1.0 document (ElementTree does the escaping)."""
    return _ILLEGAL.sub("\ufffd", "" if value is None else str(value))


def _evidence_text(evidence: Any) -> str:
    return json.dumps(evidence or {}, indent=2, default=str, sort_keys=True)


def _case(suite: ET.Element, classname: str, name: Any, verdict: Any, message: str,
          body: str) -> str:
    case = ET.SubElement(suite, "testcase", classname=clean(classname), name=clean(name),
                         time="0")
    # inconclusive: the data could not support a verdict — skipped, with the reason
    outcome = {"fail": "failure", "error": "error", "n/a": "skipped",
               "inconclusive": "skipped"}.get(str(verdict))
    if outcome is None and verdict != "pass":
        outcome = "error"
        message = f"unknown verdict {verdict!r}: {message}"
    if outcome:
        child = ET.SubElement(case, outcome, message=clean(message))
        if outcome != "skipped":
            child.set("type", clean(f"raychaos.{outcome}"))
            child.text = clean(body)
    return outcome or "pass"


def junit_tree(run_dir: str | Path) -> ET.ElementTree:
    """The JUnit document for one results folder (see the module docstring for the mapping)."""
    view = load_run(run_dir)
    s = view.summary
    slug = str(s.get("slug") or Path(run_dir).name)
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=clean(s.get("experiment") or slug))
    counts = {"failure": 0, "error": 0, "skipped": 0, "pass": 0}

    probes = {str(p.get("name")): p for p in s.get("probes") or []}
    slos = {str(x.get("name")): x for x in s.get("slos") or []}
    checks = checks_of(s)
    if not view.complete:
        checks = [c for c in checks if c["kind"] != "run"]
        body = "\n".join([*view.notes, *map(str, s.get("errors") or [])])
        checks.append({"kind": "run", "name": "run", "verdict": "error",
                       "message": "; ".join(view.notes), "body": body})
    for c in checks:
        kind = c["kind"]
        classname = f"raychaos.{slug}" + ("" if kind == "run" else f".{kind}")
        if kind == "probe":
            body = _evidence_text((probes.get(c["name"]) or {}).get("evidence"))
        elif kind == "slo":
            body = _evidence_text((slos.get(c["name"]) or {}).get("evidence"))
        else:
            body = c.get("body") or "\n".join(map(str, [*(s.get("failures") or []),
                                                         *(s.get("errors") or [])]))
        message = c["message"]
        if c["verdict"] == "n/a" and kind == "slo":
            message = f"not applicable: {message}"
        counts[_case(suite, classname, c["name"], c["verdict"], message, body)] += 1

    suite.set("tests", str(sum(counts.values())))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    duration = s.get("duration_s")
    suite.set("time", f"{float(duration):.3f}" if isinstance(duration, (int, float)) else "0")
    started = s.get("started_at")
    if isinstance(started, (int, float)):
        suite.set("timestamp",
                  datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    props = ET.SubElement(suite, "properties")
    for key in ("run_id", "status", "verdict", "exit_code"):
        ET.SubElement(props, "property", name=key, value=clean(s.get(key)))
    for load, per in sorted((s.get("loads") or {}).items()):
        for window, stats in per.items():
            for figure, value in stats.items():
                ET.SubElement(props, "property", name=clean(f"load.{load}.{window}.{figure}"),
                              value=clean("null" if value is None else value))
    if s.get("errors"):
        ET.SubElement(suite, "system-err").text = clean("\n".join(map(str, s["errors"])))
    for key in ("tests", "failures", "errors", "skipped", "time"):
        root.set(key, suite.get(key, "0"))
    # ElementTree needs the <properties> first for strict JUnit schemas.
    suite.remove(props)
    suite.insert(0, props)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(run_dir: str | Path) -> Path:
    """Write ``<run_dir>/junit.xml`` for the run and return its path.

    Works on partial runs too (they get an erroring ``run`` test case).
    """
    out = Path(run_dir) / "junit.xml"
    junit_tree(run_dir).write(out, encoding="utf-8", xml_declaration=True)
    return out
