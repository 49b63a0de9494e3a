"""Drain, registry-throttle and network faults of the local target (filled in by issue 4)."""

from __future__ import annotations

from typing import Any

from raychaos.errors import RollbackFailed

__all__ = ["LocalFaultsMixin"]


class LocalFaultsMixin:
    """Fault mechanics beyond the head kill; ``undo_local_fault`` reverts their records."""

    def undo_local_fault(self, record: dict[str, Any]) -> dict[str, Any]:
        kind = (record.get("undo") or {}).get("kind")
        raise RollbackFailed(f"local target cannot undo {kind!r} (record {record.get('id')})")
