"""The raychaos Chaos Toolkit control: what makes ``chaos run experiments/X.yaml`` work.

Declared in every experiment (``controls: [{name: raychaos, provider: {type: python, module:
raychaos.control}}]``). Under ``chaos run`` it sets the run up before the experiment (target,
results folder, monitor, loads, sentinel) and judges it after (rollback of anything left, SLOs,
summary). Under ``raychaos run`` the CLI has already done the setup, and the control stands back.
"""

from __future__ import annotations

from typing import Any

from raychaos import runtime

__all__ = ["before_experiment_control", "after_experiment_control"]

_owned: Any = None  # the Session this control started (chaos run), else None


def before_experiment_control(context: dict[str, Any], experiment: dict[str, Any] | None = None,
                              **_kwargs: Any) -> None:
    global _owned
    if runtime._current is not None:
        return  # raychaos run owns this run
    from chaoslib.exceptions import InterruptExecution

    from raychaos.errors import RaychaosError
    from raychaos.experiment import load_experiment
    from raychaos.session import Session

    source = (experiment or context or {}).get("_raychaos_path") or _guess_path(context)
    try:
        exp = load_experiment(source)
        _owned = Session(exp, progress=print)
        _owned.start()
    except RaychaosError as exc:
        if _owned is not None:
            _owned.finish(None, "errored", exc)
            _owned = None
        raise InterruptExecution(str(exc)) from exc


def after_experiment_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                             **_kwargs: Any) -> None:
    global _owned
    if _owned is None:
        return
    session, _owned = _owned, None
    summary = session.finish(state, (state or {}).get("status") or "completed")
    print(f"raychaos: verdict {summary['verdict']} -> {session.run_dir}")


def _guess_path(context: dict[str, Any]) -> str:
    """``chaos run`` does not tell a control the file's path: find it on the command line."""
    import sys

    for arg in reversed(sys.argv):
        if arg.endswith((".yaml", ".yml", ".json")):
            return arg
    raise FileNotFoundError("cannot tell which experiment file chaos is running")
