"""The cost of a relative latency bound's bootstrap: over seconds (what the verdict does,
``raychaos.observe.relative``) beside over requests (scipy's bootstrap of the expanded
samples, capped at 4000 a window: what it did before 2026-12-07), on synthetic windows of a
100/s load whose seconds differ (lognormal per second around a per-second median).

    python bench/relative_bootstrap.py

Prints, per window size, each method's seconds and peak traced memory, their ratio, and both
intervals: the interval over requests is the narrower one, the reason it was replaced.
Figures, not assertions.
"""

from __future__ import annotations

import time
import tracemalloc
from collections import Counter

import numpy as np
from scipy import stats

from raychaos.catalog import stats_format
from raychaos.observe.relative import MAX_SAMPLES, N_RESAMPLES, SEED, compare_percentiles

RATE = 100


def seconds(n: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    fmt = stats_format()
    out = []
    for median in rng.lognormal(np.log(15.0), 0.8, n):  # each second its own moment
        hist = Counter(fmt.bucket_of(float(x)) for x in rng.lognormal(np.log(median), 0.3, RATE))
        out.append((np.array([fmt.bucket_value(b) for b in hist], dtype=float),
                    np.array(list(hist.values()), dtype=np.int64)))
    return out


def over_requests(w: list, b: list) -> tuple[float, float]:
    rng = np.random.default_rng(SEED)

    def expand(secs: list) -> np.ndarray:
        full = np.concatenate([np.repeat(v, c) for v, c in secs])
        return rng.choice(full, MAX_SAMPLES, replace=False) if full.size > MAX_SAMPLES else full

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, 95, axis=axis, method="higher") / np.percentile(
            y, 95, axis=axis, method="higher")

    ci = stats.bootstrap((expand(w), expand(b)), ratio, vectorized=True, paired=False,
                         n_resamples=N_RESAMPLES, method="percentile", batch=250,
                         random_state=rng).confidence_interval
    return float(ci.low), float(ci.high)


def measure(fn):  # noqa: ANN001, ANN201
    tracemalloc.start()
    t0 = time.perf_counter()
    got = fn()
    took = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return got, took, peak / 1e6


def main() -> None:
    rng = np.random.default_rng(1)
    print(f"{'window vs baseline (s)':>24}  {'seconds: s / MB':>16}  {'requests: s / MB':>17}"
          f"  {'time ratio':>10}  interval over seconds / over requests")
    for nw, nb in [(30, 5), (40, 10), (120, 30), (600, 60)]:
        w, b = seconds(nw, rng), seconds(nb, rng)
        c, ts, ms = measure(lambda: compare_percentiles(w, b, 95.0))  # noqa: B023
        ci, tr, mr = measure(lambda: over_requests(w, b))  # noqa: B023
        print(f"{nw:>15} vs {nb:<5}  {ts:>7.3f} / {ms:>5.1f}  {tr:>8.3f} / {mr:>5.1f}  "
              f"{ts / tr:>9.2f}x  {c.ci_low:.2f}..{c.ci_high:.2f} / {ci[0]:.2f}..{ci[1]:.2f}")


if __name__ == "__main__":
    main()
