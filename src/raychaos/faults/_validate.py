"""Argument checks shared by the fault actions: fail before any change, naming argument and value."""

from __future__ import annotations

from typing import Any

from raychaos.errors import ConfigError

__all__ = ["check_range"]


def check_range(action: str, **checks: tuple[Any, float | None, float | None]) -> None:
    """``name=(value, low, high)``; every problem reported at once as one ConfigError."""
    problems = []
    for name, (value, low, high) in checks.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{action}: {name}: expected a number, got {value!r}")
        elif low is not None and value < low:
            problems.append(f"{action}: {name}: must be >= {low:g}, got {value!r}")
        elif high is not None and value > high:
            problems.append(f"{action}: {name}: must be <= {high:g}, got {value!r}")
    if problems:
        raise ConfigError(problems)
