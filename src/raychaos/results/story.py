"""What a run's figures mean, in words: the report's story, readable evidence, key figures.

A person opening a report first wants one paragraph — what was injected and when, how long the
GCS was down, what was lost, by name — and then the tables. The evidence of faults and probes is
nested JSON written for machines (40 killed PIDs, head identities, undo results); here it becomes
rows a person can read, with the raw JSON left to a disclosure. Each probe's *key figure* (one
short phrase) is shared by the report and the console's verdict table, so both say the same.

Nothing here measures: recovery figures come from :mod:`raychaos.observe.recovery` (passed in),
per-load window statistics from ``summary["loads"]`` (or, for runs written before it existed,
from the SLO module's own load statistics).
"""

from __future__ import annotations

from typing import Any

from raychaos.config.metrics import METRICS
from raychaos.observe.loadstats import load_report
from raychaos.observe.windows import windows

__all__ = ["evidence_rows", "fault_rows", "fmt_value", "load_windows", "margin", "probe_figure",
           "slo_unit", "story"]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def fmt_s(value: Any) -> str:
    v = _num(value)
    return "—" if v is None else f"{v:.1f} s" if v < 100 else f"{v:.0f} s"


def slo_unit(slo: dict[str, Any]) -> str:
    """The unit of an SLO row's value and bound: its metric's, or ``x`` for a relative check
    (a factor of the baseline: ``x0.32`` read as "0.3234 ms" in the console table)."""
    if slo.get("relative_to"):
        return "x"
    metric = slo.get("metric")
    return METRICS[metric].unit if metric in METRICS else ""


def fmt_value(value: Any, unit: str = "") -> str:
    """A measured value in its unit: ``6.1 s``, ``40 ms``, ``95 %``, ``yes``, ``x2.4``."""
    v = _num(value)
    if value is None:
        return "not measured"
    if unit == "bool":
        return "yes" if value else "no"
    if v is None:
        return str(value)
    if unit == "ratio":
        return f"{v:.1%}" if 0 < abs(v) < 0.1 else f"{v:.0%}"
    if unit == "s":
        return fmt_s(v)
    if unit == "x":
        return f"x{v:.3g}"
    text = f"{v:.4g}"
    return f"{text} {unit}" if unit and unit != "count" else text


def margin(slo: dict[str, Any]) -> str:
    """How far a measured value is from its bound, in the metric's unit."""
    value, bound, op = _num(slo.get("value")), _num(slo.get("threshold")), slo.get("op")
    unit = slo_unit(slo)
    if value is None or bound is None:
        return "—"
    if op == "==":
        return "on the mark" if value == bound else f"off by {fmt_value(abs(value - bound), unit)}"
    room = bound - value if op in ("<=", "<") else value - bound
    if unit == "bool":
        return "—"
    size = fmt_value(abs(room), unit)
    rel = f" ({abs(room) / abs(bound):.0%} of the bound)" if bound else ""
    if room > 0 or (room == 0 and op in ("<=", ">=")):
        return f"{size} to spare{rel}" if room else "exactly at the bound"
    return f"{'over' if op in ('<=', '<') else 'short'} by {size}{rel}"


# --- probes --------------------------------------------------------------------------------
def probe_figure(probe: dict[str, Any]) -> str:
    """One phrase saying what a probe found: ``GCS back in 6.1 s, workers in 6.1 s``."""
    raw = probe.get("evidence")
    ev: dict[str, Any] = raw if isinstance(raw, dict) else {}
    name = str(probe.get("name"))
    if ev.get("error"):
        return f"error: {ev['error']}"
    unseen = ev.get("unobserved")
    blind = (f"could not observe {'; '.join(map(str, unseen))}" if isinstance(unseen, list)
             else f"could not observe {unseen}" if unseen else "")
    if name == "gcs_recovery" and ev.get("gcs_recovery_s") is not None and blind:
        lost = ev.get("workers_lost") or []
        return (f"GCS back in {fmt_s(ev['gcs_recovery_s'])}; {blind}"
                + (f"; lost {', '.join(map(str, lost))}" if lost else ""))
    if blind:
        return blind
    if name == "gcs_recovery":
        gcs, nodes = ev.get("gcs_recovery_s"), ev.get("nodes_recovery_s")
        text = f"GCS back in {fmt_s(gcs)}" if gcs is not None else "GCS did not recover"
        text += f", workers in {fmt_s(nodes)}" if nodes is not None else ", workers not all back"
        lost = ev.get("workers_lost") or []
        return text + (f"; lost {', '.join(map(str, lost))}" if lost else "")
    if name == "sentinel_preserved":
        if "preserved" not in ev:
            return str(ev.get("note") or "no sentinel")
        before, after = ev.get("before") or {}, ev.get("after") or {}
        if ev.get("preserved"):
            return f"same PID {before.get('pid')}, state kept"
        if not ev.get("found"):
            return "actor lost"
        return (f"PID {before.get('pid')} → {after.get('pid')}, "
                f"state {before.get('count')} → {after.get('count')}")
    if name == "job_survival":
        if ev.get("total") is None:
            return "no jobs"
        lost = ev.get("lost") or []
        return f"{ev.get('survived')}/{ev.get('total')} jobs survived" + (
            f"; lost {', '.join(map(str, lost))}" if lost else "")
    for key in ("ratio", "seconds", "recovered", "preserved", "note"):
        if key in ev:
            return f"{key} {fmt_value(ev[key])}"
    return "—"


# --- per-load window statistics ------------------------------------------------------------
def load_windows(summary: dict[str, Any], records: list[dict[str, Any]]
                 ) -> tuple[dict[str, dict[str, dict[str, Any]]], bool]:
    """``({load: {window: stats}}, from_summary)``: the summary's own per-load, per-window
    statistics, or — for a run written before they existed — the SLO module's statistics over
    the same windows (``from_summary`` False then)."""
    given = summary.get("loads")
    if isinstance(given, dict) and given:
        return given, True
    # a run written before summary["loads"] existed: the same one definition, recomputed
    return load_report(records, windows(records)), False


# --- faults ----------------------------------------------------------------------------------
def _brief(value: Any, limit: int = 8) -> str:
    """A nested value as one readable line: lists counted, dicts as ``key value · ...``."""
    if isinstance(value, dict):
        return " · ".join(f"{k} {_brief(v, 4)}" for k, v in value.items()) or "—"
    if isinstance(value, list):
        if not value:
            return "none"
        if all(not isinstance(v, (dict, list)) for v in value):
            head = ", ".join(map(str, value[:limit]))
            return f"{len(value)}: {head}{', …' if len(value) > limit else ''}" \
                if len(value) > 1 else head
        return f"{len(value)} entries"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


_LABELS: dict[str, str | None] = {
    "old": "old head", "new": "new head", "killed_pids": "processes killed", "landed": "landed",
    "workers_before": "workers alive before", "head_back_s": "head back after (s)",
    "head_back": "head back", "killed_at": None, "undo": None}


def fault_rows(fault: dict[str, Any], t0: float | None) -> list[tuple[str, str]]:
    """``(what, value)`` rows a person can read: arguments, times, evidence, what was undone."""
    rows: list[tuple[str, str]] = [("fault", f"{fault.get('fault')} ({fault.get('id')})"),
                                   ("arguments", _brief(fault.get("args") or {}))]
    for key, label in (("started_at", "started"), ("applied_at", "applied"),
                       ("undone_at", "undone")):
        ts = _num(fault.get(key))
        if ts is not None and t0 is not None:
            rows.append((label, f"t = {ts - t0:.1f} s"))
    rows.append(("state", str(fault.get("state"))))
    if fault.get("error"):
        rows.append(("error", str(fault["error"])))
    for key, value in (fault.get("evidence") or {}).items():
        shown = _LABELS[key] if key in _LABELS else str(key).replace("_", " ")
        if shown is not None:
            rows.append((shown, _brief(value)))
    undo = fault.get("undo_result")
    if isinstance(undo, dict):
        rows.append(("undone", _brief(undo)))
    return rows


def evidence_rows(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """A probe's or SLO's evidence as ``(what, value)`` rows."""
    return [(str(k).replace("_", " "), _brief(v)) for k, v in evidence.items()]


def _fault_sentence(fault: dict[str, Any], t_start: float | None) -> str:
    when = f"At t = {t_start:.1f} s" if t_start is not None else "During the run"
    ev = fault.get("evidence") or {}
    name = str(fault.get("fault"))
    if fault.get("state") == "failed" or fault.get("error"):
        return f"{when} raychaos tried {name}, which did not land: {fault.get('error')}."
    if name == "kill_head":
        args = fault.get("args") or {}
        killed = ev.get("killed_pids") or []
        how = [f"mode {ev.get('mode') or args.get('mode')}" if ev.get("mode") or args.get("mode")
               else "", str(ev.get("signal") or args.get("signal") or ""),
               f"{len(killed)} processes" if killed else ""]
        text = f"{when} raychaos killed the head" + (
            f" ({', '.join(h for h in how if h)})" if any(how) else "")
        old, new = ev.get("old") or {}, (ev.get("head_back") or {}).get("new") or {}
        if new.get("pid") and ev.get("head_back_s") is not None:
            text += (f"; a new head (PID {new.get('pid')}, was {old.get('pid')}) was up "
                     f"{fmt_s(ev.get('head_back_s'))} later")
        return text + "."
    args = ", ".join(f"{k} {_brief(v)}" for k, v in (fault.get("args") or {}).items()
                     if v is not None)
    return f"{when} raychaos applied {name}" + (f" ({args})" if args else "") + "."


def _losses(summary: dict[str, Any], recovery: dict[str, Any],
            loads: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lost: list[str] = []
    probes = {p.get("name"): p for p in summary.get("probes") or []}
    ev = (probes.get("gcs_recovery") or {}).get("evidence") or {}
    if ev.get("workers_lost"):
        lost.append(f"workers {', '.join(map(str, ev['workers_lost']))}")
    jobs = (probes.get("job_survival") or {}).get("evidence") or {}
    if jobs.get("lost"):
        lost.append(f"load job(s) {', '.join(map(str, jobs['lost']))}")
    sentinel = probes.get("sentinel_preserved")
    if sentinel and sentinel.get("verdict") == "fail":
        lost.append(f"the sentinel actor ({probe_figure(sentinel)})")
    if recovery and recovery.get("gpus_back_s") is None and recovery.get("gcs_down_s") \
            is not None:
        lost.append("GPU capacity (not back by the end of the run)")
    for name, per in loads.items():
        failed = sum(int(_num((per.get(w) or {}).get("failures")) or 0)
                     for w in ("chaos", "recovery"))
        if failed:
            lost.append(f"{failed} failed operation(s) of {name}")
    return lost


def _load_sentence(name: str, per: dict[str, dict[str, Any]]) -> str | None:
    base, chaos = per.get("baseline") or {}, per.get("chaos") or {}
    b, c = _num(base.get("throughput")), _num(chaos.get("throughput"))
    if b is None or c is None:
        return None
    text = f"{name} ran at {b:.3g}/s before and {c:.3g}/s during chaos"
    if b:
        text += f" ({c / b - 1:+.0%})"
    back = _num((per.get("recovery") or {}).get("time_back_s"))
    if back is None:
        back = _num(chaos.get("time_back_s"))
    if back is not None:
        text += f", back to 90 % of baseline {fmt_s(back)} after the fault ended"
    return text


def story(summary: dict[str, Any], records: list[dict[str, Any]], recovery: dict[str, Any],
          loads: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The report's opening paragraph, as sentences (plain text; the caller escapes)."""
    verdict = str(summary.get("verdict"))
    slos, probes = summary.get("slos") or [], summary.get("probes") or []
    bad = [s for s in slos if s.get("verdict") in ("fail", "error")] + \
        [p for p in probes if p.get("verdict") in ("fail", "error", "unknown")]
    if verdict == "pass":
        out = [f"Passed: all {len(slos)} SLOs and {len(probes)} probes held."]
    elif verdict == "inconclusive":
        unsure = [x for x in slos + probes if x.get("verdict") == "inconclusive"]
        out = ["Inconclusive: the data could not support a verdict on "
               + "; ".join(f"{x.get('name')} ({(x.get('evidence') or {}).get('inconclusive')})"
                           for x in unsure) + "; nothing failed."]
    elif verdict == "fail":
        out = [f"Failed: {', '.join(str(x.get('name')) for x in bad) or 'the hypothesis'}."]
    else:
        why = summary.get("reason") or (summary.get("errors") or [None])[0] or \
            summary.get("status")
        out = [f"Errored ({summary.get('status')}): {why}."]
    starts = {(r.get("detail") or {}).get("id"): float(r["t"]) for r in records
              if r.get("kind") == "event" and r.get("event") == "fault_start"
              and isinstance(r.get("detail"), dict)}
    t0 = _num(summary.get("started_at"))
    for fault in summary.get("faults") or []:
        t = starts.get(fault.get("id"))
        if t is None and t0 is not None and _num(fault.get("started_at")) is not None:
            t = float(fault["started_at"]) - t0
        out.append(_fault_sentence(fault, t))
    if not summary.get("faults"):
        out.append("No fault was injected.")
    down, first = recovery.get("gcs_down_s"), recovery.get("gcs_first_answer_s")
    if down:
        text = f"The GCS was down for {fmt_s(down)}"
        if first is not None:
            text += f" and answered again {fmt_s(first)} after the kill"
        stable = recovery.get("gcs_recovery_s")
        text += (f" (steady from {fmt_s(stable)}" + (f", {recovery['gcs_flaps']} flap(s)"
                                                    if recovery.get("gcs_flaps") else "") + ")"
                 if stable is not None else " but never answered steadily")
        out.append(text + ".")
    nodes = recovery.get("nodes_recovery_s")
    if down and nodes is not None:
        out.append(f"Every worker alive before the fault was back {fmt_s(nodes)} after it.")
    elif down and recovery.get("reregistration") == "unknown":
        out.append("Whether the workers re-registered with the new GCS could not be seen "
                   "(the node table lists them ALIVE from before the kill).")
    out += [s + "." for s in (_load_sentence(n, per) for n, per in sorted(loads.items())) if s]
    lost = _losses(summary, recovery, loads)
    out.append("Lost: " + "; ".join(lost) + "." if lost else "Nothing was lost.")
    return out
