"""Fault arguments validated once, from the signature: the signature *is* the contract.

A fault declares its arguments with their types, defaults and bounds in one place::

    @fault_action(rules=[_something_to_do])
    def saturate_network(nodes: list[str] | None = None,
                         bandwidth_mbit: Annotated[float, Range(0, 100_000)] = 50.0, ...):

:func:`fault_action` derives the checks from it — types and bounds through the same converter
as every settings file (:func:`raychaos.config.schema.convert`, so messages read alike), plus
the fault's cross-argument ``rules`` (a fault that would do nothing) — and runs them both when
the experiment is validated (``raychaos run``/``validate``, before anything starts: see
:mod:`raychaos.config.experiment`) and when the function is called (``chaos run``, a direct
call). Chaos Toolkit still binds the experiment's arguments to the real signature
(``inspect.signature`` follows the wrapper to the function).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from raychaos.config.schema import Problems, convert
from raychaos.errors import ConfigError

__all__ = ["Problem", "Range", "Rule", "argument_problems", "fault_action"]

Problem = tuple[str, str]  # (argument, message)
Rule = Callable[[Mapping[str, Any]], list[Problem]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric argument, inclusive: ``Annotated[float, Range(1, 3600)]``."""

    low: float | None = None
    high: float | None = None


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(inspect.unwrap(func), include_extras=True)


def _split(hint: Any) -> tuple[Any, dict[str, Any]]:
    """(the plain type, schema metadata) of a hint that may be ``Annotated[T, Range(...)]``."""
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        meta: dict[str, Any] = {}
        for extra in extras:
            if isinstance(extra, Range):
                meta.update({k: v for k, v in (("min", extra.low), ("max", extra.high))
                             if v is not None})
            elif isinstance(extra, dict):
                meta.update(extra)
        return base, meta
    return hint, {}


def argument_problems(func: Callable[..., Any], arguments: Mapping[str, Any]) -> list[Problem]:
    """Every problem of ``func(**arguments)``: unknown, missing, wrong type, out of range, and
    the fault's own rules (only when the arguments are otherwise sound)."""
    target = inspect.unwrap(func)
    params = {n: p for n, p in inspect.signature(target).parameters.items()
              if n not in ("configuration", "secrets")}
    hints = _hints(func)
    out: list[Problem] = []
    for name, value in arguments.items():
        if name not in params:
            out.append((name, f"unknown argument for {target.__name__} "
                              f"(expected one of: {', '.join(params) or 'none'})"))
            continue
        if isinstance(value, str) and "${" in value:
            continue  # a Chaos Toolkit configuration substitution, checked when it runs
        if name in hints:
            base, meta = _split(hints[name])
            problems = Problems("")
            convert(base, value, problems, name, meta)
            # items read ": <path>: <message>" (no source): keep the argument's own sub-path
            for item in problems.items:
                where, _, message = item[2:].partition(": ")
                out.append((where, message))
    for name, param in params.items():
        if param.default is inspect.Parameter.empty and name not in arguments:
            out.append((name, f"is required by {target.__name__}"))
    substituted = any(isinstance(v, str) and "${" in v for v in arguments.values())
    if not out and not substituted:
        bound = {n: p.default for n, p in params.items()
                 if p.default is not inspect.Parameter.empty}
        bound.update(arguments)
        for rule in getattr(func, "rules", ()):
            out += rule(bound)
    return out


def fault_action(rules: list[Rule] | None = None) -> Callable[[F], F]:
    """Validate a fault's arguments from its signature on every call (see the module doc)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if args:  # Chaos Toolkit passes keywords; positional calls are bound first
                kwargs = dict(inspect.signature(func).bind_partial(*args, **kwargs).arguments)
            problems = argument_problems(checked, kwargs)
            if problems:
                raise ConfigError([f"{func.__name__}: {name}: {msg}" for name, msg in problems])
            return func(**kwargs)

        setattr(checked, "rules", tuple(rules or ()))  # noqa: B010 - read by argument_problems
        return cast(F, checked)

    return decorate
