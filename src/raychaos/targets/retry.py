"""Retry with exponential backoff, for calls that are safe to repeat (reads, idempotent undos).

A dashboard that answers 503 for a second while its head restarts is normal during chaos; one
failed GET must not turn into a job marked lost. Submitting a job is *not* retried here: a
request that timed out may still have created the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["with_backoff"]

T = TypeVar("T")


def with_backoff(call: Callable[[], T], *, attempts: int = 3, first_delay_s: float = 0.1,
                 factor: float = 2.0, max_delay_s: float = 2.0,
                 retry_on: tuple[type[BaseException], ...] = (Exception,),
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()`` until it returns; after ``attempts`` failures the last error is raised."""
    delay = first_delay_s
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except retry_on:
            if attempt == attempts:
                raise
            sleep(delay)
            delay = min(delay * factor, max_delay_s)
    raise AssertionError("unreachable")  # pragma: no cover
