"""What a run adds for resource failure modes: the preflight review and the GPU watch.

- :func:`preflight_review`: before anything starts, the resilience review of the target's
  cluster (:mod:`raychaos.review`, on what :meth:`Target.review_objects` returns: the live
  RayCluster with its PDBs and pods on Kubernetes, the embedded cluster's own description
  locally). It never stops a run — a head kill without GCS fault tolerance is a legitimate
  negative control — but its findings are printed and go into the summary, so a verdict is
  read next to what the manifest already said.
- :func:`start_watch`: the resource watch (:mod:`raychaos.observe.watch`: GPU stranding,
  object-store placement), started when the experiment asks for it (``monitor.gpu``,
  ``monitor.storage``) or an SLO needs one of its figures.
"""

from __future__ import annotations

from typing import Any

from raychaos.config.experiment import Experiment
from raychaos.config.metrics import METRICS
from raychaos.context import Run
from raychaos.observe.watch import ResourceWatch, resource_watch
from raychaos.review import review
from raychaos.run.progress import Say
from raychaos.targets.base import Target

__all__ = ["preflight_review", "start_watch"]


def preflight_review(target: Target, say: Say) -> dict[str, Any] | None:
    """The review of ``target``'s cluster as a dict for the summary (None if none could be
    made: the target could not describe itself); one progress line."""
    try:
        objects = target.review_objects()
    except Exception as exc:  # noqa: BLE001 - a review that cannot be made is noted, not fatal
        say(f"review: could not read the cluster's objects ({exc})")
        return {"error": str(exc)}
    if not objects:
        return None
    result = review(objects, live=True)
    say(result.line(), essential=bool(result.errors))
    return result.to_dict()


def start_watch(experiment: Experiment, run: Run) -> ResourceWatch | None:
    """A started resource watch when the experiment wants its figures, else None."""
    profile = experiment.slo_profile
    producers = {METRICS[s.metric].producer for s in (profile.slos if profile else [])}
    return resource_watch(run.target, run.timeline, run.clock, lambda: dict(run.jobs),
                          gpu=run.settings.monitor.gpu or "gpu" in producers,
                          storage=run.settings.monitor.storage or "storage" in producers)
