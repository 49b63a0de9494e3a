"""Load and validate an experiment file before anything starts.

An experiment is a Chaos Toolkit experiment (so ``chaos run`` works on it too) with raychaos's
settings in ``extensions: [{name: raychaos, ...}]``. Validation goes further than Chaos Toolkit's
own: every argument of every raychaos action and probe is checked against the function's
signature and annotations, the SLO profile is loaded, and each SLO's metric is checked against
what the experiment will produce. All problems are reported at once, each as
``<file>: <key.path>: <what is wrong>``; nothing is started when there is any.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from raychaos.config.metrics import METRICS, probe_of
from raychaos.config.schema import Problems, build, describe, join, load_yaml
from raychaos.config.settings import (
    KubernetesSpec,
    RaychaosSettings,
    SloProfile,
    TargetSpec,
    load_slo_profile,
    settings_from_extensions,
)
from raychaos.errors import ConfigError

__all__ = ["JUDGED_PROBES", "Experiment", "judged_probes", "load_experiment", "resolve_path"]

#: The raychaos probes that record a verdict of their own (a check each in JUnit and pytest).
JUDGED_PROBES = ("gcs_recovery", "job_survival", "sentinel_preserved")

TOP_LEVEL = {"version", "title", "description", "tags", "contributions", "configuration",
             "secrets", "extensions", "controls", "steady-state-hypothesis", "method",
             "rollbacks", "runtime"}
ACTIVITY_KEYS = {"type", "name", "provider", "tolerance", "pauses", "background", "controls",
                 "ref", "configuration", "secrets"}
PROVIDER_KEYS = {"type", "module", "func", "arguments", "secrets"}


@dataclass(frozen=True)
class Experiment:
    path: Path
    data: dict[str, Any]
    settings: RaychaosSettings
    slo_profile: SloProfile | None
    slo_path: Path | None

    @property
    def title(self) -> str:
        return str(self.data.get("title", self.path.stem))

    @property
    def slug(self) -> str:
        return slugify(self.path.stem)


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "experiment"


def resolve_path(value: str, relative_to: Path) -> Path:
    """A path as written, else relative to the experiment's folder, else its parent's, else
    the file of that name shipped with raychaos (``loads/task_storm.py``,
    ``probes/slo-local.yaml``), so an installed raychaos runs the catalog from any folder."""
    p = Path(value)
    if p.is_absolute() or p.exists():
        return p
    for base in (relative_to, relative_to.parent):
        if (base / p).exists():
            return base / p
    from raychaos.catalog import catalog_file

    return catalog_file(p.parts[0] if len(p.parts) > 1 else "", p) or p


def _check_call(module_name: str, func_name: str, arguments: Any, problems: Problems,
                path: str) -> None:
    """Arguments of a raychaos action/probe against its signature (see faults._args)."""
    from raychaos.config.arguments import argument_problems

    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        problems.add(join(path, "module"), f"cannot import {module_name!r} ({exc})")
        return
    func = getattr(module, func_name, None)
    if not callable(func):
        problems.add(join(path, "func"), f"{module_name} has no function {func_name!r}")
        return
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        problems.add(join(path, "arguments"), f"expected a mapping, got {describe(arguments)}")
        return
    for name, message in argument_problems(func, arguments):
        problems.add(join(join(path, "arguments"), name), message)


def _activities(data: dict[str, Any], problems: Problems) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    hyp = data.get("steady-state-hypothesis")
    if hyp is not None:
        if not isinstance(hyp, dict):
            problems.add("steady-state-hypothesis", f"expected a mapping, got {describe(hyp)}")
        else:
            probes = hyp.get("probes", [])
            if not isinstance(probes, list):
                problems.add("steady-state-hypothesis.probes", "expected a list")
            else:
                found += [(f"steady-state-hypothesis.probes[{i}]", a) for i, a in enumerate(probes)]
    for section in ("method", "rollbacks"):
        items = data.get(section, [])
        if items is None:
            continue
        if not isinstance(items, list):
            problems.add(section, f"expected a list of activities, got {describe(items)}")
            continue
        found += [(f"{section}[{i}]", a) for i, a in enumerate(items)]
    return found


def _check_activity(path: str, activity: Any, problems: Problems) -> str | None:
    """Validate one activity; returns ``module.func`` for raychaos activities."""
    if not isinstance(activity, dict):
        problems.add(path, f"expected an activity mapping, got {describe(activity)}")
        return None
    if "ref" in activity and len(activity) == 1:
        return None
    for key in activity:
        if key not in ACTIVITY_KEYS:
            problems.add(join(path, key), f"unknown key (expected one of: "
                                          f"{', '.join(sorted(ACTIVITY_KEYS))})")
    if activity.get("type") not in ("action", "probe"):
        problems.add(join(path, "type"), f"expected 'action' or 'probe', got "
                                         f"{describe(activity.get('type'))}")
    if not isinstance(activity.get("name"), str) or not activity.get("name"):
        problems.add(join(path, "name"), "is required (a non-empty string)")
    provider = activity.get("provider")
    if not isinstance(provider, dict):
        problems.add(join(path, "provider"), f"expected a mapping, got {describe(provider)}")
        return None
    ppath = join(path, "provider")
    for key in provider:
        if key not in PROVIDER_KEYS and key not in ("path", "url", "method", "timeout",
                                                    "headers", "expected_status"):
            problems.add(join(ppath, key), "unknown key")
    if provider.get("type") != "python":
        return None
    module, func = provider.get("module"), provider.get("func")
    if not isinstance(module, str) or not module:
        problems.add(join(ppath, "module"), "is required for a python provider")
        return None
    if not isinstance(func, str) or not func:
        problems.add(join(ppath, "func"), "is required for a python provider")
        return None
    if module.startswith("raychaos"):
        _check_call(module, func, provider.get("arguments"), problems, ppath)
        return f"{module.rsplit('.', 1)[-1]}.{func}"
    return None


def load_experiment(path: str | Path, slo_override: str | Path | None = None,
                    target: TargetSpec | dict[str, Any] | None = None) -> Experiment:
    """Parse and validate; raises ConfigError listing every problem in the file.

    ``target`` (a game day's spec, or command-line options as a dict) replaces the experiment's
    own target. What that target can do is checked by :func:`raychaos.run.plan.load`."""
    path = find_experiment(path)
    data = load_yaml(path, "experiment file")
    problems = Problems(str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {describe(data)}")
    for key in data:
        if key not in TOP_LEVEL:
            problems.add(str(key), f"unknown key (expected one of: {', '.join(sorted(TOP_LEVEL))})")
    if not isinstance(data.get("title"), str) or not data.get("title", "").strip():
        problems.add("title", "is required (a non-empty string)")
    if not data.get("method"):
        problems.add("method", "is required: a non-empty list of actions and probes")
    controls = data.get("controls") or []
    if not isinstance(controls, list) or not any(
            isinstance(c, dict) and (c.get("provider") or {}).get("module") == "raychaos.control"
            for c in controls):
        problems.add("controls", "the raychaos control is missing: add {name: raychaos, "
                                 "provider: {type: python, module: raychaos.control}}")
    used = [u for p, a in _activities(data, problems)
            if (u := _check_activity(p, a, problems)) is not None]
    settings: RaychaosSettings | None = None
    try:
        settings = settings_from_extensions(data.get("extensions"), str(path))
    except ConfigError as exc:
        problems.items += exc.problems
    profile, slo_path = None, None
    slo_value = str(slo_override) if slo_override else (settings.slo_profile if settings else None)
    if slo_value:
        slo_path = resolve_path(slo_value, path.parent)
        try:
            profile = load_slo_profile(slo_path)
        except ConfigError as exc:
            if not slo_path.exists():
                key = "--slo" if slo_override else "extensions.raychaos.slo_profile"
                problems.add(key, f"SLO profile {slo_value!r} not found")
            else:
                problems.items += exc.problems
    if settings is not None:
        for i, load in enumerate(settings.loads):
            if load.script and not resolve_path(load.script, path.parent).exists():
                problems.add(f"extensions.raychaos.loads[{i}].script",
                             f"no such file {load.script!r}")
        names = [load.name for load in settings.loads]
        if len(set(names)) != len(names):
            problems.add("extensions.raychaos.loads", "load names must be unique")
    if profile is not None and settings is not None:
        funcs = {u.split(".")[-1] for u in used}
        load_names = {load.name for load in settings.loads}
        for i, slo in enumerate(profile.slos):
            where = f"{slo_path}: slos[{i}]"
            probe = probe_of(slo.metric)
            if probe and probe not in funcs:
                problems.items.append(f"{where}.metric: {slo.metric!r} needs the {probe} probe, "
                                      f"which {path} does not run")
            if METRICS[slo.metric].producer == "loads" and not settings.loads:
                problems.items.append(f"{where}.metric: {slo.metric!r} needs a load, and "
                                      f"{path} declares none")
            if slo.load and slo.load not in load_names:
                problems.items.append(f"{where}.load: no load named {slo.load!r} in {path}")
    problems.raise_if_any()
    problems.items += _chaos_toolkit_problems(data)
    problems.raise_if_any()
    assert settings is not None
    exp = Experiment(path=path, data=data, settings=settings, slo_profile=profile,
                     slo_path=slo_path)
    if isinstance(target, dict):
        exp = with_target(exp, target)
    elif target is not None:
        exp = replace(exp, settings=replace(exp.settings, target=target))
    return exp


def _chaos_toolkit_problems(data: dict[str, Any]) -> list[str]:
    """Chaos Toolkit's own experiment checks (what ``chaos run`` would refuse), as sentences."""
    import copy
    import logging

    from chaoslib.exceptions import ChaosException
    from chaoslib.experiment import ensure_experiment_is_valid

    log = logging.getLogger("chaostoolkit")
    level = log.level
    log.setLevel(logging.CRITICAL)  # it logs each check; the one sentence below is enough
    try:
        ensure_experiment_is_valid(copy.deepcopy(data))
    except ChaosException as exc:
        return [f"Chaos Toolkit refuses it: {str(exc).strip().splitlines()[0]}"]
    finally:
        log.setLevel(level)
    return []


def fault_activities(exp: Experiment) -> list[tuple[str, str, dict[str, Any]]]:
    """``(key path, fault function name, arguments)`` of each raychaos fault in the method."""
    out = []
    for i, act in enumerate(exp.data.get("method") or []):
        prov = (act.get("provider") or {}) if isinstance(act, dict) else {}
        if prov.get("type") == "python" and str(prov.get("module", "")).startswith(
                "raychaos.faults") and prov.get("func") != "undo_all":
            out.append((f"method[{i}].provider.arguments", str(prov.get("func")),
                        dict(prov.get("arguments") or {})))
    return out


def judged_probes(data: dict[str, Any]) -> list[str]:
    """The :data:`JUDGED_PROBES` the method calls, in order, each once."""
    funcs = []
    for act in data.get("method") or []:
        prov = (act.get("provider") or {}) if isinstance(act, dict) else {}
        if act.get("type") == "probe" and str(prov.get("module", "")).startswith("raychaos.") \
                and prov.get("func") in JUDGED_PROBES:
            funcs.append(str(prov["func"]))
    return list(dict.fromkeys(funcs))


def with_target(exp: Experiment, override: dict[str, Any]) -> Experiment:
    """The experiment aimed at another target (``--target kubernetes --cluster ...``)."""
    problems = Problems("--target")
    kind = override.get("kind", "local")
    fields = {k: v for k, v in override.items() if k != "kind" and v is not None}
    spec = exp.settings.target
    if kind == "kubernetes":
        k8s = build(KubernetesSpec, fields, problems, "kubernetes")
        problems.raise_if_any()
        assert k8s is not None
        spec = TargetSpec(kind="kubernetes", local=spec.local, kubernetes=k8s)
    elif fields:
        raise ConfigError(f"--target local takes no kubernetes options (got {sorted(fields)})")
    else:
        spec = replace(spec, kind="local")
    return replace(exp, settings=replace(exp.settings, target=spec))


def find_experiment(path: str | Path) -> Path:
    """``path`` as given, else the catalog entry of that name shipped with raychaos
    (``experiments/head-kill.yaml`` or ``head-kill`` work from any folder)."""
    p = Path(path)
    if p.exists():
        return p
    from raychaos.catalog import catalog_file

    return catalog_file("experiments", p) or p
