"""Build frozen dataclasses from parsed YAML, collecting every problem with its key path.

One loader for every settings type: the dataclass *is* the schema. Field types may be ``str``,
``int``, ``float``, ``bool``, ``Literal[...]``, ``X | None``, ``list[X]``, ``dict[str, X]`` and
nested dataclasses. A field's ``metadata`` may carry ``min`` / ``max`` bounds. Unknown keys,
wrong types, out-of-range numbers and missing required keys are all reported at once, each as
``<file>: <key.path>: <what is wrong>``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

from raychaos.errors import ConfigError

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def describe(value: Any) -> str:
    """How a bad value is shown in an error message."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (dict, list)):
        text = yaml.safe_dump(value, default_flow_style=True).strip()
        return text if len(text) <= 60 else text[:57] + "..."
    return repr(value)


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class Problems:
    """Collects problems for one file; raises them together."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        where = f"{self.source}: {path}" if path else self.source
        self.items.append(f"{where}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)


def load_yaml(path: str | Path, what: str = "file") -> Any:
    """Parse a YAML file safely (no object construction); errors name the file and line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: {what} not found")
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{p}: not valid YAML{where}: {problem}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a UTF-8 text file") from exc


def build(cls: type[T], data: Any, problems: Problems, path: str = "") -> T | None:
    """Build ``cls`` from ``data``; on problems, record them and return None."""
    built: T | None = convert(cls, data, problems, path)
    return built


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp in (int,):
        return "a whole number"
    if tp in (float,):
        return "a number"
    if tp is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (list, list):
        return "a list"
    if origin in (dict, dict):
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not type(None))
    return getattr(tp, "__name__", str(tp))


def convert(tp: Any, value: Any, problems: Problems, path: str, meta: Any = None) -> Any:
    """``value`` as type ``tp`` (bounds from ``meta``: min, max, nonempty); problems recorded."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None and type(None) in get_args(tp):
            return None
        if len(args) == 1:
            return convert(args[0], value, problems, path, meta)
        for arg in args:  # first alternative that takes the value without problems
            trial = Problems(problems.source)
            result = convert(arg, value, trial, path, meta)
            if not trial.items:
                return result
        problems.add(path, f"expected {_type_name(tp)}, got {describe(value)}")
        return None
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            problems.add(path, f"expected one of {', '.join(repr(a) for a in allowed)}, "
                               f"got {describe(value)}")
            return None
        return value
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, problems, path)
    if origin in (list, list):
        if not isinstance(value, list):
            problems.add(path, f"expected a list, got {describe(value)}")
            return None
        (item_tp,) = get_args(tp) or (Any,)
        return [convert(item_tp, v, problems, join(path, i)) for i, v in enumerate(value)]
    if origin in (dict, dict):
        if not isinstance(value, dict):
            problems.add(path, f"expected a mapping, got {describe(value)}")
            return None
        key_tp, val_tp = get_args(tp) or (str, Any)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                problems.add(join(path, str(k)), f"keys must be strings, got {describe(k)}")
                continue
            out[k] = convert(val_tp, v, problems, join(path, k))
        return out
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            problems.add(path, f"expected true or false, got {describe(value)}")
            return None
        return value
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            tp is int and not float(value).is_integer()
        ):
            problems.add(path, f"expected {_type_name(tp)}, got {describe(value)}")
            return None
        value = tp(value)
        if value != value or value in (float("inf"), float("-inf")):
            problems.add(path, f"expected a finite number, got {describe(value)}")
            return None
        lo = (meta or {}).get("min")
        hi = (meta or {}).get("max")
        if lo is not None and value < lo:
            problems.add(path, f"must be at least {lo}, got {describe(value)}")
            return None
        if hi is not None and value > hi:
            problems.add(path, f"must be at most {hi}, got {describe(value)}")
            return None
        return value
    if tp is str:
        if not isinstance(value, str):
            problems.add(path, f"expected a string, got {describe(value)}")
            return None
        if (meta or {}).get("nonempty") and not value.strip():
            problems.add(path, "must not be empty")
            return None
        return value
    raise TypeError(f"schema: unsupported field type {tp!r} at {path}")


def _build_dataclass(cls: Any, value: Any, problems: Problems, path: str) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.add(path, f"expected a mapping, got {describe(value)}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name.replace("_", "_"): f for f in dataclasses.fields(cls) if f.init}
    before = len(problems.items)
    for key in value:
        if key not in fields:
            expected = ", ".join(sorted(fields))
            problems.add(join(path, str(key)), f"unknown key (expected one of: {expected})")
    kwargs = {}
    for name, field in fields.items():
        if name in value:
            kwargs[name] = convert(hints[name], value[name], problems, join(path, name),
                                    field.metadata)
        elif field.default is _MISSING and field.default_factory is _MISSING:
            problems.add(join(path, name), "is required")
    if len(problems.items) > before:
        return None
    try:
        obj = cls(**kwargs)
    except ValueError as exc:  # __post_init__ cross-field checks
        problems.add(path, str(exc))
        return None
    return obj
