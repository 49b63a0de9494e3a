"""Drain, registry-throttle and network faults of the local target, and their one undo entry.

The mechanics live in one module per family (:mod:`local_drain`, :mod:`local_registry_fault`,
:mod:`local_netfaults`); this mixin composes them for :class:`LocalTarget` and dispatches an undo
on ``record["undo"]["kind"]``. Every undo is idempotent: running it twice, or after a crash from
another process (``raychaos rollback``), finds what is still applied and removes only that.
"""

from __future__ import annotations

from typing import Any

from raychaos.errors import RollbackFailed
from raychaos.targets.local_drain import DrainMixin
from raychaos.targets.local_netfaults import NetFaultsMixin
from raychaos.targets.local_registry_fault import RegistryFaultMixin

__all__ = ["LocalFaultsMixin"]


class LocalFaultsMixin(DrainMixin, RegistryFaultMixin, NetFaultsMixin):
    """Fault mechanics beyond the head kill; ``undo_local_fault`` reverts their records."""

    def undo_local_fault(self, record: dict[str, Any]) -> dict[str, Any]:
        undo = record.get("undo") or {}
        kind = undo.get("kind")
        if not kind:  # the fault failed before it changed anything
            return {"undone": True, "note": "nothing was changed"}
        if kind == "drain":
            return self.undo_drain(undo)
        if kind == "registry_throttle":
            return self.undo_registry_throttle(undo)
        if kind == "netfault":
            return self.undo_netfault(undo)
        raise RollbackFailed(f"local target cannot undo {kind!r} (record {record.get('id')})")
