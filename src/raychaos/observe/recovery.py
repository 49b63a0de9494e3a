"""How long recovery took, read from the timeline — ONE definition for the probe, compare and
the report.

Every figure is measured from the moment the head (or its GCS) was killed — the last
``head_killed`` event, whose detail also names the workers alive before the kill — or, for a
run without a kill, from the first ``fault_start``:

- ``gcs_down_s``: seconds the monitor saw the GCS down (sum of sampling intervals; a busy
  GCS's late answers are not down, see ``_samples``);
- ``gcs_first_answer_s``: the first sample with the GCS answering after it went down;
- ``gcs_recovery_s``: the start of the first stretch of at least ``stable_s`` seconds in which
  every sample found the GCS answering — a GCS that answers once and crash-loops has not
  recovered, and a stretch cut short by the end of the timeline does not count either;
- ``gcs_flaps``: up→down transitions after the first answer (a late answer from a busy GCS
  is not a flap: see ``_samples``); ``gcs_flaps_after_recovery``:
  those after ``gcs_recovery_s`` (a GCS that went away again after it had recovered), each
  stretch in ``gcs_flap_spans`` (run times, and whether anything refused the GCS there or it
  only missed its deadlines);
- ``nodes_recovery_s``: the first sample, once the GCS has recovered, in which every worker
  alive before the kill is ALIVE again with the same node ID **and has re-registered**: its
  raylet answered the new GCS incarnation (``reported_ids`` of the samples, from the GCS's own
  pull of each raylet's resource load — see :mod:`raychaos.targets.local.gcs`). A restored
  GCS lists the old workers ALIVE at once from its table, so ALIVE alone proves nothing;
  ``reregistration`` says ``measured`` when the samples carried that evidence and
  ``unknown`` when the target cannot tell (the Kubernetes target: its dashboard shows only
  the restored table) — then ``nodes_recovery_s`` is None, never the ALIVE-in-the-table time
  (which equals ``gcs_recovery_s`` by construction), and ``nodes_alive_s`` gives that time for
  what it is worth; ``reregistered_s`` gives each worker's first report after the kill.
  Without the list of workers before the kill, ``workers_before_unknown`` is set and the
  figure is None: not observed, never a vacuous pass. For a run without a kill, it is the
  first sample with as many nodes alive as before the fault;
- ``workers_gone`` / ``nodes_settled_s``: the workers of before the kill that can never come
  back (DEAD in the table, or missing from the table of another GCS incarnation: see
  ``_gone``), and the first sample in which every worker is gone or back, at least one gone —
  from then on the verdict is a fail whatever happens next;
- ``gpus_back_s``: until the GPU total is back at its pre-fault level (0 when it never dropped);
- ``outage_max_gap_s`` / ``outage_samples_per_s``: how densely the monitor *saw* the outage
  (first down sample to first answer) — the resolution of the figures above. A *blind* sample
  (``gcs_blind``: the asker was still stuck on an earlier question, so nothing was asked) saw
  nothing and does not count: on a loaded box one question stayed unanswered for 0.9 s past
  its deadline while the GCS came back, and an independent observer saw it answer 1.1 s before
  the monitor, whose samples, counting the blind ones, were at most 0.47 s apart.

``None`` means "did not happen within the timeline". The resolution of every figure is the
monitor's sampling interval (the monitor writes a sample every interval, answered or not).
"""

from __future__ import annotations

from typing import Any

from raychaos.observe.monitor import sample_gaps
from raychaos.results.store import Ev

__all__ = ["FIGURES", "STABLE_S", "kill_moment", "recovery_figures"]

STABLE_S = 5.0
#: A GCS that has answered nothing for this long is down, refusal or not; shorter runs of late
#: answers are a busy GCS. Measured here: a GCS back from a head kill, under a task storm and
#: Serve traffic on 2 cores, missed the monitor's 160 ms deadline for runs of up to 2.01 s while
#: answering in between (2 s judged that load an outage: a false "down again"). The same hold
#: as ``STABLE_S``: what "stayed up" needs, "went away" needs too.
LATE_IS_DOWN_S = 5.0
#: The numeric figures (seconds, counts), for comparisons and distributions.
FIGURES = ("gcs_down_s", "gcs_first_answer_s", "gcs_recovery_s", "gcs_flaps",
           "gcs_flaps_after_recovery", "nodes_recovery_s", "gpus_back_s")


def kill_moment(records: list[dict[str, Any]]) -> tuple[float | None, set[str] | None]:
    """``(t, workers alive before)`` of the last head kill, else the first fault start."""
    t, before, _ = _kill(records)
    return t, before


def _kill(records: list[dict[str, Any]]) -> tuple[float | None, set[str] | None, bool]:
    """``(t, workers before, is a head kill)``."""
    kills = [r for r in records if r.get("kind") == "event" and r.get("event") == Ev.HEAD_KILLED]
    if kills:
        last = max(kills, key=lambda r: r["t"])
        before = (last.get("detail") or {}).get("workers_before")
        return float(last["t"]), (set(before) if isinstance(before, list) else None), True
    starts = [r["t"] for r in records if r.get("kind") == "event"
              and r.get("event") == Ev.FAULT_START and isinstance(r.get("t"), (int, float))]
    return (float(min(starts)) if starts else None), None, False


def _samples(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples in time order, each with ``_up``: is the GCS there.

    An answer is up; a refusal (or any error other than a missed deadline) is down. A *late*
    sample (``gcs_late``: no answer within the deadline, no refusal either) takes the state
    before it — late after a refusal is a GCS still starting, late after an answer is a busy
    one (2 loaded cores make a healthy GCS miss a 160 ms deadline now and then) — unless the
    GCS has answered nothing for ``LATE_IS_DOWN_S``: then it is down from the first late
    sample on. A single unanswered sample between two answers is a slow answer too.

    Two things make a shorter run of late samples an outage all the same (a GCS gone behind a
    port-forward is never refused: the stream hangs until gRPC's keepalive gives up, ~3 s):
    it is the first thing seen after a head kill (no answer since), or the GCS that answers
    after it is another process (its ``gcs_incarnation`` differs from the one before the run,
    in the answers that follow within ``LATE_IS_DOWN_S``: the probe may tell the new process
    only once the new head's raylet registered)."""
    out = sorted((dict(r) for r in records if r.get("kind") == "sample"
                  and isinstance(r.get("t"), (int, float))), key=lambda r: r["t"])
    kill_t, _, head_kill = _kill(records)
    answered_since_kill = not head_kill
    incarnation = None  # of the last answer
    state, i = True, 0
    while i < len(out):
        r = out[i]
        if r.get("gcs_up"):
            state = True
            r["_up"] = True
            incarnation = r.get("gcs_incarnation", incarnation)
            if kill_t is not None and r["t"] >= kill_t:
                answered_since_kill = True
        elif not r.get("gcs_late"):
            r["_up"] = (0 < i < len(out) - 1 and bool(out[i - 1].get("gcs_up"))
                        and bool(out[i + 1].get("gcs_up")))
            state = r["_up"]
        else:  # a run of late samples: the state before it, unless it lasts too long
            j = i
            while j < len(out) and out[j].get("gcs_late") and not out[j].get("gcs_up"):
                j += 1
            end = out[j]["t"] if j < len(out) else out[j - 1]["t"]
            after_kill = head_kill and kill_t is not None and r["t"] >= kill_t \
                and not answered_since_kill
            keep = state and end - r["t"] < LATE_IS_DOWN_S and not after_kill \
                and not _another_gcs(out, j, incarnation)
            for k in range(i, j):
                out[k]["_up"] = keep
            state = keep
            i = j
            continue
        i += 1
    return out


def _another_gcs(samples: list[dict[str, Any]], j: int, incarnation: Any) -> bool:
    """The next answers from ``samples[j]`` on (past any refusals: a late run the keepalive
    ends with a refusal; then for ``LATE_IS_DOWN_S``, while they last) come from a GCS
    incarnation other than ``incarnation`` (never, when either is unknown)."""
    while j < len(samples) and not samples[j].get("gcs_up"):
        j += 1
    if incarnation is None or j >= len(samples):
        return False
    t_end = samples[j]["t"] + LATE_IS_DOWN_S
    for s in samples[j:]:
        if not s.get("gcs_up") or s["t"] > t_end:
            return False
        now = s.get("gcs_incarnation")
        if now is not None and now != incarnation:
            return True
    return False


def _stable_since(samples: list[dict[str, Any]], hold: float) -> float | None:
    """Start of the first run of up-samples that lasts at least ``hold`` seconds."""
    start = None
    for r in samples:
        if r["_up"]:
            start = r["t"] if start is None else start
            if r["t"] - start >= hold:
                return float(start)
        else:
            start = None
    return None


def _back_to(samples: list[dict[str, Any]], t0: float, key: str) -> float | None:
    """When ``key`` is back at its pre-``t0`` level after dropping (t0 when it never dropped)."""
    before = [s[key] for s in samples if s["t"] < t0 and isinstance(s.get(key), (int, float))]
    if not before:
        return None
    level, dropped = before[-1], False
    for s in samples:
        value = s.get(key)
        if s["t"] < t0 or not isinstance(value, (int, float)):
            continue
        if value < level:
            dropped = True
        elif dropped:
            return float(s["t"])
    return None if dropped else t0


def recovery_figures(records: list[dict[str, Any]], stable_s: float = STABLE_S
                     ) -> dict[str, Any]:
    """The figures of the module docstring, in seconds since the kill (see there)."""
    samples = _samples(records)
    t0, workers_before, head_kill = _kill(records)
    out: dict[str, Any] = {"gcs_down_s": None, "gcs_first_answer_s": None,
                           "gcs_recovery_s": None, "gcs_flaps": 0,
                           "gcs_flaps_after_recovery": 0, "nodes_recovery_s": None,
                           "workers_gone": {}, "nodes_settled_s": None,
                           "gpus_back_s": None, "reregistration": None, "nodes_alive_s": None,
                           "reregistered_s": {}, "workers_before_unknown": False,
                           "outage_max_gap_s": None, "outage_samples_per_s": None}
    if t0 is None or not samples:
        return out
    after = [s for s in samples if s["t"] >= t0]
    down = sum(b["t"] - a["t"] for a, b in zip(after, after[1:], strict=False)
               if not a["_up"])
    out["gcs_down_s"] = round(down, 3)
    first_down = next((i for i, s in enumerate(after) if not s["_up"]), None)
    if first_down is None:  # the GCS never went down: it was back at once
        out.update(gcs_first_answer_s=0.0, gcs_recovery_s=0.0)
        recovered_at: float | None = t0
    else:
        rest = after[first_down:]
        first = next((s["t"] for s in rest if s["_up"]), None)
        recovered_at = _stable_since(rest, stable_s)
        out["gcs_first_answer_s"] = None if first is None else round(first - t0, 3)
        out["gcs_recovery_s"] = None if recovered_at is None else round(recovered_at - t0, 3)
        if first is not None:
            out["gcs_flaps"] = _flaps([s for s in rest if s["t"] >= first])
        seen = [s for s in rest if not s.get("gcs_blind")]
        gaps = sample_gaps(seen, rest[0]["t"], first if first is not None else rest[-1]["t"])
        out["outage_max_gap_s"], out["outage_samples_per_s"] = (gaps["max_gap_s"],
                                                               gaps["samples_per_s"])
        if recovered_at is not None:
            later = [s for s in rest if s["t"] >= recovered_at]
            out["gcs_flaps_after_recovery"] = _flaps(later)
            out["gcs_flap_spans"] = _flap_spans(later)
    if head_kill:
        out.update(_reregistration(samples, after, t0, workers_before))
    if recovered_at is not None:
        if head_kill and workers_before is None:
            out["workers_before_unknown"] = True
        elif head_kill:
            alive = next((s["t"] for s in after if s["t"] >= recovered_at
                          and _alive(s, workers_before or set())), None)
            out["nodes_alive_s"] = None if alive is None else round(alive - t0, 3)
            back = next((s["t"] for s in after if s["t"] >= recovered_at
                         and _rejoined(s, workers_before or set(), out["_incarnation"])), None)
            out["nodes_recovery_s"] = None if back is None else round(back - t0, 3)
            out.update(_gone(after, recovered_at, t0, workers_before or set(),
                             out["_incarnation"]))
        else:
            level = _back_to(samples, t0, "nodes_alive")
            back = None if level is None else max(level, recovered_at)
            out["nodes_recovery_s"] = None if back is None else round(back - t0, 3)
    out.pop("_incarnation", None)
    gpus = _back_to(samples, t0, "gpus_total")
    out["gpus_back_s"] = None if gpus is None else round(gpus - t0, 3)
    return out


def _flap_spans(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each stretch the GCS was down again (run times, from the first down sample to the next
    answer or the last sample), and whether anything refused it there (``refused``: a
    connection refused or reset, an error other than a missed deadline) or it only missed its
    deadlines — which a starved harness does to a healthy GCS."""
    spans: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for prev, s in zip(samples, samples[1:], strict=False):
        if prev["_up"] and not s["_up"]:
            current = {"from": s["t"], "to": s["t"], "refused": False}
            spans.append(current)
        if current is None:
            continue
        current["to"] = s["t"]
        if s["_up"]:
            current = None
        elif not s.get("gcs_late"):
            current["refused"] = True
    return spans


def _flaps(samples: list[dict[str, Any]]) -> int:
    ups = [s["_up"] for s in samples]
    return sum(1 for a, b in zip(ups, ups[1:], strict=False) if a and not b)


def _reregistration(samples: list[dict[str, Any]], after: list[dict[str, Any]], t0: float,
                    workers: set[str] | None) -> dict[str, Any]:
    """Whether re-registration is measured here, and when each worker re-registered."""
    before = [s for s in samples if s["t"] < t0 and s.get("gcs_up")]
    incarnation = before[-1].get("gcs_incarnation") if before else None
    measured = any(isinstance(s.get("reported_ids"), list) for s in after if s.get("gcs_up"))
    times: dict[str, float] = {}
    if measured:
        for s in after:
            if not _new_incarnation(s, incarnation):
                continue
            for wid in s.get("reported_ids") or []:
                if wid in (workers or set()) and wid not in times:
                    times[wid] = round(s["t"] - t0, 3)
    return {"reregistration": "measured" if measured else "unknown", "reregistered_s": times,
            "_incarnation": incarnation}


def _new_incarnation(sample: dict[str, Any], incarnation: Any) -> bool:
    """The sample comes from a GCS incarnation other than the one before the kill (or the
    target does not number incarnations)."""
    now = sample.get("gcs_incarnation")
    return incarnation is None or now is None or now != incarnation


def _gone(after: list[dict[str, Any]], recovered_at: float, t0: float, workers: set[str],
          incarnation: Any) -> dict[str, Any]:
    """Which workers of before the kill can never come back, and when that settled the outcome.

    Ray registers a node ID once, when its raylet starts (a raylet restarted on the same machine
    is a new node), and never turns a DEAD node ALIVE again. So, once the GCS has recovered, a
    worker is gone for good when the GCS's table lists it DEAD, or when the GCS that came back
    is another incarnation (numbered by the target) whose table does not list it at all: a GCS
    without fault tolerance starts empty, and the old raylets exit instead of registering again
    — their containers restart as new nodes. ``nodes_settled_s``: the first sample in which
    every such worker is either gone or back (ALIVE and re-registered), at least one gone — the
    verdict cannot change after it, so a probe need not wait for its timeout."""
    gone: dict[str, dict[str, Any]] = {}
    settled = None
    for s in after:
        if s["t"] < recovered_at or not s.get("gcs_up") or "alive_ids" not in s:
            continue
        alive, dead = set(s.get("alive_ids") or []), set(s.get("dead_ids") or [])
        another = (incarnation is not None and s.get("gcs_incarnation") is not None
                   and s["gcs_incarnation"] != incarnation)
        for wid in sorted(workers - set(gone)):
            if wid in dead:
                gone[wid] = {"s": round(s["t"] - t0, 3), "how": "DEAD in the GCS's table"}
            elif another and wid not in alive:
                gone[wid] = {"s": round(s["t"] - t0, 3),
                             "how": "not in the table of the GCS that came back"}
        if gone and settled is None and all(
                wid in gone or _rejoined(s, {wid}, incarnation) for wid in workers):
            settled = s["t"]
    return {"workers_gone": gone,
            "nodes_settled_s": None if settled is None else round(settled - t0, 3)}


def _alive(sample: dict[str, Any], workers: set[str]) -> bool:
    """Every worker of ``workers`` is ALIVE with its node ID in the GCS's table of ``sample``
    (a restored table says so at once: no proof of re-registration)."""
    return bool(sample.get("gcs_up")) and workers <= set(sample.get("alive_ids") or [])


def _rejoined(sample: dict[str, Any], workers: set[str], incarnation: Any) -> bool:
    """Every worker of ``workers`` is ALIVE in ``sample`` and its raylet reported to a GCS
    incarnation after the kill. A sample that cannot say which raylets reported proves nothing
    (never "all re-registered")."""
    reported = sample.get("reported_ids")
    return (_alive(sample, workers) and isinstance(reported, list)
            and _new_incarnation(sample, incarnation) and workers <= set(reported))
