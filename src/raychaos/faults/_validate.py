"""Argument checks of the fault actions, runnable before anything starts.

Each fault declares ``validate_args(**arguments) -> [(argument, message)]`` (attached to the
function by :func:`validates`): the same rules run twice — when ``raychaos run``/``validate``
loads the experiment, so bad values are rejected naming file, key and value before a cluster,
load or fault is touched, and inside the fault itself, for ``chaos run`` and direct calls.
"""

from __future__ import annotations

from typing import Any, Callable

from raychaos.errors import ConfigError

__all__ = ["check_range", "range_problems", "validates", "raise_problems"]

Problem = tuple[str, str]


def range_problems(**checks: tuple[Any, float | None, float | None]) -> list[Problem]:
    """``name=(value, low, high)`` → every problem as ``(name, message)``."""
    out: list[Problem] = []
    for name, (value, low, high) in checks.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append((name, f"expected a number, got {value!r}"))
        elif value != value or value in (float("inf"), float("-inf")):
            out.append((name, f"expected a finite number, got {value!r}"))
        elif low is not None and value < low:
            out.append((name, f"must be >= {low:g}, got {value!r}"))
        elif high is not None and value > high:
            out.append((name, f"must be <= {high:g}, got {value!r}"))
    return out


def raise_problems(action: str, problems: list[Problem]) -> None:
    if problems:
        raise ConfigError([f"{action}: {name}: {message}" for name, message in problems])


def check_range(action: str, **checks: tuple[Any, float | None, float | None]) -> None:
    """``name=(value, low, high)``; every problem reported at once as one ConfigError."""
    raise_problems(action, range_problems(**checks))


def validates(fault: Callable[..., Any]) -> Callable[[Callable[..., list[Problem]]],
                                                     Callable[..., list[Problem]]]:
    """Attach a validator to ``fault`` as ``fault.validate_args``."""
    def attach(check: Callable[..., list[Problem]]) -> Callable[..., list[Problem]]:
        fault.validate_args = check  # type: ignore[attr-defined]
        return check
    return attach


def node_list(name: str, value: Any) -> list[Problem]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        return [(name, f"expected a list of node names, got {value!r}")]
    if len(set(value)) != len(value):
        return [(name, f"names a node twice: {value!r}")]
    return []
