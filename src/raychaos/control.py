"""The raychaos Chaos Toolkit control: what drives every run, under ``chaos run`` as under
``raychaos run`` and the pytest plugin.

Declared in every experiment (``controls: [{name: raychaos, provider: {type: python, module:
raychaos.control}}]``). Before the experiment it starts a
:class:`~raychaos.run.session.Session` — the one handed over with
:func:`raychaos.run.session.hand_over` (``raychaos run``) or one made from the experiment
file (``chaos run``); it reports each phase and activity to it; after the experiment it finishes it
(rollback, verdict, results) and marks Chaos Toolkit's journal with the verdict, so ``chaos run``
exits non-zero whenever the verdict is not a pass. ``cleanup_control`` finishes a session that
Chaos Toolkit left without calling ``after_experiment_control`` (an exception out of its
rollbacks), so a fault is never left applied.
"""

from __future__ import annotations

import sys
from typing import Any

from raychaos.errors import ConfigError, RaychaosError
from raychaos.run.session import Session, take_handed_over

__all__ = ["after_activity_control", "after_experiment_control", "before_activity_control",
           "before_experiment_control", "before_hypothesis_control", "before_method_control",
           "before_rollback_control", "cleanup_control"]

_session: Session | None = None  # the session of the experiment in progress


def before_experiment_control(context: dict[str, Any], experiment: dict[str, Any] | None = None,
                              **_kwargs: Any) -> None:
    global _session
    from chaoslib.exceptions import InterruptExecution

    session = take_handed_over()
    if session is None:  # chaos run: the experiment file is on its command line
        from raychaos.run.plan import load

        try:
            session = Session(load(_guess_path(experiment or context)))
        except ConfigError as exc:
            for problem in exc.problems:
                print(f"error: {problem}", file=sys.stderr)
            print("nothing was started.", file=sys.stderr)
            raise InterruptExecution(str(exc)) from exc
    _session = session
    try:
        session.start()
    except RaychaosError as exc:
        session.failed_to_start(exc)
        raise InterruptExecution(str(exc)) from exc
    except Exception as exc:  # a harness bug: Chaos Toolkit would log it and run the method
        # anyway, without loads or a sentinel — never let a run go on from a broken start
        session.failed_to_start(exc)
        raise InterruptExecution(f"raychaos could not start the run ({type(exc).__name__}: "
                                 f"{exc})") from exc


def before_hypothesis_control(context: Any, **_kwargs: Any) -> None:
    if _session is not None:
        _session.phase("hypothesis")


def before_method_control(context: Any, **_kwargs: Any) -> None:
    if _session is not None:
        _session.phase("method")


def before_rollback_control(context: Any, **_kwargs: Any) -> None:
    if _session is not None:
        _session.phase("rollbacks")


def before_activity_control(context: dict[str, Any], **_kwargs: Any) -> None:
    if _session is not None:
        _session.activity_started(context)


def after_activity_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                           **_kwargs: Any) -> None:
    if _session is not None:
        _session.activity_ended(context, state)


def after_experiment_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                             **_kwargs: Any) -> None:
    global _session
    session, _session = _session, None
    if session is not None:
        session.finish(state)


def cleanup_control() -> None:
    """Chaos Toolkit calls this in a ``finally``: finish whatever was not finished."""
    global _session
    session, _session = _session, None
    if session is not None and session.summary is None:
        session.finish(None)


def current_session() -> Session | None:
    return _session


def _guess_path(experiment: dict[str, Any]) -> str:
    """``chaos run`` does not tell a control the file's path: find it on the command line."""
    if experiment.get("_raychaos_path"):
        return str(experiment["_raychaos_path"])
    for arg in reversed(sys.argv):
        if arg.endswith((".yaml", ".yml", ".json")):
            return arg
    raise ConfigError("cannot tell which experiment file chaos is running")
