"""Kill the head: the whole head pod (GCS, dashboard, head raylet) or only ``gcs_server``.

``mode="gcs"`` is what KubeRay's own GCS fault-tolerance e2e test does (``pkill gcs_server``);
``ray start --block`` in the head notices its dead child and exits, and the head "container" is
restarted by the supervisor (locally) or by Kubernetes. ``mode="head"`` (alias ``pod``) kills the
whole head node at once. Either way the evidence names the old and new head, so a verdict never
rests on a kill that did not happen. A head that is not back within ``wait_s`` is
:class:`~raychaos.errors.NotRecovered`: the kill landed and the system did not recover, a failure
of the run (exit 1), not an error of the harness.

The workers alive before the kill are what re-registration is judged against. They come from
the GCS just before the kill, or — when that call does not answer in time on a loaded box —
from the monitor's last sample that saw the GCS; when neither knows, the list is ``None`` and
re-registration is reported as not observed, never as vacuously passed.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from raychaos.config.arguments import Range, fault_action
from raychaos.context import current
from raychaos.errors import NotRecovered, RaychaosError
from raychaos.results.store import Ev, read_timeline

__all__ = ["kill_head"]


@fault_action()
def kill_head(mode: Literal["head", "pod", "gcs"] = "head",
              wait_s: Annotated[float, Range(1, 3600)] = 180.0) -> dict[str, Any]:
    """Kill the head (``head``/``pod``) or only its ``gcs_server`` (``gcs``) with SIGKILL.

    :param mode: ``head``/``pod`` kills the whole head node; ``gcs`` only the GCS process.
    :param wait_s: how long to wait for the new head incarnation before failing the fault.
    :returns: evidence: old/new head identity, kill time, seconds until the head was back.
    """
    run = current()
    workers_before = _workers_before(run)
    with run.fault("kill_head", {"mode": mode, "wait_s": wait_s}, lasting=False) as record:
        evidence = run.target.kill_head(mode, record)
        evidence["workers_before"] = workers_before
        t_kill = run.clock.t_of_wall(evidence["killed_at"])
        run.timeline.write("event", t=t_kill, event=Ev.HEAD_KILLED, name=mode,
                           detail={"id": record["id"], "workers_before": workers_before})
        run.extras.setdefault("kills", []).append({"t": t_kill, **evidence})
        run.ledger.update(record, evidence=evidence)
        back = run.target.wait_head_back(evidence["old"], timeout=wait_s)
        evidence["head_back"] = back
        if not back.get("back"):
            run.ledger.update(record, evidence=evidence)
            raise NotRecovered(f"kill_head: the head did not come back within {wait_s:g} s "
                               f"(old {evidence['old']}, now {back.get('new')})")
        evidence["head_back_s"] = round(time.time() - evidence["killed_at"], 3)
        run.ledger.update(record, evidence=evidence)
    return evidence


def _workers_before(run: Any) -> list[str] | None:
    """The worker node IDs (12 hex digits) ALIVE just before the kill; None when unknown."""
    try:
        return [n.node_id[:12] for n in run.target.nodes(timeout=2.0)
                if n.state == "ALIVE" and not n.is_head]
    except RaychaosError:
        pass
    for r in reversed(read_timeline(run.timeline.path)):  # the monitor's last good look
        if r.get("kind") == "sample" and r.get("gcs_up") and isinstance(r.get("alive_ids"),
                                                                         list):
            return [str(x) for x in r["alive_ids"]]
    return None
