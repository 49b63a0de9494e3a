"""An open-loop load's backlog after an outage: when it was worked off, and why a window that
ended before that says nothing about the load's latency after recovery.

An open-loop load (its stats lines count ``offered`` arrivals) keeps arriving while the system is
down; the requests queued then answer late *because* of the outage — time the recovery took,
which ``throughput_recovery_s`` and the chaos window judge. "p95 after recovery"
(:mod:`raychaos.observe.slo`) reads the requests after the backlog drained
(:func:`backlog_drained`); :func:`after_outage` also says when the run cannot tell.
"""

from __future__ import annotations

from typing import Any

from raychaos.observe.loadstats import BACK_FRACTION, load_end, load_names, series, window_rows

__all__ = ["STALL_EXPECTED", "after_outage", "backlog_drained", "stalled_at_end"]

Wins = dict[str, tuple[float, float]]
Waiting = list[tuple[float, int, int, int]]

#: completions a load's baseline pace must expect in a stretch before finding none there is a
#: stall: at 5, a load at that pace completes nothing by chance 0.7 % of the time (Poisson);
#: fewer, and nothing completed says no more than that the stretch was short (CI: a 3 s
#: recovery hold ended 0.25 s after the Serve backlog drained; "0 samples, stalled" failed
#: a healthy head kill). Also how far a backlog must fall to say it was being worked off
STALL_EXPECTED = 5.0
#: seconds with nothing answered at the end of a run before they can be a stall: one quiet
#: second is where the loads were stopped
STALL_MIN_S = 3


def after_outage(records: list[dict[str, Any]], wins: Wins, load: str | None
                 ) -> tuple[float | None, str | None]:
    """``(when the backlog drained, or None; why not draining says nothing, or None)`` — the
    load's seconds read once for both."""
    waiting = _waiting(records, wins, load)
    if waiting is None:
        return None, None
    drained = _drained(waiting, wins)
    return drained, None if drained is not None else _still_draining(waiting, wins, load)


def stalled_at_end(records: list[dict[str, Any]], wins: Wins, load: str | None,
                   window: str) -> str | None:
    """Why an open-loop load's figures in ``window`` cannot show what happened at its end, or
    None: the window ran to the end of the load, and in its last seconds requests kept arriving
    and none was answered or failed, for longer than the load's baseline pace needs to expect
    :data:`STALL_EXPECTED` answers. Those requests were still waiting when the loads stopped
    (Locust drops them unanswered), so the window's answered requests are the ones *before* the
    stall: they can pass a latency or error bound, or fall short of a sample minimum, on a
    system that stopped answering. Seen on the bed: a RayService's Serve answered nothing for
    the last 22 s of its recovery window (its proxy's router retried a replica the new
    controller had stopped), 111 arrivals unanswered, and the run read "89 samples,
    inconclusive"."""
    rows = _open_loop_rows(records, wins, load)
    if rows is None or window not in wins or "baseline" not in wins:
        return None
    lo, hi = wins[window]
    if hi < load_end(records) - 1.5:
        return None  # a window that ends before the loads did: later seconds show the rest
    waiting = _pending(rows)
    inside = window_rows(rows, (lo, hi))
    quiet = 0
    for r in reversed(inside):
        if int(r.get("count") or 0) or int(r.get("failures") or 0):
            break
        quiet += 1
    pace = _baseline_pace(waiting, wins)
    arrived = sum(int(r.get("offered") or 0) for r in inside[len(inside) - quiet:]) \
        if quiet else 0
    if quiet < STALL_MIN_S or pace * quiet < STALL_EXPECTED or arrived < STALL_EXPECTED:
        return None
    left = [w[1] for w in waiting if lo <= w[0] - 0.5 < hi][-1]
    who = f"load {load}" if load else "the load"
    return (f"{who} answered nothing in the last {quiet} s of {window} while {arrived} "
            f"requests arrived (its baseline pace {pace:.1f}/s; {left} waiting when the loads "
            "stopped): a stall its answered requests cannot show")


def backlog_drained(records: list[dict[str, Any]], wins: Wins, load: str | None
                     ) -> float | None:
    """When an open-loop load (its lines count ``offered`` arrivals) had worked off the backlog
    the fault left: the first second after chaos whose arrivals not yet answered are back at
    the most the baseline ever had waiting (give or take the one request at a second's edge).
    Not "within one second's arrivals of it": at 5/s that let five outage requests answer
    after "drained", and five of a 60-sample window is its p95 — a CI run judged Serve 20x
    slower after recovery on the outage's own requests. Its requests queued
    during the outage answer late *because* of the outage — time the recovery took, which
    ``throughput_recovery_s`` and the chaos window judge — so "p95 after recovery" reads the
    requests after it. None for a closed-loop load (no backlog can form) or when it never
    drained (then :func:`after_outage` says whether the window could tell)."""
    waiting = _waiting(records, wins, load)
    return None if waiting is None else _drained(waiting, wins)


def _drained(waiting: Waiting, wins: Wins) -> float | None:
    lo, hi = wins["baseline"]
    usual = max((w for t, w, _, _ in waiting if lo <= t - 0.5 < hi), default=0)
    chaos_end = wins["chaos"][1]
    return next((t for t, w, _, _ in waiting if t - 0.5 >= chaos_end and w <= usual + 1), None)


def _open_loop_rows(records: list[dict[str, Any]], wins: Wins, load: str | None
                    ) -> list[dict[str, Any]] | None:
    """An open-loop load's seconds (:func:`~raychaos.observe.loadstats.series`); None for a
    closed-loop load, several loads or a run without a fault."""
    names = [load] if load else load_names(records)
    if len(names) != 1 or "chaos" not in wins:
        return None
    rows = series(records, names[0], load_end(records))
    if not rows or not all("offered" in r for r in rows if not r.get("zero_line")):
        return None
    return rows


def _pending(rows: list[dict[str, Any]]) -> Waiting:
    """The seconds as ``(t, requests waiting at its end, arrivals, answered)``."""
    out, pending = [], 0
    for r in rows:
        offered, answered = int(r.get("offered") or 0), int(r.get("count") or 0)
        pending += offered - answered - int(r.get("failures") or 0)
        out.append((float(r["t"]), pending, offered, answered))
    return out


def _waiting(records: list[dict[str, Any]], wins: Wins, load: str | None
             ) -> Waiting | None:
    """An open-loop load's seconds as :func:`_pending` gives them, or None (see
    :func:`_open_loop_rows`)."""
    rows = _open_loop_rows(records, wins, load)
    return None if rows is None else _pending(rows)


def _baseline_pace(waiting: Waiting, wins: Wins) -> float:
    """Requests answered a second in the baseline window (0 without one)."""
    blo, bhi = wins["baseline"]
    before = [w for w in waiting if blo <= w[0] - 0.5 < bhi]
    return sum(w[3] for w in before) / len(before) if before else 0.0


def _still_draining(waiting: Waiting, wins: Wins, load: str | None) -> str | None:
    """Why a recovery window that ended before an open-loop load's backlog drained says nothing
    about its latency after recovery, or None (then the window is judged as it is, backlog and
    all: a fail, most likely). The window held the outage's own requests, answering late
    *because* of the outage. Two cases say nothing about the system after it:

    - the load was answering more than arrived (its backlog falling by at least
      :data:`STALL_EXPECTED` requests): it was recovering, and the observation was too short
      to see it done — a CI run judged a healthy Serve 42x slower after recovery when its 3 s
      window bound ended 7 s into working off a 30-request backlog;
    - it answered as fast as in its baseline (:data:`BACK_FRACTION` of that rate or more) but
      no faster than requests arrived: the cluster serves what it did before the fault, and
      the load's rate is at what it serves on this host, so the backlog can never drain — seen
      beside ``stress-ng --cpu-load 50``: 4.6 answers a second before and after, 45 waiting
      for 40 s. Latency after recovery cannot be read at that rate.

    Answering slower than before the fault is no recovery; nor is a backlog shed by failing
    requests (the error checks judge those)."""
    if "recovery" not in wins:
        return None
    lo, hi = wins["recovery"]
    inside = [w for w in waiting if lo <= w[0] - 0.5 < hi]
    if not inside:
        return None
    arrivals = sum(w[2] for w in inside)
    answered = sum(w[3] for w in inside)
    who = f"load {load}" if load else "the load"
    if answered - arrivals >= STALL_EXPECTED:
        peak = max(w[1] for w in waiting if w[0] - 0.5 >= wins["chaos"][0])
        return (f"the observation ended while {who} was still working off the outage's "
                f"backlog ({inside[-1][1]} requests waiting, {peak} at most; {answered} "
                f"answered and {arrivals} arrived in recovery): too short to judge its latency "
                "after recovery")
    base_rate = _baseline_pace(waiting, wins)
    rate = answered / len(inside)
    if base_rate and rate >= BACK_FRACTION * base_rate:
        return (f"{who} answered {rate:.1f}/s after recovery, as in baseline "
                f"({base_rate:.1f}/s), but no faster than requests arrived, so the outage's "
                f"backlog never drained ({inside[-1][1]} waiting at the end): its rate is at "
                "its capacity on this host (lower it to judge latency after recovery)")
    return None
