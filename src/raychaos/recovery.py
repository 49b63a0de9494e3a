"""Roll back what a crashed or interrupted run left applied, from its ledger alone.

The ledger names the target (kind, cluster name, state folder); that is enough to reconnect and
call each outstanding record's undo. Idempotent: running it twice undoes nothing the second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raychaos.errors import ConfigError
from raychaos.faults.rollback import undo_ledger
from raychaos.results import Ledger
from raychaos.targets.base import Target

__all__ = ["rollback_results_dir", "target_from_description"]


def target_from_description(desc: dict[str, Any]) -> Target:
    kind = desc.get("kind")
    if kind == "local":
        from raychaos.config import LocalClusterSpec
        from raychaos.targets.local import LocalTarget

        state_dir = Path(desc["state_dir"])
        return LocalTarget(LocalClusterSpec(name=desc["name"]), state_root=state_dir.parent)
    if kind == "kubernetes":
        from raychaos.config import KubernetesSpec
        from raychaos.targets.kubernetes import KubernetesTarget

        fields = {k: desc[k] for k in ("cluster", "namespace", "context") if desc.get(k)}
        target = KubernetesTarget(KubernetesSpec(**fields))
        target.connect()
        return target
    raise ConfigError(f"ledger names an unknown target kind {kind!r}")


def rollback_results_dir(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "ledger.json"
    if not path.exists():
        raise ConfigError(f"{run_dir}: no ledger.json here (is this a raychaos results folder?)")
    ledger = Ledger.open_existing(path)
    if not ledger.outstanding():
        return {"undone": []}
    target = target_from_description(ledger.data["target"])
    return undo_ledger(ledger, target)
