"""Ramp probe: wait for a ramped load to pass its knee, and report every step.

Put it in the method of an experiment whose load has a ``ramp:`` block; it waits on the
timeline until a step breaks (or the ramp has run all its steps) and returns the steps —
offered, achieved, p95, failures, the head's CPU and GCS memory — and the knee
(:mod:`raychaos.observe.ramp`). The ``ramp_knee`` SLO metric reads it.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.errors import ProbeFailed
from raychaos.observe.ramp import knee, ramp_bounds, ramp_steps
from raychaos.results.store import read_timeline

__all__ = ["ramp_knee"]


def ramp_knee(load: str | None = None,
              timeout_s: Annotated[float, Range(1, 86400)] = 900.0) -> dict[str, Any]:
    """The knee of the ramped load ``load`` (default: the experiment's ramped load).

    :param load: the name of a load with a ``ramp:`` block.
    :param timeout_s: how long to wait for the ramp to break or end.
    :returns: evidence: ``knee`` (the last offered rate that held), ``broke_at``, ``reason``,
        the bounds and one row per step.
    """
    run = current()
    ramped = [spec for spec in run.settings.loads if spec.ramp is not None
              and (load is None or spec.name == load)]
    if not ramped:
        raise ProbeFailed(f"ramp_knee: no load {'named ' + repr(load) + ' ' if load else ''}"
                          "has a ramp: block in this experiment")
    spec = ramped[0]
    assert spec.ramp is not None
    bounds = ramp_bounds(spec.ramp, run.slo_profile)
    deadline = time.monotonic() + timeout_s
    while True:
        steps = ramp_steps(read_timeline(run.timeline.path), spec.name)
        # a step is judged once it is over (the load moved on) or has run its length
        complete = [s for i, s in enumerate(steps)
                    if i < len(steps) - 1 or s["seconds"] >= spec.ramp.step_s - 2]
        result = knee(complete, bounds)
        finished = len(complete) >= spec.ramp.steps
        if result["broke_at"] is not None or finished or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if result["broke_at"] is not None:
        # the table ends at the step that broke: the load may already have moved on to the
        # next step when the probe saw this one end, and that step was never judged
        broke = next(i for i, s in enumerate(complete) if s["offered"] == result["broke_at"])
        steps = steps[:broke + 1]
    evidence = {"load": spec.name, **result, "ramp": {
        "start": spec.ramp.start, "step": spec.ramp.step, "step_s": spec.ramp.step_s,
        "steps": spec.ramp.steps, "warmup_s": spec.ramp.warmup_s}, "table": steps}
    run.record_probe("ramp_knee", "pass" if steps else "unknown",
                     evidence if steps else {**evidence, "unobserved": "ramp steps"})
    return evidence
