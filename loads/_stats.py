"""The one stats format every raychaos load speaks (see loads/README.md).

Each load prints one line per second to stdout::

    RAYCHAOS_STATS {"load": "task_storm", "ts": 1764460800.0, "count": 712, "failures": 0,
                    "p50_ms": 1.9, "p95_ms": 4.1, "p99_ms": 8.0, "max_ms": 12.5}

``ts`` is the wall-clock end of the one-second interval; ``count`` and ``failures`` are what
completed in it; latencies are over that second's completions. ``hist`` is that second's
successful latencies as a log-spaced histogram (``{"<bucket>": count}``, buckets 2 % wide, see
:func:`bucket_of`): seconds merge exactly into a window's percentiles and per-request samples
(a rank test against the baseline), which per-second percentiles cannot. Extra keys are
allowed (a load may add e.g. ``bytes`` or ``checksum_errors``). The harness reads these lines
from the job's logs, so the format must stay one JSON object per line, behind the
``RAYCHAOS_STATS `` prefix.

This module has no dependencies beyond the standard library, so it can be shipped in a job's
working_dir and imported by a load script next to Ray (or next to Locust).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time

PREFIX = "RAYCHAOS_STATS "
HIST_MIN_MS = 0.01  # bucket 0 holds everything at or below this
HIST_GROWTH = 1.02  # each bucket is 2 % wider than the one before: <= 1 % error at its middle
_LOG_GROWTH = math.log(HIST_GROWTH)


def bucket_of(ms: float) -> int:
    """The histogram bucket of a latency in ms: floor(log(ms / 0.01) / log(1.02)), 0 for
    values <= 0.01 ms."""
    if ms <= HIST_MIN_MS:
        return 0
    return max(0, math.floor(math.log(ms / HIST_MIN_MS) / _LOG_GROWTH))


def bucket_value(index: int) -> float:
    """The latency (ms) a bucket stands for: its geometric middle."""
    return HIST_MIN_MS * HIST_GROWTH ** (int(index) + 0.5)


def histogram(latencies_ms) -> dict[str, int]:
    """``{"<bucket>": count}`` of latencies in ms, as a stats line carries it (JSON keys)."""
    out: dict[int, int] = {}
    for ms in latencies_ms:
        b = bucket_of(ms)
        out[b] = out.get(b, 0) + 1
    return {str(b): n for b, n in sorted(out.items())}


def merge_hists(hists) -> dict[int, int]:
    """Bucket-wise sum of histograms (keys int or str, as read back from JSON); None skipped."""
    out: dict[int, int] = {}
    for hist in hists:
        for b, n in (hist or {}).items():
            if n:
                out[int(b)] = out.get(int(b), 0) + int(n)
    return dict(sorted(out.items()))


def hist_percentile(hist, q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0..100) over a histogram's counts, as its bucket's value;
    None when it is empty."""
    items = sorted((int(b), int(n)) for b, n in (hist or {}).items() if n and int(n) > 0)
    total = sum(n for _, n in items)
    if not total:
        return None
    rank = max(1, math.ceil(q / 100.0 * total - 1e-9))
    seen = 0
    for b, n in items:
        seen += n
        if seen >= rank:
            return bucket_value(b)
    return bucket_value(items[-1][0])


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list (q in 0..100); None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def weighted_percentile(pairs, q: float) -> float | None:
    """Percentile ``q`` (0..100) of values weighted by counts, nearest rank; None when empty.

    ``pairs`` are ``(value, weight)``; a None value or a weight <= 0 is skipped."""
    items = sorted((v, w) for v, w in pairs if v is not None and w > 0)
    total = sum(w for _, w in items)
    if not total:
        return None
    rank = q / 100.0 * total
    seen = 0.0
    for value, weight in items:
        seen += weight
        if seen >= rank - 1e-9:
            return value
    return items[-1][0]


class SecondStats:
    """Collects completions and failures and emits one stats line per wall-clock second."""

    def __init__(self, load: str, out=None, extra: dict | None = None):
        self.load = load
        self.out = out or sys.stdout
        self.extra = dict(extra or {})
        self._lock = threading.Lock()
        self._lat: list[float] = []
        self._failures = 0
        self._fields: dict[str, float] = {}
        self._second = math.floor(time.time())

    def ok(self, latency_s: float) -> None:
        self._roll()
        with self._lock:
            self._lat.append(latency_s * 1000.0)

    def fail(self) -> None:
        self._roll()
        with self._lock:
            self._failures += 1

    def add(self, field: str, value: float) -> None:
        """Add to a load-specific counter reported in this second's line."""
        self._roll()
        with self._lock:
            self._fields[field] = self._fields.get(field, 0) + value

    def tick(self) -> None:
        """Flush finished seconds even when nothing completes (a stall shows as zeros)."""
        self._roll()

    def _roll(self) -> None:
        now_s = math.floor(time.time())
        with self._lock:
            while now_s > self._second:  # every second of a stall gets its zero line
                self._emit(self._second + 1)
                self._second += 1

    def _emit(self, ts: float) -> None:
        lat = sorted(self._lat)
        line = {
            "load": self.load,
            "ts": ts,
            "count": len(lat),
            "failures": self._failures,
            "p50_ms": percentile(lat, 50),
            "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99),
            "max_ms": lat[-1] if lat else None,
            "hist": histogram(lat),
            **self.extra,
            **self._fields,
        }
        self._lat = []
        self._failures = 0
        self._fields = {}
        self.out.write(PREFIX + json.dumps(line) + "\n")
        self.out.flush()


def parse_line(line: str) -> dict | None:
    """The stats dict in one log line, or None when the line is not a stats line."""
    idx = line.find(PREFIX)
    if idx < 0:
        return None
    try:
        value = json.loads(line[idx + len(PREFIX):])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
