"""A window judged against the same load's baseline window of the same run.

Why: an absolute latency bound calibrated on a quiet machine fails on a busy one with a healthy
cluster — the host, not Ray, moved the figure. A *relative* bound ("p95 in recovery at most
2 x the baseline's") cancels what both windows share (the machine, the load's own cost, the
cluster's size); host noise that differs between the windows is caught separately
(:mod:`raychaos.observe.hostnoise`).

A ratio of two percentiles from a few hundred requests is itself noisy, so the judgement is
statistical, as a canary judge's (Kayenta's) is:

- the **ratio** of the window's percentile to the baseline's, with a **bootstrap confidence
  interval** (``scipy.stats.bootstrap`` over the per-request samples of both windows, a fixed
  seed: the same data always gives the same verdict);
- a **rank test**, one-sided Mann–Whitney U (``scipy.stats.mannwhitneyu``), whether the window's
  requests are slower than the baseline's, and its **effect size**, the probability that a
  request of the window is slower than one of the baseline (0.5: no difference).

:func:`judge` turns that into ``pass`` (the ratio is within the bound), ``fail`` (the whole
confidence interval is past the bound: the data shows it) or ``inconclusive`` (the ratio is past
the bound but the interval reaches back inside it: too little evidence either way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["Comparison", "MAX_SAMPLES", "compare_percentiles", "judge"]

#: samples per window the bootstrap draws from (a deterministic subsample past it: a 60 s
#: baseline of a 100/s storm is 6000 requests, and the interval barely narrows past this)
MAX_SAMPLES = 4000
N_RESAMPLES = 2000
SEED = 20261204


@dataclass(frozen=True)
class Comparison:
    """A window's percentile against its baseline's (see the module docstring)."""

    q: float
    window: float  # the window's percentile
    baseline: float  # the baseline's
    ratio: float  # window / baseline
    ci_low: float  # the ratio's bootstrap confidence interval
    ci_high: float
    confidence: float
    mwu_p: float  # one-sided: the window's requests are slower than the baseline's
    effect: float  # P(a window request is slower than a baseline one), ties counted half
    n_window: int
    n_baseline: int

    def evidence(self) -> dict[str, Any]:
        return {"window_value": _r(self.window), "baseline_value": _r(self.baseline),
                "ratio": _r(self.ratio), "ci": [_r(self.ci_low), _r(self.ci_high)],
                "confidence": self.confidence, "mann_whitney_p": float(f"{self.mwu_p:.3g}"),
                "effect_size": round(self.effect, 3), "samples": self.n_window,
                "baseline_samples": self.n_baseline}


def _r(x: float) -> float:
    return round(float(x), 4)


def _expand(values: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-request samples from (value, count) pairs, subsampled past :data:`MAX_SAMPLES`."""
    full = np.repeat(np.asarray(values, dtype=float), np.asarray(counts, dtype=int))
    if full.size > MAX_SAMPLES:
        full = rng.choice(full, size=MAX_SAMPLES, replace=False)
    return full


def compare_percentiles(window: tuple[np.ndarray, np.ndarray],
                        baseline: tuple[np.ndarray, np.ndarray], q: float,
                        confidence: float = 0.95) -> Comparison:
    """The window's ``q``-th percentile against the baseline's, from (values, counts) of each
    (per-request latencies, as :func:`raychaos.observe.loadstats.window_latencies` gives)."""
    rng = np.random.default_rng(SEED)
    w = _expand(*window, rng)
    b = _expand(*baseline, rng)
    if not w.size or not b.size:
        raise ValueError("both windows need at least one sample")

    def pct(x: np.ndarray, axis: int = -1) -> Any:
        return np.percentile(x, q, axis=axis, method="higher")

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
        return pct(x, axis) / np.maximum(pct(y, axis), 1e-9)

    point = float(ratio(w, b))
    if w.size > 1 and b.size > 1 and (np.ptp(w) > 0 or np.ptp(b) > 0):
        ci = stats.bootstrap((w, b), ratio, vectorized=True, paired=False,
                             n_resamples=N_RESAMPLES, confidence_level=confidence,
                             method="percentile", batch=250, random_state=rng).confidence_interval
        low, high = float(ci.low), float(ci.high)
    else:  # nothing varies: the point is all there is
        low = high = point
    test = stats.mannwhitneyu(w, b, alternative="greater", method="asymptotic")
    effect = float(test.statistic) / (w.size * b.size)
    return Comparison(q=q, window=float(pct(w)), baseline=float(pct(b)), ratio=point,
                      ci_low=min(low, point), ci_high=max(high, point), confidence=confidence,
                      mwu_p=float(test.pvalue), effect=effect, n_window=int(w.size),
                      n_baseline=int(b.size))


def judge(c: Comparison, op: str, factor: float,
          ops: dict[str, Callable[[float, float], bool]]) -> tuple[str, str | None]:
    """``(verdict, reason)`` of a relative bound ``ratio <op> factor`` on a comparison: the
    point decides a pass; a fail needs the whole interval past the bound."""
    if ops[op](c.ratio, factor):
        return "pass", None
    inside = ops[op](c.ci_low, factor) or ops[op](c.ci_high, factor)
    if inside:
        return "inconclusive", (f"the ratio {c.ratio:.2f} is past {op} {factor:g} but its "
                                f"{c.confidence:.0%} interval {c.ci_low:.2f}..{c.ci_high:.2f} "
                                f"reaches back inside it ({c.n_window} vs {c.n_baseline} "
                                f"samples)")
    return "fail", None
