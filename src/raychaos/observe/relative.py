"""A window judged against the same load's baseline window of the same run.

Why: an absolute latency bound calibrated on a quiet machine fails on a busy one with a healthy
cluster — the host, not Ray, moved the figure. A *relative* bound ("p95 in recovery at most
2 x the baseline's") cancels what both windows share (the machine, the load's own cost, the
cluster's size); host noise that differs between the windows is caught separately
(:mod:`raychaos.observe.hostnoise`).

A ratio of two percentiles from a few hundred requests is itself noisy, so the judgement is
statistical, as a canary judge's (Kayenta's) is:

- the **ratio** of the window's percentile to the baseline's, with a **bootstrap confidence
  interval** drawn over *seconds*: each resample picks whole seconds of each window, with
  replacement, and pools their requests (a block bootstrap, a fixed seed: the same data always
  gives the same verdict). The requests of one second are not independent draws: they share
  the host's moment (a co-located node starting, a burst of the control plane's work). A
  bootstrap over requests took 300 requests from 3 quiet seconds for 300 independent facts,
  and called a healthy cluster's 8x "shown" (interval 5.3..10.1) on a test bed where the
  same run's quiet and busy seconds differ tenfold (2026-12-07);
- a **rank test**, one-sided Mann–Whitney U (``scipy.stats.mannwhitneyu``), whether the window's
  requests are slower than the baseline's, and its **effect size**, the probability that a
  request of the window is slower than one of the baseline (0.5: no difference) — evidence for
  the reader, over requests; the verdict does not read it.

:func:`judge` turns that into ``pass`` (the ratio is within the bound), ``fail`` (the whole
confidence interval is past the bound, over at least :data:`MIN_SECONDS` seconds of each
window: the data shows it) or ``inconclusive`` (the interval reaches back inside the bound, or
the seconds are too few for a bootstrap over seconds to show their spread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["Comparison", "MAX_SAMPLES", "MIN_SECONDS", "compare_percentiles", "judge"]

#: requests per window the rank test draws from (a deterministic subsample past it: a 60 s
#: baseline of a 100/s storm is 6000 requests, and the test barely sharpens past this)
MAX_SAMPLES = 4000
N_RESAMPLES = 2000
BATCH = 250
#: resamples x buckets held at once (int64: 16 MB), so a long window costs time, not memory
CELLS = 2_000_000
SEED = 20261204
#: a fail needs this many seconds with samples in each window: a bootstrap over fewer seconds
#: than this cannot show how much the seconds differ (with 3, every resample is one of 10
#: mixtures of the same three moments)
MIN_SECONDS = 5

#: one window's samples second by second: (bucket values in ms, counts) per second
Seconds = Sequence[tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Comparison:
    """A window's percentile against its baseline's (see the module docstring)."""

    q: float
    window: float  # the window's percentile
    baseline: float  # the baseline's
    ratio: float  # window / baseline
    ci_low: float  # the ratio's bootstrap confidence interval (over seconds)
    ci_high: float
    confidence: float
    mwu_p: float  # one-sided: the window's requests are slower than the baseline's
    effect: float  # P(a window request is slower than a baseline one), ties counted half
    n_window: int
    n_baseline: int
    s_window: int = 0  # seconds with samples
    s_baseline: int = 0

    def evidence(self) -> dict[str, Any]:
        return {"window_value": _r(self.window), "baseline_value": _r(self.baseline),
                "ratio": _r(self.ratio), "ci": [_r(self.ci_low), _r(self.ci_high)],
                "confidence": self.confidence, "mann_whitney_p": float(f"{self.mwu_p:.3g}"),
                "effect_size": round(self.effect, 3), "samples": self.n_window,
                "baseline_samples": self.n_baseline, "seconds": self.s_window,
                "baseline_seconds": self.s_baseline}


def _r(x: float) -> float:
    return round(float(x), 4)


@dataclass(frozen=True)
class _Flat:
    """One window's seconds as sorted buckets: value, count and the second each came from."""

    values: np.ndarray
    counts: np.ndarray
    second: np.ndarray
    seconds: int

    @classmethod
    def of(cls, seconds: Seconds) -> _Flat:
        kept = [(np.asarray(v, dtype=float), np.asarray(c, dtype=np.int64))
                for v, c in seconds if np.asarray(c).sum() > 0]
        if not kept:
            raise ValueError("both windows need at least one sample")
        values = np.concatenate([v for v, _ in kept])
        counts = np.concatenate([c for _, c in kept])
        second = np.concatenate([np.full(len(v), k) for k, (v, _) in enumerate(kept)])
        order = np.argsort(values, kind="stable")
        return cls(values[order], counts[order], second[order], len(kept))

    def percentile(self, weights: np.ndarray, q: float) -> np.ndarray:
        """The ``q``-th percentile (numpy's ``method="higher"``: a value really seen) of each
        row of ``weights`` (requests per bucket), as ``np.percentile`` of the expanded
        samples."""
        cum = np.cumsum(weights, axis=-1)
        rank = np.ceil((cum[..., -1] - 1) * q / 100.0)
        at = (cum <= rank[..., None]).sum(axis=-1)
        return np.asarray(self.values[np.minimum(at, self.values.size - 1)])

    def resampled(self, rng: np.random.Generator, n: int, q: float) -> np.ndarray:
        """The percentile of ``n`` resamples, each of ``seconds`` seconds drawn with
        replacement."""
        picks = rng.multinomial(self.seconds, np.full(self.seconds, 1.0 / self.seconds),
                                size=n)
        return self.percentile(self.counts * picks[:, self.second], q)

    def expanded(self, rng: np.random.Generator) -> np.ndarray:
        """Per-request samples, subsampled past :data:`MAX_SAMPLES`."""
        full = np.repeat(self.values, self.counts)
        if full.size > MAX_SAMPLES:
            full = rng.choice(full, size=MAX_SAMPLES, replace=False)
        return full


def compare_percentiles(window: Seconds, baseline: Seconds, q: float,
                        confidence: float = 0.95) -> Comparison:
    """The window's ``q``-th percentile against the baseline's, from each one's samples second
    by second (as :func:`raychaos.observe.loadstats.second_latencies` gives)."""
    rng = np.random.default_rng(SEED)
    w, b = _Flat.of(window), _Flat.of(baseline)
    pw, pb = float(w.percentile(w.counts, q)), float(b.percentile(b.counts, q))
    point = pw / max(pb, 1e-9)
    ratios = []
    batch = max(1, min(BATCH, CELLS // max(w.values.size, b.values.size)))
    for start in range(0, N_RESAMPLES, batch):
        n = min(batch, N_RESAMPLES - start)
        ratios.append(w.resampled(rng, n, q) / np.maximum(b.resampled(rng, n, q), 1e-9))
    tail = (1.0 - confidence) / 2 * 100
    low, high = (float(x) for x in np.percentile(np.concatenate(ratios), [tail, 100 - tail]))
    ws, bs = w.expanded(rng), b.expanded(rng)
    test = stats.mannwhitneyu(ws, bs, alternative="greater", method="asymptotic")
    effect = float(test.statistic) / (ws.size * bs.size)
    return Comparison(q=q, window=pw, baseline=pb, ratio=point, ci_low=min(low, point),
                      ci_high=max(high, point), confidence=confidence,
                      mwu_p=float(test.pvalue), effect=effect, n_window=int(w.counts.sum()),
                      n_baseline=int(b.counts.sum()), s_window=w.seconds,
                      s_baseline=b.seconds)


def judge(c: Comparison, op: str, factor: float,
          ops: dict[str, Callable[[float, float], bool]]) -> tuple[str, str | None]:
    """``(verdict, reason)`` of a relative bound ``ratio <op> factor`` on a comparison: the
    point decides a pass; a fail needs the whole interval past the bound, drawn over at least
    :data:`MIN_SECONDS` seconds of each window."""
    if ops[op](c.ratio, factor):
        return "pass", None
    inside = ops[op](c.ci_low, factor) or ops[op](c.ci_high, factor)
    if inside:
        return "inconclusive", (f"the ratio {c.ratio:.2f} is past {op} {factor:g} but its "
                                f"{c.confidence:.0%} interval {c.ci_low:.2f}..{c.ci_high:.2f} "
                                f"reaches back inside it ({c.n_window} vs {c.n_baseline} "
                                f"samples, over {c.s_window} vs {c.s_baseline} s)")
    if min(c.s_window, c.s_baseline) < MIN_SECONDS:
        return "inconclusive", (f"the ratio {c.ratio:.2f} is past {op} {factor:g}, but over "
                                f"{c.s_window} s against {c.s_baseline} s of baseline: a fail "
                                f"needs {MIN_SECONDS} s of each (a second's requests share "
                                f"the host's moment, so the interval is drawn over seconds)")
    return "fail", None
