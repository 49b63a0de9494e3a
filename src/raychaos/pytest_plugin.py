"""Experiment files as pytest tests: ``pytest --raychaos experiments/``.

Teams already gate merges on pytest: its JUnit XML, ``-k``, ``--lf`` and CI integrations. This
plugin makes each experiment YAML a test file whose items are the checks a reader cares about
— ``run`` (the run completed, the hypothesis held, the system recovered), one ``slo[<name>]``
per SLO of the profile and one ``probe[<name>]`` per raychaos probe in the method — so a JUnit
report names the SLO that failed, with measured value and threshold, instead of one opaque
"experiment failed". The experiment runs once per file, on first use by any of its items (a
session-level cache); the items then read its summary's checks
(:mod:`raychaos.results.checks`), the same ones ``raychaos run`` prints and its JUnit shows:

- a check that passed passes, one that failed FAILS, one that is n/a is skipped, and so is one
  that is inconclusive (the data could not support a verdict), with its reason;
- a check that errored (the harness could not run or see it) is an ERROR (raised in the item's
  setup, so pytest and its JUnit say "error", not "failure");
- the pytest exit code follows ``raychaos run``'s: 2 when any experiment's check errored, else
  pytest's own (1 when a check failed).

Nothing is collected unless asked, so a repository's own ``pytest`` is unaffected when the
plugin is installed: pass ``--raychaos``, or list glob patterns (relative to the rootdir) in
the ``raychaos_experiments`` ini option. Options:

- ``--raychaos-target YAML|FILE``: a target mapping (as a game-day plan's ``target``) that
  replaces each experiment's own, e.g. ``'{kind: kubernetes, kubernetes: {cluster: rc}}'``;
- ``--raychaos-results DIR``, ``--raychaos-slo FILE``, ``--raychaos-state-root DIR``;
- ``--raychaos-runner module:function`` (or ``RAYCHAOS_PYTEST_RUNNER``): what runs one
  experiment, called as ``fn(path, slo=, results_root=, state_root=, target=)`` and returning a
  :class:`~raychaos.runner.RunOutcome` or a summary dict. Tests inject a fake here so they
  need no cluster; the default is :func:`raychaos.runner.run_experiment`.

Registered as the ``raychaos`` entry point of ``pytest11``; without installing, load it with
``-p raychaos.pytest_plugin``.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = ["ExperimentFile", "ExperimentItem"]

RUNNER_ENV = "RAYCHAOS_PYTEST_RUNNER"
_RUNS = pytest.StashKey[dict[Path, dict[str, Any]]]()
_TARGET = pytest.StashKey[Any]()
_RUNNER = pytest.StashKey[Callable[..., Any]]()


class CheckFailed(Exception):
    """An SLO, probe or run check did not pass; its message is the whole report."""


class CheckErrored(Exception):
    """The harness could not run or observe a check (raised in setup: pytest says ERROR)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raychaos", "raychaos chaos experiments")
    group.addoption("--raychaos", action="store_true",
                    help="collect experiment YAML files as tests (one item per SLO and probe)")
    group.addoption("--raychaos-target", metavar="YAML|FILE",
                    help="target mapping replacing each experiment's target")
    group.addoption("--raychaos-results", metavar="DIR", default="results",
                    help="results root folder (default: results)")
    group.addoption("--raychaos-slo", metavar="FILE", help="SLO profile overriding each "
                                                           "experiment's")
    group.addoption("--raychaos-state-root", metavar="DIR",
                    help="local cluster state folder (to reuse a cluster already up)")
    group.addoption("--raychaos-runner", metavar="MODULE:FUNCTION",
                    help=f"what runs one experiment (default: raychaos.runner.run_experiment; "
                         f"also ${RUNNER_ENV})")
    parser.addini("raychaos_experiments", type="linelist", default=[],
                  help="glob patterns (relative to rootdir) of experiment files to collect "
                       "without --raychaos")


def pytest_configure(config: pytest.Config) -> None:
    """Bad options are usage errors before anything is collected or run."""
    config.stash[_RUNS] = {}
    config.stash[_TARGET] = _target(config)
    config.stash[_RUNNER] = _runner(config)
    if (config.getoption("raychaos") or config.getini("raychaos_experiments")) \
            and config.pluginmanager.has_plugin("locust"):
        # locust's plugin imports locust, whose gevent monkey-patching breaks (or kills) a
        # process that also runs Ray: refuse before anything starts
        raise pytest.UsageError("raychaos: Locust's pytest plugin is loaded in this process, "
                                "which breaks Ray; add `-p no:locust` to the pytest command")


def _wanted(path: Path, config: pytest.Config) -> bool:
    if path.suffix not in (".yaml", ".yml"):
        return False
    if config.getoption("raychaos"):
        return True
    patterns = config.getini("raychaos_experiments")
    try:
        rel = path.resolve().relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:
        rel = path.as_posix()
    return any(fnmatch.fnmatch(rel, p) for p in patterns)


def _looks_like_experiment(path: Path) -> bool:
    """A mapping with a ``method`` (game-day plans and SLO profiles have none); a file that
    does not parse is collected too, so its error is reported rather than hidden."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return True
    return isinstance(data, dict) and "method" in data


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _wanted(file_path, parent.config) and _looks_like_experiment(file_path):
        return ExperimentFile.from_parent(parent, path=file_path)
    return None


def _target(config: pytest.Config) -> Any:
    """The ``--raychaos-target`` mapping as a TargetSpec (None when not given)."""
    raw = config.getoption("raychaos_target")
    if not raw:
        return None
    from raychaos.config.schema import Problems, build
    from raychaos.config.settings import TargetSpec

    text = Path(raw).read_text(encoding="utf-8") if Path(raw).is_file() else raw
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise pytest.UsageError(f"--raychaos-target: not YAML ({exc})") from exc
    problems = Problems("--raychaos-target")
    spec = build(TargetSpec, data, problems)
    if problems.items:
        raise pytest.UsageError("\n".join(problems.items))
    return spec


def _run_real(path: str, **kwargs: Any) -> Any:
    """The default runner; imported on first use, so loading the plugin costs nothing."""
    from raychaos.run.runner import run_experiment

    return run_experiment(path, quiet=True, **kwargs)


def _runner(config: pytest.Config) -> Callable[..., Any]:
    spec = config.getoption("raychaos_runner") or os.environ.get(RUNNER_ENV)
    if not spec:
        return _run_real
    module, _, func = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), func)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise pytest.UsageError(f"--raychaos-runner: cannot load {spec!r} ({exc})") from exc


class ExperimentFile(pytest.File):
    """One experiment file: validated at collection, run once when its first item runs."""

    @property
    def shown_path(self) -> str:
        """The path as messages show it: relative to the current folder when inside it."""
        try:
            return self.path.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return str(self.path)

    def collect(self) -> Any:
        from raychaos.config.experiment import judged_probes
        from raychaos.run.plan import load as load_experiment

        exp = load_experiment(self.shown_path, self.config.getoption("raychaos_slo"))
        yield ExperimentItem.from_parent(self, name="run", kind="run", check="run")
        for slo in exp.slo_profile.slos if exp.slo_profile else []:
            yield ExperimentItem.from_parent(self, name=f"slo[{slo.name}]", kind="slo",
                                             check=slo.name)
        for name in judged_probes(exp.data):
            yield ExperimentItem.from_parent(self, name=f"probe[{name}]", kind="probe",
                                             check=name)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        from raychaos.errors import ConfigError

        if isinstance(excinfo.value, ConfigError):
            return "\n".join(f"error: {p}" for p in excinfo.value.problems)
        return super().repr_failure(excinfo)

    def summary(self) -> dict[str, Any]:
        """The run's summary (plus ``run_dir``); the experiment runs on the first call."""
        runs = self.config.stash[_RUNS]
        if self.path not in runs:
            try:
                result = self.config.stash[_RUNNER](
                    self.shown_path, slo=self.config.getoption("raychaos_slo"),
                    results_root=self.config.getoption("raychaos_results"),
                    state_root=self.config.getoption("raychaos_state_root"),
                    target=self.config.stash[_TARGET])
            except Exception as exc:  # every item of this file reports it
                result = {"status": "errored", "verdict": "error",
                          "errors": [f"the runner raised {type(exc).__name__}: {exc}"]}
            if isinstance(result, dict):
                runs[self.path] = dict(result)
            else:
                runs[self.path] = {**result.summary, "run_dir": str(result.run_dir or "")}
        return runs[self.path]


class ExperimentItem(pytest.Item):
    """One check of an experiment run: ``run``, ``slo[<name>]`` or ``probe[<name>]``."""

    def __init__(self, *, kind: str, check: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.kind, self.check = kind, check

    def _check(self) -> dict[str, Any]:
        """This item's check in the run's summary (the run runs on first use)."""
        from raychaos.results.checks import checks_of

        parent = self.parent
        assert isinstance(parent, ExperimentFile)
        summary = parent.summary()
        found = next((c for c in checks_of(summary)
                      if c["kind"] == self.kind and c["name"] == self.check), None)
        if found is not None:
            return found
        errors = "; ".join(map(str, summary.get("errors") or [])) or "no details"
        verdict = "fail" if summary.get("verdict") == "fail" else "error"
        return {"kind": self.kind, "name": self.check, "verdict": verdict,
                "message": f"{self.check}: not judged: the run {summary.get('status')} "
                           f"({errors})"}

    def setup(self) -> None:
        check = self._check()
        if check["verdict"] == "error":
            _errored(self.config)
            raise CheckErrored(check["message"])

    def runtest(self) -> None:
        parent = self.parent
        assert isinstance(parent, ExperimentFile)
        summary = parent.summary()
        if summary.get("run_dir"):
            self.user_properties.append(("run_dir", summary["run_dir"]))
        check = self._check()
        verdict = check["verdict"]
        if self.kind == "slo":
            entry: dict[str, Any] = next(
                (e for e in summary.get("slos") or [] if e.get("name") == self.check), {})
            for key in ("value", "threshold"):
                self.user_properties.append((key, entry.get(key)))
        self.user_properties.append(("verdict", verdict))
        if verdict == "n/a":
            pytest.skip(f"not measured: {check['message']}")
        if verdict == "inconclusive":  # the data could not support a verdict: never a pass
            pytest.skip(f"inconclusive: {check['message']}")
        if verdict != "pass":
            raise CheckFailed(check["message"])

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        if isinstance(excinfo.value, (CheckFailed, CheckErrored)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, ""  # the node id says it all ("." in names is not a module)


_ERRORED = pytest.StashKey[bool]()


def _errored(config: pytest.Config) -> None:
    config.stash[_ERRORED] = True


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Exit 2 when a check errored, as ``raychaos run`` does (1 stays 1: a check failed)."""
    if session.config.stash.get(_ERRORED, False) and exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = pytest.ExitCode.INTERRUPTED  # 2
