"""Which GCS process answered: the incarnation count a :class:`~raychaos.targets.gcs_probe.GcsProbe`
keeps across head restarts, fed the probe's answers and failures (no gRPC here).

A new GCS process shows as

- a refusal (UNAVAILABLE) since the last answer: the process went away;
- a new cluster ID, after a failed sample — unless this outage's new GCS was already counted:
  on a busy box the first answer after a refusal (counted) may come without the ID and a later
  one brings it, after more missed deadlines maybe (the same new GCS, not a second restart:
  CI, incarnation 3 after one restart);
- when the outage only ever looked like missed deadlines (a head pod deleted behind a
  port-forward: the stream hangs until gRPC's keepalive gives up, and GCS FT keeps the cluster
  ID), an ALIVE head node never seen before, after a failed sample: the replacement head's
  raylet registered with the new GCS. Not when a new incarnation was already counted since the
  last new head: a head restarted in place is refused (counted), answers, may miss deadlines
  while it restores, and its raylet registers a few seconds later — with that same GCS.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

__all__ = ["Incarnations"]


class _Node(Protocol):  # a GcsNode, read only
    @property
    def node_id(self) -> str: ...
    @property
    def is_head(self) -> bool: ...
    @property
    def state(self) -> str: ...


class Incarnations:
    """The count (``number``, 0 before the first answer), when the current one first answered
    (``since``), its cluster ID, and the ``floor`` of its reports: a report the new GCS holds
    was sent after the old one went away — after the last failed sample (None: the first
    answer, nothing known before it)."""

    def __init__(self) -> None:
        self.number = 0
        self.since: float | None = None
        self.cluster_id: str | None = None
        self.floor: float | None = None
        self.last_failed_at: float | None = None
        self._last_up_at: float | None = None
        self._gone_since_up = False  # an UNAVAILABLE since the last answer: the process went
        # every head node seen; a new incarnation counted since a head first showed
        self._heads_seen: set[str] = set()
        self._new_since_new_head = False
        # the current incarnation's cluster ID has been read (False: it was counted from an
        # answer that came without the ID; the next ID read is that incarnation's)
        self._cid_known = False

    def failed(self, at: float, refused: bool) -> None:
        """A sample at ``at`` got no node table; ``refused``: UNAVAILABLE."""
        if refused:
            self._gone_since_up = True
        self.last_failed_at = at

    def answered(self, at: float, nodes: Iterable[_Node], cluster_id: str | None) -> bool:
        """A sample at ``at`` got the node table (and ``cluster_id`` when it was asked and
        read); whether this answer is a new GCS process."""
        heads = {n.node_id for n in nodes if n.is_head and n.state == "ALIVE"}
        appeared = bool(self._heads_seen) and bool(heads - self._heads_seen)
        failed_since_new = self.last_failed_at is not None and (
            self.since is None or self.last_failed_at > self.since)
        new_head = appeared and failed_since_new and not self._new_since_new_head
        self._heads_seen |= heads
        restarted = self._last_up_at is None or self._gone_since_up or new_head \
            or (cluster_id is not None and self.cluster_id is not None
                and cluster_id != self.cluster_id and failed_since_new and self._cid_known)
        if appeared or self._last_up_at is None:
            self._new_since_new_head = False
        elif restarted:
            self._new_since_new_head = True
        if restarted:
            self.number += 1
            self.since = at
            self.floor = self.last_failed_at if self._last_up_at is not None else None
            self._cid_known = cluster_id is not None
        elif cluster_id is not None:
            self._cid_known = True
        if cluster_id is not None:
            self.cluster_id = cluster_id
        self._gone_since_up = False
        self._last_up_at = at
        return restarted
